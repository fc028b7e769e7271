//! The simulated BareMetal Operator follows metal3-io/baremetal-operator on the reboot API's
//! finer rules: forced keys for hosts not provisioned, `errorCount`, `disablePowerOff`, and
//! what entering provisioning does to the keys (current and 0.13-and-older behaviour). Each
//! test names the upstream file and function it follows.

use std::time::{Duration, Instant};

use baremend_sim::cluster::local::{BMHS, Local};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, REBOOT, SimCluster};
use baremend_sim::host::Power;
use serde_json::{Value, json};

mod common;

use common::eventually;

/// A small fast cluster (one master, one worker).
fn small() -> ClusterSpec {
    ClusterSpec {
        masters: 1,
        workers: 1,
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

async fn start(spec: ClusterSpec) -> (SimCluster, Local) {
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    (cluster, api)
}

fn annotate(api: &Local, host: &str, annotations: Value) {
    let patch = json!({"metadata": {"annotations": annotations}});
    api.merge(BMHS, MACHINE_NAMESPACE, host, &patch, false)
        .unwrap();
}

fn set_status(api: &Local, host: &str, status: Value) {
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        host,
        &json!({"status": status}),
        true,
    )
    .unwrap();
}

fn bmh(api: &Local, host: &str) -> Value {
    api.get(BMHS, MACHINE_NAMESPACE, host).unwrap()
}

/// The Redfish resets the host has seen, in order.
fn resets(cluster: &SimCluster, host: &str) -> Vec<String> {
    cluster
        .redfish()
        .service()
        .stats()
        .resets
        .iter()
        .filter(|r| r.system == host)
        .map(|r| r.reset_type.to_string())
        .collect()
}

/// metal3 `internal/controller/metal3.io/baremetalhost_controller.go`, `manageHostPower`
/// (`hasRebootAnnotation(info, !isProvisioned)`): a host neither provisioned nor externally
/// provisioned honours only reboot keys with `"force": true`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_not_provisioned_honours_only_forced_reboot_keys() {
    let (cluster, api) = start(small()).await;
    set_status(
        &api,
        "worker-0",
        json!({"provisioning": {"state": "available"}}),
    );
    annotate(
        &api,
        "worker-0",
        json!({"reboot.metal3.io/unforced": "{\"mode\":\"hard\"}"}),
    );
    // A negative: 1.5 s of 100 ms passes in which the unforced key powers nothing off.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(cluster.host("worker-0").unwrap().host.power(), Power::On);
    assert!(resets(&cluster, "worker-0").is_empty());
    annotate(
        &api,
        "worker-0",
        json!({"reboot.metal3.io/forced": "{\"mode\":\"hard\",\"force\":true}"}),
    );
    eventually("poweredOn=false", Duration::from_secs(5), async || {
        bmh(&api, "worker-0")["status"]["poweredOn"] == false
    })
    .await;
    assert_eq!(resets(&cluster, "worker-0"), ["ForceOff"]);
}

/// metal3 `baremetalhost_controller.go`, `manageHostPower` ("if ErrorCount > 0 …
/// RebootModeHard") and `setErrorMessage`: a host with errors is powered off hard even for a
/// soft request; reaching the wanted state clears the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_errors_is_powered_off_hard() {
    let (cluster, api) = start(small()).await;
    set_status(&api, "worker-0", json!({"errorCount": 2}));
    annotate(&api, "worker-0", json!({"reboot.metal3.io/soft": ""}));
    eventually("poweredOn=false", Duration::from_secs(5), async || {
        bmh(&api, "worker-0")["status"]["poweredOn"] == false
    })
    .await;
    assert_eq!(
        resets(&cluster, "worker-0"),
        ["ForceOff"],
        "not a graceful shutdown"
    );
    eventually("errorCount cleared", Duration::from_secs(5), async || {
        bmh(&api, "worker-0")["status"]["errorCount"] == 0
    })
    .await;
}

