//! The "policy observed" point: once a controller's cache holds generation N of its policy,
//! the controller writes `status.observedGeneration: N` on it, so that an operator (or a
//! test) can tell from when on its decisions use that spec, instead of guessing how far
//! behind the watch is.
//!
//! Expected flow: each change the policy watch delivers rings a [`Notify`] (after the watch
//! has stored it); [`run`] then reads the cached policy `default` and, when [`to_write`] says
//! its generation is newer than what the object reports and what was last written, patches
//! the status subresource.
//!
//! Guarantees: a generation is written only once the cache holds it, so a pass that starts
//! after the written value is visible reads that spec or a newer one. A failed write is
//! tried again after [`RETRY`]; the cache is looked at again at least every [`RECHECK`]. A status change alone does not move `metadata.generation`,
//! so our own write does not call for another one.
//!
//! Caveats: a pass that read the policy just before the cache changed may still finish on
//! the older spec. Two replicas that both lead for a moment (a lease handed over) could write
//! out of order; the next change of the policy corrects it.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::warn;

use super::informer::POLICY_NAME;
use crate::api::{DriftPolicy, RemediationPolicy};

/// How long a failed status write waits before it is tried again.
pub const RETRY: Duration = Duration::from_secs(2);

/// How often the cache is looked at again without a change: a cheap read, and the bound on
/// how long a generation can go unwritten whatever the notifications did.
pub const RECHECK: Duration = Duration::from_secs(1);

/// A policy kind whose status reports the generation the controller reads.
pub trait ReportsObserved: Resource {
    /// `status.observedGeneration`, if written.
    fn observed_generation(&self) -> Option<i64>;
}

impl ReportsObserved for RemediationPolicy {
    fn observed_generation(&self) -> Option<i64> {
        self.status.as_ref()?.observed_generation
    }
}

impl ReportsObserved for DriftPolicy {
    fn observed_generation(&self) -> Option<i64> {
        self.status.as_ref()?.observed_generation
    }
}

/// The policy as the cache holds it, for [`to_write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The object's UID: a policy deleted and created again starts over at generation 1.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.observedGeneration`, as the cache holds it.
    pub reported: Option<i64>,
}

/// The generation to write, if any: the cached one, unless the object already reports it
/// (or a newer one) or this controller already wrote it for this object (its echo is on its
/// way through the watch). Pure.
pub fn to_write(cached: &Cached, written: Option<&(String, i64)>) -> Option<i64> {
    let reported = cached.reported.unwrap_or(0);
    let already = written.is_some_and(|(uid, g)| *uid == cached.uid && *g >= cached.generation);
    (cached.generation > reported && !already).then_some(cached.generation)
}

/// Writes the observed generation of the policy `default` each time `changed` rings, until
/// dropped (run it in a [`super::tasks::Background`]).
pub async fn run<K>(api: Api<K>, store: Store<K>, changed: Arc<Notify>)
where
    K: ReportsObserved + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let kind = K::kind(&K::DynamicType::default()).into_owned();
    // The policy as the cache held it before this controller started is observed too.
    // Ready, or not yet (the loop looks again every RECHECK); an error means the cache's
    // writer is gone with its controller.
    if let Ok(Err(_)) = tokio::time::timeout(RECHECK, store.wait_until_ready()).await {
        return;
    }
    let mut written: Option<(String, i64)> = None;
    loop {
        let generation = store.get(&ObjectRef::new(POLICY_NAME)).and_then(|policy| {
            let cached = Cached {
                uid: policy.uid().unwrap_or_default(),
                generation: policy.meta().generation?,
                reported: policy.observed_generation(),
            };
            Some((cached.uid.clone(), to_write(&cached, written.as_ref())?))
        });
        if let Some((uid, generation)) = generation {
            let status = serde_json::json!({"status": {"observedGeneration": generation}});
            let patch = Patch::Merge(&status);
            match api
                .patch_status(POLICY_NAME, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => written = Some((uid, generation)),
                Err(error) => {
                    warn!(%error, %kind, generation, "cannot write the policy's observedGeneration; retrying");
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            }
        }
        // Woken by a change of the policy, or at the latest after RECHECK: a notification
        // that came before the cache held the object (or a store not ready on its first
        // look) never leaves the generation unwritten.
        let _ = tokio::time::timeout(RECHECK, changed.notified()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(generation: i64, reported: Option<i64>) -> Cached {
        Cached {
            uid: "u1".into(),
            generation,
            reported,
        }
    }

    #[test]
    fn a_generation_newer_than_reported_and_not_yet_written_is_written() {
        assert_eq!(to_write(&cached(1, None), None), Some(1));
        assert_eq!(to_write(&cached(3, Some(2)), None), Some(3));
        assert_eq!(
            to_write(&cached(3, Some(2)), Some(&("u1".into(), 2))),
            Some(3)
        );
    }

    #[test]
    fn a_generation_reported_or_written_already_is_not_written_again() {
        assert_eq!(to_write(&cached(2, Some(2)), None), None);
        assert_eq!(to_write(&cached(2, Some(5)), None), None);
        // Written, the echo not yet in the cache.
        assert_eq!(to_write(&cached(2, Some(1)), Some(&("u1".into(), 2))), None);
    }

    #[test]
    fn a_policy_created_again_is_written_whatever_was_written_for_the_old_one() {
        let again = Cached {
            uid: "u2".into(),
            generation: 1,
            reported: None,
        };
        assert_eq!(to_write(&again, Some(&("u1".into(), 4))), Some(1));
    }
}
