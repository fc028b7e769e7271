//! The IPMI driver against the simulated IPMI BMC: both cipher suites, privileges, failures,
//! faults, reply matching under injected garbage and stale replies, and session hygiene.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::ipmi::wire::crypto::CipherSuite;
use baremend_drivers::ipmi::{IpmiOptions, PrivilegeLevel};
use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, Error, PowerDriver, PowerOffMode, PowerState,
    TlsOptions, power_off_confirmed,
};
use baremend_sim::clock::{Clock, SystemClock};
use baremend_sim::host::{Faults, Power, SimHost};
use baremend_sim::ipmi::{IpmiSim, IpmiSimConfig, IpmiUser, privilege};
use tokio::net::UdpSocket;

mod common;

use common::{eventually, quick_wait, wait_for};

fn users() -> Vec<IpmiUser> {
    let user = |name: &str, password: &str, max_privilege| IpmiUser {
        username: name.into(),
        password: password.into(),
        max_privilege,
    };
    vec![
        user("admin", "password", privilege::ADMINISTRATOR),
        user("oper", "operpass", privilege::OPERATOR),
        user("viewer", "viewpass", privilege::USER),
    ]
}

async fn sim_with(config: IpmiSimConfig, delay_ms: u64) -> IpmiSim {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let host = Arc::new(SimHost::new(
        "1",
        Power::On,
        Duration::from_millis(delay_ms),
        clock.clone(),
    ));
    IpmiSim::start(
        IpmiSimConfig {
            users: users(),
            ..config
        },
        host,
        clock,
    )
    .await
    .expect("the IPMI simulator starts")
}

async fn sim() -> IpmiSim {
    sim_with(IpmiSimConfig::default(), 200).await
}

fn options(suites: &[CipherSuite]) -> IpmiOptions {
    IpmiOptions {
        cipher_suites: suites.to_vec(),
        reply_timeout: Duration::from_millis(300),
        retries: 2,
        retry_backoff: Duration::from_millis(50),
        ..IpmiOptions::default()
    }
}

fn driver_for(
    address: &str,
    user: &str,
    password: &str,
    ipmi: IpmiOptions,
) -> Arc<dyn PowerDriver> {
    let mut config = DriverConfig::new(
        BmcAddress::parse(address).unwrap(),
        Credentials::new(user, password),
        TlsOptions::default(),
    );
    config.ipmi = ipmi;
    Connector::new().connect(config).unwrap()
}

fn driver(sim: &IpmiSim, suites: &[CipherSuite]) -> Arc<dyn PowerDriver> {
    driver_for(&sim.bmc_address(), "admin", "password", options(suites))
}

#[tokio::test]
async fn status_off_and_on_work_with_cipher_suite_3_and_17() {
    for suite in CipherSuite::ALL {
        let sim = sim().await;
        let driver = driver(&sim, &[suite]);
        assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
        assert!(
            driver
                .probe()
                .await
                .unwrap()
                .protocol
                .contains(&format!("cipher suite {}", suite.id()))
        );
        driver.power_off(PowerOffMode::Forced).await.unwrap();
        wait_for(driver.as_ref(), PowerState::Off, 5000)
            .await
            .unwrap();
        assert_eq!(sim.host().power(), Power::Off);
        driver.power_on().await.unwrap();
        wait_for(driver.as_ref(), PowerState::On, 5000)
            .await
            .unwrap();
        // Already on: no second Chassis Control.
        driver.power_on().await.unwrap();
        let stats = sim.stats();
        assert_eq!(stats.chassis_controls, [0x00, 0x01], "{suite:?}");
        assert_eq!(
            stats.open_sessions, 0,
            "{suite:?}: every session was closed"
        );
        assert_eq!(stats.sessions_closed, stats.sessions_activated, "{suite:?}");
    }
}

#[tokio::test]
async fn suite_17_is_preferred_when_offered_and_3_used_when_it_is_not() {
    let both = sim().await;
    let probe = driver(&both, &[CipherSuite::Suite17, CipherSuite::Suite3])
        .probe()
        .await
        .unwrap();
    assert!(
        probe.protocol.contains("cipher suite 17"),
        "{}",
        probe.protocol
    );
    let only3 = sim_with(
        IpmiSimConfig {
            suites: vec![CipherSuite::Suite3],
            ..IpmiSimConfig::default()
        },
        0,
    )
    .await;
    let probe = driver(&only3, &[CipherSuite::Suite17, CipherSuite::Suite3])
        .probe()
        .await
        .unwrap();
    assert!(
        probe.protocol.contains("cipher suite 3"),
        "{}",
        probe.protocol
    );
    let error = driver(&only3, &[CipherSuite::Suite17])
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Unsupported { .. }), "{error}");
    assert!(error.to_string().contains("[3]"), "{error}");
}

