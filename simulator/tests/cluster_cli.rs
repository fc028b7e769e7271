//! `baremend-sim cluster` and `baremend-sim fault` as processes, seen through kubectl.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

mod common;

use common::eventually;

const SCENARIO: &str = "masters: 1\nworkers: 2\nmaxUnhealthy: \"50%\"\ntiming:\n  powerDelay: 300ms\n  bootDelay: 300ms\n  heartbeat: 100ms\n  nodeGrace: 600ms\n  monitorPeriod: 100ms\n  mhcPeriod: 100ms\n  unhealthyTimeout: 1s\n  bmoPeriod: 100ms\n";

fn scratch() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cluster-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let output = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .await
        .expect("kubectl is installed (the machine image ships v1.32)");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

async fn sim(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_baremend-sim"))
        .args(args)
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// Starts `baremend-sim cluster` on a scenario file and waits for its `READY` line; the
/// process ends when the handle is dropped.
async fn start_cluster(
    scenario: &std::path::Path,
    kubeconfig: &std::path::Path,
    extra: &[&str],
) -> tokio::process::Child {
    let mut cluster = Command::new(env!("CARGO_BIN_EXE_baremend-sim"))
        .args(["cluster", "--scenario"])
        .arg(scenario)
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(cluster.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(ready.starts_with("READY https://127.0.0.1:"), "{ready}");
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_process_is_seen_by_kubectl_and_takes_faults() {
    let dir = scratch();
    let scenario = dir.join("scenario.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let control = format!("127.0.0.1:{}", free_port());
    let _cluster = start_cluster(&scenario, &kubeconfig, &["--control", &control]).await;

    let (ok, out) = kubectl(&kubeconfig, &["get", "nodes,machines,baremetalhosts", "-A"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains(" Ready ")).count(),
        3,
        "{out}"
    );
    assert!(
        out.contains("machine.machine.openshift.io/worker-0")
            && out.contains("baremetalhost.metal3.io/worker-1"),
        "{out}"
    );

    let (ok, out) = sim(&["fault", "--control", &control, "hang", "worker-0"]).await;
    assert!(ok, "{out}");
    eventually(
        "the MHC to mark worker-0",
        Duration::from_secs(10),
        async || {
            let (_, annotations) = kubectl(
                &kubeconfig,
                &[
                    "-n",
                    "openshift-machine-api",
                    "get",
                    "machine",
                    "worker-0",
                    "-o",
                    "jsonpath={.metadata.annotations}",
                ],
            )
            .await;
            if annotations.contains("host.metal3.io/external-remediation") {
                Ok(())
            } else {
                Err(annotations)
            }
        },
    )
    .await;
    let (ok, out) = sim(&[
        "fault",
        "--control",
        &control,
        "bmc",
        "worker-1",
        "--json",
        r#"{"stuck_power":true}"#,
    ])
    .await;
    assert!(ok, "{out}");
    let (ok, out) = sim(&["fault", "--control", &control, "hang", "nobody"]).await;
    assert!(!ok && out.contains("404"), "{out}");
    let (ok, out) = sim(&[
        "fault",
        "--control",
        &control,
        "api",
        "--json",
        r#"{"status":503,"count":1}"#,
    ])
    .await;
    assert!(ok, "{out}");
    let (ok, _) = kubectl(&kubeconfig, &["get", "nodes", "--request-timeout=5s"]).await;
    let (ok_after, out) = kubectl(&kubeconfig, &["get", "nodes"]).await;
    assert!(ok || ok_after, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_none_cluster_process_creates_its_host_bmcs_once_the_crd_is_applied() {
    let dir = scratch();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let kubeconfig = dir.join("kubeconfig-upi");
    let scenario = root.join("scenarios/nhc-upi.yaml");
    let _cluster = start_cluster(&scenario, &kubeconfig, &[]).await;
    let (ok, out) = kubectl(&kubeconfig, &["get", "nodes"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains(" Ready ")).count(),
        6,
        "{out}"
    );
    let (ok, out) = kubectl(&kubeconfig, &["get", "machines,baremetalhosts", "-A"]).await;
    assert!(ok && out.contains("No resources found"), "{out}");

    let crd = root.join("../crds/hostbmcs.yaml");
    let (ok, out) = kubectl(&kubeconfig, &["apply", "-f", crd.to_str().unwrap()]).await;
    assert!(ok, "{out}");
    eventually("the six HostBmcs", Duration::from_secs(10), async || {
        let (_, out) = kubectl(
            &kubeconfig,
            &[
                "-n",
                "openshift-machine-api",
                "get",
                "hostbmcs",
                "-o",
                "name",
            ],
        )
        .await;
        if out.lines().filter(|l| l.starts_with("hostbmc")).count() == 6 {
            Ok(())
        } else {
            Err(out)
        }
    })
    .await;
    let (ok, node) = kubectl(
        &kubeconfig,
        &[
            "-n",
            "openshift-machine-api",
            "get",
            "hostbmc",
            "worker-0",
            "-o",
            "jsonpath={.spec.nodeName} {.spec.credentialsName}",
        ],
    )
    .await;
    assert!(ok, "{node}");
    assert_eq!(node, "worker-0 worker-0-bmc-secret");
}

/// `--workload-clusters` on the self-hosted Cluster API scenario: the management cluster
/// shows the Clusters and Machines and no Nodes; a workload cluster's kubeconfig, taken from
/// its Secret with kubectl, lists its Nodes until `fault workload-api-down` takes it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_process_runs_workload_clusters_and_takes_their_api_away() {
    let dir = scratch();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let kubeconfig = dir.join("kubeconfig-fleet");
    let control = format!("127.0.0.1:{}", free_port());
    let scenario = root.join("scenarios/capi.yaml");
    let extra = [
        "--workload-clusters",
        "2",
        "--masters",
        "1",
        "--workers",
        "1",
    ];
    let _cluster = start_cluster(
        &scenario,
        &kubeconfig,
        &[&extra[..], &["--control", &control]].concat(),
    )
    .await;
    let (ok, out) = kubectl(
        &kubeconfig,
        &[
            "get",
            "clusters.cluster.x-k8s.io,machines.cluster.x-k8s.io",
            "-A",
            "-o",
            "name",
        ],
    )
    .await;
    assert!(ok, "{out}");
    for name in [
        "cluster.cluster.x-k8s.io/wc-0",
        "cluster.cluster.x-k8s.io/wc-1",
        "machine.cluster.x-k8s.io/wc-1-worker-0",
    ] {
        assert!(out.contains(name), "{name}: {out}");
    }
    let (ok, out) = kubectl(&kubeconfig, &["get", "nodes", "-o", "name"]).await;
    assert!(ok && out.trim().is_empty(), "{out}");
    let (ok, value) = kubectl(
        &kubeconfig,
        &[
            "-n",
            "openshift-machine-api",
            "get",
            "secret",
            "wc-1-kubeconfig",
            "-o",
            "jsonpath={.data.value}",
        ],
    )
    .await;
    assert!(ok, "{value}");
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD
        .decode(value.trim())
        .unwrap();
    let workload = dir.join("kubeconfig-wc-1");
    std::fs::write(&workload, text).unwrap();
    let (ok, out) = kubectl(&workload, &["get", "nodes", "-o", "name"]).await;
    assert!(
        ok && out.contains("node/worker-0") && out.contains("node/master-0"),
        "{out}"
    );

    let (ok, out) = sim(&["fault", "--control", &control, "workload-api-down", "wc-1"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&workload, &["get", "nodes", "--request-timeout=3s"]).await;
    assert!(!ok, "{out}");
    let (ok, out) = sim(&["fault", "--control", &control, "workload-api-up", "wc-1"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&workload, &["get", "nodes", "-o", "name"]).await;
    assert!(ok && out.contains("node/worker-0"), "{out}");
    let (ok, out) = sim(&["fault", "--control", &control, "workload-api-down", "wc-7"]).await;
    assert!(!ok && out.contains("404"), "{out}");
}
