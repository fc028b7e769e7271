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
//! for the annotation; a request baremend refuses (`admission.rs`: an untrusted namespace, a
//! false owner, a spec wider than the policy) is no trigger at all. Caveats: a request's policy overrides are read from the request while
//! it exists: a cycle completing after the health check deleted it completes under the
//! policy's own values.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use super::admission::{Verdict, tell_request};
use super::{RequestView, machine_request, node_of_request, node_request, request_status};
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::{
    MachineRemediation, NodeRemediation, Remediation, RemediationPolicySpec, TriggerKind,
    TriggerRef,
};
use crate::leader::Writes;
use crate::remediation::decide::pass::Trigger;
use crate::remediation::decide::trust::narrow;
use crate::remediation::pass::Pass;
use crate::remediation::pass::context::Context;
use crate::remediation::pass::subject::{Subject, machineless_strategies};
use crate::runtime::read::GetPresent;
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

/// Whether `trigger` was already answered by one of the Machine's `remediations`: a request
/// one recorded (by its UID: the health check keeps it until the Machine is healthy, which may
/// be long after the remediation ended), or one that already existed (`created`) when one
/// started (a second health check's request for the same Machine: both were answered by that
/// one remediation). A request named as the one a remediation recorded, with another UID,
/// was made again after that one was gone: it is new to that remediation, whatever the
/// creation times say (they have a one-second resolution, and a health check makes a deleted
/// request again within its period). The annotation is never "answered": the remediation
/// removes it. Pure.
pub fn answered(
    trigger: &TriggerRef,
    created: Option<std::time::Duration>,
    remediations: &[std::sync::Arc<Remediation>],
) -> bool {
    if trigger.uid.is_none() {
        return false;
    }
    remediations.iter().any(|r| {
        let recorded = r.spec.trigger.as_ref();
        if recorded.is_some_and(|t| t.uid == trigger.uid) {
            return true;
        }
        let made_again = recorded.is_some_and(|t| {
            (&t.kind, &t.name, &t.namespace) == (&trigger.kind, &trigger.name, &trigger.namespace)
        });
        let existed = created
            .zip(crate::remediation::decide::state::created_at(r))
            .is_some_and(|(request, remediation)| request <= remediation);
        existed && !made_again
    })
}

/// Whether the Machine is still asked for, for the remediation that recorded `recorded`:
/// the annotation, the very request it recorded (a request deleted and made again by its
/// health check is another one, and one the NodeHealthCheck timed out asks to stop: either
/// way the first is gone), or another contract's request (`present`: the requests there now,
/// none timed out). Pure.
pub fn still_there(recorded: Option<&TriggerRef>, present: &[TriggerRef], annotated: bool) -> bool {
    match recorded {
        Some(TriggerRef { kind, uid, .. }) if *kind != TriggerKind::MachineAnnotation => {
            annotated || present.iter().any(|t| t.kind != *kind || t.uid == *uid)
        }
        _ => annotated || !present.is_empty(),
    }
}

/// A pass over `subject` under the policy in force for it: the controller's, narrowed by
/// the health check's request that asks for it (its template's spec), and for a Node without
/// a Machine, to the strategies that need none.
pub(crate) fn pass_for(subject: Subject, context: Arc<Context>) -> Pass {
    let mut pass = Pass::new(subject, context);
    pass.policy = Triggers::of(&pass).policy_for_machine(pass.policy.clone());
    if pass.subject.machine().is_none() {
        pass.policy.strategies = machineless_strategies(&pass.policy.strategies);
    }
    pass
}

/// The pass's view of what asks for a remediation: the annotation and the health checks'
/// requests. Made by `Triggers::of(pass)` where needed, so that a call names the file it goes
/// to.
#[derive(Clone, Copy)]
pub(crate) struct Triggers<'p> {
    pass: &'p Pass,
}

