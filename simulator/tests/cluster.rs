//! The simulated cluster: it comes up, a hung worker is marked by the MachineHealthCheck for
//! external remediation within its timeout, and hosts powered off through the BareMetalHost
//! reboot API come back and re-register after power-on; a platform-none cluster has only Nodes
//! and HostBmcs, and its NodeHealthCheck asks for the remediation of a hung Node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, PowerDriver, PowerOffMode, PowerState,
    TlsOptions,
};
use baremend_sim::Error;
use baremend_sim::cluster::local::{
    BMHS, CRDS, HOST_BMCS, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS, MACHINES,
    MHCS, NODES, SECRETS,
};
use baremend_sim::cluster::nhc::{self, NODE_REMEDIATION_TEMPLATES, NODE_REMEDIATIONS};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{
    ClusterSpec, EXTERNAL_REMEDIATION, MACHINE_NAMESPACE, NHC_NAMESPACE, SimCluster,
};
use baremend_sim::host::Power;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

mod common;

use common::eventually;

fn fast() -> ClusterSpec {
    ClusterSpec {
        timing: Timing::fast(),
        ..ClusterSpec::default()
    }
}

/// How long a negative about a host's power is watched: ten of the BareMetal Operator's
/// periods and two power delays, in which a power change it made would have shown.
fn negative_window(cluster: &SimCluster) -> Duration {
    let timing = &cluster.spec().timing;
    timing.bmo_period * 10 + timing.power_delay * 2
}

