//! Fidelity against real IPMI software:
//! - our driver against OpenIPMI's `ipmi_sim` (a BMC we did not write), with a power delay so
//!   that polling is exercised, a hung OS, wrong credentials, a stopped BMC and a leak check;
//! - `ipmitool` (cipher suites 3 and 17) and FreeIPMI's `ipmipower` against our simulator.
//!
//! The programs come from Debian's `openipmi`, `ipmitool` and `freeipmi-tools`, which
//! `scripts/test.sh` installs; a missing one fails the test with the install command.

use baremend_testkit as common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::ipmi::IpmiOptions;
use baremend_drivers::ipmi::wire::crypto::CipherSuite;
use baremend_drivers::{
    BmcAddress, Connector, CredentialUsed, Credentials, DriverConfig, Error, PowerDriver,
    PowerOffMode, PowerState, TlsOptions, WaitOptions, power_off_confirmed, wait_for_power_state,
};
use baremend_sim::clock::{Clock, SystemClock};
use baremend_sim::host::{Power, SimHost};
use baremend_sim::ipmi::{IpmiSim, IpmiSimConfig, IpmiUser, privilege};
use baremend_sim::lockout::LockoutPolicy;
use common::{baremend, eventually, free_udp_port, repo_root, require_program, scratch, texts};
use tokio::process::{Child, Command};

/// A running `ipmi_sim`, killed when dropped.
struct OpenIpmi {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl OpenIpmi {
    async fn start(env: &[(&str, &str)]) -> OpenIpmi {
        require_program("ipmi_sim", "openipmi");
        let port = free_udp_port();
        let dir = scratch("ipmi_sim");
        let log = std::fs::File::create(dir.join("ipmi_sim.log")).unwrap();
        let mut command = Command::new("bash");
        command
            .arg(repo_root().join("scripts/interop/ipmi_sim.sh"))
            .arg(&dir)
            .arg(port.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true);
        let child = command.spawn().expect("ipmi_sim starts");
        let sim = OpenIpmi { child, port, dir };
        // Ready when it answers a session; ipmi_sim binds within tens of milliseconds.
        let probe = sim.driver("admin", "password", fast_options());
        eventually(
            &format!("ipmi_sim to answer on port {port}"),
            Duration::from_secs(10),
            async || match probe.power_state().await {
                Ok(_) => Ok(()),
                Err(error) => Err(format!("{error}; its log:\n{}", sim.log())),
            },
        )
        .await;
        sim
    }

    fn address(&self) -> String {
        format!("ipmi://127.0.0.1:{}", self.port)
    }

    fn driver(&self, user: &str, password: &str, options: IpmiOptions) -> Arc<dyn PowerDriver> {
        driver_for(&self.address(), user, password, options)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("ipmi_sim.log")).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("ipmi_sim is running").to_string();
        let status = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(status.success());
    }

    async fn ipmitool(&self, args: &[&str]) -> std::process::Output {
        require_program("ipmitool", "ipmitool");
        let port = self.port.to_string();
        run_ipmitool(&port, "3", "admin", "password", args).await
    }
}

async fn run_ipmitool(
    port: &str,
    suite: &str,
    user: &str,
    password: &str,
    args: &[&str],
) -> std::process::Output {
    Command::new("ipmitool")
        .args([
            "-I",
            "lanplus",
            "-H",
            "127.0.0.1",
            "-p",
            port,
            "-C",
            suite,
            "-U",
            user,
            "-P",
            password,
            "-N",
            "1",
            "-R",
            "2",
        ])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("ipmitool runs")
}

