//! *Execute*: one function per planned [`Step`], each persisting the step before it acts,
//! writing only with the leader's [`Writes`] (checked again right before every write), and
//! telling what it did (Event, metric).
//! [`Steps::execute`] only dispatches; what a step does reads on one screen.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::PostParams;
use tracing::info;

use super::strategy::Withdraw;
use crate::api::FenceStrategyName;
use crate::api::annotations::{EXTERNAL_REMEDIATION, POWERED_OFF_FOR_REMEDIATION};
use crate::api::{ConditionType, EventReason, RemediationStep};
use crate::api::{Remediation, RemediationSpec, RemediationStatus};
use crate::duration::spoken;
use crate::leader::Writes;
use crate::remediation::act::dry_run::describe;
use crate::remediation::act::power::{DirectBmc, Power};
use crate::remediation::act::strategy::Strategies;
use crate::remediation::decide::fence::{ConfirmedOff, FencedHost};
use crate::remediation::decide::gates::Held;
use crate::remediation::decide::observe::{Unusable, node_view};
use crate::remediation::decide::plan::{
    DryRun, FailReason, NodeView, Persisted, Phase, ReleaseMode, Step,
};
use crate::remediation::decide::state::{set_condition, strategy_label};
use crate::remediation::evidence::capi::CapiHosts;
use crate::remediation::evidence::foreign::Foreign;
use crate::remediation::pass::{Pass, Tell};
use crate::remediation::requests::trigger::Triggers;
use crate::remediation::world::execute;
use crate::runtime::clock::rfc3339;
use crate::runtime::events::Severity;
use crate::runtime::runner::Action;
use crate::{Error, Result};

/// How soon a held start is looked at again, at least and at most.
const HELD_RECHECK_MIN: Duration = Duration::from_secs(1);
const HELD_RECHECK_MAX: Duration = Duration::from_secs(5);

/// What a step leaves the pass with: go on with the next step at once, or stop here.
type Next = Option<Action>;

/// Stop the pass; the next change to the Machine or its objects starts another.
fn stop() -> Result<Next> {
    Ok(Some(Action::await_change()))
}

/// What one step works on: the Remediation (updated by each persist), the status it starts
/// from, the persisted state the plan read, the proof taken this round (spent by a release),
/// the Node as cached and the time of the round.
pub(in crate::remediation) struct Round<'a> {
    pub remediation: &'a mut Remediation,
    pub status: RemediationStatus,
    pub state: &'a Persisted,
    pub proof: &'a mut Option<ConfirmedOff>,
    pub node: Option<Arc<Node>>,
    pub now: SystemTime,
    /// While powering on, how much longer the back and Ready Node must stay Ready
    /// (`plan::ready_grace_left`).
    pub ready_grace_left: Option<Duration>,
}

/// The pass's executor: one small function per step of the plan. Made by
/// The Remediation a start will create ([`Steps::plan_start`]), not created yet.
pub(in crate::remediation) struct PlannedStart {
    /// The object to create.
    pub object: Remediation,
    /// Why the Machine's host could not be read from it, told once the object exists.
    unusable: Option<Unusable>,
}

/// `Steps::of(pass, writes)`: it holds the leave to write ([`Writes`]) that only the leader
/// election mints, and every write of a step takes it (and checks it again right before).
#[derive(Clone, Copy)]
pub(crate) struct Steps<'p> {
    pass: &'p Pass,
    /// The leader's leave to write, which every step's writes take (and check again).
    writes: &'p Writes,
}

impl<'p> Steps<'p> {
    /// The Steps of `pass`, writing with the leader's `writes`.
    pub(crate) fn of(pass: &'p Pass, writes: &'p Writes) -> Self {
        Steps { pass, writes }
    }

    /// Carries `step` out. `None`: go on with the next step at once.
    pub(in crate::remediation) async fn execute(
        self,
        step: Step,
        round: Round<'_>,
    ) -> Result<Next> {
        // Only the leader acts: a replica that lost its Lease does not even wait.
        self.writes.check()?;
        match step {
            Step::Done => stop(),
            Step::Wait { after } => self.wait(round, after).await,
            Step::Hold(held) => self.hold(round, held).await,
            Step::Cancel => self.cancel(round).await,
            Step::RecordDryRun(dry) => self.record_dry_run(round, dry).await,
            Step::RequestPowerOff { strategy } => self.request_power_off(round, strategy).await,
            Step::WithdrawPowerOff => self.withdraw_power_off(round).await,
            Step::MarkFenced => self.mark_fenced(round).await,
            Step::RemakePowerOffRequest => self.remake_power_off_request(round).await,
            Step::BackUpNode => self.back_up_node(round).await,
            Step::ReleaseNode(mode) => {
                // The proof was taken again from fresh evidence in this round: a host turned
                // back on since the Fenced step is not off any more. It is spent here.
                let Some(proof) = round.proof.take() else {
                    return Ok(Some(Action::requeue(self.pass.context.settings.poll)));
                };
                self.release_node(round.remediation, round.status, mode, proof)
                    .await?;
                Ok(None)
            }
            Step::RequestPowerOn => self.request_power_on(round).await,
            Step::Restore => self.restore(round).await,
            Step::Escalate { to, why } => self.escalate(round, to, why).await,
            Step::Retry { attempt, why } => self.retry(round, attempt, why).await,
            Step::Fail(reason) => {
                self.fail(round.remediation, round.status, round.state, reason)
                    .await?;
                stop()
            }
        }
    }

