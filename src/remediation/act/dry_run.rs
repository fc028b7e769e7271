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

use super::probe::{self, ProbeSite, ProbeWith};
use super::strategy::strategy;
use crate::api::{FenceStrategyName, Remediation};
use crate::remediation::decide::plan::{DryRun, Probe, ReleaseMode};
use crate::remediation::evidence::bmc::BmcLocator;
use crate::remediation::pass::Pass;

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

/// The pass's dry run: its start, the probes and its record. Made by `DryRuns::of(pass)` where
/// needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct DryRuns<'p> {
    pass: &'p Pass,
}

impl<'p> DryRuns<'p> {
    /// The DryRuns of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        DryRuns { pass }
    }

    /// The non-disruptive probes (shared with the readiness check, see `probe`), in the
    /// policy's order up to the first that answers (the order the escalation would take).
    pub(in crate::remediation) async fn probe_strategies(
        self,
        remediation: &Remediation,
    ) -> Vec<Probe> {
        let context = &self.pass.context;
        let with = ProbeWith {
            client: &context.clients.kube,
            connector: &context.clients.connector,
            reboot_key: &self.pass.policy.reboot_key,
            timeout: PROBE_TIMEOUT,
            terms: probe::ProbeTerms {
                metrics: Some(context.metrics.power.clone()),
                witness: Some(context.witness.clone()),
                allow_insecure: self.pass.policy.allow_insecure_bmc,
            },
        };
        let key = format!("{}/{}", self.pass.namespace, self.pass.name);
        let host = Ok(self.pass.host(remediation).map(|(host, _)| host));
        let bmc = BmcLocator::of(self.pass).locate_direct_bmc(remediation);
        let site = ProbeSite {
            key: &key,
            namespace: &self.pass.namespace,
            host: &host,
            bmc: &bmc,
        };
        let mut probes = Vec::new();
        for (index, name) in self.pass.policy.strategies.iter().enumerate() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remediation::decide::gates::Held;

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
