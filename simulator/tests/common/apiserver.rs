//! The simulated API server over plain HTTP as the conformance tests call it: raw requests
//! with a bearer token (or another user's, or none), in JSON or another body format, and
//! watches read for a while.

use std::time::Duration;

use baremend_sim::apiserver::{ApiServer, ApiServerConfig};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A simulated API server and an HTTP client for it.
pub struct Api {
    /// The server.
    pub server: ApiServer,
    /// A plain client; each request names its own credentials.
    pub http: reqwest::Client,
}

impl Api {
    /// A server with the default configuration.
    pub async fn start() -> Api {
        Api::start_with(ApiServerConfig::default()).await
    }

    /// A server with `config`.
    pub async fn start_with(config: ApiServerConfig) -> Api {
        let server = ApiServer::start(config).await.unwrap();
        Api {
            server,
            http: reqwest::Client::new(),
        }
    }

    /// A request with the server's admin token and a JSON (or other `content_type`) body:
    /// the status and the answer, as JSON when it parses.
    pub async fn call(
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
    pub async fn send_raw(
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

    /// GET as admin.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, "", None).await
    }
    /// POST a JSON body as admin.
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, "application/json", Some(body))
            .await
    }
    /// PUT a JSON body as admin.
    pub async fn put(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PUT, path, "application/json", Some(body))
            .await
    }
    /// PATCH with the patch type `kind` (its content type) as admin.
    pub async fn patch(&self, path: &str, kind: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PATCH, path, kind, Some(body)).await
    }
    /// DELETE, with delete options when given, as admin.
    pub async fn delete(&self, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, "application/json", body)
            .await
    }

    /// Sends a GET and hands back the response unread (a watch to read later).
    pub async fn open(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.server.url()))
            .bearer_auth(self.server.token())
            .send()
            .await
            .unwrap()
    }

    /// A GET with an `Accept` header (and `If-None-Match` when given): status, headers, body.
    pub async fn get_as(
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

    /// Creates a ConfigMap in `default` with `labels`; fails the test unless it was created.
    pub async fn configmap(&self, name: &str, labels: Value) -> Value {
        let (status, body) = self
            .post("/api/v1/namespaces/default/configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// Reads a watch stream for `wait`, returning the events.
    pub async fn watch(&self, path: &str, wait: Duration) -> Vec<Value> {
        self.watch_as(path, "application/json", wait).await
    }

    /// Reads a watch stream asked for with an `Accept` header.
    pub async fn watch_as(&self, path: &str, accept: &str, wait: Duration) -> Vec<Value> {
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

/// An object's `metadata.resourceVersion`, as the number the simulator makes it.
pub fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The `type` of each watch event, in order.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}