fn ready(api: &Local, node: &str) -> Option<String> {
    let node = api.get(NODES, "", node).ok()?;
    node.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["status"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_comes_up_linked_like_openshift() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    assert_eq!(cluster.ready_nodes(), 6);
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let machines = api.list(MACHINES, Some(MACHINE_NAMESPACE));
    assert_eq!(machines.len(), 6);
    for machine in &machines {
        let name = machine["metadata"]["name"].as_str().unwrap();
        assert_eq!(machine["status"]["nodeRef"]["name"], name);
        assert!(
            machine["spec"]["providerID"]
                .as_str()
                .unwrap()
                .starts_with(&format!("baremetalhost:///{MACHINE_NAMESPACE}/{name}/"))
        );
        assert_eq!(
            machine["metadata"]["annotations"]["metal3.io/BareMetalHost"],
            format!("{MACHINE_NAMESPACE}/{name}")
        );
        let bmh = api.get(BMHS, MACHINE_NAMESPACE, name).unwrap();
        assert_eq!(bmh["status"]["poweredOn"], true);
        assert!(
            bmh["spec"]["bmc"]["address"]
                .as_str()
                .unwrap()
                .starts_with("redfish+http://")
        );
    }
    let master = api.get(NODES, "", "master-0").unwrap();
    assert!(
        master["metadata"]["labels"]
            .get("node-role.kubernetes.io/master")
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_becomes_unknown_tainted_and_is_marked_for_external_remediation() {
    let mut spec = fast();
    spec.timing.unhealthy_timeout = Duration::from_millis(1500);
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let hung = Instant::now();
    assert!(cluster.hang("worker-0"));
    let started = Instant::now();
    eventually(
        "the node to become Unknown",
        Duration::from_secs(5),
        async || ready(&api, "worker-0").as_deref() == Some("Unknown"),
    )
    .await;
    let unknown = started.elapsed();
    assert!(
        unknown >= Duration::from_millis(500),
        "not before the grace period (less the last heartbeat's age): {unknown:?}"
    );
    // The status and the taint are two writes (the lifecycle controller's and, upstream,
    // the taint manager's): the taint follows within a pass.
    eventually(
        "the unreachable taint",
        Duration::from_secs(2),
        async || {
            let node = api.get(NODES, "", "worker-0").ok()?;
            node["spec"]["taints"]
                .as_array()?
                .iter()
                .any(|t| t["key"] == "node.kubernetes.io/unreachable" && t["effect"] == "NoExecute")
                .then_some(())
        },
    )
    .await;
    let started = Instant::now();
    eventually(
        "the external-remediation annotation",
        Duration::from_secs(5),
        async || {
            api.get(MACHINES, MACHINE_NAMESPACE, "worker-0")
                .is_ok_and(|m| {
                    m["metadata"]["annotations"]
                        .get(EXTERNAL_REMEDIATION)
                        .is_some()
                })
        },
    )
    .await;
    let marked = started.elapsed();
    // Condition timestamps have a one-second resolution, as in Kubernetes: the timeout runs
    // from the truncated transition time.
    assert!(
        hung.elapsed() >= Duration::from_millis(500 + 500),
        "not before the unhealthy timeout: {:?}",
        hung.elapsed()
    );
    println!("hung worker: Unknown after {unknown:?}, marked {marked:?} later");
    for other in ["worker-1", "worker-2", "master-0"] {
        let machine = api.get(MACHINES, MACHINE_NAMESPACE, other).unwrap();
        assert!(
            machine["metadata"]["annotations"]
                .get(EXTERNAL_REMEDIATION)
                .is_none(),
            "{other} is healthy"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reboot_api_holds_a_host_off_and_it_re_registers_after_power_on() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let key = "reboot.metal3.io/test-requester";
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        "worker-1",
        &json!({"metadata": {"annotations": {key: "{\"mode\":\"hard\"}"}}}),
        false,
    )
    .unwrap();
    eventually("poweredOn=false", Duration::from_secs(5), async || {
        api.get(BMHS, MACHINE_NAMESPACE, "worker-1")
            .is_ok_and(|b| b["status"]["poweredOn"] == false)
    })
    .await;
    assert_eq!(
        cluster.host("worker-1").unwrap().host.power(),
        Power::Off,
        "poweredOn follows the BMC"
    );
    let resets: Vec<String> = cluster
        .redfish()
        .service()
        .stats()
        .resets
        .iter()
        .map(|r| format!("{}:{}", r.system, r.reset_type))
        .collect();
    assert_eq!(resets, ["worker-1:ForceOff"], "hard mode cuts the power");
    // While the annotation stays, the host stays off; the Node may be deleted meanwhile. A
    // negative: ten of the operator's periods and two power delays, in which a power-on it
    // asked for would have shown, and the host is not powered on; no condition to wait for
    // proves that nothing happens.
    tokio::time::sleep(negative_window(&cluster)).await;
    assert_eq!(cluster.host("worker-1").unwrap().host.power(), Power::Off);
    api.delete(NODES, "", "worker-1", None).unwrap();
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        "worker-1",
        &json!({"metadata": {"annotations": {key: Value::Null}}}),
        false,
    )
    .unwrap();
    let started = Instant::now();
    eventually(
        "the node to re-register Ready",
        Duration::from_secs(10),
        async || ready(&api, "worker-1").as_deref() == Some("True"),
    )
    .await;
    let back = started.elapsed();
    println!("re-registered {back:?} after the annotation was removed");
    assert_eq!(
        api.get(BMHS, MACHINE_NAMESPACE, "worker-1").unwrap()["status"]["poweredOn"],
        true
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suffixless_reboot_annotation_power_cycles_and_goes_away() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        "worker-2",
        &json!({"metadata": {"annotations": {"reboot.metal3.io": ""}}}),
        false,
    )
    .unwrap();
    eventually(
        "the annotation to be consumed",
        Duration::from_secs(8),
        async || {
            api.get(BMHS, MACHINE_NAMESPACE, "worker-2").is_ok_and(|b| {
                b["metadata"]["annotations"]
                    .get("reboot.metal3.io")
                    .is_none()
            })
        },
    )
    .await;
    eventually("power back on", Duration::from_secs(8), async || {
        cluster.host("worker-2").unwrap().host.power() == Power::On
    })
    .await;
    let history: Vec<Power> = cluster
        .host("worker-2")
        .unwrap()
        .host
        .history()
        .iter()
        .map(|c| c.power)
        .collect();
    assert_eq!(history, [Power::Off, Power::On]);
    let resets: Vec<String> = cluster
        .redfish()
        .service()
        .stats()
        .resets
        .into_iter()
        .map(|r| r.reset_type)
        .collect();
    assert_eq!(resets, ["GracefulShutdown", "On"], "no mode means soft");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detached_and_paused_hosts_are_not_powered() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    for (host, annotation) in [
        ("worker-0", "baremetalhost.metal3.io/detached"),
        ("worker-1", "baremetalhost.metal3.io/paused"),
    ] {
        api.merge(BMHS, MACHINE_NAMESPACE, host, &json!({"metadata": {"annotations": {annotation: "", "reboot.metal3.io/x": "{\"mode\":\"hard\"}"}}}), false).unwrap();
    }
    eventually("worker-0 detached", Duration::from_secs(5), async || {
        api.get(BMHS, MACHINE_NAMESPACE, "worker-0").unwrap()["status"]["operationalStatus"]
            == "detached"
    })
    .await;
    // A negative: 800 ms in which neither host is powered off for its reboot annotation; no
    // condition to wait for proves that nothing happens.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(cluster.host("worker-0").unwrap().host.power(), Power::On);
    assert_eq!(cluster.host("worker-1").unwrap().host.power(), Power::On);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_unhealthy_workers_than_max_unhealthy_short_circuit_remediation() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    // 40% of 3 workers rounds down to 1: two hung workers exceed it.
    cluster.hang("worker-0");
    cluster.hang("worker-1");
    eventually(
        "the MHC to hold remediation",
        Duration::from_secs(5),
        async || {
            api.get(
                baremend_sim::cluster::local::MHCS,
                MACHINE_NAMESPACE,
                "workers",
            )
            .is_ok_and(|m| m.pointer("/status/conditions/0/status") == Some(&json!("False")))
        },
    )
    .await;
    // A negative: ten of the health check's periods more, in which the second is not
    // marked; no condition to wait for proves that nothing happens.
    tokio::time::sleep(cluster.spec().timing.mhc_period * 10).await;
    // The two can cross the timeout in different passes (transition times have a one-second
    // resolution): the first may be marked while it is the only one, never the second.
    let marked = ["worker-0", "worker-1"]
        .iter()
        .filter(|w| {
            api.get(MACHINES, MACHINE_NAMESPACE, w).unwrap()["metadata"]["annotations"]
                .get(EXTERNAL_REMEDIATION)
                .is_some()
        })
        .count();
    assert!(marked <= 1, "{marked} machines marked with maxUnhealthy 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_run_under_their_pdb_and_scenario_faults_fire_on_time() {
    let mut spec = fast();
    spec.workloads = baremend_sim::cluster::scenario::Workloads {
        pods_per_worker: 1,
        pdb_min_available: Some(3),
    };
    spec.faults = vec![baremend_sim::cluster::scenario::TimedFault {
        at: Duration::from_millis(300),
        fault: "hang".into(),
        target: "worker-2".into(),
    }];
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    eventually("the pods to run", Duration::from_secs(5), async || {
        api.list(baremend_sim::cluster::local::PODS, Some("workloads"))
            .iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .count()
            == 3
    })
    .await;
    let pdb = api
        .get(baremend_sim::cluster::local::PDBS, "workloads", "app")
        .unwrap();
    assert_eq!(
        (
            pdb["status"]["currentHealthy"].as_i64(),
            pdb["status"]["disruptionsAllowed"].as_i64()
        ),
        (Some(3), Some(0))
    );
    eventually("the scheduled hang", Duration::from_secs(5), async || {
        ready(&api, "worker-2").as_deref() == Some("Unknown")
    })
    .await;
    assert_eq!(ready(&api, "worker-1").as_deref(), Some("True"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_reboot_requesters_hold_the_host_until_the_last_is_gone_and_hard_wins() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let annotate = |value: Value| {
        api.merge(
            BMHS,
            MACHINE_NAMESPACE,
            "worker-0",
            &json!({"metadata": {"annotations": value}}),
            false,
        )
        .unwrap()
    };
    annotate(
        json!({"reboot.metal3.io/a": "{\"mode\":\"soft\"}", "reboot.metal3.io/b": "{\"mode\":\"hard\"}"}),
    );
    eventually("power off", Duration::from_secs(5), async || {
        cluster.host("worker-0").unwrap().host.power() == Power::Off
    })
    .await;
    let resets: Vec<String> = cluster
        .redfish()
        .service()
        .stats()
        .resets
        .into_iter()
        .map(|r| r.reset_type)
        .collect();
    assert_eq!(resets, ["ForceOff"], "hard wins over soft");
    annotate(json!({"reboot.metal3.io/a": Value::Null}));
    // A negative: ten of the operator's periods and two power delays, in which the host
    // stays off; no condition to wait for proves that nothing happens.
    tokio::time::sleep(negative_window(&cluster)).await;
    assert_eq!(
        cluster.host("worker-0").unwrap().host.power(),
        Power::Off,
        "b still holds it off"
    );
    annotate(json!({"reboot.metal3.io/b": Value::Null}));
    eventually("power on", Duration::from_secs(5), async || {
        cluster.host("worker-0").unwrap().host.power() == Power::On
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_online_false_powers_a_host_off_and_true_back_on() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        "worker-1",
        &json!({"spec": {"online": false}}),
        false,
    )
    .unwrap();
    eventually("poweredOn=false", Duration::from_secs(5), async || {
        api.get(BMHS, MACHINE_NAMESPACE, "worker-1")
            .is_ok_and(|b| b["status"]["poweredOn"] == false)
    })
    .await;
    api.merge(
        BMHS,
        MACHINE_NAMESPACE,
        "worker-1",
        &json!({"spec": {"online": true}}),
        false,
    )
    .unwrap();
    eventually("poweredOn=true", Duration::from_secs(5), async || {
        api.get(BMHS, MACHINE_NAMESPACE, "worker-1")
            .is_ok_and(|b| b["status"]["poweredOn"] == true)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_whose_node_never_starts_is_unhealthy_after_node_startup_timeout() {
    let mut spec = fast();
    spec.timing.node_startup_timeout = Duration::from_millis(1500);
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    // A new worker Machine that never gets a Node.
    api.create(MACHINES, MACHINE_NAMESPACE, json!({"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine", "metadata": {"name": "worker-9", "labels": {"machine.openshift.io/cluster-api-machine-role": "worker"}}, "spec": {}})).unwrap();
    let started = Instant::now();
    eventually("the annotation", Duration::from_secs(6), async || {
        api.get(MACHINES, MACHINE_NAMESPACE, "worker-9")
            .is_ok_and(|m| {
                m["metadata"]["annotations"]
                    .get(EXTERNAL_REMEDIATION)
                    .is_some()
            })
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "not before nodeStartupTimeout (less timestamp resolution): {:?}",
        started.elapsed()
    );
}

/// As metal3: `status.goodCredentials` names the Secret and the resourceVersion of the
/// credentials the BMC last accepted; a changed Secret is tried at once; a refused login is a
/// `registration error` and leaves goodCredentials at the last good version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_records_the_credentials_the_bmc_accepted_and_a_refusal_as_registration_error()
{
    use base64::Engine;
    let cluster = SimCluster::start(fast()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    let secret = "worker-0-bmc-secret";
    let version = |api: &Local| {
        api.get(
            baremend_sim::cluster::local::SECRETS,
            MACHINE_NAMESPACE,
            secret,
        )
        .unwrap()["metadata"]["resourceVersion"]
            .clone()
    };
    let host = |api: &Local| api.get(BMHS, MACHINE_NAMESPACE, "worker-0").unwrap();
    let first = version(&api);
    eventually(
        "goodCredentials recorded",
        Duration::from_secs(10),
        async || {
            let good = &host(&api)["status"]["goodCredentials"];
            good["credentials"]["name"] == secret
                && good["credentials"]["namespace"] == MACHINE_NAMESPACE
                && good["credentialsVersion"] == first
        },
    )
    .await;

    let set_password = |password: &str| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(password);
        api.merge(
            baremend_sim::cluster::local::SECRETS,
            MACHINE_NAMESPACE,
            secret,
            &json!({"data": {"password": encoded}}),
            false,
        )
        .unwrap();
    };
    set_password("not-the-password");
    eventually(
        "a registration error",
        Duration::from_secs(10),
        async || {
            let status = &host(&api)["status"];
            status["operationalStatus"] == "error" && status["errorType"] == "registration error"
        },
    )
    .await;
    assert_eq!(
        host(&api)["status"]["goodCredentials"]["credentialsVersion"],
        first,
        "a refused login validates nothing"
    );

    set_password(cluster.bmc_password());
    let fixed = version(&api);
    eventually(
        "the new version validated",
        Duration::from_secs(10),
        async || {
            let status = &host(&api)["status"];
            status["operationalStatus"] == "OK"
                && status["goodCredentials"]["credentialsVersion"] == fixed
        },
    )
    .await;
}

/// A platform-none cluster (of `spec`'s other settings), baremend's CRDs that it needs installed
/// from the repository's `crds/` (as the lab installs them), and each host's HostBmc created.
async fn platform_none_cluster(spec: ClusterSpec) -> (SimCluster, Local) {
    let cluster = SimCluster::start(ClusterSpec {
        platform_none: true,
        ..spec
    })
    .await
    .unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    common::install_crds(
        &api,
        &[
            "hostbmcs.yaml",
            "noderemediations.yaml",
            "noderemediationtemplates.yaml",
        ],
    );
    let hosts = cluster.hosts().len();
    assert_eq!(cluster.create_host_bmcs().unwrap(), hosts);
    assert_eq!(api.list(HOST_BMCS, None).len(), hosts);
    (cluster, api)
}

/// The fast cluster with a NodeHealthCheck for its workers.
fn with_nhc() -> ClusterSpec {
    ClusterSpec {
        node_health_check: true,
        ..fast()
    }
}

/// A driver for the BMC a HostBmc names, with the credentials of its Secret.
fn driver_from_host_bmc(api: &Local, host_bmc: &Value) -> Arc<dyn PowerDriver> {
    let namespace = host_bmc["metadata"]["namespace"].as_str().unwrap();
    let secret_name = host_bmc["spec"]["credentialsName"].as_str().unwrap();
    let secret = api.get(SECRETS, namespace, secret_name).unwrap();
    let decode = |key: &str| {
        let encoded = secret["data"][key].as_str().unwrap();
        String::from_utf8(STANDARD.decode(encoded).unwrap()).unwrap()
    };
    let address = BmcAddress::parse(host_bmc["spec"]["address"].as_str().unwrap()).unwrap();
    let credentials = Credentials::new(decode("username"), decode("password"));
    let config = DriverConfig::new(address, credentials, TlsOptions::default());
    Connector::new().connect(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_none_cluster_has_nodes_and_host_bmcs_and_no_machines() {
    let (cluster, api) = platform_none_cluster(with_nhc()).await;
    assert_eq!(cluster.ready_nodes(), 6);
    for (kind, gvr) in [
        ("Machines", MACHINES),
        ("BareMetalHosts", BMHS),
        ("MHCs", MHCS),
    ] {
        assert!(api.list(gvr, None).is_empty(), "no {kind}");
    }
    let host_bmcs = api.list(HOST_BMCS, Some(MACHINE_NAMESPACE));
    assert_eq!(host_bmcs.len(), 6);
    for host_bmc in &host_bmcs {
        let name = host_bmc["metadata"]["name"].as_str().unwrap();
        let host = cluster.host(name).unwrap();
        assert_eq!(host_bmc["spec"]["nodeName"], name);
        assert_eq!(host_bmc["spec"]["address"], host.redfish_address.as_str());
        assert_eq!(
            host_bmc["spec"]["credentialsName"],
            format!("{name}-bmc-secret")
        );
        let node = api.get(NODES, "", name).unwrap();
        let annotations = node["metadata"]["annotations"].as_object().unwrap();
        assert!(
            annotations.keys().all(|k| !k.contains("machine")),
            "{name} has no Machine: {annotations:?}"
        );
        assert!(node["spec"].get("providerID").is_none(), "{name}");
    }
    // The BMC a HostBmc names answers to its Secret's credentials and powers the host: the
    // kubelet goes silent while it is off and comes back with a new boot after power-on.
    let host_bmc = api.get(HOST_BMCS, MACHINE_NAMESPACE, "worker-1").unwrap();
    let driver = driver_from_host_bmc(&api, &host_bmc);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    let boot = |api: &Local| {
        api.get(NODES, "", "worker-1").unwrap()["status"]["nodeInfo"]["bootID"].clone()
    };
    let first_boot = boot(&api);
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    eventually(
        "worker-1 to be off and its Node Unknown",
        Duration::from_secs(10),
        async || {
            cluster.host("worker-1").unwrap().host.power() == Power::Off
                && ready(&api, "worker-1").as_deref() == Some("Unknown")
        },
    )
    .await;
    // No BareMetal Operator powers it back on: it stays off until the BMC is told.
    assert_eq!(driver.power_state().await.unwrap(), PowerState::Off);
    driver.power_on().await.unwrap();
    eventually(
        "worker-1 Ready again after a new boot",
        Duration::from_secs(10),
        async || ready(&api, "worker-1").as_deref() == Some("True") && boot(&api) != first_boot,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_machineless_worker_gets_a_node_remediation_from_the_node_health_check() {
    let (cluster, api) = platform_none_cluster(with_nhc()).await;
    common::install_remediator_roles(&api);
    api.create(
        NODE_REMEDIATION_TEMPLATES,
        NHC_NAMESPACE,
        json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
    )
    .unwrap();
    assert!(cluster.hang("worker-2"));
    eventually(
        "a NodeRemediation named after worker-2",
        Duration::from_secs(10),
        async || {
            api.get(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-2")
                .is_ok()
        },
    )
    .await;
    let requests = api.list(NODE_REMEDIATIONS, None);
    let names: Vec<&str> = requests
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["worker-2"], "only the hung worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_none_cluster_with_bmh_uses_ipmi_names_the_ipmi_bmcs() {
    // No NodeHealthCheck: allowed, nothing there asks for remediation by itself.
    let ipmi = ClusterSpec {
        masters: 1,
        workers: 1,
        ipmi: true,
        bmh_uses_ipmi: true,
        ..fast()
    };
    let (cluster, api) = platform_none_cluster(ipmi).await;
    assert_eq!(cluster.ready_nodes(), 2);
    for host in cluster.hosts() {
        let host_bmc = api.get(HOST_BMCS, MACHINE_NAMESPACE, &host.name).unwrap();
        let address = host.ipmi_address.as_deref().unwrap();
        assert!(address.starts_with("ipmi://"), "{address}");
        assert_eq!(host_bmc["spec"]["address"], address);
        let driver = driver_from_host_bmc(&api, &host_bmc);
        assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    }
    assert!(api.list(nhc::NHCS, None).is_empty());
}

#[tokio::test]
async fn a_platform_none_cluster_refuses_the_machine_flavours() {
    for spec in [
        ClusterSpec {
            cluster_api: true,
            ..ClusterSpec::default()
        },
        ClusterSpec {
            remediation_template: Some("baremend".into()),
            ..ClusterSpec::default()
        },
    ] {
        let spec = ClusterSpec {
            platform_none: true,
            ..spec
        };
        let error = SimCluster::start(spec).await.unwrap_err();
        assert!(matches!(error, Error::Config(_)), "{error}");
        assert!(error.to_string().contains("platformNone"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_health_check_makes_a_deleted_request_again_while_the_node_is_unhealthy() {
    let mut spec = fast();
    spec.node_health_check = true;
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    // baremend's request kinds (baremend installs its own CRDs; these keep unknown fields).
    for (kind, plural) in [
        ("NodeRemediationTemplate", "noderemediationtemplates"),
        ("NodeRemediation", "noderemediations"),
    ] {
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.baremend.io")},
            "spec": {
                "group": "baremend.io",
                "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural,
                    "singular": kind.to_ascii_lowercase()},
                "scope": "Namespaced",
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        });
        api.create(CRDS, "", crd).unwrap();
    }
    common::install_remediator_roles(&api);
    api.create(
        NODE_REMEDIATION_TEMPLATES,
        NHC_NAMESPACE,
        json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
    )
    .unwrap();
    assert!(cluster.hang("worker-0"));
    let uid = |api: &Local| {
        api.get(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-0")
            .ok()
            .and_then(|r| r["metadata"]["uid"].as_str().map(str::to_owned))
    };
    eventually(
        "the NodeHealthCheck's request",
        Duration::from_secs(10),
        async || uid(&api).is_some(),
    )
    .await;
    let first = uid(&api).unwrap();
    api.delete(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-0", None)
        .unwrap();
    eventually(
        "the request made again, with a new UID",
        Duration::from_secs(5),
        async || uid(&api).is_some_and(|u| u != first),
    )
    .await;
    // Still the first step: nothing timed out.
    let request = api
        .get(NODE_REMEDIATIONS, NHC_NAMESPACE, "worker-0")
        .unwrap();
    assert!(
        request["metadata"]["annotations"]
            .get("remediation.medik8s.io/nhc-timed-out")
            .is_none(),
        "{request}"
    );
}

/// Whether the flavour's health check asked for worker-0's remediation: the annotation on
/// OpenShift's Machine, or a request from the template.
fn remediation_asked(api: &Local, spec: &ClusterSpec) -> bool {
    if spec.node_health_check {
        return !api.list(NODE_REMEDIATIONS, None).is_empty();
    }
    if spec.cluster_api {
        return api
            .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, "worker-0")
            .is_ok();
    }
    api.get(MACHINES, MACHINE_NAMESPACE, "worker-0")
        .ok()
        .and_then(|m| m.pointer("/metadata/annotations").cloned())
        .is_some_and(|a| a.get(EXTERNAL_REMEDIATION).is_some())
}

/// Serves baremend's request kinds and the template the flavour's health check names (a
/// Cluster API MachineHealthCheck, a NodeHealthCheck), as installing baremend does.
fn template_in_place(api: &Local, spec: &ClusterSpec) {
    if spec.node_health_check {
        common::install_crds(
            api,
            &["noderemediations.yaml", "noderemediationtemplates.yaml"],
        );
        let template =
            json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}});
        api.create(NODE_REMEDIATION_TEMPLATES, NHC_NAMESPACE, template)
            .unwrap();
        return;
    }
    if !spec.cluster_api {
        return;
    }
    common::install_crds(
        api,
        &[
            "machineremediations.yaml",
            "machineremediationtemplates.yaml",
        ],
    );
    let template = json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}});
    api.create(MACHINE_REMEDIATION_TEMPLATES, MACHINE_NAMESPACE, template)
        .unwrap();
}

/// Every actor runs as its upstream account (accounts.rs, upstream_rbac/): through a
/// hang and its remediation request in each flavour, no actor is refused anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_actor_is_refused_through_a_hang_and_its_request_in_any_flavour() {
    for (flavour, spec) in [
        ("openshift", fast()),
        (
            "cluster-api",
            ClusterSpec {
                cluster_api: true,
                ..fast()
            },
        ),
        (
            "nodehealthcheck",
            ClusterSpec {
                node_health_check: true,
                platform_none: true,
                masters: 3,
                workers: 2,
                ..fast()
            },
        ),
        (
            "mco",
            ClusterSpec {
                mco: true,
                ..fast()
            },
        ),
    ] {
        let cluster = SimCluster::start(spec.clone()).await.unwrap();
        let api = Local::new(cluster.api_server().store().clone(), "test");
        template_in_place(&api, &spec);
        common::install_remediator_roles(&api);
        assert!(cluster.hang("worker-0"));
        // A refusal ends the wait early, to be shown.
        eventually(flavour, Duration::from_secs(20), async || {
            (remediation_asked(&api, &spec) || !cluster.actor_refusals().is_empty()).then_some(())
        })
        .await;
        let refusals = cluster.actor_refusals();
        assert!(refusals.is_empty(), "{flavour}: {refusals:#?}");
    }
}

/// Without the remediator's aggregated role, Cluster API's health check is refused the
/// template, as the real one is (its manager's rights to other groups come only through
/// `cluster.x-k8s.io/aggregate-to-manager`), and no request is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_remediators_aggregated_role_the_health_check_is_refused_and_asks_nothing() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    let cluster = SimCluster::start(spec.clone()).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    template_in_place(&api, &spec);
    assert!(cluster.hang("worker-0"));
    let refusal = eventually("the refusal", Duration::from_secs(20), async || {
        cluster
            .actor_refusals()
            .into_iter()
            .find(|r| r.contains("machineremediationtemplates"))
    })
    .await;
    assert!(
        refusal.contains("system:serviceaccount:capi-system:capi-manager")
            && refusal.contains("cannot get resource"),
        "{refusal}"
    );
    assert!(!remediation_asked(&api, &spec));
    // Granted (as installing the remediator does), the next pass makes the request.
    common::install_remediator_roles(&api);
    eventually("the request", Duration::from_secs(10), async || {
        remediation_asked(&api, &spec).then_some(())
    })
    .await;
}

/// A kubelet calls as `system:node:<name>` and meets the Node authorizer and NodeRestriction
/// as upstream's (kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go,
/// plugin/pkg/admission/noderestriction/admission.go): its own Node, lease and pods only,
/// never its taints, never a Secret its pods do not use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_writes_only_what_is_its_own() {
    let cluster = SimCluster::start(fast()).await.unwrap();
    let kubelet = cluster.accounts().kubelet("worker-0", "test");
    let own = json!({"metadata": {"annotations": {"example.com/x": "1"}}});
    kubelet.merge(NODES, "", "worker-0", &own, false).unwrap();
    let forbidden = |result: Result<Value, baremend_sim::apiserver::ApiError>, expected: &str| {
        let error = result.unwrap_err();
        assert_eq!(error.code, 403, "{}", error.message);
        assert!(error.message.contains(expected), "{}", error.message);
    };
    forbidden(
        kubelet.merge(NODES, "", "worker-1", &own, false),
        "not allowed to modify node \"worker-1\"",
    );
    let taint = json!({"spec": {"taints": [{"key": "example.com/t", "effect": "NoSchedule"}]}});
    forbidden(
        kubelet.merge(NODES, "", "worker-0", &taint, false),
        "not allowed to modify taints",
    );
    forbidden(
        kubelet.delete(NODES, "", "worker-0", None),
        "cannot delete resource \"nodes\"",
    );
    forbidden(
        kubelet.get(SECRETS, MACHINE_NAMESPACE, &cluster.hosts()[0].bmc_secret()),
        "cannot get resource \"secrets\"",
    );
    let lease = json!({"spec": {"renewTime": "2026-01-01T00:00:00.000000Z"}});
    forbidden(
        kubelet.merge(
            baremend_sim::cluster::local::LEASES,
            "kube-node-lease",
            "worker-1",
            &lease,
            false,
        ),
        "cannot patch resource \"leases\"",
    );
    // Its own lease it renews (as it does every heartbeat).
    kubelet
        .merge(
            baremend_sim::cluster::local::LEASES,
            "kube-node-lease",
            "worker-0",
            &lease,
            false,
        )
        .unwrap();
}

/// Cluster API's machine controller finds a Machine's Node by providerID (cluster-api
/// `internal/controllers/machine/machine_controller_noderef.go`: the Node whose
/// `spec.providerID` equals the Machine's), and CAPM3 gives both
/// `metal3://<namespace>/<host>/<Metal3Machine>`: each simulated Node carries its Machine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_api_nodes_provider_id_is_its_machines() {
    let spec = ClusterSpec {
        cluster_api: true,
        ..fast()
    };
    let cluster = SimCluster::start(spec).await.unwrap();
    let api = Local::new(cluster.api_server().store().clone(), "test");
    for machine in api.list(
        baremend_sim::cluster::local::CAPI_MACHINES,
        Some(MACHINE_NAMESPACE),
    ) {
        let name = machine["status"]["nodeRef"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let node = eventually(
            &format!("Node {name}"),
            Duration::from_secs(10),
            async || api.get(NODES, "", &name).map_err(|e| format!("{e:?}")),
        )
        .await;
        assert_eq!(
            node["spec"]["providerID"], machine["spec"]["providerID"],
            "{name}"
        );
        assert!(
            machine["spec"]["providerID"]
                .as_str()
                .is_some_and(|p| p.starts_with("metal3://")),
            "{machine}"
        );
    }
}
