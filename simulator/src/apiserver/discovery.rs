//! Discovery: API groups, versions and resources, and the minimal OpenAPI v3 documents
//! kubectl reads.

use serde_json::{Value, json};

use super::ServerState;
use super::apiservices::group_priority;
use super::errors::{ApiError, ApiResult};
use super::kinds::api_resources;
use super::negotiate::DiscoveryVersion;

/// The named groups in the API server's order: by group priority (highest first), then by
/// name.
fn ordered_groups(state: &ServerState) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> =
        state.store.registry().groups().into_iter().collect();
    // The review groups hold no stored objects: they are served apart, but discovered alike.
    groups.extend(super::reviews::GROUPS.iter().map(|group| {
        (
            (*group).to_owned(),
            vec![super::reviews::VERSION.to_owned()],
        )
    }));
    groups.sort_by(|(a, _), (b, _)| group_priority(b).cmp(&group_priority(a)).then(a.cmp(b)));
    groups
}

pub(crate) fn group_list(state: &ServerState) -> Value {
    let groups: Vec<Value> = ordered_groups(state)
        .into_iter()
        .map(|(group, versions)| group_json(&group, &versions))
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
    if super::reviews::owns(group) {
        return super::reviews::resource_list(group);
    }
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

/// Which document of aggregated discovery: `/api` (the core group) or `/apis` (the others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiscoveryRoot {
    /// `/api`: the core group, named "".
    Core,
    /// `/apis`: every named group.
    Groups,
}

/// The `APIGroupDiscoveryList` of `/api` or `/apis`: every group with its versions (the
/// preferred one first) and their resources. It is built from the same resource lists as the
/// legacy documents, so both kinds of discovery always agree.
pub(crate) fn aggregated(
    state: &ServerState,
    root: DiscoveryRoot,
    version: DiscoveryVersion,
) -> Value {
    let groups = match root {
        DiscoveryRoot::Core => vec![(String::new(), vec!["v1".to_owned()])],
        DiscoveryRoot::Groups => ordered_groups(state),
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let legacy = resource_list(state, group, v);
                    let entries = legacy["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
                    json!({"version": v, "resources": aggregated_resources(group, v, entries), "freshness": "Current"})
                })
                .collect();
            // The core group's name is empty, which the real server omits.
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = json!(group);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{}", version.as_str()),
        "metadata": {},
        "items": items,
    })
}

/// The aggregated form of a legacy resource list: each resource with its subresources
/// (`pods/status`, `pods/eviction`) nested under it.
fn aggregated_resources(group: &str, version: &str, entries: &[Value]) -> Vec<Value> {
    let response_kind = |entry: &Value| {
        json!({
            "group": entry.get("group").and_then(Value::as_str).unwrap_or(group),
            "version": entry.get("version").and_then(Value::as_str).unwrap_or(version),
            "kind": entry["kind"],
        })
    };
    let mut resources: Vec<Value> = Vec::new();
    for entry in entries {
        let name = entry["name"].as_str().unwrap_or_default();
        match name.split_once('/') {
            None => {
                let mut resource = json!({
                    "resource": name,
                    "responseKind": response_kind(entry),
                    "scope": if entry["namespaced"] == true { "Namespaced" } else { "Cluster" },
                    "singularResource": entry["singularName"],
                    "verbs": entry["verbs"],
                    "subresources": [],
                });
                for list in ["shortNames", "categories"] {
                    if entry[list].as_array().is_some_and(|l| !l.is_empty()) {
                        resource[list] = entry[list].clone();
                    }
                }
                resources.push(resource);
            }
            Some((parent, subresource)) => {
                let sub = json!({"subresource": subresource, "responseKind": response_kind(entry), "verbs": entry["verbs"]});
                if let Some(list) = resources
                    .iter_mut()
                    .find(|r| r["resource"] == parent)
                    .and_then(|r| r["subresources"].as_array_mut())
                {
                    list.push(sub);
                }
            }
        }
    }
    // The real server omits an empty list of subresources.
    for resource in &mut resources {
        if let Some(object) = resource.as_object_mut()
            && object["subresources"].as_array().is_some_and(Vec::is_empty)
        {
            object.remove("subresources");
        }
    }
    resources
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
