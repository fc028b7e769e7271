//! Two controllers of a real control plane that RBAC and authentication depend on: the
//! ClusterRole aggregation controller (fills `rules` of a ClusterRole with an
//! `aggregationRule` from the ClusterRoles its selectors pick) and the token controller's
//! part that fills legacy ServiceAccount token Secrets.
//!
//! Expected flow: [`sync_aggregation`] once at start, then [`spawn`]: a task that subscribes
//! to the store's change broadcast (the store never calls into it) and, on a ClusterRole
//! change, aggregates again; on a Secret of type `kubernetes.io/service-account-token`
//! without a token, signs one and writes `data.token`, `data.ca.crt` and `data.namespace`.
//! A lagging subscription resyncs everything.
//!
//! Guarantees (as `pkg/controller/clusterroleaggregation` and
//! `pkg/controller/serviceaccount/tokens_controller.go` of kubernetes/kubernetes): the
//! aggregated rules are, selector by selector, the rules of the matching ClusterRoles in name
//! order, each rule once; a role is written only when its rules change; a token Secret
//! whose ServiceAccount does not exist is left alone until it does.
//!
//! Caveats: both run after the change that triggers them (as upstream, clients see the
//! result eventually); deleting a ServiceAccount does not delete its token Secrets (their
//! tokens stop authenticating, as the ServiceAccount's uid no longer matches).

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::tokens::legacy_claims;
use super::user::RBAC_GROUP;
use crate::apiserver::ServerState;
use crate::apiserver::store::{EventType, Store};
use crate::apiserver::validation::admission::RequestUser;

/// The Secret type of legacy ServiceAccount tokens.
pub(crate) const TOKEN_SECRET: &str = "kubernetes.io/service-account-token";
/// The annotation naming a token Secret's ServiceAccount.
const ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
/// The annotation the controller records the ServiceAccount's uid in.
const ACCOUNT_UID: &str = "kubernetes.io/service-account.uid";

fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

