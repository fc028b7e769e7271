//! The RBAC authorizer over a store (the I/O edge of [`super::rbac`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::node;
use super::rbac::{Attributes, Decision, RbacObjects, RuleSet};
use super::request_info;
use super::user::{RBAC_GROUP, UserInfo};
use crate::apiserver::errors::ApiResult;
use crate::apiserver::store::Store;

/// The RBAC authorizer over a store: the compiled rules, cached until an RBAC object changes.
pub struct Authorizer {
    pub(crate) store: Arc<Store>,
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
        // `--authorization-mode=Node,RBAC`: the Node authorizer first, for kubelets.
        if let Some(node) = node::node_name(&user.username, &user.groups) {
            let related = |resource: &str, namespace: &str, name: &str| {
                self.pod_on_node_refers_to(node, resource, namespace, name)
            };
            if let Some(decision) = node::authorize(node, attributes, &related) {
                return decision;
            }
        }
        self.rules().authorize(user, attributes)
    }

    /// The Node authorizer's graph edge: a pod bound to `node` in `namespace` uses the
    /// Secret or ConfigMap `name`.
    fn pod_on_node_refers_to(
        &self,
        node: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> bool {
        let inner = self.store.lock();
        inner
            .objects_of("", "pods", Some(namespace))
            .any(|(_, pod)| {
                pod.pointer("/spec/nodeName")
                    .and_then(serde_json::Value::as_str)
                    == Some(node)
                    && node::pod_refers_to(pod, resource, name)
            })
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
