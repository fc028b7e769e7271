//! The Nodes that stay in play for the drift coordinator without a change of their own:
//! drifted ones and ones carrying our planned-reboot mark, noted as the Node feed passes them.
//!
//! A pool's or a machine remediation's change must wake those Nodes' passes. Finding them by
//! walking every Node at each such change cost a walk of the whole cache (thousands of
//! Nodes, each one's annotations read) at every step of every machine remediation: on a
//! large cluster that walk was the controller's largest use of CPU of its own, and it ran
//! at the moments a start waits for its API round trips.
//!
//! Expected flow: the coordinator's Node stream calls [`Marked::saw`] on every Node it
//! passes; a pool's or a machine remediation's change asks [`Marked::nodes`].
//! Guarantees: a Node marked in the cache is in the answer once the feed has passed it (the
//! feed passes every Node at each list and each change; a Node not yet passed is woken by its
//! own change anyway); a name whose Node left play or left the cache is dropped when asked.
//! Caveats: the answer reads the cache at the time of asking, as the walk did.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::classify::{ConfigState, classify};
use crate::api::annotations::PLANNED_REBOOT;

/// Whether a Node is in play by itself: it carries our planned-reboot mark, or the MCO reports
/// it drifted.
pub(super) fn marked(node: &Node) -> bool {
    marked_as(node, &classify(node.annotations()))
}

/// [`marked`], for a Node whose annotations were classified already (`state`).
pub(super) fn marked_as(node: &Node, state: &ConfigState) -> bool {
    node.annotations().contains_key(PLANNED_REBOOT) || matches!(state, ConfigState::Drifted(_))
}

/// The names of the Nodes [`marked`] when the feed last passed them.
#[derive(Debug, Default)]
pub(super) struct Marked {
    names: Mutex<BTreeSet<String>>,
}

impl Marked {
    /// Notes `node` as the feed passes it (`is_marked`: [`marked`] of it, which the caller
    /// has at hand).
    pub(super) fn saw(&self, node: &Node, is_marked: bool) {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if is_marked {
            names.insert(node.name_any());
        } else {
            names.remove(&node.name_any());
        }
    }

    /// The marked Nodes of `nodes` now; names that are no longer are forgotten.
    pub(super) fn nodes(&self, nodes: &Store<Node>) -> Vec<Arc<Node>> {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = Vec::with_capacity(names.len());
        names.retain(|name| match nodes.get(&ObjectRef::new(name)) {
            Some(node) if marked(&node) => {
                found.push(node);
                true
            }
            _ => false,
        });
        found
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;

    fn node(name: &str, annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}}))
            .unwrap()
    }

    fn drifted(name: &str) -> Node {
        let rendered = "rendered-worker-1";
        node(
            name,
            json!({
                crate::api::mco::STATE: "Degraded",
                crate::api::mco::CURRENT_CONFIG: rendered,
                crate::api::mco::DESIRED_CONFIG: rendered,
                crate::api::mco::REASON: r#"content mismatch for file "/etc/x""#,
            }),
        )
    }

    fn names(marked: &Marked, store: &Store<Node>) -> Vec<String> {
        marked.nodes(store).iter().map(|n| n.name_any()).collect()
    }

    #[test]
    fn the_index_answers_what_the_cache_holds_marked_now() {
        let (store, mut writer) = reflector::store::<Node>();
        let marked = Marked::default();
        let nodes = [
            drifted("drifted"),
            node("in-sync", json!({})),
            node("marked", json!({PLANNED_REBOOT: "marked-1"})),
            drifted("deleted"),
            drifted("recovers"),
        ];
        for node in &nodes {
            writer.apply_watcher_event(&Event::Apply(node.clone()));
            marked.saw(node, super::marked(node));
        }
        assert_eq!(
            names(&marked, &store),
            ["deleted", "drifted", "marked", "recovers"]
        );
        // Gone from the cache, or recovered in it before the feed passed it again: dropped
        // when asked, as the walk of the cache would have.
        writer.apply_watcher_event(&Event::Delete(drifted("deleted")));
        writer.apply_watcher_event(&Event::Apply(node("recovers", json!({}))));
        assert_eq!(names(&marked, &store), ["drifted", "marked"]);
        // The feed passing a Node that left play drops it; one that came into play adds it.
        let unmarked = node("marked", json!({}));
        writer.apply_watcher_event(&Event::Apply(unmarked.clone()));
        marked.saw(&unmarked, super::marked(&unmarked));
        let now = drifted("in-sync");
        writer.apply_watcher_event(&Event::Apply(now.clone()));
        marked.saw(&now, super::marked(&now));
        assert_eq!(names(&marked, &store), ["drifted", "in-sync"]);
    }

    #[test]
    fn marked_means_the_planned_reboot_mark_or_drift() {
        assert!(marked(&drifted("a")));
        assert!(marked(&node("b", json!({PLANNED_REBOOT: "x"}))));
        assert!(!marked(&node("c", json!({}))));
    }
}
