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
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "type",
    "dyn",
    // strings extension
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "reverse",
    "strings.quote",
    // lists extension
    "distinct",
    "flatten",
    "sort",
    "lists.range",
    "slice",
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
        let operator = |f: &str| f.starts_with('_') || f.starts_with('@') || f.starts_with("!_");
        if let Some(unknown) = functions
            .into_iter()
            .find(|f| !(operator(f) || FUNCTIONS.contains(f)))
        {
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
        let converted: Vec<(&str, cel::Value)> =
            variables.iter().map(|(n, v)| (*n, to_cel(v))).collect();
        self.evaluate_cel(&converted)
    }

    /// Evaluates with the given variables (CEL values).
    pub fn evaluate_cel(&self, variables: &[(&str, cel::Value)]) -> Result<cel::Value, String> {
        let mut context = Context::with_env(ENV.clone());
        for (name, value) in variables {
            context.add_variable_from_value(*name, value.clone());
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
            FieldError::new(
                ErrorType::Invalid,
                &format!("{path}.rule"),
                Value::String(source.clone()),
                why,
            )
        })?;
        let message_expression = match text("messageExpression") {
            Some(m) => Some(Expression::compile(&m).map_err(|why| {
                FieldError::new(
                    ErrorType::Invalid,
                    &format!("{path}.messageExpression"),
                    Value::String(m.clone()),
                    why,
                )
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
    pub fn message(&self, variables: &[(&str, &Value)]) -> String {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_functions_and_syntax_errors_do_not_compile() {
        let error = Expression::compile("isSorted(self)").unwrap_err();
        assert!(
            error.contains("undeclared reference to 'isSorted'"),
            "{error}"
        );
        assert!(Expression::compile("self.a ===").is_err());
        assert!(Rule::compile(&json!({"rule": "true", "reason": "Nope"}), "r").is_err());
        let rule = Rule::compile(&json!({"rule": "self == oldSelf"}), "r").unwrap();
        assert!(rule.transition);
    }

    #[test]
    fn malformed_sources_are_errors_not_panics() {
        for source in [
            "", "(((", "self.", "'open", "1 +", "}{", "self[", "a.b.c(", "\u{0}",
        ] {
            assert!(Expression::compile(source).is_err(), "{source:?} compiled");
        }
    }
}
