//! The bounds of baremend's CRDs hold through an API server: the CRDs of `crds/` are
//! registered with the simulated API server (which validates custom resources against their
//! structural schema, as kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
//! validation/validation.go` does), an over-long or malformed name, a helper image named by
//! tag, and an over-long list are refused with 422 naming the field, and every object of
//! baremend's kinds that deploy/ ships is still accepted.

use std::path::{Path, PathBuf};

use baremend_sim::apiserver::ApiServer;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde::Deserialize;
use serde_json::{Value, json};

/// The simulated API server with every CRD of `crds/`, and a client of it.
async fn start() -> (ApiServer, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start(Default::default()).await.unwrap();
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in yaml_files(&repo().join("crds")) {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    (server, client)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The documents of a YAML file, as JSON.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The client for `object`'s kind, in its namespace if it has one.
fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap();
    let kind = object["kind"].as_str().unwrap();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn create(client: &Client, object: Value) -> Result<DynamicObject, kube::Error> {
    if let Some(namespace) = object["metadata"]["namespace"].as_str() {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let wanted = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        // Several objects share a namespace: one made before is fine.
        let _ = namespaces.create(&PostParams::default(), &wanted).await;
    }
    let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    api_for(client, &object)
        .create(&PostParams::default(), &dynamic)
        .await
}

/// Creates `object` and expects a 422 whose causes name `field` (and only it).
async fn assert_refused(client: &Client, object: Value, field: &str) {
    let status = match create(client, object.clone()).await {
        Err(kube::Error::Api(status)) => status,
        other => panic!("{object}: expected a 422, got {other:?}"),
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid", "{status:?}");
    assert!(status.message.contains(field), "{status:?}");
    let causes: Vec<String> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| c.field.clone())
        .collect();
    assert_eq!(causes, [field], "{status:?}");
}

fn host_bmc(spec: Value) -> Value {
    json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc",
        "metadata": {"name": "h", "namespace": "default"}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_must_be_dns_subdomains_of_at_most_253_characters() {
    let (_server, client) = start().await;
    let spec = |node: &str| json!({"nodeName": node, "address": "redfish://10.0.0.1", "credentialsName": "creds"});
    // 253 characters in labels of 63 is the longest name a Node can have.
    let longest = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    assert_eq!(longest.len(), 253);
    let mut accepted = host_bmc(spec(&longest));
    accepted["metadata"]["name"] = json!("longest");
    create(&client, accepted).await.unwrap();
    let too_long = format!("{longest}e");
    for bad in [too_long.as_str(), "Worker-0", "worker_0", "-worker"] {
        assert_refused(&client, host_bmc(spec(bad)), "spec.nodeName").await;
    }
    let mut bad_secret = spec("worker-0");
    bad_secret["credentialsName"] = json!("Creds");
    assert_refused(&client, host_bmc(bad_secret), "spec.credentialsName").await;

    let remediation = |spec: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
            "metadata": {"name": "r", "namespace": "default"}, "spec": spec})
    };
    assert_refused(
        &client,
        remediation(json!({"machineName": "Worker_0"})),
        "spec.machineName",
    )
    .await;
    assert_refused(
        &client,
        remediation(json!({"machineName": "w", "host": "worker-0"})),
        "spec.host",
    )
    .await;
    assert_refused(
        &client,
        remediation(json!({"machineName": "w",
            "trigger": {"kind": "NodeRemediation", "namespace": "a.b"}})),
        "spec.trigger.namespace",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helper_image_must_be_pinned_by_digest_and_its_namespace_a_label() {
    let (_server, client) = start().await;
    let policy = |name: &str, spec: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "DriftPolicy",
            "metadata": {"name": name}, "spec": spec})
    };
    assert_refused(
        &client,
        policy("tag", json!({"helperImage": "quay.io/acme/baremend:1.4"})),
        "spec.helperImage",
    )
    .await;
    assert_refused(
        &client,
        policy("ns", json!({"helperNamespace": "baremend.system"})),
        "spec.helperNamespace",
    )
    .await;
    let pinned = format!("quay.io/acme/baremend@sha256:{}", "0f".repeat(32));
    let created = create(&client, policy("pinned", json!({"helperImage": pinned})))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["helperImage"], json!(pinned));
    // Unset, it stays unset (the controller's own image) and the namespace is defaulted.
    let created = create(&client, policy("default", json!({}))).await.unwrap();
    assert!(created.data["spec"].get("helperImage").is_none());
    assert_eq!(created.data["spec"]["helperNamespace"], "baremend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_blobs_are_bounded() {
    let (_server, client) = start().await;
    let four = ["DirectBmc", "DirectBmc", "DirectBmc", "DirectBmc"];
    let template = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediationTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"template": {"spec": {"strategies": four}}}});
    assert_refused(&client, template, "spec.template.spec.strategies").await;
    let policy = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "RemediationPolicy",
        "metadata": {"name": "p"}, "spec": {"strategies": four}});
    assert_refused(&client, policy, "spec.strategies").await;
    let bundle = "A".repeat(64 * 1024 + 1);
    let spec = json!({"machineName": "m", "address": "redfish://10.0.0.1",
        "credentialsName": "creds", "caBundle": bundle});
    assert_refused(&client, host_bmc(spec), "spec.caBundle").await;
    let drift = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "DriftRemediation",
        "metadata": {"name": "d"}, "spec": {"nodeName": "n", "kind": "Content",
            "target": format!("/{}", "x".repeat(4096)), "action": "Force"}});
    assert_refused(&client, drift, "spec.target").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_of_ours_that_deploy_ships_is_accepted() {
    let (_server, client) = start().await;
    let mut files = vec![repo().join("deploy/policies.yaml")];
    files.extend(yaml_files(&repo().join("deploy/examples")));
    let mut created = Vec::new();
    for file in files {
        for object in documents(&file) {
            let ours = object["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("baremend.io/"));
            if !ours {
                continue;
            }
            let kind = object["kind"].as_str().unwrap().to_owned();
            if let Err(error) = create(&client, object).await {
                panic!("{}: {kind}: {error}", file.display());
            }
            created.push(kind);
        }
    }
    // The shipped policies and both kinds of HostBmc example are among them.
    for kind in ["RemediationPolicy", "DriftPolicy", "HostBmc"] {
        assert!(created.iter().any(|k| k == kind), "{kind}: {created:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_whose_ready_grace_outlasts_its_node_ready_deadline_is_refused() {
    // A Node counts as back only once Ready for the grace period, within the node-ready
    // deadline: with a grace as long as the deadline every remediation would end
    // NodeNeverReady. The grace defaults to 30 s, so a deadline of 30 s alone is refused too.
    let (_server, client) = start().await;
    let policy = |name: &str, timeouts: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "RemediationPolicy",
            "metadata": {"name": name}, "spec": {"timeouts": timeouts}})
    };
    for (name, timeouts) in [
        ("equal", json!({"nodeReadySeconds": 30})),
        (
            "longer",
            json!({"nodeReadySeconds": 60, "readyGraceSeconds": 61}),
        ),
    ] {
        let refused = match create(&client, policy(name, timeouts)).await {
            Err(kube::Error::Api(status)) => status,
            other => panic!("{name}: expected a 422, got {other:?}"),
        };
        assert_eq!(refused.code, 422, "{refused:?}");
        assert!(
            refused
                .message
                .contains("readyGraceSeconds must be shorter than timeouts.nodeReadySeconds"),
            "{refused:?}"
        );
    }
    for (name, timeouts) in [
        (
            "shorter",
            json!({"nodeReadySeconds": 30, "readyGraceSeconds": 2}),
        ),
        ("defaults", json!({})),
    ] {
        create(&client, policy(name, timeouts)).await.unwrap();
    }
}
