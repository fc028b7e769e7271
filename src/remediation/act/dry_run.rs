//! The policy's `DryRun` mode: a start is decided as it would be (the planner's
//! [`RecordDryRun`](crate::remediation::decide::plan::Step::RecordDryRun)), the fencing paths are probed without
//! disrupting them, and the whole decision is recorded in the Remediation (terminal phase
//! `DryRun`, a `DryRun` condition) and its Events. Nothing else is written: no power request,
//! no Machine mark, no Node change.
//!
//! # Expected flow
//! 1. A triggered Machine's `Pending` Remediation, under `DryRun`: the gates are evaluated as
//!    for a start; the strategies are probed in the policy's order up to the first that
//!    answers, with the readiness check's probes (`probe`, decided in `readiness`: the reboot
//!    API's host must be managed, not detached or paused, allow power-off, report no error,
//!    have its current credentials validated and report its power; a BMC must let us log in,
//!    show the system and advertise a forced off).
//! 2. The planner turns that into a [`DryRun`]; [`describe`] into a condition reason
//!    (`WouldFence`, `WouldHold`, `ProbeFailed`) and a message; the step persists the
//!    `DryRun` phase, then tells it (a Normal Event, and a Warning when no path answered).
//! 3. The trigger stays on the Machine (the health check owns it). While it stays, nothing
//!    more is recorded; once a pass sees it gone, `TriggerCleared` is recorded, and its next
//!    appearance gets a new dry run. Under `Remediate` again, a trigger that stayed starts a
//!    real remediation.
//!
//! # Guarantees
//! Probes only read: a GET of the BareMetalHost and its Secret; a BMC session (closed after)
//! and reads of the system. A
//! failed probe is a recorded outcome, never an error that retries.
//!
//! # Caveats
//! A trigger removed and set again between two passes is one appearance: no pass saw it gone.

use kube::ResourceExt;
use kube::runtime::controller::Action;

use super::probe::{self, ProbeSite, ProbeWith};
use super::steps::{Round, Tell};
use super::strategy::strategy;
use crate::Result;
use crate::api::{ConditionType, EventReason, FenceStrategyName, Remediation, RemediationStep};
use crate::remediation::decide::gates::Held;
use crate::remediation::decide::plan::{DryRun, Mode, Phase, Probe, ReleaseMode};
use crate::remediation::decide::state::set_condition;
use crate::remediation::pass::Pass;
use crate::runtime::events::Severity;

/// How long a BMC probe may take, login and close included.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a dry run tells: the condition's reason, its message, and the probe failures when no
/// fencing path answered (a Warning).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `WouldFence`, `WouldHold` or `ProbeFailed` (also the metric's outcome).
    pub reason: &'static str,
    /// What would have been done.
    pub message: String,
    /// Why no fencing path answered, when none did.
    pub warning: Option<String>,
}

/// What a dry run would have done, in words: `names` are the policy's strategies, `node` the
/// Node the Remediation names.
pub fn describe(dry: &DryRun, names: &[FenceStrategyName], node: Option<&str>) -> Record {
    let name = |index: usize| names.get(index).map_or("?", |n| n.as_str());
    let probes: Vec<String> = dry
        .probes
        .iter()
        .map(|p| match &p.outcome {
            Ok(said) => format!("{} answered ({said})", name(p.strategy)),
            Err(why) => format!("{} did not answer ({why})", name(p.strategy)),
        })
        .collect();
    let release = match (dry.release, node) {
        (_, None) => "no Node to release".to_string(),
        (ReleaseMode::Delete, Some(node)) => format!("delete Node {node}"),
        (ReleaseMode::OutOfService, Some(node)) => {
            format!("taint Node {node} out-of-service")
        }
    };
    let fence = match dry.strategy {
        Some(index) => format!(
            "would fence with {}, then {release} and power the host back on",
            name(index)
        ),
        None => "no fencing path answered its probe: nothing could be fenced".to_string(),
    };
    let gates = match &dry.held {
        None => "the start gates are open".to_string(),
        Some(held) => format!("gate {} would hold the start: {held}", held.gate()),
    };
    let reason = match (dry.strategy, &dry.held) {
        (None, _) => "ProbeFailed",
        (Some(_), Some(_)) => "WouldHold",
        (Some(_), None) => "WouldFence",
    };
    let probed = if probes.is_empty() {
        "no strategy probed".to_string()
    } else {
        probes.join("; ")
    };
    Record {
        reason,
        message: format!("dry run: {fence}; {gates}; probes: {probed}; nothing was changed"),
        warning: dry.strategy.is_none().then(|| probed.clone()),
    }
}

impl Pass {
    /// Whether this round is the start of a dry run: `Pending`, triggered, the policy in
    /// `DryRun` and not paused (a paused policy starts nothing, not even a probe).
    pub(in crate::remediation) fn dry_run_start(
        &self,
        phase: Phase,
        triggered: bool,
        may_start: &std::result::Result<(), Held>,
    ) -> bool {
        phase == Phase::Pending
            && triggered
            && self.policy.mode == Mode::DryRun
            && *may_start != Err(Held::Paused)
    }

