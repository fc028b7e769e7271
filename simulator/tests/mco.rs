//! The simulated Machine Config Operator behaves as the notes describe the real one: drift
//! degrades the node with the MCD's reason, a reverted file heals without a drain or reboot,
//! and a forcefile makes the MCO drain (through evictions that respect PDBs), rewrite,
//! reboot and uncordon.

use std::time::Duration;

use baremend_sim::cluster::local::{EVENTS, Local, MCNS, MCPS, NODES, PDBS, PODS};
use baremend_sim::cluster::mco::disk::SimFile;
use baremend_sim::cluster::mco::{FORCE_FILE, MCO_NAMESPACE};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, SimCluster};
use serde_json::{Value, json};

mod common;

use common::eventually;

/// How long each step of the MCO may take.
const WAIT: Duration = Duration::from_secs(20);

const STATE: &str = "machineconfiguration.openshift.io/state";
const REASON: &str = "machineconfiguration.openshift.io/reason";

async fn cluster() -> (SimCluster, Local) {
    let cluster = SimCluster::start(ClusterSpec {
        masters: 1,
        workers: 2,
        timing: Timing::fast(),
        mco: true,
        ..ClusterSpec::default()
    })
    .await
    .unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    (cluster, api)
}

fn annotation(api: &Local, node: &str, key: &str) -> String {
    api.get(NODES, "", node).unwrap()["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn event_reasons(api: &Local) -> Vec<String> {
    api.list(EVENTS, Some(MCO_NAMESPACE))
        .iter()
        .filter_map(|e| e["reason"].as_str().map(str::to_owned))
        .collect()
}

/// Waits for the daemon's NodeDone Event. The daemon writes its Done state before it
/// posts the Event, so the Event may trail the annotation a test waited for.
async fn node_done_event(api: &Local) {
    eventually("the NodeDone Event", WAIT, async || {
        event_reasons(api).iter().any(|r| r == "NodeDone")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_degrades_the_node_and_a_reverted_file_heals_without_a_reboot() {
    let (cluster, api) = cluster().await;
    eventually("Done", WAIT, async || {
        annotation(&api, "worker-0", STATE) == "Done"
    })
    .await;
    let disk = cluster.disk("worker-0").unwrap();
    let original = disk.get("/etc/demo/rules.json").unwrap();
    disk.put("/etc/demo/rules.json", SimFile::regular(b"{}", 0o644));
    eventually("Degraded", WAIT, async || {
        annotation(&api, "worker-0", STATE) == "Degraded"
    })
    .await;
    assert_eq!(
        annotation(&api, "worker-0", REASON),
        r#"content mismatch for file "/etc/demo/rules.json""#
    );
    let mcn = api.get(MCNS, "", "worker-0").unwrap();
    assert!(
        mcn["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "NodeDegraded" && c["status"] == "True")
    );
    eventually("the prefixed retry reason", WAIT, async || {
        annotation(&api, "worker-0", REASON)
            .starts_with("unexpected on-disk state validating against rendered-worker-")
    })
    .await;
    eventually("pool degraded", WAIT, async || {
        api.get(MCPS, "", "worker").unwrap()["status"]["degradedMachineCount"] == 1
    })
    .await;
    let offs = cluster.host("worker-0").unwrap().host.power_offs();
    disk.put("/etc/demo/rules.json", original);
    eventually("Done again", WAIT, async || {
        annotation(&api, "worker-0", STATE) == "Done"
    })
    .await;
    assert_eq!(annotation(&api, "worker-0", REASON), "");
    assert_eq!(
        cluster.host("worker-0").unwrap().host.power_offs(),
        offs,
        "no reboot"
    );
    node_done_event(&api).await;
    let reasons = event_reasons(&api);
    for reason in ["ConfigDriftDetected", "PreflightConfigDriftCheckFailed"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
    assert!(!reasons.iter().any(|r| r == "Drain"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forcefile_drains_through_evictions_rewrites_reboots_and_uncordons() {
    let (cluster, api) = cluster().await;
    eventually("Done", WAIT, async || {
        annotation(&api, "worker-1", STATE) == "Done"
    })
    .await;
    // A pod on the node, guarded by a PDB that allows no disruption at first.
    api.create(
        PODS,
        "default",
        json!({"metadata": {"name": "db-0", "labels": {"app": "db"}},
        "spec": {"nodeName": "worker-1", "containers": [{"name": "db", "image": "db"}]}}),
    )
    .unwrap();
    api.create(
        PDBS,
        "default",
        json!({"metadata": {"name": "db"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}),
    )
    .unwrap();
    let disk = cluster.disk("worker-1").unwrap();
    disk.chmod("/etc/sysctl.d/90-demo.conf", 0o777);
    eventually("Degraded", WAIT, async || {
        annotation(&api, "worker-1", STATE) == "Degraded"
    })
    .await;
    assert!(
        annotation(&api, "worker-1", REASON)
            .contains("expected: -rw-r--r--/420/0644; received: -rwxrwxrwx/511/0777")
    );
    let offs = cluster.host("worker-1").unwrap().host.power_offs();
    disk.put(FORCE_FILE, SimFile::regular(b"", 0o644));
    let rendered = annotation(
        &api,
        "worker-1",
        "machineconfiguration.openshift.io/currentConfig",
    );
    eventually("drain requested", WAIT, async || {
        annotation(
            &api,
            "worker-1",
            "machineconfiguration.openshift.io/desiredDrain",
        ) == format!("drain-{rendered}")
    })
    .await;
    assert!(
        disk.get(FORCE_FILE).is_none(),
        "the daemon takes the forcefile"
    );
    eventually("cordoned", WAIT, async || {
        api.get(NODES, "", "worker-1").unwrap()["spec"]["unschedulable"] == true
    })
    .await;
    eventually("drain blocked, reported", WAIT, async || {
        api.get(MCNS, "", "worker-1").unwrap()["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| {
                c["type"] == "Drained"
                    && c["status"] == "Unknown"
                    && c["message"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("Cannot evict pod")
            })
    })
    .await;
    assert!(
        api.get(PODS, "default", "db-0").is_ok(),
        "a PDB is never bypassed"
    );
    // The budget lets go: the drain finishes, the node reboots into its config.
    api.merge(
        PDBS,
        "default",
        "db",
        &json!({"spec": {"minAvailable": 0}}),
        false,
    )
    .unwrap();
    eventually("Done after the re-apply", WAIT, async || {
        annotation(&api, "worker-1", STATE) == "Done"
    })
    .await;
    assert!(
        cluster.host("worker-1").unwrap().host.power_offs() > offs,
        "rebooted"
    );
    let node: Value = api.get(NODES, "", "worker-1").unwrap();
    assert_ne!(node["spec"]["unschedulable"], true, "uncordoned");
    assert_eq!(
        cluster
            .disk("worker-1")
            .unwrap()
            .get("/etc/sysctl.d/90-demo.conf")
            .unwrap()
            .st_mode,
        0o100_644
    );
    node_done_event(&api).await;
    let reasons = event_reasons(&api);
    for reason in ["Cordon", "Drain", "Reboot", "Uncordon"] {
        assert!(reasons.iter().any(|r| r == reason), "{reason}: {reasons:?}");
    }
}
