//! What asked for a Machine's remediation: the Machine annotation, or a Cluster API
//! `MachineRemediation` request named after the Machine. Observed fresh like the annotation,
//! fed to the same planner as `triggered`; the Remediation records which trigger it answers
//! (and the request's UID), and the request's status mirrors the Remediation.
//!
//! Expected flow: a MachineHealthCheck creates the request → a pass sees it in the cache,
//! confirms it on a fresh read and starts one Remediation recording it → each step's phase
//! is reported on the request → the health check deletes the request once the Machine is
//! healthy. Guarantees: one request starts one Remediation, however long it stays after the
//! remediation ended; a Machine with both the annotation and a request is remediated once
//! (both are one trigger of the same Machine); the request disappearing before the proof
//! cancels, after it the cycle completes, as for the annotation. Caveats: the request's
//! policy overrides are read from the request while it exists: a cycle completing after the
//! health check deleted it completes under the policy's own values.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use super::pass::Pass;
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::{
    MachineRemediation, Remediation, RemediationPolicySpec, RequestStatus, TriggerKind, TriggerRef,
};
use crate::{Error, Result};

/// The trigger a Machine carries now: its request if there is one (it has a status to report
/// to), else the annotation. Pure.
pub fn trigger_of(annotated: bool, request: Option<&MachineRemediation>) -> Option<TriggerRef> {
    match request {
        Some(request) => Some(TriggerRef {
            kind: TriggerKind::MachineRemediation,
            name: Some(request.name_any()),
            namespace: None,
            uid: request.uid(),
        }),
        None => annotated.then_some(TriggerRef {
            kind: TriggerKind::MachineAnnotation,
            name: None,
            namespace: None,
            uid: None,
        }),
    }
}

/// Whether `trigger` was already answered by one of `remediations` (a request, by its UID:
/// the health check keeps it until the Machine is healthy, which may be long after the
/// remediation ended). The annotation is never "answered": the remediation removes it. Pure.
pub fn answered(trigger: &TriggerRef, remediations: &[std::sync::Arc<Remediation>]) -> bool {
    trigger.uid.is_some()
        && remediations.iter().any(|r| {
            r.spec
                .trigger
                .as_ref()
                .is_some_and(|t| t.uid == trigger.uid)
        })
}

/// Whether the trigger a remediation answers is still there: the annotation, or the very
/// request it recorded (a request deleted and made again by the health check is another
/// one: the first is gone). Pure.
pub fn still_there(
    recorded: Option<&TriggerRef>,
    now: Option<&TriggerRef>,
    annotated: bool,
) -> bool {
    match recorded {
        Some(TriggerRef {
            kind: TriggerKind::MachineRemediation,
            uid,
            ..
        }) => {
            annotated
                || now.is_some_and(|t| t.kind == TriggerKind::MachineRemediation && t.uid == *uid)
        }
        _ => now.is_some(),
    }
}

/// The status to report on a request for `remediation`, if it differs from `current`. Pure.
pub fn request_status(remediation: &Remediation, current: &RequestStatus) -> Option<RequestStatus> {
    let phase = remediation
        .status
        .as_ref()
        .map(|s| s.phase)
        .unwrap_or_default();
    let wanted = RequestStatus {
        phase: Some(phase),
        remediation: Some(remediation.name_any()),
        conditions: current.conditions.clone(),
    };
    (wanted != *current).then_some(wanted)
}

impl Pass {
    /// The Machine's request in the cache: a `MachineRemediation` of its name and namespace,
    /// not being deleted.
    pub(super) fn cached_request(&self) -> Option<std::sync::Arc<MachineRemediation>> {
        self.context
            .machine_requests
            .get(&ObjectRef::new(&self.name).within(&self.namespace))
            .filter(|r| r.metadata.deletion_timestamp.is_none())
    }

    /// The trigger the Machine carries in the cache.
    pub(super) fn cached_trigger(&self) -> Option<TriggerRef> {
        let annotated = self
            .machine
            .annotations()
            .contains_key(EXTERNAL_REMEDIATION);
        trigger_of(annotated, self.cached_request().as_deref())
    }

    /// Whether the trigger `remediation` answers is still there, in the cache.
    pub(super) fn still_triggered(&self, remediation: &Remediation) -> bool {
        let annotated = self
            .machine
            .annotations()
            .contains_key(EXTERNAL_REMEDIATION);
        let now = trigger_of(annotated, self.cached_request().as_deref());
        still_there(remediation.spec.trigger.as_ref(), now.as_ref(), annotated)
    }

