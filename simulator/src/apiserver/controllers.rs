//! What the API server and the controller-manager do around writes, that a faithful simulator
//! must do too: create-time defaults, CRD registration, the PodDisruptionBudget status
//! (disruption controller), namespace termination, owner-reference garbage collection and
//! pod grace periods.
//!
//! Expected flow: the server registers [`BuiltinRules`] as the store's kind rules and a
//! [`Controllers`] as an observer of its writes ([`Controllers::install`]); the store calls
//! them under its lock, and they write back through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use serde_json::{Value, json};

use super::errors::{ApiError, ApiResult};
use super::kinds::{ResourceType, crd_type};
use super::objects::{meta_str, metadata_mut};
use super::store::{
    DeleteOptions, EventType, Inner, KindRules, ObjectKey, Removal, Store, WatchEvent,
    WriteObserver,
};

/// The rules of the built-in kinds, CertificateSigningRequests and CustomResourceDefinitions.
pub(crate) struct BuiltinRules;

impl KindRules for BuiltinRules {
    fn prepare_for_create(&self, ty: &ResourceType, object: &mut Value, now: &str) {
        prepare_for_create(ty, object, now);
    }

    fn validate_create(&self, ty: &ResourceType, object: &Value) -> ApiResult<()> {
        validate_create(ty, object)
    }

    fn prepare_for_update(
        &self,
        ty: &ResourceType,
        current: &Value,
        next: &mut Value,
        status: bool,
    ) {
        prepare_for_update(ty, current, next, status);
    }

    fn validate_update(&self, ty: &ResourceType, before: &Value, after: &Value) -> ApiResult<()> {
        validate_update(ty, before, after)
    }

    fn grace_period(&self, ty: &ResourceType, object: &Value, requested: Option<i64>) -> i64 {
        grace_period(ty, object, requested)
    }
}

/// The simulated controller-manager (disruption controller, namespace lifecycle, garbage
/// collector), the CRD registration and the aggregator's APIService registration, as one
/// observer of the store's writes.
pub(crate) struct Controllers {
    /// The disruption controller is held back (a lagging controller manager): PDB statuses
    /// are not recomputed until it resumes.
    disruption_paused: AtomicBool,
}

impl Controllers {
    /// Registers the built-in rules and the controllers with `store`.
    pub(crate) fn install(store: &Store) -> Arc<Controllers> {
        store.set_rules(Arc::new(BuiltinRules));
        let controllers = Arc::new(Controllers {
            disruption_paused: AtomicBool::new(false),
        });
        store.observe(controllers.clone());
        controllers
    }

    /// Holds the disruption controller back (`true`), or lets it catch up with every
    /// PodDisruptionBudget at once (`false`), as a lagging controller manager would.
    pub(crate) fn pause_disruption(&self, store: &Store, paused: bool) {
        let mut inner = store.lock();
        self.disruption_paused.store(paused, Ordering::SeqCst);
        if !paused {
            resync_pdbs(store, &mut inner);
        }
    }
}

impl WriteObserver for Controllers {
    fn attached(&self, store: &Store, inner: &mut Inner) {
        super::apiservices::sync(store, inner);
    }

    fn after_write(&self, store: &Store, inner: &mut Inner, ty: &ResourceType, namespace: &str) {
        let paused = self.disruption_paused.load(Ordering::SeqCst);
        after_write(store, inner, ty, namespace, paused);
    }

    fn after_removal(&self, store: &Store, inner: &mut Inner, removal: &Removal<'_>) {
        if removal.orphan {
            collect_dependents(store, inner, removal.key, removal.gone, true);
        } else {
            after_delete(store, inner, removal.ty, removal.key, removal.gone);
        }
    }
}

