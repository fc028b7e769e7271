//! The controller under the RBAC `deploy/` grants it, on a simulated API server that enforces
//! it: a grant taken away stops the story where it is needed, loudly — a `StepFailed`
//! condition and a `Forbidden` Warning naming the refused call — and nothing unsafe is done;
//! given back, the story goes on.

use std::time::Duration;

use baremend::api::RemediationPhase;

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast, warning_on};
use common::rbac::{rules, set_rules, without_verb};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_taken_away_stops_the_story_with_forbidden_in_a_condition_and_an_event() {
    let policy = json!({
        "strategies": ["BareMetalHostRebootApi"],
        "timeouts": {"powerOffSeconds": 120, "nodeReadySeconds": 60, "readyGraceSeconds": 1},
    });
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    let applied = rules(&lab.api);
    // The reboot API is a patch of the BareMetalHost's annotations.
    set_rules(&lab.api, &without_verb(&applied, "baremetalhosts", "patch"));
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
    set_rules(&lab.api, &applied);
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
