//! Each cached Node's readiness by name, kept from the Node watch's own events: what a
//! start's count of the fleet's health asks of every Node, without a lookup in the Node cache
//! for each Machine (a key built, the store's lock, the Node's status read: about two thirds of
//! that count's time on a cold CPU cache, in a profile of the scale benchmark).
//!
//! Expected flow: the watch hands every event to the index (a [`FactIndex`]) just before its
//! reflector applies it to the store; a reader takes a view once and asks [`ready`] of each
//! Node.
//!
//! Guarantees: those of [`FactIndex`]: for each Node the store holds, [`node_is_ready`] of
//! that Node, and nothing for a Node the store does not hold.
//!
//! Caveats: as fresh as the cache it mirrors (see [`FactIndex`]).

use k8s_openapi::api::core::v1::Node;

use super::fact_index::{FactIndex, FactView};
use baremend_core::decide::observe::node_is_ready;

/// Each cached Node's readiness: Ready and not being deleted.
pub type ReadyIndex = FactIndex<Node, bool>;

/// An empty index of the Nodes' readiness, the Nodes that are not Ready noted.
pub fn ready_index() -> ReadyIndex {
    FactIndex::new(node_is_ready, |ready| !ready)
}

/// The Node's readiness in `view`: None when it is not cached.
pub fn ready(view: &FactView<'_, Node, bool>, node: &str) -> Option<bool> {
    view.get("", node).copied()
}

/// The cached Nodes in `view` that are not Ready (or are being deleted).
pub fn not_ready<'v>(view: &'v FactView<'_, Node, bool>) -> impl Iterator<Item = &'v str> {
    view.noted().map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
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

    // How the index follows a watch's events is swept in `fact_index`; here, what it keeps.
    #[test]
    fn a_node_not_ready_or_being_deleted_is_noted_and_a_ready_one_is_not() {
        let index = ready_index();
        for (name, ready, deleting) in [
            ("ready", "True", false),
            ("not-ready", "False", false),
            ("unknown", "Unknown", false),
            ("deleting", "True", true),
        ] {
            index.observe(&Event::Apply(node(name, ready, deleting)));
        }
        let view = index.view();
        assert_eq!(ready(&view, "ready"), Some(true));
        assert_eq!(ready(&view, "not-ready"), Some(false));
        assert_eq!(ready(&view, "deleting"), Some(false));
        assert_eq!(ready(&view, "absent"), None);
        let mut noted: Vec<&str> = not_ready(&view).collect();
        noted.sort();
        assert_eq!(noted, ["deleting", "not-ready", "unknown"]);
        drop(view);
        index.observe(&Event::Apply(node("not-ready", "True", false)));
        index.observe(&Event::Delete(node("unknown", "Unknown", false)));
        let view = index.view();
        assert_eq!(not_ready(&view).collect::<Vec<_>>(), ["deleting"]);
    }
}
