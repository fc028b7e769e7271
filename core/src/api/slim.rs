//! What the watch caches keep of each object: only the fields the controller reads. With
//! thousands of Machines, Nodes and BareMetalHosts cached, the rest (managed fields, Node
//! images and capacity, Machine conditions, host hardware details) would be most of the
//! controller's memory. Machines and BareMetalHosts are cached as our own small types, not
//! as JSON: a JSON object costs over half a kilobyte however few fields it has, and a host
//! held as JSON is five of them.
//!
//! Writes never start from these copies: patches name only what they change, the Node
//! deletion carries a UID, and status is written to our own objects.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::api::cached::{cached_kind, lenient};

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
            .map(|c| c.into_iter().filter(|c| c.type_ == NODE_READY).collect());
        // The boot ID tells a rebooted host from a Node still Ready from before.
        let node_info =
            status
                .node_info
                .take()
                .map(|info| k8s_openapi::api::core::v1::NodeSystemInfo {
                    boot_id: info.boot_id,
                    ..Default::default()
                });
        *status = NodeStatus {
            conditions: ready,
            node_info,
            ..Default::default()
        };
    }
}

/// A slimmed Node's content as the controller reads it, hashed: all of it but its
/// `resourceVersion` and its conditions' `lastHeartbeatTime`. A kubelet's periodic status post
/// changes only those, so a watch that wakes passes on a changed fingerprint alone does not
/// wake every Machine of a cluster at each round of posts.
pub fn node_fingerprint(node: &Node) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut read = node.clone();
    read.metadata.resource_version = None;
    read.metadata.managed_fields = None;
    if let Some(conditions) = read.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        for condition in conditions {
            condition.last_heartbeat_time = None;
        }
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_vec(&read)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// Drops a cached Machine's managed fields (the rest is already only what is read).
pub fn machine(machine: &mut Machine) {
    machine.metadata.managed_fields = None;
}

/// Keeps of a cached BareMetalHost's metadata what the controller reads: its identity and
/// the annotations of [`HOST_ANNOTATIONS_READ`]. Labels, owners, finalizers and every other
/// annotation go: a management cluster caches each shard's hosts (or every host), and an
/// annotation such as kubectl's `last-applied-configuration` is larger than all the rest.
pub fn bare_metal_host(host: &mut BareMetalHost) {
    let metadata = &mut host.metadata;
    metadata.managed_fields = None;
    metadata.labels = None;
    metadata.owner_references = None;
    metadata.finalizers = None;
    if let Some(annotations) = &mut metadata.annotations {
        annotations.retain(|key, _| host_annotation_read(key));
        if annotations.is_empty() {
            metadata.annotations = None;
        }
    }
}

/// The annotations of a BareMetalHost the controller reads: the reboot API's (every key: our
/// own request and other remediators'), detached, paused, and the BMC's CA bundle.
pub const HOST_ANNOTATIONS_READ: [&str; 3] = [
    crate::api::annotations::BMH_DETACHED,
    crate::api::annotations::BMH_PAUSED,
    crate::api::annotations::BMC_CA_BUNDLE,
];

fn host_annotation_read(key: &str) -> bool {
    // The unsuffixed `reboot.metal3.io` is the reboot API's too.
    key.starts_with(crate::api::annotations::REBOOT_PREFIX.trim_end_matches('/'))
        || HOST_ANNOTATIONS_READ.contains(&key)
}

/// A Machine as cached: metadata, `spec.providerID`, `status.nodeRef.name`, `status.phase`.
/// Serializes to the same paths as the Machine, which the observers read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    /// Labels (role), annotations (trigger, host), owners (MachineSet).
    pub metadata: ObjectMeta,
    /// The spec's `providerID`.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<MachineSpec>,
    /// The status' `nodeRef` and `phase`.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<MachineStatus>,
}
cached_kind!(
    Machine,
    "machine.openshift.io",
    "v1beta1",
    "Machine",
    "machines",
    NamespaceResourceScope
);

/// What is kept of a Machine's spec.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineSpec {
    /// `baremetalhost:///namespace/name/uid`.
    #[serde(
        rename = "providerID",
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// A Cluster API Machine's infrastructure object (a Metal3Machine for bare metal).
    #[serde(
        rename = "infrastructureRef",
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub infrastructure_ref: Option<Named>,
    /// A Cluster API Machine's Cluster.
    #[serde(
        rename = "clusterName",
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_name: Option<String>,
}

/// A Cluster API Machine (`cluster.x-k8s.io/v1beta1`) as watched: the same fields as a
/// [`Machine`], which it is turned into before it is cached (a controller runs over one
/// Machine API, see [`MachineApi`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CapiMachine {
    /// The Machine's fields.
    pub machine: Machine,
}
cached_kind!(
    CapiMachine,
    "cluster.x-k8s.io",
    "v1beta1",
    "Machine",
    "machines",
    NamespaceResourceScope,
    [machine.metadata]
);

