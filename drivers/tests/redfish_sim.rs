//! The Redfish driver against the Redfish simulator: every simulator fault, and TLS set up the
//! way an operator would (a private CA).

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, Error, PowerDriver, PowerOffMode, PowerState,
    RetryPolicy, TlsOptions, retry, wait_for_power_state,
};
use baremend_sim::host::{Faults, Power};
use baremend_sim::redfish::{Account, AuthSettings, RedfishSim, RedfishSimConfig, Role, TlsMode};
use baremend_sim::tls::{LOCAL_NAMES, TestCa};

mod common;

use common::{quick_wait, wait_for};

async fn sim_with(config: RedfishSimConfig) -> RedfishSim {
    RedfishSim::start(RedfishSimConfig {
        power_delay: Duration::from_millis(200),
        ..config
    })
    .await
    .expect("the simulator starts")
}

async fn sim() -> RedfishSim {
    sim_with(RedfishSimConfig::default()).await
}

fn config_for(address: &str, username: &str, password: &str, tls: TlsOptions) -> DriverConfig {
    let mut config = DriverConfig::new(
        BmcAddress::parse(address).unwrap(),
        Credentials::new(username, password),
        tls,
    );
    config.request_timeout = Duration::from_secs(2);
    config.task_timeout = Duration::from_secs(5);
    config
}

fn driver(sim: &RedfishSim) -> Arc<dyn PowerDriver> {
    let config = config_for(
        &sim.bmc_address("1"),
        "admin",
        "password",
        TlsOptions::default(),
    );
    Connector::new().connect(config).unwrap()
}

fn set_faults(sim: &RedfishSim, faults: Faults) {
    sim.host("1").unwrap().set_faults(faults);
}

fn resets(sim: &RedfishSim) -> Vec<String> {
    sim.service()
        .stats()
        .resets
        .into_iter()
        .map(|r| r.reset_type)
        .collect()
}

#[tokio::test]
async fn power_off_and_on_are_confirmed_only_by_read_back() {
    let sim = sim().await;
    let driver = driver(&sim);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    assert_eq!(driver.power_state().await.unwrap(), PowerState::PoweringOff);
    wait_for(driver.as_ref(), PowerState::Off, 5000)
        .await
        .unwrap();
    assert_eq!(sim.host("1").unwrap().power(), Power::Off);
    driver.power_on().await.unwrap();
    wait_for(driver.as_ref(), PowerState::On, 5000)
        .await
        .unwrap();
    // Already on: nothing is sent.
    driver.power_on().await.unwrap();
    assert_eq!(resets(&sim), ["ForceOff", "On"]);
    driver.close().await.unwrap();
    assert_eq!(sim.service().stats().open_sessions, 0);
}

#[tokio::test]
async fn graceful_off_that_a_hung_os_ignores_is_not_confirmed_and_forced_off_then_is() {
    let sim = sim().await;
    set_faults(
        &sim,
        Faults {
            ignore_graceful_shutdown: true,
            ..Faults::default()
        },
    );
    let driver = driver(&sim);
    driver.power_off(PowerOffMode::Graceful).await.unwrap();
    let error = wait_for(driver.as_ref(), PowerState::Off, 800)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::StateNotReached {
                last_seen: Some(PowerState::On),
                ..
            }
        ),
        "{error}"
    );
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    wait_for(driver.as_ref(), PowerState::Off, 5000)
        .await
        .unwrap();
    assert_eq!(resets(&sim), ["GracefulShutdown", "ForceOff"]);
}

#[tokio::test]
async fn added_latency_is_tolerated_within_the_request_timeout_and_a_timeout_beyond_it() {
    let sim = sim().await;
    set_faults(
        &sim,
        Faults {
            latency_ms: 300,
            ..Faults::default()
        },
    );
    let driver = driver(&sim);
    let started = Instant::now();
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    assert!(started.elapsed() >= Duration::from_millis(300));
    set_faults(
        &sim,
        Faults {
            latency_ms: 3000,
            ..Faults::default()
        },
    );
    let error = driver.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert!(error.is_retryable());
}

