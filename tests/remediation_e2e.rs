//! The remediation controller end to end: the simulated cluster (API server over HTTPS,
//! kubelets, MachineHealthCheck, BareMetal Operator, simulated BMCs) and the controller on a
//! real kube client, in one process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend::api::{Remediation, RemediationPhase, all_crds};
use baremend::remediation::controller::{ControllerOptions, run};
use baremend::remediation::state::SystemClock;
use baremend_sim::cluster::local::{Local, MACHINES, NODES};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, SimCluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};
use tokio::sync::oneshot;

fn fast() -> ClusterSpec {
    ClusterSpec {
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

struct Lab {
    cluster: SimCluster,
    client: Client,
    api: Local,
    stop: Option<oneshot::Sender<()>>,
    controller: Option<tokio::task::JoinHandle<()>>,
}

impl Lab {
    async fn start(spec: ClusterSpec, policy: Value) -> Lab {
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
            serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": policy}))
                .unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let api = Local::new(cluster.api_server().store().clone(), "test");
        let mut lab = Lab {
            cluster,
            client,
            api,
            stop: None,
            controller: None,
        };
        lab.start_controller();
        lab
    }

    fn start_controller(&mut self) {
        let (stop, stopped) = oneshot::channel::<()>();
        let client = self.client.clone();
        self.stop = Some(stop);
        self.controller = Some(tokio::spawn(async move {
            run(
                client,
                Arc::new(SystemClock),
                ControllerOptions {
                    instance: "test".into(),
                    poll: Duration::from_millis(100),
                },
                async move {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
        }));
    }

    async fn remediation(&self, name: &str) -> Option<Remediation> {
        let api: Api<Remediation> = Api::namespaced(self.client.clone(), MACHINE_NAMESPACE);
        api.get_opt(name).await.unwrap()
    }

    async fn wait_phase(
        &self,
        name: &str,
        phase: RemediationPhase,
        timeout: Duration,
    ) -> Remediation {
        let started = Instant::now();
        loop {
            if let Some(r) = self.remediation(name).await
                && r.status.as_ref().map(|s| s.phase) == Some(phase)
            {
                return r;
            }
            assert!(
                started.elapsed() < timeout,
                "{name} did not reach {phase:?}: {:#?}",
                self.remediation(name).await.and_then(|r| r.status)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn steps(remediation: &Remediation) -> Vec<String> {
    remediation
        .status
        .as_ref()
        .map(|s| s.steps.iter().map(|t| t.step.clone()).collect())
        .unwrap_or_default()
}

fn fast_policy() -> Value {
    json!({"timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30, "readyGraceSeconds": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_fenced_through_the_reboot_api_deleted_powered_on_and_restored() {
    let lab = Lab::start(fast(), fast_policy()).await;
    // A label an operator added, which the new Node will not have.
    lab.api
        .merge(
            NODES,
            "",
            "worker-0",
            &json!({"metadata": {"labels": {"team": "db"}}}),
            false,
        )
        .unwrap();
    let old_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    assert!(lab.cluster.hang("worker-0"));
    let done = lab
        .wait_phase(
            "worker-0-1",
            RemediationPhase::Succeeded,
            Duration::from_secs(60),
        )
        .await;
    let steps = steps(&done);
    let position = |s: &str| {
        steps
            .iter()
            .position(|x| x == s)
            .unwrap_or_else(|| panic!("{s} in {steps:?}"))
    };
    assert!(position("Fenced") < position("NodeDeleted"), "{steps:?}");
    assert!(
        position("NodeBackedUp") < position("NodeDeleted"),
        "{steps:?}"
    );
    assert!(
        position("NodeDeleted") < position("PowerOnRequested"),
        "{steps:?}"
    );
    let node = lab.api.get(NODES, "", "worker-0").unwrap();
    assert_ne!(node["metadata"]["uid"], old_uid, "a new Node registered");
    assert_eq!(
        node["metadata"]["labels"]["team"], "db",
        "the label was restored"
    );
    let machine = lab
        .api
        .get(MACHINES, MACHINE_NAMESPACE, "worker-0")
        .unwrap();
    let annotations = machine["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("host.metal3.io/external-remediation"),
        "{annotations:?}"
    );
    assert!(!annotations.contains_key("remediation.metal3.io/powered-off-for-remediation"));
    let bmh = lab
        .api
        .get(
            baremend_sim::cluster::local::BMHS,
            MACHINE_NAMESPACE,
            "worker-0",
        )
        .unwrap();
    assert!(
        bmh["metadata"]["annotations"]
            .as_object()
            .is_none_or(|a| !a.keys().any(|k| k.starts_with("reboot.metal3.io/"))),
        "the power-off request is gone: {bmh}"
    );
    assert_eq!(
        done.status.unwrap().strategy.as_deref(),
        Some("BareMetalHostRebootApi")
    );
}
