//! The workload clusters of a Cluster API management cluster, where Cluster API keeps the
//! Machines' Nodes: reached through each Cluster's kubeconfig Secret (`<cluster>-kubeconfig`
//! in the Cluster's namespace, the kubeconfig under the key `value`), as Cluster API's own
//! cluster cache and its Metal3 provider reach them.
//!
//! Expected flow: a pass whose Node is in a workload cluster asks [`WorkloadClusters::connect`]
//! for it. The first ask reads the Secret, checks the kubeconfig ([`check_kubeconfig`]),
//! builds a client and starts a watch of that cluster's Nodes into a cache (slimmed as the
//! local one), and waits for its first list. Later asks reuse the connection; at most every
//! [`RECHECK`] (by default) one reads the Secret again (a rotated kubeconfig makes a new
//! connection) and probes the API server. A connection no pass asked for in [`IDLE`] is dropped
//! ([`WorkloadClusters::sweep`]). Unless told otherwise ([`Lifetimes::keep_connected`]), the
//! controller asks for every workload cluster of its Machines every [`KEEP_CONNECTED_PERIOD`]
//! ([`WorkloadClusters::keep_connected`]), as Cluster API's cluster cache keeps its clusters:
//! a start then finds its cluster connected and listed. A changed Node of a workload cluster is sent on the wake
//! channel, so the pass of its Machine runs as for a local Node.
//!
//! Guarantees:
//! - A kubeconfig that would run a command here (`exec`, `auth-provider`), skip the server's
//!   certificate check, or speak plain HTTP is refused, never used: whoever may write the
//!   Secret must not gain a shell in the controller, nor a forgeable channel.
//! - A kubeconfig that names a file of this machine (a CA, a token, a client certificate) is
//!   refused; a Secret not of Cluster API's type, or of a Cluster that does not exist, is not
//!   read for a kubeconfig.
//! - Every answer of a workload API server is held to [`ANSWER_LIMITS`] (size, watch event
//!   size, whole-answer and per-event deadlines: `runtime::bounded`), and what it says is
//!   cleaned and cut before it reaches a condition, an Event or a log: a hostile or broken
//!   server costs its own cluster's remediations and a few MiB, nothing else.
//! - The kubeconfig's content appears nowhere: errors name the Secret and the server's
//!   address only.
//! - A cluster whose watch is failing, whose probe failed, or whose first list has not
//!   arrived is [`Error::WorkloadCluster`]: its cache is not offered, so a stale cache never
//!   says a Node is gone (the pass waits, or holds its start, instead).
//! - A cluster found unreachable is not tried again for [`RETRY_UNREACHABLE`]: a fleet of
//!   held passes does not turn into a storm of connection attempts.
//! - At most [`PASSES_PER_CLUSTER`] passes of one workload cluster's remediations run at once
//!   ([`WorkloadClusters::enter`]): a server that answers slowly holds those workers, never
//!   all of the controller's, so other clusters' remediations go on.
//!
//! Caveats: a kubeconfig rotated in place is seen within [`RECHECK`]; a connection refused
//! with the old one meanwhile is a failed pass, tried again on the backoff.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config, ResourceExt};

use crate::api::lean_node::LeanNode;
use crate::api::slim;
use crate::remediation::decide::workload::ClusterRef;
use crate::runtime::bounded::{Bounded, Limits, outside_text};
use crate::runtime::clock::{Clock, since_epoch};
use crate::runtime::informer::watch_config;
use crate::runtime::lock;
use crate::runtime::read::GetPresent;
use crate::runtime::ready_index::{ReadyIndex, ready_index};
use crate::runtime::tasks::Background;
use crate::{Error, Result};

/// How often a connection in use reads its Secret again and probes its API server, by default.
pub const RECHECK: Duration = Duration::from_secs(30);

/// How long a connection no pass asked for is kept, by default.
pub const IDLE: Duration = Duration::from_secs(300);

