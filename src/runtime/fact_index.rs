//! A fact about each cached object, kept from its watch's own events: what a reader asks of
//! many objects of a kind (a start's count of the fleet's health asks each Machine's Node
//! whether it is Ready) without a lookup in the cache, a key built and the object read for
//! each; and [`Relisted`], how every such index follows its watch.
//!
//! Expected flow: the watch hands every event to [`FactIndex::observe`] just before its
//! reflector applies it to the store; the index keeps `fact(object)` by namespace and name,
//! and apart the names of the objects whose fact is `noted` (the few a reader looks for: the
//! Nodes that are not Ready). A reader takes [`FactView`] once, then asks [`FactView::get`]
//! of some objects or walks [`FactView::noted`].
//!
//! Guarantees: the index applies the events as kube's reflector store does (a re-list is
//! gathered from `Init` and swapped in whole at `InitDone`; until then the last list and its
//! changes stand), so it holds, for each object the store holds, the fact of that object, and
//! nothing for an object the store does not hold. Swept against kube's own store in the tests.
//!
//! Caveats: it is updated just before the store, so a reader on another thread may see it one
//! event ahead of the store, never behind: it is as fresh as the cache it mirrors, which a
//! start never rests on alone (see `evidence::start_gates`). A fact is computed once per event,
//! so it must be a function of the object alone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// One list of objects of kind `K` and its changes, as an index keeps it in tables of its own.
pub trait Listed<K> {
    /// An empty list kept the same way.
    fn emptied(&self) -> Self;
    /// `object` added or changed.
    fn apply(&mut self, object: &K);
    /// `object` gone.
    fn delete(&mut self, object: &K);
}

/// A list kept from a watch's events as kube's reflector keeps its store: changes applied to
/// the `live` list, a re-list gathered from `Init` and swapped in whole at `InitDone` (until
/// then the last list and its changes stand). Every index beside a watch cache keeps its
/// tables in one, so that they follow the store the same way.
pub struct Relisted<T> {
    /// The list the readers read.
    pub live: T,
    /// A re-list under way (from `Init` to `InitDone`).
    relisting: Option<T>,
}

impl<T> Relisted<T> {
    /// `live` to begin with, no re-list under way.
    pub fn new(live: T) -> Self {
        Relisted {
            live,
            relisting: None,
        }
    }

    /// Applies one of the watch's events, as the reflector applies it to the store.
    pub fn observe<K>(&mut self, event: &Event<K>)
    where
        T: Listed<K>,
    {
        match event {
            Event::Apply(object) => self.live.apply(object),
            Event::Delete(object) => self.live.delete(object),
            Event::Init => self.relisting = Some(self.live.emptied()),
            Event::InitApply(object) => {
                let relisting = match self.relisting.take() {
                    Some(relisting) => relisting,
                    None => self.live.emptied(),
                };
                self.relisting.insert(relisting).apply(object);
            }
            Event::InitDone => {
                self.live = match self.relisting.take() {
                    Some(listed) => listed,
                    None => self.live.emptied(),
                };
            }
        }
    }
}

/// The facts by namespace (empty for a cluster-scoped kind), then name.
type ByName<F> = HashMap<String, HashMap<String, F>>;

/// An object's namespace and name.
pub type Key = (String, String);

/// `object`'s namespace (empty for a cluster-scoped kind) and name: how every index beside a
/// cache keys it.
pub fn object_key<K: kube::Resource>(object: &K) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// A fact `F` about each cached `K` (cheap to clone: one index shared by its watch and its
/// readers).
pub struct FactIndex<K, F>(Arc<RwLock<Relisted<Facts<K, F>>>>);

impl<K, F> Clone for FactIndex<K, F> {
    fn clone(&self) -> Self {
        FactIndex(self.0.clone())
    }
}

/// The facts of one list and its changes.
struct Facts<K, F> {
    by_name: ByName<F>,
    /// The objects whose fact is noted.
    noted: HashSet<Key>,
    fact: fn(&K) -> F,
    is_noted: fn(&F) -> bool,
}

impl<K: kube::Resource, F> Listed<K> for Facts<K, F> {
    fn emptied(&self) -> Self {
        Facts {
            by_name: HashMap::new(),
            noted: HashSet::new(),
            fact: self.fact,
            is_noted: self.is_noted,
        }
    }

    fn apply(&mut self, object: &K) {
        let (namespace, name) = object_key(object);
        let fact = (self.fact)(object);
        if (self.is_noted)(&fact) {
            self.noted.insert((namespace.clone(), name.clone()));
        } else {
            self.noted.remove(&(namespace.clone(), name.clone()));
        }
        self.by_name
            .entry(namespace)
            .or_default()
            .insert(name, fact);
    }

