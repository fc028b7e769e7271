//! Power-state monitoring: the power of every host the controller knows, read in the
//! background into `baremend_host_power_state`.
//!
//! BMCs are fragile, so the monitor is gentle: each host is read once per interval (default
//! a minute) at a fixed offset within it, spread by a seeded hash so that a fleet is not read
//! all at once; at most [`READS_AT_ONCE`] reads are in flight, and never two to one BMC (the
//! connector's per-endpoint gate, shared with remediations). One login per host is kept
//! between reads. Hosts a BareMetal Operator manages are not read at all: their
//! BareMetalHost's `status.poweredOn` is the operator's own reading, and a second reader would
//! only load the BMC.
//!
//! A host under a remediation keeps its series, since that is when operators look at it: the
//! monitor does not read its BMC (the remediation does, and its reads feed the series, see
//! `Power::read_power`), and a host the operator manages is read from its status as always,
//! the remediation's fresh reads of that status feeding it too (`Power::fresh_host`).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{BmcAddress, CredentialUsed};
use futures_util::StreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::annotations::BMH_DETACHED;
use crate::api::{HostBmc, Remediation, RemediationPhase, slim};
use crate::metrics::power::HostSeries;
use crate::remediation::act::power::{
    bmc_driver_config, bmc_series, driver_kind, operator_power, operator_series,
};
use crate::remediation::decide::bmc_trust::Reader;
use crate::remediation::decide::observe::BmcRef;
use crate::remediation::decide::trust::machineless_claims;
use crate::remediation::decide::trust::trusted_machine_host;
use crate::remediation::evidence::bmc::locate_bmc;
use crate::remediation::pass::context::Context;
use crate::remediation::world::bmc_cache::DriverCache;
use crate::remediation::world::metered::Metered;

/// BMC reads in flight at once, over all BMCs.
pub const READS_AT_ONCE: usize = 8;

/// How the monitor reads a host's power.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// The BareMetal Operator's reading (`status.poweredOn`) of this host, from the cache
    /// when it is read (not when the turn began): no BMC request.
    OperatorStatus(ObjectRef<slim::BareMetalHost>),
    /// The BMC, directly.
    Bmc(BmcRef),
}

/// One host to look at.
#[derive(Debug, Clone)]
struct Target {
    key: String,
    namespace: String,
    series: HostSeries,
    source: Source,
    /// Under a remediation: its BMC is the remediation's to read.
    remediating: bool,
}

impl Target {
    /// Whether the monitor reads it now.
    fn read_here(&self) -> bool {
        !(self.remediating && matches!(self.source, Source::Bmc { .. }))
    }
}

/// The Machines (`namespace`, `name`) whose remediation is past its start and not ended:
/// their BMC is the remediation's to read.
pub(in crate::remediation) fn under_remediation(
    remediations: &[Arc<Remediation>],
) -> HashSet<(String, String)> {
    remediations
        .iter()
        .filter(|r| {
            let phase = r.phase();
            phase != RemediationPhase::Pending && !phase.is_terminal()
        })
        .filter_map(|r| Some((r.namespace()?, r.spec.subject_name().to_string())))
        .collect()
}

/// The hosts to look at now, from the caches.
fn targets(context: &Context) -> Vec<Target> {
    let remediating = under_remediation(&context.caches.remediations.state());
    let host_bmcs = context.caches.host_bmcs.state();
    // A HostBmc outside these namespaces is never logged in for (see `locate_bmc`).
    let trusted = context.policy().trust.host_bmc_namespaces;
    // Nor for a Machine's BareMetalHost outside these (see `trusted_machine_host`).
    let trusted_hosts = context.policy().trust.machine_host_namespaces;
    let mut targets = Vec::new();
    for machine in context.caches.machines.state() {
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let under_remediation = remediating.contains(&(namespace.clone(), name.clone()));
        let node = machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .map(|n| n.name.clone());
        let host_ref = trusted_machine_host(&machine, &namespace, &trusted_hosts)
            .ok()
            .flatten();
        let host = host_ref.as_ref().and_then(|r| {
            context
                .caches
                .hosts
                .get(&ObjectRef::new(&r.name).within(&r.namespace))
        });
        let direct = locate_bmc(
            &host_bmcs,
            &trusted,
            (&namespace, &name, node.as_deref()),
            host_ref.as_ref().map(|r| (r, host.as_deref())),
        );
        let target = match (direct, &host_ref, &host) {
            (Ok(bmc), _, _) => {
                let Ok(address) = BmcAddress::parse(&bmc.address) else {
                    continue;
                };
                Target {
                    key: format!("{namespace}/{name}"),
                    namespace: namespace.clone(),
                    series: bmc_series(format!("{namespace}/{name}"), node.clone(), &address),
                    source: Source::Bmc(bmc),
                    remediating: under_remediation,
                }
            }
            (Err(_), Some(host_ref), Some(host))
                if !host.annotations().contains_key(BMH_DETACHED) =>
            {
                Target {
                    key: format!("{namespace}/{name}"),
                    namespace: namespace.clone(),
                    series: operator_series(format!("{namespace}/{name}"), node.clone(), host_ref),
                    source: Source::OperatorStatus(
                        ObjectRef::new(&host_ref.name).within(&host_ref.namespace),
                    ),
                    remediating: under_remediation,
                }
            }
            _ => continue,
        };
        targets.push(target);
    }
    targets.extend(machineless_targets(context, &host_bmcs, &remediating));
    targets
}