/// Defaults and resets applied when an object is created.
fn prepare_for_create(ty: &ResourceType, object: &mut Value, now: &str) {
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "pods") => {
            // The API server resets pod status on create; the kubelet reports it later.
            object["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
        }
        ("", "namespaces") => {
            object["status"] = json!({"phase": "Active"});
            if object.pointer("/spec/finalizers").is_none() {
                object["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
        ("", "nodes") => {
            // Nodes may be created with their status (the kubelet does).
        }
        ("", "events") | ("events.k8s.io", "events")
            if object.get("eventTime").is_none() && object.get("firstTimestamp").is_none() =>
        {
            object["firstTimestamp"] = json!(now);
            object["lastTimestamp"] = json!(now);
        }
        _ if ty.status_subresource => {
            if let Value::Object(map) = object {
                map.remove("status");
            }
        }
        _ => {}
    }
}

/// What an update keeps of the stored object beyond the status split (the spec of a
/// CertificateSigningRequest, its approval conditions).
fn prepare_for_update(ty: &ResourceType, current: &Value, next: &mut Value, status: bool) {
    if ty.group == "certificates.k8s.io" && ty.plural == "certificatesigningrequests" {
        super::csr::prepare_for_update(current, next, status);
    }
}

/// Create-time validation beyond metadata.
fn validate_create(ty: &ResourceType, object: &Value) -> ApiResult<()> {
    if ty.group == "certificates.k8s.io" && ty.plural == "certificatesigningrequests" {
        super::csr::validate(object)?;
    }
    if ty.group == "apiextensions.k8s.io" && ty.plural == "customresourcedefinitions" {
        crd_type(object).map_err(|why| {
            ApiError::invalid(
                &ty.group,
                &ty.kind,
                meta_str(object, "name").unwrap_or_default(),
                &[("spec", why)],
            )
        })?;
    }
    Ok(())
}

/// Update rules of specific kinds.
fn validate_update(ty: &ResourceType, before: &Value, after: &Value) -> ApiResult<()> {
    if ty.group.is_empty() && ty.plural == "pods" {
        let comparable = |pod: &Value| {
            let mut spec = pod.get("spec").cloned().unwrap_or_default();
            if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
                for container in containers {
                    if let Value::Object(map) = container {
                        map.remove("image");
                    }
                }
            }
            if let Value::Object(map) = &mut spec {
                map.remove("tolerations");
                map.remove("activeDeadlineSeconds");
            }
            spec
        };
        if comparable(before) != comparable(after) {
            return Err(ApiError::invalid("", "Pod", meta_str(after, "name").unwrap_or_default(), &[("spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing tolerations)".into())]));
        }
    }
    if ty.group == "apiextensions.k8s.io" && ty.plural == "customresourcedefinitions" {
        let name = meta_str(after, "name").unwrap_or_default();
        let new = crd_type(after)
            .map_err(|why| ApiError::invalid(&ty.group, &ty.kind, name, &[("spec", why)]))?;
        if let Ok(old) = crd_type(before)
            && (old.namespaced != new.namespaced || old.kind != new.kind)
        {
            return Err(ApiError::invalid(
                &ty.group,
                &ty.kind,
                name,
                &[("spec.scope", "Invalid value: field is immutable".into())],
            ));
        }
    }
    Ok(())
}

/// The grace period of a delete: pods bound to a node get theirs (the kubelet confirms the
/// deletion); everything else goes at once.
fn grace_period(ty: &ResourceType, object: &Value, requested: Option<i64>) -> i64 {
    if ty.group.is_empty() && ty.plural == "namespaces" {
        // Namespaces stay until their content is gone (see `namespace_cleanup`).
        return 1;
    }
    if !(ty.group.is_empty() && ty.plural == "pods") {
        return 0;
    }
    let bound = object
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        object.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || terminal {
        return 0;
    }
    requested
        .or_else(|| {
            object
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0)
}

/// After any write of `ty` in `namespace` (`paused`: the disruption controller is held back).
fn after_write(store: &Store, inner: &mut Inner, ty: &ResourceType, namespace: &str, paused: bool) {
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "pods") | ("policy", "poddisruptionbudgets") if !paused => {
            update_pdb_status(store, inner, namespace)
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            register_crds(store, inner);
            super::apiservices::sync(store, inner);
        }
        ("", "namespaces") => mark_terminating(store, inner),
        _ => {}
    }
}

fn register_crds(store: &Store, inner: &mut Inner) {
    let crds: Vec<(ObjectKey, Value)> = inner
        .objects_of("apiextensions.k8s.io", "customresourcedefinitions", None)
        .map(|(k, v)| (k.clone(), Value::clone(v)))
        .collect();
    for (key, crd) in crds {
        if crd.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        if inner.registry.register_crd(&crd).is_err() {
            continue;
        }
        let established = crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
        if !established {
            let mut next = crd.clone();
            next["status"] = json!({
                "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or_default(),
                "storedVersions": crd.pointer("/spec/versions").and_then(Value::as_array).map(|v| v.iter().filter(|v| v["storage"] == true).filter_map(|v| v.get("name").cloned()).collect::<Vec<_>>()).unwrap_or_default(),
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
                ],
            });
            store.commit(inner, key, Some(next), EventType::Modified);
        }
    }
}

