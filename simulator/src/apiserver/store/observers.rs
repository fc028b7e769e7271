//! How the rest of the server takes part in the store's writes without the store knowing who:
//! the kind rules a write obeys ([`KindRules`]: create-time defaults, validation, grace
//! periods) and the observers told of every settled write ([`WriteObserver`]: the simulated
//! controller-manager, the aggregator's APIService registration).
//!
//! Expected flow: the server builds a [`super::Store`], then registers one set of rules
//! ([`super::Store::set_rules`]) and its observers ([`super::Store::observe`]) before it serves
//! a request. Every create, update and delete asks the rules while it builds the object; once a
//! write is committed the store (or the operation that wrote through it) calls
//! [`super::Store::settle`], which tells each observer in the order they were registered.
//!
//! Guarantees: rules and observers run under the store's lock, synchronously, before the
//! request that caused them is answered, exactly as the calls they replace did: a client that
//! reads after its write sees the PodDisruptionBudget status, the garbage collection and the
//! APIServices it caused. Observers may write through the `&mut Inner` they are handed (and so
//! cause further notifications, e.g. a namespace's content deleted by its cleanup).
//!
//! Caveats: observers registered later than the first request miss the writes before; they
//! must not take the store's lock themselves (they are handed it). Watchers outside the lock
//! (the change broadcast of [`super::Store::subscribe`]) see the same changes later, in order.

use serde_json::Value;

use super::{Inner, ObjectKey, Store};
use crate::apiserver::errors::ApiResult;
use crate::apiserver::kinds::ResourceType;

/// The rules of specific kinds that every write of them obeys (the real server's registry
/// strategies). Each method's default is the rule of a kind with no special rules.
pub(crate) trait KindRules: Send + Sync {
    /// Defaults and resets applied to a new object (`now` is its creation time).
    fn prepare_for_create(&self, _ty: &ResourceType, _object: &mut Value, _now: &str) {}

    /// Validation of a new object beyond its metadata.
    fn validate_create(&self, _ty: &ResourceType, _object: &Value) -> ApiResult<()> {
        Ok(())
    }

    /// What an update keeps of the stored object beyond the status split (`status`: the
    /// update came through the status subresource).
    fn prepare_for_update(
        &self,
        _ty: &ResourceType,
        _current: &Value,
        _next: &mut Value,
        _status: bool,
    ) {
    }

    /// Validation of an update beyond metadata and finalizers.
    fn validate_update(
        &self,
        _ty: &ResourceType,
        _before: &Value,
        _after: &Value,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// The grace period of a delete (0: the object goes at once).
    fn grace_period(&self, _ty: &ResourceType, _object: &Value, _requested: Option<i64>) -> i64 {
        0
    }
}

/// A store without rules: every kind is plain.
pub(crate) struct NoRules;

impl KindRules for NoRules {}

/// One object that went away, as observers are told of it.
pub(crate) struct Removal<'a> {
    /// Its type.
    pub ty: &'a ResourceType,
    /// Where it was.
    pub key: &'a ObjectKey,
    /// The object as it was last (with the deletion's resourceVersion).
    pub gone: &'a Value,
    /// Deleted with `propagationPolicy: Orphan`: its dependents are kept.
    pub orphan: bool,
}

/// Told of every settled write, under the store's lock (see the module doc).
pub(crate) trait WriteObserver: Send + Sync {
    /// Once, when registered, to catch up with what the store holds already.
    fn attached(&self, _store: &Store, _inner: &mut Inner) {}

    /// After a write (create, update, patch, delete) of `ty` in `namespace` settled.
    fn after_write(
        &self,
        _store: &Store,
        _inner: &mut Inner,
        _ty: &ResourceType,
        _namespace: &str,
    ) {
    }

