//! The remediation controller: a kube `Controller` over Machines that gathers observations,
//! asks the planner for the next step and carries it out, persisting every step in the
//! Machine's `Remediation` before it acts.
//!
//! Event-driven: Machines, BareMetalHosts, Nodes and Remediations are watched once each
//! (shared reflector stores), and changes map back to the Machine they concern; timed
//! requeues only cover deadlines and the wait for a BMC to settle.

pub(super) mod housekeeping;
pub(super) mod machineless;
pub(super) mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use self::reconcile::{error_policy, reconcile};
use crate::api::slim;
use crate::api::{HostBmc, MachineRemediation, NodeRemediation, Remediation, RemediationPolicy};
use crate::remediation::decide::state::unblocked_by;
use crate::remediation::decide::trust::host_consumer;
use crate::remediation::decide::workload::cluster_of;
use crate::remediation::evidence::foreign::discover_at_start;
pub use crate::remediation::pass::context::{
    Caches, Context, ControllerOptions, PersistFn, PersistHook, Placement,
};
use crate::remediation::world::machine_index::MachineIndex;
use crate::remediation::world::workload::{KEEP_CONNECTED_PERIOD, WokenNode};
use crate::runtime::clock::Clock;
use crate::runtime::informer::{
    Changes, informer, mapped_informer, shared_informer, slimmed_informer, watch_config,
};
use crate::runtime::key_index::KeyIndex;
use crate::runtime::node_watch::{NodeFeed, read_changes};
use crate::runtime::runner::{self, every_object, woken, woken_by_watch};
use crate::runtime::tasks::Background;
use crate::{Error, Result};

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

/// The watches of the machine controller: the caches its passes read, and the streams of
/// changes that wake them.
struct Watches {
    machines: (Store<slim::Machine>, Changes<slim::Machine>),
    /// The Machines' facts, kept by their watch.
    machine_facts: MachineIndex,
    hosts: (Store<slim::BareMetalHost>, Changes<slim::BareMetalHost>),
    /// The hosts by their consumer, kept by their watch.
    host_consumers: KeyIndex<slim::BareMetalHost>,
    machine_requests: (Store<MachineRemediation>, Changes<MachineRemediation>),
    /// Shared with the controller of Machine-less Nodes: one cache, a stream for each.
    remediations: Shared<Remediation>,
    policies: Shared<RemediationPolicy>,
    host_bmcs: Shared<HostBmc>,
    node_requests: Shared<NodeRemediation>,
    /// The tasks driving the shared watches.
    tasks: Vec<Background>,
}

/// A kind watched for both controllers: the cache, and the changes for the Machine
/// controller and for the controller of Machine-less Nodes.
struct Shared<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    for_machines: ReflectHandle<K>,
    for_nodes: ReflectHandle<K>,
    /// A third stream, where a consumer asked for one (the `HostBmc`s' claims).
    extra: Option<ReflectHandle<K>>,
}

/// Changes a shared watch holds for a consumer that is behind.
const SHARED_CHANGES_BUFFER: usize = 256;

/// Starts a shared watch of `K` for both controllers (`extra`: and a third stream).
fn shared<K>(client: &Client, tasks: &mut Vec<Background>, extra: bool) -> Result<Shared<K>>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let api = Api::all(client.clone());
    let (store, mut handles, task) = shared_informer(
        api,
        watch_config(),
        |_: &mut K| {},
        |_: &watcher::Event<K>| {},
        if extra { 3 } else { 2 },
        SHARED_CHANGES_BUFFER,
    )?;
    tasks.push(task);
    let extra = if extra { handles.pop() } else { None };
    let (Some(for_nodes), Some(for_machines)) = (handles.pop(), handles.pop()) else {
        return Err(Error::Invalid {
            object: "a shared watch".into(),
            reason: "fewer streams than asked for".into(),
        });
    };
    Ok(Shared {
        store,
        for_machines,
        for_nodes,
        extra,
    })
}

