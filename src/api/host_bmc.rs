//! `HostBmc`: for hosts without a BareMetalHost, where baremend drives the BMC itself.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Maps a Machine or a Node to its BMC. Lives in the Machine's namespace, beside the Secret.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "HostBmc",
    namespaced,
    shortname = "hbmc",
    category = "baremend",
    validation = "has(self.spec.machineName) || has(self.spec.nodeName)",
    printcolumn = r#"{"name":"Machine","type":"string","jsonPath":".spec.machineName"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HostBmcSpec {
    /// The Machine this BMC powers (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_name: Option<String>,
    /// The Node this BMC powers, when no Machine is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The BMC address in BareMetalHost form (`redfish://…`, `redfish+http://…`, `ipmi://…`).
    #[schemars(length(min = 1, max = 2048))]
    pub address: String,
    /// A Secret in the same namespace with `username` and `password` keys.
    #[schemars(length(min = 1, max = 253))]
    pub credentials_name: String,
    /// PEM CA bundle to verify the BMC's certificate with, instead of the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
    /// Skip TLS verification. Off by default; say yes only for lab BMCs.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}
