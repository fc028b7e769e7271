//! `baremend bmc` against the Redfish simulator, as an operator runs it.

use baremend_testkit as common;

use std::time::Duration;

use baremend_sim::host::{Faults, Power};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode, Vendor};
use common::{baremend, scratch, texts};

const PASSWORD: &str = "Zq7!recognisable-pw";

async fn sim(tls: TlsMode) -> RedfishSim {
    RedfishSim::start(RedfishSimConfig {
        password: PASSWORD.into(),
        power_delay: Duration::from_millis(300),
        tls,
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap()
}

fn assert_no_secret(output: &std::process::Output) {
    let (out, err) = texts(output);
    assert!(
        !out.contains(PASSWORD) && !err.contains(PASSWORD),
        "password leaked:\n{out}\n{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_off_on_cycle_and_probe_work_and_changes_are_read_back() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    let base = [
        "bmc",
        "--address",
        &address,
        "--username",
        "admin",
        "--timeout",
        "20s",
    ];
    let run = |verb: &'static [&'static str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(verb);
        async move { baremend(&args, Some(PASSWORD)).await }
    };

    let status = run(&["status"]).await;
    assert!(status.status.success(), "{:?}", texts(&status));
    assert_eq!(texts(&status).0.trim(), "On");

    let off = run(&["off"]).await;
    let (out, err) = texts(&off);
    assert!(off.status.success(), "{out}\n{err}");
    assert!(
        out.contains("PoweringOff") && out.contains("Off confirmed by the BMC"),
        "{out}"
    );
    assert_eq!(sim.host("1").unwrap().power(), Power::Off);

    let on = run(&["on"]).await;
    assert!(on.status.success(), "{:?}", texts(&on));
    assert!(texts(&on).0.contains("On confirmed by the BMC"));

    let cycle = run(&["cycle"]).await;
    assert!(cycle.status.success(), "{:?}", texts(&cycle));
    let history: Vec<Power> = sim
        .host("1")
        .unwrap()
        .history()
        .iter()
        .map(|c| c.power)
        .collect();
    assert_eq!(history, [Power::Off, Power::On, Power::Off, Power::On]);

    let graceful = run(&["off", "--graceful"]).await;
    assert!(graceful.status.success(), "{:?}", texts(&graceful));

    let probe = run(&["probe"]).await;
    let (out, _) = texts(&probe);
    assert!(probe.status.success());
    assert!(
        out.contains("Redfish 1.15.0") && out.contains("session"),
        "{out}"
    );
    assert!(
        out.contains("ForceOff") && out.contains("/redfish/v1/Systems/1"),
        "{out}"
    );
    for output in [&status, &off, &on, &cycle, &graceful, &probe] {
        assert_no_secret(output);
    }
    assert_eq!(
        sim.service().stats().open_sessions,
        0,
        "every run closes its session"
    );
}

/// `baremend bmc probe/status/off/on` against each vendor mode (real iDRAC, iLO 5, XCC and
/// BlueField payloads, fetched by `bash scripts/fetch-vendor-payloads.sh`), with an address
/// that names no system: the CLI finds the vendor's System (BlueField lists a second one
/// without a Reset action first), follows iLO's trailing slashes and logs in at the root's
/// `Links.Sessions` (iDRAC: outside the SessionService).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_status_off_and_on_pass_against_every_vendor_mode() {
    for (vendor, system) in [
        (Vendor::Idrac, "/redfish/v1/Systems/System.Embedded.1"),
        (Vendor::Ilo5, "/redfish/v1/Systems/1/"),
        (Vendor::Xcc, "/redfish/v1/Systems/1"),
        (Vendor::BlueField, "/redfish/v1/Systems/Bluefield"),
    ] {
        let sim = RedfishSim::start_vendor(
            RedfishSimConfig {
                password: PASSWORD.into(),
                power_delay: Duration::from_millis(300),
                ..RedfishSimConfig::default()
            },
            vendor,
        )
        .await
        .unwrap_or_else(|e| panic!("{vendor}: {e}"));
        let address = format!("redfish+http://{}", sim.local_addr());
        let run = |verb: &'static str| {
            let args = [
                "bmc",
                "--address",
                &address,
                "--username",
                "admin",
                "--timeout",
                "20s",
                verb,
            ]
            .map(str::to_owned);
            async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                baremend(&args, Some(PASSWORD)).await
            }
        };
        let probe = run("probe").await;
        let (out, err) = texts(&probe);
        assert!(probe.status.success(), "{vendor}: {out}\n{err}");
        assert!(
            out.contains(system) && out.contains("session") && out.contains("ForceOff"),
            "{vendor}: {out}"
        );
        let status = run("status").await;
        assert_eq!(
            texts(&status).0.trim(),
            "On",
            "{vendor}: {:?}",
            texts(&status)
        );
        let off = run("off").await;
        let (out, err) = texts(&off);
        assert!(off.status.success(), "{vendor}: {out}\n{err}");
        assert!(out.contains("Off confirmed by the BMC"), "{vendor}: {out}");
        // Already off: nothing is sent, and the answer is still success.
        let again = run("off").await;
        assert!(again.status.success(), "{vendor}: {:?}", texts(&again));
        let on = run("on").await;
        let (out, err) = texts(&on);
        assert!(on.status.success(), "{vendor}: {out}\n{err}");
        assert!(out.contains("On confirmed by the BMC"), "{vendor}: {out}");
        let sent: Vec<String> = sim
            .service()
            .stats()
            .resets
            .into_iter()
            .map(|r| r.reset_type)
            .collect();
        assert_eq!(sent, ["ForceOff", "On"], "{vendor}");
        for output in [&probe, &status, &off, &again, &on] {
            assert_no_secret(output);
        }
        assert_eq!(sim.service().stats().open_sessions, 0, "{vendor}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_a_file_or_the_environment_never_the_command_line() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    let file = password_file("password", "pw");
    let from_file = baremend(
        &[
            "bmc",
            "--address",
            &address,
            "--username",
            "admin",
            "--password-file",
            &file,
            "status",
        ],
        None,
    )
    .await;
    assert!(from_file.status.success(), "{:?}", texts(&from_file));

    let none = baremend(
        &[
            "bmc",
            "--address",
            &address,
            "--username",
            "admin",
            "status",
        ],
        None,
    )
    .await;
    assert!(!none.status.success());
    assert!(
        texts(&none).1.contains("BMC_PASSWORD"),
        "{:?}",
        texts(&none)
    );

    let on_command_line = baremend(
        &[
            "bmc",
            "--address",
            &address,
            "--username",
            "admin",
            "--password",
            PASSWORD,
            "status",
        ],
        None,
    )
    .await;
    assert!(!on_command_line.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_exit_non_zero_with_one_clear_line() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    let wrong = baremend(
        &[
            "bmc",
            "--address",
            &address,
            "--username",
            "admin",
            "status",
        ],
        Some("not-it"),
    )
    .await;
    let (out, err) = texts(&wrong);
    assert!(!wrong.status.success());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("refused the credentials"),
        "{err}"
    );
    assert!(out.is_empty() && !err.contains("not-it"), "{out}{err}");

    let bad_address = baremend(
        &[
            "bmc",
            "--address",
            "redfish://:99/x",
            "--username",
            "admin",
            "status",
        ],
        Some(PASSWORD),
    )
    .await;
    let (_, err) = texts(&bad_address);
    assert!(!bad_address.status.success());
    assert!(
        err.contains("invalid BMC address") && err.contains("host is missing"),
        "{err}"
    );

    let ipmi = baremend(
        &[
            "bmc",
            "--address",
            "ipmi://127.0.0.1:9",
            "--username",
            "admin",
            "--ipmi-reply-timeout",
            "200ms",
            "--timeout",
            "2s",
            "status",
        ],
        Some(PASSWORD),
    )
    .await;
    let (_, err) = texts(&ipmi);
    assert!(!ipmi.status.success());
    assert!(
        err.contains("ipmi://127.0.0.1:9")
            && (err.contains("unreachable") || err.contains("did not answer")),
        "{err}"
    );

    sim.host("1").unwrap().set_faults(Faults {
        stuck_power: true,
        ..Faults::default()
    });
    let stuck = baremend(
        &[
            "bmc",
            "--address",
            &address,
            "--username",
            "admin",
            "--timeout",
            "1500ms",
            "off",
        ],
        Some(PASSWORD),
    )
    .await;
    let (_, err) = texts(&stuck);
    assert!(!stuck.status.success());
    assert!(
        err.contains("did not reach power state Off") && err.contains("last seen: On"),
        "{err}"
    );

    // An unreachable BMC is tried again until --timeout, each retry announced, and the
    // error stays the last line.
    let started = std::time::Instant::now();
    let unreachable = baremend(
        &[
            "bmc",
            "--address",
            "redfish+http://127.0.0.1:1/redfish/v1/Systems/1",
            "--username",
            "admin",
            "--request-timeout",
            "2s",
            "--timeout",
            "2s",
            "status",
        ],
        Some(PASSWORD),
    )
    .await;
    assert!(!unreachable.status.success());
    assert!(started.elapsed() < Duration::from_secs(5));
    let (_, err) = texts(&unreachable);
    let lines: Vec<&str> = err.trim().lines().collect();
    assert!(
        lines.len() >= 2
            && lines[..lines.len() - 1]
                .iter()
                .all(|l| l.contains("trying again")),
        "{err}"
    );
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("error: ") && last.contains("unreachable"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_needs_the_ca_file_or_an_explicit_insecure() {
    let sim = sim(TlsMode::SelfSigned).await;
    let address = sim.bmc_address("1");
    let dir = scratch("ca");
    let ca = dir.join("bmc-ca.pem");
    std::fs::write(&ca, sim.self_signed_cert_pem().unwrap()).unwrap();
    let ca = ca.to_string_lossy().into_owned();
    let base = ["bmc", "--address", address.as_str(), "--username", "admin"];

    let verified = baremend(
        &[&base[..], &["--ca-file", &ca, "status"]].concat(),
        Some(PASSWORD),
    )
    .await;
    assert!(verified.status.success(), "{:?}", texts(&verified));
    let unverified = baremend(&[&base[..], &["status"]].concat(), Some(PASSWORD)).await;
    assert!(!unverified.status.success());
    assert!(
        texts(&unverified).1.contains("TLS verification"),
        "{:?}",
        texts(&unverified)
    );
    let insecure = baremend(
        &[&base[..], &["--insecure", "status"]].concat(),
        Some(PASSWORD),
    )
    .await;
    assert!(insecure.status.success(), "{:?}", texts(&insecure));
    let both = baremend(
        &[&base[..], &["--insecure", "--ca-file", &ca, "status"]].concat(),
        Some(PASSWORD),
    )
    .await;
    assert!(!both.status.success());
}

/// A command of the table below: its arguments, the power the host starts in, what its
/// output shows on success, and the resets the BMC must have received (each exactly once).
struct Command {
    args: &'static [&'static str],
    start: Power,
    shows: &'static str,
    resets: &'static [&'static str],
}

