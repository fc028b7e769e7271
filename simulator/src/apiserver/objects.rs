//! Helpers over JSON objects: metadata access, names, and the Event shape conversion between
//! core/v1 and events.k8s.io/v1 (both are served from one store, as in the real API server).

use serde_json::{Map, Value, json};

/// `metadata.<field>` as a string.
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// A mutable `metadata` map, created when missing.
pub fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let map = object.as_object_mut().expect("made an object above");
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    metadata.as_object_mut().expect("made an object above")
}

/// The finalizers of an object.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `name` is a valid DNS-1123 subdomain (what most object names must be).
pub fn valid_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Whether `name` is a valid DNS-1123 label (namespace names).
pub fn valid_label_name(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && valid_subdomain(name)
}

/// A label key or annotation key check: optional DNS-subdomain prefix and a 63-char name.
pub fn valid_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(valid_subdomain)
        && !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

/// A label value check.
pub fn valid_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && value.as_bytes()[0].is_ascii_alphanumeric()
            && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric())
}

/// Field renames between core/v1 Event (left) and events.k8s.io/v1 Event (right).
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Converts a stored (core/v1-shaped) Event to events.k8s.io/v1.
pub fn event_to_events_v1(core: &Value) -> Value {
    let mut out = core.clone();
    if let Value::Object(map) = &mut out {
        for (from, to) in EVENT_FIELDS {
            if let Some(value) = map.remove(*from) {
                map.insert((*to).to_owned(), value);
            }
        }
        map.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    }
    out
}

/// Converts an events.k8s.io/v1 Event to the stored core/v1 shape.
pub fn event_from_events_v1(event: &Value) -> Value {
    let mut out = event.clone();
    if let Value::Object(map) = &mut out {
        for (to, from) in EVENT_FIELDS {
            if let Some(value) = map.remove(*from) {
                map.insert((*to).to_owned(), value);
            }
        }
        map.insert("apiVersion".into(), json!("v1"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys_are_validated_like_the_api_server() {
        assert!(valid_subdomain("worker-0.example"));
        assert!(!valid_subdomain("Worker"));
        assert!(!valid_subdomain("-a"));
        assert!(valid_label_name("openshift-machine-api"));
        assert!(!valid_label_name("a.b"));
        assert!(valid_qualified_name("host.metal3.io/external-remediation"));
        assert!(valid_qualified_name("app"));
        assert!(!valid_qualified_name("bad key"));
        assert!(!valid_qualified_name("x/"));
        assert!(valid_label_value(""));
        assert!(!valid_label_value("-x"));
    }

    #[test]
    fn events_convert_both_ways() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "involvedObject": {"name": "m"}, "message": "hi", "count": 2});
        let v1 = event_to_events_v1(&core);
        assert_eq!(v1["regarding"]["name"], "m");
        assert_eq!(v1["note"], "hi");
        assert_eq!(v1["deprecatedCount"], 2);
        assert_eq!(event_from_events_v1(&v1), core);
    }
}
