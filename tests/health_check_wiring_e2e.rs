//! The health checks reach baremend only through the aggregated ClusterRoles `deploy/` ships:
//! each simulated health check runs as its upstream account with its upstream roles
//! (simulator/src/cluster/upstream_rbac/), so it creates baremend's request only because
//! `deploy/base/rbac-health-checks.yaml` (OpenShift's MachineHealthCheck and NodeHealthCheck) or the
//! Cluster API example's `baremend-cluster-api-manager` is applied. Without the role: the
//! health check's 403 on the template and no request; with it: the request and a remediation
//! that succeeds, with no actor refused anything.

use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend::api::slim::MachineApi;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{Gvr, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS};
use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, NHC_NAMESPACE};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast};

const CLUSTER_ROLES: Gvr = Gvr {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterroles",
};

/// The ClusterRole `name` as `deploy/` ships it (the file an install applies).
fn shipped_role(file: &str, name: &str) -> Value {
    let text = std::fs::read_to_string(common::repo_root().join(file)).unwrap();
    common::yaml_documents(&text)
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{file} ships no ClusterRole {name}"))
}

/// A health check's path to baremend: the shipped role it needs, the account it runs as, and
/// whether its request for worker-0 exists.
struct Wiring {
    file: &'static str,
    role: &'static str,
    account: &'static str,
    request: fn(&Lab) -> bool,
}

fn machine_request(lab: &Lab) -> bool {
    lab.api
        .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, "worker-0")
        .is_ok()
}

fn node_request(lab: &Lab) -> bool {
    !lab.api
        .list(NODE_REMEDIATIONS, Some(NHC_NAMESPACE))
        .is_empty()
}

const OPENSHIFT: Wiring = Wiring {
    file: "deploy/base/rbac-health-checks.yaml",
    role: "baremend-ext-remediation",
    account: "system:serviceaccount:openshift-machine-api:machine-api-controllers",
    request: machine_request,
};

const CLUSTER_API: Wiring = Wiring {
    file: "deploy/components/cluster-api/rbac-cluster-api.yaml",
    role: "baremend-cluster-api-manager",
    account: "system:serviceaccount:capi-system:capi-manager",
    request: machine_request,
};

const NODE_HEALTH_CHECK: Wiring = Wiring {
    file: "deploy/base/rbac-health-checks.yaml",
    role: "baremend-ext-remediation",
    account: "system:serviceaccount:workload-availability:node-healthcheck-controller-manager",
    request: node_request,
};

/// Without the shipped role the health check is refused and asks nothing; applied again, it
/// asks, and the remediation it asked for succeeds.
async fn only_the_shipped_role_lets_the_health_check_ask(lab: &Lab, wiring: &Wiring) {
    lab.api
        .delete(CLUSTER_ROLES, "", wiring.role, None)
        .unwrap();
    lab.cluster.hang("worker-0");
    let refusal = eventually(
        "the health check refused",
        Duration::from_secs(30),
        async || {
            lab.cluster
                .actor_refusals()
                .into_iter()
                .find(|r| r.contains(wiring.account) && r.contains("baremend.io"))
        },
    )
    .await;
    assert!(refusal.contains("is forbidden"), "{refusal}");
    assert!(!(wiring.request)(lab), "no request without the role");
    let mut role = shipped_role(wiring.file, wiring.role);
    if let Some(meta) = role.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    lab.api.create(CLUSTER_ROLES, "", role).unwrap();
    eventually("the request", Duration::from_secs(30), async || {
        (wiring.request)(lab).then_some(())
    })
    .await;
    lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    let refused_since: Vec<String> = lab
        .cluster
        .actor_refusals()
        .into_iter()
        .filter(|r| r != &refusal)
        .collect();
    assert!(
        refused_since
            .iter()
            .all(|r| r.contains(wiring.account) && r.contains("baremend.io")),
        "only the health check's refusals before the role was applied: {refused_since:#?}"
    );
}

fn policy() -> Value {
    json!({"mode": "Remediate"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openshifts_machine_health_check_asks_through_the_shipped_ext_remediation_role() {
    let spec = ClusterSpec {
        remediation_template: Some("baremend".into()),
        ..fast()
    };
    let mut lab = Lab::builder(spec).policy(policy()).start().await;
    template(&lab);
    let options = lab.options();
    lab.start_controller(options);
    only_the_shipped_role_lets_the_health_check_ask(&lab, &OPENSHIFT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_apis_machine_health_check_asks_through_the_shipped_aggregate_to_manager_role() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec).policy(policy()).start().await;
    template(&lab);
    let options = ControllerOptions {
        machine_api: MachineApi::ClusterApi,
        ..lab.options()
    };
    lab.start_controller(options);
    only_the_shipped_role_lets_the_health_check_ask(&lab, &CLUSTER_API).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_health_check_asks_through_the_shipped_ext_remediation_role() {
    let spec = ClusterSpec {
        node_health_check: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec).policy(policy()).start().await;
    lab.baremend_node_template();
    let options = lab.options();
    lab.start_controller(options);
    only_the_shipped_role_lets_the_health_check_ask(&lab, &NODE_HEALTH_CHECK).await;
}

/// The `MachineRemediationTemplate` `baremend` the health checks name.
fn template(lab: &Lab) {
    lab.api
        .create(
            MACHINE_REMEDIATION_TEMPLATES,
            MACHINE_NAMESPACE,
            json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
        )
        .unwrap();
}
