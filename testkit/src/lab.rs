//! The one lab of the end-to-end tests: a simulated cluster with baremend's CRDs and
//! policies, a kube client that does not retry on its own (as `baremend run` configures it),
//! the test's own handle on the store, and the controller or the drift coordinator in a task.
//!
//! `Lab::builder(spec)` starts the cluster; the test changes what it needs, then starts what
//! it tests with `start_controller` or `start_coordinator` (or its own replicas on `client`).

use std::fmt::Debug;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use baremend::api::{DriftPhase, DriftPolicy, DriftRemediation, Remediation, RemediationPhase};
use baremend::drift::controller::{DriftOptions, HelperPods};
use baremend::lab::setup::LabCluster;
use baremend::metrics::Metrics;
use baremend::remediation::controller::ControllerOptions;
use baremend::runtime::SystemClock;
use baremend_sim::clock::SystemClock as SimClock;
use baremend_sim::cluster::local::{
    BMHS, CAPI_MACHINES, CRDS, Gvr, Local, MACHINE_REMEDIATIONS, MACHINES, NODES, SECRETS,
};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{BMC_USERNAME, ClusterSpec, MACHINE_NAMESPACE};
use baremend_sim::host::Power;
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode};
use baremend_sim::tls::{LOCAL_NAMES, TestCa};
use kube::api::{Api, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::eventually;

/// Our Remediations, for reads through the store.
pub const REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "remediations",
};

/// Our DriftRemediations (cluster-scoped), for reads through the store.
pub const DRIFT_REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "driftremediations",
};

/// The MCO daemon's state annotation on a Node.
pub use baremend::api::mco::STATE;

