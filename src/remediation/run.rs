//! One reconcile pass over a Machine: find or start its Remediation, then observe, plan and
//! act until the planner says wait. Every step is written to the Remediation's status before
//! it acts, so a restart resumes where the last persisted step left off.
//!
//! The pass is split by concern: this module observes and persists, [`super::act`] carries a
//! planned step out, [`super::power`] reads and changes the host's power per strategy, and
//! [`super::start_gates`] decides whether a start may go ahead.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tracing::info;

use super::controller::{Context, machine_resource};
use super::fence::{ConfirmedOff, FenceTarget, NotFenced};
use super::gates::Held;
use super::observe::{self, HostRef, machine_host, node_view};
use super::plan::{Observed, Phase, PlanPolicy, ReleaseMode, next_step};
use super::state::{created_at, persisted, set_condition, strategy_in_status};
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::slim;
use crate::api::{
    FenceStrategyName, NodeReleaseMode, Remediation, RemediationPolicySpec, RemediationSpec,
    RemediationStatus,
};
use crate::runtime::clock::since_epoch;
use crate::{Error, Result};

use super::gates::Launched;

/// How old BMC reads proving a host off may be when they authorize its Node's release.
const PROOF_REUSE: Duration = Duration::from_secs(1);

/// The most steps one pass takes before yielding (a safety net; a normal pass ends in Wait).
const MAX_STEPS_PER_PASS: usize = 16;

/// One reconcile of one Machine.
pub struct Pass {
    pub(super) machine: Arc<slim::Machine>,
    pub(super) context: Arc<Context>,
    pub(super) policy: RemediationPolicySpec,
    pub(super) name: String,
    pub(super) namespace: String,
    /// BMC reads that proved the host off in this pass, and when.
    recent_proof: std::sync::Mutex<Option<(ConfirmedOff, Duration)>>,
}

impl Pass {
    /// A pass over `machine`.
    pub fn new(machine: Arc<slim::Machine>, context: Arc<Context>) -> Self {
        let policy = context.policy();
        Pass {
            name: machine.name_any(),
            namespace: machine.namespace().unwrap_or_default(),
            machine,
            context,
            policy,
            recent_proof: std::sync::Mutex::new(None),
        }
    }

    /// Keeps a BMC proof this pass took and did not spend, for the release a moment later.
    fn remember_bmc_proof(&self, confirmed: ConfirmedOff) {
        if confirmed.strategy() != FenceStrategyName::DirectBmc {
            return;
        }
        let now = since_epoch(self.context.clock.now());
        *self
            .recent_proof
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((confirmed, now));
    }

    /// The BMC proof this pass took, if it is at most [`PROOF_REUSE`] old and for the same
    /// strategy and Node as `target`. Reading the BMC twice more for the release,
    /// milliseconds after two reads proved it off, would only load a fragile BMC; anything
    /// older (a later pass, a restart) is read again. The proof is taken out: it is spent once.
    fn recent_bmc_proof(&self, target: &FenceTarget) -> Option<ConfirmedOff> {
        let now = since_epoch(self.context.clock.now());
        let (confirmed, at) = self
            .recent_proof
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        let fits = now.saturating_sub(at) <= PROOF_REUSE
            && confirmed.strategy() == target.strategy
            && confirmed.node() == target.node.as_ref();
        fits.then_some(confirmed)
    }

    /// The proof, or why not, from fresh evidence: taken while fencing and before the release,
    /// not in the phases between or after.
    async fn proof_for(
        &self,
        remediation: &Remediation,
        phase: Phase,
        node: Option<&Node>,
    ) -> std::result::Result<ConfirmedOff, NotFenced> {
        if !matches!(phase, Phase::PoweringOff | Phase::Fenced) {
            return Err(NotFenced::NotYet("not checked in this phase".into()));
        }
        let target = self.fence_target(remediation, self.strategy_in_use(remediation), node);
        match self.recent_bmc_proof(&target) {
            Some(confirmed) => Ok(confirmed),
            None => self.take_proof(remediation, &target).await,
        }
    }

