//! The Kubernetes objects baremend reads and writes: the types live in `baremend-core`
//! ([`baremend_core::api`]); this module adds what needs the controller crate (rendering the
//! CRDs for `baremend crds`).

mod crds;

pub use baremend_core::api::*;
pub use crds::{CrdsArgs, all_crds, render_crds, run as run_crds};
