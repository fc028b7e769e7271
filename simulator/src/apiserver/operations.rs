//! Patch and eviction, on top of the store's write rules.

use serde_json::{Value, json};

use super::apply::{self, ApplyRequest};
use super::errors::{ApiError, ApiResult};
use super::kinds::ResourceType;
use super::objects::meta_str;
use super::patch::{JsonPatchError, json_patch, merge_patch, strategic_merge};
use super::store::{DeleteOptions, Store};

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
        return Err(ApiError::unsupported_media_type(
            "application/strategic-merge-patch+json (not supported for custom resources)",
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
        let created = store.create_locked(&mut inner, ty, version, namespace, object, dry_run)?;
        if !dry_run {
            super::controllers::after_write(store, &mut inner, ty, namespace);
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
            JsonPatchError::Unprocessable(message) => {
                ApiError::invalid(&ty.group, &ty.kind, name, &[("", message)])
            }
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
    let result = store.write(&mut inner, ty, version, &key, stored, next, status, dry_run)?;
    if !dry_run {
        super::controllers::after_write(store, &mut inner, ty, namespace);
    }
    Ok(result)
}

/// `POST pods/{name}/eviction`.
pub fn evict(store: &Store, namespace: &str, name: &str, body: &Value) -> ApiResult<()> {
    let dry_run = body
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|d| d == "All"));
    let grace = body
        .pointer("/deleteOptions/gracePeriodSeconds")
        .and_then(Value::as_i64);
    let mut inner = store.lock();
    let registry = inner.registry.clone();
    let pods = registry
        .get("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let key = super::store::ObjectKey {
        group: String::new(),
        plural: "pods".into(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    };
    let pod = inner
        .objects
        .get(&key)
        .cloned()
        .ok_or_else(|| ApiError::not_found("", "pods", name))?;
    let terminal = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    let terminating = pod.pointer("/metadata/deletionTimestamp").is_some();
    if !terminal && !terminating {
        let pdbs: Vec<(super::store::ObjectKey, Value)> = inner
            .objects
            .iter()
            .filter(|(k, _)| {
                k.group == "policy"
                    && k.plural == "poddisruptionbudgets"
                    && k.namespace == namespace
            })
            .filter(|(_, pdb)| {
                pdb.pointer("/spec/selector")
                    .is_some_and(|s| !s.is_null() && super::controllers::selector_matches(s, &pod))
            })
            .map(|(k, v)| (k.clone(), Value::clone(v)))
            .collect();
        if pdbs.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some((pdb_key, pdb)) = pdbs.into_iter().next() {
            let status = super::controllers::pdb_status(&inner, namespace, &pdb);
            let allowed = status
                .get("disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if allowed <= 0 {
                // No Retry-After, as the real eviction handler (client-go would otherwise retry
                // the request by itself instead of reporting the refusal).
                let mut error = ApiError::too_many_requests(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    None,
                );
                error.details = Some(
                    json!({"causes": [{"reason": "DisruptionBudget", "message": format!("The disruption budget {} needs {} healthy pods and has {} currently", pdb_key.name, status["desiredHealthy"], status["currentHealthy"])}]}),
                );
                return Err(error);
            }
            if dry_run {
                return Ok(());
            }
            let mut next = pdb.clone();
            let mut new_status = status;
            new_status["disruptionsAllowed"] = json!(allowed - 1);
            let now = super::time::format_time(store.wall_time());
            new_status["disruptedPods"][name] = json!(now);
            next["status"] = new_status;
            store.commit(
                &mut inner,
                pdb_key,
                Some(next),
                super::store::EventType::Modified,
            );
        }
    }
    if dry_run {
        return Ok(());
    }
    let options = DeleteOptions {
        grace_period_seconds: grace,
        ..DeleteOptions::default()
    };
    store.delete_locked(&mut inner, &pods, "v1", namespace, name, &options)?;
    // The disruption controller notices the deletion: a pod that is gone leaves the PDB's
    // disrupted list.
    super::controllers::after_write(store, &mut inner, &pods, namespace);
    Ok(())
}
