//! The object store: one global, monotonic resourceVersion, an event log for watches (with
//! compaction, so an old resourceVersion gets 410 Gone), and the write rules of the real API
//! server — optimistic concurrency, status separation, generation, finalizers, graceful pod
//! deletion, delete preconditions. Kind-specific rules and the controllers that react to writes
//! are registered from outside ([`observers`]); the store calls none by name.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

use crate::apiserver::validation::admission::RequestUser;
use tokio::sync::broadcast;

pub(crate) mod admit;
mod observers;
mod writes;

pub(crate) use self::observers::{KindRules, NoRules, Removal, WriteObserver};

use super::errors::{ApiError, ApiResult};
use super::kinds::{Registry, ResourceType};
use super::selectors::{FieldSelector, LabelSelector};
use super::time::{WallClock, format_time};
use crate::apiserver::objects::metadata_mut;

/// Where an object lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Storage group ("" for core; events.k8s.io events are stored as core events).
    pub group: String,
    /// Resource plural.
    pub plural: String,
    /// Namespace ("" for cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Gone.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watches see it.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    /// The revision of the change.
    pub revision: u64,
    /// What changed.
    pub key: ObjectKey,
    /// How.
    pub kind: EventType,
    /// The object after the change (before it, for deletions; with the deletion's revision),
    /// shared with the store while it is the stored one.
    pub object: Arc<Value>,
    /// The object before the change (None for creations), so that watches with selectors
    /// can tell an object that stopped matching; shared with the event that made it.
    pub previous: Option<Arc<Value>>,
}

