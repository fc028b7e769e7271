//! The remediation controller: a kube `Controller` over Machines that gathers observations,
//! asks the planner for the next step and carries it out, persisting every step in the
//! Machine's `Remediation` before it acts.
//!
//! Event-driven: Machines, BareMetalHosts, Nodes and Remediations are watched once each
//! (shared reflector stores), and changes map back to the Machine they concern; timed
//! requeues only cover deadlines and the wait for a BMC to settle.

use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::Connector;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use super::bmc_cache::DriverCache;
pub use super::context::{Context, PersistFn, PersistHook, Placement};
use super::gates::Launched;
use super::reconcile::{error_policy, reconcile};
use crate::api::annotations::NODE_MACHINE;
use crate::api::slim;
use crate::api::{HostBmc, Remediation, RemediationPhase, RemediationPolicy};
use crate::leader::{Elector, Leadership, LeaseConfig};
use crate::metrics::Metrics;
use crate::runtime::clock::Clock;
use crate::runtime::informer::{informer, slimmed_informer};
use crate::runtime::node_watch::{NodeFeed, watch_nodes};
use crate::runtime::requeue::Backoff;
use crate::runtime::tasks::Background;
use crate::{Error, Result};

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// The Events' reporting instance (e.g. the pod name).
    pub instance: String,
    /// How soon to look again while waiting.
    pub poll: Duration,
    /// Told each step right after it is persisted, before it acts (tests and labs: see
    /// [`PersistHook`]). None in production.
    pub after_persist: Option<PersistHook>,
    /// Where the metrics go (the caller serves them, see [`crate::metrics::serve`]).
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write (see [`crate::leader`]).
    pub leadership: Leadership,
    /// A label selector on Machines: this replica's shard (all Machines when None).
    pub machine_selector: Option<String>,
    /// Read every known host's power this often into `baremend_host_power_state` (None: off).
    pub power_poll: Option<Duration>,
    /// Spreads the power reads over the interval (see [`super::monitor`]).
    pub power_poll_seed: u64,
    /// Also run the config-drift coordinator (see [`crate::drift`]) where the API serves
    /// MachineConfigPools, with helper pods of this image. None: not at all.
    pub drift_helper_image: Option<String>,
    /// Where this replica runs (see [`Placement`]).
    pub placement: Option<Placement>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            instance: "baremend".into(),
            poll: Duration::from_secs(1),
            after_persist: None,
            metrics: Arc::new(Metrics::new()),
            leadership: Leadership::unconditional(),
            machine_selector: None,
            power_poll: None,
            power_poll_seed: 0,
            drift_helper_image: None,
            placement: None,
        }
    }
}

