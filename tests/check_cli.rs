//! `baremend check` as a user runs it, against the simulated cluster through the kubeconfig it
//! writes: one line per Machine with its fencing path and READY or NOT READY and why, exit
//! code 1 when any is not ready, `--machine` for one; nothing powered, no password shown.

use std::process::Output;
use std::time::Duration;

use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::SECRETS;
use serde_json::json;

mod common;

use common::lab::{Lab, fast};

const WRONG: &str = "not-the-bmc-password";

async fn check(lab: &Lab, args: &[&str]) -> Output {
    // One folder per call: the tests of this file run at once, each with its own cluster.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("baremend-check-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, lab.cluster.kubeconfig()).unwrap();
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .arg("check")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(args)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("baremend check ends within a minute")
        .unwrap()
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The line about `machine`.
fn line<'a>(stdout: &'a str, machine: &str) -> &'a str {
    let prefix = format!("{MACHINE_NAMESPACE}/{machine} ");
    stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no line for {machine} in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_one_line_per_machine_and_fails_when_one_is_not_ready() {
    let lab = Lab::builder(fast()).start().await;
    lab.detach("worker-1");
    // The simulated BareMetal Operator validates each host's credentials once it logs in.
    common::eventually(
        "every host's credentials validated",
        Duration::from_secs(20),
        async || {
            let hosts = lab.api.list(baremend_sim::cluster::local::BMHS, None);
            hosts
                .iter()
                .filter(|h| h["metadata"]["name"] != "worker-1")
                .all(|h| h["status"]["goodCredentials"].is_object())
        },
    )
    .await;
    let before = lab.cluster.redfish().service().stats();

    let all_ready = check(&lab, &[]).await;
    let (stdout, stderr) = text(&all_ready);
    assert!(all_ready.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
    assert!(
        line(&stdout, "worker-0").starts_with(
            "openshift-machine-api/worker-0 worker-0 reboot API of BareMetalHost openshift-machine-api/worker-0: READY"
        ),
        "{stdout}"
    );
    let direct = line(&stdout, "worker-1");
    assert!(
        direct.contains(": READY (BMC ") && direct.contains("logged in"),
        "{direct}"
    );

    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(WRONG);
    lab.api
        .merge(
            SECRETS,
            MACHINE_NAMESPACE,
            "worker-1-bmc-secret",
            &json!({"data": {"password": encoded}}),
            false,
        )
        .unwrap();
    let refused = check(&lab, &["--machine", "worker-1"]).await;
    let (stdout, stderr) = text(&refused);
    assert_eq!(refused.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.contains("NOT READY: CredentialsRefused: "),
        "{stdout}"
    );
    assert!(
        stderr.contains("1 of 1 Machines could not be fenced now"),
        "{stderr}"
    );
    assert!(!stdout.contains(WRONG) && !stderr.contains(WRONG));

    let unknown = check(&lab, &["--machine", "no-such-machine"]).await;
    let (_, stderr) = text(&unknown);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr.contains("no Machine or Machine-less Node no-such-machine"),
        "{stderr}"
    );

    let after = lab.cluster.redfish().service().stats();
    assert_eq!(after.resets, before.resets, "a check never asks for power");
    assert_eq!(
        after.open_sessions, before.open_sessions,
        "every session the checks opened is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_probes_the_bmc_of_each_node_without_a_machine_through_its_host_bmc() {
    let lab = Lab::builder(baremend_sim::cluster::ClusterSpec {
        platform_none: true,
        ..fast()
    })
    .start()
    .await;
    let before = lab.cluster.redfish().service().stats();
    let output = check(&lab, &[]).await;
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "one line per Node: {stdout}");
    let worker = line(&stdout, "worker-2");
    assert!(
        worker.starts_with("openshift-machine-api/worker-2 worker-2 ")
            && worker.contains(": READY (BMC ")
            && worker.contains("logged in"),
        "{worker}"
    );
    assert!(!stdout.contains("BareMetalHost"), "{stdout}");
    let one = check(&lab, &["--machine", "worker-2"]).await;
    assert_eq!(text(&one).0.lines().count(), 1);
    let after = lab.cluster.redfish().service().stats();
    assert_eq!(after.resets, before.resets, "a check never asks for power");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_when_a_nodehealthcheck_templates_power_cycles_outlast_its_lease() {
    use baremend_sim::cluster::nhc::NODE_REMEDIATION_TEMPLATES;
    let lab = Lab::builder(fast()).start().await;
    for (name, spec) in [("fits", json!({})), ("patient", json!({"maxAttempts": 4}))] {
        lab.api
            .create(
                NODE_REMEDIATION_TEMPLATES,
                MACHINE_NAMESPACE,
                json!({"metadata": {"name": name}, "spec": {"template": {"spec": spec}}}),
            )
            .unwrap();
    }
    let output = check(&lab, &["--machine", "worker-0"]).await;
    let (stdout, stderr) = text(&output);
    // One warning, for the template whose fourth power cycle would start past the lease;
    // the defaults (two cycles) fit.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}\n{stderr}");
    assert!(
        warnings[0].starts_with(
            "warning: NodeRemediationTemplate openshift-machine-api/patient (RemediationPolicy default with its overrides): maxAttempts 4"
        ),
        "{stderr}"
    );
    assert!(
        warnings[0].contains("the last may start 3780 s after the request, past the 1800 s"),
        "{stderr}"
    );
    assert!(warnings[0].contains("use maxAttempts 2"), "{stderr}");
    // A warning, not a failure: the line about the Machine is there as always.
    line(&stdout, "worker-0");
}