impl Machine {
    /// Its Node (`status.nodeRef.name`), if it names one.
    pub fn node_name(&self) -> Option<&str> {
        let name = self.status.as_ref()?.node_ref.as_ref()?.name.as_str();
        (!name.is_empty()).then_some(name)
    }
}

/// The Machine of Node `node` (with UID `uid`, if known): the one whose `status.nodeRef`
/// names it — by name, and by UID where both are known. Never a Node's own annotation: the
/// Node's kubelet may write those. Several Machines naming one Node: none (which one is
/// not for a Node to say).
pub fn machine_of_node<'a>(
    machines: &'a [std::sync::Arc<Machine>],
    node: &str,
    uid: Option<&str>,
) -> Option<&'a std::sync::Arc<Machine>> {
    let mut naming = machines.iter().filter(|m| {
        let Some(reference) = m.status.as_ref().and_then(|s| s.node_ref.as_ref()) else {
            return false;
        };
        let same_uid = match (reference.uid.as_deref(), uid) {
            (Some(named), Some(actual)) => named == actual,
            _ => true,
        };
        reference.name == node && same_uid
    });
    let first = naming.next()?;
    naming.next().is_none().then_some(first)
}

impl From<CapiMachine> for Machine {
    fn from(capi: CapiMachine) -> Self {
        capi.machine
    }
}

/// Which Machine API a cluster's Machines come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum MachineApi {
    /// OpenShift's Machine API (`machine.openshift.io/v1beta1`).
    #[default]
    #[cfg_attr(feature = "clap", value(name = "openshift"))]
    OpenShift,
    /// Cluster API (`cluster.x-k8s.io/v1beta1`, served by every Cluster API release since
    /// v1.0, beside v1beta2 from v1.11), with metal3's Metal3Machines.
    #[cfg_attr(feature = "clap", value(name = "cluster-api"))]
    ClusterApi,
}

impl MachineApi {
    /// The Machines' `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            MachineApi::OpenShift => "machine.openshift.io/v1beta1",
            MachineApi::ClusterApi => "cluster.x-k8s.io/v1beta1",
        }
    }

    /// The Machine resource, for reads and writes.
    pub fn resource(self) -> kube_core::ApiResource {
        match self {
            MachineApi::OpenShift => kube_core::ApiResource::erase::<Machine>(&()),
            MachineApi::ClusterApi => kube_core::ApiResource::erase::<CapiMachine>(&()),
        }
    }
}

/// What is kept of a Machine's status.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// The Node.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_ref: Option<Named>,
    /// The Machine's phase.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub phase: Option<String>,
}

/// A reference kept by name (and namespace and kind, where they matter).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Named {
    /// The object's name.
    #[serde(default)]
    pub name: String,
    /// Its namespace, if the reference names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its kind, if the reference names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its UID, if the reference names one (a Machine's `status.nodeRef` does: the Node a
    /// Machine API's node link saw, not another registered under the same name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// A BareMetalHost as cached: metadata, the spec's BMC, consumer and power settings, and the
/// status fields the power-off proof reads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct BareMetalHost {
    /// Annotations (detached, paused, reboot requests).
    pub metadata: ObjectMeta,
    /// What is kept of the spec.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<HostSpec>,
    /// What is kept of the status.
    #[serde(default, deserialize_with = "lenient")]
    pub status: Option<HostStatus>,
}
cached_kind!(
    BareMetalHost,
    "metal3.io",
    "v1alpha1",
    "BareMetalHost",
    "baremetalhosts",
    NamespaceResourceScope
);

/// What is kept of a BareMetalHost's spec.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostSpec {
    /// `address` and `credentialsName`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub bmc: Option<HostBmcSpec>,
    /// The Machine that consumes the host.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub consumer_ref: Option<Named>,
    /// Whether the host should be on.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub online: Option<bool>,
    /// The BareMetal Operator will not power it off.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_power_off: Option<bool>,
    /// Provisioned by someone else: deleting its Machine provisions nothing new.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub externally_provisioned: Option<bool>,
}

/// A BareMetalHost's BMC.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostBmcSpec {
    /// The BMC address.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub address: Option<String>,
    /// The Secret with `username` and `password`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub credentials_name: Option<String>,
    /// Skip the BMC's TLS certificate check (the operator's explicit opt-in).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub disable_certificate_verification: Option<bool>,
}