    /// The non-disruptive probes (shared with the readiness check, see `probe`), in the
    /// policy's order up to the first that answers (the order the escalation would take).
    pub(in crate::remediation) async fn probe_strategies(
        &self,
        remediation: &Remediation,
    ) -> Vec<Probe> {
        let context = &self.context;
        let with = ProbeWith {
            client: &context.client,
            connector: &context.connector,
            reboot_key: &self.policy.reboot_key,
            timeout: PROBE_TIMEOUT,
            terms: probe::ProbeTerms {
                metrics: Some(context.metrics.power.clone()),
                witness: Some(context.witness.clone()),
                allow_insecure: self.policy.allow_insecure_bmc,
            },
        };
        let key = format!("{}/{}", self.namespace, self.name);
        let host = Ok(self.host(remediation).map(|(host, _)| host));
        let bmc = self.locate_direct_bmc(remediation);
        let site = ProbeSite {
            key: &key,
            namespace: &self.namespace,
            host: &host,
            bmc: &bmc,
        };
        let mut probes = Vec::new();
        for (index, name) in self.policy.strategies.iter().enumerate() {
            let outcome = strategy(*name)
                .probe(&with, &site)
                .await
                .map(|answer| answer.said)
                .map_err(|refusal| refusal.detail);
            let answered = outcome.is_ok();
            probes.push(Probe {
                strategy: index,
                outcome,
            });
            if answered {
                break;
            }
        }
        probes
    }

    /// After a dry run (`last`): `Some` when nothing starts now; `None` when a new
    /// Remediation starts — the trigger appeared again after the dry run saw it gone, or the
    /// policy is back in `Remediate` and the trigger is still there.
    pub(in crate::remediation) async fn after_dry_run(
        &self,
        last: &Remediation,
    ) -> Result<Option<Action>> {
        let cleared = last.status.as_ref().is_some_and(|s| {
            s.steps
                .iter()
                .any(|t| t.step == RemediationStep::TriggerCleared)
        });
        if !self.triggered() {
            if !cleared {
                let mut last = last.clone();
                let status = last.status.clone().unwrap_or_default();
                let now = self.context.clock.now();
                let step = (RemediationStep::TriggerCleared, None);
                self.take_step(&mut last, status, step, now, None).await?;
            }
            return Ok(Some(Action::await_change()));
        }
        let again = cleared || self.policy.mode == Mode::Remediate;
        // A start rests on a fresh read of the trigger (see `run`).
        if again && self.trigger_confirmed().await? {
            Ok(None)
        } else {
            Ok(Some(Action::await_change()))
        }
    }

    /// Records the dry run: the would-be strategy, the `DryRun` condition and phase; then
    /// tells it, and counts it.
    pub(in crate::remediation) async fn record_dry_run(
        &self,
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
            &self.policy.strategies,
            remediation.spec.node_name.as_deref(),
        );
        status.strategy = dry.strategy.map(|i| self.strategy_at(i).into());
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
        self.take_step(remediation, status, step, now, Some(tell))
            .await?;
        tracing::info!(remediation = %remediation.name_any(), outcome = record.reason, "dry run recorded");
        if let Some(why) = record.warning {
            let note = format!("dry run: no fencing path answered its probe: {why}");
            self.event(
                remediation,
                Severity::Warning,
                EventReason::DryRunProbeFailed,
                note,
            )
            .await;
        }
        if !self.context.policy_configured() {
            let note = "no RemediationPolicy named default exists: baremend records dry runs and changes nothing until one is created (kubectl create -f deploy/policies.yaml, then set its mode)";
            self.event(
                remediation,
                Severity::Warning,
                EventReason::PolicyMissing,
                note.into(),
            )
            .await;
        }
        self.context.metrics.remediation_dry_run(record.reason);
        Ok(Some(Action::await_change()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry(strategy: Option<usize>, held: Option<Held>, probes: Vec<Probe>) -> DryRun {
        DryRun {
            strategy,
            held,
            release: ReleaseMode::Delete,
            probes,
        }
    }

    const BOTH: [FenceStrategyName; 2] = [
        FenceStrategyName::BareMetalHostRebootApi,
        FenceStrategyName::DirectBmc,
    ];

    #[test]
    fn a_dry_run_says_which_strategy_which_node_which_gate_and_what_each_probe_found() {
        let probes = vec![
            Probe {
                strategy: 0,
                outcome: Err("BareMetalHost m/h0 is detached".into()),
            },
            Probe {
                strategy: 1,
                outcome: Ok("BMC redfish://bmc-0: logged in, system power On".into()),
            },
        ];
        let open = describe(&dry(Some(1), None, probes.clone()), &BOTH, Some("w0"));
        assert_eq!(open.reason, "WouldFence");
        assert_eq!(
            open.message,
            "dry run: would fence with DirectBmc, then delete Node w0 and power the host back on; \
             the start gates are open; probes: BareMetalHostRebootApi did not answer \
             (BareMetalHost m/h0 is detached); DirectBmc answered (BMC redfish://bmc-0: logged \
             in, system power On); nothing was changed"
        );
        assert_eq!(open.warning, None);
        let held = describe(
            &dry(Some(1), Some(Held::ControlPlaneBusy), probes.clone()),
            &BOTH,
            None,
        );
        assert_eq!(held.reason, "WouldHold");
        assert!(
            held.message
                .contains("gate ControlPlaneBusy would hold the start: another control-plane"),
            "{}",
            held.message
        );
        assert!(
            held.message.contains("no Node to release"),
            "{}",
            held.message
        );
        let failed = describe(&dry(None, None, probes[..1].to_vec()), &BOTH, Some("w0"));
        assert_eq!(failed.reason, "ProbeFailed");
        assert!(
            failed.message.contains("no fencing path answered"),
            "{}",
            failed.message
        );
        assert_eq!(
            failed.warning.as_deref(),
            Some("BareMetalHostRebootApi did not answer (BareMetalHost m/h0 is detached)")
        );
        for record in [open, held, failed] {
            assert!(crate::metrics::DRY_RUN_OUTCOMES.contains(&record.reason));
        }
    }
}
