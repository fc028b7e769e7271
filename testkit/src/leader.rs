//! Controller replicas under leader election, in tasks, against a lab (as deploy/'s
//! ServiceAccount): the Lease of each and who holds it.

use std::sync::Arc;
use std::time::Duration;

use baremend::api::slim::MachineApi;
use baremend::lab::setup::DEPLOY_NAMESPACE;
use baremend::leader::LeaseConfig;
use baremend::metrics::Metrics;
use baremend::remediation::controller::ControllerOptions;
use baremend::run::run_elected;
use baremend::runtime::SystemClock;
use baremend_sim::cluster::local::{LEASES, Local};
use kube::Client;
use serde_json::Value;
use tokio::task::JoinHandle;

/// The lease duration of these replicas.
pub const LEASE: Duration = Duration::from_secs(3);
/// Their renew deadline.
pub const RENEW: Duration = Duration::from_secs(2);
/// Their retry period.
pub const RETRY: Duration = Duration::from_millis(300);

/// The Lease `name` for the replica `identity`, at test speed.
pub fn lease(name: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        // Where deploy/base/rbac.yaml grants the controller its Leases.
        namespace: DEPLOY_NAMESPACE.into(),
        name: name.into(),
        identity: identity.into(),
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
    }
}

/// A replica in a task, of the shard `selector` (all Machines when None), reporting into
/// `metrics`; aborting the task is a crash (no release, nothing flushed).
pub fn replica(
    client: &Client,
    lease: LeaseConfig,
    selector: Option<&str>,
    metrics: Arc<Metrics>,
) -> JoinHandle<baremend::Result<()>> {
    replica_on(client, lease, MachineApi::default(), selector, metrics)
}

/// [`replica`] on the Machines of `machine_api`.
pub fn replica_on(
    client: &Client,
    lease: LeaseConfig,
    machine_api: MachineApi,
    selector: Option<&str>,
    metrics: Arc<Metrics>,
) -> JoinHandle<baremend::Result<()>> {
    let options = ControllerOptions {
        instance: lease.identity.clone(),
        poll: Duration::from_millis(100),
        metrics,
        machine_api,
        machine_selector: selector.map(str::to_string),
        ..ControllerOptions::default()
    };
    tokio::spawn(run_elected(
        client.clone(),
        Arc::new(SystemClock),
        options,
        lease,
        std::future::pending(),
    ))
}

/// The holder of the Lease `name`, if it has one.
pub fn holder(api: &Local, name: &str) -> Option<String> {
    api.get(LEASES, DEPLOY_NAMESPACE, name)
        .ok()?
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}
