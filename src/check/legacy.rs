//! The one setup that makes two remediators power-cycle the same host: an OpenShift
//! MachineHealthCheck that hands Machines over by the `host.metal3.io/external-remediation`
//! annotation (the `external-baremetal` strategy) on IPI bare metal, where the machine API's
//! bare-metal actuator (cluster-api-provider-baremetal) acts on that same annotation and has
//! no off switch.
//!
//! Expected flow: `check` lists the MachineHealthChecks and Machines; [`conflicts`] names each
//! health check that annotates Machines the actuator manages, and `check` fails with the fix.
//!
//! Guarantees: pure; a health check with `spec.remediationTemplate` never conflicts (the
//! machine API then creates the template's request and sets no annotation, whatever its
//! strategy annotation says).
//!
//! Caveats: "managed by the actuator" is read from the Machine's `metal3.io/BareMetalHost`
//! annotation, which the actuator itself keeps on every Machine it provisions: a Machine whose
//! host is named only in `spec.providerID` is not counted.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use crate::api::annotations::{EXTERNAL_REMEDIATION, MACHINE_HOST};
use crate::api::cached::{cached_kind, lenient};
use crate::api::mco::selector_matches;
use crate::api::slim;

/// The MachineHealthCheck annotation that selects a remediation strategy.
pub const STRATEGY: &str = "machine.openshift.io/remediation-strategy";
/// The strategy that annotates Machines for external remediation.
pub const EXTERNAL_BAREMETAL: &str = "external-baremetal";

/// What `check` reads of an OpenShift MachineHealthCheck.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MachineHealthCheck {
    /// Name, namespace and the strategy annotation.
    pub metadata: ObjectMeta,
    /// The selector and the template.
    #[serde(default, deserialize_with = "lenient")]
    pub spec: Option<MachineHealthCheckSpec>,
}
cached_kind!(
    MachineHealthCheck,
    "machine.openshift.io",
    "v1beta1",
    "MachineHealthCheck",
    "machinehealthchecks",
    NamespaceResourceScope
);

/// What `check` reads of a MachineHealthCheck's spec.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineHealthCheckSpec {
    /// The Machines it watches.
    #[serde(default)]
    pub selector: LabelSelector,
    /// The template whose requests it creates instead of annotating (its reference, unread).
    #[serde(default)]
    pub remediation_template: Option<serde_json::Value>,
}

/// Whether `check` annotates the Machines it selects for external remediation.
fn annotates(check: &MachineHealthCheck) -> bool {
    let strategy = check.annotations().get(STRATEGY).map(String::as_str);
    let template = check
        .spec
        .as_ref()
        .and_then(|s| s.remediation_template.as_ref());
    strategy == Some(EXTERNAL_BAREMETAL) && template.is_none()
}

/// One line per MachineHealthCheck that annotates Machines the legacy bare-metal actuator
/// manages, naming up to three of them and the fix.
pub fn conflicts(
    checks: &[Arc<MachineHealthCheck>],
    machines: &[Arc<slim::Machine>],
) -> Vec<String> {
    let empty = BTreeMap::new();
    checks
        .iter()
        .filter(|c| annotates(c))
        .filter_map(|check| {
            let selector = check.spec.as_ref().map(|s| &s.selector)?;
            let managed: Vec<String> = machines
                .iter()
                .filter(|m| m.namespace() == check.namespace())
                .filter(|m| m.annotations().contains_key(MACHINE_HOST))
                .filter(|m| {
                    selector_matches(selector, m.metadata.labels.as_ref().unwrap_or(&empty))
                })
                .map(|m| m.name_any())
                .collect();
            (!managed.is_empty()).then(|| describe(check, &managed))
        })
        .collect()
}

fn describe(check: &MachineHealthCheck, managed: &[String]) -> String {
    let shown: Vec<&str> = managed.iter().take(3).map(String::as_str).collect();
    let more = if managed.len() > 3 { ", …" } else { "" };
    format!(
        "MachineHealthCheck {}/{} hands {} Machine(s) that OpenShift's legacy bare-metal remediation manages ({}{more}) over by the {EXTERNAL_REMEDIATION} annotation: that remediation acts on the same annotation, cannot be switched off, and power-cycles each host beside baremend. Fix: name baremend's MachineRemediationTemplate in its spec.remediationTemplate and remove its {STRATEGY} annotation (deploy/overlays/openshift does; docs/guides/install.md#migrating-from-the-legacy-remediation)",
        check.namespace().unwrap_or_default(),
        check.name_any(),
        managed.len(),
        shown.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn check(annotations: Value, spec: Value) -> Arc<MachineHealthCheck> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "workers", "namespace": "openshift-machine-api", "annotations": annotations},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    fn machine(name: &str, role: &str, host: bool) -> Arc<slim::Machine> {
        let annotations = if host {
            json!({MACHINE_HOST: format!("openshift-machine-api/{name}")})
        } else {
            json!({})
        };
        Arc::new(
            serde_json::from_value(json!({"metadata": {
                "name": name, "namespace": "openshift-machine-api", "annotations": annotations,
                "labels": {"machine.openshift.io/cluster-api-machine-role": role},
            }}))
            .unwrap(),
        )
    }

    #[test]
    fn only_an_annotating_check_over_machines_the_actuator_manages_conflicts() {
        let workers = json!({"selector": {"matchLabels": {"machine.openshift.io/cluster-api-machine-role": "worker"}}});
        let template = json!({"selector": {}, "remediationTemplate": {"kind": "MachineRemediationTemplate", "name": "baremend"}});
        let strategy = json!({STRATEGY: EXTERNAL_BAREMETAL});
        let fleet = [
            machine("worker-0", "worker", true),
            machine("worker-1", "worker", true),
            machine("master-0", "master", true),
            machine("worker-9", "worker", false),
        ];
        let found = conflicts(&[check(strategy.clone(), workers.clone())], &fleet);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("hands 2 Machine(s)") && found[0].contains("(worker-0, worker-1)"),
            "{found:?}"
        );
        assert!(found[0].contains("spec.remediationTemplate"), "{found:?}");
        // A template wins over the strategy; without the strategy nothing is annotated; no
        // Machine the actuator manages, no conflict.
        for quiet in [
            check(strategy.clone(), template),
            check(json!({}), workers.clone()),
            check(json!({STRATEGY: "reboot"}), workers.clone()),
        ] {
            assert!(conflicts(&[quiet], &fleet).is_empty());
        }
        assert!(conflicts(&[check(strategy, workers)], &fleet[3..]).is_empty());
    }
}
