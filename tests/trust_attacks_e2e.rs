//! The trust boundaries under attack (docs/reference/contracts.md, "Trust"): each attack is made by a
//! tenant — a ServiceAccount the simulated API server's RBAC limits to namespace `tenant-a` —
//! or, for the Node annotation, by what a Node's kubelet may write. Each must change nothing
//! (no power request on any host, no Node touched) and leave the documented condition and
//! Warning Event where its author looks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use baremend::api::slim::MachineApi;
use baremend::api::{
    DriftPhase, HostBmc, MachineRemediation, NodeRemediation, Remediation, RemediationPhase,
};
use baremend::drift::helper::HelperOp;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{
    CAPI_MACHINES, Gvr, MACHINE_REMEDIATION_TEMPLATES, MACHINES, METAL3_MACHINES, NAMESPACES,
    NODES, PODS, SECRETS,
};
use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use baremend_testkit as common;
use common::drift::DriftLab;

use common::helper_policy::{
    HELPER_POLICY, HELPERS, MOUNTS, POLICY_BINDINGS, admitted_ops, create_pod, deviations,
    extra_host_path_attack, helper_pod, refused_by_policy,
};

use common::eventually;
use common::lab::{Lab, REMEDIATIONS, fast, metric, patch_policy, warning_in};

/// The tenant's namespace.
const TENANT: &str = "tenant-a";
/// The tenant's ServiceAccount there.
const TENANT_ACCOUNT: &str = "tenant";

fn rbac(plural: &'static str) -> Gvr {
    Gvr {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural,
    }
}

const SERVICE_ACCOUNTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "serviceaccounts",
};

/// Makes namespace `tenant-a` and its tenant: a ServiceAccount with every right on baremend's
/// kinds, Secrets, Cluster API and OpenShift Machines and Metal3Machines there, and none
/// anywhere else.
/// Returns a client with that identity.
async fn tenant(lab: &Lab) -> Client {
    lab.api
        .create(NAMESPACES, "", json!({"metadata": {"name": TENANT}}))
        .unwrap();
    lab.api
        .create(
            SERVICE_ACCOUNTS,
            TENANT,
            json!({"metadata": {"name": TENANT_ACCOUNT}}),
        )
        .unwrap();
    let everything = |groups: &[&str], resources: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": ["*"]});
    lab.api
        .create(
            rbac("roles"),
            TENANT,
            json!({
                "metadata": {"name": TENANT_ACCOUNT},
                "rules": [
                    everything(&["baremend.io"], &["*"]),
                    everything(&[""], &["secrets"]),
                    everything(&["cluster.x-k8s.io"], &["machines", "machines/status"]),
                    everything(&["infrastructure.cluster.x-k8s.io"], &["metal3machines"]),
                    everything(&["machine.openshift.io"], &["machines", "machines/status"]),
                ],
            }),
        )
        .unwrap();
    lab.api
        .create(
            rbac("rolebindings"),
            TENANT,
            json!({
                "metadata": {"name": TENANT_ACCOUNT},
                "subjects": [{"kind": "ServiceAccount", "name": TENANT_ACCOUNT, "namespace": TENANT}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT_ACCOUNT},
            }),
        )
        .unwrap();
    lab.account_client(TENANT, TENANT_ACCOUNT).await.unwrap()
}

/// Creates `object` (JSON, with its kind) as the tenant, in `tenant-a`.
async fn create_as<K>(tenant: &Client, object: Value) -> K
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(tenant.clone(), TENANT)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("the tenant creates {}: {e}", object.name_any()))
}

/// Asserts the API server refuses the tenant outside its namespace with 403.
fn forbidden<T: std::fmt::Debug>(result: kube::Result<T>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    }
}

/// The object's `Accepted` condition once it reads False with `reason`; fails after 20 s.
async fn refused(lab: &Lab, gvr: Gvr, namespace: &str, name: &str, reason: &str) -> Value {
    eventually(
        &format!("{namespace}/{name} Accepted=False {reason}"),
        Duration::from_secs(20),
        async || {
            let object = lab.api.get(gvr, namespace, name).map_err(|e| e.message)?;
            let conditions = object["status"]["conditions"].as_array().cloned();
            conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| {
                    c["type"] == "Accepted" && c["status"] == "False" && c["reason"] == reason
                })
                .ok_or(format!("{:#}", object["status"]))
        },
    )
    .await
}

