//! Where a host's BMC is, read from the caches: the one its BareMetalHost names (the
//! operator's, as the ledger keys it) and, for direct fencing, a `HostBmc` naming the Machine
//! or Node, else a detached BareMetalHost's own.
//!
//! Guarantees: a host its BareMetal Operator manages is never located for direct power; a
//! `HostBmc` is believed only in a namespace the policy trusts, and alone. Caveats: these are
//! cached reads; a start's gates and the power-off read the host fresh before acting.

use std::sync::Arc;

use baremend_drivers::BmcAddress;
use kube::ResourceExt;

use crate::api::slim;
use crate::api::{HostBmc, Remediation};
use crate::remediation::decide::observe::{
    BmcRef, BmcTls, CaBundle, HostRef, bare_metal_host_bmc, bare_metal_host_view,
};
use crate::remediation::pass::Pass;
use crate::remediation::pass::subject::Subject;

/// Where a Machine's BMC is for direct access, and how to check its certificate: a HostBmc
/// naming the Machine (or its Node), else a *detached* BareMetalHost's `spec.bmc` (with the
/// CA bundle its `baremend.io/bmc-ca-bundle` annotation names). A host its BareMetal Operator
/// manages is refused either way: the operator would power it back on (a HostBmc does not
/// make a managed host safe to power directly).
///
/// A HostBmc is used only in a namespace `trusted` lists (the policy's
/// `trust.hostBmcNamespaces`): whoever may write a HostBmc chooses where its Secret's
/// credentials are sent, so only an administrator's namespaces are believed. Two HostBmcs for
/// one Machine are an error naming both, never a choice.
pub fn locate_bmc(
    host_bmcs: &[Arc<HostBmc>],
    trusted: &[String],
    (namespace, machine, node): (&str, &str, Option<&str>),
    host: Option<(&HostRef, Option<&slim::BareMetalHost>)>,
) -> std::result::Result<BmcRef, NoBmc> {
    // The reboot key plays no part in whether the operator let go of the host.
    if let Some((host_ref, Some(host))) = host
        && !bare_metal_host_view(host, "").is_detached()
    {
        return Err(NoBmc::Managed(format!(
            "BareMetalHost {host_ref} is managed by the BareMetal Operator, which would power it back on; direct BMC fencing needs it detached"
        )));
    }
    let mut mappings = host_bmcs.iter().filter(|m| {
        m.namespace().as_deref() == Some(namespace)
            && (m.spec.machine_name.as_deref() == Some(machine)
                || (m.spec.node_name.is_some() && m.spec.node_name.as_deref() == node))
    });
    let mapping = mappings.next();
    if let (Some(first), Some(second)) = (mapping, mappings.next()) {
        return Err(NoBmc::Unusable(format!(
            "HostBmcs {namespace}/{} and {namespace}/{} both name {machine}: keep one (neither is used)",
            first.name_any(),
            second.name_any()
        )));
    }
    if let Some(mapping) = mapping
        && !trusted.iter().any(|t| t == namespace)
    {
        return Err(NoBmc::Unusable(format!(
            "HostBmc {namespace}/{} is not used: namespace {namespace} is not in the policy's trust.hostBmcNamespaces (whoever writes a HostBmc chooses where its Secret's credentials go; list the namespace if only administrators write there)",
            mapping.name_any()
        )));
    }
    match (mapping, host) {
        (Some(mapping), _) => {
            let spec = &mapping.spec;
            let ca_bundle = match (&spec.ca_bundle, &spec.ca_bundle_ref) {
                (Some(_), Some(_)) => {
                    return Err(NoBmc::Unusable(format!(
                        "HostBmc {namespace}/{}: caBundle and caBundleRef both name a CA bundle: keep one",
                        mapping.name_any()
                    )));
                }
                (Some(pem), None) => Some(CaBundle::Inline(pem.clone())),
                (None, Some(named)) => Some(CaBundle::Named(named.clone())),
                (None, None) => None,
            };
            let tls = BmcTls::new(ca_bundle, spec.insecure_skip_verify).map_err(|e| {
                NoBmc::Unusable(format!("HostBmc {namespace}/{}: {e}", mapping.name_any()))
            })?;
            Ok(BmcRef {
                address: spec.address.clone(),
                credentials_name: spec.credentials_name.clone(),
                namespace: Some(namespace.to_owned()),
                tls,
            })
        }
        (None, Some((host_ref, Some(host)))) => bare_metal_host_bmc(host)
            .map_err(|e| NoBmc::Unusable(format!("BareMetalHost {host_ref}: {e}"))),
        _ => Err(NoBmc::NotNamed),
    }
}

/// Why a Machine has no BMC to fence directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoBmc {
    /// Its BareMetalHost is managed by the BareMetal Operator (which would power it back on).
    Managed(String),
    /// The HostBmc or BareMetalHost naming it is unusable.
    Unusable(String),
    /// Nothing names one.
    NotNamed,
}

impl std::fmt::Display for NoBmc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoBmc::Managed(why) | NoBmc::Unusable(why) => f.write_str(why),
            NoBmc::NotNamed => f.write_str("no HostBmc and no BareMetalHost names its BMC"),
        }
    }
}

/// The pass's reads of where its host's BMC is. Made by `BmcLocator::of(pass)` where needed,
/// so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct BmcLocator<'p> {
    pass: &'p Pass,
}

