//! What the real API server checks of a write beyond its own metadata rules: custom
//! resources against their CRD version's structural schema (pruning, defaulting, OpenAPI
//! validation, CEL `x-kubernetes-validations`), CRDs' own schemas and rules, and
//! ValidatingAdmissionPolicies.
//!
//! Expected flow: [`CrdSchemas::parse`] when a CRD is registered (kept on its
//! `ResourceType`); [`admit`] once per write, after the store has built the object it is
//! about to commit and before it commits; [`default_on_read`] when an object is served.
//!
//! Guarantees: the pieces are pure functions of (schema, old, new) → defaulted and pruned
//! object or field errors; a failure is the 422 `Invalid` Status of `errors.NewInvalid`.
//!
//! Caveats: see each module (`schema`, `cel`, `admission`).

pub(crate) mod admission;
pub(crate) mod cel;
pub(crate) mod defaults;
pub(crate) mod errors;
pub(crate) mod rules;
pub(crate) mod schema;

use std::sync::Arc;

use serde_json::Value;

use self::errors::{ErrorType, FieldError};
use self::schema::{CrdSchemas, Schema};
use super::auth::node::{self, NodeWrite, WriteOperation};
use super::errors::{ApiError, ApiResult};
use super::kinds::ResourceType;
use super::objects::meta_str;

/// Whether a type is the CRD kind itself.
fn is_crd(ty: &ResourceType) -> bool {
    ty.group == "apiextensions.k8s.io" && ty.plural == "customresourcedefinitions"
}

/// The stored objects a write is admitted against besides itself.
#[derive(Debug, Default)]
pub(crate) struct Surroundings {
    /// Every ValidatingAdmissionPolicy.
    pub policies: Vec<Arc<Value>>,
    /// Every ValidatingAdmissionPolicyBinding.
    pub bindings: Vec<Arc<Value>>,
    /// The Namespace of a namespaced object.
    pub namespace: Option<Arc<Value>>,
}

/// Checks a write about to be committed: `object` is the whole new object (pruned and
/// defaulted in place), `old` the stored one on update, `subresource` `status` for a write
/// through the status subresource. Schema checks come first, then admission policies (the
/// real server validates in the strategy, then runs validating admission).
pub(crate) fn admit(
    ty: &ResourceType,
    version: &str,
    subresource: &str,
    old: Option<&Value>,
    object: &mut Value,
    around: &Surroundings,
) -> ApiResult<()> {
    let name = meta_str(object, "name").unwrap_or_default().to_owned();
    if ty.schemas.is_none() {
        defaults::apply(&ty.group, &ty.plural, object);
    }
    let found = if is_crd(ty) {
        CrdSchemas::parse(object).err().into_iter().collect()
    } else if ty.group == admission::GROUP && ty.plural == "validatingadmissionpolicies" {
        admission::check_policy(object)
    } else if let Some(schema) = ty.schemas.as_ref().and_then(|s| s.version(version)) {
        check_custom_resource(schema, old, object)
    } else {
        Vec::new()
    };
    if !found.is_empty() {
        return Err(errors::invalid(&ty.group, &ty.kind, &name, &found));
    }
    let user = admission::current_user();
    restrict_node(
        &user,
        &NodeWrite {
            operation: if old.is_some() {
                WriteOperation::Update
            } else {
                WriteOperation::Create
            },
            group: &ty.group,
            resource: &ty.plural,
            subresource,
            object: Some(object),
            old,
        },
        &name,
    )?;
    if around.bindings.is_empty() {
        return Ok(());
    }
    let request = admission::AdmissionRequest {
        operation: if old.is_some() {
            admission::Operation::Update
        } else {
            admission::Operation::Create
        },
        group: &ty.group,
        version,
        kind: &ty.kind,
        resource: &ty.plural,
        subresource,
        namespaced: ty.namespaced,
        namespace: meta_str(object, "namespace").unwrap_or_default(),
        name: &name,
        object,
        old,
        namespace_object: around.namespace.as_deref(),
        user: &user,
    };
    admission::admit(&around.policies, &around.bindings, &request)
}

/// The NodeRestriction admission plugin, for a kubelet's write (any other caller passes):
/// 403 `Forbidden` as the real plugin answers.
pub(crate) fn restrict_node(
    user: &admission::RequestUser,
    write: &NodeWrite,
    name: &str,
) -> ApiResult<()> {
    let Some(node) = node::node_name(&user.username, &user.groups) else {
        return Ok(());
    };
    node::restrict(node, write)
        .map_err(|why| ApiError::forbidden(write.group, write.resource, name, &why))
}

/// NodeRestriction on a delete (or an eviction: `subresource` `eviction`) of `old`, by the
/// caller this thread serves.
pub(crate) fn restrict_node_delete(
    group: &str,
    resource: &str,
    subresource: &str,
    old: &Value,
    name: &str,
) -> ApiResult<()> {
    restrict_node(
        &admission::current_user(),
        &NodeWrite {
            operation: WriteOperation::Delete,
            group,
            resource,
            subresource,
            object: None,
            old: Some(old),
        },
        name,
    )
}

/// Prunes, defaults, validates against the schema and then evaluates the CEL rules, unless
/// the schema found a blocking error (apiextensions-apiserver's `customResourceStrategy`:
/// a missing, unsupported, too long, too many or wrongly typed value skips CEL, and the
/// skip is told as one more error at `<nil>`, on a CRD that has rules; other schema errors,
/// such as a pattern, do not stop CEL).
pub fn check_custom_resource(
    schema: &Schema,
    old: Option<&Value>,
    object: &mut Value,
) -> Vec<FieldError> {
    schema.prune(object, true);
    schema.default_values(object);
    let mut found = Vec::new();
    schema.validate_update(object, old, "", &mut found);
    if !schema.has_rules {
        return found;
    }
    let blocking = found.iter().any(|e| {
        matches!(
            e.kind,
            ErrorType::NotSupported
                | ErrorType::Required
                | ErrorType::TooLong
                | ErrorType::TooMany
                | ErrorType::TypeInvalid
        )
    });
    if blocking {
        found.push(FieldError::new(
            ErrorType::Invalid,
            "<nil>",
            Value::Null,
            "some validation rules were not checked because the object was invalid; correct \
             the existing errors to complete validation",
        ));
    } else {
        rules::validate(schema, object, old, "", &mut found);
    }
    found
}

/// Applies the schema's defaults to an object read from storage (the real server defaults on
/// read too, so a default added to a CRD shows on objects stored before).
pub(crate) fn default_on_read(ty: &ResourceType, version: &str, object: &mut Value) {
    if let Some(schema) = ty.schemas.as_ref().and_then(|s| s.version(version)) {
        schema.default_values(object);
    }
}
