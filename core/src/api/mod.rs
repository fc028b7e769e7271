//! The Kubernetes objects baremend reads and writes: its own custom resources and the
//! well-known annotation names of the systems it works with.
//!
//! - [`Remediation`]: one per Machine and trigger; the audit trail and the state a restarted
//!   controller resumes from.
//! - [`RemediationPolicy`]: cluster-scoped knobs and safety gates, all defaulted.
//! - [`MachineRemediation`], [`NodeRemediation`] and their templates: the Cluster API and
//!   medik8s NodeHealthCheck remediation contracts (requests that trigger a `Remediation`).
//! - [`HostBmc`]: maps a Machine or Node without a BareMetalHost to its BMC.
//! - [`DriftRemediation`] and [`DriftPolicy`]: the config-drift coordinator's audit trail and
//!   knobs; [`mco`]: the Machine Config Operator's objects and annotations it reads.
//!
//! The YAML under `crds/` is generated from these types by `baremend crds`.

pub mod annotations;
pub mod bounds;
pub mod cached;
mod contracts;
mod drift;
mod host_bmc;
pub mod lean_node;
pub mod mco;
mod names;
mod policy;
mod remediation;
mod retention;
pub mod slim;

pub use contracts::{
    MachineRemediation, MachineRemediationSpec, MachineRemediationTemplate,
    MachineRemediationTemplateResource, MachineRemediationTemplateSpec, NodeRemediation,
    NodeRemediationSpec, NodeRemediationTemplate, NodeRemediationTemplateResource,
    NodeRemediationTemplateSpec, PolicyOverrides, RequestStatus, TriggerKind, TriggerRef,
};
pub use drift::{
    APPROVE_ANNOTATION, DriftAction, DriftKind, DriftMode, DriftPhase, DriftPolicy,
    DriftPolicySpec, DriftRemediation, DriftRemediationSpec, DriftRemediationStatus, DriftTimeouts,
};
pub use host_bmc::{
    CaBundleKind, CaBundleRef, DEFAULT_CA_BUNDLE_KEY, HostBmc, HostBmcSpec, HostBmcStatus,
};
pub use names::{
    ConditionType, DriftEventReason, DriftStep, EventReason, Gate, RemediationStep, Stored,
    StoredName,
};
pub use policy::{
    ControlPlaneGate, FenceStrategyName, NodeReleaseMode, PolicyStatus, PolicyTimeouts,
    RemediationMode, RemediationPolicy, RemediationPolicySpec, StormGate, TrustPolicy,
};
pub use remediation::{
    Condition, HOLDS_NOTHING, HostRef, NodeBackup, OUTCOME_LABEL, Remediation, RemediationPhase,
    RemediationSpec, RemediationStatus, SavedTaint, StepTime,
};
pub use retention::Retention;

/// The API group of baremend's own resources.
pub const GROUP: &str = "baremend.io";