/// Whether a label selector object (`matchLabels`, `matchExpressions`) selects `labels`.
pub(crate) fn selector_matches(selector: &Value, object: &Value) -> bool {
    let labels = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object);
    let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
    let match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|wanted| wanted.iter().all(|(k, v)| get(k) == v.as_str()));
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|expressions| {
            expressions.iter().all(|e| {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|v| v.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str) {
                    Some("In") => get(key).is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => get(key).is_none_or(|v| !values.contains(&v)),
                    Some("Exists") => get(key).is_some(),
                    Some("DoesNotExist") => get(key).is_none(),
                    _ => false,
                }
            })
        });
    match_labels && expressions
}

/// Whether a pod counts as healthy for a disruption budget: Ready and not terminating.
pub(crate) fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp").is_none()
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// An int-or-percent value against a total (percentages round up, as the disruption
/// controller does).
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let percent: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

/// The pods a PDB selects in its namespace.
pub(crate) fn pdb_pods<'a>(inner: &'a Inner, namespace: &str, pdb: &Value) -> Vec<&'a Value> {
    let Some(selector) = pdb.pointer("/spec/selector").filter(|s| !s.is_null()) else {
        return Vec::new();
    };
    inner
        .objects_of("", "pods", Some(namespace))
        .map(|(_, pod)| &**pod)
        .filter(|pod| selector_matches(selector, pod))
        .collect()
}

/// The status the disruption controller would write for a PDB.
pub(crate) fn pdb_status(inner: &Inner, namespace: &str, pdb: &Value) -> Value {
    let pods = pdb_pods(inner, namespace, pdb);
    let expected = pods.len() as i64;
    let healthy = pods.iter().filter(|p| pod_ready(p)).count() as i64;
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
        scaled(min, expected).unwrap_or(expected)
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
        expected - scaled(max, expected).unwrap_or(0)
    } else {
        expected
    };
    let disrupted = pdb
        .pointer("/status/disruptedPods")
        .cloned()
        .unwrap_or(json!({}));
    let pending = disrupted.as_object().map_or(0, |m| m.len() as i64);
    let allowed = (healthy - desired - pending).max(0);
    json!({
        "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptedPods": disrupted,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": if allowed > 0 { "True" } else { "False" },
            "reason": if allowed > 0 { "SufficientPods" } else { "InsufficientPods" },
            "message": "",
            "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "lastTransitionTime": pdb.pointer("/metadata/creationTimestamp").cloned().unwrap_or_default(),
        }],
    })
}

/// The disruption controller's pass over every namespace with a PodDisruptionBudget.
fn resync_pdbs(store: &Store, inner: &mut Inner) {
    let namespaces: std::collections::BTreeSet<String> = inner
        .objects_of("policy", "poddisruptionbudgets", None)
        .map(|(key, _)| key.namespace.clone())
        .collect();
    for namespace in namespaces {
        update_pdb_status(store, inner, &namespace);
    }
}

fn update_pdb_status(store: &Store, inner: &mut Inner, namespace: &str) {
    let pdbs: Vec<(ObjectKey, Value)> = inner
        .objects_of("policy", "poddisruptionbudgets", Some(namespace))
        .map(|(k, v)| (k.clone(), Value::clone(v)))
        .collect();
    for (key, pdb) in pdbs {
        // Pods that were evicted and are gone leave the disrupted list.
        let mut pdb = pdb;
        if let Some(disrupted) = pdb
            .pointer_mut("/status/disruptedPods")
            .and_then(Value::as_object_mut)
        {
            disrupted.retain(|name, _| {
                inner.objects.contains_key(&ObjectKey {
                    group: String::new(),
                    plural: "pods".into(),
                    namespace: namespace.to_owned(),
                    name: name.clone(),
                }) && inner
                    .objects
                    .get(&ObjectKey {
                        group: String::new(),
                        plural: "pods".into(),
                        namespace: namespace.to_owned(),
                        name: name.clone(),
                    })
                    .is_some_and(|p| p.pointer("/metadata/deletionTimestamp").is_none())
            });
        }
        let status = pdb_status(inner, namespace, &pdb);
        let mut compared_old = pdb.get("status").cloned().unwrap_or_default();
        let mut compared_new = status.clone();
        for value in [&mut compared_old, &mut compared_new] {
            if let Some(conditions) = value.get_mut("conditions").and_then(Value::as_array_mut) {
                for c in conditions {
                    if let Value::Object(map) = c {
                        map.remove("lastTransitionTime");
                    }
                }
            }
        }
        if compared_old != compared_new {
            let mut next = pdb.clone();
            next["status"] = status;
            store.commit(inner, key, Some(next), EventType::Modified);
        }
    }
}

