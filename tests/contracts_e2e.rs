//! The remediation contracts end to end: a health check's request (`MachineRemediation`,
//! created from a `MachineRemediationTemplate` named in a MachineHealthCheck's
//! `spec.remediationTemplate`) as a trigger, on the simulated cluster with the controller on a
//! real kube client. The health check's actor creates the request for an unhealthy Machine
//! and deletes it once the Machine is healthy; tests that need the request to stay create it
//! themselves, as a health check would, on a cluster whose health check annotates instead.

use std::time::Duration;

use baremend::api::slim::MachineApi;
use baremend::api::{
    MachineRemediation, NodeRemediation, Remediation, RemediationPhase, TriggerKind,
};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{
    BMHS, CAPI_MACHINES, CAPI_MHCS, EVENTS, HOST_BMCS, MACHINE_REMEDIATIONS, MACHINES, MHCS,
    NAMESPACES, NODES,
};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast, request_has as has, steps};

fn fast_policy() -> Value {
    // The tests make the NodeHealthCheck's requests themselves (no NodeHealthCheck object
    // names the template's namespace), and their templates choose the node release.
    let mut policy = common::lab::fast_policy();
    policy["trust"] = json!({"requestNamespaces": [baremend_sim::cluster::NHC_NAMESPACE], "requestMayChooseNodeRelease": true});
    policy
}

/// Five remediations at once, and the storm gate at `storm_percent`.
fn gated_policy(storm_percent: u32) -> Value {
    let mut policy = fast_policy();
    policy["maxConcurrent"] = json!(5);
    policy["storm"] = json!({"maxUnhealthyPercent": storm_percent});
    policy
}

/// Two of three control-plane hosts hang, and master-0's request (made by `ask`, as a
/// control-plane health check makes it; the workers' one does not select it) is held by the
/// quorum guard.
async fn quorum_would_break(lab: &Lab, ask: impl FnOnce(&Lab)) {
    lab.cluster.hang("master-0");
    lab.cluster.hang("master-1");
    lab.node_ready_is("master-1", "Unknown").await;
    ask(lab);
    let status = lab.held_with("master-0-1", "etcd quorum").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(lab.node_exists("master-0"));
}

/// The lab with the controller started, after `prepare`.
async fn start(spec: ClusterSpec, policy: Value, prepare: impl FnOnce(&Lab)) -> Lab {
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    prepare(&lab);
    let options = lab.options();
    lab.start_controller(options);
    lab
}

/// A cluster whose workers' MachineHealthCheck names the template `baremend`.
fn with_template() -> ClusterSpec {
    ClusterSpec {
        remediation_template: Some("baremend".into()),
        ..fast()
    }
}

/// What these tests ask of the lab beyond the kit.
trait RequestChecks {
    fn request_object(&self, machine: &str) -> Option<MachineRemediation>;
    async fn request_reports(&self, machine: &str, phase: RemediationPhase) -> MachineRemediation;
    fn remediations_of(&self, machine: &str) -> Vec<String>;
    async fn request_deleted_while_powering_off(&self, machine: &str) -> Remediation;
    async fn withdrawn_after_one_remediation(&self, machine: &str);
    fn no_reboot_request(&self, host: &str) -> bool;
}

impl RequestChecks for Lab {
    /// The Machine's request, if it has one.
    fn request_object(&self, machine: &str) -> Option<MachineRemediation> {
        let value = self
            .api
            .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, machine)
            .ok()?;
        Some(serde_json::from_value(value).unwrap())
    }

    /// The Machine's request once its status says `phase`; fails after 30 s.
    async fn request_reports(&self, machine: &str, phase: RemediationPhase) -> MachineRemediation {
        eventually(
            &format!("request {machine} reports {phase:?}"),
            Duration::from_secs(30),
            async || match self.request_object(machine) {
                Some(r) if r.status.as_ref().and_then(|s| s.phase) == Some(phase) => Ok(r),
                other => Err(format!("{other:?}")),
            },
        )
        .await
    }

    fn remediations_of(&self, machine: &str) -> Vec<String> {
        self.api
            .list(common::lab::REMEDIATIONS, Some(MACHINE_NAMESPACE))
            .iter()
            .filter(|r| r["spec"]["machineName"] == machine)
            .filter_map(|r| r["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Deletes the Machine's request once its remediation is powering off; returns the
    /// remediation once it is Cancelled with the power-off withdrawn.
    async fn request_deleted_while_powering_off(&self, machine: &str) -> Remediation {
        let name = format!("{machine}-1");
        self.reach(&name, RemediationPhase::PoweringOff).await;
        self.api
            .delete(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, machine, None)
            .unwrap();
        let cancelled = self.reach(&name, RemediationPhase::Cancelled).await;
        assert!(steps(&cancelled).contains(&"PowerOffWithdrawn".to_string()));
        cancelled
    }

    /// The health check withdraws the Machine's request once it is healthy again, and the
    /// request started exactly one remediation; fails after 20 s.
    async fn withdrawn_after_one_remediation(&self, machine: &str) {
        eventually(
            "the request withdrawn",
            Duration::from_secs(20),
            async || self.request_object(machine).is_none(),
        )
        .await;
        assert_eq!(self.remediations_of(machine), vec![format!("{machine}-1")]);
    }

    fn no_reboot_request(&self, host: &str) -> bool {
        let bmh = self.api.get(BMHS, MACHINE_NAMESPACE, host).unwrap();
        bmh["metadata"]["annotations"]
            .as_object()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("reboot.metal3.io/")))
    }
}

