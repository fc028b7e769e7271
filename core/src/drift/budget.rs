//! May a drift remediation start on this node now? The MCO does not apply a pool's
//! `maxUnavailable` to drift recovery (every Machine Config Daemon acts on its own node), so
//! the coordinator does, counting the nodes that are *actually* disrupted — a drift-Degraded
//! node the MCO already counts as unavailable still serves its pods.

use std::fmt;

use crate::api::DriftEventReason;

/// What is known of one node of the pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    /// The Node's name.
    pub name: String,
    /// Ready.
    pub ready: bool,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// The MCD asked the MCC for a drain or uncordon that is not carried out yet
    /// (`desiredDrain ≠ lastAppliedDrain`).
    pub drain_pending: bool,
    /// `state=Working`: an update is being applied.
    pub working: bool,
    /// `post-config-action=Rebooting`.
    pub rebooting: bool,
    /// On a config other than its desired one (an update is rolling out to it).
    pub updating: bool,
    /// A drift remediation of ours is in flight on it.
    pub drift_remediation: bool,
    /// A machine remediation (ours, or the MachineHealthCheck's trigger) is in flight on it.
    pub machine_remediation: bool,
    /// A control-plane node.
    pub control_plane: bool,
    /// The node says it is a single-node cluster (`controlPlaneTopology=SingleReplica`).
    pub single_replica: bool,
}

impl Member {
    /// Whether the node is disrupted now: it does not serve its pods, or is about to stop.
    pub fn disrupted(&self) -> bool {
        !self.ready
            || self.unschedulable
            || self.drain_pending
            || self.working
            || self.rebooting
            || self.drift_remediation
            || self.machine_remediation
    }
}

/// A pool as the gate sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolView {
    /// The pool's name.
    pub name: String,
    /// Its `maxUnavailable`, already resolved (≥ 1).
    pub max_unavailable: usize,
    /// `spec.paused`.
    pub paused: bool,
    /// The pool's target is not yet what every node is on.
    pub rolling_out: bool,
    /// The admin approved drift remediation on this pool (or on the node, for the node's
    /// own check) with the approval annotation.
    pub approved: bool,
    /// Every node of the pool.
    pub members: Vec<Member>,
}

/// Why a start waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deferred {
    /// A rollout is under way in the pool; the MCO is busy with it.
    RollingOut,
    /// A paused pool needs the admin's approval.
    PausedPool,
    /// A single-node pool or cluster: remediation is a full outage and needs approval.
    SingleNode,
    /// Another control-plane node is disrupted: one at a time (etcd quorum).
    ControlPlaneBusy(String),
    /// The pool's budget is used up by these nodes.
    Budget {
        /// Disrupted nodes other than the candidate.
        disrupted: Vec<String>,
        /// The pool's `maxUnavailable`.
        max: usize,
    },
}

impl Deferred {
    /// The reason for conditions, Events and metrics.
    pub fn reason(&self) -> DriftEventReason {
        match self {
            Deferred::RollingOut => DriftEventReason::PoolRollingOut,
            Deferred::PausedPool => DriftEventReason::PausedPoolNeedsApproval,
            Deferred::SingleNode => DriftEventReason::SingleNodeNeedsApproval,
            Deferred::ControlPlaneBusy(_) => DriftEventReason::ControlPlaneBusy,
            Deferred::Budget { .. } => DriftEventReason::PoolBudget,
        }
    }
}

impl fmt::Display for Deferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deferred::RollingOut => f.write_str("the pool is rolling out a config"),
            Deferred::PausedPool => {
                f.write_str("the pool is paused; approve drift remediation to go on")
            }
            Deferred::SingleNode => {
                f.write_str("a single-node pool: remediation is an outage; approve it to go on")
            }
            Deferred::ControlPlaneBusy(other) => {
                write!(f, "control-plane node {other} is disrupted; one at a time")
            }
            Deferred::Budget { disrupted, max } => write!(
                f,
                "{} node(s) of the pool disrupted ({}) and maxUnavailable is {max}",
                disrupted.len(),
                disrupted.join(", ")
            ),
        }
    }
}