/// Nothing happened to `nodes`: no power change on their hosts, the Nodes there and
/// schedulable, and no Remediation of theirs in `namespaces`.
fn untouched(lab: &Lab, nodes: &[&str], namespaces: &[&str]) {
    for node in nodes {
        assert!(lab.power_history(node).is_empty(), "{node} was powered");
        let object = lab
            .api
            .get(NODES, "", node)
            .unwrap_or_else(|_| panic!("{node} is gone"));
        assert_ne!(object["spec"]["unschedulable"], true, "{node} cordoned");
        let taints = object["spec"]["taints"].to_string();
        assert!(!taints.contains("out-of-service"), "{node}: {taints}");
        for namespace in namespaces {
            let remediations = lab.api.list(REMEDIATIONS, Some(namespace));
            let theirs: Vec<&Value> = remediations
                .iter()
                .filter(|r| r["spec"]["nodeName"] == *node)
                .collect();
            assert!(theirs.is_empty(), "{node}: {theirs:#?}");
        }
    }
}

/// The annotations of BareMetalHost `host` in the Machine API's namespace, as JSON text: where
/// a reboot-API request (`reboot.metal3.io…`) would show.
fn host_annotations(lab: &Lab, host: &str) -> Result<String, String> {
    let bmh = lab
        .api
        .get(baremend_sim::cluster::local::BMHS, MACHINE_NAMESPACE, host)
        .map_err(|e| e.message)?;
    Ok(bmh["metadata"]["annotations"].to_string())
}

fn fast_policy(extra: Value) -> Value {
    let mut policy = json!({
        "timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30, "readyGraceSeconds": 1},
    });
    for (key, value) in extra.as_object().unwrap() {
        policy[key] = value.clone();
    }
    policy
}

fn node_request(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "baremend.io/v1alpha1",
        "kind": "NodeRemediation",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": spec,
    })
}

/// Before: `remediation/requests/trigger.rs` matched a `NodeRemediation` named after a Node in every
/// namespace, so the tenant's requests started remediations of healthy hosts (power-off
/// requested within seconds) and counted in the storm gate, holding a real one back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_node_remediations_for_healthy_nodes_are_refused_and_hold_nothing_back() {
    // Six machines and a 40 % storm gate: three refused requests counted beside one real
    // failure would hold it (4 of 6).
    let policy = fast_policy(json!({"storm": {"maxUnhealthyPercent": 40}}));
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    let tenant = tenant(&lab).await;
    lab.start_controller(lab.options());
    // The tenant cannot write where the cluster's health checks put their requests.
    let elsewhere: Api<NodeRemediation> = Api::namespaced(tenant.clone(), MACHINE_NAMESPACE);
    let request: NodeRemediation =
        serde_json::from_value(node_request("worker-1", json!({}))).unwrap();
    forbidden(
        elsewhere.create(&PostParams::default(), &request).await,
        "a NodeRemediation outside tenant-a",
    );
    let healthy = ["worker-1", "worker-2", "master-0"];
    for node in healthy {
        create_as::<NodeRemediation>(&tenant, node_request(node, json!({}))).await;
    }
    for node in healthy {
        let condition = refused(&lab, NODE_REMEDIATIONS, TENANT, node, "NamespaceNotTrusted").await;
        assert!(
            condition["message"].as_str().unwrap().contains("tenant-a"),
            "{condition}"
        );
        warning_in(
            &lab,
            TENANT,
            ("NodeRemediation", node),
            "NamespaceNotTrusted",
            "nothing is done for it",
        )
        .await;
    }
    metric(
        &lab,
        "baremend_requests_refused_total{kind=\"NodeRemediation\",reason=\"NamespaceNotTrusted\"} 3",
    )
    .await;
    // A real failure is remediated: the refused requests make no storm.
    lab.cluster.hang("worker-0");
    eventually(
        "worker-0-1 requested the power-off",
        Duration::from_secs(40),
        async || {
            let steps = lab
                .remediation("worker-0-1")
                .map(|r| common::lab::steps(&r))
                .unwrap_or_default();
            steps.iter().any(|s| s == "PowerOffRequested")
        },
    )
    .await;
    untouched(&lab, &healthy, &[MACHINE_NAMESPACE, TENANT]);
    // Told once each: a condition already saying so is not written again, nor counted.
    lab.hold(Duration::from_secs(2)).await;
    metric(
        &lab,
        "baremend_requests_refused_total{kind=\"NodeRemediation\",reason=\"NamespaceNotTrusted\"} 3",
    )
    .await;
    lab.stop().await;
}

