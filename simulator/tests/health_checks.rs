//! The simulated health checks behave as upstream on the points baremend meets: the
//! NodeHealthCheck disables itself beside a custom MachineHealthCheck, names and owns its
//! requests, keeps a request through an `Unknown → False` flip and times a single template out
//! through the Node's lease; the MachineHealthChecks withdraw a request only for a healthy
//! Machine, count annotated Machines as unhealthy and delete a Failed Machine a MachineSet owns.
//! Each test names the upstream file and function it follows.

use std::time::Duration;

use baremend_sim::apiserver::time::format_time;
use baremend_sim::cluster::local::{
    BMHS, EVENTS, LEASES, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS, MACHINES,
    MHCS, NODES,
};
use baremend_sim::cluster::nhc::{
    DISABLED_BY_MHC, DISABLED_BY_MHC_MESSAGE, LEASE_NAMESPACE, NHCS, NODE_REMEDIATION_TEMPLATES,
    NODE_REMEDIATIONS, TIMED_OUT,
};
use baremend_sim::cluster::nhc_rules::{
    MULTIPLE_TEMPLATES, NODE_NAME, PART_OF, PART_OF_VALUE, TEMPLATE_NAME,
};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{
    ClusterSpec, EXTERNAL_REMEDIATION, MACHINE_NAMESPACE, NHC_NAMESPACE, SimCluster,
};
use serde_json::{Value, json};

mod common;

use common::eventually;

fn fast() -> ClusterSpec {
    ClusterSpec {
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

/// A cluster whose workers a NodeHealthCheck watches, baremend's node kinds served and its
/// template `baremend` in place (annotated `annotations`).
async fn nhc_cluster(spec: ClusterSpec, annotations: Value) -> (SimCluster, Local) {
    let cluster = SimCluster::start(ClusterSpec {
        node_health_check: true,
        ..spec
    })
    .await
    .unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    common::install_crds(
        &api,
        &["noderemediations.yaml", "noderemediationtemplates.yaml"],
    );
    let template = json!({"metadata": {"name": "baremend", "annotations": annotations},
        "spec": {"template": {"spec": {}}}});
    common::install_remediator_roles(&api);
    api.create(NODE_REMEDIATION_TEMPLATES, NHC_NAMESPACE, template)
        .unwrap();
    (cluster, api)
}

/// The NodeHealthCheck's `Disabled` condition, if it has one.
fn disabled(api: &Local) -> Option<Value> {
    let nhc = api.get(NHCS, "", "workers").ok()?;
    nhc.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Disabled")
        .cloned()
}

/// The NodeRemediations made for `node` (by the annotation, whatever their names).
fn requests_for(api: &Local, node: &str) -> Vec<Value> {
    api.list(NODE_REMEDIATIONS, Some(NHC_NAMESPACE))
        .into_iter()
        .filter(|r| r["metadata"]["annotations"][NODE_NAME] == node)
        .collect()
}

/// medik8s node-healthcheck-operator `internal/controller/mhc/checker.go` (`UpdateStatus`,
/// `NeedDisableNHC`) and `internal/controller/nodehealthcheck_controller.go` (`Reconcile`): a
/// custom MachineHealthCheck disables the NodeHealthCheck, the lone termination handler does
/// not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_machine_health_check_disables_the_node_health_check() {
    let (cluster, api) = nhc_cluster(fast(), json!({})).await;
    eventually(
        "the NodeHealthCheck enabled",
        Duration::from_secs(5),
        async || disabled(&api).is_some_and(|c| c["status"] == "False"),
    )
    .await;
    let custom = json!({"metadata": {"name": "custom"}, "spec": {
        "selector": {"matchLabels": {"none": "none"}},
        "unhealthyConditions": [{"type": "Ready", "status": "Unknown", "timeout": "300s"}]}});
    api.create(MHCS, MACHINE_NAMESPACE, custom).unwrap();
    let condition = eventually(
        "the NodeHealthCheck disabled",
        Duration::from_secs(5),
        async || disabled(&api).filter(|c| c["status"] == "True"),
    )
    .await;
    assert_eq!(condition["reason"], DISABLED_BY_MHC);
    assert_eq!(condition["message"], DISABLED_BY_MHC_MESSAGE);
    assert_eq!(
        api.get(NHCS, "", "workers").unwrap()["status"]["phase"],
        "Disabled"
    );
    // The controller records a Warning Event (nodehealthcheck_controller.go), about the
    // cluster-scoped NodeHealthCheck, so in `default`; its install grants Events only in its
    // own namespace (the CSV's `permissions`, config/rbac/leader_election_role.yaml): the API
    // server refuses it and the recorder drops it. The condition is what a user can see.
    let warned = api.list(EVENTS, None).into_iter().any(|e| {
        e["type"] == "Warning"
            && e["reason"] == "Disabled"
            && e["message"] == DISABLED_BY_MHC_MESSAGE
    });
    assert!(!warned, "the Event is refused as upstream's would be");
    // Disabled, it asks for nothing: a hung worker well past its 500 ms gets no request (a
    // negative: 3 s, many passes of a 100 ms period).
    cluster.hang("worker-0");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(requests_for(&api, "worker-0").is_empty());
    // The default termination handler alone is no conflict: enabled again, it remediates.
    api.delete(MHCS, MACHINE_NAMESPACE, "custom", None).unwrap();
    let handler = json!({"metadata": {"name": "machine-api-termination-handler"}, "spec": {
        "selector": {"matchLabels": {"machine.openshift.io/interruptible-instance": ""}},
        "unhealthyConditions": [{"type": "Terminating", "status": "True", "timeout": "0s"}]}});
    api.create(MHCS, MACHINE_NAMESPACE, handler).unwrap();
    eventually(
        "a request for worker-0",
        Duration::from_secs(5),
        async || !requests_for(&api, "worker-0").is_empty(),
    )
    .await;
    assert_eq!(disabled(&api).unwrap()["status"], "False");
}

/// Patches `node`'s conditions to Ready=Unknown plus `TestFault` with `status` since `ago`.
fn set_test_fault(api: &Local, node: &str, status: &str, ago: Duration) {
    let since = format_time(api.wall_time() - ago);
    let conditions = json!([
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": since},
        {"type": "TestFault", "status": status, "lastTransitionTime": since},
    ]);
    api.merge(
        NODES,
        "",
        node,
        &json!({"status": {"conditions": conditions}}),
        true,
    )
    .unwrap();
}

/// Hangs `node` and waits until it is Unknown (the node lifecycle controller writes its
/// conditions once; nothing writes them after), so that the test's conditions stay.
async fn silenced(cluster: &SimCluster, api: &Local, node: &str) {
    cluster.hang(node);
    eventually("the node Unknown", Duration::from_secs(5), async || {
        api.get(NODES, "", node).is_ok_and(|n| {
            n["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
            })
        })
    })
    .await;
}

