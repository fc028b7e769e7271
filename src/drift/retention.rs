//! The pure rules of a Node's DriftRemediations after they end: how retention sees each
//! one, whether one asks for a retry, and which ones the recurrence cap still counts (a retry
//! starts the count again).
//!
//! Expected flow: the pass reads the Node's DriftRemediations from the cache and asks these
//! functions; the housekeeping steps delete and mark.
//!
//! Guarantees: an object under way or owing a cleanup is never finished; an unacknowledged
//! `Failed` one, or one the recurrence cap still counts, is kept.
//!
//! Caveats: an unparsable `detectedAt` reads as the epoch, outside every window.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;

use super::observe::attempt_number;
use crate::api::annotations::RETRIED_BY;
use crate::api::{DriftPhase, DriftRemediation};
use crate::runtime::clock::parse_rfc3339;
use crate::runtime::retention::{RetryAsk, Standing, acknowledged, retry_ask};

/// What a DriftRemediation's `baremend.io/retry` asks, if it is `Failed` (a retry of any
/// other phase asks nothing).
pub fn failed_retry_ask(remediation: &DriftRemediation) -> RetryAsk {
    if remediation.phase() == DriftPhase::Failed {
        retry_ask(remediation.annotations())
    } else {
        RetryAsk::NotAsked
    }
}

/// Whether a DriftRemediation is `Failed` and asks for a retry.
pub fn retry_requested(remediation: &DriftRemediation) -> bool {
    failed_retry_ask(remediation) == RetryAsk::Retry
}

/// The attempt number up to which attempts no longer count for the recurrence cap: the
/// newest retried one's (0: none was retried).
pub fn recurrence_reset(all: &[Arc<DriftRemediation>]) -> u64 {
    all.iter()
        .filter(|r| r.annotations().contains_key(RETRIED_BY))
        .map(|r| attempt_number(r))
        .max()
        .unwrap_or(0)
}

/// Whether an attempt counts for the recurrence cap: it ended Succeeded, Failed or
/// Escalated, after the last retry, and its drift was detected within the window.
pub fn counts_for_recurrence(
    remediation: &DriftRemediation,
    reset: u64,
    now: Duration,
    window: Duration,
) -> bool {
    let Some(status) = remediation.status.as_ref() else {
        return false;
    };
    let ended = matches!(
        status.phase,
        DriftPhase::Succeeded | DriftPhase::Failed | DriftPhase::Escalated
    );
    let recent = status
        .detected_at
        .as_deref()
        .map(parse_rfc3339)
        .is_some_and(|at| now.saturating_sub(at) <= window);
    ended && recent && attempt_number(remediation) > reset
}

/// How retention sees a DriftRemediation: under way, or owing a cleanup (a forcefile, our
/// cordon) → open; `Failed` and neither acknowledged nor retried, or still counted by the
/// recurrence cap (`counted`) → kept; otherwise finished.
pub fn standing(
    remediation: &DriftRemediation,
    counted: impl Fn(&DriftRemediation) -> bool,
) -> Standing {
    let Some(status) = remediation.status.as_ref() else {
        return Standing::Open;
    };
    if !status.phase.is_terminal() || status.force_file_written || status.cordoned_by_us {
        return Standing::Open;
    }
    let unseen_failure =
        status.phase == DriftPhase::Failed && !acknowledged(remediation.annotations());
    if unseen_failure || counted(remediation) {
        Standing::Kept
    } else {
        Standing::Finished
    }
}

/// When a DriftRemediation's phase began (for a finished one: when it ended).
pub fn phase_since(remediation: &DriftRemediation) -> Duration {
    remediation
        .status
        .as_ref()
        .and_then(|s| s.phase_since.as_deref())
        .map(parse_rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::annotations::{ACKNOWLEDGED, RETRY};
    use crate::api::{DriftAction, DriftKind, DriftRemediationSpec, DriftRemediationStatus};

    fn drift(number: u64, phase: DriftPhase, annotations: &[(&str, &str)]) -> DriftRemediation {
        let mut object = DriftRemediation::new(
            &format!("worker-0-{number}"),
            DriftRemediationSpec {
                node_name: "worker-0".into(),
                pool: "worker".into(),
                kind: DriftKind::Content,
                target: "/etc/a".into(),
                rendered_config: String::new(),
                action: DriftAction::Force,
                abort: false,
            },
        );
        object.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        object.status = Some(DriftRemediationStatus {
            phase,
            detected_at: Some("2026-01-01T00:00:00Z".into()),
            ..DriftRemediationStatus::default()
        });
        object
    }

    #[test]
    fn only_a_finished_drift_remediation_owing_nothing_may_go() {
        let never = |_: &DriftRemediation| false;
        for phase in DriftPhase::ALL {
            let expected = match phase {
                _ if !phase.is_terminal() => Standing::Open,
                DriftPhase::Failed => Standing::Kept,
                _ => Standing::Finished,
            };
            assert_eq!(
                standing(&drift(1, phase, &[]), never),
                expected,
                "{phase:?}"
            );
        }
        let mut owing = drift(1, DriftPhase::Succeeded, &[]);
        if let Some(status) = owing.status.as_mut() {
            status.force_file_written = true;
        }
        assert_eq!(standing(&owing, never), Standing::Open);
        let seen = drift(1, DriftPhase::Failed, &[(ACKNOWLEDGED, "true")]);
        assert_eq!(standing(&seen, never), Standing::Finished);
        assert_eq!(
            standing(&seen, |_| true),
            Standing::Kept,
            "the cap reads it"
        );
    }

    #[test]
    fn a_retry_starts_the_recurrence_count_again() {
        let at = parse_rfc3339("2026-01-01T00:00:00Z");
        let window = Duration::from_secs(3600);
        let all: Vec<Arc<DriftRemediation>> = [
            drift(1, DriftPhase::Failed, &[]),
            drift(2, DriftPhase::Failed, &[(RETRIED_BY, "worker-0-3")]),
            drift(3, DriftPhase::Succeeded, &[]),
            drift(4, DriftPhase::Aborted, &[]),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        let reset = recurrence_reset(&all);
        assert_eq!(reset, 2);
        let counted: Vec<bool> = all
            .iter()
            .map(|r| counts_for_recurrence(r, reset, at, window))
            .collect();
        assert_eq!(counted, [false, false, true, false]);
        let later = at + window + Duration::from_secs(1);
        assert!(!counts_for_recurrence(&all[2], reset, later, window));
        assert!(counts_for_recurrence(&all[0], 0, at, window));
        assert!(retry_requested(&drift(
            1,
            DriftPhase::Failed,
            &[(RETRY, "true")]
        )));
        assert!(!retry_requested(&drift(
            1,
            DriftPhase::Aborted,
            &[(RETRY, "true")]
        )));
    }
}