/// The Cluster API flavour: `cluster.x-k8s.io` Machines, Metal3Machines, a Cluster API
/// MachineHealthCheck naming the template `baremend` (which exists, empty); the controller on
/// that Machine API.
async fn start_cluster_api(spec: ClusterSpec, policy: Value, prepare: impl FnOnce(&Lab)) -> Lab {
    let spec = ClusterSpec {
        cluster_api: true,
        ..spec
    };
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    lab.machine_template(json!({}));
    prepare(&lab);
    let options = ControllerOptions {
        machine_api: MachineApi::ClusterApi,
        ..lab.options()
    };
    lab.start_controller(options);
    lab
}

fn trigger_of(remediation: &Remediation) -> (TriggerKind, Option<String>) {
    let trigger = remediation
        .spec
        .trigger
        .clone()
        .expect("a recorded trigger");
    (trigger.kind, trigger.uid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_request_is_remediated_with_its_template_and_withdrawn_when_healthy() {
    // The template narrows the policy: keep the Node, tainted out-of-service.
    let lab = start(with_template(), fast_policy(), |lab| {
        lab.machine_template(json!({"nodeRelease": "OutOfService"}));
    })
    .await;
    let node_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    lab.cluster.hang("worker-0");
    let request = eventually(
        "the request answered",
        Duration::from_secs(30),
        async || match lab.request_object("worker-0") {
            Some(r)
                if r.status.as_ref().and_then(|s| s.remediation.as_deref())
                    == Some("worker-0-1") =>
            {
                Ok(r)
            }
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert_eq!(
        trigger_of(&done),
        (
            TriggerKind::MachineRemediation,
            request.metadata.uid.clone()
        )
    );
    let steps = steps(&done);
    assert!(steps.contains(&"NodeTainted".to_string()), "{steps:?}");
    assert!(!steps.contains(&"NodeDeleted".to_string()), "{steps:?}");
    assert_eq!(
        lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"],
        node_uid,
        "the template's nodeRelease kept the Node"
    );
    // The health check deletes the request once the Machine is healthy again.
    lab.withdrawn_after_one_remediation("worker-0").await;
    assert!(lab.no_reboot_request("worker-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_with_a_request_and_the_annotation_is_remediated_once_and_never_again() {
    // This cluster's health check annotates the Machine too; the request stays until the
    // test deletes it, as a health check keeps it until it sees the Machine healthy.
    let lab = start(fast(), fast_policy(), |_| {}).await;
    lab.request("worker-0");
    lab.cluster.hang("worker-0");
    let request = lab
        .request_reports("worker-0", RemediationPhase::Succeeded)
        .await;
    let done = lab.remediation("worker-0-1").unwrap();
    assert_eq!(
        trigger_of(&done),
        (
            TriggerKind::MachineRemediation,
            request.metadata.uid.clone()
        )
    );
    // A negative: for 2 s, many passes of a 100 ms poll, the request that stays starts no
    // second remediation; no condition to wait for proves that nothing happens.
    lab.hold(Duration::from_secs(2)).await;
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
    let host = &lab.cluster.host("worker-0").unwrap().host;
    assert_eq!(host.power(), baremend_sim::host::Power::On);
}

/// The kit's own negative: the window above, with the controller dead (ended unseen, as a
/// panic in its task would end it), fails instead of passing. Before the kit watched the
/// task, the same two seconds passed: no second remediation, the host on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_controller_fails_the_negative_window_it_would_have_passed() {
    let lab = start(fast(), fast_policy(), |_| {}).await;
    lab.request("worker-0");
    lab.cluster.hang("worker-0");
    lab.request_reports("worker-0", RemediationPhase::Succeeded)
        .await;
    lab.die_unseen().await;
    // What the window asserts still holds: a dead controller starts nothing either.
    let window = tokio::spawn(async move {
        lab.hold(Duration::from_secs(2)).await;
        assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
    });
    let failed = window
        .await
        .expect_err("the window passed with the controller dead");
    let message = common::lab::why(failed);
    assert!(
        message.contains("the controller is not running: its task was cancelled"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_deleted_before_the_proof_cancels_and_withdraws_the_power_off() {
    let lab = start(fast(), fast_policy(), |lab| {
        lab.stuck_power("worker-0", true)
    })
    .await;
    lab.request("worker-0");
    lab.request_deleted_while_powering_off("worker-0").await;
    assert!(lab.no_reboot_request("worker-0"));
    assert!(lab.node_exists("worker-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_deleted_after_the_proof_still_completes_the_cycle() {
    let lab = start(fast(), fast_policy(), |_| {}).await;
    lab.request("worker-0");
    lab.reach("worker-0-1", RemediationPhase::PoweringOn).await;
    lab.api
        .delete(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, "worker-0", None)
        .unwrap();
    lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    let host = &lab.cluster.host("worker-0").unwrap().host;
    assert_eq!(host.power(), baremend_sim::host::Power::On);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_count_in_the_storm_gate() {
    let policy = gated_policy(10);
    let lab = start(fast(), policy, |_| {}).await;
    lab.request("worker-0");
    lab.request("worker-1");
    let status = lab.held_with("worker-0-1", "storm: 2 of 6").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(lab.node_exists("worker-0") && lab.node_exists("worker-1"));
    assert!(lab.no_reboot_request("worker-0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_request_is_held_when_fencing_would_break_etcd_quorum() {
    let lab = start(fast(), gated_policy(100), |_| {}).await;
    quorum_would_break(&lab, |lab| lab.request("master-0")).await;
    let request = lab
        .request_reports("master-0", RemediationPhase::Pending)
        .await;
    assert_eq!(
        request.status.unwrap().remediation.as_deref(),
        Some("master-0-1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_api_machine_is_resolved_through_its_metal3_machine_and_remediated() {
    let lab = start_cluster_api(fast(), fast_policy(), |lab| {
        // Nothing of OpenShift's Machine API is left to find the host through.
        assert!(
            lab.api
                .get(MACHINES, MACHINE_NAMESPACE, "worker-0")
                .is_err()
        );
    })
    .await;
    let node_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    lab.cluster.api_server().record_requests();
    lab.cluster.hang("worker-0");
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert_eq!(
        done.spec.host.as_deref(),
        Some("openshift-machine-api/worker-0"),
        "the host whose spec.consumerRef names the Machine's Metal3Machine"
    );
    // Found in the hosts' cache: the start read no Metal3Machine before its creation (the
    // fresh read of the host before the power-off judged the claim).
    let metal3_reads: Vec<String> = lab
        .cluster
        .api_server()
        .recorded_requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.contains("/metal3machines/"))
        .map(|r| r.path)
        .collect();
    assert!(metal3_reads.is_empty(), "{metal3_reads:?}");
    assert_eq!(done.spec.node_name.as_deref(), Some("worker-0"));
    assert_eq!(trigger_of(&done).0, TriggerKind::MachineRemediation);
    let owner = &done.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.api_version.as_str(), owner.kind.as_str()),
        ("cluster.x-k8s.io/v1beta1", "Machine")
    );
    assert!(steps(&done).contains(&"NodeDeleted".to_string()));
    assert_ne!(
        lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"],
        node_uid,
        "a new Node registered"
    );
    assert!(lab.no_reboot_request("worker-0"));
    // The Cluster API health check withdraws its request once the Machine is healthy.
    lab.withdrawn_after_one_remediation("worker-0").await;
    // The Events name the Cluster API Machine (they follow the persisted phase).
    eventually(
        "a Succeeded Event on the Cluster API Machine",
        Duration::from_secs(10),
        async || {
            let events = lab.api.list(EVENTS, Some(MACHINE_NAMESPACE));
            events
                .iter()
                .any(|e| {
                    e["reason"] == "Succeeded"
                        && e["involvedObject"]["kind"] == "Machine"
                        && e["involvedObject"]["apiVersion"] == "cluster.x-k8s.io/v1beta1"
                })
                .then_some(())
                .ok_or(format!("{events:?}"))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_api_request_deleted_before_the_proof_cancels_even_when_made_again() {
    // The host never powers off; the health check makes its request again at once.
    let lab = start_cluster_api(fast(), fast_policy(), |lab| {
        lab.stuck_power("worker-0", true)
    })
    .await;
    lab.cluster.hang("worker-0");
    let cancelled = lab.request_deleted_while_powering_off("worker-0").await;
    assert!(!steps(&cancelled).contains(&"NodeDeleted".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_api_requests_count_in_the_storm_gate() {
    let policy = gated_policy(10);
    let spec = ClusterSpec {
        max_unhealthy: "100%".into(),
        ..fast()
    };
    let lab = start_cluster_api(spec, policy, |_| {}).await;
    lab.cluster.hang("worker-0");
    lab.cluster.hang("worker-1");
    let status = lab.held_with("worker-0-1", "storm: 2 of 6").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(lab.node_exists("worker-0") && lab.node_exists("worker-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_api_control_plane_machine_is_held_when_fencing_would_break_etcd_quorum() {
    let lab = start_cluster_api(fast(), gated_policy(100), |_| {}).await;
    quorum_would_break(&lab, |lab| lab.request("master-0")).await;
}

/// Cluster API keeps a Machine's Node in its workload cluster, reached through the Cluster's
/// kubeconfig Secret: a Machine of a Cluster whose Nodes are not here, and whose Secret does not
/// exist, is held (`WorkloadCluster`) before any power request, while the Machines of the
/// self-hosted Cluster (no Secret needed) are remediated as ever (docs/guides/install.md,
/// "Cluster API").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_clusters_machine_is_held_and_the_self_hosted_clusters_is_remediated() {
    // Two Machines unhealthy at once: the health check must not short-circuit.
    let spec = ClusterSpec {
        max_unhealthy: "100%".into(),
        ..fast()
    };
    let lab = start_cluster_api(spec, gated_policy(100), |lab| {
        // worker-2 becomes the one Machine of Cluster edge-1, whose Nodes live in edge-1's
        // own API server; edge-1 gets its health check (Cluster API's looks only at the
        // Machines of its `spec.clusterName`), which, reading this server, finds no Node and
        // asks for its remediation.
        let mut mhc = lab
            .api
            .get(CAPI_MHCS, MACHINE_NAMESPACE, "workers")
            .unwrap();
        mhc["metadata"] = json!({"name": "edge-1-workers"});
        mhc["spec"]["clusterName"] = json!("edge-1");
        mhc.as_object_mut().unwrap().remove("status");
        lab.api
            .create(CAPI_MHCS, MACHINE_NAMESPACE, mhc)
            .unwrap();
        let cluster = json!({
            "metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "edge-1"}},
            "spec": {"clusterName": "edge-1"},
        });
        let node = json!({"status": {"nodeRef": {"apiVersion": "v1", "kind": "Node", "name": "edge-1-worker-0"}}});
        for (patch, status) in [(cluster, false), (node, true)] {
            lab.api
                .merge(CAPI_MACHINES, MACHINE_NAMESPACE, "worker-2", &patch, status)
                .unwrap();
        }
    })
    .await;
    lab.cluster.hang("worker-0");
    let held = lab
        .held_with(
            "worker-2-1",
            "workload cluster openshift-machine-api/edge-1, where Node edge-1-worker-0 lives, cannot be reached: its Cluster openshift-machine-api/edge-1 does not exist",
        )
        .await;
    assert_eq!(held.phase, RemediationPhase::Pending);
    common::lab::metric(
        &lab,
        "baremend_remediations_held{gate=\"WorkloadCluster\"} 1",
    )
    .await;
    // The self-hosted Cluster's Machine goes through its whole cycle meanwhile.
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert!(steps(&done).contains(&"NodeDeleted".to_string()));
    let still = lab
        .remediation("worker-2-1")
        .and_then(|r| r.status)
        .unwrap();
    assert_eq!(still.phase, RemediationPhase::Pending, "{still:?}");
    assert!(
        lab.power_history("worker-2").is_empty(),
        "no power request for a Machine of the workload cluster"
    );
}

use baremend_sim::cluster::NHC_NAMESPACE;
use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;

/// A cluster with Machines and no MachineHealthCheck, where the test makes the
/// NodeHealthCheck's requests: medik8s disables a NodeHealthCheck while a custom
/// MachineHealthCheck exists (`internal/controller/mhc/checker.go`), so a real one runs only on
/// a cluster without any.
async fn start_nhc(policy: Value, prepare: impl FnOnce(&Lab)) -> Lab {
    start(fast(), policy, |lab| {
        lab.api
            .delete(MHCS, MACHINE_NAMESPACE, "workers", None)
            .unwrap();
        lab.api
            .create(NAMESPACES, "", json!({"metadata": {"name": NHC_NAMESPACE}}))
            .unwrap();
        prepare(lab);
    })
    .await
}

/// What these tests ask of the lab beyond the kit.
trait NodeRequestChecks {
    fn time_out(&self, node: &str);
    async fn succeeded_through(&self, name: &str, kind: TriggerKind) -> Remediation;
    async fn told_of_the_timeout(&self, node: &str) -> NodeRemediation;
}

impl NodeRequestChecks for Lab {
    /// Marks the request timed out, as the NodeHealthCheck does when it escalates.
    fn time_out(&self, node: &str) {
        let patch = json!({"metadata": {"annotations": {"remediation.medik8s.io/nhc-timed-out": "2026-11-24T10:00:00Z"}}});
        self.api
            .merge(NODE_REMEDIATIONS, NHC_NAMESPACE, node, &patch, false)
            .unwrap();
    }
    /// The Remediation once Succeeded, having recorded a trigger of `kind`.
    async fn succeeded_through(&self, name: &str, kind: TriggerKind) -> Remediation {
        let done = self.reach(name, RemediationPhase::Succeeded).await;
        assert_eq!(done.spec.trigger.clone().map(|t| t.kind), Some(kind));
        done
    }

    /// The Node's request once it says the remediation stopped on the health check's timeout.
    async fn told_of_the_timeout(&self, node: &str) -> NodeRemediation {
        self.node_request_where(node, "told of the timeout", |r| {
            has(r, "Succeeded", "False", Some("RemediationTimedOutByNhc"))
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_health_check_request_is_remediated_with_the_contracts_conditions() {
    let lab = start_nhc(fast_policy(), |_| {}).await;
    lab.node_request("worker-0", json!({}));
    lab.cluster.hang("worker-0");
    // While the Node is deleted on the way, the health check is told to keep the request.
    lab.node_request_where("worker-0", "Processing, Node deletion expected", |r| {
        has(r, "Processing", "True", None) && has(r, "PermanentNodeDeletionExpected", "True", None)
    })
    .await;
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    let trigger = done.spec.trigger.clone().unwrap();
    assert_eq!(trigger.kind, TriggerKind::NodeRemediation);
    assert_eq!(trigger.namespace.as_deref(), Some(NHC_NAMESPACE));
    assert!(steps(&done).contains(&"NodeDeleted".to_string()));
    let request = lab
        .node_request_where("worker-0", "Succeeded", |r| {
            has(r, "Succeeded", "True", None)
        })
        .await;
    assert!(has(&request, "Processing", "False", None), "{request:?}");
    assert!(has(
        &request,
        "PermanentNodeDeletionExpected",
        "False",
        None
    ));
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_timeout_before_the_proof_stops_cleanly_and_says_so() {
    let lab = start_nhc(fast_policy(), |lab| lab.stuck_power("worker-0", true)).await;
    lab.node_request("worker-0", json!({}));
    lab.reach("worker-0-1", RemediationPhase::PoweringOff).await;
    lab.time_out("worker-0");
    let cancelled = lab.reach("worker-0-1", RemediationPhase::Cancelled).await;
    assert!(steps(&cancelled).contains(&"PowerOffWithdrawn".to_string()));
    let request = lab.told_of_the_timeout("worker-0").await;
    assert!(has(&request, "Processing", "False", None), "{request:?}");
    assert!(lab.no_reboot_request("worker-0"));
    assert!(lab.node_exists("worker-0"));
    // The timed-out request starts nothing again.
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalation_timeout_after_the_proof_powers_the_host_on_and_restores_the_node() {
    // The template keeps the Node (out-of-service): no deletion is expected.
    let lab = start_nhc(fast_policy(), |_| {}).await;
    lab.node_request("worker-0", json!({"nodeRelease": "OutOfService"}));
    lab.reach("worker-0-1", RemediationPhase::PoweringOn).await;
    lab.time_out("worker-0");
    lab.node_request_where("worker-0", "completing after the timeout", |r| {
        has(r, "Processing", "True", Some("CompletingAfterTimeout"))
            || has(r, "Succeeded", "True", None)
    })
    .await;
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert!(steps(&done).contains(&"NodeTainted".to_string()));
    let host = &lab.cluster.host("worker-0").unwrap().host;
    assert_eq!(host.power(), baremend_sim::host::Power::On);
    let request = lab
        .node_request_where("worker-0", "Succeeded", |r| {
            has(r, "Succeeded", "True", None)
        })
        .await;
    assert!(has(
        &request,
        "PermanentNodeDeletionExpected",
        "False",
        None
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_health_check_requests_count_in_the_storm_gate() {
    let lab = start_nhc(gated_policy(10), |_| {}).await;
    lab.node_request("worker-0", json!({}));
    lab.node_request("worker-1", json!({}));
    let status = lab.held_with("worker-0-1", "storm: 2 of 6").await;
    assert_eq!(status.phase, RemediationPhase::Pending);
    assert!(lab.no_reboot_request("worker-0"));
}

/// A cluster whose workers are watched by a medik8s NodeHealthCheck (baremend's template
/// first, for `escalation`), with the template in place and the controller started.
async fn start_node_health_check(escalation: Duration, prepare: impl FnOnce(&Lab)) -> Lab {
    let spec = ClusterSpec {
        node_health_check: true,
        escalation_timeout: escalation,
        ..fast()
    };
    start(spec, fast_policy(), |lab| {
        lab.baremend_node_template();
        prepare(lab);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_health_check_keeps_its_request_while_baremend_deletes_the_node_and_withdraws_it_after()
 {
    let lab = start_node_health_check(Duration::from_secs(60), |_| {}).await;
    lab.cluster.hang("worker-0");
    // The Node is gone on the way; the request says the deletion is expected, so the health
    // check keeps it instead of taking the Node for deleted.
    eventually(
        "the request kept while the Node is gone",
        Duration::from_secs(30),
        async || {
            !lab.node_exists("worker-0")
                && lab
                    .api
                    .get(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-0")
                    .is_ok()
        },
    )
    .await;
    lab.succeeded_through("worker-0-1", TriggerKind::NodeRemediation)
        .await;
    lab.node_request_withdrawn("worker-0").await;
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generate_named_node_health_check_request_is_remediated_through_its_node_annotation() {
    // medik8s `internal/controller/resources/manager.go`, `generateRemediationCR`: a template
    // with multiple-templates support gets requests named `<node>-<random>`, naming their
    // Node only in `remediation.medik8s.io/node-name`.
    let lab = start_node_health_check(Duration::from_secs(60), |lab| {
        let patch = json!({"metadata": {"annotations": {
            "remediation.medik8s.io/multiple-templates-support": "true"}}});
        lab.api
            .merge(
                baremend_sim::cluster::nhc::NODE_REMEDIATION_TEMPLATES,
                NHC_NAMESPACE,
                "baremend",
                &patch,
                false,
            )
            .unwrap();
    })
    .await;
    lab.cluster.hang("worker-0");
    let name = eventually(
        "the request naming worker-0",
        Duration::from_secs(30),
        async || {
            lab.api
                .list(NODE_REMEDIATIONS, Some(NHC_NAMESPACE))
                .into_iter()
                .find(|r| {
                    r["metadata"]["annotations"]["remediation.medik8s.io/node-name"] == "worker-0"
                })
                .and_then(|r| r["metadata"]["name"].as_str().map(str::to_owned))
        },
    )
    .await;
    assert!(
        name.starts_with("worker-0-") && name != "worker-0",
        "{name}"
    );
    let done = lab
        .succeeded_through("worker-0-1", TriggerKind::NodeRemediation)
        .await;
    assert_eq!(
        done.spec.trigger.unwrap().name.as_deref(),
        Some(name.as_str())
    );
    // Healthy again, the NodeHealthCheck withdraws it (found by its annotations, not its name).
    eventually(
        "the request withdrawn",
        Duration::from_secs(30),
        async || {
            lab.api
                .get(NODE_REMEDIATIONS, NHC_NAMESPACE, &name)
                .is_err()
        },
    )
    .await;
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_health_check_escalation_timeout_stops_baremend_before_the_proof() {
    // baremend's step times out after 2 s; the host never powers off meanwhile.
    let lab = start_node_health_check(Duration::from_secs(2), |lab| {
        lab.stuck_power("worker-0", true)
    })
    .await;
    lab.cluster.hang("worker-0");
    let cancelled = lab.reach("worker-0-1", RemediationPhase::Cancelled).await;
    assert!(steps(&cancelled).contains(&"PowerOffWithdrawn".to_string()));
    let request = lab.told_of_the_timeout("worker-0").await;
    assert!(
        request
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("remediation.medik8s.io/nhc-timed-out")
    );
    assert!(lab.no_reboot_request("worker-0"));
    assert!(lab.node_exists("worker-0"), "nothing destructive remains");
    // The health check moved on to its next remediator (one the simulated cluster does not
    // serve), and baremend starts nothing again for the timed-out request.
    // Its Warning is about the cluster-scoped NodeHealthCheck, so in `default`, where its
    // install grants no Events: refused and dropped, as a real one's would be.
    let dropped = lab.cluster.dropped_events();
    assert!(
        dropped.iter().any(|e| e.contains("NoTemplateLeft")),
        "{dropped:?}"
    );
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_health_check_request_for_a_control_plane_node_is_held_when_quorum_would_break() {
    let lab = start_nhc(gated_policy(100), |_| {}).await;
    quorum_would_break(&lab, |lab| lab.node_request("master-0", json!({}))).await;
    let request = lab
        .node_request_where("master-0", "Processing while held", |r| {
            has(r, "Processing", "True", Some("RemediationPending"))
        })
        .await;
    assert_eq!(
        request.status.unwrap().phase,
        Some(RemediationPhase::Pending)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_asked_for_by_both_contracts_is_remediated_once_even_when_one_request_outlives_it()
 {
    // Both requests exist before the controller starts: its first pass sees both (its
    // caches are complete before any pass), so the recorded one is the MachineRemediation.
    // Made while it runs, whichever watch delivers first would start the remediation. The
    // Machine is unhealthy past the health check's timeout by then: a request of a healthy
    // Machine would be withdrawn by the health check's next pass (openshift/machine-api-operator
    // `cleanEMR`), before the controller's caches are complete.
    let mut lab = Lab::builder(ClusterSpec {
        remediation_template: Some("not-baremend".into()),
        ..fast()
    })
    .policy(fast_policy())
    .start()
    .await;
    lab.api
        .create(NAMESPACES, "", json!({"metadata": {"name": NHC_NAMESPACE}}))
        .unwrap();
    lab.cluster.hang("worker-0");
    lab.node_ready_is("worker-0", "Unknown").await;
    tokio::time::sleep(lab.cluster.spec().timing.unhealthy_timeout * 3).await;
    lab.request("worker-0");
    lab.node_request("worker-0", json!({}));
    let options = lab.options();
    lab.start_controller(options);
    lab.succeeded_through("worker-0-1", TriggerKind::MachineRemediation)
        .await;
    // The Machine health check withdraws its request once the Machine is healthy; the
    // NodeHealthCheck's stays (this cluster runs none to delete it).
    eventually(
        "the MachineRemediation withdrawn",
        Duration::from_secs(20),
        async || lab.request_object("worker-0").is_none(),
    )
    .await;
    // A negative: for 2 s, many passes of a 100 ms poll, the request that was there when the
    // remediation started starts no second one; no condition to wait for proves that.
    lab.hold(Duration::from_secs(2)).await;
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
    assert!(
        lab.api
            .get(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-0")
            .is_ok(),
        "the NodeHealthCheck's request is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_machine_is_remediated_as_its_machine_even_when_a_host_bmc_names_only_the_node()
 {
    let lab = start_nhc(fast_policy(), |lab| {
        // A HostBmc naming the Node and no Machine: on a cluster with Machines it only says
        // where the BMC is; the Node is still its Machine's to remediate.
        let host = lab.api.get(BMHS, MACHINE_NAMESPACE, "worker-0").unwrap();
        let mapping = json!({
            "apiVersion": "baremend.io/v1alpha1",
            "kind": "HostBmc",
            "metadata": {"name": "worker-0-bmc", "namespace": MACHINE_NAMESPACE},
            "spec": {
                "nodeName": "worker-0",
                "address": host["spec"]["bmc"]["address"],
                "credentialsName": host["spec"]["bmc"]["credentialsName"],
            },
        });
        lab.api
            .create(HOST_BMCS, MACHINE_NAMESPACE, mapping)
            .unwrap();
    })
    .await;
    lab.node_request("worker-0", json!({}));
    lab.cluster.hang("worker-0");
    let done = lab
        .succeeded_through("worker-0-1", TriggerKind::NodeRemediation)
        .await;
    assert_eq!(done.spec.machine_name.as_deref(), Some("worker-0"));
    assert_eq!(done.spec.host_bmc, None);
    assert_eq!(lab.remediations_of("worker-0"), vec!["worker-0-1"]);
    let all = lab.api.list(common::lab::REMEDIATIONS, None);
    assert_eq!(all.len(), 1, "one remediation in all: {all:?}");
}

/// Waits until an Event of `type_` and `reason` on the NodeHealthCheck `name` says `says`;
/// fails after 20 s.
async fn event_on_node_health_check(
    lab: &Lab,
    name: &str,
    (type_, reason): (&str, &str),
    says: &str,
) {
    eventually(
        &format!("a {reason} {type_} Event on NodeHealthCheck {name} saying {says:?}"),
        Duration::from_secs(20),
        async || {
            let events = lab.api.list(EVENTS, None);
            events
                .iter()
                .any(|e| {
                    e["reason"] == reason
                        && e["type"] == type_
                        && e["involvedObject"]["kind"] == "NodeHealthCheck"
                        && e["involvedObject"]["name"] == name
                        && e["message"].as_str().is_some_and(|m| m.contains(says))
                })
                .then_some(())
                .ok_or(format!("{events:#?}"))
        },
    )
    .await;
}

/// Waits until baremend's template `baremend` has the condition `NodeHealthCheckDisabled` with
/// this status and reason; fails after 20 s.
async fn template_condition_is(lab: &Lab, status: &str, reason: &str) {
    use baremend_sim::cluster::nhc::NODE_REMEDIATION_TEMPLATES;
    eventually(
        &format!("NodeHealthCheckDisabled {status} ({reason}) on the template"),
        Duration::from_secs(20),
        async || {
            let template = lab
                .api
                .get(NODE_REMEDIATION_TEMPLATES, NHC_NAMESPACE, "baremend")
                .unwrap();
            let conditions = template["status"]["conditions"].clone();
            conditions
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| {
                    c["type"] == "NodeHealthCheckDisabled"
                        && c["status"] == status
                        && c["reason"] == reason
                })
                .then_some(())
                .ok_or(format!("{conditions}"))
        },
    )
    .await;
}

/// `baremend check` on the lab's cluster, as an admin runs it: (success, stdout).
async fn baremend_check(lab: &Lab) -> (bool, String) {
    let dir = common::scratch("check-nhc");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, lab.cluster.kubeconfig()).unwrap();
    let output = common::baremend(
        &["check", "--kubeconfig", kubeconfig.to_str().unwrap()],
        None,
    )
    .await;
    let (stdout, _) = common::texts(&output);
    (output.status.success(), stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_health_check_disabled_by_a_custom_machine_health_check_is_told_until_it_is_enabled()
{
    // medik8s node-healthcheck-operator: `Reconcile` in
    // internal/controller/nodehealthcheck_controller.go disables the NodeHealthCheck
    // (`Disabled=True`, reason ConflictingMachineHealthCheckDetected) while
    // internal/mhc/checker.go `NeedDisableNHC` finds a custom MachineHealthCheck; the simulated
    // NodeHealthCheck does the same.
    let lab = start_node_health_check(Duration::from_secs(60), |_| {}).await;
    common::lab::metric(&lab, "baremend_node_health_checks_disabled 0").await;
    let (ok, stdout) = baremend_check(&lab).await;
    assert!(ok, "{stdout}");
    assert!(!stdout.contains("NodeHealthCheck"), "{stdout}");
    // An admin adds a MachineHealthCheck of their own, beside the NodeHealthCheck.
    lab.api
        .create(
            MHCS,
            MACHINE_NAMESPACE,
            json!({
                "apiVersion": "machine.openshift.io/v1beta1",
                "kind": "MachineHealthCheck",
                "metadata": {"name": "custom", "namespace": MACHINE_NAMESPACE},
                "spec": {
                    "selector": {"matchLabels": {"machine.openshift.io/cluster-api-machine-role": "infra"}},
                    "unhealthyConditions": [{"type": "Ready", "status": "False", "timeout": "300s"}],
                },
            }),
        )
        .unwrap();
    let reason = baremend::remediation::requests::node_health_checks::DISABLED_BY_MHC;
    event_on_node_health_check(
        &lab,
        "workers",
        ("Warning", "NodeHealthCheckDisabled"),
        reason,
    )
    .await;
    common::lab::metric(&lab, "baremend_node_health_checks_disabled 1").await;
    template_condition_is(&lab, "True", reason).await;
    let (ok, stdout) = baremend_check(&lab).await;
    assert!(!ok, "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("NodeHealthCheck workers is Disabled"))
        .unwrap_or_else(|| panic!("no line for the NodeHealthCheck in:\n{stdout}"));
    assert!(line.contains(reason), "{line}");
    assert!(
        line.contains(&format!("{NHC_NAMESPACE}/baremend")),
        "{line}"
    );
    // A hung worker is asked for by nobody while it is off.
    lab.cluster.hang("worker-0");
    lab.node_ready_is("worker-0", "Unknown").await;
    lab.hold(Duration::from_secs(2)).await;
    assert!(
        lab.api
            .get(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-0")
            .is_err()
    );
    // The custom MachineHealthCheck gone, the NodeHealthCheck is on again, and so told; the
    // hung worker is remediated.
    lab.api
        .delete(MHCS, MACHINE_NAMESPACE, "custom", None)
        .unwrap();
    event_on_node_health_check(
        &lab,
        "workers",
        ("Normal", "NodeHealthCheckEnabled"),
        "enabled again",
    )
    .await;
    common::lab::metric(&lab, "baremend_node_health_checks_disabled 0").await;
    template_condition_is(&lab, "False", "NodeHealthChecksEnabled").await;
    lab.succeeded_through("worker-0-1", TriggerKind::NodeRemediation)
        .await;
}
