//! Coexistence with other remediators, end to end in the simulated cluster: for every kind
//! of evidence the `ForeignRemediation` gate detects, the start is held (the `Held`
//! condition, a Warning Event and the held gauge name who), nothing is powered or deleted,
//! and once the evidence is gone the remediation goes ahead. And the legacy actuator's Node
//! backup comes back on the Node baremend restores.

use std::time::Duration;

use baremend::api::{Remediation, RemediationPhase};
use baremend_sim::cluster::local::{BMHS, Gvr, MACHINES, NAMESPACES, NODES};
use baremend_sim::cluster::{MACHINE_NAMESPACE, REBOOT_PREFIX};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast, metric, steps, warning_on};

/// The namespace NodeHealthCheck's remediators run in on OpenShift.
const MEDIK8S_NAMESPACE: &str = "openshift-workload-availability";

fn gvr(group: &'static str, version: &'static str, plural: &'static str) -> Gvr {
    Gvr {
        group,
        version,
        plural,
    }
}

/// The lab with the other remediators' kinds served and the controller started.
async fn lab() -> Lab {
    let policy = json!({"timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30, "readyGraceSeconds": 1}});
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.serve_foreign_remediations();
    lab.api
        .create(
            NAMESPACES,
            "",
            json!({"metadata": {"name": MEDIK8S_NAMESPACE}}),
        )
        .unwrap();
    let options = lab.options();
    lab.start_controller(options);
    lab
}

/// Creates another remediator's object.
fn stage(lab: &Lab, kind: Gvr, namespace: &str, object: Value) {
    lab.api.create(kind, namespace, object).unwrap();
}

/// Triggers worker-0 and checks its start is held by `who`: the condition, a Warning Event,
/// the gauge, and nothing done to the host or its Node.
async fn held_by(lab: &Lab, who: &str) {
    lab.trigger("worker-0", true);
    let status = eventually("worker-0-1 held", Duration::from_secs(20), async || {
        let status = lab.remediation("worker-0-1").and_then(|r| r.status);
        let held = status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Held" && c.status == "True")
        });
        match held {
            Some(c) if c.reason == "ForeignRemediation" => Ok(c.message.clone()),
            _ => Err(format!("{status:#?}")),
        }
    })
    .await;
    assert!(status.contains(who), "{status}");
    warning_on(lab, ("Machine", "worker-0"), "Held", who).await;
    metric(
        lab,
        "baremend_remediations_held{gate=\"ForeignRemediation\"} 1",
    )
    .await;
    let held = lab.remediation("worker-0-1").unwrap();
    assert_eq!(
        held.status.as_ref().unwrap().phase,
        RemediationPhase::Pending
    );
    let taken = steps(&held);
    let acted = taken
        .iter()
        .any(|s| s.starts_with("PowerOff") || s.starts_with("Node") || s == "Fenced");
    assert!(!acted, "{taken:?}");
    assert!(lab.node_exists("worker-0"), "the Node was released");
}

/// The held remediation once the evidence is gone: it goes ahead to the end.
async fn released(lab: &Lab) -> Remediation {
    lab.reach("worker-0-1", RemediationPhase::Succeeded).await
}

