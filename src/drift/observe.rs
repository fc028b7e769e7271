//! From the cached objects to what the planner and the gates read: the node's observation,
//! its pool and the pool's members, the persisted state of a DriftRemediation.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::budget::{Member, PoolView};
use super::classify::{ConfigState, classify};
use super::plan::{Milestone, NodeObservation, Persisted};
use crate::api::DriftStep;
use crate::api::annotations::{DRIFT_REMEDIATION_ANNOTATION, DRIFT_REMEDIATION_DISABLED};
use crate::api::mco::{self, MachineConfigNode, MachineConfigPool};
use crate::api::{APPROVE_ANNOTATION, DriftRemediation};
use crate::runtime::clock::parse_rfc3339;

fn annotations(node: &Node) -> &BTreeMap<String, String> {
    node.annotations()
}

/// Whether the Node's Ready condition is True.
pub fn ready(node: &Node) -> bool {
    crate::api::slim::ready_condition(node).is_some_and(|c| c.status == "True")
}

fn unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The pool a node belongs to: a custom pool that selects it wins over `worker`, as in the
/// MCO (a node in two custom pools is ambiguous; the first by name is taken).
pub fn pool_of<'a>(
    node: &Node,
    pools: &'a [std::sync::Arc<MachineConfigPool>],
) -> Option<&'a MachineConfigPool> {
    let mut matching: Vec<&MachineConfigPool> = pools
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| p.selects(node.labels()))
        .collect();
    matching.sort_by_key(|p| (p.name_any() == "worker", p.name_any()));
    matching.first().copied()
}

/// Whether a remediation's drift still shows on the node.
pub fn same_drift(state: &ConfigState, remediation: &DriftRemediation) -> bool {
    matches!(state, ConfigState::Drifted(d)
        if d.kind == remediation.spec.kind && d.target == remediation.spec.target)
}

/// The node as the planner sees it.
pub fn node_observation(
    node: &Node,
    remediation: &DriftRemediation,
    pool: Option<&MachineConfigPool>,
    mcn: Option<&MachineConfigNode>,
) -> NodeObservation {
    let ann = annotations(node);
    let get = |key: &str| ann.get(key).cloned();
    let config = classify(ann);
    let on_pool_target = match (
        pool.and_then(MachineConfigPool::target),
        get(mco::CURRENT_CONFIG),
    ) {
        (Some(target), Some(current)) => target == current,
        // No pool target known: the node's own desired config is the reference.
        (None, current) => current.is_some() && current == get(mco::DESIRED_CONFIG),
        _ => false,
    };
    let mcn_degraded = mcn
        .and_then(|m| m.status.as_ref())
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "NodeDegraded"))
        .map(|c| c.status == "True");
    NodeObservation {
        same_drift: same_drift(&config, remediation),
        config,
        ready: ready(node),
        unschedulable: unschedulable(node),
        desired_drain: get(mco::DESIRED_DRAIN),
        last_applied_drain: get(mco::LAST_APPLIED_DRAIN),
        rebooting: get(mco::POST_CONFIG_ACTION).as_deref() == Some("Rebooting"),
        boot_id: boot_id(node),
        on_pool_target,
        mcn_degraded,
        pods_to_evict: 0,
    }
}

/// The boot ID the kubelet reports.
pub fn boot_id(node: &Node) -> Option<String> {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .filter(|id| !id.is_empty())
}

/// What the gates see of a pool. `drift_busy` names nodes with a drift remediation in
/// flight; `machine_busy` nodes with a machine remediation in flight.
pub fn pool_view(
    pool: &MachineConfigPool,
    nodes: &[std::sync::Arc<Node>],
    candidate: &Node,
    drift_busy: &dyn Fn(&str) -> bool,
    machine_busy: &dyn Fn(&str) -> bool,
) -> PoolView {
    let approved_on =
        |map: &BTreeMap<String, String>| map.get(APPROVE_ANNOTATION).is_some_and(|v| v == "true");
    let members: Vec<Member> = nodes
        .iter()
        .filter(|n| pool.selects(n.labels()))
        .map(|n| {
            let ann = annotations(n);
            let get = |key: &str| ann.get(key).map(String::as_str);
            let name = n.name_any();
            Member {
                ready: ready(n),
                unschedulable: unschedulable(n),
                drain_pending: get(mco::DESIRED_DRAIN).is_some()
                    && get(mco::DESIRED_DRAIN) != get(mco::LAST_APPLIED_DRAIN),
                working: get(mco::STATE) == Some("Working"),
                rebooting: get(mco::POST_CONFIG_ACTION) == Some("Rebooting"),
                updating: get(mco::CURRENT_CONFIG) != get(mco::DESIRED_CONFIG),
                drift_remediation: drift_busy(&name),
                machine_remediation: machine_busy(&name),
                control_plane: n.labels().contains_key("node-role.kubernetes.io/master")
                    || n.labels()
                        .contains_key("node-role.kubernetes.io/control-plane"),
                single_replica: get(mco::CONTROL_PLANE_TOPOLOGY) == Some("SingleReplica"),
                name,
            }
        })
        .collect();
    PoolView {
        name: pool.name_any(),
        max_unavailable: pool.max_unavailable(members.len()),
        paused: pool.paused(),
        rolling_out: pool.rolling_out(),
        approved: approved_on(pool.annotations()) || approved_on(candidate.annotations()),
        members,
    }
}