/// Before: a request's spec replaced the policy's fields (`PolicyOverrides::apply`), so a
/// request could add a strategy the policy left out (DirectBmc behind the BareMetal Operator's
/// back) and stretch every deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_widening_the_policy_is_refused_and_a_narrowing_one_is_honoured() {
    // The policy trusts the tenant's namespace: only the spec can be wrong.
    let policy = fast_policy(json!({
        "strategies": ["BareMetalHostRebootApi"],
        "trust": {"requestNamespaces": [TENANT]},
    }));
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    let tenant = tenant(&lab).await;
    lab.start_controller(lab.options());
    let wider = json!({"strategies": ["DirectBmc"], "powerOffSeconds": 3600, "maxAttempts": 10});
    create_as::<NodeRemediation>(&tenant, node_request("worker-1", wider)).await;
    let condition = refused(&lab, NODE_REMEDIATIONS, TENANT, "worker-1", "WidensPolicy").await;
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.contains("strategies") && message.contains("BareMetalHostRebootApi"),
        "{message}"
    );
    warning_in(
        &lab,
        TENANT,
        ("NodeRemediation", "worker-1"),
        "WidensPolicy",
        "may only narrow",
    )
    .await;
    metric(
        &lab,
        "baremend_requests_refused_total{kind=\"NodeRemediation\",reason=\"WidensPolicy\"} 1",
    )
    .await;
    // The other node release is wider too unless the policy lets requests choose it.
    create_as::<NodeRemediation>(
        &tenant,
        node_request("worker-2", json!({"nodeRelease": "OutOfService"})),
    )
    .await;
    refused(&lab, NODE_REMEDIATIONS, TENANT, "worker-2", "WidensPolicy").await;
    // A narrowing request from the same namespace is honoured, under the narrowed policy:
    // what refused the others was their spec, nothing else.
    create_as::<NodeRemediation>(
        &tenant,
        node_request("master-0", json!({"powerOffSeconds": 5, "maxAttempts": 1})),
    )
    .await;
    let started = eventually(
        "master-0-1 started for the narrowing request",
        Duration::from_secs(20),
        async || lab.remediation("master-0-1").ok_or("not yet"),
    )
    .await;
    let trigger = started.spec.trigger.unwrap();
    assert_eq!(trigger.namespace.as_deref(), Some(TENANT));
    untouched(
        &lab,
        &["worker-1", "worker-2"],
        &[MACHINE_NAMESPACE, TENANT],
    );
    lab.stop().await;
}

/// Before: any `HostBmc` naming a Machine-less Node could be its subject (`first_claim`, the
/// oldest won), so a tenant's mapping with the tenant's own BMC endpoint could "prove" a
/// running host off; and of two mappings of one Node the oldest silently won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_host_bmc_is_refused_and_two_trusted_ones_of_a_node_are_both_unused() {
    let spec = ClusterSpec {
        platform_none: true,
        node_health_check: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec)
        .policy(fast_policy(json!({})))
        .start()
        .await;
    lab.baremend_node_template();
    let tenant = tenant(&lab).await;
    lab.start_controller(lab.options());
    // The tenant's BMC endpoint and credentials, and its mapping of worker-0 to them.
    create_as::<k8s_openapi::api::core::v1::Secret>(
        &tenant,
        json!({"metadata": {"name": "my-bmc"}, "stringData": {"username": "me", "password": "mine"}}),
    )
    .await;
    create_as::<HostBmc>(
        &tenant,
        json!({
            "apiVersion": "baremend.io/v1alpha1",
            "kind": "HostBmc",
            "metadata": {"name": "worker-0"},
            "spec": {"nodeName": "worker-0", "address": "redfish+http://127.0.0.1:9/redfish/v1/Systems/1", "credentialsName": "my-bmc"},
        }),
    )
    .await;
    create_as::<NodeRemediation>(&tenant, node_request("worker-0", json!({}))).await;
    let host_bmcs = baremend_sim::cluster::local::HOST_BMCS;
    refused(&lab, host_bmcs, TENANT, "worker-0", "NamespaceNotTrusted").await;
    warning_in(
        &lab,
        TENANT,
        ("HostBmc", "worker-0"),
        "NamespaceNotTrusted",
        "not used for its Node",
    )
    .await;
    // The request is told too, by the pass of the Node's real mapping.
    refused(
        &lab,
        NODE_REMEDIATIONS,
        TENANT,
        "worker-0",
        "NamespaceNotTrusted",
    )
    .await;
    metric(
        &lab,
        "baremend_host_bmcs_refused{kind=\"HostBmc\",reason=\"NamespaceNotTrusted\"} 1",
    )
    .await;
    // An untrusted claim contests nothing: the Node's real mapping stays its subject.
    metric(
        &lab,
        "baremend_host_bmcs_refused{kind=\"HostBmc\",reason=\"ContestedNode\"} 0",
    )
    .await;
    // Two trusted mappings of worker-1 (an administrator's mistake): neither is used.
    let duplicate = lab
        .api
        .get(host_bmcs, MACHINE_NAMESPACE, "worker-1")
        .unwrap();
    let mut second =
        json!({"metadata": {"name": "worker-1-again"}, "spec": duplicate["spec"].clone()});
    second["apiVersion"] = duplicate["apiVersion"].clone();
    second["kind"] = duplicate["kind"].clone();
    lab.api.create(host_bmcs, "baremend", second).unwrap();
    for (namespace, name) in [
        (MACHINE_NAMESPACE, "worker-1"),
        ("baremend", "worker-1-again"),
    ] {
        let condition = refused(&lab, host_bmcs, namespace, name, "ContestedNode").await;
        assert!(
            condition["message"]
                .as_str()
                .unwrap()
                .contains("baremend/worker-1-again, openshift-machine-api/worker-1"),
            "{condition}"
        );
        warning_in(
            &lab,
            namespace,
            ("HostBmc", name),
            "ContestedNode",
            "none is used",
        )
        .await;
    }
    metric(
        &lab,
        "baremend_host_bmcs_refused{kind=\"HostBmc\",reason=\"ContestedNode\"} 2",
    )
    .await;
    // worker-1 hangs and its NodeHealthCheck asks for it: nothing is done with either mapping.
    lab.cluster.hang("worker-1");
    lab.node_request_where("worker-1", "the NodeHealthCheck's request", |_| true)
        .await;
    lab.hold(Duration::from_secs(3)).await;
    untouched(
        &lab,
        &["worker-0", "worker-1"],
        &[MACHINE_NAMESPACE, TENANT, "baremend"],
    );
    lab.stop().await;
}