#[tokio::test]
async fn error_statuses_are_retryable_and_tolerated_while_waiting() {
    let sim = sim().await;
    let driver = driver(&sim);
    type Case = (&'static str, u16, fn(&Error) -> bool);
    let cases: [Case; 2] = [
        ("503: busy", 503, |e| matches!(e, Error::Busy { .. })),
        ("500: an HTTP error", 500, |e| {
            matches!(e, Error::Http { status: 500, .. })
        }),
    ];
    for (case, status, expected) in cases {
        set_faults(
            &sim,
            Faults {
                error_status: Some(status),
                ..Faults::default()
            },
        );
        let error = driver.power_state().await.unwrap_err();
        assert!(expected(&error) && error.is_retryable(), "{case}: {error}");
    }
    set_faults(
        &sim,
        Faults {
            error_status: Some(500),
            error_count: Some(3),
            ..Faults::default()
        },
    );
    wait_for(driver.as_ref(), PowerState::On, 5000)
        .await
        .unwrap();
}

#[tokio::test]
async fn busy_answers_carry_the_retry_after_and_retry_honours_it() {
    let sim = sim().await;
    let driver = driver(&sim);
    set_faults(
        &sim,
        Faults {
            error_status: Some(429),
            error_count: Some(1),
            retry_after_s: Some(7),
            ..Faults::default()
        },
    );
    let busy = driver.power_state().await.unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    assert_eq!(busy.retry_after(), Some(Duration::from_secs(7)));

    // Two 503s with `Retry-After: 1` on the system: a power off tried again until it goes
    // through, one second after each refusal, and sent to the host exactly once.
    set_faults(
        &sim,
        Faults {
            error_status: Some(503),
            error_count: Some(2),
            ..Faults::default()
        },
    );
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    retry(
        &RetryPolicy::default(),
        Some(deadline),
        driver.bmc(),
        "power off",
        || driver.power_off(PowerOffMode::Forced),
    )
    .await
    .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    assert_eq!(resets(&sim), ["ForceOff"]);

    // Asked to come back after the deadline: the busy answer is the outcome, at once.
    set_faults(
        &sim,
        Faults {
            error_status: Some(503),
            retry_after_s: Some(30),
            ..Faults::default()
        },
    );
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let error = retry(
        &RetryPolicy::default(),
        Some(deadline),
        driver.bmc(),
        "power on",
        || driver.power_on(),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, Error::Busy { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn dropped_connections_are_a_retryable_unreachable_error() {
    let sim = sim().await;
    let driver = driver(&sim);
    driver.power_state().await.unwrap();
    set_faults(
        &sim,
        Faults {
            drop_connections: true,
            ..Faults::default()
        },
    );
    let error = driver.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Unreachable { .. }), "{error}");
    assert!(error.is_retryable());
    set_faults(&sim, Faults::default());
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
}

#[tokio::test]
async fn a_reset_that_is_accepted_but_never_acted_on_is_never_confirmed() {
    let sim = sim().await;
    set_faults(
        &sim,
        Faults {
            stuck_power: true,
            ..Faults::default()
        },
    );
    let driver = driver(&sim);
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    let error = wait_for(driver.as_ref(), PowerState::Off, 1000)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::StateNotReached {
                last_seen: Some(PowerState::On),
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("last seen: On"), "{error}");
}

#[tokio::test]
async fn a_flapping_power_state_is_never_confirmed_off() {
    let sim = sim().await;
    set_faults(
        &sim,
        Faults {
            flapping: true,
            ..Faults::default()
        },
    );
    let driver = driver(&sim);
    let mut seen = Vec::new();
    let error = wait_for_power_state(driver.as_ref(), &PowerState::Off, &quick_wait(1000), |s| {
        seen.push(s.clone())
    })
    .await
    .unwrap_err();
    assert!(matches!(error, Error::StateNotReached { .. }), "{error}");
    assert!(
        seen.contains(&PowerState::Off) && seen.contains(&PowerState::On),
        "{seen:?}"
    );
}

#[tokio::test]
async fn resets_answered_202_are_followed_to_completion() {
    let sim = sim().await;
    set_faults(
        &sim,
        Faults {
            async_reset: true,
            ..Faults::default()
        },
    );
    let driver = driver(&sim);
    let started = Instant::now();
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    // The task completes with the transition, so the power is already off when it returns.
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(sim.host("1").unwrap().power(), Power::Off);
    wait_for(driver.as_ref(), PowerState::Off, 2000)
        .await
        .unwrap();
}

#[tokio::test]
async fn only_push_power_button_advertised_is_pressed_only_when_it_toggles_the_right_way() {
    let sim = sim().await;
    set_faults(
        &sim,
        Faults {
            push_button_only: true,
            ..Faults::default()
        },
    );
    let driver = driver(&sim);
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    // While powering off, pressing again would power it back on: refused as busy.
    let error = driver.power_on().await.unwrap_err();
    assert!(matches!(error, Error::Busy { .. }), "{error}");
    wait_for(driver.as_ref(), PowerState::Off, 5000)
        .await
        .unwrap();
    driver.power_on().await.unwrap();
    wait_for(driver.as_ref(), PowerState::On, 5000)
        .await
        .unwrap();
    let graceful = driver.power_off(PowerOffMode::Graceful).await.unwrap_err();
    assert!(matches!(graceful, Error::Unsupported { .. }), "{graceful}");
    assert_eq!(resets(&sim), ["PushPowerButton", "PushPowerButton"]);
}

#[tokio::test]
async fn a_bmc_with_basic_auth_disabled_is_driven_through_a_session() {
    let sim = sim().await;
    sim.service().set_auth_settings(AuthSettings {
        basic_auth: false,
        sessions: true,
    });
    let driver = driver(&sim);
    assert_eq!(driver.probe().await.unwrap().authentication, "session");
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    wait_for(driver.as_ref(), PowerState::Off, 5000)
        .await
        .unwrap();
    assert_eq!(sim.service().stats().sessions_created, 1);
}

#[tokio::test]
async fn connecting_ahead_opens_the_session_and_asks_nothing_of_the_host() {
    let sim = sim().await;
    let driver = driver(&sim);
    driver.connect().await.unwrap();
    // The root and the login: no read of the system, no reset.
    let stats = sim.service().stats();
    assert_eq!((stats.requests, stats.sessions_created), (2, 1));
    assert!(resets(&sim).is_empty());
    assert_eq!(sim.host("1").unwrap().power(), Power::On);
    // The power-off after it: the system's read and the reset, in the same session.
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    let stats = sim.service().stats();
    assert_eq!((stats.requests, stats.sessions_created), (4, 1));
    assert_eq!(resets(&sim), ["ForceOff"]);
    // Connecting again opens nothing more.
    driver.connect().await.unwrap();
    assert_eq!(sim.service().stats().requests, 4);
}

/// Issue 41: the system read ahead of a start's power-off (beside its record), so that the
/// power-off after it sends its reset only; "no change needed" is never decided on it.
#[tokio::test]
async fn a_power_change_readied_ahead_sends_only_its_reset_and_rereads_when_it_would_not() {
    let sim = sim().await;
    let driver = driver(&sim);
    driver.ready_to_change_power().await.unwrap();
    // The root, the login and the system's read: no reset.
    let stats = sim.service().stats();
    assert_eq!((stats.requests, stats.sessions_created), (3, 1));
    assert!(resets(&sim).is_empty());
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    assert_eq!(sim.service().stats().requests, 4, "the reset alone");
    assert_eq!(resets(&sim), ["ForceOff"]);
    wait_for(driver.as_ref(), PowerState::Off, 5000)
        .await
        .unwrap();
    // Read ahead while Off, then powered on by someone else: the read ahead says "already
    // off", which is decided on a fresh read only, and that one sees the host on.
    driver.ready_to_change_power().await.unwrap();
    sim.host("1").unwrap().set_power(Power::On);
    let before = sim.service().stats().requests;
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    assert_eq!(
        sim.service().stats().requests,
        before + 2,
        "read again, then the reset"
    );
    assert_eq!(resets(&sim), ["ForceOff", "ForceOff"]);
}

#[tokio::test]
async fn a_bmc_without_sessions_is_driven_with_basic_auth() {
    let sim = sim().await;
    sim.service().set_auth_settings(AuthSettings {
        basic_auth: true,
        sessions: false,
    });
    let driver = driver(&sim);
    assert_eq!(driver.probe().await.unwrap().authentication, "basic");
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    assert_eq!(sim.service().stats().sessions_created, 0);
}

#[tokio::test]
async fn expired_sessions_are_renewed_transparently() {
    let sim = sim().await;
    let driver = driver(&sim);
    driver.power_state().await.unwrap();
    sim.service().expire_sessions();
    driver.power_state().await.unwrap();
    assert_eq!(sim.service().stats().sessions_created, 2);
}

#[tokio::test]
async fn credentials_changed_at_runtime_give_a_permanent_authentication_error_without_retry_storm()
{
    let sim = sim().await;
    let driver = driver(&sim);
    driver.power_state().await.unwrap();
    sim.service().set_credentials("admin", "rotated");
    let error = driver.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    assert!(!error.is_retryable());
    // The dead token, then one login: no more attempts against the account.
    assert_eq!(sim.service().stats().authentication_failures, 2);
    let error = wait_for(driver.as_ref(), PowerState::On, 5000)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
}

#[tokio::test]
async fn a_read_only_account_cannot_power_off() {
    let sim = sim().await;
    sim.service().add_account(Account {
        username: "viewer".into(),
        password: "view".into(),
        role: Role::ReadOnly,
    });
    let config = config_for(
        &sim.bmc_address("1"),
        "viewer",
        "view",
        TlsOptions::default(),
    );
    let driver = Connector::new().connect(config).unwrap();
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    let error = driver.power_off(PowerOffMode::Forced).await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    assert!(error.to_string().contains("privilege"), "{error}");
    assert_eq!(sim.host("1").unwrap().power(), Power::On);
}

#[tokio::test]
async fn a_system_that_does_not_exist_is_a_permanent_error() {
    let sim = sim().await;
    let config = config_for(
        &sim.bmc_address("9"),
        "admin",
        "password",
        TlsOptions::default(),
    );
    let error = Connector::new()
        .connect(config)
        .unwrap()
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::SystemNotFound { .. }), "{error}");
}

