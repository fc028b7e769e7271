//! `POST pods/{name}/eviction`: the eviction handler of the real API server, which reads the
//! stored status of the one PodDisruptionBudget covering the pod.
//!
//! Expected flow: find the pod and the budgets selecting it → decide on the budget's stored
//! status ([`after_eviction`], pure) → write the decremented status and delete the pod
//! gracefully.
//!
//! Guarantees (as the real handler): a budget whose status has not caught up with its spec
//! (`observedGeneration` < `generation`, or no status yet) refuses with 429 and
//! `Retry-After: 10`; a negative `disruptionsAllowed` or more than 2,000 unconfirmed
//! disruptions is 403; none allowed is 429 without `Retry-After`; several budgets are 500;
//! terminal and terminating pods are evicted without a budget check, and a pod that is not
//! Ready without a decrement while the budget is met (or always, with the `AlwaysAllow`
//! unhealthy-pod policy); dry-run writes nothing.
//!
//! Caveats: the budget's status is the simulated disruption controller's, which recomputes it
//! after every pod or budget write unless a test holds it back
//! ([`super::ApiServer::pause_disruption_controller`]).

use serde_json::{Value, json};

use super::errors::{ApiError, ApiResult};
use super::store::{DeleteOptions, Store};
use super::validation::admission::RequestUser;

/// More unconfirmed evictions than this in a budget's `disruptedPods` refuse new ones.
const MAX_DISRUPTED_PODS: usize = 2000;

fn refusal(cause: String, retry_after: Option<u64>) -> ApiError {
    let mut error = ApiError::too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        retry_after,
    );
    error.details = Some(json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]}));
    error
}

/// The pod being evicted, as the budget check sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Evicted<'a> {
    /// Its name (the key of `disruptedPods`).
    pub name: &'a str,
    /// Whether it is Ready (only Ready pods count as healthy).
    pub ready: bool,
}

/// The budget's status once the pod is evicted (None: evicted without touching the budget),
/// or why the stored status refuses it.
pub(crate) fn after_eviction(pdb: &Value, pod: Evicted<'_>, now: &str) -> ApiResult<Option<Value>> {
    let name = pdb
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    // A status that is not an object (a client may write anything through /status) reads
    // as none.
    let mut status = pdb
        .get("status")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let number = |field: &str| status.get(field).and_then(Value::as_i64).unwrap_or(0);
    // A pod that is not Ready does not count towards the budget: it goes without a decrement
    // when the policy always allows it, or (the default, IfHealthyBudget) while the budget
    // is met.
    if !pod.ready {
        let always = pdb.pointer("/spec/unhealthyPodEvictionPolicy") == Some(&json!("AlwaysAllow"));
        let desired = number("desiredHealthy");
        if always || (number("currentHealthy") >= desired && desired > 0) {
            return Ok(None);
        }
    }
    if number("observedGeneration") < generation {
        return Err(refusal(
            format!("The disruption budget {name} is still being processed by the server."),
            Some(10),
        ));
    }
    let allowed = number("disruptionsAllowed");
    if allowed < 0 {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudgets",
            name,
            "pdb disruptions allowed is negative",
        ));
    }
    let pending = status
        .get("disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if pending > MAX_DISRUPTED_PODS {
        return Err(ApiError::forbidden(
            "policy",
            "poddisruptionbudgets",
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        // No Retry-After, as the real handler (client-go would otherwise retry the request by
        // itself instead of reporting the refusal).
        let cause = format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            number("desiredHealthy"),
            number("currentHealthy")
        );
        return Err(refusal(cause, None));
    }
    status["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1 {
        insufficient_pods(&mut status, now);
    }
    if !status.get("disruptedPods").is_some_and(Value::is_object) {
        status["disruptedPods"] = json!({});
    }
    status["disruptedPods"][pod.name] = json!(now);
    Ok(Some(status))
}

/// Sets the `DisruptionAllowed` condition to False (InsufficientPods), moving its transition
/// time only when it changes, as the handler's condition helper does.
fn insufficient_pods(status: &mut Value, now: &str) {
    let observed = status
        .get("observedGeneration")
        .cloned()
        .unwrap_or(json!(0));
    let wanted = json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "", "observedGeneration": observed, "lastTransitionTime": now});
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    match conditions
        .iter_mut()
        .find(|c| c["type"] == "DisruptionAllowed")
    {
        Some(condition) if condition["status"] == "False" => {
            condition["reason"] = json!("InsufficientPods");
            condition["observedGeneration"] = wanted["observedGeneration"].clone();
        }
        Some(condition) => *condition = wanted,
        None => conditions.push(wanted),
    }
}

