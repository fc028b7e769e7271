//! Reading the cluster's objects into the planner's views. Pure: objects in, views or a clear
//! reason out. Malformed objects never panic and never count as evidence of power-off.

use std::collections::BTreeMap;
use std::time::Duration;

use baremend_drivers::Credentials;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::fence::BareMetalHostView;
use super::gates::{ForeignKind, ForeignObject};
use super::plan::NodeView;
use crate::api::annotations::{
    BMC_CA_BUNDLE, BMH_DETACHED, BMH_PAUSED, CAPI_CONTROL_PLANE, EXTERNAL_REMEDIATION,
    LEGACY_NODE_ANNOTATIONS_BACKUP, LEGACY_NODE_LABELS_BACKUP, LEGACY_POWER_ON_TIMEOUT,
    MACHINE_HOST, MACHINE_ROLE, MEDIK8S_NODE_NAME, REBOOT_PREFIX,
};
use crate::api::{CaBundleRef, slim};

pub use super::fence::HostRef;

/// Where a host's BMC is, which Secret holds its credentials and how its TLS certificate is
/// checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BmcRef {
    /// The address in BareMetalHost form.
    pub address: String,
    /// The Secret (same namespace as the object that named it).
    pub credentials_name: String,
    /// That object's namespace, where the Secret is read: a BareMetalHost's own, which may
    /// not be the Machine's (None: the namespace of whoever locates the BMC).
    pub namespace: Option<String>,
    /// How the BMC's certificate is checked.
    pub tls: BmcTls,
}

/// How a BMC's TLS certificate is checked, as the object naming the BMC says: against the
/// system roots (the default), a CA bundle, or not at all (an explicit opt-in).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BmcTls {
    /// The CA certificates to trust instead of the system roots.
    pub ca_bundle: Option<CaBundle>,
    /// Accept any certificate.
    pub insecure: bool,
}

/// Where a CA bundle is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaBundle {
    /// PEM written in the object itself (`HostBmc` `caBundle`).
    Inline(String),
    /// A key of a ConfigMap or Secret (`caBundleRef`, or a BareMetalHost's annotation).
    Named(CaBundleRef),
}

impl BmcTls {
    /// The settings, unless they contradict each other: a CA bundle with verification off
    /// would silently trust anything.
    pub fn new(ca_bundle: Option<CaBundle>, insecure: bool) -> Result<Self, String> {
        if insecure && ca_bundle.is_some() {
            return Err(
                "names a CA bundle and turns certificate verification off: choose one".into(),
            );
        }
        Ok(BmcTls {
            ca_bundle,
            insecure,
        })
    }
}

/// Why an object cannot be used; becomes a condition and an Event, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Unusable {
    /// The field at fault, e.g. `spec.providerID`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

fn unusable(field: &str, reason: impl Into<String>) -> Unusable {
    Unusable {
        field: field.to_string(),
        reason: reason.into(),
    }
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object.pointer(pointer).and_then(Value::as_str)
}

/// A DNS-1123 subdomain, as object names are.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

