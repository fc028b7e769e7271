//! Shards that cannot overlap, end to end against the simulated cluster with deploy/'s RBAC:
//! shards with disjoint `--machine-selector`s both act, each labelling its Remediations; a
//! shard whose selector overlaps one started before it is refused at start (a real `baremend
//! run` process: the error names both shards, both selectors and a Machine both claim); an
//! unsharded replica beside a shard is refused, and so is a replica without leader election
//! whose selector overlaps a shard's; a shard that finds, while acting, an
//! overlapping claim made before its own stops acting and gives its Lease up.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use baremend::api::RemediationPhase;
use baremend::api::slim::MachineApi;
use baremend::lab::setup::DEPLOY_NAMESPACE;
use baremend::metrics::Metrics;
use baremend::shard::{MACHINE_SELECTOR_ANNOTATION, SHARD_LABEL, SHARD_LEASE_LABEL};
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{BMHS, LEASES, Local, MACHINES};
use serde_json::json;
use tokio::task::JoinHandle;

use baremend_testkit as common;

use baremend_sim::cluster::ClusterSpec;
use common::eventually;
use common::lab::{Lab, fast, warning_in};
use common::leader::{LEASE, holder, lease, replica, replica_on};

/// A replica of the shard `selector` (Lease `name`, replica `identity`), once it holds its
/// Lease.
async fn leading_shard(
    lab: &Lab,
    (name, identity): (&str, &str),
    selector: Option<&str>,
    metrics: Arc<Metrics>,
) -> JoinHandle<baremend::Result<()>> {
    let task = replica(
        &lab.controller_client,
        lease(name, identity),
        selector,
        metrics,
    );
    eventually(name, Duration::from_secs(15), async || {
        holder(&lab.api, name)
    })
    .await;
    task
}

