//! The actions that change the world. Each is idempotent (a restart may run it again), and the
//! two that take a Node away from its workloads demand a [`ConfirmedOff`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};

use super::fence::ConfirmedOff;
use crate::api::NodeBackup;
use crate::api::annotations::{OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE};
use crate::{Error, Result};

fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Sets (`Some`) or removes (`None`) one annotation with a merge patch.
pub async fn set_annotation(
    api: &Api<DynamicObject>,
    name: &str,
    key: &str,
    value: Option<&str>,
    op: &'static str,
) -> Result<()> {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(Error::kube(op))
}

/// Deletes the Node of a host proven off. The UID precondition keeps a Node that has already
/// re-registered (a new object with the same name) from being deleted.
///
/// # Guarantees
/// Nothing is deleted without a [`ConfirmedOff`]; a missing Node is success.
pub async fn delete_node(
    _proof: &ConfirmedOff,
    nodes: &Api<Node>,
    name: &str,
    uid: Option<String>,
) -> Result<()> {
    delete_exactly(nodes, name, uid, "DeleteNode").await
}

/// Deletes a Machine so that its MachineSet replaces it (after a failed remediation whose host
/// was fenced and released; the caller checks that the Machine is replaceable). The UID
/// precondition keeps a replacement of the same name safe.
pub async fn delete_machine(
    machines: &Api<DynamicObject>,
    name: &str,
    uid: Option<String>,
) -> Result<()> {
    delete_exactly(machines, name, uid, "DeleteMachine").await
}

/// Deletes the object `name` if it still has `uid`; gone already, or replaced, is done.
async fn delete_exactly<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
    op: &'static str,
) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(error) if not_found(&error) => Ok(()),
        // A UID mismatch: the old object is gone already; the one there now is new.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(Error::kube(op)(error)),
    }
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

/// Adds `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` to the Node of a host proven
/// off. The whole taint list is written with the Node's resourceVersion, so a concurrent
/// change is never overwritten (a conflict is an error and is retried).
pub async fn taint_out_of_service(
    _proof: &ConfirmedOff,
    nodes: &Api<Node>,
    node: &Node,
) -> Result<()> {
    let mut taints = taints_of(node);
    if taints.iter().any(|t| t["key"] == OUT_OF_SERVICE_TAINT) {
        return Ok(());
    }
    taints.push(
        json!({"key": OUT_OF_SERVICE_TAINT, "value": OUT_OF_SERVICE_VALUE, "effect": "NoExecute"}),
    );
    write_taints(nodes, node, taints, "TaintNode").await
}

/// Removes our out-of-service taint.
pub async fn remove_out_of_service(nodes: &Api<Node>, node: &Node) -> Result<()> {
    let taints = taints_of(node);
    let kept: Vec<Value> = taints
        .iter()
        .filter(|t| t["key"] != OUT_OF_SERVICE_TAINT)
        .cloned()
        .collect();
    if kept.len() == taints.len() {
        return Ok(());
    }
    write_taints(nodes, node, kept, "UntaintNode").await
}

async fn write_taints(
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
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(Error::kube(op))
}

/// The labels and annotations worth restoring.
pub fn backup_of(node: &Node) -> NodeBackup {
    NodeBackup {
        labels: node.metadata.labels.clone().unwrap_or_default(),
        annotations: node.metadata.annotations.clone().unwrap_or_default(),
    }
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

/// Restores the saved labels and annotations the new Node lacks; what the new Node has (its
/// kubelet's view) wins. Returns how many keys were restored.
pub async fn restore_node(nodes: &Api<Node>, node: &Node, backup: &NodeBackup) -> Result<usize> {
    let labels = missing(node.metadata.labels.as_ref(), &backup.labels);
    let annotations = missing(node.metadata.annotations.as_ref(), &backup.annotations);
    let restored = labels.len() + annotations.len();
    if restored == 0 {
        return Ok(0);
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Error::kube("RestoreNode"))?;
    Ok(restored)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
