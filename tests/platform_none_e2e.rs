//! Nodes without Machines end to end (platform none, UPI bare metal): a medik8s
//! NodeHealthCheck's `NodeRemediation` named after the Node is the trigger, and a `HostBmc`
//! naming the Node is the only way to its host. On the simulated cluster's platform-none
//! flavour (Nodes, one `HostBmc` and Secret per host, no Machines or BareMetalHosts), with the
//! controller on a real kube client.

use std::time::Duration;

use baremend::api::{FenceStrategyName, Remediation, RemediationPhase, TriggerKind};
use baremend_sim::cluster::local::{HOST_BMCS, MACHINES};
use baremend_sim::cluster::nhc::{NODE_REMEDIATION_TEMPLATES, NODE_REMEDIATIONS};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, NHC_NAMESPACE};
use baremend_sim::host::Power;
use serde_json::{Value, json};

use baremend_testkit as common;

use common::events::{told_on, told_on_times};
use common::eventually;
use common::lab::{Lab, fast, fast_policy, request_has as has, steps};

/// A platform-none cluster whose NodeHealthCheck gives baremend `escalation` before it moves
/// on, with baremend's template in place, the policy `policy`, and the controller started
/// after `prepare`.
async fn start(escalation: Duration, policy: Value, prepare: impl FnOnce(&Lab)) -> Lab {
    let spec = ClusterSpec {
        platform_none: true,
        node_health_check: true,
        escalation_timeout: escalation,
        ..fast()
    };
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    lab.baremend_node_template();
    prepare(&lab);
    let options = lab.options();
    lab.start_controller(options);
    lab
}

/// What these tests ask of the lab beyond the kit.
trait PlatformNoneChecks {
    fn remediations_of_node(&self, node: &str) -> Vec<String>;
}

