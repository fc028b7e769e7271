//! A request's method, path and query mapped to the authorizer's attributes, as the real
//! server's `RequestInfoFactory` (`staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`
//! of kubernetes/kubernetes) does, and the message of a refusal
//! (`responsewriters/errors.go`, `forbiddenMessage`).
//!
//! Expected flow: [`attributes`] of each request → the authorizer → on a denial,
//! [`forbidden`] builds the 403 Status.
//!
//! Guarantees: paths outside `/api/v1/…` and `/apis/<group>/<version>/…` are non-resource
//! requests whose verb is the lower-case method; GET of a collection is `list`, or `watch`
//! with `?watch=true` or under `/watch/`; DELETE of a collection is `deletecollection`;
//! `namespaces/<ns>/<resource>…` sets the namespace; a third part is the subresource;
//! a list with `fieldSelector=metadata.name=<x>` names `<x>` (so `resourceNames` can allow it).
//!
//! Caveats: `proxy` paths are not served by the simulator, so they are not special-cased.

use std::collections::HashMap;

use serde_json::json;

use super::rbac::{Attributes, ResourceAttributes};
use crate::apiserver::errors::ApiError;

/// The attributes of a request.
pub fn attributes(method: &str, path: &str, query: &HashMap<String, String>) -> Attributes {
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let non_resource = || Attributes::non_resource(&method.to_ascii_lowercase(), path);
    let (group, rest) = match parts.as_slice() {
        ["api", rest @ ..] if rest.len() >= 2 => ("", rest),
        ["apis", group, rest @ ..] if rest.len() >= 2 => (*group, rest),
        _ => return non_resource(),
    };
    let (version, mut rest) = (rest[0], &rest[1..]);
    let mut verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    if rest.first() == Some(&"watch") && rest.len() >= 2 {
        verb = "watch";
        rest = &rest[1..];
    }
    let mut namespace = "";
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = rest[1];
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    let field = |i: usize| rest.get(i).copied().unwrap_or_default().to_owned();
    let mut info = ResourceAttributes {
        group: group.to_owned(),
        version: version.to_owned(),
        resource: field(0),
        name: field(1),
        subresource: field(2),
        namespace: namespace.to_owned(),
    };
    if info.name.is_empty() && verb == "get" {
        let watching = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        verb = if watching { "watch" } else { "list" };
    }
    if info.name.is_empty() && matches!(verb, "list" | "watch") {
        info.name = named_by_field_selector(query).unwrap_or_default();
    }
    if info.name.is_empty() && verb == "delete" {
        verb = "deletecollection";
    }
    Attributes::resource(verb, info)
}

/// The name a `metadata.name=<x>` (or `==`) field selector pins, if it is the only term.
fn named_by_field_selector(query: &HashMap<String, String>) -> Option<String> {
    let selector = query.get("fieldSelector")?;
    if selector.contains(',') {
        return None;
    }
    let name = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    (!name.is_empty() && !name.contains('/')).then(|| name.to_owned())
}

