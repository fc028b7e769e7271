//! baremend: fences and heals hung bare-metal Kubernetes/OpenShift nodes.
//!
//! This crate holds the controller library and the `baremend` command. Today it offers:
//! - [`bmc`]: `baremend bmc`, the operator's tool to check a BMC address and credentials
//!   and to read or change a host's power, with every change read back from the BMC;
//! - [`api`]: baremend's custom resources (`baremend crds` prints them) and the annotation
//!   names it shares with MachineHealthCheck and the BareMetal Operator;
//! - [`remediation`]: the pure remediation planner and the power-off proof;
//! - [`drift`]: the Machine Config Operator's config-drift remediation, coordinated;
//! - [`metrics`]: the Prometheus metrics and the `/metrics`, `/healthz`, `/readyz` endpoint;
//! - `lab` (feature `lab`, on by default, off in the image): `baremend lab`, a self-contained
//!   run against simulated hardware.
//!
//! Power control itself lives in the `baremend-drivers` crate; simulated BMCs in `baremend-sim`.
#![forbid(unsafe_code)]

pub mod api;
pub use baremend_core::duration;
pub mod bmc;
pub mod check;
pub mod drift;
pub mod gather;
pub mod hostfile;
pub mod installed;
#[cfg(feature = "lab")]
pub mod lab;
pub mod leader;
pub mod metrics;
pub mod remediation;
pub mod run;
pub mod runtime;
pub mod shard;
pub mod status;

use std::path::PathBuf;

/// Errors of the `baremend` crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A BMC operation failed.
    #[error(transparent)]
    Driver(#[from] baremend_drivers::Error),
    /// A Kubernetes API call failed.
    #[error("{op}: {}", kube_text(source))]
    Kube {
        /// The operation, e.g. `DeleteNode`.
        op: &'static str,
        /// The cause.
        source: kube::Error,
    },
    /// An object is unusable as it stands.
    #[error("{object}: {reason}")]
    Invalid {
        /// The object, e.g. `Machine openshift-machine-api/worker-0`.
        object: String,
        /// What is wrong with it.
        reason: String,
    },
    /// What a step rested on changed under it (the proof of power-off no longer holds, the
    /// Node was registered again): the next pass looks again and plans afresh.
    #[error("{object} changed: {reason}")]
    Changed {
        /// The object, e.g. `Node worker-0`.
        object: String,
        /// What changed.
        reason: String,
    },
    /// This replica does not hold the leader Lease (any more): it must not write.
    #[error("not the leader: another replica may be acting")]
    NotLeader,
    /// This replica lost the leader Lease while running.
    #[error("lost the leader Lease {0}: stopped acting")]
    LeadershipLost(String),
    /// A hook passed in by a test or a lab abandoned the pass right after a step was
    /// persisted (what a crash at that point leaves behind).
    #[error("pass abandoned by a hook after step {0}")]
    Abandoned(String),
    /// Something on this machine failed: a file, a socket, a rendering, the command line.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// A Cluster API workload cluster, where a remediation's Node lives, cannot be reached:
    /// its kubeconfig Secret is missing, unreadable or refused, or its API server does not
    /// answer. Nothing about its Node is known meanwhile (never "gone").
    #[error("workload cluster {cluster}: {reason}")]
    WorkloadCluster {
        /// The Cluster, `<namespace>/<name>`.
        cluster: String,
        /// Why it cannot be reached (never the kubeconfig's content).
        reason: String,
    },
}

