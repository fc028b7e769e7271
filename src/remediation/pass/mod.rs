//! One reconcile of one subject (a Machine, or a Node without one: [`Subject`]): the subject,
//! the policy in force and the shared [`Context`], with the primitives every stage of the pass uses — the cached objects it
//! concerns, the APIs it writes, persisting a status (the step first, then the act) and
//! telling it (Events on the Machine, or the Node, and its Remediation).

pub mod context;
pub mod subject;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use self::context::Context;
use self::subject::Subject;
use crate::api::slim;
use crate::api::{
    ConditionType, EventReason, FenceStrategyName, OUTCOME_LABEL, Remediation, RemediationPhase,
    RemediationPolicySpec, RemediationStatus, RemediationStep,
};
use crate::leader::Writes;
use crate::remediation::decide::fence::{ConfirmedOff, HostRef};
use crate::remediation::decide::plan::{Phase, PlanPolicy};
use crate::remediation::decide::state::{
    created_at, record_step, set_condition, strategy_in_status,
};
use crate::remediation::decide::workload::{ClusterNodes, ClusterRef, machine_cluster};
use crate::remediation::world::workload::NodeApi;
use crate::runtime::clock::since_epoch;
use crate::runtime::events::Severity;
use crate::runtime::read::GetPresent;
use crate::{Error, Result};

/// The merge patch that brings `remediation`'s [`OUTCOME_LABEL`] in step with its phase (the
/// terminal phase once ended, no label while under way), or None when it is in step.
pub(in crate::remediation) fn outcome_label_patch(remediation: &Remediation) -> Option<Value> {
    let phase = remediation.phase();
    let outcome = phase.is_terminal().then(|| phase.as_str());
    let label = remediation.labels().get(OUTCOME_LABEL).map(String::as_str);
    (label != outcome)
        .then(|| serde_json::json!({"metadata": {"labels": {OUTCOME_LABEL: outcome}}}))
}

/// `subject`'s Remediations in the cache, oldest first.
fn remediations_of(context: &Context, subject: &Subject) -> Vec<Arc<Remediation>> {
    let (name, namespace) = (subject.name(), subject.namespace());
    let node_subject = subject.machine().is_none();
    let mut all: Vec<Arc<Remediation>> = context
        .caches
        .remediations
        .state()
        .into_iter()
        .filter(|r| {
            r.namespace().as_deref() == Some(namespace.as_str())
                && r.spec.of_machineless_node() == node_subject
                && r.spec.subject_name() == name
        })
        .collect();
    all.sort_by_key(|r| attempt_number(&r.name_any(), &name));
    all
}

/// Whether `subject`'s latest Remediation in the cache is under way (not ended).
fn under_way(context: &Context, subject: &Subject) -> bool {
    remediations_of(context, subject)
        .last()
        .is_some_and(|r| !r.phase().is_terminal())
}

/// When a failed pass of `subject` (its backoff under `key`) is looked at again: on the
/// backoff for a transient failure; for a terminal one, within
/// [`crate::runtime::requeue::BACKOFF_MAX`] while its remediation is under way (its deadlines
/// must be seen in time), else after a wait for a change (see [`crate::runtime::requeue`]).
pub fn requeue_after_failure(
    context: &Context,
    subject: &Subject,
    key: &str,
    error: &Error,
) -> crate::runtime::runner::Action {
    let base = context.settings.poll.max(Duration::from_secs(1));
    if under_way(context, subject) {
        context.backoff.failed_under_way(key, error, base)
    } else {
        context.backoff.failed(key, error, base)
    }
}

/// The Event a step tells once its record is persisted.
pub(in crate::remediation) struct Tell {
    severity: Severity,
    reason: EventReason,
    note: String,
}

impl Tell {
    /// Progress: a step was taken.
    pub(in crate::remediation) fn normal(reason: EventReason, note: impl Into<String>) -> Self {
        Tell {
            severity: Severity::Normal,
            reason,
            note: note.into(),
        }
    }

    /// A step an operator may have to look at.
    pub(in crate::remediation) fn warning(reason: EventReason, note: impl Into<String>) -> Self {
        Tell {
            severity: Severity::Warning,
            reason,
            note: note.into(),
        }
    }
}

