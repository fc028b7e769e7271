//! The persisted state: a `Remediation`'s status, read into the planner's [`Persisted`] and
//! advanced step by step. Times are RFC 3339 in the object and time since the Unix epoch in
//! the planner.

use std::time::{Duration, SystemTime};

use super::plan::{Persisted, Phase};
use crate::api::{
    ConditionType, FenceStrategyName, Remediation, RemediationStatus, RemediationStep, StepTime,
};
use crate::clock::{parse_rfc3339, rfc3339};
use crate::conditions::upsert_condition;

/// When a Remediation was created (time since the Unix epoch; a time before it reads as the
/// epoch), if the server has said.
pub fn created_at(remediation: &Remediation) -> Option<Duration> {
    remediation
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| Duration::from_millis(u64::try_from(t.0.as_millisecond()).unwrap_or(0)))
}

/// The planner's view of a status, given the policy's strategy order. The strategy in use is
/// stored by name: one the policy no longer names reads as `None` (never as another one).
pub fn persisted(
    status: &RemediationStatus,
    strategies: &[FenceStrategyName],
    created: Duration,
) -> Persisted {
    let strategy = match &status.strategy {
        None => Some(0),
        Some(stored) => stored
            .known()
            .and_then(|name| strategies.iter().position(|s| *s == name)),
    };
    Persisted {
        phase: status.phase,
        strategy,
        attempt: status.attempt.unwrap_or(1).max(1),
        phase_since: status
            .phase_since
            .as_deref()
            .map(parse_rfc3339)
            .unwrap_or(created),
        node_backed_up: status.node_backup.is_some(),
        boot_id_before: status.node_boot_id.clone(),
        request_remade: status.power_off_request_remade,
    }
}

/// The Remediations a change of `changed` may let start: when it ended (a gate may open),
/// every one of `all` still waiting in `Pending`; otherwise none (and `all` is not read:
/// most changes are not an end).
pub fn unblocked_by(
    changed: &Remediation,
    all: impl FnOnce() -> Vec<std::sync::Arc<Remediation>>,
) -> Vec<std::sync::Arc<Remediation>> {
    let ended = changed
        .status
        .as_ref()
        .is_some_and(|s| s.phase.is_terminal());
    if !ended {
        return Vec::new();
    }
    let mut waiting = all();
    waiting.retain(|r| r.phase() == Phase::Pending);
    waiting
}

/// The strategy a status names, if it names one this version knows.
pub fn strategy_in_status(status: &RemediationStatus) -> Option<FenceStrategyName> {
    status.strategy.as_ref()?.known()
}

/// The strategy a status names, as stored (`""` when none), for metric labels.
pub fn strategy_label(status: &RemediationStatus) -> String {
    status
        .strategy
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
}

/// Records a step in the status: its time, and the phase it enters (if any).
pub fn record_step(
    status: &mut RemediationStatus,
    step: RemediationStep,
    phase: Option<Phase>,
    now: SystemTime,
) {
    // A step that went through ends the failure the last one reported.
    let failed = status
        .conditions
        .iter()
        .any(|c| c.is_true(ConditionType::StepFailed));
    if failed {
        set_condition(
            status,
            ConditionType::StepFailed,
            false,
            "StepTaken",
            "",
            now,
        );
    }
    let time = rfc3339(now);
    status.steps.push(StepTime {
        step: step.into(),
        attempt: status.attempt.unwrap_or(1),
        time: time.clone(),
    });
    if let Some(phase) = phase
        && phase != status.phase
    {
        status.phase = phase;
        status.phase_since = Some(time);
    }
}

/// Sets a condition, keeping its transition time when the status does not change.
pub fn set_condition(
    status: &mut RemediationStatus,
    type_: ConditionType,
    truth: bool,
    reason: &str,
    message: &str,
    now: SystemTime,
) {
    upsert_condition(&mut status.conditions, type_, truth, reason, message, now);
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn only_an_end_unblocks_and_then_every_remediation_waiting_in_pending() {
        let with = |name: &str, phase: Phase| {
            let mut r = Remediation::new(
                name,
                serde_json::from_value(serde_json::json!({"machineName": name})).unwrap(),
            );
            r.status = Some(RemediationStatus {
                phase,
                ..RemediationStatus::default()
            });
            std::sync::Arc::new(r)
        };
        let all = vec![
            with("a", Phase::Pending),
            with("b", Phase::PoweringOff),
            with("c", Phase::Pending),
        ];
        let names = |v: Vec<std::sync::Arc<Remediation>>| -> Vec<String> {
            v.iter().filter_map(|r| r.metadata.name.clone()).collect()
        };
        assert_eq!(
            names(unblocked_by(&with("d", Phase::Failed), || all.clone())),
            ["a", "c"]
        );
        let running = with("e", Phase::Fenced);
        let unread = unblocked_by(&running, || panic!("read though nothing ended"));
        assert!(unread.is_empty());
    }

    #[test]
    fn the_persisted_view_reads_phase_strategy_attempt_and_backup() {
        let mut status = RemediationStatus {
            strategy: Some("DirectBmc".into()),
            attempt: Some(2),
            ..RemediationStatus::default()
        };
        let now = UNIX_EPOCH + Duration::from_secs(100);
        record_step(
            &mut status,
            RemediationStep::PowerOffRequested,
            Some(Phase::PoweringOff),
            now,
        );
        let order = [
            FenceStrategyName::BareMetalHostRebootApi,
            FenceStrategyName::DirectBmc,
        ];
        let p = persisted(&status, &order, Duration::ZERO);
        assert_eq!(p.phase, Phase::PoweringOff);
        assert_eq!(p.strategy, Some(1));
        assert_eq!(p.attempt, 2);
        assert_eq!(p.phase_since, Duration::from_secs(100));
        assert!(!p.node_backed_up);
        assert_eq!(status.steps[0].attempt, 2);
        assert_eq!(
            strategy_in_status(&status),
            Some(FenceStrategyName::DirectBmc)
        );
    }

    #[test]
    fn a_strategy_the_policy_dropped_reads_as_none_not_as_the_first() {
        let status = RemediationStatus {
            strategy: Some("DirectBmc".into()),
            ..RemediationStatus::default()
        };
        let only_reboot_api = [FenceStrategyName::BareMetalHostRebootApi];
        assert_eq!(
            persisted(&status, &only_reboot_api, Duration::ZERO).strategy,
            None
        );
        // A strategy this version does not know (a newer version's) is not the first either.
        let unknown = RemediationStatus {
            strategy: Some("SomeNewerStrategy".into()),
            ..RemediationStatus::default()
        };
        assert_eq!(
            persisted(&unknown, &only_reboot_api, Duration::ZERO).strategy,
            None
        );
        assert_eq!(strategy_in_status(&unknown), None);
        let fresh = RemediationStatus::default();
        assert_eq!(
            persisted(&fresh, &only_reboot_api, Duration::ZERO).strategy,
            Some(0)
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let mut status = RemediationStatus::default();
        let t1 = UNIX_EPOCH + Duration::from_secs(1);
        let t2 = UNIX_EPOCH + Duration::from_secs(2);
        set_condition(&mut status, ConditionType::Held, true, "Storm", "a", t1);
        set_condition(&mut status, ConditionType::Held, true, "Storm", "b", t2);
        assert_eq!(status.conditions[0].last_transition_time, rfc3339(t1));
        assert_eq!(status.conditions[0].message, "b");
        set_condition(&mut status, ConditionType::Held, false, "Released", "", t2);
        assert_eq!(status.conditions[0].last_transition_time, rfc3339(t2));
    }
}
