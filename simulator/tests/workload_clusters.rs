//! A Cluster API management cluster with workload clusters (`workloadClusters`): each workload
//! API server holds only its own Nodes (the same Node names in every cluster), the management
//! cluster holds the Clusters, their kubeconfig Secrets (usable by kube-rs and kubectl) and the
//! Machines, and the health check reads each cluster's Nodes through its Secret — and asks for
//! nothing about Nodes it cannot read.

use std::collections::BTreeSet;
use std::time::Duration;

use baremend_sim::cluster::local::{
    BMHS, CAPI_CLUSTERS, CAPI_MACHINES, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS,
    NODES, SECRETS,
};
use baremend_sim::cluster::scenario::{TimedFault, WORKLOAD_API_DOWN};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::workload::{CLUSTER_SECRET_TYPE, kubeconfig_secret_name};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, SimCluster};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

mod common;

use common::eventually;

/// `clusters` workload clusters of `masters` + `workers` hosts each, fast timing.
fn fleet(clusters: usize, masters: usize, workers: usize) -> ClusterSpec {
    ClusterSpec {
        cluster_api: true,
        workload_clusters: clusters,
        masters,
        workers,
        max_unhealthy: "100%".into(),
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

fn name(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn ready(node: &Value) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_owned)
}

/// The management cluster's client (the installer's: unchecked).
fn management(cluster: &SimCluster) -> Local {
    Local::new(cluster.api_server().store().clone(), "test")
}

/// A workload cluster's client (in-process, its admin).
fn workload(cluster: &SimCluster, name: &str) -> Local {
    let store = cluster.workload_cluster(name).unwrap().api_server().store();
    Local::new(store.clone(), "test")
}

/// The kubeconfig a Cluster's Secret holds, read from the management cluster.
fn secret_kubeconfig(api: &Local, cluster: &str) -> String {
    let secret = api
        .get(SECRETS, MACHINE_NAMESPACE, &kubeconfig_secret_name(cluster))
        .unwrap();
    let data = STANDARD
        .decode(secret["data"]["value"].as_str().unwrap())
        .unwrap();
    String::from_utf8(data).unwrap()
}

/// A kube-rs client made from a kubeconfig, without kube's own retries (the tests want to see
/// a failure as it comes).
async fn kube_client(kubeconfig: &str) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let parsed = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.default_retry = false;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(2));
    kube::Client::try_from(config).unwrap()
}

/// Node name → providerID, as a kube-rs client lists them.
async fn nodes_through(client: &kube::Client) -> kube::Result<Vec<(String, String)>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|n| {
            let provider = n.spec.and_then(|s| s.provider_id).unwrap_or_default();
            (n.metadata.name.unwrap_or_default(), provider)
        })
        .collect())
}

/// baremend's request and template kinds and its template `baremend` in the management
/// cluster, and the remediator's aggregated roles, as installing baremend does.
fn template_in_place(api: &Local) {
    common::install_crds(
        api,
        &[
            "machineremediations.yaml",
            "machineremediationtemplates.yaml",
        ],
    );
    let template = json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}});
    api.create(MACHINE_REMEDIATION_TEMPLATES, MACHINE_NAMESPACE, template)
        .unwrap();
    common::install_remediator_roles(api);
}

