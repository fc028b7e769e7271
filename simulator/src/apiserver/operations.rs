//! Patch, on top of the store's write rules.

use serde_json::{Value, json};

use super::apply::{self, ApplyRequest};
use super::errors::{ApiError, ApiResult};
use super::kinds::ResourceType;
use super::objects::meta_str;
use super::patch::{JsonPatchError, json_patch, merge_patch, strategic_merge};
use super::store::Store;
use super::validation::admission::RequestUser;

/// The four patch types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json`.
    Merge,
    /// `application/json-patch+json`.
    Json,
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply {
        /// The `fieldManager`.
        manager: String,
        /// `force=true`.
        force: bool,
    },
}

impl PatchKind {
    /// The patch type of a Content-Type header.
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/json-patch+json" => Some(PatchKind::Json),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchKind::Apply {
                    manager: String::new(),
                    force: false,
                })
            }
            _ => None,
        }
    }
}

/// Patches an object (or its status). The read, the patch and the write happen under one
/// lock, so a patch without a resourceVersion never fails with a conflict (the API server
/// retries those internally).
#[allow(clippy::too_many_arguments)]
pub fn patch(
    store: &Store,
    caller: &RequestUser,
    ty: &ResourceType,
    version: &str,
    namespace: &str,
    name: &str,
    kind: &PatchKind,
    body: &Value,
    status: bool,
    updater: &str,
    dry_run: bool,
) -> ApiResult<Value> {
    if matches!(kind, PatchKind::Strategic) && ty.custom {
        // The patch types a custom resource takes (kube-apiserver v1.36.3's words).
        return Err(ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        ));
    }
    if !body.is_object() && !matches!(kind, PatchKind::Json) {
        return Err(ApiError::bad_request("the patch must be a JSON object"));
    }
    let mut inner = store.lock();
    let key = Store::key(ty, namespace, name);
    let Some(stored) = inner.objects.get(&key).map(|v| Value::clone(v)) else {
        let PatchKind::Apply { manager, .. } = kind else {
            return Err(ApiError::not_found(&ty.group, &ty.plural, name));
        };
        let mut object = body.clone();
        apply::record_apply(
            &mut object,
            manager,
            &ty.api_version(version),
            &apply::fields_of(ty, body),
            None,
        );
        if meta_str(&object, "name").is_none() {
            object["metadata"]["name"] = json!(name);
        }
        let created =
            store.create_locked(&mut inner, caller, ty, version, namespace, object, dry_run)?;
        if !dry_run {
            store.settle(&mut inner, ty, namespace);
        }
        return Ok(created);
    };
    let current = Store::present(ty, version, &stored);
    let mut next = match kind {
        PatchKind::Merge => {
            let mut next = current.clone();
            merge_patch(&mut next, body);
            next
        }
        PatchKind::Json => json_patch(&current, body).map_err(|error| match error {
            JsonPatchError::Malformed(message) => ApiError::bad_request(message),
            JsonPatchError::Unprocessable(_) => ApiError::json_patch_refused(),
        })?,
        PatchKind::Strategic => {
            let mut next = current.clone();
            strategic_merge(&mut next, body, &ty.plural).map_err(ApiError::bad_request)?;
            next
        }
        PatchKind::Apply { manager, force } => apply::apply(
            ty,
            version,
            &current,
            body,
            &ApplyRequest {
                manager,
                force: *force,
            },
        )?,
    };
    if !matches!(kind, PatchKind::Apply { .. }) {
        apply::record_update(ty, version, &current, &mut next, updater);
    }
    // A resourceVersion in a merge or strategic patch is a precondition.
    if let Some(rv) = (!matches!(kind, PatchKind::Json))
        .then(|| {
            body.pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
        })
        .flatten()
        && Some(rv) != meta_str(&stored, "resourceVersion")
    {
        return Err(ApiError::stale(&ty.group, &ty.plural, name));
    }
    let next = Store::stored_shape(ty, next);
    let result = store.write(
        &mut inner, caller, ty, version, &key, stored, next, status, dry_run,
    )?;
    if !dry_run {
        store.settle(&mut inner, ty, namespace);
    }
    Ok(result)
}

/// What a write to a subresource that takes whole objects (`/scale`, `/approval`) carries.
#[derive(Debug, Clone)]
pub(crate) enum SubresourceWrite {
    /// PUT: the whole object.
    Replace(Value),
    /// PATCH: a merge or JSON patch of the current object.
    Patch(PatchKind, Value),
}

impl SubresourceWrite {
    /// The object the write asks for, given the current one.
    pub(crate) fn proposed(&self, current: &Value) -> ApiResult<Value> {
        match self {
            SubresourceWrite::Replace(object) => Ok(object.clone()),
            SubresourceWrite::Patch(PatchKind::Merge, patch) => {
                let mut next = current.clone();
                merge_patch(&mut next, patch);
                Ok(next)
            }
            SubresourceWrite::Patch(PatchKind::Json, patch) => {
                json_patch(current, patch).map_err(|error| match error {
                    JsonPatchError::Malformed(message) => ApiError::bad_request(message),
                    JsonPatchError::Unprocessable(_) => ApiError::json_patch_refused(),
                })
            }
            SubresourceWrite::Patch(other, _) => Err(ApiError::unsupported_media_type(&format!(
                "{other:?} (this subresource takes merge and JSON patches)"
            ))),
        }
    }
}
