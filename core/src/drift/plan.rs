//! The drift remediation state machine: a pure function from (persisted state, observations,
//! policy) to the next step. Nothing here reads a clock or talks to anything.
//!
//! # Expected flow (the force action)
//! 1. `Debouncing`: drift seen; wait the debounce — an admin who reverts the change lets the
//!    MCD heal the node itself (`SelfHealed`, nothing done).
//! 2. `Pending`: the gates (pool budget, rollout, approval, control plane) and the PDB
//!    pre-flight hold the start, with the reason in a condition.
//! 3. `ForceRequested`: persisted, then the forcefile is written on the node. The MCD picks
//!    it up (its drain request, its reboot, or a new boot ID show it) → `Applying`.
//! 4. `Applying`: the MCO cordons, drains, rewrites, reboots, uncordons; milestones are
//!    recorded as they are seen. Done → `Succeeded`.
//!
//! The restore action instead writes the expected files back (`Restoring`); the MCD's next
//! validation then heals the node without a drain or a reboot. With `drainBeforeRestore` the
//! coordinator first cordons and drains the node itself (`Draining`, Eviction API only) and
//! uncordons it once verified — never while an MCO drain is pending.
//!
//! In `Observe` mode, or on a node or pool annotated `baremend.io/drift-remediation:
//! disabled`, step 2 holds for good (reasons `ObserveOnly`, `DriftRemediationDisabled`): the
//! drift stays detected, classified, counted and told, and nothing is done about it until the
//! policy or the annotation changes. Both are read only before the start: a remediation
//! already acting finishes (a forcefile half taken, or a node left cordoned, is worse).
//!
//! # Guarantees
//! Nothing is requested in `Observe` mode or where drift remediation is disabled, while the
//! node heals by itself, while a gate holds, or while a
//! PodDisruptionBudget would refuse the drain. A request not picked up in time, or an abort,
//! removes the forcefile (a forcefile left behind would make the next real update skip its
//! validation). The coordinator never cordons, drains or uncordons in the force action: the
//! MCO does, and a node stuck draining is reported, never forced. The planned-reboot mark
//! that keeps the machine remediation away is not the planner's: [`super::guard`] keeps it
//! as long as the re-apply goes on, beyond the end of the remediation.

use crate::api::{DriftEventReason, DriftStep};
use std::time::Duration;

use super::budget::Deferred;
use super::classify::ConfigState;
use super::pdb::Blocking;
pub use crate::api::DriftPhase as Phase;

/// The action the policy picks: the policy's own setting.
pub use crate::api::DriftAction as Action;

/// Act, or only observe: the policy's own setting.
pub use crate::api::DriftMode as Mode;

/// What is persisted, as the planner reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persisted {
    /// The phase.
    pub phase: Phase,
    /// When the phase began (same epoch as `Observed::now`).
    pub phase_since: Duration,
    /// When the drift was first seen.
    pub detected_at: Duration,
    /// The node's `desiredDrain` when the forcefile was requested.
    pub drain_before: Option<String>,
    /// The node's boot ID when the forcefile was requested.
    pub boot_before: Option<String>,
    /// When the node was first seen not Ready in this remediation.
    pub not_ready_since: Option<Duration>,
    /// When the node was first seen with a drain pending.
    pub draining_since: Option<Duration>,
    /// Milestones already recorded.
    pub milestones: Vec<Milestone>,
    /// The admin asked to abort (`spec.abort`).
    pub abort: bool,
    /// We cordoned the node (our own drain before a restore) and have not uncordoned it.
    pub cordoned_by_us: bool,
}

impl Persisted {
    /// A remediation whose drift was detected at `now`.
    pub fn new(now: Duration) -> Self {
        Persisted {
            phase: Phase::Debouncing,
            phase_since: now,
            detected_at: now,
            drain_before: None,
            boot_before: None,
            not_ready_since: None,
            draining_since: None,
            milestones: Vec::new(),
            abort: false,
            cordoned_by_us: false,
        }
    }
}

/// What the MCO's re-apply has visibly done, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Milestone {
    /// The MCD took the forcefile (a drain request, a reboot, or a new boot).
    PickedUp,
    /// The MCC finished the drain (`lastAppliedDrain = drain-…`).
    Drained,
    /// The node went down for its reboot.
    Rebooting,
    /// The node booted again (a new boot ID) and is Ready.
    Rebooted,
}

