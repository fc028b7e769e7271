//! *Execute*: one function per planned drift [`Step`], each persisting the step before it
//! acts and telling what it did (Events, metrics); [`Steps::execute`] only dispatches.

use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::helper::{self, HelperOp};
use super::pass::{Pass, record};
use super::plan::{Milestone, NodeObservation, Noted, Step};
use crate::Result;
use crate::api::{ConditionType, DriftEventReason, DriftStep};
use crate::api::{DriftPhase, DriftRemediation, DriftRemediationStatus};
use crate::drift::mark::PlannedReboot;
use crate::drift::node_ops::NodeOps;
use crate::leader::Writes;
use crate::runtime::clock::rfc3339;
use crate::runtime::conditions::upsert_condition;
use crate::runtime::events::Severity;

/// Marks the start of an action: the hold is over, the step recorded with its phase.
fn started(
    status: &mut DriftRemediationStatus,
    step: DriftStep,
    phase: DriftPhase,
    now: &str,
    at: SystemTime,
) {
    upsert_condition(
        &mut status.conditions,
        ConditionType::Held,
        false,
        "Started",
        "",
        at,
    );
    record(status, step, Some(phase), now);
}

/// The drift pass's executor: one function per planned step (one stage's methods, over the [`Pass`] they serve).
#[derive(Clone, Copy)]
pub(crate) struct Steps<'p> {
    pass: &'p Pass,
    /// The leader's leave to write, which its writes take (and check again).
    writes: &'p Writes,
}

impl<'p> Steps<'p> {
    /// The Steps of `pass`, writing with the leader's `writes`.
    pub(crate) fn of(pass: &'p Pass, writes: &'p Writes) -> Self {
        Steps { pass, writes }
    }

    /// Carries `step` out, persisting it before it acts.
    pub(super) async fn execute(
        self,
        remediation: &mut DriftRemediation,
        step: Step,
        node: &NodeObservation,
    ) -> Result<Action> {
        self.writes.check()?;
        let now = rfc3339(self.pass.context.clock.now());
        let status = remediation.status.clone().unwrap_or_default();
        let r = remediation;
        match step {
            Step::Done => Ok(Action::await_change()),
            Step::Wait { after } => self.wait(r, status, after).await,
            Step::EndDebounce => self.end_debounce(r, status, &now).await,
            Step::SelfHealed => self.self_healed(r, status, &now).await,
            Step::Hold(message, reason) => self.hold(r, status, message, reason).await,
            Step::RequestForce => self.request_force(r, status, node, &now).await,
            Step::RequestRestore => self.restore(r, status, &now).await,
            Step::StartDrain => self.start_drain(r, status, &now).await,
            Step::Evict => self.evict(r, status).await,
            Step::Uncordon => self.uncordon(r, status, &now).await,
            Step::Record(milestone) => self.record_milestone(r, status, milestone, &now).await,
            Step::Note(noted) => self.note(r, status, noted, now).await,
            Step::Succeed => self.succeed(r, status, &now).await,
            Step::Abort(why) => self.abort(r, status, why, &now).await,
            Step::Fail(reason) => {
                self.fail(r, status, reason.reason(), reason.to_string())
                    .await?;
                Ok(self.poll())
            }
            Step::Escalate => self.escalate_to_machine(r, status, &now).await,
        }
    }

    /// Look again in a poll interval.
    fn poll(self) -> Action {
        Action::requeue(self.pass.context.poll)
    }

    /// Waits; while a forcefile helper runs, it is watched.
    async fn wait(
        self,
        remediation: &mut DriftRemediation,
        status: DriftRemediationStatus,
        after: Duration,
    ) -> Result<Action> {
        if status.phase == DriftPhase::ForceRequested {
            NodeOps::of(self.pass, self.writes)
                .watch_helper(remediation, &HelperOp::Force)
                .await?;
        }
        let at_most = self.pass.context.poll.max(Duration::from_millis(200));
        Ok(Action::requeue(after.min(at_most)))
    }

