//! Who is calling and what they may do: authentication of bearer tokens (and impersonation)
//! into a [`UserInfo`], and the RBAC authorizer that decides every request from the stored
//! Roles, ClusterRoles and bindings.
//!
//! Expected flow: `routes::dispatch` authenticates ([`authn`]) → maps the request to
//! attributes ([`request_info`]) → asks the [`Authorizer`] (the superuser group first, then
//! the compiled [`rbac::RuleSet`]) → 403 with the real message on a denial; writes of RBAC
//! objects then pass the escalation checks ([`escalation`]). The [`controllers`] keep
//! aggregated ClusterRoles and legacy ServiceAccount token Secrets filled in.
//!
//! Guarantees: the rule set is compiled again only after an RBAC object changed (a commit
//! hook counts RBAC changes, under the store's lock, so a decision never uses rules older
//! than the last committed change); the store's lock is held only to copy references to the
//! RBAC objects, never while compiling or deciding.
//!
//! Caveats: see the submodules.

pub(crate) mod authn;
pub(crate) mod bootstrap;
pub(crate) mod controllers;
pub(crate) mod escalation;
pub mod rbac;
pub mod request_info;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use self::rbac::{Attributes, Decision, RbacObjects, RuleSet};
use super::errors::ApiResult;
use super::store::Store;

/// The API group of the RBAC kinds.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The group the superuser authorizer allows everything.
pub const SUPERUSERS: &str = "system:masters";
/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";
/// The group of anonymous requests.
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
/// The user of anonymous requests.
pub const ANONYMOUS: &str = "system:anonymous";

/// Who sent a request, as the authenticators tell (`user.Info` of the real server).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// The user's name (`system:serviceaccount:<ns>:<name>` for a ServiceAccount).
    pub username: String,
    /// A unique id ("" when the authenticator has none).
    pub uid: String,
    /// The groups (`system:authenticated` included for an authenticated user).
    pub groups: Vec<String>,
    /// Extra attributes (the pod a bound token names, the token's id…).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// A user in `groups` (nothing added).
    pub fn new(username: &str, groups: &[&str]) -> Self {
        UserInfo {
            username: username.to_owned(),
            uid: String::new(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            extra: BTreeMap::new(),
        }
    }

    /// A ServiceAccount, with the groups its tokens authenticate it in.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        UserInfo {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.to_owned(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                AUTHENTICATED.into(),
            ],
            extra: BTreeMap::new(),
        }
    }

    /// Whether the user is in the superuser group.
    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == SUPERUSERS)
    }

    /// The JSON form (`status.user` of a TokenReview, `userInfo` of a SelfSubjectReview).
    pub fn to_json(&self) -> serde_json::Value {
        let mut user = serde_json::json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            user["uid"] = self.uid.clone().into();
        }
        if !self.extra.is_empty() {
            user["extra"] = serde_json::json!(self.extra);
        }
        user
    }
}

/// The RBAC authorizer over a store: the compiled rules, cached until an RBAC object changes.
pub struct Authorizer {
    store: Arc<Store>,
    /// Bumped by a commit hook whenever an RBAC object changes.
    generation: Arc<AtomicU64>,
    cache: Mutex<Option<(u64, Arc<RuleSet>)>>,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer").finish_non_exhaustive()
    }
}

impl Authorizer {
    /// The authorizer of `store` (one per store: it registers a commit hook).
    pub(crate) fn new(store: Arc<Store>) -> Arc<Self> {
        let generation = Arc::new(AtomicU64::new(1));
        let counter = generation.clone();
        store.on_commit(Arc::new(move |event| {
            if event.key.group == RBAC_GROUP {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }));
        Arc::new(Authorizer {
            store,
            generation,
            cache: Mutex::new(None),
        })
    }

    /// The compiled rules as of the last RBAC change.
    pub fn rules(&self) -> Arc<RuleSet> {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some((cached, rules)) = &*self.cache.lock().unwrap_or_else(|e| e.into_inner())
            && *cached == generation
        {
            return rules.clone();
        }
        let rules = Arc::new(self.compile());
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) = Some((generation, rules.clone()));
        rules
    }

    /// Reads the RBAC objects (references, under the lock) and compiles them (after it).
    fn compile(&self) -> RuleSet {
        let [cluster_roles, cluster_role_bindings, roles, role_bindings] = {
            let inner = self.store.lock();
            [
                "clusterroles",
                "clusterrolebindings",
                "roles",
                "rolebindings",
            ]
            .map(|plural| {
                inner
                    .objects_of(RBAC_GROUP, plural, None)
                    .map(|(_, object)| object.clone())
                    .collect::<Vec<_>>()
            })
        };
        RuleSet::compile(&RbacObjects {
            cluster_roles: cluster_roles.iter().map(|o| &**o).collect(),
            cluster_role_bindings: cluster_role_bindings.iter().map(|o| &**o).collect(),
            roles: roles.iter().map(|o| &**o).collect(),
            role_bindings: role_bindings.iter().map(|o| &**o).collect(),
        })
    }

    /// The decision for `user`: the superuser group is allowed everything, everyone else
    /// what RBAC grants.
    pub fn decide(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        if user.is_superuser() {
            return Decision::Allow;
        }
        self.rules().authorize(user, attributes)
    }

    /// Ok when allowed, the real server's 403 otherwise.
    pub fn check(&self, user: &UserInfo, attributes: &Attributes) -> ApiResult<()> {
        match self.decide(user, attributes) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => {
                Err(request_info::forbidden(&user.username, attributes, &reason))
            }
        }
    }
}
