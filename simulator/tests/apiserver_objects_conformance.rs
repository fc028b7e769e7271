//! Fake-conformance: the behaviour of the real Kubernetes API server that clients can observe,
//! asserted one rule per test against the simulated API server over HTTP. Every rule here is
//! documented API server behaviour (API concepts, apiserver handlers); a simulator more
//! lenient than a real server would hide controller bugs.
//!
//! This file: objects — create, read, list and page, update, status, patches, server-side
//! apply, deletion (finalizers, preconditions, owners, namespaces, graceful pods), eviction
//! through disruption budgets, body formats, metadata-only reads and the scale subresource.

use std::time::Duration;

mod common;

use baremend_sim::apiserver::ApiServerConfig;
use common::apiserver::{Api, rv, types};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

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
    // 422: the PatchOptions are invalid (kube-apiserver v1.36.3, tests/fidelity_corpus.rs).
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
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
