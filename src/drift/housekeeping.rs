//! Housekeeping of a Node's finished DriftRemediations: retention (the finished ones beyond
//! the policy's `retention.keepFinished` are deleted, the decision taken by
//! [`crate::runtime::retention`]) and the retry of a `Failed` one that carries
//! `baremend.io/retry: "true"` (the recurrence count starts again after it).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use super::pass::Pass;
use super::retention::{
    counts_for_recurrence, failed_retry_ask, phase_since, recurrence_reset, standing,
};
use crate::api::annotations::{RETRIED_BY, RETRY};
use crate::api::{DriftEventReason, DriftRemediation};
use crate::leader::Writes;
use crate::runtime::clock::since_epoch;
use crate::runtime::delete::delete_each;
use crate::runtime::events::Severity;
use crate::runtime::retention::{Record, RetryAsk, to_prune};
use crate::{Error, Result};

/// The most DriftRemediations one pass deletes.
const PRUNE_BOUND: usize = 10;

/// The drift pass's housekeeping: pruning and retries. Made by `Housekeeping::of(pass)` where
/// needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct Housekeeping<'p> {
    pass: &'p Pass,
    /// The leader's leave to write, which its writes take (and check again).
    writes: &'p Writes,
}

impl<'p> Housekeeping<'p> {
    /// The Housekeeping of `pass`, writing with the leader's `writes`.
    pub(crate) fn of(pass: &'p Pass, writes: &'p Writes) -> Self {
        Housekeeping { pass, writes }
    }

    /// Deletes the finished DriftRemediations retention lets go (UID precondition, leave to
    /// write checked before each), and tells it once in an Event on the Node. Called only when no
    /// attempt is under way, owes a cleanup or holds the planned-reboot mark.
    pub(super) async fn prune(self, all: &[Arc<DriftRemediation>]) -> Result<()> {
        let now = since_epoch(self.pass.context.clock.now());
        let window = Duration::from_secs(self.pass.policy.recurrence_window_seconds);
        let reset = recurrence_reset(all);
        let records: Vec<Record<usize>> = all
            .iter()
            .enumerate()
            .map(|(key, r)| Record {
                key,
                standing: standing(r, |r| counts_for_recurrence(r, reset, now, window)),
                finished_at: phase_since(r),
            })
            .collect();
        let keep = usize::try_from(self.pass.policy.retention.keep_finished).unwrap_or(usize::MAX);
        let doomed = to_prune(&records, keep.max(1), PRUNE_BOUND);
        if doomed.is_empty() {
            return Ok(());
        }
        let api: Api<DriftRemediation> = Api::all(self.pass.context.client.clone());
        let doomed: Vec<&DriftRemediation> = doomed
            .iter()
            .filter_map(|key| all.get(*key))
            .map(|r| &**r)
            .collect();
        // The Event names the oldest pruned one as related: Events with the same reason,
        // object and related object fold into one series that keeps the first note.
        let oldest = doomed.first().map(|r| r.object_ref(&()));
        let (pruned, outcome) =
            delete_each(&api, doomed, self.writes, "DeleteDriftRemediation").await;
        if !pruned.is_empty() {
            self.pass
                .context
                .metrics
                .pruned("DriftRemediation", pruned.len());
            let note = format!(
                "retention (keepFinished {keep}): deleted {} finished DriftRemediation(s): {}",
                pruned.len(),
                pruned.join(", ")
            );
            let node = self.pass.node.object_ref(&());
            crate::runtime::events::publish(
                &self.pass.context.recorder,
                Severity::Normal,
                DriftEventReason::Pruned.as_str(),
                &note,
                &[(node, oldest)],
            )
            .await;
        }
        outcome
    }

    /// Tells, with a Warning on the Node, that the retry annotation of its latest, Failed
    /// DriftRemediation was not understood.
    pub(super) async fn refuse_malformed_retry(self, latest: Option<&Arc<DriftRemediation>>) {
        let Some(latest) = latest else {
            return;
        };
        if let RetryAsk::Malformed(value) = failed_retry_ask(latest) {
            let note = format!(
                "{RETRY} on DriftRemediation {} is {value:?}: only \"true\" asks for a retry, so nothing is done",
                latest.name_any()
            );
            self.pass
                .node_event(Severity::Warning, DriftEventReason::RetryIgnored, note)
                .await;
        }
    }

    /// Marks `failed` as retried by the attempt `next` (before that attempt is opened, so that
    /// the recurrence count starts again after it even if the pass ends in between).
    pub(super) async fn mark_retried(self, failed: &DriftRemediation, next: &str) -> Result<()> {
        if failed.annotations().get(RETRIED_BY).map(String::as_str) == Some(next) {
            return Ok(());
        }
        let api: Api<DriftRemediation> = Api::all(self.pass.context.client.clone());
        let patch = serde_json::json!({"metadata": {"annotations": {RETRIED_BY: next}}});
        self.writes.check()?;
        api.patch(
            &failed.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(Error::kube("MarkRetried"))?;
        let note = format!(
            "{RETRY}: DriftRemediation {} failed; {next} opens in its place if the drift persists (the recurrence count starts again)",
            failed.name_any()
        );
        self.pass
            .node_event(Severity::Normal, DriftEventReason::Retried, note)
            .await;
        Ok(())
    }
}
