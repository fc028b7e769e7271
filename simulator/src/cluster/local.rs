//! In-process access to the store for the simulated actors (like the controllers that run
//! next to a real API server): the same write rules and watch events as HTTP clients get.

use std::sync::Arc;

use serde_json::Value;

use crate::apiserver::auth::rbac::{Attributes, ResourceAttributes};
use crate::apiserver::errors::{ApiError, ApiResult};
use crate::apiserver::kinds::ResourceType;
use crate::apiserver::operations::{PatchKind, patch};
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::store::DeleteOptions;
use crate::apiserver::{Authorizer, Store, UserInfo};

/// A group, version and plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gvr {
    /// API group.
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural.
    pub plural: &'static str,
}

/// Nodes.
pub const NODES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "nodes",
};
/// Pods.
pub const PODS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "pods",
};
/// Secrets.
pub const SECRETS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "secrets",
};
/// Namespaces.
pub const NAMESPACES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "namespaces",
};
/// Events (core).
pub const EVENTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "events",
};
/// Leases.
pub const LEASES: Gvr = Gvr {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
};
/// PodDisruptionBudgets.
pub const PDBS: Gvr = Gvr {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
};
/// CRDs.
pub const CRDS: Gvr = Gvr {
    group: "apiextensions.k8s.io",
    version: "v1",
    plural: "customresourcedefinitions",
};
/// Machines.
pub const MACHINES: Gvr = Gvr {
    group: "machine.openshift.io",
    version: "v1beta1",
    plural: "machines",
};
/// MachineHealthChecks.
pub const MHCS: Gvr = Gvr {
    group: "machine.openshift.io",
    version: "v1beta1",
    plural: "machinehealthchecks",
};
/// Cluster API Machines.
pub const CAPI_MACHINES: Gvr = Gvr {
    group: "cluster.x-k8s.io",
    version: "v1beta1",
    plural: "machines",
};
/// Cluster API Clusters.
pub const CAPI_CLUSTERS: Gvr = Gvr {
    group: "cluster.x-k8s.io",
    version: "v1beta1",
    plural: "clusters",
};
/// Cluster API MachineHealthChecks.
pub const CAPI_MHCS: Gvr = Gvr {
    group: "cluster.x-k8s.io",
    version: "v1beta1",
    plural: "machinehealthchecks",
};
/// metal3's Metal3Machines.
pub const METAL3_MACHINES: Gvr = Gvr {
    group: "infrastructure.cluster.x-k8s.io",
    version: "v1beta1",
    plural: "metal3machines",
};
/// baremend's Cluster API remediation templates.
pub const MACHINE_REMEDIATION_TEMPLATES: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "machineremediationtemplates",
};
/// baremend's Cluster API remediation requests.
pub const MACHINE_REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "machineremediations",
};
/// baremend's HostBmcs (a host's BMC, for hosts without a BareMetalHost).
pub const HOST_BMCS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "hostbmcs",
};
/// BareMetalHosts.
pub const BMHS: Gvr = Gvr {
    group: "metal3.io",
    version: "v1alpha1",
    plural: "baremetalhosts",
};

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
        "ServiceAccount" => Gvr {
            group: "",
            version: "v1",
            plural: "serviceaccounts",
        },
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

/// OpenShift's ClusterVersion (cluster-scoped, the one named `version`).
pub const CLUSTER_VERSIONS: Gvr = Gvr {
    group: "config.openshift.io",
    version: "v1",
    plural: "clusterversions",
};

/// MachineConfigPools.
pub const MCPS: Gvr = Gvr {
    group: "machineconfiguration.openshift.io",
    version: "v1",
    plural: "machineconfigpools",
};
/// MachineConfigs.
pub const MCS: Gvr = Gvr {
    group: "machineconfiguration.openshift.io",
    version: "v1",
    plural: "machineconfigs",
};
/// MachineConfigNodes.
pub const MCNS: Gvr = Gvr {
    group: "machineconfiguration.openshift.io",
    version: "v1",
    plural: "machineconfignodes",
};

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

/// The store, seen by an in-process actor.
#[derive(Clone)]
pub struct Local {
    store: Arc<Store>,
    manager: &'static str,
    /// The user the calls are authorized as; None: the privileged in-process path (like the
    /// control plane's loopback client, allowed everything).
    caller: Option<(Arc<Authorizer>, UserInfo)>,
    /// Where refusals are told, when someone listens.
    refusals: Option<Arc<Refusals>>,
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
            .field(
                "user",
                &self.caller.as_ref().map(|(_, user)| &user.username),
            )
            .finish()
    }
}

impl Local {
    /// Access as field manager `manager`.
    pub fn new(store: Arc<Store>, manager: &'static str) -> Self {
        Local {
            store,
            manager,
            caller: None,
            refusals: None,
        }
    }

    /// The same access, authorized as `user` by `authorizer` (the API server's,
    /// [`crate::apiserver::ApiServer::authorizer`]): a call RBAC refuses fails with the
    /// 403 the HTTP API gives; a refused list is empty.
    pub fn as_user(self, authorizer: Arc<Authorizer>, user: UserInfo) -> Self {
        Local {
            caller: Some((authorizer, user)),
            ..self
        }
    }