/// medik8s `internal/controller/nodehealthcheck_controller.go` (`checkNodeConditions`,
/// `matchesUnhealthyConditions`: "Don't do this for nodes which soon match unhealthy
/// conditions"): an `Unknown → False` flip within the condition's duration keeps the request;
/// healthy again, it is withdrawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_health_check_keeps_its_request_through_a_condition_flip() {
    let (cluster, api) = nhc_cluster(fast(), json!({})).await;
    let rules = json!({"spec": {"unhealthyConditions": [
        {"type": "TestFault", "status": "False", "duration": "30s"},
        {"type": "TestFault", "status": "Unknown", "duration": "30s"}]}});
    api.merge(NHCS, "", "workers", &rules, false).unwrap();
    silenced(&cluster, &api, "worker-0").await;
    set_test_fault(&api, "worker-0", "Unknown", Duration::from_secs(60));
    eventually("the request", Duration::from_secs(5), async || {
        requests_for(&api, "worker-0").len() == 1
    })
    .await;
    set_test_fault(&api, "worker-0", "False", Duration::ZERO);
    // A negative: 2 s of 100 ms passes in which the flipped condition is within its 30 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        requests_for(&api, "worker-0").len(),
        1,
        "kept through the flip"
    );
    set_test_fault(&api, "worker-0", "True", Duration::ZERO);
    eventually(
        "the request withdrawn",
        Duration::from_secs(5),
        async || requests_for(&api, "worker-0").is_empty(),
    )
    .await;
}

