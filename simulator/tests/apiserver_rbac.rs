//! Fake-conformance of authentication and RBAC: who a request is from, and what RBAC lets it
//! do, asserted against the simulated API server over HTTP as a real cluster answers
//! (kubernetes/kubernetes `plugin/pkg/auth/authorizer/rbac/rbac.go`,
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go`
//! `forbiddenMessage`, `endpoints/filters/impersonation.go`,
//! `pkg/registry/rbac/*/policybased/storage.go`, `pkg/controller/clusterroleaggregation`).

use std::time::Duration;

use baremend_sim::apiserver::{API_AUDIENCE, ApiServer, ApiServerConfig, UserInfo};
use baremend_sim::cluster::local::{Local, SECRETS};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";

struct Api {
    server: ApiServer,
    http: reqwest::Client,
}

impl Api {
    async fn start() -> Api {
        Api {
            server: ApiServer::start(ApiServerConfig::default()).await.unwrap(),
            http: reqwest::Client::new(),
        }
    }

    /// A request with `token` (none when empty) and extra headers.
    async fn call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.server.url()));
        if !token.is_empty() {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
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

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        self.call(token, Method::GET, path, None, &[]).await
    }

    async fn post(&self, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(token, Method::POST, path, Some(body), &[]).await
    }

    /// Creates as the admin; must succeed.
    async fn create(&self, path: &str, body: Value) -> Value {
        let (status, created) = self.post(self.server.token(), path, body).await;
        assert_eq!(status, StatusCode::CREATED, "{path}: {created}");
        created
    }

    async fn namespace(&self, name: &str) {
        self.create(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await;
    }

    /// A new ServiceAccount and a TokenRequest token of it.
    async fn account(&self, namespace: &str, name: &str) -> String {
        self.create(
            &format!("/api/v1/namespaces/{namespace}/serviceaccounts"),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}),
        )
        .await;
        let issued = self
            .create(
                &format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"),
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
            )
            .await;
        issued["status"]["token"].as_str().unwrap().to_owned()
    }

    /// A Role (namespace Some) or ClusterRole with `rules`.
    async fn role(&self, namespace: Option<&str>, name: &str, rules: Value) {
        let (path, kind) = match namespace {
            Some(ns) => (format!("{RBAC}/namespaces/{ns}/roles"), "Role"),
            None => (format!("{RBAC}/clusterroles"), "ClusterRole"),
        };
        self.create(
            &path,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "rules": rules}),
        )
        .await;
    }

    /// Binds `role` (a Role when `role_kind` says so) to a ServiceAccount, in `namespace`
    /// (a RoleBinding) or cluster-wide.
    async fn bind(
        &self,
        namespace: Option<&str>,
        role_kind: &str,
        role: &str,
        account: (&str, &str),
    ) {
        let (path, kind) = match namespace {
            Some(ns) => (
                format!("{RBAC}/namespaces/{ns}/rolebindings"),
                "RoleBinding",
            ),
            None => (format!("{RBAC}/clusterrolebindings"), "ClusterRoleBinding"),
        };
        self.create(
            &path,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
                "metadata": {"name": format!("{role}-{}", account.1)},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
                "subjects": [{"kind": "ServiceAccount", "namespace": account.0, "name": account.1}]}),
        )
        .await;
    }
}

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": [group], "resources": resources})
}

async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_unbound_service_account_may_not_list_secrets_and_is_told_so_as_by_a_real_server() {
    let api = Api::start().await;
    let token = api.account("default", "nobody").await;
    let (status, body) = api.get(&token, "/api/v1/secrets").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["code"], 403);
    assert_eq!(
        body["message"],
        "secrets is forbidden: User \"system:serviceaccount:default:nobody\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"
    );
    assert_eq!(body["details"], json!({"kind": "secrets"}));
    let (status, body) = api
        .get(&token, "/api/v1/namespaces/kube-system/secrets/x")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["message"],
        "secrets \"x\" is forbidden: User \"system:serviceaccount:default:nobody\" cannot get resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    assert_eq!(body["details"], json!({"kind": "secrets", "name": "x"}));
    let (status, body) = api
        .get(
            &token,
            "/apis/coordination.k8s.io/v1/namespaces/default/leases?watch=true",
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("cannot watch resource \"leases\" in API group \"coordination.k8s.io\""),
        "{body}"
    );
    // Discovery and the public information are every authenticated user's (system:discovery,
    // system:public-info-viewer); health and version also without a token.
    assert_eq!(api.get(&token, "/api").await.0, StatusCode::OK);
    assert_eq!(api.get(&token, "/apis/apps/v1").await.0, StatusCode::OK);
    assert_eq!(api.get("", "/version").await.0, StatusCode::OK);
    assert_eq!(api.get("", "/api").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(
        api.get("garbage", "/api/v1/pods").await.0,
        StatusCode::UNAUTHORIZED
    );
    // The admin's kubeconfig token is in system:masters: everything.
    assert_eq!(
        api.get(api.server.token(), "/api/v1/secrets").await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_role_in_one_namespace_grants_nothing_in_another_nor_cluster_wide() {
    let api = Api::start().await;
    api.namespace("a").await;
    api.namespace("b").await;
    let token = api.account("a", "reader").await;
    api.role(
        Some("a"),
        "secret-reader",
        json!([rule(&["get", "list"], "", &["secrets"])]),
    )
    .await;
    api.bind(Some("a"), "Role", "secret-reader", ("a", "reader"))
        .await;
    assert_eq!(
        api.get(&token, "/api/v1/namespaces/a/secrets").await.0,
        StatusCode::OK
    );
    let (status, body) = api.get(&token, "/api/v1/namespaces/b/secrets").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .ends_with("in the namespace \"b\""),
        "{body}"
    );
    assert_eq!(
        api.get(&token, "/api/v1/secrets").await.0,
        StatusCode::FORBIDDEN
    );
    // A RoleBinding may name a ClusterRole: its rules, in the binding's namespace only.
    api.role(None, "pod-reader", json!([rule(&["list"], "", &["pods"])]))
        .await;
    api.bind(Some("b"), "ClusterRole", "pod-reader", ("a", "reader"))
        .await;
    assert_eq!(
        api.get(&token, "/api/v1/namespaces/b/pods").await.0,
        StatusCode::OK
    );
    assert_eq!(
        api.get(&token, "/api/v1/namespaces/a/pods").await.0,
        StatusCode::FORBIDDEN
    );
    // Deleting the binding takes the grant back at once.
    let (status, _) = api
        .call(
            api.server.token(),
            Method::DELETE,
            &format!("{RBAC}/namespaces/a/rolebindings/secret-reader-reader"),
            None,
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        api.get(&token, "/api/v1/namespaces/a/secrets").await.0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn resource_names_allow_the_named_objects_only_and_no_plain_list() {
    let api = Api::start().await;
    let token = api.account("default", "one-reader").await;
    api.role(
        Some("default"),
        "one",
        json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["one"]}]),
    )
    .await;
    api.bind(Some("default"), "Role", "one", ("default", "one-reader"))
        .await;
    for name in ["one", "two"] {
        api.create(
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
        )
        .await;
    }
    let maps = "/api/v1/namespaces/default/configmaps";
    assert_eq!(
        api.get(&token, &format!("{maps}/one")).await.0,
        StatusCode::OK
    );
    let (status, body) = api.get(&token, &format!("{maps}/two")).await;
    assert_eq!(
        (status, body["details"]["name"].as_str()),
        (StatusCode::FORBIDDEN, Some("two"))
    );
    assert_eq!(api.get(&token, maps).await.0, StatusCode::FORBIDDEN);
    // A list pinned to the name by a field selector is a request about that object.
    let (status, list) = api
        .get(&token, &format!("{maps}?fieldSelector=metadata.name%3Done"))
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_resource_grant_gives_none_of_its_subresources_and_star_slash_status_gives_every_status()
{
    let api = Api::start().await;
    let token = api.account("default", "evictor").await;
    for name in ["p", "q"] {
        api.create(
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .await;
    }
    api.role(
        Some("default"),
        "pods",
        json!([rule(&["get", "list", "create", "delete"], "", &["pods"])]),
    )
    .await;
    api.bind(Some("default"), "Role", "pods", ("default", "evictor"))
        .await;
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "default"}});
    let evict = "/api/v1/namespaces/default/pods/p/eviction";
    let (status, body) = api.post(&token, evict, eviction.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        "pods \"p\" is forbidden: User \"system:serviceaccount:default:evictor\" cannot create resource \"pods/eviction\" in API group \"\" in the namespace \"default\""
    );
    let (status, body) = api
        .get(&token, "/api/v1/namespaces/default/pods/p/status")
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    api.role(
        Some("default"),
        "evict",
        json!([rule(&["create"], "", &["pods/eviction"])]),
    )
    .await;
    api.bind(Some("default"), "Role", "evict", ("default", "evictor"))
        .await;
    let (status, body) = api.post(&token, evict, eviction).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    api.role(
        None,
        "statuses",
        json!([rule(&["get"], "*", &["*/status"])]),
    )
    .await;
    api.bind(None, "ClusterRole", "statuses", ("default", "evictor"))
        .await;
    // (p is evicted: q's status.)
    assert_eq!(
        api.get(&token, "/api/v1/namespaces/default/pods/q/status")
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        api.get(&token, "/api/v1/nodes").await.0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn non_resource_urls_match_exactly_or_by_a_star_prefix() {
    let api = Api::start().await;
    let token = api.account("default", "scraper").await;
    let (status, body) = api.get(&token, "/metrics").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        "forbidden: User \"system:serviceaccount:default:scraper\" cannot get path \"/metrics\""
    );
    api.role(
        None,
        "scrape",
        json!([{"verbs": ["get"], "nonResourceURLs": ["/metrics", "/debug/*"]}]),
    )
    .await;
    api.bind(None, "ClusterRole", "scrape", ("default", "scraper"))
        .await;
    // Authorized now: the simulator serves no /metrics, so the request reaches the routes.
    assert_eq!(api.get(&token, "/metrics").await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        api.get(&token, "/debug/pprof/heap").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        api.get(&token, "/metrics/extra").await.0,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        api.call(&token, Method::POST, "/metrics", Some(json!({})), &[])
            .await
            .0,
        StatusCode::FORBIDDEN
    );
}

