//! The planned-reboot guard: whether a Node carries `baremend.io/planned-reboot`
//! ([`crate::api::annotations::PLANNED_REBOOT`]), decided from the node's DriftRemediations
//! and the Machine Config Operator's progress on the Node, and nothing else. The machine
//! remediation holds its start while the mark is there, so that a MachineHealthCheck which
//! takes the MCO's reboot for a hang cannot get the node fenced in the middle of a re-apply.
//!
//! # Expected flow
//! 1. A remediation persists `ForceRequested` (with `forceFileWritten`); the mark is set,
//!    naming it, before the helper writes the forcefile.
//! 2. While it is open in `ForceRequested` or `Applying`, the mark stays, whatever the node
//!    shows.
//! 3. Once it ended — `Succeeded`, `Failed` (a pickup, drain or apply timeout), `Aborted` —
//!    the mark stays while
//!    - the forcefile it wrote is not confirmed removed (the MCD may still take it and
//!      reboot), or
//!    - the MCO is still at work on the node ([`McoProgress::idle`] is false): a drain or
//!      uncordon request not carried out (`desiredDrain ≠ lastAppliedDrain`), the node held
//!      drained for an update (`desiredDrain = drain-…`, where the MCD writes the files and
//!      reboots), the MCD `Working`, or a reboot for the MCO (`post-config-action=Rebooting`,
//!      `currentConfig ≠ desiredConfig`).
//! 4. When all of that is over the mark is lifted (after a trigger the health check left
//!    during the reboot is cleared, when the node came back Ready from it).
//!
//! # Guarantees
//! - The mark never goes while a reboot the coordinator asked for may still come: a drift
//!   remediation that failed, timed out or was aborted keeps it as long as an open one would.
//! - An ended remediation never sets the mark again once it is gone: the mark on the Node is
//!   the memory that the re-apply we asked for has not been seen to end, so a later rollout
//!   of the pool is not taken for ours. Only a forcefile still owed a removal, or an open
//!   remediation, sets it anew.
//! - `Escalated` never holds the mark: the node was handed to the machine remediation.
//!
//! # Caveats
//! - An MCO that never finishes (a drain blocked for good, a daemon stuck after its drain)
//!   keeps the mark, and the machine remediation holds (`PlannedReboot`) as long. Removing
//!   the mark by hand releases a node whose remediation ended: it is not set again.
//! - Decided from caches, the mark may stay a pass longer than needed; it is lifted only when
//!   fresh reads of the Node and the DriftRemediations decide so too (`mark.rs`).

use std::collections::BTreeMap;

use crate::api::DriftPhase as Phase;
use crate::api::mco::{
    CURRENT_CONFIG, DESIRED_CONFIG, DESIRED_DRAIN, LAST_APPLIED_DRAIN, POST_CONFIG_ACTION, STATE,
};

/// What the guard reads of one DriftRemediation of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt<'a> {
    /// Its name (the mark's value).
    pub name: &'a str,
    /// Its phase.
    pub phase: Phase,
    /// A forcefile it wrote may still be on the node (`forceFileWritten`).
    pub force_file_written: bool,
}

/// The Machine Config Operator's progress on the node, as its annotations show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct McoProgress {
    /// `desiredDrain ≠ lastAppliedDrain`: a drain or uncordon request not carried out.
    pub drain_pending: bool,
    /// `desiredDrain = drain-…`: the node is held drained for an update (the MCD rewrites
    /// the files and reboots before it asks for the uncordon).
    pub held_drained: bool,
    /// `state=Working`.
    pub working: bool,
    /// A reboot for the MCO: `post-config-action=Rebooting`, or `currentConfig ≠
    /// desiredConfig` (an update the node has not booted into).
    pub rebooting: bool,
}

impl McoProgress {
    /// Reads the progress from a Node's annotations.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        let get = |key: &str| annotations.get(key).map(String::as_str);
        let desired = get(DESIRED_DRAIN);
        McoProgress {
            drain_pending: desired.is_some() && desired != get(LAST_APPLIED_DRAIN),
            held_drained: desired.is_some_and(|d| d.starts_with("drain-")),
            working: get(STATE) == Some("Working"),
            rebooting: get(POST_CONFIG_ACTION) == Some("Rebooting")
                || get(CURRENT_CONFIG) != get(DESIRED_CONFIG),
        }
    }

    /// Whether the MCO is done with the node for now.
    pub fn idle(self) -> bool {
        !(self.drain_pending || self.held_drained || self.working || self.rebooting)
    }
}

/// Whether the attempt is open and has asked the MCO for its re-apply.
fn in_flight(attempt: &Attempt<'_>) -> bool {
    match attempt.phase {
        Phase::ForceRequested | Phase::Applying => true,
        Phase::Debouncing
        | Phase::Pending
        | Phase::Draining
        | Phase::Restoring
        | Phase::Succeeded
        | Phase::SelfHealed
        | Phase::Failed
        | Phase::Aborted
        | Phase::Escalated => false,
    }
}

/// The mark the node should carry: the DriftRemediation it names, or None.
///
/// `attempts` are the node's DriftRemediations, oldest first; `marked` is the mark the Node
/// carries now. See the module doc for the rules.
pub fn planned_reboot(
    attempts: &[Attempt<'_>],
    mco: McoProgress,
    marked: Option<&str>,
) -> Option<String> {
    if let Some(open) = attempts.iter().rev().find(|a| in_flight(a)) {
        return Some(open.name.to_owned());
    }
    if let Some(marked) = marked {
        match attempts.iter().find(|a| a.name == marked) {
            // Handed over: the machine remediation may take the node.
            Some(owner) if owner.phase == Phase::Escalated => {}
            Some(owner) if owner.force_file_written || !mco.idle() => {
                return Some(marked.to_owned());
            }
            // A mark whose DriftRemediation is gone (deleted by hand) still guards the
            // re-apply it was set for.
            None if !mco.idle() => return Some(marked.to_owned()),
            Some(_) | None => {}
        }
    }
    attempts
        .iter()
        .rev()
        .find(|a| a.force_file_written && a.phase != Phase::Escalated)
        .map(|a| a.name.to_owned())
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
