//! Fake-conformance: the behaviour of the real Kubernetes API server that clients can observe,
//! asserted one rule per test against the simulated API server over HTTP. Every rule here is
//! documented API server behaviour (API concepts, apiserver handlers); a simulator more
//! lenient than a real server would hide controller bugs.

use std::time::Duration;

mod common;

use baremend_sim::apiserver::{ApiServer, ApiServerConfig, FaultRule};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

struct Api {
    server: ApiServer,
    http: reqwest::Client,
}

impl Api {
    async fn start() -> Api {
        Api::start_with(ApiServerConfig::default()).await
    }

    async fn start_with(config: ApiServerConfig) -> Api {
        let server = ApiServer::start(config).await.unwrap();
        Api {
            server,
            http: reqwest::Client::new(),
        }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token());
        if let Some(body) = body {
            request = request
                .header("content-type", content_type)
                .body(body.to_string());
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Sends a body as given, in any encoding.
    async fn send_raw(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let response = self
            .http
            .request(method, format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token())
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, "", None).await
    }
    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, "application/json", Some(body))
            .await
    }
    async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PUT, path, "application/json", Some(body))
            .await
    }
    async fn patch(&self, path: &str, kind: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PATCH, path, kind, Some(body)).await
    }
    async fn delete(&self, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, "application/json", body)
            .await
    }

    /// Sends a GET and hands back the response unread (a watch to read later).
    async fn open(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token())
            .send()
            .await
            .unwrap()
    }

    /// A GET with an `Accept` header (and `If-None-Match` when given): status, headers, body.
    async fn get_as(
        &self,
        path: &str,
        accept: &str,
        if_none_match: Option<&str>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .get(format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token())
            .header("accept", accept);
        if let Some(tag) = if_none_match {
            request = request.header("if-none-match", tag);
        }
        let response = request.send().await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, headers, body)
    }

    async fn configmap(&self, name: &str, labels: Value) -> Value {
        let (status, body) = self
            .post("/api/v1/namespaces/default/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// Reads a watch stream for `wait`, returning the events.
    async fn watch(&self, path: &str, wait: Duration) -> Vec<Value> {
        self.watch_as(path, "application/json", wait).await
    }

    /// Reads a watch stream asked for with an `Accept` header.
    async fn watch_as(&self, path: &str, accept: &str, wait: Duration) -> Vec<Value> {
        let mut response = self
            .http
            .get(format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token())
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        let mut events = Vec::new();
        let mut buffer = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                events.push(serde_json::from_slice(&line).unwrap());
            }
        }
        events
    }
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn requests_without_the_bearer_token_get_401_with_a_status_body() {
    let api = Api::start().await;
    let response = reqwest::get(format!("{}/api/v1/namespaces", api.server.url()))
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (
            body["kind"].as_str(),
            body["reason"].as_str(),
            body["code"].as_i64()
        ),
        (Some("Status"), Some("Unauthorized"), Some(401))
    );
    assert_eq!(
        reqwest::get(format!("{}/healthz", api.server.url()))
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn resource_versions_are_global_and_increase_with_every_write() {
    let api = Api::start().await;
    let a = api.configmap("a", json!({})).await;
    let (_, node) = api
        .post("/api/v1/nodes", json!({"metadata": {"name": "n1"}}))
        .await;
    let b = api.configmap("b", json!({})).await;
    assert!(rv(&a) < rv(&node) && rv(&node) < rv(&b));
    let (_, list) = api.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(
        list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap(),
        rv(&b)
    );
}

#[tokio::test]
async fn create_sets_uid_timestamp_generation_and_refuses_duplicates_and_bad_names() {
    let api = Api::start().await;
    let (status, pod) = api.post("/api/v1/namespaces/default/pods", json!({"metadata": {"generateName": "web-"}, "spec": {"containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        pod["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("web-")
            && pod["metadata"]["name"].as_str().unwrap().len() == 9
    );
    assert_eq!(pod["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(
        pod["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(pod["metadata"]["generation"], 1);
    assert_eq!(
        pod["status"]["phase"], "Pending",
        "status is reset on create"
    );
    api.configmap("same", json!({})).await;
    let (status, body) = api
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "same"}}),
        )
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::CONFLICT, Some("AlreadyExists"))
    );
    let (status, body) = api
        .post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "Bad_Name"}}),
        )
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("Invalid"))
    );
    let (status, _) = api
        .post(
            "/api/v1/namespaces/nowhere/configmaps",
            json!({"metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn list_filters_by_label_and_field_selectors_and_refuses_unknown_fields() {
    let api = Api::start().await;
    api.configmap("one", json!({"app": "db", "tier": "back"}))
        .await;
    api.configmap("two", json!({"app": "web"})).await;
    let names = |list: &Value| {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let (_, list) = api
        .get("/api/v1/namespaces/default/configmaps?labelSelector=app%20in%20(db,cache),tier")
        .await;
    assert_eq!(names(&list), ["one"]);
    let (_, list) = api
        .get("/api/v1/namespaces/default/configmaps?labelSelector=app!%3Ddb")
        .await;
    assert_eq!(names(&list), ["two"]);
    let (_, list) = api
        .get("/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dtwo")
        .await;
    assert_eq!(names(&list), ["two"]);
    let (status, body) = api
        .get("/api/v1/namespaces/default/configmaps?fieldSelector=data.k%3Dv")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn pagination_serves_later_pages_from_the_first_pages_snapshot_and_expires() {
    let api = Api::start().await;
    for name in ["a", "b", "c", "d", "e"] {
        api.configmap(name, json!({})).await;
    }
    let (_, first) = api
        .get("/api/v1/namespaces/default/configmaps?limit=2")
        .await;
    assert_eq!(first["items"].as_array().unwrap().len(), 2);
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    api.delete("/api/v1/namespaces/default/configmaps/e", None)
        .await;
    let (_, second) = api
        .get(&format!(
            "/api/v1/namespaces/default/configmaps?limit=10&continue={token}"
        ))
        .await;
    let names: Vec<&str> = second["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c", "d", "e"], "the snapshot still has e");
    assert_eq!(
        second["metadata"]["resourceVersion"],
        first["metadata"]["resourceVersion"]
    );
    api.server.compact();
    let (status, body) = api
        .get(&format!(
            "/api/v1/namespaces/default/configmaps?limit=1&continue={token}"
        ))
        .await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::GONE, Some(410))
    );
}

#[tokio::test]
async fn update_with_a_stale_resource_version_is_a_conflict() {
    let api = Api::start().await;
    let mut cm = api.configmap("c", json!({})).await;
    let stale = cm.clone();
    cm["data"]["k"] = json!("new");
    let (status, _) = api.put("/api/v1/namespaces/default/configmaps/c", cm).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = api
        .put("/api/v1/namespaces/default/configmaps/c", stale)
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict"))
    );
}

#[tokio::test]
async fn status_and_spec_are_written_only_through_their_own_endpoints_and_generation_follows_spec()
{
    let api = Api::start().await;
    let (_, pdb) = api.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json!({"metadata": {"name": "p"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}})).await;
    assert_eq!(pdb["metadata"]["generation"], 1);
    // The disruption controller wrote the status since: read the latest object.
    let (_, pdb) = api
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/p")
        .await;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0);
    let mut changed = pdb.clone();
    changed["status"]["disruptionsAllowed"] = json!(99);
    changed["metadata"]["labels"] = json!({"l": "1"});
    let (_, after) = api
        .put(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets/p",
            changed,
        )
        .await;
    assert_eq!(
        after["status"]["disruptionsAllowed"], 0,
        "main endpoint ignores status"
    );
    assert_eq!(
        after["metadata"]["generation"], 1,
        "metadata changes keep the generation"
    );
    let mut spec = after.clone();
    spec["spec"]["minAvailable"] = json!(2);
    let (_, after) = api
        .put(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets/p",
            spec,
        )
        .await;
    assert_eq!(after["metadata"]["generation"], 2);
    let (_, status_write) = api
        .patch(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets/p/status",
            "application/merge-patch+json",
            json!({"spec": {"minAvailable": 5}, "status": {"expectedPods": 7}}),
        )
        .await;
    assert_eq!(
        status_write["spec"]["minAvailable"], 2,
        "the status endpoint ignores spec"
    );
    assert_eq!(status_write["status"]["expectedPods"], 7);
}