    /// The same access, telling `refusals` of every call RBAC or admission refuses (Events
    /// apart: an Event a recorder may not write is dropped, as client-go's recorder does).
    pub fn reporting(self, refusals: Arc<Refusals>) -> Self {
        Local {
            refusals: Some(refusals),
            ..self
        }
    }

    /// The user the calls are made as (None: the privileged in-process path).
    pub fn user(&self) -> Option<&UserInfo> {
        self.caller.as_ref().map(|(_, user)| user)
    }

    /// Tells the listener of a refused call.
    fn refused<T>(&self, result: ApiResult<T>, gvr: Gvr) -> ApiResult<T> {
        if let (Err(error), Some(refusals)) = (&result, &self.refusals)
            && error.code == 403
            && gvr.plural != EVENTS.plural
        {
            let user = self.user().map_or("", |u| u.username.as_str());
            tracing::warn!(actor = self.manager, user, "refused: {}", error.message);
            refusals.record(format!("{} ({user}): {}", self.manager, error.message));
        }
        result
    }

    /// Names the caller to admission (NodeRestriction, admission policies) while it writes.
    fn admission_scope(&self) -> Option<crate::apiserver::validation::admission::UserScope> {
        self.user()
            .map(crate::apiserver::validation::admission::UserScope::of)
    }

    /// Ok when the caller may `verb` the object (`name` "" for a collection).
    fn allowed(
        &self,
        verb: &str,
        gvr: Gvr,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> ApiResult<()> {
        let Some((authorizer, user)) = &self.caller else {
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

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    fn ty(&self, gvr: Gvr) -> ApiResult<Arc<ResourceType>> {
        self.store
            .resource_type(gvr.group, gvr.version, gvr.plural)
            .ok_or_else(|| ApiError::no_route(gvr.plural))
    }

    /// Whether the API serves the kind (its CRD is installed, for a custom one).
    pub fn serves(&self, gvr: Gvr) -> bool {
        self.ty(gvr).is_ok()
    }

    /// Reads an object.
    pub fn get(&self, gvr: Gvr, namespace: &str, name: &str) -> ApiResult<Value> {
        self.allowed("get", gvr, "", namespace, name)?;
        self.store
            .get(&*self.ty(gvr)?, gvr.version, namespace, name)
    }

    /// [`Local::get`] without a copy of the object (the store's own, where reading changes
    /// nothing): for actors that read theirs every heartbeat.
    pub fn get_shared(&self, gvr: Gvr, namespace: &str, name: &str) -> ApiResult<Arc<Value>> {
        self.allowed("get", gvr, "", namespace, name)?;
        self.store
            .get_shared(&*self.ty(gvr)?, gvr.version, namespace, name)
    }

    /// Lists objects (all namespaces when `namespace` is None).
    pub fn list(&self, gvr: Gvr, namespace: Option<&str>) -> Vec<Value> {
        self.list_selected(gvr, namespace, "")
    }

    /// The stored objects, shared (no copy, no apiVersion or kind added): for passes over
    /// thousands of objects.
    pub fn list_shared(&self, gvr: Gvr, namespace: Option<&str>) -> Vec<Arc<Value>> {
        if self
            .allowed("list", gvr, "", namespace.unwrap_or_default(), "")
            .is_err()
        {
            return Vec::new();
        }
        match self.ty(gvr) {
            Ok(ty) => self.store.shared(&ty, namespace),
            Err(_) => Vec::new(),
        }
    }

    /// Lists objects with a field selector.
    pub fn list_selected(&self, gvr: Gvr, namespace: Option<&str>, fields: &str) -> Vec<Value> {
        if self
            .allowed("list", gvr, "", namespace.unwrap_or_default(), "")
            .is_err()
        {
            return Vec::new();
        }
        let Ok(ty) = self.ty(gvr) else {
            return Vec::new();
        };
        let Ok(fields) = FieldSelector::parse(fields, gvr.plural) else {
            return Vec::new();
        };
        self.store
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

    /// Creates an object.
    pub fn create(&self, gvr: Gvr, namespace: &str, body: Value) -> ApiResult<Value> {
        self.allowed("create", gvr, "", namespace, "")?;
        let _admission = self.admission_scope();
        let created = self
            .store
            .create(&*self.ty(gvr)?, gvr.version, namespace, body, false);
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
        let _admission = self.admission_scope();
        let patched = patch(
            &self.store,
            &*self.ty(gvr)?,
            gvr.version,
            namespace,
            name,
            &PatchKind::Merge,
            body,
            status,
            self.manager,
            false,
        );
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
        let options = DeleteOptions {
            grace_period_seconds: grace,
            ..DeleteOptions::default()
        };
        let _admission = self.admission_scope();
        let deleted = self
            .store
            .delete(&*self.ty(gvr)?, gvr.version, namespace, name, &options);
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
        let _admission = self.admission_scope();
        let evicted = crate::apiserver::eviction::evict(
            &self.store,
            namespace,
            name,
            &serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}),
        );
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
        let now = crate::apiserver::time::format_time(self.store.wall_time());
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
