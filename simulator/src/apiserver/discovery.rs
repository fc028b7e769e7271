//! Discovery: API groups, versions and resources, and the minimal OpenAPI v3 documents
//! kubectl reads.

use serde_json::{Value, json};

use super::ServerState;
use super::errors::{ApiError, ApiResult};
use super::kinds::api_resources;

pub(crate) fn group_list(state: &ServerState) -> Value {
    let groups: Vec<Value> = state
        .store
        .registry()
        .groups()
        .into_iter()
        .map(|(group, versions)| group_json(&group, &versions))
        .chain(super::reviews::groups())
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": versions, "preferredVersion": versions.first().cloned().unwrap_or_default()})
}

pub(crate) fn group_document(state: &ServerState, group: &str) -> ApiResult<Value> {
    state
        .store
        .registry()
        .groups()
        .get(group)
        .map(|versions| group_json(group, versions))
        .ok_or_else(|| ApiError::no_route(&format!("/apis/{group}")))
}

pub(crate) fn resource_list(state: &ServerState, group: &str, version: &str) -> Value {
    let registry = state.store.registry();
    let resources: Vec<Value> = registry
        .all()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
        .flat_map(|t| api_resources(t))
        .collect();
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// The OpenAPI v3 discovery document: one entry per group-version.
pub(crate) fn openapi_root(state: &ServerState) -> Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": format!("/openapi/v3/api/v1?hash={}", state.store.revision())}),
    );
    for (group, versions) in state.store.registry().groups() {
        for version in versions {
            paths.insert(format!("apis/{group}/{version}"), json!({"serverRelativeURL": format!("/openapi/v3/apis/{group}/{version}?hash={}", state.store.revision())}));
        }
    }
    json!({"paths": paths})
}

/// A minimal OpenAPI v3 document of a group-version: the PATCH operation of every resource,
/// with its group-version-kind and the query parameters the server honours, which is what
/// kubectl reads to decide on server-side field validation. Schemas are not published (this
/// simulator does not validate fields against schemas).
pub(crate) fn openapi_document(state: &ServerState, group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    let parameters = json!(["dryRun", "fieldManager", "fieldValidation", "force"].iter().map(|name| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})).collect::<Vec<_>>());
    for ty in state
        .store
        .registry()
        .all()
        .filter(|t| t.group == group && t.versions.iter().any(|v| v == version))
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if ty.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", ty.plural)
        } else {
            format!("{prefix}/{}/{{name}}", ty.plural)
        };
        paths.insert(path, json!({"patch": {
            "operationId": format!("patch{}", ty.kind),
            "parameters": parameters,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": ty.group, "version": version, "kind": ty.kind},
        }}));
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths, "components": {"schemas": {}}})
}