impl Milestone {
    /// The step name recorded in the status.
    pub fn step(self) -> DriftStep {
        match self {
            Milestone::PickedUp => DriftStep::PickedUp,
            Milestone::Drained => DriftStep::Drained,
            Milestone::Rebooting => DriftStep::Rebooting,
            Milestone::Rebooted => DriftStep::Rebooted,
        }
    }

    /// The reason of the Event that tells it (the step's name).
    pub fn reason(self) -> DriftEventReason {
        match self {
            Milestone::PickedUp => DriftEventReason::PickedUp,
            Milestone::Drained => DriftEventReason::Drained,
            Milestone::Rebooting => DriftEventReason::Rebooting,
            Milestone::Rebooted => DriftEventReason::Rebooted,
        }
    }
}

/// The node as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeObservation {
    /// Its configuration state (classified annotations).
    pub config: ConfigState,
    /// The drifted target this remediation is about still shows (same class and path).
    pub same_drift: bool,
    /// Ready.
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// `desiredDrain`.
    pub desired_drain: Option<String>,
    /// `lastAppliedDrain`.
    pub last_applied_drain: Option<String>,
    /// `post-config-action=Rebooting`.
    pub rebooting: bool,
    /// The boot ID.
    pub boot_id: Option<String>,
    /// The node's `currentConfig` is the pool's target.
    pub on_pool_target: bool,
    /// The MachineConfigNode's `NodeDegraded` condition, when served (None: unknown).
    pub mcn_degraded: Option<bool>,
    /// Pods a drain would still evict (counted only while we drain).
    pub pods_to_evict: usize,
}

impl NodeObservation {
    fn drain_pending(&self) -> bool {
        self.desired_drain.is_some()
            && self.desired_drain != self.last_applied_drain
            && self
                .desired_drain
                .as_deref()
                .is_some_and(|d| d.starts_with("drain-"))
    }

    fn drained(&self) -> bool {
        self.desired_drain == self.last_applied_drain
            && self
                .last_applied_drain
                .as_deref()
                .is_some_and(|d| d.starts_with("drain-"))
    }

    /// Done as the coordinator's verification demands: `state=Done` with an empty reason
    /// on the pool's target, Ready, schedulable, no drain request pending, and the
    /// MachineConfigNode (when served) not degraded.
    fn verified(&self) -> bool {
        !self.unschedulable && self.verified_but_cordoned()
    }

    /// Verified, except for a cordon (ours, before we lift it).
    fn verified_but_cordoned(&self) -> bool {
        self.config == ConfigState::Done
            && self.on_pool_target
            && self.ready
            && self.desired_drain == self.last_applied_drain
            && self.mcn_degraded != Some(true)
    }
}

/// Everything the planner observes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Now.
    pub now: Duration,
    /// The node (None: the Node is gone).
    pub node: Option<NodeObservation>,
    /// The pool's gates for a start.
    pub gates: Result<(), Deferred>,
    /// Budgets that would refuse the drain (force action only).
    pub blocking: Vec<Blocking>,
    /// Finished attempts on this node within the recurrence window, this one excluded.
    pub recent_attempts: u32,
    /// Where drift remediation is disabled for this node, in words (the annotation on the
    /// Node or its pool); None: it is not.
    pub disabled: Option<String>,
}

/// The policy knobs the planner needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanPolicy {
    /// Act, or only observe (read before the start only).
    pub mode: Mode,
    /// The action.
    pub action: Action,
    /// How long drift must persist before anything is done.
    pub debounce: Duration,
    /// How long the MCD may take to pick the forcefile up.
    pub pickup_timeout: Duration,
    /// How long a drain may stay pending.
    pub drain_timeout: Duration,
    /// How long the node may stay NotReady.
    pub reboot_timeout: Duration,
    /// How long a restore may take to show `Done`.
    pub restore_timeout: Duration,
    /// How long the whole re-apply may take once picked up.
    pub apply_timeout: Duration,
    /// Attempts per node within the recurrence window.
    pub max_attempts: u32,
    /// Hand a node that stays NotReady to the machine remediation.
    pub escalate: bool,
    /// Restore: cordon and drain the node ourselves first (Eviction API only).
    pub drain_before_restore: bool,
    /// How often to look again while waiting.
    pub poll: Duration,
}

