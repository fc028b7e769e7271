//! What a kubelet may do: the Node authorizer (`--authorization-mode=Node,RBAC`) and the
//! NodeRestriction admission plugin, for a caller `system:node:<name>` in `system:nodes`.
//!
//! Expected flow: the [`super::Authorizer`] asks [`authorize`] first for a node identity; an
//! `Allow` ends there, a `Deny` (another node's lease) is final, no opinion falls through to
//! RBAC (where nothing is bound to `system:nodes` by default, as since Kubernetes 1.8).
//! Writes that passed authorization then meet [`restrict`] (create, update and delete), which
//! needs the object: a kubelet may write only its own Node and the pods bound to it.
//!
//! Guarantees (kubernetes v1.32: `plugin/pkg/auth/authorizer/node/node_authorizer.go`, the
//! rules of `bootstrappolicy.NodeRules` it applies, and
//! `plugin/pkg/admission/noderestriction/admission.go`):
//! - nodes: create, get, list, watch, update, patch, delete; `nodes/status` update, patch;
//!   NodeRestriction: only the node's own Node object, no change of its taints on update,
//!   no `node-restriction.kubernetes.io/` label set or changed;
//! - pods: get, list, watch, create, delete; `pods/status` update, patch; `pods/eviction`
//!   create; NodeRestriction: create only mirror pods bound to the node, and every other write
//!   (status, delete, eviction) only of pods whose `spec.nodeName` is the node;
//! - leases in `kube-node-lease`: get, create, update, patch, delete, only the lease named
//!   after the node (the authorizer's own check, `authorizeLease`);
//! - events (core and `events.k8s.io`): create, update, patch; services, endpoints: read.
//!
//! Caveats: the graph that lets a node read the Secrets, ConfigMaps and volumes of its pods
//! is not kept (the simulated kubelets read none, so a node reads none); the field-selector
//! limits of `AuthorizeNodeWithSelectors` (a node lists only its own pods) are not applied;
//! CSINodes, certificates and ResourceSlices are not served to nodes.

use serde_json::Value;

use super::rbac::{Attributes, Decision};

/// The group every kubelet's credentials put it in.
pub const NODES_GROUP: &str = "system:nodes";
/// The user name prefix of a kubelet.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The namespace of the node heartbeat leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// The label prefix only the control plane may set on a Node.
const RESTRICTED_LABEL_PREFIX: &str = "node-restriction.kubernetes.io/";
/// The annotation that marks a mirror pod (a static pod's reflection in the API).
const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The node a caller is the kubelet of: `system:node:<name>` in `system:nodes`.
pub fn node_name<'a>(username: &'a str, groups: &[String]) -> Option<&'a str> {
    let name = username.strip_prefix(NODE_USER_PREFIX)?;
    (!name.is_empty() && groups.iter().any(|g| g == NODES_GROUP)).then_some(name)
}

/// The static rules of `bootstrappolicy.NodeRules` the Node authorizer applies, as
/// (group, resource, subresource, verbs); nodes, leases, Secrets and ConfigMaps have their
/// own paths in [`authorize`].
const NODE_RULES: &[(&str, &str, &str, &[&str])] = &[
    ("", "nodes", "status", &["update", "patch"]),
    (
        "",
        "pods",
        "",
        &["get", "list", "watch", "create", "delete"],
    ),
    ("", "pods", "status", &["update", "patch"]),
    ("", "pods", "eviction", &["create"]),
    ("", "events", "", &["create", "update", "patch"]),
    ("", "services", "", &["get", "list", "watch"]),
    ("", "endpoints", "", &["get"]),
];

/// The verbs a node may use on its own lease.
const LEASE_VERBS: &[&str] = &["get", "create", "update", "patch", "delete"];

/// Whether a pod bound to the node refers to a Secret or ConfigMap (the authorizer's graph):
/// `(resource, namespace, name)`.
pub type Related<'a> = &'a dyn Fn(&str, &str, &str) -> bool;

