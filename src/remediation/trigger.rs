//! What asked for a Machine's remediation: the Machine annotation, a `MachineRemediation`
//! named after the Machine (a Machine API or Cluster API MachineHealthCheck), or a
//! `NodeRemediation` named after its Node (a medik8s NodeHealthCheck). Observed like the
//! annotation and fed to the same planner as `triggered`; the Remediation records which
//! trigger it answers (with the request's UID), and the request's status mirrors it
//! (`requests`).
//!
//! Expected flow: a health check creates the request → a pass sees it in the cache, confirms
//! it on a fresh read and starts one Remediation recording it → each step is reported on the
//! request → the health check deletes the request once the Machine or Node is healthy.
//! Guarantees: one request starts one Remediation, however long it stays after the
//! remediation ended; a Machine asked for in several ways is remediated once (they are one
//! trigger of the one Machine); the recorded request disappearing, being made again, or being
//! timed out by a NodeHealthCheck before the proof cancels, after it the cycle completes, as
//! for the annotation. Caveats: a request's policy overrides are read from the request while
//! it exists: a cycle completing after the health check deleted it completes under the
//! policy's own values.

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use super::pass::Pass;
use super::requests::{RequestView, machine_request, node_request, request_status};
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::{
    MachineRemediation, NodeRemediation, Remediation, RemediationPolicySpec, TriggerKind,
    TriggerRef,
};
use crate::{Error, Result};

