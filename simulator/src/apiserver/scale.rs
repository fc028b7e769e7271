//! The `scale` subresource of custom resources whose CRD declares one: an `autoscaling/v1`
//! `Scale` read from, and written to, the paths the CRD names.
//!
//! Expected flow: read the object → build its Scale ([`scale_of`], pure) → for a write, patch
//! or replace the Scale, take its `spec.replicas` ([`replicas_of`], pure) and set it at the
//! spec path ([`with_replicas`], pure) → write the object under the store's rules.
//!
//! Guarantees (as the real API server's custom resource scale handler): missing replicas read
//! as 0; only `spec.replicas` is written (the status and the selector are the controller's);
//! negative replicas are 422; a `metadata.resourceVersion` in the Scale is a precondition
//! (409 when stale); the object's generation moves as for any spec change.
//!
//! Caveats: merge and JSON patches only (strategic merge is refused for custom resources as
//! elsewhere, and server-side apply on `/scale` is refused with 415).

use serde_json::{Value, json};

use super::apply;
use super::errors::{ApiError, ApiResult};
use super::kinds::{ResourceType, ScalePaths};
use super::objects::meta_str;
use super::operations::SubresourceWrite;
use super::store::Store;
use super::validation::admission::RequestUser;

fn at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(object, |value, step| value.get(step))
}

fn paths(ty: &ResourceType, path: &str) -> ApiResult<ScalePaths> {
    ty.scale.clone().ok_or_else(|| ApiError::no_route(path))
}

/// The Scale of an object.
pub(crate) fn scale_of(paths: &ScalePaths, namespaced: bool, object: &Value) -> Value {
    let replicas = |path: &[String]| at(object, path).and_then(Value::as_i64).unwrap_or(0);
    let mut metadata = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = object.pointer(&format!("/metadata/{field}")) {
            metadata[field] = value.clone();
        }
    }
    if !namespaced && let Some(map) = metadata.as_object_mut() {
        map.remove("namespace");
    }
    // autoscaling/v1 omits a zero spec.replicas and an empty selector.
    let mut spec = json!({});
    let wanted = replicas(&paths.spec_replicas);
    if wanted != 0 {
        spec["replicas"] = json!(wanted);
    }
    let mut status = json!({"replicas": replicas(&paths.status_replicas)});
    if let Some(selector) = paths
        .label_selector
        .as_ref()
        .and_then(|path| at(object, path))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        status["selector"] = json!(selector);
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata, "spec": spec, "status": status})
}

/// The replicas a Scale asks for (0 when absent), refusing what the API server refuses.
pub(crate) fn replicas_of(scale: &Value, name: &str) -> ApiResult<i64> {
    let invalid = |message: String| {
        ApiError::invalid("autoscaling", "Scale", name, &[("spec.replicas", message)])
    };
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(value) => match value.as_i64() {
            Some(n) if n < 0 => Err(invalid(format!(
                "Invalid value: {n}: must be greater than or equal to 0"
            ))),
            Some(n) if n > i64::from(i32::MAX) => Err(invalid(format!(
                "Invalid value: {n}: must be a 32-bit integer"
            ))),
            Some(n) => Ok(n),
            None => Err(ApiError::bad_request(format!(
                "Scale.spec.replicas: expected an integer, got {value}"
            ))),
        },
    }
}

/// The object with `replicas` at the spec path (intermediate objects created).
pub(crate) fn with_replicas(object: &Value, path: &[String], replicas: i64) -> Value {
    let mut next = object.clone();
    let mut cursor = &mut next;
    for step in path {
        if !cursor.is_object() {
            *cursor = json!({});
        }
        cursor = &mut cursor[step.as_str()];
    }
    *cursor = json!(replicas);
    next
}

/// The object whose `/scale` a request names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScaleTarget<'a> {
    /// Its type (a custom resource with a scale subresource).
    pub ty: &'a ResourceType,
    /// The version served.
    pub version: &'a str,
    /// Its namespace ("" when cluster-scoped).
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The request's path (for a 404 when the type has no scale subresource).
    pub path: &'a str,
}

/// `GET …/scale`.
pub(crate) fn get_scale(store: &Store, target: ScaleTarget<'_>) -> ApiResult<Value> {
    let ty = target.ty;
    let paths = paths(ty, target.path)?;
    let object = store.get(ty, target.version, target.namespace, target.name)?;
    Ok(scale_of(&paths, ty.namespaced, &object))
}

/// `PUT` or `PATCH …/scale`: sets the spec replicas and answers the new Scale.
pub(crate) fn write_scale(
    store: &Store,
    caller: &RequestUser,
    target: ScaleTarget<'_>,
    write: &SubresourceWrite,
    updater: &str,
    dry_run: bool,
) -> ApiResult<Value> {
    let ScaleTarget {
        ty,
        version,
        namespace,
        name,
        path,
    } = target;
    let paths = paths(ty, path)?;
    let mut inner = store.lock();
    let key = Store::key(ty, namespace, name);
    let stored = inner
        .objects
        .get(&key)
        .map(|v| Value::clone(v))
        .ok_or_else(|| ApiError::not_found(&ty.group, &ty.plural, name))?;
    let current = Store::present(ty, version, &stored);
    let scale = write.proposed(&scale_of(&paths, ty.namespaced, &current))?;
    if let Some(expected) = meta_str(&scale, "resourceVersion").filter(|rv| !rv.is_empty())
        && Some(expected) != meta_str(&stored, "resourceVersion")
    {
        return Err(ApiError::stale(&ty.group, &ty.plural, name));
    }
    let mut next = with_replicas(&current, &paths.spec_replicas, replicas_of(&scale, name)?);
    apply::record_update(ty, version, &current, &mut next, updater);
    let written = store.write(
        &mut inner, caller, ty, version, &key, stored, next, false, dry_run,
    )?;
    if !dry_run {
        store.settle(&mut inner, ty, namespace);
    }
    Ok(scale_of(&paths, ty.namespaced, &written))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> ScalePaths {
        let steps = |p: &str| p.split('.').map(str::to_owned).collect::<Vec<_>>();
        ScalePaths {
            spec_replicas: steps("spec.size"),
            status_replicas: steps("status.ready"),
            label_selector: Some(steps("status.selector")),
        }
    }

    #[test]
    fn a_scale_reads_the_crds_paths_and_omits_zero_and_empty() {
        let object = json!({"metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7", "labels": {"x": "y"}}, "spec": {"size": 3}, "status": {"ready": 2, "selector": "app=a"}});
        assert_eq!(
            scale_of(&paths(), true, &object),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "7"}, "spec": {"replicas": 3}, "status": {"replicas": 2, "selector": "app=a"}})
        );
        let bare = scale_of(&paths(), false, &json!({"metadata": {"name": "a"}}));
        assert_eq!(bare["spec"], json!({}));
        assert_eq!(bare["status"], json!({"replicas": 0}));
    }

    #[test]
    fn replicas_are_validated_and_written_at_the_spec_path() {
        assert_eq!(replicas_of(&json!({"spec": {"replicas": 4}}), "a"), Ok(4));
        assert_eq!(replicas_of(&json!({"spec": {}}), "a"), Ok(0));
        assert_eq!(
            replicas_of(&json!({"spec": {"replicas": -1}}), "a").map_err(|e| e.code),
            Err(422)
        );
        assert_eq!(
            replicas_of(&json!({"spec": {"replicas": "x"}}), "a").map_err(|e| e.code),
            Err(400)
        );
        let written = with_replicas(&json!({"metadata": {}}), &paths().spec_replicas, 5);
        assert_eq!(written["spec"]["size"], 5);
    }
}