/// Whether the API server knows the out-of-service taint: Kubernetes 1.28 or later.
async fn out_of_service_taint(client: &Client) -> bool {
    // The watches retry forever; so does this, rather than fail a start on one bad answer.
    let mut backoff = Duration::from_millis(200);
    let version = loop {
        match client.apiserver_version().await {
            Ok(version) => break version,
            Err(error) => {
                warn!(%error, "cannot read the API server's version; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    };
    // Minor versions may carry a suffix ("28+" on some distributions).
    let number = |text: &str| {
        text.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    let supported = match (number(&version.major), number(&version.minor)) {
        (Some(major), Some(minor)) => (major, minor) >= (1, 28),
        _ => false,
    };
    if !supported {
        warn!(
            major = %version.major,
            minor = %version.minor,
            "the API server predates the out-of-service taint (1.28): nodeRelease OutOfService is held"
        );
    }
    supported
}

/// Runs the controller (and the drift coordinator, when asked and served) until `shutdown`
/// resolves.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    options: ControllerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    let drift = match &options.drift_helper_image {
        Some(image) if crate::drift::controller::mco_served(&client).await => {
            Some(crate::drift::controller::DriftOptions {
                instance: options.instance.clone(),
                poll: options.poll.max(Duration::from_millis(100)),
                metrics: options.metrics.clone(),
                leadership: options.leadership.clone(),
                helper_image: image.clone(),
            })
        }
        Some(_) => {
            info!("the API serves no MachineConfigPools: the drift coordinator stays off");
            None
        }
        None => None,
    };
    // One watch of Nodes, shared: on a large cluster a second cache of every Node (and a
    // second stream of their updates to decode) would cost as much as the rest together.
    let consumers = if drift.is_some() { 2 } else { 1 };
    let (mut feeds, node_watch) = watch_nodes(&client, consumers)?;
    let machine_nodes = feeds.remove(0);
    let Some(drift) = drift else {
        let result = run_machines(client, clock, options, machine_nodes, shutdown).await;
        drop(node_watch);
        return result;
    };
    let drift_nodes = feeds.remove(0);
    // One shutdown for both.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signal = Background::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let (machines, drifts) = tokio::join!(
        run_machines(
            client.clone(),
            clock.clone(),
            options,
            machine_nodes,
            until_stopped(stopped.clone())
        ),
        crate::drift::controller::run(
            client,
            clock,
            drift,
            Some(drift_nodes),
            until_stopped(stopped)
        ),
    );
    drop((signal, node_watch));
    machines.and(drifts)
}

/// Runs the machine remediation controller until `shutdown` resolves.
async fn run_machines(
    client: Client,
    clock: Arc<dyn Clock>,
    options: ControllerOptions,
    node_feed: NodeFeed,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    let out_of_service_taint = out_of_service_taint(&client).await;
    let config = watcher::Config::default();

    let (hosts, host_stream) = slimmed_informer(
        Api::<slim::BareMetalHost>::all(client.clone()),
        config.clone(),
        slim::bare_metal_host,
    );
    let NodeFeed {
        store: nodes,
        changes: node_stream,
    } = node_feed;
    let (remediations, remediation_stream) =
        informer(Api::<Remediation>::all(client.clone()), config.clone());
    let (policies, policy_stream) = informer(
        Api::<RemediationPolicy>::all(client.clone()),
        config.clone(),
    );
    let (host_bmcs, host_bmc_stream) =
        informer(Api::<HostBmc>::all(client.clone()), config.clone());
    let machine_config = match &options.machine_selector {
        Some(selector) => config.labels(selector),
        None => config,
    };
    let (machines, machine_stream) = slimmed_informer(
        Api::<slim::Machine>::all(client.clone()),
        machine_config,
        slim::machine,
    );
    // A bounded number of passes at once: at start every Machine is looked at, and thousands
    // of passes in flight would only hold memory (and API connections) for nothing.
    let controller = Controller::for_stream(machine_stream, machines.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(PASSES_AT_ONCE));
    let context = Arc::new(Context {
        client: client.clone(),
        machines,
        hosts,
        nodes,
        remediations: remediations.clone(),
        policies,
        host_bmcs,
        connector: Connector::new(),
        bmc_drivers: DriverCache::default(),
        clock,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "baremend".into(),
                instance: Some(options.instance.clone()),
            },
        ),
        poll: options.poll,
        after_persist: options.after_persist,
        metrics: options.metrics,
        power_monitored: options.power_poll.is_some(),
        starts: tokio::sync::Mutex::new(Launched::new()),
        out_of_service_taint,
        leadership: options.leadership,
        placement: options.placement,
        backoff: Backoff::default(),
    });
    context.metrics.set_leader(context.leadership.is_leading());
    // Background: they stop with this function, also when it is dropped mid-way (leadership
    // lost): nothing may go on reading BMCs for a controller that is gone.
    let monitor = options.power_poll.map(|interval| {
        Background::spawn(super::monitor::run(
            context.clone(),
            interval,
            options.power_poll_seed,
        ))
    });
    let gauges = {
        let context = context.clone();
        Background::spawn(async move {
            loop {
                context.refresh_metrics();
                tokio::time::sleep(GAUGE_REFRESH).await;
            }
        })
    };

    let by_consumer = |host: slim::BareMetalHost| {
        let consumer = host.spec?.consumer_ref?;
        let namespace = consumer.namespace?;
        (consumer.kind.as_deref() == Some("Machine"))
            .then(|| ObjectRef::new(&consumer.name).within(&namespace))
    };
    let by_node = |node: Arc<Node>| {
        node.annotations()
            .get(NODE_MACHINE)
            .and_then(|value| value.split_once('/'))
            .map(|(namespace, name)| ObjectRef::new(name).within(namespace))
    };
    let store = remediations.clone();
    let by_spec = move |remediation: Remediation| {
        let mut machines: Vec<ObjectRef<slim::Machine>> = remediation
            .namespace()
            .map(|namespace| ObjectRef::new(&remediation.spec.machine_name).within(&namespace))
            .into_iter()
            .collect();
        // A remediation that ended may open a gate: wake the held ones at once.
        let ended = remediation
            .status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal());
        if ended {
            machines.extend(held_machines(&store));
        }
        machines
    };
    // A policy or BMC mapping change may unblock anything: look at every Machine again.
    let reconcile_all =
        futures_util::stream::select(policy_stream.map(|_| ()), host_bmc_stream.map(|_| ()));

    controller
        .watches_stream(host_stream, by_consumer)
        .watches_shared_stream(node_stream, by_node)
        .watches_stream(remediation_stream, by_spec)
        .reconcile_all_on(reconcile_all)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "reconcile failed");
            }
        })
        .await;
    drop((gauges, monitor));
    context.refresh_metrics();
    info!("controller stopped");
    Ok(())
}