#[tokio::test]
async fn merge_json_and_strategic_patches_follow_their_rfcs_and_rules() {
    let api = Api::start().await;
    api.configmap("c", json!({"a": "1", "b": "2"})).await;
    let path = "/api/v1/namespaces/default/configmaps/c";
    let (_, merged) = api
        .patch(
            path,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": null}}, "data": {"x": "y"}}),
        )
        .await;
    assert_eq!(merged["metadata"]["labels"], json!({"b": "2"}));
    let (status, body) = api
        .patch(
            path,
            "application/json-patch+json",
            json!([{"op": "test", "path": "/data/x", "value": "nope"}]),
        )
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("Invalid"))
    );
    api.patch(
        path,
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": ["a/one"]}}),
    )
    .await;
    let (_, strategic) = api
        .patch(
            path,
            "application/strategic-merge-patch+json",
            json!({"metadata": {"finalizers": ["b/two"]}}),
        )
        .await;
    assert_eq!(
        strategic["metadata"]["finalizers"],
        json!(["a/one", "b/two"]),
        "finalizers merge as a set"
    );
    let (status, _) = api
        .patch(
            path,
            "application/merge-patch+json",
            json!({"metadata": {"resourceVersion": "1"}, "data": {"z": "1"}}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a resourceVersion in a patch is a precondition"
    );
    let (status, _) = api.patch(path, "text/plain", json!({})).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn server_side_apply_tracks_managers_and_refuses_conflicts_unless_forced() {
    let api = Api::start().await;
    let path = "/api/v1/namespaces/default/configmaps/s?fieldManager=one";
    let config = |value: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"k": value}});
    let (status, created) = api
        .patch(path, "application/apply-patch+yaml", config("1"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["metadata"]["managedFields"][0]["manager"], "one");
    let (status, body) = api
        .patch(
            "/api/v1/namespaces/default/configmaps/s?fieldManager=two",
            "application/apply-patch+yaml",
            config("2"),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "FieldManagerConflict"
    );
    let (status, forced) = api
        .patch(
            "/api/v1/namespaces/default/configmaps/s?fieldManager=two&force=true",
            "application/apply-patch+yaml",
            config("2"),
        )
        .await;
    assert_eq!(
        (status, forced["data"]["k"].as_str()),
        (StatusCode::OK, Some("2"))
    );
    let (status, _) = api
        .patch(
            "/api/v1/namespaces/default/configmaps/s",
            "application/apply-patch+yaml",
            config("3"),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "apply needs a field manager"
    );
}

#[tokio::test]
async fn delete_with_finalizers_keeps_the_object_until_the_last_one_goes() {
    let api = Api::start().await;
    api.configmap("f", json!({})).await;
    let path = "/api/v1/namespaces/default/configmaps/f";
    api.patch(
        path,
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": ["x/y"]}}),
    )
    .await;
    let (_, list) = api.get("/api/v1/namespaces/default/configmaps").await;
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, deleting) = api.delete(path, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(api.get(path).await.0, StatusCode::OK, "still there");
    let (status, body) = api
        .patch(
            path,
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": ["x/y", "new/one"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    api.patch(
        path,
        "application/json-patch+json",
        json!([{"op": "remove", "path": "/metadata/finalizers"}]),
    )
    .await;
    assert_eq!(api.get(path).await.0, StatusCode::NOT_FOUND);
    let events = api
        .watch(
            &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={from}"),
            Duration::from_millis(300),
        )
        .await;
    // Removing the last finalizer deletes the object: one DELETED event, no MODIFIED.
    assert_eq!(types(&events), ["MODIFIED", "DELETED"]);
}

#[tokio::test]
async fn delete_preconditions_are_honoured() {
    let api = Api::start().await;
    let cm = api.configmap("p", json!({})).await;
    let path = "/api/v1/namespaces/default/configmaps/p";
    let (status, _) = api
        .delete(path, Some(json!({"preconditions": {"uid": "other"}})))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = api
        .delete(
            path,
            Some(json!({"preconditions": {"resourceVersion": "1"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = api.delete(path, Some(json!({"preconditions": {"uid": cm["metadata"]["uid"], "resourceVersion": cm["metadata"]["resourceVersion"]}}))).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn pods_bound_to_a_node_are_deleted_gracefully_and_unbound_ones_at_once() {
    let api = Api::start().await;
    let pod = |name: &str, node: Option<&str>| json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}});
    api.post("/api/v1/namespaces/default/pods", pod("bound", Some("w0")))
        .await;
    api.post("/api/v1/namespaces/default/pods", pod("free", None))
        .await;
    let (_, deleting) = api
        .delete("/api/v1/namespaces/default/pods/bound", None)
        .await;
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 30);
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/bound").await.0,
        StatusCode::OK,
        "terminating until the kubelet confirms"
    );
    api.delete("/api/v1/namespaces/default/pods/free", None)
        .await;
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/free").await.0,
        StatusCode::NOT_FOUND
    );
    api.delete(
        "/api/v1/namespaces/default/pods/bound",
        Some(json!({"gracePeriodSeconds": 0})),
    )
    .await;
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/bound").await.0,
        StatusCode::NOT_FOUND
    );
}

async fn ready_pod(api: &Api, name: &str) {
    api.post("/api/v1/namespaces/default/pods", json!({"metadata": {"name": name, "labels": {"app": "db"}}, "spec": {"nodeName": "w0", "containers": [{"name": "c", "image": "x"}]}})).await;
    let (status, _) = api.patch(&format!("/api/v1/namespaces/default/pods/{name}/status"), "application/merge-patch+json", json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn eviction_respects_pod_disruption_budgets() {
    let api = Api::start().await;
    ready_pod(&api, "db-0").await;
    ready_pod(&api, "db-1").await;
    api.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json!({"metadata": {"name": "db"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}})).await;
    let (_, pdb) = api
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/db")
        .await;
    assert_eq!(
        (
            pdb["status"]["currentHealthy"].as_i64(),
            pdb["status"]["disruptionsAllowed"].as_i64()
        ),
        (Some(2), Some(0))
    );
    let eviction = |name: &str| json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}});
    let (status, body) = api
        .post(
            "/api/v1/namespaces/default/pods/db-0/eviction",
            eviction("db-0"),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["details"]["causes"][0]["reason"], "DisruptionBudget");
    api.patch(
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/db",
        "application/merge-patch+json",
        json!({"spec": {"minAvailable": 1}}),
    )
    .await;
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods/db-0/eviction",
            json!({"metadata": {"name": "db-0"}, "deleteOptions": {"dryRun": ["All"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        api.get("/api/v1/namespaces/default/pods/db-0").await.1["metadata"]["deletionTimestamp"]
            .is_null(),
        "dry run changes nothing"
    );
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods/db-0/eviction",
            eviction("db-0"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        api.get("/api/v1/namespaces/default/pods/db-0").await.1["metadata"]["deletionTimestamp"]
            .is_string(),
        "graceful deletion started"
    );
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods/db-1/eviction",
            eviction("db-1"),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the budget is used up"
    );
    api.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets", json!({"metadata": {"name": "db2"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}}})).await;
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods/db-1/eviction",
            eviction("db-1"),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "two budgets select the pod"
    );
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods/nope/eviction",
            eviction("nope"),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn watch_streams_changes_after_a_version_and_selector_transitions() {
    let api = Api::start().await;
    let cm = api.configmap("w", json!({"app": "x"})).await;
    let from = rv(&cm);
    api.patch(
        "/api/v1/namespaces/default/configmaps/w",
        "application/merge-patch+json",
        json!({"data": {"k": "2"}}),
    )
    .await;
    api.patch(
        "/api/v1/namespaces/default/configmaps/w",
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "y"}}}),
    )
    .await;
    api.patch(
        "/api/v1/namespaces/default/configmaps/w",
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"app": "x"}}}),
    )
    .await;
    let events = api.watch(&format!("/api/v1/namespaces/default/configmaps?watch=true&labelSelector=app%3Dx&resourceVersion={from}"), Duration::from_millis(300)).await;
    assert_eq!(
        types(&events),
        ["MODIFIED", "DELETED", "ADDED"],
        "leaving the selector is DELETED, entering it ADDED"
    );
    let initial = api
        .watch(
            "/api/v1/namespaces/default/configmaps?watch=true",
            Duration::from_millis(200),
        )
        .await;
    assert_eq!(
        types(&initial),
        ["ADDED"],
        "no resourceVersion: the current objects first"
    );
}

