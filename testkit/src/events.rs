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

/// The object an Event is about: its kind and name (in the namespace the Event is in).
pub type Object<'a> = (&'a str, &'a str);

/// The Events in `events` on `kind`/`name`, with `reason`, whose note says `says`.
fn on<'a>(
    events: &'a [Value],
    (kind, name): Object<'a>,
    reason: &'a str,
    says: &'a str,
) -> impl Iterator<Item = &'a Value> {
    events.iter().filter(move |e| {
        e["reason"] == reason
            && e["involvedObject"]["kind"] == kind
            && e["involvedObject"]["name"] == name
            && e["message"].as_str().is_some_and(|m| m.contains(says))
    })
}

/// The Events of `namespace` on `kind`/`name`, for a failure message.
fn about(api: &Local, namespace: &str, (kind, name): Object) -> Vec<Value> {
    api.list(EVENTS, Some(namespace))
        .into_iter()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .collect()
}

/// Waits (up to 20 s) until an Event on the object `kind`/`name` of `namespace`, with
/// `reason`, says `says` in its note; returns it. It may have been told any number of times:
/// [`told_on_times`] checks how many.
pub async fn told_on(
    api: &Local,
    namespace: &str,
    object: Object<'_>,
    reason: &str,
    says: &str,
) -> Value {
    let (kind, name) = object;
    eventually(
        &format!("a {reason} Event on {kind} {namespace}/{name} saying {says:?}"),
        Duration::from_secs(20),
        async || {
            let events = api.list(EVENTS, Some(namespace));
            on(&events, object, reason, says)
                .next()
                .cloned()
                .ok_or_else(|| format!("{:#?}", about(api, namespace, object)))
        },
    )
    .await
}

/// [`told_on`], and told exactly `times` times: waits (up to 20 s) until the Events on the
/// object with `reason` saying `says` count `times` occurrences, series included (the Recorder
/// folds a repeat into the first Event, so counting Event objects would say nothing); fails at
/// once, listing the object's Events, when they count more. Returns those Events.
pub async fn told_on_times(
    api: &Local,
    namespace: &str,
    object: Object<'_>,
    reason: &str,
    says: &str,
    times: u64,
) -> Vec<Value> {
    let (kind, name) = object;
    eventually(
        &format!("{times} {reason} Event(s) on {kind} {namespace}/{name} saying {says:?}"),
        Duration::from_secs(20),
        async || {
            let events = api.list(EVENTS, Some(namespace));
            let told: Vec<Value> = on(&events, object, reason, says).cloned().collect();
            let counted: u64 = told.iter().map(occurrences).sum();
            assert!(
                counted <= times,
                "{reason} on {kind} {namespace}/{name} saying {says:?} told {counted} times, \
                 expected {times}:\n{:#?}",
                about(api, namespace, object)
            );
            if counted == times {
                Ok(told)
            } else {
                Err(format!(
                    "told {counted} times; {:#?}",
                    about(api, namespace, object)
                ))
            }
        },
    )
    .await
}
