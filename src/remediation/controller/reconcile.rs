//! The thin reconcile that wires the stages of a pass, top to bottom: what to do with the
//! Machine's Remediations (the pure [`decide`]: carry on, leave to another shard, start,
//! retry, look again after a dry run, or stay idle), carried out; then, step by step, *observe* (the persisted state, the cached
//! objects and the fresh evidence: the power-off proof, the start gates confirmed on fresh
//! reads), *plan* (the pure [`next_step`]) and *execute* (one function per step, in
//! [`crate::remediation::act::steps`]), until the planner says wait.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use tracing::Instrument;

use super::housekeeping::next_number;
use crate::api::{ConditionType, EventReason, FenceStrategyName, RemediationMode};
use crate::api::{Remediation, RemediationStep, slim};
use crate::leader::Writes;
use crate::remediation::act::dry_run::DryRuns;
use crate::remediation::act::power::DirectBmc;
use crate::remediation::act::power::Power;
use crate::remediation::act::steps::Round;
use crate::remediation::act::steps::Steps;
use crate::remediation::act::strategy::Strategies;
use crate::remediation::controller::housekeeping::Housekeeping;
use crate::remediation::decide::fence::ConfirmedOff;
use crate::remediation::decide::gates::{Held, ListFreshness};
use crate::remediation::decide::observe::node_view;
use crate::remediation::decide::pass::{
    Decision, Newest, Start, confirm_before_record, connect_ahead, decide, dry_run_starts,
    unreachable_cluster_fails,
};
use crate::remediation::decide::plan::{
    Observed, Phase, START_STRATEGY, Step, next_step, ready_grace_left,
};
use crate::remediation::decide::state::{created_at, persisted, set_condition, strategy_label};
use crate::remediation::evidence::health::HealthAhead;
use crate::remediation::evidence::start_gates::StartBasis;
use crate::remediation::evidence::start_gates::StartGates;
use crate::remediation::pass::context::Context;
use crate::remediation::pass::subject::Subject;
use crate::remediation::pass::{Pass, outcome_label_patch, requeue_after_failure};
use crate::remediation::requests::trigger::Triggers;
use crate::remediation::requests::trigger::pass_for;
use crate::runtime::clock::since_epoch;
use crate::runtime::events::{Severity, report_failed_pass};
use crate::runtime::overlap::Overlapped;
use crate::runtime::retention::retry_ask;
use crate::runtime::runner::Action;
use crate::{Error, Result};

/// A BMC being located or made ready beside a start's round trips (see [`Pass::ready_ahead`]).
type Located<'p> = Overlapped<'p, Option<DirectBmc>>;

/// The most steps one pass takes before yielding (a safety net; a normal pass ends in Wait).
const MAX_STEPS_PER_PASS: usize = 16;

/// How soon a pass put back because its workload cluster's share of the workers is taken runs
/// again (see `world::workload::PASSES_PER_CLUSTER`).
const SHARE_TAKEN_WAIT: Duration = Duration::from_millis(250);

