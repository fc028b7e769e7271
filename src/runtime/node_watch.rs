//! The one watch of Nodes that the machine remediation controller and the drift coordinator
//! share: one cache of slimmed Nodes, and a stream of changed Nodes for each consumer. On a
//! large cluster a second cache of every Node, and a second stream of their updates to
//! decode, would cost as much memory and CPU as everything else together.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::{Client, ResourceExt};

use crate::Result;
use crate::api::slim;
use crate::runtime::informer::{shared_informer, watch_config};
use crate::runtime::ready_index::{ReadyIndex, ready_index};
use crate::runtime::tasks::Background;

/// How many Node changes the shared watch holds for a consumer that is behind (it waits
/// when one is that far behind).
const NODE_CHANGES_BUFFER: usize = 1024;

/// A consumer's share of the one Node watch: the common cache of (slimmed) Nodes and its
/// own stream of the Nodes that changed. Deletions are not in the stream (the cache has
/// them); the passes that wait for a Node look again on their own.
pub struct NodeFeed {
    /// The cache.
    pub store: Store<Node>,
    /// The Nodes that changed.
    pub changes: reflector::ReflectHandle<Node>,
    /// Each cached Node's readiness, kept beside the cache.
    pub ready: ReadyIndex,
}

/// Starts the Node watch for `consumers` consumers; the returned task drives it, and stops it
/// when dropped.
pub fn watch_nodes(client: &Client, consumers: usize) -> Result<(Vec<NodeFeed>, Background)> {
    let api = Api::<Node>::all(client.clone());
    let ready = ready_index();
    let index = ready.clone();
    let (store, handles, task) = shared_informer(
        api,
        watch_config(),
        slim::node,
        move |event: &_| index.observe(event),
        consumers,
        NODE_CHANGES_BUFFER,
    )?;
    let feeds = handles
        .into_iter()
        .map(|changes| NodeFeed {
            store: store.clone(),
            changes,
            ready: ready.clone(),
        })
        .collect();
    Ok((feeds, task))
}

/// The changes of a feed that change what a remediation reads of a Node
/// ([`slim::node_fingerprint`]: everything but its `resourceVersion` and heartbeat times).
/// A kubelet's status post that only moves its heartbeat wakes no pass: on a cluster of
/// thousands of Nodes those posts are most of the stream, and each woke its Machine's pass.
/// A Node seen for the first time always passes.
pub fn read_changes(changes: reflector::ReflectHandle<Node>) -> BoxStream<'static, Arc<Node>> {
    let mut read: HashMap<String, u64> = HashMap::new();
    changes
        .filter(move |node| {
            let fingerprint = slim::node_fingerprint(node);
            let changed = read.insert(node.name_any(), fingerprint) != Some(fingerprint);
            std::future::ready(changed)
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    use serde_json::json;

    use super::*;

    fn node(ready: &str, heartbeat: &str, version: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "worker-0", "resourceVersion": version},
            "status": {"conditions": [{"type": "Ready", "status": ready,
                "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .expect("a Node")
    }

    #[tokio::test]
    async fn a_heartbeat_wakes_nothing_and_a_readiness_change_does() {
        let (_store, writer) = reflector::store_shared::<Node>(16);
        let mut changes = read_changes(writer.subscribe().expect("a shared store"));
        let (events, received) = tokio::sync::mpsc::unbounded_channel::<Event<Node>>();
        let fed = futures_util::stream::unfold(received, |mut r| async move {
            r.recv().await.map(|e| (Ok::<_, watcher::Error>(e), r))
        });
        let driver = tokio::spawn(fed.reflect_shared(writer).for_each(|_| async {}));
        let next = async |changes: &mut BoxStream<'static, Arc<Node>>| {
            tokio::time::timeout(Duration::from_millis(200), changes.next())
                .await
                .ok()
                .flatten()
        };
        let send = |event| events.send(event).expect("the driver runs");
        send(Event::Init);
        send(Event::InitApply(node("True", "2026-01-01T00:01:00Z", "1")));
        send(Event::InitDone);
        let first = next(&mut changes).await.expect("a Node seen first passes");
        assert_eq!(first.name_any(), "worker-0");
        send(Event::Apply(node("True", "2026-01-01T00:02:00Z", "2")));
        assert!(
            next(&mut changes).await.is_none(),
            "a heartbeat woke a pass"
        );
        send(Event::Apply(node("False", "2026-01-01T00:03:00Z", "3")));
        let changed = next(&mut changes).await.expect("a readiness change passes");
        assert_eq!(
            slim::ready_condition(&changed).map(|c| c.status.as_str()),
            Some("False")
        );
        driver.abort();
    }
}
