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