#[tokio::test]
async fn graceful_off_ignored_by_a_hung_os_escalates_to_a_hard_off() {
    let sim = sim().await;
    sim.host().set_faults(Faults {
        ignore_graceful_shutdown: true,
        ..Faults::default()
    });
    let driver = driver(&sim, &CipherSuite::ALL);
    let started = Instant::now();
    let outcome = power_off_confirmed(
        driver.as_ref(),
        Some(Duration::from_millis(800)),
        &quick_wait(5000),
        |_| {},
    )
    .await
    .unwrap();
    assert!(outcome.escalated);
    assert!(started.elapsed() >= Duration::from_millis(800));
    assert_eq!(sim.stats().chassis_controls, [0x05, 0x00]);
    assert_eq!(sim.host().power(), Power::Off);

    let healthy = self::sim().await;
    let driver = self::driver(&healthy, &CipherSuite::ALL);
    let outcome = power_off_confirmed(
        driver.as_ref(),
        Some(Duration::from_secs(3)),
        &quick_wait(5000),
        |_| {},
    )
    .await
    .unwrap();
    assert!(!outcome.escalated);
    assert_eq!(healthy.stats().chassis_controls, [0x05]);
}

#[tokio::test]
async fn a_wrong_password_fails_fast_as_a_permanent_authentication_error() {
    let sim = sim().await;
    // A long reply timeout: a driver that waited for an answer (or retried on a timeout)
    // would take one at least, however idle or busy the machine.
    let patient = IpmiOptions {
        reply_timeout: Duration::from_secs(5),
        ..options(&CipherSuite::ALL)
    };
    let driver = driver_for(
        &sim.bmc_address(),
        "admin",
        "not-the-password",
        patient.clone(),
    );
    let started = Instant::now();
    let error = driver.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("password"), "{error}");
    assert!(!error.to_string().contains("not-the-password"), "{error}");
    assert!(
        started.elapsed() < patient.reply_timeout,
        "{:?}",
        started.elapsed()
    );
    // The abort reaches the BMC a moment after the driver returned, and frees the session at
    // once (not at the BMC's 60 s idle timeout).
    let stats = eventually(
        "the aborted session freed",
        Duration::from_secs(1),
        async || {
            let stats = sim.stats();
            if stats.open_sessions == 0 && stats.authentication_failures >= 1 {
                Ok(stats)
            } else {
                Err(format!("{stats:?}"))
            }
        },
    )
    .await;
    assert_eq!(
        stats.authentication_failures, 1,
        "one attempt, no retry storm"
    );
    assert_eq!(
        stats.open_sessions, 0,
        "the aborted session was freed at once"
    );
}