fn host_ref(namespace: &str, name: &str, field: &str) -> Result<HostRef, Unusable> {
    if !valid_name(namespace) || !valid_name(name) {
        return Err(unusable(
            field,
            format!("{namespace:?}/{name:?} is not a valid namespace/name"),
        ));
    }
    Ok(HostRef {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// The BareMetalHost of a Machine: from `spec.providerID` (`baremetalhost:///ns/name/uid`),
/// else from the `metal3.io/BareMetalHost: ns/name` annotation. `Ok(None)` when the Machine
/// names no host (direct BMC through a `HostBmc` may still apply).
pub fn machine_host(machine: &slim::Machine) -> Result<Option<HostRef>, Unusable> {
    let provider_id = machine.spec.as_ref().and_then(|s| s.provider_id.as_deref());
    named_host(provider_id, machine.metadata.annotations.as_ref())
}

/// [`machine_host`] over the two fields that name a host: a Machine's, or a Cluster API
/// Metal3Machine's (which carries them too).
pub fn named_host(
    provider_id: Option<&str>,
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<HostRef>, Unusable> {
    let provider_id = provider_id.unwrap_or_default();
    if let Some(rest) = provider_id.strip_prefix("baremetalhost:///") {
        let parts: Vec<&str> = rest.split('/').collect();
        return match parts.as_slice() {
            [namespace, name] | [namespace, name, _] => {
                host_ref(namespace, name, "spec.providerID").map(Some)
            }
            _ => Err(unusable(
                "spec.providerID",
                format!("{provider_id:?} is not baremetalhost:///<namespace>/<name>[/<uid>]"),
            )),
        };
    }
    let Some(annotation) = annotations.and_then(|a| a.get(MACHINE_HOST)) else {
        return Ok(None);
    };
    let field = format!("metadata.annotations[{MACHINE_HOST}]");
    match annotation.split_once('/') {
        Some((namespace, name)) => host_ref(namespace, name, &field).map(Some),
        None => Err(unusable(
            &field,
            format!("{annotation:?} is not <namespace>/<name>"),
        )),
    }
}

/// Whether a Machine is a control-plane machine, from its labels (OpenShift's machine role,
/// or Cluster API's control-plane label).
pub fn machine_is_control_plane(labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(CAPI_CONTROL_PLANE)
        || matches!(
            labels.get(MACHINE_ROLE).map(String::as_str),
            Some("master" | "control-plane")
        )
}

/// What a count of the fleet's health asks of each Machine, read from the Machine once per
/// change of it (by its watch, `runtime::fact_index`) rather than once per count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineFacts {
    /// Its Cluster API Cluster's name ([`super::workload::cluster_of`]).
    pub cluster: Option<String>,
    /// Its Node's name, from its status.
    pub node: Option<String>,
    /// Its `spec.providerID` (where its Node lives is judged on it: `decide::workload`).
    pub provider_id: Option<String>,
    /// It carries the health check's remediation annotation.
    pub annotated: bool,
    /// It is a control-plane machine ([`machine_is_control_plane`]).
    pub control_plane: bool,
}

/// The facts of `machine` a count of the fleet's health asks.
pub fn machine_facts(machine: &slim::Machine) -> MachineFacts {
    let empty = BTreeMap::new();
    let metadata = &machine.metadata;
    MachineFacts {
        cluster: super::workload::cluster_of(machine).map(str::to_owned),
        node: machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .map(|n| n.name.clone()),
        provider_id: machine.spec.as_ref().and_then(|s| s.provider_id.clone()),
        annotated: metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION)),
        control_plane: machine_is_control_plane(metadata.labels.as_ref().unwrap_or(&empty)),
    }
}

/// Whether deleting a Machine gets it replaced and nothing else (the rule of the older
/// OpenShift bare-metal provider): a MachineSet controls it, it is not a control-plane
/// machine, and its BareMetalHost (if any) is not externally provisioned, which would leave
/// no one to provision a replacement.
pub fn reprovisionable(
    machine: &ObjectMeta,
    host: Option<&slim::BareMetalHost>,
) -> Result<(), String> {
    let owned_by_machine_set = machine
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "MachineSet");
    if !owned_by_machine_set {
        return Err("no MachineSet controls it".into());
    }
    if machine_is_control_plane(&machine.labels.clone().unwrap_or_default()) {
        return Err("it is a control-plane machine".into());
    }
    let external = host
        .and_then(|h| h.spec.as_ref())
        .and_then(|spec| spec.externally_provisioned)
        .unwrap_or(false);
    if external {
        return Err("its BareMetalHost is externally provisioned".into());
    }
    Ok(())
}