/// How often connections are looked at and kept fresh: see [`Lifetimes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// How often a connection in use reads its Secret again and probes its API server.
    pub recheck: Duration,
    /// How long a connection no pass asked for is kept.
    pub idle: Duration,
    /// Whether every workload cluster of the controller's Machines is kept connected (as
    /// Cluster API's own cluster cache keeps them), so that a start never waits for a
    /// connection and its first Node list; otherwise a cluster is connected on first need.
    pub keep_connected: bool,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Lifetimes {
            recheck: RECHECK,
            idle: IDLE,
            keep_connected: true,
        }
    }
}

/// How often the clusters kept connected are looked at again (new ones connected, the others
/// touched so that the idle sweep keeps them, and rechecked when due).
pub const KEEP_CONNECTED_PERIOD: Duration = Duration::from_secs(5);

/// How many connections the keeper opens at once: a controller that starts with a hundred
/// workload clusters does not open them all in the same instant.
const CONNECTING_AT_ONCE: usize = 4;

/// How long a cluster found unreachable answers so without being tried again.
pub const RETRY_UNREACHABLE: Duration = Duration::from_secs(1);

/// How soon a connection whose watch fails is replaced, once its server answers a probe.
pub const REOPEN_FAILING: Duration = Duration::from_secs(1);

/// How long a new connection waits for its first list of Nodes, and a probe for its answer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How many passes of one workload cluster's remediations run at once: a quarter of the
/// controller's passes at once (16), so that a cluster whose server holds every request to
/// its deadline (10 s a list, 30 s an answer) keeps three quarters of the workers for the
/// others. Four such clusters at once would hold all of them, each for its deadlines.
pub const PASSES_PER_CLUSTER: usize = 4;

/// Passes running per cluster, each holding a [`Share`].
#[derive(Debug, Default, Clone)]
struct Places(Arc<Mutex<HashMap<ClusterRef, usize>>>);

impl Places {
    /// A place for one pass of `cluster`, if fewer than `most` hold one.
    fn enter(&self, cluster: &ClusterRef, most: usize) -> Option<Share> {
        let mut places = lock(&self.0);
        let taken = places.entry(cluster.clone()).or_default();
        if *taken >= most {
            return None;
        }
        *taken += 1;
        Some(Share {
            cluster: cluster.clone(),
            places: self.clone(),
        })
    }

    /// How many passes of `cluster` hold a place.
    #[cfg(test)]
    fn taken(&self, cluster: &ClusterRef) -> usize {
        lock(&self.0).get(cluster).copied().unwrap_or(0)
    }
}

/// A place among the passes of one workload cluster ([`WorkloadClusters::enter`]), given back
/// when dropped.
#[derive(Debug)]
pub struct Share {
    cluster: ClusterRef,
    places: Places,
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut places = lock(&self.places.0);
        if let Some(taken) = places.get_mut(&self.cluster) {
            *taken = taken.saturating_sub(1);
            if *taken == 0 {
                places.remove(&self.cluster);
            }
        }
    }
}

/// How long a pass's request to a workload cluster may wait for its answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Nodes a page when a workload cluster's Nodes are listed: a page of real Nodes (up to
/// ~30 KB each with their images) fits [`ANSWER_LIMITS`].
const FIRST_LIST_PAGE: u32 = 250;

/// What a workload cluster's API server may make us read: 8 MiB an answer, 2 MiB a watch
/// event, an answer whole within [`REQUEST_TIMEOUT`] and an event within 10 s of its first
/// byte. A hostile or broken server then costs its own remediations, and a few MiB.
pub const ANSWER_LIMITS: Limits = Limits {
    body_bytes: 8 << 20,
    line_bytes: 2 << 20,
    request: REQUEST_TIMEOUT,
    event: Duration::from_secs(10),
};

/// The key of the kubeconfig in Cluster API's Secret.
pub const KUBECONFIG_KEY: &str = "value";

/// How many woken Nodes wait for the controller before more are dropped (the passes waiting
/// on a Node also look again at their poll interval).
const WAKE_BUFFER: usize = 1024;

/// The Node API of one cluster: the one baremend runs in, or a workload cluster. The release
/// steps check it is the cluster their proof names.
#[derive(Clone)]
pub struct NodeApi {
    cluster: Option<ClusterRef>,
    api: Api<Node>,
}

impl NodeApi {
    /// The Nodes of the cluster `client` talks to, baremend's own.
    pub fn local(client: &Client) -> Self {
        NodeApi {
            cluster: None,
            api: Api::all(client.clone()),
        }
    }

