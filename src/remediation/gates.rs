//! The safety gates a remediation must pass before it starts. Pure: counts in, verdict out.
//! They only hold new starts; a remediation already under way always finishes its cycle, so
//! that no host is left off by a gate closing behind it.

use std::collections::HashMap;

use crate::api::{NodeReleaseMode, RemediationPhase, RemediationPolicySpec};

/// Starts made by this process, by (namespace, Remediation name), with their Machine.
pub type Launched = HashMap<(String, String), String>;

/// A Remediation as the start gates count it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its Machine.
    pub machine: String,
    /// Its phase.
    pub phase: RemediationPhase,
}

/// The Machines whose remediation is under way, besides the Remediation `this`: the listed
/// ones past `Pending` and not ended, and the starts this process made that the list does not
/// show past `Pending` yet (a lagging cache may not show them at all).
///
/// Forgets the starts the list shows past `Pending` (they count through the list now) and, on
/// a `fresh` list read from the API server, the starts it lacks: those were deleted. A cached
/// list that lacks one may only lag, so the start is kept.
pub fn running_machines(
    listed: &[Listed],
    launched: &mut Launched,
    this: &str,
    fresh: bool,
) -> Vec<String> {
    launched.retain(|(namespace, name), _| {
        let seen = listed
            .iter()
            .find(|r| r.namespace == *namespace && r.name == *name);
        match seen {
            Some(r) => r.phase == RemediationPhase::Pending,
            None => !fresh,
        }
    });
    let mut running: Vec<String> = listed
        .iter()
        .filter(|r| r.phase != RemediationPhase::Pending && !r.phase.is_terminal())
        .filter(|r| r.name != this)
        .map(|r| r.machine.clone())
        .collect();
    running.extend(
        launched
            .iter()
            .filter(|((_, name), _)| name != this)
            .map(|(_, machine)| machine.clone()),
    );
    running
}

/// The fleet, as counted by the reconciler when a remediation wants to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fleet {
    /// Machines in scope.
    pub machines: usize,
    /// Unhealthy machines: carrying the external-remediation trigger or with a Node that is
    /// not Ready (this one included). A storm shows in Node readiness before health checks
    /// time out, so counting both keeps the first trigger of a storm from slipping through.
    pub unhealthy: usize,
    /// Remediations started and not ended (this one excluded).
    pub running: usize,
    /// Of those, on control-plane machines.
    pub running_control_plane: usize,
    /// Control-plane machines.
    pub control_plane: usize,
    /// Control-plane Nodes Ready now.
    pub control_plane_ready: usize,
    /// The API server knows the out-of-service taint (Kubernetes ≥ 1.28).
    pub out_of_service_taint: bool,
}

/// The Machines' health, as the gates need it (without the remediations under way).
#[derive(Debug, Clone, Default)]
pub struct FleetHealth {
    /// Machines in scope.
    pub machines: usize,
    /// Machines carrying the trigger or with a Node that is not Ready.
    pub unhealthy: usize,
    /// The control-plane Machines, by name.
    pub control_plane: std::collections::HashSet<String>,
    /// Of those, the ones whose Node is Ready now.
    pub control_plane_ready: usize,
}

/// The machine that wants to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// A control-plane machine.
    pub control_plane: bool,
    /// Its Node is Ready now (fencing it removes one Ready member).
    pub node_ready: bool,
}