/// medik8s `internal/controller/resources/manager.go` (`generateRemediationCR`,
/// `CreateRemediationCR`) and `internal/controller/resources/lease.go` (`ObtainNodeLease`,
/// `ManageLease`, `calcLeaseExpiration`), `nodehealthcheck_controller.go` (`remediate`: the
/// overdue lease annotates the request): a single template's request, `generateName`d for a
/// template with multiple-templates support, annotated, labelled and owned, times out after
/// three remediation durations of the Node's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_template_request_is_named_owned_and_times_out_through_the_lease() {
    let mut spec = fast();
    spec.timing.nhc_remediation_duration = Duration::from_secs(1);
    let (cluster, api) = nhc_cluster(spec, json!({MULTIPLE_TEMPLATES: "true"})).await;
    let single = json!({"spec": {"escalatingRemediations": null, "remediationTemplate":
        {"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate",
         "namespace": NHC_NAMESPACE, "name": "baremend"}}});
    api.merge(NHCS, "", "workers", &single, false).unwrap();
    cluster.hang("worker-0");
    let request = eventually("the request", Duration::from_secs(10), async || {
        requests_for(&api, "worker-0").into_iter().next()
    })
    .await;
    let metadata = &request["metadata"];
    let name = metadata["name"].as_str().unwrap();
    assert!(
        name.starts_with("worker-0-") && name.len() > "worker-0-".len(),
        "{name}"
    );
    assert_eq!(metadata["generateName"], "worker-0-");
    assert_eq!(metadata["annotations"][TEMPLATE_NAME], "baremend");
    assert_eq!(metadata["labels"][PART_OF], PART_OF_VALUE);
    let nhc = api.get(NHCS, "", "workers").unwrap();
    let owner = &metadata["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["name"], &owner["uid"]),
        (
            &json!("NodeHealthCheck"),
            &json!("workers"),
            &nhc["metadata"]["uid"]
        )
    );
    let lease = api.get(LEASES, LEASE_NAMESPACE, "node-worker-0").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "NodeHealthCheck-workers");
    let timed_out = eventually(
        "the request timed out",
        Duration::from_secs(10),
        async || {
            api.get(NODE_REMEDIATIONS, NHC_NAMESPACE, name)
                .ok()
                .filter(|r| r["metadata"]["annotations"].get(TIMED_OUT).is_some())
        },
    )
    .await;
    let started = api.wall_time();
    assert!(
        api.get(LEASES, LEASE_NAMESPACE, "node-worker-0").is_err(),
        "the lease invalidated"
    );
    let nhc = api.get(NHCS, "", "workers").unwrap();
    assert!(nhc["status"]["unhealthyNodes"][0]["remediations"][0]["timedOut"].is_string());
    // Nothing follows a single template: the request stays, no other one, no NoTemplateLeft
    // (a negative: 1 s of passes).
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(requests_for(&api, "worker-0"), vec![timed_out]);
    let events = api.list(EVENTS, None);
    assert!(
        !events.iter().any(|e| e["reason"] == "NoTemplateLeft"),
        "{events:?}"
    );
    // About three durations after the lease was taken (the timestamps have one-second
    // resolution).
    let created = baremend_sim::apiserver::time::parse_time(
        request["metadata"]["creationTimestamp"].as_str().unwrap(),
    )
    .unwrap();
    let took = started.saturating_sub(created);
    assert!(took >= Duration::from_secs(2), "timed out after {took:?}");
}

/// A cluster whose workers' OpenShift MachineHealthCheck names baremend's
/// `MachineRemediationTemplate` `baremend` (in place, with baremend's machine kinds served).
async fn template_mhc_cluster() -> (SimCluster, Local) {
    let cluster = SimCluster::start(ClusterSpec {
        remediation_template: Some("baremend".into()),
        ..fast()
    })
    .await
    .unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    common::install_crds(
        &api,
        &[
            "machineremediations.yaml",
            "machineremediationtemplates.yaml",
        ],
    );
    let template = json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}});
    common::install_remediator_roles(&api);
    api.create(MACHINE_REMEDIATION_TEMPLATES, MACHINE_NAMESPACE, template)
        .unwrap();
    (cluster, api)
}

