//! Fencing readiness, decided: from what a non-disruptive probe of each fencing path observed
//! (a BareMetalHost's status and its credentials Secret, or a BMC's answer to a probe), whether
//! the host could be fenced now, by which path, or the typed reason why not.
//!
//! # Expected flow
//! 1. The probe (`probe.rs`) reads a path: for the reboot API, the BareMetalHost (GET) and the
//!    Secret its `spec.bmc.credentialsName` names, into [`HostFacts`]; for a BMC, a login, a
//!    read of the system and of its advertised reset types (the driver's `probe`), then the
//!    session is closed.
//! 2. [`host_answer`] or [`bmc_answer`] turns one path's facts into an [`Answer`] or a
//!    [`Refusal`] with a [`Reason`].
//! 3. [`decide`] folds the policy's strategies, in order, into one [`Readiness`]: ready by the
//!    first path that answers, else not ready for the reason of the first path that exists.
//!
//! # Guarantees
//! Pure: no I/O, no clock. Every reason is one [`Reason`] variant with a fixed name
//! ([`Reason::ALL`], the metric's bounded `reason` values). Details quote object names, the
//! operator's error text and the driver's error, none of which carries a credential.
//!
//! # Caveats
//! Ready means the path answered: the BareMetal Operator manages the host and validated its
//! credentials, or the BMC let us log in, showed the system and advertises a forced off. It
//! cannot prove that the off itself will work when asked.

use baremend_drivers::{Error as DriverError, ProbeReport};

use super::fence::{BareMetalHostView, HostRef};

/// How a host would be fenced.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FencingPath {
    /// The BareMetalHost reboot API (the BareMetal Operator powers the host off).
    RebootApi(HostRef),
    /// The BMC, directly.
    Bmc {
        /// The address, without credentials.
        address: String,
        /// `redfish` or `ipmi`.
        driver: &'static str,
    },
}

impl FencingPath {
    /// The metric's `path` label: `reboot-api`, `redfish` or `ipmi`.
    pub fn label(&self) -> &'static str {
        match self {
            FencingPath::RebootApi(_) => "reboot-api",
            FencingPath::Bmc { driver, .. } => driver,
        }
    }
}

impl std::fmt::Display for FencingPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FencingPath::RebootApi(host) => write!(f, "reboot API of BareMetalHost {host}"),
            FencingPath::Bmc { address, .. } => write!(f, "BMC {address}"),
        }
    }
}

/// The `path` label when no path exists.
pub const NO_PATH: &str = "none";

/// Why a fencing path is not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Nothing names a host or a BMC for the policy's strategies.
    NoFencingPath,
    /// The BareMetalHost the Machine names does not exist.
    HostNotFound,
    /// The BareMetalHost is detached: its operator would not act on a reboot request.
    HostDetached,
    /// The BareMetalHost is paused: its operator would not act on a reboot request.
    HostPaused,
    /// `spec.disablePowerOff`: the reboot API cannot power the host off.
    PowerOffDisabled,
    /// The BareMetal Operator reports an error on the host (`status.errorType`).
    HostInError,
    /// The BareMetal Operator has not validated the credentials the Secret holds now.
    CredentialsNotValidated,
    /// The BareMetalHost reports no power state (`status.poweredOn`).
    NoPowerState,
    /// Direct BMC fencing of a host its BareMetal Operator manages (it would power it on).
    HostManaged,
    /// The BMC's address, Secret or CA bundle is unusable.
    BmcMisconfigured,
    /// The BMC does not answer (refused, reset, timed out).
    Unreachable,
    /// The BMC refused the credentials.
    CredentialsRefused,
    /// The BMC's TLS certificate could not be verified.
    TlsFailed,
    /// The BMC does not show the system (missing, or several and none named).
    NoSystem,
    /// The BMC advertises no forced power-off.
    ForcedOffNotAdvertised,
    /// The BMC answered with an error (busy, HTTP error, malformed answer).
    BmcError,
    /// The API server could not be read: nothing is known of the path.
    CheckFailed,
    /// The BMC is reached over plain HTTP or without certificate verification, which the
    /// policy does not allow (`allowInsecureBmc`).
    InsecureTransport,
    /// The BMC was seen contradicting itself lately: none of its readings is proof.
    BmcUntrustworthy,
}

