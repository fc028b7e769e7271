//! The drift coordinator on a simulated cluster with its Machine Config Operator: start,
//! stop and restart the coordinator, drift files, wait for phases.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend::api::{DriftPhase, DriftRemediation};
use baremend::drift::controller::{DriftOptions, run};
use baremend::metrics::Metrics;
use baremend::remediation::state::SystemClock;
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

    pub async fn wait(&self, what: &str, mut check: impl FnMut() -> bool) {
        let started = Instant::now();
        while !check() {
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn remediation(&self, name: &str) -> Option<DriftRemediation> {
        let api: Api<DriftRemediation> = Api::all(self.client.clone());
        api.get_opt(name).await.unwrap()
    }

    pub async fn reach(&self, name: &str, phase: DriftPhase) -> DriftRemediation {
        let started = Instant::now();
        loop {
            if let Some(r) = self.remediation(name).await
                && r.status.as_ref().map(|s| s.phase) == Some(phase)
            {
                return r;
            }
            assert!(
                started.elapsed() < Duration::from_secs(40),
                "{name} did not reach {phase:?}: {:#?}",
                self.remediation(name).await.and_then(|r| r.status)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
