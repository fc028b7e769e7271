//! The one watch of Nodes that the machine remediation controller and the drift coordinator
//! share: one cache of slimmed Nodes, and a stream of changed Nodes for each consumer. On a
//! large cluster a second cache of every Node, and a second stream of their updates to
//! decode, would cost as much memory and CPU as everything else together.

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};

use crate::Result;
use crate::api::slim;
use crate::runtime::informer::{shared_informer, watch_config};
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
}

/// Starts the Node watch for `consumers` consumers; the returned task drives it, and stops it
/// when dropped.
pub fn watch_nodes(client: &Client, consumers: usize) -> Result<(Vec<NodeFeed>, Background)> {
    let api = Api::<Node>::all(client.clone());
    let (store, handles, task) = shared_informer(
        api,
        watch_config(),
        slim::node,
        consumers,
        NODE_CHANGES_BUFFER,
    )?;
    let feeds = handles
        .into_iter()
        .map(|changes| NodeFeed {
            store: store.clone(),
            changes,
        })
        .collect();
    Ok((feeds, task))
}