/// What the reboot-API strategy needs from a BareMetalHost.
pub fn bare_metal_host_view(host: &slim::BareMetalHost, reboot_key: &str) -> BareMetalHostView {
    let annotations = host.metadata.annotations.as_ref();
    let has = |key: &str| annotations.is_some_and(|a| a.contains_key(key));
    let meta = &host.metadata;
    let identity = match (&meta.namespace, &meta.name, &meta.uid) {
        (Some(namespace), Some(name), Some(uid)) => {
            Some((namespace.clone(), name.clone(), uid.clone()))
        }
        _ => None,
    };
    let status = host.status.as_ref();
    BareMetalHostView {
        identity,
        powered_on: status.and_then(|s| s.powered_on),
        operational_status: status.and_then(|s| s.operational_status.clone()),
        detached: has(BMH_DETACHED),
        paused: has(BMH_PAUSED),
        disable_power_off: host
            .spec
            .as_ref()
            .and_then(|spec| spec.disable_power_off)
            .unwrap_or(false),
        power_off_requested: has(&format!("{REBOOT_PREFIX}{reboot_key}")),
        error: status
            .and_then(|s| s.error_type.as_deref())
            .filter(|kind| !kind.is_empty())
            .map(|kind| {
                let message = status
                    .and_then(|s| s.error_message.clone())
                    .unwrap_or_default();
                (kind.to_string(), message)
            }),
    }
}

/// The legacy actuator's annotations a Machine carries (its in-flight mark and its Node
/// backup), for the `ForeignRemediation` gate.
pub fn legacy_marks(annotations: &BTreeMap<String, String>) -> Vec<String> {
    [
        LEGACY_POWER_ON_TIMEOUT,
        LEGACY_NODE_LABELS_BACKUP,
        LEGACY_NODE_ANNOTATIONS_BACKUP,
    ]
    .into_iter()
    .filter(|key| annotations.contains_key(*key))
    .map(str::to_string)
    .collect()
}

/// The keys of a BareMetalHost's suffixed reboot-API annotations (`reboot.metal3.io/<key>`).
pub fn reboot_keys(annotations: &BTreeMap<String, String>) -> Vec<String> {
    annotations
        .keys()
        .filter_map(|key| key.strip_prefix(REBOOT_PREFIX))
        .map(str::to_string)
        .collect()
}

/// Another project's remediation object as the foreign gate matches it; `None` without a
/// name (an object the API server would not serve).
pub fn foreign_object(kind: ForeignKind, object: &Value) -> Option<ForeignObject> {
    let name = text(object, "/metadata/name").filter(|n| !n.is_empty())?;
    let owner_machines = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|o| text(o, "/kind") == Some("Machine"))
        .filter_map(|o| text(o, "/name"))
        .map(str::to_string)
        .collect();
    Some(ForeignObject {
        kind,
        namespace: text(object, "/metadata/namespace")
            .unwrap_or_default()
            .to_string(),
        name: name.to_string(),
        node_annotation: object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(MEDIK8S_NODE_NAME))
            .and_then(Value::as_str)
            .map(str::to_string),
        owner_machines,
    })
}

/// The BMC a BareMetalHost names (`spec.bmc.address`, `spec.bmc.credentialsName`,
/// `spec.bmc.disableCertificateVerification`), with the CA bundle its annotation
/// `baremend.io/bmc-ca-bundle` names.
pub fn bare_metal_host_bmc(host: &slim::BareMetalHost) -> Result<BmcRef, Unusable> {
    let bmc = host.spec.as_ref().and_then(|spec| spec.bmc.as_ref());
    let address = bmc
        .and_then(|b| b.address.as_deref())
        .filter(|a| !a.trim().is_empty())
        .ok_or_else(|| unusable("spec.bmc.address", "is missing"))?;
    let credentials_name = bmc
        .and_then(|b| b.credentials_name.as_deref())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| unusable("spec.bmc.credentialsName", "is missing"))?;
    let annotation = format!("metadata.annotations[{BMC_CA_BUNDLE}]");
    let ca_bundle = match host
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BMC_CA_BUNDLE))
    {
        None => None,
        Some(named) => Some(CaBundle::Named(
            named
                .parse()
                .map_err(|e: String| unusable(&annotation, e))?,
        )),
    };
    let insecure = bmc
        .and_then(|b| b.disable_certificate_verification)
        .unwrap_or(false);
    let tls = BmcTls::new(ca_bundle, insecure).map_err(|e| unusable(&annotation, e))?;
    Ok(BmcRef {
        address: address.to_string(),
        credentials_name: credentials_name.to_string(),
        namespace: host
            .metadata
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_owned),
        tls,
    })
}