    /// Waits. A crash between persisting a request and making it leaves the phase without
    /// its request: it is made sure of while waiting.
    async fn wait(self, round: Round<'_>, after: Duration) -> Result<Next> {
        match round.state.phase {
            Phase::PoweringOff => {
                Strategies::of(self.pass)
                    .ensure_request(self.writes, round.remediation, round.state, true)
                    .await?
            }
            Phase::PoweringOn => {
                Strategies::of(self.pass)
                    .ensure_request(self.writes, round.remediation, round.state, false)
                    .await?;
                Foreign::of(self.pass)
                    .note_kept_off(self.writes, round.remediation)
                    .await?;
                self.note_ready_grace(round.remediation, round.ready_grace_left, round.now)
                    .await?;
            }
            _ => {}
        }
        Ok(Some(Action::requeue(after)))
    }

    /// While the new Node must stay Ready a while before it is restored: said once in the
    /// `ReadyGrace` condition with when it will be, so that `PoweringOn` past the Node's Ready
    /// reads as the wait it is; turned False if the Node stops being Ready meanwhile.
    async fn note_ready_grace(
        self,
        remediation: &mut Remediation,
        left: Option<Duration>,
        now: SystemTime,
    ) -> Result<()> {
        let mut status = remediation.status.clone().unwrap_or_default();
        let waiting = status
            .conditions
            .iter()
            .any(|c| c.is_true(ConditionType::ReadyGrace));
        let (truth, reason, message) = match left.filter(|l| !l.is_zero()) {
            Some(_) if waiting => return Ok(()),
            Some(left) => {
                let grace = spoken(self.pass.plan_policy().ready_grace);
                let node = self.pass.subject_node().unwrap_or_default();
                let message = format!(
                    "Node {node} is back from a new boot and Ready; it is restored once Ready for {grace} (readyGraceSeconds), at {}",
                    rfc3339(now + left)
                );
                (true, "Waiting", message)
            }
            None if waiting => (
                false,
                "NotReady",
                "the Node is not Ready any more".to_owned(),
            ),
            None => return Ok(()),
        };
        set_condition(
            &mut status,
            ConditionType::ReadyGrace,
            truth,
            reason,
            &message,
            now,
        );
        self.pass.persist(self.writes, remediation, status).await
    }

