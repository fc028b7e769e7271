//! What the watch caches keep of each object: only the fields the controller reads. With
//! thousands of Machines, Nodes and BareMetalHosts cached, the rest (managed fields, Node
//! images and capacity, Machine conditions, host hardware details) would be most of the
//! controller's memory.
//!
//! Writes never start from these copies: patches name only what they change, the Node
//! deletion carries a UID, and status is written to our own objects.

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// Keeps a Node's metadata (labels and annotations for the backup), its taints and its
/// Ready condition.
pub fn node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(spec) = &mut node.spec {
        *spec = k8s_openapi::api::core::v1::NodeSpec {
            taints: spec.taints.take(),
            unschedulable: spec.unschedulable,
            provider_id: spec.provider_id.take(),
            ..Default::default()
        };
    }
    if let Some(status) = &mut node.status {
        let ready = status
            .conditions
            .take()
            .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect());
        *status = NodeStatus {
            conditions: ready,
            ..Default::default()
        };
    }
}

/// Keeps only `keys` of a JSON object in `data[field]`.
fn keep(data: &mut Value, field: &str, keys: &[&str]) {
    if let Some(Value::Object(object)) = data.get_mut(field) {
        let kept: Map<String, Value> = keys
            .iter()
            .filter_map(|k| object.remove(*k).map(|v| ((*k).to_owned(), v)))
            .collect();
        *object = kept;
    }
}

/// Keeps a Machine's metadata, `spec.providerID` and `status.nodeRef`.
pub fn machine(machine: &mut DynamicObject) {
    machine.metadata.managed_fields = None;
    keep(&mut machine.data, "spec", &["providerID"]);
    keep(&mut machine.data, "status", &["nodeRef", "phase"]);
}

/// Keeps a BareMetalHost's metadata, its spec (BMC, consumer, power settings: small) and the
/// status fields the power-off proof reads.
pub fn bare_metal_host(host: &mut DynamicObject) {
    host.metadata.managed_fields = None;
    keep(
        &mut host.data,
        "spec",
        &[
            "bmc",
            "consumerRef",
            "online",
            "disablePowerOff",
            "externallyProvisioned",
        ],
    );
    keep(
        &mut host.data,
        "status",
        &[
            "poweredOn",
            "operationalStatus",
            "errorType",
            "errorMessage",
        ],
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::remediation::observe::{
        bare_metal_host_bmc, bare_metal_host_view, machine_host, machine_node, node_view,
    };
    use crate::remediation::plan::NodeView;

    #[test]
    fn what_the_controller_reads_survives_and_the_rest_goes() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "w", "uid": "u", "labels": {"team": "db"},
                "annotations": {"a": "b"}, "managedFields": [{"manager": "kubelet"}]},
            "spec": {"providerID": "p", "taints": [{"key": "k", "effect": "NoSchedule"}],
                "podCIDR": "10.0.0.0/24"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False"}],
                "images": [{"names": ["a"], "sizeBytes": 1}],
                "capacity": {"cpu": "32"}},
        }))
        .unwrap();
        let before = node_view(Some(&n));
        node(&mut n);
        assert_eq!(node_view(Some(&n)), before);
        assert!(matches!(
            before,
            NodeView::Present {
                ready_since: Some(_)
            }
        ));
        assert_eq!(n.metadata.labels.as_ref().unwrap()["team"], "db");
        assert_eq!(n.metadata.annotations.as_ref().unwrap()["a"], "b");
        assert_eq!(n.spec.as_ref().unwrap().taints.as_ref().unwrap().len(), 1);
        let status = n.status.as_ref().unwrap();
        assert!(status.images.is_none() && status.capacity.is_none());
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert!(n.metadata.managed_fields.is_none());

        let mut m: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "w", "namespace": "ns", "labels": {"r": "worker"},
                "annotations": {"metal3.io/BareMetalHost": "ns/w"}},
            "spec": {"providerID": "baremetalhost:///ns/w/u", "providerSpec": {"value": {"big": 1}}},
            "status": {"nodeRef": {"name": "w"}, "conditions": [{"type": "x"}], "addresses": []},
        }))
        .unwrap();
        let host_before = machine_host(&serde_json::to_value(&m).unwrap()).unwrap();
        machine(&mut m);
        let after = serde_json::to_value(&m).unwrap();
        assert_eq!(machine_host(&after).unwrap(), host_before);
        assert_eq!(machine_node(&after).as_deref(), Some("w"));
        assert!(after.pointer("/spec/providerSpec").is_none());
        assert!(after.pointer("/status/conditions").is_none());

        let mut h: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "w", "namespace": "ns",
                "annotations": {"reboot.metal3.io/capbm-requested-power-off": "{}"}},
            "spec": {"bmc": {"address": "redfish://b/redfish/v1/Systems/1", "credentialsName": "s"},
                "online": true, "image": {"url": "x"}},
            "status": {"poweredOn": false, "operationalStatus": "OK",
                "hardware": {"cpu": {"count": 64}}},
        }))
        .unwrap();
        let json = serde_json::to_value(&h).unwrap();
        let view = bare_metal_host_view(&json, "capbm-requested-power-off");
        let bmc = bare_metal_host_bmc(&json).unwrap();
        bare_metal_host(&mut h);
        let after = serde_json::to_value(&h).unwrap();
        assert_eq!(
            bare_metal_host_view(&after, "capbm-requested-power-off"),
            view
        );
        assert_eq!(bare_metal_host_bmc(&after).unwrap(), bmc);
        assert!(after.pointer("/status/hardware").is_none());
        assert!(after.pointer("/spec/image").is_none());
    }
}
