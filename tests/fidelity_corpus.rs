//! The simulated API server measured against a real kube-apiserver: one corpus of requests —
//! what kubectl, kube-rs and the controller send: CRUD on built-in and custom kinds, merge,
//! JSON and strategic-merge patches, server-side apply, selectors, pagination, conflicts,
//! RBAC refusals, reviews and TokenRequests, schema and CEL refusals — sent to both, the
//! answers compared after what differs by nature (UIDs, times, resource versions, tokens) is
//! normalised away.
//!
//! Every difference is either fixed in the simulator or listed, with why it is kept, in the
//! table "Differences the corpus keeps" of `docs/engineering/fidelity.md`: the test fails on
//! a difference the table does not list, and on a listed one that no longer differs (so the
//! table stays true). It prints the figure: requests compared, differences, kept.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Value, json};

use baremend_testkit as common;

use common::servers::{Server, ServerKind};

/// How one server is reached: its address and an HTTP client that authenticates as the
/// administrator, or as another user.
struct Endpoint {
    url: String,
    admin: reqwest::Client,
    tenant: reqwest::Client,
}

/// An HTTP client of a kubeconfig (its CA, its token or client certificate).
fn http_of(kubeconfig: &str) -> (String, reqwest::Client) {
    let config: Value = serde_yaml::from_str(kubeconfig).expect("a kubeconfig");
    let cluster = &config["clusters"][0]["cluster"];
    let user = &config["users"][0]["user"];
    let b64 = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 data"))
            .expect("base64")
    };
    let mut builder = reqwest::Client::builder().tls_built_in_root_certs(false);
    if let Some(ca) = cluster.get("certificate-authority-data") {
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(&b64(ca)).unwrap());
    }
    if let Some(cert) = user.get("client-certificate-data") {
        let mut pem = b64(cert);
        pem.extend(b64(&user["client-key-data"]));
        builder = builder.identity(reqwest::Identity::from_pem(&pem).unwrap());
    }
    if let Some(token) = user.get("token").and_then(Value::as_str) {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        builder = builder.default_headers(headers);
    }
    (
        cluster["server"].as_str().unwrap().to_owned(),
        builder.build().unwrap(),
    )
}

impl Endpoint {
    fn of(server: &Server) -> Self {
        let (url, admin) = http_of(&server.admin_kubeconfig());
        let (_, tenant) = http_of(&server.kubeconfig_of("tenant", &["tenants"]));
        Endpoint { url, admin, tenant }
    }
}

/// Who sends a request.
#[derive(Debug, Clone, Copy)]
enum Who {
    Admin,
    Tenant,
}

/// One request of the corpus.
struct Request {
    id: &'static str,
    who: Who,
    method: reqwest::Method,
    path: String,
    content_type: &'static str,
    body: Option<Value>,
}

fn req(id: &'static str, method: &str, path: &str) -> Request {
    Request {
        id,
        who: Who::Admin,
        method: method.parse().unwrap(),
        path: path.to_owned(),
        content_type: "application/json",
        body: None,
    }
}

impl Request {
    fn body(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }
    fn typed(mut self, content_type: &'static str) -> Self {
        self.content_type = content_type;
        self
    }
    fn by(mut self, who: Who) -> Self {
        self.who = who;
        self
    }
}

/// Sends one request; the status code and the JSON answer (a text answer as a string).
async fn send(endpoint: &Endpoint, request: &Request) -> (u16, Value) {
    let client = match request.who {
        Who::Admin => &endpoint.admin,
        Who::Tenant => &endpoint.tenant,
    };
    let mut builder = client
        .request(
            request.method.clone(),
            format!("{}{}", endpoint.url, request.path),
        )
        .header("Accept", "application/json");
    if let Some(body) = &request.body {
        let text = if request.content_type.ends_with("yaml") {
            serde_yaml::to_string(body).unwrap()
        } else {
            body.to_string()
        };
        builder = builder
            .header("Content-Type", request.content_type)
            .body(text);
    }
    let response = builder.send().await.expect("an answer");
    let code = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (code, body)
}

/// Takes away what differs by nature between two servers: UIDs, times, resource versions,
/// continue tokens, issued tokens and their expiry.
fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "time",
                "token",
                "expirationTimestamp",
            ] {
                if let Some(v) = map.get_mut(key)
                    && !v.is_object()
                {
                    *v = json!("<normalised>");
                }
            }
            // Field ownership is compared by who wrote and how; the field sets themselves
            // differ (docs/engineering/fidelity.md, "normalised away").
            if let Some(Value::Array(entries)) = map.get_mut("managedFields") {
                for entry in entries.iter_mut() {
                    if let Value::Object(fields) = entry {
                        fields.retain(|k, _| {
                            matches!(k.as_str(), "manager" | "operation" | "subresource")
                        });
                    }
                }
            }
            if let Some(v) = map.get_mut("continue")
                && v.as_str().is_some_and(|s| !s.is_empty())
            {
                *v = json!("<continue>");
            }
            for child in map.values_mut() {
                normalize(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

const CM: &str = "/api/v1/namespaces/corpus/configmaps";
const HOSTBMCS: &str = "/apis/baremend.io/v1alpha1/namespaces/corpus/hostbmcs";
const REMEDIATIONS: &str = "/apis/baremend.io/v1alpha1/namespaces/corpus/remediations";

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "corpus", "labels": {"tier": "a"}}, "data": data})
}

