//! A Node decoded straight into what the caches keep ([`super::slim::node`]): the fields the
//! controller reads are decoded, the rest of the answer is skipped unread. A workload
//! cluster's first list of Nodes is on a start's path, and decoding each Node whole (its
//! managed fields above all: a tree of small JSON objects per manager) before slimming it
//! was most of that list's cost in the controller.
//!
//! Guarantees: [`LeanNode`] turned into a [`Node`] is what decoding the whole Node and
//! slimming it gives (tested on a Node carrying every part the slimming drops).

use std::collections::BTreeMap;

use k8s_openapi::ClusterResourceScope;
use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

use super::slim::NODE_READY;
use crate::api::cached::cached_kind;

/// A Node as the watches of workload clusters decode it; [`Node::from`] makes the cached Node.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LeanNode {
    /// Metadata, without its managed fields.
    #[serde(default, deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<LeanSpec>,
    #[serde(default)]
    status: Option<LeanStatus>,
}
cached_kind!(LeanNode, "", "v1", "Node", "nodes", ClusterResourceScope);

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanSpec {
    #[serde(default)]
    taints: Option<Vec<Taint>>,
    #[serde(default)]
    unschedulable: Option<bool>,
    #[serde(default, rename = "providerID")]
    provider_id: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanStatus {
    #[serde(default)]
    conditions: Option<Vec<NodeCondition>>,
    #[serde(default)]
    node_info: Option<LeanSystemInfo>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct LeanSystemInfo {
    #[serde(default, rename = "bootID")]
    boot_id: String,
}

/// `ObjectMeta`'s fields but `managedFields` (skipped unread when decoding).
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct LeanMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// Decodes an `ObjectMeta` without its `managedFields`, which no cache keeps.
fn metadata_without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let meta = LeanMeta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        annotations: meta.annotations,
        creation_timestamp: meta.creation_timestamp,
        deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
        deletion_timestamp: meta.deletion_timestamp,
        finalizers: meta.finalizers,
        generate_name: meta.generate_name,
        generation: meta.generation,
        labels: meta.labels,
        managed_fields: None,
        name: meta.name,
        namespace: meta.namespace,
        owner_references: meta.owner_references,
        resource_version: meta.resource_version,
        self_link: meta.self_link,
        uid: meta.uid,
    })
}

impl From<LeanNode> for Node {
    fn from(lean: LeanNode) -> Node {
        Node {
            metadata: lean.metadata,
            spec: lean.spec.map(|spec| NodeSpec {
                taints: spec.taints,
                unschedulable: spec.unschedulable,
                provider_id: spec.provider_id,
                ..NodeSpec::default()
            }),
            status: lean.status.map(|status| NodeStatus {
                conditions: status
                    .conditions
                    .map(|c| c.into_iter().filter(|c| c.type_ == NODE_READY).collect()),
                node_info: status.node_info.map(|info| NodeSystemInfo {
                    boot_id: info.boot_id,
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A Node with every part the slimming drops: managed fields, images, capacity,
    /// addresses, the other conditions and the rest of `nodeInfo`, and spec fields.
    fn whole() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "worker-3",
                "uid": "u-3",
                "resourceVersion": "42",
                "generation": 1,
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "labels": {"kubernetes.io/hostname": "worker-3", "node-role.kubernetes.io/worker": ""},
                "annotations": {"machine.openshift.io/machine": "openshift-machine-api/worker-3"},
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "t-1"}],
                "managedFields": [{
                    "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-27T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}}}},
                }],
            },
            "spec": {
                "providerID": "baremetalhost:///openshift-machine-api/worker-3/h-3",
                "podCIDR": "10.128.3.0/24",
                "podCIDRs": ["10.128.3.0/24"],
                "unschedulable": true,
                "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-27T10:01:00Z"}],
            },
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory", "lastHeartbeatTime": "2026-11-27T10:02:00Z", "lastTransitionTime": "2026-11-27T10:00:00Z"},
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": "2026-11-27T10:02:00Z", "lastTransitionTime": "2026-11-27T10:00:00Z"},
                ],
                "addresses": [{"type": "Hostname", "address": "worker-3"}],
                "capacity": {"cpu": "32", "memory": "131072Mi", "pods": "250"},
                "allocatable": {"cpu": "31500m", "memory": "130000Mi", "pods": "250"},
                "images": [{"names": ["quay.io/example/app@sha256:0"], "sizeBytes": 123}],
                "nodeInfo": {
                    "bootID": "b-7", "machineID": "m", "systemUUID": "s", "kernelVersion": "6.1",
                    "osImage": "RHCOS", "containerRuntimeVersion": "cri-o://1.31", "kubeletVersion": "v1.31.0",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
                },
            },
        })
    }

    #[test]
    fn a_lean_node_is_the_whole_node_slimmed() {
        let mut slimmed: Node = serde_json::from_value(whole()).unwrap();
        super::super::slim::node(&mut slimmed);
        let lean: LeanNode = serde_json::from_value(whole()).unwrap();
        assert_eq!(Node::from(lean), slimmed);
        // And for a Node with no spec, no status and bare metadata.
        let bare = json!({"metadata": {"name": "n"}});
        let mut slimmed: Node = serde_json::from_value(bare.clone()).unwrap();
        super::super::slim::node(&mut slimmed);
        let lean: LeanNode = serde_json::from_value(bare).unwrap();
        assert_eq!(Node::from(lean), slimmed);
    }

    #[test]
    fn a_node_without_a_boot_id_or_conditions_still_decodes() {
        let lean: LeanNode = serde_json::from_value(
            json!({"metadata": {"name": "n"}, "status": {"nodeInfo": {}, "phase": "Running"}}),
        )
        .unwrap();
        let node = Node::from(lean);
        let status = node.status.unwrap();
        assert_eq!(status.node_info.unwrap().boot_id, "");
        assert_eq!(status.conditions, None);
    }
}