    pub(super) fn machine_json(&self) -> Value {
        serde_json::to_value(&*self.machine).unwrap_or(Value::Null)
    }

    pub(super) fn triggered(&self) -> bool {
        self.machine
            .annotations()
            .contains_key(EXTERNAL_REMEDIATION)
    }

    pub(super) fn remediations_of_machine(&self) -> Vec<Arc<Remediation>> {
        let mut all: Vec<Arc<Remediation>> = self
            .context
            .remediations
            .state()
            .into_iter()
            .filter(|r| {
                r.namespace().as_deref() == Some(self.namespace.as_str())
                    && r.spec.machine_name == self.name
            })
            .collect();
        all.sort_by_key(|r| attempt_number(&r.name_any(), &self.name));
        all
    }

    pub(super) fn remediation_api(&self) -> Api<Remediation> {
        Api::namespaced(self.context.client.clone(), &self.namespace)
    }

    /// Runs the pass.
    pub async fn run(self) -> Result<Action> {
        let existing = self.remediations_of_machine();
        let mut remediation = match existing.last() {
            Some(last)
                if !last
                    .status
                    .as_ref()
                    .map(|s| s.phase)
                    .unwrap_or_default()
                    .is_terminal() =>
            {
                (**last).clone()
            }
            // A Failed remediation keeps the trigger; an operator deletes the Remediation to
            // allow another (it would otherwise loop on a host that cannot be fenced).
            Some(last) if last.status.as_ref().map(|s| s.phase) == Some(Phase::Failed) => {
                return Ok(Action::await_change());
            }
            _ if !self.triggered() => return Ok(Action::await_change()),
            // The cached Machine may still show a trigger the last remediation removed (its
            // watch lags behind the Remediation's): a start rests only on a fresh read.
            _ if !self.trigger_confirmed().await? => return Ok(Action::await_change()),
            _ => self.start(existing.len() + 1).await?,
        };
        for _ in 0..MAX_STEPS_PER_PASS {
            match self.step(&mut remediation).await? {
                Some(action) => return Ok(action),
                None => continue,
            }
        }
        Ok(Action::requeue(Duration::ZERO))
    }