/// The default cluster (three masters, three workers) on fast timing.
pub fn fast() -> ClusterSpec {
    ClusterSpec {
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

/// A policy for quick remediations: power-off proven within 10 s, the Node back within 30 s
/// and Ready for 1 s (the rest is the defaults).
pub fn fast_policy() -> Value {
    json!({"timeouts": {"powerOffSeconds": 10, "nodeReadySeconds": 30, "readyGraceSeconds": 1}})
}

/// [`fast_policy`] fencing directly through the BMC only.
pub fn direct_bmc_policy() -> Value {
    let mut policy = fast_policy();
    policy["strategies"] = json!(["DirectBmc"]);
    policy
}

/// What the test asks for before the cluster starts.
#[must_use]
pub struct LabBuilder {
    spec: ClusterSpec,
    policy: Option<Value>,
    drift_policy: Option<Value>,
}

impl LabBuilder {
    /// The spec of the RemediationPolicy `default` (`{}` unless set).
    pub fn policy(mut self, spec: Value) -> Self {
        self.policy = Some(spec);
        self
    }

    /// No RemediationPolicy at all (an install step skipped).
    pub fn without_policy(mut self) -> Self {
        self.policy = None;
        self
    }

    /// A DriftPolicy `default` with this spec.
    pub fn drift_policy(mut self, spec: Value) -> Self {
        self.drift_policy = Some(spec);
        self
    }

    /// Starts the cluster (the library's lab set-up: CRDs installed, a client that does not
    /// retry on its own) and installs the policies; with a Machine Config Operator, returns
    /// once every Node's daemon reports Done. Nothing of baremend runs yet.
    pub async fn start(self) -> Lab {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mco = self.spec.mco;
        let cluster = LabCluster::start(self.spec).await.unwrap();
        if let Some(spec) = self.policy {
            cluster.install_policy(spec).await.unwrap();
        }
        // The `baremend` namespace of the helper pods is deploy/'s, which the lab applies.
        if let Some(spec) = self.drift_policy {
            let policy: DriftPolicy =
                serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": spec}))
                    .unwrap();
            Api::<DriftPolicy>::all(cluster.client.clone())
                .create(&PostParams::default(), &policy)
                .await
                .unwrap();
        }
        let lab = Lab {
            inner: cluster,
            metrics: Arc::new(Metrics::new()),
            running: Default::default(),
        };
        if mco {
            eventually("every node Done", Duration::from_secs(40), async || {
                lab.api
                    .list(NODES, None)
                    .iter()
                    .all(|n| n["metadata"]["annotations"][STATE] == "Done")
            })
            .await;
        }
        lab
    }
}

/// Fails the test with what ended a task that should still be running.
async fn died(task: JoinHandle<()>) -> ! {
    match task.await {
        Ok(()) => panic!("the controller returned while the test expected it running"),
        Err(ended) => panic!("the controller is not running: {}", why(ended)),
    }
}

/// What ended a task: its panic's message, or that it was cancelled.
pub fn why(ended: tokio::task::JoinError) -> String {
    if ended.is_cancelled() {
        return "its task was cancelled".into();
    }
    let payload = ended.into_panic();
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into());
    format!("it panicked: {message}")
}

/// The controller or the coordinator in its task, with the signal that stops it.
struct Running {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// A started lab. It derefs to the library's `LabCluster`: `cluster`, `client` (a kube
/// client over HTTPS) and `api` (the store, for the test's own reads and writes, which the
/// API server does not see).
pub struct Lab {
    inner: LabCluster,
    /// The metrics of what `start_controller` and `start_coordinator` start (unless the
    /// options say otherwise).
    pub metrics: Arc<Metrics>,
    running: std::sync::Mutex<Option<Running>>,
}

impl Deref for Lab {
    type Target = LabCluster;
    fn deref(&self) -> &LabCluster {
        &self.inner
    }
}

impl Lab {
    /// A lab on a cluster of this spec.
    pub fn builder(spec: ClusterSpec) -> LabBuilder {
        LabBuilder {
            spec,
            policy: Some(json!({})),
            drift_policy: None,
        }
    }

    /// The controller's options in these tests: a 100 ms poll and the lab's metrics.
    pub fn options(&self) -> ControllerOptions {
        ControllerOptions {
            poll: Duration::from_millis(100),
            metrics: self.metrics.clone(),
            ..ControllerOptions::default()
        }
    }

    /// Starts the controller (machines, and drift when the options give a helper image).
    pub fn start_controller(&mut self, options: ControllerOptions) {
        let client = self.controller_client.clone();
        self.spawn(|stopped| async move {
            let stopped = async move {
                let _ = stopped.await;
            };
            baremend::run::run_controllers(client, Arc::new(SystemClock), options, stopped)
                .await
                .unwrap();
        });
    }

    /// Starts the drift coordinator alone.
    pub fn start_coordinator(&mut self) {
        let client = self.controller_client.clone();
        let options = DriftOptions {
            poll: Duration::from_millis(100),
            metrics: self.metrics.clone(),
            helpers: HelperPods::new(baremend::lab::setup::LAB_HELPER_IMAGE),
            ..DriftOptions::default()
        };
        self.spawn(|stopped| async move {
            let stopped = async move {
                let _ = stopped.await;
            };
            baremend::drift::controller::run(client, Arc::new(SystemClock), options, None, stopped)
                .await
                .unwrap();
        });
    }

    /// Runs `run` in a task, with the receiver of the signal that stops it.
    fn spawn<F>(&mut self, run: impl FnOnce(oneshot::Receiver<()>) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let running = self.running.get_mut().unwrap();
        assert!(running.is_none(), "one controller at a time");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(run(stopped));
        *running = Some(Running { stop, task });
    }

    /// Stops what runs and waits until it has stopped. A controller that had already ended
    /// on its own (a panic, an error, a return before it was told to stop) fails the test
    /// here with what ended it: a test whose controller died proves nothing.
    pub async fn stop(&mut self) {
        if let Some(Running { stop, task }) = self.running.get_mut().unwrap().take() {
            if task.is_finished() {
                died(task).await;
            }
            let _ = stop.send(());
            if let Err(ended) = task.await {
                panic!("the controller failed while stopping: {}", why(ended));
            }
        }
    }

    /// A negative window: waits `window` in which the test expects nothing to happen, and
    /// fails it if the controller or coordinator is not running all along (checked every
    /// 50 ms and at the end). Without this, "nothing happened for N s" holds just as well
    /// when the controller has panicked: a dead controller passes every negative.
    pub async fn hold(&self, window: Duration) {
        // The kit's proof that its negatives see a dead controller: with
        // BAREMEND_KIT_DIE_AT_HOLD set, the controller is ended unseen (as a panic in its task
        // would end it) as each window opens; every window must then fail.
        if std::env::var_os("BAREMEND_KIT_DIE_AT_HOLD").is_some() {
            self.die_unseen().await;
        }
        let until = tokio::time::Instant::now() + window;
        loop {
            self.alive().await;
            let now = tokio::time::Instant::now();
            if now >= until {
                return;
            }
            tokio::time::sleep((until - now).min(Duration::from_millis(50))).await;
        }
    }

    /// Fails the test, with what ended it, when the controller or coordinator this lab started
    /// is no longer running. Also fails when nothing was started: a negative window with no
    /// controller is a mistake of the test.
    pub async fn alive(&self) {
        let ended = {
            let mut running = self.running.lock().unwrap();
            match running.as_ref() {
                None => panic!("a negative window with no controller running"),
                Some(now) if now.task.is_finished() => running.take().map(|r| r.task),
                Some(_) => None,
            }
        };
        if let Some(task) = ended {
            died(task).await;
        }
    }

    /// For the kit's own test: ends the controller's task as a crash would, but leaves the lab
    /// believing it runs, as a test would whose controller panicked unseen.
    pub async fn die_unseen(&self) {
        let finished = || {
            let running = self.running.lock().unwrap();
            let task = &running.as_ref().expect("a controller runs").task;
            task.abort();
            task.is_finished()
        };
        while !finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops what runs at once, wherever it is (a crash): its task is aborted.
    pub async fn kill(&mut self) {
        if let Some(Running { stop, task }) = self.running.get_mut().unwrap().take() {
            if task.is_finished() {
                died(task).await;
            }
            let _ = stop.send(());
            task.abort();
            let _ = task.await;
        }
    }

    /// Sets (as the MachineHealthCheck does) or removes the trigger on a Machine.
    pub fn trigger(&self, machine: &str, on: bool) {
        self.set_trigger(machine, on).unwrap();
    }

    /// Marks a BareMetalHost detached: no operator manages it, so it may be fenced directly.
    pub fn detach(&self, host: &str) {
        self.inner.detach(host).unwrap();
    }

    /// A second Redfish BMC for `host` (the same simulated host, the same account) served over
    /// HTTPS with a certificate `ca` issued; returns it (keep it alive) and its address.
    pub async fn tls_bmc(&self, host: &str, ca: &TestCa) -> (RedfishSim, String) {
        let info = self.cluster.host(host).unwrap();
        let sim = RedfishSim::start_with_hosts(
            RedfishSimConfig {
                username: BMC_USERNAME.into(),
                password: self.cluster.bmc_password().into(),
                tls: TlsMode::Identity(ca.issue(LOCAL_NAMES).unwrap()),
                ..RedfishSimConfig::default()
            },
            vec![info.host.clone()],
            Arc::new(SimClock::new()),
        )
        .await
        .unwrap();
        let address = sim.bmc_address(host);
        assert!(address.starts_with("redfish+https://"), "{address}");
        (sim, address)
    }

    /// Writes `password` (and `previous` as `previousPassword`, when given) into the BMC
    /// Secret of `host`; the simulated BMCs keep theirs.
    pub fn bmc_password(&self, host: &str, password: &str, previous: Option<&str>) {
        use base64::Engine;
        let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let mut data = json!({"password": encode(password)});
        if let Some(previous) = previous {
            data["previousPassword"] = json!(encode(previous));
        }
        self.merge_bmc_secret(host, data);
    }

    /// Rotates the BMC Secret of `host` as an operator does: `new` becomes its password and the
    /// one it had its `previousPassword`; the BMC keeps the old one. Returns the old one.
    pub fn rotate_bmc_password(&self, host: &str, new: &str) -> String {
        use base64::Engine;
        let base64 = base64::engine::general_purpose::STANDARD;
        let secret = format!("{host}-bmc-secret");
        let old = self.api.get(SECRETS, MACHINE_NAMESPACE, &secret).unwrap()["data"]["password"]
            .as_str()
            .map(|old| base64.decode(old).unwrap())
            .unwrap();
        let old = String::from_utf8(old).unwrap();
        self.bmc_password(host, new, Some(&old));
        old
    }

    fn merge_bmc_secret(&self, host: &str, data: Value) {
        let secret = format!("{host}-bmc-secret");
        self.api
            .merge(
                SECRETS,
                MACHINE_NAMESPACE,
                &secret,
                &json!({"data": data}),
                false,
            )
            .unwrap();
    }

    /// Merges `metadata` (annotations, labels) and `bmc` into a BareMetalHost.
    pub fn merge_host(&self, host: &str, metadata: Value, bmc: Value) {
        self.api
            .merge(
                BMHS,
                MACHINE_NAMESPACE,
                host,
                &json!({"metadata": metadata, "spec": {"bmc": bmc}}),
                false,
            )
            .unwrap();
    }

    /// A Remediation, read from the store.
    pub fn remediation(&self, name: &str) -> Option<Remediation> {
        RemediationPhase::read(&self.api, name)
    }

    /// The steps the Remediation `name` persisted, in order (none while it does not exist).
    pub fn steps_of(&self, name: &str) -> Vec<String> {
        self.remediation(name)
            .map(|r| steps(&r))
            .unwrap_or_default()
    }

    /// A DriftRemediation, read from the store.
    pub fn drift_remediation(&self, name: &str) -> Option<DriftRemediation> {
        DriftPhase::read(&self.api, name)
    }

    /// The Remediation or DriftRemediation once it is in `phase` (read from the store, so
    /// the API server does not see the test's reads); fails after the kind's deadline.
    pub async fn reach<P: Phase>(&self, name: &str, phase: P) -> P::Object {
        eventually(
            &format!("{name} in {phase:?}"),
            P::DEADLINE,
            async || match P::read(&self.api, name) {
                Some(object) if P::of(&object) == Some(phase) => Ok(object),
                other => Err(format!("{:#?}", other.map(|o| P::status(&o)))),
            },
        )
        .await
    }

    /// The Remediation once it has ended (Succeeded, Failed or Cancelled); fails after 60 s.
    pub async fn ended(&self, name: &str) -> Remediation {
        eventually(
            &format!("{name} ended"),
            RemediationPhase::DEADLINE,
            async || match self.remediation(name) {
                Some(r) if r.status.as_ref().is_some_and(|s| s.phase.is_terminal()) => Ok(r),
                other => Err(format!("{:#?}", other.and_then(|r| r.status))),
            },
        )
        .await
    }

    /// The first Remediation of `machine` once it has failed without touching its host:
    /// `PowerOffNotConfirmed` with `expected` in `lastError`, no Node step, the Node still
    /// there and the host never powered.
    pub async fn failed_untouched(&self, machine: &str, expected: &str) -> Remediation {
        let failed = self
            .reach(&format!("{machine}-1"), RemediationPhase::Failed)
            .await;
        let status = failed.status.clone().unwrap();
        let error = status.last_error.clone().unwrap_or_default();
        assert!(error.contains(expected), "{machine}: {error}");
        let succeeded = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Succeeded")
            .unwrap_or_else(|| panic!("{machine}: no Succeeded condition in {status:?}"));
        assert_eq!(succeeded.reason, "PowerOffNotConfirmed", "{machine}");
        let steps = steps(&failed);
        assert!(
            !steps.iter().any(|s| s.starts_with("Node")),
            "{machine}: {steps:?}"
        );
        assert!(self.node_exists(machine), "{machine}: its Node is gone");
        assert!(
            self.power_history(machine).is_empty(),
            "{machine} was powered"
        );
        failed
    }

    /// The power changes of a host, in order.
    pub fn power_history(&self, host: &str) -> Vec<Power> {
        self.cluster
            .host(host)
            .unwrap()
            .host
            .history()
            .into_iter()
            .map(|change| change.power)
            .collect()
    }

    /// Makes `host`'s BMC accept power requests and never change the power (`true`), or lets it
    /// power the host again (`false`).
    pub fn stuck_power(&self, host: &str, stuck: bool) {
        let host = &self.cluster.host(host).unwrap().host;
        let mut faults = host.faults();
        faults.stuck_power = stuck;
        host.set_faults(faults);
    }

    /// Creates a Machine's request as a health check does: named after it, owned by it.
    pub fn request(&self, machine: &str) {
        let (machines, api_version) = match self.api.get(MACHINES, MACHINE_NAMESPACE, machine) {
            Ok(_) => (MACHINES, "machine.openshift.io/v1beta1"),
            Err(_) => (CAPI_MACHINES, "cluster.x-k8s.io/v1beta1"),
        };
        let object = self.api.get(machines, MACHINE_NAMESPACE, machine).unwrap();
        self.api
            .create(
                MACHINE_REMEDIATIONS,
                MACHINE_NAMESPACE,
                json!({
                    "apiVersion": "baremend.io/v1alpha1",
                    "kind": "MachineRemediation",
                    "metadata": {
                        "name": machine,
                        "namespace": MACHINE_NAMESPACE,
                        "ownerReferences": [{
                            "apiVersion": api_version,
                            "kind": "Machine",
                            "name": machine,
                            "uid": object["metadata"]["uid"],
                        }],
                    },
                    "spec": {},
                }),
            )
            .unwrap();
    }

    /// Whether the Node exists.
    pub fn node_exists(&self, name: &str) -> bool {
        self.api.get(NODES, "", name).is_ok()
    }

    /// The Remediation's status once it is held with `message`; fails after 20 s.
    pub async fn held_with(&self, name: &str, message: &str) -> baremend::api::RemediationStatus {
        eventually(
            &format!("{name} held: {message}"),
            Duration::from_secs(20),
            async || match self.remediation(name).and_then(|r| r.status) {
                Some(s)
                    if s.conditions.iter().any(|c| {
                        c.type_ == "Held" && c.status == "True" && c.message.contains(message)
                    }) =>
                {
                    Ok(s)
                }
                other => Err(format!("{other:#?}")),
            },
        )
        .await
    }

    /// Waits until the Node's Ready condition reads `status` (the node lifecycle controller
    /// marks a hung Node `Unknown`); fails after 10 s.
    pub async fn node_ready_is(&self, name: &str, status: &str) {
        eventually(
            &format!("{name} Ready={status}"),
            Duration::from_secs(10),
            async || {
                self.api.get(NODES, "", name).ok().and_then(|n| {
                    n.pointer("/status/conditions")?
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "Ready")
                        .map(|c| c["status"] == status)
                }) == Some(true)
            },
        )
        .await;
    }

    /// The `MachineRemediationTemplate` `baremend` (the one a MachineHealthCheck of a
    /// `remediation_template` cluster names) with this `spec.template.spec`.
    pub fn machine_template(&self, spec: Value) {
        self.api
            .create(
                baremend_sim::cluster::local::MACHINE_REMEDIATION_TEMPLATES,
                MACHINE_NAMESPACE,
                json!({
                    "apiVersion": "baremend.io/v1alpha1",
                    "kind": "MachineRemediationTemplate",
                    "metadata": {"name": "baremend", "namespace": MACHINE_NAMESPACE},
                    "spec": {"template": {"spec": spec}},
                }),
            )
            .unwrap();
    }

    /// Serves the other remediators' kinds (Metal3Remediation and the medik8s ones), as a
    /// cluster where they are installed does.
    pub fn serve_foreign_remediations(&self) {
        for crd in baremend_sim::cluster::fixtures::foreign_remediation_crds() {
            self.api.create(CRDS, "", crd).unwrap();
        }
    }

    /// Seeds a finished Remediation `<machine>-<number>` (an earlier controller's work)
    /// ended in `phase` at minute `number` of a past hour, with `annotations`.
    pub fn seed_remediation(&self, machine: &str, number: u32, phase: &str, annotations: Value) {
        let object = json!({
            "metadata": {"name": format!("{machine}-{number}"), "annotations": annotations},
            "spec": {"machineName": machine},
        });
        self.seed(REMEDIATIONS, MACHINE_NAMESPACE, object, phase, number);
    }

    /// Seeds a finished DriftRemediation `<node>-<number>` of a content drift, as
    /// `seed_remediation`.
    pub fn seed_drift_remediation(&self, node: &str, number: u32, phase: &str, annotations: Value) {
        let object = json!({
            "metadata": {"name": format!("{node}-{number}"), "annotations": annotations},
            "spec": {"nodeName": node, "kind": "Content", "target": "/etc/demo/rules.json", "action": "Force"},
        });
        self.seed(DRIFT_REMEDIATIONS, "", object, phase, number);
    }

    /// Creates `object`, then writes its status (a create ignores the status, as on a real
    /// API server), as the controller's account: deploy/'s admission policy lets no one
    /// else write baremend's records.
    fn seed(&self, gvr: Gvr, namespace: &str, object: Value, phase: &str, minute: u32) {
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let controller = self.as_controller();
        controller.create(gvr, namespace, object).unwrap();
        let since = format!("2026-01-01T00:{minute:02}:00Z");
        let status = json!({"status": {"phase": phase, "phaseSince": since}});
        controller
            .merge(gvr, namespace, &name, &status, true)
            .unwrap();
    }

    /// In-process access under the controller's ServiceAccount name, for seeding records as
    /// an earlier controller would have left them: admission sees the controller; RBAC sees a
    /// member of `system:masters` too, since seeding writes a status with a merge patch the
    /// controller's role (update only) would not allow.
    pub fn as_controller(&self) -> Local {
        let server = self.cluster.api_server();
        let mut user = baremend_sim::apiserver::auth::user::UserInfo::service_account(
            baremend::lab::setup::DEPLOY_NAMESPACE,
            "baremend",
            "",
        );
        user.groups.push("system:masters".into());
        Local::new(server.store().clone(), "baremend").as_user(server.authorizer().clone(), user)
    }
}

/// The phase of one of our kinds, and how the test reads an object of that kind.
pub trait Phase: Copy + PartialEq + Debug {
    /// The kind whose status has the phase.
    type Object;
    /// How long `reach` waits.
    const DEADLINE: Duration;
    /// The object, read from the store.
    fn read(api: &Local, name: &str) -> Option<Self::Object>;
    /// Its phase.
    fn of(object: &Self::Object) -> Option<Self>;
    /// Its status, for failure messages.
    fn status(object: &Self::Object) -> String;
}

fn read<T: DeserializeOwned>(api: &Local, gvr: Gvr, namespace: &str, name: &str) -> Option<T> {
    let value = api.get(gvr, namespace, name).ok()?;
    serde_json::from_value(value).ok()
}

impl Phase for RemediationPhase {
    type Object = Remediation;
    const DEADLINE: Duration = Duration::from_secs(60);
    fn read(api: &Local, name: &str) -> Option<Remediation> {
        read(api, REMEDIATIONS, MACHINE_NAMESPACE, name)
    }
    fn of(object: &Remediation) -> Option<Self> {
        object.status.as_ref().map(|s| s.phase)
    }
    fn status(object: &Remediation) -> String {
        format!("{:#?}", object.status)
    }
}

impl Phase for DriftPhase {
    type Object = DriftRemediation;
    const DEADLINE: Duration = Duration::from_secs(40);
    fn read(api: &Local, name: &str) -> Option<DriftRemediation> {
        read(api, DRIFT_REMEDIATIONS, "", name)
    }
    fn of(object: &DriftRemediation) -> Option<Self> {
        object.status.as_ref().map(|s| s.phase)
    }
    fn status(object: &DriftRemediation) -> String {
        format!("{:#?}", object.status)
    }
}

/// The attempt that retried a Failed object, as its `baremend.io/retried-by` names it.
pub fn retried_by(metadata: &kube::api::ObjectMeta) -> Option<String> {
    metadata
        .annotations
        .as_ref()?
        .get(baremend::api::annotations::RETRIED_BY)
        .cloned()
}

/// The steps a Remediation persisted, in order.
pub fn steps(remediation: &Remediation) -> Vec<String> {
    remediation
        .status
        .as_ref()
        .map(|s| s.steps.iter().map(|t| t.step.to_string()).collect())
        .unwrap_or_default()
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

impl Lab {
    /// The NodeHealthCheck's request for `node` once `check` holds for it; fails after 30 s.
    pub async fn node_request_where(
        &self,
        node: &str,
        what: &str,
        check: impl Fn(&baremend::api::NodeRemediation) -> bool,
    ) -> baremend::api::NodeRemediation {
        use baremend_sim::cluster::NHC_NAMESPACE;
        use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;
        eventually(what, Duration::from_secs(30), async || {
            let request = self
                .api
                .get(NODE_REMEDIATIONS, NHC_NAMESPACE, node)
                .ok()
                .map(|v| serde_json::from_value::<baremend::api::NodeRemediation>(v).unwrap());
            match request {
                Some(r) if check(&r) => Ok(r),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }
}

impl Lab {
    /// baremend's `NodeRemediationTemplate` `baremend`, empty, in the NodeHealthCheck's
    /// namespace (what the simulated NodeHealthCheck names first).
    pub fn baremend_node_template(&self) {
        use baremend_sim::cluster::NHC_NAMESPACE;
        use baremend_sim::cluster::nhc::NODE_REMEDIATION_TEMPLATES;
        self.api
            .create(
                NODE_REMEDIATION_TEMPLATES,
                NHC_NAMESPACE,
                json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
            )
            .unwrap();
    }

    /// Creates a NodeHealthCheck's request for a Node, as the NodeHealthCheck does: named after
    /// the Node, in the template's namespace, from the template's spec.
    pub fn node_request(&self, node: &str, spec: Value) {
        self.api
            .create(
                baremend_sim::cluster::nhc::NODE_REMEDIATIONS,
                baremend_sim::cluster::NHC_NAMESPACE,
                json!({
                    "apiVersion": "baremend.io/v1alpha1",
                    "kind": "NodeRemediation",
                    "metadata": {"name": node, "namespace": baremend_sim::cluster::NHC_NAMESPACE},
                    "spec": spec,
                }),
            )
            .unwrap();
    }

    /// Waits (up to 20 s) until the NodeHealthCheck's request for `node` is gone.
    pub async fn node_request_withdrawn(&self, node: &str) {
        use baremend_sim::cluster::NHC_NAMESPACE;
        use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;
        eventually(
            "the request withdrawn",
            Duration::from_secs(20),
            async || {
                self.api
                    .get(NODE_REMEDIATIONS, NHC_NAMESPACE, node)
                    .is_err()
            },
        )
        .await;
    }
}

/// Whether the request's condition `type_` has this status and, if given, reason.
pub fn request_has(
    request: &baremend::api::NodeRemediation,
    type_: &str,
    status: &str,
    reason: Option<&str>,
) -> bool {
    request.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == status && reason.is_none_or(|r| c.reason == r))
    })
}

/// Merges `patch` into the spec of the RemediationPolicy `default`, as an operator would, and
/// waits until the controller reads that generation (see [`patch_observed`]).
pub async fn patch_policy(lab: &Lab, patch: Value) {
    patch_observed::<baremend::api::RemediationPolicy>(lab, "remediationpolicies", patch).await;
}

/// Merges `patch` into the spec of the DriftPolicy `default`, as an operator would, and
/// waits until the coordinator reads that generation (see [`patch_observed`]).
pub async fn patch_drift_policy(lab: &Lab, patch: Value) {
    patch_observed::<DriftPolicy>(lab, "driftpolicies", patch).await;
}

/// Merges `patch` into the spec of the policy `default` of kind `K` (`plural`) through the API
/// server, then waits (up to 20 s) until its `status.observedGeneration` reaches the
/// generation the patch made: the controller writes it once its cache holds that spec, so
/// what the test does next is decided on it, not on a cache that has not seen the change.
pub async fn patch_observed<K>(lab: &Lab, plural: &'static str, patch: Value)
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let policies: Api<K> = Api::all(lab.client.clone());
    let patched = policies
        .patch(
            "default",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": patch })),
        )
        .await
        .unwrap();
    let generation = patched
        .meta()
        .generation
        .expect("a policy has a generation");
    let gvr = Gvr {
        group: "baremend.io",
        version: "v1alpha1",
        plural,
    };
    eventually(
        &format!("{plural}/default observed at generation {generation}"),
        // A positive wait: it ends at the first look that finds the generation written.
        Duration::from_secs(20),
        async || {
            let policy = lab
                .api
                .get(gvr, "", "default")
                .map_err(|e| format!("{e:?}"))?;
            let observed = policy
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64);
            match observed {
                Some(observed) if observed >= generation => Ok(()),
                _ => Err(format!("{:#?}", policy["status"])),
            }
        },
    )
    .await;
}

impl Lab {
    /// Fails when a simulated actor (a health check, the BareMetal Operator, the MCO, a
    /// kubelet), running as its upstream account, was refused anything: a grant missing from
    /// its upstream roles or from what `deploy/` ships for it.
    pub fn assert_no_actor_refused(&self) {
        let refusals = self.cluster.actor_refusals();
        assert!(refusals.is_empty(), "actors refused: {refusals:#?}");
    }
}

impl Lab {
    /// The note of an Event on the Machine `machine` with `reason`, once one says `says` (see
    /// [`super::events::told_on`]).
    pub async fn machine_told(&self, machine: &str, reason: &str, says: &str) -> String {
        let machine = ("Machine", machine);
        let event =
            super::events::told_on(&self.api, MACHINE_NAMESPACE, machine, reason, says).await;
        event["message"].as_str().unwrap_or_default().to_owned()
    }

    /// Runs the `baremend` binary as a user does, with `args` and `--kubeconfig` naming a
    /// kubeconfig of the lab's API server (in a scratch folder of its own); fails the test
    /// unless it ends within a minute.
    pub async fn run_baremend(&self, args: &[&str]) -> std::process::Output {
        let kubeconfig = super::scratch("baremend-call").join("kubeconfig");
        std::fs::write(&kubeconfig, self.cluster.kubeconfig()).unwrap();
        let run = tokio::process::Command::new(super::baremend_bin())
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .kill_on_drop(true)
            .output();
        tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("baremend ends within a minute")
            .expect("baremend runs")
    }
}

/// Waits until the lab's metrics contain `line`; fails after 10 s.
pub async fn metric(lab: &Lab, line: &str) {
    metrics_show(lab, &[line], Duration::from_secs(10)).await;
}

/// Waits until the lab's metrics contain every one of `lines` at once; fails after `within`.
pub async fn metrics_show(lab: &Lab, lines: &[&str], within: Duration) {
    eventually(&lines.join(" and "), within, async || {
        let metrics = lab.metrics.encode();
        if lines.iter().all(|line| metrics.contains(line)) {
            Ok(())
        } else {
            Err(metrics)
        }
    })
    .await;
}

/// Waits until a Warning Event with `reason` on the object `kind`/`name` of the Machines'
/// namespace says `says`; fails after 10 s.
pub async fn warning_on(lab: &Lab, object: (&str, &str), reason: &str, says: &str) {
    warning_in(lab, MACHINE_NAMESPACE, object, reason, says).await;
}

/// Waits until a Warning Event with `reason` on the object `kind`/`name` of `namespace` says
/// `says`; fails after 10 s.
pub async fn warning_in(
    lab: &Lab,
    namespace: &str,
    (kind, name): (&str, &str),
    reason: &str,
    says: &str,
) {
    eventually(
        &format!("a {reason} Warning on {kind} {namespace}/{name} saying {says:?}"),
        Duration::from_secs(10),
        async || {
            let events = lab
                .api
                .list(baremend_sim::cluster::local::EVENTS, Some(namespace));
            events
                .iter()
                .any(|e| {
                    e["reason"] == reason
                        && e["type"] == "Warning"
                        && e["involvedObject"]["kind"] == kind
                        && e["involvedObject"]["name"] == name
                        && e["message"].as_str().is_some_and(|m| m.contains(says))
                })
                .then_some(())
                .ok_or(format!("{events:#?}"))
        },
    )
    .await;
}
