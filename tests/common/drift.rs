//! The drift coordinator on a simulated cluster with its Machine Config Operator: start,
//! stop and restart the coordinator, drift files, wait for phases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend::api::{DriftPhase, DriftRemediation};
use baremend::drift::controller::{DriftOptions, run};
use baremend::metrics::Metrics;
use baremend::remediation::controller::{ControllerOptions, run as run_controller};
use baremend::runtime::SystemClock;
use baremend_sim::cluster::local::{EVENTS, Local, NAMESPACES, NODES};
use baremend_sim::cluster::mco::disk::SimFile;
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, SimCluster};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::oneshot;

pub struct Lab {
    pub cluster: SimCluster,
    pub client: Client,
    pub api: Local,
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

pub const STATE: &str = "machineconfiguration.openshift.io/state";

impl Lab {
    pub async fn start(workers: usize, max_unavailable: Value, policy: Value) -> Lab {
        Lab::start_with(workers, max_unavailable, policy, |_| {}).await
    }

    /// As `start`, with `prepare` run on the cluster before the coordinator starts.
    pub async fn start_with(
        workers: usize,
        max_unavailable: Value,
        policy: Value,
        prepare: impl FnOnce(&Local),
    ) -> Lab {
        let spec = ClusterSpec {
            masters: 1,
            workers,
            timing: Timing::fast(),
            mco: true,
            mco_max_unavailable: max_unavailable,
            ..ClusterSpec::default()
        };
        let super::cluster::Prepared {
            cluster,
            client,
            api,
        } = super::cluster::prepare(spec, json!({})).await;
        api.create(NAMESPACES, "", json!({"metadata": {"name": "baremend"}}))
            .unwrap();
        let policies: Api<baremend::api::DriftPolicy> = Api::all(client.clone());
        let mut spec = json!({"debounceSeconds": 1, "timeouts": {"pickupSeconds": 10, "drainSeconds": 4, "rebootSeconds": 10, "restoreSeconds": 10, "applySeconds": 30}});
        if let (Some(base), Some(extra)) = (spec.as_object_mut(), policy.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        let policy =
            serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": spec})).unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let mut lab = Lab {
            cluster,
            client,
            api,
            metrics: Arc::new(Metrics::new()),
            stop: None,
            task: None,
        };
        lab.wait("every node Done", || {
            lab.api
                .list(NODES, None)
                .iter()
                .all(|n| n["metadata"]["annotations"][STATE] == "Done")
        })
        .await;
        prepare(&lab.api);
        lab.start_coordinator();
        lab
    }

    pub fn start_coordinator(&mut self) {
        let (stop, stopped) = oneshot::channel::<()>();
        let client = self.client.clone();
        let metrics = self.metrics.clone();
        self.stop = Some(stop);
        self.task = Some(tokio::spawn(async move {
            run(
                client,
                Arc::new(SystemClock),
                DriftOptions {
                    poll: Duration::from_millis(100),
                    metrics,
                    helper_image: "baremend:test".into(),
                    ..DriftOptions::default()
                },
                None,
                async move {
                    let _ = stopped.await;
                },
            )
            .await
            .unwrap();
        }));
    }

    pub async fn stop_coordinator(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub async fn wait(&self, what: &str, check: impl FnMut() -> bool) {
        until(what, check).await;
    }

    pub async fn remediation(&self, name: &str) -> Option<DriftRemediation> {
        let api: Api<DriftRemediation> = Api::all(self.client.clone());
        api.get_opt(name).await.unwrap()
    }

    pub async fn reach(&self, name: &str, phase: DriftPhase) -> DriftRemediation {
        reach(&self.client, name, phase).await
    }

    pub fn drift(&self, node: &str) {
        self.cluster.disk(node).unwrap().put(
            "/etc/demo/rules.json",
            SimFile::regular(b"{\"tampered\": true}", 0o644),
        );
    }

    pub fn reboots(&self, node: &str) -> usize {
        self.cluster.host(node).unwrap().host.power_offs()
    }

    pub fn events(&self) -> String {
        serde_json::to_string(&self.api.list(EVENTS, None)).unwrap()
    }

    /// Waits (up to 10 s) for an Event with `reason` about an object of `kind`: a step's
    /// Events are published after its status is persisted, so a test that saw the phase
    /// may be a moment ahead of them.
    pub async fn wait_event(&self, reason: &str, kind: &str) {
        let started = Instant::now();
        loop {
            let all = self.api.list(EVENTS, None);
            if all.iter().any(|e| {
                e["reason"] == reason
                    && (e["regarding"]["kind"] == kind || e["involvedObject"]["kind"] == kind)
            }) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no {reason} Event on a {kind}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub fn steps(remediation: &DriftRemediation) -> Vec<String> {
    remediation
        .status
        .as_ref()
        .map(|s| s.steps.iter().map(|t| t.step.clone()).collect())
        .unwrap_or_default()
}

/// Waits until every Node's daemon reports Done (the simulated MCO has started).
pub async fn wait_done(api: &Local) {
    let started = Instant::now();
    while !api
        .list(NODES, None)
        .iter()
        .all(|n| n["metadata"]["annotations"][STATE] == "Done")
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the MCO never reported Done"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The whole controller (machines and drift) on a cluster whose MachineHealthCheck watches
/// the workers: a host takes 1.5 s to boot, longer than the health check's timeout, so the
/// MCO's reboot looks like a failure to it.
pub struct Whole {
    pub cluster: SimCluster,
    pub client: Client,
    pub api: Local,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<baremend::Result<()>>,
}

impl Whole {
    /// Starts the cluster and the controller with the drift policy `drift` (spec).
    pub async fn start(drift: Value) -> Whole {
        let spec = ClusterSpec {
            masters: 1,
            workers: 2,
            timing: Timing {
                boot_delay: Duration::from_millis(1500),
                ..Timing::fast()
            },
            mco: true,
            max_unhealthy: "100%".into(),
            ..ClusterSpec::default()
        };
        let prepared = super::cluster::prepare(
            spec,
            json!({"timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30}}),
        )
        .await;
        let (client, api, cluster) = (prepared.client, prepared.api, prepared.cluster);
        api.create(NAMESPACES, "", json!({"metadata": {"name": "baremend"}}))
            .unwrap();
        let policies: Api<baremend::api::DriftPolicy> = Api::all(client.clone());
        let policy =
            serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": drift}))
                .unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        wait_done(&api).await;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run_controller(
            client.clone(),
            Arc::new(SystemClock),
            ControllerOptions {
                poll: Duration::from_millis(100),
                metrics: Arc::new(Metrics::new()),
                drift_helper_image: Some("baremend:test".into()),
                ..ControllerOptions::default()
            },
            async move {
                let _ = stopped.await;
            },
        ));
        Whole {
            cluster,
            client,
            api,
            stop,
            task,
        }
    }

    /// Stops the controller.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// The DriftRemediation once it is in `phase`; fails after 40 s.
pub async fn reach(client: &Client, name: &str, phase: DriftPhase) -> DriftRemediation {
    let api: Api<DriftRemediation> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let now = api.get_opt(name).await.unwrap();
        if let Some(r) = &now
            && r.status.as_ref().map(|s| s.phase) == Some(phase)
        {
            return r.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{name} did not reach {phase:?}: {:#?}",
            now.and_then(|r| r.status)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` until it holds; fails after 40 s naming `what`.
pub async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
