//! A simulated cluster ready for the controller: baremend's CRDs installed, a default policy,
//! and a kube client that does not retry on its own (as `baremend run` configures it).

use std::time::{Duration, Instant};

use baremend::api::{Remediation, all_crds};
use baremend_sim::cluster::local::{BMHS, Gvr, Local, MACHINES};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, SimCluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

/// The started cluster, a client to it and an in-process handle on its store.
pub struct Prepared {
    /// The cluster.
    pub cluster: SimCluster,
    /// A kube client over HTTPS.
    pub client: Client,
    /// The store, for the test's own reads and writes.
    pub api: Local,
}

/// Starts `spec`, installs the CRDs and the policy named `default` with `policy` as spec.
pub async fn prepare(spec: ClusterSpec, policy: Value) -> Prepared {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = SimCluster::start(spec).await.unwrap();
    let kubeconfig = Kubeconfig::from_yaml(&cluster.kubeconfig()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in all_crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let policies: Api<baremend::api::RemediationPolicy> = Api::all(client.clone());
    let policy =
        serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": policy})).unwrap();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    Prepared {
        cluster,
        client,
        api,
    }
}

/// Every step of a deleting remediation happened exactly once.
pub fn assert_each_step_once(steps: &[String]) {
    for once in [
        "PowerOffRequested",
        "Fenced",
        "NodeBackedUp",
        "NodeDeleted",
        "PowerOnRequested",
        "Succeeded",
    ] {
        assert_eq!(
            steps.iter().filter(|s| *s == once).count(),
            1,
            "{once} in {steps:?}"
        );
    }
}

/// Our Remediations, for reads through the store.
pub const REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "remediations",
};

/// The Remediation once it has ended (Succeeded, Failed or Cancelled); fails after 60 s.
pub async fn ended(api: &Local, name: &str) -> Remediation {
    let started = Instant::now();
    loop {
        let remediation = api
            .get(REMEDIATIONS, MACHINE_NAMESPACE, name)
            .ok()
            .and_then(|v| serde_json::from_value::<Remediation>(v).ok());
        if let Some(remediation) = &remediation
            && remediation
                .status
                .as_ref()
                .is_some_and(|s| s.phase.is_terminal())
        {
            return remediation.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{name} never ended: {:?}",
            remediation.and_then(|r| r.status)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Marks a BareMetalHost detached: no operator manages it, so it may be fenced directly.
pub fn detach(api: &Local, host: &str) {
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        host,
        &json!({"metadata": {"annotations": {"baremetalhost.metal3.io/detached": ""}}}),
        false,
    )
    .unwrap();
}

/// Sets the MachineHealthCheck's trigger on a Machine, as the health check would.
pub fn trigger(api: &Local, machine: &str) {
    api.merge(
        MACHINES,
        MACHINE_NAMESPACE,
        machine,
        &json!({"metadata": {"annotations": {"host.metal3.io/external-remediation": ""}}}),
        false,
    )
    .unwrap();
}

/// Our DriftRemediations (cluster-scoped), for reads through the store.
pub const DRIFT_REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "driftremediations",
};