    pub(super) async fn start(&self, number: usize) -> Result<Remediation> {
        let machine_json = self.machine_json();
        let (host, unusable) = match machine_host(&machine_json) {
            Ok(host) => (host, None),
            Err(unusable) => (None, Some(unusable)),
        };
        let mut object = Remediation::new(
            &format!("{}-{number}", self.name),
            RemediationSpec {
                machine_name: self.name.clone(),
                machine_uid: self.machine.uid(),
                node_name: observe::machine_node(&machine_json),
                host: host.map(|h| h.to_string()),
            },
        );
        object.metadata.namespace = Some(self.namespace.clone());
        object.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "machine.openshift.io/v1beta1".into(),
            kind: "Machine".into(),
            name: self.name.clone(),
            uid: self.machine.uid().unwrap_or_default(),
            ..OwnerReference::default()
        }]);
        self.context.leadership.ensure()?;
        let api = self.remediation_api();
        let created = match api.create(&PostParams::default(), &object).await {
            Ok(created) => created,
            // Created by an earlier pass whose store update has not arrived yet.
            Err(kube::Error::Api(status)) if status.code == 409 => api
                .get(&object.name_any())
                .await
                .map_err(Error::kube("GetRemediation"))?,
            Err(source) => return Err(Error::kube("CreateRemediation")(source)),
        };
        info!(machine = %self.name, remediation = %created.name_any(), "remediation started");
        if let Some(unusable) = unusable {
            // Not fatal yet: a HostBmc may still name the BMC. The strategies say the rest.
            self.event(
                &created,
                true,
                "InvalidMachine",
                format!("Machine {}: {unusable}", self.name),
            )
            .await;
        }
        Ok(created)
    }

    pub(super) fn plan_policy(&self) -> PlanPolicy {
        let t = &self.policy.timeouts;
        PlanPolicy {
            strategies: self.policy.strategies.len(),
            power_off_timeout: Duration::from_secs(t.power_off_seconds.into()),
            node_timeout: Duration::from_secs(t.node_ready_seconds.into()),
            ready_grace: Duration::from_secs(t.ready_grace_seconds.into()),
            max_attempts: self.policy.max_attempts,
            release: match self.policy.node_release {
                NodeReleaseMode::Delete => ReleaseMode::Delete,
                NodeReleaseMode::OutOfService => ReleaseMode::OutOfService,
            },
            poll: self.context.poll,
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

    pub(super) fn node(&self, remediation: &Remediation) -> Option<Arc<Node>> {
        let name = remediation.spec.node_name.as_deref()?;
        self.context.nodes.get(&ObjectRef::new(name))
    }

    pub(super) fn host(
        &self,
        remediation: &Remediation,
    ) -> Option<(HostRef, Option<Arc<slim::BareMetalHost>>)> {
        let text = remediation.spec.host.as_deref()?;
        let (namespace, name) = text.split_once('/')?;
        let host_ref = HostRef {
            namespace: namespace.into(),
            name: name.into(),
        };
        let object = self
            .context
            .hosts
            .get(&ObjectRef::new(name).within(namespace));
        Some((host_ref, object))
    }

    /// One observe–plan–act round. `None`: go on with the next step at once.
    pub(super) async fn step(&self, remediation: &mut Remediation) -> Result<Option<Action>> {
        let status = remediation.status.clone().unwrap_or_default();
        let created =
            created_at(remediation).unwrap_or_else(|| since_epoch(self.context.clock.now()));
        let state = persisted(&status, &self.policy.strategies, created);
        let node = self.node(remediation);
        if state.strategy.is_none() && !state.phase.is_terminal() {
            self.note_strategy_dropped(remediation).await?;
        }
        let proof = self
            .proof_for(remediation, state.phase, node.as_deref())
            .await;
        let (verdict, mut proof) = match proof {
            Ok(confirmed) => (Ok(()), Some(confirmed)),
            Err(not_fenced) => (Err(not_fenced), None),
        };
        // Starts are decided one at a time, with the starts this process made and the cache
        // may not show yet: two Machines reconciled at once must not both pass the gates.
        let mut starts = if state.phase == Phase::Pending {
            Some(self.context.starts.lock().await)
        } else {
            None
        };
        let (may, triggered) = match starts.as_deref_mut() {
            Some(launched) => {
                self.may_start(remediation, node.as_deref(), launched)
                    .await?
            }
            None => (Ok(()), self.triggered()),
        };
        let observed = Observed {
            now: since_epoch(self.context.clock.now()),
            triggered,
            fence: verdict,
            node: node_view(node.as_deref()),
            may_start: may,
        };
        let step = next_step(&state, &observed, &self.plan_policy());
        tracing::debug!(remediation = %remediation.name_any(), ?step, "planned");
        let acted = self
            .act(remediation, status, &state, step, &mut proof, node)
            .await;
        // A BMC proof the step did not spend serves the release a moment later.
        if let Some(unspent) = proof {
            self.remember_bmc_proof(unspent);
        }
        if let Some(launched) = starts.as_deref_mut()
            && remediation.status.as_ref().map(|s| s.phase) == Some(Phase::PoweringOff)
        {
            launched.insert(
                (self.namespace.clone(), remediation.name_any()),
                self.name.clone(),
            );
        }
        if remediation
            .status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal())
        {
            // Ended: its BMC session is not needed any more.
            self.context.bmc_drivers.release(&self.machine_key());
        }
        acted
    }

    /// The gates for a start, decided on the caches and confirmed on fresh reads (the cache
    /// may lag behind a watch broken for seconds, and a start must never rest on it; nor may
    /// the power-off rest on a cached trigger, see `run`). Returns the verdict and whether the
    /// trigger is (still) there.
    async fn may_start(
        &self,
        remediation: &Remediation,
        node: Option<&Node>,
        launched: &mut Launched,
    ) -> Result<(std::result::Result<(), Held>, bool)> {
        let triggered = self.triggered();
        let cached = self.context.remediations.state();
        let health = self.fleet_health();
        match self.gates(remediation, node, launched, &cached, false, &health) {
            Ok(()) => {
                let (fresh, confirmed) =
                    tokio::join!(self.fresh_remediations(), self.trigger_confirmed());
                let may = self.gates(remediation, node, launched, &fresh?, true, &health);
                let may = match may {
                    Ok(()) => self.self_fence_gate(remediation).await?,
                    held => held,
                };
                Ok((may, triggered && confirmed?))
            }
            held => Ok((held, triggered)),
        }
    }

    /// Tells once, with a condition and a Warning Event, that the policy no longer names the
    /// strategy this remediation uses: it goes on with that strategy, never another.
    async fn note_strategy_dropped(&self, remediation: &mut Remediation) -> Result<()> {
        let mut status = remediation.status.clone().unwrap_or_default();
        let in_use = status.strategy.clone().unwrap_or_default();
        let told = status
            .conditions
            .iter()
            .any(|c| c.type_ == "StrategyInPolicy" && c.status == "False");
        if told {
            return Ok(());
        }
        let message = format!(
            "the policy no longer names strategy {in_use}, which this remediation uses: it goes on with {in_use} and does not escalate past it"
        );
        let now = self.context.clock.now();
        set_condition(
            &mut status,
            "StrategyInPolicy",
            false,
            "StrategyRemoved",
            &message,
            now,
        );
        self.persist(remediation, status).await?;
        self.event(remediation, true, "StrategyNotInPolicy", message)
            .await;
        Ok(())
    }

    pub(super) async fn persist(
        &self,
        remediation: &mut Remediation,
        status: RemediationStatus,
    ) -> Result<()> {
        self.context.leadership.ensure()?;
        let before = remediation.status.as_ref().map_or(0, |s| s.steps.len());
        let mut object = remediation.clone();
        object.status = Some(status);
        // replace_status carries the resourceVersion: a concurrent writer makes it fail with
        // 409 instead of being overwritten.
        let updated = self
            .remediation_api()
            .replace_status(&remediation.name_any(), &PostParams::default(), &object)
            .await
            .map_err(Error::kube("PersistRemediation"))?;
        *remediation = updated;
        self.observe_step_durations(remediation, before);
        let last = remediation
            .status
            .as_ref()
            .and_then(|s| s.steps.last())
            .map(|s| s.step.as_str());
        if let Some(hook) = &self.context.after_persist
            && let Some(step) = last
            && (hook.0)(step).is_err()
        {
            return Err(Error::Abandoned(step.to_string()));
        }
        Ok(())
    }

    pub(super) async fn event(
        &self,
        remediation: &Remediation,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        // On both objects: `kubectl describe machine` is where an operator looks first, the
        // Remediation keeps the whole story; each names the other as related.
        let remediation_ref = remediation.object_ref(&());
        let machine_ref = self.machine.object_ref(&());
        crate::runtime::events::publish(
            &self.context.recorder,
            warning,
            reason,
            &note,
            &[
                (machine_ref.clone(), Some(remediation_ref.clone())),
                (remediation_ref, Some(machine_ref)),
            ],
        )
        .await;
    }

    /// Feeds the per-step histogram with the steps just persisted (those from `before` on).
    fn observe_step_durations(&self, remediation: &Remediation, before: usize) {
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
                    .step_reached(&status.steps[index].step, took);
            }
        }
    }

    pub(super) fn machines_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.context.client.clone(),
            &self.namespace,
            &machine_resource(),
        )
    }

    pub(super) async fn note_error(
        &self,
        remediation: &mut Remediation,
        error: &Error,
    ) -> Result<()> {
        let mut status = remediation.status.clone().unwrap_or_default();
        let text = error.to_string().replace(['\n', '\r'], " ");
        status.last_error = Some(text.clone());
        self.persist(remediation, status).await?;
        self.event(remediation, true, "StepFailed", text).await;
        Ok(())
    }
}

/// The attempt number in a Remediation name `<machine>-<n>`.
fn attempt_number(remediation: &str, machine: &str) -> u64 {
    remediation
        .strip_prefix(machine)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