/// Which gate holds, and why; the reason becomes the `Held` condition and an Event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Held {
    /// The policy is paused (`spec.paused`).
    #[error(
        "the RemediationPolicy is paused (spec.paused): nothing new starts; remediations under way finish their cycle"
    )]
    Paused,
    /// `maxConcurrent` remediations are running.
    #[error("{running} remediation(s) running, the policy allows {max} at once")]
    Concurrency {
        /// Running now.
        running: usize,
        /// The policy's limit.
        max: u32,
    },
    /// Too many machines are unhealthy at once.
    #[error(
        "storm: {unhealthy} of {machines} machines are unhealthy, more than the policy's {max_percent}%"
    )]
    Storm {
        /// Unhealthy machines.
        unhealthy: usize,
        /// All machines.
        machines: usize,
        /// The policy's share.
        max_percent: u32,
    },
    /// The policy excludes control-plane machines.
    #[error("control-plane remediation is disabled by the policy")]
    ControlPlaneDisabled,
    /// Another control-plane machine is being remediated.
    #[error("another control-plane machine is being remediated")]
    ControlPlaneBusy,
    /// Fencing would leave fewer Ready control-plane Nodes than an etcd quorum.
    #[error(
        "etcd quorum: {ready_after} Ready control-plane node(s) would remain, a quorum of {members} is {quorum}"
    )]
    Quorum {
        /// Ready control-plane Nodes after fencing.
        ready_after: usize,
        /// Control-plane members.
        members: usize,
        /// Their quorum.
        quorum: usize,
    },
    /// The policy releases Nodes with the out-of-service taint, which this API server does
    /// not know: the Node would keep its pods after the host is off.
    #[error(
        "the policy's nodeRelease OutOfService needs Kubernetes 1.28 or later; this API server is older"
    )]
    OutOfServiceUnsupported,
    /// The Node is in a reboot the drift coordinator planned (the MCO re-applies its config).
    #[error(
        "the Node is in a planned reboot (DriftRemediation {by}); it is handed over if it does not come back"
    )]
    PlannedReboot {
        /// The DriftRemediation.
        by: String,
    },
    /// The host to fence runs the leading controller itself, and no other replica is Ready to
    /// take over once it is off: the remediation would stop halfway.
    #[error(
        "this controller runs on Node {node}: fencing it needs another baremend replica Ready on another Node to finish the remediation"
    )]
    SelfFence {
        /// The Node.
        node: String,
    },
}

impl Held {
    /// The gate, as a bounded name: the `Held` condition's reason and a metric label.
    pub fn gate(&self) -> &'static str {
        match self {
            Held::Paused => "Paused",
            Held::Concurrency { .. } => "Concurrency",
            Held::Storm { .. } => "Storm",
            Held::ControlPlaneDisabled => "ControlPlaneDisabled",
            Held::ControlPlaneBusy => "ControlPlaneBusy",
            Held::Quorum { .. } => "Quorum",
            Held::OutOfServiceUnsupported => "OutOfServiceUnsupported",
            Held::PlannedReboot { .. } => "PlannedReboot",
            Held::SelfFence { .. } => "SelfFence",
        }
    }
}