/// metal3 `baremetalhost_controller.go`, `manageHostPower` (with `DisablePowerOff` the power-off
/// "will have rebooted instead", and the suffixless key is removed) and
/// `pkg/provisioner/ironic/ironic.go` `PowerOff` (target `rebooting`): the host is
/// power-cycled and never reported off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_power_off_reboots_instead_and_never_reports_off() {
    let (cluster, api) = start(small()).await;
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        "worker-0",
        &json!({"spec": {"disablePowerOff": true}}),
        false,
    )
    .unwrap();
    annotate(&api, "worker-0", json!({REBOOT: "{\"mode\":\"hard\"}"}));
    let deadline = Instant::now() + Duration::from_secs(8);
    let mut reported_off = false;
    while Instant::now() < deadline && resets(&cluster, "worker-0").len() < 2 {
        reported_off |= bmh(&api, "worker-0")["status"]["poweredOn"] == false;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(resets(&cluster, "worker-0"), ["ForceOff", "On"]);
    assert!(!reported_off, "a reboot is never reported off");
    let annotations = bmh(&api, "worker-0")["metadata"]["annotations"].clone();
    assert!(annotations.get(REBOOT).is_none(), "{annotations}");
    eventually("the host on again", Duration::from_secs(5), async || {
        cluster.host("worker-0").unwrap().host.power() == Power::On
    })
    .await;
}

/// Waits until the host's reboot keys are `expected` (sorted), having put it in provisioning
/// with the suffixless and one suffixed key.
async fn keys_left_in_provisioning(spec: ClusterSpec) -> Vec<String> {
    let (cluster, api) = start(spec).await;
    set_status(
        &api,
        "worker-0",
        json!({"provisioning": {"state": "provisioning"}}),
    );
    annotate(
        &api,
        "worker-0",
        json!({REBOOT: "", "reboot.metal3.io/remediation": "{\"mode\":\"hard\"}"}),
    );
    eventually(
        "the suffixless key dropped",
        Duration::from_secs(5),
        async || {
            bmh(&api, "worker-0")["metadata"]["annotations"]
                .get(REBOOT)
                .is_none()
        },
    )
    .await;
    // A negative: 1 s more of passes, in which nothing else changes and nothing is powered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        resets(&cluster, "worker-0").is_empty(),
        "no power management while provisioning"
    );
    let annotations = bmh(&api, "worker-0")["metadata"]["annotations"].clone();
    let mut keys: Vec<String> = annotations
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with(REBOOT))
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// metal3 `baremetalhost_controller.go`, `clearRebootAnnotations` (called by
/// `actionInspecting`, `actionProvisioning`, `actionDeprovisioning`): since 0.14 only the
/// suffixless key goes; the release-0.13 branch (and older) dropped every reboot key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_drops_the_suffixless_key_and_old_operators_every_key() {
    let current = keys_left_in_provisioning(small()).await;
    assert_eq!(current, ["reboot.metal3.io/remediation"]);
    let old = ClusterSpec {
        bmo_version: (0, 13),
        ..small()
    };
    assert!(keys_left_in_provisioning(old).await.is_empty());
}

/// Hosts registered detached (`hostsDetached`) are the operator's to leave alone from the
/// start, as metal3 leaves a detached host (baremetal-operator
/// `internal/controller/metal3.io/baremetalhost_controller.go`, the `detached` annotation; its
/// Ironic node is deleted, `pkg/provisioner/ironic/ironic.go` `Detach`): reported `detached`,
/// and never a request to their BMCs, where hosts registered attached are read at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_registered_detached_are_left_alone_from_the_start() {
    let bmc_requests = async |hosts_detached: bool| {
        let (cluster, api) = start(ClusterSpec {
            hosts_detached,
            ..small()
        })
        .await;
        // Several of the operator's passes.
        tokio::time::sleep(small().timing.bmo_period * 5).await;
        let statuses: Vec<Value> = ["master-0", "worker-0"]
            .iter()
            .map(|h| bmh(&api, h)["status"]["operationalStatus"].clone())
            .collect();
        (cluster.redfish().service().stats().requests, statuses)
    };
    let (requests, statuses) = bmc_requests(true).await;
    assert_eq!(requests, 0);
    assert_eq!(statuses, [json!("detached"), json!("detached")]);
    let (requests, statuses) = bmc_requests(false).await;
    assert!(requests > 0, "the attached hosts' BMCs were never read");
    assert_eq!(statuses, [json!("OK"), json!("OK")]);
}
