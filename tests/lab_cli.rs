//! `baremend lab`, the README's main command, as a user runs it: the default story and the
//! scenario that must end Failed without touching the Node.

mod common;

use common::{baremend, texts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_lab_tells_the_whole_story_and_exits_zero() {
    let output = baremend(&["lab"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    for line in [
        "external-remediation annotation set by the MachineHealthCheck",
        "Remediation worker-0-1: PoweringOff",
        "host worker-0: power Off",
        "Node worker-0: absent",
        "host worker-0: power On",
        "external-remediation annotation removed",
        "Remediation worker-0-1: Succeeded",
        "| Fenced |",
        "| NodeDeleted |",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    // The story is in order: off before the Node goes, the Node goes before power-on.
    let at = |needle: &str| out.find(needle).unwrap();
    assert!(at("host worker-0: power Off") < at("Node worker-0: absent"));
    assert!(at("Node worker-0: absent") < at("host worker-0: power PoweringOn"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stuck_bmc_lab_fails_the_remediation_and_keeps_the_node() {
    let output = baremend(&["lab", "--scenario", "stuck-bmc"], None).await;
    let (out, err) = texts(&output);
    assert!(output.status.success(), "{out}\n{err}");
    assert!(out.contains("Remediation worker-0-1: Failed"), "{out}");
    assert!(!out.contains("Node worker-0: absent"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_scenario_is_refused_with_the_choices() {
    let output = baremend(&["lab", "--scenario", "volcano"], None).await;
    let (_, err) = texts(&output);
    assert!(!output.status.success());
    assert!(err.contains("bmh") && err.contains("stuck-bmc"), "{err}");
}
