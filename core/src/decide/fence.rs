//! What "fenced" means, in the types: the proof that a host is off, and who may make it.
//!
//! A [`ConfirmedOff`] names what it proves: the host that was read off (a BareMetalHost by
//! namespace, name and UID, or a BMC by address and system) and the Node it may release (by
//! name and UID, in the cluster whose API server holds it). Only [`confirm_powered_off`], in this module, makes one; it is not `Clone`,
//! its fields are private, and the two functions that take a Node away from its workloads
//! (`execute::delete_node`, `execute::taint_out_of_service`) consume it and take the Node's
//! identity from it, so a proof for one Node cannot release another.
//!
//! # Expected flow
//! 1. The pass reads fresh evidence for the strategy in use: a GET of the BareMetalHost (never
//!    the watch cache), or two consecutive BMC reads.
//! 2. [`confirm_powered_off`] checks the evidence against the [`FenceTarget`] (which host, which
//!    Node, which strategy) and returns the proof or why not ([`NotFenced`]).
//! 3. The planner sees only the verdict; the proof itself travels to the release step and is
//!    spent there, once.
//!
//! # Guarantees
//! - Reboot API: off only when our request annotation is on the host, `status.poweredOn` is
//!   `false`, the operational status is neither `error` nor `detached`, neither the `detached`
//!   nor the `paused` annotation is set, `spec.disablePowerOff` is not set, and the host read
//!   is the one the remediation names. When the host's BMC could be read directly (read-only,
//!   [`Corroboration`]), its reads are held to the direct rule below: an On, an untrusted BMC
//!   or a contradiction voids the operator's Off.
//! - Direct BMC: off only when at least two consecutive reads of that BMC said Off, over a
//!   transport nobody on the path can forge (or with the policy's `allowInsecureBmc`), and
//!   no reading of that BMC by any reader in the process contradicts them (`bmc_trust`): an
//!   On, or any state but Off, between or around the Off reads voids them, and a BMC seen
//!   contradicting itself proves nothing while it is untrustworthy.
//! - Evidence for another strategy, or for another host, is never proof.
//!
//! # Caveats
//! - The operator's Off stands alone when its BMC cannot be read from here (no route, no
//!   readable Secret, corroboration turned off in the policy): a BMC that lies to the operator
//!   is then unseen.
//! - A BMC that reports Off while its host runs, to every reader and every time, defeats any
//!   reader; the boot ID check after power-on catches a host that never went down, but only
//!   after the Node was released. One that contradicts itself is caught.
//! - The proof is as fresh as its evidence: callers must spend it at once (a BMC proof is
//!   reused for at most a second within one pass, see `run`).
//! - Evidence is plain data, and [`confirm_powered_off`] is public (the readers that gather the
//!   evidence do I/O and live in the controller crate): evidence could be made up and passed
//!   in. The line is drawn by a test there (`layering_tests.rs`,
//!   `only_the_power_readers_name_the_evidence_of_a_power_off`): only the readers in
//!   `act::power` and `act::strategy` name the evidence, the target or this function.

use std::fmt;

use baremend_drivers::PowerState;

use super::bmc_trust::Transport;
use super::workload::ClusterRef;
use crate::api::FenceStrategyName;

pub use crate::api::HostRef;

/// The host a proof is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedHost {
    /// A BareMetalHost whose operator holds it off.
    BareMetalHost {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// UID of the object read.
        uid: String,
    },
    /// A BMC read directly.
    Bmc {
        /// The BMC address, without credentials.
        address: String,
        /// The system path at that BMC, when the address names one (else the BMC's only one).
        system: Option<String>,
    },
}

impl fmt::Display for FencedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FencedHost::BareMetalHost {
                namespace, name, ..
            } => write!(f, "BareMetalHost {namespace}/{name}"),
            FencedHost::Bmc { address, .. } => write!(f, "BMC {address}"),
        }
    }
}

/// A Node, as the remediation recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// Name.
    pub name: String,
    /// UID; a Node registered again under the same name is another object.
    pub uid: String,
    /// The workload cluster whose API server holds it (Cluster API); None: the cluster
    /// baremend runs in. `worker-3` of one cluster is not `worker-3` of another, and a
    /// release goes only to the API server of the cluster the proof names.
    pub cluster: Option<ClusterRef>,
}

