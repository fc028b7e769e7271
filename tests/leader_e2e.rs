//! High availability end to end: two controller replicas elect a leader on a Lease; the
//! leader is killed in the middle of a remediation and the standby finishes it; a replica
//! whose Lease is taken stops acting; two shards split the Machines by label.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend::api::RemediationPhase;
use baremend::leader::LeaseConfig;
use baremend::metrics::Metrics;
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{LEASES, Local, MACHINES, NODES};
use baremend_sim::host::Power;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use kube::Client;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use baremend::lab::setup::DEPLOY_NAMESPACE;

use baremend_testkit as common;

use common::eventually;
use common::lab::{Lab, fast};
use common::leader::{LEASE, RENEW, RETRY, holder, lease};

/// A replica of the shard `selector` with metrics of its own.
fn replica(
    client: &Client,
    lease: LeaseConfig,
    selector: Option<&str>,
) -> JoinHandle<baremend::Result<()>> {
    common::leader::replica(client, lease, selector, Arc::new(Metrics::new()))
}

/// The holder and the spec of a Lease, as stored.
fn lease_spec(api: &Local, name: &str) -> Option<(String, LeaseSpec)> {
    let lease = api.get(LEASES, DEPLOY_NAMESPACE, name).ok()?;
    let spec: LeaseSpec = serde_json::from_value(lease.get("spec")?.clone()).ok()?;
    Some((spec.holder_identity.clone()?, spec))
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
    let lab = Lab::builder(fast())
        .policy(
            json!({"strategies": ["BareMetalHostRebootApi"], "timeouts": {"readyGraceSeconds": 0}}),
        )
        .start()
        .await;
    let api = lab.api.clone();
    let mut a = Some(replica(
        &lab.controller_client,
        lease("baremend", "a"),
        None,
    ));
    let mut b = Some(replica(
        &lab.controller_client,
        lease("baremend", "b"),
        None,
    ));
    let first = eventually("a leader", Duration::from_secs(10), async || {
        holder(&api, "baremend")
    })
    .await;
    // The standby stays a standby while the leader renews. A negative: a whole lease and a
    // retry in which the Lease does not change hands; no condition to wait for proves it.
    tokio::time::sleep(LEASE + RETRY).await;
    assert_eq!(holder(&api, "baremend").as_deref(), Some(first.as_str()));

    let node_before = node_uid(&api, "worker-0").unwrap();
    lab.trigger("worker-0", true);
    eventually("the fence", Duration::from_secs(30), async || {
        lab.steps_of("worker-0-1").contains(&"Fenced".to_string())
    })
    .await;
    let (leader, standby) = if first == "a" {
        (a.take().unwrap(), b.take().unwrap())
    } else {
        (b.take().unwrap(), a.take().unwrap())
    };
    leader.abort();
    let killed = Instant::now();
    // The dead leader's last renewal, as its Lease records it (every replica here runs on
    // this machine's clock), then the standby's acquisition.
    let mut last_renewal = None;
    let (second, acquired) = eventually("a new leader", Duration::from_secs(15), async || {
        let (holder, spec) = lease_spec(&api, "baremend")?;
        if holder == first {
            last_renewal = spec.renew_time.map(|t| t.0);
            return None;
        }
        Some((holder, spec.acquire_time.map(|t| t.0)))
    })
    .await;
    let took = killed.elapsed();
    assert_ne!(second, first);
    // Never before the Lease expired: the standby counts a whole lease from when it saw that
    // renewal, which is after it was made; a retry period of slack covers the standby's own
    // request, made after it read the time.
    let (last_renewal, acquired) = (last_renewal.unwrap(), acquired.unwrap());
    let waited = acquired.duration_since(last_renewal);
    assert!(
        waited >= k8s_openapi::jiff::SignedDuration::try_from(LEASE - RETRY).unwrap(),
        "the standby took the Lease {waited:?} after its last renewal, lease {LEASE:?}"
    );
    // And within the lease after the one that expired: a standby that counted a second lease
    // (or never looked again) would miss it, however busy the machine.
    assert!(
        took < LEASE * 2,
        "the standby took over {took:?} after the leader died, lease {LEASE:?}"
    );

    lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    common::lab::assert_each_step_once(&lab.steps_of("worker-0-1"));
    assert_eq!(
        lab.power_history("worker-0"),
        vec![Power::Off, Power::On],
        "one power cycle only"
    );
    assert_ne!(node_uid(&api, "worker-0"), Some(node_before));
    standby.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_stops_acting_and_says_so() {
    let lab = Lab::builder(fast()).start().await;
    let api = lab.api.clone();
    let a = replica(&lab.controller_client, lease("baremend", "a"), None);
    eventually("a leader", Duration::from_secs(10), async || {
        holder(&api, "baremend").filter(|h| h == "a")
    })
    .await;
    // Another writer takes the Lease over (what a partitioned leader would find).
    api.merge(
        LEASES,
        DEPLOY_NAMESPACE,
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
    let lab = Lab::builder(fast()).policy(policy).start().await;
    let api = lab.api.clone();
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
        &lab.controller_client,
        lease("baremend-a", "a-1"),
        Some("baremend.io/shard=a"),
    );
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert!(
        lab.remediation("worker-1-1").is_none(),
        "shard a acted on shard b's Machine"
    );
    let shard_b = replica(
        &lab.controller_client,
        lease("baremend-b", "b-1"),
        Some("baremend.io/shard=b"),
    );
    lab.reach("worker-1-1", RemediationPhase::Succeeded).await;
    assert_eq!(holder(&api, "baremend-a").as_deref(), Some("a-1"));
    assert_eq!(holder(&api, "baremend-b").as_deref(), Some("b-1"));
    shard_a.abort();
    shard_b.abort();
}
