//! CEL for `x-kubernetes-validations` (and the expressions of ValidatingAdmissionPolicies),
//! on the `cel` crate.
//!
//! Expected flow: [`Rule::compile`] when a CRD or a policy is written (a rule that does not
//! parse, or calls a function this environment lacks, refuses it as the real server's
//! type-check would); [`Expression::evaluate`] with the variables of one check.
//!
//! Guarantees: the environment is CEL's standard library with the strings and lists
//! extensions (`startsWith`, `matches`, `size`, `has`, `all`, `exists`, `split`, `join`…);
//! a rule with `oldSelf` is a transition rule, checked only where an old value exists
//! (`apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`); a failed rule's error
//! is `Invalid value: "<type>": <message>` (or `failed rule: <rule>`), or the `reason`'s
//! error type, at the node's path plus the rule's `fieldPath`.
//!
//! Caveats: no type-check before evaluation (a field misspelt in a rule is an evaluation
//! error on write, not a compile error on CRD creation); no cost budget; the Kubernetes
//! libraries (`isSorted`, `url`, `quantity`, `ip`, `format.*`…) are absent and refuse the
//! CRD that calls them; items of lists are not correlated with their old values, so
//! transition rules below a list are not evaluated.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::objects::{Key, Map};
use cel::{Context, Env, Program};
use serde_json::Value;

use super::errors::{ErrorType, FieldError};
use super::schema::{Schema, join};

/// CEL's standard library with the extensions Kubernetes also has.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Both only declare overloads that are not in the standard library; an error here
    // would mean a clash, which the crate's own tests rule out.
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    Arc::new(env)
});

/// The functions (besides operators) the environment has: what a rule may call.
const FUNCTIONS: &[&str] = &[
    // standard library
    "size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double",
    "string", "bytes", "bool", "type", "dyn",
    // strings extension
    "charAt", "indexOf", "lastIndexOf", "join", "lowerAscii", "upperAscii", "trim",
    "replace", "split", "substring", "format", "reverse", "strings.quote",
    // lists extension
    "distinct", "flatten", "sort", "lists.range", "slice",
];

/// A compiled CEL expression and its source.
#[derive(Debug)]
pub struct Expression {
    /// The source.
    pub source: String,
    program: Program,
}

impl Expression {
    /// Parses an expression and checks that every function it calls exists; the error is
    /// the detail of the field error (`compilation failed: ERROR: …`).
    pub fn compile(source: &str) -> Result<Expression, String> {
        let program = ENV
            .compile(source)
            .map_err(|e| format!("compilation failed: ERROR: <input>: {e}"))?;
        let references = program.references();
        let mut functions = references.functions();
        functions.sort_unstable();
        if let Some(unknown) = functions.into_iter().find(|f| {
            !(f.starts_with('_') || f.starts_with('@') || f.starts_with("!_"))
                && !FUNCTIONS.contains(f)
        }) {
            return Err(format!(
                "compilation failed: ERROR: <input>: undeclared reference to '{unknown}' (in container '')"
            ));
        }
        Ok(Expression {
            source: source.to_owned(),
            program,
        })
    }

    /// Whether the expression names a variable.
    pub fn uses(&self, variable: &str) -> bool {
        self.program.references().has_variable(variable)
    }

    /// Evaluates with the given variables (JSON values).
    pub fn evaluate(&self, variables: &[(&str, &Value)]) -> Result<cel::Value, String> {
        let mut context = Context::with_env(ENV.clone());
        for (name, value) in variables {
            context.add_variable_from_value(*name, to_cel(value));
        }
        self.program.execute(&context).map_err(|e| e.to_string())
    }
}

/// A JSON value as a CEL value.
pub fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => cel::Value::Map(Map {
            map: Arc::new(
                map.iter()
                    .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                    .collect::<HashMap<_, _>>(),
            ),
        }),
    }
}

/// One `x-kubernetes-validations` entry, compiled.
#[derive(Debug)]
pub struct Rule {
    /// `rule`.
    pub rule: Expression,
    /// `message`.
    pub message: Option<String>,
    /// `messageExpression`.
    pub message_expression: Option<Expression>,
    /// `reason` as an error type (Invalid unless one of the four the API allows).
    pub reason: ErrorType,
    /// `fieldPath` (`.spec.x`), appended to the node's path.
    pub field_path: Option<String>,
    /// Uses `oldSelf`: checked only on update, where an old value exists.
    pub transition: bool,
}

impl Rule {
    /// Compiles one entry; `path` names it in errors
    /// (`…openAPIV3Schema.x-kubernetes-validations[0]`).
    pub fn compile(entry: &Value, path: &str) -> Result<Rule, FieldError> {
        let text = |field: &str| entry.get(field).and_then(Value::as_str).map(str::to_owned);
        let source = text("rule").unwrap_or_default();
        let rule = Expression::compile(&source).map_err(|why| {
            FieldError::new(ErrorType::Invalid, &format!("{path}.rule"), Value::String(source.clone()), why)
        })?;
        let message_expression = match text("messageExpression") {
            Some(m) => Some(Expression::compile(&m).map_err(|why| {
                FieldError::new(ErrorType::Invalid, &format!("{path}.messageExpression"), Value::String(m.clone()), why)
            })?),
            None => None,
        };
        let reason = match text("reason").as_deref() {
            None | Some("FieldValueInvalid") => ErrorType::Invalid,
            Some("FieldValueForbidden") => ErrorType::Forbidden,
            Some("FieldValueRequired") => ErrorType::Required,
            Some("FieldValueDuplicate") => ErrorType::Duplicate,
            Some(other) => {
                return Err(FieldError::new(
                    ErrorType::NotSupported,
                    &format!("{path}.reason"),
                    Value::String(other.to_owned()),
                    "supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"",
                ));
            }
        };
        Ok(Rule {
            transition: rule.uses("oldSelf"),
            rule,
            message: text("message").filter(|m| !m.trim().is_empty()),
            message_expression,
            reason,
            field_path: text("fieldPath").filter(|f| !f.is_empty()),
        })
    }

