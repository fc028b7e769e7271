//! The simulated actors' access to an API server: in-process to the simulated store (like the
//! controllers that run next to a real API server: the same write rules and watch events as
//! HTTP clients get), or over HTTPS to any API server ([`Remote`]).

use std::sync::Arc;

use serde_json::Value;

use crate::apiserver::auth::rbac::{Attributes, ResourceAttributes};
use crate::apiserver::errors::{ApiError, ApiResult};
use crate::apiserver::kinds::ResourceType;
use crate::apiserver::operations::{PatchKind, patch};
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::store::DeleteOptions;
use crate::apiserver::validation::admission::RequestUser;
use crate::apiserver::{Authorizer, Store, UserInfo};

pub use super::gvr::*;
use super::remote::Remote;

/// The kind of an identity, RBAC or admission manifest (`kubectl create -f` of a
/// ServiceAccount, its Secret, roles and bindings, their namespace, a
/// ValidatingAdmissionPolicy and its binding), as the resource to create.
pub fn manifest_gvr(kind: &str) -> Option<Gvr> {
    let rbac = |plural| Gvr {
        group: crate::apiserver::auth::RBAC_GROUP,
        version: "v1",
        plural,
    };
    let admission = |plural| Gvr {
        group: crate::apiserver::validation::admission::GROUP,
        version: "v1",
        plural,
    };
    Some(match kind {
        "Namespace" => NAMESPACES,
        "ServiceAccount" => SERVICE_ACCOUNTS,
        "Secret" => SECRETS,
        "ClusterRole" => rbac("clusterroles"),
        "ClusterRoleBinding" => rbac("clusterrolebindings"),
        "Role" => rbac("roles"),
        "RoleBinding" => rbac("rolebindings"),
        "ValidatingAdmissionPolicy" => admission("validatingadmissionpolicies"),
        "ValidatingAdmissionPolicyBinding" => admission("validatingadmissionpolicybindings"),
        _ => return None,
    })
}

