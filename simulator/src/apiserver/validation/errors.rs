//! Field errors as the real API server words them (k8s.io/apimachinery
//! `pkg/util/validation/field/errors.go`), and the 422 `Invalid` Status they make.
//!
//! Expected flow: the schema, CEL and admission checks each return a `Vec<FieldError>`;
//! [`invalid`] turns a non-empty list into the `ApiError` the client sees.
//!
//! Guarantees: a message reads `<field>: <body>`, several are joined as `[a, b]` (the
//! aggregate's wording), and every cause names its field and its `FieldValue…` reason.
//!
//! Caveats: values are rendered from JSON, not Go types: a string is quoted, a number or a
//! boolean printed bare, anything else as JSON (Go would print `map[string]interface {}…`).

use serde_json::{Value, json};

use crate::apiserver::errors::ApiError;

/// What kind of field error (`field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `FieldValueRequired`: "Required value".
    Required,
    /// `FieldValueInvalid`: "Invalid value".
    Invalid,
    /// `FieldValueNotSupported`: "Unsupported value".
    NotSupported,
    /// `FieldValueDuplicate`: "Duplicate value".
    Duplicate,
    /// `FieldValueForbidden`: "Forbidden".
    Forbidden,
    /// `FieldValueTooLong`: "Too long".
    TooLong,
    /// `FieldValueTooMany`: "Too many".
    TooMany,
    /// `FieldValueTypeInvalid`: "Invalid value" (a value of the wrong type or format).
    TypeInvalid,
}

impl ErrorType {
    /// The `reason` of a Status cause.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    fn words(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
        }
    }

    /// Whether the body leaves the bad value out (Required, Forbidden and TooLong do).
    fn omits_value(self) -> bool {
        matches!(
            self,
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong
        )
    }
}

/// One field error.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// What kind.
    pub kind: ErrorType,
    /// The field path (`spec.mode`, `spec.items[0]`, `<nil>` for the root).
    pub field: String,
    /// The offending value, shown after the words.
    pub value: Value,
    /// What is wrong, after the value.
    pub detail: String,
    /// The value is left out of the text (`field.OmitValueType`, as a failed CEL rule on an
    /// object or a list has it).
    pub omit_value: bool,
}

impl FieldError {
    /// A new error.
    pub fn new(kind: ErrorType, field: &str, value: Value, detail: impl Into<String>) -> Self {
        FieldError {
            kind,
            field: field.to_owned(),
            value,
            detail: detail.into(),
            omit_value: false,
        }
    }

    /// The same error, its value left out of the text.
    pub fn without_value(self) -> Self {
        FieldError {
            omit_value: true,
            ..self
        }
    }

    /// The message without the field (`ErrorBody`).
    pub fn body(&self) -> String {
        let mut text = self.kind.words().to_owned();
        if !self.kind.omits_value() && !self.omit_value {
            text.push_str(": ");
            text.push_str(&render(&self.value));
        }
        if !self.detail.is_empty() {
            text.push_str(": ");
            text.push_str(&self.detail);
        }
        text
    }

    /// `field: body`.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field, self.body())
    }
}

/// A value as Go's `%v`/`%q` print the simple ones.
fn render(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// A string quoted as Go's `%q` does for the printable ones (JSON's escapes match it there).
pub fn go_quote(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// `Kind.group` (`qualifiedKind.String()`), or the bare kind of the core group.
pub fn qualified_kind(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

/// The 422 `Invalid` Status of `errors.NewInvalid`: `Kind.group "name" is invalid: …`.
pub fn invalid(group: &str, kind: &str, name: &str, errors: &[FieldError]) -> ApiError {
    let joined = match errors {
        [one] => one.message(),
        many => format!(
            "[{}]",
            many.iter()
                .map(FieldError::message)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!(
            "{} {} is invalid: {joined}",
            qualified_kind(group, kind),
            go_quote(name)
        ),
        details: Some(json!({
            "name": name,
            "group": group,
            "kind": kind,
            "causes": errors.iter().map(|e| json!({
                "reason": e.kind.reason(),
                "message": e.body(),
                "field": e.field,
            })).collect::<Vec<_>>(),
        })),
        retry_after: None,
        plain_text: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_follow_apimachinery_field_errors() {
        // k8s.io/apimachinery/pkg/util/validation/field/errors.go: ErrorBody.
        let e = FieldError::new(
            ErrorType::NotSupported,
            "spec.mode",
            json!("Bogus"),
            "supported values: \"Remediate\", \"DryRun\"",
        );
        assert_eq!(
            e.message(),
            "spec.mode: Unsupported value: \"Bogus\": supported values: \"Remediate\", \"DryRun\""
        );
        let e = FieldError::new(ErrorType::Required, "spec.address", json!(""), "");
        assert_eq!(e.message(), "spec.address: Required value");
        let e = FieldError::new(ErrorType::Invalid, "spec.n", json!(11), "too big");
        assert_eq!(e.body(), "Invalid value: 11: too big");
    }

    #[test]
    fn several_errors_are_bracketed_like_an_aggregate() {
        let errors = [
            FieldError::new(ErrorType::Required, "spec.a", Value::Null, ""),
            FieldError::new(ErrorType::Required, "spec.b", Value::Null, ""),
        ];
        let error = invalid("baremend.io", "HostBmc", "x", &errors);
        assert_eq!(
            error.message,
            "HostBmc.baremend.io \"x\" is invalid: [spec.a: Required value, spec.b: Required value]"
        );
        assert_eq!(error.details.unwrap()["causes"][1]["field"], "spec.b");
    }
}