impl fmt::Display for NodeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            None => write!(f, "Node {}", self.name),
            Some(cluster) => write!(f, "Node {} of workload cluster {cluster}", self.name),
        }
    }
}

/// What a remediation means to fence: the strategy, the host it names and the Node it may
/// release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceTarget {
    /// The strategy in use.
    pub strategy: FenceStrategyName,
    /// The BareMetalHost the remediation names (reboot API).
    pub host: Option<HostRef>,
    /// The Node the proof may release (None: the Machine had no Node).
    pub node: Option<NodeIdentity>,
    /// The policy lets a forgeable BMC transport prove the host off (`allowInsecureBmc`).
    pub allow_insecure: bool,
}

/// What the BareMetalHost says, for the reboot-API strategy. Made only by
/// `observe::bare_metal_host_view`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BareMetalHostView {
    /// Namespace, name and UID of the object read.
    pub identity: Option<(String, String, String)>,
    /// `status.poweredOn`.
    pub powered_on: Option<bool>,
    /// `status.operationalStatus`.
    pub operational_status: Option<String>,
    /// The `baremetalhost.metal3.io/detached` annotation is set.
    pub detached: bool,
    /// The `baremetalhost.metal3.io/paused` annotation is set.
    pub paused: bool,
    /// `spec.disablePowerOff`.
    pub disable_power_off: bool,
    /// Our power-off request annotation is present.
    pub power_off_requested: bool,
    /// `status.errorType` and `status.errorMessage`, when the operator reports an error.
    pub error: Option<(String, String)>,
}

impl BareMetalHostView {
    /// The operator's error on the host, if it reports one: its kind (`operationalStatus
    /// error` when only the status says so) and its message, cleaned of control characters
    /// and cut to 200 bytes — `(registration error): the credentials Secret has no password`.
    pub fn operator_error(&self) -> Option<(String, String)> {
        let in_error = self.operational_status.as_deref() == Some("error");
        if !in_error && self.error.is_none() {
            return None;
        }
        let (kind, message) = self.error.clone().unwrap_or_default();
        let kind = if kind.is_empty() {
            "operationalStatus error".to_string()
        } else {
            kind
        };
        let message = crate::text::outside_text(&message);
        let message = crate::text::cut_to_bytes(&message, 200);
        let said = if message.is_empty() {
            String::new()
        } else {
            format!(": {message}")
        };
        Some((kind.clone(), format!("({kind}){said}")))
    }

    /// `status.poweredOn`, if reported.
    pub fn powered_on(&self) -> Option<bool> {
        self.powered_on
    }

    /// Whether our power-off request annotation is on the host.
    pub fn power_off_requested(&self) -> bool {
        self.power_off_requested
    }
}

impl BareMetalHostView {
    /// Whether the BareMetal Operator has let go of the host: the `detached` annotation, or
    /// the `detached` operational status. Its power is then not managed.
    pub fn is_detached(&self) -> bool {
        self.detached || self.operational_status.as_deref() == Some("detached")
    }

    /// Whether the operator reports the host off with our request in place: the one case in
    /// which the view may prove it off, and so the one worth corroborating.
    pub fn reports_off(&self) -> bool {
        self.power_off_requested && self.powered_on == Some(false)
    }
}

/// What the host's BMC, read by us directly and read-only, says of its BareMetalHost's Off.
/// The operator's `status.poweredOn` is its own reading of the BMC, made in another process:
/// a BMC that contradicts itself there goes unseen unless we read it too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Corroboration {
    /// Our consecutive reads of the BMC (oldest first), and what every other reading of it in
    /// the process around them says: nothing against them, or why the BMC is untrustworthy.
    Read {
        /// The BMC address, without credentials.
        address: String,
        /// What each read said.
        reads: Vec<PowerState>,
        /// The ledger's word on them (`bmc_trust`).
        witnessed: Result<(), String>,
    },
    /// The BMC could not be read from here: why. The operator's word stands alone.
    Unavailable(String),
    /// Not read: the view proves nothing anyway, or the policy turned corroboration off.
    NotRead,
}

