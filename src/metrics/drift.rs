//! The drift coordinator's metrics, under the names the seed ADR's dashboards and alerts
//! expect (`mco_…`, no `baremend_` prefix): drift per pool, remediation outcomes and
//! durations, held starts and reboots per node; and whether the coordinator runs at all
//! (`baremend_drift_coordinator_running`).
//!
//! The outcome counter starts at zero for every action, outcome and failure reason, so that
//! `increase()` sees the first failure after a restart (a counter created by its first
//! increment shows up already at 1, with no sample before it).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::DriftAction;
use baremend_core::drift::plan::FailReason as DriftFailure;

/// A pool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// The MachineConfigPool.
    pub pool: String,
}

/// An outcome of an action.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `Force` or `Restore`.
    pub action: String,
    /// `Succeeded`, `SelfHealed`, `Failed`, `Aborted`, `Escalated`.
    pub outcome: String,
    /// The failure reason (empty unless Failed).
    pub reason: String,
}

/// A held start.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// The gate (`PoolBudget`, `BlockedByPodDisruptionBudget`, …).
    pub reason: String,
}

/// A node of a pool.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// The Node.
    pub node: String,
    /// Its pool.
    pub pool: String,
}

/// Every drift metric.
#[derive(Debug)]
pub struct DriftMetrics {
    running: Gauge,
    detected: Family<PoolLabels, Gauge>,
    count: Family<PoolLabels, Gauge>,
    not_drift: Family<PoolLabels, Gauge>,
    outcomes: Family<OutcomeLabels, Counter>,
    duration: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    held: Family<HeldLabels, Gauge>,
    reboots: Family<NodeLabels, Gauge>,
}

/// The outcomes that carry no reason.
pub const OUTCOMES_WITHOUT_REASON: [&str; 4] = ["Succeeded", "SelfHealed", "Aborted", "Escalated"];

/// The gates a start can be held by (each gets a series at 0).
pub const HELD_REASONS: [&str; 8] = [
    "ObserveOnly",
    "DriftRemediationDisabled",
    "PoolRollingOut",
    "PausedPoolNeedsApproval",
    "SingleNodeNeedsApproval",
    "ControlPlaneBusy",
    "PoolBudget",
    "BlockedByPodDisruptionBudget",
];

fn duration_histogram() -> Histogram {
    // 1 s .. about 9 h: a restore takes seconds, a blocked drain hours.
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

impl DriftMetrics {
    /// Registers the metrics (in a registry without a prefix).
    pub fn register(registry: &mut Registry) -> Self {
        let running = Gauge::default();
        registry.register(
            "baremend_drift_coordinator_running",
            "1 while the config-drift coordinator runs in this process; 0 when it is off (--drift=false), the API serves no MachineConfigPools, or this replica does not lead",
            running.clone(),
        );
        let detected = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "mco_node_config_drift_detected",
            "1 while at least one node of the pool has drifted from its rendered MachineConfig",
            detected.clone(),
        );
        let count = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "mco_node_config_drift_count",
            "Nodes of the pool drifted from their rendered MachineConfig",
            count.clone(),
        );
        let not_drift = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "mco_node_degraded_not_drift",
            "Degraded nodes of the pool whose cause is not drift (left to their owners)",
            not_drift.clone(),
        );
        let outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "mco_remediations",
            "Drift remediations ended, by action, outcome and reason",
            outcomes.clone(),
        );
        for action in DriftAction::ALL.iter().map(|a| a.as_str()) {
            let labels = |outcome: &str, reason: &str| OutcomeLabels {
                action: action.into(),
                outcome: outcome.into(),
                reason: reason.into(),
            };
            // Created at zero (the handles are dropped at once).
            for outcome in OUTCOMES_WITHOUT_REASON {
                outcomes.get_or_create_owned(&labels(outcome, ""));
            }
            for reason in DriftFailure::every_failure() {
                outcomes.get_or_create_owned(&labels("Failed", reason));
            }
        }
        let duration: Family<OutcomeLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        registry.register(
            "mco_remediation_duration_seconds",
            "Time from drift detection to the end of its remediation",
            duration.clone(),
        );
        let held = Family::<HeldLabels, Gauge>::default();
        registry.register(
            "mco_remediations_held",
            "Drift remediations whose start a gate holds, by gate",
            held.clone(),
        );
        for reason in HELD_REASONS {
            held.get_or_create(&HeldLabels {
                reason: reason.into(),
            })
            .set(0);
        }
        let reboots = Family::<NodeLabels, Gauge>::default();
        registry.register(
            "mco_node_reboot_frequency",
            "Reboots by drift remediations in the last 24 hours, per node",
            reboots.clone(),
        );
        DriftMetrics {
            running,
            detected,
            count,
            not_drift,
            outcomes,
            duration,
            held,
            reboots,
        }
    }

    /// Whether the coordinator runs in this process.
    pub fn set_running(&self, running: bool) {
        self.running.set(i64::from(running));
    }

    /// Sets a pool's drift gauges.
    pub fn set_pool(&self, pool: &str, drifted: usize, not_drift: usize) {
        let labels = PoolLabels { pool: pool.into() };
        self.detected
            .get_or_create(&labels)
            .set(i64::from(drifted > 0));
        self.count
            .get_or_create(&labels)
            .set(i64::try_from(drifted).unwrap_or(i64::MAX));
        self.not_drift
            .get_or_create(&labels)
            .set(i64::try_from(not_drift).unwrap_or(i64::MAX));
    }

    /// A remediation ended.
    pub fn ended(&self, action: &str, outcome: &str, reason: &str, took: Duration) {
        let labels = OutcomeLabels {
            action: action.into(),
            outcome: outcome.into(),
            reason: reason.into(),
        };
        self.outcomes.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Sets the held gauges from counts per reason.
    pub fn set_held(&self, counts: &[(&str, usize)]) {
        for reason in HELD_REASONS {
            let count = counts
                .iter()
                .filter(|(r, _)| *r == reason)
                .map(|(_, n)| *n)
                .sum::<usize>();
            self.held
                .get_or_create(&HeldLabels {
                    reason: reason.into(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Sets a node's reboots in the last 24 hours.
    pub fn set_reboots(&self, node: &str, pool: &str, reboots: usize) {
        self.reboots
            .get_or_create(&NodeLabels {
                node: node.into(),
                pool: pool.into(),
            })
            .set(i64::try_from(reboots).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_held_and_failed_drift_series_is_a_drift_event_reason() {
        use crate::api::DriftEventReason;
        // The metrics start a series for these labels; the Events and conditions publish the
        // enum's names: a label that is no reason would count nothing.
        let unknown: Vec<&str> = HELD_REASONS
            .iter()
            .chain(DriftFailure::every_failure().iter())
            .copied()
            .filter(|label| DriftEventReason::parse(label).is_none())
            .collect();
        assert!(unknown.is_empty(), "not a DriftEventReason: {unknown:?}");
    }
}
