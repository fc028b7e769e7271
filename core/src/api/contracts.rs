//! The remediation contracts of other health checks: the template kind a health check names
//! and the request kind it creates from it, one pair per contract (docs/reference/contracts.md has the
//! upstream sources of every name).
//!
//! - Cluster API: a MachineHealthCheck's `spec.remediationTemplate` names a
//!   [`MachineRemediationTemplate`]; for an unhealthy Machine it creates a
//!   [`MachineRemediation`] named after the Machine, in its namespace, owned by it, from the
//!   template's `spec.template.spec`, and deletes it once the Machine is healthy again.
//! - medik8s NodeHealthCheck: `spec.remediationTemplate` (or one entry of
//!   `spec.escalatingRemediations`) names a [`NodeRemediationTemplate`]; for an unhealthy
//!   Node it creates a [`NodeRemediation`] named after the Node in the template's namespace.
//!
//! A request is a trigger like the Machine annotation: it starts one `Remediation` (the audit
//! trail, with the request recorded in its `spec.trigger`). Its spec may narrow the policy in
//! force for that remediation ([`PolicyOverrides`]); its status mirrors the Remediation.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds::{DNS_LABEL, DNS_LABEL_MAX, DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX, UID_MAX};
use super::policy::{FenceStrategyName, NodeReleaseMode};
use super::remediation::{Condition, RemediationPhase};

/// What asked for a remediation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum TriggerKind {
    /// The `host.metal3.io/external-remediation` annotation on the Machine (OpenShift's
    /// MachineHealthCheck with the `external-baremetal` strategy).
    MachineAnnotation,
    /// A `MachineRemediation` named after the Machine (a Cluster API MachineHealthCheck).
    MachineRemediation,
    /// A `NodeRemediation` named after the Machine's Node (a medik8s NodeHealthCheck).
    NodeRemediation,
}

impl TriggerKind {
    /// The name used in conditions, Events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::MachineAnnotation => "MachineAnnotation",
            TriggerKind::MachineRemediation => "MachineRemediation",
            TriggerKind::NodeRemediation => "NodeRemediation",
        }
    }
}

/// The trigger a `Remediation` answers, recorded when it starts: one request starts one
/// remediation, however long the health check keeps it after the remediation ended.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TriggerRef {
    /// What asked.
    pub kind: TriggerKind,
    /// The request's name (none for the annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_SUBDOMAIN_MAX), pattern(DNS_SUBDOMAIN))]
    pub name: Option<String>,
    /// The request's namespace, when it is not the Machine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = DNS_LABEL_MAX), pattern(DNS_LABEL))]
    pub namespace: Option<String>,
    /// The request's UID (none for the annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = UID_MAX))]
    pub uid: Option<String>,
}

/// The policy fields a health check may set for its own remediations, to narrow the policy
/// only (a subset of its strategies, deadlines and attempts no larger, the other node release
/// only where `spec.trust.requestMayChooseNodeRelease` allows it; anything wider refuses the
/// request: `remediation/decide/trust.rs`, `narrow`); unset fields keep the policy's values. The cluster-wide gates (storm, control plane, concurrency, pause) and the
/// reboot key are not here: they protect the whole cluster, not one health check's Machines.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyOverrides {
    /// Fencing strategies, tried in this order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 3))]
    pub strategies: Option<Vec<FenceStrategyName>>,
    /// Delete the Node, or keep it tainted out-of-service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_release: Option<NodeReleaseMode>,
    /// Seconds to wait for the proof of power-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub power_off_seconds: Option<u32>,
    /// Seconds to wait for the Node to be Ready again after power-on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub node_ready_seconds: Option<u32>,
    /// Whole power cycles before the remediation fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max_attempts: Option<u32>,
}

/// What baremend reports on a request: the phase of the `Remediation` it started, that
/// Remediation's name, and conditions (with the contract's names where it defines them).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestStatus {
    /// The phase of the Remediation this request started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RemediationPhase>,
    /// The Remediation this request started (same namespace as the Machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<String>,
    /// Conditions.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A Cluster API remediation request: created by a MachineHealthCheck from a
/// [`MachineRemediationTemplate`], named after the unhealthy Machine, in its namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "MachineRemediation",
    namespaced,
    status = "RequestStatus",
    shortname = "bmrr",
    category = "baremend",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Remediation","type":"string","jsonPath":".status.remediation"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MachineRemediationSpec {
    /// The policy fields this health check sets for its remediations.
    #[serde(flatten)]
    pub overrides: PolicyOverrides,
}

/// What a [`MachineRemediationTemplate`] holds: the spec of the requests made from it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct MachineRemediationTemplateResource {
    /// The spec every request made from the template gets.
    #[serde(default)]
    pub spec: MachineRemediationSpec,
}

/// The template a Cluster API MachineHealthCheck names in `spec.remediationTemplate`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "MachineRemediationTemplate",
    namespaced,
    shortname = "bmrt",
    category = "baremend"
)]
pub struct MachineRemediationTemplateSpec {
    /// The request's template.
    pub template: MachineRemediationTemplateResource,
}

/// A medik8s NodeHealthCheck remediation request: created from a [`NodeRemediationTemplate`],
/// named after the unhealthy Node, in the template's namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "NodeRemediation",
    namespaced,
    status = "RequestStatus",
    shortname = "bnrr",
    category = "baremend",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Remediation","type":"string","jsonPath":".status.remediation"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeRemediationSpec {
    /// The policy fields this health check sets for its remediations.
    #[serde(flatten)]
    pub overrides: PolicyOverrides,
}

/// What a [`NodeRemediationTemplate`] holds: the spec of the requests made from it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct NodeRemediationTemplateResource {
    /// The spec every request made from the template gets.
    #[serde(default)]
    pub spec: NodeRemediationSpec,
}

/// What baremend reports on a template: whether the health checks naming it can ask for
/// anything.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct TemplateStatus {
    /// Conditions (`NodeHealthCheckDisabled`).
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
}

/// The template a NodeHealthCheck names in `spec.remediationTemplate` or in an entry of
/// `spec.escalatingRemediations`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(crates(kube_core = "::kube_core"))]
#[kube(
    group = "baremend.io",
    version = "v1alpha1",
    kind = "NodeRemediationTemplate",
    namespaced,
    status = "TemplateStatus",
    shortname = "bnrt",
    category = "baremend",
    printcolumn = r#"{"name":"HealthCheckDisabled","type":"string","jsonPath":".status.conditions[?(@.type==\"NodeHealthCheckDisabled\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct NodeRemediationTemplateSpec {
    /// The request's template.
    pub template: NodeRemediationTemplateResource,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_reads_the_shape_health_checks_copy_from() {
        let template: MachineRemediationTemplateSpec = serde_json::from_value(
            serde_json::json!({"template": {"spec": {"maxAttempts": 2, "nodeRelease": "OutOfService"}}}),
        )
        .unwrap();
        assert_eq!(template.template.spec.overrides.max_attempts, Some(2));
        let nhc: NodeRemediationTemplateSpec =
            serde_json::from_value(serde_json::json!({"template": {"spec": {}}})).unwrap();
        assert_eq!(nhc.template.spec.overrides, PolicyOverrides::default());
    }
}