/// Evidence that a host is off, for one strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerEvidence {
    /// The BareMetalHost as just read from the API server, and its BMC's word on it.
    BareMetalHost {
        /// The host read.
        view: BareMetalHostView,
        /// Our own reads of its BMC.
        corroboration: Corroboration,
    },
    /// Consecutive fresh reads of a BMC, oldest first.
    BmcReads {
        /// The BMC address, without credentials.
        address: String,
        /// The system path the address names, if any.
        system: Option<String>,
        /// What each read said.
        reads: Vec<PowerState>,
        /// How the reads travelled.
        transport: Transport,
        /// What every other reading of the BMC around these says: nothing against them, or
        /// why the BMC is untrustworthy.
        witnessed: Result<(), String>,
    },
}

impl PowerEvidence {
    /// The strategy that reads this kind of evidence.
    pub fn strategy(&self) -> FenceStrategyName {
        match self {
            PowerEvidence::BareMetalHost { .. } => FenceStrategyName::BareMetalHostRebootApi,
            PowerEvidence::BmcReads { .. } => FenceStrategyName::DirectBmc,
        }
    }
}

/// Why a host cannot be called fenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFenced {
    /// Not off yet (or not known to be): keep waiting.
    NotYet(String),
    /// Our power-off request is not in place (someone removed it, or a crash lost it).
    RequestMissing(String),
    /// The host reads On.
    PoweredOn(String),
    /// The evidence can never become proof with this strategy: escalate.
    Untrustworthy(String),
}

impl fmt::Display for NotFenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFenced::NotYet(why)
            | NotFenced::RequestMissing(why)
            | NotFenced::PoweredOn(why)
            | NotFenced::Untrustworthy(why) => f.write_str(why),
        }
    }
}

/// Proof that one host was confirmed powered off, naming the Node it may release.
///
/// Only this module makes one (through [`confirm_powered_off`], from evidence), and it cannot
/// be copied: outside the crate it cannot be built field by field or cloned.
///
/// ```compile_fail,E0451
/// use baremend_core::api::FenceStrategyName;
/// use baremend_core::decide::fence::{ConfirmedOff, FencedHost, NodeIdentity};
/// let forged = ConfirmedOff {
///     strategy: FenceStrategyName::DirectBmc,
///     host: FencedHost::Bmc { address: "redfish://bmc".into(), system: None },
///     node: Some(NodeIdentity { name: "w0".into(), uid: "u".into(), cluster: None }),
/// };
/// ```
///
/// ```compile_fail,E0277
/// use baremend_core::decide::fence::ConfirmedOff;
/// fn copyable<T: Clone>() {}
/// copyable::<ConfirmedOff>();
/// ```
///
/// Stable rustdoc does not check the error codes above, so each failure has a twin that
/// differs only in what is forbidden and compiles: the same values built into public types,
/// and a public type that is `Clone`.
///
/// ```
/// use baremend_core::api::FenceStrategyName;
/// use baremend_core::decide::fence::{ConfirmedOff, FencedHost, NodeIdentity};
/// let parts = (
///     FenceStrategyName::DirectBmc,
///     FencedHost::Bmc { address: "redfish://bmc".into(), system: None },
///     Some(NodeIdentity { name: "w0".into(), uid: "u".into(), cluster: None }),
/// );
/// fn copyable<T: Clone>() {}
/// copyable::<FencedHost>();
/// let _ = baremend_core::decide::fence::ConfirmedOff::node;
/// fn inspectable<T: std::fmt::Debug>() {}
/// inspectable::<ConfirmedOff>();
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct ConfirmedOff {
    strategy: FenceStrategyName,
    host: FencedHost,
    node: Option<NodeIdentity>,
    /// How an operator's Off was corroborated by the BMC (None: BMC reads are the proof).
    corroborated: Option<String>,
}

impl ConfirmedOff {
    /// The strategy that confirmed it.
    pub fn strategy(&self) -> FenceStrategyName {
        self.strategy
    }

    /// The host proven off.
    pub fn host(&self) -> &FencedHost {
        &self.host
    }

    /// The Node it may release (None: the Machine had no Node).
    pub fn node(&self) -> Option<&NodeIdentity> {
        self.node.as_ref()
    }

    /// For a BareMetalHost's Off, how its BMC's own reads corroborated it, in words.
    pub fn corroborated(&self) -> Option<&str> {
        self.corroborated.as_deref()
    }
}

