//! Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.
//!
//! - A candidate takes the Lease when it does not exist, is released (no holder), or its
//!   record has not changed for `lease_duration` *as observed by the candidate's own clock*
//!   (never by comparing the holder's timestamps with ours: clocks differ between nodes).
//! - Every write carries the resourceVersion it read: a 409 means another replica wrote
//!   first, and this one is not the leader.
//! - The leader renews every `retry_period`. Its leadership is valid for `renew_deadline`
//!   after the start of its last successful renewal; past that it stops acting, which is
//!   before anyone else may take the Lease (`renew_deadline < lease_duration`, and others
//!   count `lease_duration` from when they saw our last renewal, later than its start).
//! - On shutdown the leader releases the Lease (no holder, duration 1 s) so a successor
//!   does not wait out the whole duration.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::{Error, Result};

/// Where and how to elect a leader.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (one per shard).
    pub name: String,
    /// This replica's identity (unique among the replicas: pod name plus a random suffix).
    pub identity: String,
    /// How long others wait after the last renewal they saw before taking the Lease.
    pub lease_duration: Duration,
    /// How long the leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// Checks the durations' order, which the safety argument rests on.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: &str| Error::Invalid {
            object: format!("leader election (Lease {}/{})", self.namespace, self.name),
            reason: reason.into(),
        };
        if self.name.is_empty() || self.namespace.is_empty() || self.identity.is_empty() {
            return Err(invalid(
                "the Lease's name, namespace and identity must not be empty",
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(invalid(
                "--retry-period must be shorter than --renew-deadline",
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(invalid(
                "--renew-deadline must be shorter than --lease-duration",
            ));
        }
        Ok(())
    }
}

/// Whether this replica may act now. Shared between the elector, which extends it on every
/// renewal, and every writer, which checks it right before writing.
#[derive(Debug, Clone)]
pub struct Leadership {
    valid_until: Arc<Mutex<Option<Instant>>>,
    unconditional: bool,
    /// The shard this replica acts for (its Lease's name), which labels what it creates.
    shard: Option<Arc<str>>,
}

impl Leadership {
    /// A single replica without election: always leading.
    pub fn unconditional() -> Self {
        Leadership {
            valid_until: Arc::new(Mutex::new(None)),
            unconditional: true,
            shard: None,
        }
    }

    /// Not leading until an elector extends it.
    pub fn elected() -> Self {
        Leadership {
            valid_until: Arc::new(Mutex::new(None)),
            unconditional: false,
            shard: None,
        }
    }

    /// The same, acting for the shard of the Lease `lease` (see the `shard` module).
    pub fn for_shard(mut self, lease: &str) -> Self {
        self.shard = Some(lease.into());
        self
    }

    /// The shard this replica acts for: the label value of the Remediations it creates, and
    /// the owner of those it may advance (the `shard` module's `owned_by`). `None` without
    /// election.
    pub fn shard(&self) -> Option<&str> {
        self.shard.as_deref()
    }

    /// Whether this replica may act now.
    pub fn is_leading(&self) -> bool {
        self.unconditional
            || self
                .valid_until()
                .is_some_and(|until| Instant::now() < until)
    }

    /// Leave to write, while this replica leads: an error ([`Error::NotLeader`]) otherwise.
    /// The only way to a [`Writes`], which every writer of the controllers takes.
    pub fn writes(&self) -> Result<Writes> {
        let writes = Writes {
            leadership: self.clone(),
        };
        writes.check()?;
        Ok(writes)
    }

    fn valid_until(&self) -> Option<Instant> {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, until: Option<Instant>) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }
}

/// The capability to write to the cluster or to a host: minted only by
/// [`Leadership::writes`], and taken by every function that writes (persisting a status,
/// annotating, deleting or tainting a Node, asking a BMC for power...). Each writer checks it
/// again right before its write ([`Writes::check`]), so a replica that lost its Lease while a
/// pass ran writes nothing more. Not `Clone`: a writer borrows the one its pass was given.
#[derive(Debug)]
pub struct Writes {
    leadership: Leadership,
}

impl Writes {
    /// An error unless this replica still leads: called by each writer right before it writes.
    pub fn check(&self) -> Result<()> {
        if self.leadership.is_leading() {
            Ok(())
        } else {
            Err(Error::NotLeader)
        }
    }
}

/// What the elector last saw of the Lease, and when (by our clock).
struct Observed {
    spec: LeaseSpec,
    at: Instant,
}

/// Acquires, renews and releases one Lease.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    leadership: Leadership,
    observed: Option<Observed>,
    /// The labels and annotations written on the Lease with every write.
    announcement: (BTreeMap<String, String>, BTreeMap<String, String>),
}

