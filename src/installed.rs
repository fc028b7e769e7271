//! Whether baremend's own kinds are installed in a cluster, and what to do when they are not.
//!
//! Without its CustomResourceDefinitions every list baremend makes is a 404 (a real API server
//! answers a group it does not serve with a plain `404 page not found`): `check` would print
//! that raw and `run` would retry it for ever, quietly. Both say instead what is missing and
//! the command that installs it.

use std::time::Duration;

use kube::Client;
use tracing::{error, info};

use crate::{Error, Result};

/// baremend's API group and version.
const GROUP_VERSION: &str = "baremend.io/v1alpha1";

/// What a user reads when baremend's kinds are not served, with the fix.
pub const NOT_INSTALLED: &str = "baremend's CustomResourceDefinitions are not installed in this \
    cluster (it serves no baremend.io/v1alpha1): install them with `kubectl apply -f crds/` from \
    a checkout, or `baremend crds | kubectl apply -f -` (docs/guides/install.md)";

/// Whether the cluster serves baremend's kinds: Ok(false) when the group is not served, an
/// error when the question could not be asked.
pub async fn served(client: &Client) -> Result<bool> {
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(error) => Err(Error::kube("Discover baremend.io")(error)),
    }
}

/// The error `check` gives when the kinds are not served.
pub fn not_installed() -> Error {
    Error::Invalid {
        object: "this cluster".into(),
        reason: NOT_INSTALLED.into(),
    }
}

/// Waits until the cluster serves baremend's kinds, saying what is missing (at `error`) at
/// once and then every `every` while it is not; a discovery that fails otherwise is retried
/// the same way.
pub async fn wait_until_served(client: &Client, every: Duration) {
    let mut told = false;
    loop {
        match served(client).await {
            Ok(true) => {
                if told {
                    info!("baremend's CustomResourceDefinitions are installed: starting");
                }
                return;
            }
            Ok(false) => error!("{NOT_INSTALLED}; waiting for them"),
            Err(e) => {
                error!(error = %e, "cannot tell whether baremend's kinds are served; retrying")
            }
        }
        told = true;
        tokio::time::sleep(every).await;
    }
}
