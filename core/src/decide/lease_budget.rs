//! NodeHealthCheck's lease, against the policy's power cycles: a NodeHealthCheck with a single
//! `remediationTemplate` holds a lease on the Node for its remediation and, once the lease is
//! overdue, annotates the request `remediation.medik8s.io/nhc-timed-out`. baremend starts no
//! new power cycle on a timed-out request, so every cycle the policy allows must start before
//! the lease runs out, or the later ones are cut off.
//!
//! Upstream (node-healthcheck-operator, read 2026): `internal/controller/resources/lease.go`,
//! `calcLeaseExpiration` (acquired + (`maxTimesToExtendLease` 2 + 1) × the remediation's
//! duration) with `internal/controller/utils/utils.go` `DefaultRemediationDuration` (10 min)
//! for a template without a timeout: 30 minutes after the lease is taken.

use std::time::Duration;

use crate::api::RemediationPolicySpec;

/// How long after it takes the Node's lease a NodeHealthCheck with a single
/// `remediationTemplate` times its request out.
pub const NHC_SINGLE_TEMPLATE_LEASE: Duration = Duration::from_secs(3 * 10 * 60);

/// The longest one power cycle runs before the next one starts: every strategy waits its
/// power-off deadline in turn, then the Node gets its deadline to come back.
pub fn cycle_worst_case(policy: &RemediationPolicySpec) -> Duration {
    let strategies = policy.strategies.len().max(1) as u64;
    let power_off = u64::from(policy.timeouts.power_off_seconds);
    let node_ready = u64::from(policy.timeouts.node_ready_seconds);
    Duration::from_secs(strategies * power_off + node_ready)
}

/// When, at the latest, the policy's last power cycle starts after the request (not counting
/// a start held by a gate).
pub fn last_cycle_start(policy: &RemediationPolicySpec) -> Duration {
    cycle_worst_case(policy) * policy.max_attempts.saturating_sub(1)
}

/// A warning when `policy` (named `what`) lets a power cycle start after NodeHealthCheck's
/// single-template lease has run out; None when every cycle starts inside it. Pure.
pub fn nhc_lease_warning(what: &str, policy: &RemediationPolicySpec) -> Option<String> {
    let last = last_cycle_start(policy);
    if last < NHC_SINGLE_TEMPLATE_LEASE {
        return None;
    }
    let cycle = cycle_worst_case(policy);
    // The most cycles whose last starts inside the lease: (n - 1) × cycle < lease.
    let fit = NHC_SINGLE_TEMPLATE_LEASE
        .as_secs()
        .div_ceil(cycle.as_secs().max(1))
        .max(1);
    Some(format!(
        "{what}: maxAttempts {} power cycles of up to {} s each ({} strategies × powerOffSeconds {} + nodeReadySeconds {}): \
         the last may start {} s after the request, past the {} s a NodeHealthCheck with a single remediationTemplate \
         gives it (its Node lease); later cycles would be cut off. With NodeHealthCheck, use maxAttempts {} or shorter \
         timeouts, or escalatingRemediations with a timeout that covers them",
        policy.max_attempts,
        cycle.as_secs(),
        policy.strategies.len(),
        policy.timeouts.power_off_seconds,
        policy.timeouts.node_ready_seconds,
        last.as_secs(),
        NHC_SINGLE_TEMPLATE_LEASE.as_secs(),
        fit,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::FenceStrategyName;

    #[test]
    fn the_default_policy_starts_every_cycle_inside_nodehealthchecks_lease() {
        // node-healthcheck-operator `internal/controller/resources/lease.go`,
        // `calcLeaseExpiration`: acquired + 3 × DefaultRemediationDuration (10 min).
        let policy = RemediationPolicySpec::default();
        assert_eq!(
            cycle_worst_case(&policy),
            Duration::from_secs(2 * 180 + 900)
        );
        assert_eq!(last_cycle_start(&policy), Duration::from_secs(1260));
        assert!(last_cycle_start(&policy) < NHC_SINGLE_TEMPLATE_LEASE);
        assert_eq!(nhc_lease_warning("policy default", &policy), None);
    }

    #[test]
    fn the_former_defaults_are_warned_about_with_what_would_fit() {
        let mut policy = RemediationPolicySpec {
            max_attempts: 3,
            ..RemediationPolicySpec::default()
        };
        let said = nhc_lease_warning("RemediationPolicy default", &policy).unwrap();
        assert!(
            said.starts_with(
                "RemediationPolicy default: maxAttempts 3 power cycles of up to 1260 s each"
            ),
            "{said}"
        );
        assert!(
            said.contains("the last may start 2520 s after the request, past the 1800 s"),
            "{said}"
        );
        assert!(said.contains("use maxAttempts 2"), "{said}");
        // One strategy and shorter timeouts fit three cycles.
        policy.strategies = vec![FenceStrategyName::BareMetalHostRebootApi];
        policy.timeouts.node_ready_seconds = 600;
        assert_eq!(last_cycle_start(&policy), Duration::from_secs(2 * 780));
        assert_eq!(nhc_lease_warning("p", &policy), None);
    }

    #[test]
    fn the_bound_is_exclusive_and_one_attempt_always_fits() {
        let mut policy = RemediationPolicySpec {
            max_attempts: 2,
            strategies: vec![FenceStrategyName::DirectBmc],
            ..RemediationPolicySpec::default()
        };
        policy.timeouts.power_off_seconds = 300;
        policy.timeouts.node_ready_seconds = 1500;
        // The second cycle would start exactly as the lease runs out: too late.
        assert_eq!(last_cycle_start(&policy), NHC_SINGLE_TEMPLATE_LEASE);
        assert!(nhc_lease_warning("p", &policy).is_some());
        policy.timeouts.node_ready_seconds = 1499;
        assert_eq!(nhc_lease_warning("p", &policy), None);
        policy.max_attempts = 1;
        policy.timeouts.node_ready_seconds = 86400;
        assert_eq!(nhc_lease_warning("p", &policy), None);
    }
}