/// `baremend run` of the shard `selector` (Lease `lease`) as a user starts it, as deploy/'s
/// ServiceAccount, at test speed.
fn shard_command(lab: &Lab, lease: &str, selector: &str) -> tokio::process::Command {
    let kubeconfig = common::scratch("shard-run").join("kubeconfig");
    std::fs::write(&kubeconfig, &lab.controller_kubeconfig).unwrap();
    let port = || format!("127.0.0.1:{}", common::free_port());
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"));
    command
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--lease-name", lease, "--machine-selector", selector])
        .args(["--lease-namespace", DEPLOY_NAMESPACE])
        .args(["--instance", &format!("{lease}-pod")])
        .args(["--lease-duration", "3s", "--renew-deadline", "2s"])
        .args(["--retry-period", "300ms", "--drift=false"])
        .args(["--metrics-secure=false", "--power-poll", "0s"])
        .args(["--metrics-listen", &port(), "--probe-listen", &port()])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Labels the lab's Machines: the control plane in zone c, worker-0 in zone a, the other
/// workers in zone b.
fn label_machines(api: &Local) {
    for (machine, labels) in [
        ("master-0", json!({"role": "master", "zone": "c"})),
        ("master-1", json!({"role": "master", "zone": "c"})),
        ("master-2", json!({"role": "master", "zone": "c"})),
        ("worker-0", json!({"role": "worker", "zone": "a"})),
        ("worker-1", json!({"role": "worker", "zone": "b"})),
        ("worker-2", json!({"role": "worker", "zone": "b"})),
    ] {
        api.merge(
            MACHINES,
            MACHINE_NAMESPACE,
            machine,
            &json!({"metadata": {"labels": labels}}),
            false,
        )
        .unwrap();
    }
}

/// A lab with labelled Machines, whose gates let one Machine of a shard's few be remediated.
async fn sharded_lab() -> Lab {
    let policy =
        json!({"timeouts": {"readyGraceSeconds": 0}, "storm": {"maxUnhealthyPercent": 50}});
    let lab = Lab::builder(fast()).policy(policy).start().await;
    label_machines(&lab.api);
    lab
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_with_disjoint_selectors_both_act_and_label_their_remediations() {
    let lab = sharded_lab().await;
    let (metrics_a, metrics_b) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
    // Zone a and the control plane (one quorum guard sees all of it), and zone b.
    let a = leading_shard(
        &lab,
        ("shard-a", "a-1"),
        Some("zone in (a,c)"),
        metrics_a.clone(),
    )
    .await;
    let b = leading_shard(&lab, ("shard-b", "b-1"), Some("zone=b"), metrics_b.clone()).await;
    // Each Lease announces its claim.
    let announced = lab.api.get(LEASES, DEPLOY_NAMESPACE, "shard-a").unwrap();
    assert_eq!(announced["metadata"]["labels"][SHARD_LEASE_LABEL], "true");
    assert_eq!(
        announced["metadata"]["annotations"][MACHINE_SELECTOR_ANNOTATION],
        "zone in (a,c)"
    );
    lab.trigger("worker-0", true);
    lab.trigger("worker-1", true);
    let first = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    let second = lab.reach("worker-1-1", RemediationPhase::Succeeded).await;
    assert_eq!(first.metadata.labels.unwrap()[SHARD_LABEL], "shard-a");
    assert_eq!(second.metadata.labels.unwrap()[SHARD_LABEL], "shard-b");
    // Both still act, and neither saw an overlap.
    assert!(!a.is_finished() && !b.is_finished());
    for metrics in [&metrics_a, &metrics_b] {
        let text = metrics.encode();
        assert!(text.contains("baremend_shard_overlap 0"), "{text}");
    }
    a.abort();
    b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_overlapping_an_earlier_one_is_refused_at_start_naming_both_and_a_machine() {
    let lab = sharded_lab().await;
    let api = lab.api.clone();
    let workers = leading_shard(
        &lab,
        ("shard-workers", "workers-1"),
        Some("role=worker"),
        Arc::new(Metrics::new()),
    )
    .await;

    // Zone a's only Machine, worker-0, is a worker.
    let run = shard_command(&lab, "shard-zone-a", "zone=a").output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("a refused shard exits within a minute")
        .expect("baremend runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the overlapping shard ran: {stderr}"
    );
    for part in [
        "shard-zone-a",
        "\"zone=a\"",
        "shard-workers",
        "\"role=worker\"",
        "both claim Machine openshift-machine-api/worker-0",
        "shard-workers took its Lease first and acts, shard-zone-a does not",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
    // Told where a user looks at the shard, and its claim given up.
    let lease = ("Lease", "shard-zone-a");
    warning_in(&lab, DEPLOY_NAMESPACE, lease, "ShardOverlap", "worker-0").await;
    assert_eq!(holder(&api, "shard-zone-a"), None);

    // The first shard goes on acting on the Machine both claimed.
    lab.trigger("worker-0", true);
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    assert_eq!(done.metadata.labels.unwrap()[SHARD_LABEL], "shard-workers");
    assert!(!workers.is_finished());

    // A shard of zone c (the control plane, no worker) does not overlap: it starts and runs.
    let mut zone_c = shard_command(&lab, "shard-zone-c", "zone=c")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let leads = async || holder(&api, "shard-zone-c");
    eventually("the disjoint shard leads", Duration::from_secs(15), leads).await;
    // Past two checks of each shard: both still run.
    tokio::time::sleep(LEASE * 2 + Duration::from_secs(1)).await;
    assert!(
        zone_c.try_wait().unwrap().is_none(),
        "the disjoint shard exited"
    );
    assert!(!workers.is_finished());
    zone_c.kill().await.unwrap();
    workers.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsharded_replica_or_one_without_election_beside_a_shard_is_refused() {
    let lab = sharded_lab().await;
    let zone_b = leading_shard(
        &lab,
        ("shard-b", "b-1"),
        Some("zone=b"),
        Arc::new(Metrics::new()),
    )
    .await;
    // deploy/'s default: no selector, Lease `baremend`.
    let metrics = Arc::new(Metrics::new());
    let unsharded = replica(
        &lab.controller_client,
        lease("baremend", "all-1"),
        None,
        metrics.clone(),
    );
    let result = tokio::time::timeout(Duration::from_secs(30), unsharded)
        .await
        .expect("the unsharded replica was not refused")
        .unwrap();
    let error = result.expect_err("the unsharded replica ran beside a shard");
    let text = error.to_string();
    for part in [
        "Lease baremend (no --machine-selector: every Machine)",
        "Lease shard-b (--machine-selector \"zone=b\")",
        "one of them claims every Machine",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    assert!(metrics.encode().contains("baremend_shard_overlap 1"));
    assert_eq!(
        holder(&lab.api, "baremend"),
        None,
        "the refused claim stays"
    );

    // A replica without election announces nothing: it runs only where no shard overlaps it,
    // as if it had started last.
    let run = shard_command(&lab, "unused", "zone=b")
        .arg("--leader-elect=false")
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("a refused replica exits within a minute")
        .expect("baremend runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it ran beside shard-b: {stderr}");
    for part in [
        "unused-pod (without leader election)",
        "both claim Machine openshift-machine-api/worker-",
        "shard-b took its Lease first and acts",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
    assert!(!zone_b.is_finished());
    zone_b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_finds_an_earlier_overlapping_claim_while_acting_stops_and_releases() {
    let lab = sharded_lab().await;
    let metrics = Arc::new(Metrics::new());
    let workers = leading_shard(
        &lab,
        ("shard-workers", "workers-1"),
        Some("role=worker"),
        metrics.clone(),
    )
    .await;
    // A claim this shard's check at start did not see (made by a shard whose check raced
    // with it, its clock ahead), acquired a minute before this one's and renewed now.
    let now = k8s_openapi::jiff::Timestamp::now();
    let earlier = now - k8s_openapi::jiff::SignedDuration::from_secs(60);
    let claim = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "shard-zone-a",
            "namespace": DEPLOY_NAMESPACE,
            "labels": {SHARD_LEASE_LABEL: "true"},
            "annotations": {MACHINE_SELECTOR_ANNOTATION: "zone=a"},
        },
        "spec": {
            "holderIdentity": "zone-a-1",
            "leaseDurationSeconds": 15,
            "acquireTime": format!("{earlier:.6}"),
            "renewTime": format!("{now:.6}"),
        },
    });
    lab.api.create(LEASES, DEPLOY_NAMESPACE, claim).unwrap();
    // Within a check period (the lease duration) and a little.
    let result = tokio::time::timeout(LEASE + Duration::from_secs(5), workers)
        .await
        .expect("the shard kept acting beside an earlier overlapping claim")
        .unwrap();
    let text = result.expect_err("it ended without an error").to_string();
    assert!(
        text.contains("both claim Machine openshift-machine-api/worker-0")
            && text.contains("shard-zone-a took its Lease first and acts, shard-workers does not"),
        "{text}"
    );
    let metrics = metrics.encode();
    assert!(metrics.contains("baremend_shard_overlap 1"), "{metrics}");
    assert!(metrics.contains("baremend_leader 0"), "{metrics}");
    assert_eq!(
        holder(&lab.api, "shard-workers"),
        None,
        "its Lease was not given up"
    );
}

/// On Cluster API's Machines (`cluster.x-k8s.io`), with set-based selectors: a shard of the
/// Machines without the control-plane label overlaps one of the workers' MachineDeployment,
/// and one of the control plane does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cluster_api_set_based_selectors_are_judged_by_the_api_server() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    let lab = Lab::builder(spec).start().await;
    let on_capi = |(name, identity): (&str, &str), selector: &str| {
        replica_on(
            &lab.controller_client,
            lease(name, identity),
            MachineApi::ClusterApi,
            Some(selector),
            Arc::new(Metrics::new()),
        )
    };
    let workers = on_capi(
        ("shard-workers", "w-1"),
        "cluster.x-k8s.io/deployment-name in (workers)",
    );
    eventually("the workers' shard", Duration::from_secs(15), async || {
        holder(&lab.api, "shard-workers")
    })
    .await;
    let control_plane = on_capi(("shard-cp", "cp-1"), "cluster.x-k8s.io/control-plane");
    eventually(
        "the control plane's shard",
        Duration::from_secs(15),
        async || holder(&lab.api, "shard-cp"),
    )
    .await;
    let not_control_plane = on_capi(("shard-rest", "r-1"), "!cluster.x-k8s.io/control-plane");
    let result = tokio::time::timeout(Duration::from_secs(30), not_control_plane)
        .await
        .expect("the overlapping shard was not refused")
        .unwrap();
    let text = result
        .expect_err("it ran beside the workers' shard")
        .to_string();
    assert!(
        text.contains("both claim Machine openshift-machine-api/worker-")
            && text.contains("shard-workers took its Lease first and acts, shard-rest does not"),
        "{text}"
    );
    // Past a check of each: the two disjoint shards still run.
    tokio::time::sleep(LEASE + Duration::from_secs(1)).await;
    assert!(!workers.is_finished() && !control_plane.is_finished());
    workers.abort();
    control_plane.abort();
}

/// A remediation under way that another shard made is that shard's: this one neither advances
/// it nor starts another for the Machine (two leaders would act on one host); once it is
/// labelled for this shard, this shard carries it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_leaves_another_shards_remediation_under_way_alone() {
    let mut lab = Lab::builder(fast())
        .policy(common::lab::fast_policy())
        .start()
        .await;
    lab.seed_remediation("worker-0", 1, "Pending", json!({}));
    let label = |shard: &str| json!({"metadata": {"labels": {SHARD_LABEL: shard}}});
    lab.api
        .merge(
            common::lab::REMEDIATIONS,
            MACHINE_NAMESPACE,
            "worker-0-1",
            &label("shard-b"),
            false,
        )
        .unwrap();
    lab.cluster.hang("worker-0");
    lab.trigger("worker-0", true);
    let options = baremend::remediation::controller::ControllerOptions {
        leadership: baremend::leader::Leadership::unconditional().for_shard("shard-a"),
        ..lab.options()
    };
    lab.start_controller(options);
    lab.hold(Duration::from_secs(3)).await;
    let left = lab.remediation("worker-0-1").unwrap();
    let status = left.status.clone().unwrap_or_default();
    assert_eq!(status.phase, RemediationPhase::Pending, "{status:?}");
    assert!(status.steps.is_empty(), "{status:?}");
    assert!(
        lab.remediation("worker-0-2").is_none(),
        "no second remediation"
    );
    assert!(lab.power_history("worker-0").is_empty(), "no power request");
    // Handed over: carried on by this shard.
    lab.api
        .merge(
            common::lab::REMEDIATIONS,
            MACHINE_NAMESPACE,
            "worker-0-1",
            &label("shard-a"),
            false,
        )
        .unwrap();
    eventually(
        "worker-0-1 carried on",
        Duration::from_secs(20),
        async || {
            let steps = lab
                .remediation("worker-0-1")
                .and_then(|r| r.status)
                .map(|s| s.steps.len())
                .unwrap_or(0);
            if steps > 0 {
                Ok(())
            } else {
                Err("no step yet".to_string())
            }
        },
    )
    .await;
}

/// A shard that watches only its own hosts (`--host-selector`, here one no host matches yet)
/// holds the start of a Machine whose host exists outside it: `HostNotWatched`, naming the
/// host and the selector, with no power request (its reboot request could be neither
/// followed nor re-asked, nor its BMC found). Once the host carries the label, as Cluster
/// API's Metal3 provider gives the hosts it consumes their Cluster's, the start goes ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_outside_the_shards_host_selector_holds_the_start_until_it_is_labelled() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    let mut lab = Lab::builder(spec)
        .policy(common::lab::fast_policy())
        .start()
        .await;
    lab.machine_template(json!({}));
    let options = baremend::remediation::controller::ControllerOptions {
        machine_api: MachineApi::ClusterApi,
        host_selector: Some("shard=a".into()),
        ..lab.options()
    };
    lab.start_controller(options);
    lab.cluster.hang("worker-0");
    lab.held_with(
        "worker-0-1",
        "BareMetalHost openshift-machine-api/worker-0 exists but is outside this controller's --host-selector \"shard=a\", so it is not watched",
    )
    .await;
    common::lab::metric(
        &lab,
        "baremend_remediations_held{gate=\"HostNotWatched\"} 1",
    )
    .await;
    assert!(lab.power_history("worker-0").is_empty(), "no power request");
    lab.api
        .merge(
            BMHS,
            MACHINE_NAMESPACE,
            "worker-0",
            &json!({"metadata": {"labels": {"shard": "a"}}}),
            false,
        )
        .unwrap();
    let done = lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    let steps = common::lab::steps(&done);
    assert!(
        steps.contains(&"PowerOffRequested".to_string()),
        "{steps:?}"
    );
}