/// How long the namespace controller takes to start on a namespace being deleted: it
/// discovers every served kind first (kube-controller-manager's `NamespaceController`, in
/// kubernetes `pkg/controller/namespace/deletion/namespaced_resources_deleter.go`), so the
/// content outlives the namespace's delete call, and a client deleting a namespace and then
/// its objects (`kubectl delete -k`, which lists the Namespace first) finds them still there.
const NAMESPACE_SWEEP_DELAY: Duration = Duration::from_millis(500);

/// How often a terminating namespace is swept again while its content goes (pods wait for
/// their kubelet).
const NAMESPACE_SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// Marks a namespace being deleted `Terminating`, as the namespace registry's delete does in
/// the same write: nothing new may be created in it from then on.
fn mark_terminating(store: &Store, inner: &mut Inner) {
    let deleted: Vec<(ObjectKey, Value)> = inner
        .objects_of("", "namespaces", None)
        .filter(|(_, v)| v.pointer("/metadata/deletionTimestamp").is_some())
        .filter(|(_, v)| v.pointer("/status/phase") != Some(&json!("Terminating")))
        .map(|(k, v)| (k.clone(), Value::clone(v)))
        .collect();
    for (key, namespace) in deleted {
        let mut next = namespace;
        next["status"] = json!({"phase": "Terminating"});
        store.commit(inner, key, Some(next), EventType::Modified);
    }
}

