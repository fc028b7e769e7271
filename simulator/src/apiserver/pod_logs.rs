//! A Pod's log subresource (`GET …/pods/{name}/log`), as the kubelet streams it through the
//! API server: plain text, one container's (`container`, or the Pod's only one), the last
//! `tailLines`. What a container logged is what a test set with
//! [`super::ApiServer::set_pod_log`]: the simulated kubelets run no processes.
//!
//! Guarantees: RBAC is checked before (`get` on `pods/log`, from the path, as for every
//! request); a missing Pod is a 404, a Pod of several containers without `container`, or a
//! container the Pod does not have, a 400 with the real server's wording
//! (kubernetes `pkg/registry/core/pod/strategy.go`, `LogLocation` and
//! `validateContainer`). Caveats: no `follow`, `previous`, `sinceSeconds` or `timestamps`; a
//! container nobody set a log for logged nothing (the real kubelet answers an error for one
//! that has not started).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::errors::{ApiError, ApiResult};
use super::store::Store;

/// The logs set per `(namespace, pod, container)`.
#[derive(Debug, Default)]
pub(crate) struct PodLogs(Mutex<HashMap<(String, String, String), String>>);

impl PodLogs {
    /// Sets what a container logged.
    pub(crate) fn set(&self, namespace: &str, pod: &str, container: &str, text: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(
            (namespace.into(), pod.into(), container.into()),
            text.into(),
        );
    }

    fn get(&self, namespace: &str, pod: &str, container: &str) -> String {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.into(), pod.into(), container.into()))
            .cloned()
            .unwrap_or_default()
    }
}

/// The container a log request names: `container`, or the Pod's only one.
fn container<'a>(pod: &'a Value, name: &str, asked: Option<&'a str>) -> ApiResult<&'a str> {
    let containers: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    match (asked, containers.as_slice()) {
        (Some(asked), _) if containers.contains(&asked) => Ok(asked),
        (Some(asked), _) => Err(ApiError::bad_request(format!(
            "container {asked} is not valid for pod {name}"
        ))),
        (None, [only]) => Ok(only),
        (None, _) => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            containers.join(" ")
        ))),
    }
}

/// Answers a request of a Pod's log subresource.
pub(crate) fn serve(
    store: &Store,
    logs: &PodLogs,
    method: &Method,
    namespace: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> ApiResult<Response> {
    if *method != Method::GET {
        return Err(ApiError::method_not_allowed(method.as_str(), "pods/log"));
    }
    let pods = store
        .resource_type("", "v1", "pods")
        .ok_or_else(|| ApiError::internal("pods are not served"))?;
    let pod = store.get(&pods, "v1", namespace, name)?;
    let container = container(&pod, name, query.get("container").map(String::as_str))?;
    let text = logs.get(namespace, name, container);
    let text = match query.get("tailLines").map(|t| t.parse::<usize>()) {
        None => text,
        Some(Ok(tail)) => {
            let lines: Vec<&str> = text.lines().collect();
            let kept = &lines[lines.len().saturating_sub(tail)..];
            kept.iter().map(|l| format!("{l}\n")).collect()
        }
        Some(Err(_)) => {
            return Err(ApiError::bad_request("tailLines: must be an integer"));
        }
    };
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_container_is_named_or_the_only_one() {
        let one = json!({"spec": {"containers": [{"name": "a"}]}});
        let two = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(container(&one, "p", None).unwrap(), "a");
        assert_eq!(container(&two, "p", Some("b")).unwrap(), "b");
        let none = container(&two, "p", None).unwrap_err();
        assert!(
            none.message.contains("choose one of: [a b]"),
            "{}",
            none.message
        );
        let wrong = container(&one, "p", Some("c")).unwrap_err();
        assert_eq!(wrong.message, "container c is not valid for pod p");
    }
}
