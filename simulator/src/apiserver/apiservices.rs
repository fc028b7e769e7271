//! `apiregistration.k8s.io/v1` APIService objects: one per served group-version, kept in step
//! with the served types as the real aggregator's registration controllers keep them.
//!
//! Expected flow: after startup and after every CRD change, the wanted automanaged
//! APIServices ([`wanted`], pure, from the registry) are compared with the stored ones
//! ([`sync`]): missing ones are created, ones no longer served are deleted.
//!
//! Guarantees: built-in group-versions are labelled `kube-aggregator.kubernetes.io/automanaged:
//! onstart` with the real server's priorities, CRD ones `true` with priority 1000 and version
//! priority 100; all are local (no `service`) and `Available` (reason `Local`). APIServices a
//! client creates (without the label) are never touched.
//!
//! Caveats: an APIService for an aggregated server is stored only: nothing is proxied to it,
//! its group is not served or discovered, and it gets no availability status.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::kinds::Registry;
use super::store::{EventType, Inner, ObjectKey, Store};
use super::validation::admission::RequestUser;

/// The label of automanaged APIServices.
const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// The real server's group and version priorities of the built-in group-versions served here
/// (the aggregator's table); a group-version missing from it is a CRD's.
fn builtin_priority(group: &str, version: &str) -> Option<(i64, i64)> {
    let builtin = group_priority(group) != 1000 && version == "v1";
    let version_priority = if group.is_empty() { 1 } else { 15 };
    builtin.then(|| (group_priority(group), version_priority))
}

/// A group's priority in discovery (`groupPriorityMinimum`): the aggregator's for built-in
/// groups, 1000 for CRDs'.
pub(crate) fn group_priority(group: &str) -> i64 {
    match group {
        "" => 18000,
        "apiregistration.k8s.io" => 18000,
        "apps" => 17800,
        "events.k8s.io" => 17750,
        "authentication.k8s.io" => 17700,
        "authorization.k8s.io" => 17600,
        "batch" => 17400,
        "certificates.k8s.io" => 17300,
        "policy" => 17100,
        "rbac.authorization.k8s.io" => 17000,
        "admissionregistration.k8s.io" => 16700,
        "apiextensions.k8s.io" => 16700,
        "scheduling.k8s.io" => 16600,
        "coordination.k8s.io" => 16500,
        "discovery.k8s.io" => 16200,
        _ => 1000,
    }
}

/// The automanaged APIServices the served types call for, by name (`v1.`, `v1.apps`…).
pub(crate) fn wanted(registry: &Registry, now: &str) -> BTreeMap<String, Value> {
    let mut versions: Vec<(String, String)> = vec![(String::new(), "v1".to_owned())];
    for (group, served) in registry.groups() {
        versions.extend(served.into_iter().map(|v| (group.clone(), v)));
    }
    versions.extend(
        super::reviews::GROUPS
            .iter()
            .map(|group| ((*group).to_owned(), super::reviews::VERSION.to_owned())),
    );
    versions
        .into_iter()
        .map(|(group, version)| {
            let name = format!("{version}.{group}");
            let (managed, (group_priority, version_priority)) =
                match builtin_priority(&group, &version) {
                    Some(priority) => ("onstart", priority),
                    None => ("true", (1000, 100)),
                };
            let object = json!({
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": name, "labels": {AUTOMANAGED: managed}},
                "spec": {"group": group, "version": version, "groupPriorityMinimum": group_priority, "versionPriority": version_priority},
                "status": {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": now, "reason": "Local", "message": "Local APIServices are always available"}]},
            });
            (name, object)
        })
        .collect()
}

/// Creates the wanted automanaged APIServices that are missing and deletes those no longer
/// served.
pub(crate) fn sync(store: &Store, inner: &mut Inner) {
    let Some(ty) = inner
        .registry
        .get("apiregistration.k8s.io", "v1", "apiservices")
    else {
        return;
    };
    let now = super::time::format_time(store.wall_time());
    let wanted = wanted(&inner.registry, &now);
    let stale: Vec<ObjectKey> = inner
        .objects_of("apiregistration.k8s.io", "apiservices", None)
        .filter(|(key, object)| {
            object
                .pointer(&format!(
                    "/metadata/labels/{}",
                    AUTOMANAGED.replace('/', "~1")
                ))
                .is_some()
                && !wanted.contains_key(&key.name)
        })
        .map(|(key, _)| key.clone())
        .collect();
    for key in stale {
        store.commit(inner, key, None, EventType::Deleted);
    }
    for (name, object) in wanted {
        let key = Store::key(&ty, "", &name);
        if inner.objects.contains_key(&key) {
            continue;
        }
        // Created, then its status written, as the aggregator's controllers do (creation
        // drops the status of a kind with a status subresource).
        let status = object.get("status").cloned();
        if let Ok(mut created) = store.create_locked(
            inner,
            &RequestUser::in_process(),
            &ty,
            "v1",
            "",
            object,
            false,
        ) && let Some(status) = status
        {
            created["status"] = status;
            store.commit(inner, key, Some(created), EventType::Modified);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_group_version_has_a_local_available_api_service() {
        let registry = Registry::new();
        let wanted = wanted(&registry, "2026-01-01T00:00:00Z");
        let core = &wanted["v1."];
        assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
        assert_eq!(core["metadata"]["labels"][AUTOMANAGED], "onstart");
        assert!(core["spec"].get("service").is_none());
        assert_eq!(
            wanted["v1.policy"]["status"]["conditions"][0]["reason"],
            "Local"
        );
        // The core group, the stored groups' versions and the two review groups.
        let served: usize = 1
            + registry.groups().values().map(Vec::len).sum::<usize>()
            + super::super::reviews::GROUPS.len();
        assert_eq!(wanted.len(), served);
        assert!(wanted.contains_key("v1.authorization.k8s.io"));
        // Every built-in group-version served here has the aggregator's priorities.
        assert!(
            wanted
                .values()
                .all(|s| s["metadata"]["labels"][AUTOMANAGED] == "onstart")
        );
    }
}
