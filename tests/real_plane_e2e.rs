//! deploy/ on a real kube-apiserver (with etcd and kube-controller-manager, the release pinned
//! in `tools/kubernetes/`), installed as the install guide says, judged by the real server:
//!
//! - the helpers' admission policy, compiled and run by the server's own CEL: every helper the
//!   coordinator builds is admitted with the controller's token (issued by the server for
//!   deploy/'s ServiceAccount), every deviation refused with the policy's words, the same pod
//!   admitted for the administrator;
//! - `baremend run` as that ServiceAccount, with that token: it takes its Lease, fills its
//!   caches and stays up, and the server refuses it nothing (no `Forbidden` in its log);
//! - `baremend check` as the administrator reads what is installed.

use std::process::Stdio;
use std::time::Duration;

use baremend::drift::helper::HelperOp;
use baremend::lab::setup::LAB_HELPER_IMAGE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use tokio::io::AsyncReadExt;

use baremend_testkit as common;
use baremend_testkit::on_both_servers;

use common::eventually;
use common::helper_policy::{
    HELPERS, MOUNTS, admitted_ops, create_pod, deviations, extra_host_path_attack, helper_pod,
    refused_by_policy,
};
use common::real::{controller_kubeconfig, installed};
use common::servers::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_server_admits_only_the_helpers_shape_from_the_controllers_token() {
    let c = installed().await;
    let controller = Server::client_of(&controller_kubeconfig(&c).await).await;
    let attack = extra_host_path_attack();
    // A real server enforces a new policy once its admission plugin has loaded it (it reads
    // policies through an informer): a moment after the apply, never at once.
    let pods: Api<Pod> = Api::namespaced(controller.clone(), HELPERS);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let as_pod: Pod = serde_json::from_value(attack.clone()).unwrap();
    eventually(
        "the helpers' policy is in force",
        Duration::from_secs(30),
        async || pods.create(&dry_run, &as_pod).await.is_err(),
    )
    .await;
    for op in &admitted_ops() {
        let pod = helper_pod("admitted", op);
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        create_pod(&controller, &pod)
            .await
            .unwrap_or_else(|e| panic!("the {name} helper is refused by the real server: {e}"));
    }
    refused_by_policy(
        create_pod(&controller, &attack).await,
        "attack-force",
        MOUNTS,
    );
    for (what, tamper, message) in deviations(LAB_HELPER_IMAGE) {
        let mut pod = helper_pod("deviant", &HelperOp::Force);
        tamper(&mut pod);
        let result = create_pod(&controller, &pod).await;
        assert!(result.is_err(), "{what}: admitted by the real server");
        refused_by_policy(result, "deviant-force", &message);
    }
    // The policy binds the controller's account only: the administrator creates the same pod.
    let admin = Server::client_of(&c.plane().unwrap().admin_kubeconfig()).await;
    create_pod(&admin, &attack)
        .await
        .expect("the administrator creates the pod");
}

