//! Fake-conformance: the behaviour of the real Kubernetes API server that clients can observe,
//! asserted one rule per test against the simulated API server over HTTP. Every rule here is
//! documented API server behaviour (API concepts, apiserver handlers); a simulator more
//! lenient than a real server would hide controller bugs.

use std::time::Duration;

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

    async fn configmap(&self, name: &str, labels: Value) -> Value {
        let (status, body) = self
            .post("/api/v1/namespaces/default/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// Reads a watch stream for `wait`, returning the events.
    async fn watch(&self, path: &str, wait: Duration) -> Vec<Value> {
        let mut response = self
            .http
            .get(format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token())
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
async fn subject_access_reviews_decide_non_resource_urls_from_the_rules_default_deny() {
    use baremend_sim::apiserver::Subject;
    let api = Api::start().await;
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let allowed = |body: &Value| body["status"]["allowed"].as_bool();
    let (status, body) = api
        .post(path, metrics_access_review("alice", &["team"]))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(allowed(&body), Some(false), "default deny: {body}");
    api.server
        .allow_non_resource(Subject::Group("team".into()), "get", "/metrics");
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
    api.server
        .revoke_non_resource(&Subject::Group("team".into()));
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
        let resource = &list["resources"][0];
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
