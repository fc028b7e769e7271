//! Fake-conformance: the behaviour of the real Kubernetes API server that clients can observe,
//! asserted one rule per test against the simulated API server over HTTP. Every rule here is
//! documented API server behaviour (API concepts, apiserver handlers); a simulator more
//! lenient than a real server would hide controller bugs.
//!
//! This file: watches (versions, selectors, bookmarks, timeouts, expiry, resuming, a watcher
//! that falls behind) and the faults and slowness a test injects.

use std::time::Duration;

mod common;

use baremend_sim::apiserver::{ApiServerConfig, FaultRule};
use common::apiserver::{Api, rv, types};
use reqwest::StatusCode;
use serde_json::{Value, json};

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

/// An unreachable server (a workload cluster's API gone): its open watch ends, a new request
/// fails without an answer, and once reachable again it answers as before.
#[tokio::test]
async fn an_unreachable_server_cuts_its_watches_and_answers_nothing_until_back() {
    let api = Api::start().await;
    let mut watch = api
        .open("/api/v1/namespaces/default/configmaps?watch=1")
        .await;
    assert_eq!(api.get("/api/v1/namespaces").await.0, StatusCode::OK);
    api.server.set_reachable(false);
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        while let Ok(Some(_)) = watch.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the watch ended");
    let refused = api
        .http
        .get(format!("{}/api/v1/namespaces", api.server.url()))
        .bearer_auth(api.server.token())
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    api.server.set_reachable(true);
    assert!(api.server.reachability().is_reachable());
    assert_eq!(api.get("/api/v1/namespaces").await.0, StatusCode::OK);
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