#[tokio::test]
async fn watch_sends_bookmarks_ends_at_its_timeout_and_an_expired_version_is_gone() {
    let api = Api::start_with(ApiServerConfig {
        bookmark_interval: Duration::from_millis(100),
        ..ApiServerConfig::default()
    })
    .await;
    let cm = api.configmap("b", json!({})).await;
    let started = tokio::time::Instant::now();
    let events = api.watch(&format!("/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={}", rv(&cm)), Duration::from_secs(5)).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the stream closed at its timeout"
    );
    assert!(
        types(&events).iter().filter(|t| *t == "BOOKMARK").count() >= 3,
        "{events:?}"
    );
    api.configmap("later", json!({})).await;
    api.server.compact();
    // As the real API server: 200, then one ERROR event with the 410 Status, then the end.
    let events = api
        .watch(
            &format!(
                "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}",
                rv(&cm)
            ),
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(types(&events), ["ERROR"], "{events:?}");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

#[tokio::test]
async fn injected_faults_answer_with_status_bodies_and_retry_after() {
    let api = Api::start().await;
    api.server.inject(FaultRule {
        method: Some("GET".into()),
        path_contains: Some("configmaps".into()),
        status: 429,
        count: Some(1),
        retry_after: Some(3),
        delay_ms: 0,
    });
    let response = api
        .http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps",
            api.server.url()
        ))
        .bearer_auth(api.server.token())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "TooManyRequests");
    assert_eq!(
        api.get("/api/v1/namespaces/default/configmaps").await.0,
        StatusCode::OK,
        "count 1: used up"
    );
    api.server.inject(FaultRule {
        method: None,
        path_contains: None,
        status: 503,
        count: Some(1),
        retry_after: None,
        delay_ms: 0,
    });
    assert_eq!(
        api.get("/api/v1/nodes").await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn dropped_watches_end_and_can_resume_from_the_last_version() {
    let api = Api::start().await;
    let cm = api.configmap("d", json!({})).await;
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}",
        api.server.url(),
        rv(&cm)
    );
    let mut response = api
        .http
        .get(url)
        .bearer_auth(api.server.token())
        .send()
        .await
        .unwrap();
    api.server.drop_watches();
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(Some(_)) = response.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream ended");
}

#[tokio::test]
async fn both_event_apis_serve_one_store() {
    let api = Api::start().await;
    let (status, _) = api.post("/apis/events.k8s.io/v1/namespaces/default/events", json!({"metadata": {"name": "e1"}, "regarding": {"kind": "Machine", "name": "m0"}, "note": "fenced", "reason": "PowerOff", "type": "Normal", "eventTime": "2026-11-21T18:00:00.000000Z", "reportingController": "baremend", "reportingInstance": "x", "action": "Fence"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, core) = api
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dm0")
        .await;
    assert_eq!(core["items"][0]["message"], "fenced");
    assert_eq!(core["items"][0]["involvedObject"]["kind"], "Machine");
    let (_, v1) = api
        .get("/apis/events.k8s.io/v1/namespaces/default/events/e1")
        .await;
    assert_eq!(v1["note"], "fenced");
}

#[tokio::test]
async fn deleting_an_owner_collects_its_dependents() {
    let api = Api::start().await;
    let owner = api.configmap("owner", json!({})).await;
    let reference = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]);
    api.post(
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "child", "ownerReferences": reference}}),
    )
    .await;
    api.delete("/api/v1/namespaces/default/configmaps/owner", None)
        .await;
    assert_eq!(
        api.get("/api/v1/namespaces/default/configmaps/child")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_crd_is_served_at_once_with_status_and_its_instances_go_with_it() {
    let api = Api::start().await;
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "machines.machine.openshift.io"}, "spec": {"group": "machine.openshift.io", "names": {"kind": "Machine", "plural": "machines", "singular": "machine"}, "scope": "Namespaced", "versions": [{"name": "v1beta1", "served": true, "storage": true, "subresources": {"status": {}}, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    let (status, _) = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, crd) = api
        .get(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/machines.machine.openshift.io",
        )
        .await;
    assert_eq!(crd["status"]["conditions"][1]["type"], "Established");
    let (_, resources) = api.get("/apis/machine.openshift.io/v1beta1").await;
    assert_eq!(resources["resources"][1]["name"], "machines/status");
    let path = "/apis/machine.openshift.io/v1beta1/namespaces/default/machines";
    let (status, machine) = api.post(path, json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine", "metadata": {"name": "w0"}, "spec": {"providerID": "x"}, "status": {"phase": "Running"}})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        machine.get("status").is_none(),
        "status is dropped on create when the status subresource is on"
    );
    let (status, _) = api
        .patch(
            &format!("{path}/w0"),
            "application/strategic-merge-patch+json",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "no strategic merge for custom resources"
    );
    api.delete(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/machines.machine.openshift.io",
        None,
    )
    .await;
    assert_eq!(
        api.get(&format!("{path}/w0")).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn injected_slowness_and_refusals_match_only_their_requests() {
    let api = Api::start().await;
    api.server.inject(FaultRule {
        method: Some("PATCH".into()),
        path_contains: Some("/nodes/".into()),
        status: 403,
        count: None,
        retry_after: None,
        delay_ms: 0,
    });
    api.server.inject(FaultRule {
        method: Some("GET".into()),
        path_contains: Some("/configmaps".into()),
        status: 0,
        count: Some(1),
        retry_after: None,
        delay_ms: 300,
    });
    api.post("/api/v1/nodes", json!({"metadata": {"name": "n"}}))
        .await;
    let (status, body) = api
        .patch(
            "/api/v1/nodes/n",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::FORBIDDEN, Some("Forbidden"))
    );
    assert_eq!(
        api.get("/api/v1/nodes/n").await.0,
        StatusCode::OK,
        "GETs are not refused"
    );
    let started = std::time::Instant::now();
    assert_eq!(
        api.get("/api/v1/namespaces/default/configmaps").await.0,
        StatusCode::OK
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "slowed down"
    );
    let started = std::time::Instant::now();
    api.get("/api/v1/namespaces/default/configmaps").await;
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "count 1: only once"
    );
    api.server.clear_faults();
    assert_eq!(
        api.patch(
            "/api/v1/nodes/n",
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": "b"}}})
        )
        .await
        .0,
        StatusCode::OK
    );
}

/// A protobuf-encoded ConfigMap as client-go's generated marshaller writes it: every string field
/// of ObjectMeta is written even when empty, so "no namespace" arrives as an empty one.
fn configmap_protobuf(name: &str, namespace: &str) -> Vec<u8> {
    fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![(number << 3) | 2];
        let mut length = bytes.len();
        loop {
            let byte = (length & 0x7F) as u8;
            length >>= 7;
            if length == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
        out.extend_from_slice(bytes);
        out
    }
    let type_meta = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
    let meta = [
        field(1, name.as_bytes()),
        field(2, b""),
        field(3, namespace.as_bytes()),
    ]
    .concat();
    let entry = [field(1, b"a"), field(2, b"1")].concat();
    let object = [field(1, &meta), field(2, &entry)].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &object)].concat()
}

#[tokio::test]
async fn an_object_without_a_namespace_takes_the_urls_in_every_body_format() {
    let api = Api::start().await;
    let path = "/api/v1/namespaces/default/configmaps";
    let yaml = |name: &str, namespace: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: '{namespace}'\ndata:\n  a: '1'\n"
        )
        .into_bytes()
    };
    let json_body = |name: &str, namespace: Option<&str>| {
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}});
        if let Some(namespace) = namespace {
            object["metadata"]["namespace"] = json!(namespace);
        }
        object.to_string().into_bytes()
    };
    let protobuf = "application/vnd.kubernetes.protobuf";
    for (content_type, body) in [
        ("application/json", json_body("j-absent", None)),
        ("application/json", json_body("j-empty", Some(""))),
        ("application/json", json_body("j-same", Some("default"))),
        ("application/yaml", yaml("y-empty", "")),
        ("application/yaml", yaml("y-same", "default")),
        (protobuf, configmap_protobuf("p-empty", "")),
        (protobuf, configmap_protobuf("p-same", "default")),
    ] {
        let (status, created) = api.send_raw(Method::POST, path, content_type, body).await;
        assert_eq!(status, StatusCode::CREATED, "{content_type}: {created}");
        assert_eq!(created["metadata"]["namespace"], "default", "{created}");
        assert_eq!(created["data"]["a"], "1", "{created}");
        let name = created["metadata"]["name"].as_str().unwrap();
        let (status, stored) = api.get(&format!("{path}/{name}")).await;
        assert_eq!(status, StatusCode::OK, "{stored}");
        assert_eq!(stored["metadata"]["namespace"], "default");
    }
    let mismatch =
        "the namespace of the provided object does not match the namespace sent on the request";
    for (content_type, body) in [
        (
            "application/json",
            json_body("j-other", Some("kube-system")),
        ),
        ("application/yaml", yaml("y-other", "kube-system")),
        (protobuf, configmap_protobuf("p-other", "kube-system")),
    ] {
        let (status, refused) = api.send_raw(Method::POST, path, content_type, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{content_type}: {refused}");
        assert_eq!(refused["reason"], "BadRequest");
        assert_eq!(refused["message"], mismatch);
    }
    // An update follows the same rule: empty takes the URL's, a different one is refused.
    let (status, updated) = api
        .send_raw(
            Method::PUT,
            &format!("{path}/y-empty"),
            "application/yaml",
            yaml("y-empty", ""),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["metadata"]["namespace"], "default");
    let (status, refused) = api
        .send_raw(
            Method::PUT,
            &format!("{path}/j-same"),
            "application/json",
            json_body("j-same", Some("kube-system")),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["message"], mismatch);
    let (status, refused) = api
        .send_raw(Method::POST, path, "application/yaml", b"{: [".to_vec())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
}

