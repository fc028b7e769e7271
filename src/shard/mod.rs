//! Shards that cannot overlap: each shard (`baremend run --machine-selector S --lease-name L`)
//! announces its claim on its leader Lease, and a shard whose claim overlaps a live claim
//! made before it does not act.
//!
//! - **The claim.** A shard's Lease carries the label [`SHARD_LEASE_LABEL`] (so the shards
//!   find each other with one label-selected list of Leases in the lease namespace) and the
//!   annotation [`MACHINE_SELECTOR_ANNOTATION`]: its Machine selector, empty for every
//!   Machine. A claim is live while its Lease is held and renewed (see [`live_claim`]).
//! - **The overlap.** Two claims overlap when one claims every Machine (structurally, whatever
//!   Machines exist), or when some Machine matches both selectors. The second is asked of the
//!   API server ([`conjunction`]: the comma of two selectors is their intersection; one
//!   Machine is enough): the server's matching is the one the shards' watches get, and the
//!   answer is one object however large the fleet.
//! - **Who acts.** Of two overlapping live claims the one whose Lease was acquired first
//!   (then the smaller Lease name) keeps acting; the other is refused ([`verdict`]). One
//!   order that every shard computes alike from the Leases means one of any overlapping set
//!   always acts: the check can refuse a shard, never stall all of them.
//! - **Ownership.** Each Remediation a shard creates carries [`SHARD_LABEL`]; a shard never
//!   advances one labelled for another ([`owned_by`]).
//!
//! This module decides; [`check`] reads the Leases and asks the API server.

pub mod check;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;

use crate::runtime::clock::since_epoch;

/// The label marking a Lease as a baremend shard's leader Lease (value `"true"`).
pub const SHARD_LEASE_LABEL: &str = "baremend.io/shard-lease";

/// The annotation of a shard's Lease holding its Machine selector (empty: every Machine).
pub const MACHINE_SELECTOR_ANNOTATION: &str = "baremend.io/machine-selector";

/// The label of a Remediation naming the shard (its Lease's name) that created it and alone
/// advances it.
pub const SHARD_LABEL: &str = "baremend.io/shard";

/// The longest shard name: it is a label value.
pub const MAX_SHARD_NAME: usize = 63;

/// A shard's claim on Machines, as its Lease announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The shard's Lease name.
    pub lease: String,
    /// Its Machine selector; `None` claims every Machine.
    pub selector: Option<String>,
    /// When its holder acquired the Lease (since the Unix epoch): earlier claims act.
    pub acquired: Duration,
}

impl Claim {
    /// Whether `self` acts before `other` when they overlap: the earlier acquisition, then
    /// the smaller Lease name (distinct Leases: a total order).
    pub fn precedes(&self, other: &Claim) -> bool {
        (self.acquired, &self.lease) < (other.acquired, &other.lease)
    }
}

/// A selector as given: blank selects every Machine.
pub fn normalize(selector: Option<&str>) -> Option<String> {
    selector
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The selector of the Machines both selectors match: `None` when the two claims overlap
/// structurally (one claims every Machine), so that no Machine is needed to tell.
pub fn conjunction(mine: Option<&str>, other: Option<&str>) -> Option<String> {
    Some(format!("{},{}", mine?, other?))
}

/// How two claims overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// One of them claims every Machine.
    Structural,
    /// This Machine (`namespace/name`) matches both selectors.
    Machine(String),
    /// The API server refused the other's selector (e.g. one written by hand): counted as
    /// an overlap, since what it claims cannot be told.
    Unreadable(String),
}

/// Two live claims that overlap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// This shard's claim.
    pub mine: Claim,
    /// The other shard's claim.
    pub other: Claim,
    /// How they overlap.
    pub overlap: Overlap,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |claim: &Claim| match claim.selector.as_deref() {
            Some(selector) => format!("Lease {} (--machine-selector {selector:?})", claim.lease),
            None => format!(
                "Lease {} (no --machine-selector: every Machine)",
                claim.lease
            ),
        };
        let why = match &self.overlap {
            Overlap::Structural => "one of them claims every Machine".to_string(),
            Overlap::Machine(machine) => format!("both claim Machine {machine}"),
            Overlap::Unreadable(reason) => {
                format!("the other's selector is refused by the API server ({reason})")
            }
        };
        let (first, second) = if self.other.precedes(&self.mine) {
            (&self.other, &self.mine)
        } else {
            (&self.mine, &self.other)
        };
        write!(
            f,
            "shard {} overlaps shard {}: {why}. Give the shards disjoint --machine-selector \
             values (a shard without one claims every Machine and must run alone); {} took its \
             Lease first and acts, {} does not",
            shown(&self.mine),
            shown(&self.other),
            first.lease,
            second.lease,
        )
    }
}