/// What a privilege case expects of one operation: allowed (with the state a read gives),
/// or refused as an authentication error whose text has these words.
#[derive(Debug)]
enum Expect {
    Allowed(Option<PowerState>),
    Refused(&'static str),
}

#[tokio::test]
async fn an_unknown_user_and_a_too_weak_account_are_authentication_errors() {
    use Expect::{Allowed, Refused};
    let sim = sim().await;
    // (case, user, password, session privilege, a read, a forced power-off); None: not tried.
    let cases = [
        (
            "an unknown user",
            "nobody",
            "x",
            PrivilegeLevel::Operator,
            Some(Refused("unknown user")),
            None,
        ),
        (
            "a read-only account asking for operator",
            "viewer",
            "viewpass",
            PrivilegeLevel::Operator,
            None,
            Some(Refused("")),
        ),
        (
            "a read-only account at user level",
            "viewer",
            "viewpass",
            PrivilegeLevel::User,
            Some(Allowed(Some(PowerState::On))),
            Some(Refused("0xd4")),
        ),
        // Last: the power-off it starts is checked after the loop.
        (
            "an operator",
            "oper",
            "operpass",
            PrivilegeLevel::Operator,
            None,
            Some(Allowed(None)),
        ),
    ];
    for (case, user, password, privilege, read, off) in cases {
        let driver = driver_for(
            &sim.bmc_address(),
            user,
            password,
            IpmiOptions {
                privilege,
                ..options(&CipherSuite::ALL)
            },
        );
        let mut outcomes = Vec::new();
        if let Some(expect) = read {
            outcomes.push(("read", driver.power_state().await.map(Some), expect));
        }
        if let Some(expect) = off {
            let outcome = driver.power_off(PowerOffMode::Forced).await.map(|()| None);
            outcomes.push(("power-off", outcome, expect));
        }
        for (operation, outcome, expect) in outcomes {
            match (outcome, expect) {
                (Ok(state), Allowed(want)) => assert_eq!(state, want, "{case}: {operation}"),
                (Err(error), Refused(words)) => assert!(
                    matches!(error, Error::Authentication { .. })
                        && error.to_string().contains(words),
                    "{case}: {operation}: {error}"
                ),
                (outcome, expect) => {
                    panic!("{case}: {operation}: {outcome:?}, expected {expect:?}")
                }
            }
        }
    }
    assert_eq!(sim.host().power(), Power::On, "still powering off");
    assert_eq!(sim.stats().open_sessions, 0);
}

#[tokio::test]
async fn a_silent_bmc_times_out_within_the_retry_budget_and_leaves_no_session() {
    let sim = sim().await;
    sim.host().set_faults(Faults {
        drop_connections: true,
        ..Faults::default()
    });
    let driver = driver(&sim, &CipherSuite::ALL);
    // The driver's schedule: every attempt waits its reply timeout, with a doubling backoff
    // between.
    let options = options(&CipherSuite::ALL);
    let attempts = options.retries + 1;
    let backoffs = options.retry_backoff * (2u32.pow(options.retries) - 1);
    let schedule = options.reply_timeout * attempts + backoffs;
    let started = Instant::now();
    let error = tokio::time::timeout(schedule * 10, driver.power_state())
        .await
        .expect("the driver gives up by itself, well within ten of its schedules")
        .unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert!(error.is_retryable());
    // Not before every attempt had its reply timeout: a busy machine only adds to it.
    assert!(
        started.elapsed() >= options.reply_timeout * attempts,
        "gave up after {:?}",
        started.elapsed()
    );
    sim.host().set_faults(Faults::default());
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    assert_eq!(sim.stats().open_sessions, 0);
}

#[tokio::test]
async fn busy_completion_codes_are_retried_with_a_new_session() {
    let sim = sim().await;
    sim.host().set_faults(Faults {
        error_status: Some(503),
        error_count: Some(2),
        ..Faults::default()
    });
    let driver = driver(&sim, &CipherSuite::ALL);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    // First session: Set Session Privilege Level answered busy, and its Close Session too (the
    // close is repeated); the second session works.
    let stats = sim.stats();
    assert_eq!(stats.sessions_activated, 2);
    assert_eq!(stats.sessions_closed, 2);
    assert_eq!(stats.open_sessions, 0);
    sim.host().set_faults(Faults {
        error_status: Some(500),
        ..Faults::default()
    });
    let error = driver.power_state().await.unwrap_err();
    assert!(
        matches!(error, Error::Completion { code: 0xFF, .. }),
        "{error}"
    );
    // 0xFF (unspecified) is worth another try; the IPMI layer says so when it makes the error.
    assert!(error.is_retryable(), "{error}");
}

#[tokio::test]
async fn two_hundred_operations_leave_no_session_open() {
    let sim = sim_with(
        IpmiSimConfig {
            max_sessions: 4,
            ..IpmiSimConfig::default()
        },
        0,
    )
    .await;
    let driver = driver(&sim, &CipherSuite::ALL);
    for n in 0..200 {
        let state = driver
            .power_state()
            .await
            .unwrap_or_else(|e| panic!("operation {n}: {e}"));
        assert_eq!(state, PowerState::On);
    }
    let stats = sim.stats();
    assert_eq!(stats.open_sessions, 0);
    assert_eq!(stats.sessions_activated, 200);
    assert_eq!(stats.sessions_closed, 200);
    assert_eq!(stats.max_open_sessions, 1);
    assert_eq!(stats.refused_for_capacity, 0);
}

#[tokio::test]
async fn a_cancelled_operation_still_closes_its_session() {
    let sim = sim().await;
    let driver = driver(&sim, &CipherSuite::ALL);
    driver.power_state().await.unwrap();
    // Slow replies: the caller gives up while the session is open.
    sim.host().set_faults(Faults {
        latency_ms: 150,
        ..Faults::default()
    });
    let cancelled = tokio::time::timeout(Duration::from_millis(700), driver.power_state()).await;
    assert!(cancelled.is_err(), "the operation should still be running");
    // Closed in the background (well before the BMC's 60 s idle timeout).
    eventually(
        "the cancelled session closed",
        Duration::from_secs(2),
        async || {
            let stats = sim.stats();
            if stats.sessions_activated >= 2 && stats.open_sessions == 0 {
                Ok(())
            } else {
                Err(format!("{stats:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn the_session_limit_and_the_idle_timeout_of_the_bmc_hold() {
    let sim = sim_with(
        IpmiSimConfig {
            max_sessions: 1,
            idle_timeout: Duration::from_millis(300),
            ..IpmiSimConfig::default()
        },
        0,
    )
    .await;
    // A half-open session from a client that went away takes the only slot.
    let stray = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    stray.connect(sim.local_addr()).await.unwrap();
    let open = baremend_drivers::ipmi::wire::rakp::OpenSessionRequest {
        message_tag: 1,
        max_privilege: 4,
        console_session_id: 42,
        algorithms: CipherSuite::Suite3.algorithms(),
    };
    let datagram = baremend_drivers::ipmi::wire::encode_v20_plain(0x10, &open.encode());
    stray.send(&datagram).await.unwrap();
    let mut buffer = [0u8; 256];
    stray.recv(&mut buffer).await.unwrap();
    let driver = driver_for(
        &sim.bmc_address(),
        "admin",
        "password",
        IpmiOptions {
            retries: 0,
            ..options(&CipherSuite::ALL)
        },
    );
    let error = driver.power_state().await.unwrap_err();
    assert!(
        matches!(error, Error::SessionRejected { status: 0x01, .. }),
        "{error}"
    );
    assert!(error.is_retryable());
    eventually(
        "the idle session expired",
        Duration::from_secs(2),
        async || sim.stats().sessions_expired >= 1,
    )
    .await;
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    assert_eq!(sim.stats().sessions_expired, 1);
}

/// A UDP relay between the driver and the BMC that, before each reply, sends the driver a
/// garbage datagram, a copy of the previous reply (stale, from another session or request)
/// and, for session packets, a copy with one flipped bit.
async fn hostile_relay(bmc: SocketAddr) -> SocketAddr {
    let front = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let address = front.local_addr().unwrap();
    let back = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    back.connect(bmc).await.unwrap();
    tokio::spawn(async move {
        let mut client = None;
        let mut previous: Option<Vec<u8>> = None;
        let mut request = [0u8; 2048];
        let mut answer = [0u8; 2048];
        loop {
            tokio::select! {
                Ok((n, from)) = front.recv_from(&mut request) => {
                    client = Some(from);
                    let _ = back.send(&request[..n]).await;
                }
                Ok(n) = back.recv(&mut answer) => {
                    let Some(client) = client else { continue };
                    let reply = answer[..n].to_vec();
                    let _ = front.send_to(b"\x06\x00\xff\x07garbage", client).await;
                    if let Some(old) = &previous {
                        let _ = front.send_to(old, client).await;
                    }
                    // Only session packets carry an integrity code; set-up messages cannot be
                    // told from a forgery by anyone, so only those are forged here.
                    if reply.get(5).is_some_and(|t| t & 0x40 != 0) {
                        let mut flipped = reply.clone();
                        let middle = flipped.len() / 2;
                        flipped[middle] ^= 0x01;
                        let _ = front.send_to(&flipped, client).await;
                    }
                    let _ = front.send_to(&reply, client).await;
                    previous = Some(reply);
                }
            }
        }
    });
    address
}

#[tokio::test]
async fn garbage_stale_and_forged_replies_are_dropped_and_the_real_ones_matched() {
    for suite in CipherSuite::ALL {
        let sim = sim().await;
        let relay = hostile_relay(sim.local_addr()).await;
        let driver = driver_for(
            &format!("ipmi://{relay}"),
            "admin",
            "password",
            options(&[suite]),
        );
        for _ in 0..5 {
            assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
        }
        driver.power_off(PowerOffMode::Forced).await.unwrap();
        wait_for(driver.as_ref(), PowerState::Off, 5000)
            .await
            .unwrap();
        let stats = sim.stats();
        assert_eq!(stats.chassis_controls, [0x00], "{suite:?}");
        assert_eq!(stats.open_sessions, 0, "{suite:?}");
        // No retry was needed: every operation used exactly one session.
        assert_eq!(stats.sessions_activated, stats.sessions_closed);
    }
}