    /// Holds the start: the gate's condition and a Warning, once per reason.
    async fn hold(self, round: Round<'_>, held: Held) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            now,
            ..
        } = round;
        let reason = held.to_string();
        let was = status
            .conditions
            .iter()
            .any(|c| c.is_true(ConditionType::Held) && c.message == reason);
        if !was {
            set_condition(
                &mut status,
                ConditionType::Held,
                true,
                held.gate(),
                &reason,
                now,
            );
            self.pass.persist(self.writes, remediation, status).await?;
            // The gate is the action: a start held by one gate and then another is two
            // Events, each with its own note.
            let action = format!("HeldBy{}", held.gate());
            self.pass
                .event_action(
                    remediation,
                    Severity::Warning,
                    (EventReason::Held, &action),
                    reason,
                )
                .await;
        }
        // Gates open when other Machines change; their events do not reach this one, so
        // look again after a while (a finished remediation wakes held ones at once).
        let recheck =
            (self.pass.context.settings.poll * 4).clamp(HELD_RECHECK_MIN, HELD_RECHECK_MAX);
        Ok(Some(Action::requeue(recheck)))
    }

    /// The trigger went away before anything was done.
    async fn cancel(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            status,
            now,
            ..
        } = round;
        let note = "the trigger went away before anything was done";
        let step = (RemediationStep::Cancelled, Some(Phase::Cancelled));
        let tell = Tell::normal(EventReason::Cancelled, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        stop()
    }

    /// Persists the power-off request with what the release will need (the Node's UID and
    /// boot ID), then makes it.
    async fn request_power_off(self, round: Round<'_>, strategy: usize) -> Result<Next> {
        let name = self.pass.strategy_at(strategy);
        let driver = Strategies::of(self.pass)
            .driver_name(round.remediation, name)
            .await;
        let remediation = round.remediation;
        self.record_power_off(
            Round {
                remediation: &mut *remediation,
                ..round
            },
            strategy,
            driver,
        )
        .await?;
        self.act_power_off(remediation, name, None).await
    }

    /// The start's record: `PoweringOff` with the strategy, the driver, the attempt and what
    /// the Node looked like, persisted before any request (a restart finds it and goes on).
    pub(in crate::remediation) async fn record_power_off(
        self,
        round: Round<'_>,
        strategy: usize,
        driver: String,
    ) -> Result<()> {
        let Round {
            remediation,
            mut status,
            state,
            node,
            now,
            ..
        } = round;
        let name = self.pass.strategy_at(strategy);
        status.strategy = Some(name.into());
        status.driver = Some(driver);
        status.attempt = Some(state.attempt);
        remember_boot(&mut status, node.as_deref());
        remember_node_uid(&mut status, node.as_deref());
        // Where that Node is: the proof releases it there only.
        status.node_cluster = self.pass.node_cluster(remediation).map(|c| c.name);
        set_condition(&mut status, ConditionType::Held, false, "Started", "", now);
        // Told once the request is made (`act_power_off`).
        let step = (RemediationStep::PowerOffRequested, Some(Phase::PoweringOff));
        self.pass
            .take_step(self.writes, remediation, status, step, now, None)
            .await
    }

    /// The power-off request of a start just recorded, and the Event that tells it.
    pub(in crate::remediation) async fn act_power_off(
        self,
        remediation: &mut Remediation,
        name: FenceStrategyName,
        prepared: Option<DirectBmc>,
    ) -> Result<Next> {
        // The request first: every moment before it, the hung host may still write to
        // shared storage.
        let requested = Strategies::of(self.pass)
            .power_off_prepared(self.writes, remediation, name, prepared)
            .await;
        let note = format!("fencing with {}", name.as_str());
        self.pass
            .event(
                remediation,
                Severity::Normal,
                EventReason::PowerOffRequested,
                note,
            )
            .await;
        self.pass.context.metrics.remediation_started(name.as_str());
        if let Err(error) = requested {
            self.pass
                .note_error(self.writes, remediation, &error)
                .await?;
        }
        Ok(None)
    }

    /// The trigger went away before the proof: every request is withdrawn.
    async fn withdraw_power_off(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            status,
            state,
            now,
            ..
        } = round;
        if let Err(error) = Strategies::of(self.pass)
            .withdraw_all(self.writes, remediation, state, Withdraw::Everything)
            .await
        {
            // A BMC that refuses us, or stays out of reach past the power-off deadline, cannot
            // take the request back: the remediation ends Failed and says the host may be left
            // off, instead of trying for ever (no phase without a deadline). No Node was
            // released: there is no proof.
            let deadline = Duration::from_secs(self.pass.policy.timeouts.power_off_seconds.into());
            let waited = crate::runtime::clock::since_epoch(now).saturating_sub(state.phase_since);
            if error.is_transient() && waited < deadline {
                return Err(error);
            }
            let why = format!(
                "the trigger went away before the host was proven off, and the power-off request could not be withdrawn ({error}): the host may be left off"
            );
            self.fail(
                remediation,
                status,
                state,
                FailReason::PowerOffNotConfirmed(why),
            )
            .await?;
            return stop();
        }
        let note = "the trigger went away before the host was proven off; power-off withdrawn";
        let step = (RemediationStep::PowerOffWithdrawn, Some(Phase::Cancelled));
        let tell = Tell::normal(EventReason::Cancelled, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        stop()
    }

    /// Records the proof (not spent: the release takes it again) and marks the Machine.
    async fn mark_fenced(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            proof,
            now,
            ..
        } = round;
        let Some(confirmed) = proof.as_ref() else {
            return Ok(Some(Action::requeue(self.pass.context.settings.poll)));
        };
        let host = confirmed.host().to_string();
        status.last_power_state = Some("Off".into());
        let by = strategy_label(&status);
        let message = format!("confirmed by {by}");
        set_condition(
            &mut status,
            ConditionType::Fenced,
            true,
            "PowerOffConfirmed",
            &message,
            now,
        );
        let step = (RemediationStep::Fenced, Some(Phase::Fenced));
        self.pass
            .take_step(self.writes, remediation, status, step, now, None)
            .await?;
        self.pass
            .annotate_machine(
                self.writes,
                POWERED_OFF_FOR_REMEDIATION,
                Some(""),
                "MarkMachine",
            )
            .await?;
        let note = match confirmed.corroborated() {
            Some(how) => format!("{host} is proven off ({how})"),
            None => format!("{host} is proven off"),
        };
        let tell = Tell::normal(EventReason::Fenced, note);
        self.pass.tell(remediation, tell).await;
        Ok(None)
    }

    /// Our power-off request vanished after the proof: made again, once, and the Fenced
    /// clock restarts (the proof must hold for a while from here).
    async fn remake_power_off_request(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            now,
            ..
        } = round;
        status.power_off_request_remade = true;
        status.phase_since = Some(rfc3339(now));
        let note = format!(
            "our power-off request {} was removed from the host after it was fenced (by an admin, another controller or a restore of the object); made again, once: the Node is released only on a proof that holds for half the power-off deadline from now",
            Power::of(self.pass).reboot_annotation()
        );
        let step = (RemediationStep::PowerOffRequestRemade, None);
        let tell = Tell::warning(EventReason::PowerOffRequestRemoved, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        let strategy = self.pass.strategy_in_use(remediation);
        Strategies::of(self.pass)
            .request_power(self.writes, remediation, strategy, true)
            .await?;
        Ok(None)
    }

    /// Saves the Node's labels, annotations and taints before it is released.
    async fn back_up_node(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            node,
            now,
            ..
        } = round;
        let Some(node) = &node else {
            return Ok(None);
        };
        let mut backup = execute::backup_of(node);
        Foreign::of(self.pass)
            .adopt_legacy_backup(remediation, &mut backup)
            .await;
        let note = format!(
            "Node {} saved: {} label(s), {} annotation(s), {} taint(s)",
            node.name_any(),
            backup.labels.len(),
            backup.annotations.len(),
            backup.taints.len()
        );
        status.node_backup = Some(backup);
        let step = (RemediationStep::NodeBackedUp, None);
        let tell = Tell::normal(EventReason::NodeBackedUp, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        // Saved first: the Node's deletion, which the finalizer would block, comes next.
        Foreign::of(self.pass)
            .release_legacy_finalizer(self.writes, remediation, node)
            .await?;
        Ok(None)
    }

    /// The Node is released: the power-off requests are withdrawn, powering the host on.
    async fn request_power_on(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            status,
            state,
            now,
            ..
        } = round;
        let step = (RemediationStep::PowerOnRequested, Some(Phase::PoweringOn));
        self.pass
            .take_step(self.writes, remediation, status, step, now, None)
            .await?;
        Strategies::of(self.pass)
            .withdraw_all(self.writes, remediation, state, Withdraw::Everything)
            .await?;
        let tell = Tell::normal(EventReason::PowerOnRequested, "powering the host on");
        self.pass.tell(remediation, tell).await;
        Ok(None)
    }

    /// The Node is back: its labels and taints restored, the requests, the mark and the
    /// trigger removed, and the remediation Succeeded.
    async fn restore(self, round: Round<'_>) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            state,
            node,
            now,
            ..
        } = round;
        if status
            .conditions
            .iter()
            .any(|c| c.is_true(ConditionType::ReadyGrace))
        {
            let held = format!("Ready for {}", spoken(self.pass.plan_policy().ready_grace));
            set_condition(
                &mut status,
                ConditionType::ReadyGrace,
                false,
                "Held",
                &held,
                now,
            );
        }
        if state.phase != Phase::Restoring {
            let note = "the Node is Ready: restoring its labels and taints, removing the trigger";
            let step = (RemediationStep::Restoring, Some(Phase::Restoring));
            let tell = Tell::normal(EventReason::Restoring, note);
            self.pass
                .take_step(self.writes, remediation, status, step, now, Some(tell))
                .await?;
            status = remediation.status.clone().unwrap_or_default();
        }
        if let Some(node) = &node {
            self.restore_node(remediation, &status, node).await?;
        }
        Strategies::of(self.pass)
            .withdraw_all(
                self.writes,
                remediation,
                state,
                Withdraw::RebootRequestsOnly,
            )
            .await?;
        self.unmark_machine_and_remove_trigger().await?;
        set_condition(
            &mut status,
            ConditionType::Succeeded,
            true,
            "NodeBack",
            "the Node is Ready again",
            now,
        );
        let strategy = strategy_label(&status);
        let step = (RemediationStep::Succeeded, Some(Phase::Succeeded));
        let tell = Tell::normal(EventReason::Succeeded, "the Node is back");
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        self.pass
            .context
            .metrics
            .remediation_succeeded(&strategy, self.pass.age(remediation));
        stop()
    }

    /// Puts the saved labels, annotations and taints back on the Node, and lifts the
    /// out-of-service taint.
    async fn restore_node(
        self,
        remediation: &Remediation,
        status: &RemediationStatus,
        node: &Node,
    ) -> Result<()> {
        let nodes = self.pass.node_api(remediation).await?;
        // The legacy actuator's backup too, when it saved the Node and baremend did not
        // (its Node was already gone when this remediation began).
        let mut backup = status.node_backup.clone();
        if let Some(legacy) = Foreign::of(self.pass).legacy_backup(remediation).await {
            execute::adopt_backup(backup.get_or_insert_with(Default::default), legacy);
        }
        if let Some(backup) = &backup {
            let restored = execute::restore_node(self.writes, nodes.api(), node, backup).await?;
            if restored != execute::Restored::default() {
                let note = format!(
                    "Node {} restored: {} label(s) and annotation(s), {} taint(s) put back",
                    node.name_any(),
                    restored.keys,
                    restored.taints
                );
                self.pass
                    .event(
                        remediation,
                        Severity::Normal,
                        EventReason::NodeRestored,
                        note,
                    )
                    .await;
            }
        }
        execute::remove_out_of_service(self.writes, &nodes, node).await?;
        Foreign::of(self.pass).drop_legacy_backup(self.writes).await
    }

    /// Removes the Machine's powered-off mark and the health check's trigger.
    async fn unmark_machine_and_remove_trigger(self) -> Result<()> {
        let mark = POWERED_OFF_FOR_REMEDIATION;
        self.pass
            .annotate_machine(self.writes, mark, None, "UnmarkMachine")
            .await?;
        let trigger = EXTERNAL_REMEDIATION;
        self.pass
            .annotate_machine(self.writes, trigger, None, "RemoveTrigger")
            .await
    }

    /// The strategy in use could not prove the host off: the next one takes over.
    async fn escalate(self, round: Round<'_>, to: usize, why: String) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            now,
            ..
        } = round;
        let name = self.pass.strategy_at(to);
        status.strategy = Some(name.into());
        status.driver = Some(
            Strategies::of(self.pass)
                .driver_name(remediation, name)
                .await,
        );
        status.last_error = Some(why.clone());
        status.phase_since = Some(rfc3339(now));
        set_condition(
            &mut status,
            ConditionType::Escalated,
            true,
            name.as_str(),
            &why,
            now,
        );
        let note = format!("{why}; trying {}", name.as_str());
        let step = (RemediationStep::Escalated, None);
        let tell = Tell::warning(EventReason::Escalated, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        self.power_off_anew(remediation, name).await
    }

    /// Another power cycle, from the first strategy, with the Node's identity taken again.
    async fn retry(self, round: Round<'_>, attempt: u32, why: String) -> Result<Next> {
        let Round {
            remediation,
            mut status,
            node,
            now,
            ..
        } = round;
        status.attempt = Some(attempt);
        let name = self.pass.strategy_at(0);
        status.strategy = Some(name.into());
        // A new power cycle starts from the first strategy: an escalation was the last one's.
        if status
            .conditions
            .iter()
            .any(|c| c.is_true(ConditionType::Escalated))
        {
            set_condition(
                &mut status,
                ConditionType::Escalated,
                false,
                "Retry",
                "",
                now,
            );
        }
        status.last_error = Some(why.clone());
        status.power_off_request_remade = false;
        remember_boot(&mut status, node.as_deref());
        remember_node_uid(&mut status, node.as_deref());
        status.phase_since = Some(rfc3339(now));
        let note = format!("{why}: power cycle {attempt}");
        let step = (RemediationStep::Retry, Some(Phase::PoweringOff));
        let tell = Tell::warning(EventReason::Retry, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        self.power_off_anew(remediation, name).await
    }

    /// After an escalation's, a retry's or a failure's record: the power-off asked of `name`.
    /// A refusal is noted on the Remediation (its deadline still runs), not returned: the
    /// record stands.
    async fn power_off_anew(
        self,
        remediation: &mut Remediation,
        name: FenceStrategyName,
    ) -> Result<Next> {
        if let Err(error) = Strategies::of(self.pass)
            .request_power(self.writes, remediation, name, true)
            .await
        {
            self.pass
                .note_error(self.writes, remediation, &error)
                .await?;
        }
        Ok(None)
    }

    /// Creates the subject's Remediation number `number`, owned by the Machine (or by the
    /// `HostBmc` of a Node without one). A Cluster API Machine's workload cluster is being
    /// connected meanwhile ([`Pass::connect_ahead`], not waited for): its round trips (the
    /// kubeconfig Secret, the probe, the first list of Nodes) overlap the creation's, then the
    /// start's fresh reads (see `step`), instead of coming before them.
    pub(in crate::remediation) async fn start(self, number: usize) -> Result<Remediation> {
        let planned = self.plan_start(number).await?;
        self.create_planned(planned).await
    }

    /// [`Steps::start`] up to the creation: the Remediation it will create (so that what
    /// needs only its spec, such as locating the BMC, can go beside the creation).
    pub(in crate::remediation) async fn plan_start(self, number: usize) -> Result<PlannedStart> {
        self.pass.connect_ahead();
        let (host, unusable) = match self.pass.subject.machine() {
            Some(machine) => match CapiHosts::of(self.pass).host_of_machine(machine).await? {
                Ok(host) => (host, None),
                Err(unusable) => (None, Some(unusable)),
            },
            None => (None, None),
        };
        let machine = self.pass.subject.machine();
        let mut object = Remediation::new(
            &format!("{}-{number}", self.pass.name),
            RemediationSpec {
                machine_name: machine.map(|m| m.name_any()),
                machine_uid: machine.and_then(|m| m.uid()),
                host_bmc: self.pass.subject.host_bmc().map(|m| m.name_any()),
                node_name: self.pass.subject_node(),
                host: host.map(|h| h.to_string()),
                trigger: Triggers::of(self.pass).cached_trigger(),
            },
        );
        object.metadata.namespace = Some(self.pass.namespace.clone());
        // Owned by this shard alone (see `crate::shard::owned_by`).
        object.metadata.labels = crate::shard::owner_labels(self.pass.context.leadership.shard());
        object.metadata.owner_references =
            Some(vec![self.pass.subject.owner_reference(
                self.pass.context.settings.machine_api.api_version(),
            )]);
        Ok(PlannedStart { object, unusable })
    }

    /// [`Steps::start`]'s creation of what [`Steps::plan_start`] planned.
    pub(in crate::remediation) async fn create_planned(
        self,
        planned: PlannedStart,
    ) -> Result<Remediation> {
        let PlannedStart { object, unusable } = planned;
        let api = self.pass.remediation_api();
        self.writes.check()?;
        let created = match api.create(&PostParams::default(), &object).await {
            Ok(created) => created,
            // Created by an earlier pass whose store update has not arrived yet.
            Err(kube::Error::Api(status)) if status.code == 409 => api
                .get(&object.name_any())
                .await
                .map_err(Error::kube("GetRemediation"))?,
            Err(source) => return Err(Error::kube("CreateRemediation")(source)),
        };
        // A Machine and a Machine-less Node of one name in one namespace would share names
        // of Remediations: never carry on with the other one's.
        if created.spec.of_machineless_node() != object.spec.of_machineless_node() {
            return Err(Error::Invalid {
                object: format!(
                    "{} {}/{}",
                    self.pass.subject.kind(),
                    self.pass.namespace,
                    self.pass.name
                ),
                reason: format!(
                    "Remediation {} already exists for a {} of the same name: rename one of them",
                    created.name_any(),
                    if created.spec.of_machineless_node() {
                        "Node"
                    } else {
                        "Machine"
                    },
                ),
            });
        }
        info!(machine = %self.pass.name, remediation = %created.name_any(), "remediation started");
        if let Some(unusable) = unusable {
            // Not fatal yet: a HostBmc may still name the BMC. The strategies say the rest.
            self.pass
                .event(
                    &created,
                    Severity::Warning,
                    EventReason::InvalidMachine,
                    format!("Machine {}: {unusable}", self.pass.name),
                )
                .await;
        }
        Ok(created)
    }

    /// Releases the Node the proof names (deletes it, or taints it out-of-service), each step
    /// persisted before it acts, and spends the proof.
    async fn release_node(
        self,
        remediation: &mut Remediation,
        status: RemediationStatus,
        mode: ReleaseMode,
        proof: ConfirmedOff,
    ) -> Result<()> {
        let now = self.pass.context.clock.now();
        let nodes = self.pass.node_api(remediation).await?;
        let Some((name, node)) = proof.node().map(|n| (n.name.clone(), n.to_string())) else {
            let step = (RemediationStep::NodeAbsent, Some(Phase::NodeReleased));
            let tell = Tell::normal(EventReason::NodeAbsent, "no Node to release");
            return self
                .pass
                .take_step(self.writes, remediation, status, step, now, Some(tell))
                .await;
        };
        let host = proof.host().to_string();
        let (before, after, reason, note) = match mode {
            ReleaseMode::Delete => (
                RemediationStep::NodeDeleting,
                RemediationStep::NodeDeleted,
                EventReason::NodeDeleted,
                format!("{node} deleted ({host} is proven off): its workloads may start elsewhere"),
            ),
            ReleaseMode::OutOfService => (
                RemediationStep::NodeTainting,
                RemediationStep::NodeTainted,
                EventReason::NodeTainted,
                format!(
                    "{node} tainted out-of-service ({host} is proven off): its workloads may start elsewhere"
                ),
            ),
        };
        self.pass
            .take_step(self.writes, remediation, status, (before, None), now, None)
            .await?;
        // The step's own persist (and the taint's read of the Node) take round trips: a
        // BareMetalHost is read once more after them, so that the proof is the last read
        // before the call.
        match mode {
            ReleaseMode::Delete => {
                let proof = self.proof_right_before_release(remediation, proof).await?;
                execute::delete_node(self.writes, proof, &nodes).await?;
            }
            ReleaseMode::OutOfService => {
                if let Some(node) = execute::read_node(&nodes, &name).await? {
                    let proof = self.proof_right_before_release(remediation, proof).await?;
                    execute::taint_out_of_service(self.writes, proof, &nodes, node).await?;
                }
            }
        }
        let status = remediation.status.clone().unwrap_or_default();
        let step = (after, Some(Phase::NodeReleased));
        let tell = Tell::normal(reason, note);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await
    }
    /// The proof to spend: a BMC's as given (two reads a moment ago), a BareMetalHost's taken
    /// again from a fresh GET for the same Node.
    async fn proof_right_before_release(
        self,
        remediation: &Remediation,
        proof: ConfirmedOff,
    ) -> Result<ConfirmedOff> {
        if !matches!(proof.host(), FencedHost::BareMetalHost { .. }) {
            return Ok(proof);
        }
        let mut target = Power::of(self.pass).fence_target(remediation, proof.strategy(), None);
        target.node = proof.node().cloned();
        Strategies::of(self.pass)
            .take_proof(remediation, &target)
            .await
            .map_err(|not_fenced| Error::Changed {
                object: format!("Remediation {}", remediation.name_any()),
                reason: format!("the proof did not hold right before the release: {not_fenced}"),
            })
    }
    /// Fails the remediation. A host whose Node never came back was fenced and released: it
    /// is left powered off (nothing it runs may compete with the replacements), and with
    /// `deleteMachineOnFailure` a replaceable Machine is deleted. An unfenced host is left
    /// alone entirely.
    async fn fail(
        self,
        remediation: &mut Remediation,
        mut status: RemediationStatus,
        state: &Persisted,
        reason: FailReason,
    ) -> Result<()> {
        let now = self.pass.context.clock.now();
        let label = reason.label();
        let mut message = failure_message(&reason, state.attempt);
        // What kept the host off, if something did: the failure names it, not only the Node.
        let kept_off = status
            .conditions
            .iter()
            .find(|c| c.is_true(ConditionType::PowerOnBlocked));
        if let (FailReason::NodeNeverReady, Some(kept_off)) = (&reason, kept_off) {
            message = format!("{message}: {}", kept_off.message);
        }
        // A strategy taken over that could not do better: the first cause is the one to fix
        // (a host in error whose next strategy is refused fails naming the error).
        let escalated = status
            .conditions
            .iter()
            .find(|c| c.is_true(ConditionType::Escalated));
        if let (FailReason::PowerOffNotConfirmed(why), Some(escalated)) = (&reason, escalated)
            && !why.contains(&escalated.message)
        {
            message = format!("{message}; escalated because {}", escalated.message);
        }
        let strategy = strategy_label(&status);
        status.last_error = Some(message.clone());
        set_condition(
            &mut status,
            ConditionType::Succeeded,
            false,
            label,
            &message,
            now,
        );
        if let FailReason::FenceLost(_) = reason {
            set_condition(
                &mut status,
                ConditionType::Fenced,
                false,
                "FenceLost",
                &message,
                now,
            );
            // The Machine's mark would claim a power-off nobody can prove any more. Removed
            // before Failed is persisted: a failed removal is tried again by the next pass.
            self.pass
                .annotate_machine(
                    self.writes,
                    POWERED_OFF_FOR_REMEDIATION,
                    None,
                    "UnmarkMachine",
                )
                .await?;
        }
        let step = (RemediationStep::Failed, Some(Phase::Failed));
        let tell = Tell::warning(EventReason::Failed, message);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        self.pass
            .context
            .metrics
            .remediation_failed(&strategy, label);
        if reason != FailReason::NodeNeverReady {
            return Ok(());
        }
        let name = self.pass.strategy_in_use(remediation);
        self.power_off_anew(remediation, name).await?;
        if self.pass.policy.delete_machine_on_failure {
            self.delete_machine(remediation).await?;
        }
        Ok(())
    }

    /// Deletes the Machine so that its MachineSet replaces it, where that is safe: see
    /// [`crate::remediation::decide::observe::reprovisionable`].
    async fn delete_machine(self, remediation: &mut Remediation) -> Result<()> {
        let host = self.pass.host(remediation).and_then(|(_, host)| host);
        let Some(machine) = self.pass.subject.machine() else {
            return Ok(());
        };
        if let Err(why) =
            crate::remediation::decide::observe::reprovisionable(&machine.metadata, host.as_deref())
        {
            self.pass
                .event(
                    remediation,
                    Severity::Normal,
                    EventReason::MachineKept,
                    format!("deleteMachineOnFailure: the Machine is kept: {why}"),
                )
                .await;
            return Ok(());
        }
        let status = remediation.status.clone().unwrap_or_default();
        // The Remediation is owned by the Machine and goes with it: the Event stays behind.
        let tell = Tell::warning(
            EventReason::MachineDeleted,
            "deleteMachineOnFailure: deleting the Machine so that its MachineSet replaces it",
        );
        let step = (RemediationStep::MachineDeleting, None);
        let now = self.pass.context.clock.now();
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        let Some(machines) = self.pass.machines_api() else {
            return Ok(());
        };
        execute::delete_machine(self.writes, &machines, &self.pass.name, machine.uid()).await?;
        self.pass.context.metrics.machine_deleted();
        Ok(())
    }

    /// Records the dry run: the would-be strategy, the `DryRun` condition and phase; then
    /// tells it, and counts it.
    pub(in crate::remediation) async fn record_dry_run(
        self,
        round: Round<'_>,
        dry: DryRun,
    ) -> Result<Option<Action>> {
        let Round {
            remediation,
            mut status,
            now,
            ..
        } = round;
        let record = describe(
            &dry,
            &self.pass.policy.strategies,
            remediation.spec.node_name.as_deref(),
        );
        status.strategy = dry.strategy.map(|i| self.pass.strategy_at(i).into());
        set_condition(&mut status, ConditionType::Held, false, "DryRun", "", now);
        set_condition(
            &mut status,
            ConditionType::DryRun,
            true,
            record.reason,
            &record.message,
            now,
        );
        let step = (RemediationStep::DryRun, Some(Phase::DryRun));
        let tell = Tell::normal(EventReason::DryRun, record.message);
        self.pass
            .take_step(self.writes, remediation, status, step, now, Some(tell))
            .await?;
        tracing::info!(remediation = %remediation.name_any(), outcome = record.reason, "dry run recorded");
        if let Some(why) = record.warning {
            let note = format!("dry run: no fencing path answered its probe: {why}");
            self.pass
                .event(
                    remediation,
                    Severity::Warning,
                    EventReason::DryRunProbeFailed,
                    note,
                )
                .await;
        }
        if !self.pass.context.policy_configured() {
            let note = "no RemediationPolicy named default exists: baremend records dry runs and changes nothing until one is created (kubectl create -f deploy/policies.yaml, then set its mode)";
            self.pass
                .event(
                    remediation,
                    Severity::Warning,
                    EventReason::PolicyMissing,
                    note.into(),
                )
                .await;
        }
        self.pass.context.metrics.remediation_dry_run(record.reason);
        Ok(Some(Action::await_change()))
    }
}

