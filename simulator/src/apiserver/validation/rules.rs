//! The walk that evaluates a schema's CEL rules over an object, node by node, with the old
//! object's value at the same place for transition rules
//! (`apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`).
//!
//! Expected flow: called by `check_custom_resource` once the schema checks passed.
//!
//! Guarantees: a subtree without rules is not visited; a transition rule (`oldSelf`) runs only
//! where the old object has a value at the same property or map key; a failed rule's error is
//! `Invalid value: "<type>": <message>` (or the `reason`'s error type) at the node's path plus
//! the rule's `fieldPath`, `<nil>` for the root.
//!
//! Caveats: list items are not correlated with old items (transition rules under a list do
//! not run); no cost budget.

use serde_json::Value;

use super::errors::{ErrorType, FieldError};
use super::schema::{Schema, join};

/// The field path of an error at `path` (`<nil>` at the root, as a nil `field.Path` prints).
fn shown(path: &str) -> String {
    if path.is_empty() {
        "<nil>".into()
    } else {
        path.to_owned()
    }
}

/// Checks every rule of `schema` and its descendants against `value` (with `old` the stored
/// value at the same place, on update).
pub fn validate(
    schema: &Schema,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if !schema.has_rules {
        return;
    }
    for rule in &schema.compiled {
        if rule.transition && old.is_none() {
            continue;
        }
        // Ratcheting: a rule without oldSelf is not run again on a value left as it was.
        if !rule.transition && old == Some(value) {
            continue;
        }
        let mut variables = vec![("self", value)];
        if let Some(old) = old.filter(|_| rule.transition) {
            variables.push(("oldSelf", old));
        }
        let at = match &rule.field_path {
            Some(extra) => format!("{path}{extra}").trim_start_matches('.').to_owned(),
            None => path.to_owned(),
        };
        let type_name = schema.ty.map_or("", |t| t.name());
        match rule.rule.evaluate(&variables) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                // The failing value itself, left out for an object or a list (kubernetes
                // v1.36 `apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`:
                // `field.OmitValueType{}`; 1.32 printed the type's name instead).
                let message = rule.message(&variables);
                let error = FieldError::new(rule.reason, &shown(&at), value.clone(), message);
                errors.push(if matches!(value, Value::Object(_) | Value::Array(_)) {
                    error.without_value()
                } else {
                    error
                });
            }
            Ok(other) => errors.push(FieldError::new(
                ErrorType::Invalid,
                &shown(&at),
                Value::String(type_name.to_owned()),
                format!(
                    "rule {} evaluated to {other:?}, not a bool",
                    rule.rule.source
                ),
            )),
            Err(why) => errors.push(FieldError::new(
                ErrorType::Invalid,
                &shown(&at),
                Value::String(type_name.to_owned()),
                format!("rule evaluation error: {why}"),
            )),
        }
    }
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let Some(child_schema) = schema.child(key) else {
                    continue;
                };
                let old_child = old.and_then(|o| o.get(key));
                let at = if schema.properties.contains_key(key) {
                    join(path, key)
                } else {
                    format!("{}[{key}]", shown(path))
                };
                validate(child_schema, child, old_child, &at, errors);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = &schema.items {
                for (i, item) in items.iter().enumerate() {
                    validate(item_schema, item, None, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(node: Value) -> Schema {
        Schema::parse(&node, "openAPIV3Schema").unwrap()
    }

    fn check(schema: &Schema, value: Value, old: Option<Value>) -> Vec<String> {
        let mut errors = Vec::new();
        validate(schema, &value, old.as_ref(), "", &mut errors);
        errors.iter().map(FieldError::message).collect()
    }

    #[test]
    fn a_failed_root_rule_is_reported_at_nil_with_the_rule() {
        // apiextensions-apiserver schema/cel/validation.go: ruleMessageOrDefault.
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"machineName": {"type": "string"}, "nodeName": {"type": "string"}}}},
            "x-kubernetes-validations": [{"rule": "has(self.spec.machineName) || has(self.spec.nodeName)"}]}),
        );
        assert!(check(&s, json!({"spec": {"nodeName": "n"}}), None).is_empty());
        assert_eq!(
            check(&s, json!({"spec": {}}), None),
            [
                "<nil>: Invalid value: failed rule: has(self.spec.machineName) || has(self.spec.nodeName)"
            ]
        );
    }

    #[test]
    fn message_expression_reason_and_field_path() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"n": {"type": "integer"}, "name": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "self.n < 5", "messageExpression": "'n is ' + string(self.n)", "fieldPath": ".n"},
                {"rule": "self.name.startsWith('a') && self.name.matches('^[a-z]+$')", "message": "bad name", "reason": "FieldValueForbidden"}
            ]}}}),
        );
        assert!(check(&s, json!({"spec": {"n": 1, "name": "abc"}}), None).is_empty());
        assert_eq!(
            check(&s, json!({"spec": {"n": 7, "name": "Bob"}}), None),
            ["spec.n: Invalid value: n is 7", "spec: Forbidden: bad name"]
        );
    }

    #[test]
    fn transition_rules_need_an_old_value() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"mode": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}]}}}}}),
        );
        assert!(check(&s, json!({"spec": {"mode": "a"}}), None).is_empty());
        assert!(
            check(
                &s,
                json!({"spec": {"mode": "a"}}),
                Some(json!({"spec": {"mode": "a"}}))
            )
            .is_empty()
        );
        assert_eq!(
            check(
                &s,
                json!({"spec": {"mode": "b"}}),
                Some(json!({"spec": {"mode": "a"}}))
            ),
            // The value itself (v1.36 `schema/cel/validation.go`: `value := obj`).
            ["spec.mode: Invalid value: \"b\": mode is immutable"]
        );
        // No old value at that place (the field is new): not checked.
        assert!(
            check(
                &s,
                json!({"spec": {"mode": "b"}}),
                Some(json!({"spec": {}}))
            )
            .is_empty()
        );
    }

    #[test]
    fn list_macros_and_string_functions_work() {
        let s = schema(
            json!({"type": "object", "properties": {"tags": {"type": "array",
            "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.all(t, t.size() <= 3) && !self.exists(t, t.endsWith('x')) && self.join(',').split(',').size() == size(self)"}]}}}),
        );
        assert!(check(&s, json!({"tags": ["a", "bb"]}), None).is_empty());
        assert_eq!(check(&s, json!({"tags": ["abcd"]}), None).len(), 1);
        assert_eq!(check(&s, json!({"tags": ["ax"]}), None).len(), 1);
    }

    #[test]
    fn unknown_functions_in_a_schema_refuse_it() {
        let error = Schema::parse(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "isSorted(self)"}]}),
            "spec.versions[0].schema.openAPIV3Schema",
        )
        .unwrap_err();
        assert_eq!(
            error.field,
            "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
        );
        assert!(
            error.body().contains("undeclared reference to 'isSorted'"),
            "{}",
            error.body()
        );
        assert!(
            Schema::parse(
                &json!({"x-kubernetes-validations": [{"rule": "self.a ==="}]}),
                "s"
            )
            .is_err()
        );
        assert!(
            Schema::parse(
                &json!({"x-kubernetes-validations": [{"rule": "true", "reason": "Nope"}]}),
                "s"
            )
            .is_err()
        );
    }
}