#[tokio::test]
async fn every_cluster_has_the_kubernetes_service_and_its_endpoints() {
    let api = Api::start().await;
    let (status, service) = api
        .get("/api/v1/namespaces/default/services/kubernetes")
        .await;
    assert_eq!(status, StatusCode::OK, "{service}");
    assert_eq!(service["metadata"]["labels"]["provider"], "kubernetes");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert_eq!(service["spec"]["ports"][0]["port"], 443);
    assert!(service["metadata"]["uid"].is_string());
    let (status, endpoints) = api
        .get("/api/v1/namespaces/default/endpoints/kubernetes")
        .await;
    assert_eq!(status, StatusCode::OK, "{endpoints}");
    let (status, slices) = api
        .get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes")
        .await;
    assert_eq!(status, StatusCode::OK, "{slices}");
    let slice = &slices["items"][0];
    assert_eq!(slice["metadata"]["name"], "kubernetes");
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(
        slice["ports"][0]["port"],
        endpoints["subsets"][0]["ports"][0]["port"]
    );
    assert_eq!(
        slice["endpoints"][0]["addresses"][0],
        endpoints["subsets"][0]["addresses"][0]["ip"]
    );
    // Discovery lists both resources.
    let (_, resources) = api.get("/apis/discovery.k8s.io/v1").await;
    assert_eq!(resources["resources"][0]["name"], "endpointslices");
}

#[tokio::test]
async fn openapi_v2_is_served_in_protobuf_and_json() {
    let api = Api::start().await;
    let response = api
        .http
        .get(format!("{}/openapi/v2", api.server.url()))
        .bearer_auth(api.server.token())
        .header(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.bytes().await.unwrap();
    // Field 1 (`swagger`), length 3, "2.0".
    assert_eq!(&bytes[..5], b"\x0a\x032.0");
    let (status, document) = api.get("/openapi/v2").await;
    assert_eq!(status, StatusCode::OK, "{document}");
    assert_eq!(document["swagger"], "2.0");
}

#[tokio::test]
async fn continue_tokens_expire_with_the_log_and_when_too_many_lists_are_paged() {
    let api = Api::start_with(ApiServerConfig {
        event_log_capacity: 16,
        ..ApiServerConfig::default()
    })
    .await;
    for name in ["a", "b", "c"] {
        api.configmap(name, json!({})).await;
    }
    let api = &api;
    let page = |token: Option<String>| {
        let path = match token {
            Some(token) => {
                format!("/api/v1/namespaces/default/configmaps?limit=1&continue={token}")
            }
            None => "/api/v1/namespaces/default/configmaps?limit=1".to_owned(),
        };
        async move { api.get(&path).await }
    };
    let (_, first) = page(None).await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_owned();
    // Enough writes to compact the token's revision away.
    for i in 0..20 {
        api.configmap(&format!("x{i}"), json!({})).await;
    }
    let (status, body) = page(Some(token)).await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert_eq!(body["reason"], "Expired");
    // Paging many lists at once evicts the oldest snapshots.
    let (_, oldest) = page(None).await;
    let oldest = oldest["metadata"]["continue"].as_str().unwrap().to_owned();
    for _ in 0..300 {
        page(None).await;
    }
    let (status, body) = page(Some(oldest)).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (StatusCode::GONE, Some("Expired"))
    );
    let (_, newest) = page(None).await;
    let newest = newest["metadata"]["continue"].as_str().unwrap().to_owned();
    let (status, body) = page(Some(newest)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// What kubectl 1.32 and kube 5 send to `/api` and `/apis`.
const AGGREGATED_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// The versions of a legacy APIGroup document, in its order.
fn version_names(group: &Value) -> Vec<&Value> {
    group["versions"]
        .as_array()
        .map(|versions| versions.iter().map(|v| &v["version"]).collect())
        .unwrap_or_default()
}

/// A legacy resource list in the aggregated shape, to compare both discoveries: one entry per
/// resource (name, kind, scope, singular, verbs, short names, categories) and one per
/// subresource (`parent/sub`, response kind, verbs).
fn legacy_as_entries(group: &str, version: &str, list: &Value) -> Vec<Value> {
    let mut entries: Vec<Value> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let kind = json!({
                "group": r.get("group").and_then(Value::as_str).unwrap_or(group),
                "version": r.get("version").and_then(Value::as_str).unwrap_or(version),
                "kind": r["kind"],
            });
            let name = r["name"].as_str().unwrap();
            if name.contains('/') {
                json!({"name": name, "kind": kind, "verbs": r["verbs"]})
            } else {
                let scope = if r["namespaced"] == true { "Namespaced" } else { "Cluster" };
                let or_empty = |v: &Value| if v.is_null() { json!([]) } else { v.clone() };
                json!({"name": name, "kind": kind, "scope": scope, "singular": r["singularName"], "verbs": r["verbs"], "shortNames": or_empty(&r["shortNames"]), "categories": or_empty(&r["categories"])})
            }
        })
        .collect();
    entries.sort_by_key(|e| e["name"].as_str().unwrap().to_owned());
    entries
}

/// The same entries from one version of an aggregated document.
fn aggregated_as_entries(version: &Value) -> Vec<Value> {
    let mut entries = Vec::new();
    for r in version["resources"].as_array().unwrap() {
        let name = r["resource"].as_str().unwrap();
        let or_empty = |v: &Value| if v.is_null() { json!([]) } else { v.clone() };
        entries.push(json!({"name": name, "kind": r["responseKind"], "scope": r["scope"], "singular": r["singularResource"], "verbs": r["verbs"], "shortNames": or_empty(&r["shortNames"]), "categories": or_empty(&r["categories"])}));
        for sub in r["subresources"].as_array().into_iter().flatten() {
            entries.push(json!({"name": format!("{name}/{}", sub["subresource"].as_str().unwrap()), "kind": sub["responseKind"], "verbs": sub["verbs"]}));
        }
    }
    entries.sort_by_key(|e| e["name"].as_str().unwrap().to_owned());
    entries
}

