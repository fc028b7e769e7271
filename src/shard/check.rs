//! The shard check's reads: the shard Leases of the lease namespace (one label-selected
//! list), and for each live claim that does not overlap structurally, one Machine both
//! selectors match (a list with their conjunction, limit 1). The decision is
//! [`super::verdict`]'s.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use super::{Claim, Conflict, Overlap, SHARD_LEASE_LABEL, Verdict, conjunction, live_claim};
use crate::api::slim::MachineApi;
use crate::metrics::Metrics;
use crate::runtime::clock::{Clock, since_epoch};
use crate::runtime::events::{Severity, publish};
use crate::{Error, Result};

/// How long the check at start is retried before the shard refuses to act unchecked.
pub const START_CHECK_DEADLINE: Duration = Duration::from_secs(60);

/// The shard a replica acts for.
#[derive(Debug, Clone)]
pub struct Shard {
    /// The Machine API of its Machines.
    pub machine_api: MachineApi,
    /// The lease namespace, where every shard's Lease must be.
    pub namespace: String,
    /// Its Lease; `None` for a replica without leader election, which announces nothing and
    /// so yields to every overlapping shard.
    pub lease: Option<String>,
    /// Its Machine selector (`None` or blank: every Machine).
    pub selector: Option<String>,
    /// This replica (the Events' reporting instance; names it in messages without a Lease).
    pub instance: String,
}

/// The check of one shard against the others.
pub struct ShardCheck {
    leases: Api<Lease>,
    machines: Api<DynamicObject>,
    clock: Arc<dyn Clock>,
    namespace: String,
    lease: Option<String>,
    instance: String,
    selector: Option<String>,
    metrics: Arc<Metrics>,
    recorder: Recorder,
}

impl ShardCheck {
    /// A check of `shard`, reporting into `metrics`.
    pub fn new(client: Client, clock: Arc<dyn Clock>, metrics: Arc<Metrics>, shard: Shard) -> Self {
        let reporter = Reporter {
            controller: "baremend".into(),
            instance: Some(shard.instance.clone()),
        };
        ShardCheck {
            leases: Api::namespaced(client.clone(), &shard.namespace),
            machines: Api::all_with(client.clone(), &shard.machine_api.resource()),
            recorder: Recorder::new(client, reporter),
            clock,
            selector: super::normalize(shard.selector.as_deref()),
            namespace: shard.namespace,
            lease: shard.lease,
            instance: shard.instance,
            metrics,
        }
    }

    /// This shard's selector, as announced (`None`: every Machine).
    pub fn selector(&self) -> Option<&str> {
        self.selector.as_deref()
    }

