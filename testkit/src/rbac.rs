//! The controller's grants under test: deploy/'s ClusterRole `baremend`, as the lab applies
//! it, with a verb taken away and given back.

use baremend_sim::cluster::local::{Gvr, Local};
use serde_json::{Value, json};

/// ClusterRoles.
pub const CLUSTER_ROLES: Gvr = Gvr {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterroles",
};

/// The rules of the ClusterRole `baremend` as they stand.
pub fn rules(api: &Local) -> Value {
    api.get(CLUSTER_ROLES, "", "baremend").unwrap()["rules"].clone()
}

/// `rules` with `verb` taken from the rule on `resource` (the rest as given).
pub fn without_verb(rules: &Value, resource: &str, verb: &str) -> Value {
    let mut rules = rules.clone();
    let rule = rules
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .contains(&json!(resource))
        })
        .unwrap_or_else(|| panic!("deploy/base/rbac.yaml has no rule on {resource}"));
    let verbs = rule["verbs"].as_array_mut().unwrap();
    assert!(verbs.contains(&json!(verb)), "{rule}");
    verbs.retain(|v| v != verb);
    rules
}

/// Replaces the rules of the ClusterRole `baremend`.
pub fn set_rules(api: &Local, rules: &Value) {
    api.merge(
        CLUSTER_ROLES,
        "",
        "baremend",
        &json!({"rules": rules}),
        false,
    )
    .unwrap();
}
