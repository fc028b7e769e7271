//! The health checks' requests as one view, whichever contract made them: a Cluster API (or
//! Machine API) `MachineRemediation` named after the Machine, or a medik8s NodeHealthCheck's
//! `NodeRemediation` named after the Machine's Node (in the template's namespace). Pure: objects
//! in, views and statuses out.
//!
//! Guarantees: a request the NodeHealthCheck marked timed out (`remediation.medik8s.io/nhc-timed-out`)
//! is no trigger any more (it asked the remediator to stop); the status written on a
//! `NodeRemediation` carries the contract's conditions (`Processing`, `Succeeded`,
//! `PermanentNodeDeletionExpected`). Caveats: the conditions' times are those of the status
//! change baremend saw, not of the step.

use std::time::SystemTime;

use kube_core::ResourceExt;

use crate::api::annotations::{MEDIK8S_NODE_NAME, NHC_TIMED_OUT};
use crate::api::{
    ConditionType, MachineRemediation, NodeReleaseMode, NodeRemediation, PolicyOverrides,
    Remediation, RemediationPhase, RequestStatus, TriggerKind, TriggerRef,
};
use crate::conditions::upsert_condition;

/// A request, whichever kind.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestView {
    /// `MachineRemediation` or `NodeRemediation`.
    pub kind: TriggerKind,
    /// Its name (the Machine's, or the Node's).
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its UID.
    pub uid: Option<String>,
    /// The policy fields it sets.
    pub overrides: PolicyOverrides,
    /// What baremend last wrote on it.
    pub status: RequestStatus,
    /// The NodeHealthCheck's escalation timeout passed on it.
    pub timed_out: bool,
    /// When it was created (time since the Unix epoch), if the server said.
    pub created: Option<std::time::Duration>,
}

impl RequestView {
    /// The trigger it is, as a Remediation records it.
    pub fn trigger(&self) -> TriggerRef {
        TriggerRef {
            kind: self.kind,
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: self.uid.clone(),
        }
    }

    /// Whether it is the request `trigger` records.
    pub fn is(&self, trigger: &TriggerRef) -> bool {
        trigger.kind == self.kind && trigger.uid == self.uid
    }
}

/// A `MachineRemediation` as a view.
pub fn machine_request(request: &MachineRemediation) -> RequestView {
    RequestView {
        kind: TriggerKind::MachineRemediation,
        name: request.name_any(),
        namespace: request.namespace().unwrap_or_default(),
        uid: request.uid(),
        overrides: request.spec.overrides.clone(),
        status: request.status.clone().unwrap_or_default(),
        timed_out: false,
        created: created(&request.metadata),
    }
}

/// The Node a `NodeRemediation` is for: the NodeHealthCheck's `remediation.medik8s.io/node-name`
/// annotation when there is one (a `generateName`d request is not named after its Node),
/// else the request's name (medik8s node-healthcheck-operator `GetNodeNameFromCR`).
pub fn node_of_request(request: &NodeRemediation) -> String {
    request
        .annotations()
        .get(MEDIK8S_NODE_NAME)
        .filter(|node| !node.is_empty())
        .cloned()
        .unwrap_or_else(|| request.name_any())
}

/// A `NodeRemediation` as a view.
pub fn node_request(request: &NodeRemediation) -> RequestView {
    RequestView {
        kind: TriggerKind::NodeRemediation,
        name: request.name_any(),
        namespace: request.namespace().unwrap_or_default(),
        uid: request.uid(),
        overrides: request.spec.overrides.clone(),
        status: request.status.clone().unwrap_or_default(),
        timed_out: request.annotations().contains_key(NHC_TIMED_OUT),
        created: created(&request.metadata),
    }
}