fn fast_options() -> IpmiOptions {
    IpmiOptions {
        reply_timeout: Duration::from_millis(500),
        retries: 1,
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

fn waiting(timeout: Duration) -> WaitOptions {
    WaitOptions {
        timeout,
        initial_interval: Duration::from_millis(200),
        max_interval: Duration::from_millis(500),
        consecutive_reads: 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_driver_powers_an_openipmi_bmc_off_and_on_polling_through_the_delay() {
    let bmc = OpenIpmi::start(&[("IPMI_SIM_POWER_DELAY", "2")]).await;
    let driver = bmc.driver("admin", "password", fast_options());
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    let started = Instant::now();
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    let mut seen = Vec::new();
    wait_for_power_state(
        driver.as_ref(),
        &PowerState::Off,
        &waiting(Duration::from_secs(15)),
        |s| seen.push(s.clone()),
    )
    .await
    .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the delay was honoured"
    );
    assert_eq!(
        seen.first(),
        Some(&PowerState::On),
        "polling saw the host still on: {seen:?}"
    );
    driver.power_on().await.unwrap();
    wait_for_power_state(
        driver.as_ref(),
        &PowerState::On,
        &waiting(Duration::from_secs(15)),
        |_| {},
    )
    .await
    .unwrap();
    let operator = bmc.driver("oper", "operpass", fast_options());
    assert_eq!(operator.power_state().await.unwrap(), PowerState::On);
    let probe = driver.probe().await.unwrap();
    assert!(
        probe.protocol.contains("cipher suite 3"),
        "ipmi_sim has no SHA-256 suites: {}",
        probe.protocol
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_off_on_openipmi_escalates_when_the_os_ignores_it() {
    let bmc = OpenIpmi::start(&[("IPMI_SIM_IGNORE_SOFT", "1")]).await;
    let driver = bmc.driver("admin", "password", fast_options());
    let outcome = power_off_confirmed(
        driver.as_ref(),
        Some(Duration::from_secs(2)),
        &waiting(Duration::from_secs(10)),
        |_| {},
    )
    .await
    .unwrap();
    assert!(outcome.escalated);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::Off);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_on_openipmi_fail_fast_and_permanently() {
    let bmc = OpenIpmi::start(&[]).await;
    // A long reply timeout: a driver that waited for an answer (or retried on a timeout)
    // would take one at least, however idle or busy the machine.
    let patient = IpmiOptions {
        reply_timeout: Duration::from_secs(5),
        ..fast_options()
    };
    let started = Instant::now();
    let wrong = bmc
        .driver("admin", "wrong-password", patient.clone())
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(wrong, Error::Authentication { .. }), "{wrong}");
    assert!(!wrong.is_retryable());
    assert!(
        started.elapsed() < patient.reply_timeout,
        "{:?}",
        started.elapsed()
    );
    let unknown = bmc
        .driver("nobody", "password", fast_options())
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(unknown, Error::Authentication { .. }), "{unknown}");
    assert!(unknown.to_string().contains("unknown user"), "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_on_openipmi_logs_in_with_whichever_password_it_has() {
    let bmc = OpenIpmi::start(&[]).await;
    let connect = |credentials: Credentials| {
        let mut config = DriverConfig::new(
            BmcAddress::parse(&bmc.address()).unwrap(),
            credentials,
            TlsOptions::default(),
        );
        config.ipmi = fast_options();
        Connector::new().connect(config).unwrap()
    };
    // The Secret has the new password first; ipmi_sim still has the old one.
    let rotating = connect(Credentials::new("admin", "new-password").with_previous("password"));
    assert_eq!(rotating.power_state().await.unwrap(), PowerState::On);
    assert_eq!(rotating.credential_used(), Some(CredentialUsed::Previous));
    let both_wrong = connect(Credentials::new("admin", "wrong-one").with_previous("wrong-two"));
    let error = both_wrong.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    assert!(error.to_string().contains("both passwords"), "{error}");
    // ipmi_sim answers everyone afterwards: no session was left half open.
    let output = bmc.ipmitool(&["chassis", "power", "status"]).await;
    assert!(output.status.success(), "{output:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_openipmi_bmc_gives_a_timeout_within_the_deadline_not_a_hang() {
    let bmc = OpenIpmi::start(&[]).await;
    let driver = bmc.driver("admin", "password", fast_options());
    driver.power_state().await.unwrap();
    bmc.signal("-STOP");
    // Two attempts of a reply timeout each (plus closing attempts) and a backoff: the
    // driver's schedule; it must give up by itself, well within ten of them.
    let options = fast_options();
    let attempts = options.retries + 1;
    let backoffs = options.retry_backoff * (2u32.pow(options.retries) - 1);
    let schedule = options.reply_timeout * attempts + backoffs;
    let started = Instant::now();
    let outcome = tokio::time::timeout(schedule * 10, driver.power_state()).await;
    bmc.signal("-CONT");
    let error = outcome.expect("the driver gives up by itself").unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert!(error.is_retryable());
    // Not before every attempt had its reply timeout: a busy machine only adds to it.
    assert!(
        started.elapsed() >= options.reply_timeout * attempts,
        "gave up after {:?}",
        started.elapsed()
    );
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_operations_leak_no_session_on_openipmi() {
    let bmc = OpenIpmi::start(&[]).await;
    let driver = bmc.driver("admin", "password", fast_options());
    for n in 0..200 {
        driver
            .power_state()
            .await
            .unwrap_or_else(|e| panic!("operation {n}: {e}"));
    }
    // ipmi_sim has 63 session slots: a leak of one per operation would have exhausted them.
    let output = bmc.ipmitool(&["chassis", "power", "status"]).await;
    let (out, err) = texts(&output);
    assert!(
        output.status.success() && out.contains("Chassis Power is on"),
        "{out}\n{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baremend_bmc_drives_openipmi() {
    let bmc = OpenIpmi::start(&[]).await;
    let address = bmc.address();
    let base = [
        "bmc",
        "--address",
        address.as_str(),
        "--username",
        "admin",
        "--timeout",
        "20s",
    ];
    for (verb, expected) in [
        ("status", "On"),
        ("off", "Off confirmed"),
        ("on", "On confirmed"),
        ("probe", "IPMI 2.0 over RMCP+"),
    ] {
        let output = baremend(&[&base[..], &[verb]].concat(), Some("password")).await;
        let (out, err) = texts(&output);
        assert!(
            output.status.success() && out.contains(expected),
            "{verb}: {out}\n{err}"
        );
    }
}

async fn our_bmc() -> IpmiSim {
    our_bmc_with(IpmiSimConfig::default()).await
}

async fn our_bmc_with(config: IpmiSimConfig) -> IpmiSim {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let host = Arc::new(SimHost::new(
        "1",
        Power::On,
        Duration::from_millis(200),
        clock.clone(),
    ));
    let users = vec![
        IpmiUser {
            username: "admin".into(),
            password: "password".into(),
            max_privilege: privilege::ADMINISTRATOR,
        },
        IpmiUser {
            username: "viewer".into(),
            password: "viewpass".into(),
            max_privilege: privilege::USER,
        },
    ];
    IpmiSim::start(IpmiSimConfig { users, ..config }, host, clock)
        .await
        .unwrap()
}

async fn settle(sim: &IpmiSim, power: Power) {
    eventually(
        &format!("the host {power:?}"),
        Duration::from_secs(5),
        async || sim.host().power() == power && !sim.host().transition_pending(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmitool_drives_our_simulator_with_cipher_suites_3_and_17() {
    require_program("ipmitool", "ipmitool");
    for suite in ["3", "17"] {
        let sim = our_bmc().await;
        let port = sim.local_addr().port().to_string();
        let run = |args: &'static [&'static str]| {
            let port = port.clone();
            async move { run_ipmitool(&port, suite, "admin", "password", args).await }
        };
        let status = run(&["chassis", "power", "status"]).await;
        assert!(
            texts(&status).0.contains("Chassis Power is on"),
            "suite {suite}: {:?}",
            texts(&status)
        );
        let off = run(&["chassis", "power", "off"]).await;
        assert!(off.status.success(), "suite {suite}: {:?}", texts(&off));
        settle(&sim, Power::Off).await;
        let status = run(&["chassis", "power", "status"]).await;
        assert!(
            texts(&status).0.contains("Chassis Power is off"),
            "suite {suite}: {:?}",
            texts(&status)
        );
        let on = run(&["chassis", "power", "on"]).await;
        assert!(on.status.success(), "suite {suite}: {:?}", texts(&on));
        settle(&sim, Power::On).await;
        assert_eq!(
            sim.stats().open_sessions,
            0,
            "ipmitool closed every session (suite {suite})"
        );
        let wrong = run_ipmitool(
            &port,
            suite,
            "admin",
            "nope",
            &["chassis", "power", "status"],
        )
        .await;
        assert!(!wrong.status.success());
        let viewer = run_ipmitool(
            &port,
            suite,
            "viewer",
            "viewpass",
            &["-L", "USER", "chassis", "power", "off"],
        )
        .await;
        assert!(
            !viewer.status.success(),
            "a USER session may not power off: {:?}",
            texts(&viewer)
        );
        assert_eq!(sim.host().power(), Power::On);
        let stats = sim.stats();
        assert_eq!(stats.chassis_controls, [0x00, 0x01], "suite {suite}");
        // ipmitool does not abort a login whose RAKP 2 fails: that half-open session waits for
        // the BMC's idle timeout, as on a real BMC.
        assert!(stats.open_sessions <= 1, "suite {suite}: {stats:?}");
        assert_eq!(
            stats.sessions_activated, stats.sessions_closed,
            "suite {suite}: {stats:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmipower_drives_our_simulator_with_cipher_suites_3_and_17() {
    require_program("ipmipower", "freeipmi-tools");
    for suite in ["3", "17"] {
        let sim = our_bmc().await;
        let host = sim.local_addr().to_string();
        let run = |user: &'static str, password: &'static str, action: &'static str| {
            let host = host.clone();
            async move {
                Command::new("ipmipower")
                    .args([
                        "-D", "LAN_2_0", "-h", &host, "-u", user, "-p", password, "-I", suite,
                        action,
                    ])
                    .stdin(Stdio::null())
                    .kill_on_drop(true)
                    .output()
                    .await
                    .expect("ipmipower runs")
            }
        };
        let answer = |output: &std::process::Output| texts(output).0.trim().to_owned();
        assert!(
            answer(&run("admin", "password", "--stat").await).ends_with(": on"),
            "suite {suite}"
        );
        assert!(
            answer(&run("admin", "password", "--off").await).ends_with(": ok"),
            "suite {suite}"
        );
        settle(&sim, Power::Off).await;
        assert!(
            answer(&run("admin", "password", "--stat").await).ends_with(": off"),
            "suite {suite}"
        );
        assert!(
            answer(&run("admin", "password", "--on").await).ends_with(": ok"),
            "suite {suite}"
        );
        settle(&sim, Power::On).await;
        assert_eq!(
            sim.stats().open_sessions,
            0,
            "ipmipower closed every session (suite {suite})"
        );
        assert!(
            answer(&run("admin", "wrong", "--stat").await).contains("password invalid"),
            "suite {suite}"
        );
        assert!(
            answer(&run("nobody", "x", "--stat").await).contains("username invalid"),
            "suite {suite}"
        );
        assert_eq!(sim.stats().chassis_controls, [0x00, 0x01], "suite {suite}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_driver_uses_suite_17_with_our_simulator_and_suite_3_when_told() {
    let sim = our_bmc().await;
    for (suite, expected) in [
        (CipherSuite::Suite17, "cipher suite 17"),
        (CipherSuite::Suite3, "cipher suite 3"),
    ] {
        let options = IpmiOptions {
            cipher_suites: vec![suite],
            ..fast_options()
        };
        let probe = driver_for(&sim.bmc_address(), "admin", "password", options)
            .probe()
            .await
            .unwrap();
        assert!(probe.protocol.contains(expected), "{}", probe.protocol);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmitool_with_a_wrong_password_locks_our_simulator_account_out_at_its_threshold() {
    require_program("ipmitool", "ipmitool");
    // ipmitool leaves without a RAKP 3 when the RAKP 2 code does not verify: the half-open
    // login counts as failed when it times out.
    let sim = our_bmc_with(IpmiSimConfig {
        lockout: LockoutPolicy::after(3),
        idle_timeout: Duration::from_millis(500),
        ..IpmiSimConfig::default()
    })
    .await;
    let port = sim.local_addr().port().to_string();
    let status = ["chassis", "power", "status"];
    for attempt in 1..=3u64 {
        let refused = run_ipmitool(&port, "3", "admin", "not-the-password", &status).await;
        assert!(!refused.status.success(), "{:?}", texts(&refused));
        let counted = eventually("the refusal counted", Duration::from_secs(3), async || {
            let failed = sim.lockout_status("admin").failed_logins;
            if failed >= attempt {
                Ok(failed)
            } else {
                Err(failed)
            }
        })
        .await;
        assert_eq!(counted, attempt, "one failed login per ipmitool run");
    }
    assert!(sim.lockout_status("admin").locked);
    // Locked: even the right password is refused, by ipmitool as by our driver.
    let locked = run_ipmitool(&port, "3", "admin", "password", &status).await;
    assert!(!locked.status.success(), "{:?}", texts(&locked));
    let ours = driver_for(&sim.bmc_address(), "admin", "password", fast_options());
    let error = ours.power_state().await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    // The other account is not affected.
    let viewer = ["-L", "USER", "chassis", "power", "status"];
    let viewer = run_ipmitool(&port, "3", "viewer", "viewpass", &viewer).await;
    assert!(viewer.status.success(), "{:?}", texts(&viewer));
}
