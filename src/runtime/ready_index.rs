//! Each cached Node's readiness by name, kept from the Node watch's own events: what a
//! start's count of the fleet's health asks of every Node, without a lookup in the Node cache
//! for each Machine (a key built, the store's lock, the Node's status read: about two thirds of
//! that count's time on a cold CPU cache, in a profile of the scale benchmark).
//!
//! Expected flow: the watch hands every event to [`ReadyIndex::observe`] just before its
//! reflector applies it to the store; a reader takes [`ReadyIndex::view`] once and asks
//! [`ReadyView::ready`] of each Node.
//!
//! Guarantees: the index applies the events as kube's reflector store does (a re-list is
//! gathered from `Init` and swapped in whole at `InitDone`; until then the last list and its
//! changes stand), so it holds, for each Node the store holds, [`node_is_ready`] of that
//! Node, and nothing for a Node the store does not hold. Swept against kube's own store in the
//! tests.
//!
//! Caveats: it is updated just before the store, so a reader on another thread may see it
//! one event ahead of the store, never behind: it is as fresh as the cache it mirrors, which
//! a start never rests on alone (see `evidence::start_gates`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::watcher::Event;

use baremend_core::decide::observe::node_is_ready;

/// Each cached Node's readiness (cheap to clone: one index shared by its watch and readers).
#[derive(Clone, Default)]
pub struct ReadyIndex(Arc<RwLock<Indexed>>);

/// The index's state.
#[derive(Default)]
struct Indexed {
    /// By Node name: Ready and not being deleted.
    ready: HashMap<String, bool>,
    /// A re-list under way (from `Init` to `InitDone`).
    relisting: Option<HashMap<String, bool>>,
}

impl ReadyIndex {
    /// Applies one of the Node watch's events, as the reflector applies it to the store.
    pub fn observe(&self, event: &Event<Node>) {
        let mut indexed = self.0.write().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(node) => {
                indexed.ready.insert(node.name_any(), node_is_ready(node));
            }
            Event::Delete(node) => {
                indexed.ready.remove(&node.name_any());
            }
            Event::Init => indexed.relisting = Some(HashMap::new()),
            Event::InitApply(node) => {
                let ready = node_is_ready(node);
                indexed
                    .relisting
                    .get_or_insert_with(HashMap::new)
                    .insert(node.name_any(), ready);
            }
            Event::InitDone => {
                let listed = indexed.relisting.take().unwrap_or_default();
                indexed.ready = listed;
            }
        }
    }

    /// The index as it is now, held for the reader's walk (writers wait meanwhile: take it for
    /// one walk, not across an await).
    pub fn view(&self) -> ReadyView<'_> {
        ReadyView(self.0.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The index held for reading.
pub struct ReadyView<'a>(RwLockReadGuard<'a, Indexed>);

impl ReadyView<'_> {
    /// The Node's readiness: None when it is not cached, else whether it is Ready and not
    /// being deleted.
    pub fn ready(&self, name: &str) -> Option<bool> {
        self.0.ready.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector::{self, ObjectRef};
    use serde_json::json;

    use super::*;

    fn node(name: &str, ready: &str, deleting: bool) -> Node {
        let mut metadata = json!({"name": name});
        if deleting {
            metadata["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        serde_json::from_value(json!({
            "metadata": metadata,
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .expect("a Node")
    }

    /// Every event a Node watch sends, over two Nodes in every state.
    fn events() -> Vec<Event<Node>> {
        let mut all = vec![Event::Init, Event::InitDone];
        for name in ["a", "b"] {
            for (ready, deleting) in [("True", false), ("False", false), ("True", true)] {
                all.push(Event::Apply(node(name, ready, deleting)));
                all.push(Event::InitApply(node(name, ready, deleting)));
            }
            all.push(Event::Delete(node(name, "True", false)));
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
            let (store, mut writer) = reflector::store::<Node>();
            let index = ReadyIndex::default();
            let mut rest = code;
            for _ in 0..4 {
                let event = &events[rest % n];
                rest /= n;
                index.observe(event);
                writer.apply_watcher_event(event);
                let view = index.view();
                for name in ["a", "b"] {
                    let cached = store.get(&ObjectRef::new(name));
                    assert_eq!(
                        view.ready(name),
                        cached.as_deref().map(node_is_ready),
                        "{name} after sequence {code}"
                    );
                }
            }
            sequences += 1;
        }
        assert_eq!(sequences, n.pow(4));
    }
}
