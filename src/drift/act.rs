//! Carrying out a planned drift step: persist it, then act, then tell (Events, metrics).

use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::helper::{self, HelperOp};
use super::pass::{Pass, record};
use super::plan::{Milestone, NodeObservation, Noted, Step};
use crate::Result;
use crate::api::{DriftPhase, DriftRemediation, DriftRemediationStatus};
use crate::runtime::clock::rfc3339;
use crate::runtime::conditions::upsert_condition;

/// Marks the start of an action: the hold is over, the step recorded with its phase.
fn started(
    status: &mut DriftRemediationStatus,
    step: &str,
    phase: DriftPhase,
    now: &str,
    at: SystemTime,
) {
    upsert_condition(&mut status.conditions, "Held", false, "Started", "", at);
    record(status, step, Some(phase), now);
}

impl Pass {
    pub(super) async fn act(
        &self,
        remediation: &mut DriftRemediation,
        step: Step,
        node: &NodeObservation,
    ) -> Result<Action> {
        self.context.leadership.ensure()?;
        let now = rfc3339(self.context.clock.now());
        let mut status = remediation.status.clone().unwrap_or_default();
        let poll = Action::requeue(self.context.poll);
        match step {
            Step::Done => return Ok(Action::await_change()),
            Step::Wait { after } => {
                if status.phase == DriftPhase::ForceRequested {
                    self.watch_helper(remediation, &HelperOp::Force).await?;
                }
                return Ok(Action::requeue(
                    after.min(self.context.poll.max(Duration::from_millis(200))),
                ));
            }
            Step::EndDebounce => {
                record(&mut status, "Debounced", Some(DriftPhase::Pending), &now);
                self.persist(remediation, status).await?;
            }
            Step::SelfHealed => {
                record(
                    &mut status,
                    "SelfHealed",
                    Some(DriftPhase::SelfHealed),
                    &now,
                );
                upsert_condition(
                    &mut status.conditions,
                    "Held",
                    false,
                    "Ended",
                    "",
                    self.context.clock.now(),
                );
                self.persist(remediation, status).await?;
                self.ended(remediation, "SelfHealed", "");
                self.event(
                    remediation,
                    false,
                    "SelfHealed",
                    "the node healed by itself; nothing was done".into(),
                )
                .await;
            }
            Step::Hold(message, reason) => {
                let was = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Held" && c.status == "True" && c.message == message);
                if !was {
                    upsert_condition(
                        &mut status.conditions,
                        "Held",
                        true,
                        reason,
                        &message,
                        self.context.clock.now(),
                    );
                    self.persist(remediation, status).await?;
                    self.event(remediation, true, reason, message).await;
                }
                return Ok(Action::requeue(self.context.poll * 2));
            }
            Step::RequestForce => {
                status.drain_before = node.desired_drain.clone();
                status.boot_before = node.boot_id.clone();
                status.force_file_written = true;
                status.helper_pod = Some(helper::helper_name(
                    &remediation.name_any(),
                    &HelperOp::Force,
                ));
                started(
                    &mut status,
                    "ForceRequested",
                    DriftPhase::ForceRequested,
                    &now,
                    self.context.clock.now(),
                );
                self.persist(remediation, status).await?;
                // The mark first: the forcefile may be taken (and the node rebooted) at once.
                self.guard_planned_reboot(Some(remediation)).await?;
                self.start_helper(remediation, &HelperOp::Force, None)
                    .await?;
                self.event(
                    remediation,
                    false,
                    "ForceRequested",
                    format!(
                        "wrote {} on {}; the MCO re-applies its config and reboots the node",
                        crate::api::mco::FORCE_FILE,
                        self.name
                    ),
                )
                .await;
            }
            Step::RequestRestore => return self.restore(remediation, status, &now).await,
            Step::StartDrain => {
                status.cordoned_by_us = true;
                started(
                    &mut status,
                    "CordonRequested",
                    DriftPhase::Draining,
                    &now,
                    self.context.clock.now(),
                );
                self.persist(remediation, status).await?;
                self.set_unschedulable(true).await?;
                let note = format!(
                    "cordoned {}; draining it through the Eviction API before the restore",
                    self.name
                );
                self.event(remediation, false, "Cordoned", note).await;
            }
            Step::Evict => {
                if let Some(refused) = self.evict_pods().await? {
                    if status.last_error.as_deref() != Some(refused.as_str()) {
                        status.last_error = Some(refused.clone());
                        self.persist(remediation, status).await?;
                        self.event(remediation, true, "EvictionRefused", refused)
                            .await;
                    }
                    return Ok(Action::requeue(self.context.poll * 4));
                }
            }
            Step::Uncordon => {
                status.cordoned_by_us = false;
                record(&mut status, "Uncordoned", None, &now);
                self.persist(remediation, status).await?;
                self.set_unschedulable(false).await?;
            }
            Step::Record(milestone) => {
                let phase = (milestone == Milestone::PickedUp).then_some(DriftPhase::Applying);
                if milestone == Milestone::PickedUp {
                    // The MCD deletes the forcefile when it takes it.
                    status.force_file_written = false;
                }
                record(&mut status, milestone.step(), phase, &now);
                self.persist(remediation, status).await?;
                if milestone == Milestone::PickedUp {
                    self.remove_helpers(remediation).await?;
                }
                self.event(
                    remediation,
                    false,
                    milestone.step(),
                    format!("{} on {}", milestone.step(), self.name),
                )
                .await;
            }
            Step::Note(noted) => {
                match noted {
                    Noted::NotReady => status.not_ready_since = Some(now),
                    Noted::Draining => status.draining_since = Some(now),
                }
                self.persist(remediation, status).await?;
            }
            Step::Succeed => {
                record(&mut status, "Succeeded", Some(DriftPhase::Succeeded), &now);
                upsert_condition(
                    &mut status.conditions,
                    "Succeeded",
                    true,
                    "Verified",
                    "Done on the pool's config, Ready and schedulable",
                    self.context.clock.now(),
                );
                self.persist(remediation, status).await?;
                // Verified Done, so the MCO is idle: the mark goes (a health check's trigger
                // left during the reboot is cleared before).
                self.guard_planned_reboot(Some(remediation)).await?;
                self.remove_helpers(remediation).await?;
                self.ended(remediation, "Succeeded", "");
                self.event(
                    remediation,
                    false,
                    "Succeeded",
                    format!(
                        "{} is Done on {}",
                        self.name, remediation.spec.rendered_config
                    ),
                )
                .await;
            }
            Step::Abort(why) => {
                record(&mut status, "Aborted", Some(DriftPhase::Aborted), &now);
                status.last_error = Some(why.clone());
                self.persist(remediation, status).await?;
                // Kept while a forcefile may be there or the MCO is still at work.
                self.guard_planned_reboot(Some(remediation)).await?;
                self.ended(remediation, "Aborted", "");
                self.event(remediation, false, "Aborted", why).await;
                self.clean_up(remediation).await?;
            }
            Step::Fail(reason) => {
                self.fail(remediation, status, reason.reason(), reason.to_string())
                    .await?;
            }
            Step::Escalate => {
                record(&mut status, "Escalated", Some(DriftPhase::Escalated), &now);
                self.persist(remediation, status).await?;
                // Handed over: the guard lifts the mark, so the machine remediation may take
                // the node once its Machine has the trigger.
                self.guard_planned_reboot(Some(remediation)).await?;
                let machine = self.escalate().await;
                let note = match machine {
                    Ok(machine) => format!(
                        "{} stayed NotReady; handed to the machine remediation ({machine})",
                        self.name
                    ),
                    Err(error) => format!(
                        "{} stayed NotReady; cannot hand it to the machine remediation: {error}",
                        self.name
                    ),
                };
                self.ended(remediation, "Escalated", "");
                self.event(remediation, true, "Escalated", note).await;
            }
        }
        Ok(poll)
    }