impl Reason {
    /// Every reason, in declaration order.
    pub const ALL: [Reason; 19] = [
        Reason::NoFencingPath,
        Reason::HostNotFound,
        Reason::HostDetached,
        Reason::HostPaused,
        Reason::PowerOffDisabled,
        Reason::HostInError,
        Reason::CredentialsNotValidated,
        Reason::NoPowerState,
        Reason::HostManaged,
        Reason::BmcMisconfigured,
        Reason::Unreachable,
        Reason::CredentialsRefused,
        Reason::TlsFailed,
        Reason::NoSystem,
        Reason::ForcedOffNotAdvertised,
        Reason::BmcError,
        Reason::CheckFailed,
        Reason::InsecureTransport,
        Reason::BmcUntrustworthy,
    ];

    /// Whether the path refused is one the host is meant to be fenced by: a detached host is
    /// meant for its BMC, a managed one for its operator, and a Machine naming neither has no
    /// path; those refusals yield to one of a path that applies.
    pub fn path_applies(self) -> bool {
        !matches!(
            self,
            Reason::NoFencingPath | Reason::HostDetached | Reason::HostManaged
        )
    }

    /// The name the metric, the Event and `baremend check` show.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NoFencingPath => "NoFencingPath",
            Reason::HostNotFound => "HostNotFound",
            Reason::HostDetached => "HostDetached",
            Reason::HostPaused => "HostPaused",
            Reason::PowerOffDisabled => "PowerOffDisabled",
            Reason::HostInError => "HostInError",
            Reason::CredentialsNotValidated => "CredentialsNotValidated",
            Reason::NoPowerState => "NoPowerState",
            Reason::HostManaged => "HostManaged",
            Reason::BmcMisconfigured => "BmcMisconfigured",
            Reason::Unreachable => "Unreachable",
            Reason::CredentialsRefused => "CredentialsRefused",
            Reason::TlsFailed => "TlsFailed",
            Reason::NoSystem => "NoSystem",
            Reason::ForcedOffNotAdvertised => "ForcedOffNotAdvertised",
            Reason::BmcError => "BmcError",
            Reason::CheckFailed => "CheckFailed",
            Reason::InsecureTransport => "InsecureTransport",
            Reason::BmcUntrustworthy => "BmcUntrustworthy",
        }
    }
}

/// A path that answered its probe, with what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The path.
    pub path: FencingPath,
    /// What it said, for people (e.g. `logged in, system power On`).
    pub said: String,
}

/// A path that did not answer (or does not exist), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The path, when one exists.
    pub path: Option<FencingPath>,
    /// Why not.
    pub reason: Reason,
    /// What was observed, naming the object at fault.
    pub detail: String,
}