/// The Node authorizer's decision for `node`: `None` is no opinion (RBAC decides).
pub fn authorize(node: &str, attributes: &Attributes, related: Related) -> Option<Decision> {
    let resource = attributes.resource.as_ref()?;
    let verb = attributes.verb.as_str();
    match (
        resource.group.as_str(),
        resource.resource.as_str(),
        resource.subresource.as_str(),
    ) {
        ("coordination.k8s.io", "leases", "") => {
            // The name of a created lease is checked by NodeRestriction (`restrict`).
            let own = resource.namespace == NODE_LEASE_NAMESPACE
                && LEASE_VERBS.contains(&verb)
                && (resource.name == node || (verb == "create" && resource.name.is_empty()));
            own.then_some(Decision::Allow)
        }
        // AuthorizeNodeWithSelectors (on by default since 1.32): a node reads only itself;
        // writes are left to NodeRestriction; a node is never deleted by its kubelet.
        ("", "nodes", "") => match verb {
            "get" | "watch" => (resource.name == node).then_some(Decision::Allow),
            "create" | "update" | "patch" => Some(Decision::Allow),
            _ => None,
        },
        ("", "secrets" | "configmaps", "") => (verb == "get"
            && !resource.name.is_empty()
            && related(&resource.resource, &resource.namespace, &resource.name))
        .then_some(Decision::Allow),
        _ => NODE_RULES
            .iter()
            .any(|(group, plural, subresource, verbs)| {
                *group == resource.group
                    && *plural == resource.resource
                    && *subresource == resource.subresource
                    && verbs.contains(&verb)
            })
            .then_some(Decision::Allow),
    }
}

/// Whether `pod` refers to the Secret or ConfigMap `name` (volumes, projected sources,
/// environment, image pull Secrets): the edges of the authorizer's graph.
pub fn pod_refers_to(pod: &Value, resource: &str, name: &str) -> bool {
    let (volume, reference, key_ref, source) = match resource {
        "secrets" => ("secret", "secretName", "secretKeyRef", "secretRef"),
        "configmaps" => ("configMap", "name", "configMapKeyRef", "configMapRef"),
        _ => return false,
    };
    let is = |v: Option<&Value>| v.and_then(Value::as_str) == Some(name);
    let list = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    let spec = pod.get("spec");
    let volumes = list(spec.and_then(|s| s.get("volumes")));
    let in_volumes = volumes.iter().any(|v| {
        is(v.pointer(&format!("/{volume}/{reference}")))
            || list(v.pointer("/projected/sources"))
                .iter()
                .any(|s| is(s.pointer(&format!("/{volume}/name"))))
    });
    let containers = ["containers", "initContainers"]
        .iter()
        .flat_map(|k| list(spec.and_then(|s| s.get(*k))))
        .collect::<Vec<_>>();
    let in_env = containers.iter().any(|c| {
        list(c.get("env"))
            .iter()
            .any(|e| is(e.pointer(&format!("/valueFrom/{key_ref}/name"))))
            || list(c.get("envFrom"))
                .iter()
                .any(|e| is(e.pointer(&format!("/{source}/name"))))
    });
    let pull = resource == "secrets"
        && list(spec.and_then(|s| s.get("imagePullSecrets")))
            .iter()
            .any(|s| is(s.get("name")));
    in_volumes || in_env || pull
}

/// A write NodeRestriction judges.
#[derive(Debug, Clone, Copy)]
pub struct NodeWrite<'a> {
    /// Create, update or delete.
    pub operation: WriteOperation,
    /// API group.
    pub group: &'a str,
    /// Resource (plural).
    pub resource: &'a str,
    /// `status`, `eviction` or "".
    pub subresource: &'a str,
    /// The object as it would be stored (None for a delete).
    pub object: Option<&'a Value>,
    /// The stored object (update, delete).
    pub old: Option<&'a Value>,
}

/// The kinds of write NodeRestriction sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOperation {
    /// A create.
    Create,
    /// An update or patch.
    Update,
    /// A delete (an eviction deletes too).
    Delete,
}

/// NodeRestriction: Ok, or the refusal's message (a 403 `Forbidden`).
pub fn restrict(node: &str, write: &NodeWrite) -> Result<(), String> {
    match (write.group, write.resource) {
        ("", "nodes") => restrict_node(node, write),
        ("", "pods") => restrict_pod(node, write),
        ("coordination.k8s.io", "leases") => {
            let target = name_of(write.object.or(write.old));
            if target == node {
                Ok(())
            } else {
                Err(format!(
                    "can only access node lease with the same name as the requesting node {node:?}"
                ))
            }
        }
        _ => Ok(()),
    }
}

