//! Kubernetes Events about our work: one Event per object a user may look at, each naming
//! the others as related, with a note cut to 1 KiB.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Publishes one Event on each `(regarding, related)` pair. A failure is logged, never
/// returned: an Event is a courtesy, the step it tells about already happened.
pub async fn publish(
    recorder: &Recorder,
    warning: bool,
    reason: &str,
    note: &str,
    pairs: &[(ObjectReference, Option<ObjectReference>)],
) {
    let mut event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note.chars().take(1024).collect()),
        action: reason.into(),
        secondary: None,
    };
    for (regarding, related) in pairs {
        event.secondary = related.clone();
        if let Err(error) = recorder.publish(&event, regarding).await {
            tracing::warn!(%error, "cannot publish an Event");
        }
    }
}