/// The rules `role` aggregates from `roles` (None when it has no aggregation rule).
pub(crate) fn aggregated_rules(role: &Value, roles: &[&Value]) -> Option<Vec<Value>> {
    let selectors = role
        .pointer("/aggregationRule/clusterRoleSelectors")?
        .as_array()?;
    let mut sorted: Vec<&&Value> = roles.iter().filter(|r| name(r) != name(role)).collect();
    sorted.sort_by_key(|r| name(r));
    let mut rules: Vec<Value> = Vec::new();
    for selector in selectors {
        for source in sorted
            .iter()
            .filter(|r| crate::apiserver::controllers_selector(selector, r))
        {
            for rule in source["rules"].as_array().into_iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    Some(rules)
}

/// Fills every aggregated ClusterRole whose rules are out of date.
pub(crate) fn sync_aggregation(store: &Store) {
    let Some(ty) = store.resource_type(RBAC_GROUP, "v1", "clusterroles") else {
        return;
    };
    let roles = store.shared(&ty, None);
    let all: Vec<&Value> = roles.iter().map(|r| &**r).collect();
    for role in &all {
        let Some(rules) = aggregated_rules(role, &all) else {
            continue;
        };
        let current = role["rules"].as_array().cloned().unwrap_or_default();
        if current == rules {
            continue;
        }
        // A conflict means someone changed the role meanwhile: its change event brings
        // another pass.
        if let Ok(mut fresh) = store.get(&ty, "v1", "", name(role)) {
            fresh["rules"] = Value::from(rules);
            let _ = store.update(
                &RequestUser::in_process(),
                &ty,
                "v1",
                "",
                name(role),
                fresh,
                false,
                false,
            );
        }
    }
}

/// Signs a token into a legacy token Secret that has none yet.
fn fill_token_secret(state: &ServerState, secret: &Value) {
    let annotations = &secret["metadata"]["annotations"];
    let (Some(account), false) = (
        annotations[ACCOUNT_NAME].as_str(),
        secret["data"]["token"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
    ) else {
        return;
    };
    if secret["type"] != TOKEN_SECRET {
        return;
    }
    let store = &state.store;
    let namespace = secret["metadata"]["namespace"].as_str().unwrap_or_default();
    let registry = store.registry();
    let (Some(accounts), Some(secrets)) = (
        registry.get("", "v1", "serviceaccounts"),
        registry.get("", "v1", "secrets"),
    ) else {
        return;
    };
    let Ok(sa) = store.get(&accounts, "v1", namespace, account) else {
        return;
    };
    let uid = sa["metadata"]["uid"].as_str().unwrap_or_default();
    let claims = legacy_claims(namespace, account, uid, name(secret));
    let Ok(token) = state.tokens.sign(&claims) else {
        return;
    };
    let Ok(mut fresh) = store.get(&secrets, "v1", namespace, name(secret)) else {
        return;
    };
    let ca = state.ca_pem.clone().unwrap_or_default();
    let mut data = fresh["data"].as_object().cloned().unwrap_or_default();
    data.insert("token".into(), json!(STANDARD.encode(&token)));
    data.insert("ca.crt".into(), json!(STANDARD.encode(ca)));
    data.insert("namespace".into(), json!(STANDARD.encode(namespace)));
    fresh["data"] = Value::Object(data);
    fresh["metadata"]["annotations"][ACCOUNT_UID] = json!(uid);
    let _ = store.update(
        &RequestUser::in_process(),
        &secrets,
        "v1",
        namespace,
        name(secret),
        fresh,
        false,
        false,
    );
}

/// Fills every legacy token Secret that waits for a token.
fn sync_token_secrets(state: &ServerState) {
    let Some(secrets) = state.store.resource_type("", "v1", "secrets") else {
        return;
    };
    for secret in state.store.shared(&secrets, None) {
        if secret["type"] == TOKEN_SECRET {
            fill_token_secret(state, &secret);
        }
    }
}

/// Runs both controllers until the store's broadcast closes (or the task is aborted).
pub(crate) fn spawn(state: Arc<ServerState>) -> JoinHandle<()> {
    let mut changes = state.store.subscribe();
    tokio::spawn(async move {
        sync_aggregation(&state.store);
        sync_token_secrets(&state);
        loop {
            match changes.recv().await {
                Ok(event) => {
                    let key = &event.key;
                    if key.group == RBAC_GROUP && key.plural == "clusterroles" {
                        sync_aggregation(&state.store);
                    } else if key.group.is_empty()
                        && key.plural == "secrets"
                        && event.kind != EventType::Deleted
                    {
                        fill_token_secret(&state, &event.object);
                    } else if key.group.is_empty()
                        && key.plural == "serviceaccounts"
                        && event.kind == EventType::Added
                    {
                        sync_token_secrets(&state);
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    sync_aggregation(&state.store);
                    sync_token_secrets(&state);
                }
                Err(RecvError::Closed) => break,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregation_takes_the_selected_roles_rules_in_name_order_each_once() {
        let admin = json!({"metadata": {"name": "admin"}, "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"agg": "true"}}]}, "rules": []});
        let rule = |r: &str| json!({"verbs": ["get"], "apiGroups": [""], "resources": [r]});
        let b = json!({"metadata": {"name": "b", "labels": {"agg": "true"}}, "rules": [rule("pods"), rule("secrets")]});
        let a = json!({"metadata": {"name": "a", "labels": {"agg": "true"}}, "rules": [rule("secrets")]});
        let other = json!({"metadata": {"name": "c"}, "rules": [rule("nodes")]});
        let all = [&admin, &b, &a, &other];
        assert_eq!(
            aggregated_rules(&admin, &all),
            Some(vec![rule("secrets"), rule("pods")])
        );
        assert_eq!(aggregated_rules(&other, &all), None);
    }
}