impl<'p> Triggers<'p> {
    /// The Triggers of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        Triggers { pass }
    }

    /// The Machine's request in the cache, not being deleted: a `MachineRemediation` of its
    /// name and namespace, else a `NodeRemediation` named after its Node (one not timed out
    /// first).
    pub(in crate::remediation) fn cached_request(self) -> Option<RequestView> {
        self.cached_requests().into_iter().next()
    }

    /// The Machine's requests in the cache, not being deleted, that baremend accepts (see
    /// `admission.rs`; a refused one is no trigger and changes nothing), the one to record
    /// first: its `MachineRemediation`, then the `NodeRemediation`s named after its Node
    /// (those not timed out first).
    fn cached_requests(self) -> Vec<RequestView> {
        let policy = self.pass.context.policy();
        let machine = self
            .machine_request_of_subject()
            .filter(|r| {
                matches!(
                    self.pass.context.machine_request_verdict(r, &policy),
                    Verdict::Accepted(_)
                )
            })
            .map(|r| machine_request(&r));
        let mut requests: Vec<RequestView> = self
            .node_requests_of_subject()
            .into_iter()
            .filter(|r| {
                matches!(
                    self.pass.context.node_request_verdict(r, &policy),
                    Verdict::Accepted(_)
                )
            })
            .map(|r| node_request(&r))
            .collect();
        requests.sort_by(|a, b| (a.timed_out, &a.namespace).cmp(&(b.timed_out, &b.namespace)));
        machine.into_iter().chain(requests).collect()
    }

    /// The `MachineRemediation` of the subject's name in its namespace, in the cache, not
    /// being deleted, whatever baremend makes of it (a Node subject has no Machine one could
    /// be named after).
    pub(in crate::remediation) fn machine_request_of_subject(
        self,
    ) -> Option<Arc<MachineRemediation>> {
        self.pass.subject.machine()?;
        self.pass
            .context
            .caches
            .machine_requests
            .get(&ObjectRef::new(&self.pass.name).within(&self.pass.namespace))
            .filter(|r| r.metadata.deletion_timestamp.is_none())
    }

    /// The `NodeRemediation`s naming the subject's Node, in the cache, not being deleted,
    /// whatever baremend makes of them. None for a Machine whose Node lives in a workload
    /// cluster: a NodeHealthCheck watches the Nodes of the cluster it runs in, so its request
    /// names a Node here, never one of the same name elsewhere.
    pub(in crate::remediation) fn node_requests_of_subject(self) -> Vec<Arc<NodeRemediation>> {
        let Some(node) = self.pass.subject_node() else {
            return Vec::new();
        };
        if self.pass.machine_node_cluster().is_some() {
            return Vec::new();
        }
        self.pass
            .context
            .caches
            .node_requests
            .state()
            .into_iter()
            .filter(|r| node_of_request(r) == node && r.metadata.deletion_timestamp.is_none())
            .collect()
    }

    /// The trigger the Machine carries in the cache.
    pub(in crate::remediation) fn cached_trigger(self) -> Option<TriggerRef> {
        trigger_of(self.annotated(), self.cached_request().as_ref())
    }

    fn annotated(self) -> bool {
        self.pass
            .subject
            .machine_annotations()
            .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION))
    }

    /// Whether the Machine is still asked for, for `remediation`, in the cache.
    pub(in crate::remediation) fn still_triggered(self, remediation: &Remediation) -> bool {
        let present: Vec<TriggerRef> = self
            .cached_requests()
            .iter()
            .filter(|r| !r.timed_out)
            .map(RequestView::trigger)
            .collect();
        still_there(
            remediation.spec.trigger.as_ref(),
            &present,
            self.annotated(),
        )
    }

    /// Whether the Machine's request exists (and, for a NodeHealthCheck's, is not timed
    /// out), read from the API server now: the very request the cache shows (the start
    /// records that one; a request of its name with another UID was made again since, and the
    /// cache will show it soon).
    pub(in crate::remediation) async fn request_confirmed(self) -> Result<bool> {
        let cached = self.cached_request();
        // A Node subject has no Machine a MachineRemediation could be named after.
        if self.pass.subject.machine().is_some() {
            let machines: Api<MachineRemediation> =
                Api::namespaced(self.pass.context.clients.kube.clone(), &self.pass.namespace);
            let machine = machines
                .get_present(&self.pass.name)
                .await
                .map_err(Error::kube("GetMachineRemediation"))?;
            if let Some(fresh) = machine.filter(|r| r.metadata.deletion_timestamp.is_none()) {
                let stale = cached.as_ref().is_some_and(|c| {
                    c.kind == TriggerKind::MachineRemediation && c.uid != fresh.metadata.uid
                });
                return Ok(!stale);
            }
        }
        let Some(cached) = cached.filter(|r| r.kind == TriggerKind::NodeRemediation) else {
            return Ok(false);
        };
        let nodes: Api<NodeRemediation> =
            Api::namespaced(self.pass.context.clients.kube.clone(), &cached.namespace);
        let node = nodes
            .get_present(&cached.name)
            .await
            .map_err(Error::kube("GetNodeRemediation"))?;
        let Some(fresh) = node.filter(|r| {
            r.metadata.deletion_timestamp.is_none()
                && !node_request(r).timed_out
                && r.metadata.uid == cached.uid
        }) else {
            return Ok(false);
        };
        // Its standing, on NodeHealthChecks read now (the one it claims may be gone).
        self.pass.context.refresh_health_checks().await?;
        let verdict = self
            .pass
            .context
            .node_request_verdict(&fresh, &self.pass.context.policy());
        Ok(matches!(verdict, Verdict::Accepted(_)))
    }

    /// Tells every request of the subject its standing when it changed (see
    /// [`super::admission::tell_standing`]).
    pub(in crate::remediation) async fn tell_request_standing(self, writes: &Writes) -> Result<()> {
        let policy = self.pass.context.policy();
        for request in self.node_requests_of_subject() {
            let verdict = self.pass.context.node_request_verdict(&request, &policy);
            tell_request(
                writes,
                &self.pass.context,
                &*request,
                request.status.as_ref(),
                verdict,
            )
            .await?;
        }
        if let Some(request) = self.machine_request_of_subject() {
            let verdict = self.pass.context.machine_request_verdict(&request, &policy);
            tell_request(
                writes,
                &self.pass.context,
                &*request,
                request.status.as_ref(),
                verdict,
            )
            .await?;
        }
        Ok(())
    }

    /// The subject's trigger in the cache, and whether one of `existing` (its Remediations)
    /// answered it (see [`answered`]).
    pub(in crate::remediation) fn trigger(self, existing: &[Arc<Remediation>]) -> Trigger {
        let request = self.cached_request();
        let Some(trigger) = trigger_of(self.annotated(), request.as_ref()) else {
            return Trigger::Absent;
        };
        let created = request.and_then(|r| r.created);
        if answered(&trigger, created, existing) {
            Trigger::Answered
        } else {
            Trigger::Unanswered
        }
    }

    /// Whether the Machine carries a trigger (the annotation or a request), in the cache.
    pub(in crate::remediation) fn triggered(self) -> bool {
        self.cached_trigger().is_some()
    }

    /// The policy in force for this Machine: the policy, narrowed by its request's spec.
    pub(in crate::remediation) fn policy_for_machine(
        self,
        policy: RemediationPolicySpec,
    ) -> RemediationPolicySpec {
        // The request was accepted (see `cached_requests`): its spec narrows the policy.
        match self.cached_request().filter(|r| !r.timed_out) {
            Some(request) => narrow(&policy, &request.overrides).unwrap_or(policy),
            None => policy,
        }
    }

    /// The request `trigger` records, in the cache (also when timed out: it is told why the
    /// remediation stopped).
    fn recorded_request(self, trigger: &TriggerRef) -> Option<RequestView> {
        let name = trigger.name.as_deref()?;
        let namespace = trigger.namespace.as_deref().unwrap_or(&self.pass.namespace);
        let view = match trigger.kind {
            TriggerKind::MachineAnnotation => return None,
            TriggerKind::MachineRemediation => self
                .pass
                .context
                .caches
                .machine_requests
                .get(&ObjectRef::new(name).within(namespace))
                .map(|r| machine_request(&r)),
            TriggerKind::NodeRemediation => self
                .pass
                .context
                .caches
                .node_requests
                .get(&ObjectRef::new(name).within(namespace))
                .map(|r| node_request(&r)),
        };
        view.filter(|v| v.is(trigger))
    }

    /// Reports the Remediation on the request that started it, when that changes its status.
    pub(in crate::remediation) async fn report_to_request(
        self,
        writes: &Writes,
        remediation: &Remediation,
    ) -> Result<()> {
        let Some(trigger) = &remediation.spec.trigger else {
            return Ok(());
        };
        let Some(request) = self.recorded_request(trigger) else {
            return Ok(());
        };
        let now = self.pass.context.clock.now();
        let release = self.pass.policy.node_release;
        let Some(status) = request_status(&request, remediation, release, now) else {
            return Ok(());
        };
        writes.check()?;
        let patch = Patch::Merge(serde_json::json!({"status": status}));
        let params = PatchParams::default();
        let client = self.pass.context.clients.kube.clone();
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
                machine_name: Some("worker-1".into()),
                host_bmc: None,
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
        assert!(answered(&first, None, std::slice::from_ref(&done)));
        let second = trigger_of(false, Some(&request("u2"))).unwrap();
        assert!(!answered(&second, None, std::slice::from_ref(&done)));
        let annotation = trigger_of(true, None).unwrap();
        assert!(!answered(&annotation, None, std::slice::from_ref(&done)));
        // A second health check's request (another contract's: two requests of one name
        // cannot exist at once) that existed when the remediation started was answered by
        // it; one made after it was not.
        let mut node = request("u2");
        node.kind = TriggerKind::NodeRemediation;
        let second = node.trigger();
        let mut started = (*done).clone();
        started.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(100).unwrap(),
            ));
        let started = Arc::new(started);
        let at = |s: u64| Some(std::time::Duration::from_secs(s));
        assert!(answered(&second, at(99), std::slice::from_ref(&started)));
        assert!(answered(&second, at(100), std::slice::from_ref(&started)));
        assert!(!answered(&second, at(101), std::slice::from_ref(&started)));
    }

    #[test]
    fn a_request_made_again_in_the_second_its_remediation_started_is_not_answered() {
        // The remediation recorded u1 and was cancelled when u1 was deleted; the health check
        // made the request again (u2) within the same second (found by the chaos harness,
        // seeds 209, 228 and 272 of 800: the hung Machine was never remediated again).
        let first = trigger_of(false, Some(&request("u1"))).unwrap();
        let mut cancelled = remediation(Some(first), RemediationPhase::Cancelled);
        cancelled.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(100).unwrap(),
            ));
        let cancelled = Arc::new(cancelled);
        let again = trigger_of(false, Some(&request("u2"))).unwrap();
        let at = Some(std::time::Duration::from_secs(100));
        assert!(!answered(&again, at, std::slice::from_ref(&cancelled)));
        // Another contract's request of that second is still the second health check's.
        let mut node = request("u3");
        node.kind = TriggerKind::NodeRemediation;
        let other = node.trigger();
        assert!(answered(&other, at, std::slice::from_ref(&cancelled)));
    }

    #[test]
    fn a_timed_out_request_is_no_trigger_and_stops_the_one_it_started() {
        let mut timed_out = request("u1");
        timed_out.kind = TriggerKind::NodeRemediation;
        let recorded = timed_out.trigger();
        timed_out.timed_out = true;
        assert_eq!(trigger_of(false, Some(&timed_out)), None);
        assert!(!still_there(Some(&recorded), &[], false));
    }

    #[test]
    fn a_request_made_again_is_another_trigger_and_the_first_is_gone() {
        let first = trigger_of(false, Some(&request("u1"))).unwrap();
        let again = trigger_of(false, Some(&request("u2"))).unwrap();
        let recorded = Some(&first);
        assert!(still_there(recorded, std::slice::from_ref(&first), false));
        assert!(!still_there(recorded, std::slice::from_ref(&again), false));
        assert!(!still_there(recorded, &[], false));
        // The annotation set beside the request keeps the Machine asked for.
        assert!(still_there(recorded, &[], true));
        // So does another contract's request.
        let mut node = request("u3");
        node.kind = TriggerKind::NodeRemediation;
        assert!(still_there(recorded, &[node.trigger()], false));
        let annotation = trigger_of(true, None);
        assert!(still_there(annotation.as_ref(), &[], true));
        assert!(!still_there(annotation.as_ref(), &[], false));
    }
}