/// The tenant's API of `kind` (`gvr`) in its namespace.
fn tenant_api(tenant: &Client, gvr: Gvr, kind: &str) -> Api<DynamicObject> {
    let resource = kube::api::ApiResource {
        group: gvr.group.into(),
        version: gvr.version.into(),
        api_version: format!("{}/{}", gvr.group, gvr.version),
        kind: kind.into(),
        plural: gvr.plural.into(),
    };
    Api::<DynamicObject>::namespaced_with(tenant.clone(), TENANT, &resource)
}

/// Waits until `logins` counts a connection (to `what`); fails after 20 s.
async fn connected(logins: &AtomicUsize, what: &str) {
    eventually(
        &format!("a connection to {what}"),
        Duration::from_secs(20),
        async || match logins.load(Ordering::SeqCst) {
            0 => Err("none yet".to_string()),
            _ => Ok(()),
        },
    )
    .await;
}

/// The lab's options with the power monitor every 500 ms and the readiness check every
/// second: every BMC a mapping names is logged in to within moments, if it ever is.
fn monitoring_often(lab: &Lab) -> ControllerOptions {
    let mut options = ControllerOptions {
        power_poll: Some(Duration::from_millis(500)),
        fencing_check: Some(Duration::from_secs(1)),
        ..lab.options()
    };
    options.power_poll_seed = 7;
    options
}

/// Issue 39, "credentials go wherever a HostBmc points". Before: the power monitor (every
/// 60 s by default, every second here) and the fencing readiness check logged in for every
/// HostBmc naming a Machine, in any namespace, with the Secret it names: whoever may write a
/// HostBmc beside a Machine sent that namespace's BMC credentials to an address of their
/// choice. Now a HostBmc is used only in the policy's `trust.hostBmcNamespaces`; the same
/// mapping in a listed namespace is logged in for at once (the test's own check that it can
/// fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_host_bmc_for_its_own_machine_sends_no_credentials_anywhere() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec)
        .policy(fast_policy(json!({})))
        .start()
        .await;
    let tenant = tenant(&lab).await;
    lab.start_controller(ControllerOptions {
        machine_api: MachineApi::ClusterApi,
        ..monitoring_often(&lab)
    });
    // The controller may read BMC Secrets in the tenant's namespace, as the install guide has
    // it bound in every namespace with Machines (a Cluster API Cluster's own namespace).
    lab.api
        .create(
            rbac("rolebindings"),
            TENANT,
            json!({
                "metadata": {"name": "baremend-bmc-credentials"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "baremend-bmc-credentials"},
                "subjects": [{"kind": "ServiceAccount", "name": "baremend", "namespace": "baremend"}],
            }),
        )
        .unwrap();
    // An administrator's BMC Secret in the tenant's namespace (the tenant's role reads it or
    // not: what matters is where the controller sends it).
    lab.api
        .create(
            SECRETS,
            TENANT,
            json!({"metadata": {"name": "rack-bmc"}, "stringData": {"username": "admin", "password": "rack-secret"}}),
        )
        .unwrap();
    let (address, logins) = common::counting_listener().await;
    let machines = tenant_api(&tenant, CAPI_MACHINES, "Machine");
    let machine: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": "mine"},
        "spec": {"clusterName": "sim", "bootstrap": {"dataSecretName": "x"}},
    }))
    .unwrap();
    machines
        .create(&PostParams::default(), &machine)
        .await
        .unwrap();
    create_as::<HostBmc>(
        &tenant,
        json!({
            "apiVersion": "baremend.io/v1alpha1",
            "kind": "HostBmc",
            "metadata": {"name": "mine"},
            "spec": {"machineName": "mine", "address": address, "credentialsName": "rack-bmc"},
        }),
    )
    .await;
    // Several monitor rounds and readiness checks.
    lab.hold(Duration::from_secs(4)).await;
    assert_eq!(
        logins.load(Ordering::SeqCst),
        0,
        "the controller connected to the tenant's address with the namespace's BMC Secret"
    );
    // Said where its author looks.
    let host_bmcs = baremend_sim::cluster::local::HOST_BMCS;
    refused(&lab, host_bmcs, TENANT, "mine", "NamespaceNotTrusted").await;
    // The same mapping believed (an administrator lists the namespace): logged in for.
    patch_policy(
        &lab,
        json!({"trust": {"hostBmcNamespaces": ["baremend", MACHINE_NAMESPACE, TENANT]}}),
    )
    .await;
    connected(&logins, "the listed namespace's HostBmc address").await;
    // A second HostBmc of the Machine: neither is used, each says why.
    create_as::<HostBmc>(
        &tenant,
        json!({
            "apiVersion": "baremend.io/v1alpha1",
            "kind": "HostBmc",
            "metadata": {"name": "mine-too"},
            "spec": {"machineName": "mine", "address": address, "credentialsName": "rack-bmc"},
        }),
    )
    .await;
    for name in ["mine", "mine-too"] {
        let condition = refused(&lab, host_bmcs, TENANT, name, "ContestedMachine").await;
        let message = condition["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(
                "2 HostBmcs name Machine tenant-a/mine (tenant-a/mine, tenant-a/mine-too)"
            ),
            "{message}"
        );
    }
    metric(
        &lab,
        "baremend_host_bmcs_refused{kind=\"HostBmc\",reason=\"ContestedMachine\"} 2",
    )
    .await;
    lab.stop().await;
}