fn requested(api: &Local, machine: &str) -> bool {
    api.get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, machine)
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_workload_server_holds_only_its_own_nodes_under_the_same_names() {
    let spec = ClusterSpec {
        faults: vec![TimedFault {
            at: Duration::from_millis(300),
            fault: WORKLOAD_API_DOWN.into(),
            target: "wc-1".into(),
        }],
        ..fleet(2, 1, 2)
    };
    let cluster = SimCluster::start(spec).await.unwrap();
    assert_eq!(cluster.ready_nodes(), 6, "{:?}", cluster.node_summary());
    let api = management(&cluster);
    // A pure management cluster: no Nodes of its own.
    assert!(api.list(NODES, None).is_empty());
    let mut providers = Vec::new();
    for wc in ["wc-0", "wc-1"] {
        let nodes = workload(&cluster, wc).list(NODES, None);
        let names: BTreeSet<String> = nodes.iter().map(name).collect();
        assert_eq!(
            names,
            BTreeSet::from(["master-0".into(), "worker-0".into(), "worker-1".into()]),
            "{wc}"
        );
        let worker = nodes.iter().find(|n| name(n) == "worker-0").unwrap();
        let provider = worker["spec"]["providerID"].as_str().unwrap().to_owned();
        assert_eq!(
            provider,
            format!("metal3://{MACHINE_NAMESPACE}/{wc}-worker-0/{wc}-worker-0")
        );
        assert_eq!(
            worker["metadata"]["annotations"]["cluster.x-k8s.io/cluster-name"],
            wc
        );
        // The Machine names its cluster and its Node, with the Node's providerID.
        let machine = api
            .get(CAPI_MACHINES, MACHINE_NAMESPACE, &format!("{wc}-worker-0"))
            .unwrap();
        assert_eq!(machine["spec"]["clusterName"], wc);
        assert_eq!(machine["spec"]["providerID"], provider.as_str());
        assert_eq!(machine["status"]["nodeRef"]["name"], "worker-0");
        let labels = &machine["metadata"]["labels"];
        assert_eq!(labels["cluster.x-k8s.io/cluster-name"], wc);
        assert_eq!(
            labels["cluster.x-k8s.io/deployment-name"],
            format!("{wc}-workers")
        );
        // Its host, labelled with the Cluster's name as CAPM3 labels a host it consumes
        // (cluster-api-provider-metal3 `baremetal/metal3machine_manager.go`, `setHostLabel`).
        let host = api
            .get(BMHS, MACHINE_NAMESPACE, &format!("{wc}-worker-0"))
            .unwrap();
        assert_eq!(
            host["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            wc
        );
        assert_eq!(host["spec"]["consumerRef"]["kind"], "Metal3Machine");
        let master = api
            .get(CAPI_MACHINES, MACHINE_NAMESPACE, &format!("{wc}-master-0"))
            .unwrap();
        assert!(
            master["metadata"]["labels"]
                .get("cluster.x-k8s.io/control-plane")
                .is_some()
        );
        providers.push(provider);
        // The Cluster, provisioned, its endpoint the workload server.
        let object = api.get(CAPI_CLUSTERS, MACHINE_NAMESPACE, wc).unwrap();
        assert_eq!(object["status"]["phase"], "Provisioned");
        assert_eq!(object["status"]["controlPlaneReady"], true);
        assert_eq!(object["spec"]["paused"], false);
        let url = cluster.workload_cluster(wc).unwrap().url().to_owned();
        let port = object["spec"]["controlPlaneEndpoint"]["port"]
            .as_u64()
            .unwrap();
        assert!(url.ends_with(&format!(":{port}")), "{url} {object}");
        // Its kubeconfig Secret, as Cluster API writes it.
        let secret = api
            .get(SECRETS, MACHINE_NAMESPACE, &format!("{wc}-kubeconfig"))
            .unwrap();
        assert_eq!(secret["type"], CLUSTER_SECRET_TYPE);
        assert_eq!(
            secret["metadata"]["labels"]["cluster.x-k8s.io/cluster-name"],
            wc
        );
        let owner = &secret["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["uid"].as_str()),
            (Some("Cluster"), object["metadata"]["uid"].as_str())
        );
        let kubeconfig = secret_kubeconfig(&api, wc);
        assert_eq!(Some(kubeconfig.clone()), cluster.workload_kubeconfig(wc));
        assert!(kubeconfig.contains(&format!("server: {url}")));
        assert!(kubeconfig.contains("certificate-authority-data:"));
    }
    assert_ne!(providers[0], providers[1]);
    let host = cluster.host("wc-1-worker-0").unwrap();
    assert_eq!(
        (host.node_name.as_str(), host.cluster.as_deref()),
        ("worker-0", Some("wc-1"))
    );
    let summary = cluster.node_summary();
    assert_eq!(
        summary.get("wc-1/worker-1").map(String::as_str),
        Some("True")
    );
    assert_eq!(summary.len(), 6);
    // The scenario's fault takes wc-1's API server away, and only wc-1's.
    eventually("wc-1 unreachable", Duration::from_secs(5), async || {
        let server = cluster.workload_cluster("wc-1").unwrap().api_server();
        (!server.reachability().is_reachable()).then_some(())
    })
    .await;
    let wc0 = cluster.workload_cluster("wc-0").unwrap().api_server();
    assert!(wc0.reachability().is_reachable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubeconfig_secret_lists_its_clusters_nodes_with_kube_rs_and_kubectl() {
    let cluster = SimCluster::start(fleet(2, 1, 1)).await.unwrap();
    // From the management cluster over HTTPS, as a controller reads it.
    let manager = kube_client(&cluster.kubeconfig()).await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(manager, MACHINE_NAMESPACE);
    let secret = secrets.get("wc-1-kubeconfig").await.unwrap();
    let value = &secret.data.unwrap()["value"].0;
    let kubeconfig = String::from_utf8(value.clone()).unwrap();
    let client = kube_client(&kubeconfig).await;
    let mut nodes = nodes_through(&client).await.unwrap();
    nodes.sort();
    let ns = MACHINE_NAMESPACE;
    assert_eq!(
        nodes,
        [
            (
                "master-0".into(),
                format!("metal3://{ns}/wc-1-master-0/wc-1-master-0")
            ),
            (
                "worker-0".into(),
                format!("metal3://{ns}/wc-1-worker-0/wc-1-worker-0")
            ),
        ]
    );
    // kubectl with the same kubeconfig (its CA checked: no --insecure-skip-tls-verify).
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("workload-clusters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wc-1.kubeconfig");
    std::fs::write(&path, &kubeconfig).unwrap();
    let output = tokio::process::Command::new("kubectl")
        .args(["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"])
        .env("KUBECONFIG", &path)
        .output()
        .await
        .expect("kubectl is installed (the machine image ships v1.32)");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        out.contains("wc-1-worker-0") && !out.contains("wc-0-"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_host_goes_not_ready_in_its_own_cluster_and_only_its_machine_gets_a_request() {
    let cluster = SimCluster::start(fleet(2, 1, 2)).await.unwrap();
    let api = management(&cluster);
    template_in_place(&api);
    assert!(cluster.hang("wc-1-worker-0"));
    eventually(
        "the request for wc-1-worker-0",
        Duration::from_secs(15),
        async || requested(&api, "wc-1-worker-0").then_some(()),
    )
    .await;
    let node = workload(&cluster, "wc-1")
        .get(NODES, "", "worker-0")
        .unwrap();
    assert_ne!(ready(&node).as_deref(), Some("True"));
    // The other cluster's worker-0, same Node name, is Ready and asked for nothing.
    let same_name = workload(&cluster, "wc-0")
        .get(NODES, "", "worker-0")
        .unwrap();
    assert_eq!(ready(&same_name).as_deref(), Some("True"));
    let requests: Vec<String> = api
        .list(MACHINE_REMEDIATIONS, Some(MACHINE_NAMESPACE))
        .iter()
        .map(name)
        .collect();
    assert_eq!(requests, ["wc-1-worker-0"]);
    let owner = &api
        .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, "wc-1-worker-0")
        .unwrap()["metadata"]["ownerReferences"][0];
    assert_eq!(
        (owner["kind"].as_str(), owner["name"].as_str()),
        (Some("Machine"), Some("wc-1-worker-0"))
    );
    // wc-0's health check counts its own two workers, both healthy.
    let mhcs = baremend_sim::cluster::local::CAPI_MHCS;
    let status = &api.get(mhcs, MACHINE_NAMESPACE, "wc-0-workers").unwrap()["status"];
    assert_eq!(
        (
            status["expectedMachines"].as_u64(),
            status["currentHealthy"].as_u64()
        ),
        (Some(2), Some(2))
    );
    let refusals = cluster.actor_refusals();
    assert!(refusals.is_empty(), "{refusals:#?}");
}

/// kubernetes-sigs/cluster-api `internal/controllers/machinehealthcheck/
/// machinehealthcheck_controller.go` (`reconcile`: without a ClusterCache client for the
/// workload cluster — `ErrClusterNotConnected` — the health check requeues before looking at
/// any target) and `machinehealthcheck_targets.go` (`getTargetsFromMHC`: only a Node read
/// that answers NotFound makes a Node missing): a cluster the health check cannot read —
/// its API server gone, its kubeconfig Secret missing, or naming a server that is no workload
/// cluster's — gets no request, however long its hung Node stays NotReady; the same hang in a
/// readable cluster does; once readable again, the request comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_asks_nothing_about_nodes_it_cannot_read() {
    let cluster = SimCluster::start(fleet(4, 0, 1)).await.unwrap();
    let api = management(&cluster);
    template_in_place(&api);
    let kubeconfig = cluster.workload_kubeconfig("wc-0").unwrap();
    let client = kube_client(&kubeconfig).await;
    assert_eq!(nodes_through(&client).await.unwrap().len(), 1);
    // wc-0: its API server goes away (a client's list fails); wc-1: its Secret is gone;
    // wc-2: its Secret names a server no workload cluster has; wc-3 stays readable.
    assert!(cluster.set_workload_api_down("wc-0", true));
    assert!(nodes_through(&client).await.is_err());
    let (wc1, wc2) = (
        kubeconfig_secret_name("wc-1"),
        kubeconfig_secret_name("wc-2"),
    );
    let kept = api.get(SECRETS, MACHINE_NAMESPACE, &wc1).unwrap();
    api.delete(SECRETS, MACHINE_NAMESPACE, &wc1, Some(0))
        .unwrap();
    let elsewhere =
        secret_kubeconfig(&api, "wc-2").replace("https://127.0.0.1:", "https://127.0.0.2:");
    let patch = json!({"data": {"value": STANDARD.encode(&elsewhere)}});
    api.merge(SECRETS, MACHINE_NAMESPACE, &wc2, &patch, false)
        .unwrap();
    for wc in ["wc-0", "wc-1", "wc-2", "wc-3"] {
        assert!(cluster.hang(&format!("{wc}-worker-0")));
    }
    eventually(
        "the request for wc-3-worker-0",
        Duration::from_secs(15),
        async || requested(&api, "wc-3-worker-0").then_some(()),
    )
    .await;
    // Many passes (100 ms) past the Nodes' 500 ms unhealthy timeout.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for wc in ["wc-0", "wc-1", "wc-2"] {
        let node = workload(&cluster, wc).get(NODES, "", "worker-0").unwrap();
        assert_ne!(ready(&node).as_deref(), Some("True"), "{wc}");
        assert!(!requested(&api, &format!("{wc}-worker-0")), "{wc}");
    }
    // Readable again: the API server back, the Secret restored and corrected.
    assert!(cluster.set_workload_api_down("wc-0", false));
    assert_eq!(nodes_through(&client).await.unwrap().len(), 1);
    let mut restored = kept.clone();
    restored["metadata"] = json!({"name": wc1, "labels": kept["metadata"]["labels"]});
    api.create(SECRETS, MACHINE_NAMESPACE, restored).unwrap();
    let patch =
        json!({"data": {"value": STANDARD.encode(cluster.workload_kubeconfig("wc-2").unwrap())}});
    api.merge(SECRETS, MACHINE_NAMESPACE, &wc2, &patch, false)
        .unwrap();
    for wc in ["wc-0", "wc-1", "wc-2"] {
        let machine = format!("{wc}-worker-0");
        eventually(&machine, Duration::from_secs(10), async || {
            requested(&api, &machine).then_some(())
        })
        .await;
    }
    assert!(!cluster.set_workload_api_down("wc-9", true));
}

/// kubernetes-sigs/cluster-api `internal/controllers/machinehealthcheck/
/// machinehealthcheck_controller.go` (`Reconcile`: a paused object — `annotations.IsPaused`,
/// the `cluster.x-k8s.io/paused` annotation — returns early): a paused health check creates no
/// request for its hung worker and withdraws none of its healthy ones, while the other
/// cluster's health check asks for its hung worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_health_check_neither_asks_nor_withdraws() {
    let cluster = SimCluster::start(fleet(2, 0, 2)).await.unwrap();
    let api = management(&cluster);
    template_in_place(&api);
    let mhcs = baremend_sim::cluster::local::CAPI_MHCS;
    let pause = json!({"metadata": {"annotations": {baremend_sim::cluster::CAPI_PAUSED: ""}}});
    api.merge(mhcs, MACHINE_NAMESPACE, "wc-0-workers", &pause, false)
        .unwrap();
    // A request for a healthy Machine of the paused cluster: the paused check keeps it.
    let machine = api
        .get(CAPI_MACHINES, MACHINE_NAMESPACE, "wc-0-worker-1")
        .unwrap();
    let request = json!({"metadata": {"name": "wc-0-worker-1", "ownerReferences": [{
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": "wc-0-worker-1",
        "uid": machine["metadata"]["uid"]}]}, "spec": {}});
    api.create(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, request)
        .unwrap();
    for wc in ["wc-0", "wc-1"] {
        assert!(cluster.hang(&format!("{wc}-worker-0")));
    }
    eventually(
        "the request for wc-1-worker-0",
        Duration::from_secs(15),
        async || requested(&api, "wc-1-worker-0").then_some(()),
    )
    .await;
    // Many passes (100 ms) past the Nodes' 500 ms unhealthy timeout.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let node = workload(&cluster, "wc-0")
        .get(NODES, "", "worker-0")
        .unwrap();
    assert_ne!(ready(&node).as_deref(), Some("True"));
    assert!(!requested(&api, "wc-0-worker-0"));
    assert!(
        requested(&api, "wc-0-worker-1"),
        "a paused check withdraws nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_clusters_without_the_cluster_api_flavour_are_refused() {
    let spec = ClusterSpec {
        workload_clusters: 1,
        ..ClusterSpec::default()
    };
    let error = SimCluster::start(spec).await.unwrap_err().to_string();
    assert!(error.contains("clusterApi"), "{error}");
    // And by the command, before anything starts.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend-sim"))
        .args(["cluster", "--workload-clusters", "1", "--kubeconfig-out"])
        .arg(dir.join("never-written.kubeconfig"))
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("clusterApi"), "{stderr}");
}