    /// The message of a failed check: the `messageExpression`'s string when it gives one,
    /// else `message`, else `failed rule: <rule>`.
    fn message(&self, variables: &[(&str, &Value)]) -> String {
        if let Some(expression) = &self.message_expression
            && let Ok(cel::Value::String(text)) = expression.evaluate(variables)
            && !text.trim().is_empty()
        {
            return text.trim().to_owned();
        }
        match &self.message {
            Some(message) => message.trim().to_owned(),
            None => format!("failed rule: {}", self.rule.source.trim()),
        }
    }
}

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
                let message = rule.message(&variables);
                let value = match rule.reason {
                    ErrorType::Forbidden | ErrorType::Required => Value::Null,
                    _ => Value::String(type_name.to_owned()),
                };
                errors.push(FieldError::new(rule.reason, &shown(&at), value, message));
            }
            Ok(other) => errors.push(FieldError::new(
                ErrorType::Invalid,
                &shown(&at),
                Value::String(type_name.to_owned()),
                format!("rule {} evaluated to {other:?}, not a bool", rule.rule.source),
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
                let Some(child_schema) = schema.child(key) else { continue };
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
        let s = schema(json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"machineName": {"type": "string"}, "nodeName": {"type": "string"}}}},
            "x-kubernetes-validations": [{"rule": "has(self.spec.machineName) || has(self.spec.nodeName)"}]}));
        assert!(check(&s, json!({"spec": {"nodeName": "n"}}), None).is_empty());
        assert_eq!(
            check(&s, json!({"spec": {}}), None),
            ["<nil>: Invalid value: \"object\": failed rule: has(self.spec.machineName) || has(self.spec.nodeName)"]
        );
    }

    #[test]
    fn message_expression_reason_and_field_path() {
        let s = schema(json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"n": {"type": "integer"}, "name": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "self.n < 5", "messageExpression": "'n is ' + string(self.n)", "fieldPath": ".n"},
                {"rule": "self.name.startsWith('a') && self.name.matches('^[a-z]+$')", "message": "bad name", "reason": "FieldValueForbidden"}
            ]}}}));
        assert!(check(&s, json!({"spec": {"n": 1, "name": "abc"}}), None).is_empty());
        assert_eq!(
            check(&s, json!({"spec": {"n": 7, "name": "Bob"}}), None),
            [
                "spec.n: Invalid value: \"object\": n is 7",
                "spec: Forbidden: bad name"
            ]
        );
    }

    #[test]
    fn transition_rules_need_an_old_value() {
        let s = schema(json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"mode": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "mode is immutable"}]}}}}}));
        assert!(check(&s, json!({"spec": {"mode": "a"}}), None).is_empty());
        assert!(check(&s, json!({"spec": {"mode": "a"}}), Some(json!({"spec": {"mode": "a"}}))).is_empty());
        assert_eq!(
            check(&s, json!({"spec": {"mode": "b"}}), Some(json!({"spec": {"mode": "a"}}))),
            ["spec.mode: Invalid value: \"string\": mode is immutable"]
        );
        // No old value at that place (the field is new): not checked.
        assert!(check(&s, json!({"spec": {"mode": "b"}}), Some(json!({"spec": {}}))).is_empty());
    }

    #[test]
    fn list_macros_and_string_functions_work() {
        let s = schema(json!({"type": "object", "properties": {"tags": {"type": "array",
            "items": {"type": "string"},
            "x-kubernetes-validations": [{"rule": "self.all(t, t.size() <= 3) && !self.exists(t, t.endsWith('x')) && self.join(',').split(',').size() == size(self)"}]}}}));
        assert!(check(&s, json!({"tags": ["a", "bb"]}), None).is_empty());
        assert_eq!(check(&s, json!({"tags": ["abcd"]}), None).len(), 1);
        assert_eq!(check(&s, json!({"tags": ["ax"]}), None).len(), 1);
    }

    #[test]
    fn unknown_functions_and_syntax_errors_do_not_compile() {
        let error = Schema::parse(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "isSorted(self)"}]}),
            "spec.versions[0].schema.openAPIV3Schema",
        )
        .unwrap_err();
        assert_eq!(
            error.field,
            "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
        );
        assert!(error.body().contains("undeclared reference to 'isSorted'"), "{}", error.body());
        assert!(Schema::parse(&json!({"x-kubernetes-validations": [{"rule": "self.a ==="}]}), "s").is_err());
        assert!(Schema::parse(&json!({"x-kubernetes-validations": [{"rule": "true", "reason": "Nope"}]}), "s").is_err());
    }
}