impl<'p> BmcLocator<'p> {
    /// The BmcLocator of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        BmcLocator { pass }
    }

    /// The address of the BMC the cached BareMetalHost names, as the ledger keys it.
    pub(in crate::remediation) fn operator_bmc_address(
        self,
        remediation: &Remediation,
    ) -> Option<BmcAddress> {
        let Some((_, Some(host))) = self.pass.host(remediation) else {
            return None;
        };
        bare_metal_host_bmc(&host)
            .ok()
            .and_then(|bmc| BmcAddress::parse(&bmc.address).ok())
    }

    /// Where the BMC for direct fencing is (see [`locate_bmc`]).
    pub(in crate::remediation) fn locate_direct_bmc(
        self,
        remediation: &Remediation,
    ) -> std::result::Result<BmcRef, NoBmc> {
        let host = self.pass.host(remediation);
        // A Node subject's BMC is its own HostBmc's, never another naming the Node (one that
        // appeared mid-cycle contests it, it does not replace it).
        let mappings = match &self.pass.subject {
            Subject::Node(mapping) => vec![mapping.clone()],
            Subject::Machine(_) => self.pass.context.caches.host_bmcs.state(),
        };
        locate_bmc(
            &mappings,
            &self.pass.context.policy().trust.host_bmc_namespaces,
            (
                &self.pass.namespace,
                &self.pass.name,
                remediation.spec.node_name.as_deref(),
            ),
            host.as_ref().map(|(r, h)| (r, h.as_deref())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::annotations::BMH_DETACHED;
    use serde_json::{Value, json};

    fn mapping() -> Arc<HostBmc> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "baremend.io/v1alpha1",
                "kind": "HostBmc",
                "metadata": {"name": "w0", "namespace": "m"},
                "spec": {
                    "machineName": "w0",
                    "address": "redfish://bmc-w0",
                    "credentialsName": "bmc-w0",
                },
            }))
            .unwrap(),
        )
    }

    fn host(detached: bool) -> slim::BareMetalHost {
        let annotations = if detached {
            json!({BMH_DETACHED: ""})
        } else {
            json!({})
        };
        serde_json::from_value(json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": "h0", "namespace": "m", "annotations": annotations},
            "spec": {"bmc": {"address": "redfish://bmc-h0", "credentialsName": "bmc-h0"}},
        }))
        .unwrap()
    }

    #[test]
    fn a_host_its_operator_manages_is_never_powered_directly_even_with_a_host_bmc() {
        let host_ref = HostRef {
            namespace: "m".into(),
            name: "h0".into(),
        };
        let managed = host(false);
        let refused = locate_bmc(
            &[mapping()],
            &trusted(),
            ("m", "w0", None),
            Some((&host_ref, Some(&managed))),
        )
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("managed by the BareMetal Operator"),
            "{refused}"
        );
        let detached = host(true);
        let bmc = locate_bmc(
            &[mapping()],
            &trusted(),
            ("m", "w0", None),
            Some((&host_ref, Some(&detached))),
        )
        .unwrap();
        assert_eq!(
            bmc.address, "redfish://bmc-w0",
            "the HostBmc wins over spec.bmc"
        );
        let bmc = locate_bmc(
            &[],
            &trusted(),
            ("m", "w0", None),
            Some((&host_ref, Some(&detached))),
        )
        .unwrap();
        assert_eq!(bmc.address, "redfish://bmc-h0");
        // Without a BareMetalHost (no operator), the HostBmc alone names the BMC.
        let bmc = locate_bmc(&[mapping()], &trusted(), ("m", "w0", None), None).unwrap();
        assert_eq!(bmc.address, "redfish://bmc-w0");
    }

    /// The namespace of the tests' HostBmcs, trusted.
    fn trusted() -> Vec<String> {
        vec!["m".into()]
    }

    #[test]
    fn a_host_bmc_is_used_only_from_a_trusted_namespace_and_alone() {
        let refused = locate_bmc(&[mapping()], &["baremend".into()], ("m", "w0", None), None)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("not in the policy's trust.hostBmcNamespaces"),
            "{refused}"
        );
        let mut second = (*mapping()).clone();
        second.metadata.name = Some("w0-again".into());
        let both = locate_bmc(
            &[mapping(), Arc::new(second)],
            &trusted(),
            ("m", "w0", None),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(both.contains("m/w0 and m/w0-again both name w0"), "{both}");
    }

    fn mapping_with(tls: Value) -> Arc<HostBmc> {
        let mut value = serde_json::to_value(&*mapping()).unwrap();
        for (key, field) in tls.as_object().unwrap() {
            value["spec"][key] = field.clone();
        }
        Arc::new(serde_json::from_value(value).unwrap())
    }

    #[test]
    fn a_host_bmc_names_one_ca_bundle_and_never_with_verification_off() {
        let named = locate_bmc(
            &[mapping_with(
                json!({"caBundleRef": {"kind": "ConfigMap", "name": "bmc-ca"}}),
            )],
            &trusted(),
            ("m", "w0", None),
            None,
        )
        .unwrap();
        assert_eq!(
            named.tls.ca_bundle,
            Some(CaBundle::Named("ConfigMap/bmc-ca/ca.crt".parse().unwrap()))
        );
        assert!(!named.tls.insecure);
        for (tls, reason) in [
            (
                json!({"caBundle": "PEM", "caBundleRef": {"kind": "Secret", "name": "s"}}),
                "keep one",
            ),
            (
                json!({"insecureSkipVerify": true, "caBundleRef": {"kind": "Secret", "name": "s"}}),
                "choose one",
            ),
            (
                json!({"insecureSkipVerify": true, "caBundle": "PEM"}),
                "choose one",
            ),
        ] {
            let error = locate_bmc(&[mapping_with(tls)], &trusted(), ("m", "w0", None), None)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("HostBmc m/w0: "), "{error}");
            assert!(error.contains(reason), "{error}");
        }
    }
}