/// The storage group of a type (the two Event APIs share one store).
pub fn storage_group(ty: &ResourceType) -> &str {
    if ty.group == "events.k8s.io" && ty.plural == "events" {
        ""
    } else {
        &ty.group
    }
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy` is `Orphan`.
    pub orphan: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
}

/// A page of a list kept for its continue token, so that later pages come from the same
/// snapshot (as etcd serves them).
#[derive(Debug)]
struct Snapshot {
    revision: u64,
    items: Vec<Arc<Value>>,
    /// The items are already in the served shape (converted kinds are matched after it).
    presented: bool,
}

pub(crate) struct Inner {
    pub registry: Registry,
    /// Shared, so lists copy references under the lock and the objects after it: a list of
    /// thousands must not stall every other request while it copies.
    pub objects: BTreeMap<ObjectKey, Arc<Value>>,
    /// The keys of the objects whose `ownerReferences` name each owner UID, kept with
    /// `objects` at every commit: the garbage collector finds an owner's dependents without
    /// a walk over every object (as Kubernetes' collector keeps its graph of owners).
    dependents: HashMap<String, BTreeSet<ObjectKey>>,
    pub revision: u64,
    log: VecDeque<Arc<WatchEvent>>,
    log_capacity: usize,
    compacted_through: u64,
    snapshots: HashMap<u64, Snapshot>,
    next_snapshot: u64,
}

impl Inner {
    /// The keys of the objects whose `ownerReferences` name `uid`.
    pub(crate) fn dependents_of(&self, uid: &str) -> impl Iterator<Item = &ObjectKey> + '_ {
        self.dependents.get(uid).into_iter().flatten()
    }

    /// Keeps [`Inner::dependents`] for `key`, whose owners were those of `before` and are
    /// those of `after` (None: gone).
    fn index_owners(&mut self, key: &ObjectKey, before: Option<&Value>, after: Option<&Value>) {
        let (was, is) = (owner_uids(before), owner_uids(after));
        if was == is {
            return;
        }
        for uid in was.difference(&is) {
            if let Some(keys) = self.dependents.get_mut(*uid) {
                keys.remove(key);
                if keys.is_empty() {
                    self.dependents.remove(*uid);
                }
            }
        }
        for uid in is.difference(&was) {
            self.dependents
                .entry((*uid).to_owned())
                .or_default()
                .insert(key.clone());
        }
    }

    /// The objects of one storage group and plural (in one namespace, if given), in key order.
    /// Keys sort by group, plural, namespace and name, so this walks only those objects.
    pub(crate) fn objects_of(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> impl Iterator<Item = (&ObjectKey, &Arc<Value>)> + '_ {
        let first = ObjectKey {
            group: group.to_owned(),
            plural: plural.to_owned(),
            namespace: namespace.unwrap_or_default().to_owned(),
            name: String::new(),
        };
        let whole_type = namespace.is_none();
        let end = first.clone();
        self.objects.range(first..).take_while(move |(key, _)| {
            key.group == end.group
                && key.plural == end.plural
                && (whole_type || key.namespace == end.namespace)
        })
    }
}

/// The owner UIDs an object's `ownerReferences` name.
fn owner_uids(object: Option<&Value>) -> BTreeSet<&str> {
    object
        .and_then(|o| o.pointer("/metadata/ownerReferences"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("uid").and_then(Value::as_str))
        .collect()
}

/// Where a resource's changes are broadcast to its watches.
type Changes = broadcast::Sender<Arc<WatchEvent>>;

/// Called with every change as it is committed, under the store's lock.
pub type CommitHook = Arc<dyn Fn(&WatchEvent) + Send + Sync>;

/// The store.
pub struct Store {
    inner: Mutex<Inner>,
    hooks: Mutex<Vec<CommitHook>>,
    /// The kind rules writes obey (registered by the server; none at first).
    rules: RwLock<Arc<dyn KindRules>>,
    /// Told of every settled write, in the order registered.
    observers: RwLock<Vec<Arc<dyn WriteObserver>>>,
    sender: broadcast::Sender<Arc<WatchEvent>>,
    /// Each resource's own changes, by storage group then plural: what a watch of that
    /// resource subscribes to (see [`Store::subscribe_resource`]).
    resources: Mutex<HashMap<String, HashMap<String, Changes>>>,
    /// How far a watch may fall behind its resource's changes.
    watch_buffer: usize,
    wall: Arc<dyn WallClock>,
    rng: SystemRandom,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// At most this many paged lists keep a snapshot for their continue tokens.
const MAX_SNAPSHOTS: usize = 256;

/// Namespaces that exist from the start, as in every cluster.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// The `kubernetes` Service in `default` and its endpoints, which the real API server keeps
/// pointing at itself in every cluster (clients attach Events to it, in-cluster clients reach
/// the server through it).
fn kubernetes_service() -> [(&'static str, &'static str, Value); 3] {
    const ADDRESS: &str = "10.0.0.1";
    const PORT: u16 = 6443;
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    [
        (
            "",
            "services",
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "labels": labels},
                "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                    "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                    "internalTrafficPolicy": "Cluster",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": PORT}]},
                "status": {"loadBalancer": {}}}),
        ),
        (
            "",
            "endpoints",
            json!({"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": ADDRESS}],
                    "ports": [{"name": "https", "port": PORT, "protocol": "TCP"}]}]}),
        ),
        (
            "discovery.k8s.io",
            "endpointslices",
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [ADDRESS], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": PORT, "protocol": "TCP"}]}),
        ),
    ]
}

/// The ComponentStatuses a healthy 1.32 control plane reports (`kubectl get cs`): the
/// scheduler, the controller-manager and the etcd member, all Healthy.
fn component_statuses() -> [(&'static str, &'static str, Value); 3] {
    let healthy = |name: &str, message: &str| {
        json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": name},
            "conditions": [{"type": "Healthy", "status": "True", "message": message}]})
    };
    [
        ("", "componentstatuses", healthy("scheduler", "ok")),
        ("", "componentstatuses", healthy("controller-manager", "ok")),
        ("", "componentstatuses", healthy("etcd-0", "ok")),
    ]
}

impl Store {
    /// An empty store with the system namespaces; the event log keeps `log_capacity` events,
    /// and a watch may fall `watch_buffer` changes behind before it is closed.
    pub fn new(wall: Arc<dyn WallClock>, log_capacity: usize, watch_buffer: usize) -> Arc<Self> {
        let (sender, _) = broadcast::channel(watch_buffer.max(16));
        let store = Arc::new(Store {
            hooks: Mutex::new(Vec::new()),
            rules: RwLock::new(Arc::new(NoRules)),
            observers: RwLock::new(Vec::new()),
            inner: Mutex::new(Inner {
                registry: Registry::new(),
                objects: BTreeMap::new(),
                dependents: HashMap::new(),
                revision: 1,
                log: VecDeque::new(),
                log_capacity: log_capacity.max(16),
                compacted_through: 0,
                snapshots: HashMap::new(),
                next_snapshot: 1,
            }),
            sender,
            resources: Mutex::new(HashMap::new()),
            watch_buffer: watch_buffer.max(16),
            wall,
            rng: SystemRandom::new(),
        });
        let mut inner = store.lock();
        for name in SYSTEM_NAMESPACES {
            if let Some(ty) = inner.registry.get("", "v1", "namespaces") {
                let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
                let _ = store.create_locked(
                    &mut inner,
                    &RequestUser::in_process(),
                    &ty,
                    "v1",
                    "",
                    namespace,
                    false,
                );
            }
        }
        for (group, plural, object) in kubernetes_service().into_iter().chain(component_statuses())
        {
            if let Some(ty) = inner.registry.get(group, "v1", plural) {
                let _ = store.create_locked(
                    &mut inner,
                    &RequestUser::in_process(),
                    &ty,
                    "v1",
                    "default",
                    object,
                    false,
                );
            }
        }
        drop(inner);
        store
    }

    /// Sets the kind rules every later write obeys.
    pub(crate) fn set_rules(&self, rules: Arc<dyn KindRules>) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = rules;
    }

    /// Registers an observer of every later settled write; it first catches up with what the
    /// store holds ([`WriteObserver::attached`]), under the lock.
    pub(crate) fn observe(&self, observer: Arc<dyn WriteObserver>) {
        let mut inner = self.lock();
        self.observers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(observer.clone());
        observer.attached(self, &mut inner);
    }

    fn rules(&self) -> Arc<dyn KindRules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A copy of the observers, so that none is called with the list's lock held (an observer
    /// may write, and so settle, again).
    fn observers(&self) -> Vec<Arc<dyn WriteObserver>> {
        self.observers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Tells every observer that a write of `ty` in `namespace` settled.
    pub(crate) fn settle(&self, inner: &mut Inner, ty: &ResourceType, namespace: &str) {
        for observer in self.observers() {
            observer.after_write(self, inner, ty, namespace);
        }
    }

    /// Tells every observer that an object went away.
    pub(crate) fn settle_removal(&self, inner: &mut Inner, removal: &Removal<'_>) {
        for observer in self.observers() {
            observer.after_removal(self, inner, removal);
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registry (a copy: types are few).
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// The served type of `group`/`version`/`plural`, looked up in place (a copy of the
    /// registry per request was most of a kubelet's heartbeat).
    pub fn resource_type(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceType>> {
        self.lock().registry.get(group, version, plural)
    }

    /// Whether `group`/`version` is served.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.lock().registry.serves(group, version)
    }

    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// Calls `hook` with every future change at the moment it is committed (before any
    /// watcher sees it): for test harnesses that must judge a change against the state of
    /// the world at that instant. The hook must be quick and must not use the store.
    pub fn on_commit(&self, hook: CommitHook) {
        self.hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hook);
    }

    /// Subscribes to every future change.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<WatchEvent>> {
        self.sender.subscribe()
    }

    /// Subscribes to the future changes of one resource, by its storage group and plural (as
    /// in [`ObjectKey`]). The real API server serves each resource's watches from that
    /// resource's own cache (k8s.io/apiserver's `storage/cacher`: one `Cacher` per resource,
    /// which dispatches its events to its watchers only): a watch is never woken by another
    /// resource's writes, and only its own resource's changes can put it behind.
    pub fn subscribe_resource(
        &self,
        group: &str,
        plural: &str,
    ) -> broadcast::Receiver<Arc<WatchEvent>> {
        let mut resources = self.resources.lock().unwrap_or_else(|e| e.into_inner());
        resources
            .entry(group.to_owned())
            .or_default()
            .entry(plural.to_owned())
            .or_insert_with(|| broadcast::channel(self.watch_buffer).0)
            .subscribe()
    }

    fn now(&self) -> String {
        format_time(self.wall.since_epoch())
    }

    fn uid(&self) -> String {
        let mut bytes = [0u8; 16];
        let _ = self.rng.fill(&mut bytes);
        bytes[6] = (bytes[6] & 0x0F) | 0x40;
        bytes[8] = (bytes[8] & 0x3F) | 0x80;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        )
    }

    fn suffix(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut bytes = [0u8; 5];
        let _ = self.rng.fill(&mut bytes);
        bytes
            .iter()
            .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
            .collect()
    }

    /// Records a change: bumps the revision, stores or removes the object, logs and broadcasts.
    pub(crate) fn commit(
        &self,
        inner: &mut Inner,
        key: ObjectKey,
        object: Option<Value>,
        kind: EventType,
    ) -> Arc<Value> {
        inner.revision += 1;
        let revision = inner.revision;
        // Every version is one shared value: the store's, its event's, and the next
        // event's `previous` (a kubelet fleet writes thousands of times a second).
        let previous = inner.objects.get(&key).cloned();
        let mut value = match object {
            Some(value) => value,
            None => previous.as_deref().cloned().unwrap_or(Value::Null),
        };
        metadata_mut(&mut value).insert("resourceVersion".into(), json!(revision.to_string()));
        let value = Arc::new(value);
        let after = (kind != EventType::Deleted).then_some(&*value);
        inner.index_owners(&key, previous.as_deref(), after);
        match kind {
            EventType::Deleted => {
                inner.objects.remove(&key);
            }
            _ => {
                inner.objects.insert(key.clone(), value.clone());
            }
        }
        let event = Arc::new(WatchEvent {
            revision,
            key,
            kind,
            object: value.clone(),
            previous,
        });
        for hook in self.hooks.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            hook(&event);
        }
        inner.log.push_back(event.clone());
        let compacted_before = inner.compacted_through;
        while inner.log.len() > inner.log_capacity {
            if let Some(old) = inner.log.pop_front() {
                inner.compacted_through = old.revision;
            }
        }
        if inner.compacted_through != compacted_before {
            // A continue token names a revision; once compacted, it is expired (etcd can no
            // longer serve the rest of that list).
            let through = inner.compacted_through;
            inner
                .snapshots
                .retain(|_, snapshot| snapshot.revision >= through);
        }
        if let Some(sender) = self
            .resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&event.key.group)
            .and_then(|plurals| plurals.get(&event.key.plural))
        {
            let _ = sender.send(event.clone());
        }
        let _ = self.sender.send(event);
        value
    }

    /// Forgets the event log up to now: every older resourceVersion becomes 410 Gone.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.compacted_through = inner.revision;
        inner.log.clear();
        inner.snapshots.clear();
    }

    /// The events after `revision` for a watch, or 410 when they were compacted away.
    pub fn events_since(&self, revision: u64) -> ApiResult<(Vec<Arc<WatchEvent>>, u64)> {
        let inner = self.lock();
        if revision < inner.compacted_through {
            return Err(ApiError::gone(format!(
                "too old resource version: {revision} ({})",
                inner.compacted_through + 1
            )));
        }
        let events = inner
            .log
            .iter()
            .filter(|e| e.revision > revision)
            .cloned()
            .collect();
        Ok((events, inner.revision))
    }

    pub(crate) fn key(ty: &ResourceType, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            group: storage_group(ty).to_owned(),
            plural: ty.plural.clone(),
            namespace: if ty.namespaced {
                namespace.to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    /// The object as served in `version` of `ty`.
    pub fn present(ty: &ResourceType, version: &str, object: &Value) -> Value {
        if ty.group == "events.k8s.io" {
            return crate::apiserver::objects::event_to_events_v1(object);
        }
        let mut object = object.clone();
        admit::default_on_read(ty, version, &mut object);
        if let Value::Object(map) = &mut object {
            map.insert("apiVersion".into(), json!(ty.api_version(version)));
            map.insert("kind".into(), json!(ty.kind));
        }
        object
    }

    pub(crate) fn stored_shape(ty: &ResourceType, body: Value) -> Value {
        if ty.group == "events.k8s.io" {
            crate::apiserver::objects::event_from_events_v1(&body)
        } else {
            body
        }
    }

    /// Reads an object.
    pub fn get(
        &self,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Value> {
        let inner = self.lock();
        inner
            .objects
            .get(&Self::key(ty, namespace, name))
            .map(|o| Self::present(ty, version, o))
            .ok_or_else(|| ApiError::not_found(&ty.group, &ty.plural, name))
    }

    /// [`Store::get`], shared with the store where reading changes nothing: for in-process
    /// actors that read an object of their own every heartbeat.
    pub fn get_shared(
        &self,
        ty: &ResourceType,
        version: &str,
        namespace: &str,
        name: &str,
    ) -> ApiResult<Arc<Value>> {
        let object = {
            let inner = self.lock();
            inner.objects.get(&Self::key(ty, namespace, name)).cloned()
        };
        let object = object.ok_or_else(|| ApiError::not_found(&ty.group, &ty.plural, name))?;
        if Self::read_as_stored(ty, &ty.api_version(version), &object) {
            Ok(object)
        } else {
            Ok(Arc::new(Self::present(ty, version, &object)))
        }
    }

    /// The stored objects of a type (in one namespace, or all), shared rather than copied:
    /// for in-process actors that read a few fields of thousands of objects every pass.
    pub fn shared(&self, ty: &ResourceType, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let group = storage_group(ty).to_owned();
        let inner = self.lock();
        inner
            .objects_of(&group, &ty.plural, namespace)
            .map(|(_, object)| object.clone())
            .collect()
    }

    /// Lists objects; `namespace` None means all namespaces.
    #[allow(clippy::too_many_arguments)]
    pub fn list(
        &self,
        ty: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> ApiResult<Value> {
        self.list_page(
            ty,
            version,
            namespace,
            labels,
            fields,
            limit,
            continue_token,
        )
        .map(ListPage::into_value)
    }

    /// [`Store::list`], its items shared with the store where reading changes nothing (a
    /// built-in kind stored at the version asked for): a list of thousands of Nodes is then
    /// written out without a copy of each.
    #[allow(clippy::too_many_arguments)]
    pub fn list_page(
        &self,
        ty: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> ApiResult<ListPage> {
        let mut inner = self.lock();
        let (revision, items, presented, offset) = match continue_token {
            Some(token) => {
                let (id, offset) = token
                    .split_once(':')
                    .and_then(|(id, offset)| {
                        Some((id.parse::<u64>().ok()?, offset.parse::<usize>().ok()?))
                    })
                    .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                let snapshot = inner.snapshots.get(&id).ok_or_else(|| {
                    ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                (
                    snapshot.revision,
                    snapshot.items.clone(),
                    snapshot.presented,
                    offset,
                )
            }
            None => {
                let group = storage_group(ty).to_owned();
                // Selectors match the stored object, except for converted kinds, whose field
                // names differ between versions (those are few: converted under the lock).
                let converted = ty.group == "events.k8s.io";
                let matches = |object: &Value| labels.matches(object) && fields.matches(object);
                let objects = inner.objects_of(&group, &ty.plural, namespace);
                let items: Vec<Arc<Value>> = if converted {
                    objects
                        .map(|(_, object)| Self::present(ty, version, object))
                        .filter(|object| matches(object))
                        .map(Arc::new)
                        .collect()
                } else {
                    objects
                        .filter(|(_, object)| matches(object))
                        .map(|(_, object)| object.clone())
                        .collect()
                };
                (inner.revision, items, converted, 0)
            }
        };
        let end = limit.map_or(items.len(), |limit| {
            (offset + limit.max(1)).min(items.len())
        });
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if end < items.len() {
            let id = match continue_token
                .and_then(|t| t.split_once(':'))
                .and_then(|(id, _)| id.parse::<u64>().ok())
            {
                Some(id) => id,
                None => {
                    let id = inner.next_snapshot;
                    inner.next_snapshot += 1;
                    // Bounded: the oldest snapshots go first, their tokens expire.
                    while inner.snapshots.len() >= MAX_SNAPSHOTS {
                        let Some(oldest) = inner.snapshots.keys().min().copied() else {
                            break;
                        };
                        inner.snapshots.remove(&oldest);
                    }
                    inner.snapshots.insert(
                        id,
                        Snapshot {
                            revision,
                            items: items.clone(),
                            presented,
                        },
                    );
                    id
                }
            };
            metadata["continue"] = json!(format!("{id}:{end}"));
            // A selected list cannot count what is left without reading it all: the real
            // server says nothing then (etcd3 store `GetList`).
            if labels.is_empty() && fields.is_empty() {
                metadata["remainingItemCount"] = json!(items.len() - end);
            }
        }
        drop(inner);
        let api_version = ty.api_version(version);
        let page: Vec<Arc<Value>> = items
            .get(offset..end)
            .unwrap_or_default()
            .iter()
            .map(|object| {
                if presented || Self::read_as_stored(ty, &api_version, object) {
                    object.clone()
                } else {
                    Arc::new(Self::present(ty, version, object))
                }
            })
            .collect();
        // A custom resource list is unstructured: its metadata says `continue` even when empty,
        // and its items carry their apiVersion and kind; a built-in list is typed, and its
        // items' TypeMeta is empty (kube-apiserver v1.36.3).
        let bare_items = ty.schemas.is_none();
        if !bare_items && metadata.get("continue").is_none() {
            metadata["continue"] = json!("");
        }
        Ok(ListPage {
            api_version,
            kind: format!("{}List", ty.kind),
            metadata,
            items: page,
            bare_items,
        })
    }

    /// Whether [`Store::present`] would give `object` back unchanged: a built-in kind (no
    /// schema, so no defaults or pruning on read) stored with the apiVersion and kind asked.
    pub(crate) fn read_as_stored(ty: &ResourceType, api_version: &str, object: &Value) -> bool {
        ty.schemas.is_none()
            && ty.group != "events.k8s.io"
            && object.get("apiVersion").and_then(Value::as_str) == Some(api_version)
            && object.get("kind").and_then(Value::as_str) == Some(ty.kind.as_str())
    }
}

/// One page of a list, as [`Store::list_page`] gives it: written out as the list object.
pub struct ListPage {
    /// The list's `apiVersion`.
    pub api_version: String,
    /// `<Kind>List`.
    pub kind: String,
    /// Its `resourceVersion`, and `continue` with `remainingItemCount` when more follow.
    pub metadata: Value,
    /// The objects as the client reads them.
    pub items: Vec<Arc<Value>>,
    /// Whether the items are written without their apiVersion and kind (a built-in kind's
    /// list, whose items are typed).
    pub bare_items: bool,
}

/// A list item as written: without apiVersion and kind when `bare`.
struct Item<'a> {
    object: &'a Value,
    bare: bool,
}

impl serde::Serialize for Item<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(fields) = self.object else {
            return self.object.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in fields {
            if !(self.bare && matches!(key.as_str(), "apiVersion" | "kind")) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

impl ListPage {
    /// The list as one JSON value (a copy of each item).
    pub fn into_value(self) -> Value {
        let items: Vec<Value> = self
            .items
            .iter()
            .map(|item| {
                let mut item = Value::clone(item);
                if let (true, Value::Object(fields)) = (self.bare_items, &mut item) {
                    fields.remove("apiVersion");
                    fields.remove("kind");
                }
                item
            })
            .collect();
        json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": self.metadata,
            "items": items,
        })
    }
}

impl serde::Serialize for ListPage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("apiVersion", &self.api_version)?;
        map.serialize_entry("kind", &self.kind)?;
        map.serialize_entry("metadata", &self.metadata)?;
        let items: Vec<Item> = self
            .items
            .iter()
            .map(|item| Item {
                object: item.as_ref(),
                bare: self.bare_items,
            })
            .collect();
        map.serialize_entry("items", &items)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::time::SystemWallClock;

    /// k8s.io/apiserver `pkg/storage/cacher`: the real server keeps one cache per resource
    /// and dispatches each change to that resource's watchers; a watch of ConfigMaps never
    /// hears of a Secret. Events written through `events.k8s.io` are stored as core Events,
    /// and a watch of either hears them.
    #[test]
    fn a_resources_subscription_hears_that_resource_only_as_the_real_servers_cacher_does() {
        let store = Store::new(Arc::new(SystemWallClock), 64, 64);
        let nobody = RequestUser::in_process();
        let mut configmaps = store.subscribe_resource("", "configmaps");
        let mut events = store.subscribe_resource("", "events");
        let mut everything = store.subscribe();
        let create = |group: &str, version: &str, plural: &str, object: Value| {
            let ty = store.resource_type(group, version, plural).unwrap();
            store
                .create(&nobody, &ty, version, "default", object, false)
                .unwrap();
        };
        create("", "v1", "secrets", json!({"metadata": {"name": "s"}}));
        create("", "v1", "configmaps", json!({"metadata": {"name": "c"}}));
        create(
            "events.k8s.io",
            "v1",
            "events",
            json!({"metadata": {"name": "e"}, "eventTime": "2026-11-30T00:00:00.000000Z",
                "reportingController": "x", "reportingInstance": "y", "action": "A",
                "reason": "R", "regarding": {"kind": "Node", "name": "n"}, "type": "Normal"}),
        );
        let names = |receiver: &mut broadcast::Receiver<Arc<WatchEvent>>| {
            std::iter::from_fn(|| receiver.try_recv().ok())
                .map(|event| event.key.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&mut configmaps), ["c"]);
        assert_eq!(names(&mut events), ["e"]);
        assert_eq!(names(&mut everything), ["s", "c", "e"]);
    }
}