/// What is kept of a BareMetalHost's status.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostStatus {
    /// The power state the BareMetal Operator last read.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub powered_on: Option<bool>,
    /// `OK`, `discovered`, `error`, `delayed`, `detached`.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub operational_status: Option<String>,
    /// The kind of error, when in error.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub error_type: Option<String>,
    /// The error, when in error.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub error_message: Option<String>,
}

/// The Node condition type that says whether the kubelet is healthy.
pub const NODE_READY: &str = "Ready";

/// The Node's `Ready` condition, if it reports one (a slimmed Node keeps only that one).
pub fn ready_condition(node: &Node) -> Option<&k8s_openapi::api::core::v1::NodeCondition> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == NODE_READY))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::observe::{
        bare_metal_host_bmc, bare_metal_host_view, machine_host, node_view,
    };
    use crate::decide::plan::NodeView;

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
                "nodeInfo": {"bootID": "b-1", "machineID": "m", "kernelVersion": "6",
                    "osImage": "o", "containerRuntimeVersion": "c", "kubeletVersion": "k",
                    "kubeProxyVersion": "", "operatingSystem": "linux",
                    "architecture": "amd64", "systemUUID": "s"},
                "capacity": {"cpu": "32"}},
        }))
        .unwrap();
        let before = node_view(Some(&n));
        node(&mut n);
        assert_eq!(node_view(Some(&n)), before);
        assert!(matches!(
            &before,
            NodeView::Present {
                ready_since: Some(_),
                boot_id: Some(id),
            } if id == "b-1"
        ));
        assert_eq!(n.metadata.labels.as_ref().unwrap()["team"], "db");
        assert_eq!(n.metadata.annotations.as_ref().unwrap()["a"], "b");
        assert_eq!(n.spec.as_ref().unwrap().taints.as_ref().unwrap().len(), 1);
        let status = n.status.as_ref().unwrap();
        assert!(status.images.is_none() && status.capacity.is_none());
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert!(n.metadata.managed_fields.is_none());

        let full = json!({
            "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "w", "namespace": "ns", "labels": {"r": "worker"},
                "annotations": {"metal3.io/BareMetalHost": "ns/w"}},
            "spec": {"providerID": "baremetalhost:///ns/w/u", "providerSpec": {"value": {"big": 1}}},
            "status": {"nodeRef": {"name": "w"}, "conditions": [{"type": "x"}], "addresses": []},
        });
        let mut m: Machine = serde_json::from_value(full).unwrap();
        let host_before = machine_host(&m).unwrap();
        machine(&mut m);
        let after = serde_json::to_value(&m).unwrap();
        let back: Machine = serde_json::from_value(after.clone()).unwrap();
        assert_eq!(machine_host(&back).unwrap(), host_before);
        assert!(host_before.is_some());
        assert_eq!(back.node_name(), Some("w"));
        assert!(after.pointer("/spec/providerSpec").is_none());
        assert!(after.pointer("/status/conditions").is_none());

        let json = json!({
            "apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
            "metadata": {"name": "w", "namespace": "ns", "labels": {"cluster.x-k8s.io/cluster-name": "c"},
                "annotations": {"reboot.metal3.io/capbm-requested-power-off": "{}",
                    "reboot.metal3.io/other-remediator": "{}", "reboot.metal3.io": "",
                    "baremetalhost.metal3.io/detached": "", "baremetalhost.metal3.io/paused": "",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": 1}"},
                "finalizers": ["baremetalhost.metal3.io"]},
            "spec": {"bmc": {"address": "redfish://b/redfish/v1/Systems/1", "credentialsName": "s",
                "disableCertificateVerification": true},
                "online": true, "image": {"url": "x"}},
            "status": {"poweredOn": false, "operationalStatus": "OK",
                "hardware": {"cpu": {"count": 64}}},
        });
        let mut h: BareMetalHost = serde_json::from_value(json.clone()).unwrap();
        let view = bare_metal_host_view(&h, "capbm-requested-power-off");
        let bmc = bare_metal_host_bmc(&h).unwrap();
        bare_metal_host(&mut h);
        let after = serde_json::to_value(&h).unwrap();
        let back: BareMetalHost = serde_json::from_value(after.clone()).unwrap();
        assert_eq!(
            bare_metal_host_view(&back, "capbm-requested-power-off"),
            view
        );
        assert_eq!(bare_metal_host_bmc(&back).unwrap(), bmc);
        assert!(after.pointer("/status/hardware").is_none());
        // Every field the controller reads from a host is kept (power.rs reads this one).
        assert_eq!(
            after.pointer("/spec/bmc/disableCertificateVerification"),
            Some(&json!(true))
        );
        assert!(after.pointer("/spec/image").is_none());
        let annotations = after.pointer("/metadata/annotations").unwrap();
        let kept: Vec<&str> = annotations
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            kept,
            [
                "baremetalhost.metal3.io/detached",
                "baremetalhost.metal3.io/paused",
                "reboot.metal3.io",
                "reboot.metal3.io/capbm-requested-power-off",
                "reboot.metal3.io/other-remediator",
            ]
        );
        assert!(after.pointer("/metadata/labels").is_none());
        assert!(after.pointer("/metadata/finalizers").is_none());
        // Kept too, though a host cannot name a CA bundle and turn verification off at once.
        assert!(host_annotation_read(crate::api::annotations::BMC_CA_BUNDLE));
    }

    #[test]
    fn a_heartbeat_alone_leaves_a_nodes_fingerprint_and_any_read_change_moves_it() {
        let node = |ready: &str, heartbeat: &str, version: &str, taint: bool| -> Node {
            let taints = if taint {
                json!([{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}])
            } else {
                json!([])
            };
            serde_json::from_value(json!({
                "metadata": {"name": "w", "uid": "u", "resourceVersion": version},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": ready,
                    "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            }))
            .unwrap()
        };
        let before = node_fingerprint(&node("True", "2026-01-01T00:01:00Z", "1", false));
        let posted = node_fingerprint(&node("True", "2026-01-01T00:02:00Z", "2", false));
        assert_eq!(before, posted, "a status post with a new heartbeat only");
        for changed in [
            node("Unknown", "2026-01-01T00:02:00Z", "2", false),
            node("True", "2026-01-01T00:02:00Z", "2", true),
        ] {
            assert_ne!(before, node_fingerprint(&changed));
        }
        let mut other = node("True", "2026-01-01T00:01:00Z", "1", false);
        other.metadata.uid = Some("u-2".into());
        assert_ne!(before, node_fingerprint(&other), "a new Node of the name");
    }

    #[test]
    fn a_malformed_field_reads_as_absent_and_keeps_the_rest() {
        let host: BareMetalHost = serde_json::from_value(json!({
            "metadata": {"name": "h", "namespace": "ns"},
            "spec": {"bmc": {"address": 7, "credentialsName": "s"}, "online": "yes",
                "consumerRef": {"kind": "Machine", "name": "m", "namespace": "ns"}},
            "status": "broken",
        }))
        .unwrap();
        let json = serde_json::to_value(&host).unwrap();
        assert!(json.pointer("/spec/bmc/address").is_none());
        assert_eq!(json.pointer("/spec/bmc/credentialsName"), Some(&json!("s")));
        assert!(json.pointer("/spec/online").is_none());
        assert_eq!(json.pointer("/spec/consumerRef/name"), Some(&json!("m")));
        assert_eq!(
            bare_metal_host_bmc(&host).unwrap_err().field,
            "spec.bmc.address"
        );
        assert_eq!(
            bare_metal_host_view(&host, "k").powered_on,
            None,
            "a status that is not an object proves nothing"
        );

        let machine: Machine = serde_json::from_value(json!({
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"providerID": ["not", "text"]},
            "status": {"nodeRef": "w"},
        }))
        .unwrap();
        assert_eq!(machine_host(&machine).unwrap(), None);
        assert_eq!(machine.node_name(), None);
    }

    fn machine_at(
        namespace: &str,
        name: &str,
        node: Option<(&str, Option<&str>)>,
    ) -> std::sync::Arc<Machine> {
        let status =
            node.map(|(node, uid)| json!({"nodeRef": {"kind": "Node", "name": node, "uid": uid}}));
        std::sync::Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": namespace},
                "status": status,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_nodes_machine_is_the_one_whose_node_ref_names_it_by_name_and_uid() {
        let machines = vec![
            machine_at("ns", "m0", Some(("n0", Some("u0")))),
            machine_at("ns", "m1", Some(("n1", None))),
            machine_at("ns", "m2", None),
            machine_at("ns", "m3", Some(("n3", Some("u3")))),
            machine_at("other", "m3-twin", Some(("n3", Some("u3")))),
        ];
        let of = |node, uid| {
            machine_of_node(&machines, node, uid)
                .map(|m| m.metadata.name.clone().unwrap_or_default())
        };
        assert_eq!(of("n0", Some("u0")).as_deref(), Some("m0"));
        assert_eq!(of("n0", None).as_deref(), Some("m0"));
        // A Node registered again under the name (another UID) is not the Machine's.
        assert_eq!(of("n0", Some("u9")), None);
        // A nodeRef without a UID is matched by name.
        assert_eq!(of("n1", Some("u1")).as_deref(), Some("m1"));
        assert_eq!(of("n2", None), None);
        // Two Machines naming one Node: neither.
        assert_eq!(of("n3", Some("u3")), None);
    }
}