    /// The workload cluster it reaches (None: baremend's own).
    pub fn cluster(&self) -> Option<&ClusterRef> {
        self.cluster.as_ref()
    }

    /// The API.
    pub fn api(&self) -> &Api<Node> {
        &self.api
    }
}

/// A Node of a workload cluster that changed, for the controller to wake its Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WokenNode {
    /// Its cluster.
    pub cluster: ClusterRef,
    /// Its name.
    pub node: String,
}

/// The watch's state, written by the watch task and read by the passes.
#[derive(Debug, Default)]
struct Health {
    /// The first list arrived.
    listed: bool,
    /// The last failure since the last success (None: healthy).
    failing: Option<String>,
}

/// A watch's [`Health`], and word of each change to whoever waits for one.
#[derive(Debug, Default)]
struct Watched {
    health: Mutex<Health>,
    changed: tokio::sync::Notify,
}

impl Watched {
    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        lock(&self.health)
    }

    /// Records a failure (or a success: `None`), and the first list once `listed`.
    fn mark(&self, failing: Option<String>, listed: bool) {
        {
            let mut health = self.health();
            health.failing = failing;
            health.listed |= listed;
        }
        self.changed.notify_waiters();
    }

    /// Waits for the first list (`Ok`) or a failure (`Err`, why), whichever comes first: told,
    /// not polled, so a new connection costs no more than its round trips.
    async fn first_list(&self) -> std::result::Result<(), String> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the look, so a change between the look and the wait is kept.
            changed.as_mut().enable();
            {
                let health = self.health();
                if let Some(why) = &health.failing {
                    return Err(why.clone());
                }
                if health.listed {
                    return Ok(());
                }
            }
            changed.await;
        }
    }
}

/// One workload cluster's client and Node cache.
pub struct Connection {
    cluster: ClusterRef,
    client: Client,
    nodes: Store<Node>,
    /// Each of those Nodes' readiness, kept beside them.
    ready: ReadyIndex,
    watched: Arc<Watched>,
    /// Of the kubeconfig's bytes: a rotated Secret makes a new connection.
    fingerprint: u64,
    /// When the Secret was last read and the server probed (since the epoch).
    checked: Mutex<Duration>,
    /// When a pass last asked for it.
    used: Mutex<Duration>,
    _watch: Background,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// The cached Node of that name.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(&ObjectRef::new(name))
    }

    /// Each cached Node's readiness.
    pub fn node_ready(&self) -> &ReadyIndex {
        &self.ready
    }

    /// Every cached Node.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }

    /// Its Node API.
    pub fn node_api(&self) -> NodeApi {
        NodeApi {
            cluster: Some(self.cluster.clone()),
            api: Api::all(self.client.clone()),
        }
    }

    /// Whether its watch reported a failure since its last success.
    fn failing(&self) -> bool {
        self.watched.health().failing.is_some()
    }

    /// Itself, if its watch is listed and not failing.
    fn usable(self: &Arc<Self>) -> Result<Arc<Self>> {
        let health = self.watched.health();
        match (&health.failing, health.listed) {
            (Some(why), _) => Err(unreachable(
                &self.cluster,
                format!("its Node watch fails: {why}"),
            )),
            (None, false) => Err(unreachable(
                &self.cluster,
                "its Nodes are not listed yet".into(),
            )),
            (None, true) => Ok(self.clone()),
        }
    }
}

/// What a cluster's slot holds.
enum Slot {
    Empty,
    Connected(Arc<Connection>),
    /// Found unreachable at this time, for this reason.
    Unreachable(Duration, String),
}

/// The connections to the workload clusters, one per Cluster, made on first need.
pub struct WorkloadClusters {
    management: Client,
    clock: Arc<dyn Clock>,
    lifetimes: Lifetimes,
    slots: Mutex<HashMap<ClusterRef, Arc<tokio::sync::Mutex<Slot>>>>,
    wake: Mutex<Option<tokio::sync::mpsc::Sender<WokenNode>>>,
    /// Passes running per cluster ([`WorkloadClusters::enter`]).
    places: Places,
}

