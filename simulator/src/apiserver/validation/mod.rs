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

pub(crate) mod cel;
pub(crate) mod errors;
pub(crate) mod rules;
pub(crate) mod schema;

use serde_json::Value;

use self::errors::FieldError;
use self::schema::{CrdSchemas, Schema};
use super::errors::ApiResult;
use super::kinds::ResourceType;
use super::objects::meta_str;

/// Whether a type is the CRD kind itself.
fn is_crd(ty: &ResourceType) -> bool {
    ty.group == "apiextensions.k8s.io" && ty.plural == "customresourcedefinitions"
}

/// Checks a write about to be committed: `object` is the whole new object (pruned and
/// defaulted in place), `old` the stored one on update.
pub(crate) fn admit(
    ty: &ResourceType,
    version: &str,
    old: Option<&Value>,
    object: &mut Value,
) -> ApiResult<()> {
    let name = meta_str(object, "name").unwrap_or_default().to_owned();
    if is_crd(ty) {
        return CrdSchemas::parse(object)
            .map(|_| ())
            .map_err(|error| errors::invalid(&ty.group, &ty.kind, &name, &[error]));
    }
    let Some(schema) = ty.schemas.as_ref().and_then(|s| s.version(version)) else {
        return Ok(());
    };
    let found = check_custom_resource(schema, old, object);
    if found.is_empty() {
        Ok(())
    } else {
        Err(errors::invalid(&ty.group, &ty.kind, &name, &found))
    }
}

/// Prunes, defaults, validates against the schema and then, if that passed, evaluates the
/// CEL rules (the order of apiextensions-apiserver's decoder and strategy, which skips CEL
/// after a schema error).
pub fn check_custom_resource(
    schema: &Schema,
    old: Option<&Value>,
    object: &mut Value,
) -> Vec<FieldError> {
    schema.prune(object, true);
    schema.default_values(object);
    let mut found = Vec::new();
    schema.validate(object, "", &mut found);
    if found.is_empty() {
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