impl Pass {
    /// Runs the pass.
    pub async fn run(self) -> Result<Action> {
        // Only the leader passes; every write below takes this leave and checks it again.
        let writes = self.context.leadership.writes()?;
        let writes = &writes;
        // A refused request is told on itself, and is no trigger below.
        Triggers::of(&self).tell_request_standing(writes).await?;
        let existing = self.remediations_of_subject();
        // Observe what the opening decides on, then decide (pure), then carry it out.
        let newest = existing.last().map(|last| Newest {
            phase: last.phase(),
            ours: crate::shard::owned_by(last.labels(), self.context.leadership.shard()),
            retry: retry_ask(last.annotations()),
            trigger_cleared: trigger_cleared(last),
        });
        let trigger = Triggers::of(&self).trigger(&existing);
        if connect_ahead(newest.as_ref(), trigger) {
            self.connect_ahead();
        }
        // The fleet's health of a start, counted beside its creation, and its BMC located
        // there (see `step`).
        let mut health = None;
        let mut located = None;
        let mut remediation = match decide(newest.as_ref(), trigger, self.policy.mode) {
            Decision::CarryOn => match existing.last() {
                Some(last) => (**last).clone(),
                None => return self.idle(writes, &existing).await,
            },
            // The cached Machine may still show a trigger the last remediation removed (its
            // watch lags behind the Remediation's): such a start is confirmed on a fresh read
            // before its record; any other on the start's own fresh reads.
            Decision::Start(start) => {
                let now = since_epoch(self.context.clock.now());
                let since_newest = existing.last().map(|last| since_phase(last, now));
                if confirm_before_record(start, since_newest)
                    && !StartGates::of(&self).trigger_confirmed().await?
                {
                    return self.settle(writes, start.unconfirmed(), &existing).await;
                }
                let number = next_number(&existing, &self.name);
                match (start, existing.last()) {
                    (Start::Retry, Some(failed)) => {
                        Housekeeping::of(&self)
                            .retry_failed(writes, failed, number)
                            .await?
                    }
                    _ => {
                        health = Some(StartGates::of(&self).fleet_health_ahead());
                        let planned = Steps::of(&self, writes).plan_start(number).await?;
                        // The creation's request on the wire first (`beside` polls it
                        // first): it is the start's next round trip, where the BMC's Secret
                        // only has to be read by the power-off.
                        let mut locating = self.locate_ahead(&planned.object);
                        let created = locating
                            .beside(Steps::of(&self, writes).create_planned(planned))
                            .await?;
                        located = Some(locating);
                        created
                    }
                }
            }
            decision => return self.settle(writes, decision, &existing).await,
        };
        // An outcome label on one under way (a hand's, a restore's) may hide it from a start's
        // fresh read until it is gone: taken off before the step.
        self.keep_outcome_label(writes, &mut remediation).await;
        // A workload cluster's steps take a bounded share of the workers: a server that holds
        // each request to its deadline holds those passes, not every other cluster's.
        let _share = match self.node_cluster(&remediation) {
            Some(cluster) => match self.context.clients.workloads.enter(&cluster) {
                Some(share) => Some(share),
                None => {
                    tracing::debug!(%cluster, "the cluster's share of the workers is taken: put back");
                    return Ok(Action::requeue(SHARE_TAKEN_WAIT));
                }
            },
            None => None,
        };
        for _ in 0..MAX_STEPS_PER_PASS {
            let ahead = (health.take(), located.take());
            match self.step(writes, &mut remediation, ahead).await? {
                Some(action) => return Ok(action),
                None => continue,
            }
        }
        Ok(Action::requeue(Duration::ZERO))
    }

    /// Carries out a decision that starts and steps nothing (see [`Decision`]).
    async fn settle(
        &self,
        writes: &Writes,
        decision: Decision,
        existing: &[Arc<Remediation>],
    ) -> Result<Action> {
        let Some(last) = existing.last() else {
            return self.idle(writes, existing).await;
        };
        match decision {
            Decision::LeaveToAnotherShard => {
                // Two leaders would otherwise act on one host; its changes wake this pass.
                tracing::warn!(
                    remediation = %last.name_any(),
                    "under way in another shard: left to it"
                );
                Ok(Action::await_change())
            }
            Decision::RetryWaiting => {
                Housekeeping::of(self).retry_waiting(last).await;
                self.idle(writes, existing).await
            }
            Decision::RefuseRetry(value) => {
                Housekeeping::of(self).refuse_retry(last, &value).await;
                self.idle(writes, existing).await
            }
            Decision::RecordTriggerCleared | Decision::AwaitChange => {
                if decision == Decision::RecordTriggerCleared {
                    let mut last = (**last).clone();
                    let status = last.status.clone().unwrap_or_default();
                    let now = self.context.clock.now();
                    let step = (RemediationStep::TriggerCleared, None);
                    self.take_step(writes, &mut last, status, step, now, None)
                        .await?;
                }
                // Dry runs pile up like any finished record: retention keeps the newest.
                Housekeeping::of(self).prune(writes, existing).await?;
                Ok(Action::await_change())
            }
            Decision::CarryOn | Decision::Start(_) | Decision::Idle => {
                self.idle(writes, existing).await
            }
        }
    }

    /// Nothing under way for the Machine: the housekeeping of its finished Remediations, and
    /// the request of the last one told how it ended if it does not say so (its last report
    /// may have failed, or been overwritten by a pass that acted on an older view).
    async fn idle(&self, writes: &Writes, existing: &[Arc<Remediation>]) -> Result<Action> {
        if let Some(last) = existing.last()
            && let Err(error) = Triggers::of(self).report_to_request(writes, last).await
        {
            tracing::warn!(%error, "cannot report to the remediation request");
        }
        // An ended one without its outcome label (written by an older version, or its label
        // write failed) gets it here.
        for remediation in existing {
            if outcome_label_patch(remediation).is_some() {
                self.keep_outcome_label(writes, &mut (**remediation).clone())
                    .await;
            }
        }
        Housekeeping::of(self).prune(writes, existing).await?;
        Ok(Action::await_change())
    }