/// Decides whether the evidence proves the target's host off; see the module's Guarantees.
pub fn confirm_powered_off(
    target: &FenceTarget,
    evidence: &PowerEvidence,
) -> Result<ConfirmedOff, NotFenced> {
    // Evidence is read per strategy (`strategy`): evidence of another kind is never proof.
    if evidence.strategy() != target.strategy {
        return Err(NotFenced::Untrustworthy(format!(
            "{} is no evidence for strategy {:?}",
            evidence_kind(evidence),
            target.strategy
        )));
    }
    let mut corroborated = None;
    let host = match evidence {
        PowerEvidence::BareMetalHost {
            view,
            corroboration,
        } => {
            let host = bare_metal_host_off(target.host.as_ref(), view)?;
            corroborated = Some(corroborate(corroboration)?);
            host
        }
        PowerEvidence::BmcReads {
            address,
            system,
            reads,
            transport,
            witnessed,
        } => {
            if let Transport::Forgeable(why) = transport
                && !target.allow_insecure
            {
                return Err(NotFenced::Untrustworthy(format!(
                    "BMC {address}: {why}; the RemediationPolicy does not allow insecure BMCs (allowInsecureBmc)"
                )));
            }
            if let Err(why) = witnessed {
                return Err(NotFenced::Untrustworthy(format!("BMC {address}: {why}")));
            }
            bmc_off(address, system, reads)?
        }
    };
    Ok(ConfirmedOff {
        strategy: target.strategy,
        host,
        node: target.node.clone(),
        corroborated,
    })
}

/// Holds the BMC's own reads to the direct rule: they can only void the operator's Off, and
/// say how it was corroborated (for the Fenced Event) when they do not.
fn corroborate(corroboration: &Corroboration) -> Result<String, NotFenced> {
    match corroboration {
        Corroboration::Read {
            address,
            reads,
            witnessed,
        } => {
            if let Err(why) = witnessed {
                return Err(NotFenced::Untrustworthy(format!(
                    "the BareMetalHost reports off, but its BMC {address} is untrustworthy: {why}"
                )));
            }
            bmc_off(address, &None, reads).map_err(|refused| match refused {
                NotFenced::PoweredOn(_) => NotFenced::PoweredOn(format!(
                    "the BareMetalHost reports off, but its BMC {address} reads On"
                )),
                other => other,
            })?;
            Ok(format!("its BMC {address} read Off {} times", reads.len()))
        }
        Corroboration::Unavailable(why) => Ok(format!("not corroborated by its BMC: {why}")),
        Corroboration::NotRead => Ok("not corroborated by its BMC".into()),
    }
}

fn evidence_kind(evidence: &PowerEvidence) -> &'static str {
    match evidence {
        PowerEvidence::BareMetalHost { .. } => "a BareMetalHost's status",
        PowerEvidence::BmcReads { .. } => "a BMC read",
    }
}

/// The error the operator reports on the host, in its own words: one that keeps it from
/// managing the host's power at all (its BMC refused the registration, its credentials are
/// unusable, its detach failed) makes the reboot API useless until an administrator fixes it,
/// so the strategy escalates (or the remediation fails) at once with that cause, not after
/// the power-off deadline with an unrelated one; any other error (a power operation that
/// failed, which the operator retries) is waited out, its cause in the wait's words.
fn host_error(host: &BareMetalHostView) -> Option<NotFenced> {
    let (kind, said) = host.operator_error()?;
    let what = format!("the BareMetalHost reports an error {said}");
    Some(match kind.as_str() {
        "registration error" | "provisioned registration error" | "detach error" => {
            NotFenced::Untrustworthy(format!(
                "{what}; the BareMetal Operator cannot manage its power until that is fixed"
            ))
        }
        _ => NotFenced::NotYet(what),
    })
}