#[tokio::test]
async fn drivers_sharing_a_connector_never_have_two_requests_in_flight_at_one_bmc() {
    // One system: the gate is per system of a service that serves several
    // (`BmcAddress::request_gate`), and the simulator counts requests for the whole service.
    let sim = sim_with(RedfishSimConfig::default()).await;
    sim.host("1").unwrap().set_faults(Faults {
        latency_ms: 20,
        ..Faults::default()
    });
    let run_burst = |connector: &Connector| {
        let drivers: Vec<_> = ["1", "1", "1", "1"]
            .iter()
            .map(|id| {
                let config = config_for(
                    &sim.bmc_address(id),
                    "admin",
                    "password",
                    TlsOptions::default(),
                );
                connector.connect(config).unwrap()
            })
            .collect();
        async move {
            let mut reads = tokio::task::JoinSet::new();
            for driver in drivers {
                for _ in 0..3 {
                    let driver = driver.clone();
                    reads.spawn(async move { driver.power_state().await.unwrap() });
                }
            }
            while reads.join_next().await.is_some() {}
        }
    };
    run_burst(&Connector::new()).await;
    assert_eq!(sim.service().stats().max_in_flight, 1);
    // Without a shared connector the same burst does overlap: the check above can fail.
    let separate: Vec<_> = (0..4).map(|_| Connector::new()).collect();
    let mut bursts = tokio::task::JoinSet::new();
    for connector in separate {
        let burst = run_burst(&connector);
        bursts.spawn(burst);
    }
    while bursts.join_next().await.is_some() {}
    assert!(sim.service().stats().max_in_flight > 1);
}

