//! The store's admission of a write and its defaulting on read: the checks of
//! [`crate::apiserver::validation`] applied to a kind the store serves ([`ResourceType`]).
//! Kept beside the store so that validation knows nothing of the store's kinds (the kinds
//! hold the CRD schemas validation parses: the one direction between them).

use std::sync::Arc;

use serde_json::Value;

use crate::apiserver::auth::node::{NodeWrite, WriteOperation};
use crate::apiserver::errors::ApiResult;
use crate::apiserver::kinds::ResourceType;
use crate::apiserver::objects::meta_str;
use crate::apiserver::validation::schema::CrdSchemas;
use crate::apiserver::validation::{
    admission, check_custom_resource, defaults, errors, restrict_node,
};

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
    user: &admission::RequestUser,
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
    restrict_node(
        user,
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
        user,
    };
    admission::admit(&around.policies, &around.bindings, &request)
}

/// Applies the schema's defaults to an object read from storage (the real server defaults on
/// read too, so a default added to a CRD shows on objects stored before).
pub(crate) fn default_on_read(ty: &ResourceType, version: &str, object: &mut Value) {
    if let Some(schema) = ty.schemas.as_ref().and_then(|s| s.version(version)) {
        schema.default_values(object);
    }
}