/// Runs the controller while this replica holds the Lease of `lease`, until `shutdown`
/// resolves (then the Lease is released) or leadership is lost (then the controller is
/// dropped at once, in-flight passes included, and [`Error::LeadershipLost`] returned: the
/// process should exit and be restarted as a candidate, as client-go's controllers do).
pub async fn run_elected(
    client: Client,
    clock: Arc<dyn Clock>,
    mut options: ControllerOptions,
    lease: LeaseConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    lease.validate()?;
    let leadership = Leadership::elected();
    options.leadership = leadership.clone();
    let metrics = options.metrics.clone();
    metrics.set_leader(false);
    // A standby is healthy and ready: it only waits.
    metrics.set_ready(true);
    let mut elector = Elector::new(client.clone(), lease.clone(), leadership);
    let mut shutdown = std::pin::pin!(shutdown);
    tokio::select! {
        () = elector.acquire() => {}
        () = &mut shutdown => return Ok(()),
    }
    metrics.set_leader(true);
    metrics.set_ready(false);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = run(client, clock, options, async move {
        let _ = stopped.await;
    });
    let mut controller = std::pin::pin!(controller);
    let lost = || Error::LeadershipLost(format!("{}/{}", lease.namespace, lease.name));
    let outcome = tokio::select! {
        result = &mut controller => result,
        () = elector.keep() => Err(lost()),
        () = &mut shutdown => {
            let _ = stop.send(());
            // In-flight passes finish, still only while the Lease is ours.
            tokio::select! {
                result = &mut controller => result,
                () = elector.keep() => Err(lost()),
            }
        }
    };
    metrics.set_leader(false);
    if !matches!(outcome, Err(Error::LeadershipLost(_))) {
        elector.release().await;
    }
    outcome
}

/// Reconcile passes running at once.
const PASSES_AT_ONCE: u16 = 16;

/// How often the gauges are recounted from the caches.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);

/// The Machines whose remediation waits for a gate.
fn held_machines(remediations: &Store<Remediation>) -> Vec<ObjectRef<slim::Machine>> {
    remediations
        .state()
        .iter()
        .filter(|r| {
            r.status.as_ref().map(|s| s.phase).unwrap_or_default() == RemediationPhase::Pending
        })
        .filter_map(|r| {
            let namespace = r.namespace()?;
            Some(ObjectRef::new(&r.spec.machine_name).within(&namespace))
        })
        .collect()
}