    /// One observe–plan–act round. `None`: go on with the next step at once. `ahead`, for a
    /// start's first judgment: the fleet's health counted, and its BMC located, beside its
    /// creation (none: counted, located when needed).
    pub(in crate::remediation) async fn step<'p>(
        &'p self,
        writes: &Writes,
        remediation: &mut Remediation,
        (health, located): (Option<HealthAhead>, Option<Located<'p>>),
    ) -> Result<Option<Action>> {
        // Observe: the persisted state, the cached Node and the fresh evidence.
        let status = remediation.status.clone().unwrap_or_default();
        let created =
            created_at(remediation).unwrap_or_else(|| since_epoch(self.context.clock.now()));
        let state = persisted(&status, &self.policy.strategies, created);
        // A workload cluster that cannot be reached: before the power-off request, the start
        // gate holds and says why (below); after it, the plan runs on no Node so that its
        // deadlines still fire, and anything but a deadline's step waits with the error told.
        // Every step that touches the Node needs the cluster's API, so none runs on the guess.
        // A start's fresh reads go out beside the wait for the Node (a workload cluster's
        // first list of Nodes, when it is still connecting).
        let mut reads = if state.phase == Phase::Pending {
            Some(StartGates::of(self).start_reads(remediation).await)
        } else {
            None
        };
        let node = match &mut reads {
            Some(reads) => reads.fresh.beside(self.node(remediation)).await,
            None => self.node(remediation).await,
        };
        let (node, unreachable) = match node {
            Ok(node) => (node, None),
            Err(error @ Error::WorkloadCluster { .. }) => (None, Some(error)),
            Err(error) => return Err(error),
        };
        if state.strategy.is_none() && !state.phase.is_terminal() {
            self.note_strategy_dropped(writes, remediation).await?;
        }
        let proof = Strategies::of(self)
            .proof_for(remediation, state.phase, node.as_deref())
            .await;
        let (verdict, mut proof) = match proof {
            Ok(confirmed) => (Ok(()), Some(confirmed)),
            Err(not_fenced) => (Err(not_fenced), None),
        };
        let (may, triggered, basis) = match reads {
            Some(reads) => {
                let ahead = self.ready_ahead(remediation, located);
                StartGates::of(self)
                    .judge_start(remediation, node.as_deref(), reads, (health, ahead))
                    .await?
            }
            None => (
                Ok(()),
                Triggers::of(self).still_triggered(remediation),
                None,
            ),
        };
        let dry_run = dry_run_starts(
            state.phase,
            triggered,
            self.policy.mode,
            may.as_ref().map(|_| ()),
        );
        let probes = if dry_run {
            DryRuns::of(self).probe_strategies(remediation).await
        } else {
            Vec::new()
        };
        let mut observed = Observed {
            now: since_epoch(self.context.clock.now()),
            triggered,
            fence: verdict,
            node: node_view(node.as_deref()),
            may_start: may,
            probes,
        };
        // Plan (pure), then execute.
        let mut step = next_step(&state, &observed, &self.plan_policy());
        tracing::debug!(remediation = %remediation.name_any(), ?step, "planned");
        if let Some(error) = unreachable
            && unreachable_cluster_fails(state.phase, &step)
        {
            return Err(error);
        }
        let now = self.context.clock.now();
        let round = Round {
            remediation: &mut *remediation,
            status,
            state: &state,
            proof: &mut proof,
            node,
            now,
            ready_grace_left: ready_grace_left(&state, &observed, &self.plan_policy()),
        };
        let acted = match (step.clone(), basis) {
            (Step::RequestPowerOff { strategy }, Some(basis)) => {
                match self.launch(writes, round, strategy, basis).await {
                    Launch::Started(acted) => acted,
                    Launch::HeldAtLast(held) => {
                        // Another start overtook this one between its fresh reads and the
                        // lock: planned again with the gate that now holds it.
                        let (held, round) = *held;
                        observed.may_start = Err(held);
                        step = next_step(&state, &observed, &self.plan_policy());
                        Steps::of(self, writes).execute(step, round).await
                    }
                }
            }
            (step, _) => Steps::of(self, writes).execute(step, round).await,
        };
        self.after_step(remediation, proof);
        // The request's status is the health check's view; a failure to write it never
        // holds the remediation (it is written again on the next step). A step that failed
        // may have left `remediation` older than the stored one (a conflict): not reported.
        if acted.is_ok()
            && let Err(error) = Triggers::of(self)
                .report_to_request(writes, remediation)
                .await
        {
            tracing::warn!(%error, "cannot report to the remediation request");
        }
        acted
    }