impl PlatformNoneChecks for Lab {
    /// The names of the Remediations of Node subject `node`.
    fn remediations_of_node(&self, node: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .api
            .list(common::lab::REMEDIATIONS, Some(MACHINE_NAMESPACE))
            .into_iter()
            .filter_map(|r| serde_json::from_value::<Remediation>(r).ok())
            .filter(|r| r.spec.machine_name.is_none() && r.spec.node_name.as_deref() == Some(node))
            .map(|r| r.metadata.name.unwrap_or_default())
            .collect();
        names.sort();
        names
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_node_without_a_machine_is_fenced_through_its_host_bmc_and_comes_back() {
    let lab = start(Duration::from_secs(60), fast_policy(), |_| {}).await;
    assert!(
        lab.api.list(MACHINES, None).is_empty(),
        "a cluster without Machines"
    );
    lab.cluster.hang("worker-0");
    // The Node is deleted on the way: the health check is told to keep its request.
    lab.node_request_where("worker-0", "Processing, Node deletion expected", |r| {
        has(r, "Processing", "True", None) && has(r, "PermanentNodeDeletionExpected", "True", None)
    })
    .await;
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert_eq!(done.spec.machine_name, None);
    assert_eq!(done.spec.node_name.as_deref(), Some("worker-0"));
    assert_eq!(done.spec.host_bmc.as_deref(), Some("worker-0"));
    assert_eq!(done.spec.host, None);
    assert_eq!(
        done.spec.trigger.as_ref().map(|t| t.kind),
        Some(TriggerKind::NodeRemediation)
    );
    let owner = &done.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("HostBmc", "worker-0")
    );
    // Straight to the BMC: a Node without a Machine has no BareMetalHost to ask.
    let status = done.status.clone().unwrap();
    assert_eq!(status.strategy, Some(FenceStrategyName::DirectBmc.into()));
    let steps = steps(&done);
    assert!(!steps.contains(&"Escalated".to_string()), "{steps:?}");
    let fenced = steps.iter().position(|s| s == "Fenced").unwrap();
    let deleted = steps.iter().position(|s| s == "NodeDeleted").unwrap();
    assert!(fenced < deleted, "{steps:?}");
    let history = lab.power_history("worker-0");
    assert!(history.contains(&Power::Off), "{history:?}");
    assert_eq!(history.last(), Some(&Power::On));
    assert!(lab.node_exists("worker-0"));
    // Without a Machine, the steps are told on the Node (its Events in `default`).
    let node = ("Node", "worker-0");
    told_on(&lab.api, "default", node, "Fenced", "is proven off").await;
    // The health check withdraws the request once the Node is healthy; nothing starts again.
    lab.node_request_withdrawn("worker-0").await;
    assert_eq!(lab.remediations_of_node("worker-0"), vec!["worker-0-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_timeout_before_the_proof_leaves_nothing_destructive_on_a_node_without_a_machine()
 {
    let lab = start(Duration::from_secs(2), fast_policy(), |lab| {
        lab.stuck_power("worker-1", true)
    })
    .await;
    lab.cluster.hang("worker-1");
    let cancelled = lab.reach("worker-1-1", RemediationPhase::Cancelled).await;
    assert!(steps(&cancelled).contains(&"PowerOffWithdrawn".to_string()));
    lab.node_request_where("worker-1", "told of the timeout", |r| {
        has(r, "Succeeded", "False", Some("RemediationTimedOutByNhc"))
            && has(r, "Processing", "False", None)
    })
    .await;
    assert!(lab.node_exists("worker-1"), "the Node is never released");
    assert_eq!(lab.remediations_of_node("worker-1"), vec!["worker-1-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_timeout_after_the_proof_powers_the_host_on_and_restores_the_node_without_a_machine()
 {
    // The template keeps the Node (out-of-service taint), which the policy lets requests
    // choose: the host is proven off and the Node tainted well within the escalation, whose
    // timeout then passes while the host is off.
    let mut policy = fast_policy();
    policy["trust"] = json!({"requestMayChooseNodeRelease": true});
    let lab = start(Duration::from_secs(60), policy, |_| {}).await;
    lab.api
        .merge(
            NODE_REMEDIATION_TEMPLATES,
            NHC_NAMESPACE,
            "baremend",
            &json!({"spec": {"template": {"spec": {"nodeRelease": "OutOfService"}}}}),
            false,
        )
        .unwrap();
    lab.stuck_power("worker-2", false);
    lab.cluster.hang("worker-2");
    lab.reach("worker-2-1", RemediationPhase::PoweringOn).await;
    let patch = json!({"metadata": {"annotations": {"remediation.medik8s.io/nhc-timed-out": "2026-11-24T10:00:00Z"}}});
    lab.api
        .merge(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-2", &patch, false)
        .unwrap();
    let done = lab.reach("worker-2-1", RemediationPhase::Succeeded).await;
    assert!(steps(&done).contains(&"NodeTainted".to_string()));
    assert_eq!(lab.power_history("worker-2").last(), Some(&Power::On));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_without_machines_count_in_the_storm_gate() {
    let policy = json!({
        "timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30, "readyGraceSeconds": 1},
        "maxConcurrent": 5,
        "storm": {"maxUnhealthyPercent": 10},
    });
    let lab = start(Duration::from_secs(60), policy, |_| {}).await;
    lab.cluster.hang("worker-0");
    lab.cluster.hang("worker-1");
    let status = lab.held_with("worker-0-1", "storm: 2 of 6").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(!lab.power_history("worker-0").contains(&Power::Off));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_node_without_a_machine_is_held_when_fencing_would_break_etcd_quorum() {
    let lab = start(Duration::from_secs(60), fast_policy(), |_| {}).await;
    lab.cluster.hang("master-0");
    lab.cluster.hang("master-1");
    lab.node_ready_is("master-1", "Unknown").await;
    // The workers' health check does not select the masters: a control-plane one would ask.
    lab.node_request("master-0", json!({}));
    let status = lab.held_with("master-0-1", "etcd quorum").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(lab.node_exists("master-0"));
    assert!(!lab.power_history("master-0").contains(&Power::Off));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_bmcs_of_one_node_are_both_unused_until_one_is_deleted() {
    let lab = start(Duration::from_secs(60), fast_policy(), |lab| {
        let mut second = lab
            .api
            .get(HOST_BMCS, MACHINE_NAMESPACE, "worker-0")
            .unwrap();
        second["metadata"] = json!({"name": "worker-0-again", "namespace": MACHINE_NAMESPACE});
        lab.api
            .create(HOST_BMCS, MACHINE_NAMESPACE, second)
            .unwrap();
    })
    .await;
    // Neither is used: "the oldest wins" would let whoever came first decide the host.
    for name in ["worker-0", "worker-0-again"] {
        let says = "2 HostBmcs name Node worker-0";
        told_on(
            &lab.api,
            MACHINE_NAMESPACE,
            ("HostBmc", name),
            "ContestedNode",
            says,
        )
        .await;
        eventually(
            &format!("{name} refused as contested"),
            Duration::from_secs(20),
            async || {
                let object = lab.api.get(HOST_BMCS, MACHINE_NAMESPACE, name).unwrap();
                object["status"]["conditions"][0]["reason"] == "ContestedNode"
            },
        )
        .await;
    }
    lab.cluster.hang("worker-0");
    lab.node_request_where("worker-0", "the NodeHealthCheck's request", |_| true)
        .await;
    lab.hold(Duration::from_secs(2)).await;
    assert!(lab.remediations_of_node("worker-0").is_empty());
    assert!(!lab.power_history("worker-0").contains(&Power::Off));
    // The wrong one deleted, the other is the Node's subject again and remediates it once.
    lab.api
        .delete(HOST_BMCS, MACHINE_NAMESPACE, "worker-0-again", None)
        .unwrap();
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert_eq!(done.spec.host_bmc.as_deref(), Some("worker-0"));
    assert_eq!(lab.remediations_of_node("worker-0"), vec!["worker-0-1"]);
    let kept = lab
        .api
        .get(HOST_BMCS, MACHINE_NAMESPACE, "worker-0")
        .unwrap();
    assert_eq!(
        kept["status"]["conditions"][0]["status"], "True",
        "{kept:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_a_node_without_a_machine_probes_its_bmc_and_changes_nothing() {
    let mut policy = fast_policy();
    policy["mode"] = json!("DryRun");
    let lab = start(Duration::from_secs(60), policy, |_| {}).await;
    lab.cluster.hang("worker-0");
    let done = lab.reach("worker-0-1", RemediationPhase::DryRun).await;
    let status = done.status.unwrap();
    let dry = status
        .conditions
        .iter()
        .find(|c| c.type_ == "DryRun")
        .cloned()
        .unwrap();
    assert_eq!(
        (dry.status.as_str(), dry.reason.as_str()),
        ("True", "WouldFence"),
        "{dry:?}"
    );
    for told in [
        "would fence with DirectBmc, then delete Node worker-0",
        "probes: DirectBmc answered",
        "logged in, system power On",
        "nothing was changed",
    ] {
        assert!(dry.message.contains(told), "{told:?} in {:?}", dry.message);
    }
    assert!(!dry.message.contains("BareMetalHostRebootApi"), "{dry:?}");
    // The Event comes after the status it tells (persisted first).
    told_on_times(
        &lab.api,
        "default",
        ("Node", "worker-0"),
        "DryRun",
        "would fence with DirectBmc, then delete Node worker-0",
        1,
    )
    .await;
    assert!(!lab.power_history("worker-0").contains(&Power::Off));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_machine_whose_bmc_certificate_is_refused_fails_at_its_power_off_deadline()
{
    // A refused certificate is a failure no retry mends. The remediation still has its
    // power-off deadline, which a pass must see although nothing about the Node changes:
    // a failed pass under way is looked at again within 10 s, not after 5 minutes.
    let ca = baremend_sim::tls::TestCa::generate("a CA the system roots do not know").unwrap();
    let lab = start(Duration::from_secs(120), fast_policy(), |_| {}).await;
    let (bmc, address) = lab.tls_bmc("worker-2", &ca).await;
    lab.api
        .merge(
            HOST_BMCS,
            MACHINE_NAMESPACE,
            "worker-2",
            &json!({"spec": {"address": address}}),
            false,
        )
        .unwrap();
    lab.cluster.hang("worker-2");
    let failed = lab.reach("worker-2-1", RemediationPhase::Failed).await;
    let error = failed
        .status
        .clone()
        .unwrap()
        .last_error
        .unwrap_or_default();
    assert!(error.contains("TLS verification of BMC"), "{error}");
    assert!(
        !steps(&failed).iter().any(|s| s.starts_with("Node")),
        "{:?}",
        steps(&failed)
    );
    assert!(lab.node_exists("worker-2"), "the Node is never released");
    assert!(lab.power_history("worker-2").is_empty(), "never powered");
    assert_eq!(bmc.service().stats().requests, 0, "the BMC was never asked");
}