    fn delete(&mut self, object: &K) {
        let key = object_key(object);
        self.noted.remove(&key);
        let (namespace, name) = key;
        if let Some(names) = self.by_name.get_mut(&namespace) {
            names.remove(&name);
            if names.is_empty() {
                self.by_name.remove(&namespace);
            }
        }
    }
}

impl<K: kube::Resource, F> FactIndex<K, F> {
    /// An empty index of `fact`, the objects whose fact is `noted` kept apart.
    pub fn new(fact: fn(&K) -> F, noted: fn(&F) -> bool) -> Self {
        FactIndex(Arc::new(RwLock::new(Relisted::new(Facts {
            by_name: HashMap::new(),
            noted: HashSet::new(),
            fact,
            is_noted: noted,
        }))))
    }

    /// Applies one of the watch's events, as the reflector applies it to the store.
    pub fn observe(&self, event: &Event<K>) {
        let mut indexed = self.0.write().unwrap_or_else(|e| e.into_inner());
        indexed.observe(event);
    }

    /// The index as it is now, held for the reader's walk (writers wait meanwhile: take it for
    /// one walk, not across an await).
    pub fn view(&self) -> FactView<'_, K, F> {
        FactView(self.0.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The index held for reading.
pub struct FactView<'a, K, F>(RwLockReadGuard<'a, Relisted<Facts<K, F>>>);

impl<K, F> FactView<'_, K, F> {
    /// The fact of the object `namespace`/`name` (an empty namespace for a cluster-scoped
    /// kind); None when it is not cached.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&F> {
        self.0.live.by_name.get(namespace)?.get(name)
    }

    /// The objects whose fact is noted, by namespace and name, in no particular order.
    pub fn noted(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .live
            .noted
            .iter()
            .map(|(namespace, name)| (namespace.as_str(), name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector::{self, ObjectRef};
    use serde_json::json;

    use super::*;

    fn map(namespace: &str, name: &str, value: &str) -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "data": {"fact": value},
        }))
        .expect("a ConfigMap")
    }

    fn fact(map: &ConfigMap) -> String {
        map.data
            .as_ref()
            .and_then(|d| d.get("fact"))
            .cloned()
            .unwrap_or_default()
    }

    /// Every event a watch sends, over one name in two namespaces and another, each with two
    /// facts.
    fn events() -> Vec<Event<ConfigMap>> {
        let mut all = vec![Event::Init, Event::InitDone];
        for (namespace, name) in [("a", "x"), ("b", "x"), ("a", "y")] {
            for value in ["1", "2"] {
                all.push(Event::Apply(map(namespace, name, value)));
                all.push(Event::InitApply(map(namespace, name, value)));
            }
            all.push(Event::Delete(map(namespace, name, "1")));
        }
        all
    }

    #[test]
    fn the_index_answers_what_the_reflectors_store_holds_after_every_sequence_of_events() {
        let events = events();
        let n = events.len();
        let mut sequences = 0;
        // Every sequence of four events (a re-list started, interleaved, finished...).
        for code in 0..n.pow(4) {
            let (store, mut writer) = reflector::store::<ConfigMap>();
            let index = FactIndex::new(fact, |f: &String| f == "2");
            let mut rest = code;
            for _ in 0..4 {
                let event = &events[rest % n];
                rest /= n;
                index.observe(event);
                writer.apply_watcher_event(event);
                let view = index.view();
                for (namespace, name) in [("a", "x"), ("b", "x"), ("a", "y")] {
                    let cached = store.get(&ObjectRef::new(name).within(namespace));
                    assert_eq!(
                        view.get(namespace, name),
                        cached.as_deref().map(fact).as_ref(),
                        "{namespace}/{name} after sequence {code}"
                    );
                }
                let mut noted: Vec<(String, String)> = view
                    .noted()
                    .map(|(ns, name)| (ns.into(), name.into()))
                    .collect();
                noted.sort();
                let mut stored: Vec<(String, String)> = store
                    .state()
                    .iter()
                    .filter(|m| fact(m) == "2")
                    .map(|m| (m.namespace().unwrap_or_default(), m.name_any()))
                    .collect();
                stored.sort();
                assert_eq!(noted, stored, "the noted after sequence {code}");
            }
            sequences += 1;
        }
        assert_eq!(sequences, n.pow(4));
    }
}