/// An object's creation time (since the Unix epoch).
fn created(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<std::time::Duration> {
    let at = metadata.creation_timestamp.as_ref()?;
    Some(std::time::Duration::from_millis(
        u64::try_from(at.0.as_millisecond()).unwrap_or(0),
    ))
}

/// The status to write on `request` for `remediation`, if it differs from what is there.
/// `release`: how the policy in force releases Nodes. Pure.
pub fn request_status(
    request: &RequestView,
    remediation: &Remediation,
    release: NodeReleaseMode,
    now: SystemTime,
) -> Option<RequestStatus> {
    let phase = remediation.phase();
    let mut wanted = RequestStatus {
        phase: Some(phase),
        remediation: Some(remediation.name_any()),
        conditions: request.status.conditions.clone(),
    };
    if request.kind == TriggerKind::NodeRemediation {
        nhc_conditions(
            &mut wanted.conditions,
            phase,
            request.timed_out,
            release,
            now,
        );
    }
    (wanted != request.status).then_some(wanted)
}

/// The medik8s contract's conditions for a remediation in `phase`. Pure.
fn nhc_conditions(
    conditions: &mut Vec<crate::api::Condition>,
    phase: RemediationPhase,
    timed_out: bool,
    release: NodeReleaseMode,
    now: SystemTime,
) {
    let ended = phase.is_terminal();
    // Completing after the timeout only once the host is proven off: before, the timeout
    // stops the remediation (the next pass withdraws the power-off), whatever the pass that
    // writes this status decided from an older view.
    let proven = matches!(
        phase,
        RemediationPhase::Fenced
            | RemediationPhase::NodeReleased
            | RemediationPhase::PoweringOn
            | RemediationPhase::Restoring
    );
    let (processing, reason, message) = match (ended, timed_out && proven) {
        // Accepted: the Remediation exists and waits for its start (a safety gate may hold
        // it; its Held condition says which).
        (false, false) if phase == RemediationPhase::Pending => (
            true,
            "RemediationPending",
            "baremend accepted the request; the start may wait for a safety gate (see the Remediation's Held condition)",
        ),
        (false, false) => (
            true,
            "RemediationStarted",
            "baremend is remediating the Node",
        ),
        (false, true) => (
            true,
            "CompletingAfterTimeout",
            "the health check timed out after the host was proven off: baremend powers it on and restores the Node",
        ),
        (true, _) => (false, "RemediationFinished", "the remediation ended"),
    };
    upsert_condition(
        conditions,
        ConditionType::Processing,
        processing,
        reason,
        message,
        now,
    );
    if ended {
        let (succeeded, reason, message) = match (phase, timed_out) {
            (RemediationPhase::Succeeded, _) => (true, "RemediationSucceeded", "the Node is back"),
            (RemediationPhase::Cancelled, true) => (
                false,
                "RemediationTimedOutByNhc",
                "the health check timed out before the host was proven off: the power-off was withdrawn, nothing destructive remains",
            ),
            (RemediationPhase::Cancelled, false) => (
                false,
                "RemediationCancelled",
                "the request went away before the host was proven off",
            ),
            _ => (
                false,
                "RemediationFailed",
                "the remediation failed: see the Remediation",
            ),
        };
        upsert_condition(
            conditions,
            ConditionType::Succeeded,
            succeeded,
            reason,
            message,
            now,
        );
    }
    let deletes = release == NodeReleaseMode::Delete && !ended;
    let (reason, message) = if deletes {
        (
            "NodeDeletedOnTheWay",
            "the Node is deleted once the host is proven off, and registers again after power-on",
        )
    } else {
        ("NodeKept", "no Node deletion is expected")
    };
    upsert_condition(
        conditions,
        ConditionType::PermanentNodeDeletionExpected,
        deletes,
        reason,
        message,
        now,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeRemediationSpec, RemediationSpec, RemediationStatus};

    fn node_request_view(timed_out: bool) -> RequestView {
        let mut request = NodeRemediation::new("worker-1", NodeRemediationSpec::default());
        request.metadata.namespace = Some("medik8s".into());
        request.metadata.uid = Some("u1".into());
        if timed_out {
            request.metadata.annotations = Some(
                [(
                    NHC_TIMED_OUT.to_string(),
                    "2026-11-24T10:00:00Z".to_string(),
                )]
                .into_iter()
                .collect(),
            );
        }
        node_request(&request)
    }

    fn remediation(phase: RemediationPhase) -> Remediation {
        let mut object = Remediation::new(
            "worker-1-1",
            RemediationSpec {
                machine_name: Some("worker-1".into()),
                host_bmc: None,
                machine_uid: None,
                node_name: Some("worker-1".into()),
                host: None,
                trigger: None,
            },
        );
        object.status = Some(RemediationStatus {
            phase,
            ..RemediationStatus::default()
        });
        object
    }

    fn condition(status: &RequestStatus, type_: ConditionType) -> &crate::api::Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_.as_str())
            .unwrap_or_else(|| panic!("no {type_} in {status:?}"))
    }

    #[test]
    fn a_node_request_reads_processing_then_succeeded_and_expects_the_node_deleted() {
        let now = SystemTime::UNIX_EPOCH;
        let mut request = node_request_view(false);
        let running = request_status(
            &request,
            &remediation(RemediationPhase::PoweringOff),
            NodeReleaseMode::Delete,
            now,
        )
        .unwrap();
        assert_eq!(
            condition(&running, ConditionType::Processing).status,
            "True"
        );
        assert_eq!(
            condition(&running, ConditionType::PermanentNodeDeletionExpected).status,
            "True"
        );
        assert!(!running.conditions.iter().any(|c| c.type_ == "Succeeded"));
        request.status = running;
        assert_eq!(
            request_status(
                &request,
                &remediation(RemediationPhase::PoweringOff),
                NodeReleaseMode::Delete,
                now
            ),
            None,
            "unchanged: nothing to write"
        );
        let done = request_status(
            &request,
            &remediation(RemediationPhase::Succeeded),
            NodeReleaseMode::Delete,
            now,
        )
        .unwrap();
        assert_eq!(condition(&done, ConditionType::Processing).status, "False");
        assert_eq!(condition(&done, ConditionType::Succeeded).status, "True");
        assert_eq!(
            condition(&done, ConditionType::PermanentNodeDeletionExpected).status,
            "False"
        );
    }

    #[test]
    fn an_out_of_service_release_expects_no_node_deletion() {
        let status = request_status(
            &node_request_view(false),
            &remediation(RemediationPhase::Fenced),
            NodeReleaseMode::OutOfService,
            SystemTime::UNIX_EPOCH,
        )
        .unwrap();
        assert_eq!(
            condition(&status, ConditionType::PermanentNodeDeletionExpected).status,
            "False"
        );
    }

    #[test]
    fn a_timeout_before_the_proof_says_so_and_one_after_it_completes() {
        let now = SystemTime::UNIX_EPOCH;
        let request = node_request_view(true);
        assert!(request.timed_out);
        let cancelled = request_status(
            &request,
            &remediation(RemediationPhase::Cancelled),
            NodeReleaseMode::Delete,
            now,
        )
        .unwrap();
        let succeeded = condition(&cancelled, ConditionType::Succeeded);
        assert_eq!(
            (succeeded.status.as_str(), succeeded.reason.as_str()),
            ("False", "RemediationTimedOutByNhc")
        );
        let completing = request_status(
            &request,
            &remediation(RemediationPhase::PoweringOn),
            NodeReleaseMode::Delete,
            now,
        )
        .unwrap();
        let processing = condition(&completing, ConditionType::Processing);
        assert_eq!(
            (processing.status.as_str(), processing.reason.as_str()),
            ("True", "CompletingAfterTimeout")
        );
        // Timed out while the power-off waits for its proof: not completing (found by the
        // chaos harness, seed 31: the pass that requested power-off wrote its status with the
        // timeout its cache had just received).
        for (phase, reason) in [
            (RemediationPhase::Pending, "RemediationPending"),
            (RemediationPhase::PoweringOff, "RemediationStarted"),
        ] {
            let status =
                request_status(&request, &remediation(phase), NodeReleaseMode::Delete, now)
                    .unwrap();
            let processing = condition(&status, ConditionType::Processing);
            assert_eq!(processing.reason, reason, "{phase:?}");
        }
    }

    #[test]
    fn a_node_request_names_its_node_by_the_annotation_else_by_its_name() {
        // medik8s node-healthcheck-operator `internal/controller/utils/utils.go`,
        // `GetNodeNameFromCR`, and `resources/manager.go`, `generateRemediationCR`.
        let mut generated = NodeRemediation::new("worker-1-x7k2p", NodeRemediationSpec::default());
        generated
            .annotations_mut()
            .insert(MEDIK8S_NODE_NAME.into(), "worker-1".into());
        assert_eq!(node_of_request(&generated), "worker-1");
        let named = NodeRemediation::new("worker-2", NodeRemediationSpec::default());
        assert_eq!(node_of_request(&named), "worker-2");
        let mut empty = NodeRemediation::new("worker-3", NodeRemediationSpec::default());
        empty
            .annotations_mut()
            .insert(MEDIK8S_NODE_NAME.into(), String::new());
        assert_eq!(node_of_request(&empty), "worker-3");
    }

    #[test]
    fn a_machine_request_gets_the_phase_only() {
        let request = machine_request(&MachineRemediation::new("worker-1", Default::default()));
        let status = request_status(
            &request,
            &remediation(RemediationPhase::Fenced),
            NodeReleaseMode::Delete,
            SystemTime::UNIX_EPOCH,
        )
        .unwrap();
        assert_eq!(status.phase, Some(RemediationPhase::Fenced));
        assert!(status.conditions.is_empty());
    }
}