/// Before: an OpenShift Machine's BareMetalHost was taken from wherever its `spec.providerID`
/// or `metal3.io/BareMetalHost` annotation pointed, so whoever may write a Machine in any
/// namespace (here a tenant allowed to, in its own) could have a host of the Machine API's
/// powered off, and its Node released. Now a host outside the Machine's namespace counts only
/// in a namespace `trust.machineHostNamespaces` lists; once the Machine API's is listed, the
/// same attack reaches the host, which is how every namespace behaved before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openshift_machine_naming_another_namespaces_host_powers_nothing() {
    let mut lab = Lab::builder(fast())
        .policy(fast_policy(json!({"maxConcurrent": 3})))
        .start()
        .await;
    let tenant = tenant(&lab).await;
    lab.start_controller(lab.options());
    let machines = tenant_api(&tenant, MACHINES, "Machine");
    let attack = async |name: &str, host: &str| {
        let machine: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1",
            "kind": "Machine",
            "metadata": {
                "name": name,
                "annotations": {
                    "metal3.io/BareMetalHost": format!("{MACHINE_NAMESPACE}/{host}"),
                    "host.metal3.io/external-remediation": "",
                },
            },
            "spec": {"providerID": format!("baremetalhost:///{MACHINE_NAMESPACE}/{host}")},
        }))
        .unwrap();
        machines
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
        let status =
            json!({"status": {"phase": "Running", "nodeRef": {"kind": "Node", "name": host}}});
        machines
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    };
    attack("evil", "worker-1").await;
    warning_in(
        &lab,
        TENANT,
        ("Machine", "evil"),
        "InvalidMachine",
        "openshift-machine-api/worker-1 is outside the Machine's namespace tenant-a",
    )
    .await;
    let failed = eventually("evil-1 Failed", Duration::from_secs(20), async || {
        let object = lab
            .api
            .get(REMEDIATIONS, TENANT, "evil-1")
            .map_err(|e| e.message)?;
        let remediation: Remediation = serde_json::from_value(object).unwrap();
        let status = remediation.status.unwrap_or_default();
        (status.phase == RemediationPhase::Failed)
            .then_some(status.last_error.clone().unwrap_or_default())
            .ok_or(format!("{status:#?}"))
    })
    .await;
    assert!(
        failed.contains("trust.machineHostNamespaces does not list openshift-machine-api"),
        "{failed}"
    );
    lab.hold(Duration::from_secs(2)).await;
    untouched(&lab, &["worker-1"], &[MACHINE_NAMESPACE]);
    let annotations = host_annotations(&lab, "worker-1").unwrap();
    assert!(!annotations.contains("reboot.metal3.io"), "{annotations}");
    // The same attack on worker-2, the Machine API's namespace listed by an administrator.
    patch_policy(
        &lab,
        json!({"trust": {"machineHostNamespaces": [MACHINE_NAMESPACE]}}),
    )
    .await;
    attack("evil-too", "worker-2").await;
    eventually(
        "worker-2's host asked off through the listed namespace",
        Duration::from_secs(20),
        async || {
            let annotations = host_annotations(&lab, "worker-2")?;
            (annotations.contains("reboot.metal3.io") || !lab.power_history("worker-2").is_empty())
                .then_some(())
                .ok_or(annotations)
        },
    )
    .await;
    lab.stop().await;
}

