//! Carrying out a planned step: persist it, then act, then tell (Event, metric).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;

use super::execute;
use super::fence::ConfirmedOff;
use super::observe::node_view;
use super::plan::{FailReason, NodeView, Persisted, Phase, ReleaseMode, Step};
use super::power::Withdraw;
use super::run::Pass;
use super::state::{record_step, set_condition, strategy_name};
use crate::api::FenceStrategyName;
use crate::api::annotations::{EXTERNAL_REMEDIATION, POWERED_OFF_FOR_REMEDIATION};
use crate::api::{Remediation, RemediationStatus};
use crate::{Error, Result};

/// How soon a held start is looked at again, at least and at most.
const HELD_RECHECK_MIN: Duration = Duration::from_secs(1);
const HELD_RECHECK_MAX: Duration = Duration::from_secs(5);

impl Pass {
    pub(super) async fn act(
        &self,
        remediation: &mut Remediation,
        mut status: RemediationStatus,
        state: &Persisted,
        step: Step,
        proof: &mut Option<ConfirmedOff>,
        node: Option<Arc<Node>>,
    ) -> Result<Option<Action>> {
        // Only the leader acts; checked again right before each write below.
        self.context.leadership.ensure()?;
        let now = self.context.clock.now();
        let nodes: Api<Node> = Api::all(self.context.client.clone());
        match step {
            Step::Done => return Ok(Some(Action::await_change())),
            Step::Wait { after } => {
                // A crash between persisting a request and making it leaves the phase without
                // its request: make sure it is in place while waiting.
                match state.phase {
                    Phase::PoweringOff => {
                        self.ensure_request(remediation, state, true).await?;
                    }
                    Phase::PoweringOn => {
                        self.ensure_request(remediation, state, false).await?;
                    }
                    _ => {}
                }
                return Ok(Some(Action::requeue(after)));
            }
            Step::Hold(held) => {
                let reason = held.to_string();
                let was = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Held" && c.status == "True" && c.message == reason);
                if !was {
                    set_condition(&mut status, "Held", true, held.gate(), &reason, now);
                    self.persist(remediation, status).await?;
                    self.event(remediation, true, "Held", reason).await;
                }
                // Gates open when other Machines change; their events do not reach this one,
                // so look again after a while (a finished remediation wakes held ones at once).
                let recheck = (self.context.poll * 4).clamp(HELD_RECHECK_MIN, HELD_RECHECK_MAX);
                return Ok(Some(Action::requeue(recheck)));
            }
            Step::Cancel => {
                record_step(&mut status, "Cancelled", Some(Phase::Cancelled), now);
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    false,
                    "Cancelled",
                    "the trigger went away before anything was done".into(),
                )
                .await;
                return Ok(Some(Action::await_change()));
            }
            Step::RequestPowerOff { strategy } => {
                let name = self.strategy_at(strategy);
                status.strategy = Some(strategy_name(name).into());
                status.driver = Some(self.driver_name(remediation, name).await);
                status.attempt = Some(state.attempt);
                remember_boot(&mut status, node.as_deref());
                remember_node_uid(&mut status, node.as_deref());
                set_condition(&mut status, "Held", false, "Started", "", now);
                record_step(
                    &mut status,
                    "PowerOffRequested",
                    Some(Phase::PoweringOff),
                    now,
                );
                self.persist(remediation, status).await?;
                // The request first: every moment before it, the hung host may still write
                // to shared storage.
                let requested = self.request_power(remediation, name, true).await;
                self.event(
                    remediation,
                    false,
                    "PowerOffRequested",
                    format!("fencing with {}", strategy_name(name)),
                )
                .await;
                self.context
                    .metrics
                    .remediation_started(strategy_name(name));
                if let Err(error) = requested {
                    self.note_error(remediation, &error).await?;
                }
            }
            Step::WithdrawPowerOff => {
                self.withdraw_all(remediation, state, Withdraw::Everything)
                    .await?;
                record_step(
                    &mut status,
                    "PowerOffWithdrawn",
                    Some(Phase::Cancelled),
                    now,
                );
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    false,
                    "Cancelled",
                    "the trigger went away before the host was proven off; power-off withdrawn"
                        .into(),
                )
                .await;
                return Ok(Some(Action::await_change()));
            }
            Step::MarkFenced => {
                let Some(confirmed) = proof.as_ref() else {
                    return Ok(Some(Action::requeue(self.context.poll)));
                };
                let host = confirmed.host().to_string();
                status.last_power_state = Some("Off".into());
                let by = status.strategy.clone().unwrap_or_default();
                set_condition(
                    &mut status,
                    "Fenced",
                    true,
                    "PowerOffConfirmed",
                    &format!("confirmed by {by}"),
                    now,
                );
                record_step(&mut status, "Fenced", Some(Phase::Fenced), now);
                self.persist(remediation, status).await?;
                self.context.leadership.ensure()?;
                execute::set_annotation(
                    &self.machines_api(),
                    &self.name,
                    POWERED_OFF_FOR_REMEDIATION,
                    Some(""),
                    "MarkMachine",
                )
                .await?;
                self.event(
                    remediation,
                    false,
                    "Fenced",
                    format!("{host} is proven off"),
                )
                .await;
            }
            Step::RemakePowerOffRequest => {
                status.power_off_request_remade = true;
                record_step(&mut status, "PowerOffRequestRemade", None, now);
                // The Fenced clock restarts: the proof must hold for a while from here.
                status.phase_since = Some(crate::runtime::clock::rfc3339(now));
                self.persist(remediation, status).await?;
                let note = format!(
                    "our power-off request {} was removed from the host after it was fenced (by an admin, another controller or a restore of the object); made again, once: the Node is released only on a proof that holds for half the power-off deadline from now",
                    self.reboot_annotation()
                );
                self.event(remediation, true, "PowerOffRequestRemoved", note)
                    .await;
                let strategy = self.strategy_in_use(remediation);
                self.request_power(remediation, strategy, true).await?;
            }
            Step::BackUpNode => {
                if let Some(node) = &node {
                    let backup = execute::backup_of(node);
                    let note = format!(
                        "Node {} saved: {} label(s), {} annotation(s), {} taint(s)",
                        node.name_any(),
                        backup.labels.len(),
                        backup.annotations.len(),
                        backup.taints.len()
                    );
                    status.node_backup = Some(backup);
                    record_step(&mut status, "NodeBackedUp", None, now);
                    self.persist(remediation, status).await?;
                    self.event(remediation, false, "NodeBackedUp", note).await;
                }
            }
            Step::ReleaseNode(mode) => {
                // The proof was taken again from fresh evidence in this step: a host turned
                // back on since the Fenced step is not off any more. It is spent here.
                let Some(proof) = proof.take() else {
                    return Ok(Some(Action::requeue(self.context.poll)));
                };
                self.release_node(remediation, status, mode, proof).await?;
            }
            Step::RequestPowerOn => {
                record_step(
                    &mut status,
                    "PowerOnRequested",
                    Some(Phase::PoweringOn),
                    now,
                );
                self.persist(remediation, status).await?;
                self.withdraw_all(remediation, state, Withdraw::Everything)
                    .await?;
                self.event(
                    remediation,
                    false,
                    "PowerOnRequested",
                    "powering the host on".into(),
                )
                .await;
            }
            Step::Restore => {
                if state.phase != Phase::Restoring {
                    record_step(&mut status, "Restoring", Some(Phase::Restoring), now);
                    self.persist(remediation, status.clone()).await?;
                    let note =
                        "the Node is Ready: restoring its labels and taints, removing the trigger";
                    self.event(remediation, false, "Restoring", note.into())
                        .await;
                }
                if let Some(node) = &node {
                    self.context.leadership.ensure()?;
                    if let Some(backup) = &status.node_backup {
                        let restored = execute::restore_node(&nodes, node, backup).await?;
                        if restored != execute::Restored::default() {
                            let note = format!(
                                "Node {} restored: {} label(s) and annotation(s), {} taint(s) put back",
                                node.name_any(),
                                restored.keys,
                                restored.taints
                            );
                            self.event(remediation, false, "NodeRestored", note).await;
                        }
                    }
                    execute::remove_out_of_service(&nodes, node).await?;
                }
                self.withdraw_all(remediation, state, Withdraw::RebootRequestsOnly)
                    .await?;
                self.context.leadership.ensure()?;
                let machines = self.machines_api();
                execute::set_annotation(
                    &machines,
                    &self.name,
                    POWERED_OFF_FOR_REMEDIATION,
                    None,
                    "UnmarkMachine",
                )
                .await?;
                execute::set_annotation(
                    &machines,
                    &self.name,
                    EXTERNAL_REMEDIATION,
                    None,
                    "RemoveTrigger",
                )
                .await?;
                set_condition(
                    &mut status,
                    "Succeeded",
                    true,
                    "NodeBack",
                    "the Node is Ready again",
                    now,
                );
                record_step(&mut status, "Succeeded", Some(Phase::Succeeded), now);
                let strategy = status.strategy.clone().unwrap_or_default();
                self.persist(remediation, status).await?;
                self.event(remediation, false, "Succeeded", "the Node is back".into())
                    .await;
                self.context
                    .metrics
                    .remediation_succeeded(&strategy, self.age(remediation));
                return Ok(Some(Action::await_change()));
            }
            Step::Escalate { to, why } => {
                let name = self.strategy_at(to);
                status.strategy = Some(strategy_name(name).into());
                status.driver = Some(self.driver_name(remediation, name).await);
                status.last_error = Some(why.clone());
                record_step(&mut status, "Escalated", None, now);
                status.phase_since = Some(crate::runtime::clock::rfc3339(now));
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    true,
                    "Escalated",
                    format!("{why}; trying {}", strategy_name(name)),
                )
                .await;
                if let Err(error) = self.request_power(remediation, name, true).await {
                    self.note_error(remediation, &error).await?;
                }
            }
            Step::Retry { attempt, why } => {
                status.attempt = Some(attempt);
                let name = self.strategy_at(0);
                status.strategy = Some(strategy_name(name).into());
                status.last_error = Some(why.clone());
                status.power_off_request_remade = false;
                remember_boot(&mut status, node.as_deref());
                remember_node_uid(&mut status, node.as_deref());
                record_step(&mut status, "Retry", Some(Phase::PoweringOff), now);
                status.phase_since = Some(crate::runtime::clock::rfc3339(now));
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    true,
                    "Retry",
                    format!("{why}: power cycle {attempt}"),
                )
                .await;
                if let Err(error) = self.request_power(remediation, name, true).await {
                    self.note_error(remediation, &error).await?;
                }
            }
            Step::Fail(reason) => {
                self.fail(remediation, status, state, reason).await?;
                return Ok(Some(Action::await_change()));
            }
        }
        Ok(None)
    }

    /// Releases the Node the proof names (deletes it, or taints it out-of-service), each step
    /// persisted before it acts, and spends the proof.
    async fn release_node(
        &self,
        remediation: &mut Remediation,
        mut status: RemediationStatus,
        mode: ReleaseMode,
        proof: ConfirmedOff,
    ) -> Result<()> {
        let now = self.context.clock.now();
        let nodes: Api<Node> = Api::all(self.context.client.clone());
        let Some(name) = proof.node().map(|n| n.name.clone()) else {
            record_step(&mut status, "NodeAbsent", Some(Phase::NodeReleased), now);
            self.persist(remediation, status).await?;
            let note = "no Node to release".to_string();
            self.event(remediation, false, "NodeAbsent", note).await;
            return Ok(());
        };
        let host = proof.host().to_string();
        let (before, after, reason, note) = match mode {
            ReleaseMode::Delete => (
                "NodeDeleting",
                "NodeDeleted",
                "NodeDeleted",
                format!(
                    "Node {name} deleted ({host} is proven off): its workloads may start elsewhere"
                ),
            ),
            ReleaseMode::OutOfService => (
                "NodeTainting",
                "NodeTainted",
                "NodeTainted",
                format!(
                    "Node {name} tainted out-of-service ({host} is proven off): its workloads may start elsewhere"
                ),
            ),
        };
        record_step(&mut status, before, None, now);
        self.persist(remediation, status.clone()).await?;
        // The step's own persist (and the taint's read of the Node) take round trips: a
        // BareMetalHost is read once more after them, so that the proof is the last read
        // before the call.
        match mode {
            ReleaseMode::Delete => {
                let proof = self.proof_right_before_release(remediation, proof).await?;
                self.context.leadership.ensure()?;
                execute::delete_node(proof, &nodes).await?;
            }
            ReleaseMode::OutOfService => {
                if let Some(node) = execute::read_node(&nodes, &name).await? {
                    let proof = self.proof_right_before_release(remediation, proof).await?;
                    self.context.leadership.ensure()?;
                    execute::taint_out_of_service(proof, &nodes, node).await?;
                }
            }
        }
        record_step(&mut status, after, Some(Phase::NodeReleased), now);
        self.persist(remediation, status).await?;
        self.event(remediation, false, reason, note).await;
        Ok(())
    }

    /// The proof to spend: a BMC's as given (two reads a moment ago), a BareMetalHost's taken
    /// again from a fresh GET for the same Node.
    async fn proof_right_before_release(
        &self,
        remediation: &Remediation,
        proof: ConfirmedOff,
    ) -> Result<ConfirmedOff> {
        if proof.strategy() != FenceStrategyName::BareMetalHostRebootApi {
            return Ok(proof);
        }
        let mut target = self.fence_target(remediation, proof.strategy(), None);
        target.node = proof.node().cloned();
        self.take_proof(remediation, &target)
            .await
            .map_err(|not_fenced| Error::Invalid {
                object: format!("Remediation {}", remediation.name_any()),
                reason: format!("the proof did not hold right before the release: {not_fenced}"),
            })
    }

    /// Fails the remediation. A host whose Node never came back was fenced and released: it
    /// is left powered off (nothing it runs may compete with the replacements), and with
    /// `deleteMachineOnFailure` a replaceable Machine is deleted. An unfenced host is left
    /// alone entirely.
    async fn fail(
        &self,
        remediation: &mut Remediation,
        mut status: RemediationStatus,
        state: &Persisted,
        reason: FailReason,
    ) -> Result<()> {
        let now = self.context.clock.now();
        let label = reason.label();
        let message = match &reason {
            FailReason::PowerOffNotConfirmed(why) => {
                format!("power-off never confirmed, the Node is left alone: {why}")
            }
            FailReason::FenceLost(why) => format!(
                "the host was proven off but the proof could not be taken again for the release, so the Node is kept: {why}"
            ),
            FailReason::NodeNeverReady => format!(
                "the Node did not come back in {} power cycle(s); the host is left powered off",
                state.attempt
            ),
            FailReason::RestoreTimedOut => {
                "the Node came back but could not be restored in time; the trigger is kept".into()
            }
        };
        let strategy = status.strategy.clone().unwrap_or_default();
        status.last_error = Some(message.clone());
        set_condition(&mut status, "Succeeded", false, label, &message, now);
        record_step(&mut status, "Failed", Some(Phase::Failed), now);
        if let FailReason::FenceLost(_) = reason {
            set_condition(&mut status, "Fenced", false, "FenceLost", &message, now);
            // The Machine's mark would claim a power-off nobody can prove any more. Removed
            // before Failed is persisted: a failed removal is tried again by the next pass.
            self.context.leadership.ensure()?;
            execute::set_annotation(
                &self.machines_api(),
                &self.name,
                POWERED_OFF_FOR_REMEDIATION,
                None,
                "UnmarkMachine",
            )
            .await?;
        }
        self.persist(remediation, status).await?;
        self.event(remediation, true, "Failed", message).await;
        self.context.metrics.remediation_failed(&strategy, label);
        if reason != FailReason::NodeNeverReady {
            return Ok(());
        }
        let name = self.strategy_in_use(remediation);
        if let Err(error) = self.request_power(remediation, name, true).await {
            self.note_error(remediation, &error).await?;
        }
        if self.policy.delete_machine_on_failure {
            self.delete_machine(remediation).await?;
        }
        Ok(())
    }

    /// Deletes the Machine so that its MachineSet replaces it, where that is safe: see
    /// [`super::observe::reprovisionable`].
    async fn delete_machine(&self, remediation: &mut Remediation) -> Result<()> {
        let host = self
            .host(remediation)
            .and_then(|(_, host)| host)
            .map(|h| serde_json::to_value(&*h).unwrap_or_default());
        if let Err(why) = super::observe::reprovisionable(&self.machine.metadata, host.as_ref()) {
            self.event(
                remediation,
                false,
                "MachineKept",
                format!("deleteMachineOnFailure: the Machine is kept: {why}"),
            )
            .await;
            return Ok(());
        }
        let mut status = remediation.status.clone().unwrap_or_default();
        record_step(
            &mut status,
            "MachineDeleting",
            None,
            self.context.clock.now(),
        );
        self.persist(remediation, status).await?;
        // The Remediation is owned by the Machine and goes with it: the Event stays behind.
        self.event(
            remediation,
            true,
            "MachineDeleted",
            "deleteMachineOnFailure: deleting the Machine so that its MachineSet replaces it"
                .into(),
        )
        .await;
        self.context.leadership.ensure()?;
        execute::delete_machine(&self.machines_api(), &self.name, self.machine.uid()).await?;
        self.context.metrics.machine_deleted();
        Ok(())
    }

    /// Time since the Remediation was created.
    fn age(&self, remediation: &Remediation) -> Duration {
        let created = super::state::created_at(remediation).unwrap_or_default();
        crate::runtime::clock::since_epoch(self.context.clock.now()).saturating_sub(created)
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
