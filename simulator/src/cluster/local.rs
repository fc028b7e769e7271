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
        authorizer.check(user, &attributes)
    }

    /// The store.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    fn ty(&self, gvr: Gvr) -> ApiResult<Arc<ResourceType>> {
        self.store
            .registry()
            .get(gvr.group, gvr.version, gvr.plural)
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
        self.store
            .create(&*self.ty(gvr)?, gvr.version, namespace, body, false)
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
        patch(
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
        )
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
        self.store
            .delete(&*self.ty(gvr)?, gvr.version, namespace, name, &options)
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
        crate::apiserver::eviction::evict(
            &self.store,
            namespace,
            name,
            &serde_json::json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}),
        )
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
        let _ = self.create(EVENTS, namespace, event);
    }
}