impl PlanPolicy {
    /// Whether the action drains the node (the MCO's drain, or our own before a restore):
    /// then PodDisruptionBudgets are checked before the start.
    pub fn drains(&self) -> bool {
        self.action == Action::Force || self.drain_before_restore
    }
}

/// Why a remediation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailReason {
    /// Drift came back too often on this node.
    Recurring(u32),
    /// The MCD did not take the forcefile.
    PickupTimeout,
    /// The drain stayed pending (blocked budgets named when known).
    DrainTimeout(Vec<String>),
    /// The node stayed NotReady and escalation is off.
    NodeNotReady,
    /// The restored files did not heal the node.
    RestoreTimeout,
    /// The node came back, still drifted.
    DriftPersists,
    /// The Node is gone.
    NodeGone,
    /// The re-apply did not finish in time.
    ApplyTimeout,
}

impl FailReason {
    /// Every reason's name, in declaration order: the runbook's sections
    /// (tests/prometheus_rules.rs checks each has one).
    pub fn reasons() -> [&'static str; 8] {
        // The match does not compile when a variant is added: add it to the list too.
        let every = |reason: &FailReason| match reason {
            FailReason::Recurring(_)
            | FailReason::PickupTimeout
            | FailReason::DrainTimeout(_)
            | FailReason::NodeNotReady
            | FailReason::RestoreTimeout
            | FailReason::DriftPersists
            | FailReason::NodeGone
            | FailReason::ApplyTimeout => reason.reason().as_str(),
        };
        [
            every(&FailReason::Recurring(0)),
            every(&FailReason::PickupTimeout),
            every(&FailReason::DrainTimeout(Vec::new())),
            every(&FailReason::NodeNotReady),
            every(&FailReason::RestoreTimeout),
            every(&FailReason::DriftPersists),
            every(&FailReason::NodeGone),
            every(&FailReason::ApplyTimeout),
        ]
    }

    /// Every reason a drift remediation can end `Failed` with, as the outcome counter names
    /// it: the planner's ([`FailReason::reasons`]), then the two the steps name themselves (a
    /// restore the node's config cannot take, a helper image not pinned by digest).
    pub fn every_failure() -> Vec<&'static str> {
        let steps = [
            DriftEventReason::RestoreUnsupported,
            DriftEventReason::HelperImageNotPinned,
        ];
        let mut all = Self::reasons().to_vec();
        all.extend(steps.iter().map(|reason| reason.as_str()));
        all
    }

    /// The reason for conditions, Events and metrics.
    pub fn reason(&self) -> DriftEventReason {
        match self {
            FailReason::Recurring(_) => DriftEventReason::DriftRecurring,
            FailReason::PickupTimeout => DriftEventReason::PickupTimeout,
            FailReason::DrainTimeout(_) => DriftEventReason::DrainTimeout,
            FailReason::NodeNotReady => DriftEventReason::NodeNotReady,
            FailReason::RestoreTimeout => DriftEventReason::RestoreTimeout,
            FailReason::DriftPersists => DriftEventReason::DriftPersists,
            FailReason::NodeGone => DriftEventReason::NodeGone,
            FailReason::ApplyTimeout => DriftEventReason::ApplyTimeout,
        }
    }
}

impl std::fmt::Display for FailReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailReason::Recurring(n) => write!(f, "drift came back: {n} attempts already"),
            FailReason::PickupTimeout => {
                f.write_str("the Machine Config Daemon did not pick the forcefile up")
            }
            FailReason::DrainTimeout(budgets) if budgets.is_empty() => {
                f.write_str("the drain did not finish in time")
            }
            FailReason::DrainTimeout(budgets) => write!(
                f,
                "the drain did not finish in time; blocked by {}",
                budgets.join("; ")
            ),
            FailReason::NodeNotReady => f.write_str("the node stayed NotReady"),
            FailReason::RestoreTimeout => {
                f.write_str("the node did not heal after the files were restored")
            }
            FailReason::DriftPersists => f.write_str("the node came back still drifted"),
            FailReason::NodeGone => f.write_str("the Node is gone"),
            FailReason::ApplyTimeout => f.write_str("the re-apply did not finish in time"),
        }
    }
}