#[tokio::test]
async fn aggregated_discovery_answers_when_asked_and_agrees_with_the_legacy_documents() {
    let api = Api::start().await;
    // A CRD created now is in both documents at once.
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"], "categories": ["all"]}, "scope": "Cluster", "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}, "schema": {"openAPIV3Schema": {"type": "object"}}}, {"name": "v1alpha1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    let (status, _) = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let (status, headers, apis) = api.get_as("/apis", AGGREGATED_DISCOVERY, None).await;
    assert_eq!(status, StatusCode::OK, "{apis}");
    assert_eq!(
        headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(headers["vary"], "Accept");
    assert_eq!(
        (&apis["kind"], &apis["apiVersion"]),
        (
            &json!("APIGroupDiscoveryList"),
            &json!("apidiscovery.k8s.io/v2")
        )
    );
    let (_, legacy) = api.get("/apis").await;
    let legacy_groups: Vec<&Value> = legacy["groups"].as_array().unwrap().iter().collect();
    let items = apis["items"].as_array().unwrap();
    assert_eq!(items.len(), legacy_groups.len());
    assert!(items.iter().any(|g| g["metadata"]["name"] == "example.com"));
    for (item, group) in items.iter().zip(&legacy_groups) {
        let name = group["name"].as_str().unwrap();
        assert_eq!(item["metadata"]["name"], name);
        let versions: Vec<&Value> = item["versions"].as_array().unwrap().iter().collect();
        let legacy_versions = version_names(group);
        assert_eq!(
            versions.iter().map(|v| &v["version"]).collect::<Vec<_>>(),
            legacy_versions
        );
        assert_eq!(versions[0]["version"], group["preferredVersion"]["version"]);
        for version in versions {
            let v = version["version"].as_str().unwrap();
            assert_eq!(version["freshness"], "Current");
            let (_, list) = api.get(&format!("/apis/{name}/{v}")).await;
            assert_eq!(
                aggregated_as_entries(version),
                legacy_as_entries(name, v, &list),
                "{name}/{v}"
            );
        }
    }

    let (status, headers, core) = api.get_as("/api", AGGREGATED_DISCOVERY, None).await;
    assert_eq!(status, StatusCode::OK);
    let core_items = core["items"].as_array().unwrap();
    assert_eq!(core_items.len(), 1);
    assert!(
        core_items[0]["metadata"].get("name").is_none(),
        "the core group's name is empty"
    );
    let (_, list) = api.get("/api/v1").await;
    let v1 = &core_items[0]["versions"][0];
    assert_eq!(v1["version"], "v1");
    assert_eq!(
        aggregated_as_entries(v1),
        legacy_as_entries("", "v1", &list)
    );
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "pods")
        .unwrap();
    assert!(
        pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["subresource"] == "eviction"
                && s["responseKind"]
                    == json!({"group": "policy", "version": "v1", "kind": "Eviction"}))
    );

    // The ETag lets a client revalidate its cached copy.
    let etag = headers["etag"].to_str().unwrap().to_owned();
    let (status, _, _) = api.get_as("/api", AGGREGATED_DISCOVERY, Some(&etag)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);

    // v2beta1 when only it is asked for; the legacy document when aggregation is not asked
    // for; 406 when nothing asked for can be produced.
    let (_, headers, beta) = api
        .get_as(
            "/apis",
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            None,
        )
        .await;
    assert_eq!(beta["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .contains("v=v2beta1")
    );
    let (_, headers, plain) = api.get_as("/apis", "application/json, */*", None).await;
    assert_eq!(
        (&plain["kind"], &headers["content-type"]),
        (
            &json!("APIGroupList"),
            &"application/json"
                .parse::<reqwest::header::HeaderValue>()
                .unwrap()
        )
    );
    let (status, _, refused) = api
        .get_as(
            "/apis",
            "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
            None,
        )
        .await;
    assert_eq!(
        (status, &refused["reason"]),
        (StatusCode::NOT_ACCEPTABLE, &json!("NotAcceptable"))
    );
}

const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

#[tokio::test]
async fn metadata_only_requests_get_partial_object_metadata() {
    let api = Api::start().await;
    let full = api.configmap("a", json!({"app": "db"})).await;
    api.configmap("b", json!({"app": "db"})).await;
    let path = "/api/v1/namespaces/default/configmaps";

    let (status, _, partial) = api.get_as(&format!("{path}/a"), METADATA, None).await;
    assert_eq!(status, StatusCode::OK, "{partial}");
    assert_eq!(
        partial,
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": full["metadata"]})
    );
    let (_, _, beta) = api
        .get_as(
            &format!("{path}/a"),
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
            None,
        )
        .await;
    assert_eq!(beta["apiVersion"], "meta.k8s.io/v1beta1");

    // A list keeps its own metadata (resourceVersion, continue); each item names its kind.
    let (status, _, list) = api
        .get_as(&format!("{path}?limit=1"), METADATA_LIST, None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(
        (&list["kind"], &list["apiVersion"]),
        (
            &json!("PartialObjectMetadataList"),
            &json!("meta.k8s.io/v1")
        )
    );
    assert!(
        list["metadata"]["continue"].is_string() && list["metadata"]["resourceVersion"].is_string()
    );
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["kind"], "PartialObjectMetadata");
    assert!(items[0].get("data").is_none() && items[0]["metadata"]["name"] == "a");

    // The wrong shape is refused, as the real server does.
    let (status, _, refused) = api.get_as(path, METADATA, None).await;
    assert_eq!(
        (status, &refused["reason"]),
        (StatusCode::NOT_ACCEPTABLE, &json!("NotAcceptable"))
    );
    let (status, _, _) = api.get_as(&format!("{path}/a"), METADATA_LIST, None).await;
    assert_eq!(status, StatusCode::NOT_ACCEPTABLE);

    // A patch answers the patched object's metadata.
    let response = api
        .http
        .patch(format!("{}{path}/a", api.server.url()))
        .bearer_auth(api.server.token())
        .header("accept", METADATA)
        .header("content-type", "application/merge-patch+json")
        .body(json!({"metadata": {"labels": {"tier": "x"}}, "data": {"k": "w"}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let patched: Value = response.json().await.unwrap();
    assert_eq!(patched["kind"], "PartialObjectMetadata");
    assert_eq!(patched["metadata"]["labels"]["tier"], "x");
    assert!(patched.get("data").is_none());
    assert_eq!(
        api.get(&format!("{path}/a")).await.1["data"]["k"],
        "w",
        "the patch itself is whole"
    );

    // A watch sends every object, bookmarks included, as metadata.
    let events = api
        .watch_as(
            &format!("{path}?watch=true&resourceVersion={}&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1", rv(&full)),
            METADATA,
            Duration::from_secs(3),
        )
        .await;
    assert_eq!(
        types(&events),
        ["ADDED", "MODIFIED", "BOOKMARK"],
        "{events:?}"
    );
    for event in &events {
        assert_eq!(event["object"]["kind"], "PartialObjectMetadata", "{event}");
        assert!(event["object"].get("data").is_none());
    }
}

/// A namespaced CRD whose scale subresource reads `.spec.size`, `.status.ready` and
/// `.status.selector` (declared in its schema: the server prunes undeclared fields).
fn scalable_crd(scale: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "pools.example.com"}, "spec": {"group": "example.com", "names": {"kind": "Pool", "plural": "pools", "singular": "pool"}, "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}, "scale": scale}, "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}, "status": {"type": "object", "properties": {"ready": {"type": "integer"}, "selector": {"type": "string"}}}}}}}]}})
}

#[tokio::test]
async fn a_crd_scale_subresource_reads_and_writes_the_crds_paths() {
    let api = Api::start().await;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (status, refused) = api
        .post(
            crds,
            scalable_crd(
                json!({"specReplicasPath": ".status.size", "statusReplicasPath": ".status.ready"}),
            ),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the spec path must be under .spec: {refused}"
    );
    let (status, _) = api
        .post(crds, scalable_crd(json!({"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.ready", "labelSelectorPath": ".status.selector"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, resources) = api.get("/apis/example.com/v1").await;
    assert!(
        resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pools/scale"
                && r["kind"] == "Scale"
                && r["group"] == "autoscaling"
                && r["version"] == "v1"),
        "{resources}"
    );
    let path = "/apis/example.com/v1/namespaces/default/pools";
    let (status, pool) = api
        .post(path, json!({"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"}, "spec": {"size": 2}}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, _) = api
        .put(&format!("{path}/p/status"), json!({"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"}, "spec": {"size": 2}, "status": {"ready": 1, "selector": "app=p"}}))
        .await;

    let (status, scale) = api.get(&format!("{path}/p/scale")).await;
    assert_eq!(status, StatusCode::OK, "{scale}");
    assert_eq!(
        (&scale["kind"], &scale["apiVersion"]),
        (&json!("Scale"), &json!("autoscaling/v1"))
    );
    assert_eq!(
        (&scale["metadata"]["name"], &scale["metadata"]["uid"]),
        (&json!("p"), &pool["metadata"]["uid"])
    );
    assert_eq!(scale["spec"], json!({"replicas": 2}));
    assert_eq!(scale["status"], json!({"replicas": 1, "selector": "app=p"}));

    // A merge patch of the Scale writes the spec path; the generation moves.
    let (status, scaled) = api
        .patch(
            &format!("{path}/p/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 5}, "status": {"replicas": 9}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{scaled}");
    assert_eq!(
        (&scaled["spec"]["replicas"], &scaled["status"]["replicas"]),
        (&json!(5), &json!(1))
    );
    let (_, object) = api.get(&format!("{path}/p")).await;
    assert_eq!(
        (&object["spec"]["size"], &object["status"]["ready"]),
        (&json!(5), &json!(1))
    );
    assert_eq!(object["metadata"]["generation"], 2);

    // A replace with a stale resourceVersion conflicts; negative replicas are invalid.
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(3);
    let (status, _) = api.put(&format!("{path}/p/scale"), stale.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT);
    stale["metadata"]["resourceVersion"] = object["metadata"]["resourceVersion"].clone();
    let (status, replaced) = api.put(&format!("{path}/p/scale"), stale.clone()).await;
    assert_eq!(
        (status, &replaced["spec"]["replicas"]),
        (StatusCode::OK, &json!(3))
    );
    let (status, invalid) = api
        .patch(
            &format!("{path}/p/scale"),
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/replicas", "value": -1}]),
        )
        .await;
    assert_eq!(
        (status, &invalid["reason"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("Invalid"))
    );
    let (status, _) = api
        .patch(
            &format!("{path}/p/scale"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"replicas": 1}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        api.get(&format!("{path}/missing/scale")).await.0,
        StatusCode::NOT_FOUND
    );
    // A kind without a scale subresource has no such path.
    assert_eq!(
        api.get("/api/v1/namespaces/default/configmaps/x/scale")
            .await
            .0,
        StatusCode::NOT_FOUND
    );
}

/// Reads a whole watch response (until the server ends it or `wait` passes): its events, and
/// whether the server ended it.
async fn read_watch(response: reqwest::Response, wait: Duration) -> (Vec<Value>, bool) {
    let mut response = response;
    let mut events = Vec::new();
    let mut buffer = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    events.push(serde_json::from_slice(&line).unwrap());
                }
            }
            Ok(Ok(None)) => return (events, true),
            Ok(Err(_)) | Err(_) => return (events, false),
        }
    }
}