/// The corpus, in order (each request may rely on those before it).
fn corpus() -> Vec<Request> {
    let host_bmc = |name: &str, spec: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc",
            "metadata": {"name": name, "namespace": "corpus"}, "spec": spec})
    };
    let good_bmc = json!({"nodeName": "worker-0", "address": "redfish://10.0.0.1", "credentialsName": "creds"});
    vec![
        req("namespace-create", "POST", "/api/v1/namespaces").body(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "corpus"}})),
        req("namespace-exists", "POST", "/api/v1/namespaces").body(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "corpus"}})),
        req("configmap-create", "POST", CM).body(configmap("one", json!({"a": "1"}))),
        req("configmap-create-again", "POST", CM).body(configmap("one", json!({"a": "1"}))),
        req("configmap-create-two", "POST", CM).body(configmap("two", json!({"b": "2"}))),
        req("configmap-create-as-text", "POST", CM)
            .typed("text/plain")
            .body(configmap("text", json!({}))),
        req("configmap-bad-name", "POST", CM).body(configmap("Not_A_Name", json!({}))),
        req("configmap-get", "GET", &format!("{CM}/one")),
        req("configmap-missing", "GET", &format!("{CM}/none")),
        req("configmap-in-missing-namespace", "GET", "/api/v1/namespaces/nowhere/configmaps/x"),
        req("configmap-list-page-by-label", "GET", &format!("{CM}?limit=1&labelSelector=tier%3Da")),
        req("configmap-list-by-label", "GET", &format!("{CM}?labelSelector=tier%3Da")),
        req("configmap-list-by-bad-label", "GET", &format!("{CM}?labelSelector=tier%3D%3D%3Da")),
        req("configmap-list-by-field", "GET", &format!("{CM}?fieldSelector=metadata.name%3Dtwo")),
        req("configmap-list-by-unknown-field", "GET", &format!("{CM}?fieldSelector=data.a%3D1")),
        req("configmap-merge-patch", "PATCH", &format!("{CM}/one"))
            .typed("application/merge-patch+json")
            .body(json!({"data": {"b": "2", "a": null}})),
        req("configmap-strategic-patch", "PATCH", &format!("{CM}/one"))
            .typed("application/strategic-merge-patch+json")
            .body(json!({"metadata": {"labels": {"tier": "b"}}, "data": {"c": "3"}})),
        req("configmap-json-patch", "PATCH", &format!("{CM}/one"))
            .typed("application/json-patch+json")
            .body(json!([{"op": "add", "path": "/data/d", "value": "4"}, {"op": "remove", "path": "/data/c"}])),
        req("configmap-json-patch-bad-path", "PATCH", &format!("{CM}/one"))
            .typed("application/json-patch+json")
            .body(json!([{"op": "remove", "path": "/data/zz"}])),
        req("configmap-json-patch-test-fails", "PATCH", &format!("{CM}/one"))
            .typed("application/json-patch+json")
            .body(json!([{"op": "test", "path": "/data/b", "value": "9"}])),
        req("configmap-apply", "PATCH", &format!("{CM}/three?fieldManager=corpus"))
            .typed("application/apply-patch+yaml")
            .body(configmap("three", json!({"x": "1"}))),
        req("configmap-apply-conflict", "PATCH", &format!("{CM}/three?fieldManager=other"))
            .typed("application/apply-patch+yaml")
            .body(configmap("three", json!({"x": "2"}))),
        req("configmap-apply-force", "PATCH", &format!("{CM}/three?fieldManager=other&force=true"))
            .typed("application/apply-patch+yaml")
            .body(configmap("three", json!({"x": "2"}))),
        req("configmap-apply-no-manager", "PATCH", &format!("{CM}/three"))
            .typed("application/apply-patch+yaml")
            .body(configmap("three", json!({"x": "3"}))),
        req("configmap-put-stale", "PUT", &format!("{CM}/two")).body({
            let mut c = configmap("two", json!({"b": "3"}));
            c["metadata"]["resourceVersion"] = json!("1");
            c
        }),
        req("configmap-put-name-mismatch", "PUT", &format!("{CM}/two")).body(configmap("other", json!({}))),
        req("configmap-patch-missing", "PATCH", &format!("{CM}/none"))
            .typed("application/merge-patch+json")
            .body(json!({"data": {"a": "1"}})),
        req("configmap-unsupported-patch-type", "PATCH", &format!("{CM}/one"))
            .typed("application/xml")
            .body(json!({})),
        req("configmap-delete", "DELETE", &format!("{CM}/two")),
        req("configmap-delete-missing", "DELETE", &format!("{CM}/two")),
        req("configmap-dry-run-create", "POST", &format!("{CM}?dryRun=All")).body(configmap("dry", json!({}))),
        req("configmap-dry-run-not-stored", "GET", &format!("{CM}/dry")),
        req("tenant-list-refused", "GET", CM).by(Who::Tenant),
        req("tenant-create-refused", "POST", CM).by(Who::Tenant).body(configmap("t", json!({}))),
        req("tenant-cluster-list-refused", "GET", "/api/v1/nodes").by(Who::Tenant),
        req("self-subject-access-review", "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .by(Who::Tenant)
            .body(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"verb": "list", "resource": "configmaps", "namespace": "corpus"}}})),
        req("subject-access-review", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .body(json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": "tenant", "groups": ["tenants"],
                    "resourceAttributes": {"verb": "get", "resource": "secrets", "namespace": "corpus"}}})),
        req("token-review-garbage", "POST", "/apis/authentication.k8s.io/v1/tokenreviews")
            .body(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "not-a-token"}})),
        req("serviceaccount-create", "POST", "/api/v1/namespaces/corpus/serviceaccounts")
            .body(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}})),
        req("token-request", "POST", "/api/v1/namespaces/corpus/serviceaccounts/robot/token")
            .body(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})),
        req("token-request-missing-account", "POST", "/api/v1/namespaces/corpus/serviceaccounts/nobody/token")
            .body(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})),
        req("hostbmc-create", "POST", HOSTBMCS).body(host_bmc("good", good_bmc.clone())),
        req("hostbmc-get", "GET", &format!("{HOSTBMCS}/good")),
        req("hostbmc-bad-pattern", "POST", HOSTBMCS).body(host_bmc("bad", json!({"nodeName": "Worker_0", "address": "redfish://10.0.0.1", "credentialsName": "creds"}))),
        req("hostbmc-cel", "POST", HOSTBMCS).body(host_bmc("cel", json!({"address": "redfish://10.0.0.1", "credentialsName": "creds"}))),
        req("hostbmc-unknown-field-pruned", "POST", HOSTBMCS).body(host_bmc("pruned", {
            let mut s = good_bmc.clone();
            s["bogus"] = json!(1);
            s
        })),
        req("hostbmc-status-merge", "PATCH", &format!("{HOSTBMCS}/good/status"))
            .typed("application/merge-patch+json")
            .body(json!({"status": {"accepted": true}})),
        req("hostbmc-strategic-refused", "PATCH", &format!("{HOSTBMCS}/good"))
            .typed("application/strategic-merge-patch+json")
            .body(json!({"spec": {"address": "redfish://10.0.0.2"}})),
        req("hostbmc-list", "GET", HOSTBMCS),
        req("remediation-cel", "POST", REMEDIATIONS).body(json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
            "metadata": {"name": "r"}, "spec": {"nodeName": "worker-0"}})),
        req("unknown-kind", "GET", "/apis/baremend.io/v1alpha1/namespaces/corpus/widgets"),
        req("unknown-group", "GET", "/apis/nothing.example.com/v1/things"),
        req("namespace-delete", "DELETE", "/api/v1/namespaces/corpus"),
    ]
}

