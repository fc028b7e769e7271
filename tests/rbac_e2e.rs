//! The controller under the RBAC `deploy/` grants it, on a simulated API server that enforces
//! it: a grant taken away stops the story where it is needed, loudly — a `StepFailed`
//! condition and a `Forbidden` Warning naming the refused call — and nothing unsafe is done;
//! given back, the story goes on.

use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend_sim::cluster::local::Gvr;
use serde_json::{Value, json};

mod common;

use common::eventually;
use common::lab::{Lab, fast, warning_on};

const CLUSTER_ROLES: Gvr = Gvr {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterroles",
};

/// The rules of deploy/'s ClusterRole `baremend` with `verb` taken from the rule on
/// `resource` (the rest as applied).
fn without_verb(rules: &Value, resource: &str, verb: &str) -> Value {
    let mut rules = rules.clone();
    let rule = rules
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .contains(&json!(resource))
        })
        .unwrap_or_else(|| panic!("deploy/base/rbac.yaml has no rule on {resource}"));
    let verbs = rule["verbs"].as_array_mut().unwrap();
    assert!(verbs.contains(&json!(verb)), "{rule}");
    verbs.retain(|v| v != verb);
    rules
}

fn set_rules(lab: &Lab, rules: &Value) {
    lab.api
        .merge(
            CLUSTER_ROLES,
            "",
            "baremend",
            &json!({"rules": rules}),
            false,
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_taken_away_stops_the_story_with_forbidden_in_a_condition_and_an_event() {
    let policy = json!({
        "strategies": ["BareMetalHostRebootApi"],
        "timeouts": {"powerOffSeconds": 120, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    let applied = lab.api.get(CLUSTER_ROLES, "", "baremend").unwrap()["rules"].clone();
    // The reboot API is a patch of the BareMetalHost's annotations.
    set_rules(&lab, &without_verb(&applied, "baremetalhosts", "patch"));
    lab.start_controller(lab.options());
    lab.cluster.hang("worker-0");
    let status = eventually(
        "worker-0-1 StepFailed Forbidden",
        Duration::from_secs(30),
        async || {
            let status = lab.remediation("worker-0-1").and_then(|r| r.status);
            let failed = status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == "StepFailed" && c.status == "True")
                    .cloned()
            });
            match failed {
                Some(c) if c.reason == "Forbidden" => Ok((status.unwrap(), c)),
                _ => Err(format!("{status:#?}")),
            }
        },
    )
    .await;
    let (status, condition) = status;
    assert!(
        condition.message.contains("baremetalhosts")
            && condition.message.contains("cannot patch")
            && condition
                .message
                .contains("system:serviceaccount:baremend:baremend"),
        "{condition:?}"
    );
    assert_eq!(status.phase, RemediationPhase::PoweringOff);
    warning_on(&lab, ("Machine", "worker-0"), "Forbidden", "cannot patch").await;
    // Nothing beyond the refused call happened: the host runs, the Node is there.
    assert!(lab.power_history("worker-0").is_empty());
    assert!(lab.node_exists("worker-0"));
    // Given back, the story goes on from where it stopped.
    set_rules(&lab, &applied);
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    let ended = done.status.unwrap();
    assert!(
        ended
            .conditions
            .iter()
            .any(|c| c.type_ == "StepFailed" && c.status == "False"),
        "{ended:#?}"
    );
}
