//! The remediation state machine: a pure function from (persisted state, observations,
//! policy) to the next step. Nothing here reads a clock or talks to anything.
//!
//! # Expected flow
//! 1. `Pending`: the trigger is present and the safety gates allow a start → request power-off
//!    with the first strategy of the policy (`PoweringOff`). A paused policy holds the start
//!    (`Paused`, in either mode). In `DryRun` mode the start is decided and recorded instead
//!    (`RecordDryRun`, ending in the terminal `DryRun` phase): the gate that would hold, the
//!    strategy that would fence (the first whose non-disruptive probe answered, as the
//!    escalation would go), nothing else.
//! 2. `PoweringOff`: once the strategy's evidence proves the host off → `MarkFenced`. Evidence
//!    that can never prove it (a detached host, `disablePowerOff`) or the power-off deadline
//!    → the next strategy, or `Failed` when none is left. The trigger disappearing before the
//!    host is proven off cancels and withdraws the request — in the first power cycle only: a
//!    later one follows a release, so the trigger going away in it fails the remediation
//!    (`NodeNeverReady`, the host left off) instead of claiming nothing happened.
//! 3. `Fenced`: back up the Node (delete mode), then release it (delete it, or taint it
//!    out-of-service) on fresh proof → `NodeReleased`. From here on the cycle completes even
//!    if the trigger goes away: the host must not stay off. If the proof cannot be taken
//!    again: our request removed by someone else → re-made once (the `Fenced` clock restarts,
//!    and the proof must then hold for half the power-off deadline before the release, since a
//!    BareMetalHost's status is its operator's last read); the host read On → a new
//!    power cycle while attempts remain, else `Failed` (`FenceLost`, the Node kept); no proof
//!    within the power-off deadline → `Failed` (`FenceLost`).
//! 4. `NodeReleased` → request power-on (`PoweringOn`).
//! 5. `PoweringOn`: the Node registered and Ready for the grace period → `Restore`. No Node in
//!    time → a new power cycle while the trigger is there and attempts remain, else `Failed`
//!    (a health check that withdrew its trigger, or timed it out, gets no new power cycle).
//! 6. `Restoring`: restore the Node and remove our marks → `Succeeded`; not done within the
//!    Node deadline → `Failed` (`RestoreTimedOut`).
//!
//! # Guarantees
//! - Only `Fenced` leads to releasing a Node, only with the evidence proving the host off at
//!   that moment, and `Fenced` is only reached through `MarkFenced`, which the planner emits
//!   only when the evidence proved the host off.
//! - Every non-terminal phase but `Pending` has a deadline from the policy; `Pending` either
//!   starts, cancels, records a dry run, or holds with a named gate.
//! - In `DryRun` mode nothing is started: from `Pending` the only steps are `Cancel`,
//!   `Hold(Paused)` and `RecordDryRun`, none of which requests power or touches the Node or
//!   the Machine. The mode is read only in `Pending`: a remediation past its start finishes
//!   its cycle under `Remediate` whatever the policy says now (a half-done cycle would leave
//!   a host off or a Node released).
//!
//! # Caveats
//! The planner trusts the verdict it is given; making that verdict from fresh evidence is the
//! pass's job (see `fence`).

use std::time::Duration;

use super::fence::NotFenced;
use super::gates::Held;

/// The strategy a start fences with: the policy's first (later ones follow on escalation).
pub const START_STRATEGY: usize = 0;

/// The earliest look at the power after a power-off request.
const FIRST_LOOK: Duration = Duration::from_millis(100);

/// Where a remediation is: the phase persisted in the `Remediation` object.
pub use crate::api::RemediationPhase as Phase;

/// How the Node of a fenced host is released: the policy's own setting.
pub use crate::api::NodeReleaseMode as ReleaseMode;

/// Remediate or only record what would be done: the policy's own setting.
pub use crate::api::RemediationMode as Mode;

/// The persisted state the planner reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persisted {
    /// The phase.
    pub phase: Phase,
    /// Index of the strategy in use, in the policy's order; None when the policy no longer
    /// names the strategy in use (it is kept, never silently switched).
    pub strategy: Option<usize>,
    /// The power cycle under way, from 1.
    pub attempt: u32,
    /// When the phase began (time since an arbitrary epoch, the same as `Observed::now`).
    pub phase_since: Duration,
    /// The Node's labels, annotations and taints are saved.
    pub node_backed_up: bool,
    /// The Node's boot ID when power-off was last requested, if it had one.
    pub boot_id_before: Option<String>,
    /// Our power-off request was found removed after the host was fenced and made again.
    pub request_remade: bool,
}