/// One reconcile of one subject.
pub struct Pass {
    pub(super) subject: Subject,
    pub(super) context: Arc<Context>,
    pub(super) policy: RemediationPolicySpec,
    pub(super) name: String,
    pub(super) namespace: String,
    /// BMC reads that proved the host off in this pass, and when.
    pub(super) recent_proof: std::sync::Mutex<Option<(ConfirmedOff, Duration)>>,
    /// Whether this pass has started connecting the Machine's workload cluster ahead of a
    /// start (once per pass is enough: a second ask would only queue behind the first).
    pub(super) connecting_ahead: std::sync::atomic::AtomicBool,
    /// The workload cluster of the Machine's Node, once judged (see
    /// [`Pass::machine_node_cluster`]).
    machine_node_cluster: std::sync::OnceLock<Option<ClusterRef>>,
}

impl Pass {
    /// A pass over `subject` under the controller's policy as it stands. The policy in force
    /// may be narrower (a health check's request, a Node without a Machine): a pass is made
    /// through `requests::trigger::pass_for`, which narrows it.
    pub(in crate::remediation) fn new(subject: Subject, context: Arc<Context>) -> Self {
        let policy = context.policy();
        Pass {
            name: subject.name(),
            namespace: subject.namespace(),
            subject,
            context,
            policy,
            recent_proof: std::sync::Mutex::new(None),
            connecting_ahead: std::sync::atomic::AtomicBool::new(false),
            machine_node_cluster: std::sync::OnceLock::new(),
        }
    }

    /// The subject's Node now (see [`Subject::node_name`]).
    pub(super) fn subject_node(&self) -> Option<String> {
        self.subject.node_name()
    }

    /// The subject's Remediations, oldest first.
    pub(super) fn remediations_of_subject(&self) -> Vec<Arc<Remediation>> {
        remediations_of(&self.context, &self.subject)
    }

    /// Whether one of the subject's Remediations is under way (not ended).
    pub(super) fn under_way(&self) -> bool {
        under_way(&self.context, &self.subject)
    }

    pub(super) fn remediation_api(&self) -> Api<Remediation> {
        Api::namespaced(self.context.clients.kube.clone(), &self.namespace)
    }

    /// The API of the subject's Machine (None: a Node subject, which has no Machine to mark,
    /// read or delete).
    pub(super) fn machines_api(&self) -> Option<Api<DynamicObject>> {
        self.subject.machine()?;
        Some(Api::namespaced_with(
            self.context.clients.kube.clone(),
            &self.namespace,
            &self.context.settings.machine_api.resource(),
        ))
    }

    /// Sets (`Some`) or removes (`None`) an annotation of the subject's Machine; a Node subject
    /// has no Machine: nothing to do. `action` names the write in errors.
    pub(super) async fn annotate_machine(
        &self,
        writes: &Writes,
        key: &str,
        value: Option<&str>,
        action: &'static str,
    ) -> Result<()> {
        let Some(machines) = self.machines_api() else {
            return Ok(());
        };
        crate::remediation::world::execute::set_annotation(
            writes, &machines, &self.name, key, value, action,
        )
        .await
    }

