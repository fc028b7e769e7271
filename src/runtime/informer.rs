//! One way to watch a kind into a cache, for every controller: a [`watcher`] with the
//! default backoff, an optional slimming of each object before it is stored, a reflector
//! store, and the stream of the objects that changed (which drives a controller and must be
//! polled for the store to fill). [`is_ready`] tells whether a store holds a full list.
//!
//! Caveats: a store is empty until its first list completes; acting on it before would be
//! acting on a wrong picture, so controllers check [`is_ready`] at the start of each pass.

use std::fmt::Debug;
use std::hash::Hash;

use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

use crate::runtime::tasks::Background;

/// A kind's stream of changed objects (boxed: a controller keeps several in one struct).
pub type Changes<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// Objects per page of a watch's initial list. kube's default, 500, has each watch decode 500
/// objects at a time; with Machines, hosts and Nodes listed together on a fleet of thousands,
/// those pages made the controller's peak, and the heap kept that size once they were freed
/// (docs/engineering/benchmarks.md has the figures). Smaller pages cost a few more round trips at start.
pub const LIST_PAGE_SIZE: u32 = 100;

/// The watch configuration every informer starts from: [`LIST_PAGE_SIZE`] objects a page.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// Watches `api` into a store; returns the store and the stream of changed objects.
pub fn informer<K>(api: Api<K>, config: watcher::Config) -> (Store<K>, Changes<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    slimmed_informer(api, config, |_: &mut K| {}, |_: &watcher::Event<K>| {})
}

/// Like [`informer`], with `slim` applied to every object before it is stored: the caches
/// of a large cluster keep only the fields the controllers read.
pub fn slimmed_informer<K>(
    api: Api<K>,
    config: watcher::Config,
    slim: impl FnMut(&mut K) + Send + 'static,
    observe: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, Changes<K>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store::<K>();
    let changes = watcher(api, config)
        .default_backoff()
        .modify(slim)
        .inspect_ok(observe)
        .reflect(writer)
        .touched_objects()
        .boxed();
    (store, changes)
}

/// One watch of a kind for several consumers (kube's shared reflector): one cache, and for
/// each consumer its own stream of the objects that changed; `slim` is applied to every object
/// before it is stored, and `observe` sees every event (slimmed) just before the store does,
/// to keep an index beside it. The returned task drives the watch and stops it when dropped; a
/// consumer more than `buffer` changes behind holds the others back, so each must be polled.
pub fn shared_informer<K>(
    api: Api<K>,
    config: watcher::Config,
    slim: impl FnMut(&mut K) + Send + 'static,
    observe: impl FnMut(&watcher::Event<K>) + Send + 'static,
    consumers: usize,
    buffer: usize,
) -> crate::Result<(Store<K>, Vec<reflector::ReflectHandle<K>>, Background)>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store_shared::<K>(buffer);
    let handles = (0..consumers)
        .map(|_| {
            writer.subscribe().ok_or_else(|| crate::Error::Invalid {
                object: format!("the {} watch", K::kind(&K::DynamicType::default())),
                reason: "its store is not shared".into(),
            })
        })
        .collect::<crate::Result<Vec<_>>>()?;
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    let watch = watcher(api, config)
        .default_backoff()
        .modify(slim)
        .inspect_ok(observe)
        .reflect_shared(writer)
        .for_each(move |event| {
            if let Err(error) = event {
                tracing::warn!(%error, kind = %kind, "watch failed; retrying");
            }
            std::future::ready(())
        });
    Ok((store, handles, Background::spawn(watch)))
}

/// Like [`slimmed_informer`] over a kind watched as `K` and cached as `T` (the same object in
/// another shape, e.g. a Cluster API Machine cached as a Machine).
pub fn mapped_informer<K, T>(
    api: Api<K>,
    config: watcher::Config,
    map: fn(K) -> T,
    slim: impl FnMut(&mut T) + Send + 'static,
    observe: impl FnMut(&watcher::Event<T>) + Send + 'static,
) -> (Store<T>, Changes<T>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    T: Resource + Clone + Debug + Send + Sync + 'static,
    T::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    use futures_util::TryStreamExt;
    let (store, writer) = reflector::store::<T>();
    let changes = watcher(api, config)
        .default_backoff()
        .map_ok(move |event| match event {
            watcher::Event::Apply(object) => watcher::Event::Apply(map(object)),
            watcher::Event::Delete(object) => watcher::Event::Delete(map(object)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(object) => watcher::Event::InitApply(map(object)),
            watcher::Event::InitDone => watcher::Event::InitDone,
        })
        .modify(slim)
        .inspect_ok(observe)
        .reflect(writer)
        .touched_objects()
        .boxed();
    (store, changes)
}

/// The name of the policy object in force (cluster-scoped, one per kind).
pub const POLICY_NAME: &str = "default";

/// The spec of the policy object named [`POLICY_NAME`] in `store`; None when there is none
/// (an install step skipped, the policy deleted): each controller then runs in its safe mode.
pub fn policy_object<K, S>(store: &Store<K>, spec: impl Fn(&K) -> &S) -> Option<S>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
    S: Clone,
{
    store
        .get(&ObjectRef::new(POLICY_NAME))
        .map(|policy| spec(&policy).clone())
}

/// Whether `store` holds a full list, checked without waiting (a controller keeps polling
/// the watches that fill its stores).
pub fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(())))
}