/// openshift/machine-api-operator `pkg/controller/machinehealthcheck/machinehealthcheck_controller.go`
/// (`healthCheckTargets`, `cleanEMR`: only targets that passed the health check lose their
/// request; `needsRemediation` gives one within its timeout a next check, not a pass), as
/// kubernetes-sigs/cluster-api `core/reconcilers/machinehealthcheck/machinehealthcheck_controller.go`
/// `patchHealthyTargets` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_health_check_keeps_its_request_through_a_condition_flip() {
    let (cluster, api) = template_mhc_cluster().await;
    let rules = json!({"spec": {"unhealthyConditions": [
        {"type": "TestFault", "status": "False", "timeout": "30s"},
        {"type": "TestFault", "status": "Unknown", "timeout": "30s"}]}});
    api.merge(MHCS, MACHINE_NAMESPACE, "workers", &rules, false)
        .unwrap();
    silenced(&cluster, &api, "worker-0").await;
    let request = || api.get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, "worker-0");
    set_test_fault(&api, "worker-0", "Unknown", Duration::from_secs(60));
    eventually("the request", Duration::from_secs(5), async || {
        request().is_ok()
    })
    .await;
    set_test_fault(&api, "worker-0", "False", Duration::ZERO);
    // A negative: 2 s of 100 ms passes in which the flipped condition is within its 30 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(request().is_ok(), "kept through the flip");
    set_test_fault(&api, "worker-0", "True", Duration::ZERO);
    eventually(
        "the request withdrawn",
        Duration::from_secs(5),
        async || request().is_err(),
    )
    .await;
}

/// openshift/machine-api-operator `machinehealthcheck_controller.go` (`healthCheckTargets`:
/// "Consider hosts with external remediation requested as unhealthy"; `isAllowedRemediation`):
/// Machines annotated for external remediation count against `maxUnhealthy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_machines_count_as_unhealthy_for_max_unhealthy() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    // 40% of 3 workers is 1: two annotated (healthy Nodes) already exceed it.
    for worker in ["worker-1", "worker-2"] {
        let patch = json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}});
        api.merge(MACHINES, MACHINE_NAMESPACE, worker, &patch, false)
            .unwrap();
    }
    let status = eventually(
        "remediation restricted",
        Duration::from_secs(5),
        async || {
            api.get(MHCS, MACHINE_NAMESPACE, "workers")
                .ok()
                .map(|m| m["status"].clone())
                .filter(|s| s.pointer("/conditions/0/status") == Some(&json!("False")))
        },
    )
    .await;
    assert_eq!(status["currentHealthy"], 1);
    assert_eq!(status["expectedMachines"], 3);
    cluster.hang("worker-0");
    // A negative: 3 s, well past the 500 ms timeout, in which worker-0 is not annotated.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let machine = api.get(MACHINES, MACHINE_NAMESPACE, "worker-0").unwrap();
    assert!(
        machine["metadata"]["annotations"]
            .get(EXTERNAL_REMEDIATION)
            .is_none()
    );
    let events = api.list(EVENTS, None);
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "RemediationRestricted")
    );
}