fn name_of(object: Option<&Value>) -> &str {
    object
        .and_then(|o| o.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn restrict_node(node: &str, write: &NodeWrite) -> Result<(), String> {
    let target = name_of(write.object.or(write.old));
    if target != node {
        return Err(format!(
            "node {node:?} is not allowed to modify node {target:?}"
        ));
    }
    let labels = |o: Option<&Value>| {
        o.and_then(|o| o.pointer("/metadata/labels"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let (new, old) = (labels(write.object), labels(write.old));
    let changed = new
        .iter()
        .filter(|(key, value)| old.get(*key) != Some(*value))
        .chain(old.iter().filter(|(key, _)| !new.contains_key(*key)))
        .map(|(key, _)| key)
        .find(|key| key.starts_with(RESTRICTED_LABEL_PREFIX));
    if let (Some(key), false) = (changed, write.operation == WriteOperation::Delete) {
        return Err(format!(
            "node {node:?} is not allowed to modify labels: {key}"
        ));
    }
    if write.operation == WriteOperation::Update {
        let taints = |o: Option<&Value>| o.and_then(|o| o.pointer("/spec/taints")).cloned();
        let (new, old) = (taints(write.object), taints(write.old));
        let empty = |t: &Option<Value>| {
            t.as_ref()
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
        };
        if new != old && !(empty(&new) && empty(&old)) {
            return Err(format!("node {node:?} is not allowed to modify taints"));
        }
    }
    Ok(())
}

fn bound_to(pod: Option<&Value>) -> &str {
    pod.and_then(|p| p.pointer("/spec/nodeName"))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn restrict_pod(node: &str, write: &NodeWrite) -> Result<(), String> {
    match write.operation {
        WriteOperation::Create => {
            let mirror = write
                .object
                .and_then(|p| p.pointer("/metadata/annotations"))
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
            if !mirror {
                return Err(format!(
                    "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
                ));
            }
            if bound_to(write.object) != node {
                return Err(format!(
                    "node {node:?} can only create pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        WriteOperation::Update => {
            if write.subresource != "status" {
                return Err(format!("node {node:?} can only update pod status"));
            }
            if bound_to(write.old) != node {
                return Err(format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
        WriteOperation::Delete => {
            if bound_to(write.old) != node {
                let what = if write.subresource == "eviction" {
                    "evict"
                } else {
                    "delete"
                };
                return Err(format!(
                    "node {node:?} can only {what} pods with spec.nodeName set to itself"
                ));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::apiserver::auth::rbac::tests::request as attributes;

    #[test]
    fn only_system_node_users_in_the_nodes_group_are_kubelets() {
        let nodes = vec![NODES_GROUP.to_string()];
        assert_eq!(node_name("system:node:worker-0", &nodes), Some("worker-0"));
        assert_eq!(node_name("system:node:worker-0", &[]), None);
        assert_eq!(node_name("system:node:", &nodes), None);
        assert_eq!(node_name("worker-0", &nodes), None);
    }

    fn unrelated(_: &str, _: &str, _: &str) -> bool {
        false
    }

    // node_authorizer.go: authorizeLease; admission.go: admitLease.
    #[test]
    fn a_node_may_use_only_its_own_lease() {
        let lease =
            |verb, ns, name| attributes(verb, "coordination.k8s.io", "leases", "", ns, name);
        assert_eq!(
            authorize(
                "w0",
                &lease("patch", NODE_LEASE_NAMESPACE, "w0"),
                &unrelated
            ),
            Some(Decision::Allow)
        );
        assert_eq!(
            authorize("w0", &lease("create", NODE_LEASE_NAMESPACE, ""), &unrelated),
            Some(Decision::Allow)
        );
        for other in [
            lease("patch", NODE_LEASE_NAMESPACE, "w1"),
            lease("get", "default", "w0"),
            lease("list", NODE_LEASE_NAMESPACE, ""),
        ] {
            assert_eq!(authorize("w0", &other, &unrelated), None, "{other:?}");
        }
        let other_lease = json!({"metadata": {"name": "w1"}});
        let mut created = write(
            WriteOperation::Create,
            "leases",
            "",
            Some(&other_lease),
            None,
        );
        created.group = "coordination.k8s.io";
        let error = restrict("w0", &created).unwrap_err();
        assert!(
            error.contains("same name as the requesting node"),
            "{error}"
        );
    }

    // node_authorizer.go: Authorize (AuthorizeNodeWithSelectors) and the static NodeRules.
    #[test]
    fn the_node_rules_allow_the_kubelets_calls_and_nothing_else() {
        for (verb, resource, sub, name) in [
            ("get", "nodes", "", "w0"),
            ("create", "nodes", "", ""),
            ("patch", "nodes", "", "w0"),
            ("patch", "nodes", "status", "w0"),
            ("list", "pods", "", ""),
            ("delete", "pods", "", "p"),
            ("patch", "pods", "status", "p"),
            ("create", "pods", "eviction", "p"),
            ("create", "events", "", ""),
        ] {
            let a = attributes(verb, "", resource, sub, "", name);
            assert_eq!(
                authorize("w0", &a, &unrelated),
                Some(Decision::Allow),
                "{verb} {resource}/{sub}"
            );
        }
        for (verb, group, resource, name) in [
            ("get", "", "nodes", "w1"),
            ("list", "", "nodes", ""),
            ("delete", "", "nodes", "w0"),
            ("get", "", "secrets", "s"),
            ("list", "", "secrets", ""),
            ("get", "", "configmaps", "c"),
            ("patch", "", "pods", "p"),
            ("deletecollection", "", "pods", ""),
            ("create", "events.k8s.io", "events", ""),
            ("get", "metal3.io", "baremetalhosts", "h"),
            ("patch", "machine.openshift.io", "machines", "m"),
        ] {
            let a = attributes(verb, group, resource, "", "ns", name);
            assert_eq!(
                authorize("w0", &a, &unrelated),
                None,
                "{verb} {group}/{resource}"
            );
        }
    }

    // node_authorizer.go: authorizeReadNamespacedObject over the graph.
    #[test]
    fn a_node_reads_only_the_secrets_and_config_maps_its_pods_use() {
        let pod = json!({"spec": {
            "nodeName": "w0",
            "volumes": [{"name": "v", "secret": {"secretName": "mounted"}},
                        {"name": "p", "projected": {"sources": [{"configMap": {"name": "projected"}}]}}],
            "containers": [{"name": "c",
                            "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "env", "key": "k"}}}],
                            "envFrom": [{"configMapRef": {"name": "from"}}]}],
            "imagePullSecrets": [{"name": "pull"}],
        }});
        for (resource, name) in [
            ("secrets", "mounted"),
            ("secrets", "env"),
            ("secrets", "pull"),
            ("configmaps", "projected"),
            ("configmaps", "from"),
        ] {
            assert!(pod_refers_to(&pod, resource, name), "{resource}/{name}");
        }
        for (resource, name) in [
            ("secrets", "other"),
            ("configmaps", "mounted"),
            ("secrets", "from"),
            ("pods", "mounted"),
        ] {
            assert!(!pod_refers_to(&pod, resource, name), "{resource}/{name}");
        }
        let related =
            |resource: &str, ns: &str, name: &str| ns == "n" && pod_refers_to(&pod, resource, name);
        let get = |name| attributes("get", "", "secrets", "", "n", name);
        assert_eq!(
            authorize("w0", &get("mounted"), &related),
            Some(Decision::Allow)
        );
        assert_eq!(authorize("w0", &get("other"), &related), None);
        assert_eq!(
            authorize(
                "w0",
                &attributes("list", "", "secrets", "", "n", ""),
                &related
            ),
            None
        );
    }

    fn node(name: &str, labels: Value, taints: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}})
    }

    fn write<'a>(
        op: WriteOperation,
        resource: &'a str,
        sub: &'a str,
        object: Option<&'a Value>,
        old: Option<&'a Value>,
    ) -> NodeWrite<'a> {
        NodeWrite {
            operation: op,
            group: "",
            resource,
            subresource: sub,
            object,
            old,
        }
    }

    // admission.go: admitNode.
    #[test]
    fn a_node_writes_only_its_own_node_and_never_its_taints_or_restricted_labels() {
        let own = node("w0", json!({"a": "1"}), json!([]));
        let other = node("w1", json!({}), json!([]));
        let tainted = node(
            "w0",
            json!({"a": "1"}),
            json!([{"key": "k", "effect": "NoSchedule"}]),
        );
        let restricted = node(
            "w0",
            json!({"a": "1", "node-restriction.kubernetes.io/x": "y"}),
            json!([]),
        );
        let relabelled = node("w0", json!({"a": "2"}), json!(null));
        use WriteOperation::*;
        assert!(restrict("w0", &write(Create, "nodes", "", Some(&tainted), None)).is_ok());
        assert!(
            restrict(
                "w0",
                &write(Update, "nodes", "status", Some(&relabelled), Some(&own))
            )
            .is_ok()
        );
        assert!(restrict("w0", &write(Delete, "nodes", "", None, Some(&own))).is_ok());
        for (denied, expected) in [
            (
                write(Create, "nodes", "", Some(&other), None),
                "not allowed to modify node \"w1\"",
            ),
            (
                write(Update, "nodes", "", Some(&other), Some(&other)),
                "not allowed to modify node",
            ),
            (
                write(Delete, "nodes", "", None, Some(&other)),
                "not allowed to modify node",
            ),
            (
                write(Update, "nodes", "", Some(&tainted), Some(&own)),
                "not allowed to modify taints",
            ),
            (
                write(Update, "nodes", "", Some(&own), Some(&tainted)),
                "not allowed to modify taints",
            ),
            (
                write(Create, "nodes", "", Some(&restricted), None),
                "node-restriction.kubernetes.io/x",
            ),
            (
                write(Update, "nodes", "", Some(&own), Some(&restricted)),
                "node-restriction.kubernetes.io/x",
            ),
        ] {
            let error = restrict("w0", &denied).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }

    // admission.go: admitPod, admitPodStatus, admitPodEviction.
    #[test]
    fn a_node_writes_only_the_pods_bound_to_it_and_creates_only_mirror_pods() {
        let bound = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "w0"}});
        let elsewhere = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "w1"}});
        let mirror = json!({"metadata": {"name": "p", "annotations": {MIRROR_POD_ANNOTATION: "x"}}, "spec": {"nodeName": "w0"}});
        let foreign_mirror = json!({"metadata": {"name": "p", "annotations": {MIRROR_POD_ANNOTATION: "x"}}, "spec": {"nodeName": "w1"}});
        use WriteOperation::*;
        assert!(restrict("w0", &write(Create, "pods", "", Some(&mirror), None)).is_ok());
        assert!(
            restrict(
                "w0",
                &write(Update, "pods", "status", Some(&bound), Some(&bound))
            )
            .is_ok()
        );
        assert!(restrict("w0", &write(Delete, "pods", "", None, Some(&bound))).is_ok());
        assert!(restrict("w0", &write(Delete, "pods", "eviction", None, Some(&bound))).is_ok());
        for (denied, expected) in [
            (
                write(Create, "pods", "", Some(&bound), None),
                "can only create mirror pods",
            ),
            (
                write(Create, "pods", "", Some(&foreign_mirror), None),
                "spec.nodeName set to itself",
            ),
            (
                write(Update, "pods", "", Some(&bound), Some(&bound)),
                "can only update pod status",
            ),
            (
                write(Update, "pods", "status", Some(&elsewhere), Some(&elsewhere)),
                "update pod status for pods",
            ),
            (
                write(Delete, "pods", "", None, Some(&elsewhere)),
                "can only delete pods",
            ),
            (
                write(Delete, "pods", "eviction", None, Some(&elsewhere)),
                "can only evict pods",
            ),
        ] {
            let error = restrict("w0", &denied).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
    }

    #[test]
    fn other_kinds_are_not_restricted() {
        let object = json!({"metadata": {"name": "x"}});
        let mut w = write(
            WriteOperation::Update,
            "configmaps",
            "",
            Some(&object),
            Some(&object),
        );
        assert!(restrict("w0", &w).is_ok());
        let own_lease = json!({"metadata": {"name": "w0"}});
        w.group = "coordination.k8s.io";
        w.resource = "leases";
        w.object = Some(&own_lease);
        assert!(restrict("w0", &w).is_ok());
    }
}