/// The next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do (terminal).
    Done,
    /// Look again after a while.
    Wait {
        /// How long.
        after: Duration,
    },
    /// The debounce is over and drift is still there: go to `Pending`.
    EndDebounce,
    /// The node healed (or is no longer drifted) before anything was done.
    SelfHealed,
    /// A gate or a budget holds the start (a condition says which).
    Hold(String, DriftEventReason),
    /// Persist `ForceRequested`, then write the forcefile.
    RequestForce,
    /// Persist `Restoring`, then write the expected files back.
    RequestRestore,
    /// Persist `Draining` (and that we cordon), then cordon the node.
    StartDrain,
    /// Evict the pods still on the node (the Eviction API; a budget may refuse).
    Evict,
    /// Lift our own cordon (persisted first).
    Uncordon,
    /// Record a milestone.
    Record(Milestone),
    /// Remember when a wait began (NotReady, drain pending).
    Note(Noted),
    /// Verified: `Succeeded`.
    Succeed,
    /// Remove the forcefile (if any) and end `Aborted`.
    Abort(String),
    /// Remove the forcefile (if any) and fail.
    Fail(FailReason),
    /// Hand the node to the machine remediation and end `Escalated`.
    Escalate,
}

/// A wait start worth persisting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noted {
    /// The node went NotReady.
    NotReady,
    /// A drain became pending.
    Draining,
}

/// The next step for a remediation. Every phase is matched by name: a phase added to the
/// enum does not compile until it is given its step.
pub fn next_step(state: &Persisted, observed: &Observed, policy: &PlanPolicy) -> Step {
    let open = |step: PhaseStep| -> Step {
        let Some(node) = &observed.node else {
            return Step::Fail(FailReason::NodeGone);
        };
        if state.abort {
            return Step::Abort("aborted by request (spec.abort)".into());
        }
        let waited = observed.now.saturating_sub(state.phase_since);
        step(state, node, observed, policy, waited)
    };
    match state.phase {
        Phase::Succeeded
        | Phase::SelfHealed
        | Phase::Failed
        | Phase::Aborted
        | Phase::Escalated => Step::Done,
        Phase::Debouncing => open(debouncing),
        Phase::Pending => open(pending),
        Phase::ForceRequested => open(force_requested),
        Phase::Applying => open(applying),
        Phase::Draining => open(draining),
        Phase::Restoring => open(restoring),
    }
}

/// The step of one open phase, given the node (present) and how long the phase has lasted.
type PhaseStep = fn(&Persisted, &NodeObservation, &Observed, &PlanPolicy, Duration) -> Step;

fn debouncing(
    _: &Persisted,
    node: &NodeObservation,
    _: &Observed,
    policy: &PlanPolicy,
    waited: Duration,
) -> Step {
    if !node.same_drift {
        Step::SelfHealed
    } else if waited >= policy.debounce {
        Step::EndDebounce
    } else {
        Step::Wait {
            after: policy.debounce - waited,
        }
    }
}

fn pending(
    _: &Persisted,
    node: &NodeObservation,
    observed: &Observed,
    policy: &PlanPolicy,
    _: Duration,
) -> Step {
    if !node.same_drift {
        return Step::SelfHealed;
    }
    if policy.mode == Mode::Observe {
        let message = "the DriftPolicy's mode is Observe: the drift is recorded and nothing is done; set mode: Remediate to act";
        return Step::Hold(message.into(), DriftEventReason::ObserveOnly);
    }
    if let Some(at) = &observed.disabled {
        return Step::Hold(at.clone(), DriftEventReason::DriftRemediationDisabled);
    }
    if observed.recent_attempts >= policy.max_attempts {
        return Step::Fail(FailReason::Recurring(observed.recent_attempts));
    }
    if let Err(deferred) = &observed.gates {
        return Step::Hold(deferred.to_string(), deferred.reason());
    }
    if policy.drains()
        && let Some(block) = observed.blocking.first()
    {
        return Step::Hold(
            block.to_string(),
            DriftEventReason::BlockedByPodDisruptionBudget,
        );
    }
    match policy.action {
        Action::Force => Step::RequestForce,
        Action::Restore if policy.drain_before_restore => Step::StartDrain,
        Action::Restore => Step::RequestRestore,
    }
}

fn draining(
    _: &Persisted,
    node: &NodeObservation,
    observed: &Observed,
    policy: &PlanPolicy,
    waited: Duration,
) -> Step {
    if node.pods_to_evict == 0 {
        Step::RequestRestore
    } else if waited >= policy.drain_timeout {
        let budgets = observed.blocking.iter().map(|b| b.budget.clone()).collect();
        Step::Fail(FailReason::DrainTimeout(budgets))
    } else {
        Step::Evict
    }
}