/// The hosts of Nodes without a Machine, each through the `HostBmc` that is its subject.
fn machineless_targets(
    context: &Context,
    host_bmcs: &[Arc<HostBmc>],
    remediating: &HashSet<(String, String)>,
) -> Vec<Target> {
    let machine_nodes = context.local_machine_nodes();
    let mut targets = Vec::new();
    for (node, mapping) in machineless_claims(
        host_bmcs,
        &context.policy().trust.host_bmc_namespaces,
        &machine_nodes,
    )
    .subjects
    {
        let namespace = mapping.namespace().unwrap_or_default();
        let Ok(bmc) = locate_bmc(
            std::slice::from_ref(mapping),
            &context.policy().trust.host_bmc_namespaces,
            (&namespace, &node, Some(&node)),
            None,
        ) else {
            continue;
        };
        let Ok(address) = BmcAddress::parse(&bmc.address) else {
            continue;
        };
        targets.push(Target {
            key: format!("{namespace}/Node/{node}"),
            series: bmc_series(String::new(), Some(node.clone()), &address),
            remediating: remediating.contains(&(namespace.clone(), node)),
            namespace,
            source: Source::Bmc(bmc),
        });
    }
    targets
}

/// Where in the interval a host is read: fixed for a host and seed, spread over the fleet.
pub(in crate::remediation) fn offset(seed: u64, key: &str, interval: Duration) -> Duration {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    seed.hash(&mut hasher);
    key.hash(&mut hasher);
    let fraction = (hasher.finish() % 10_000) as f64 / 10_000.0;
    interval.mul_f64(fraction)
}

/// Reads every known host's power every `interval` until the task is dropped. `seed` spreads
/// the reads (give replicas or tests their own).
pub async fn run(context: Arc<Context>, interval: Duration, seed: u64) {
    let drivers = DriverCache::default();
    // Which BMC each cached login was made for: a changed mapping needs a new login.
    let mut logged_in: HashMap<String, BmcRef> = HashMap::new();
    let mut shown: HashSet<HostSeries> = HashSet::new();
    loop {
        let started = tokio::time::Instant::now();
        if context.caches_ready() {
            let mut targets = targets(&context);
            // Series of hosts under remediation stay; only the monitor's reads pause.
            let now: HashSet<HostSeries> = targets.iter().map(|t| t.series.clone()).collect();
            for gone in shown.difference(&now) {
                context.metrics.power.forget_host(gone);
            }
            targets.retain(Target::read_here);
            let keys: HashSet<&str> = targets.iter().map(|t| t.key.as_str()).collect();
            for key in logged_in.keys().filter(|k| !keys.contains(k.as_str())) {
                drivers.release(key);
            }
            logged_in.retain(|k, _| keys.contains(k.as_str()));
            shown = now;
            let fresh: Vec<(Target, bool)> = targets
                .into_iter()
                .map(|t| {
                    let relogin = match &t.source {
                        Source::Bmc(bmc) => logged_in.get(&t.key) != Some(bmc),
                        Source::OperatorStatus(_) => false,
                    };
                    (t, relogin)
                })
                .collect();
            let outcomes: Vec<(String, Option<BmcRef>)> = futures_util::stream::iter(fresh)
                .map(|(target, relogin)| {
                    let context = context.clone();
                    let drivers = &drivers;
                    async move {
                        let wait =
                            offset(seed, &target.key, interval).saturating_sub(started.elapsed());
                        tokio::time::sleep(wait).await;
                        let used = read(&context, drivers, &target, relogin).await;
                        (target.key, used)
                    }
                })
                .buffer_unordered(READS_AT_ONCE)
                .collect()
                .await;
            for (key, used) in outcomes {
                match used {
                    Some(bmc) => {
                        logged_in.insert(key, bmc);
                    }
                    None => {
                        logged_in.remove(&key);
                    }
                }
            }
        }
        let rest = interval.saturating_sub(started.elapsed());
        tokio::time::sleep(rest.max(Duration::from_millis(200))).await;
    }
}