/// The trigger a Machine carries now: its request if there is one it may act on (it has a
/// status to report to; a request the NodeHealthCheck timed out asks to stop, not to start),
/// else the annotation. Pure.
pub fn trigger_of(annotated: bool, request: Option<&RequestView>) -> Option<TriggerRef> {
    match request.filter(|r| !r.timed_out) {
        Some(request) => Some(request.trigger()),
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
/// one, and one the NodeHealthCheck timed out asks to stop: either way the first is gone).
/// Pure.
pub fn still_there(
    recorded: Option<&TriggerRef>,
    now: Option<&TriggerRef>,
    annotated: bool,
) -> bool {
    match recorded {
        Some(TriggerRef { kind, uid, .. }) if *kind != TriggerKind::MachineAnnotation => {
            annotated || now.is_some_and(|t| t.kind == *kind && t.uid == *uid)
        }
        _ => now.is_some(),
    }
}

impl Pass {
    /// The Machine's request in the cache, not being deleted: a `MachineRemediation` of its
    /// name and namespace, else a `NodeRemediation` named after its Node (one not timed out
    /// first).
    pub(super) fn cached_request(&self) -> Option<RequestView> {
        let machine = self
            .context
            .machine_requests
            .get(&ObjectRef::new(&self.name).within(&self.namespace))
            .filter(|r| r.metadata.deletion_timestamp.is_none());
        if let Some(request) = machine {
            return Some(machine_request(&request));
        }
        let node = super::observe::machine_node(&self.machine_json())?;
        let mut requests: Vec<RequestView> = self
            .context
            .node_requests
            .state()
            .iter()
            .filter(|r| r.name_any() == node && r.metadata.deletion_timestamp.is_none())
            .map(|r| node_request(r))
            .collect();
        requests.sort_by(|a, b| (a.timed_out, &a.namespace).cmp(&(b.timed_out, &b.namespace)));
        requests.into_iter().next()
    }

    /// The trigger the Machine carries in the cache.
    pub(super) fn cached_trigger(&self) -> Option<TriggerRef> {
        trigger_of(self.annotated(), self.cached_request().as_ref())
    }

    fn annotated(&self) -> bool {
        self.machine
            .annotations()
            .contains_key(EXTERNAL_REMEDIATION)
    }

    /// Whether the trigger `remediation` answers is still there, in the cache.
    pub(super) fn still_triggered(&self, remediation: &Remediation) -> bool {
        let annotated = self.annotated();
        let now = trigger_of(annotated, self.cached_request().as_ref());
        still_there(remediation.spec.trigger.as_ref(), now.as_ref(), annotated)
    }

    /// Whether the Machine's request exists (and, for a NodeHealthCheck's, is not timed
    /// out), read from the API server now.
    pub(super) async fn request_confirmed(&self) -> Result<bool> {
        let machines: Api<MachineRemediation> =
            Api::namespaced(self.context.client.clone(), &self.namespace);
        let machine = machines
            .get_opt(&self.name)
            .await
            .map_err(Error::kube("GetMachineRemediation"))?;
        if machine.is_some_and(|r| r.metadata.deletion_timestamp.is_none()) {
            return Ok(true);
        }
        let Some(cached) = self
            .cached_request()
            .filter(|r| r.kind == TriggerKind::NodeRemediation)
        else {
            return Ok(false);
        };
        let nodes: Api<NodeRemediation> =
            Api::namespaced(self.context.client.clone(), &cached.namespace);
        let node = nodes
            .get_opt(&cached.name)
            .await
            .map_err(Error::kube("GetNodeRemediation"))?;
        Ok(node
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .is_some_and(|r| !node_request(&r).timed_out))
    }

    /// The policy in force for this Machine: the policy, narrowed by its request's spec.
    pub(super) fn policy_for_machine(
        &self,
        policy: RemediationPolicySpec,
    ) -> RemediationPolicySpec {
        match self.cached_request().filter(|r| !r.timed_out) {
            Some(request) => request.overrides.apply(policy),
            None => policy,
        }
    }

    /// The request `trigger` records, in the cache (also when timed out: it is told why the
    /// remediation stopped).
    fn recorded_request(&self, trigger: &TriggerRef) -> Option<RequestView> {
        let name = trigger.name.as_deref()?;
        let namespace = trigger.namespace.as_deref().unwrap_or(&self.namespace);
        let view = match trigger.kind {
            TriggerKind::MachineAnnotation => return None,
            TriggerKind::MachineRemediation => self
                .context
                .machine_requests
                .get(&ObjectRef::new(name).within(namespace))
                .map(|r| machine_request(&r)),
            TriggerKind::NodeRemediation => self
                .context
                .node_requests
                .get(&ObjectRef::new(name).within(namespace))
                .map(|r| node_request(&r)),
        };
        view.filter(|v| v.is(trigger))
    }

    /// Reports the Remediation on the request that started it, when that changes its status.
    pub(super) async fn report_to_request(&self, remediation: &Remediation) -> Result<()> {
        let Some(trigger) = &remediation.spec.trigger else {
            return Ok(());
        };
        let Some(request) = self.recorded_request(trigger) else {
            return Ok(());
        };
        let now = self.context.clock.now();
        let release = self.policy.node_release;
        let Some(status) = request_status(&request, remediation, release, now) else {
            return Ok(());
        };
        self.context.leadership.ensure()?;
        let patch = Patch::Merge(serde_json::json!({"status": status}));
        let params = PatchParams::default();
        let client = self.context.client.clone();
        let result = match request.kind {
            TriggerKind::NodeRemediation => {
                Api::<NodeRemediation>::namespaced(client, &request.namespace)
                    .patch_status(&request.name, &params, &patch)
                    .await
                    .map(|_| ())
            }
            _ => Api::<MachineRemediation>::namespaced(client, &request.namespace)
                .patch_status(&request.name, &params, &patch)
                .await
                .map(|_| ()),
        };
        match result {
            Ok(()) => Ok(()),
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

    fn request(uid: &str) -> RequestView {
        let mut request = MachineRemediation::new("worker-1", Default::default());
        request.metadata.uid = Some(uid.into());
        machine_request(&request)
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
    fn a_timed_out_request_is_no_trigger_and_stops_the_one_it_started() {
        let mut timed_out = request("u1");
        timed_out.kind = TriggerKind::NodeRemediation;
        let recorded = timed_out.trigger();
        timed_out.timed_out = true;
        assert_eq!(trigger_of(false, Some(&timed_out)), None);
        let now = trigger_of(false, Some(&timed_out));
        assert!(!still_there(Some(&recorded), now.as_ref(), false));
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
}