    /// The Machine's annotations, read from the API server now (None: the Machine is gone, or
    /// the subject is a Node, which has none).
    pub(super) async fn fresh_machine_annotations(
        &self,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>> {
        let Some(machines) = self.machines_api() else {
            return Ok(None);
        };
        let machine = machines
            .get_present(&self.name)
            .await
            .map_err(Error::kube("GetMachine"))?;
        Ok(machine.map(|m| m.metadata.annotations.unwrap_or_default()))
    }

    pub(super) fn plan_policy(&self) -> PlanPolicy {
        let t = &self.policy.timeouts;
        PlanPolicy {
            strategies: self.policy.strategies.len(),
            power_off_timeout: Duration::from_secs(t.power_off_seconds.into()),
            node_timeout: Duration::from_secs(t.node_ready_seconds.into()),
            ready_grace: Duration::from_secs(t.ready_grace_seconds.into()),
            max_attempts: self.policy.max_attempts,
            release: self.policy.node_release,
            poll: self.context.settings.poll,
            mode: self.policy.mode,
        }
    }

    /// The strategy the remediation uses now: the one its status names (even if the policy
    /// dropped it since), else the policy's first.
    pub(super) fn strategy_in_use(&self, remediation: &Remediation) -> FenceStrategyName {
        remediation
            .status
            .as_ref()
            .and_then(strategy_in_status)
            .unwrap_or_else(|| self.strategy_at(0))
    }

    pub(super) fn strategy_at(&self, index: usize) -> FenceStrategyName {
        self.policy
            .strategies
            .get(index)
            .copied()
            .unwrap_or(FenceStrategyName::BareMetalHostRebootApi)
    }

    /// The workload cluster of the remediation's Node (None: the cluster baremend runs in):
    /// recorded at the power-off request (`status.nodeCluster`); before it, as the Machine's
    /// Cluster says now (see `decide::workload`).
    pub(in crate::remediation) fn node_cluster(
        &self,
        remediation: &Remediation,
    ) -> Option<ClusterRef> {
        if self.context.settings.machine_api != slim::MachineApi::ClusterApi {
            return None;
        }
        let status = remediation.status.as_ref();
        if remediation.phase() != RemediationPhase::Pending {
            let name = status.and_then(|s| s.node_cluster.clone())?;
            return Some(ClusterRef {
                namespace: self.namespace.clone(),
                name,
            });
        }
        self.machine_node_cluster()
    }

    /// The workload cluster of the Machine's Node as its Cluster says at the pass's first ask
    /// (None: here). Asked many times by a start (its triggers, its gates, its count, the
    /// Node it reads): judged once per pass.
    pub(in crate::remediation) fn machine_node_cluster(&self) -> Option<ClusterRef> {
        self.machine_node_cluster
            .get_or_init(|| self.judge_machine_node_cluster())
            .clone()
    }

    /// [`Pass::machine_node_cluster`], judged from the Machines' index (not a walk over every
    /// cached Machine: see `MachineView::cluster_nodes`).
    fn judge_machine_node_cluster(&self) -> Option<ClusterRef> {
        if self.context.settings.machine_api != slim::MachineApi::ClusterApi {
            return None;
        }
        let machine = self.subject.machine()?;
        let cluster = machine_cluster(machine)?;
        let machines = self.context.caches.machine_facts.view();
        match machines.cluster_nodes(machine, |name| self.context.cached_provider_id(name)) {
            ClusterNodes::Elsewhere(_) => Some(cluster),
            ClusterNodes::Here | ClusterNodes::Unnamed => None,
        }
    }

    /// The Node API of the cluster the remediation's Node is in (connected on first need).
    pub(super) async fn node_api(&self, remediation: &Remediation) -> Result<NodeApi> {
        match self.node_cluster(remediation) {
            None => Ok(NodeApi::local(&self.context.clients.kube)),
            Some(cluster) => {
                let connected = self.context.clients.workloads.connect(&cluster).await?;
                Ok(connected.node_api())
            }
        }
    }

    /// The remediation's Node, cached, in the cluster it is in. A workload cluster that
    /// cannot be reached is an error, never a missing Node.
    pub(super) async fn node(&self, remediation: &Remediation) -> Result<Option<Arc<Node>>> {
        let Some(name) = remediation.spec.node_name.as_deref() else {
            return Ok(None);
        };
        match self.node_cluster(remediation) {
            None => Ok(self.context.caches.nodes.get(&ObjectRef::new(name))),
            Some(cluster) => {
                let connected = self.context.clients.workloads.connect(&cluster).await?;
                Ok(connected.node(name))
            }
        }
    }

    pub(super) fn host(
        &self,
        remediation: &Remediation,
    ) -> Option<(HostRef, Option<Arc<slim::BareMetalHost>>)> {
        let host_ref = match remediation.spec.host_ref() {
            Ok(host_ref) => host_ref?,
            Err(why) => {
                // The CRD's pattern keeps such a value out; one that got in names no host.
                tracing::warn!(remediation = %remediation.name_any(), "{why}");
                return None;
            }
        };
        let object = self
            .context
            .caches
            .hosts
            .get(&ObjectRef::new(&host_ref.name).within(&host_ref.namespace));
        Some((host_ref, object))
    }

    pub(super) async fn persist(
        &self,
        writes: &Writes,
        remediation: &mut Remediation,
        status: RemediationStatus,
    ) -> Result<()> {
        let before = remediation.status.as_ref().map_or(0, |s| s.steps.len());
        let mut object = remediation.clone();
        object.status = Some(status);
        // replace_status carries the resourceVersion: a concurrent writer makes it fail with
        // 409 instead of being overwritten.
        writes.check()?;
        let updated = self
            .remediation_api()
            .replace_status(&remediation.name_any(), &PostParams::default(), &object)
            .await
            .map_err(Error::kube("PersistRemediation"))?;
        *remediation = updated;
        self.keep_outcome_label(writes, remediation).await;
        self.observe_step_durations(remediation, before);
        let last = remediation
            .status
            .as_ref()
            .and_then(|s| s.steps.last())
            .map(|s| s.step.as_str());
        if let Some(hook) = &self.context.settings.after_persist
            && let Some(step) = last
            && (hook.0)(step).is_err()
        {
            return Err(Error::Abandoned(step.to_string()));
        }
        Ok(())
    }

    /// Brings the Remediation's [`OUTCOME_LABEL`] in step with its phase, when it is not. A
    /// write that fails is only logged: an ended Remediation without the label is still in a
    /// start's fresh read (bytes, never safety), and the Machine's next idle pass writes it.
    pub(in crate::remediation) async fn keep_outcome_label(
        &self,
        writes: &Writes,
        remediation: &mut Remediation,
    ) {
        let Some(patch) = outcome_label_patch(remediation) else {
            return;
        };
        // Only the leader writes; a replica that lost its Lease leaves it to the leader.
        if writes.check().is_err() {
            return;
        }
        let written = self
            .remediation_api()
            .patch(
                &remediation.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await;
        match written {
            Ok(updated) => *remediation = updated,
            Err(error) => tracing::warn!(
                remediation = %remediation.name_any(),
                %error,
                "cannot label the Remediation with its outcome; it stays in the fresh reads until it is"
            ),
        }
    }

    pub(super) async fn event(
        &self,
        remediation: &Remediation,
        severity: Severity,
        reason: EventReason,
        note: String,
    ) {
        self.event_action(remediation, severity, (reason, reason.as_str()), note)
            .await;
    }

    /// [`Pass::event`] with an action apart from the reason: Events with the same reason and
    /// action are one series to the recorder (a later note is not shown), so what must be
    /// told apart — which gate holds a start — goes in the action.
    pub(super) async fn event_action(
        &self,
        remediation: &Remediation,
        severity: Severity,
        (reason, action): (EventReason, &str),
        note: String,
    ) {
        // On both objects: `kubectl describe machine` (or node) is where an operator looks
        // first, the Remediation keeps the whole story; each names the other as related.
        let remediation_ref = remediation.object_ref(&());
        let machine_ref = self.event_target();
        crate::runtime::events::publish_action(
            &self.context.clients.recorder,
            severity,
            (reason.as_str(), action),
            &note,
            &[
                (machine_ref.clone(), Some(remediation_ref.clone())),
                (remediation_ref, Some(machine_ref)),
            ],
        )
        .await;
    }

    /// Feeds the per-step histogram with the steps just persisted (those from `before` on).
    pub(super) fn observe_step_durations(&self, remediation: &Remediation, before: usize) {
        let Some(status) = &remediation.status else {
            return;
        };
        let at = |index: usize| {
            status
                .steps
                .get(index)
                .and_then(|s| s.time.parse::<k8s_openapi::jiff::Timestamp>().ok())
        };
        for index in before.max(1)..status.steps.len() {
            if let (Some(previous), Some(now)) = (at(index - 1), at(index)) {
                let took = now.duration_since(previous).unsigned_abs();
                self.context
                    .metrics
                    .step_reached(status.steps[index].step.as_str(), took);
            }
        }
    }

    pub(super) async fn note_error(
        &self,
        writes: &Writes,
        remediation: &mut Remediation,
        error: &Error,
    ) -> Result<()> {
        let mut status = remediation.status.clone().unwrap_or_default();
        let text = error.to_string().replace(['\n', '\r'], " ");
        status.last_error = Some(text.clone());
        let reason = error.category().event_reason();
        let now = self.context.clock.now();
        set_condition(
            &mut status,
            ConditionType::StepFailed,
            true,
            reason.as_str(),
            &text,
            now,
        );
        self.persist(writes, remediation, status).await?;
        self.event(remediation, Severity::Warning, reason, text)
            .await;
        Ok(())
    }

    /// Where the subject's Events go (see [`Subject::event_target`]).
    pub(super) fn event_target(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        let node_uid = match &self.subject {
            Subject::Machine(_) => None,
            Subject::Node(_) => self
                .context
                .caches
                .nodes
                .get(&ObjectRef::new(&self.name))
                .and_then(|n| n.uid()),
        };
        self.subject
            .event_target(self.context.settings.machine_api.api_version(), node_uid)
    }

    /// Time since the Remediation was created.
    pub(super) fn age(&self, remediation: &Remediation) -> Duration {
        let created = created_at(remediation).unwrap_or_default();
        since_epoch(self.context.clock.now()).saturating_sub(created)
    }

    /// The sequence every step goes through: `step` recorded in `status` (entering `phase`,
    /// if any), the status persisted, then told. A step that acts between its record and its
    /// Event passes no `tell` and calls [`Pass::tell`] after acting: the record always comes
    /// before the act, the Event after it.
    pub(in crate::remediation) async fn take_step(
        &self,
        writes: &Writes,
        remediation: &mut Remediation,
        mut status: RemediationStatus,
        (step, phase): (RemediationStep, Option<Phase>),
        now: SystemTime,
        tell: Option<Tell>,
    ) -> Result<()> {
        record_step(&mut status, step, phase, now);
        let attempt = status.attempt.unwrap_or(1);
        self.persist(writes, remediation, status).await?;
        // What an operator follows in the log at the default level: each step, once stored.
        tracing::info!(
            remediation = %remediation.name_any(),
            step = step.as_str(),
            attempt,
            "remediation step"
        );
        if let Some(tell) = tell {
            self.tell(remediation, tell).await;
        }
        Ok(())
    }

    /// Publishes a step's Event (see [`Pass::take_step`]).
    pub(in crate::remediation) async fn tell(&self, remediation: &Remediation, tell: Tell) {
        self.event(remediation, tell.severity, tell.reason, tell.note)
            .await;
    }

    /// Starts connecting the Machine's workload cluster, not waited for: a start may be
    /// ahead, and the connection's first list of Nodes is the longest of its steps; the
    /// trigger's fresh read and the Remediation's creation then run beside it. Harmless when
    /// no start follows: an unused connection is dropped when idle. Once per pass (the pass
    /// asks when it sees an unanswered trigger, and the start asks again).
    pub(in crate::remediation) fn connect_ahead(&self) {
        use std::sync::atomic::Ordering;
        if self.connecting_ahead.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(cluster) = self.machine_node_cluster() {
            let context = self.context.clone();
            tokio::spawn(async move {
                // Its failure is the start's gates' to tell, on their own ask.
                let _ = context.clients.workloads.connect(&cluster).await;
            });
        }
    }
}

/// The attempt number in a Remediation name `<machine>-<n>`.
pub(super) fn attempt_number(remediation: &str, machine: &str) -> u64 {
    remediation
        .strip_prefix(machine)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RemediationSpec;

    fn remediation(phase: Option<RemediationPhase>, label: Option<&str>) -> Remediation {
        let mut object = Remediation::new("worker-0-1", RemediationSpec::of_machine("worker-0"));
        object.status = phase.map(|phase| RemediationStatus {
            phase,
            ..RemediationStatus::default()
        });
        object.metadata.labels =
            label.map(|value| [(OUTCOME_LABEL.to_string(), value.to_string())].into());
        object
    }

    #[test]
    fn the_outcome_label_follows_the_phase_and_goes_while_under_way() {
        let labels = [
            None,
            Some("Succeeded"),
            Some("Failed"),
            Some("Cancelled"),
            Some("x"),
        ];
        for phase in RemediationPhase::ALL.into_iter().map(Some).chain([None]) {
            let outcome = phase
                .filter(|p| p.is_terminal())
                .map(RemediationPhase::as_str);
            for label in labels {
                let patch = outcome_label_patch(&remediation(phase, label));
                let expected = (label != outcome)
                    .then(|| serde_json::json!({"metadata": {"labels": {OUTCOME_LABEL: outcome}}}));
                assert_eq!(patch, expected, "{phase:?} labelled {label:?}");
                // In step after the patch: what it writes is what the phase says.
                if let Some(patch) = patch {
                    let written = patch["metadata"]["labels"][OUTCOME_LABEL].as_str();
                    assert_eq!(written, outcome);
                    if let Some(outcome) = outcome {
                        let serialized = serde_json::to_value(phase.unwrap()).unwrap();
                        assert_eq!(serialized, outcome, "as_str is the serialized phase");
                    }
                }
            }
        }
    }
}
