//! Fake-conformance: the behaviour of the real Kubernetes API server that clients can observe,
//! asserted one rule per test against the simulated API server over HTTP. Every rule here is
//! documented API server behaviour (API concepts, apiserver handlers); a simulator more
//! lenient than a real server would hide controller bugs.
//!
//! This file: discovery — the legacy and aggregated documents, their ordering, the
//! APIServices that follow the served groups, OpenAPI v2, and the review groups.

mod common;

use common::apiserver::Api;
use reqwest::StatusCode;
use serde_json::{Value, json};

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