impl WorkloadClusters {
    /// None yet; Secrets are read with `management`, the client of the cluster baremend
    /// runs in.
    pub fn new(management: Client, clock: Arc<dyn Clock>, lifetimes: Lifetimes) -> Self {
        WorkloadClusters {
            management,
            clock,
            lifetimes,
            slots: Mutex::new(HashMap::new()),
            wake: Mutex::new(None),
            places: Places::default(),
        }
    }

    /// A place for one pass of `cluster`'s remediations, if fewer than
    /// [`PASSES_PER_CLUSTER`] hold one (None: the pass should be put back and run later).
    pub fn enter(&self, cluster: &ClusterRef) -> Option<Share> {
        self.places.enter(cluster, PASSES_PER_CLUSTER)
    }

    /// The stream of changed workload Nodes (one taker: the controller).
    pub fn wakes(&self) -> tokio::sync::mpsc::Receiver<WokenNode> {
        let (sender, receiver) = tokio::sync::mpsc::channel(WAKE_BUFFER);
        *lock(&self.wake) = Some(sender);
        receiver
    }

    fn now(&self) -> Duration {
        since_epoch(self.clock.now())
    }

    /// The connection to `cluster`, made or checked again as the module's flow says.
    pub async fn connect(&self, cluster: &ClusterRef) -> Result<Arc<Connection>> {
        let slot = lock(&self.slots)
            .entry(cluster.clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Empty)))
            .clone();
        let mut slot = slot.lock().await;
        let now = self.now();
        match &*slot {
            Slot::Connected(connection) => {
                *lock(&connection.used) = now;
                let checked = *lock(&connection.checked);
                let since = now.saturating_sub(checked);
                // A failing watch waits out its backoff, which may outlast the API server's
                // return: such a connection is replaced as soon as the server answers.
                let due = since >= self.lifetimes.recheck
                    || (connection.failing() && since >= REOPEN_FAILING);
                if !due {
                    return connection.usable();
                }
            }
            Slot::Unreachable(at, why) if now.saturating_sub(*at) < RETRY_UNREACHABLE => {
                return Err(unreachable(cluster, why.clone()));
            }
            Slot::Unreachable(..) | Slot::Empty => {}
        }
        match self.check_or_open(cluster, &slot, now).await {
            Ok(connection) => {
                *slot = Slot::Connected(connection.clone());
                connection.usable()
            }
            Err(why) => {
                // Dropped: its watch stops, and the next ask after the pause starts afresh.
                // The pause runs from the failure, not from the attempt: a server that fails
                // slowly (one that drips) is not tried again at once by every pass waiting.
                *slot = Slot::Unreachable(self.now(), why.clone());
                Err(unreachable(cluster, why))
            }
        }
    }

    /// Connects (or touches, and rechecks when due) each of `clusters`, a few at once; returns
    /// how many answered. A cluster that cannot be reached is marked so, as for a pass that
    /// asked, and tried again on the next call after its pause.
    pub async fn keep_connected(&self, clusters: Vec<ClusterRef>) -> usize {
        futures_util::stream::iter(clusters)
            .map(|cluster| async move { self.connect(&cluster).await.is_ok() })
            .buffer_unordered(CONNECTING_AT_ONCE)
            .filter(|up| std::future::ready(*up))
            .count()
            .await
    }

    /// Whether every workload cluster of the controller's Machines is to be kept connected.
    pub fn keeps_connected(&self) -> bool {
        self.lifetimes.keep_connected
    }

    /// The Secret read again: the same kubeconfig keeps the connection (probed), another
    /// one opens a new connection.
    async fn check_or_open(
        &self,
        cluster: &ClusterRef,
        slot: &Slot,
        now: Duration,
    ) -> std::result::Result<Arc<Connection>, String> {
        let began = tokio::time::Instant::now();
        let bytes = read_kubeconfig(&self.management, cluster).await?;
        let read = began.elapsed();
        let fingerprint = fingerprint(&bytes);
        if let Slot::Connected(connection) = slot
            && connection.fingerprint == fingerprint
            && !connection.failing()
        {
            probe(&connection.client).await?;
            *lock(&connection.checked) = now;
            return Ok(connection.clone());
        }
        let clients = client_of(cluster, &bytes).await?;
        let made = began.elapsed();
        let probed = clients.requests.clone();
        let connection = self.open(cluster, clients, fingerprint, now);
        // The probe and the first list at once (a new connection costs a start its round
        // trips, and the probe's answer is the clearer error); the list, so that an empty
        // cache is never taken for "no Node".
        let listed = tokio::time::timeout(CONNECT_TIMEOUT, connection.watched.first_list());
        let ((probed, probed_at), (listed, listed_at)) =
            tokio::join!(async { (probe(&probed).await, began.elapsed()) }, async {
                (listed.await, began.elapsed())
            });
        probed?;
        match listed {
            Ok(Ok(())) => {}
            Ok(Err(why)) => return Err(format!("its Nodes cannot be listed: {why}")),
            Err(_) => {
                return Err(format!(
                    "its Nodes were not listed within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ));
            }
        }
        // How long each part took: a start waits for all of them.
        tracing::info!(
            %cluster,
            secret_read_ms = read.as_millis() as u64,
            clients_made_ms = made.as_millis() as u64,
            probed_ms = probed_at.as_millis() as u64,
            listed_ms = listed_at.as_millis() as u64,
            "workload cluster connected"
        );
        Ok(connection)
    }

    /// A connection with its Node watch started.
    fn open(
        &self,
        cluster: &ClusterRef,
        clients: Clients,
        fingerprint: u64,
        now: Duration,
    ) -> Arc<Connection> {
        let (nodes, writer) = reflector::store::<Node>();
        let ready = ready_index();
        let watched = Arc::new(Watched::default());
        let wake = lock(&self.wake).clone();
        let watch = watch_nodes(
            Api::all(clients.watch),
            (nodes.clone(), writer, ready.clone()),
            watched.clone(),
            cluster.clone(),
            wake,
        );
        Arc::new(Connection {
            cluster: cluster.clone(),
            client: clients.requests,
            nodes,
            ready,
            watched,
            fingerprint,
            checked: Mutex::new(now),
            used: Mutex::new(now),
            _watch: Background::spawn(watch),
        })
    }

    /// Drops the connections no pass asked for in their idle time, and the unreachable marks
    /// past their pause; returns how many connections remain.
    pub fn sweep(&self) -> usize {
        let now = self.now();
        let idle = self.lifetimes.idle;
        let mut slots = lock(&self.slots);
        slots.retain(|cluster, slot| {
            let Ok(slot) = slot.try_lock() else {
                // In use right now.
                return true;
            };
            let keep = match &*slot {
                Slot::Connected(connection) => {
                    let used = *lock(&connection.used);
                    now.saturating_sub(used) < idle
                }
                Slot::Unreachable(at, _) => now.saturating_sub(*at) < RETRY_UNREACHABLE,
                Slot::Empty => false,
            };
            if !keep && matches!(*slot, Slot::Connected(_)) {
                tracing::info!(%cluster, "workload cluster idle: connection dropped");
            }
            keep
        });
        slots
            .values()
            .filter(|slot| {
                slot.try_lock()
                    .map(|s| matches!(*s, Slot::Connected(_)))
                    .unwrap_or(true)
            })
            .count()
    }

    /// How often [`WorkloadClusters::sweep`] should run: often enough to drop an idle
    /// connection within a tenth of its idle time, at most every 30 s.
    pub fn sweep_period(&self) -> Duration {
        (self.lifetimes.idle / 10).clamp(Duration::from_millis(100), Duration::from_secs(30))
    }
}

/// The error of a cluster that cannot be used; `reason` may quote its server, so it is cleaned
/// and cut before it reaches a condition or an Event.
fn unreachable(cluster: &ClusterRef, reason: String) -> Error {
    Error::WorkloadCluster {
        cluster: cluster.to_string(),
        reason: outside_text(&reason),
    }
}

/// The type of the Secrets Cluster API writes for its Clusters: only such a Secret is taken
/// for a Cluster's kubeconfig.
pub const CLUSTER_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

/// The kubeconfig in the Cluster's Secret, as bytes: the Cluster must exist, and the Secret be
/// of Cluster API's type (read at once: a connection costs one round trip).
async fn read_kubeconfig(
    management: &Client,
    cluster: &ClusterRef,
) -> std::result::Result<Vec<u8>, String> {
    let name = cluster.kubeconfig_secret();
    let secrets: Api<Secret> = Api::namespaced(management.clone(), &cluster.namespace);
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(management.clone(), &cluster.namespace, &cluster_resource());
    let (secret, owner) = tokio::join!(
        secrets.get_present(&name),
        clusters.get_present(&cluster.name)
    );
    match owner {
        Ok(Some(_)) => {}
        Ok(None) => return Err(format!("its Cluster {cluster} does not exist")),
        Err(error) => {
            return Err(read_failed(
                cluster,
                "Cluster",
                &format!("Cluster {cluster}"),
                &error,
            ));
        }
    }
    let secret = match secret {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Err(format!(
                "its kubeconfig Secret {} not found",
                secret_ref(cluster)
            ));
        }
        Err(error) => {
            let what = format!("kubeconfig Secret {}", secret_ref(cluster));
            return Err(read_failed(cluster, "secrets", &what, &error));
        }
    };
    if secret.type_.as_deref() != Some(CLUSTER_SECRET_TYPE) {
        return Err(format!(
            "its kubeconfig Secret {} is not of type {CLUSTER_SECRET_TYPE}: refused (Cluster API writes that type)",
            secret_ref(cluster)
        ));
    }
    secret
        .data
        .and_then(|mut data| data.remove(KUBECONFIG_KEY))
        .map(|bytes| bytes.0)
        .filter(|bytes| !bytes.is_empty())
        .ok_or_else(|| {
            format!(
                "its kubeconfig Secret {} has no `{KUBECONFIG_KEY}`",
                secret_ref(cluster)
            )
        })
}

