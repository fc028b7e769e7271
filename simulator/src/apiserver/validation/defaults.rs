//! The defaults the real API server fills into built-in kinds on every write (its
//! `SetDefaults_*` functions), for the kinds whose defaults a client can see: a field that a
//! `kubectl apply` leaves out and the server fills in decides whether a second apply says
//! `configured` or `unchanged`.
//!
//! Expected flow: [`apply`] on the object a write is about to commit, before validation.
//!
//! Guarantees: a field already set is never changed; only absent ones are filled.
//!
//! Caveats: only the admission-registration kinds (kubernetes v1.36.3
//! `pkg/apis/admissionregistration/v1/defaults.go`), the Namespace's name label and a
//! Secret's `stringData` (merged into `data`) so far;
//! Pods, Deployments and the rest are stored as written (docs/engineering/fidelity.md).

use serde_json::{Value, json};

use super::admission::GROUP;

/// Fills the absent defaulted fields of `object`, a `group`/`plural` object.
pub(crate) fn apply(group: &str, plural: &str, object: &mut Value) {
    if group.is_empty() && plural == "namespaces" {
        name_label(object);
        return;
    }
    if group.is_empty() && plural == "secrets" {
        string_data(object);
        return;
    }
    if group != GROUP {
        return;
    }
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match plural {
        "validatingadmissionpolicies" => {
            // SetDefaults_ValidatingAdmissionPolicySpec.
            spec.entry("failurePolicy").or_insert(json!("Fail"));
            if let Some(constraints) = spec.get_mut("matchConstraints") {
                match_resources(constraints);
            }
        }
        "validatingadmissionpolicybindings" => {
            if let Some(resources) = spec.get_mut("matchResources") {
                match_resources(resources);
            }
        }
        _ => {}
    }
}

/// A Secret's `stringData` is write-only: the server merges it into `data` (base64 on the
/// wire), its keys overwriting those of `data`, and never stores it (kubernetes v1.36.3
/// `pkg/apis/core/v1/conversion.go`, `Convert_v1_Secret_To_core_Secret`: "StringData
/// overwrites Data"). A value that is not a string is left for the decoder's refusal.
fn string_data(object: &mut Value) {
    use base64::Engine;
    let Some(fields) = object.as_object_mut() else {
        return;
    };
    let Some(Value::Object(strings)) = fields.remove("stringData") else {
        return;
    };
    let data = fields.entry("data").or_insert_with(|| json!({}));
    if data.is_null() {
        *data = json!({});
    }
    let Some(data) = data.as_object_mut() else {
        return;
    };
    for (key, value) in strings {
        if let Some(text) = value.as_str() {
            let encoded = base64::engine::general_purpose::STANDARD.encode(text);
            data.insert(key, json!(encoded));
        }
    }
}

/// A Namespace always carries its name as the label `kubernetes.io/metadata.name`, set on
/// every write whatever was sent (kubernetes v1.36.3 `pkg/registry/core/namespace/
/// strategy.go`, `PrepareForCreate` and `PrepareForUpdate`).
fn name_label(object: &mut Value) {
    let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else {
        return;
    };
    let name = name.to_owned();
    let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let labels = metadata.entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert("kubernetes.io/metadata.name".into(), json!(name));
    }
}

/// SetDefaults_MatchResources, and SetDefaults_Rule on each of its rules.
fn match_resources(resources: &mut Value) {
    let Some(resources) = resources.as_object_mut() else {
        return;
    };
    resources
        .entry("matchPolicy")
        .or_insert(json!("Equivalent"));
    resources.entry("namespaceSelector").or_insert(json!({}));
    resources.entry("objectSelector").or_insert(json!({}));
    for list in ["resourceRules", "excludeResourceRules"] {
        let Some(rules) = resources.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
            rule.entry("scope").or_insert(json!("*"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubernetes v1.36.3 `pkg/apis/core/v1/conversion.go`: a Secret written with
    /// `stringData` is stored with it merged into `data`; the chaos tenant's Secret written
    /// that way had no credentials at all here.
    #[test]
    fn a_secrets_string_data_is_merged_into_data_and_never_stored() {
        let mut secret = json!({"metadata": {"name": "bmc"},
            "data": {"username": "b2xk", "kept": "eA=="},
            "stringData": {"username": "admin", "password": "p@ss"}});
        apply("", "secrets", &mut secret);
        assert_eq!(
            secret,
            json!({"metadata": {"name": "bmc"},
                "data": {"username": "YWRtaW4=", "kept": "eA==", "password": "cEBzcw=="}})
        );
        let mut only_strings = json!({"stringData": {"value": "x"}});
        apply("", "secrets", &mut only_strings);
        assert_eq!(only_strings, json!({"data": {"value": "eA=="}}));
    }

    #[test]
    fn a_policy_gets_the_real_servers_defaults_and_keeps_what_it_sets() {
        let mut policy = json!({"spec": {"matchConstraints": {"resourceRules": [
            {"operations": ["CREATE"], "resources": ["pods"]},
            {"operations": ["UPDATE"], "resources": ["pods"], "scope": "Namespaced"}
        ]}}});
        apply(GROUP, "validatingadmissionpolicies", &mut policy);
        assert_eq!(
            policy,
            json!({"spec": {"failurePolicy": "Fail", "matchConstraints": {
            "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
            "resourceRules": [
                {"operations": ["CREATE"], "resources": ["pods"], "scope": "*"},
                {"operations": ["UPDATE"], "resources": ["pods"], "scope": "Namespaced"}
            ]}}})
        );
        let mut other = json!({"spec": {"matchConstraints": {}}});
        apply("apps", "validatingadmissionpolicies", &mut other);
        assert_eq!(other, json!({"spec": {"matchConstraints": {}}}));
    }
}