/// Whether a remediation of `candidate` may start in `pool`.
pub fn may_start(pool: &PoolView, candidate: &str) -> Result<(), Deferred> {
    let me = pool.members.iter().find(|m| m.name == candidate);
    if pool.rolling_out || pool.members.iter().any(|m| m.updating || m.working) {
        return Err(Deferred::RollingOut);
    }
    if pool.paused && !pool.approved {
        return Err(Deferred::PausedPool);
    }
    let single = pool.members.len() <= 1 || me.is_some_and(|m| m.single_replica);
    if single && !pool.approved {
        return Err(Deferred::SingleNode);
    }
    let others: Vec<&Member> = pool
        .members
        .iter()
        .filter(|m| m.name != candidate)
        .collect();
    if me.is_some_and(|m| m.control_plane)
        && let Some(busy) = others.iter().find(|m| m.control_plane && m.disrupted())
    {
        return Err(Deferred::ControlPlaneBusy(busy.name.clone()));
    }
    let disrupted: Vec<String> = others
        .iter()
        .filter(|m| m.disrupted())
        .map(|m| m.name.clone())
        .collect();
    if disrupted.len() + 1 > pool.max_unavailable {
        return Err(Deferred::Budget {
            disrupted,
            max: pool.max_unavailable,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str) -> Member {
        Member {
            name: name.into(),
            ready: true,
            ..Member::default()
        }
    }

    fn pool(max: usize, members: Vec<Member>) -> PoolView {
        PoolView {
            name: "worker".into(),
            max_unavailable: max,
            members,
            ..PoolView::default()
        }
    }

    #[test]
    fn every_kind_of_disruption_counts_and_drift_alone_does_not() {
        let healthy = member("a");
        assert!(!healthy.disrupted());
        let variants: [fn(&mut Member); 7] = [
            |m| m.ready = false,
            |m| m.unschedulable = true,
            |m| m.drain_pending = true,
            |m| m.working = true,
            |m| m.rebooting = true,
            |m| m.drift_remediation = true,
            |m| m.machine_remediation = true,
        ];
        for change in variants {
            let mut m = member("a");
            change(&mut m);
            assert!(m.disrupted(), "{m:?}");
        }
    }

    #[test]
    fn with_max_unavailable_one_a_second_node_waits_for_the_first() {
        let mut busy = member("w1");
        busy.drift_remediation = true;
        let view = pool(1, vec![member("w0"), busy, member("w2")]);
        assert_eq!(
            may_start(&view, "w0"),
            Err(Deferred::Budget {
                disrupted: vec!["w1".into()],
                max: 1
            })
        );
        let free = pool(1, vec![member("w0"), member("w1"), member("w2")]);
        assert_eq!(may_start(&free, "w0"), Ok(()));
    }

    #[test]
    fn a_cordoned_node_uses_budget_and_the_candidate_itself_does_not() {
        let mut cordoned = member("w1");
        cordoned.unschedulable = true;
        let mut other = member("w2");
        other.ready = false;
        let view = pool(2, vec![member("w0"), cordoned.clone(), other]);
        assert!(matches!(
            may_start(&view, "w0"),
            Err(Deferred::Budget { .. })
        ));
        let view = pool(2, vec![member("w0"), cordoned.clone(), member("w2")]);
        assert_eq!(may_start(&view, "w0"), Ok(()));
        // A cordoned candidate is already disrupted: remediating it adds nothing.
        let view = pool(1, vec![cordoned, member("w2")]);
        assert_eq!(may_start(&view, "w1"), Ok(()));
    }

    #[test]
    fn rollouts_defer_and_pauses_and_single_nodes_need_approval() {
        let mut view = pool(3, vec![member("w0"), member("w1")]);
        view.rolling_out = true;
        assert_eq!(may_start(&view, "w0"), Err(Deferred::RollingOut));
        let mut updating = member("w1");
        updating.updating = true;
        let view = pool(3, vec![member("w0"), updating]);
        assert_eq!(may_start(&view, "w0"), Err(Deferred::RollingOut));
        let mut view = pool(3, vec![member("w0"), member("w1")]);
        view.paused = true;
        assert_eq!(may_start(&view, "w0"), Err(Deferred::PausedPool));
        view.approved = true;
        assert_eq!(may_start(&view, "w0"), Ok(()));
        let mut view = pool(1, vec![member("sno")]);
        assert_eq!(may_start(&view, "sno"), Err(Deferred::SingleNode));
        view.approved = true;
        assert_eq!(may_start(&view, "sno"), Ok(()));
        let mut sno = member("m0");
        sno.single_replica = true;
        let view = pool(1, vec![sno, member("m1")]);
        assert_eq!(may_start(&view, "m0"), Err(Deferred::SingleNode));
    }

    #[test]
    fn control_plane_nodes_go_one_at_a_time_whatever_the_budget() {
        let master = |name: &str| Member {
            control_plane: true,
            ..member(name)
        };
        let mut rebooting = master("m1");
        rebooting.rebooting = true;
        let view = pool(3, vec![master("m0"), rebooting, master("m2")]);
        assert_eq!(
            may_start(&view, "m0"),
            Err(Deferred::ControlPlaneBusy("m1".into()))
        );
        let view = pool(3, vec![master("m0"), master("m1"), master("m2")]);
        assert_eq!(may_start(&view, "m0"), Ok(()));
    }

    #[test]
    fn deferrals_read_well() {
        let text = Deferred::Budget {
            disrupted: vec!["w1".into()],
            max: 1,
        }
        .to_string();
        assert_eq!(
            text,
            "1 node(s) of the pool disrupted (w1) and maxUnavailable is 1"
        );
    }
}