/// Cluster API's Cluster (`cluster.x-k8s.io/v1beta1`, as its Machines are read).
fn cluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Cluster"),
        "clusters",
    )
}

/// Why reading `what` (of `resource`, for the RBAC hint) failed, in one line.
fn read_failed(cluster: &ClusterRef, resource: &str, what: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if status.code == 403 => format!(
            "reading its {what} is forbidden: grant baremend `get` on {resource} in {}",
            cluster.namespace
        ),
        other => format!("its {what} cannot be read: {}", crate::kube_text(other)),
    }
}

fn secret_ref(cluster: &ClusterRef) -> String {
    format!("{}/{}", cluster.namespace, cluster.kubeconfig_secret())
}

fn fingerprint(bytes: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// A client from the Secret's kubeconfig, once [`check_kubeconfig`] accepts it.
async fn client_of(cluster: &ClusterRef, bytes: &[u8]) -> std::result::Result<Clients, String> {
    let secret = secret_ref(cluster);
    // Parse errors may quote the document: told without them.
    let text = std::str::from_utf8(bytes)
        .map_err(|_| format!("the kubeconfig in Secret {secret} is not UTF-8"))?;
    let kubeconfig = Kubeconfig::from_yaml(text)
        .map_err(|_| format!("the kubeconfig in Secret {secret} is not a kubeconfig"))?;
    check_kubeconfig(&kubeconfig)
        .map_err(|why| format!("the kubeconfig in Secret {secret} {why}"))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|_| format!("the kubeconfig in Secret {secret} is unusable"))?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let server = config.cluster_url.to_string();
    // Every answer held to ANSWER_LIMITS: the server is whatever the Secret names.
    let client = |config: Config| {
        ClientBuilder::try_from(config)
            .map(|builder| builder.with_layer(&Bounded::layer(ANSWER_LIMITS)).build())
            .map_err(|error| format!("no client for {server}: {error}"))
    };
    // The watch's requests last minutes by design; a pass's must not hang on a server that
    // stopped answering.
    let watch = client(config.clone())?;
    config.read_timeout = Some(REQUEST_TIMEOUT);
    Ok(Clients {
        requests: client(config)?,
        watch,
    })
}