/// Reads what a child wrote to a pipe so far, without waiting for more.
async fn drain(pipe: &mut tokio::process::ChildStderr, into: &mut Vec<u8>) {
    let mut buffer = [0u8; 8192];
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(50), pipe.read(&mut buffer)).await
    {
        if n == 0 {
            break;
        }
        into.extend_from_slice(&buffer[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baremend_runs_as_its_service_account_on_the_real_server_with_nothing_forbidden() {
    let c = installed().await;
    // The kubeconfig's current context is another cluster, unreachable: `--context` picks
    // the plane's, as it does for kubectl.
    let mut config: serde_json::Value =
        serde_json::from_str(&controller_kubeconfig(&c).await).unwrap();
    config["clusters"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(
        {"name": "elsewhere", "cluster": {"server": "https://127.0.0.1:1"}}));
    config["contexts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!(
        {"name": "elsewhere", "context": {"cluster": "elsewhere", "user": "user"}}));
    config["current-context"] = serde_json::json!("elsewhere");
    let kubeconfig = c.dir.join("controller.kubeconfig");
    std::fs::write(&kubeconfig, config.to_string()).unwrap();
    let mut child = common::real::run_command(&kubeconfig, "baremend-real-plane")
        .args(["--context", "plane"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("baremend runs");
    let mut stderr = child.stderr.take().unwrap();
    // It takes deploy/'s Lease in its namespace.
    let holder = common::real::lease_held_by(&c, "baremend-real-plane").await;
    assert!(holder.contains("baremend-real-plane"), "{holder}");
    // Let it fill its caches and make its first passes; then it is still running and the
    // server refused it nothing.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let mut log = Vec::new();
    drain(&mut stderr, &mut log).await;
    let log = String::from_utf8_lossy(&log).into_owned();
    assert!(
        child.try_wait().unwrap().is_none(),
        "baremend exited on the real server:\n{log}"
    );
    for refused in ["Forbidden", "forbidden", " 403"] {
        assert!(
            !log.contains(refused),
            "the real server refused baremend ({refused}):\n{log}"
        );
    }
    let _ = child.kill().await;
}

/// Upstream's aggregating role of OpenShift's machine-api controllers and its binding
/// (machine-api-operator `install/0000_30_machine-api-operator_09_rbac.yaml`): what a cluster
/// has before baremend, and what deploy/'s labelled ClusterRole joins.
const MACHINE_API_EXT_REMEDIATION: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: machine-api-operator-ext-remediation
aggregationRule:
  clusterRoleSelectors:
    - matchLabels:
        rbac.ext-remediation/aggregate-to-ext-remediation: "true"
rules: []
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: machine-api-operator-ext-remediation
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: machine-api-operator-ext-remediation
subjects:
  - kind: ServiceAccount
    name: machine-api-controllers
    namespace: openshift-machine-api
"#;

/// The MachineHealthCheck controller's account creates our request through upstream's role
/// aggregation (the aggregation controller fills the role with deploy/'s rules); a tenant's
/// same request is refused with the server's words. On both servers.
async fn the_health_checks_account_may_create_our_requests_and_a_tenant_may_not(
    server: common::servers::ServerKind,
) {
    let c = common::kubectl::cluster_on(server).await;
    let crds = common::repo_root().join("crds");
    c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    common::kubectl::established(&c).await;
    c.ok(&["create", "namespace", "openshift-machine-api"], None)
        .await;
    c.ok(&["apply", "-f", "-"], Some(MACHINE_API_EXT_REMEDIATION))
        .await;
    let rbac = common::repo_root().join("deploy/base/rbac-health-checks.yaml");
    c.ok(&["apply", "-f", rbac.to_str().unwrap()], None).await;
    let request = serde_json::json!({
        "apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediation",
        "metadata": {"name": "worker-0", "namespace": "openshift-machine-api"},
        "spec": {}});
    let api_of = |kubeconfig: String| async move {
        let client = Server::client_of(&kubeconfig).await;
        let resource = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "baremend.io",
            "v1alpha1",
            "MachineRemediation",
        ));
        Api::<kube::api::DynamicObject>::namespaced_with(client, "openshift-machine-api", &resource)
    };
    let as_object: kube::api::DynamicObject = serde_json::from_value(request).unwrap();
    let health_check = api_of(c.kubeconfig_of(
        "system:serviceaccount:openshift-machine-api:machine-api-controllers",
        &[
            "system:serviceaccounts",
            "system:serviceaccounts:openshift-machine-api",
        ],
    ))
    .await;
    // The aggregation controller fills the role a moment after the labelled role appears.
    eventually(
        "the MachineHealthCheck's account creates the request",
        Duration::from_secs(30),
        async || {
            health_check
                .create(&PostParams::default(), &as_object)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    let tenant = api_of(c.kubeconfig_of("tenant", &["tenants"])).await;
    let mut second = as_object.clone();
    second.metadata.name = Some("worker-1".into());
    match tenant.create(&PostParams::default(), &second).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(
                status.message,
                "machineremediations.baremend.io is forbidden: User \"tenant\" cannot create \
                 resource \"machineremediations\" in API group \"baremend.io\" in the namespace \
                 \"openshift-machine-api\"",
            );
        }
        other => panic!("the tenant's request was not refused: {other:?}"),
    }
}

on_both_servers!(the_health_checks_account_may_create_our_requests_and_a_tenant_may_not);
