//! What the real API server checks of a write beyond its own metadata rules: custom
//! resources against their CRD version's structural schema (pruning, defaulting, OpenAPI
//! validation, CEL `x-kubernetes-validations`), CRDs' own schemas and rules, and
//! ValidatingAdmissionPolicies.
//!
//! Expected flow: [`schema::CrdSchemas::parse`] when a CRD is registered (kept on its
//! `ResourceType`); the store's `admit` once per write, after it has built the object it is
//! about to commit and before it commits (schema checks here, then [`admission`]); the
//! store's `default_on_read` when an object is served. Nothing here knows the store's
//! kinds: the store asks, this module answers.
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

use serde_json::Value;

use self::errors::{ErrorType, FieldError};
use self::schema::Schema;
use super::auth::node::{self, NodeWrite, WriteOperation};
use super::errors::{ApiError, ApiResult};

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

/// NodeRestriction on a delete (or an eviction: `subresource` `eviction`) of `old`, by
/// `user`.
pub(crate) fn restrict_node_delete(
    user: &admission::RequestUser,
    group: &str,
    resource: &str,
    subresource: &str,
    old: &Value,
    name: &str,
) -> ApiResult<()> {
    restrict_node(
        user,
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