/// Whether a remediation may start now.
pub fn may_start(
    candidate: Candidate,
    fleet: Fleet,
    policy: &RemediationPolicySpec,
) -> Result<(), Held> {
    // First: a paused policy holds whatever else would.
    if policy.paused {
        return Err(Held::Paused);
    }
    if policy.node_release == NodeReleaseMode::OutOfService && !fleet.out_of_service_taint {
        return Err(Held::OutOfServiceUnsupported);
    }
    if fleet.running >= policy.max_concurrent as usize {
        return Err(Held::Concurrency {
            running: fleet.running,
            max: policy.max_concurrent,
        });
    }
    // Integer arithmetic: unhealthy/machines > percent/100, without rounding surprises.
    let max_percent = policy.storm.max_unhealthy_percent;
    if fleet.machines > 0 && fleet.unhealthy * 100 > max_percent as usize * fleet.machines {
        return Err(Held::Storm {
            unhealthy: fleet.unhealthy,
            machines: fleet.machines,
            max_percent,
        });
    }
    if candidate.control_plane {
        if !policy.control_plane.enabled {
            return Err(Held::ControlPlaneDisabled);
        }
        if fleet.running_control_plane > 0 {
            return Err(Held::ControlPlaneBusy);
        }
        if policy.control_plane.quorum_guard {
            let quorum = fleet.control_plane / 2 + 1;
            let ready_after = fleet
                .control_plane_ready
                .saturating_sub(usize::from(candidate.node_ready));
            if ready_after < quorum {
                return Err(Held::Quorum {
                    ready_after,
                    members: fleet.control_plane,
                    quorum,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str, machine: &str, phase: RemediationPhase) -> Listed {
        Listed {
            namespace: "m".into(),
            name: name.into(),
            machine: machine.into(),
            phase,
        }
    }

    fn launched(entries: &[(&str, &str)]) -> Launched {
        entries
            .iter()
            .map(|(name, machine)| (("m".to_string(), name.to_string()), machine.to_string()))
            .collect()
    }

    #[test]
    fn running_counts_listed_remediations_under_way_but_not_pending_ended_or_this_one() {
        let list = [
            listed("a-1", "a", RemediationPhase::PoweringOff),
            listed("b-1", "b", RemediationPhase::Pending),
            listed("c-1", "c", RemediationPhase::Succeeded),
            listed("d-1", "d", RemediationPhase::Fenced),
        ];
        let mut none = Launched::new();
        assert_eq!(running_machines(&list, &mut none, "d-1", true), ["a"]);
        assert_eq!(running_machines(&list, &mut none, "x-1", false), ["a", "d"]);
    }

    #[test]
    fn a_start_a_lagging_cache_does_not_show_still_counts_until_a_fresh_list_settles_it() {
        // The chaos case (seed 1708): this process started e-1; the cache, behind a broken
        // watch, shows nothing of it.
        let cache = [listed("a-1", "a", RemediationPhase::Succeeded)];
        let mut starts = launched(&[("e-1", "e")]);
        assert_eq!(running_machines(&cache, &mut starts, "f-1", false), ["e"]);
        assert_eq!(starts.len(), 1, "a cache that lacks it may only lag");
        // A fresh list that shows it Pending still counts it through the reminder...
        let fresh = [listed("e-1", "e", RemediationPhase::Pending)];
        assert_eq!(running_machines(&fresh, &mut starts, "f-1", true), ["e"]);
        // ...one that shows it under way counts it through the list and forgets the reminder...
        let fresh = [listed("e-1", "e", RemediationPhase::PoweringOff)];
        assert_eq!(running_machines(&fresh, &mut starts, "f-1", true), ["e"]);
        assert!(starts.is_empty());
        // ...and a fresh list that lacks it means it was deleted.
        let mut starts = launched(&[("e-1", "e")]);
        assert!(running_machines(&[], &mut starts, "f-1", true).is_empty());
        assert!(starts.is_empty());
    }

    #[test]
    fn a_remediation_never_counts_against_itself() {
        let mut starts = launched(&[("e-1", "e")]);
        assert!(running_machines(&[], &mut starts, "e-1", false).is_empty());
        let list = [listed("e-1", "e", RemediationPhase::PoweringOff)];
        assert!(running_machines(&list, &mut Launched::new(), "e-1", true).is_empty());
    }

    const WORKER: Candidate = Candidate {
        control_plane: false,
        node_ready: false,
    };
    const HUNG_MASTER: Candidate = Candidate {
        control_plane: true,
        node_ready: false,
    };

    fn fleet() -> Fleet {
        Fleet {
            machines: 6,
            unhealthy: 1,
            running: 0,
            running_control_plane: 0,
            control_plane: 3,
            control_plane_ready: 3,
            out_of_service_taint: true,
        }
    }

    #[test]
    fn one_hung_worker_in_a_healthy_fleet_may_start() {
        assert_eq!(
            may_start(WORKER, fleet(), &RemediationPolicySpec::default()),
            Ok(())
        );
    }

    #[test]
    fn the_concurrency_limit_holds_further_starts() {
        let policy = RemediationPolicySpec::default();
        let busy = Fleet {
            running: 1,
            unhealthy: 2,
            ..fleet()
        };
        assert!(matches!(
            may_start(WORKER, busy, &policy),
            Err(Held::Concurrency { .. })
        ));
        let wider = RemediationPolicySpec {
            max_concurrent: 2,
            ..policy
        };
        assert_eq!(may_start(WORKER, busy, &wider), Ok(()));
    }

    #[test]
    fn the_storm_gate_holds_above_the_share_and_not_at_it() {
        let mut policy = RemediationPolicySpec {
            max_concurrent: 10,
            ..Default::default()
        };
        policy.storm.max_unhealthy_percent = 40;
        // 2 of 5 is exactly 40 %: allowed. 3 of 5 is 60 %: held.
        let at = Fleet {
            machines: 5,
            unhealthy: 2,
            ..fleet()
        };
        assert_eq!(may_start(WORKER, at, &policy), Ok(()));
        let above = Fleet {
            machines: 5,
            unhealthy: 3,
            ..fleet()
        };
        let held = may_start(WORKER, above, &policy).unwrap_err();
        assert_eq!(
            held.to_string(),
            "storm: 3 of 5 machines are unhealthy, more than the policy's 40%"
        );
    }

    #[test]
    fn control_plane_machines_go_one_at_a_time_and_never_below_quorum() {
        let policy = RemediationPolicySpec {
            max_concurrent: 5,
            ..Default::default()
        };
        // One hung master of three: two Ready remain, the quorum of three.
        let one_hung = Fleet {
            control_plane_ready: 2,
            ..fleet()
        };
        assert_eq!(may_start(HUNG_MASTER, one_hung, &policy), Ok(()));
        // A second master while one is being remediated: held.
        let busy = Fleet {
            running: 1,
            running_control_plane: 1,
            ..one_hung
        };
        assert_eq!(
            may_start(HUNG_MASTER, busy, &policy),
            Err(Held::ControlPlaneBusy)
        );
        // Two of three hung: one Ready remains, below quorum.
        let two_hung = Fleet {
            control_plane_ready: 1,
            unhealthy: 2,
            ..fleet()
        };
        assert!(matches!(
            may_start(HUNG_MASTER, two_hung, &policy),
            Err(Held::Quorum {
                ready_after: 1,
                members: 3,
                quorum: 2
            })
        ));
        // A Ready master whose fencing would break quorum: held.
        let ready_master = Candidate {
            control_plane: true,
            node_ready: true,
        };
        assert!(matches!(
            may_start(ready_master, one_hung, &policy),
            Err(Held::Quorum { ready_after: 1, .. })
        ));
        // Workers are not subject to the quorum guard.
        assert_eq!(may_start(WORKER, two_hung, &policy), Ok(()));
    }

    #[test]
    fn the_policy_can_disable_the_guard_or_control_plane_remediation() {
        let mut policy = RemediationPolicySpec {
            max_concurrent: 5,
            ..Default::default()
        };
        let two_hung = Fleet {
            control_plane_ready: 1,
            unhealthy: 2,
            ..fleet()
        };
        policy.control_plane.quorum_guard = false;
        assert_eq!(may_start(HUNG_MASTER, two_hung, &policy), Ok(()));
        policy.control_plane.enabled = false;
        assert_eq!(
            may_start(HUNG_MASTER, fleet(), &policy),
            Err(Held::ControlPlaneDisabled)
        );
    }

    #[test]
    fn a_paused_policy_holds_every_start_first() {
        let paused = RemediationPolicySpec {
            paused: true,
            ..Default::default()
        };
        assert_eq!(may_start(WORKER, fleet(), &paused), Err(Held::Paused));
        let busy = Fleet {
            running: 1,
            ..fleet()
        };
        assert_eq!(may_start(WORKER, busy, &paused), Err(Held::Paused));
        assert_eq!(Held::Paused.gate(), "Paused");
        assert!(crate::metrics::GATES.contains(&Held::Paused.gate()));
    }

    #[test]
    fn out_of_service_mode_is_held_on_an_api_server_older_than_1_28() {
        let policy = RemediationPolicySpec {
            node_release: NodeReleaseMode::OutOfService,
            ..Default::default()
        };
        assert_eq!(may_start(WORKER, fleet(), &policy), Ok(()));
        let old = Fleet {
            out_of_service_taint: false,
            ..fleet()
        };
        let held = may_start(WORKER, old, &policy).unwrap_err();
        assert_eq!(held, Held::OutOfServiceUnsupported);
        assert_eq!(held.gate(), "OutOfServiceUnsupported");
        // Deleting Nodes works on any version.
        assert_eq!(
            may_start(WORKER, old, &RemediationPolicySpec::default()),
            Ok(())
        );
    }
}