/// The ids the fidelity doc lists as differences kept, with why.
fn kept() -> BTreeMap<String, String> {
    let doc =
        std::fs::read_to_string(common::repo_root().join("docs/engineering/fidelity.md")).unwrap();
    let section = doc
        .split("### Differences the corpus keeps")
        .nth(1)
        .expect("docs/engineering/fidelity.md has the section \"Differences the corpus keeps\"");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            Some((
                cells.first()?.trim_matches('`').to_owned(),
                cells.get(1)?.to_string(),
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_the_corpus_as_the_real_server_does() {
    let mut endpoints = Vec::new();
    let mut servers = Vec::new();
    for kind in [ServerKind::Simulated, ServerKind::Real] {
        let server = Server::start(kind).await;
        server.install_crds().await;
        endpoints.push(Endpoint::of(&server));
        servers.push(server);
    }
    let corpus = corpus();
    let mut differing = BTreeMap::new();
    for request in &corpus {
        let mut answers = Vec::new();
        for endpoint in &endpoints {
            let (code, mut body) = send(endpoint, request).await;
            normalize(&mut body);
            answers.push(json!({"code": code, "body": body}));
        }
        if answers[0] != answers[1] {
            differing.insert(
                request.id.to_owned(),
                format!("simulated: {}\nreal:      {}", answers[0], answers[1]),
            );
        }
    }
    let kept = kept();
    let unlisted: Vec<String> = differing
        .iter()
        .filter(|(id, _)| !kept.contains_key(*id))
        .map(|(id, answers)| format!("{id}:\n{answers}"))
        .collect();
    let no_longer: Vec<&String> = kept
        .keys()
        .filter(|id| !differing.contains_key(*id))
        .collect();
    println!(
        "fidelity corpus: {} requests compared, {} answered differently, {} of them kept (docs/engineering/fidelity.md)",
        corpus.len(),
        differing.len(),
        differing.keys().filter(|id| kept.contains_key(*id)).count()
    );
    assert!(
        unlisted.is_empty(),
        "differences the fidelity doc does not list:\n\n{}",
        unlisted.join("\n\n")
    );
    assert!(
        no_longer.is_empty(),
        "listed in the fidelity doc but answered alike now (take them off): {no_longer:?}"
    );
}
