//! ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1): which policies and bindings
//! match a create or update, and what their CEL validations say of it.
//!
//! Expected flow: [`check_policy`] when a policy is written (an expression that does not
//! compile refuses it, as the real server's validation does); [`admit`] on every create and
//! update of any kind, with the stored policies and bindings, before the store commits.
//!
//! Guarantees: a binding applies when its `policyName` names a stored policy, the request
//! matches the policy's `matchConstraints` and the binding's `matchResources`
//! (`resourceRules` with groups, versions, resources incl. `plural/subresource`,
//! operations and scope; `excludeResourceRules`; `namespaceSelector`; `objectSelector`) and
//! every `matchConditions` expression holds. Its `validations` see `object`, `oldObject`,
//! `request` (`operation`, `userInfo.username`/`groups`, `name`, `namespace`, `kind`,
//! `resource`, `subResource`), `namespaceObject` and `variables`. A false validation under a
//! binding with `Deny` answers `ValidatingAdmissionPolicy '<p>' with binding '<b>' denied
//! request: <message>` (upstream `apiserver/pkg/admission/plugin/policy/validating/`), with
//! the code of its `reason` (422 `Invalid` unless said otherwise); an evaluation error denies
//! under `failurePolicy: Fail` (the default) and is skipped under `Ignore`.
//!
//! Caveats: `Warn` and `Audit` actions are accepted and do nothing (no warning headers, no
//! audit log); `paramKind`/`paramRef` are not resolved (`params` is null); delete and
//! connect operations are not admitted; a write through `/scale` is seen as one of the main
//! resource (`subResource` empty); variables are evaluated eagerly (one that fails is
//! absent rather than an error where used); the policy's status (type checking) stays empty.

use std::sync::Arc;

use cel::objects::{Key, Map};
use serde_json::{Value, json};

use super::cel::{Expression, to_cel};
use super::errors::{ErrorType, FieldError};
use crate::apiserver::errors::ApiError;

/// The API group of the policy kinds.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// Who sent the request being admitted: passed with every write to the store, from the
/// request's authentication down to admission (never held aside for the thread).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestUser {
    /// `userInfo.username`.
    pub username: String,
    /// `userInfo.groups`.
    pub groups: Vec<String>,
}

impl RequestUser {
    /// The authenticated `user` (an HTTP caller, or an in-process actor calling as its
    /// account).
    pub fn of(user: &crate::apiserver::UserInfo) -> Self {
        RequestUser {
            username: user.username.clone(),
            groups: user.groups.clone(),
        }
    }

    /// An in-process writer that is no user (a simulated controller writing the store
    /// directly): it has no name, and no rule that names users holds it.
    pub fn in_process() -> Self {
        RequestUser::default()
    }
}

/// The operations admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `CREATE`.
    Create,
    /// `UPDATE`.
    Update,
}

impl Operation {
    fn name(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
        }
    }
}

/// What a policy is matched and evaluated against.
#[derive(Debug, Clone)]
pub struct AdmissionRequest<'a> {
    /// CREATE or UPDATE.
    pub operation: Operation,
    /// API group, version, kind and resource (plural) of the request.
    pub group: &'a str,
    /// The request's version.
    pub version: &'a str,
    /// The kind.
    pub kind: &'a str,
    /// The resource (plural).
    pub resource: &'a str,
    /// `status` for a write through the status subresource, else empty.
    pub subresource: &'a str,
    /// Whether the kind is namespaced.
    pub namespaced: bool,
    /// The namespace ("" for cluster-scoped).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The object as it would be stored.
    pub object: &'a Value,
    /// The stored object, on update.
    pub old: Option<&'a Value>,
    /// The Namespace object of a namespaced request.
    pub namespace_object: Option<&'a Value>,
    /// Who asks.
    pub user: &'a RequestUser,
}

/// Checks a policy's expressions compile (the real server refuses the policy otherwise).
pub fn check_policy(policy: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (list, field) in [
        ("validations", "expression"),
        ("validations", "messageExpression"),
        ("matchConditions", "expression"),
        ("variables", "expression"),
    ] {
        let entries = policy
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, entry) in entries.iter().enumerate() {
            let Some(source) = entry.get(field).and_then(Value::as_str) else {
                continue;
            };
            if let Err(why) = Expression::compile(source) {
                errors.push(FieldError::new(
                    ErrorType::Invalid,
                    &format!("spec.{list}[{i}].{field}"),
                    json!(source),
                    why,
                ));
            }
        }
    }
    errors
}