/// The PEM CA certificates under `key` of a ConfigMap (`data` or `binaryData`), checked to be
/// PEM and to hold at least one certificate.
pub fn config_map_ca_bundle(config_map: &ConfigMap, key: &str) -> Result<Vec<u8>, Unusable> {
    let bytes = match (
        config_map.data.as_ref().and_then(|d| d.get(key)),
        config_map.binary_data.as_ref().and_then(|d| d.get(key)),
    ) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(bytes)) => bytes.0.clone(),
        (None, None) => return Err(unusable(&format!("data.{key}"), "is missing")),
    };
    pem_certificates(bytes).map_err(|reason| unusable(&format!("data.{key}"), reason))
}

/// The PEM CA certificates under `key` of a Secret (`data` or `stringData`), checked as
/// [`config_map_ca_bundle`] does.
pub fn secret_ca_bundle(secret: &Secret, key: &str) -> Result<Vec<u8>, Unusable> {
    let bytes = match (
        secret.data.as_ref().and_then(|d| d.get(key)),
        secret.string_data.as_ref().and_then(|d| d.get(key)),
    ) {
        (Some(bytes), _) => bytes.0.clone(),
        (None, Some(text)) => text.as_bytes().to_vec(),
        (None, None) => return Err(unusable(&format!("data.{key}"), "is missing")),
    };
    pem_certificates(bytes).map_err(|reason| unusable(&format!("data.{key}"), reason))
}

/// `bytes` if they are PEM holding at least one certificate (and nothing unreadable).
pub fn pem_certificates(bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut count = 0usize;
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        certificate.map_err(|e| format!("is not a PEM certificate bundle ({e})"))?;
        count += 1;
    }
    if count == 0 {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into());
    }
    Ok(bytes)
}

/// The key of a BMC Secret that holds the password before the last rotation (optional).
pub const PREVIOUS_PASSWORD_KEY: &str = "previousPassword";

/// The credentials in a BMC Secret: `username` and `password` (as metal3's BMC Secrets), and
/// during a rotation `previousPassword`, which a login tries once when the BMC refuses
/// `password`. The error names the key, never a value.
pub fn secret_credentials(secret: &Secret) -> Result<Credentials, Unusable> {
    let read = |key: &str| -> Result<String, Unusable> {
        secret_text(secret, key)?.ok_or_else(|| unusable(&format!("data.{key}"), "is missing"))
    };
    let credentials = Credentials::new(read("username")?, read("password")?);
    Ok(match secret_text(secret, PREVIOUS_PASSWORD_KEY)? {
        Some(previous) => credentials.with_previous(previous),
        None => credentials,
    })
}

/// The text under `key` of a Secret (`data`, else `stringData`; one trailing newline of
/// `data` dropped), `None` when the key is absent; present but empty or not UTF-8 is an error.
fn secret_text(secret: &Secret, key: &str) -> Result<Option<String>, Unusable> {
    let field = format!("data.{key}");
    let value = match (
        secret.data.as_ref().and_then(|d| d.get(key)),
        secret.string_data.as_ref().and_then(|d| d.get(key)),
    ) {
        (Some(bytes), _) => String::from_utf8(bytes.0.clone())
            .map_err(|_| unusable(&field, "is not UTF-8"))?
            .trim_end_matches(['\n', '\r'])
            .to_string(),
        (None, Some(text)) => text.clone(),
        (None, None) => return Ok(None),
    };
    if value.is_empty() {
        return Err(unusable(&field, "is empty"));
    }
    Ok(Some(value))
}