/// What a shard does after a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No live claim overlaps this shard's.
    Clear,
    /// Overlapping claims were all made after this one: this shard acts, they do not.
    Keep(Vec<Conflict>),
    /// A claim made before this one overlaps it: this shard must not act.
    Yield(Conflict),
}

impl Verdict {
    /// Whether any overlap was seen (the `baremend_shard_overlap` gauge).
    pub fn overlapping(&self) -> bool {
        !matches!(self, Verdict::Clear)
    }
}

/// The verdict on this shard's `conflicts`: it yields to the earliest claim that precedes it.
pub fn verdict(conflicts: Vec<Conflict>) -> Verdict {
    let earliest = conflicts
        .iter()
        .filter(|c| c.other.precedes(&c.mine))
        .min_by(|a, b| (a.other.acquired, &a.other.lease).cmp(&(b.other.acquired, &b.other.lease)))
        .cloned();
    match earliest {
        Some(conflict) => Verdict::Yield(conflict),
        None if conflicts.is_empty() => Verdict::Clear,
        None => Verdict::Keep(conflicts),
    }
}

/// The claim a Lease announces, when it is a shard's Lease that is live at `now`: held, and
/// renewed within its duration plus as much again. The holder's timestamps are compared with
/// our clock here (leader election never does so); the extra duration absorbs a skew between
/// the nodes' clocks, erring towards a claim that is still live, which can only delay a start.
pub fn live_claim(lease: &Lease, now: SystemTime) -> Option<Claim> {
    let labels = lease.metadata.labels.as_ref()?;
    if labels.get(SHARD_LEASE_LABEL).map(String::as_str) != Some("true") {
        return None;
    }
    let spec = lease.spec.as_ref()?;
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let seconds = u64::try_from(spec.lease_duration_seconds?).ok()?;
    let renewed = micro_since_epoch(spec.renew_time.as_ref()?)?;
    if renewed + Duration::from_secs(seconds) * 2 <= since_epoch(now) {
        return None;
    }
    let acquired = spec
        .acquire_time
        .as_ref()
        .and_then(micro_since_epoch)
        .unwrap_or(renewed);
    // A shard Lease without the annotation says nothing narrower: every Machine.
    let selector = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MACHINE_SELECTOR_ANNOTATION))
        .map(String::as_str);
    Some(Claim {
        lease: lease.metadata.name.clone()?,
        selector: normalize(selector),
        acquired,
    })
}

fn micro_since_epoch(
    time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
) -> Option<Duration> {
    u64::try_from(time.0.as_microsecond())
        .ok()
        .map(Duration::from_micros)
}

/// The labels and annotations a shard's Lease carries to announce `selector`.
pub fn announcement(
    selector: Option<&str>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    (
        BTreeMap::from([(SHARD_LEASE_LABEL.to_string(), "true".to_string())]),
        BTreeMap::from([(
            MACHINE_SELECTOR_ANNOTATION.to_string(),
            normalize(selector).unwrap_or_default(),
        )]),
    )
}

/// Whether the replica acting for `shard` (its Lease name; `None`: a replica without leader
/// election, which the start check lets run only alone) may advance a Remediation with these
/// labels. One labelled by another shard is that shard's. An unlabelled one (made before
/// shards were labelled) is the shard's whose selector matches its Machine: only that shard
/// watches the Machine, so whichever shard sees it owns it.
pub fn owned_by(labels: &BTreeMap<String, String>, shard: Option<&str>) -> bool {
    match (labels.get(SHARD_LABEL), shard) {
        (Some(owner), Some(shard)) => owner == shard,
        (None, _) | (Some(_), None) => true,
    }
}

/// The labels a Remediation created by `shard` carries (none without a shard).
pub fn owner_labels(shard: Option<&str>) -> Option<BTreeMap<String, String>> {
    shard.map(|s| BTreeMap::from([(SHARD_LABEL.to_string(), s.to_string())]))
}

/// A shard's name (its Lease's) is a label value of its Remediations: 63 characters at most.
pub fn validate_name(lease: &str) -> Result<(), String> {
    if lease.len() > MAX_SHARD_NAME {
        return Err(format!(
            "--lease-name {lease:?} is {} characters long; a shard's name labels its \
             Remediations and may have at most {MAX_SHARD_NAME}",
            lease.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
