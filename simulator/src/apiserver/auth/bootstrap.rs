//! The roles and bindings a new cluster has, as the real server's bootstrap policy
//! (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go` of kubernetes/kubernetes)
//! creates them: `cluster-admin` bound to `system:masters`; `admin`, `edit` and `view`
//! aggregated from the `system:aggregate-to-*` roles; `system:discovery`,
//! `system:basic-user` and `system:public-info-viewer` bound to the authenticated (and, for
//! the public information, the unauthenticated) users.
//!
//! Expected flow: [`objects`] (pure) → the server creates each at start.
//!
//! Guarantees: the names, labels, aggregation selectors and bindings of upstream; the
//! aggregated roles' rules cover the core, apps, policy, coordination and RBAC kinds this
//! simulator serves.
//!
//! Caveats: the `system:node`, controller and other component roles are not created (the
//! simulated actors act through the privileged in-process path); the aggregated roles
//! leave out kinds the simulator does not serve.

use serde_json::{Value, json};

/// The verbs that read.
const READ: [&str; 3] = ["get", "list", "watch"];
/// The verbs that write.
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": [group], "resources": resources})
}

fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

fn cluster_role(
    name: &str,
    labels: Value,
    rules: Vec<Value>,
    aggregate_from: Option<&str>,
) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    let mut role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    });
    if let Some(selector) = aggregate_from {
        role["aggregationRule"] = json!({"clusterRoleSelectors": [
            {"matchLabels": {format!("rbac.authorization.k8s.io/{selector}"): "true"}}
        ]});
    }
    role
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    })
}

fn label(key: &str) -> Value {
    json!({format!("rbac.authorization.k8s.io/{key}"): "true"})
}

/// What `view` reads (no Secrets, as upstream).
fn view_rules() -> Vec<Value> {
    vec![
        rule(
            &READ,
            "",
            &[
                "pods",
                "pods/log",
                "pods/status",
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "replicationcontrollers/status",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        rule(
            &READ,
            "",
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        rule(&READ, "", &["namespaces"]),
        rule(&READ, "discovery.k8s.io", &["endpointslices"]),
        rule(
            &READ,
            "apps",
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        rule(
            &READ,
            "policy",
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
    ]
}

/// What `edit` adds: writes of the workload kinds, Secrets, impersonating ServiceAccounts.
fn edit_rules() -> Vec<Value> {
    vec![
        rule(&["impersonate"], "", &["serviceaccounts"]),
        rule(
            &WRITE,
            "",
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
        ),
        rule(&["create"], "", &["pods/eviction"]),
        rule(
            &WRITE,
            "",
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        rule(&["create"], "", &["serviceaccounts/token"]),
        rule(
            &WRITE,
            "apps",
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(&WRITE, "policy", &["poddisruptionbudgets"]),
        rule(&WRITE, "discovery.k8s.io", &["endpointslices"]),
        rule(
            &READ,
            "",
            &[
                "secrets",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "services/proxy",
            ],
        ),
        rule(
            &[
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ],
            "coordination.k8s.io",
            &["leases"],
        ),
    ]
}

/// What `admin` adds: the namespace's RBAC and local access reviews.
fn admin_rules() -> Vec<Value> {
    let all = [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    vec![
        rule(
            &["create"],
            "authorization.k8s.io",
            &["localsubjectaccessreviews"],
        ),
        rule(
            &all,
            "rbac.authorization.k8s.io",
            &["rolebindings", "roles"],
        ),
    ]
}

/// Every bootstrap ClusterRole and ClusterRoleBinding, roles first.
pub(crate) fn objects() -> Vec<Value> {
    let discovery_urls = [
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
        "/healthz",
        "/livez",
        "/openapi",
        "/openapi/*",
        "/readyz",
        "/version",
        "/version/",
    ];
    let public_urls = ["/healthz", "/livez", "/readyz", "/version", "/version/"];
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            vec![rule(&["*"], "*", &["*"]), urls(&["*"], &["*"])],
            None,
        ),
        cluster_role("admin", json!({}), vec![], Some("aggregate-to-admin")),
        cluster_role(
            "edit",
            label("aggregate-to-admin"),
            vec![],
            Some("aggregate-to-edit"),
        ),
        cluster_role(
            "view",
            label("aggregate-to-edit"),
            vec![],
            Some("aggregate-to-view"),
        ),
        cluster_role(
            "system:aggregate-to-admin",
            label("aggregate-to-admin"),
            admin_rules(),
            None,
        ),
        cluster_role(
            "system:aggregate-to-edit",
            label("aggregate-to-edit"),
            edit_rules(),
            None,
        ),
        cluster_role(
            "system:aggregate-to-view",
            label("aggregate-to-view"),
            view_rules(),
            None,
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            vec![urls(&["get"], &discovery_urls)],
            None,
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            vec![
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                ),
            ],
            None,
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            vec![urls(&["get"], &public_urls)],
            None,
        ),
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}