#[tokio::test]
async fn a_watcher_that_falls_behind_has_its_stream_closed_and_resumes_from_its_last_version() {
    let api = Api::start_with(ApiServerConfig {
        watch_buffer: 64,
        ..ApiServerConfig::default()
    })
    .await;
    let start = rv(&api.configmap("first", json!({})).await);
    let path = "/api/v1/namespaces/default/configmaps";
    // A client that does not read its watch while many large changes happen: the socket and
    // the server's queue fill, and the watch falls more than its buffer behind.
    let stalled = api
        .open(&format!(
            "{path}?watch=true&resourceVersion={start}&timeoutSeconds=60"
        ))
        .await;
    let blob = "x".repeat(32 * 1024);
    let total = 1000;
    for index in 0..total {
        let (status, _) = api
            .post(path, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{index}")}, "data": {"blob": blob}}))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    // The stream ends without an ERROR event, after what the server had already queued, in
    // order and without gaps.
    let (first, ended) = read_watch(stalled, Duration::from_secs(30)).await;
    assert!(
        ended,
        "the server closes the stream of a watcher that fell behind"
    );
    let others: Vec<&Value> = first.iter().filter(|e| e["type"] != "ADDED").collect();
    assert!(others.is_empty(), "no ERROR event: {others:?}");
    assert!(
        first.len() < total,
        "the stream ended early ({} events)",
        first.len()
    );
    let names: Vec<String> = first
        .iter()
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (0..first.len()).map(|i| format!("c{i}")).collect();
    assert_eq!(names, expected);
    // Re-watching from the last version seen delivers the rest.
    let last = rv(&first.last().unwrap()["object"]);
    let resumed = api
        .open(&format!(
            "{path}?watch=true&resourceVersion={last}&timeoutSeconds=2"
        ))
        .await;
    let (rest, _) = read_watch(resumed, Duration::from_secs(30)).await;
    let rest_names: Vec<String> = rest
        .iter()
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = (first.len()..total).map(|i| format!("c{i}")).collect();
    assert_eq!(rest_names, expected);
}

#[tokio::test]
async fn eviction_reads_the_budgets_stored_status() {
    let api = Api::start().await;
    ready_pod(&api, "db-0").await;
    ready_pod(&api, "db-1").await;
    let pdbs = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
    api.post(pdbs, json!({"metadata": {"name": "db"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}})).await;
    let evict = |pod: &str| {
        api.http
            .post(format!(
                "{}/api/v1/namespaces/default/pods/{pod}/eviction",
                api.server.url()
            ))
            .bearer_auth(api.server.token())
            .header("content-type", "application/json")
            .body(
                json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod}})
                    .to_string(),
            )
            .send()
    };

    // A spec change the disruption controller has not processed yet: the handler refuses,
    // with Retry-After 10, until the status catches up with the generation.
    api.server.pause_disruption_controller(true);
    api.patch(
        &format!("{pdbs}/db"),
        "application/merge-patch+json",
        json!({"spec": {"minAvailable": 2}}),
    )
    .await;
    let (_, pdb) = api.get(&format!("{pdbs}/db")).await;
    assert_eq!(
        (
            &pdb["metadata"]["generation"],
            &pdb["status"]["observedGeneration"]
        ),
        (&json!(2), &json!(1))
    );
    let response = evict("db-0").await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "10");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "The disruption budget db is still being processed by the server."
    );
    api.server.pause_disruption_controller(false);
    let (_, pdb) = api.get(&format!("{pdbs}/db")).await;
    assert_eq!(
        (
            &pdb["status"]["observedGeneration"],
            &pdb["status"]["disruptionsAllowed"]
        ),
        (&json!(2), &json!(0))
    );
    let response = evict("db-0").await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().get("retry-after").is_none());

    // What the stored status says decides, not a computation on the spot: a stale status
    // that allows one disruption lets one eviction through and is decremented.
    api.server.pause_disruption_controller(true);
    let mut stale = pdb.clone();
    stale["status"]["disruptionsAllowed"] = json!(1);
    let (status, _) = api.put(&format!("{pdbs}/db/status"), stale).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(evict("db-0").await.unwrap().status(), StatusCode::CREATED);
    let (_, pdb) = api.get(&format!("{pdbs}/db")).await;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0);
    assert!(pdb["status"]["disruptedPods"]["db-0"].is_string());
    let condition = &pdb["status"]["conditions"][0];
    assert_eq!(
        (
            &condition["type"],
            &condition["status"],
            &condition["reason"]
        ),
        (
            &json!("DisruptionAllowed"),
            &json!("False"),
            &json!("InsufficientPods")
        )
    );
    // A negative count is refused outright.
    let mut negative = pdb.clone();
    negative["status"]["disruptionsAllowed"] = json!(-1);
    api.put(&format!("{pdbs}/db/status"), negative).await;
    let response = evict("db-1").await.unwrap();
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    api.server.pause_disruption_controller(false);

    // A pod that is not Ready goes without a decrement while the budget is met.
    api.patch(
        &format!("{pdbs}/db"),
        "application/merge-patch+json",
        json!({"spec": {"minAvailable": 1}}),
    )
    .await;
    ready_pod(&api, "db-2").await;
    let (status, _) = api
        .patch(
            "/api/v1/namespaces/default/pods/db-2/status",
            "application/merge-patch+json",
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, before) = api.get(&format!("{pdbs}/db")).await;
    assert_eq!(
        (
            &before["status"]["currentHealthy"],
            &before["status"]["desiredHealthy"]
        ),
        (&json!(1), &json!(1))
    );
    assert_eq!(before["status"]["disruptionsAllowed"], 0);
    assert_eq!(evict("db-2").await.unwrap().status(), StatusCode::CREATED);
    let (_, after) = api.get(&format!("{pdbs}/db")).await;
    assert!(
        after["status"]["disruptedPods"].get("db-2").is_none(),
        "{after}"
    );
}

