//! The cached objects of a kind by a key each names (a BareMetalHost by the Metal3Machine its
//! `spec.consumerRef` names), kept from the watch's own events: a reader finds the few objects
//! naming a key without a walk over every cached object, each read cold, seconds after its
//! data were last touched.
//!
//! Expected flow: the watch hands every event to [`KeyIndex::observe`] just before its
//! reflector applies it to the store; a reader asks [`KeyIndex::naming`] for the objects that
//! name a key, then reads those from the store and judges them as it would have judged them
//! in a walk.
//!
//! Guarantees: the index follows the store as kube's reflector does ([`Relisted`]): for each
//! object the store holds, it is listed under the key it names now, and under no other. Swept
//! against a walk over the objects in the tests.
//!
//! Caveats: it is updated just before the store, so a reader may find a name the store does not
//! hold yet (it reads the store, finds nothing, and judges without it, as the walk would have);
//! the key must be a function of the object alone.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use kube::runtime::watcher::Event;

use crate::runtime::fact_index::{Key, Listed, Relisted, object_key};

/// A namespace and a name: an object's, or the key it names.
pub type Named = Key;

/// The objects of kind `K` by the key each names (cheap to clone: one index shared by the
/// watch and its readers).
pub struct KeyIndex<K>(Arc<RwLock<Relisted<Keyed<K>>>>);

impl<K> Clone for KeyIndex<K> {
    fn clone(&self) -> Self {
        KeyIndex(self.0.clone())
    }
}

/// One list's objects by key.
struct Keyed<K> {
    key_of: fn(&K) -> Option<Named>,
    /// The objects naming each key.
    by_key: HashMap<Named, BTreeSet<Named>>,
    /// The key each object names.
    keys: HashMap<Named, Named>,
}

impl<K> Keyed<K> {
    fn forget(&mut self, object: &Named) {
        let Some(key) = self.keys.remove(object) else {
            return;
        };
        if let Some(objects) = self.by_key.get_mut(&key) {
            objects.remove(object);
            if objects.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }
}

impl<K: kube::Resource> Listed<K> for Keyed<K> {
    fn emptied(&self) -> Self {
        Keyed {
            key_of: self.key_of,
            by_key: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    fn apply(&mut self, object: &K) {
        let name = object_key(object);
        self.forget(&name);
        if let Some(key) = (self.key_of)(object) {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(name.clone());
            self.keys.insert(name, key);
        }
    }

    fn delete(&mut self, object: &K) {
        self.forget(&object_key(object));
    }
}

impl<K: kube::Resource> KeyIndex<K> {
    /// An empty index of the key `key_of` says each object names (None: it names none).
    pub fn new(key_of: fn(&K) -> Option<Named>) -> Self {
        KeyIndex(Arc::new(RwLock::new(Relisted::new(Keyed {
            key_of,
            by_key: HashMap::new(),
            keys: HashMap::new(),
        }))))
    }

    /// Applies one of the watch's events, as the reflector applies it to the store.
    pub fn observe(&self, event: &Event<K>) {
        let mut indexed = self.0.write().unwrap_or_else(|e| e.into_inner());
        indexed.observe(event);
    }

    /// The objects (namespace, name) that name `key` now, in order.
    pub fn naming(&self, key: &Named) -> Vec<Named> {
        let indexed = self.0.read().unwrap_or_else(|e| e.into_inner());
        indexed
            .live
            .by_key
            .get(key)
            .map(|objects| objects.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::ResourceExt;
    use serde_json::json;

    use super::*;

    /// A ConfigMap `ns`/`name` naming `data.key` (in its own namespace), or nothing.
    fn object(ns: &str, name: &str, key: Option<&str>) -> ConfigMap {
        let mut value = json!({"metadata": {"name": name, "namespace": ns}});
        if let Some(key) = key {
            value["data"] = json!({"key": key});
        }
        serde_json::from_value(value).expect("a ConfigMap")
    }

    fn key_of(object: &ConfigMap) -> Option<Named> {
        let key = object.data.as_ref()?.get("key")?;
        Some((object.namespace().unwrap_or_default(), key.clone()))
    }

    /// Every event a few objects can see: each naming one of two keys or none, deleted, and
    /// re-lists.
    fn events() -> Vec<Event<ConfigMap>> {
        let mut all = vec![Event::Init, Event::InitDone];
        for (ns, name) in [("a", "x"), ("b", "x"), ("a", "y")] {
            for key in [Some("k"), Some("j"), None] {
                all.push(Event::Apply(object(ns, name, key)));
                all.push(Event::InitApply(object(ns, name, key)));
            }
            all.push(Event::Delete(object(ns, name, None)));
        }
        all
    }

    /// The index answers, after every sequence of three events, what a walk over the store
    /// the reflector keeps from the same events answers.
    #[test]
    fn the_index_names_what_a_walk_over_the_store_finds() {
        use kube::runtime::reflector;
        let events = events();
        let mut checked = 0;
        for a in &events {
            for b in &events {
                for c in &events {
                    let index = KeyIndex::new(key_of);
                    let (store, mut writer) = reflector::store::<ConfigMap>();
                    for event in [a, b, c] {
                        index.observe(event);
                        writer.apply_watcher_event(event);
                    }
                    for key in [("a", "k"), ("a", "j"), ("b", "k"), ("b", "j")] {
                        let key = (key.0.to_string(), key.1.to_string());
                        let mut walked: Vec<Named> = store
                            .state()
                            .iter()
                            .filter(|o| key_of(o).as_ref() == Some(&key))
                            .map(|o| object_key(o.as_ref()))
                            .collect();
                        walked.sort();
                        assert_eq!(index.naming(&key), walked, "{a:?} {b:?} {c:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, events.len().pow(3) * 4);
    }
}
