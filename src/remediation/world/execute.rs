//! The actions that change the world. Each is idempotent (a restart may run it again), each
//! takes the leader's [`Writes`] and checks it right before it writes, and the two that take a
//! Node away from its workloads consume a [`ConfirmedOff`] and act on the Node it names, and on
//! no other.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::api::annotations::{
    LEGACY_NODE_ANNOTATIONS_BACKUP, LEGACY_NODE_FINALIZER, LEGACY_NODE_LABELS_BACKUP,
    OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE,
};
use crate::api::{NodeBackup, SavedTaint};
use crate::leader::Writes;
use crate::remediation::decide::fence::{ConfirmedOff, NodeIdentity};
use crate::remediation::decide::workload::ClusterRef;
use crate::remediation::world::workload::NodeApi;
use crate::runtime::delete::delete_exactly;
use crate::{Error, Result};

/// Sets (`Some`) or removes (`None`) one annotation with a merge patch.
pub async fn set_annotation<K>(
    writes: &Writes,
    api: &Api<K>,
    name: &str,
    key: &str,
    value: Option<&str>,
    op: &'static str,
) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"annotations": {key: value}}});
    writes.check()?;
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(Error::kube(op))
}

/// Deletes the Node the proof names. The UID precondition keeps a Node that has already
/// re-registered (a new object with the same name) from being deleted.
///
/// # Guarantees
/// Nothing is deleted without a [`ConfirmedOff`], and only the Node object it names; a proof
/// that names no Node deletes nothing; a missing Node is success.
pub(crate) async fn delete_node(
    writes: &Writes,
    proof: ConfirmedOff,
    nodes: &NodeApi,
) -> Result<()> {
    let Some(node) = proof.node() else {
        return Ok(());
    };
    same_cluster(node, nodes)?;
    writes.check()?;
    delete_exactly(
        nodes.api(),
        &node.name,
        Some(node.uid.clone()),
        "DeleteNode",
    )
    .await
    .map(|_| ())
}

/// Refuses a release through the API of another cluster than the one the proof names: a
/// proof for one cluster's `worker-3` never releases another's.
fn same_cluster(node: &NodeIdentity, nodes: &NodeApi) -> Result<()> {
    release_through(node, nodes.cluster())
}

/// Whether a release of `node` may go through the Node API of `cluster` (None: the cluster
/// baremend runs in). Pure.
fn release_through(node: &NodeIdentity, cluster: Option<&ClusterRef>) -> Result<()> {
    if node.cluster.as_ref() == cluster {
        return Ok(());
    }
    let through = cluster.map_or("this cluster".to_string(), |c| {
        format!("workload cluster {c}")
    });
    Err(Error::Changed {
        object: node.to_string(),
        reason: format!("the proof names it, not a Node of {through}: not releasing it there"),
    })
}

/// Deletes a Machine so that its MachineSet replaces it (after a failed remediation whose host
/// was fenced and released; the caller checks that the Machine is replaceable). The UID
/// precondition keeps a replacement of the same name safe.
pub async fn delete_machine(
    writes: &Writes,
    machines: &Api<DynamicObject>,
    name: &str,
    uid: Option<String>,
) -> Result<()> {
    writes.check()?;
    delete_exactly(machines, name, uid, "DeleteMachine")
        .await
        .map(|_| ())
}

fn taints_of(node: &Node) -> Vec<Value> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|taints| {
            taints
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The Node named `name`, read from the API server now. A list by name rather than a GET: the
/// ClusterRole needs no `get` on Nodes for it.
pub(crate) async fn read_node(nodes: &NodeApi, name: &str) -> Result<Option<Node>> {
    let selected = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(nodes
        .api()
        .list(&selected)
        .await
        .map_err(Error::kube("ReadNode"))?
        .items
        .into_iter()
        .next())
}

/// Adds `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` to `node`, read fresh by
/// the caller just before the proof was taken (so that the proof is the last read before the
/// write), if it is the Node the proof names: a Node with another UID (registered again under
/// the same name) is refused. The whole taint list is written with the Node's
/// resourceVersion, so a concurrent change is never overwritten (a conflict is an error and is
/// retried).
pub(crate) async fn taint_out_of_service(
    writes: &Writes,
    proof: ConfirmedOff,
    nodes: &NodeApi,
    node: Node,
) -> Result<()> {
    let Some(identity) = proof.node() else {
        return Ok(());
    };
    same_cluster(identity, nodes)?;
    if node.metadata.uid.as_deref() != Some(identity.uid.as_str()) {
        return Err(Error::Changed {
            object: format!("Node {}", identity.name),
            reason: format!(
                "it was registered again (UID {} is not the fenced Node's {}): not tainting a Node the proof does not name",
                node.metadata.uid.as_deref().unwrap_or("none"),
                identity.uid
            ),
        });
    }
    let mut taints = taints_of(&node);
    if taints.iter().any(|t| t["key"] == OUT_OF_SERVICE_TAINT) {
        return Ok(());
    }
    taints.push(
        json!({"key": OUT_OF_SERVICE_TAINT, "value": OUT_OF_SERVICE_VALUE, "effect": "NoExecute"}),
    );
    write_taints(writes, nodes.api(), &node, taints, "TaintNode").await
}

/// Removes our out-of-service taint.
pub async fn remove_out_of_service(writes: &Writes, nodes: &NodeApi, node: &Node) -> Result<()> {
    let taints = taints_of(node);
    let kept: Vec<Value> = taints
        .iter()
        .filter(|t| t["key"] != OUT_OF_SERVICE_TAINT)
        .cloned()
        .collect();
    if kept.len() == taints.len() {
        return Ok(());
    }
    write_taints(writes, nodes.api(), node, kept, "UntaintNode").await
}

async fn write_taints(
    writes: &Writes,
    nodes: &Api<Node>,
    node: &Node,
    taints: Vec<Value>,
    op: &'static str,
) -> Result<()> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    });
    writes.check()?;
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(Error::kube(op))
}

