//! The escalation checks of RBAC writes: nobody may create or change a Role or ClusterRole
//! with rules they do not hold (unless allowed to `escalate`), nor bind a role whose rules
//! they do not hold (unless allowed to `bind` it), as the real RBAC storage
//! (`pkg/registry/rbac/*/policybased/storage.go` of kubernetes/kubernetes) refuses.
//!
//! Expected flow: after the request itself was authorized, [`check`] the object it would
//! store (for a patch, the result of a dry run) → Ok, or 403 with the real message.
//!
//! Guarantees: the superuser group passes; `escalate` (roles) and `bind` (bindings, on the
//! role named by `roleRef`) are asked of the authorizer with the object's namespace and name;
//! otherwise the rules held in the object's namespace (cluster-wide ones for cluster
//! objects) must cover the rules granted; an `aggregationRule` needs full authority (`*` on
//! everything and every non-resource URL).
//!
//! Caveats: the refusal lists the requested rules that are not covered whole, where upstream
//! lists each missing verb/resource cell.

use serde_json::{Value, json};

use super::authorizer::Authorizer;
use super::rbac::{Attributes, Decision, PolicyRule, ResourceAttributes, covers};
use super::user::{RBAC_GROUP, UserInfo};
use crate::apiserver::errors::{ApiError, ApiResult};

/// Which RBAC kind is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RbacKind {
    /// `roles`.
    Role,
    /// `clusterroles`.
    ClusterRole,
    /// `rolebindings`.
    RoleBinding,
    /// `clusterrolebindings`.
    ClusterRoleBinding,
}

impl RbacKind {
    /// The kind of a plural of the RBAC group.
    pub(crate) fn of(group: &str, plural: &str) -> Option<Self> {
        if group != RBAC_GROUP {
            return None;
        }
        match plural {
            "roles" => Some(RbacKind::Role),
            "clusterroles" => Some(RbacKind::ClusterRole),
            "rolebindings" => Some(RbacKind::RoleBinding),
            "clusterrolebindings" => Some(RbacKind::ClusterRoleBinding),
            _ => None,
        }
    }

    fn plural(self) -> &'static str {
        match self {
            RbacKind::Role => "roles",
            RbacKind::ClusterRole => "clusterroles",
            RbacKind::RoleBinding => "rolebindings",
            RbacKind::ClusterRoleBinding => "clusterrolebindings",
        }
    }
}

fn rbac_attributes(verb: &str, plural: &str, namespace: &str, name: &str) -> Attributes {
    Attributes::resource(
        verb,
        ResourceAttributes {
            group: RBAC_GROUP.into(),
            version: "v1".into(),
            resource: plural.into(),
            namespace: namespace.into(),
            name: name.into(),
            ..ResourceAttributes::default()
        },
    )
}

fn refused(kind: RbacKind, name: &str, why: &str) -> ApiError {
    ApiError::forbidden(RBAC_GROUP, kind.plural(), name, why)
}

/// The message of an escalation (Go's `%q` of the groups).
fn not_held(user: &UserInfo, missing: &[PolicyRule]) -> String {
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    let rules: Vec<String> = missing.iter().map(|r| r.to_json().to_string()).collect();
    format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.username,
        groups.join(" "),
        rules.join("\n")
    )
}

/// Ok when `user` may store `object` (of `kind`, in `namespace`: "" for cluster objects).
pub(crate) fn check(
    authorizer: &Authorizer,
    user: &UserInfo,
    kind: RbacKind,
    namespace: &str,
    object: &Value,
) -> ApiResult<()> {
    if user.is_superuser() {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let held = authorizer.rules().rules_for(user, namespace);
    let requested = match kind {
        RbacKind::Role | RbacKind::ClusterRole => {
            let escalate = rbac_attributes("escalate", kind.plural(), namespace, name);
            if authorizer.decide(user, &escalate) == Decision::Allow {
                return Ok(());
            }
            if kind == RbacKind::ClusterRole
                && object.get("aggregationRule").is_some_and(|a| !a.is_null())
            {
                let full = [
                    PolicyRule::from_json(
                        &json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                    ),
                    PolicyRule::from_json(&json!({"verbs": ["*"], "nonResourceURLs": ["*"]})),
                ];
                if !covers(&held, &full) {
                    return Err(refused(
                        kind,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
            }
            PolicyRule::of_role(object)
        }
        RbacKind::RoleBinding | RbacKind::ClusterRoleBinding => {
            let reference = &object["roleRef"];
            let role_name = reference["name"].as_str().unwrap_or_default();
            let (role_plural, role_namespace) = match reference["kind"].as_str() {
                Some("Role") => ("roles", namespace),
                _ => ("clusterroles", ""),
            };
            let bind = rbac_attributes("bind", role_plural, namespace, role_name);
            if authorizer.decide(user, &bind) == Decision::Allow {
                return Ok(());
            }
            role_rules(authorizer, role_plural, role_namespace, role_name).ok_or_else(|| {
                refused(
                    kind,
                    name,
                    &format!("{role_plural}.{RBAC_GROUP} {role_name:?} not found"),
                )
            })?
        }
    };
    let missing: Vec<PolicyRule> = requested
        .iter()
        .filter(|rule| !covers(&held, std::slice::from_ref(rule)))
        .cloned()
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(refused(kind, name, &not_held(user, &missing)))
    }
}

/// The rules of a stored Role or ClusterRole.
fn role_rules(
    authorizer: &Authorizer,
    plural: &str,
    namespace: &str,
    name: &str,
) -> Option<Vec<PolicyRule>> {
    let ty = authorizer.store.resource_type(RBAC_GROUP, "v1", plural)?;
    let role = authorizer.store.get(&ty, "v1", namespace, name).ok()?;
    Some(PolicyRule::of_role(&role))
}
