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
pub(crate) mod schema;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use self::errors::FieldError;
use self::schema::Schema;
use super::errors::ApiResult;
use super::kinds::ResourceType;
use super::objects::meta_str;

/// The structural schemas of a CRD's versions.
#[derive(Debug)]
pub struct CrdSchemas {
    versions: BTreeMap<String, Schema>,
    /// The `spec.versions` they were parsed from (what equality compares).
    source: Value,
}

impl PartialEq for CrdSchemas {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for CrdSchemas {}

impl CrdSchemas {
    /// Parses (and compiles the rules of) every version's `schema.openAPIV3Schema`; None
    /// when no version has one.
    pub fn parse(crd: &Value) -> Result<Option<Arc<CrdSchemas>>, FieldError> {
        let Some(versions) = crd.pointer("/spec/versions").and_then(Value::as_array) else {
            return Ok(None);
        };
        let mut parsed = BTreeMap::new();
        for (i, version) in versions.iter().enumerate() {
            let (Some(name), Some(node)) = (
                version.get("name").and_then(Value::as_str),
                version.pointer("/schema/openAPIV3Schema"),
            ) else {
                continue;
            };
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            parsed.insert(name.to_owned(), Schema::parse(node, &path)?);
        }
        Ok((!parsed.is_empty()).then(|| {
            Arc::new(CrdSchemas {
                versions: parsed,
                source: Value::Array(versions.clone()),
            })
        }))
    }

    /// The schema of one version.
    pub fn version(&self, version: &str) -> Option<&Schema> {
        self.versions.get(version)
    }
}

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
        cel::validate(schema, object, old, "", &mut found);
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
