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
pub mod bmc;
pub mod drift;
pub mod duration;
pub mod hostfile;
#[cfg(feature = "lab")]
pub mod lab;
pub mod leader;
pub mod metrics;
pub mod remediation;
pub mod run;
pub mod runtime;

use std::path::PathBuf;

/// Errors of the `baremend` crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A BMC operation failed.
    #[error(transparent)]
    Driver(#[from] baremend_drivers::Error),
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
    /// A Kubernetes API call failed.
    #[error("{op}: {source}")]
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

impl Error {
    /// Maps a failed Kubernetes API call of operation `op` (for `map_err`).
    pub fn kube(op: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { op, source }
    }
}

/// Result alias of the `baremend` crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