/// Where drift remediation is disabled for `node`, in words, from the annotation
/// `baremend.io/drift-remediation` on the Node (first) or its pool. A value other than
/// `disabled` holds too, and says so: it was meant to change something, and acting on a
/// node its admin tried to exempt is the worse mistake. None: it is not annotated.
pub fn drift_disabled(node: &Node, pool: Option<&MachineConfigPool>) -> Option<String> {
    let on_node = node
        .annotations()
        .get(DRIFT_REMEDIATION_ANNOTATION)
        .map(|v| (format!("Node {}", node.name_any()), v));
    let on_pool = pool.and_then(|p| {
        p.annotations()
            .get(DRIFT_REMEDIATION_ANNOTATION)
            .map(|v| (format!("MachineConfigPool {}", p.name_any()), v))
    });
    let (at, value) = on_node.or(on_pool)?;
    Some(if value == DRIFT_REMEDIATION_DISABLED {
        format!(
            "drift remediation is disabled by the annotation {DRIFT_REMEDIATION_ANNOTATION}: {DRIFT_REMEDIATION_DISABLED} on {at}; remove it to act"
        )
    } else {
        format!(
            "the annotation {DRIFT_REMEDIATION_ANNOTATION} on {at} has the value {value:?}, which is not {DRIFT_REMEDIATION_DISABLED:?} (the only one known): held as disabled until it is corrected or removed"
        )
    })
}

/// The planner's view of a DriftRemediation's status.
pub fn persisted(remediation: &DriftRemediation) -> Persisted {
    let created = remediation
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| u64::try_from(t.0.as_millisecond()).ok())
        .map(Duration::from_millis)
        .unwrap_or_default();
    let status = remediation.status.clone().unwrap_or_default();
    let time = |text: &Option<String>| text.as_deref().map(parse_rfc3339);
    let milestones = status
        .steps
        .iter()
        .filter_map(|s| match s.step.known()? {
            DriftStep::PickedUp => Some(Milestone::PickedUp),
            DriftStep::Drained => Some(Milestone::Drained),
            DriftStep::Rebooting => Some(Milestone::Rebooting),
            DriftStep::Rebooted => Some(Milestone::Rebooted),
            _ => None,
        })
        .collect();
    Persisted {
        phase: status.phase,
        phase_since: time(&status.phase_since).unwrap_or(created),
        detected_at: time(&status.detected_at).unwrap_or(created),
        drain_before: status.drain_before,
        boot_before: status.boot_before,
        not_ready_since: time(&status.not_ready_since),
        draining_since: time(&status.draining_since),
        milestones,
        abort: remediation.spec.abort,
        cordoned_by_us: status.cordoned_by_us,
    }
}

/// The attempt number in a DriftRemediation name `<node>-<n>`.
pub fn attempt_number(remediation: &DriftRemediation) -> u64 {
    remediation
        .name_any()
        .strip_prefix(remediation.spec.node_name.as_str())
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(annotations: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "worker-0", "annotations": annotations},
        }))
        .unwrap()
    }

    fn pool(annotations: serde_json::Value) -> MachineConfigPool {
        serde_json::from_value(json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfigPool",
            "metadata": {"name": "worker", "annotations": annotations},
            "spec": {},
        }))
        .unwrap()
    }

    #[test]
    fn the_annotation_disables_on_the_node_or_its_pool_and_says_where() {
        let plain = node(json!({}));
        assert_eq!(drift_disabled(&plain, Some(&pool(json!({})))), None);
        assert_eq!(drift_disabled(&plain, None), None);
        let key = DRIFT_REMEDIATION_ANNOTATION;
        let on_node = drift_disabled(&node(json!({key: "disabled"})), None).unwrap();
        assert!(
            on_node.ends_with("disabled on Node worker-0; remove it to act"),
            "{on_node}"
        );
        let on_pool = drift_disabled(&plain, Some(&pool(json!({key: "disabled"})))).unwrap();
        assert!(on_pool.contains("on MachineConfigPool worker"), "{on_pool}");
        // The Node's own annotation is named first.
        let both = drift_disabled(
            &node(json!({key: "disabled"})),
            Some(&pool(json!({key: "disabled"}))),
        )
        .unwrap();
        assert!(both.contains("on Node worker-0"), "{both}");
        // A value that is not `disabled` holds too, and says what is wrong with it.
        let typo = drift_disabled(&node(json!({key: "Disabled"})), None).unwrap();
        assert!(typo.contains(r#"has the value "Disabled""#), "{typo}");
        assert!(typo.contains("held as disabled"), "{typo}");
    }
}