/// Before: the Metal3Machine was read in the namespace `spec.infrastructureRef` names, the
/// host in the namespace its annotation names, and the host's `spec.consumerRef` was never
/// checked: a tenant's Machine could have another namespace's host powered off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metal3_machine_naming_another_namespaces_host_is_held_before_any_power_request() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    // The tenant's two Machines are a Cluster of their own (`tenant-a/sim`), both unhealthy:
    // the storm gate, which counts per Cluster, would hold them first. Set aside here, to
    // show the ownership gate.
    let mut lab = Lab::builder(spec)
        .policy(fast_policy(
            json!({"maxConcurrent": 3, "storm": {"maxUnhealthyPercent": 100}}),
        ))
        .start()
        .await;
    lab.api
        .create(
            MACHINE_REMEDIATION_TEMPLATES,
            MACHINE_NAMESPACE,
            json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
        )
        .unwrap();
    let tenant = tenant(&lab).await;
    lab.start_controller(ControllerOptions {
        machine_api: MachineApi::ClusterApi,
        ..lab.options()
    });
    let metal3 = tenant_api(&tenant, METAL3_MACHINES, "Metal3Machine");
    let machines = tenant_api(&tenant, CAPI_MACHINES, "Machine");
    // evil-a: its own Metal3Machine names worker-1's host in the Machines' namespace.
    // evil-b: its infrastructureRef names worker-2's Metal3Machine there directly.
    let m3: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
        "kind": "Metal3Machine",
        "metadata": {"name": "evil-a", "annotations": {"metal3.io/BareMetalHost": format!("{MACHINE_NAMESPACE}/worker-1")}},
        "spec": {},
    }))
    .unwrap();
    metal3.create(&PostParams::default(), &m3).await.unwrap();
    for (name, node, reference) in [
        (
            "evil-a",
            "worker-1",
            json!({"kind": "Metal3Machine", "name": "evil-a"}),
        ),
        (
            "evil-b",
            "worker-2",
            json!({"kind": "Metal3Machine", "name": "worker-2", "namespace": MACHINE_NAMESPACE}),
        ),
    ] {
        let mut reference = reference;
        reference["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1beta1");
        let machine: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": name},
            "spec": {"clusterName": "sim", "bootstrap": {"dataSecretName": "x"}, "infrastructureRef": reference},
        }))
        .unwrap();
        machines
            .create(&PostParams::default(), &machine)
            .await
            .unwrap();
        let status = json!({"status": {"phase": "Running", "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": node}}});
        machines
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        create_as::<MachineRemediation>(
            &tenant,
            json!({"apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediation", "metadata": {"name": name}, "spec": {}}),
        )
        .await;
    }
    for (name, says) in [
        (
            "evil-a",
            "BareMetalHost openshift-machine-api/worker-1 is not in the Machine's namespace tenant-a",
        ),
        ("evil-b", "outside the Machine's namespace tenant-a"),
    ] {
        let remediation = eventually(
            &format!("{name}-1 held HostNotOwned"),
            Duration::from_secs(20),
            async || {
                let object = lab
                    .api
                    .get(REMEDIATIONS, TENANT, &format!("{name}-1"))
                    .map_err(|e| e.message)?;
                let remediation: Remediation = serde_json::from_value(object).unwrap();
                let status = remediation.status.clone().unwrap_or_default();
                let held = status.conditions.iter().any(|c| {
                    c.type_ == "Held"
                        && c.status == "True"
                        && c.reason == "HostNotOwned"
                        && c.message.contains(says)
                });
                if held {
                    Ok(remediation)
                } else {
                    Err(format!("{status:#?}"))
                }
            },
        )
        .await;
        assert_eq!(remediation.status.unwrap().phase, RemediationPhase::Pending);
    }
    metric(&lab, "baremend_remediations_held{gate=\"HostNotOwned\"} 2").await;
    lab.hold(Duration::from_secs(2)).await;
    untouched(&lab, &["worker-1", "worker-2"], &[MACHINE_NAMESPACE]);
    let annotations = host_annotations(&lab, "worker-1").unwrap();
    assert!(!annotations.contains("reboot.metal3.io"), "{annotations}");
    lab.stop().await;
}