/// Whether `node` is Ready and not being deleted: `node_view(Some(node)).is_ready()`, without
/// building the view (a start's fleet health asks it of every Node, and the view's boot ID is
/// a copy).
pub fn node_is_ready(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_none()
        && crate::api::slim::ready_condition(node).is_some_and(|c| c.status == "True")
}

/// The Node as the planner sees it: missing, or present and Ready since when (time since the
/// Unix epoch, the planner's clock). A Node being deleted (a finalizer holds it) counts as
/// missing: its kubelet may still report it Ready on a new boot, but it is going away with
/// whatever is restored onto it, and the host can register again only once it has gone.
pub fn node_view(node: Option<&Node>) -> NodeView {
    let Some(node) = node.filter(|n| n.metadata.deletion_timestamp.is_none()) else {
        return NodeView::Missing;
    };
    let ready_since = crate::api::slim::ready_condition(node)
        .filter(|c| c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map(|t| Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0)))
                .unwrap_or_default()
        });
    let boot_id = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|info| info.boot_id.clone())
        .filter(|id| !id.is_empty());
    NodeView::Present {
        ready_since,
        boot_id,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;
    use serde_json::json;

    use super::*;

    /// A BareMetalHost read from its JSON, as the watch and a GET read it (the API server
    /// always sends `metadata`).
    fn bmh(mut json: Value) -> slim::BareMetalHost {
        if let Some(object) = json.as_object_mut() {
            object.entry("metadata").or_insert_with(|| json!({}));
        }
        serde_json::from_value(json).unwrap()
    }

    fn machine(spec: Value, annotations: Value) -> slim::Machine {
        serde_json::from_value(
            json!({"metadata": {"name": "m", "annotations": annotations}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn the_host_comes_from_the_provider_id_then_the_annotation() {
        let m = machine(
            json!({"providerID": "baremetalhost:///openshift-machine-api/host-0/0c5e"}),
            json!({}),
        );
        assert_eq!(
            machine_host(&m).unwrap().unwrap().to_string(),
            "openshift-machine-api/host-0"
        );
        let m = machine(
            json!({}),
            json!({"metal3.io/BareMetalHost": "openshift-machine-api/host-1"}),
        );
        assert_eq!(machine_host(&m).unwrap().unwrap().name, "host-1");
        assert_eq!(machine_host(&machine(json!({}), json!({}))).unwrap(), None);
    }

    #[test]
    fn malformed_host_references_are_unusable_with_the_field_named() {
        for (spec, annotations, field) in [
            (
                json!({"providerID": "baremetalhost:///only"}),
                json!({}),
                "spec.providerID",
            ),
            (
                json!({"providerID": "baremetalhost:///a/b/c/d"}),
                json!({}),
                "spec.providerID",
            ),
            (
                json!({"providerID": "baremetalhost:///NS/Bad_Name"}),
                json!({}),
                "spec.providerID",
            ),
            (
                json!({}),
                json!({"metal3.io/BareMetalHost": "no-slash"}),
                "metal3.io/BareMetalHost",
            ),
            (
                json!({}),
                json!({"metal3.io/BareMetalHost": "/x"}),
                "metal3.io/BareMetalHost",
            ),
        ] {
            let error = machine_host(&machine(spec, annotations)).unwrap_err();
            assert!(error.field.contains(field), "{error}");
        }
    }

    #[test]
    fn the_view_of_a_host_reads_power_status_and_every_distrust_mark() {
        let host = bmh(json!({
            "metadata": {"annotations": {
                "reboot.metal3.io/capbm-requested-power-off": "{\"mode\":\"hard\"}",
                "baremetalhost.metal3.io/paused": ""}},
            "spec": {"disablePowerOff": true},
            "status": {"poweredOn": false, "operationalStatus": "OK"}
        }));
        let view = bare_metal_host_view(&host, "capbm-requested-power-off");
        assert_eq!(view.powered_on, Some(false));
        assert!(view.paused && view.disable_power_off && view.power_off_requested);
        assert!(!view.detached);
        assert!(!bare_metal_host_view(&host, "other-key").power_off_requested);
        // A host without status knows nothing about its power.
        assert_eq!(bare_metal_host_view(&bmh(json!({})), "k").powered_on, None);
    }

    fn secret(pairs: &[(&str, &[u8])]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn credentials_need_both_keys_and_never_show_the_password() {
        let good = secret_credentials(&secret(&[
            ("username", b"admin"),
            ("password", b"s3cret\n"),
        ]))
        .unwrap();
        assert_eq!(good.password.expose(), "s3cret");
        assert!(!format!("{good:?} {good}").contains("s3cret"));
        for (pairs, want) in [
            (
                vec![("username", b"admin".as_slice())],
                "data.password: is missing",
            ),
            (
                vec![("password", b"x".as_slice())],
                "data.username: is missing",
            ),
            (
                vec![
                    ("username", b"admin".as_slice()),
                    ("password", b"".as_slice()),
                ],
                "data.password: is empty",
            ),
            (
                vec![
                    ("username", b"\xff".as_slice()),
                    ("password", b"x".as_slice()),
                ],
                "data.username: is not UTF-8",
            ),
        ] {
            let error = secret_credentials(&secret(&pairs)).unwrap_err();
            assert_eq!(error.to_string(), want);
        }
    }

    #[test]
    fn a_previous_password_is_optional_and_checked_like_the_others() {
        let plain = secret_credentials(&secret(&[("username", b"admin"), ("password", b"new-pw")]))
            .unwrap();
        assert_eq!(plain.previous_password, None);
        let rotating = secret_credentials(&secret(&[
            ("username", b"admin"),
            ("password", b"new-pw"),
            ("previousPassword", b"old-pw\n"),
        ]))
        .unwrap();
        assert_eq!(
            rotating.previous_password.as_ref().map(|p| p.expose()),
            Some("old-pw")
        );
        assert!(!format!("{rotating:?} {rotating}").contains("old-pw"));
        for (value, want) in [
            (b"".as_slice(), "data.previousPassword: is empty"),
            (
                b"\xfe\xff".as_slice(),
                "data.previousPassword: is not UTF-8",
            ),
        ] {
            let error = secret_credentials(&secret(&[
                ("username", b"admin"),
                ("password", b"new-pw"),
                ("previousPassword", value),
            ]))
            .unwrap_err();
            assert_eq!(error.to_string(), want);
        }
        let mut in_string_data = secret(&[("username", b"admin"), ("password", b"new-pw")]);
        in_string_data.string_data = Some(BTreeMap::from([(
            "previousPassword".to_string(),
            "old-pw".to_string(),
        )]));
        let read = secret_credentials(&in_string_data).unwrap();
        assert_eq!(read.previous_password.unwrap().expose(), "old-pw");
    }

    #[test]
    fn a_bmh_without_bmc_details_says_which_field_is_missing() {
        let error = bare_metal_host_bmc(&bmh(json!({"spec": {"bmc": {"address": "ipmi://h"}}})))
            .unwrap_err();
        assert_eq!(error.field, "spec.bmc.credentialsName");
        let bmc = bare_metal_host_bmc(&bmh(
            json!({"spec": {"bmc": {"address": "ipmi://h", "credentialsName": "s"}}}),
        ))
        .unwrap();
        assert_eq!(bmc.credentials_name, "s");
        assert_eq!(
            bmc.tls,
            BmcTls::default(),
            "verified against the system roots"
        );
        assert_eq!(bmc.namespace, None, "no namespace: the locator's");
    }

    #[test]
    fn a_bmhs_credentials_are_read_in_the_bmhs_own_namespace() {
        let bmc = bare_metal_host_bmc(&bmh(json!({
            "metadata": {"name": "h", "namespace": "hosts"},
            "spec": {"bmc": {"address": "ipmi://h", "credentialsName": "s"}},
        })))
        .unwrap();
        assert_eq!(bmc.namespace.as_deref(), Some("hosts"));
    }

    #[test]
    fn a_bmh_names_its_ca_bundle_in_an_annotation_never_together_with_insecure() {
        let host = |annotations: Value, insecure: bool| {
            bmh(json!({"metadata": {"annotations": annotations},
                "spec": {"bmc": {"address": "redfish://h", "credentialsName": "s",
                    "disableCertificateVerification": insecure}}}))
        };
        let bmc = bare_metal_host_bmc(&host(
            json!({"baremend.io/bmc-ca-bundle": "Secret/bmc-ca/bundle.pem"}),
            false,
        ))
        .unwrap();
        let Some(CaBundle::Named(named)) = bmc.tls.ca_bundle else {
            panic!("{:?}", bmc.tls);
        };
        assert_eq!(named.to_string(), "Secret bmc-ca key bundle.pem");
        let bmc = bare_metal_host_bmc(&host(json!({}), true)).unwrap();
        assert!(bmc.tls.insecure && bmc.tls.ca_bundle.is_none());
        for (annotations, insecure, reason) in [
            (
                json!({"baremend.io/bmc-ca-bundle": "bmc-ca"}),
                false,
                "expected ConfigMap/<name>",
            ),
            (
                json!({"baremend.io/bmc-ca-bundle": "ConfigMap/bmc-ca"}),
                true,
                "choose one",
            ),
        ] {
            let error = bare_metal_host_bmc(&host(annotations, insecure)).unwrap_err();
            assert_eq!(
                error.field,
                "metadata.annotations[baremend.io/bmc-ca-bundle]"
            );
            assert!(error.reason.contains(reason), "{error}");
        }
    }

    /// A self-signed certificate, PEM.
    fn certificate_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        rcgen::CertificateParams::new(vec!["bmc.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .pem()
    }

    #[test]
    fn a_ca_bundle_is_read_from_a_config_map_or_a_secret_and_must_hold_certificates() {
        let pem = certificate_pem();
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "bmc-ca"},
            "data": {"ca.crt": pem, "empty": "", "junk": "not a certificate",
                "key": "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n"},
        }))
        .unwrap();
        assert_eq!(
            config_map_ca_bundle(&config_map, "ca.crt").unwrap(),
            pem.as_bytes()
        );
        for (key, reason) in [
            ("other", "is missing"),
            ("empty", "holds no PEM certificate"),
            ("junk", "holds no PEM certificate"),
            ("key", "is not a PEM certificate bundle"),
        ] {
            let error = config_map_ca_bundle(&config_map, key).unwrap_err();
            assert_eq!(error.field, format!("data.{key}"));
            assert!(error.reason.contains(reason), "{key}: {error}");
        }
        let secret = secret(&[("ca.crt", pem.as_bytes())]);
        assert_eq!(secret_ca_bundle(&secret, "ca.crt").unwrap(), pem.as_bytes());
        assert_eq!(
            secret_ca_bundle(&secret, "tls.crt")
                .unwrap_err()
                .to_string(),
            "data.tls.crt: is missing"
        );
    }

    #[test]
    fn a_node_is_back_only_when_ready_and_not_being_deleted_and_ready_since_comes_from_the_condition()
     {
        assert_eq!(node_view(None), NodeView::Missing);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "1970-01-01T00:01:40Z"}],
                "nodeInfo": {"bootID": "3f1c", "machineID": "", "kernelVersion": "",
                    "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "",
                    "kubeProxyVersion": "", "operatingSystem": "linux",
                    "architecture": "amd64", "systemUUID": ""}}
        }))
        .unwrap();
        assert_eq!(
            node_view(Some(&node)),
            NodeView::Present {
                ready_since: Some(Duration::from_secs(100)),
                boot_id: Some("3f1c".into()),
            }
        );
        // Being deleted (held by a finalizer), a Ready Node on a new boot is not back.
        let mut terminating = node.clone();
        terminating.metadata.deletion_timestamp = terminating
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c[0].last_transition_time.clone());
        terminating.metadata.finalizers = Some(vec!["metal3.io/capbm".into()]);
        assert_eq!(node_view(Some(&terminating)), NodeView::Missing);
        assert!(node_is_ready(&node) && node_view(Some(&node)).is_ready());
        assert!(!node_is_ready(&terminating));
        let not_ready: Node = serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        }))
        .unwrap();
        assert_eq!(
            node_view(Some(&not_ready)),
            NodeView::Present {
                ready_since: None,
                boot_id: None,
            }
        );
        assert!(!node_is_ready(&not_ready));
    }

    #[test]
    fn control_plane_machines_are_known_by_their_role_label() {
        let labels = |role: &str| {
            BTreeMap::from([(
                "machine.openshift.io/cluster-api-machine-role".to_string(),
                role.to_string(),
            )])
        };
        assert!(machine_is_control_plane(&labels("master")));
        assert!(!machine_is_control_plane(&labels("worker")));
        assert!(!machine_is_control_plane(&BTreeMap::new()));
    }

    #[test]
    fn only_machine_set_workers_on_provisioned_hosts_are_reprovisionable() {
        let machine = |owner: Value, role: &str| -> ObjectMeta {
            serde_json::from_value(json!({"name": "m", "ownerReferences": owner,
                "labels": {MACHINE_ROLE: role}}))
            .unwrap()
        };
        let set = json!([{"apiVersion": "machine.openshift.io/v1beta1", "kind": "MachineSet",
            "name": "workers", "uid": "u", "controller": true}]);
        let host = bmh(json!({"spec": {"online": true}}));
        assert_eq!(
            reprovisionable(&machine(set.clone(), "worker"), Some(&host)),
            Ok(())
        );
        assert_eq!(
            reprovisionable(&machine(set.clone(), "worker"), None),
            Ok(())
        );
        let not_controller = json!([{"apiVersion": "machine.openshift.io/v1beta1",
            "kind": "MachineSet", "name": "workers", "uid": "u"}]);
        assert!(reprovisionable(&machine(not_controller, "worker"), Some(&host)).is_err());
        assert!(reprovisionable(&machine(json!([]), "worker"), Some(&host)).is_err());
        assert!(reprovisionable(&machine(set.clone(), "master"), Some(&host)).is_err());
        let external = bmh(json!({"spec": {"externallyProvisioned": true}}));
        assert_eq!(
            reprovisionable(&machine(set, "worker"), Some(&external)),
            Err("its BareMetalHost is externally provisioned".into())
        );
    }

    #[test]
    fn other_remediators_traces_are_read_from_annotations_and_objects() {
        let annotations: BTreeMap<String, String> = [
            ("reboot.metal3.io/capbm-requested-power-off", "{}"),
            ("reboot.metal3.io", ""),
            (
                "remediation.metal3.io/power-on-will-timeout-at",
                "2026-01-01T00:00:00Z",
            ),
            ("team", "db"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(reboot_keys(&annotations), ["capbm-requested-power-off"]);
        assert_eq!(
            legacy_marks(&annotations),
            ["remediation.metal3.io/power-on-will-timeout-at"]
        );
        let object = serde_json::json!({"metadata": {
            "name": "far-1", "namespace": "medik8s",
            "annotations": {"remediation.medik8s.io/node-name": "worker-0"},
            "ownerReferences": [
                {"kind": "NodeHealthCheck", "name": "nhc"},
                {"kind": "Machine", "name": "worker-0"},
            ],
        }});
        let read = foreign_object(ForeignKind::FenceAgentsRemediation, &object).unwrap();
        assert_eq!(read.node_annotation.as_deref(), Some("worker-0"));
        assert_eq!(read.owner_machines, ["worker-0"]);
        assert_eq!(
            (read.namespace.as_str(), read.name.as_str()),
            ("medik8s", "far-1")
        );
        let nameless = serde_json::json!({"metadata": {"annotations": 7}});
        assert_eq!(
            foreign_object(ForeignKind::SelfNodeRemediation, &nameless),
            None
        );
    }
}