/// Taints the node lifecycle controller, the kubelet or the remediation manage
/// (`node.kubernetes.io/unreachable`, `not-ready`, `out-of-service`, `unschedulable`, the
/// pressure taints): never backed up, never restored.
const SYSTEM_TAINT_PREFIX: &str = "node.kubernetes.io/";

/// The labels, annotations and taints worth restoring.
pub fn backup_of(node: &Node) -> NodeBackup {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| !t.key.starts_with(SYSTEM_TAINT_PREFIX))
        .map(|t| SavedTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
        })
        .collect();
    NodeBackup {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
        taints,
    }
}

/// The saved taints the Node lacks (a taint is its key and effect).
fn missing_taints(node: &Node, saved: &[SavedTaint]) -> Vec<Value> {
    let have = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    saved
        .iter()
        .filter(|t| {
            !have
                .into_iter()
                .flatten()
                .any(|h| h.key == t.key && h.effect == t.effect)
        })
        .filter_map(|t| serde_json::to_value(t).ok())
        .collect()
}

fn missing(
    have: Option<&BTreeMap<String, String>>,
    saved: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    saved
        .iter()
        .filter(|(key, _)| have.is_none_or(|h| !h.contains_key(*key)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The Node backup the legacy actuator left on a Machine (its labels and annotations, each a
/// JSON object of strings under [`LEGACY_NODE_LABELS_BACKUP`] and
/// [`LEGACY_NODE_ANNOTATIONS_BACKUP`]); `Ok(None)` without one. A malformed backup is an
/// error naming the annotation, and is left in place (nothing of it is lost).
pub fn legacy_backup(
    annotations: &BTreeMap<String, String>,
) -> std::result::Result<Option<NodeBackup>, String> {
    let read = |key: &str| -> std::result::Result<BTreeMap<String, String>, String> {
        match annotations.get(key) {
            None => Ok(BTreeMap::new()),
            Some(text) => serde_json::from_str(text).map_err(|e| {
                format!("Machine annotation {key} is not a JSON object of strings: {e}")
            }),
        }
    };
    if !annotations.contains_key(LEGACY_NODE_LABELS_BACKUP)
        && !annotations.contains_key(LEGACY_NODE_ANNOTATIONS_BACKUP)
    {
        return Ok(None);
    }
    Ok(Some(NodeBackup {
        labels: read(LEGACY_NODE_LABELS_BACKUP)?,
        annotations: read(LEGACY_NODE_ANNOTATIONS_BACKUP)?,
        taints: Vec::new(),
    }))
}

/// Adds to `backup` what `older` saved and it lacks: the newer save wins a key both have.
pub fn adopt_backup(backup: &mut NodeBackup, older: NodeBackup) {
    for (key, value) in older.labels {
        backup.labels.entry(key).or_insert(value);
    }
    for (key, value) in older.annotations {
        backup.annotations.entry(key).or_insert(value);
    }
}

/// Removes the legacy actuator's finalizer from a Node that has it: with that actuator
/// gone, nothing else would, and the Node's deletion would never finish.
pub async fn remove_legacy_finalizer(
    writes: &Writes,
    nodes: &Api<Node>,
    node: &Node,
) -> Result<bool> {
    let finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == LEGACY_NODE_FINALIZER) {
        return Ok(false);
    }
    let kept: Vec<String> = finalizers
        .into_iter()
        .filter(|f| f != LEGACY_NODE_FINALIZER)
        .collect();
    // With the resourceVersion: a finalizer list changed since is not overwritten.
    let patch = json!({"metadata": {
        "finalizers": kept,
        "resourceVersion": node.metadata.resource_version,
    }});
    let name = node.metadata.name.clone().unwrap_or_default();
    writes.check()?;
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("RemoveLegacyNodeFinalizer"))?;
    Ok(true)
}

/// What a restore put back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Labels and annotations.
    pub keys: usize,
    /// Taints.
    pub taints: usize,
}

/// Restores the saved labels, annotations and taints the new Node lacks; what the new Node
/// has (its kubelet's view) wins. Taints are written with the Node's resourceVersion.
pub async fn restore_node(
    writes: &Writes,
    nodes: &Api<Node>,
    node: &Node,
    backup: &NodeBackup,
) -> Result<Restored> {
    let labels = missing(node.metadata.labels.as_ref(), &backup.labels);
    let annotations = missing(node.metadata.annotations.as_ref(), &backup.annotations);
    let mut restored = Restored {
        keys: labels.len() + annotations.len(),
        taints: 0,
    };
    let name = node.metadata.name.clone().unwrap_or_default();
    let add = missing_taints(node, &backup.taints);
    if !add.is_empty() {
        restored.taints = add.len();
        let mut taints = taints_of(node);
        taints.extend(add);
        write_taints(writes, nodes, node, taints, "RestoreNodeTaints").await?;
    }
    if restored.keys > 0 {
        let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
        writes.check()?;
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("RestoreNode"))?;
    }
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_releases_its_node_only_through_its_own_clusters_api() {
        let cluster = |name: &str| ClusterRef {
            namespace: "fleet".into(),
            name: name.into(),
        };
        let node = |of: Option<ClusterRef>| NodeIdentity {
            name: "worker-3".into(),
            uid: "u".into(),
            cluster: of,
        };
        let edge_1 = node(Some(cluster("edge-1")));
        assert!(release_through(&edge_1, Some(&cluster("edge-1"))).is_ok());
        // Another cluster's worker-3, and the management cluster's own, are other Nodes.
        let other = release_through(&edge_1, Some(&cluster("edge-2"))).unwrap_err();
        assert!(
            other
                .to_string()
                .contains("Node worker-3 of workload cluster fleet/edge-1")
                && other
                    .to_string()
                    .contains("not a Node of workload cluster fleet/edge-2"),
            "{other}"
        );
        assert!(release_through(&edge_1, None).is_err());
        let local = node(None);
        assert!(release_through(&local, None).is_ok());
        assert!(release_through(&local, Some(&cluster("edge-1"))).is_err());
    }

    #[test]
    fn only_keys_the_new_node_lacks_are_restored() {
        let saved: BTreeMap<String, String> = [("a", "old"), ("b", "old")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let have: BTreeMap<String, String> = [("a", "new")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let restored = missing(Some(&have), &saved);
        assert_eq!(restored.len(), 1);
        assert_eq!(restored["b"], "old");
        assert_eq!(missing(None, &saved), saved);
    }

    fn node_with_taints(taints: &[(&str, &str)]) -> Node {
        let taints = taints
            .iter()
            .map(|(key, effect)| k8s_openapi::api::core::v1::Taint {
                key: (*key).into(),
                effect: (*effect).into(),
                value: Some("v".into()),
                time_added: None,
            })
            .collect();
        Node {
            spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn the_backup_keeps_user_taints_but_not_the_ones_the_system_manages() {
        let node = node_with_taints(&[
            ("dedicated", "NoSchedule"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
            ("node.kubernetes.io/not-ready", "NoSchedule"),
            ("node.kubernetes.io/out-of-service", "NoExecute"),
            ("example.com/gpu", "PreferNoSchedule"),
        ]);
        let backup = backup_of(&node);
        let saved: Vec<&str> = backup.taints.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(saved, ["dedicated", "example.com/gpu"]);
    }

    #[test]
    fn only_the_taints_the_new_node_lacks_are_restored() {
        let backup = backup_of(&node_with_taints(&[
            ("dedicated", "NoSchedule"),
            ("dedicated", "NoExecute"),
            ("example.com/gpu", "PreferNoSchedule"),
        ]));
        let new_node = node_with_taints(&[("dedicated", "NoSchedule")]);
        let added: Vec<(String, String)> = missing_taints(&new_node, &backup.taints)
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap().into(),
                    t["effect"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            added,
            [
                ("dedicated".to_string(), "NoExecute".to_string()),
                (
                    "example.com/gpu".to_string(),
                    "PreferNoSchedule".to_string()
                )
            ]
        );
    }

    #[test]
    fn the_legacy_backup_is_read_and_adopted_under_a_newer_save() {
        let mut on_machine = BTreeMap::new();
        assert_eq!(legacy_backup(&on_machine), Ok(None));
        on_machine.insert(
            LEGACY_NODE_LABELS_BACKUP.to_string(),
            r#"{"team":"db","zone":"old"}"#.to_string(),
        );
        let legacy = legacy_backup(&on_machine).unwrap().unwrap();
        assert_eq!(legacy.labels["team"], "db");
        assert!(legacy.annotations.is_empty());
        let mut ours = NodeBackup {
            labels: [("zone".to_string(), "new".to_string())].into(),
            annotations: BTreeMap::new(),
            taints: Vec::new(),
        };
        adopt_backup(&mut ours, legacy);
        assert_eq!(ours.labels["zone"], "new", "the newer save wins");
        assert_eq!(ours.labels["team"], "db", "the legacy label is kept");
        on_machine.insert(
            LEGACY_NODE_ANNOTATIONS_BACKUP.to_string(),
            "[not json".to_string(),
        );
        let error = legacy_backup(&on_machine).unwrap_err();
        assert!(error.contains(LEGACY_NODE_ANNOTATIONS_BACKUP), "{error}");
    }
}