#[tokio::test]
async fn wildcards_cover_every_group_resource_and_verb() {
    let api = Api::start().await;
    let token = api.account("default", "viewer").await;
    api.role(
        None,
        "read-all",
        json!([rule(&["get", "list", "watch"], "*", &["*"])]),
    )
    .await;
    api.bind(None, "ClusterRole", "read-all", ("default", "viewer"))
        .await;
    assert_eq!(api.get(&token, "/api/v1/secrets").await.0, StatusCode::OK);
    assert_eq!(
        api.get(
            &token,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        )
        .await
        .0,
        StatusCode::OK
    );
    let (status, _) = api
        .call(
            &token,
            Method::DELETE,
            "/api/v1/namespaces/default/configmaps",
            None,
            &[],
        )
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "deletecollection is not granted"
    );
    api.role(None, "do-all", json!([rule(&["*"], "*", &["*"])]))
        .await;
    api.bind(None, "ClusterRole", "do-all", ("default", "viewer"))
        .await;
    let (status, _) = api
        .call(
            &token,
            Method::DELETE,
            "/api/v1/namespaces/default/configmaps",
            None,
            &[],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        api.get(&token, "/metrics").await.0,
        StatusCode::FORBIDDEN,
        "resource rules grant no URL"
    );
}

fn rules_of(role: &Value) -> Vec<Value> {
    role["rules"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn cluster_roles_aggregate_labelled_roles_as_they_come_change_and_go() {
    let api = Api::start().await;
    let admin = api.server.token().to_owned();
    // The bootstrap roles: view and edit aggregate into admin.
    let (_, view) = api.get(&admin, &format!("{RBAC}/clusterroles/view")).await;
    assert!(
        rules_of(&view)
            .iter()
            .any(|r| r["resources"].as_array().unwrap().contains(&json!("pods"))),
        "{view}"
    );
    assert!(
        !rules_of(&view).iter().any(|r| r["resources"]
            .as_array()
            .unwrap()
            .contains(&json!("secrets"))),
        "view reads no Secrets: {view}"
    );
    let (_, admin_role) = api.get(&admin, &format!("{RBAC}/clusterroles/admin")).await;
    for rule in rules_of(&view) {
        assert!(
            rules_of(&admin_role).contains(&rule),
            "admin holds view's {rule}"
        );
    }
    api.create(
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "monitoring"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate-to-monitoring": "true"}}]}}),
    )
    .await;
    let widgets = rule(&["get"], "example.com", &["widgets"]);
    api.create(
        &format!("{RBAC}/clusterroles"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "widgets", "labels": {"example.com/aggregate-to-monitoring": "true"}},
            "rules": [widgets.clone()]}),
    )
    .await;
    let path = format!("{RBAC}/clusterroles/monitoring");
    let rules = |want: bool| {
        let (api, path, widgets) = (&api, &path, &widgets);
        async move {
            let (_, role) = api.get(api.server.token(), path).await;
            (rules_of(&role).contains(widgets) == want).then_some(())
        }
    };
    eventually("the labelled role's rules aggregated", async || {
        rules(true).await
    })
    .await;
    let (status, body) = api
        .call(
            &admin,
            Method::PATCH,
            &format!("{RBAC}/clusterroles/widgets"),
            Some(json!({"metadata": {"labels": {"example.com/aggregate-to-monitoring": null}}})),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    eventually("the unlabelled role's rules gone", async || {
        rules(false).await
    })
    .await;
    let (status, _) = api
        .call(
            &admin,
            Method::PATCH,
            &format!("{RBAC}/clusterroles/widgets"),
            Some(json!({"metadata": {"labels": {"example.com/aggregate-to-monitoring": "true"}}})),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    eventually("labelled again", async || rules(true).await).await;
    api.call(
        &admin,
        Method::DELETE,
        &format!("{RBAC}/clusterroles/widgets"),
        None,
        &[],
    )
    .await;
    eventually("the deleted role's rules gone", async || rules(false).await).await;
}

#[tokio::test]
async fn nobody_grants_or_binds_what_they_do_not_hold_without_escalate_or_bind() {
    let api = Api::start().await;
    let token = api.account("default", "manager").await;
    api.role(
        Some("default"),
        "rbac-writer",
        json!([
            rule(
                &["create", "update", "patch"],
                "rbac.authorization.k8s.io",
                &["roles", "rolebindings"]
            ),
            rule(&["get", "list"], "", &["pods"]),
        ]),
    )
    .await;
    api.bind(
        Some("default"),
        "Role",
        "rbac-writer",
        ("default", "manager"),
    )
    .await;
    let roles = format!("{RBAC}/namespaces/default/roles");
    let role = |name: &str, rules: Value| json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules});
    let (status, body) = api
        .post(
            &token,
            &roles,
            role("pods", json!([rule(&["get"], "", &["pods"])])),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "held rules may be granted: {body}"
    );
    let (status, body) = api
        .post(
            &token,
            &roles,
            role("secrets", json!([rule(&["list"], "", &["secrets"])])),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with("roles.rbac.authorization.k8s.io \"secrets\" is forbidden: user \"system:serviceaccount:default:manager\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:default\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:"),
        "{message}"
    );
    // A patch is judged by the object it would make.
    let (status, body) = api
        .call(
            &token,
            Method::PATCH,
            &format!("{roles}/pods"),
            Some(json!({"rules": [rule(&["delete"], "", &["pods"])]})),
            &[("content-type", "application/merge-patch+json")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // Binding a role whose rules are not held: refused, unless `bind` on that role.
    let bindings = format!("{RBAC}/namespaces/default/rolebindings");
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "edit-me"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "manager"}]});
    let (status, body) = api.post(&token, &bindings, binding.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let own = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "own"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "User", "name": "someone"}]});
    assert_eq!(
        api.post(&token, &bindings, own).await.0,
        StatusCode::CREATED,
        "a held role may be bound"
    );
    api.role(None, "escalator", json!([
        {"verbs": ["bind"], "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["edit"]},
        rule(&["escalate"], "rbac.authorization.k8s.io", &["roles"]),
    ]))
    .await;
    api.bind(None, "ClusterRole", "escalator", ("default", "manager"))
        .await;
    let (status, body) = api.post(&token, &bindings, binding).await;
    assert_eq!(status, StatusCode::CREATED, "bind allows it: {body}");
    let (status, body) = api
        .post(
            &token,
            &roles,
            role("secrets", json!([rule(&["list"], "", &["secrets"])])),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "escalate allows it: {body}");
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb_and_then_acts_as_the_user() {
    let api = Api::start().await;
    let token = api.account("default", "helper").await;
    let as_bob = [("Impersonate-User", "bob")];
    let (status, body) = api
        .call(&token, Method::GET, "/api/v1/pods", None, &as_bob)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(
        body["message"],
        "users \"bob\" is forbidden: User \"system:serviceaccount:default:helper\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    // The admin may impersonate; the request is then bob's.
    let admin = api.server.token().to_owned();
    let (status, body) = api
        .call(&admin, Method::GET, "/api/v1/secrets", None, &as_bob)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("User \"bob\" cannot list"),
        "{body}"
    );
    let (status, body) = api
        .call(
            &admin,
            Method::POST,
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})),
            &[("Impersonate-User", "system:serviceaccount:default:helper")],
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(
        body["status"]["userInfo"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    // Granted users, not groups: impersonating a group too is refused.
    api.role(
        None,
        "impersonate-users",
        json!([rule(&["impersonate"], "", &["users"])]),
    )
    .await;
    api.bind(
        None,
        "ClusterRole",
        "impersonate-users",
        ("default", "helper"),
    )
    .await;
    let (status, body) = api
        .call(&token, Method::GET, "/version", None, &as_bob)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = api
        .call(
            &token,
            Method::GET,
            "/version",
            None,
            &[
                ("Impersonate-User", "bob"),
                ("Impersonate-Group", "system:masters"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("groups \"system:masters\" is forbidden"),
        "{body}"
    );
    let (status, _) = api
        .call(
            &admin,
            Method::GET,
            "/version",
            None,
            &[("Impersonate-Group", "x")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "a group without a user");
}

#[tokio::test]
async fn a_legacy_token_secret_is_filled_by_the_token_controller_and_authenticates_while_it_exists()
{
    let api = Api::start().await;
    api.account("default", "old-style").await;
    api.create(
        "/api/v1/namespaces/default/secrets",
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "old-style-token",
            "annotations": {"kubernetes.io/service-account.name": "old-style"}},
            "type": "kubernetes.io/service-account-token"}),
    )
    .await;
    let secret = eventually("the token filled in", async || {
        let (_, secret) = api
            .get(
                api.server.token(),
                "/api/v1/namespaces/default/secrets/old-style-token",
            )
            .await;
        secret["data"]["token"].is_string().then_some(secret)
    })
    .await;
    let decode = |field: &str| {
        let text = secret["data"][field].as_str().unwrap();
        String::from_utf8(
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text).unwrap(),
        )
        .unwrap()
    };
    assert_eq!(decode("namespace"), "default");
    assert!(secret["data"]["ca.crt"].is_string(), "{secret}");
    assert!(secret["metadata"]["annotations"]["kubernetes.io/service-account.uid"].is_string());
    let token = decode("token");
    let (status, body) = api.get(&token, "/api/v1/namespaces/default/pods").await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "authenticated, not authorized: {body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("system:serviceaccount:default:old-style")
    );
    api.call(
        api.server.token(),
        Method::DELETE,
        "/api/v1/namespaces/default/secrets/old-style-token",
        None,
        &[],
    )
    .await;
    assert_eq!(
        api.get(&token, "/api/v1/namespaces/default/pods").await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn token_reviews_echo_the_audiences_the_token_is_good_for() {
    let api = Api::start().await;
    api.account("default", "robot").await;
    let issued = api
        .create(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": ["vault", "other"]}}),
        )
        .await;
    let token = issued["status"]["token"].as_str().unwrap();
    let review = |audiences: Value| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token, "audiences": audiences}});
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let admin = api.server.token().to_owned();
    let (_, body) = api
        .post(&admin, path, review(json!(["vault", "elsewhere"])))
        .await;
    assert_eq!(body["status"]["authenticated"], true, "{body}");
    assert_eq!(body["status"]["audiences"], json!(["vault"]));
    assert_eq!(
        body["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert!(
        body["status"]["user"]["extra"]["authentication.kubernetes.io/credential-id"].is_array(),
        "{body}"
    );
    // Not for the API's audience: no review without audiences, no request either.
    let (_, body) = api.post(&admin, path, review(json!([]))).await;
    assert_ne!(body["status"]["authenticated"], true, "{body}");
    assert_eq!(api.get(token, "/api").await.0, StatusCode::UNAUTHORIZED);
    // A token for the default audience: the API's, echoed.
    let default = api.account("default", "plain").await;
    let (_, body) = api
        .post(&admin, path, json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": default}}))
        .await;
    assert_eq!(body["status"]["audiences"], json!([API_AUDIENCE]), "{body}");
}

#[tokio::test]
async fn access_and_rules_reviews_answer_from_the_same_authorizer() {
    let api = Api::start().await;
    let token = api.account("default", "asker").await;
    let secrets = json!({"namespace": "default", "verb": "list", "resource": "secrets"});
    let ssar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": secrets}});
    let (status, body) = api
        .post(
            &token,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            ssar.clone(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"]["allowed"], false, "{body}");
    let sar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:default:asker", "groups": ["system:serviceaccounts"], "resourceAttributes": secrets}});
    let admin = api.server.token().to_owned();
    assert_eq!(
        api.post(
            &admin,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar.clone()
        )
        .await
        .1["status"]["allowed"],
        false
    );
    // A ServiceAccount may not ask about others (SubjectAccessReview is not basic-user's).
    assert_eq!(
        api.post(
            &token,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar.clone()
        )
        .await
        .0,
        StatusCode::FORBIDDEN
    );
    api.role(
        Some("default"),
        "secret-lister",
        json!([rule(&["list"], "", &["secrets"])]),
    )
    .await;
    api.bind(
        Some("default"),
        "Role",
        "secret-lister",
        ("default", "asker"),
    )
    .await;
    assert_eq!(
        api.post(
            &token,
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            ssar
        )
        .await
        .1["status"]["allowed"],
        true
    );
    assert_eq!(
        api.post(
            &admin,
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            sar
        )
        .await
        .1["status"]["allowed"],
        true
    );
    let local = |ns: &str| {
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "LocalSubjectAccessReview", "metadata": {"namespace": "default"},
        "spec": {"user": "system:serviceaccount:default:asker", "resourceAttributes": {"namespace": ns, "verb": "list", "resource": "secrets"}}})
    };
    let path = "/apis/authorization.k8s.io/v1/namespaces/default/localsubjectaccessreviews";
    assert_eq!(
        api.post(&admin, path, local("default")).await.1["status"]["allowed"],
        true
    );
    let (status, body) = api.post(&admin, path, local("other")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let rules = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview", "spec": {"namespace": "default"}});
    let (status, body) = api
        .post(
            &token,
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            rules,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let resource_rules = body["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules
            .iter()
            .any(|r| r["resources"] == json!(["secrets"]) && r["verbs"] == json!(["list"])),
        "{body}"
    );
    assert!(
        resource_rules
            .iter()
            .any(|r| r["resources"]
                == json!(["selfsubjectaccessreviews", "selfsubjectrulesreviews"])),
        "basic-user's: {body}"
    );
    assert!(
        body["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["nonResourceURLs"]
                .as_array()
                .unwrap()
                .contains(&json!("/api"))),
        "{body}"
    );
}

#[tokio::test]
async fn an_in_process_actor_as_a_user_gets_the_same_refusals_and_the_privileged_path_none() {
    let api = Api::start().await;
    api.account("default", "actor").await;
    let store = api.server.store().clone();
    let privileged = Local::new(store.clone(), "test");
    assert!(
        privileged
            .list(SECRETS, None)
            .iter()
            .all(|s| s["kind"] == "Secret")
    );
    privileged
        .create(
            SECRETS,
            "default",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
        )
        .unwrap();
    let user = UserInfo::service_account("default", "actor", "");
    let actor = Local::new(store, "test").as_user(api.server.authorizer().clone(), user);
    let refused = actor.get(SECRETS, "default", "s").unwrap_err();
    assert_eq!((refused.code, refused.reason), (403, "Forbidden"));
    assert_eq!(
        refused.message,
        "secrets \"s\" is forbidden: User \"system:serviceaccount:default:actor\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    assert!(actor.list(SECRETS, Some("default")).is_empty());
    api.role(
        Some("default"),
        "get-secrets",
        json!([rule(&["get"], "", &["secrets"])]),
    )
    .await;
    api.bind(Some("default"), "Role", "get-secrets", ("default", "actor"))
        .await;
    assert_eq!(
        actor.get(SECRETS, "default", "s").unwrap()["metadata"]["name"],
        "s"
    );
}
