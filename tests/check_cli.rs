//! `baremend check` as a user runs it, against the simulated cluster through the kubeconfig it
//! writes: one line per Machine with its fencing path and READY or NOT READY and why, exit
//! code 1 when any is not ready, `--machine` for one; nothing powered, no password shown.
//! Also where admins run it: in the controller's pod (the in-cluster configuration, as the
//! ServiceAccount of deploy/ under deploy/base/rbac.yaml), on Cluster API (`--machine-api
//! cluster-api`), on a cluster without the BareMetalHost CRD, and as a kubectl plugin with
//! the real kubectl.

use std::process::Output;
use std::time::Duration;

use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::SECRETS;
use serde_json::json;

use baremend_testkit as common;

use common::lab::{Lab, fast};
use common::texts;

const WRONG: &str = "not-the-bmc-password";

/// The simulated OpenShift cluster with its workers' health check asking through baremend's
/// template `baremend`: its Machines carry `metal3.io/BareMetalHost` as IPI ones do, where an
/// annotation health check fails `check` (`quick_start_e2e.rs` shows that failure).
fn openshift() -> baremend_sim::cluster::ClusterSpec {
    baremend_sim::cluster::ClusterSpec {
        remediation_template: Some("baremend".into()),
        ..fast()
    }
}

/// A folder of its own for each call: the tests of this file run at once, each with its own
/// cluster.
fn call_dir() -> std::path::PathBuf {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("baremend-check-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The line about `machine`.
fn line<'a>(stdout: &'a str, machine: &str) -> &'a str {
    let prefix = format!("{MACHINE_NAMESPACE}/{machine} ");
    stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no line for {machine} in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_one_line_per_machine_and_fails_when_one_is_not_ready() {
    let lab = Lab::builder(openshift()).start().await;
    lab.detach("worker-1");
    // The simulated BareMetal Operator validates each host's credentials once it logs in.
    common::eventually(
        "every host's credentials validated",
        Duration::from_secs(20),
        async || {
            let hosts = lab.api.list(baremend_sim::cluster::local::BMHS, None);
            hosts
                .iter()
                .filter(|h| h["metadata"]["name"] != "worker-1")
                .all(|h| h["status"]["goodCredentials"].is_object())
        },
    )
    .await;
    let before = lab.cluster.redfish().service().stats();

    let all_ready = lab.run_baremend(&["check"]).await;
    let (stdout, stderr) = texts(&all_ready);
    assert!(all_ready.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
    assert!(
        line(&stdout, "worker-0").starts_with(
            "openshift-machine-api/worker-0 worker-0 reboot API of BareMetalHost openshift-machine-api/worker-0: READY"
        ),
        "{stdout}"
    );
    let direct = line(&stdout, "worker-1");
    assert!(
        direct.contains(": READY (BMC ") && direct.contains("logged in"),
        "{direct}"
    );

    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(WRONG);
    lab.api
        .merge(
            SECRETS,
            MACHINE_NAMESPACE,
            "worker-1-bmc-secret",
            &json!({"data": {"password": encoded}}),
            false,
        )
        .unwrap();
    let refused = lab.run_baremend(&["check", "--machine", "worker-1"]).await;
    let (stdout, stderr) = texts(&refused);
    assert_eq!(refused.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.contains("NOT READY: CredentialsRefused: "),
        "{stdout}"
    );
    assert!(
        stderr.contains("1 of 1 Machines could not be fenced now"),
        "{stderr}"
    );
    assert!(!stdout.contains(WRONG) && !stderr.contains(WRONG));

    let unknown = lab
        .run_baremend(&["check", "--machine", "no-such-machine"])
        .await;
    let (_, stderr) = texts(&unknown);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr.contains("no Machine or Machine-less Node no-such-machine"),
        "{stderr}"
    );

    let after = lab.cluster.redfish().service().stats();
    assert_eq!(after.resets, before.resets, "a check never asks for power");
    assert_eq!(
        after.open_sessions, before.open_sessions,
        "every session the checks opened is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_probes_the_bmc_of_each_node_without_a_machine_through_its_host_bmc() {
    let lab = Lab::builder(baremend_sim::cluster::ClusterSpec {
        platform_none: true,
        ..fast()
    })
    .start()
    .await;
    let before = lab.cluster.redfish().service().stats();
    let output = lab.run_baremend(&["check"]).await;
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "one line per Node: {stdout}");
    let worker = line(&stdout, "worker-2");
    assert!(
        worker.starts_with("openshift-machine-api/worker-2 worker-2 ")
            && worker.contains(": READY (BMC ")
            && worker.contains("logged in"),
        "{worker}"
    );
    assert!(!stdout.contains("BareMetalHost"), "{stdout}");
    let one = lab.run_baremend(&["check", "--machine", "worker-2"]).await;
    assert_eq!(texts(&one).0.lines().count(), 1);
    let after = lab.cluster.redfish().service().stats();
    assert_eq!(after.resets, before.resets, "a check never asks for power");
}

/// The `server`, `token` and CA of a kubeconfig the simulated cluster wrote.
fn kubeconfig_parts(kubeconfig: &str) -> (String, String, Vec<u8>) {
    use base64::Engine;
    let parsed: serde_json::Value = serde_yaml::from_str(kubeconfig).unwrap();
    let server = parsed["clusters"][0]["cluster"]["server"].as_str().unwrap();
    let token = parsed["users"][0]["user"]["token"].as_str().unwrap();
    let ca = parsed["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .unwrap();
    (server.to_string(), token.to_string(), ca)
}

/// `baremend check` with no kubeconfig at all, as in the controller's pod: the service's
/// address in KUBERNETES_SERVICE_HOST/PORT and the ServiceAccount's token, CA and namespace
/// at the path the kubelet mounts them (/var/run/secrets/kubernetes.io/serviceaccount),
/// which a private mount namespace (`unshare`) provides without touching the machine's own.
async fn check_in_cluster(kubeconfig: &str, args: &[&str]) -> Output {
    let (server, token, ca) = kubeconfig_parts(kubeconfig);
    let address = server.strip_prefix("https://").expect("an HTTPS server");
    let (host, port) = address.rsplit_once(':').unwrap();
    let dir = call_dir();
    let mounted = dir.join("serviceaccount");
    std::fs::create_dir_all(&mounted).unwrap();
    std::fs::write(mounted.join("token"), token).unwrap();
    std::fs::write(mounted.join("ca.crt"), ca).unwrap();
    std::fs::write(mounted.join("namespace"), "baremend").unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let unshare = common::require_program("unshare", "util-linux");
    // /run is a fresh tmpfs in the private namespace (/var/run links to it), so the mount
    // point is made there and nothing of the machine's is shadowed for other processes.
    let script = format!(
        "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && \
         mount --bind '{}' /run/secrets/kubernetes.io/serviceaccount && exec \"$0\" check \"$@\"",
        mounted.display()
    );
    let run = tokio::process::Command::new(unshare)
        .args(["--map-root-user", "--mount", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_baremend"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", &home)
        .env("KUBERNETES_SERVICE_HOST", host)
        .env("KUBERNETES_SERVICE_PORT", port)
        .output();
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("baremend check ends within a minute")
        .unwrap()
}

/// A token of a new ServiceAccount `baremend/<name>`, which no binding names.
async fn token_of_new_account(lab: &Lab, name: &str) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};
    let accounts: Api<ServiceAccount> = Api::namespaced(lab.client.clone(), "baremend");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    accounts
        .create_token_request(name, &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_in_the_controllers_pod_runs_as_its_service_account_under_deploys_rbac() {
    let lab = Lab::builder(openshift()).start().await;
    // The BareMetal Operator validates each host's credentials once it logs in.
    common::eventually(
        "every host's credentials validated",
        Duration::from_secs(20),
        async || {
            let hosts = lab.api.list(baremend_sim::cluster::local::BMHS, None);
            hosts
                .iter()
                .all(|h| h["status"]["goodCredentials"].is_object())
        },
    )
    .await;
    let output = check_in_cluster(&lab.controller_kubeconfig, &[]).await;
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
    assert!(line(&stdout, "worker-0").contains(": READY ("), "{stdout}");

    // The negative: the same call as an account deploy/base/rbac.yaml grants nothing is refused
    // by the API server's RBAC — the check did use the mounted token, and the server checks.
    let nobody = lab.controller_kubeconfig.replace(
        &kubeconfig_parts(&lab.controller_kubeconfig).1,
        &token_of_new_account(&lab, "nobody").await,
    );
    let refused = check_in_cluster(&nobody, &[]).await;
    let (stdout, stderr) = texts(&refused);
    assert_eq!(refused.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("Forbidden") && stderr.contains("system:serviceaccount:baremend:nobody"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_finds_cluster_api_hosts_through_their_metal3_machines() {
    let lab = Lab::builder(baremend_sim::cluster::ClusterSpec {
        cluster_api: true,
        ..fast()
    })
    .start()
    .await;
    common::eventually(
        "every host's credentials validated",
        Duration::from_secs(20),
        async || {
            let hosts = lab.api.list(baremend_sim::cluster::local::BMHS, None);
            hosts
                .iter()
                .all(|h| h["status"]["goodCredentials"].is_object())
        },
    )
    .await;
    // Without the flag the OpenShift Machines are looked for: there are none here.
    let openshift = lab.run_baremend(&["check"]).await;
    let (stdout, stderr) = texts(&openshift);
    assert_eq!(openshift.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("no Machine or Machine-less Node that baremend would remediate"),
        "{stderr}"
    );

    let output = lab
        .run_baremend(&["check", "--machine-api", "cluster-api"])
        .await;
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
    assert!(
        line(&stdout, "worker-1").starts_with(
            "openshift-machine-api/worker-1 worker-1 reboot API of BareMetalHost openshift-machine-api/worker-1: READY"
        ),
        "{stdout}"
    );
    // As the controller's ServiceAccount with deploy/'s Cluster API rules (get on
    // metal3machines): the check needs no right the controller lacks.
    let dir = call_dir();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, &lab.controller_kubeconfig).unwrap();
    let as_controller = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .args(["check", "--machine-api", "cluster-api", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = texts(&as_controller);
    assert!(as_controller.status.success(), "{stdout}\n{stderr}");

    // A Metal3Machine that is gone is the Machine's fault, named on its line.
    lab.api
        .delete(
            baremend_sim::cluster::local::METAL3_MACHINES,
            MACHINE_NAMESPACE,
            "worker-2",
            Some(0),
        )
        .unwrap();
    let missing = lab
        .run_baremend(&[
            "check",
            "--machine-api",
            "cluster-api",
            "--machine",
            "worker-2",
        ])
        .await;
    let (stdout, _) = texts(&missing);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stdout.contains("NOT READY")
            && stdout.contains("Metal3Machine openshift-machine-api/worker-2 not found"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_on_a_cluster_without_bare_metal_hosts_or_machines_says_so_and_checks_host_bmcs() {
    let lab = Lab::builder(baremend_sim::cluster::ClusterSpec {
        platform_none: true,
        ..fast()
    })
    .start()
    .await;
    for crd in ["baremetalhosts.metal3.io", "machines.machine.openshift.io"] {
        lab.api
            .delete(baremend_sim::cluster::local::CRDS, "", crd, Some(0))
            .unwrap();
    }
    common::eventually(
        "the CRDs no longer served",
        Duration::from_secs(10),
        async || {
            let bmhs = lab.run_baremend(&["check", "--machine", "worker-0"]).await;
            String::from_utf8_lossy(&bmhs.stdout)
                .contains("note: this cluster serves no baremetalhosts")
        },
    )
    .await;
    let output = lab.run_baremend(&["check"]).await;
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let notes: Vec<&str> = stdout.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(
        notes,
        [
            "note: this cluster serves no baremetalhosts.metal3.io: the reboot API is no fencing path here; hosts are fenced through their HostBmcs",
            "note: this cluster serves no machines.machine.openshift.io: no Machine is checked (on Cluster API, give --machine-api cluster-api)",
        ],
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 2 + 6, "{stdout}");
    assert!(
        line(&stdout, "worker-2").contains(": READY (BMC "),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_runs_baremend_as_a_plugin_named_kubectl_baremend() {
    let kubectl = common::kubectl::binaries().kubectl();
    let lab = Lab::builder(openshift()).start().await;
    let dir = call_dir();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_baremend"), bin.join("kubectl-baremend"))
        .unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, lab.cluster.kubeconfig()).unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let kubectl_run = |args: &[&str]| {
        tokio::process::Command::new(&kubectl)
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", &kubeconfig)
            .output()
    };
    // kubectl finds it on PATH by its name (kubectl's `plugin list`).
    let listed = kubectl_run(&["plugin", "list"]).await.unwrap();
    let (stdout, stderr) = texts(&listed);
    assert!(listed.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&bin.join("kubectl-baremend").display().to_string()),
        "{stdout}"
    );
    // Its help is in kubectl's words: the usage is `kubectl baremend`.
    let help = kubectl_run(&["baremend", "--help"]).await.unwrap();
    let (stdout, _) = texts(&help);
    assert!(
        stdout.contains("Usage: kubectl baremend [OPTIONS] <COMMAND>"),
        "{stdout}"
    );
    for command in ["status", "check", "retry", "ack", "gather"] {
        assert!(
            stdout.contains(&format!("  {command} ")),
            "{command}: {stdout}"
        );
    }
    // The cluster comes from KUBECONFIG, as for kubectl itself; then from --kubeconfig and
    // --context, the flags kubectl's plugins are expected to accept.
    common::eventually(
        "every host's credentials validated",
        Duration::from_secs(20),
        async || {
            let hosts = lab.api.list(baremend_sim::cluster::local::BMHS, None);
            hosts
                .iter()
                .all(|h| h["status"]["goodCredentials"].is_object())
        },
    )
    .await;
    let checked = kubectl_run(&["baremend", "check"]).await.unwrap();
    let (stdout, stderr) = texts(&checked);
    assert!(checked.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 6, "{stdout}");
    let with_context = kubectl_run(&["baremend", "status", "--context", "baremend-sim"])
        .await
        .unwrap();
    let (stdout, stderr) = texts(&with_context);
    assert!(with_context.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("nothing needs you: 0 remediations"),
        "{stdout}"
    );
    let unknown_context = kubectl_run(&["baremend", "status", "--context", "elsewhere"])
        .await
        .unwrap();
    let (_, stderr) = texts(&unknown_context);
    assert_eq!(unknown_context.status.code(), Some(1));
    assert!(stderr.contains("elsewhere"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_warns_when_a_nodehealthcheck_templates_power_cycles_outlast_its_lease() {
    use baremend_sim::cluster::nhc::NODE_REMEDIATION_TEMPLATES;
    // A patient policy: four power cycles, more than NodeHealthCheck's lease leaves room for.
    let lab = Lab::builder(openshift())
        .policy(json!({"maxAttempts": 4}))
        .start()
        .await;
    for (name, spec) in [
        ("fits", json!({"maxAttempts": 2})),
        ("patient", json!({})),
        ("wide", json!({"maxAttempts": 5})),
    ] {
        lab.api
            .create(
                NODE_REMEDIATION_TEMPLATES,
                MACHINE_NAMESPACE,
                json!({"metadata": {"name": name}, "spec": {"template": {"spec": spec}}}),
            )
            .unwrap();
    }
    let output = lab.run_baremend(&["check", "--machine", "worker-0"]).await;
    let (stdout, stderr) = texts(&output);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect();
    // The template that narrows to two cycles fits; the one that inherits four does not; the
    // one that asks for five would have its requests refused (a request only narrows).
    assert_eq!(warnings.len(), 2, "{stdout}\n{stderr}");
    let patient = warnings
        .iter()
        .find(|w| w.contains("openshift-machine-api/patient"))
        .expect("a warning for the patient template");
    assert!(
        patient.starts_with(
            "warning: NodeRemediationTemplate openshift-machine-api/patient (RemediationPolicy default with its overrides): maxAttempts 4"
        ),
        "{stderr}"
    );
    assert!(
        patient.contains("the last may start 3780 s after the request, past the 1800 s"),
        "{stderr}"
    );
    assert!(patient.contains("use maxAttempts 2"), "{stderr}");
    let wide = warnings
        .iter()
        .find(|w| w.contains("openshift-machine-api/wide"))
        .expect("a warning for the wide template");
    assert!(wide.contains("would be refused (WidensPolicy)"), "{stderr}");
    // Warnings, not a failure: the line about the Machine is there as always.
    line(&stdout, "worker-0");
}