/// Starts one informer per kind (Nodes come from the shared watch); Machines of the Machine
/// API in use, and BareMetalHosts, only of this replica's shard when selectors are given.
fn watch_kinds(client: &Client, options: &ControllerOptions) -> Result<Watches> {
    let config = watch_config();
    let mut tasks = Vec::new();
    let selected = |selector: Option<&String>| match selector {
        Some(selector) => config.clone().labels(selector),
        None => config.clone(),
    };
    let machine_config = selected(options.machine_selector.as_ref());
    let machine_api = options.machine_api;
    // What a start's count of the fleet's health asks of each Machine, kept by its watch.
    let machine_facts = MachineIndex::default();
    // The hosts by their consumer, for a start's lookup of a Cluster API Machine's host.
    let host_consumers = KeyIndex::new(host_consumer);
    let observe = {
        let index = machine_facts.clone();
        move |event: &watcher::Event<slim::Machine>| index.observe(event)
    };
    Ok(Watches {
        machines: match machine_api {
            slim::MachineApi::OpenShift => slimmed_informer(
                Api::all(client.clone()),
                machine_config,
                slim::machine,
                observe,
            ),
            slim::MachineApi::ClusterApi => mapped_informer(
                Api::<slim::CapiMachine>::all(client.clone()),
                machine_config,
                slim::Machine::from,
                slim::machine,
                observe,
            ),
        },
        machine_facts,
        hosts: (slimmed_informer(
            Api::all(client.clone()),
            selected(options.host_selector.as_ref()),
            slim::bare_metal_host,
            {
                let index = host_consumers.clone();
                move |event: &watcher::Event<slim::BareMetalHost>| index.observe(event)
            },
        )),
        host_consumers,
        machine_requests: (informer(Api::all(client.clone()), config)),
        remediations: shared(client, &mut tasks, false)?,
        policies: shared(client, &mut tasks, false)?,
        // The third: a changed (or deleted) HostBmc wakes every other one naming its Node,
        // whose claim it may have made or ended (see `trust.rs`, `machineless_claims`).
        host_bmcs: shared(client, &mut tasks, true)?,
        node_requests: shared(client, &mut tasks, false)?,
        tasks,
    })
}

/// The Machine a BareMetalHost serves, to wake on the host's changes: its consumer (a Machine
/// API Machine), or the Cluster API Machine whose infrastructure is the consuming
/// Metal3Machine (looked up in `machines`).
fn machine_of_host(
    host: slim::BareMetalHost,
    machines: &Store<slim::Machine>,
) -> Option<ObjectRef<slim::Machine>> {
    let consumer = host.spec?.consumer_ref?;
    let namespace = consumer.namespace?;
    match consumer.kind.as_deref() {
        Some("Machine") => Some(ObjectRef::new(&consumer.name).within(&namespace)),
        Some("Metal3Machine") => machines
            .state()
            .iter()
            .find(|m| {
                m.namespace().as_deref() == Some(namespace.as_str())
                    && m.spec
                        .as_ref()
                        .and_then(|s| s.infrastructure_ref.as_ref())
                        .is_some_and(|r| {
                            r.name == consumer.name
                                && r.kind.as_deref() == Some("Metal3Machine")
                                && r.namespace.as_deref().is_none_or(|n| n == namespace)
                        })
            })
            .map(|m| ObjectRef::from_obj(&**m)),
        _ => None,
    }
}

/// The Machine a Cluster API remediation request is for: the one of its name and namespace.
fn machine_of_request(request: MachineRemediation) -> Option<ObjectRef<slim::Machine>> {
    let namespace = request.namespace()?;
    Some(ObjectRef::new(&request.name_any()).within(&namespace))
}

/// The Machine of a Node, to wake on the Node's changes: the one whose `status.nodeRef` names
/// it (by name and UID), never the Node's own annotations (its kubelet may write them).
fn machine_of_node(
    node: &Node,
    machines: &Store<slim::Machine>,
) -> Option<ObjectRef<slim::Machine>> {
    let all = machines.state();
    let uid = node.uid();
    slim::machine_of_node(&all, &node.name_any(), uid.as_deref()).map(|m| ObjectRef::from_obj(&**m))
}