/// openshift/machine-api-operator `machinehealthcheck_controller.go` (`needsRemediation`: a
/// `Failed` Machine needs remediation; `internalRemediation`: the external strategy applies
/// only to Machines not `Failed`, others are deleted when a controller owns them, else
/// skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_machine_is_deleted_when_a_machine_set_owns_it_and_never_annotated() {
    // Two Failed workers of three: allowed only with a maxUnhealthy that takes them.
    let spec = ClusterSpec {
        max_unhealthy: "100%".into(),
        ..fast()
    };
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let failed = json!({"status": {"phase": "Failed"}});
    for worker in ["worker-0", "worker-1"] {
        api.merge(MACHINES, MACHINE_NAMESPACE, worker, &failed, true)
            .unwrap();
    }
    // worker-1 has a MachineSet; worker-0 has no controller owner.
    let owned = json!({"metadata": {"ownerReferences": [{"apiVersion": "machine.openshift.io/v1beta1",
        "kind": "MachineSet", "name": "workers", "uid": "9b0c6a52-2b53-4d0e-8d8a-2f4f1c7e0a11", "controller": true}]}});
    api.merge(MACHINES, MACHINE_NAMESPACE, "worker-1", &owned, false)
        .unwrap();
    eventually(
        "the owned Failed Machine deleted",
        Duration::from_secs(5),
        async || api.get(MACHINES, MACHINE_NAMESPACE, "worker-1").is_err(),
    )
    .await;
    eventually(
        "the unowned one skipped",
        Duration::from_secs(5),
        async || {
            api.list(EVENTS, None).iter().any(|e| {
                e["reason"] == "SkippedNoController" && e["involvedObject"]["name"] == "worker-0"
            })
        },
    )
    .await;
    let machine = api.get(MACHINES, MACHINE_NAMESPACE, "worker-0").unwrap();
    assert!(
        machine["metadata"]["annotations"]
            .get(EXTERNAL_REMEDIATION)
            .is_none(),
        "a Failed Machine is never annotated"
    );
    // The health check records its Event after the deletion (as upstream's does): seen
    // right after the Machine is gone, it may not be written yet.
    eventually(
        "the MachineDeleted Event",
        Duration::from_secs(5),
        async || {
            api.list(EVENTS, None)
                .iter()
                .any(|e| e["reason"] == "MachineDeleted")
        },
    )
    .await;
}

/// OpenShift's legacy bare-metal remediation (cluster-api-provider-baremetal
/// `actuator.go`, `remediateIfNeeded`) power-cycles a Machine the annotation health check
/// hands over: its request on the host, the Node backed up and deleted, the Machine marked,
/// the request withdrawn with a deadline, and once the Node is back its labels restored and
/// every annotation removed, the trigger too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_actuator_power_cycles_an_annotated_machine_and_cleans_up() {
    use baremend_sim::cluster::legacy::{self, Action};
    let cluster = SimCluster::start(ClusterSpec {
        legacy_actuator: true,
        ..fast()
    })
    .await
    .unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let label = json!({"metadata": {"labels": {"team.example/storage": "yes"}}});
    api.merge(NODES, "", "worker-0", &label, false).unwrap();
    let old_uid = api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    assert!(cluster.hang("worker-0"));
    let annotations = |api: &Local| {
        api.get(MACHINES, MACHINE_NAMESPACE, "worker-0").unwrap()["metadata"]["annotations"].clone()
    };
    eventually(
        "the legacy remediation finished",
        Duration::from_secs(60),
        async || {
            let done = cluster
                .legacy_actions()
                .contains(&("worker-0".to_owned(), Action::Finished));
            done.then_some(())
                .ok_or(format!("{:?}", cluster.legacy_actions()))
        },
    )
    .await;
    let steps: Vec<Action> = cluster
        .legacy_actions()
        .into_iter()
        .filter(|(m, _)| m == "worker-0")
        .map(|(_, a)| a)
        .collect();
    assert_eq!(
        steps,
        [
            Action::RequestedPowerOff,
            Action::DeletedNode,
            Action::MarkedPoweredOff,
            Action::RequestedPowerOn,
            Action::Finished,
        ]
    );
    let node = api.get(NODES, "", "worker-0").unwrap();
    assert_ne!(node["metadata"]["uid"], old_uid, "a new Node registered");
    assert_eq!(node["metadata"]["labels"]["team.example/storage"], "yes");
    let left = annotations(&api);
    for key in [
        EXTERNAL_REMEDIATION,
        legacy::POWERED_OFF,
        legacy::POWER_ON_TIMEOUT,
        legacy::LABELS_BACKUP,
        legacy::ANNOTATIONS_BACKUP,
    ] {
        assert!(left.get(key).is_none(), "{key} left on the Machine: {left}");
    }
    let host = api.get(BMHS, MACHINE_NAMESPACE, "worker-0").unwrap();
    let request = host["metadata"]["annotations"].get(legacy::POWER_OFF_REQUEST);
    assert!(request.is_none(), "its request left on the host: {host}");
    let powers: Vec<_> = cluster
        .host("worker-0")
        .unwrap()
        .host
        .history()
        .into_iter()
        .map(|c| c.power)
        .collect();
    assert_eq!(powers.len(), 2, "one power cycle: {powers:?}");
}