    /// The drift outlived the debounce: it is real.
    async fn end_debounce(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        record(
            &mut status,
            DriftStep::Debounced,
            Some(DriftPhase::Pending),
            now,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        Ok(self.poll())
    }

    /// The node healed by itself: nothing was done.
    async fn self_healed(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        record(
            &mut status,
            DriftStep::SelfHealed,
            Some(DriftPhase::SelfHealed),
            now,
        );
        let at = self.pass.context.clock.now();
        upsert_condition(
            &mut status.conditions,
            ConditionType::Held,
            false,
            "Ended",
            "",
            at,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        self.pass.ended(remediation, "SelfHealed", None);
        let note = "the node healed by itself; nothing was done";
        self.pass
            .event(
                remediation,
                Severity::Normal,
                DriftEventReason::SelfHealed,
                note.into(),
            )
            .await;
        Ok(self.poll())
    }

    /// Holds the start: the gate's condition and an Event, once per message (a Warning for a
    /// gate; Normal for what the admin chose: `Observe` mode or the annotation).
    async fn hold(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        message: String,
        reason: DriftEventReason,
    ) -> Result<Action> {
        let was = status
            .conditions
            .iter()
            .any(|c| c.is_true(ConditionType::Held) && c.message == message);
        if !was {
            let at = self.pass.context.clock.now();
            upsert_condition(
                &mut status.conditions,
                ConditionType::Held,
                true,
                reason.as_str(),
                &message,
                at,
            );
            self.pass.persist(self.writes, remediation, status).await?;
            let chosen = matches!(
                reason,
                DriftEventReason::ObserveOnly | DriftEventReason::DriftRemediationDisabled
            );
            let severity = if chosen {
                Severity::Normal
            } else {
                Severity::Warning
            };
            self.pass
                .event(remediation, severity, reason, message)
                .await;
        }
        Ok(Action::requeue(self.pass.context.poll * 2))
    }

    /// The Force action: the planned-reboot mark first, then the forcefile through a helper.
    async fn request_force(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        node: &NodeObservation,
        now: &str,
    ) -> Result<Action> {
        if let Some(text) = NodeOps::of(self.pass, self.writes).unpinned_helper_image() {
            self.fail(
                remediation,
                status,
                DriftEventReason::HelperImageNotPinned,
                text,
            )
            .await?;
            return Ok(Action::await_change());
        }
        status.drain_before = node.desired_drain.clone();
        status.boot_before = node.boot_id.clone();
        status.force_file_written = true;
        status.helper_pod = Some(helper::helper_name(
            &remediation.name_any(),
            &HelperOp::Force,
        ));
        let at = self.pass.context.clock.now();
        started(
            &mut status,
            DriftStep::ForceRequested,
            DriftPhase::ForceRequested,
            now,
            at,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        // The mark first: the forcefile may be taken (and the node rebooted) at once.
        PlannedReboot::of(self.pass, self.writes)
            .guard_planned_reboot(Some(remediation))
            .await?;
        NodeOps::of(self.pass, self.writes)
            .start_helper(remediation, &HelperOp::Force, None)
            .await?;
        let note = format!(
            "wrote {} on {}; the MCO re-applies its config and reboots the node",
            crate::api::mco::FORCE_FILE,
            self.pass.name
        );
        self.pass
            .event(
                remediation,
                Severity::Normal,
                DriftEventReason::ForceRequested,
                note,
            )
            .await;
        Ok(self.poll())
    }

    /// Cordons the node before the restore's drain.
    async fn start_drain(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        status.cordoned_by_us = true;
        let at = self.pass.context.clock.now();
        started(
            &mut status,
            DriftStep::CordonRequested,
            DriftPhase::Draining,
            now,
            at,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        NodeOps::of(self.pass, self.writes)
            .set_unschedulable(true)
            .await?;
        let note = format!(
            "cordoned {}; draining it through the Eviction API before the restore",
            self.pass.name
        );
        self.pass
            .event(
                remediation,
                Severity::Normal,
                DriftEventReason::Cordoned,
                note,
            )
            .await;
        Ok(self.poll())
    }

    /// Evicts the node's pods; a refusal (a budget) is told once and looked at again later.
    async fn evict(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
    ) -> Result<Action> {
        let Some(refused) = NodeOps::of(self.pass, self.writes).evict_pods().await? else {
            return Ok(self.poll());
        };
        if status.last_error.as_deref() != Some(refused.as_str()) {
            status.last_error = Some(refused.clone());
            self.pass.persist(self.writes, remediation, status).await?;
            self.pass
                .event(
                    remediation,
                    Severity::Warning,
                    DriftEventReason::EvictionRefused,
                    refused,
                )
                .await;
        }
        Ok(Action::requeue(self.pass.context.poll * 4))
    }

    /// Lifts our own cordon.
    async fn uncordon(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        status.cordoned_by_us = false;
        record(&mut status, DriftStep::Uncordoned, None, now);
        self.pass.persist(self.writes, remediation, status).await?;
        NodeOps::of(self.pass, self.writes)
            .set_unschedulable(false)
            .await?;
        Ok(self.poll())
    }

    /// Records what the MCO was seen doing; once it picked the forcefile up, the helpers go.
    async fn record_milestone(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        milestone: Milestone,
        now: &str,
    ) -> Result<Action> {
        let picked_up = milestone == Milestone::PickedUp;
        if picked_up {
            // The MCD deletes the forcefile when it takes it.
            status.force_file_written = false;
        }
        let phase = picked_up.then_some(DriftPhase::Applying);
        record(&mut status, milestone.step(), phase, now);
        self.pass.persist(self.writes, remediation, status).await?;
        if picked_up {
            NodeOps::of(self.pass, self.writes)
                .remove_helpers(remediation)
                .await?;
        }
        let note = format!("{} on {}", milestone.step(), self.pass.name);
        self.pass
            .event(remediation, Severity::Normal, milestone.reason(), note)
            .await;
        Ok(self.poll())
    }

    /// Notes when the node went NotReady or started draining (the deadlines count from it).
    async fn note(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        noted: Noted,
        now: String,
    ) -> Result<Action> {
        match noted {
            Noted::NotReady => status.not_ready_since = Some(now),
            Noted::Draining => status.draining_since = Some(now),
        }
        self.pass.persist(self.writes, remediation, status).await?;
        Ok(self.poll())
    }

    /// Verified Done on the pool's config: Succeeded, the mark and the helpers gone.
    async fn succeed(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        record(
            &mut status,
            DriftStep::Succeeded,
            Some(DriftPhase::Succeeded),
            now,
        );
        let message = "Done on the pool's config, Ready and schedulable";
        let at = self.pass.context.clock.now();
        upsert_condition(
            &mut status.conditions,
            ConditionType::Succeeded,
            true,
            "Verified",
            message,
            at,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        // Verified Done, so the MCO is idle: the mark goes (a health check's trigger left
        // during the reboot is cleared before).
        PlannedReboot::of(self.pass, self.writes)
            .guard_planned_reboot(Some(remediation))
            .await?;
        NodeOps::of(self.pass, self.writes)
            .remove_helpers(remediation)
            .await?;
        self.pass.ended(remediation, "Succeeded", None);
        let note = format!(
            "{} is Done on {}",
            self.pass.name, remediation.spec.rendered_config
        );
        self.pass
            .event(
                remediation,
                Severity::Normal,
                DriftEventReason::Succeeded,
                note,
            )
            .await;
        Ok(self.poll())
    }

    /// Aborted (by request or because the drift changed): cleaned up.
    async fn abort(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        why: String,
        now: &str,
    ) -> Result<Action> {
        record(
            &mut status,
            DriftStep::Aborted,
            Some(DriftPhase::Aborted),
            now,
        );
        status.last_error = Some(why.clone());
        self.pass.persist(self.writes, remediation, status).await?;
        // Kept while a forcefile may be there or the MCO is still at work.
        PlannedReboot::of(self.pass, self.writes)
            .guard_planned_reboot(Some(remediation))
            .await?;
        self.pass.ended(remediation, "Aborted", None);
        self.pass
            .event(
                remediation,
                Severity::Normal,
                DriftEventReason::Aborted,
                why,
            )
            .await;
        NodeOps::of(self.pass, self.writes)
            .clean_up(remediation)
            .await?;
        Ok(self.poll())
    }

    /// The node stayed NotReady after the reboot: handed to the machine remediation.
    async fn escalate_to_machine(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        record(
            &mut status,
            DriftStep::Escalated,
            Some(DriftPhase::Escalated),
            now,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        // Handed over: the guard lifts the mark, so the machine remediation may take the
        // node once its Machine has the trigger.
        PlannedReboot::of(self.pass, self.writes)
            .guard_planned_reboot(Some(remediation))
            .await?;
        let note = match NodeOps::of(self.pass, self.writes).escalate().await {
            Ok(machine) => format!(
                "{} stayed NotReady; handed to the machine remediation ({machine})",
                self.pass.name
            ),
            Err(error) => format!(
                "{} stayed NotReady; cannot hand it to the machine remediation: {error}",
                self.pass.name
            ),
        };
        self.pass.ended(remediation, "Escalated", None);
        self.pass
            .event(
                remediation,
                Severity::Warning,
                DriftEventReason::Escalated,
                note,
            )
            .await;
        Ok(self.poll())
    }

    /// The restore action: the expected file from the rendered config, through a helper.
    async fn restore(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        use super::classify::DriftKind;
        use super::content::Expected;
        let op = match (remediation.spec.kind, self.pass.expected(remediation).await) {
            (DriftKind::Content | DriftKind::Missing, Ok(Expected::File { bytes, mode })) => {
                let sha256 = super::content::sha256_hex(&bytes);
                Some((
                    HelperOp::Install {
                        path: remediation.spec.target.clone(),
                        mode,
                        sha256,
                    },
                    Some(bytes),
                ))
            }
            (DriftKind::Mode, Ok(Expected::File { mode, .. })) => Some((
                HelperOp::Chmod {
                    path: remediation.spec.target.clone(),
                    mode,
                },
                None,
            )),
            _ => None,
        };
        let Some((op, content)) = op else {
            let text = format!(
                "the restore action cannot fix {} drift of {}; use the Force action",
                remediation.spec.kind, remediation.spec.target
            );
            self.fail(
                remediation,
                status,
                DriftEventReason::RestoreUnsupported,
                text,
            )
            .await?;
            return Ok(Action::await_change());
        };
        if let Some(text) = NodeOps::of(self.pass, self.writes).unpinned_helper_image() {
            self.fail(
                remediation,
                status,
                DriftEventReason::HelperImageNotPinned,
                text,
            )
            .await?;
            return Ok(Action::await_change());
        }
        status.helper_pod = Some(helper::helper_name(&remediation.name_any(), &op));
        started(
            &mut status,
            DriftStep::RestoreRequested,
            DriftPhase::Restoring,
            now,
            self.pass.context.clock.now(),
        );
        self.pass.persist(self.writes, remediation, status).await?;
        NodeOps::of(self.pass, self.writes)
            .start_helper(remediation, &op, content)
            .await?;
        self.pass
            .event(
                remediation,
                Severity::Normal,
                DriftEventReason::RestoreRequested,
                format!(
                    "writing {} back as the rendered config has it",
                    remediation.spec.target
                ),
            )
            .await;
        Ok(Action::requeue(self.pass.context.poll))
    }

    /// Ends the remediation Failed with a reason, and removes a forcefile not picked up.
    async fn fail(
        self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        reason: DriftEventReason,
        text: String,
    ) -> Result<()> {
        let now = self.pass.context.clock.now();
        record(
            &mut status,
            DriftStep::Failed,
            Some(DriftPhase::Failed),
            &rfc3339(now),
        );
        status.last_error = Some(text.clone());
        upsert_condition(
            &mut status.conditions,
            ConditionType::Failed,
            true,
            reason.as_str(),
            &text,
            now,
        );
        upsert_condition(
            &mut status.conditions,
            ConditionType::Held,
            false,
            "Ended",
            "",
            now,
        );
        self.pass.persist(self.writes, remediation, status).await?;
        // Not lifted here: after a timeout the MCO may still drain and reboot the node; the
        // guard keeps the mark until it is done.
        PlannedReboot::of(self.pass, self.writes)
            .guard_planned_reboot(Some(remediation))
            .await?;
        self.pass.ended(remediation, "Failed", Some(reason));
        self.pass
            .event(remediation, Severity::Warning, reason, text)
            .await;
        NodeOps::of(self.pass, self.writes)
            .clean_up(remediation)
            .await
    }
}