#[tokio::test]
async fn every_served_group_version_has_an_api_service_that_follows_the_crds() {
    let api = Api::start().await;
    let services = "/apis/apiregistration.k8s.io/v1/apiservices";
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // One per group-version of the discovery documents, the core one named "v1.".
    let (_, groups) = api.get("/apis").await;
    let mut served: Vec<String> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| {
            g["versions"].as_array().unwrap().iter().map(move |v| {
                format!(
                    "{}.{}",
                    v["version"].as_str().unwrap(),
                    g["name"].as_str().unwrap()
                )
            })
        })
        .collect();
    served.push("v1.".into());
    served.sort();
    let (status, list) = api.get(services).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(names(&list), served);
    let (_, apps) = api.get(&format!("{services}/v1.apps")).await;
    assert_eq!(
        apps["spec"],
        json!({"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15})
    );
    let available = &apps["status"]["conditions"][0];
    assert_eq!(
        (
            &available["type"],
            &available["status"],
            &available["reason"]
        ),
        (&json!("Available"), &json!("True"), &json!("Local"))
    );

    // A CRD's group-versions get theirs, and lose them with it; one a client made stays.
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Cluster", "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}, {"name": "v2", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    assert_eq!(api.post(crds, crd).await.0, StatusCode::CREATED);
    let (status, widget) = api.get(&format!("{services}/v1.example.com")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (
            &widget["spec"]["groupPriorityMinimum"],
            &widget["spec"]["versionPriority"]
        ),
        (&json!(1000), &json!(100))
    );
    assert_eq!(
        widget["metadata"]["labels"]["kube-aggregator.kubernetes.io/automanaged"],
        "true"
    );
    assert_eq!(
        api.get(&format!("{services}/v2.example.com")).await.0,
        StatusCode::NOT_FOUND,
        "v2 is not served"
    );
    let mine = json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1beta1.metrics.example.org"}, "spec": {"group": "metrics.example.org", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100, "service": {"namespace": "default", "name": "metrics"}}});
    assert_eq!(
        api.post(services, mine.clone()).await.0,
        StatusCode::CREATED
    );
    let mut misnamed = mine;
    misnamed["metadata"]["name"] = json!("metrics");
    assert_eq!(
        api.post(services, misnamed).await.0,
        StatusCode::UNPROCESSABLE_ENTITY,
        "the name must be version.group"
    );
    api.delete(&format!("{crds}/widgets.example.com"), None)
        .await;
    assert_eq!(
        api.get(&format!("{services}/v1.example.com")).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get(&format!("{services}/v1beta1.metrics.example.org"))
            .await
            .0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn token_requests_issue_service_account_tokens_that_authenticate_until_their_account_goes() {
    let api = Api::start().await;
    let accounts = "/api/v1/namespaces/default/serviceaccounts";
    api.post(
        accounts,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
    )
    .await;
    let request = |spec: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let (status, issued) = api
        .post(
            &format!("{accounts}/robot/token"),
            request(json!({"audiences": ["api"], "expirationSeconds": 600})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{issued}");
    assert_eq!(
        (&issued["kind"], &issued["apiVersion"]),
        (&json!("TokenRequest"), &json!("authentication.k8s.io/v1"))
    );
    assert_eq!(issued["spec"]["audiences"], json!(["api"]));
    assert!(
        issued["status"]["expirationTimestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    let token = issued["status"]["token"].as_str().unwrap().to_owned();
    // A JWT whose claims name the ServiceAccount.
    let payload = token.split('.').nth(1).unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        600
    );

    let as_token = |bearer: String| {
        api.http
            .get(format!("{}/api/v1/namespaces", api.server.url()))
            .bearer_auth(bearer)
            .send()
    };
    // A token for another audience does not authenticate to the API server: its audiences
    // must meet the server's (k8s.io/apiserver `authenticator.Audiences` checks).
    assert_eq!(
        as_token(token.clone()).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    // One for the API's audience does, and may do what RBAC grants the account (view).
    let (status, body) = api
        .post(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "robot-view"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                "subjects": [{"kind": "ServiceAccount", "namespace": "default", "name": "robot"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, issued) = api
        .post(&format!("{accounts}/robot/token"), request(json!({})))
        .await;
    let token = issued["status"]["token"].as_str().unwrap().to_owned();
    assert_eq!(
        as_token(token.clone()).await.unwrap().status(),
        StatusCode::OK
    );
    let forged = format!("{}x", &token[..token.len() - 1]);
    assert_eq!(
        as_token(forged).await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );

    // Defaults, refusals and a token bound to a pod, which ends with the pod.
    let (_, defaulted) = api
        .post(&format!("{accounts}/robot/token"), request(json!({})))
        .await;
    assert_eq!(defaulted["spec"]["expirationSeconds"], 3600);
    let (status, _) = api
        .post(
            &format!("{accounts}/robot/token"),
            request(json!({"expirationSeconds": 60})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = api
        .post(&format!("{accounts}/nobody/token"), request(json!({})))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    api.post(
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    let (status, bound) = api
        .post(
            &format!("{accounts}/robot/token"),
            request(json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p"}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{bound}");
    let bound = bound["status"]["token"].as_str().unwrap().to_owned();
    assert_eq!(
        as_token(bound.clone()).await.unwrap().status(),
        StatusCode::OK
    );
    api.delete("/api/v1/namespaces/default/pods/p", None).await;
    assert_eq!(
        as_token(bound).await.unwrap().status(),
        StatusCode::UNAUTHORIZED,
        "the pod is gone"
    );

    api.delete(&format!("{accounts}/robot"), None).await;
    assert_eq!(
        as_token(token).await.unwrap().status(),
        StatusCode::UNAUTHORIZED,
        "the account is gone"
    );
}

#[tokio::test]
async fn certificate_signing_requests_record_their_requester_and_are_approved_through_approval() {
    let api = Api::start().await;
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let csr = |name: &str, request: String| json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name}, "spec": {"request": request, "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"], "expirationSeconds": 86400, "username": "mallory", "groups": ["system:masters"]}});
    let (status, created) = api
        .post(
            csrs,
            csr(
                "alice",
                baremend_sim::tls::signing_request("alice").unwrap(),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    // The requester comes from the credentials, not from the body.
    assert_eq!(created["spec"]["username"], "kubernetes-admin");
    assert!(
        created["spec"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:authenticated"))
    );
    assert!(
        created
            .get("status")
            .is_none_or(|s| s.get("conditions").is_none())
    );
    let not_a_csr = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        "-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n",
    );
    let (status, refused) = api.post(csrs, csr("bad", not_a_csr)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let (status, list) = api.get(csrs).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
    let (_, resources) = api.get("/apis/certificates.k8s.io/v1").await;
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "certificatesigningrequests",
            "certificatesigningrequests/status",
            "certificatesigningrequests/approval"
        ]
    );

    // Neither an update nor a status update can change the spec or approve.
    let mut changed = created.clone();
    changed["spec"]["signerName"] = json!("example.com/other");
    let (_, updated) = api.put(&format!("{csrs}/alice"), changed).await;
    assert_eq!(
        updated["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client"
    );
    let mut approved = updated.clone();
    approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]});
    let (_, by_status) = api
        .put(&format!("{csrs}/alice/status"), approved.clone())
        .await;
    assert_eq!(by_status["status"]["conditions"], json!([]), "{by_status}");

    // The approval subresource approves; the condition gets its times.
    let mut current = approved.clone();
    current["metadata"]["resourceVersion"] = by_status["metadata"]["resourceVersion"].clone();
    let (status, by_approval) = api.put(&format!("{csrs}/alice/approval"), current).await;
    assert_eq!(status, StatusCode::OK, "{by_approval}");
    let condition = &by_approval["status"]["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"]),
        (&json!("Approved"), &json!("True"))
    );
    assert!(condition["lastUpdateTime"].is_string() && condition["lastTransitionTime"].is_string());
    // Denying as well, or taking the approval back, is refused.
    let mut denied = by_approval.clone();
    denied["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "Denied", "status": "True"}));
    assert_eq!(
        api.put(&format!("{csrs}/alice/approval"), denied).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let mut withdrawn = by_approval.clone();
    withdrawn["status"]["conditions"] = json!([]);
    assert_eq!(
        api.put(&format!("{csrs}/alice/approval"), withdrawn)
            .await
            .0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // A stale resourceVersion conflicts.
    assert_eq!(
        api.put(&format!("{csrs}/alice/approval"), approved).await.0,
        StatusCode::CONFLICT
    );

    // A ServiceAccount's request names the account (RBAC lets it create requests, as the
    // system:node-bootstrapper role lets a kubelet).
    api.post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
    )
    .await;
    api.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "csr-creator"},
            "rules": [{"verbs": ["create"], "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"]}]}),
    )
    .await;
    api.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "robot-csr"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "csr-creator"},
            "subjects": [{"kind": "ServiceAccount", "namespace": "default", "name": "robot"}]}),
    )
    .await;
    let (_, issued) = api
        .post(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    let token = issued["status"]["token"].as_str().unwrap();
    let response = api
        .http
        .post(format!("{}{csrs}", api.server.url()))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(
            csr(
                "robot",
                baremend_sim::tls::signing_request("robot").unwrap(),
            )
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let by_robot: Value = response.json().await.unwrap();
    assert_eq!(
        by_robot["spec"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert!(by_robot["spec"]["uid"].is_string());
}

#[tokio::test]
async fn discovery_orders_groups_by_priority_and_versions_kube_aware() {
    let api = Api::start().await;
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "gadgets.example.com"}, "spec": {"group": "example.com", "names": {"kind": "Gadget", "plural": "gadgets"}, "scope": "Namespaced", "versions": [
        {"name": "v1alpha1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v1beta1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
    api.post(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        crd,
    )
    .await;
    let (_, group) = api.get("/apis/example.com").await;
    assert_eq!(
        group["preferredVersion"]["version"], "v1",
        "the highest kube-like version, not the spec's first"
    );
    assert_eq!(
        version_names(&group),
        [&json!("v1"), &json!("v1beta1"), &json!("v1alpha1")]
    );
    // Built-in groups by the aggregator's priorities, CRD groups (1000) last.
    let (_, groups) = api.get("/apis").await;
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "apiregistration.k8s.io",
            "apps",
            "events.k8s.io",
            "authentication.k8s.io",
            "authorization.k8s.io",
            "batch",
            "certificates.k8s.io",
            "policy",
            "rbac.authorization.k8s.io",
            "admissionregistration.k8s.io",
            "apiextensions.k8s.io",
            "scheduling.k8s.io",
            "coordination.k8s.io",
            "discovery.k8s.io",
            "example.com"
        ]
    );
    let (_, _, aggregated) = api.get_as("/apis", AGGREGATED_DISCOVERY, None).await;
    let aggregated_names: Vec<&str> = aggregated["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["metadata"]["name"].as_str())
        .collect();
    assert_eq!(aggregated_names, names);
}

fn token_review(token: &str, audiences: &[&str]) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token, "audiences": audiences}})
}