/// A workload cluster's clients: one for the passes' requests, one for the Node watch.
struct Clients {
    requests: Client,
    watch: Client,
}

/// Whether the API server answers, within [`CONNECT_TIMEOUT`].
async fn probe(client: &Client) -> std::result::Result<(), String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(format!("its API server does not answer: {error}")),
        Err(_) => Err(format!(
            "its API server did not answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

/// Why a kubeconfig from a Secret is refused, or Ok: its current context must name a
/// cluster served over HTTPS with its certificate checked, and a user that authenticates
/// with what the file holds (a token, a client certificate, a password), never by running
/// a command (`exec`, `auth-provider`). Pure.
pub fn check_kubeconfig(kubeconfig: &Kubeconfig) -> std::result::Result<(), String> {
    let current = kubeconfig
        .current_context
        .as_deref()
        .ok_or("names no current-context")?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == current)
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| format!("has no context {current}"))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| format!("has no cluster {}", context.cluster))?;
    let server = cluster.server.as_deref().unwrap_or_default();
    if !server.starts_with("https://") {
        return Err("names a server that is not https: refused (TLS is required)".into());
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        return Err("skips the server's certificate check: refused".into());
    }
    if cluster.proxy_url.is_some() {
        return Err("names a proxy: refused".into());
    }
    // The CA comes with the kubeconfig, or the server's certificate must chain to the
    // system's roots: a path would read a file of the controller's own machine.
    if cluster.certificate_authority.is_some() {
        return Err("names a file of this machine (`certificate-authority`): refused".into());
    }
    let user = context.user.as_deref().unwrap_or_default();
    if let Some(auth) = kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref())
    {
        if auth.exec.is_some() {
            return Err("runs a command (`exec`) to authenticate: refused".into());
        }
        if auth.auth_provider.is_some() {
            return Err("uses an `auth-provider`: refused".into());
        }
        if auth.token_file.is_some()
            || auth.client_certificate.is_some()
            || auth.client_key.is_some()
        {
            return Err("names a file of this machine: refused".into());
        }
    }
    Ok(())
}