impl Refusal {
    /// A refusal of `path` for `reason`.
    pub fn new(path: Option<FencingPath>, reason: Reason, detail: impl Into<String>) -> Self {
        Refusal {
            path,
            reason,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

/// One path's verdict.
pub type Verdict = Result<Answer, Refusal>;

/// The credentials the BareMetal Operator last validated (`status.goodCredentials`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoodCredentials {
    /// `credentials.name`.
    pub name: Option<String>,
    /// `credentialsVersion`: the Secret's resourceVersion it validated.
    pub version: Option<String>,
}

/// What the reboot API's probe observed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// The host.
    pub host: HostRef,
    /// Its power-relevant status and annotations.
    pub view: BareMetalHostView,
    /// `spec.bmc.credentialsName`.
    pub credentials_name: Option<String>,
    /// That Secret's resourceVersion (None: not found).
    pub secret_version: Option<String>,
    /// `status.goodCredentials` (None: absent).
    pub good_credentials: Option<GoodCredentials>,
}

/// The reboot API's verdict on a host read just now: its operator manages it (not detached,
/// not paused), may power it off, reports no error, validated the Secret's credentials as
/// they are now, and reports the host's power.
pub fn host_answer(facts: &HostFacts) -> Verdict {
    let host = &facts.host;
    let view = &facts.view;
    let refuse = |reason: Reason, why: String| {
        Err(Refusal::new(
            Some(FencingPath::RebootApi(host.clone())),
            reason,
            format!("BareMetalHost {host} {why}"),
        ))
    };
    if view.is_detached() {
        let why = "is detached: the BareMetal Operator would not act on a reboot request";
        return refuse(Reason::HostDetached, why.into());
    }
    if view.paused {
        let why = "is paused: the BareMetal Operator would not act on a reboot request";
        return refuse(Reason::HostPaused, why.into());
    }
    if view.disable_power_off {
        let why = "has disablePowerOff: it cannot be powered off through the reboot API";
        return refuse(Reason::PowerOffDisabled, why.into());
    }
    if let Some(why) = host_error(facts) {
        return refuse(Reason::HostInError, why);
    }
    if let Some(why) = credentials_not_validated(facts) {
        return refuse(Reason::CredentialsNotValidated, why);
    }
    match view.powered_on {
        Some(on) => Ok(Answer {
            path: FencingPath::RebootApi(host.clone()),
            said: format!("BareMetalHost {host}: managed, not detached, poweredOn {on}"),
        }),
        None => refuse(
            Reason::NoPowerState,
            "reports no power state (status.poweredOn)".into(),
        ),
    }
}

/// The operator's error on the host, in words, if it reports one.
fn host_error(facts: &HostFacts) -> Option<String> {
    let (_, said) = facts.view.operator_error()?;
    Some(format!("is in error {said}"))
}

/// Why the operator's validation does not cover the Secret as it is now, if it does not.
fn credentials_not_validated(facts: &HostFacts) -> Option<String> {
    let Some(name) = facts.credentials_name.as_deref().filter(|n| !n.is_empty()) else {
        return Some("names no credentials Secret (spec.bmc.credentialsName)".into());
    };
    let Some(version) = &facts.secret_version else {
        return Some(format!(
            "names credentials Secret {name}, which does not exist"
        ));
    };
    let Some(good) = &facts.good_credentials else {
        return Some(format!(
            "has no validated credentials (status.goodCredentials): the BareMetal Operator has not logged in to its BMC with Secret {name}"
        ));
    };
    if good.name.as_deref() != Some(name) {
        return Some(format!(
            "has credentials validated for another Secret than {name} (status.goodCredentials)"
        ));
    }
    if good.version.as_ref() != Some(version) {
        return Some(format!(
            "has not validated the current credentials of Secret {name}: it was changed since the BareMetal Operator last logged in (status.goodCredentials)"
        ));
    }
    None
}

/// The BMC's verdict on a probe (a login, the system read, its reset types), or on the
/// probe's error.
pub fn bmc_answer(
    address: &str,
    driver: &'static str,
    probe: &Result<ProbeReport, DriverError>,
) -> Verdict {
    let path = FencingPath::Bmc {
        address: address.to_string(),
        driver,
    };
    let report = match probe {
        Ok(report) => report,
        Err(error) => {
            return Err(Refusal::new(
                Some(path),
                driver_reason(error),
                error.to_string(),
            ));
        }
    };
    if !report.forced_off {
        let detail = format!(
            "BMC {address} advertises no forced power-off (reset types: {})",
            report.power_operations.join(", ")
        );
        return Err(Refusal::new(
            Some(path),
            Reason::ForcedOffNotAdvertised,
            detail,
        ));
    }
    let power = report
        .power_state
        .as_ref()
        .map_or_else(|| "unknown".to_string(), |p| format!("{p:?}"));
    Ok(Answer {
        path,
        said: format!("BMC {address}: logged in, system power {power}"),
    })
}

/// The reason a driver error means.
fn driver_reason(error: &DriverError) -> Reason {
    match error {
        DriverError::Unreachable { .. } | DriverError::Timeout { .. } => Reason::Unreachable,
        DriverError::Authentication { .. } => Reason::CredentialsRefused,
        DriverError::Tls { .. } => Reason::TlsFailed,
        DriverError::SystemNotFound { .. } | DriverError::AmbiguousSystem { .. } => {
            Reason::NoSystem
        }
        DriverError::InvalidAddress { .. } | DriverError::Configuration { .. } => {
            Reason::BmcMisconfigured
        }
        _ => Reason::BmcError,
    }
}

/// Whether a host could be fenced now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// A path answered.
    Ready {
        /// The first path, in the policy's order, that answered.
        path: FencingPath,
        /// What it said.
        said: String,
    },
    /// No path answered.
    NotReady {
        /// The path at fault: the first that exists (None: none does).
        path: Option<FencingPath>,
        /// Why it is not ready.
        reason: Reason,
        /// What every strategy's probe found, in the policy's order.
        detail: String,
    },
}

