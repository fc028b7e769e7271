//! Housekeeping of a Machine's finished Remediations: retention (the finished ones beyond
//! the policy's `retention.keepFinished` are deleted, the decision taken by
//! [`crate::runtime::retention`]) and the retry of a `Failed` one that carries
//! `baremend.io/retry: "true"` (a new Remediation through the normal start path).

use std::sync::Arc;
use std::time::Duration;

use kube::{Resource, ResourceExt};

use crate::Result;
use crate::api::annotations::{RETRIED_BY, RETRY};
use crate::api::{EventReason, Remediation, RemediationStatus, RemediationStep};
use crate::leader::Writes;
use crate::remediation::act::steps::Steps;
use crate::remediation::decide::plan::Phase;
use crate::remediation::decide::state::created_at;
use crate::remediation::pass::{Pass, attempt_number};
use crate::remediation::world::execute;
use crate::runtime::clock::parse_rfc3339;
use crate::runtime::delete::delete_each;
use crate::runtime::events::Severity;
use crate::runtime::retention::{Record, Standing, acknowledged, to_prune};

/// The most Remediations one pass deletes: a Machine with a long backlog (a policy lowered,
/// an upgrade from a version without retention) is cleaned over a few passes.
const PRUNE_BOUND: usize = 10;

/// The pass's housekeeping: pruning, retries and the backup carried over. Made by
/// `Housekeeping::of(pass)` where needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct Housekeeping<'p> {
    pass: &'p Pass,
}

impl<'p> Housekeeping<'p> {
    /// The Housekeeping of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        Housekeeping { pass }
    }

    /// Deletes the finished Remediations retention lets go (UID precondition, leave to
    /// write checked before each), and tells it once in an Event on the Machine.
    pub(in crate::remediation) async fn prune(
        self,
        writes: &Writes,
        existing: &[Arc<Remediation>],
    ) -> Result<()> {
        let records: Vec<Record<usize>> = existing
            .iter()
            .enumerate()
            .map(|(key, r)| Record {
                key,
                standing: standing(r),
                finished_at: finished_at(r),
            })
            .collect();
        let keep = usize::try_from(self.pass.policy.retention.keep_finished).unwrap_or(usize::MAX);
        let doomed = to_prune(&records, keep.max(1), PRUNE_BOUND);
        if doomed.is_empty() {
            return Ok(());
        }
        let api = self.pass.remediation_api();
        let doomed: Vec<&Remediation> = doomed
            .iter()
            .filter_map(|key| existing.get(*key))
            .map(|r| &**r)
            .collect();
        // The Event names the oldest pruned one as related: Events with the same reason,
        // object and related object fold into one series that keeps the first note.
        let oldest = doomed.first().map(|r| r.object_ref(&()));
        let (pruned, outcome) = delete_each(&api, doomed, writes, "DeleteRemediation").await;
        if !pruned.is_empty() {
            self.pass
                .context
                .metrics
                .pruned("Remediation", pruned.len());
            let note = format!(
                "retention (keepFinished {keep}): deleted {} finished Remediation(s): {}",
                pruned.len(),
                pruned.join(", ")
            );
            let machine = self.pass.event_target();
            crate::runtime::events::publish(
                &self.pass.context.clients.recorder,
                Severity::Normal,
                EventReason::Pruned.as_str(),
                &note,
                &[(machine, oldest)],
            )
            .await;
        }
        outcome
    }

    /// Tells, with a Warning, that a retry annotation was not understood.
    pub(in crate::remediation) async fn refuse_retry(self, failed: &Remediation, value: &str) {
        let note =
            format!("{RETRY} is {value:?}: only \"true\" asks for a retry, so nothing is done");
        self.pass
            .event(failed, Severity::Warning, EventReason::RetryIgnored, note)
            .await;
    }

    /// Starts Remediation `number` for the Machine in place of `failed`, which asked for a
    /// retry (the pass decided so, and confirmed the trigger on a fresh read: see
    /// `decide::pass`): the failed one is marked (its new attempt's name) before the new one
    /// is created, and the new one is `Pending` — every start gate still decides.
    pub(in crate::remediation) async fn retry_failed(
        self,
        writes: &Writes,
        failed: &Remediation,
        number: usize,
    ) -> Result<Remediation> {
        let next = format!("{}-{number}", self.pass.name);
        if failed.annotations().get(RETRIED_BY) != Some(&next) {
            execute::set_annotation(
                writes,
                &self.pass.remediation_api(),
                &failed.name_any(),
                RETRIED_BY,
                Some(&next),
                "MarkRetried",
            )
            .await?;
        }
        let mut remediation = Steps::of(self.pass, writes).start(number).await?;
        self.carry_backup_over(writes, failed, &mut remediation)
            .await?;
        let note = format!(
            "{RETRY}: Remediation {} failed; {next} starts in its place (the start gates still decide)",
            failed.name_any()
        );
        self.pass
            .event(&remediation, Severity::Normal, EventReason::Retried, note)
            .await;
        Ok(remediation)
    }

    /// Tells that the retry asked on `failed` waits for a trigger.
    pub(in crate::remediation) async fn retry_waiting(self, failed: &Remediation) {
        let note = format!(
            "{RETRY}: the Machine carries no host.metal3.io/external-remediation, so there is nothing to retry until it is unhealthy again"
        );
        self.pass
            .event(failed, Severity::Normal, EventReason::RetryWaiting, note)
            .await;
    }

    /// A failed remediation that released the Node (deleted or tainted it) left its backup of
    /// the Node as it was before: the retry restores from that one, not from a Node that is
    /// gone or already stripped.
    async fn carry_backup_over(
        self,
        writes: &Writes,
        failed: &Remediation,
        new: &mut Remediation,
    ) -> Result<()> {
        let old = failed.status.clone().unwrap_or_default();
        let fresh = new.status.as_ref().is_none_or(|s| s.steps.is_empty());
        if !fresh || !released_node(&old) {
            return Ok(());
        }
        let Some(backup) = old.node_backup else {
            return Ok(());
        };
        let status = RemediationStatus {
            node_backup: Some(backup),
            ..new.status.clone().unwrap_or_default()
        };
        self.pass.persist(writes, new, status).await
    }
}

