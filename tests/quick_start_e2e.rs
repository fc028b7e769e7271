//! The README's Quick start, read from the README and run line by line with the real kubectl, on
//! the simulated IPI cluster whose machine API runs OpenShift's legacy bare-metal remediation
//! (cluster-api-provider-baremetal's actuator, which acts on the
//! `host.metal3.io/external-remediation` annotation of every Machine and has no off switch).
//! With the Quick start, one remediator acts on a hung worker — baremend — and the legacy one
//! never does; with the annotation overlay on the same cluster, `baremend check` fails with the
//! fix, and the legacy remediation indeed power-cycles a hung worker baremend only dry-runs.

use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend_sim::cluster::ClusterSpec;
use serde_json::json;

use baremend_testkit as common;

use common::eventually;
use common::kubectl::{Kubectl, MONITORING_CRDS};
use common::lab::{Lab, fast};
use common::scratch;

/// The commands of the README's Quick start block, comments dropped.
fn quick_start() -> Vec<Vec<String>> {
    let readme = std::fs::read_to_string(common::repo_root().join("README.md")).unwrap();
    let section = &readme[readme
        .find("## Quick start")
        .expect("README has a Quick start")..];
    let block = common::fenced_blocks(section, "bash")
        .into_iter()
        .next()
        .expect("a bash block");
    let commands: Vec<Vec<String>> = block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert!(commands.len() >= 3, "{commands:?}");
    for command in &commands {
        assert_eq!(
            command[0], "kubectl",
            "the Quick start is kubectl only: {command:?}"
        );
    }
    commands
}

/// The simulated IPI cluster: OpenShift's machine API with its legacy bare-metal remediation,
/// BareMetalHosts, the Prometheus Operator's kinds, no health check of its own and no
/// policy (the Quick start brings both); kubectl on it.
async fn ipi_cluster(name: &str) -> (Lab, Kubectl) {
    let spec = ClusterSpec {
        legacy_actuator: true,
        health_checks: false,
        ..fast()
    };
    let lab = Lab::builder(spec).without_policy().start().await;
    let kubectl = Kubectl::new(&scratch(name), &lab.cluster.kubeconfig());
    kubectl
        .ok(&["apply", "-f", "-"], Some(MONITORING_CRDS))
        .await;
    (lab, kubectl)
}

/// Shortens the unhealthy timeouts of the worker health check to 2 s (a test cannot wait the
/// shipped five minutes); nothing else of it changes.
async fn quick_health_check(kubectl: &Kubectl) {
    let patch = json!([
        {"op": "replace", "path": "/spec/unhealthyConditions/0/timeout", "value": "2s"},
        {"op": "replace", "path": "/spec/unhealthyConditions/1/timeout", "value": "2s"},
    ])
    .to_string();
    let args = [
        "-n",
        "openshift-machine-api",
        "patch",
        "mhc",
        "baremend-workers",
    ];
    kubectl
        .ok(
            &[&args[..], &["--type", "json", "-p", &patch]].concat(),
            None,
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_as_written_leaves_one_remediator_on_a_hung_worker() {
    let (mut lab, kubectl) = ipi_cluster("quick-start").await;
    for command in quick_start() {
        let args: Vec<&str> = command[1..].iter().map(String::as_str).collect();
        kubectl.ok(&args, None).await;
    }
    quick_health_check(&kubectl).await;
    lab.start_controller(lab.options());

    // Day one, in dry run: the health check asks, baremend records what it would do, and
    // nobody touches the host — the legacy remediation included.
    let before = lab.power_history("worker-0");
    assert!(lab.cluster.hang("worker-0"));
    lab.reach("worker-0-1", RemediationPhase::DryRun).await;
    let listed = kubectl.ok(&["get", "brem", "-A"], None).await;
    assert!(
        listed.contains("worker-0-1") && listed.contains("DryRun"),
        "{listed}"
    );
    lab.hold(Duration::from_secs(3)).await;
    assert_eq!(
        lab.power_history("worker-0"),
        before,
        "a dry run powers nothing"
    );
    assert_eq!(
        lab.cluster.legacy_actions(),
        [],
        "the legacy remediation acted"
    );

    // The switch (docs/guides/operate.md), with quick timeouts: baremend alone power-cycles
    // the next hung worker.
    let patch = json!({"spec": {"mode": "Remediate",
        "timeouts": {"powerOffSeconds": 20, "nodeReadySeconds": 60, "readyGraceSeconds": 1}}});
    let args: Vec<&str> = "patch remediationpolicy default --type merge -p"
        .split(' ')
        .collect();
    kubectl
        .ok(&[&args[..], &[patch.to_string().as_str()]].concat(), None)
        .await;
    let node = lab.node_before("worker-1");
    lab.label("worker-1");
    assert!(lab.cluster.hang("worker-1"));
    let done = lab.ended("worker-1-1").await;
    assert_eq!(
        done.status.map(|s| s.phase),
        Some(RemediationPhase::Succeeded)
    );
    lab.assert_main_path("worker-1", &node);
    assert_eq!(
        lab.cluster.legacy_actions(),
        [],
        "the legacy remediation acted beside baremend"
    );
    lab.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_annotation_overlay_on_ipi_is_failed_by_check_and_does_bring_the_legacy_remediation_in()
{
    let (mut lab, kubectl) = ipi_cluster("annotation-overlay").await;
    let root = common::repo_root();
    kubectl
        .ok(&["apply", "-f", root.join("crds").to_str().unwrap()], None)
        .await;
    let overlay = root.join("deploy/overlays/openshift-annotation");
    kubectl
        .ok(&["apply", "-k", overlay.to_str().unwrap()], None)
        .await;
    let policies = root.join("deploy/policies.yaml");
    kubectl
        .ok(&["create", "-f", policies.to_str().unwrap()], None)
        .await;
    quick_health_check(&kubectl).await;

    let checked = lab.run_baremend(&["check"]).await;
    let stdout = String::from_utf8_lossy(&checked.stdout);
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "{stdout}\n{stderr}");
    let told = stdout
        .lines()
        .find(|l| l.contains("MachineHealthCheck openshift-machine-api/baremend-workers"))
        .unwrap_or_else(|| panic!("{stdout}\n{stderr}"));
    assert!(
        told.starts_with("error: ")
            && told.contains("legacy bare-metal remediation")
            && told.contains("spec.remediationTemplate")
            && told.contains("deploy/overlays/openshift"),
        "{told}"
    );
    assert!(
        stderr.contains("hand Machines to two remediators"),
        "{stderr}"
    );

    // What check warns of: with baremend only in dry run, the legacy remediation
    // power-cycles the hung worker all the same.
    lab.start_controller(lab.options());
    assert!(lab.cluster.hang("worker-0"));
    eventually(
        "the legacy remediation at work",
        Duration::from_secs(30),
        async || {
            let acted = lab.cluster.legacy_actions();
            (acted.len() >= 2).then_some(()).ok_or(format!("{acted:?}"))
        },
    )
    .await;
    lab.stop().await;
}