impl Elector {
    /// An elector for `config`, extending `leadership` while it holds the Lease.
    pub fn new(client: kube::Client, config: LeaseConfig, leadership: Leadership) -> Self {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            leadership,
            observed: None,
            announcement: Default::default(),
        }
    }

    /// Writes these labels and annotations on the Lease with every write: a shard's claim
    /// (see the `shard` module's `announcement`), which the other shards check theirs against.
    pub fn announcing(
        mut self,
        (labels, annotations): (BTreeMap<String, String>, BTreeMap<String, String>),
    ) -> Self {
        self.announcement = (labels, annotations);
        self
    }

    /// Writes the announcement into the Lease's labels and annotations, keeping the others.
    fn announce(&self, metadata: &mut ObjectMeta) {
        let (labels, annotations) = self.announcement.clone();
        metadata
            .labels
            .get_or_insert_with(Default::default)
            .extend(labels);
        metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(annotations);
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        info!(lease = %self.config.name, identity = %self.config.identity, "waiting for the leader Lease");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.config.name, identity = %self.config.identity, "acquired the leader Lease");
                    return;
                }
                Ok(false) => {}
                Err(error) => warn!(%error, "cannot read or write the leader Lease; retrying"),
            }
            tokio::time::sleep(jittered(self.config.retry_period)).await;
        }
    }

    /// Renews the Lease every retry period; returns when leadership is lost (not renewed
    /// within the renew deadline, or taken by another replica).
    pub async fn keep(&mut self) {
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => continue,
                Ok(false) if self.held_by_another() => {
                    warn!(lease = %self.config.name, "another replica holds the leader Lease");
                    self.leadership.set(None);
                    return;
                }
                // A conflicting write (a 409): retried until the renew deadline, as client-go
                // does; the record read next tells whether someone else took the Lease.
                Ok(false) => {
                    warn!(lease = %self.config.name, "renewing the leader Lease conflicted; retrying")
                }
                Err(error) => warn!(%error, "cannot renew the leader Lease; retrying"),
            }
            if !self.leadership.is_leading() {
                warn!(lease = %self.config.name, "the leader Lease was not renewed in time");
                return;
            }
        }
    }

    /// Whether the Lease as last read names another holder.
    fn held_by_another(&self) -> bool {
        self.observed.as_ref().is_some_and(|o| {
            o.spec
                .holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty() && h != self.config.identity)
        })
    }

    /// Gives the Lease up (if held) so a successor need not wait out its duration.
    pub async fn release(&mut self) {
        if !self.leadership.is_leading() {
            return;
        }
        self.leadership.set(None);
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.config.name, "released the leader Lease"),
            Err(error) => warn!(%error, "cannot release the leader Lease"),
        }
    }

    /// One round of client-go's tryAcquireOrRenew: `Ok(true)` when this replica holds the
    /// Lease afterwards.
    async fn try_acquire_or_renew(&mut self) -> Result<bool> {
        // Leadership counts from before the request: the write may land any time after.
        let started = Instant::now();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds =
            i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(Error::kube("GetLease"))?;
        let Some(mut lease) = current else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            self.announce(&mut lease.metadata);
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => Ok(self.hold(created, started)),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(Error::kube("CreateLease")(error)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|o| o.spec != spec) {
            self.observed = Some(Observed {
                spec: spec.clone(),
                at: Instant::now(),
            });
        }
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.config.identity;
        if !holder.is_empty() && !mine {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.lease_duration, Duration::from_secs);
            let seen = self.observed.as_ref().map_or(started, |o| o.at);
            if Instant::now() < seen + duration {
                return Ok(false);
            }
        }
        if !mine && self.leadership.is_leading() {
            // Our own lease was released or taken over under us: not ours any more.
            self.leadership.set(None);
        }
        let next = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: if mine {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if mine {
                spec.lease_transitions.unwrap_or(0)
            } else {
                spec.lease_transitions.unwrap_or(0) + 1
            }),
            ..spec
        };
        lease.spec = Some(next);
        self.announce(&mut lease.metadata);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => Ok(self.hold(written, started)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(Error::kube("UpdateLease")(error)),
        }
    }

    /// Records a Lease this replica just wrote as its own.
    fn hold(&mut self, lease: Lease, started: Instant) -> bool {
        self.observed = Some(Observed {
            spec: lease.spec.unwrap_or_default(),
            at: Instant::now(),
        });
        self.leadership
            .set(Some(started + self.config.renew_deadline));
        true
    }
}

/// The retry period stretched by up to 20 %, so candidates do not knock in step (client-go's
/// JitterFactor 1.2). The jitter comes from the clock's nanoseconds: no secret is involved.
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    period.mul_f64(1.0 + f64::from(nanos % 200) / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(lease: u64, renew: u64, retry: u64) -> LeaseConfig {
        LeaseConfig {
            namespace: "baremend".into(),
            name: "baremend".into(),
            identity: "a".into(),
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        }
    }

    #[test]
    fn durations_must_leave_a_safety_margin() {
        assert!(config(15, 10, 2).validate().is_ok());
        assert!(config(10, 10, 2).validate().is_err());
        assert!(config(15, 10, 10).validate().is_err());
        assert!(config(15, 10, 0).validate().is_err());
    }

    #[tokio::test]
    async fn leadership_expires_at_its_deadline_unless_extended() {
        let leadership = Leadership::elected();
        assert!(!leadership.is_leading());
        assert!(matches!(leadership.writes(), Err(Error::NotLeader)));
        leadership.set(Some(Instant::now() + Duration::from_millis(200)));
        let writes = leadership.writes().expect("leading: leave to write");
        let shared = leadership.clone();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!shared.is_leading(), "a clone sees the same deadline");
        // Leave taken while leading is checked again by each write: it does not outlive the
        // Lease.
        assert!(matches!(writes.check(), Err(Error::NotLeader)));
        shared.set(Some(Instant::now() + Duration::from_secs(60)));
        assert!(leadership.is_leading(), "and the same extension");
        assert!(Leadership::unconditional().is_leading());
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        let period = Duration::from_secs(2);
        for _ in 0..100 {
            let jittered = jittered(period);
            assert!(jittered >= period && jittered <= period.mul_f64(1.2));
        }
    }
}
