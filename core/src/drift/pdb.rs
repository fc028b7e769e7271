//! The pre-flight check before anything that drains a node: every PodDisruptionBudget that
//! covers a pod the drain would evict must allow a disruption now. A drain that would be
//! refused is not started — the MCO's drain controller would retry it forever, with the
//! node cordoned — and nothing here ever bypasses a budget or deletes a pod.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube_core::ResourceExt;

use crate::api::mco::selector_matches;

/// A budget that blocks the drain, and the pods of the node it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocking {
    /// `namespace/name` of the PodDisruptionBudget.
    pub budget: String,
    /// `namespace/name` of the covered pods on the node.
    pub pods: Vec<String>,
}

impl std::fmt::Display for Blocking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PodDisruptionBudget {} allows no disruption (covers {})",
            self.budget,
            self.pods.join(", ")
        )
    }
}

/// Whether a drain evicts this pod: not a DaemonSet's (the drain ignores them), not a mirror
/// of a static pod, not finished, not already on its way out.
pub fn evicted_by_drain(pod: &Pod) -> bool {
    let daemon = pod
        .owner_references()
        .iter()
        .any(|o| o.kind == "DaemonSet" && o.controller == Some(true));
    let mirror = pod
        .annotations()
        .contains_key("kubernetes.io/config.mirror");
    let finished = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p == "Succeeded" || p == "Failed");
    let leaving = pod.metadata.deletion_timestamp.is_some();
    !(daemon || mirror || finished || leaving)
}

/// The budgets that would refuse the eviction of one of `pods` (the pods on the node).
/// A budget with no status yet is taken as allowing nothing: unknown is not allowed.
pub fn blocking_budgets(pods: &[Pod], budgets: &[PodDisruptionBudget]) -> Vec<Blocking> {
    let mut blocking = Vec::new();
    for budget in budgets {
        let namespace = budget.namespace().unwrap_or_default();
        let Some(selector) = budget.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        // An empty selector in policy/v1 selects every pod of the namespace.
        let covered: Vec<String> = pods
            .iter()
            .filter(|p| evicted_by_drain(p))
            .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|p| selector_matches(selector, p.labels()))
            .map(|p| format!("{namespace}/{}", p.name_any()))
            .collect();
        if covered.is_empty() {
            continue;
        }
        let allowed = budget
            .status
            .as_ref()
            .map(|s| s.disruptions_allowed)
            .unwrap_or(0);
        if allowed < 1 {
            blocking.push(Blocking {
                budget: format!("{namespace}/{}", budget.name_any()),
                pods: covered,
            });
        }
    }
    blocking
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(namespace: &str, name: &str, labels: Value, extra: Value) -> Pod {
        let mut object = json!({"metadata": {"name": name, "namespace": namespace, "labels": labels},
            "status": {"phase": "Running"}});
        if let (Some(base), Some(add)) = (object.as_object_mut(), extra.as_object()) {
            for (k, v) in add {
                base.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(object).unwrap()
    }

    fn budget(
        namespace: &str,
        name: &str,
        selector: Value,
        allowed: Option<i32>,
    ) -> PodDisruptionBudget {
        let mut object = json!({"metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": selector, "minAvailable": 1}});
        if let Some(allowed) = allowed {
            object["status"] = json!({"disruptionsAllowed": allowed, "currentHealthy": 1,
                "desiredHealthy": 1, "expectedPods": 1});
        }
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn the_router_budget_on_a_single_worker_blocks_and_is_named() {
        let router = pod(
            "openshift-ingress",
            "router-default-1",
            json!({"ingresscontroller.operator.openshift.io/deployment-ingresscontroller": "default"}),
            json!({}),
        );
        let pdb = budget(
            "openshift-ingress",
            "router-default",
            json!({"matchLabels": {"ingresscontroller.operator.openshift.io/deployment-ingresscontroller": "default"}}),
            Some(0),
        );
        let blocking = blocking_budgets(&[router], &[pdb]);
        assert_eq!(
            blocking,
            vec![Blocking {
                budget: "openshift-ingress/router-default".into(),
                pods: vec!["openshift-ingress/router-default-1".into()],
            }]
        );
        assert_eq!(
            blocking[0].to_string(),
            "PodDisruptionBudget openshift-ingress/router-default allows no disruption (covers openshift-ingress/router-default-1)"
        );
    }

    #[test]
    fn budgets_that_allow_or_cover_nothing_here_do_not_block() {
        let app = pod("shop", "web-1", json!({"app": "web"}), json!({}));
        let allows = budget(
            "shop",
            "web",
            json!({"matchLabels": {"app": "web"}}),
            Some(1),
        );
        let elsewhere = budget(
            "other",
            "web",
            json!({"matchLabels": {"app": "web"}}),
            Some(0),
        );
        let other_app = budget("shop", "db", json!({"matchLabels": {"app": "db"}}), Some(0));
        assert!(
            blocking_budgets(std::slice::from_ref(&app), &[allows, elsewhere, other_app])
                .is_empty()
        );
        // No status yet: unknown is not "allowed".
        let fresh = budget("shop", "web", json!({"matchLabels": {"app": "web"}}), None);
        assert_eq!(
            blocking_budgets(std::slice::from_ref(&app), &[fresh]).len(),
            1
        );
        // An empty selector covers the namespace.
        let all = budget("shop", "all", json!({}), Some(0));
        assert_eq!(blocking_budgets(&[app], &[all]).len(), 1);
    }

    #[test]
    fn daemonset_mirror_and_finished_pods_are_not_evicted_so_not_counted() {
        let pdb = budget("ns", "all", json!({}), Some(0));
        let daemon = pod(
            "ns",
            "agent",
            json!({}),
            json!({"metadata": {"name": "agent", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": true}]}}),
        );
        let mirror = pod(
            "ns",
            "etcd",
            json!({}),
            json!({"metadata": {"name": "etcd", "namespace": "ns", "annotations": {"kubernetes.io/config.mirror": "x"}}}),
        );
        let done = pod(
            "ns",
            "job",
            json!({}),
            json!({"status": {"phase": "Succeeded"}}),
        );
        assert!(blocking_budgets(&[daemon, mirror, done], &[pdb]).is_empty());
    }
}