/// Evaluates every binding whose policy matches the request; the first denial is the error.
pub fn admit(
    policies: &[Arc<Value>],
    bindings: &[Arc<Value>],
    request: &AdmissionRequest,
) -> Result<(), ApiError> {
    for binding in bindings {
        let policy_name = binding
            .pointer("/spec/policyName")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(policy) = policies
            .iter()
            .find(|p| p.pointer("/metadata/name").and_then(Value::as_str) == Some(policy_name))
        else {
            continue;
        };
        if !matches_resources(policy.pointer("/spec/matchConstraints"), request)
            || !matches_resources(binding.pointer("/spec/matchResources"), request)
        {
            continue;
        }
        let denies = binding
            .pointer("/spec/validationActions")
            .and_then(Value::as_array)
            .is_some_and(|actions| actions.iter().any(|a| a == "Deny"));
        if denies {
            evaluate(policy, binding, request)?;
        }
    }
    Ok(())
}

/// The `request` variable (an `admission.k8s.io` AdmissionRequest's fields). Its empty
/// `name`, `namespace` and `subResource` are left out, as the real server's `omitempty` JSON
/// tags leave them out: there `request.subResource` of a request to the object itself is an
/// error ("no such key"), and a policy must ask `has(request.subResource)` first (found by
/// kube-apiserver 1.36 refusing deploy/base/records-admission.yaml's first version,
/// `tests/kubectl_install_apiserver.rs`, `only_the_controller_writes_its_records`).
fn request_variable(request: &AdmissionRequest) -> Value {
    let mut variable = json!({
        "operation": request.operation.name(),
        "userInfo": {"username": request.user.username, "groups": request.user.groups},
        "kind": {"group": request.group, "version": request.version, "kind": request.kind},
        "resource": {"group": request.group, "version": request.version, "resource": request.resource},
        "dryRun": false,
    });
    let present = [
        ("name", request.name),
        ("namespace", request.namespace),
        ("subResource", request.subresource),
    ];
    for (field, value) in present {
        if !value.is_empty() {
            variable[field] = json!(value);
        }
    }
    variable
}

/// Why a policy said no: its message and the Status reason and code.
struct Denial {
    message: String,
    reason: &'static str,
    code: u16,
}

/// Runs one policy's match conditions and validations under one binding.
fn evaluate(policy: &Value, binding: &Value, request: &AdmissionRequest) -> Result<(), ApiError> {
    let name_of = |o: &Value| {
        o.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (policy_name, binding_name) = (name_of(policy), name_of(binding));
    let ignore_errors = policy
        .pointer("/spec/failurePolicy")
        .and_then(Value::as_str)
        == Some("Ignore");
    // The dispatcher wraps its words in `admission.NewForbidden` and then sets the policy's
    // reason and code (kubernetes v1.36.3 `apiserver/pkg/admission/plugin/policy/validating/
    // dispatcher.go`): `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy …`, with
    // the group, resource and name as details, and no causes.
    let resource = if request.group.is_empty() {
        request.resource.to_owned()
    } else {
        format!("{}.{}", request.resource, request.group)
    };
    let target = match request.name {
        "" => request
            .object
            .pointer("/metadata/generateName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or("Unknown"),
        name => name,
    };
    let deny = |denial: Denial| ApiError {
        code: denial.code,
        reason: denial.reason,
        message: format!(
            "{resource} {} is forbidden: ValidatingAdmissionPolicy '{policy_name}' with binding \
             '{binding_name}' denied request: {}",
            super::errors::go_quote(target),
            denial.message
        ),
        details: Some(json!({"name": target, "group": request.group, "kind": request.resource})),
        retry_after: None,
        plain_text: false,
    };
    let mut variables = vec![
        ("object", to_cel(request.object)),
        ("oldObject", request.old.map_or(cel::Value::Null, to_cel)),
        ("request", to_cel(&request_variable(request))),
        ("params", cel::Value::Null),
        (
            "namespaceObject",
            request.namespace_object.map_or(cel::Value::Null, to_cel),
        ),
    ];
    variables.push(("variables", named_variables(policy, &variables)));
    let failed = |source: &str, why: String| Denial {
        message: format!("expression '{source}' resulted in error: {why}"),
        reason: "Invalid",
        code: 422,
    };
    for condition in entries(policy, "matchConditions") {
        let source = text(&condition, "expression");
        match Expression::compile(&source).and_then(|e| e.evaluate_cel(&variables)) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Ok(()),
            Ok(other) => {
                return error_or_skip(
                    ignore_errors,
                    failed(&source, format!("{other:?} is not a bool")),
                    deny,
                );
            }
            Err(why) => return error_or_skip(ignore_errors, failed(&source, why), deny),
        }
    }
    for validation in entries(policy, "validations") {
        let source = text(&validation, "expression");
        match Expression::compile(&source).and_then(|e| e.evaluate_cel(&variables)) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                return Err(deny(validation_denial(&validation, &source, &variables)));
            }
            Ok(other) => error_or_skip(
                ignore_errors,
                failed(&source, format!("{other:?} is not a bool")),
                deny,
            )?,
            Err(why) => error_or_skip(ignore_errors, failed(&source, why), deny)?,
        }
    }
    Ok(())
}