impl Persisted {
    /// A new remediation at `now`.
    pub fn new(now: Duration) -> Self {
        Persisted {
            phase: Phase::Pending,
            strategy: Some(0),
            attempt: 1,
            phase_since: now,
            node_backed_up: false,
            boot_id_before: None,
            request_remade: false,
        }
    }
}

/// The Node, as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeView {
    /// No Node of that name.
    Missing,
    /// A Node exists.
    Present {
        /// Since when it is Ready (None: not Ready).
        ready_since: Option<Duration>,
        /// The boot ID its kubelet reported (`status.nodeInfo.bootID`), if any.
        boot_id: Option<String>,
    },
}

impl NodeView {
    /// Whether the Node exists and is Ready: the one reading of a Node's readiness the
    /// gates count and the release waits on.
    pub fn is_ready(&self) -> bool {
        matches!(
            self,
            NodeView::Present {
                ready_since: Some(_),
                ..
            }
        )
    }
}

/// What the reconciler observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Now.
    pub now: Duration,
    /// The Machine carries the external-remediation annotation.
    pub triggered: bool,
    /// The current strategy's verdict from fresh evidence (taken in `PoweringOff` and
    /// `Fenced`): Ok when the host is proven off.
    pub fence: Result<(), NotFenced>,
    /// The Node.
    pub node: NodeView,
    /// The safety gates (concurrency, storm, control-plane quorum) for a start.
    pub may_start: Result<(), Held>,
    /// The non-disruptive probes of the fencing paths, in the policy's order up to the first
    /// that answered (taken only for a dry run's start; empty otherwise).
    pub probes: Vec<Probe>,
}

/// What a dry run's non-disruptive probe of one fencing strategy found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The strategy's index in the policy.
    pub strategy: usize,
    /// What answered and what it said (the host or BMC, its power), or why it did not.
    pub outcome: Result<String, String>,
}

/// What a dry run would have done, as the planner decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRun {
    /// The strategy that would fence: the first whose probe answered (None: none did).
    pub strategy: Option<usize>,
    /// The gate that would hold the start, if one would.
    pub held: Option<Held>,
    /// How the Node would be released.
    pub release: ReleaseMode,
    /// Every probe made, in order.
    pub probes: Vec<Probe>,
}

/// The knobs of the policy the planner needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanPolicy {
    /// How many fencing strategies the policy allows, in order.
    pub strategies: usize,
    /// How long to wait for power-off proof per strategy (and for the release once fenced).
    pub power_off_timeout: Duration,
    /// How long to wait for the Node after power-on (and for its restore).
    pub node_timeout: Duration,
    /// How long the Node must stay Ready to count as back.
    pub ready_grace: Duration,
    /// Power cycles before giving up.
    pub max_attempts: u32,
    /// Delete or taint.
    pub release: ReleaseMode,
    /// How soon to look again while waiting.
    pub poll: Duration,
    /// Remediate, or record what would be done (read in `Pending` only).
    pub mode: Mode,
}

/// Why a remediation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// No strategy could prove the host off (the Node is left alone).
    PowerOffNotConfirmed(String),
    /// The host was proven off, but the proof could not be taken again for the release (the
    /// host came back on, or our request kept disappearing); the Node is kept.
    FenceLost(String),
    /// The Node did not come back in any attempt (the host stays off).
    NodeNeverReady,
    /// The Node came back but could not be restored in time (the trigger stays).
    RestoreTimedOut,
}

impl FailReason {
    /// Every reason's label, in declaration order: the metric's label values and the
    /// runbook's sections (tests/prometheus_rules.rs checks each has one).
    pub fn labels() -> [&'static str; 4] {
        // The match does not compile when a variant is added: add it to the list too.
        let every = |reason: &FailReason| match reason {
            FailReason::PowerOffNotConfirmed(_)
            | FailReason::FenceLost(_)
            | FailReason::NodeNeverReady
            | FailReason::RestoreTimedOut => reason.label(),
        };
        [
            every(&FailReason::PowerOffNotConfirmed(String::new())),
            every(&FailReason::FenceLost(String::new())),
            every(&FailReason::NodeNeverReady),
            every(&FailReason::RestoreTimedOut),
        ]
    }

