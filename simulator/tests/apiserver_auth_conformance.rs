//! Fake-conformance: the behaviour of the real Kubernetes API server that clients can observe,
//! asserted one rule per test against the simulated API server over HTTP. Every rule here is
//! documented API server behaviour (API concepts, apiserver handlers); a simulator more
//! lenient than a real server would hide controller bugs.
//!
//! This file: authentication and its APIs — the bearer token, token requests, certificate
//! signing requests and their approval, token reviews and subject access reviews.

mod common;

use common::apiserver::Api;
use reqwest::StatusCode;
use serde_json::{Value, json};

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
    // As kube-apiserver v1.36.3 answers it (tests/fidelity_corpus.rs): `authenticated: false`
    // left out (omitempty), an empty user, the error's words.
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["status"],
        json!({"user": {}, "error": "invalid bearer token"}),
        "{body}"
    );
    let (_, body) = api
        .post(path, token_review(&token, &["https://elsewhere"]))
        .await;
    assert_ne!(body["status"]["authenticated"], true, "{body}");

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