/// Records the UID of the Node before a power-off request: the proof of power-off may release
/// that Node object only. A Node that is missing leaves the last known UID in place.
fn remember_node_uid(status: &mut RemediationStatus, node: Option<&Node>) {
    if let Some(uid) = node.and_then(|n| n.metadata.uid.clone()) {
        status.node_uid = Some(uid);
    }
}

/// Records the boot ID the Node reports before a power-off request: the Node is back only
/// once it reports another. A Node without one leaves the last known ID in place.
fn remember_boot(status: &mut RemediationStatus, node: Option<&Node>) {
    if let NodeView::Present {
        boot_id: Some(id), ..
    } = node_view(node)
    {
        status.node_boot_id = Some(id);
    }
}

/// What a failure tells the operator: why, and what was left as it was.
fn failure_message(reason: &FailReason, attempts: u32) -> String {
    match reason {
        FailReason::PowerOffNotConfirmed(why) => {
            format!("power-off never confirmed, the Node is left alone: {why}")
        }
        FailReason::FenceLost(why) => format!(
            "the host was proven off but the proof could not be taken again for the release, so the Node is kept: {why}"
        ),
        FailReason::NodeNeverReady => format!(
            "the Node did not come back in {attempts} power cycle(s); the host is left powered off"
        ),
        FailReason::RestoreTimedOut => {
            "the Node came back but could not be restored in time; the trigger is kept".into()
        }
    }
}