/// Before: the drift coordinator escalated to the Machine the Node's
/// `machine.openshift.io/machine` annotation named — which the Node's kubelet may write — so a
/// node could hand another Machine's host to the machine remediation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_annotation_naming_another_machine_does_not_move_the_escalation() {
    let mut lab =
        common::drift::start(2, json!(1), json!({"timeouts": {"rebootSeconds": 2}})).await;
    let tenant = tenant(&lab).await;
    // A tenant cannot write a Node at all; a Node's own kubelet can write its annotations
    // (NodeRestriction does not cover them): the store write below stands for it.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(tenant.clone());
    let annotate = json!({"metadata": {"annotations": {"machine.openshift.io/machine": format!("{MACHINE_NAMESPACE}/worker-1")}}});
    forbidden(
        nodes
            .patch(
                "worker-0",
                &PatchParams::default(),
                &Patch::Merge(&annotate),
            )
            .await,
        "the tenant annotating a Node",
    );
    lab.drift("worker-0");
    lab.reach("worker-0-1", DriftPhase::Applying).await;
    lab.api
        .merge(NODES, "", "worker-0", &annotate, false)
        .unwrap();
    lab.cluster.break_host("worker-0");
    lab.reach("worker-0-1", DriftPhase::Escalated).await;
    let trigger = |machine: &str| {
        lab.api.get(MACHINES, MACHINE_NAMESPACE, machine).unwrap()["metadata"]["annotations"]
            .get(baremend::api::annotations::EXTERNAL_REMEDIATION)
            .is_some()
    };
    // The hand-over follows the persisted phase: the Event says where it went.
    eventually("the hand-over Event", Duration::from_secs(20), async || {
        lab.events()
            .contains("handed to the machine remediation (openshift-machine-api/worker-0)")
    })
    .await;
    // The Machine whose status.nodeRef names worker-0 got the hand-over; worker-1 nothing.
    assert!(trigger("worker-0"), "worker-0's Machine has no trigger");
    assert!(!trigger("worker-1"), "worker-1's Machine was handed over");
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["machine.openshift.io/machine"],
        format!("{MACHINE_NAMESPACE}/worker-1"),
        "the kubelet's annotation stayed in place through the escalation"
    );
    untouched(&lab, &["worker-1"], &[MACHINE_NAMESPACE]);
    lab.stop().await;
}

/// Before: `deploy/` let the controller's account create any pod in its namespace (RBAC
/// cannot say which), and its helpers' account may run privileged: with the controller's
/// token, a "helper" mounting more of the node than `/` (or anything else) was created, i.e.
/// root on any node for whoever holds that token. Now the API server admits only the helpers'
/// exact shape from that account: each helper the coordinator builds is admitted, each
/// deviation is refused by the policy with 422 and nothing is stored. Without the policy's
/// binding the same pod is created again — the refusal is the policy's, not RBAC's or the
/// schema's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_shaped_pod_with_an_extra_host_path_is_refused_with_the_controllers_token() {
    let lab = Lab::builder(fast()).start().await;
    let controller = lab.controller_client.clone();
    let stored = |name: &str| lab.api.get(PODS, HELPERS, name).is_ok();

    // Every helper the coordinator builds passes, the install's content Secret included.
    let ops = admitted_ops();
    for op in &ops {
        let pod = helper_pod("admitted", op);
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        create_pod(&controller, &pod)
            .await
            .unwrap_or_else(|e| panic!("the {name} helper is refused: {e}"));
        assert!(stored(&name), "{name}");
    }

    // The attack: the force helper with the node's /etc mounted besides its /.
    let attack = extra_host_path_attack();
    refused_by_policy(
        create_pod(&controller, &attack).await,
        "attack-force",
        MOUNTS,
    );
    assert!(!stored("attack-force"), "the attack's pod was stored");

    // Every other way out of the shape, one at a time.
    for (what, tamper, message) in deviations("baremend@sha256:…") {
        let mut pod = helper_pod("deviant", &HelperOp::Force);
        tamper(&mut pod);
        refused_by_policy(
            create_pod(&controller, &pod).await,
            "deviant-force",
            &message,
        );
        assert!(!stored("deviant-force"), "{what}: stored");
    }

    // The policy binds the controller's account only: the administrator may create the same
    // pod (the server's other checks accept it).
    create_pod(&lab.client, &attack)
        .await
        .expect("the administrator creates the pod");
    assert!(stored("attack-force"));
    lab.api
        .delete(PODS, HELPERS, "attack-force", Some(0))
        .unwrap();
    assert!(!stored("attack-force"));

    // Without the binding — as before deploy/ shipped it — the controller's token creates it.
    lab.api
        .delete(POLICY_BINDINGS, "", HELPER_POLICY, None)
        .unwrap();
    eventually(
        "the controller's token creates the attack once the binding is gone",
        Duration::from_secs(10),
        async || create_pod(&controller, &attack).await.is_ok(),
    )
    .await;
    assert!(stored("attack-force"));
}