/// A watch event of a lean Node as one of the cached Node it makes.
fn cached_node(event: watcher::Event<LeanNode>) -> watcher::Event<Node> {
    use watcher::Event;
    match event {
        Event::Apply(node) => Event::Apply(node.into()),
        Event::Delete(node) => Event::Delete(node.into()),
        Event::InitApply(node) => Event::InitApply(node.into()),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// Watches a workload cluster's Nodes into `writer`'s store and `ready`, keeping `watched`
/// and sending each changed Node on `wake`.
async fn watch_nodes(
    api: Api<LeanNode>,
    (nodes, writer, ready): (Store<Node>, reflector::store::Writer<Node>, ReadyIndex),
    watched: Arc<Watched>,
    cluster: ClusterRef,
    wake: Option<tokio::sync::mpsc::Sender<WokenNode>>,
) {
    // The first list is on a start's path (see `check_or_open`): one page for a cluster of up
    // to 250 Nodes, where the management cluster's watches take 100.
    // Decoded lean (`LeanNode`): a whole Node's managed fields and images cost more to
    // decode than the rest of the list's way.
    let events = watcher(api, watch_config().page_size(FIRST_LIST_PAGE))
        .default_backoff()
        .map_ok(cached_node)
        .inspect_ok(move |event| ready.observe(event))
        .reflect(writer);
    // Re-listed after a failure: every Node wakes its Machine, whose pass may have been
    // waiting for the cluster to answer.
    let mut recovering = false;
    // What each Node read like when it last woke its Machine: a kubelet's status post that
    // changes only its heartbeat wakes nothing (every Node of every connected cluster posts).
    let mut read: HashMap<String, u64> = HashMap::new();
    events
        .for_each(|event| {
            let changed = match event {
                Ok(watcher::Event::Apply(node)) => {
                    watched.mark(None, false);
                    let name = node.name_any();
                    let fingerprint = slim::node_fingerprint(&node);
                    let same = read.insert(name.clone(), fingerprint) == Some(fingerprint);
                    if same { Vec::new() } else { vec![name] }
                }
                Ok(watcher::Event::Delete(node)) => {
                    watched.mark(None, false);
                    let name = node.name_any();
                    read.remove(&name);
                    vec![name]
                }
                Ok(watcher::Event::InitApply(node)) => {
                    read.insert(node.name_any(), slim::node_fingerprint(&node));
                    Vec::new()
                }
                Ok(watcher::Event::InitDone) => {
                    watched.mark(None, true);
                    // The store holds the new list by now (the reflector applies it first).
                    let woken = if recovering {
                        nodes.state().iter().filter_map(|n| n.metadata.name.clone()).collect()
                    } else {
                        Vec::new()
                    };
                    recovering = false;
                    woken
                }
                Ok(watcher::Event::Init) => {
                    read.clear();
                    Vec::new()
                }
                Err(error) => {
                    recovering = true;
                    let error = outside_text(&error.to_string());
                    tracing::warn!(%cluster, %error, "workload cluster Node watch failed; retrying");
                    watched.mark(Some(error), false);
                    Vec::new()
                }
            };
            if let Some(wake) = &wake {
                for node in changed {
                    // Full: the pass looks again at its poll interval.
                    let _ = wake.try_send(WokenNode {
                        cluster: cluster.clone(),
                        node,
                    });
                }
            }
            std::future::ready(())
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_holds_at_most_its_share_of_places_and_gives_them_back() {
        let places = Places::default();
        let cluster = |name: &str| ClusterRef {
            namespace: "capi".into(),
            name: name.into(),
        };
        let (hostile, other) = (cluster("wc-1"), cluster("wc-0"));
        let mut held: Vec<Share> = (0..PASSES_PER_CLUSTER)
            .map(|_| places.enter(&hostile, PASSES_PER_CLUSTER).expect("a place"))
            .collect();
        assert!(places.enter(&hostile, PASSES_PER_CLUSTER).is_none());
        // Another cluster's places are its own.
        let theirs = places.enter(&other, PASSES_PER_CLUSTER);
        assert!(theirs.is_some());
        // One given back is one to take.
        held.pop();
        assert_eq!(places.taken(&hostile), PASSES_PER_CLUSTER - 1);
        held.push(
            places
                .enter(&hostile, PASSES_PER_CLUSTER)
                .expect("the freed place"),
        );
        drop(held);
        drop(theirs);
        assert_eq!(places.taken(&hostile), 0);
        assert!(
            lock(&places.0).is_empty(),
            "nothing kept for clusters without passes"
        );
    }

    fn kubeconfig(cluster: &str, user: &str) -> Kubeconfig {
        let text = format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\nclusters:\n- name: k\n  cluster: {cluster}\nusers:\n- name: u\n  user: {user}\n"
        );
        Kubeconfig::from_yaml(&text).unwrap()
    }

    #[test]
    fn a_kubeconfig_that_would_run_a_command_or_skip_tls_is_refused() {
        let fine = "{server: 'https://10.0.0.1:6443', certificate-authority-data: Zm9v}";
        assert_eq!(check_kubeconfig(&kubeconfig(fine, "{token: t}")), Ok(()));
        let cases = [
            (
                fine,
                "{exec: {command: sh, apiVersion: client.authentication.k8s.io/v1}}",
                "`exec`",
            ),
            (fine, "{auth-provider: {name: gcp}}", "auth-provider"),
            (fine, "{tokenFile: /var/run/token}", "file of this machine"),
            (
                "{server: 'https://10.0.0.1:6443', certificate-authority: /etc/kubernetes/ca.crt}",
                "{token: t}",
                "`certificate-authority`",
            ),
            (
                fine,
                "{client-certificate: /etc/cert}",
                "file of this machine",
            ),
            (
                "{server: 'http://10.0.0.1:6443'}",
                "{token: t}",
                "not https",
            ),
            (
                "{server: 'https://10.0.0.1:6443', insecure-skip-tls-verify: true}",
                "{token: t}",
                "certificate check",
            ),
            (
                "{server: 'https://10.0.0.1:6443', proxy-url: 'http://p'}",
                "{token: t}",
                "proxy",
            ),
        ];
        for (cluster, user, why) in cases {
            let refused = check_kubeconfig(&kubeconfig(cluster, user)).unwrap_err();
            assert!(refused.contains(why), "{cluster} {user}: {refused}");
        }
        let mut no_context = kubeconfig(fine, "{token: t}");
        no_context.current_context = None;
        assert!(check_kubeconfig(&no_context).is_err());
    }
}