/// The refusal of a request to `username`, with `reason` (the authorizer's, may be empty)
/// appended: 403 `Forbidden`, `details` naming the resource and object, and the real
/// server's message.
pub fn forbidden(username: &str, attributes: &Attributes, reason: &str) -> ApiError {
    let suffix = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    let verb = &attributes.verb;
    let Some(resource) = &attributes.resource else {
        let message = format!(
            "forbidden: User {username:?} cannot {verb} path {:?}{suffix}",
            attributes.path
        );
        return ApiError {
            code: 403,
            reason: "Forbidden",
            message,
            details: Some(json!({})),
            retry_after: None,
            plain_text: false,
        };
    };
    let mut shown = resource.resource.clone();
    if !resource.subresource.is_empty() {
        shown = format!("{shown}/{}", resource.subresource);
    }
    let group = &resource.group;
    let scope = if resource.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace {:?}", resource.namespace)
    };
    let why = format!(
        "User {username:?} cannot {verb} resource {shown:?} in API group {group:?} {scope}{suffix}"
    );
    let qualified = crate::apiserver::errors::qualified(group, &resource.resource);
    let message = if resource.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", resource.name)
    };
    let mut details = serde_json::Map::new();
    if !resource.name.is_empty() {
        details.insert("name".into(), json!(resource.name));
    }
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(resource.resource));
    ApiError {
        code: 403,
        reason: "Forbidden",
        message,
        details: Some(serde_json::Value::Object(details)),
        retry_after: None,
        plain_text: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: &str, path: &str, query: &[(&str, &str)]) -> Attributes {
        let query = query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        attributes(method, path, &query)
    }

    fn resource(a: &Attributes) -> (&str, &str, &str, &str, &str, &str) {
        let r = a.resource.as_ref().expect("a resource request");
        (
            a.verb.as_str(),
            r.group.as_str(),
            r.resource.as_str(),
            r.subresource.as_str(),
            r.namespace.as_str(),
            r.name.as_str(),
        )
    }

    #[test]
    fn verbs_follow_the_method_and_whether_a_name_is_given() {
        assert_eq!(
            resource(&of("GET", "/api/v1/namespaces/a/pods", &[])),
            ("list", "", "pods", "", "a", "")
        );
        assert_eq!(
            resource(&of("GET", "/api/v1/pods", &[("watch", "true")])),
            ("watch", "", "pods", "", "", "")
        );
        assert_eq!(
            resource(&of("GET", "/api/v1/watch/namespaces/a/pods", &[])),
            ("watch", "", "pods", "", "a", "")
        );
        assert_eq!(
            resource(&of("GET", "/api/v1/namespaces/a/pods/p", &[])),
            ("get", "", "pods", "", "a", "p")
        );
        assert_eq!(
            resource(&of("DELETE", "/api/v1/namespaces/a/pods", &[])),
            ("deletecollection", "", "pods", "", "a", "")
        );
        assert_eq!(
            resource(&of("DELETE", "/api/v1/namespaces/a/pods/p", &[])),
            ("delete", "", "pods", "", "a", "p")
        );
        assert_eq!(
            resource(&of(
                "PATCH",
                "/apis/apps/v1/namespaces/a/deployments/d/scale",
                &[]
            )),
            ("patch", "apps", "deployments", "scale", "a", "d")
        );
        assert_eq!(
            resource(&of("POST", "/api/v1/namespaces/a/pods/p/eviction", &[])),
            ("create", "", "pods", "eviction", "a", "p")
        );
        assert_eq!(
            resource(&of("PUT", "/api/v1/namespaces/a/status", &[])),
            ("update", "", "namespaces", "status", "a", "a")
        );
        assert_eq!(
            resource(&of("GET", "/api/v1/namespaces/a", &[])),
            ("get", "", "namespaces", "", "a", "a")
        );
        assert_eq!(
            resource(&of(
                "GET",
                "/api/v1/namespaces/a/secrets",
                &[("fieldSelector", "metadata.name=one")]
            )),
            ("list", "", "secrets", "", "a", "one")
        );
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource_requests() {
        for path in [
            "/api",
            "/apis",
            "/apis/apps",
            "/healthz",
            "/version",
            "/openapi/v3",
            "/metrics",
            "/api/v1",
        ] {
            let a = of("GET", path, &[]);
            assert_eq!(
                (a.verb.as_str(), a.resource.is_none(), a.path.as_str()),
                ("get", true, path)
            );
        }
    }

    #[test]
    fn refusals_carry_the_real_message_shapes() {
        let list = of("GET", "/api/v1/secrets", &[]);
        let error = forbidden("system:serviceaccount:default:nobody", &list, "");
        assert_eq!(
            error.message,
            "secrets is forbidden: User \"system:serviceaccount:default:nobody\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
        );
        assert_eq!(error.details, Some(json!({"kind": "secrets"})));
        let get = of("GET", "/apis/apps/v1/namespaces/a/deployments/d/scale", &[]);
        let error = forbidden("bob", &get, "");
        assert_eq!(
            error.message,
            "deployments.apps \"d\" is forbidden: User \"bob\" cannot get resource \"deployments/scale\" in API group \"apps\" in the namespace \"a\""
        );
        assert_eq!(
            error.details,
            Some(json!({"name": "d", "group": "apps", "kind": "deployments"}))
        );
        let path = forbidden("bob", &of("GET", "/metrics", &[]), "");
        assert_eq!(
            path.message,
            "forbidden: User \"bob\" cannot get path \"/metrics\""
        );
    }
}