/// (namespace, name) of an object ("" for what is missing).
pub fn namespace_and_name(object: &Value) -> (&str, &str) {
    let field = |f: &str| {
        object
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    (field("namespace"), field("name"))
}

/// The value of an object's annotation `key`, if it has it (and it is a string).
pub fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// An API server, seen by a simulated actor: the store in-process (the shortcut the simulated
/// cluster takes), or any API server over HTTPS with the actor's own credentials
/// ([`Remote`]). The actors call the same methods either way.
#[derive(Clone)]
pub struct Local {
    backend: Backend,
    manager: &'static str,
    /// Where refusals are told, when someone listens.
    refusals: Option<Arc<Refusals>>,
}

/// Which API server answers.
#[derive(Clone)]
enum Backend {
    /// The simulated store, in-process.
    Store {
        store: Arc<Store>,
        /// The user the calls are authorized as; None: the privileged in-process path (like
        /// the control plane's loopback client, allowed everything).
        caller: Option<(Arc<Authorizer>, UserInfo)>,
    },
    /// Any API server, over HTTPS: the server authenticates, authorizes and admits.
    Remote {
        remote: Remote,
        /// Who the credential names (for the refusals' report).
        user: String,
    },
}

/// The refusals simulated actors met. An actor that runs as its upstream account and is
/// refused lacks a grant its upstream install (or what baremend ships for it) gives: the
/// tests read these to tell a missing grant from a quiet actor.
#[derive(Debug, Default)]
pub struct Refusals {
    seen: std::sync::Mutex<Vec<String>>,
    dropped_events: std::sync::Mutex<Vec<String>>,
}

impl Refusals {
    /// The most refusals kept (the first ones tell the story).
    const KEPT: usize = 64;

    fn record(&self, message: String) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() < Self::KEPT && !seen.contains(&message) {
            seen.push(message);
        }
    }

    /// The refusals so far (at most 64): `<actor>: <the API server's message>`.
    pub fn all(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record_dropped_event(&self, event: String) {
        let mut dropped = self
            .dropped_events
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if dropped.len() < Self::KEPT {
            dropped.push(event);
        }
    }

    /// The Events the actors' accounts may not write, dropped as client-go's recorder drops
    /// them (at most 64): `<actor>: <reason> on <kind>/<name> in <namespace>`.
    pub fn dropped_events(&self) -> Vec<String> {
        self.dropped_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local")
            .field("manager", &self.manager)
            .field("user", &self.username())
            .field("remote", &matches!(self.backend, Backend::Remote { .. }))
            .finish()
    }
}

impl Local {
    /// Access as field manager `manager`.
    pub fn new(store: Arc<Store>, manager: &'static str) -> Self {
        Local {
            backend: Backend::Store {
                store,
                caller: None,
            },
            manager,
            refusals: None,
        }
    }

    /// Access to any API server through `remote`, whose credential names `user`, as field
    /// manager `manager`.
    pub fn remote(remote: Remote, user: &str, manager: &'static str) -> Self {
        Local {
            backend: Backend::Remote {
                remote,
                user: user.to_owned(),
            },
            manager,
            refusals: None,
        }
    }

    /// The same access, authorized as `user` by `authorizer` (the API server's,
    /// [`crate::apiserver::ApiServer::authorizer`]): a call RBAC refuses fails with the
    /// 403 the HTTP API gives; a refused list is empty. A remote access is authorized by its
    /// server, as its credential's user: it stays as it is.
    pub fn as_user(self, authorizer: Arc<Authorizer>, user: UserInfo) -> Self {
        let backend = match self.backend {
            Backend::Store { store, .. } => Backend::Store {
                store,
                caller: Some((authorizer, user)),
            },
            remote @ Backend::Remote { .. } => remote,
        };
        Local { backend, ..self }
    }

    /// The same access, telling `refusals` of every call RBAC or admission refuses (Events
    /// apart: an Event a recorder may not write is dropped, as client-go's recorder does).
    pub fn reporting(self, refusals: Arc<Refusals>) -> Self {
        Local {
            refusals: Some(refusals),
            ..self
        }
    }

    /// The user the calls are made as, in-process (None: the privileged in-process path, or
    /// a remote access, which the server authorizes).
    pub fn user(&self) -> Option<&UserInfo> {
        match &self.backend {
            Backend::Store { caller, .. } => caller.as_ref().map(|(_, user)| user),
            Backend::Remote { .. } => None,
        }
    }

    /// The name of the user the calls are made as ("" for the privileged in-process path).
    fn username(&self) -> &str {
        match &self.backend {
            Backend::Store { caller, .. } => caller.as_ref().map_or("", |(_, u)| &u.username),
            Backend::Remote { user, .. } => user,
        }
    }

    /// Tells the listener of a refused call.
    fn refused<T>(&self, result: ApiResult<T>, gvr: Gvr) -> ApiResult<T> {
        if let (Err(error), Some(refusals)) = (&result, &self.refusals)
            && error.code == 403
            && gvr.plural != EVENTS.plural
        {
            let user = self.username();
            tracing::warn!(actor = self.manager, user, "refused: {}", error.message);
            refusals.record(format!("{} ({user}): {}", self.manager, error.message));
        }
        result
    }

    /// The caller as admission (NodeRestriction, admission policies) judges its writes: its
    /// account, or no user for a writer without one.
    fn caller(&self) -> RequestUser {
        self.user()
            .map(RequestUser::of)
            .unwrap_or_else(RequestUser::in_process)
    }

    /// Ok when the in-process caller may `verb` the object (`name` "" for a collection).
    fn allowed(
        &self,
        verb: &str,
        gvr: Gvr,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        let Backend::Store {
            caller: Some((authorizer, user)),
            ..
        } = &self.backend
        else {
            return Ok(());
        };
        let attributes = Attributes::resource(
            verb,
            ResourceAttributes {
                group: gvr.group.into(),
                version: gvr.version.into(),
                resource: gvr.plural.into(),
                subresource: subresource.into(),
                namespace: namespace.into(),
                name: name.into(),
            },
        );
        let checked = authorizer.check(user, &attributes);
        self.refused(checked, gvr)
    }

    /// The time the API server's clock says (the simulated store's wall clock, which a test
    /// may move; a remote server's is this machine's).
    pub fn wall_time(&self) -> std::time::Duration {
        match &self.backend {
            Backend::Store { store, .. } => store.wall_time(),
            Backend::Remote { .. } => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }

    /// The in-process store and its type for `gvr`, or the remote client.
    fn target(&self, gvr: Gvr) -> ApiResult<Target<'_>> {
        match &self.backend {
            Backend::Store { store, .. } => {
                let ty = store
                    .resource_type(gvr.group, gvr.version, gvr.plural)
                    .ok_or_else(|| ApiError::no_route(gvr.plural))?;
                Ok(Target::Store(store, ty))
            }
            Backend::Remote { remote, .. } => Ok(Target::Remote(remote)),
        }
    }

    /// Whether the API serves the kind (its CRD is installed, for a custom one).
    pub fn serves(&self, gvr: Gvr) -> bool {
        match &self.backend {
            Backend::Store { .. } => self.target(gvr).is_ok(),
            Backend::Remote { remote, .. } => remote.serves(gvr),
        }
    }

    /// Reads an object.
    pub fn get(&self, gvr: Gvr, namespace: &str, name: &str) -> ApiResult<Value> {
        self.allowed("get", gvr, "", namespace, name)?;
        let read = match self.target(gvr)? {
            Target::Store(store, ty) => store.get(&ty, gvr.version, namespace, name),
            Target::Remote(remote) => remote.get(gvr, namespace, name),
        };
        self.refused(read, gvr)
    }

    /// [`Local::get`] without a copy of the object (the store's own, where reading changes
    /// nothing): for actors that read theirs every heartbeat.
    pub fn get_shared(&self, gvr: Gvr, namespace: &str, name: &str) -> ApiResult<Arc<Value>> {
        self.allowed("get", gvr, "", namespace, name)?;
        let read = match self.target(gvr)? {
            Target::Store(store, ty) => store.get_shared(&ty, gvr.version, namespace, name),
            Target::Remote(remote) => remote.get(gvr, namespace, name).map(Arc::new),
        };
        self.refused(read, gvr)
    }

    /// Lists objects (all namespaces when `namespace` is None).
    pub fn list(&self, gvr: Gvr, namespace: Option<&str>) -> Vec<Value> {
        self.list_selected(gvr, namespace, "")
    }

    /// The stored objects, shared (in-process: no copy, no apiVersion or kind added): for
    /// passes over thousands of objects.
    pub fn list_shared(&self, gvr: Gvr, namespace: Option<&str>) -> Vec<Arc<Value>> {
        if self
            .allowed("list", gvr, "", namespace.unwrap_or_default(), "")
            .is_err()
        {
            return Vec::new();
        }
        match self.target(gvr) {
            Ok(Target::Store(store, ty)) => store.shared(&ty, namespace),
            Ok(Target::Remote(_)) => self
                .list_selected(gvr, namespace, "")
                .into_iter()
                .map(Arc::new)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Lists objects with a field selector (a refused or failed list is empty, as an
    /// informer that cannot list sees nothing).
    pub fn list_selected(&self, gvr: Gvr, namespace: Option<&str>, fields: &str) -> Vec<Value> {
        if self
            .allowed("list", gvr, "", namespace.unwrap_or_default(), "")
            .is_err()
        {
            return Vec::new();
        }
        match self.target(gvr) {
            Ok(Target::Store(store, ty)) => {
                let Ok(fields) = FieldSelector::parse(fields, gvr.plural) else {
                    return Vec::new();
                };
                store
                    .list(
                        &ty,
                        gvr.version,
                        namespace,
                        &LabelSelector::default(),
                        &fields,
                        None,
                        None,
                    )
                    .ok()
                    .and_then(|list| list.get("items").and_then(Value::as_array).cloned())
                    .unwrap_or_default()
            }
            Ok(Target::Remote(remote)) => {
                let listed = remote.list(gvr, namespace, fields);
                self.refused(listed, gvr).unwrap_or_default()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Creates an object.
    pub fn create(&self, gvr: Gvr, namespace: &str, body: Value) -> ApiResult<Value> {
        self.allowed("create", gvr, "", namespace, "")?;
        let created = match self.target(gvr)? {
            Target::Store(store, ty) => {
                store.create(&self.caller(), &ty, gvr.version, namespace, body, false)
            }
            Target::Remote(remote) => remote.create(gvr, namespace, &body, self.manager),
        };
        self.refused(created, gvr)
    }

    /// Merge-patches an object or its status.
    pub fn merge(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: &str,
        body: &Value,
        status: bool,
    ) -> ApiResult<Value> {
        let subresource = if status { "status" } else { "" };
        self.allowed("patch", gvr, subresource, namespace, name)?;
        let patched = match self.target(gvr)? {
            Target::Store(store, ty) => patch(
                store,
                &self.caller(),
                &ty,
                gvr.version,
                namespace,
                name,
                &PatchKind::Merge,
                body,
                status,
                self.manager,
                false,
            ),
            Target::Remote(remote) => {
                remote.merge(gvr, namespace, name, body, status, self.manager)
            }
        };
        self.refused(patched, gvr)
    }

    /// Deletes an object with a grace period (None: the object's own).
    pub fn delete(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: &str,
        grace: Option<i64>,
    ) -> ApiResult<Value> {
        self.allowed("delete", gvr, "", namespace, name)?;
        let deleted = match self.target(gvr)? {
            Target::Store(store, ty) => {
                let options = DeleteOptions {
                    grace_period_seconds: grace,
                    ..DeleteOptions::default()
                };
                store.delete(&self.caller(), &ty, gvr.version, namespace, name, &options)
            }
            Target::Remote(remote) => remote.delete(gvr, namespace, name, grace),
        };
        self.refused(deleted, gvr)
    }

    /// Records an Event about an object, in the object's namespace (`default` for a
    /// cluster-scoped one).
    pub fn event(
        &self,
        regarding: &Value,
        kind: &str,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        let namespace = regarding
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_owned();
        self.event_in(&namespace, regarding, kind, reason, message, component);
    }

    /// Evicts a pod through the eviction subresource (PodDisruptionBudgets respected).
    pub fn evict(&self, namespace: &str, name: &str) -> ApiResult<()> {
        self.allowed("create", PODS, "eviction", namespace, name)?;
        let evicted = match self.target(PODS)? {
            Target::Store(store, _) => crate::apiserver::eviction::evict(
                store,
                &self.caller(),
                namespace,
                name,
                &serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}),
            ),
            Target::Remote(remote) => remote.evict(namespace, name).map(|_| ()),
        };
        self.refused(evicted, PODS)
    }

    /// Records an Event about an object in `namespace` (as the MCO records its Node Events
    /// in its own namespace).
    pub fn event_in(
        &self,
        namespace: &str,
        regarding: &Value,
        kind: &str,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        let name = regarding
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let now = crate::apiserver::time::format_time(self.wall_time());
        let event = serde_json::json!({
            "metadata": {"generateName": format!("{name}.")},
            "involvedObject": {
                "apiVersion": regarding.get("apiVersion"),
                "kind": regarding.get("kind"),
                "name": name,
                "namespace": regarding.pointer("/metadata/namespace"),
                "uid": regarding.pointer("/metadata/uid"),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        if let (Err(error), Some(refusals)) =
            (self.create(EVENTS, namespace, event), &self.refusals)
            && error.code == 403
        {
            let kind = regarding
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default();
            refusals.record_dropped_event(format!(
                "{}: {reason} on {kind}/{name} in {namespace}",
                self.manager
            ));
        }
    }
}

/// Where one call goes.
enum Target<'a> {
    /// The in-process store, and the call's resource type.
    Store(&'a Arc<Store>, Arc<ResourceType>),
    /// A remote API server.
    Remote(&'a Remote),
}