fn metrics_access_review(user: &str, groups: &[&str]) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "uid": format!("uid-{user}"),
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}})
}

#[tokio::test]
async fn token_reviews_name_the_tokens_user_and_answer_unknown_tokens_unauthenticated() {
    let api = Api::start().await;
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let token = api.server.mint_token(
        "system:serviceaccount:monitoring:prometheus",
        &["system:serviceaccounts"],
    );
    let (status, body) = api.post(path, token_review(&token, &[])).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["kind"], "TokenReview");
    assert_eq!(body["status"]["authenticated"], true, "{body}");
    assert_eq!(
        body["status"]["user"]["username"],
        "system:serviceaccount:monitoring:prometheus"
    );
    let groups = body["status"]["user"]["groups"].as_array().unwrap();
    assert!(
        groups.contains(&json!("system:serviceaccounts"))
            && groups.contains(&json!("system:authenticated")),
        "{body}"
    );
    assert_eq!(
        body["status"]["audiences"],
        json!(["https://kubernetes.default.svc"])
    );

    // The kubeconfig's own token is the cluster admin's.
    let (_, body) = api.post(path, token_review(api.server.token(), &[])).await;
    assert_eq!(
        body["status"]["user"]["username"], "kubernetes-admin",
        "{body}"
    );

    // An unknown token and a foreign audience are answers, not errors.
    let (status, body) = api.post(path, token_review("not-a-token", &[])).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"]["authenticated"], false, "{body}");
    assert!(body["status"].get("user").is_none(), "{body}");
    let (_, body) = api
        .post(path, token_review(&token, &["https://elsewhere"]))
        .await;
    assert_eq!(body["status"]["authenticated"], false, "{body}");

    // No token: 400; the wrong kind: 400; create-only: 405 on GET.
    let (status, body) = api.post(path, token_review("", &[])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["kind"], "Status");
    let (status, _) = api
        .post(
            path,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "spec": {"token": token}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = api.get(path).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(api.server.review_counts().token_reviews, 4);
}

#[tokio::test]
async fn subject_access_reviews_decide_non_resource_urls_from_rbac_default_deny() {
    let api = Api::start().await;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let allowed = |body: &Value| body["status"]["allowed"].as_bool();
    let (status, body) = api
        .post(path, metrics_access_review("alice", &["team"]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(allowed(&body), Some(false), "default deny: {body}");
    // What a cluster admin grants a metrics scraper: a ClusterRole with the URL, bound.
    let roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    let bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    let (status, body) = api
        .post(
            roles,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "metrics-reader"},
                "rules": [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = api
        .post(
            bindings,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "team-metrics"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "team"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, body) = api
        .post(path, metrics_access_review("alice", &["team"]))
        .await;
    assert_eq!(allowed(&body), Some(true), "{body}");
    let (_, body) = api
        .post(path, metrics_access_review("bob", &["other"]))
        .await;
    assert_eq!(allowed(&body), Some(false), "{body}");
    // Another verb or path is another question.
    let mut post = metrics_access_review("alice", &["team"]);
    post["spec"]["nonResourceAttributes"]["verb"] = json!("post");
    assert_eq!(allowed(&api.post(path, post).await.1), Some(false));
    let (status, _) = api.delete(&format!("{bindings}/team-metrics"), None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = api
        .post(path, metrics_access_review("alice", &["team"]))
        .await;
    assert_eq!(allowed(&body), Some(false), "revoked: {body}");
    // The cluster admin may do everything.
    let (_, body) = api
        .post(
            path,
            metrics_access_review("kubernetes-admin", &["system:masters"]),
        )
        .await;
    assert_eq!(allowed(&body), Some(true), "{body}");

    // No subject, or neither or both attribute kinds: 422.
    let (status, body) = api.post(path, metrics_access_review("", &[])).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["reason"], "Invalid");
    let mut both = metrics_access_review("alice", &[]);
    both["spec"]["resourceAttributes"] = json!({"verb": "get", "resource": "pods"});
    assert_eq!(
        api.post(path, both).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(api.server.review_counts().access_reviews, 6);
}

#[tokio::test]
async fn the_review_groups_are_discovered_with_create_only_resources() {
    let api = Api::start().await;
    let (_, groups) = api.get("/apis").await;
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(
        names.contains(&"authentication.k8s.io") && names.contains(&"authorization.k8s.io"),
        "{names:?}"
    );
    for (group, plural, kind) in [
        ("authentication.k8s.io", "tokenreviews", "TokenReview"),
        (
            "authorization.k8s.io",
            "subjectaccessreviews",
            "SubjectAccessReview",
        ),
    ] {
        let (status, list) = api.get(&format!("/apis/{group}/v1")).await;
        assert_eq!(status, StatusCode::OK, "{list}");
        let resource = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == plural)
            .unwrap_or_else(|| panic!("{plural} in {list}"));
        assert_eq!(
            (resource["name"].as_str(), resource["kind"].as_str()),
            (Some(plural), Some(kind))
        );
        assert_eq!(resource["verbs"], json!(["create"]));
        assert_eq!(resource["namespaced"], false);
        let (status, document) = api.get(&format!("/apis/{group}")).await;
        assert_eq!(
            (status, document["preferredVersion"]["version"].as_str()),
            (StatusCode::OK, Some("v1"))
        );
    }
}

#[tokio::test]
async fn a_deleted_namespace_terminates_and_its_content_goes_a_moment_later() {
    // kubernetes `pkg/registry/core/namespace/storage/storage.go` (Delete: deletionTimestamp
    // and phase Terminating in one update) and the namespace controller of
    // `pkg/controller/namespace/deletion/namespaced_resources_deleter.go`, which runs apart
    // from the server: the content outlives the delete call, so `kubectl delete -k` (which
    // lists the Namespace first) can still delete each of its objects.
    let api = Api::start().await;
    let (status, _) = api
        .post("/api/v1/namespaces", json!({"metadata": {"name": "going"}}))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let configmap = json!({"metadata": {"name": "kept"}, "data": {"k": "v"}});
    let (status, _) = api
        .post("/api/v1/namespaces/going/configmaps", configmap)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = api.delete("/api/v1/namespaces/going", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = api.get("/api/v1/namespaces/going").await;
    assert_eq!(body["status"]["phase"], "Terminating", "{body}");
    let (status, _) = api.get("/api/v1/namespaces/going/configmaps/kept").await;
    assert_eq!(status, StatusCode::OK, "the content is still there");
    let (status, body) = api
        .post(
            "/api/v1/namespaces/going/configmaps",
            json!({"metadata": {"name": "new"}}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, body) = api
        .delete("/api/v1/namespaces/going/configmaps/kept", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    common::eventually("the namespace gone", Duration::from_secs(10), async || {
        api.get("/api/v1/namespaces/going").await.0 == StatusCode::NOT_FOUND
    })
    .await;
}