#[tokio::test]
async fn tls_is_verified_against_the_configured_ca_and_insecure_is_an_explicit_opt_in() {
    let ca = TestCa::generate("baremend test BMC CA").unwrap();
    let identity = ca.issue(LOCAL_NAMES).unwrap();
    let sim = sim_with(RedfishSimConfig {
        tls: TlsMode::Identity(identity),
        ..RedfishSimConfig::default()
    })
    .await;
    let address = sim.bmc_address("1");
    assert!(address.starts_with("redfish+https://"), "{address}");
    let connect = |tls: TlsOptions| {
        let config = config_for(&address, "admin", "password", tls);
        Connector::new().connect(config).unwrap()
    };

    let trusted = connect(TlsOptions {
        ca_bundle_pem: Some(ca.ca_pem().as_bytes().to_vec()),
        insecure: false,
    });
    trusted.power_off(PowerOffMode::Forced).await.unwrap();
    wait_for(trusted.as_ref(), PowerState::Off, 5000)
        .await
        .unwrap();

    let default_roots = connect(TlsOptions::default())
        .power_state()
        .await
        .unwrap_err();
    assert!(
        matches!(default_roots, Error::Tls { .. }),
        "{default_roots}"
    );
    assert!(!default_roots.is_retryable());

    let other_ca = TestCa::generate("some other CA").unwrap();
    let wrong = connect(TlsOptions {
        ca_bundle_pem: Some(other_ca.ca_pem().as_bytes().to_vec()),
        insecure: false,
    });
    let error = wrong.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Tls { .. }), "{error}");

    let insecure = connect(TlsOptions {
        ca_bundle_pem: None,
        insecure: true,
    });
    assert_eq!(insecure.power_state().await.unwrap(), PowerState::Off);

    let garbage = config_for(
        &address,
        "admin",
        "password",
        TlsOptions {
            ca_bundle_pem: Some(b"not pem".to_vec()),
            insecure: false,
        },
    );
    let error = Connector::new().connect(garbage).unwrap_err();
    assert!(matches!(error, Error::Configuration { .. }), "{error}");
}

#[tokio::test]
async fn a_plain_http_bmc_addressed_as_https_is_a_tls_error() {
    let sim = sim().await;
    let address = sim
        .bmc_address("1")
        .replace("redfish+http://", "redfish+https://");
    let config = config_for(&address, "admin", "password", TlsOptions::default());
    let error = Connector::new()
        .connect(config)
        .unwrap()
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Tls { .. }), "{error}");
}

#[tokio::test]
async fn faults_can_be_injected_through_the_control_api() {
    let sim = sim().await;
    let http = reqwest::Client::new();
    let response = http
        .put(format!("{}/control/systems/1/faults", sim.base_url()))
        .json(&serde_json::json!({"stuck_power": true, "latency_ms": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert!(sim.host("1").unwrap().faults().stuck_power);
    let bad = http
        .put(format!("{}/control/systems/1/faults", sim.base_url()))
        .json(&serde_json::json!({"no_such_fault": true}))
        .send()
        .await
        .unwrap();
    assert!(bad.status().is_client_error());
    let missing = http
        .put(format!("{}/control/systems/7/faults", sim.base_url()))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