/// The Machine of a changed Node of a workload cluster: the one of that Cluster, in its
/// namespace, whose `status.nodeRef` names the Node.
fn machine_of_workload_node(
    woken: &WokenNode,
    machines: &Store<slim::Machine>,
) -> Option<ObjectRef<slim::Machine>> {
    machines
        .state()
        .iter()
        .find(|m| {
            m.namespace().as_deref() == Some(woken.cluster.namespace.as_str())
                && cluster_of(m) == Some(woken.cluster.name.as_str())
                && m.node_name() == Some(woken.node.as_str())
        })
        .map(|m| ObjectRef::from_obj(&**m))
}

/// The Machines a changed Remediation wakes: its own, and when it ended (which may open a
/// gate) every Machine whose start is held.
fn machines_of_remediation(
    remediation: &Remediation,
    all: &Store<Remediation>,
) -> Vec<ObjectRef<slim::Machine>> {
    let held = unblocked_by(remediation, || all.state());
    std::iter::once(remediation)
        .chain(held.iter().map(|r| &**r))
        .filter_map(|r| {
            let namespace = r.namespace()?;
            Some(ObjectRef::new(r.spec.machine_name.as_deref()?).within(&namespace))
        })
        .collect()
}

/// Runs the machine remediation controller, and beside it the controller of Nodes without a
/// Machine (`node_feeds`: the Node watch's streams for each, which a composition of
/// controllers may share with others), until `shutdown` resolves.
pub async fn run_machines(
    client: Client,
    clock: Arc<dyn Clock>,
    options: ControllerOptions,
    node_feeds: (NodeFeed, NodeFeed),
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    let (node_feed, machineless_nodes) = node_feeds;
    let out_of_service_taint = out_of_service_taint(&client).await;
    let watches = watch_kinds(&client, &options)?;
    let remediations = watches.remediations.store.clone();
    let (machines, machine_stream) = watches.machines;
    let machines_of_hosts = machines.clone();
    let caches = Caches {
        machines: machines.clone(),
        hosts: watches.hosts.0,
        host_consumers: watches.host_consumers.clone(),
        nodes: node_feed.store.clone(),
        node_ready: node_feed.ready.clone(),
        machine_facts: watches.machine_facts.clone(),
        remediations: remediations.clone(),
        policies: watches.policies.store.clone(),
        host_bmcs: watches.host_bmcs.store.clone(),
        machine_requests: watches.machine_requests.0,
        node_requests: watches.node_requests.store.clone(),
    };
    // The generation of the policy the passes read, written on it (see `observed.rs`).
    let policy_changed = Arc::new(tokio::sync::Notify::new());
    let observed = Background::spawn(crate::runtime::observed::run(
        Api::<RemediationPolicy>::all(client.clone()),
        watches.policies.store.clone(),
        policy_changed.clone(),
    ));
    let power = options.power_poll.map(|p| (p, options.power_poll_seed));
    let fencing = options.fencing_check.map(|p| (p, options.power_poll_seed));
    let context = Arc::new(Context::new(
        client,
        clock,
        caches,
        options,
        out_of_service_taint,
    ));
    context.metrics.set_leader(context.leadership.is_leading());
    // Background: they stop with this function, also when it is dropped mid-way (leadership
    // lost): nothing may go on reading BMCs for a controller that is gone.
    let monitor = power.map(|(interval, seed)| {
        Background::spawn(crate::remediation::readiness::monitor::run(
            context.clone(),
            interval,
            seed,
        ))
    });
    let readiness = fencing.map(|(interval, seed)| {
        Background::spawn(crate::remediation::readiness::fencing_check::run(
            context.clone(),
            interval,
            seed,
        ))
    });
    // A NodeHealthCheck naming baremend while it is disabled asks for nothing: told.
    let node_health_checks = Background::spawn(
        crate::remediation::requests::node_health_checks::run(context.clone()),
    );
    let gauges = {
        let context = context.clone();
        Background::every(GAUGE_REFRESH, move || context.refresh_metrics())
    };
    // The NodeHealthChecks a request's trust rests on (see `admission.rs`).
    let health_checks = {
        let context = context.clone();
        Background::spawn(async move {
            loop {
                if let Err(error) = context.refresh_health_checks().await {
                    warn!(%error, "cannot read the NodeHealthChecks");
                }
                tokio::time::sleep(crate::remediation::requests::admission::HEALTH_CHECK_REFRESH)
                    .await;
            }
        })
    };
    // A shard watches its own Machines only: another shard's requests and Remediations wake
    // nothing here (a pass of a Machine not in the cache would only fail).
    let machines_of_shard = machines.clone();
    let by_remediation = move |r: Arc<Remediation>| {
        let mut woken = machines_of_remediation(&r, &remediations);
        woken.retain(|machine| machines_of_shard.get(machine).is_some());
        woken
    };
    let machines_of_requests_here = machines.clone();
    let machine_of_request = move |request: MachineRemediation| {
        machine_of_request(request).filter(|m| machines_of_requests_here.get(m).is_some())
    };
    // A NodeHealthCheck's request names its Node: its Machine is the Node's.
    let nodes = node_feed.store.clone();
    let machines_of_requests = machines.clone();
    let machine_of_node_request = move |request: Arc<NodeRemediation>| {
        nodes
            .get(&ObjectRef::new(
                &crate::remediation::requests::node_of_request(&request),
            ))
            .and_then(|node| machine_of_node(&node, &machines_of_requests))
    };
    let machines_of_nodes = machines.clone();
    let machine_of_changed_node = move |node: Arc<Node>| machine_of_node(&node, &machines_of_nodes);
    // A Node of a workload cluster wakes its Machine as a local one does.
    let machines_of_woken = machines.clone();
    let woken_machines =
        futures_util::stream::unfold(context.clients.workloads.wakes(), |mut woken| async move {
            woken.recv().await.map(|node| (node, woken))
        })
        .filter_map(move |woken| {
            std::future::ready(machine_of_workload_node(&woken, &machines_of_woken))
        });
    let workload_sweep = {
        let context = context.clone();
        Background::every(context.clients.workloads.sweep_period(), move || {
            let connected = context.clients.workloads.sweep();
            context.metrics.set_workload_clusters(connected);
        })
    };
    let keeper = keep_clusters_connected(&context);
    // What the API server serves, discovered once now: the first start reads the other
    // remediators' kinds beside its own discovery, as every later start does.
    let discovery = {
        let context = context.clone();
        Background::spawn(async move { discover_at_start(&context).await })
    };
    // A policy or BMC mapping change may unblock anything: look at every Machine again.
    let reconcile_all = futures_util::stream::select(
        watches
            .policies
            .for_machines
            .map(move |_| policy_changed.notify_one()),
        watches.host_bmcs.for_machines.map(|_| ()),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signal = Background::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let machineless = self::machineless::run(
        context.clone(),
        self::machineless::Feeds {
            host_bmcs: (watches.host_bmcs.store, watches.host_bmcs.for_nodes),
            claims: watches.host_bmcs.extra,
            requests: watches.node_requests.for_nodes,
            remediations: watches.remediations.for_nodes,
            policies: watches.policies.for_nodes,
            nodes: read_changes(machineless_nodes.changes),
        },
        until_stopped(stopped.clone()),
    );
    let requests = futures_util::stream::select_all([
        woken_by_watch(machine_stream, |m: slim::Machine| {
            Some(ObjectRef::from_obj(&m))
        }),
        woken_by_watch(watches.hosts.1, move |host| {
            machine_of_host(host, &machines_of_hosts)
        }),
        woken_by_watch(watches.machine_requests.1, machine_of_request),
        woken(watches.node_requests.for_machines, machine_of_node_request),
        woken(read_changes(node_feed.changes), machine_of_changed_node),
        woken(watches.remediations.for_machines, by_remediation),
        woken(woken_machines, Some),
        woken(reconcile_all, every_object(machines.clone())),
    ]);
    // A bounded number of passes at once: at start every Machine is looked at, and thousands
    // of passes in flight would only hold memory (and API connections) for nothing.
    let machine_controller = runner::run(
        machines,
        requests,
        PASSES_AT_ONCE,
        reconcile,
        error_policy,
        context.clone(),
        until_stopped(stopped),
    );
    tokio::join!(machine_controller, machineless);
    drop((
        observed,
        gauges,
        health_checks,
        monitor,
        readiness,
        node_health_checks,
        workload_sweep,
        keeper,
        discovery,
        signal,
        watches.tasks,
    ));
    context.refresh_metrics();
    info!("controller stopped");
    Ok(())
}

/// Cluster API: every workload cluster of the Machines kept connected and its Nodes listed
/// (see `world::workload`), so that a start finds its cluster's Nodes at hand instead of
/// waiting for a new connection (a Secret read, a TLS handshake, a probe and the first list:
/// 9–12 ms of a fleet start's 16 in the benchmark). None when the connections are made on
/// first need only.
fn keep_clusters_connected(context: &Arc<Context>) -> Option<Background> {
    if context.settings.machine_api != slim::MachineApi::ClusterApi
        || !context.clients.workloads.keeps_connected()
    {
        return None;
    }
    let context = context.clone();
    Some(Background::spawn(async move {
        // The caches fill as the controller polls their watches: looked at until they have.
        while !context.caches_ready() {
            tokio::time::sleep(CACHES_FILLING).await;
        }
        loop {
            let clusters = context.workload_clusters();
            let wanted = clusters.len();
            let up = context.clients.workloads.keep_connected(clusters).await;
            if up < wanted {
                tracing::debug!(
                    wanted,
                    up,
                    "workload clusters kept connected: some do not answer"
                );
            }
            tokio::time::sleep(KEEP_CONNECTED_PERIOD).await;
        }
    }))
}

/// Resolves once `stopped` says so (or its sender is gone): one shutdown for several
/// controllers.
pub async fn until_stopped(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Reconcile passes running at once.
const PASSES_AT_ONCE: usize = 16;

/// How often the keeper of the workload clusters' connections looks whether the caches are
/// filled, at start.
const CACHES_FILLING: Duration = Duration::from_millis(50);

/// How often the gauges are recounted from the caches.
const GAUGE_REFRESH: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;

    fn host(consumer: serde_json::Value) -> slim::BareMetalHost {
        serde_json::from_value(json!({
            "metadata": {"name": "worker-0", "namespace": "ns"},
            "spec": {"consumerRef": consumer},
        }))
        .unwrap()
    }

    fn machines(objects: &[serde_json::Value]) -> Store<slim::Machine> {
        let (store, mut writer) = reflector::store::<slim::Machine>();
        for object in objects {
            writer.apply_watcher_event(&Event::Apply(
                serde_json::from_value(object.clone()).unwrap(),
            ));
        }
        store
    }

    #[test]
    fn a_host_wakes_the_machine_api_machine_it_serves() {
        let consumer = json!({"kind": "Machine", "name": "m-0", "namespace": "ns"});
        let woken = machine_of_host(host(consumer), &machines(&[]));
        assert_eq!(woken, Some(ObjectRef::new("m-0").within("ns")));
    }

    #[test]
    fn a_host_wakes_the_cluster_api_machine_whose_metal3_machine_consumes_it() {
        let capi = |name: &str, namespace: &str, infrastructure: &str| {
            json!({
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"infrastructureRef": {"kind": "Metal3Machine", "name": infrastructure}},
            })
        };
        let store = machines(&[
            capi("other", "ns", "m3-other"),
            capi("elsewhere", "ns2", "m3-0"),
            capi("worker-0", "ns", "m3-0"),
        ]);
        let consumer = json!({"kind": "Metal3Machine", "name": "m3-0", "namespace": "ns"});
        let woken = machine_of_host(host(consumer), &store);
        assert_eq!(woken, Some(ObjectRef::new("worker-0").within("ns")));
        let unknown = json!({"kind": "Metal3Machine", "name": "m3-9", "namespace": "ns"});
        assert_eq!(machine_of_host(host(unknown), &store), None);
        let foreign = json!({"kind": "Something", "name": "m3-0", "namespace": "ns"});
        assert_eq!(machine_of_host(host(foreign), &store), None);
    }
}
