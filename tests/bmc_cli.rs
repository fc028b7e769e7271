//! `baremend bmc` against the Redfish simulator, as an operator runs it.

mod common;

use std::time::Duration;

use baremend_sim::host::{Faults, Power};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_a_file_or_the_environment_never_the_command_line() {
    let sim = sim(TlsMode::Plain).await;
    let address = sim.bmc_address("1");
    let dir = scratch("password");
    let file = dir.join("pw");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let file = file.to_string_lossy().into_owned();
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

    let unreachable = baremend(
        &[
            "bmc",
            "--address",
            "redfish+http://127.0.0.1:1/redfish/v1/Systems/1",
            "--username",
            "admin",
            "--request-timeout",
            "2s",
            "status",
        ],
        Some(PASSWORD),
    )
    .await;
    assert!(!unreachable.status.success());
    assert!(
        texts(&unreachable).1.contains("unreachable"),
        "{:?}",
        texts(&unreachable)
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
