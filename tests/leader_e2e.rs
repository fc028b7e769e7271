//! High availability end to end: two controller replicas elect a leader on a Lease; the
//! leader is killed in the middle of a remediation and the standby finishes it; a replica
//! whose Lease is taken stops acting; two shards split the Machines by label.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend::api::{Remediation, RemediationPhase};
use baremend::leader::LeaseConfig;
use baremend::metrics::Metrics;
use baremend::remediation::controller::{ControllerOptions, run_elected};
use baremend::runtime::SystemClock;
use baremend_sim::cluster::local::{LEASES, Local, MACHINES, NODES};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use baremend_sim::host::Power;
use kube::Client;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

mod common;

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(2);
const RETRY: Duration = Duration::from_millis(300);

fn fast() -> ClusterSpec {
    ClusterSpec {
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

fn lease(name: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        namespace: MACHINE_NAMESPACE.into(),
        name: name.into(),
        identity: identity.into(),
        lease_duration: LEASE,
        renew_deadline: RENEW,
        retry_period: RETRY,
    }
}

/// A replica in a task; aborting the task is a crash (no release, nothing flushed).
fn replica(
    client: &Client,
    lease: LeaseConfig,
    selector: Option<&str>,
) -> JoinHandle<baremend::Result<()>> {
    let client = client.clone();
    let options = ControllerOptions {
        instance: lease.identity.clone(),
        poll: Duration::from_millis(100),
        metrics: Arc::new(Metrics::new()),
        machine_selector: selector.map(str::to_string),
        ..ControllerOptions::default()
    };
    tokio::spawn(run_elected(
        client,
        Arc::new(SystemClock),
        options,
        lease,
        std::future::pending(),
    ))
}

fn holder(api: &Local, name: &str) -> Option<String> {
    api.get(LEASES, MACHINE_NAMESPACE, name)
        .ok()?
        .pointer("/spec/holderIdentity")
        .and_then(Value::as_str)
        .map(str::to_string)
}

async fn wait_for<T>(timeout: Duration, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn remediation(api: &Local, name: &str) -> Option<Remediation> {
    let value = api
        .get(
            baremend_sim::cluster::local::Gvr {
                group: "baremend.io",
                version: "v1alpha1",
                plural: "remediations",
            },
            MACHINE_NAMESPACE,
            name,
        )
        .ok()?;
    serde_json::from_value(value).ok()
}

fn phase(api: &Local, name: &str) -> Option<RemediationPhase> {
    remediation(api, name)?.status.map(|s| s.phase)
}

fn steps(api: &Local, name: &str) -> Vec<String> {
    remediation(api, name)
        .and_then(|r| r.status)
        .map(|s| s.steps.into_iter().map(|t| t.step).collect())
        .unwrap_or_default()
}

fn node_uid(api: &Local, node: &str) -> Option<String> {
    api.get(NODES, "", node)
        .ok()?
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_a_killed_leader_within_the_lease_and_repeats_no_step() {
    let prepared = common::cluster::prepare(
        fast(),
        json!({"strategies": ["BareMetalHostRebootApi"], "timeouts": {"readyGraceSeconds": 0}}),
    )
    .await;
    let api = prepared.api.clone();
    let mut a = Some(replica(&prepared.client, lease("baremend", "a"), None));
    let mut b = Some(replica(&prepared.client, lease("baremend", "b"), None));
    let first = wait_for(Duration::from_secs(10), "a leader", || {
        holder(&api, "baremend")
    })
    .await;
    // The standby stays a standby while the leader renews.
    tokio::time::sleep(LEASE + RETRY).await;
    assert_eq!(holder(&api, "baremend").as_deref(), Some(first.as_str()));

    let node_before = node_uid(&api, "worker-0").unwrap();
    common::cluster::trigger(&api, "worker-0");
    wait_for(Duration::from_secs(30), "the fence", || {
        steps(&api, "worker-0-1")
            .contains(&"Fenced".to_string())
            .then_some(())
    })
    .await;
    let (leader, standby) = if first == "a" {
        (a.take().unwrap(), b.take().unwrap())
    } else {
        (b.take().unwrap(), a.take().unwrap())
    };
    leader.abort();
    let killed = Instant::now();
    let second = wait_for(Duration::from_secs(15), "a new leader", || {
        holder(&api, "baremend").filter(|h| *h != first)
    })
    .await;
    let took = killed.elapsed();
    assert!(
        took <= LEASE + RETRY.mul_f64(1.2) + Duration::from_millis(500),
        "the standby took over after {took:?}, lease {LEASE:?}"
    );
    assert_ne!(second, first);

    wait_for(Duration::from_secs(60), "success", || {
        (phase(&api, "worker-0-1") == Some(RemediationPhase::Succeeded)).then_some(())
    })
    .await;
    common::cluster::assert_each_step_once(&steps(&api, "worker-0-1"));
    let history: Vec<Power> = prepared
        .cluster
        .host("worker-0")
        .unwrap()
        .host
        .history()
        .into_iter()
        .map(|c| c.power)
        .collect();
    assert_eq!(history, vec![Power::Off, Power::On], "one power cycle only");
    assert_ne!(node_uid(&api, "worker-0"), Some(node_before));
    standby.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_stops_acting_and_says_so() {
    let prepared = common::cluster::prepare(fast(), json!({})).await;
    let api = prepared.api.clone();
    let a = replica(&prepared.client, lease("baremend", "a"), None);
    wait_for(Duration::from_secs(10), "a leader", || {
        holder(&api, "baremend").filter(|h| h == "a")
    })
    .await;
    // Another writer takes the Lease over (what a partitioned leader would find).
    api.merge(
        LEASES,
        MACHINE_NAMESPACE,
        "baremend",
        &json!({"spec": {"holderIdentity": "intruder"}}),
        false,
    )
    .unwrap();
    let result = tokio::time::timeout(RENEW + Duration::from_secs(2), a)
        .await
        .expect("the replica kept running after losing its Lease")
        .unwrap();
    assert!(
        matches!(result, Err(baremend::Error::LeadershipLost(_))),
        "{result:?}"
    );
    assert_eq!(holder(&api, "baremend").as_deref(), Some("intruder"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_each_remediate_only_their_machines_under_their_own_lease() {
    // Gates count within a shard: one unhealthy Machine of shard b's two is 50 %.
    let policy =
        json!({"timeouts": {"readyGraceSeconds": 0}, "storm": {"maxUnhealthyPercent": 50}});
    let prepared = common::cluster::prepare(fast(), policy).await;
    let api = prepared.api.clone();
    // The control plane all in one shard, so one quorum guard sees all of it.
    for (machine, shard) in [
        ("master-0", "a"),
        ("master-1", "a"),
        ("master-2", "a"),
        ("worker-0", "a"),
        ("worker-1", "b"),
        ("worker-2", "b"),
    ] {
        api.merge(
            MACHINES,
            MACHINE_NAMESPACE,
            machine,
            &json!({"metadata": {"labels": {"baremend.io/shard": shard}}}),
            false,
        )
        .unwrap();
    }
    let shard_a = replica(
        &prepared.client,
        lease("baremend-a", "a-1"),
        Some("baremend.io/shard=a"),
    );
    common::cluster::trigger(&api, "worker-0");
    common::cluster::trigger(&api, "worker-1");
    wait_for(Duration::from_secs(60), "shard a's remediation", || {
        (phase(&api, "worker-0-1") == Some(RemediationPhase::Succeeded)).then_some(())
    })
    .await;
    assert!(
        remediation(&api, "worker-1-1").is_none(),
        "shard a acted on shard b's Machine"
    );
    let shard_b = replica(
        &prepared.client,
        lease("baremend-b", "b-1"),
        Some("baremend.io/shard=b"),
    );
    wait_for(Duration::from_secs(60), "shard b's remediation", || {
        (phase(&api, "worker-1-1") == Some(RemediationPhase::Succeeded)).then_some(())
    })
    .await;
    assert_eq!(holder(&api, "baremend-a").as_deref(), Some("a-1"));
    assert_eq!(holder(&api, "baremend-b").as_deref(), Some("b-1"));
    shard_a.abort();
    shard_b.abort();
}
