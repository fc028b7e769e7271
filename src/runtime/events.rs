//! Kubernetes Events about our work: one Event per object a user may look at, each naming
//! the others as related, with a note cut to 1 KiB.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// The API server refuses an Event whose note is longer than this many bytes.
pub const NOTE_LIMIT: usize = 1024;

pub use baremend_core::text::cut_to_bytes;

/// How much an Event asks of the reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Progress: a step was taken.
    Normal,
    /// Something a user may have to look at: a hold, a failure, a step that did not go as
    /// planned.
    Warning,
}

impl From<Severity> for EventType {
    fn from(severity: Severity) -> Self {
        match severity {
            Severity::Normal => EventType::Normal,
            Severity::Warning => EventType::Warning,
        }
    }
}

/// Tells a failed pass on its subject, where an operator looks (`kubectl describe`): a
/// Warning whose reason is the error's category (`Forbidden`, `InvalidObject`, `BmcError`…)
/// and whose note is the error, for the categories an operator must act on. The one place
/// every controller's failed passes reach (their `error_policy`); the log line is the
/// backoff's. Published in a task: `error_policy` cannot wait.
pub fn report_failed_pass(recorder: &Recorder, subject: ObjectReference, error: &crate::Error) {
    let category = error.category();
    if !category.operator_should_see() {
        return;
    }
    let recorder = recorder.clone();
    let note = error.to_string().replace(['\n', '\r'], " ");
    tokio::spawn(async move {
        publish(
            &recorder,
            Severity::Warning,
            category.event_reason().as_str(),
            &note,
            &[(subject, None)],
        )
        .await;
    });
}

/// Publishes one Event on each `(regarding, related)` pair. A failure is logged, never
/// returned: an Event is a courtesy, the step it tells about already happened.
pub async fn publish(
    recorder: &Recorder,
    severity: Severity,
    reason: &str,
    note: &str,
    pairs: &[(ObjectReference, Option<ObjectReference>)],
) {
    publish_action(recorder, severity, (reason, reason), note, pairs).await;
}

/// [`publish`] with an action apart from the reason, `(reason, action)`: the recorder counts
/// an Event with the same reason, action and object as a repeat of the first (its note is
/// not updated), so what differs between two Events to be told apart goes in the action.
pub async fn publish_action(
    recorder: &Recorder,
    severity: Severity,
    (reason, action): (&str, &str),
    note: &str,
    pairs: &[(ObjectReference, Option<ObjectReference>)],
) {
    let mut event = Event {
        type_: severity.into(),
        reason: reason.into(),
        note: Some(cut_to_bytes(note, NOTE_LIMIT).to_string()),
        action: action.into(),
        secondary: None,
    };
    for (regarding, related) in pairs {
        event.secondary = related.clone();
        if let Err(error) = recorder.publish(&event, regarding).await {
            tracing::warn!(%error, "cannot publish an Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_cut_to_the_byte_limit_on_a_character_boundary() {
        assert_eq!(cut_to_bytes("short", NOTE_LIMIT), "short");
        let ascii = "a".repeat(2000);
        assert_eq!(cut_to_bytes(&ascii, NOTE_LIMIT).len(), NOTE_LIMIT);
        // 'é' is two bytes and '🔥' four: 1,024 characters of them are far over the limit.
        for unit in ["é", "🔥", "a🔥"] {
            let long = unit.repeat(1024);
            let cut = cut_to_bytes(&long, NOTE_LIMIT);
            assert!(cut.len() <= NOTE_LIMIT, "{unit}: {}", cut.len());
            assert!(cut.len() > NOTE_LIMIT - 4, "{unit}: {}", cut.len());
            assert!(long.starts_with(cut));
        }
    }
}