/// Reads one host and records it; returns the BMC it is logged in to (None: no login kept).
async fn read(
    context: &Context,
    drivers: &DriverCache,
    target: &Target,
    relogin: bool,
) -> Option<BmcRef> {
    let metrics = &context.metrics.power;
    let bmc = match &target.source {
        Source::OperatorStatus(host) => {
            let powered_on = context
                .caches
                .hosts
                .get(host)
                .and_then(|h| h.status.as_ref().and_then(|s| s.powered_on));
            metrics.set_host_power(&target.series, operator_power(powered_on));
            return None;
        }
        Source::Bmc(bmc) => bmc,
    };
    let driver = match connect(context, drivers, target, bmc, relogin).await {
        Ok(driver) => driver,
        Err(error) => {
            tracing::debug!(machine = %target.key, %error, "cannot read the host's power");
            metrics.set_host_power(&target.series, None);
            return None;
        }
    };
    match driver.power_state().await {
        Ok(state) => {
            metrics.set_host_power(&target.series, Some(state));
            metrics.set_credential_used(&target.series, driver.credential_used());
            if driver.credential_used() == Some(CredentialUsed::Previous) {
                tracing::warn!(
                    machine = %target.key,
                    secret = %bmc.credentials_name,
                    "the BMC accepts only the previous password of its Secret"
                );
            }
            Some(bmc.clone())
        }
        Err(error) => {
            tracing::debug!(machine = %target.key, %error, "cannot read the host's power");
            metrics.set_host_power(&target.series, None);
            // A refused login may mean new credentials: read the Secret again next time.
            drivers.release(&target.key);
            None
        }
    }
}

async fn connect(
    context: &Context,
    drivers: &DriverCache,
    target: &Target,
    bmc: &BmcRef,
    relogin: bool,
) -> crate::Result<Arc<dyn baremend_drivers::PowerDriver>> {
    let address = BmcAddress::parse(&bmc.address)?;
    let kind = driver_kind(&address);
    // Every reading is evidence for every reader of this BMC (see `bmc_trust`).
    let witnessed = |driver| {
        let driver = Metered::wrap(driver, kind, context.metrics.power.clone());
        context
            .witness
            .wrap(driver, address.to_string(), Reader::Monitor)
    };
    if !relogin && let Some(driver) = drivers.get(&target.key) {
        return Ok(witnessed(driver));
    }
    let allow_insecure = context.policy().allow_insecure_bmc;
    let config = bmc_driver_config(
        &context.clients.kube,
        &target.namespace,
        bmc,
        allow_insecure,
    )
    .await
    .map_err(|reason| crate::Error::Invalid {
        object: format!("the BMC of Machine {}", target.key),
        reason,
    })?;
    let driver = drivers.get_or_connect(&target.key, config, &context.clients.connector)?;
    Ok(witnessed(driver))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_stay_within_the_interval_and_spread_the_fleet() {
        let interval = Duration::from_secs(60);
        let offsets: Vec<Duration> = (0..1000)
            .map(|i| offset(7, &format!("ns/worker-{i}"), interval))
            .collect();
        assert!(offsets.iter().all(|o| *o < interval));
        // Every tenth of the interval gets some hosts: not all read at once.
        for tenth in 0..10 {
            let low = interval.mul_f64(f64::from(tenth) / 10.0);
            let high = interval.mul_f64(f64::from(tenth + 1) / 10.0);
            let count = offsets.iter().filter(|o| **o >= low && **o < high).count();
            assert!((50..=150).contains(&count), "tenth {tenth}: {count}");
        }
        assert_eq!(
            offset(7, "ns/a", interval),
            offset(7, "ns/a", interval),
            "fixed for a host and seed"
        );
    }
}