/// What fails on the machine baremend runs on, not in the cluster or at a BMC: the command
/// line's files and password, sockets, renderings (a command's errors, and the controller's
/// at startup). Apart from [`Error`]'s controller variants, so that what a pass can meet is
/// classified there and these are one [`ErrorCategory::Local`].
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// No password was given.
    #[error("no BMC password: give --password-file FILE or set BMC_PASSWORD")]
    MissingPassword,
    /// A file named on the command line could not be read.
    #[error("cannot read {what} {path}: {source}")]
    ReadFile {
        /// What the file is for.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {what} {path}: {source}")]
    WriteFile {
        /// What the file is for.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `baremend host-file` could not do what it was asked.
    #[error("host-file: {0}")]
    HostFile(String),
    /// An object could not be rendered.
    #[error("cannot render {what}: {reason}")]
    Render {
        /// What was rendered.
        what: &'static str,
        /// Why not.
        reason: String,
    },
    /// A file was read but its content is unusable.
    #[error("{what} {path} is unusable: {reason}")]
    BadFile {
        /// What the file is for.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A listening socket could not be opened.
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        /// The address.
        listen: std::net::SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The simulator could not start.
    #[cfg(feature = "lab")]
    #[error("simulator: {0}")]
    Simulator(#[from] baremend_sim::Error),
}

#[cfg(feature = "lab")]
impl From<baremend_sim::Error> for Error {
    fn from(error: baremend_sim::Error) -> Self {
        Error::Local(error.into())
    }
}

/// A failed API call as a user reads it: the server's own message, reason and code (the
/// client's rendering repeats the Status object in Rust's debug notation).
/// A failed Kubernetes API call in one line of words: the server's message, reason and code
/// (kube's own `Display` of an API error appends the whole `Status` as `Debug`).
pub fn kube_text(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            format!("{} ({}, {})", status.message, status.reason, status.code)
        }
        other => other.to_string(),
    }
}

impl Error {
    /// Maps a failed Kubernetes API call of operation `op` (for `map_err`).
    pub fn kube(op: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { op, source }
    }

    /// What kind of failure this is: it names the Event reason a user sees. Every variant
    /// is named: a new one does not compile until it is classified.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::Driver(error) => bmc_category(error.category()),
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } if status.code == 403 => ErrorCategory::Forbidden,
            Error::Kube { .. } => ErrorCategory::Api,
            Error::Invalid { .. } => ErrorCategory::InvalidObject,
            Error::Changed { .. } => ErrorCategory::Changed,
            Error::NotLeader | Error::LeadershipLost(_) => ErrorCategory::Leadership,
            Error::Abandoned(_) => ErrorCategory::Abandoned,
            Error::Local(_) => ErrorCategory::Local,
            Error::WorkloadCluster { .. } => ErrorCategory::WorkloadCluster,
        }
    }

    /// Whether trying the same thing again soon may succeed: a BMC that is busy or
    /// unreachable, an API call that conflicted, was throttled or found the server failing.
    /// A refused password, an object that is unusable as it stands, an invalid API call
    /// only repeat themselves: something has to change first, and its change wakes the pass.
    /// A refusal for want of a grant (403) is retried on the backoff: the grant is fixed in
    /// RBAC, which no pass watches, and the story must resume soon after. Every variant is
    /// named, as in [`Error::category`].
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Driver(error) => error.is_retryable(),
            Error::Kube {
                source: kube::Error::Api(status),
                ..
            } => matches!(status.code, 403 | 404 | 409 | 429) || status.code >= 500,
            // Transport, TLS handshakes with a restarting server, timeouts.
            Error::Kube { .. } => true,
            Error::Changed { .. } => true,
            // The Lease may be renewed in a moment (a renewal late under load); a lost one
            // ends the controller anyway.
            Error::NotLeader => true,
            // A hook abandoned the pass where a crash would: the next pass resumes, as a
            // restarted process would at once.
            Error::Abandoned(_) => true,
            // An API server that restarts, a Secret being rotated: looked at again on the
            // backoff, as the Cluster API's own cluster cache does.
            Error::WorkloadCluster { .. } => true,
            Error::LeadershipLost(_) | Error::Invalid { .. } | Error::Local(_) => false,
        }
    }
}

/// The kind of a failed BMC call, as the controller tells it: a refused password apart
/// (retrying would only lock the account), the rest one `Bmc`. Every driver category is
/// named: a new one does not compile until it is told here.
fn bmc_category(category: baremend_drivers::DriverErrorCategory) -> ErrorCategory {
    use baremend_drivers::DriverErrorCategory as Driver;
    match category {
        Driver::Authentication => ErrorCategory::BmcCredentials,
        Driver::InvalidAddress
        | Driver::Configuration
        | Driver::Unsupported
        | Driver::Unreachable
        | Driver::Timeout
        | Driver::Busy
        | Driver::Http
        | Driver::Tls
        | Driver::SystemNotFound
        | Driver::AmbiguousSystem
        | Driver::MalformedResponse
        | Driver::TaskFailed
        | Driver::StateNotReached
        | Driver::Completion
        | Driver::SessionRejected
        | Driver::PowerFault => ErrorCategory::Bmc,
    }
}

/// The kinds of failure, each with the Event reason it is reported under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCategory {
    /// A BMC could not be reached, was busy or answered an error.
    Bmc,
    /// A BMC refused the credentials (retrying would only lock the account).
    BmcCredentials,
    /// The API server refused a call for want of a grant (403): the controller's RBAC
    /// lacks a verb, or an admission policy denied it. Nothing moves until it is granted.
    Forbidden,
    /// A Kubernetes API call failed.
    Api,
    /// An object is unusable as it stands.
    InvalidObject,
    /// What a step rested on changed under it.
    Changed,
    /// This replica is not (or no longer) the leader.
    Leadership,
    /// A test or lab hook abandoned the pass.
    Abandoned,
    /// Something local: a file, a socket, a rendering.
    Local,
    /// A Cluster API workload cluster cannot be reached.
    WorkloadCluster,
}

impl ErrorCategory {
    /// Every category, in declaration order.
    pub const ALL: [ErrorCategory; 10] = [
        ErrorCategory::Bmc,
        ErrorCategory::BmcCredentials,
        ErrorCategory::Forbidden,
        ErrorCategory::Api,
        ErrorCategory::InvalidObject,
        ErrorCategory::Changed,
        ErrorCategory::Leadership,
        ErrorCategory::Abandoned,
        ErrorCategory::Local,
        ErrorCategory::WorkloadCluster,
    ];