    /// Whether a start of `remediation` gets its power-off ready ahead: not a dry run's, nor
    /// one whose BMC the BMC gate holds (no credentials go to a BMC before that gate agrees).
    fn readies_ahead(&self, remediation: &Remediation) -> bool {
        self.policy.mode == RemediationMode::Remediate
            && StartGates::of(self).bmc_gate(remediation).is_ok()
    }

    /// The first half of [`Pass::ready_ahead`], beside a start's creation (`planned`: the
    /// Remediation being created): the BMC of the strategy a start fences with located and
    /// its Secret read, nothing sent to the BMC, for the gates that let a start contact its
    /// BMC are judged only after the creation.
    fn locate_ahead(&self, planned: &Remediation) -> Located<'_> {
        if !self.readies_ahead(planned) {
            return Overlapped::ended(None);
        }
        let snapshot = planned.clone();
        let name = self.strategy_at(START_STRATEGY);
        Overlapped::new(async move { Strategies::of(self).locate_power(&snapshot, name).await })
    }

    /// What a start's power-off needs, made ready ahead of it (see
    /// [`StartGates::judge_start`]): the BMC of the strategy a start fences with, its Secret
    /// read (or what [`Pass::locate_ahead`] read, `located`), its session opened and its
    /// system read ahead. Nothing where [`Pass::readies_ahead`] says no.
    fn ready_ahead<'p>(
        &'p self,
        remediation: &Remediation,
        located: Option<Located<'p>>,
    ) -> Located<'p> {
        if !self.readies_ahead(remediation) {
            return Overlapped::ended(None);
        }
        self.ready_power(remediation, self.strategy_at(START_STRATEGY), located)
    }

    /// `name` made ready to ask for the host's power (from what was `located`, if anything),
    /// not yet begun.
    fn ready_power<'p>(
        &'p self,
        remediation: &Remediation,
        name: FenceStrategyName,
        located: Option<Located<'p>>,
    ) -> Located<'p> {
        let snapshot = remediation.clone();
        Overlapped::new(async move {
            let located = match located {
                Some(located) => located.finish().await,
                None => None,
            };
            Strategies::of(self)
                .prepare_power(&snapshot, name, located)
                .await
        })
    }

    /// Starts a remediation the gates let start: the decision is judged once more and its
    /// record persisted under the start lock, with every start this process made (so two
    /// Machines decided at once never both pass a gate that admits one), and the power-off is
    /// requested after the lock is released: a BMC that answers late holds only its own host.
    async fn launch<'a>(
        &self,
        writes: &Writes,
        round: Round<'a>,
        strategy: usize,
        (basis, ahead): (StartBasis, Option<Overlapped<'_, Option<DirectBmc>>>),
    ) -> Launch<'a> {
        let name = self.strategy_at(strategy);
        // Made ready beside the fresh reads for the strategy a start fences with (never
        // under the lock: a BMC that answers late holds only this start); otherwise made
        // ready now, beside the record.
        let mut ahead = match (strategy, ahead) {
            (START_STRATEGY, Some(ahead)) => ahead,
            _ => self.ready_power(round.remediation, name, None),
        };
        ahead.start().await;
        // The driver's name may need the BMC's Secret: read before the lock.
        let driver = ahead
            .beside(Strategies::of(self).driver_name(round.remediation, name))
            .await;
        let recorded = ahead
            .beside(self.record_start(writes, round, strategy, driver, basis))
            .await;
        let remediation = match recorded {
            Ok(remediation) => remediation,
            Err(launch) => return launch,
        };
        let ready = ahead.finish().await;
        Launch::Started(
            Steps::of(self, writes)
                .act_power_off(remediation, name, ready)
                .await,
        )
    }

    /// [`Pass::launch`]'s judgment and record under the start lock: the remediation recorded
    /// (its power-off next), or how the launch ended without one.
    async fn record_start<'a>(
        &self,
        writes: &Writes,
        round: Round<'a>,
        strategy: usize,
        driver: String,
        basis: StartBasis,
    ) -> std::result::Result<&'a mut Remediation, Launch<'a>> {
        let mut launched = self.context.starts.lock().await;
        let verdict = StartGates::of(self).gates(
            round.remediation,
            round.node.as_deref(),
            &mut launched,
            &basis.fresh,
            ListFreshness::ReadAfter(basis.mark),
            &basis.health,
        );
        if let Err(held) = verdict {
            return Err(Launch::HeldAtLast(Box::new((held, round))));
        }
        let remediation = round.remediation;
        let recorded = Steps::of(self, writes)
            .record_power_off(
                Round {
                    remediation: &mut *remediation,
                    ..round
                },
                strategy,
                driver,
            )
            .await;
        if let Err(error) = recorded {
            return Err(Launch::Started(Err(error)));
        }
        launched.insert(
            (self.namespace.clone(), remediation.name_any()),
            self.name.clone(),
        );
        Ok(remediation)
    }

    /// What a step leaves behind in memory: a BMC proof it did not spend (it serves the
    /// release a moment later) and the BMC session of a remediation that ended (not needed
    /// any more).
    fn after_step(&self, remediation: &Remediation, unspent: Option<ConfirmedOff>) {
        if let Some(unspent) = unspent {
            Power::of(self).remember_bmc_proof(unspent);
        }
        // One without a status yet is under way (the first phase).
        if remediation.phase().is_terminal() {
            self.context
                .clients
                .bmc_drivers
                .release(&Power::of(self).machine_key());
            self.context
                .clients
                .bmc_drivers
                .release(&Power::of(self).operator_bmc_key());
        }
    }

    /// Tells once, with a condition and a Warning Event, that the policy no longer names the
    /// strategy this remediation uses: it goes on with that strategy, never another.
    pub(in crate::remediation) async fn note_strategy_dropped(
        &self,
        writes: &Writes,
        remediation: &mut Remediation,
    ) -> Result<()> {
        let mut status = remediation.status.clone().unwrap_or_default();
        let in_use = strategy_label(&status);
        let told = status
            .conditions
            .iter()
            .any(|c| c.is_false(ConditionType::StrategyInPolicy));
        if told {
            return Ok(());
        }
        let message = format!(
            "the policy no longer names strategy {in_use}, which this remediation uses: it goes on with {in_use} and does not escalate past it"
        );
        let now = self.context.clock.now();
        set_condition(
            &mut status,
            ConditionType::StrategyInPolicy,
            false,
            "StrategyRemoved",
            &message,
            now,
        );
        self.persist(writes, remediation, status).await?;
        self.event(
            remediation,
            Severity::Warning,
            EventReason::StrategyNotInPolicy,
            message,
        )
        .await;
        Ok(())
    }
}