/// Issue 39, "our records, ours alone". Before: nothing but RBAC kept anyone from writing a
/// Remediation or its status, and a Remediation is adopted by `spec.machineName`: one written
/// by another account — an aggregated admin role, another operator — was carried out past
/// every start gate. Now deploy/'s admission policy (`deploy/base/records-admission.yaml`)
/// lets only the controller's account create them or write their status; metadata stays
/// anyone's, and of a DriftRemediation's spec only `abort` (the operations guide's way to
/// end one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_written_by_the_controller_alone() {
    let lab = Lab::builder(fast())
        .policy(fast_policy(json!({})))
        .start()
        .await;
    let tenant = tenant(&lab).await;
    let refused = |result: Result<Value, baremend_sim::apiserver::ApiError>, says: &str| {
        let error = result.expect_err("refused");
        assert_eq!(error.code, 403, "{error:?}");
        assert!(error.message.contains(says), "{}", error.message);
    };
    // A cluster administrator (the in-process admin path: RBAC allows all) cannot make one.
    let forged = json!({"metadata": {"name": "worker-0-1"}, "spec": {"machineName": "worker-0"}});
    refused(
        lab.api
            .create(REMEDIATIONS, MACHINE_NAMESPACE, forged.clone()),
        "only baremend's controller creates Remediations and DriftRemediations",
    );
    // Nor can the tenant, whose role allows every verb on baremend's kinds in its namespace.
    let made: kube::Result<Remediation> = Api::namespaced(tenant.clone(), TENANT)
        .create(
            &PostParams::default(),
            &serde_json::from_value(forged.clone()).unwrap(),
        )
        .await;
    match made {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(status.message.contains("baremend-records"), "{status:?}");
        }
        other => panic!("the tenant's Remediation was not refused: {other:?}"),
    }
    // A record the controller wrote: its status is the controller's, its labels anyone's.
    lab.seed_remediation("worker-1", 1, "Pending", json!({}));
    refused(
        lab.api.merge(
            REMEDIATIONS,
            MACHINE_NAMESPACE,
            "worker-1-1",
            &json!({"status": {"phase": "PoweringOn"}}),
            true,
        ),
        "only baremend's controller writes the status of its records",
    );
    lab.api
        .merge(
            REMEDIATIONS,
            MACHINE_NAMESPACE,
            "worker-1-1",
            &json!({"metadata": {"labels": {"team": "infra"}}}),
            false,
        )
        .unwrap();
    // A DriftRemediation: aborted by an operator, never retargeted.
    lab.seed_drift_remediation("worker-2", 1, "Pending", json!({}));
    let drift = common::lab::DRIFT_REMEDIATIONS;
    refused(
        lab.api.merge(
            drift,
            "",
            "worker-2-1",
            &json!({"spec": {"nodeName": "worker-0"}}),
            false,
        ),
        "only spec.abort of a DriftRemediation may be changed",
    );
    lab.api
        .merge(
            drift,
            "",
            "worker-2-1",
            &json!({"spec": {"abort": true}}),
            false,
        )
        .unwrap();
    // Deleting stays open (the uninstall guide deletes them with the CRDs).
    lab.api
        .delete(REMEDIATIONS, MACHINE_NAMESPACE, "worker-1-1", None)
        .unwrap();
}

/// Issue 39, "the monitor and the corroborating reads also send credentials without the TLS
/// check". Before: the power monitor (and the corroboration of an operator's report) logged
/// in to a BMC over plain HTTP or unverified TLS whatever the policy said; only the proof
/// refused such reads afterwards. Now no credentials go to an insecure BMC unless the policy
/// allows insecure BMCs (`allowInsecureBmc`); allowed, the same BMC is logged in to at once
/// (the test's own check that it can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_go_to_an_insecure_bmc_unless_the_policy_allows_it() {
    let spec = ClusterSpec {
        platform_none: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec)
        .policy(fast_policy(json!({"allowInsecureBmc": false})))
        .start()
        .await;
    lab.start_controller(monitoring_often(&lab));
    // worker-0's HostBmc (an administrator's, in a trusted namespace) points at plain HTTP.
    let (address, logins) = common::counting_listener().await;
    lab.api
        .merge(
            baremend_sim::cluster::local::HOST_BMCS,
            MACHINE_NAMESPACE,
            "worker-0",
            &json!({"spec": {"address": address}}),
            false,
        )
        .unwrap();
    lab.hold(Duration::from_secs(4)).await;
    assert_eq!(
        logins.load(Ordering::SeqCst),
        0,
        "a connection to a plain-HTTP BMC the policy does not allow"
    );
    patch_policy(&lab, json!({"allowInsecureBmc": true})).await;
    connected(&logins, "a BMC the policy now allows").await;
    lab.stop().await;
}