fn bare_metal_host_off(
    expected: Option<&HostRef>,
    host: &BareMetalHostView,
) -> Result<FencedHost, NotFenced> {
    let Some((namespace, name, uid)) = host.identity.clone() else {
        return Err(NotFenced::Untrustworthy(
            "the BareMetalHost read has no name or UID".into(),
        ));
    };
    if expected.is_none_or(|e| e.namespace != namespace || e.name != name) {
        return Err(NotFenced::Untrustworthy(format!(
            "BareMetalHost {namespace}/{name} is not the host this remediation names"
        )));
    }
    if host.is_detached() {
        return Err(NotFenced::Untrustworthy(
            "the BareMetalHost is detached: its power is not managed".into(),
        ));
    }
    if host.paused {
        return Err(NotFenced::Untrustworthy(
            "the BareMetalHost is paused: its status is not updated".into(),
        ));
    }
    if host.disable_power_off {
        return Err(NotFenced::Untrustworthy(
            "the BareMetalHost has spec.disablePowerOff: it is rebooted, never powered off".into(),
        ));
    }
    if let Some(why) = host_error(host) {
        return Err(why);
    }
    if !host.power_off_requested {
        return Err(NotFenced::RequestMissing(
            "our power-off request is not on the BareMetalHost".into(),
        ));
    }
    match host.powered_on {
        Some(false) => Ok(FencedHost::BareMetalHost {
            namespace,
            name,
            uid,
        }),
        Some(true) => Err(NotFenced::PoweredOn(
            "the BareMetalHost reports poweredOn: true".into(),
        )),
        None => Err(NotFenced::NotYet(
            "the BareMetalHost reports no power state".into(),
        )),
    }
}

/// Reads a BMC must give, in a row, all Off (and so the reads a BMC proof takes).
pub const BMC_READS: usize = 2;

