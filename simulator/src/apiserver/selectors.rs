//! Label and field selectors, parsed and matched as the API server does.

use std::collections::BTreeSet;

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelRequirement {
    Exists(String),
    NotExists(String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
}

/// A parsed label selector (`a=b,c!=d,e in (f,g),!h`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelRequirement>);

fn valid_key(key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or("");
    !name.is_empty()
        && name.len() <= 63
        && key.len() <= 316
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (index, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced parentheses".into());
                }
            }
            ',' if depth == 0 => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

impl LabelSelector {
    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Parses a selector; an empty string selects everything.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if text.trim().is_empty() {
            return Ok(LabelSelector(requirements));
        }
        for part in split_top_level(text)? {
            let part = part.trim();
            let bad = || format!("unable to parse requirement: {part:?}");
            let requirement = if let Some(key) = part.strip_prefix('!') {
                LabelRequirement::NotExists(key.trim().to_owned())
            } else if let Some((key, value)) = part.split_once("!=") {
                LabelRequirement::NotIn(key.trim().to_owned(), [value.trim().to_owned()].into())
            } else if let Some((key, value)) =
                part.split_once("==").or_else(|| part.split_once('='))
            {
                LabelRequirement::In(key.trim().to_owned(), [value.trim().to_owned()].into())
            } else if let Some((key, set)) = split_set(part, " notin ") {
                LabelRequirement::NotIn(key, set.ok_or_else(bad)?)
            } else if let Some((key, set)) = split_set(part, " in ") {
                LabelRequirement::In(key, set.ok_or_else(bad)?)
            } else {
                LabelRequirement::Exists(part.to_owned())
            };
            let (key, values) = match &requirement {
                LabelRequirement::Exists(k) | LabelRequirement::NotExists(k) => (k, None),
                LabelRequirement::In(k, v) | LabelRequirement::NotIn(k, v) => (k, Some(v)),
            };
            if !valid_key(key) {
                return Err(format!("invalid label key {key:?}"));
            }
            if let Some(values) = values
                && values.iter().any(|v| !valid_value(v))
            {
                return Err(bad());
            }
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether an object's labels match.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            LabelRequirement::Exists(key) => get(key).is_some(),
            LabelRequirement::NotExists(key) => get(key).is_none(),
            LabelRequirement::In(key, values) => get(key).is_some_and(|v| values.contains(v)),
            LabelRequirement::NotIn(key, values) => get(key).is_none_or(|v| !values.contains(v)),
        })
    }
}

/// `key in (a, b)` → (key, {a, b}).
fn split_set(part: &str, operator: &str) -> Option<(String, Option<BTreeSet<String>>)> {
    let (key, rest) = part.split_once(operator)?;
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'));
    let set = inner.map(|inner| {
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .collect::<BTreeSet<_>>()
    });
    Some((key.trim().to_owned(), set))
}

/// A parsed field selector (`spec.nodeName=w0,metadata.name!=x`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields each resource can be selected by, besides `metadata.name` and
/// `metadata.namespace` (as registered by the real API server).
fn selectable_fields(plural: &str) -> &'static [&'static str] {
    match plural {
        "pods" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "events" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
        ],
        "nodes" => &["spec.unschedulable"],
        "secrets" => &["type"],
        "namespaces" => &["status.phase"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Whether it selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FieldSelector {
    /// Parses a selector for `plural`; unsupported fields are refused, as by the API server.
    pub fn parse(text: &str, plural: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        if text.trim().is_empty() {
            return Ok(FieldSelector(terms));
        }
        for part in text.split(',') {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(format!("invalid selector: {part:?}; can't understand"));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !selectable_fields(plural).contains(&field)
            {
                // kube-apiserver v1.36.3's words (apimachinery `fields.ParseAndTransform`
                // through the registry's field label conversion).
                return Err(format!(
                    "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                ));
            }
            // The JSON pointer is made once here, not for every object matched.
            let pointer = format!("/{}", field.replace('.', "/"));
            terms.push((pointer, equal, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether an object matches.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(pointer, equal, wanted)| {
            let same = match object.pointer(pointer) {
                Some(Value::String(s)) => s == wanted,
                // A missing spec.unschedulable reads as false, as in Kubernetes.
                None | Some(Value::Null) if pointer == "/spec/unschedulable" => wanted == "false",
                None | Some(Value::Null) => wanted.is_empty(),
                Some(Value::Bool(b)) => wanted == if *b { "true" } else { "false" },
                Some(other) => wanted.as_str() == other.to_string().as_str(),
            };
            same == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(labels: Value) -> Value {
        json!({"metadata": {"name": "n", "labels": labels}, "spec": {"nodeName": "w0"}})
    }

    #[test]
    fn label_selectors_support_every_operator() {
        let o = object(json!({"app": "db", "tier": "back", "node-role.kubernetes.io/worker": ""}));
        for (selector, expected) in [
            ("", true),
            ("app=db", true),
            ("app==db", true),
            ("app!=db", false),
            ("app!=web", true),
            ("missing!=x", true),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("tier,app=db", true),
            ("!tier", false),
            ("!gone", true),
            ("node-role.kubernetes.io/worker", true),
            ("node-role.kubernetes.io/master", false),
            ("app=db,tier in (front)", false),
        ] {
            let parsed =
                LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(parsed.matches(&o), expected, "{selector}");
        }
        for bad in ["app in (db", "a b=c", "app=@", "x in db"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_match_supported_fields_and_refuse_others() {
        let o = object(json!({}));
        assert!(
            FieldSelector::parse("spec.nodeName=w0", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName!=w0", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.name=n,spec.nodeName==w0", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("spec.nodeName=w0", "nodes").is_err());
        let node = json!({"metadata": {"name": "w0"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable=false", "nodes")
                .unwrap()
                .matches(&node)
        );
    }
}