    /// After an object went away (its finalizers done, its grace period over).
    fn after_removal(&self, _store: &Store, _inner: &mut Inner, _removal: &Removal<'_>) {}
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;
    use crate::apiserver::store::DeleteOptions;
    use crate::apiserver::time::SystemWallClock;
    use crate::apiserver::validation::admission::RequestUser;

    /// Records what it is told, in order.
    #[derive(Default)]
    struct Recording(Mutex<Vec<String>>);

    impl WriteObserver for Recording {
        fn attached(&self, _store: &Store, inner: &mut Inner) {
            self.0
                .lock()
                .unwrap()
                .push(format!("attached at {}", inner.revision > 1));
        }

        fn after_write(
            &self,
            _store: &Store,
            _inner: &mut Inner,
            ty: &ResourceType,
            namespace: &str,
        ) {
            self.0
                .lock()
                .unwrap()
                .push(format!("write {} in {namespace}", ty.plural));
        }

        fn after_removal(&self, _store: &Store, _inner: &mut Inner, removal: &Removal<'_>) {
            self.0.lock().unwrap().push(format!(
                "removed {} orphan={}",
                removal.key.name, removal.orphan
            ));
        }
    }

    #[test]
    fn observers_hear_every_settled_write_and_removal_and_no_controller_runs_unless_registered() {
        let store = Store::new(Arc::new(SystemWallClock), 64, 64);
        let nobody = RequestUser::in_process();
        let recording = Arc::new(Recording::default());
        store.observe(recording.clone());
        let ty = store.resource_type("", "v1", "configmaps").unwrap();
        let owner = store
            .create(
                &nobody,
                &ty,
                "v1",
                "default",
                json!({"metadata": {"name": "owner"}}),
                false,
            )
            .unwrap();
        let uid = owner["metadata"]["uid"].clone();
        store
            .create(
                &nobody,
                &ty,
                "v1",
                "default",
                json!({"metadata": {"name": "dependent", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}),
                false,
            )
            .unwrap();
        // A dry run settles nothing.
        store
            .create(
                &nobody,
                &ty,
                "v1",
                "default",
                json!({"metadata": {"name": "dry"}}),
                true,
            )
            .unwrap();
        let orphaning = DeleteOptions {
            orphan: true,
            ..DeleteOptions::default()
        };
        store
            .delete(&nobody, &ty, "v1", "default", "owner", &orphaning)
            .unwrap();
        assert_eq!(
            *recording.0.lock().unwrap(),
            [
                "attached at true",
                "write configmaps in default",
                "write configmaps in default",
                "removed owner orphan=true",
                "write configmaps in default",
            ]
        );
        // Without the server's controllers registered, nobody collected the dependent or
        // dropped its reference: that is theirs to do, not the store's.
        let dependent = store.get(&ty, "v1", "default", "dependent").unwrap();
        assert_eq!(dependent["metadata"]["ownerReferences"][0]["uid"], uid);
    }

    #[test]
    fn the_owner_index_follows_every_commit_of_owner_references() {
        let store = Store::new(Arc::new(SystemWallClock), 64, 64);
        let nobody = RequestUser::in_process();
        let ty = store.resource_type("", "v1", "configmaps").unwrap();
        let create = |name: &str, owners: &[&Value]| {
            let refs: Vec<Value> = owners
                .iter()
                .map(
                    |uid| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": uid}),
                )
                .collect();
            store
                .create(
                    &nobody,
                    &ty,
                    "v1",
                    "default",
                    json!({"metadata": {"name": name, "ownerReferences": refs}}),
                    false,
                )
                .unwrap()
        };
        let a = create("a", &[])["metadata"]["uid"].clone();
        let b = create("b", &[])["metadata"]["uid"].clone();
        create("one", &[&a]);
        create("both", &[&a, &b]);
        let moved = create("moved", &[&a]);
        // An update moves "moved" from a to b; a deletion drops "one".
        let mut next = moved.clone();
        next["metadata"]["ownerReferences"][0]["uid"] = b.clone();
        store
            .update(&nobody, &ty, "v1", "default", "moved", next, false, false)
            .unwrap();
        store
            .delete(
                &nobody,
                &ty,
                "v1",
                "default",
                "one",
                &DeleteOptions::default(),
            )
            .unwrap();
        let names = |uid: &Value| -> Vec<String> {
            let inner = store.lock();
            inner
                .dependents_of(uid.as_str().unwrap())
                .map(|k| k.name.clone())
                .collect()
        };
        assert_eq!(names(&a), ["both"]);
        assert_eq!(names(&b), ["both", "moved"]);
        // Nothing is left of an owner once no object names it.
        let mut none = store.get(&ty, "v1", "default", "both").unwrap();
        none["metadata"]["ownerReferences"] = json!([]);
        store
            .update(&nobody, &ty, "v1", "default", "both", none, false, false)
            .unwrap();
        assert!(names(&a).is_empty());
        assert!(!store.lock().dependents.contains_key(a.as_str().unwrap()));
    }
}