fn bmc_off(
    address: &str,
    system: &Option<String>,
    reads: &[PowerState],
) -> Result<FencedHost, NotFenced> {
    if reads.contains(&PowerState::On) {
        return Err(NotFenced::PoweredOn("the BMC reads On".into()));
    }
    let off = reads.iter().rev().take_while(|r| **r == PowerState::Off);
    if off.count() < BMC_READS {
        return Err(NotFenced::NotYet(format!(
            "the BMC has not read Off {BMC_READS} times in a row"
        )));
    }
    Ok(FencedHost::Bmc {
        address: address.to_string(),
        system: system.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_ref() -> HostRef {
        HostRef {
            namespace: "m".into(),
            name: "h0".into(),
        }
    }

    fn node() -> NodeIdentity {
        NodeIdentity {
            name: "w0".into(),
            uid: "node-uid".into(),
            cluster: None,
        }
    }

    fn target(strategy: FenceStrategyName) -> FenceTarget {
        FenceTarget {
            strategy,
            host: Some(host_ref()),
            node: Some(node()),
            allow_insecure: false,
        }
    }

    fn fenced_host() -> BareMetalHostView {
        BareMetalHostView {
            identity: Some(("m".into(), "h0".into(), "host-uid".into())),
            powered_on: Some(false),
            operational_status: Some("OK".into()),
            power_off_requested: true,
            ..BareMetalHostView::default()
        }
    }

    fn check(host: BareMetalHostView) -> Result<ConfirmedOff, NotFenced> {
        corroborated(host, Corroboration::NotRead)
    }

    fn corroborated(
        host: BareMetalHostView,
        corroboration: Corroboration,
    ) -> Result<ConfirmedOff, NotFenced> {
        confirm_powered_off(
            &target(FenceStrategyName::BareMetalHostRebootApi),
            &PowerEvidence::BareMetalHost {
                view: host,
                corroboration,
            },
        )
    }

    fn operator_host(view: BareMetalHostView) -> PowerEvidence {
        PowerEvidence::BareMetalHost {
            view,
            corroboration: Corroboration::NotRead,
        }
    }

    fn bmc(reads: &[PowerState]) -> PowerEvidence {
        PowerEvidence::BmcReads {
            address: "redfish://bmc".into(),
            system: None,
            reads: reads.to_vec(),
            transport: Transport::Authenticated,
            witnessed: Ok(()),
        }
    }

    #[test]
    fn a_proof_names_the_host_read_and_the_node_of_the_target() {
        let proof = check(fenced_host()).unwrap();
        assert_eq!(proof.strategy(), FenceStrategyName::BareMetalHostRebootApi);
        assert_eq!(
            proof.host(),
            &FencedHost::BareMetalHost {
                namespace: "m".into(),
                name: "h0".into(),
                uid: "host-uid".into()
            }
        );
        assert_eq!(proof.node(), Some(&node()));
    }

    #[test]
    fn a_bare_metal_host_is_fenced_only_when_every_condition_holds() {
        let with = |change: fn(&mut BareMetalHostView)| {
            let mut host = fenced_host();
            change(&mut host);
            host
        };
        let untrustworthy = [
            with(|h| h.detached = true),
            with(|h| h.operational_status = Some("detached".into())),
            with(|h| h.paused = true),
            with(|h| h.disable_power_off = true),
            with(|h| h.identity = None),
            with(|h| h.identity = Some(("m".into(), "other".into(), "u".into()))),
            with(|h| h.identity = Some(("n".into(), "h0".into(), "u".into()))),
            with(|h| {
                h.operational_status = Some("error".into());
                h.error = Some((
                    "registration error".into(),
                    "the credentials Secret has no password".into(),
                ));
            }),
        ];
        for host in untrustworthy {
            let verdict = check(host.clone());
            assert!(
                matches!(verdict, Err(NotFenced::Untrustworthy(_))),
                "{host:?}"
            );
        }
        let cases = [
            (with(|h| h.powered_on = Some(true)), "PoweredOn"),
            (with(|h| h.powered_on = None), "NotYet"),
            (
                with(|h| h.operational_status = Some("error".into())),
                "NotYet",
            ),
            (
                with(|h| {
                    h.operational_status = Some("error".into());
                    h.error = Some(("power management error".into(), "timeout".into()));
                }),
                "NotYet",
            ),
            (with(|h| h.power_off_requested = false), "RequestMissing"),
        ];
        for (host, want) in cases {
            let got = match check(host.clone()) {
                Err(NotFenced::PoweredOn(_)) => "PoweredOn",
                Err(NotFenced::NotYet(_)) => "NotYet",
                Err(NotFenced::RequestMissing(_)) => "RequestMissing",
                other => panic!("{host:?}: {other:?}"),
            };
            assert_eq!(got, want, "{host:?}");
        }
    }

    #[test]
    fn the_operators_error_is_told_in_its_own_words() {
        let mut host = fenced_host();
        host.operational_status = Some("error".into());
        host.error = Some((
            "registration error".into(),
            "the credentials Secret has no password\nsecond line".into(),
        ));
        let why = check(host).unwrap_err().to_string();
        assert_eq!(
            why,
            "the BareMetalHost reports an error (registration error): the credentials Secret has no password second line; the BareMetal Operator cannot manage its power until that is fixed"
        );
    }

    #[test]
    fn a_bare_metal_host_without_a_named_host_in_the_target_is_no_proof() {
        let mut target = target(FenceStrategyName::BareMetalHostRebootApi);
        target.host = None;
        let verdict = confirm_powered_off(&target, &operator_host(fenced_host()));
        assert!(matches!(verdict, Err(NotFenced::Untrustworthy(_))));
    }

    /// The flapping BMC of the chaos runs, read by the operator: its Off is voided by our own
    /// reads of the BMC as a direct proof would be, and stands only when they agree or cannot
    /// be made.
    #[test]
    fn an_operator_s_off_is_voided_by_its_bmc_s_own_reads() {
        let (off, on) = (PowerState::Off, PowerState::On);
        let read = |reads: &[PowerState], witnessed: Result<(), String>| Corroboration::Read {
            address: "redfish://bmc".into(),
            reads: reads.to_vec(),
            witnessed,
        };
        let agreed = corroborated(fenced_host(), read(&[off.clone(), off.clone()], Ok(())));
        assert_eq!(
            agreed.unwrap().corroborated(),
            Some("its BMC redfish://bmc read Off 2 times")
        );
        let unread = corroborated(fenced_host(), Corroboration::Unavailable("no route".into()));
        assert_eq!(
            unread.unwrap().corroborated(),
            Some("not corroborated by its BMC: no route")
        );
        let verdict = |c| match corroborated(fenced_host(), c) {
            Ok(_) => "proof",
            Err(NotFenced::PoweredOn(_)) => "PoweredOn",
            Err(NotFenced::NotYet(_)) => "NotYet",
            Err(NotFenced::Untrustworthy(_)) => "Untrustworthy",
            Err(NotFenced::RequestMissing(_)) => "RequestMissing",
        };
        assert_eq!(
            verdict(read(&[off.clone(), on.clone()], Ok(()))),
            "PoweredOn"
        );
        assert_eq!(verdict(read(&[on], Ok(()))), "PoweredOn");
        assert_eq!(verdict(read(std::slice::from_ref(&off), Ok(()))), "NotYet");
        let contradicted = Err("the BMC contradicted itself".to_string());
        assert_eq!(
            verdict(read(&[off.clone(), off], contradicted.clone())),
            "Untrustworthy"
        );
        assert_eq!(verdict(read(&[], contradicted)), "Untrustworthy");
        // The BMC's word never turns an operator's "not off" into a proof.
        let mut on_host = fenced_host();
        on_host.powered_on = Some(true);
        let both_off = read(&[PowerState::Off, PowerState::Off], Ok(()));
        assert!(matches!(
            corroborated(on_host, both_off),
            Err(NotFenced::PoweredOn(_))
        ));
    }

    #[test]
    fn a_direct_bmc_is_fenced_only_by_two_off_reads_in_a_row() {
        let direct = target(FenceStrategyName::DirectBmc);
        let off = PowerState::Off;
        let proof = confirm_powered_off(&direct, &bmc(&[off.clone(), off.clone()])).unwrap();
        assert_eq!(
            proof.host(),
            &FencedHost::Bmc {
                address: "redfish://bmc".into(),
                system: None
            }
        );
        let not_yet = [
            vec![],
            vec![off.clone()],
            vec![off.clone(), PowerState::PoweringOff],
            vec![PowerState::Unknown("Paused".into()), off.clone()],
        ];
        for reads in not_yet {
            assert!(
                matches!(
                    confirm_powered_off(&direct, &bmc(&reads)),
                    Err(NotFenced::NotYet(_))
                ),
                "{reads:?}"
            );
        }
        assert!(matches!(
            confirm_powered_off(&direct, &bmc(&[off.clone(), PowerState::On])),
            Err(NotFenced::PoweredOn(_))
        ));
    }

    #[test]
    fn evidence_must_match_the_strategy() {
        assert!(matches!(
            confirm_powered_off(
                &target(FenceStrategyName::DirectBmc),
                &operator_host(fenced_host())
            ),
            Err(NotFenced::Untrustworthy(_))
        ));
        assert!(matches!(
            confirm_powered_off(
                &target(FenceStrategyName::BareMetalHostRebootApi),
                &bmc(&[PowerState::Off, PowerState::Off])
            ),
            Err(NotFenced::Untrustworthy(_))
        ));
    }

    #[test]
    fn a_forgeable_transport_proves_nothing_without_the_policy_s_consent() {
        use crate::decide::bmc_trust::Insecurity;
        let off = [PowerState::Off, PowerState::Off];
        for why in [Insecurity::PlainHttp, Insecurity::SkipVerify] {
            let mut evidence = bmc(&off);
            if let PowerEvidence::BmcReads { transport, .. } = &mut evidence {
                *transport = Transport::Forgeable(why);
            }
            let mut target = target(FenceStrategyName::DirectBmc);
            let refused = confirm_powered_off(&target, &evidence).unwrap_err();
            assert!(
                matches!(refused, NotFenced::Untrustworthy(_)),
                "{refused:?}"
            );
            assert!(
                refused.to_string().contains("allowInsecureBmc"),
                "{refused}"
            );
            target.allow_insecure = true;
            assert!(confirm_powered_off(&target, &evidence).is_ok(), "{why:?}");
        }
    }

    #[test]
    fn off_reads_contradicted_by_another_reader_prove_nothing() {
        let direct = target(FenceStrategyName::DirectBmc);
        let mut evidence = bmc(&[PowerState::Off, PowerState::Off]);
        if let PowerEvidence::BmcReads { witnessed, .. } = &mut evidence {
            *witnessed = Err("the power monitor read On between them".into());
        }
        let refused = confirm_powered_off(&direct, &evidence).unwrap_err();
        assert!(
            matches!(refused, NotFenced::Untrustworthy(_)),
            "{refused:?}"
        );
        assert!(refused.to_string().contains("power monitor"), "{refused}");
    }
}