fn restoring(
    state: &Persisted,
    node: &NodeObservation,
    _: &Observed,
    policy: &PlanPolicy,
    waited: Duration,
) -> Step {
    if state.cordoned_by_us && node.verified_but_cordoned() {
        Step::Uncordon
    } else if node.verified() {
        Step::Succeed
    } else if waited >= policy.restore_timeout {
        Step::Fail(FailReason::RestoreTimeout)
    } else {
        Step::Wait { after: policy.poll }
    }
}

fn picked_up(state: &Persisted, node: &NodeObservation) -> bool {
    let drain_moved = node.desired_drain != state.drain_before && node.desired_drain.is_some();
    let rebooted =
        state.boot_before.is_some() && node.boot_id.is_some() && node.boot_id != state.boot_before;
    drain_moved || node.rebooting || rebooted
}

fn force_requested(
    state: &Persisted,
    node: &NodeObservation,
    _: &Observed,
    policy: &PlanPolicy,
    waited: Duration,
) -> Step {
    if picked_up(state, node) {
        return Step::Record(Milestone::PickedUp);
    }
    if node.verified() {
        // Healed by someone else before the MCD took the file: take it back.
        return Step::Abort("the node healed before the forcefile was picked up".into());
    }
    if waited >= policy.pickup_timeout {
        return Step::Fail(FailReason::PickupTimeout);
    }
    Step::Wait { after: policy.poll }
}

fn applying(
    state: &Persisted,
    node: &NodeObservation,
    observed: &Observed,
    policy: &PlanPolicy,
    _: Duration,
) -> Step {
    let now = observed.now;
    let has = |m: Milestone| state.milestones.contains(&m);
    let rebooted =
        state.boot_before.is_some() && node.boot_id.is_some() && node.boot_id != state.boot_before;
    // Milestones in order, each once; a later one implies the earlier were passed.
    if !has(Milestone::Drained) && (node.drained() || node.rebooting || rebooted) {
        return Step::Record(Milestone::Drained);
    }
    if !has(Milestone::Rebooting) && (node.rebooting || !node.ready || rebooted) {
        return Step::Record(Milestone::Rebooting);
    }
    if !has(Milestone::Rebooted) && rebooted && node.ready {
        return Step::Record(Milestone::Rebooted);
    }
    // The MCD keeps the node Degraded until the very end (after the uncordon), so drift
    // that survived the reboot is only told apart from a flow still finishing by time.
    if has(Milestone::Rebooted) && node.verified() {
        return Step::Succeed;
    }
    if !node.ready {
        let Some(since) = state.not_ready_since else {
            return Step::Note(Noted::NotReady);
        };
        if now.saturating_sub(since) >= policy.reboot_timeout {
            return if policy.escalate {
                Step::Escalate
            } else {
                Step::Fail(FailReason::NodeNotReady)
            };
        }
    }
    if node.drain_pending() {
        let Some(since) = state.draining_since else {
            return Step::Note(Noted::Draining);
        };
        if now.saturating_sub(since) >= policy.drain_timeout {
            let budgets = observed.blocking.iter().map(|b| b.budget.clone()).collect();
            return Step::Fail(FailReason::DrainTimeout(budgets));
        }
        // A drain may legitimately take long; the drain timeout decides, not the overall.
        return Step::Wait { after: policy.poll };
    }
    if now.saturating_sub(state.phase_since) >= policy.apply_timeout {
        return Step::Fail(if node.same_drift && has(Milestone::Rebooted) {
            FailReason::DriftPersists
        } else {
            FailReason::ApplyTimeout
        });
    }
    Step::Wait { after: policy.poll }
}

/// How long a new attempt on a drift must wait after the recurrence cap failed the last
/// attempt on that same drift (`capped_at`: when that attempt detected it): until the
/// recurrence window has passed since then, when the cap may allow one again. Without this
/// wait, every debounce would open an attempt the cap fails at once, for as long as the drift
/// stays. None: no wait.
pub fn recurrence_hold(
    capped_at: Option<Duration>,
    now: Duration,
    window: Duration,
) -> Option<Duration> {
    let until = capped_at? + window;
    (now < until).then(|| until - now)
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "plan_sweep.rs"]
mod sweep;