/// The number of the Machine's next Remediation: one past the highest, so that a pruned
/// older one never frees a name a newer one still holds.
pub(in crate::remediation) fn next_number(existing: &[Arc<Remediation>], machine: &str) -> usize {
    let highest = existing
        .iter()
        .map(|r| attempt_number(&r.name_any(), machine))
        .max()
        .unwrap_or(0);
    usize::try_from(highest).unwrap_or(usize::MAX - 1) + 1
}

/// How retention sees a Remediation: under way → open; `Failed` and neither acknowledged nor
/// retried → kept; otherwise finished.
pub fn standing(remediation: &Remediation) -> Standing {
    let phase = remediation.phase();
    if !phase.is_terminal() {
        return Standing::Open;
    }
    if phase == Phase::Failed && !acknowledged(remediation.annotations()) {
        Standing::Kept
    } else {
        Standing::Finished
    }
}

/// When a finished Remediation ended: the start of its terminal phase, else its creation.
fn finished_at(remediation: &Remediation) -> Duration {
    remediation
        .status
        .as_ref()
        .and_then(|s| s.phase_since.as_deref())
        .map(parse_rfc3339)
        .or_else(|| created_at(remediation))
        .unwrap_or_default()
}

/// Whether a remediation got as far as releasing the Node.
fn released_node(status: &RemediationStatus) -> bool {
    status.steps.iter().any(|s| {
        s.step.known().is_some_and(|step| {
            matches!(
                step,
                RemediationStep::NodeDeleting
                    | RemediationStep::NodeDeleted
                    | RemediationStep::NodeTainting
                    | RemediationStep::NodeTainted
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RemediationSpec;
    use crate::api::annotations::ACKNOWLEDGED;

    fn remediation(name: &str, phase: Phase, annotations: &[(&str, &str)]) -> Arc<Remediation> {
        let mut object = Remediation::new(
            name,
            RemediationSpec {
                machine_name: Some("worker-0".into()),
                host_bmc: None,
                machine_uid: None,
                node_name: None,
                host: None,
                trigger: None,
            },
        );
        object.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        object.status = Some(RemediationStatus {
            phase,
            ..RemediationStatus::default()
        });
        Arc::new(object)
    }

    #[test]
    fn only_a_finished_remediation_may_go_and_a_failed_one_once_seen() {
        let open = [
            Phase::Pending,
            Phase::PoweringOff,
            Phase::Fenced,
            Phase::Restoring,
        ];
        for phase in open {
            assert_eq!(standing(&remediation("a", phase, &[])), Standing::Open);
        }
        for phase in [Phase::Succeeded, Phase::Cancelled, Phase::DryRun] {
            assert_eq!(standing(&remediation("a", phase, &[])), Standing::Finished);
        }
        let failed = |annotations| standing(&remediation("a", Phase::Failed, annotations));
        assert_eq!(failed(&[]), Standing::Kept);
        assert_eq!(failed(&[(ACKNOWLEDGED, "false")]), Standing::Kept);
        assert_eq!(
            failed(&[(RETRY, "true")]),
            Standing::Kept,
            "asked, not yet retried"
        );
        assert_eq!(failed(&[(ACKNOWLEDGED, "true")]), Standing::Finished);
        assert_eq!(failed(&[(RETRIED_BY, "worker-0-4")]), Standing::Finished);
    }

    #[test]
    fn the_next_remediation_is_numbered_past_the_highest_left() {
        let left = [
            remediation("worker-0-4", Phase::Succeeded, &[]),
            remediation("worker-0-7", Phase::Failed, &[]),
            remediation("worker-0-x", Phase::Failed, &[]),
        ];
        assert_eq!(next_number(&left, "worker-0"), 8);
        assert_eq!(next_number(&[], "worker-0"), 1);
    }
}