    /// The reason as a bounded name: the condition's reason and a metric label.
    pub fn label(&self) -> &'static str {
        match self {
            FailReason::PowerOffNotConfirmed(_) => "PowerOffNotConfirmed",
            FailReason::FenceLost(_) => "FenceLost",
            FailReason::NodeNeverReady => "NodeNeverReady",
            FailReason::RestoreTimedOut => "RestoreTimedOut",
        }
    }
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until something changes or `after` passes.
    Wait {
        /// When to look again.
        after: Duration,
    },
    /// A safety gate holds the start.
    Hold(Held),
    /// The trigger went away before anything happened.
    Cancel,
    /// Record what would have been done, change nothing, persist `DryRun`.
    RecordDryRun(DryRun),
    /// Persist `PoweringOff` with this strategy, then request power-off with it.
    RequestPowerOff {
        /// The strategy.
        strategy: usize,
    },
    /// The trigger went away before the host was proven off: withdraw the request (the host
    /// comes back on) and persist `Cancelled`.
    WithdrawPowerOff,
    /// Persist `Fenced` (and tag the Machine); the host is proven off.
    MarkFenced,
    /// Our power-off request disappeared after the host was fenced: record it, warn, and make
    /// the request again (once).
    RemakePowerOffRequest,
    /// Save the Node's labels, annotations and taints.
    BackUpNode,
    /// Release the Node (needs the power-off proof), then persist `NodeReleased`.
    ReleaseNode(ReleaseMode),
    /// Persist `PoweringOn`, then request power-on.
    RequestPowerOn,
    /// Restore the Node, remove our marks and the trigger, persist `Succeeded`.
    Restore,
    /// Try the next strategy (the earlier request stays in place).
    Escalate {
        /// The strategy.
        to: usize,
        /// Why the current one could not prove the host off.
        why: String,
    },
    /// Start power cycle `attempt` from the beginning.
    Retry {
        /// The new attempt number.
        attempt: u32,
        /// Why the last cycle did not end the remediation.
        why: String,
    },
    /// Persist `Failed` with a reason.
    Fail(FailReason),
    /// Terminal: nothing to do.
    Done,
}

fn escalate_or_fail(state: &Persisted, policy: &PlanPolicy, why: String) -> Step {
    match state.strategy {
        Some(index) if index + 1 < policy.strategies => Step::Escalate { to: index + 1, why },
        Some(_) => Step::Fail(FailReason::PowerOffNotConfirmed(why)),
        None => Step::Fail(FailReason::PowerOffNotConfirmed(format!(
            "{why}; the strategy in use is no longer in the policy, so there is no next one"
        ))),
    }
}

/// Another power cycle, only while the trigger is there (one gone after the proof lets the
/// cycle under way complete, and asks for no new one) and attempts remain; else `fail`.
fn retry_or_fail(
    state: &Persisted,
    observed: &Observed,
    policy: &PlanPolicy,
    why: String,
    fail: FailReason,
) -> Step {
    if observed.triggered && state.attempt < policy.max_attempts {
        Step::Retry {
            attempt: state.attempt + 1,
            why,
        }
    } else {
        Step::Fail(fail)
    }
}

/// Whether the host booted since the power-off request, as its Node tells: a boot ID other
/// than the one recorded at the request or, with none to compare, a Ready condition that
/// turned True at or after the power-on request (to the second: transition times have no
/// fraction). Ready alone proves nothing: a Node kept out-of-service can still read Ready
/// from before a power cycle shorter than the node monitor's grace period.
fn rebooted(state: &Persisted, ready_since: Duration, boot_id: Option<&str>) -> bool {
    match (state.boot_id_before.as_deref(), boot_id) {
        (Some(before), Some(now)) => before != now,
        _ => ready_since.as_secs() >= state.phase_since.as_secs(),
    }
}

/// The next step of a remediation.
pub fn next_step(state: &Persisted, observed: &Observed, policy: &PlanPolicy) -> Step {
    match state.phase {
        Phase::Succeeded | Phase::Failed | Phase::Cancelled | Phase::DryRun => Step::Done,
        Phase::Pending => pending(observed, policy),
        Phase::PoweringOff => powering_off(state, observed, policy),
        Phase::Fenced => fenced(state, observed, policy),
        Phase::NodeReleased => Step::RequestPowerOn,
        Phase::PoweringOn => powering_on(state, observed, policy),
        Phase::Restoring if waited(state, observed) >= policy.node_timeout => {
            Step::Fail(FailReason::RestoreTimedOut)
        }
        Phase::Restoring => Step::Restore,
    }
}

fn pending(observed: &Observed, policy: &PlanPolicy) -> Step {
    match (observed.triggered, &observed.may_start, policy.mode) {
        (false, _, _) => Step::Cancel,
        // Paused starts nothing, not even a dry run.
        (true, Err(held @ Held::Paused), _) => Step::Hold(held.clone()),
        (true, may_start, Mode::DryRun) => Step::RecordDryRun(DryRun {
            strategy: observed
                .probes
                .iter()
                .find(|p| p.outcome.is_ok())
                .map(|p| p.strategy),
            held: may_start.clone().err(),
            release: policy.release,
            probes: observed.probes.clone(),
        }),
        (true, Err(held), Mode::Remediate) => Step::Hold(held.clone()),
        (true, Ok(()), Mode::Remediate) => Step::RequestPowerOff {
            strategy: START_STRATEGY,
        },
    }
}