    /// What is wrong with this shard's own configuration, before it takes its Lease: a
    /// Lease name too long to label its Remediations, or a selector the API server refuses.
    pub async fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Error::Invalid {
            object: format!("shard {}", self.name()),
            reason,
        };
        if let Some(lease) = &self.lease {
            super::validate_name(lease).map_err(invalid)?;
        }
        if let Some(selector) = &self.selector {
            match self.one_machine(selector).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 400 => {
                    return Err(invalid(format!(
                        "--machine-selector {selector:?} is not a label selector the API \
                         server accepts: {}",
                        status.message
                    )));
                }
                Err(error) => return Err(Error::kube("ListMachines")(error)),
            }
        }
        Ok(())
    }

    /// The check at start (after taking the Lease, before acting): `Ok` to act, the refusal
    /// (naming both shards, both selectors and a Machine both claim) otherwise. A check that
    /// fails is tried again every `retry` for [`START_CHECK_DEADLINE`], then refuses:
    /// acting unchecked is what it exists to prevent.
    pub async fn at_start(&self, retry: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + START_CHECK_DEADLINE;
        let verdict = loop {
            match self.judge().await {
                Ok(verdict) => break verdict,
                Err(error) if tokio::time::Instant::now() + retry < deadline => {
                    warn!(%error, "cannot check the other shards' claims; retrying");
                    tokio::time::sleep(retry).await;
                }
                Err(error) => return Err(error),
            }
        };
        self.report(&verdict).await;
        match verdict {
            Verdict::Yield(conflict) => Err(self.refusal(&conflict)),
            Verdict::Clear | Verdict::Keep(_) => {
                info!(shard = %self.name(), "no shard that took its Lease before this one claims a Machine this shard claims");
                Ok(())
            }
        }
    }

    /// Checks again every `period` while this shard acts; returns the refusal when a claim
    /// made before this one overlaps it (a shard started beside it without checking, or
    /// after a check that raced with this one's). A failed check is logged and retried: the
    /// check at start was made, and leader election covers a lost API server.
    pub async fn watch(&self, period: Duration) -> Error {
        loop {
            tokio::time::sleep(period).await;
            match self.judge().await {
                Ok(verdict) => {
                    self.report(&verdict).await;
                    if let Verdict::Yield(conflict) = verdict {
                        return self.refusal(&conflict);
                    }
                }
                Err(error) => warn!(%error, "cannot check the other shards' claims; retrying"),
            }
        }
    }

    /// This shard's name in messages.
    fn name(&self) -> String {
        match &self.lease {
            Some(lease) => lease.clone(),
            None => format!("{} (without leader election)", self.instance),
        }
    }

    fn refusal(&self, conflict: &Conflict) -> Error {
        Error::Invalid {
            object: format!("shard {}", self.name()),
            reason: conflict.to_string(),
        }
    }

    /// The gauge, a log line, and an Event on this shard's Lease for each conflict.
    async fn report(&self, verdict: &Verdict) {
        self.metrics.set_shard_overlap(verdict.overlapping());
        let conflicts = match verdict {
            Verdict::Clear => return,
            Verdict::Keep(conflicts) => conflicts.clone(),
            Verdict::Yield(conflict) => vec![conflict.clone()],
        };
        for conflict in conflicts {
            warn!(%conflict, "overlapping shards");
            let Some(lease) = &self.lease else { continue };
            let pairs = [(
                self.lease_ref(lease),
                Some(self.lease_ref(&conflict.other.lease)),
            )];
            publish(
                &self.recorder,
                Severity::Warning,
                "ShardOverlap",
                &conflict.to_string(),
                &pairs,
            )
            .await;
        }
    }

    fn lease_ref(&self, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            name: Some(name.into()),
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        }
    }

    /// Reads the live claims and judges this shard's against each.
    async fn judge(&self) -> Result<Verdict> {
        let now = self.clock.now();
        let leases = self
            .leases
            .list(&ListParams::default().labels(&format!("{SHARD_LEASE_LABEL}=true")))
            .await
            .map_err(Error::kube("ListLeases"))?;
        let claims: Vec<Claim> = leases
            .items
            .iter()
            .filter_map(|lease| live_claim(lease, now))
            .collect();
        let mine = Claim {
            lease: self.name(),
            selector: self.selector.clone(),
            // This shard's acquisition as its Lease records it (what the others read);
            // without a Lease, now: after every other claim.
            acquired: self
                .lease
                .as_ref()
                .and_then(|l| claims.iter().find(|c| &c.lease == l))
                .map_or_else(|| since_epoch(now), |c| c.acquired),
        };
        let mut conflicts = Vec::new();
        for other in claims
            .into_iter()
            .filter(|c| Some(&c.lease) != self.lease.as_ref())
        {
            if let Some(overlap) = self.overlap(&mine, &other).await? {
                conflicts.push(Conflict {
                    mine: mine.clone(),
                    other,
                    overlap,
                });
            }
        }
        Ok(super::verdict(conflicts))
    }

    /// How `mine` and `other` overlap, if they do.
    async fn overlap(&self, mine: &Claim, other: &Claim) -> Result<Option<Overlap>> {
        let Some(both) = conjunction(mine.selector.as_deref(), other.selector.as_deref()) else {
            return Ok(Some(Overlap::Structural));
        };
        match self.one_machine(&both).await {
            Ok(machine) => Ok(machine.map(Overlap::Machine)),
            // Ours was accepted at start (`validate`): the other's is refused.
            Err(kube::Error::Api(status)) if status.code == 400 => {
                Ok(Some(Overlap::Unreadable(status.message)))
            }
            Err(error) => Err(Error::kube("ListMachines")(error)),
        }
    }

    /// One Machine `selector` matches (`namespace/name`), if any.
    async fn one_machine(&self, selector: &str) -> kube::Result<Option<String>> {
        let list = self
            .machines
            .list(&ListParams::default().labels(selector).limit(1))
            .await?;
        Ok(list
            .items
            .first()
            .map(|m| format!("{}/{}", m.namespace().unwrap_or_default(), m.name_any())))
    }
}