/// How a launch ended: started (the step's outcome), or held by a start that overtook it.
enum Launch<'a> {
    Started(Result<Option<Action>>),
    HeldAtLast(Box<(Held, Round<'a>)>),
}

/// Reconciles one Machine: a [`Pass`] over it, once the caches hold a full picture.
pub(in crate::remediation) async fn reconcile(
    machine: Arc<slim::Machine>,
    context: Arc<Context>,
) -> Result<Action> {
    let name = machine.name_any();
    let namespace = machine.namespace().unwrap_or_default();
    let span = tracing::info_span!("remediate", machine = %name, namespace = %namespace);
    if !context.caches_ready() {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let action = pass_for(Subject::Machine(machine), context.clone())
        .run()
        .instrument(span)
        .await?;
    context.backoff.succeeded(&format!("{namespace}/{name}"));
    Ok(action)
}

/// What a failed pass leads to: a backoff for a transient failure, a wait for a change for
/// a terminal one (see [`crate::runtime::requeue`]).
pub(in crate::remediation) fn error_policy(
    machine: Arc<slim::Machine>,
    error: &Error,
    context: Arc<Context>,
) -> Action {
    let key = format!(
        "{}/{}",
        machine.namespace().unwrap_or_default(),
        machine.name_any()
    );
    let subject = Subject::Machine(machine);
    let target = subject.event_target(context.settings.machine_api.api_version(), None);
    report_failed_pass(&context.clients.recorder, target, error);
    requeue_after_failure(&context, &subject, &key, error)
}

/// How long `remediation` has been in its phase (for an ended one: since it ended); zero when
/// its status does not say, as for one that just ended.
fn since_phase(remediation: &Remediation, now: Duration) -> Duration {
    remediation
        .status
        .as_ref()
        .and_then(|s| s.phase_since.as_deref())
        .map(crate::runtime::clock::parse_rfc3339)
        .filter(|since| !since.is_zero())
        .map_or(Duration::ZERO, |since| now.saturating_sub(since))
}

/// Whether `remediation`'s status records its trigger cleared (a dry run saw it go away).
fn trigger_cleared(remediation: &Remediation) -> bool {
    remediation.status.as_ref().is_some_and(|s| {
        s.steps
            .iter()
            .any(|t| t.step == RemediationStep::TriggerCleared)
    })
}