/// The namespace controller: in its own task, as kube-controller-manager runs it apart from
/// the API server. A namespace being deleted is swept a moment later, then again until its
/// content is gone and the namespace with it.
pub(crate) fn spawn_namespace_controller(store: Arc<Store>) -> JoinHandle<()> {
    let mut changes = store.subscribe();
    tokio::spawn(async move {
        loop {
            let terminating = {
                let mut inner = store.lock();
                namespace_cleanup(&store, &mut inner)
            };
            if terminating {
                tokio::time::sleep(NAMESPACE_SWEEP_INTERVAL).await;
                continue;
            }
            // Idle until a namespace is being deleted: other writes do not wake the sweep (it
            // takes the store's lock). A lagged stream may have hidden one: sweep then too.
            loop {
                match changes.recv().await {
                    Ok(event) if deleting_namespace(&event) => {
                        tokio::time::sleep(NAMESPACE_SWEEP_DELAY).await;
                        break;
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
        }
    })
}

/// Whether `event` is a namespace's write with a deletion timestamp.
fn deleting_namespace(event: &WatchEvent) -> bool {
    event.key.group.is_empty()
        && event.key.plural == "namespaces"
        && event
            .object
            .pointer("/metadata/deletionTimestamp")
            .is_some()
}

/// Deletes the content of terminating namespaces, and the namespaces once empty; whether
/// one is still terminating.
fn namespace_cleanup(store: &Store, inner: &mut Inner) -> bool {
    let terminating: Vec<(ObjectKey, Value)> = inner
        .objects_of("", "namespaces", None)
        .filter(|(_, v)| v.pointer("/metadata/deletionTimestamp").is_some())
        .map(|(k, v)| (k.clone(), Value::clone(v)))
        .collect();
    let mut still = false;
    for (key, _) in terminating {
        let name = key.name.clone();
        let content: Vec<ObjectKey> = inner
            .objects
            .iter()
            .filter(|(k, v)| {
                k.namespace == name && v.pointer("/metadata/deletionTimestamp").is_none()
            })
            .map(|(k, _)| k.clone())
            .collect();
        for object in content {
            let registry = inner.registry.clone();
            if let Some(ty) = registry.all().find(|t| {
                super::store::storage_group(t) == object.group && t.plural == object.plural
            }) {
                let version = ty.versions[0].clone();
                let _ = store.delete_locked(
                    inner,
                    ty,
                    &version,
                    &name,
                    &object.name,
                    &DeleteOptions {
                        grace_period_seconds: Some(0),
                        ..DeleteOptions::default()
                    },
                );
            }
        }
        let empty = !inner.objects.keys().any(|k| k.namespace == name);
        if empty {
            store.commit(inner, key, None, EventType::Deleted);
        } else {
            still = true;
        }
    }
    still
}

/// After an object is gone: CRD instances, dependents (background garbage collection).
fn after_delete(
    store: &Store,
    inner: &mut Inner,
    ty: &ResourceType,
    key: &ObjectKey,
    gone: &Value,
) {
    if ty.group == "apiextensions.k8s.io"
        && ty.plural == "customresourcedefinitions"
        && let Ok(defined) = crd_type(gone)
    {
        let instances: Vec<ObjectKey> = inner
            .objects
            .keys()
            .filter(|k| k.group == defined.group && k.plural == defined.plural)
            .cloned()
            .collect();
        for instance in instances {
            store.commit(inner, instance, None, EventType::Deleted);
        }
        inner.registry.unregister(&defined.group, &defined.plural);
        super::apiservices::sync(store, inner);
    }
    if ty.group.is_empty() && ty.plural == "serviceaccounts" {
        delete_token_secrets(store, inner, key, gone);
    }
    collect_dependents(store, inner, key, gone, false);
}

/// kube-controller-manager's token controller: a deleted ServiceAccount's legacy token
/// Secrets (`kubernetes.io/service-account-token`, annotated with its name) go with it, at
/// once (kubernetes v1.36.3 `pkg/controller/serviceaccount/tokens_controller.go`,
/// `deleteTokens`). A `kubectl delete -k` of deploy/ then finds its token Secret gone.
fn delete_token_secrets(store: &Store, inner: &mut Inner, key: &ObjectKey, gone: &Value) {
    let account = meta_str(gone, "name").unwrap_or_default().to_owned();
    let tokens: Vec<ObjectKey> = inner
        .objects
        .iter()
        .filter(|(k, secret)| {
            k.group.is_empty()
                && k.plural == "secrets"
                && k.namespace == key.namespace
                && secret.pointer("/type").and_then(Value::as_str)
                    == Some("kubernetes.io/service-account-token")
                && secret
                    .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                    .and_then(Value::as_str)
                    == Some(account.as_str())
        })
        .map(|(k, _)| k.clone())
        .collect();
    for token in tokens {
        store.commit(inner, token, None, EventType::Deleted);
    }
}

fn collect_dependents(
    store: &Store,
    inner: &mut Inner,
    owner_key: &ObjectKey,
    gone: &Value,
    orphan: bool,
) {
    let Some(uid) = meta_str(gone, "uid").map(str::to_owned) else {
        return;
    };
    let dependents: Vec<(ObjectKey, Value)> = inner
        .dependents_of(&uid)
        .filter(|k| owner_key.namespace.is_empty() || k.namespace == owner_key.namespace)
        .filter_map(|k| Some((k.clone(), Value::clone(inner.objects.get(k)?))))
        .collect();
    for (key, dependent) in dependents {
        let owners = dependent
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let remaining: Vec<Value> = owners
            .into_iter()
            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()))
            .collect();
        if orphan || !remaining.is_empty() {
            let mut next = dependent.clone();
            metadata_mut(&mut next).insert("ownerReferences".into(), json!(remaining));
            store.commit(inner, key, Some(next), EventType::Modified);
            continue;
        }
        let registry = inner.registry.clone();
        if let Some(ty) = registry
            .all()
            .find(|t| super::store::storage_group(t) == key.group && t.plural == key.plural)
        {
            let version = ty.versions[0].clone();
            let _ = store.delete_locked(
                inner,
                ty,
                &version,
                &key.namespace,
                &key.name,
                &DeleteOptions::default(),
            );
        }
    }
}