impl Readiness {
    /// Whether the host could be fenced.
    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready { .. })
    }

    /// The path shown: the one that answered, or the one at fault.
    pub fn path(&self) -> Option<&FencingPath> {
        match self {
            Readiness::Ready { path, .. } => Some(path),
            Readiness::NotReady { path, .. } => path.as_ref(),
        }
    }

    /// The reason, when not ready.
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Readiness::Ready { .. } => None,
            Readiness::NotReady { reason, .. } => Some(*reason),
        }
    }

    /// The metric's `path` label.
    pub fn path_label(&self) -> &'static str {
        self.path().map_or(NO_PATH, FencingPath::label)
    }
}

/// Folds the verdicts of the policy's strategies, in order, into one readiness: ready by the
/// first that answered; else not ready for the first refusal of a path that applies (see
/// [`Reason::path_applies`]: the reboot API of a detached host yields to its BMC, direct BMC
/// of a managed host to its operator), else of the first path that exists.
pub fn decide(verdicts: Vec<Verdict>) -> Readiness {
    let mut refusals = Vec::new();
    for verdict in verdicts {
        match verdict {
            Ok(answer) => {
                return Readiness::Ready {
                    path: answer.path,
                    said: answer.said,
                };
            }
            Err(refusal) => refusals.push(refusal),
        }
    }
    let detail = refusals
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let chosen = refusals
        .iter()
        .find(|r| r.path.is_some() && r.reason.path_applies())
        .or_else(|| refusals.iter().find(|r| r.path.is_some()))
        .or(refusals.first());
    match chosen {
        Some(refusal) => Readiness::NotReady {
            path: refusal.path.clone(),
            reason: refusal.reason,
            detail,
        },
        None => Readiness::NotReady {
            path: None,
            reason: Reason::NoFencingPath,
            detail: "the policy names no fencing strategy".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn host() -> HostRef {
        HostRef {
            namespace: "m".into(),
            name: "h0".into(),
        }
    }

    fn facts() -> HostFacts {
        HostFacts {
            host: host(),
            view: BareMetalHostView {
                powered_on: Some(true),
                operational_status: Some("OK".into()),
                ..BareMetalHostView::default()
            },
            credentials_name: Some("bmc-h0".into()),
            secret_version: Some("42".into()),
            good_credentials: Some(GoodCredentials {
                name: Some("bmc-h0".into()),
                version: Some("42".into()),
            }),
        }
    }

    fn refused(verdict: Verdict) -> Refusal {
        verdict.expect_err("not ready")
    }

    #[test]
    fn a_managed_host_with_validated_credentials_and_a_power_state_is_ready() {
        let answer = host_answer(&facts()).unwrap();
        assert_eq!(answer.path, FencingPath::RebootApi(host()));
        assert_eq!(answer.path.label(), "reboot-api");
        assert_eq!(
            answer.said,
            "BareMetalHost m/h0: managed, not detached, poweredOn true"
        );
    }

    #[test]
    fn every_host_reason_is_named_with_the_host() {
        let with = |change: &dyn Fn(&mut HostFacts)| {
            let mut f = facts();
            change(&mut f);
            refused(host_answer(&f))
        };
        let cases: Vec<(Refusal, Reason, &str)> = vec![
            (
                with(&|f| f.view.detached = true),
                Reason::HostDetached,
                "is detached",
            ),
            (
                with(&|f| f.view.operational_status = Some("detached".into())),
                Reason::HostDetached,
                "is detached",
            ),
            (
                with(&|f| f.view.paused = true),
                Reason::HostPaused,
                "is paused",
            ),
            (
                with(&|f| f.view.disable_power_off = true),
                Reason::PowerOffDisabled,
                "disablePowerOff",
            ),
            (
                with(&|f| {
                    f.view.operational_status = Some("error".into());
                    f.view.error = Some(("power management error".into(), "BMC said no".into()));
                }),
                Reason::HostInError,
                "is in error (power management error): BMC said no",
            ),
            (
                with(&|f| f.view.operational_status = Some("error".into())),
                Reason::HostInError,
                "is in error (operationalStatus error)",
            ),
            (
                with(&|f| f.credentials_name = None),
                Reason::CredentialsNotValidated,
                "names no credentials Secret",
            ),
            (
                with(&|f| f.secret_version = None),
                Reason::CredentialsNotValidated,
                "Secret bmc-h0, which does not exist",
            ),
            (
                with(&|f| f.good_credentials = None),
                Reason::CredentialsNotValidated,
                "no validated credentials",
            ),
            (
                with(&|f| f.secret_version = Some("43".into())),
                Reason::CredentialsNotValidated,
                "changed since the BareMetal Operator last logged in",
            ),
            (
                with(&|f| {
                    f.good_credentials = Some(GoodCredentials {
                        name: Some("old".into()),
                        version: Some("42".into()),
                    });
                }),
                Reason::CredentialsNotValidated,
                "another Secret than bmc-h0",
            ),
            (
                with(&|f| f.view.powered_on = None),
                Reason::NoPowerState,
                "no power state",
            ),
        ];
        for (refusal, reason, said) in cases {
            assert_eq!(refusal.reason, reason, "{refusal}");
            assert!(
                refusal.detail.starts_with("BareMetalHost m/h0 "),
                "{refusal}"
            );
            assert!(refusal.detail.contains(said), "{said:?} in {refusal}");
            assert_eq!(refusal.path, Some(FencingPath::RebootApi(host())));
        }
    }

    #[test]
    fn a_long_operator_error_is_cut() {
        let mut f = facts();
        f.view.error = Some(("registration error".into(), "x".repeat(5000)));
        let refusal = refused(host_answer(&f));
        assert!(refusal.detail.len() < 400, "{}", refusal.detail.len());
    }

    fn report(forced_off: bool) -> ProbeReport {
        ProbeReport {
            forced_off,
            power_operations: vec!["On".into(), "GracefulShutdown".into()],
            power_state: Some(baremend_drivers::PowerState::On),
            ..ProbeReport::default()
        }
    }

    #[test]
    fn a_bmc_that_logs_in_and_advertises_a_forced_off_is_ready() {
        let answer = bmc_answer("redfish://bmc-0", "redfish", &Ok(report(true))).unwrap();
        assert_eq!(answer.path.label(), "redfish");
        assert_eq!(
            answer.said,
            "BMC redfish://bmc-0: logged in, system power On"
        );
        let refusal = refused(bmc_answer("ipmi://bmc-1", "ipmi", &Ok(report(false))));
        assert_eq!(refusal.reason, Reason::ForcedOffNotAdvertised);
        assert!(refusal.detail.contains("On, GracefulShutdown"), "{refusal}");
    }

    #[test]
    fn every_driver_error_maps_to_its_reason() {
        let bmc = || "ipmi://bmc-1".to_string();
        let cases = [
            (
                DriverError::Unreachable {
                    bmc: bmc(),
                    detail: "connection refused".into(),
                },
                Reason::Unreachable,
            ),
            (
                DriverError::Timeout {
                    bmc: bmc(),
                    operation: "login".into(),
                    timeout: Duration::from_secs(2),
                },
                Reason::Unreachable,
            ),
            (
                DriverError::Authentication {
                    bmc: bmc(),
                    detail: "401".into(),
                },
                Reason::CredentialsRefused,
            ),
            (
                DriverError::Tls {
                    bmc: bmc(),
                    detail: "unknown issuer".into(),
                },
                Reason::TlsFailed,
            ),
            (
                DriverError::SystemNotFound {
                    bmc: bmc(),
                    system: "/redfish/v1/Systems/9".into(),
                },
                Reason::NoSystem,
            ),
            (
                DriverError::AmbiguousSystem {
                    bmc: bmc(),
                    members: vec!["a".into(), "b".into()],
                },
                Reason::NoSystem,
            ),
            (
                DriverError::Configuration {
                    bmc: bmc(),
                    reason: "empty username".into(),
                },
                Reason::BmcMisconfigured,
            ),
            (
                DriverError::Busy {
                    bmc: bmc(),
                    detail: "503".into(),
                    retry_after: None,
                },
                Reason::BmcError,
            ),
        ];
        for (error, reason) in cases {
            let shown = error.to_string();
            let refusal = refused(bmc_answer("ipmi://bmc-1", "ipmi", &Err(error)));
            assert_eq!(refusal.reason, reason, "{shown}");
            assert_eq!(refusal.detail, shown);
            assert_eq!(refusal.path.as_ref().map(FencingPath::label), Some("ipmi"));
        }
    }

    #[test]
    fn the_first_path_that_answers_decides_else_the_first_that_exists() {
        let managed = Refusal::new(None, Reason::HostManaged, "BareMetalHost m/h0 is managed");
        let bad_password = refused(bmc_answer(
            "redfish://bmc-0",
            "redfish",
            &Err(DriverError::Authentication {
                bmc: "redfish://bmc-0".into(),
                detail: "401".into(),
            }),
        ));
        let ready = host_answer(&facts());
        let decided = decide(vec![Err(managed.clone()), ready.clone()]);
        assert!(decided.is_ready());
        assert_eq!(decided.path_label(), "reboot-api");
        assert_eq!(decided.reason(), None);

        let decided = decide(vec![Err(managed.clone()), Err(bad_password.clone())]);
        assert_eq!(decided.reason(), Some(Reason::CredentialsRefused));
        assert_eq!(decided.path_label(), "redfish");
        let Readiness::NotReady { detail, .. } = &decided else {
            panic!("{decided:?}")
        };
        assert!(
            detail.starts_with("BareMetalHost m/h0 is managed; "),
            "{detail}"
        );

        // A detached host is meant for its BMC: the BMC's refusal is the one shown.
        let mut detached = facts();
        detached.view.detached = true;
        let decided = decide(vec![host_answer(&detached), Err(bad_password.clone())]);
        assert_eq!(decided.reason(), Some(Reason::CredentialsRefused));
        let decided = decide(vec![host_answer(&detached)]);
        assert_eq!(decided.reason(), Some(Reason::HostDetached));
        assert_eq!(decided.path_label(), "reboot-api");

        let decided = decide(vec![Err(managed)]);
        assert_eq!(decided.reason(), Some(Reason::HostManaged));
        assert_eq!(decided.path_label(), NO_PATH);
        assert_eq!(decide(vec![]).reason(), Some(Reason::NoFencingPath));
    }

    #[test]
    fn reason_names_are_unique_and_listed() {
        let names: std::collections::HashSet<&str> =
            Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