/// Holds with the other remediator's object, then lets go when it is deleted.
async fn held_by_object(kind: Gvr, namespace: &str, object: Value, who: &str) {
    let lab = lab().await;
    let name = object["metadata"]["name"].as_str().unwrap().to_string();
    stage(&lab, kind, namespace, object);
    held_by(&lab, who).await;
    assert!(
        lab.power_history("worker-0").is_empty(),
        "the host was powered"
    );
    lab.api.delete(kind, namespace, &name, None).unwrap();
    released(&lab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metal3_remediation_of_the_machine_holds_the_start_until_it_is_gone() {
    let object = json!({"metadata": {"name": "worker-0", "ownerReferences": [{
        "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
        "name": "worker-0", "uid": "00000000-0000-0000-0000-000000000000",
    }]}, "spec": {"strategy": {"type": "Reboot", "retryLimit": 1, "timeout": "300s"}}});
    let kind = gvr(
        "infrastructure.cluster.x-k8s.io",
        "v1beta1",
        "metal3remediations",
    );
    let who = "Metal3Remediation openshift-machine-api/worker-0";
    held_by_object(kind, MACHINE_NAMESPACE, object, who).await;
}

/// Holds with a medik8s remediator's object (`v1alpha1`, in NodeHealthCheck's namespace).
async fn held_by_medik8s(group: &'static str, plural: &'static str, kind: &str, object: Value) {
    let who = format!(
        "{kind} {MEDIK8S_NAMESPACE}/{}",
        object["metadata"]["name"].as_str().unwrap()
    );
    held_by_object(
        gvr(group, "v1alpha1", plural),
        MEDIK8S_NAMESPACE,
        object,
        &who,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_node_remediation_of_the_node_holds_the_start_until_it_is_gone() {
    let object =
        json!({"metadata": {"name": "worker-0"}, "spec": {"remediationStrategy": "Automatic"}});
    let group = "self-node-remediation.medik8s.io";
    held_by_medik8s(group, "selfnoderemediations", "SelfNodeRemediation", object).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_agents_remediation_naming_the_node_holds_the_start_until_it_is_gone() {
    // Not named after the Node: it names it in its annotation.
    let object = json!({"metadata": {
        "name": "far-worker-0",
        "annotations": {"remediation.medik8s.io/node-name": "worker-0"},
    }, "spec": {"agent": "fence_ipmilan"}});
    let group = "fence-agents-remediation.medik8s.io";
    held_by_medik8s(
        group,
        "fenceagentsremediations",
        "FenceAgentsRemediation",
        object,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_deletion_remediation_of_the_node_holds_the_start_until_it_is_gone() {
    let object = json!({"metadata": {"name": "worker-0"}, "spec": {}});
    let group = "machine-deletion-remediation.medik8s.io";
    let kind = "MachineDeletionRemediation";
    held_by_medik8s(group, "machinedeletionremediations", kind, object).await;
}

/// Sets (`Some`) or removes (`None`) annotations on an object.
fn annotate(lab: &Lab, kind: Gvr, namespace: &str, name: &str, annotations: Value) {
    let patch = json!({"metadata": {"annotations": annotations}});
    lab.api.merge(kind, namespace, name, &patch, false).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_reboot_key_requested_by_someone_else_holds_the_start_until_it_is_removed() {
    let lab = lab().await;
    // Someone else's request under our key: the BareMetal Operator holds the host off.
    let key = format!("{REBOOT_PREFIX}capbm-requested-power-off");
    annotate(
        &lab,
        BMHS,
        MACHINE_NAMESPACE,
        "worker-0",
        json!({&key: "{\"mode\":\"hard\"}"}),
    );
    held_by(&lab, "reboot.metal3.io/capbm-requested-power-off").await;
    annotate(
        &lab,
        BMHS,
        MACHINE_NAMESPACE,
        "worker-0",
        json!({&key: null}),
    );
    let done = released(&lab).await;
    let done_steps = steps(&done);
    assert!(
        done_steps.iter().any(|s| s == "NodeDeleted"),
        "{done_steps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_actuator_in_flight_holds_the_start_and_its_saved_labels_come_back() {
    let lab = lab().await;
    // What the legacy actuator leaves on a Machine it remediates: the Node's labels and
    // annotations it saved, its power-on deadline; and its finalizer on the Node.
    annotate(
        &lab,
        MACHINES,
        MACHINE_NAMESPACE,
        "worker-0",
        json!({
            "remediation.metal3.io/node-labels-backup": "{\"legacy-team\":\"storage\"}",
            "remediation.metal3.io/node-annotations-backup": "{\"legacy.example/note\":\"kept\"}",
            "remediation.metal3.io/power-on-will-timeout-at": "2026-01-01T00:00:00Z",
        }),
    );
    let finalizer = json!({"metadata": {"finalizers": ["metal3.io/capbm"]}});
    lab.api
        .merge(NODES, "", "worker-0", &finalizer, false)
        .unwrap();
    held_by(&lab, "remediation.metal3.io/power-on-will-timeout-at").await;
    assert!(
        lab.power_history("worker-0").is_empty(),
        "the host was powered"
    );
    // The operator clears the in-flight mark (the migration guide's step); the backup stays
    // for baremend to restore.
    let clear = json!({"remediation.metal3.io/power-on-will-timeout-at": null});
    annotate(&lab, MACHINES, MACHINE_NAMESPACE, "worker-0", clear);
    let done = released(&lab).await;
    let backup = done.status.unwrap().node_backup.unwrap();
    assert_eq!(
        backup.labels["legacy-team"], "storage",
        "adopted into our backup"
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    // Without the legacy finalizer removed, the old Node would linger, being deleted.
    assert!(node["metadata"]["deletionTimestamp"].is_null(), "{node}");
    assert!(node["metadata"]["finalizers"].is_null(), "{node}");
    assert_eq!(node["metadata"]["labels"]["legacy-team"], "storage");
    assert_eq!(
        node["metadata"]["annotations"]["legacy.example/note"],
        "kept"
    );
    let machine = lab
        .api
        .get(MACHINES, MACHINE_NAMESPACE, "worker-0")
        .unwrap();
    let annotations = &machine["metadata"]["annotations"];
    assert!(
        annotations
            .get("remediation.metal3.io/node-labels-backup")
            .is_none()
            && annotations
                .get("remediation.metal3.io/node-annotations-backup")
                .is_none(),
        "the legacy backup left the Machine once restored: {annotations}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_legacy_backup_is_told_and_kept_and_holds_nothing() {
    let lab = lab().await;
    // The legacy actuator stopped after saving the Node, and its save is damaged.
    let backup = "remediation.metal3.io/node-labels-backup";
    annotate(
        &lab,
        MACHINES,
        MACHINE_NAMESPACE,
        "worker-0",
        json!({backup: "{not json"}),
    );
    lab.trigger("worker-0", true);
    let done = released(&lab).await;
    assert!(
        done.status
            .unwrap()
            .conditions
            .iter()
            .all(|c| c.reason != "ForeignRemediation")
    );
    warning_on(
        &lab,
        ("Machine", "worker-0"),
        "LegacyBackupUnreadable",
        backup,
    )
    .await;
    let machine = lab
        .api
        .get(MACHINES, MACHINE_NAMESPACE, "worker-0")
        .unwrap();
    assert_eq!(
        machine["metadata"]["annotations"][backup], "{not json",
        "left for an operator to read"
    );
}