const COMMANDS: &[Command] = &[
    Command {
        args: &["status"],
        start: Power::On,
        shows: "On",
        resets: &[],
    },
    Command {
        args: &["on"],
        start: Power::Off,
        shows: "On confirmed",
        resets: &["On"],
    },
    Command {
        args: &["off"],
        start: Power::On,
        shows: "Off confirmed",
        resets: &["ForceOff"],
    },
    Command {
        args: &["off", "--graceful"],
        start: Power::On,
        shows: "Off confirmed",
        resets: &["GracefulShutdown"],
    },
    Command {
        args: &["cycle"],
        start: Power::On,
        shows: "On confirmed",
        resets: &["ForceOff", "On"],
    },
    Command {
        args: &["probe"],
        start: Power::On,
        shows: "ForceOff",
        resets: &[],
    },
];

/// `baremend bmc --address ADDRESS --username admin --timeout TIMEOUT VERB…`.
fn bmc_args<'a>(address: &'a str, timeout: &'a str, verb: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "bmc",
        "--address",
        address,
        "--username",
        "admin",
        "--timeout",
        timeout,
    ];
    args.extend_from_slice(verb);
    args
}

/// Runs one command against a fresh simulator whose system answers its first two requests
/// with `status`; returns how long it took.
async fn through_two_errors(command: &Command, status: u16) -> Duration {
    let sim = sim(TlsMode::Plain).await;
    sim.service().set_power("1", command.start);
    sim.host("1").unwrap().set_faults(Faults {
        error_status: Some(status),
        error_count: Some(2),
        ..Faults::default()
    });
    let address = sim.bmc_address("1");
    let args = bmc_args(&address, "30s", command.args);
    let started = std::time::Instant::now();
    let output = baremend(&args, Some(PASSWORD)).await;
    let took = started.elapsed();
    let (out, err) = texts(&output);
    let context = format!("{:?} with HTTP {status} twice", command.args);
    assert!(output.status.success(), "{context}:\n{out}\n{err}");
    assert!(out.contains(command.shows), "{context}:\n{out}");
    assert_no_secret(&output);
    let stats = sim.service().stats();
    let resets: Vec<&str> = stats.resets.iter().map(|r| r.reset_type.as_str()).collect();
    assert_eq!(resets, command.resets, "{context}");
    assert_eq!(stats.open_sessions, 0, "{context}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_gets_through_a_bmc_that_refuses_two_requests_and_honours_retry_after() {
    // 429 and 503 come with `Retry-After: 1`: two refusals cost at least two seconds. A 500
    // has no Retry-After: the backoff starts at 250 ms.
    for status in [503, 429, 500] {
        let runs = COMMANDS.iter().map(|c| through_two_errors(c, status));
        let durations = futures_util::future::join_all(runs).await;
        for (command, took) in COMMANDS.iter().zip(durations) {
            if status != 500 {
                assert!(
                    took >= Duration::from_secs(2),
                    "{:?} with HTTP {status} took {took:?}: Retry-After not honoured",
                    command.args
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_password_is_never_tried_twice_whatever_the_timeout() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    for command in COMMANDS {
        let args = bmc_args(&address, "60s", command.args);
        let before = sim.service().stats().authentication_failures;
        let started = std::time::Instant::now();
        let output = baremend(&args, Some("wrong-password")).await;
        let (_, err) = texts(&output);
        assert!(!output.status.success());
        assert!(err.contains("refused the credentials"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
        let failures = sim.service().stats().authentication_failures - before;
        assert_eq!(failures, 1, "{:?}: one login attempt", command.args);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_busy_for_longer_than_the_timeout_fails_in_time_with_its_own_answer() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    let run = |timeout: &'static str| {
        let address = address.clone();
        async move {
            let args = bmc_args(&address, timeout, &["on"]);
            let started = std::time::Instant::now();
            let output = baremend(&args, Some(PASSWORD)).await;
            (output, started.elapsed())
        }
    };
    // Busy for good, asking for a second each time: tried until the timeout, then its answer.
    sim.host("1").unwrap().set_faults(Faults {
        error_status: Some(503),
        ..Faults::default()
    });
    let (output, took) = run("2500ms").await;
    let (_, err) = texts(&output);
    assert!(!output.status.success());
    assert!(err.contains("is busy") && err.contains("HTTP 503"), "{err}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Asking for more time than is left: no pointless wait, the answer at once.
    sim.host("1").unwrap().set_faults(Faults {
        error_status: Some(503),
        retry_after_s: Some(30),
        ..Faults::default()
    });
    let (output, took) = run("10s").await;
    let (_, err) = texts(&output);
    assert!(!output.status.success());
    assert!(err.contains("is busy"), "{err}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(sim.service().stats().resets.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_password_file_logs_in_when_the_bmc_still_has_it_and_says_so() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    let file = password_file("previous-password", "previous");
    const NEW: &str = "Xy8?the-new-password";
    for verb in ["status", "probe"] {
        let before = sim.service().stats().authentication_failures;
        let args = [
            "bmc",
            "--address",
            &address,
            "--username",
            "admin",
            "--previous-password-file",
            &file,
            verb,
        ];
        let output = baremend(&args, Some(NEW)).await;
        let (out, err) = texts(&output);
        assert!(output.status.success(), "{verb}: {out}\n{err}");
        assert!(err.contains("accepted the previous one"), "{verb}: {err}");
        assert_no_secret(&output);
        assert!(!out.contains(NEW) && !err.contains(NEW));
        let failures = sim.service().stats().authentication_failures - before;
        assert_eq!(
            failures, 1,
            "{verb}: the new password once, then the previous"
        );
        if verb == "probe" {
            assert!(out.contains("password used:    previous"), "{out}");
        }
    }
    // The BMC gets the new password: the current one works and nothing is said.
    sim.service().set_credentials("admin", NEW);
    let args = [
        "bmc",
        "--address",
        &address,
        "--username",
        "admin",
        "--previous-password-file",
        &file,
        "probe",
    ];
    let output = baremend(&args, Some(NEW)).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(out.contains("password used:    current"), "{out}");
    assert!(!err.contains("previous"), "{err}");
}

/// The path of a file `file` in the scratch directory `name` that holds the BMC password (and
/// a newline, as editors leave it).
fn password_file(name: &str, file: &str) -> String {
    let path = scratch(name).join(file);
    std::fs::write(&path, format!("{PASSWORD}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

/// A log read from a pipe or a file carries no colour escape codes (they are for a terminal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_written_to_a_pipe_carry_no_colour_codes() {
    let sim = sim(TlsMode::Plain).await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args(["bmc", "--address", &sim.bmc_address("1")])
        .args(["--username", "admin", "status"])
        .env("BMC_PASSWORD", PASSWORD)
        .env("RUST_LOG", "debug")
        .kill_on_drop(true)
        .output()
        .await
        .expect("baremend runs");
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(err.contains("DEBUG"), "no log lines: {err}");
    assert!(
        !err.contains('\u{1b}'),
        "colour codes in a piped log: {err:?}"
    );
}
