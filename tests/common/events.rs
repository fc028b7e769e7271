//! Reading Events as the Recorder writes them: kube's `Recorder` folds a repeat of an Event
//! (same object, reason, action, note) into a series of the first (`series.count`), so the
//! number of Event objects says nothing about how many times something was told. Events are
//! stored core/v1-shaped (`involvedObject`, `message`, `count`).

use std::time::Duration;

use baremend_sim::cluster::local::{EVENTS, Local};
use serde_json::Value;

use super::eventually;

/// How many times an Event says it happened: its series' count, else its `count`, else once.
pub fn occurrences(event: &Value) -> u64 {
    event
        .pointer("/series/count")
        .or_else(|| event.get("count"))
        .and_then(Value::as_u64)
        .unwrap_or(1)
}

/// How many times Events with `reason` happened, in all namespaces, series counted.
pub fn times_told(api: &Local, reason: &str) -> u64 {
    api.list(EVENTS, None)
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(occurrences)
        .sum()
}

/// Waits (up to 20 s) until an Event on the object `kind`/`name` of `namespace`, with
/// `reason`, says `says` in its note; returns it.
pub async fn told_on(
    api: &Local,
    namespace: &str,
    (kind, name): (&str, &str),
    reason: &str,
    says: &str,
) -> Value {
    eventually(
        &format!("a {reason} Event on {kind} {namespace}/{name} saying {says:?}"),
        Duration::from_secs(20),
        async || {
            let events = api.list(EVENTS, Some(namespace));
            events
                .iter()
                .find(|e| {
                    e["reason"] == reason
                        && e["involvedObject"]["kind"] == kind
                        && e["involvedObject"]["name"] == name
                        && e["message"].as_str().is_some_and(|m| m.contains(says))
                })
                .cloned()
                .ok_or(format!("{events:#?}"))
        },
    )
    .await
}