    /// Whether the Machine's request exists, read from the API server now.
    pub(super) async fn request_confirmed(&self) -> Result<bool> {
        let api: Api<MachineRemediation> =
            Api::namespaced(self.context.client.clone(), &self.namespace);
        let request = api
            .get_opt(&self.name)
            .await
            .map_err(Error::kube("GetMachineRemediation"))?;
        Ok(request.is_some_and(|r| r.metadata.deletion_timestamp.is_none()))
    }

    /// The policy in force for this Machine: the policy, narrowed by its request's spec.
    pub(super) fn policy_for_machine(
        &self,
        policy: RemediationPolicySpec,
    ) -> RemediationPolicySpec {
        match self.cached_request() {
            Some(request) => request.spec.overrides.apply(policy),
            None => policy,
        }
    }

    /// Reports the Remediation's phase on the request that started it, when it changed.
    pub(super) async fn report_to_request(&self, remediation: &Remediation) -> Result<()> {
        let Some(trigger) = &remediation.spec.trigger else {
            return Ok(());
        };
        if trigger.kind != TriggerKind::MachineRemediation {
            return Ok(());
        }
        let Some(request) = self.cached_request().filter(|r| r.uid() == trigger.uid) else {
            return Ok(());
        };
        let current = request.status.clone().unwrap_or_default();
        let Some(status) = request_status(remediation, &current) else {
            return Ok(());
        };
        self.context.leadership.ensure()?;
        let api: Api<MachineRemediation> =
            Api::namespaced(self.context.client.clone(), &self.namespace);
        let patch = serde_json::json!({"status": status});
        match api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            // Deleted by the health check meanwhile: nothing left to tell.
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(error) => Err(Error::kube("ReportToRequest")(error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::{RemediationPhase, RemediationSpec, RemediationStatus};

    fn request(uid: &str) -> MachineRemediation {
        let mut request = MachineRemediation::new("worker-1", Default::default());
        request.metadata.uid = Some(uid.into());
        request
    }

    fn remediation(trigger: Option<TriggerRef>, phase: RemediationPhase) -> Remediation {
        let mut object = Remediation::new(
            "worker-1-1",
            RemediationSpec {
                machine_name: "worker-1".into(),
                machine_uid: None,
                node_name: None,
                host: None,
                trigger,
            },
        );
        object.status = Some(RemediationStatus {
            phase,
            ..RemediationStatus::default()
        });
        object
    }

    #[test]
    fn a_request_is_the_trigger_even_with_the_annotation() {
        let both = trigger_of(true, Some(&request("u1"))).unwrap();
        assert_eq!(both.kind, TriggerKind::MachineRemediation);
        assert_eq!(both.uid.as_deref(), Some("u1"));
        let annotation = trigger_of(true, None).unwrap();
        assert_eq!(annotation.kind, TriggerKind::MachineAnnotation);
        assert_eq!(trigger_of(false, None), None);
    }

    #[test]
    fn a_request_is_answered_once_and_a_new_one_is_not() {
        let first = trigger_of(false, Some(&request("u1"))).unwrap();
        let done = Arc::new(remediation(
            Some(first.clone()),
            RemediationPhase::Succeeded,
        ));
        assert!(answered(&first, std::slice::from_ref(&done)));
        let second = trigger_of(false, Some(&request("u2"))).unwrap();
        assert!(!answered(&second, std::slice::from_ref(&done)));
        let annotation = trigger_of(true, None).unwrap();
        assert!(!answered(&annotation, &[done]));
    }

    #[test]
    fn a_request_made_again_is_another_trigger_and_the_first_is_gone() {
        let first = trigger_of(false, Some(&request("u1")));
        let again = trigger_of(false, Some(&request("u2")));
        assert!(still_there(first.as_ref(), first.as_ref(), false));
        assert!(!still_there(first.as_ref(), again.as_ref(), false));
        assert!(!still_there(first.as_ref(), None, false));
        // The annotation set beside the request keeps the Machine triggered.
        assert!(still_there(first.as_ref(), None, true));
        let annotation = trigger_of(true, None);
        assert!(still_there(annotation.as_ref(), annotation.as_ref(), true));
        assert!(!still_there(annotation.as_ref(), None, false));
    }

    #[test]
    fn the_request_status_follows_the_phase_and_is_written_only_on_change() {
        let object = remediation(None, RemediationPhase::PoweringOff);
        let first = request_status(&object, &RequestStatus::default()).unwrap();
        assert_eq!(first.phase, Some(RemediationPhase::PoweringOff));
        assert_eq!(first.remediation.as_deref(), Some("worker-1-1"));
        assert_eq!(request_status(&object, &first), None);
        let later = remediation(None, RemediationPhase::Succeeded);
        assert_eq!(
            request_status(&later, &first).unwrap().phase,
            Some(RemediationPhase::Succeeded)
        );
    }
}