/// An evaluation error denies unless the policy ignores failures.
fn error_or_skip(
    ignore: bool,
    denial: Denial,
    deny: impl Fn(Denial) -> ApiError,
) -> Result<(), ApiError> {
    if ignore { Ok(()) } else { Err(deny(denial)) }
}

/// The message and code of a validation that returned false.
fn validation_denial(validation: &Value, source: &str, variables: &[(&str, cel::Value)]) -> Denial {
    let from_expression = validation
        .get("messageExpression")
        .and_then(Value::as_str)
        .and_then(|m| Expression::compile(m).ok())
        .and_then(|e| match e.evaluate_cel(variables) {
            Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
            _ => None,
        });
    let message = from_expression
        .or_else(|| {
            validation
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("failed expression: {}", source.trim()));
    let (reason, code) = match validation.get("reason").and_then(Value::as_str) {
        Some("Forbidden") => ("Forbidden", 403),
        Some("Unauthorized") => ("Unauthorized", 401),
        Some("RequestEntityTooLarge") => ("RequestEntityTooLarge", 413),
        _ => ("Invalid", 422),
    };
    Denial {
        message,
        reason,
        code,
    }
}

/// `variables.<name>` for every variable that evaluates, each seeing the ones before it.
fn named_variables(policy: &Value, base: &[(&str, cel::Value)]) -> cel::Value {
    let mut named: std::collections::HashMap<Key, cel::Value> = std::collections::HashMap::new();
    for variable in entries(policy, "variables") {
        let (name, source) = (text(&variable, "name"), text(&variable, "expression"));
        let mut scope: Vec<(&str, cel::Value)> = base.to_vec();
        scope.push((
            "variables",
            cel::Value::Map(Map {
                map: Arc::new(named.clone()),
            }),
        ));
        if let Ok(value) = Expression::compile(&source).and_then(|e| e.evaluate_cel(&scope)) {
            named.insert(Key::String(Arc::new(name)), value);
        }
    }
    cel::Value::Map(Map {
        map: Arc::new(named),
    })
}

fn entries(policy: &Value, list: &str) -> Vec<Value> {
    policy
        .pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn text(entry: &Value, field: &str) -> String {
    entry
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Whether a `matchConstraints` / `matchResources` matches; an absent one matches all.
fn matches_resources(spec: Option<&Value>, request: &AdmissionRequest) -> bool {
    let Some(spec) = spec else { return true };
    let rules = |field: &str| {
        spec.get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let included = rules("resourceRules");
    if !included.is_empty() && !included.iter().any(|r| rule_matches(r, request)) {
        return false;
    }
    if rules("excludeResourceRules")
        .iter()
        .any(|r| rule_matches(r, request))
    {
        return false;
    }
    if let Some(selector) = spec.get("objectSelector")
        && !selects(selector, request.object)
    {
        return false;
    }
    match (spec.get("namespaceSelector"), request.namespaced) {
        (Some(selector), true) => request
            .namespace_object
            .is_some_and(|ns| selects(selector, ns)),
        _ => true,
    }
}

/// One `resourceRules` entry against the request (`*`, `plural`, `plural/sub`, `plural/*`,
/// `*/sub`, `*/*`; `scope` `*`, `Cluster` or `Namespaced`).
fn rule_matches(rule: &Value, request: &AdmissionRequest) -> bool {
    let list = |field: &str| -> Vec<String> {
        rule.get(field)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let has = |field: &str, wanted: &str| list(field).iter().any(|v| v == "*" || v == wanted);
    let resource_ok = list("resources").iter().any(|r| {
        let (plural, sub) = r.split_once('/').unwrap_or((r.as_str(), ""));
        let plural_ok = plural == "*" || plural == request.resource;
        let sub_ok = sub == "*" || sub == request.subresource;
        plural_ok && sub_ok
    });
    let scope_ok = match rule.get("scope").and_then(Value::as_str) {
        Some("Cluster") => !request.namespaced,
        Some("Namespaced") => request.namespaced,
        _ => true,
    };
    has("apiGroups", request.group)
        && has("apiVersions", request.version)
        && has("operations", request.operation.name())
        && resource_ok
        && scope_ok
}

/// A label selector (`matchLabels`, `matchExpressions`) against an object's labels; an
/// empty selector selects everything (the server's one reading of a selector object).
fn selects(selector: &Value, object: &Value) -> bool {
    crate::apiserver::controllers_selector(selector, object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": "max-replicas"}, "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "variables": [{"name": "limit", "expression": "5"}],
        "validations": [
            {"expression": "object.spec.replicas <= variables.limit"},
            {"expression": "request.userInfo.username != 'mallory'", "messageExpression": "'no ' + request.userInfo.username", "reason": "Forbidden"}
        ]}}))
    }

    fn binding(actions: &[&str]) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": "max-replicas-binding"},
            "spec": {"policyName": "max-replicas", "validationActions": actions}}))
    }

    fn request<'a>(object: &'a Value, user: &'a RequestUser) -> AdmissionRequest<'a> {
        AdmissionRequest {
            operation: Operation::Create,
            group: "apps",
            version: "v1",
            kind: "Deployment",
            resource: "deployments",
            subresource: "",
            namespaced: true,
            namespace: "default",
            name: "web",
            object,
            old: None,
            namespace_object: None,
            user,
        }
    }

    #[test]
    fn a_false_validation_denies_with_the_upstream_wording() {
        let user = RequestUser::default();
        let big = json!({"metadata": {"name": "web"}, "spec": {"replicas": 7}});
        let error = admit(&[policy()], &[binding(&["Deny"])], &request(&big, &user)).unwrap_err();
        assert_eq!(error.code, 422);
        assert_eq!(
            error.message,
            "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'max-replicas' with binding 'max-replicas-binding' denied request: failed expression: object.spec.replicas <= variables.limit"
        );
        let small = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
        assert!(admit(&[policy()], &[binding(&["Deny"])], &request(&small, &user)).is_ok());
        // Warn alone does not deny.
        assert!(admit(&[policy()], &[binding(&["Warn"])], &request(&big, &user)).is_ok());
    }

    #[test]
    fn the_request_user_and_the_reason_are_seen() {
        let mallory = RequestUser {
            username: "mallory".into(),
            groups: vec![],
        };
        let small = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
        let error = admit(
            &[policy()],
            &[binding(&["Deny"])],
            &request(&small, &mallory),
        )
        .unwrap_err();
        assert_eq!((error.code, error.reason), (403, "Forbidden"));
        assert!(
            error.message.ends_with("denied request: no mallory"),
            "{}",
            error.message
        );
    }

    #[test]
    fn rules_that_do_not_match_leave_the_request_alone() {
        let user = RequestUser::default();
        let big = json!({"metadata": {"name": "web"}, "spec": {"replicas": 7}});
        let mut other = request(&big, &user);
        other.resource = "statefulsets";
        assert!(admit(&[policy()], &[binding(&["Deny"])], &other).is_ok());
        let mut status = request(&big, &user);
        status.subresource = "status";
        assert!(admit(&[policy()], &[binding(&["Deny"])], &status).is_ok());
    }

    #[test]
    fn an_expression_that_does_not_compile_refuses_the_policy() {
        let errors = check_policy(
            &json!({"spec": {"validations": [{"expression": "object.spec.replicas <="}]}}),
        );
        assert_eq!(errors[0].field, "spec.validations[0].expression");
    }
}