    /// The reason of the Warning Event a failure of this kind is reported under.
    pub fn event_reason(self) -> crate::api::EventReason {
        use crate::api::EventReason;
        match self {
            ErrorCategory::Bmc => EventReason::BmcError,
            ErrorCategory::BmcCredentials => EventReason::BmcCredentialsRefused,
            ErrorCategory::Forbidden => EventReason::Forbidden,
            ErrorCategory::Api => EventReason::ApiError,
            ErrorCategory::InvalidObject => EventReason::InvalidObject,
            ErrorCategory::Changed => EventReason::StateChanged,
            ErrorCategory::Leadership => EventReason::NotLeader,
            ErrorCategory::Abandoned => EventReason::Abandoned,
            ErrorCategory::Local => EventReason::LocalError,
            ErrorCategory::WorkloadCluster => EventReason::WorkloadClusterUnreachable,
        }
    }

    /// Whether a failed pass of this kind is told in an Event on its subject: what an
    /// operator must act on (a grant, an object, a BMC, its credentials, the API server).
    /// A step that found the world changed, a replica that is not the leader and a test's
    /// hook are the controller's own business: they are logged only.
    pub fn operator_should_see(self) -> bool {
        match self {
            ErrorCategory::Bmc
            | ErrorCategory::BmcCredentials
            | ErrorCategory::Forbidden
            | ErrorCategory::Api
            | ErrorCategory::InvalidObject
            | ErrorCategory::Local
            | ErrorCategory::WorkloadCluster => true,
            ErrorCategory::Changed | ErrorCategory::Leadership | ErrorCategory::Abandoned => false,
        }
    }
}

/// Result alias of the `baremend` crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_failure_is_one_kind_apart_from_the_controllers_and_reads_as_before() {
        let local: Error = LocalError::MissingPassword.into();
        assert_eq!(local.category(), ErrorCategory::Local);
        assert!(!local.is_transient());
        // Transparent: the command line prints what it printed before the split.
        assert_eq!(
            local.to_string(),
            "no BMC password: give --password-file FILE or set BMC_PASSWORD"
        );
        let written: Error = LocalError::HostFile("h: x".into()).into();
        assert_eq!(written.to_string(), "host-file: h: x");
        assert!(matches!(written, Error::Local(LocalError::HostFile(_))));
    }

    #[test]
    fn every_category_is_told_under_a_reason_of_its_own() {
        // Exhaustive: a category added to the enum stops the build here, to be added to ALL.
        for category in ErrorCategory::ALL {
            match category {
                ErrorCategory::Bmc
                | ErrorCategory::BmcCredentials
                | ErrorCategory::Forbidden
                | ErrorCategory::Api
                | ErrorCategory::InvalidObject
                | ErrorCategory::Changed
                | ErrorCategory::Leadership
                | ErrorCategory::Abandoned
                | ErrorCategory::Local
                | ErrorCategory::WorkloadCluster => {}
            }
        }
        let reasons: Vec<&str> = ErrorCategory::ALL
            .iter()
            .map(|c| c.event_reason().as_str())
            .collect();
        let mut distinct = reasons.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), reasons.len(), "{reasons:?}");
        assert_eq!(
            reasons,
            [
                "BmcError",
                "BmcCredentialsRefused",
                "Forbidden",
                "ApiError",
                "InvalidObject",
                "StateChanged",
                "NotLeader",
                "Abandoned",
                "LocalError",
                "WorkloadClusterUnreachable",
            ]
        );
    }

    #[test]
    fn a_refused_password_is_its_own_kind_and_every_other_bmc_failure_is_a_bmc_error() {
        use baremend_drivers::DriverErrorCategory;
        for driver in DriverErrorCategory::ALL {
            let expected = if driver == DriverErrorCategory::Authentication {
                ErrorCategory::BmcCredentials
            } else {
                ErrorCategory::Bmc
            };
            assert_eq!(bmc_category(driver), expected, "{driver}");
        }
        let refused = Error::Driver(baremend_drivers::Error::Authentication {
            bmc: "redfish://bmc".into(),
            detail: "401".into(),
        });
        assert_eq!(
            refused.category().event_reason().as_str(),
            "BmcCredentialsRefused"
        );
        let busy = Error::Driver(baremend_drivers::Error::Busy {
            bmc: "redfish://bmc".into(),
            detail: "503".into(),
            retry_after: None,
        });
        assert_eq!(busy.category().event_reason().as_str(), "BmcError");
        assert!(busy.is_transient() && !refused.is_transient());
    }

    #[test]
    fn every_bmc_error_label_is_in_the_metrics_reference() {
        // The `outcome` of baremend_bmc_requests_total is the driver's category: the reference
        // lists them all, for a query's author.
        let doc = include_str!("../docs/reference/metrics.md");
        let row = doc
            .lines()
            .find(|l| l.starts_with("| `baremend_bmc_requests_total`"))
            .expect("docs/reference/metrics.md has the row of baremend_bmc_requests_total");
        let missing: Vec<&str> = baremend_drivers::DriverErrorCategory::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|label| !row.contains(&format!("`{label}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "not in the metrics reference: {missing:?}"
        );
    }
}