/// `POST pods/{name}/eviction`.
pub fn evict(
    store: &Store,
    caller: &RequestUser,
    namespace: &str,
    name: &str,
    body: &Value,
) -> ApiResult<()> {
    let dry_run = body
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|d| d == "All"));
    let grace = body
        .pointer("/deleteOptions/gracePeriodSeconds")
        .and_then(Value::as_i64);
    let mut inner = store.lock();
    let registry = inner.registry.clone();
    let pods = registry
        .get("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let key = super::store::ObjectKey {
        group: String::new(),
        plural: "pods".into(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let pod = inner
        .objects
        .get(&key)
        .cloned()
        .ok_or_else(|| ApiError::not_found("", "pods", name))?;
    // NodeRestriction: a kubelet evicts only the pods bound to it.
    crate::apiserver::validation::restrict_node_delete(caller, "", "pods", "eviction", &pod, name)?;

    let terminal = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    let terminating = pod.pointer("/metadata/deletionTimestamp").is_some();
    if !terminal && !terminating {
        let pdbs: Vec<(super::store::ObjectKey, Value)> = inner
            .objects
            .iter()
            .filter(|(k, _)| {
                k.group == "policy"
                    && k.plural == "poddisruptionbudgets"
                    && k.namespace == namespace
            })
            .filter(|(_, pdb)| {
                pdb.pointer("/spec/selector")
                    .is_some_and(|s| !s.is_null() && super::controllers::selector_matches(s, &pod))
            })
            .map(|(k, v)| (k.clone(), Value::clone(v)))
            .collect();
        if pdbs.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some((pdb_key, pdb)) = pdbs.into_iter().next() {
            let now = super::time::format_time(store.wall_time());
            let evicted = Evicted {
                name,
                ready: super::controllers::pod_ready(&pod),
            };
            if let Some(status) = after_eviction(&pdb, evicted, &now)?
                && !dry_run
            {
                let mut next = pdb;
                next["status"] = status;
                store.commit(
                    &mut inner,
                    pdb_key,
                    Some(next),
                    super::store::EventType::Modified,
                );
            }
        }
    }
    if dry_run {
        return Ok(());
    }
    let options = DeleteOptions {
        grace_period_seconds: grace,
        ..DeleteOptions::default()
    };
    store.delete_locked(&mut inner, &pods, "v1", namespace, name, &options)?;
    // The disruption controller notices the deletion: a pod that is gone leaves the PDB's
    // disrupted list.
    store.settle(&mut inner, &pods, namespace);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdb(generation: i64, status: Value) -> Value {
        json!({"metadata": {"name": "db", "generation": generation}, "spec": {"minAvailable": 1}, "status": status})
    }

    const READY: Evicted<'static> = Evicted {
        name: "p",
        ready: true,
    };

    #[test]
    fn the_stored_status_decides() {
        let lagging = after_eviction(
            &pdb(2, json!({"observedGeneration": 1, "disruptionsAllowed": 5})),
            READY,
            "T",
        )
        .unwrap_err();
        assert_eq!((lagging.code, lagging.retry_after), (429, Some(10)));
        let none = after_eviction(
            &pdb(1, json!({"observedGeneration": 1, "disruptionsAllowed": 0})),
            READY,
            "T",
        )
        .unwrap_err();
        assert_eq!((none.code, none.retry_after), (429, None));
        let negative = after_eviction(
            &pdb(
                1,
                json!({"observedGeneration": 1, "disruptionsAllowed": -1}),
            ),
            READY,
            "T",
        )
        .unwrap_err();
        assert_eq!(negative.code, 403);
        let status = after_eviction(
            &pdb(1, json!({"observedGeneration": 1, "disruptionsAllowed": 1})),
            READY,
            "T",
        )
        .unwrap()
        .unwrap();
        assert_eq!(status["disruptionsAllowed"], 0);
        assert_eq!(status["disruptedPods"], json!({"p": "T"}));
        assert_eq!(status["conditions"][0]["reason"], "InsufficientPods");
        // A status that is not an object reads as none (not processed yet).
        let odd = after_eviction(&pdb(1, json!("garbage")), READY, "T").unwrap_err();
        assert_eq!(odd.code, 429);
    }

    #[test]
    fn a_pod_that_is_not_ready_goes_without_a_decrement_while_the_budget_is_met() {
        let unready = Evicted {
            name: "p",
            ready: false,
        };
        let met = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1});
        assert_eq!(after_eviction(&pdb(1, met), unready, "T"), Ok(None));
        let short = json!({"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 1});
        assert!(after_eviction(&pdb(1, short.clone()), unready, "T").is_err());
        let mut always = pdb(1, short);
        always["spec"]["unhealthyPodEvictionPolicy"] = json!("AlwaysAllow");
        assert_eq!(after_eviction(&always, unready, "T"), Ok(None));
    }
}