fn waited(state: &Persisted, observed: &Observed) -> Duration {
    observed.now.saturating_sub(state.phase_since)
}

fn powering_off(state: &Persisted, observed: &Observed, policy: &PlanPolicy) -> Step {
    let waited = waited(state, observed);
    match &observed.fence {
        // Proof first: once the host is off, the cycle completes whatever the trigger does.
        Ok(()) => Step::MarkFenced,
        Err(_) if !observed.triggered && state.attempt == 1 => Step::WithdrawPowerOff,
        // A later power cycle follows a release (its Node is gone or tainted): nothing to
        // cancel; the host is left off and the remediation says why.
        Err(_) if !observed.triggered => Step::Fail(FailReason::NodeNeverReady),
        Err(NotFenced::Untrustworthy(why)) => escalate_or_fail(state, policy, why.clone()),
        Err(not_yet) if waited >= policy.power_off_timeout => escalate_or_fail(
            state,
            policy,
            format!(
                "not proven off after {}: {not_yet}",
                crate::duration::spoken(waited)
            ),
        ),
        // Look soon after the request (a quick BMC is off in a fraction of a second),
        // then less and less often, up to the policy's poll interval. A missing request is
        // made again while waiting (a crash between persisting and asking loses it).
        Err(_) => Step::Wait {
            after: (waited / 2).max(FIRST_LOOK).min(policy.poll),
        },
    }
}

fn fenced(state: &Persisted, observed: &Observed, policy: &PlanPolicy) -> Step {
    let waited = waited(state, observed);
    let lost = |why: String| Step::Fail(FailReason::FenceLost(why));
    if waited >= policy.power_off_timeout {
        return lost(format!(
            "the Node was not released within {} of the proof",
            crate::duration::spoken(policy.power_off_timeout)
        ));
    }
    match &observed.fence {
        // After our request was made again, a BareMetalHost's `poweredOn: false` may be the
        // operator's last read from before it acted on the gap (powering the host on): the
        // proof must hold for a while before it counts.
        Ok(()) if state.request_remade && waited < remade_dwell(policy) => Step::Wait {
            after: policy.poll.min(remade_dwell(policy) - waited),
        },
        Ok(()) => match (policy.release, &observed.node, state.node_backed_up) {
            (ReleaseMode::Delete, NodeView::Present { .. }, false) => Step::BackUpNode,
            (mode, _, _) => Step::ReleaseNode(mode),
        },
        Err(NotFenced::RequestMissing(_)) if !state.request_remade => Step::RemakePowerOffRequest,
        Err(NotFenced::RequestMissing(why)) => lost(format!("{why}, again after it was re-made")),
        Err(NotFenced::PoweredOn(why)) => retry_or_fail(
            state,
            observed,
            policy,
            format!("the host was fenced, then {why}"),
            FailReason::FenceLost(format!("the host was fenced, then {why}")),
        ),
        Err(NotFenced::Untrustworthy(why)) => lost(why.clone()),
        Err(NotFenced::NotYet(_)) => Step::Wait {
            after: policy.poll.min(policy.power_off_timeout - waited),
        },
    }
}

/// How long the proof must hold after our request was made again (the `Fenced` clock
/// restarts at the remake): half the power-off deadline, the time the host's operator was
/// given to power it off in the first place, so a power-on it began in the gap shows first.
fn remade_dwell(policy: &PlanPolicy) -> Duration {
    policy.power_off_timeout / 2
}

/// While powering on, once the Node is back from a new boot and Ready: how much longer it
/// must stay Ready (the policy's ready grace) before it is restored, zero once it has. None
/// before that (not back, not Ready, or not powering on).
pub fn ready_grace_left(
    state: &Persisted,
    observed: &Observed,
    policy: &PlanPolicy,
) -> Option<Duration> {
    let NodeView::Present {
        ready_since: Some(since),
        boot_id,
    } = &observed.node
    else {
        return None;
    };
    if state.phase != Phase::PoweringOn || !rebooted(state, *since, boot_id.as_deref()) {
        return None;
    }
    // Readiness counts only from the power-on request on.
    let ready_for = observed.now.saturating_sub((*since).max(state.phase_since));
    Some(policy.ready_grace.saturating_sub(ready_for))
}

fn powering_on(state: &Persisted, observed: &Observed, policy: &PlanPolicy) -> Step {
    let back = ready_grace_left(state, observed, policy) == Some(Duration::ZERO);
    if back {
        Step::Restore
    } else if waited(state, observed) >= policy.node_timeout {
        retry_or_fail(
            state,
            observed,
            policy,
            "the Node did not come back".into(),
            FailReason::NodeNeverReady,
        )
    } else {
        Step::Wait { after: policy.poll }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