    /// The restore action: the expected file from the rendered config, through a helper.
    async fn restore(
        &self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        now: &str,
    ) -> Result<Action> {
        use super::classify::DriftKind;
        use super::content::Expected;
        let op = match (remediation.spec.kind, self.expected(remediation).await) {
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
            self.fail(remediation, status, "RestoreUnsupported", text)
                .await?;
            return Ok(Action::await_change());
        };
        status.helper_pod = Some(helper::helper_name(&remediation.name_any(), &op));
        started(
            &mut status,
            "RestoreRequested",
            DriftPhase::Restoring,
            now,
            self.context.clock.now(),
        );
        self.persist(remediation, status).await?;
        self.start_helper(remediation, &op, content).await?;
        self.event(
            remediation,
            false,
            "RestoreRequested",
            format!(
                "writing {} back as the rendered config has it",
                remediation.spec.target
            ),
        )
        .await;
        Ok(Action::requeue(self.context.poll))
    }

    /// Ends the remediation Failed with a reason, and removes a forcefile not picked up.
    async fn fail(
        &self,
        remediation: &mut DriftRemediation,
        mut status: DriftRemediationStatus,
        reason: &str,
        text: String,
    ) -> Result<()> {
        let now = self.context.clock.now();
        record(
            &mut status,
            "Failed",
            Some(DriftPhase::Failed),
            &rfc3339(now),
        );
        status.last_error = Some(text.clone());
        upsert_condition(&mut status.conditions, "Failed", true, reason, &text, now);
        upsert_condition(&mut status.conditions, "Held", false, "Ended", "", now);
        self.persist(remediation, status).await?;
        // Not lifted here: after a timeout the MCO may still drain and reboot the node; the
        // guard keeps the mark until it is done.
        self.guard_planned_reboot(Some(remediation)).await?;
        self.ended(remediation, "Failed", reason);
        self.event(remediation, true, reason, text).await;
        self.clean_up(remediation).await
    }
}
