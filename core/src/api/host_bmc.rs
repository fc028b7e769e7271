//! `HostBmc`: for hosts without a BareMetalHost, where baremend drives the BMC itself; and
//! [`CaBundleRef`], how a `HostBmc` or a detached BareMetalHost names the CA certificates its
//! BMC's TLS certificate is verified with.

use std::fmt;
use std::str::FromStr;

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds::{ADDRESS_MAX, CA_BUNDLE_MAX, CONFIG_MAP_KEY, DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX};

/// What baremend makes of a `HostBmc`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct HostBmcStatus {
    /// `Accepted=False` (reason `NamespaceNotTrusted`, `ContestedNode` or `ContestedMachine`)
    /// while baremend does not use it, for its Machine or for its Node without a Machine
    /// (docs/reference/contracts.md, "Trust").
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub conditions: Vec<super::Condition>,
}

/// Maps a Machine or a Node to its BMC. Lives in the Machine's namespace, beside the Secret.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    crates(kube_core = "::kube_core", kube = "::kube_derive"),
    attr = "x_kube(crates(kube_core = \"::kube_core\"))"
)]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "HostBmc",
    namespaced,
    shortname = "hbmc",
    status = "HostBmcStatus",
    category = "baremend",
    validation = "has(self.spec.machineName) || has(self.spec.nodeName)",
    validation = "!has(self.spec.caBundle) || !has(self.spec.caBundleRef)",
    validation = "!self.spec.insecureSkipVerify || (!has(self.spec.caBundle) && !has(self.spec.caBundleRef))",
    printcolumn = r#"{"name":"Machine","type":"string","jsonPath":".spec.machineName"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".spec.nodeName"}"#,
    printcolumn = r#"{"name":"Address","type":"string","jsonPath":".spec.address"}"#,
    printcolumn = r#"{"name":"Accepted","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Accepted\")].reason","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HostBmcSpec {
    /// The Machine this BMC powers (same namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub machine_name: Option<String>,
    /// The Node this BMC powers, when no Machine is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub node_name: Option<String>,
    /// The BMC address in BareMetalHost form (`redfish://…`, `redfish+http://…`, `ipmi://…`).
    #[schemars(length(min = 1, max = ADDRESS_MAX))]
    pub address: String,
    /// A Secret in the same namespace with `username` and `password` keys.
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub credentials_name: String,
    /// PEM CA bundle to verify the BMC's certificate with, instead of the system roots.
    /// At most one of `caBundle` and `caBundleRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = CA_BUNDLE_MAX))]
    pub ca_bundle: Option<String>,
    /// A key of a ConfigMap or Secret in the same namespace holding the PEM CA bundle to
    /// verify the BMC's certificate with, instead of the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_ref: Option<CaBundleRef>,
    /// Skip TLS verification. Off by default; say yes only for lab BMCs. Never together with
    /// a CA bundle.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// The kind of object a [`CaBundleRef`] names.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CaBundleKind {
    /// A ConfigMap (CA certificates are public).
    ConfigMap,
    /// A Secret.
    Secret,
}

impl CaBundleKind {
    /// The kind's name, as in `kind:` and in the annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            CaBundleKind::ConfigMap => "ConfigMap",
            CaBundleKind::Secret => "Secret",
        }
    }
}

/// The key of a CA bundle when none is named (what cert-manager and the service CA use).
pub const DEFAULT_CA_BUNDLE_KEY: &str = "ca.crt";

fn default_ca_bundle_key() -> String {
    DEFAULT_CA_BUNDLE_KEY.to_string()
}

/// A key of a ConfigMap or Secret, in the namespace of the object that names it, holding PEM
/// CA certificates. On a detached BareMetalHost it is the annotation
/// `baremend.io/bmc-ca-bundle: <Kind>/<name>[/<key>]` (see [`FromStr`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CaBundleRef {
    /// `ConfigMap` or `Secret`.
    pub kind: CaBundleKind,
    /// The object's name (same namespace).
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub name: String,
    /// The key holding the PEM certificates.
    #[serde(default = "default_ca_bundle_key")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(CONFIG_MAP_KEY))]
    pub key: String,
}

impl fmt::Display for CaBundleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} key {}", self.kind.as_str(), self.name, self.key)
    }
}

/// Parses the annotation form `ConfigMap/<name>[/<key>]` or `Secret/<name>[/<key>]` (the key
/// defaults to `ca.crt`).
impl FromStr for CaBundleRef {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let form = "expected ConfigMap/<name>[/<key>] or Secret/<name>[/<key>]";
        let mut parts = text.trim().split('/');
        let kind = match parts.next() {
            Some("ConfigMap") => CaBundleKind::ConfigMap,
            Some("Secret") => CaBundleKind::Secret,
            _ => return Err(format!("{text:?}: {form}")),
        };
        let name = parts.next().filter(|n| !n.is_empty());
        let key = parts.next();
        match (name, key, parts.next()) {
            (Some(name), None, None) => Ok(CaBundleRef {
                kind,
                name: name.to_string(),
                key: default_ca_bundle_key(),
            }),
            (Some(name), Some(key), None) if !key.is_empty() => Ok(CaBundleRef {
                kind,
                name: name.to_string(),
                key: key.to_string(),
            }),
            _ => Err(format!("{text:?}: {form}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_form_names_a_kind_a_name_and_maybe_a_key() {
        let parsed: CaBundleRef = "ConfigMap/bmc-ca".parse().unwrap();
        assert_eq!(
            parsed,
            CaBundleRef {
                kind: CaBundleKind::ConfigMap,
                name: "bmc-ca".into(),
                key: "ca.crt".into(),
            }
        );
        let parsed: CaBundleRef = "Secret/bmc-ca/bundle.pem".parse().unwrap();
        assert_eq!(parsed.kind, CaBundleKind::Secret);
        assert_eq!(parsed.key, "bundle.pem");
        assert_eq!(parsed.to_string(), "Secret bmc-ca key bundle.pem");
        for bad in [
            "",
            "bmc-ca",
            "configmap/bmc-ca",
            "ConfigMap/",
            "ConfigMap//ca.crt",
            "ConfigMap/bmc-ca/",
            "ConfigMap/a/b/c",
        ] {
            let error = bad.parse::<CaBundleRef>().unwrap_err();
            assert!(
                error.contains("expected ConfigMap/<name>"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_key_defaults_to_ca_crt_in_the_resource_too() {
        let parsed: CaBundleRef =
            serde_json::from_value(serde_json::json!({"kind": "Secret", "name": "x"})).unwrap();
        assert_eq!(parsed.key, DEFAULT_CA_BUNDLE_KEY);
    }
}
