//! A hung worker remediated to `Succeeded` on a real kube-apiserver (with etcd and
//! kube-controller-manager, the release pinned in `tools/kubernetes/`):
//!
//! - deploy/ installed with the install guide's kustomizations, the shipped policies switched
//!   to `Remediate` with `kubectl patch` as the guide says;
//! - the simulated world (`RemoteCluster`: hosts with Redfish and IPMI BMCs, kubelets, the
//!   BareMetal Operator, the health-check controllers) driving the real server with its
//!   upstream credentials — kubelets by client certificate as `system:node:<name>`, the
//!   operators by ServiceAccount tokens the server issued;
//! - the node lifecycle is the real controller-manager's: the hung Node turns `Unknown` by
//!   its hand;
//! - `baremend run` as deploy/'s ServiceAccount with a token the server issued.
//!
//! One test per fence path (the BareMetalHost reboot API, Redfish, IPMI) and per trigger (the
//! Machine annotation, a MachineHealthCheck's template, a NodeHealthCheck's); each ends
//! `Succeeded` with the host really power-cycled, and with nothing refused: no `Forbidden`
//! in baremend's log and no refusal met by a simulated actor.

use std::process::Stdio;
use std::time::Duration;

use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::on_server::{RemoteCluster, RemoteOptions};
use baremend_sim::cluster::remote::{Credential, Endpoint};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::host::Power;
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::kubectl::Cluster;
use common::real::{controller_kubeconfig, guide_kustomization_with, installed_with};

/// The simulated world's pace against a real server: heartbeats every 300 ms, Leases of 4 s
/// (the plane's node monitor grace), hosts that power and boot in well under a second.
fn timing() -> Timing {
    Timing {
        heartbeat: Duration::from_millis(300),
        node_grace: Duration::from_secs(4),
        mhc_period: Duration::from_millis(300),
        bmo_period: Duration::from_millis(300),
        ..Timing::fast()
    }
}

/// One control-plane host and three workers (the shipped health checks' budgets let one of
/// three be remediated), the shipped health checks installed by the user.
fn spec() -> ClusterSpec {
    ClusterSpec {
        masters: 1,
        workers: 3,
        timing: timing(),
        ready_timeout: Duration::from_secs(60),
        ..ClusterSpec::default()
    }
}

/// A kustomization patch that shortens a shipped health check's unhealthy timeouts to 2 s
/// (`field` is `timeout` for a MachineHealthCheck, `duration` for a NodeHealthCheck), as a
/// user's own kustomization would patch the shipped one.
fn quick(group: &str, kind: &str, name: &str, field: &str) -> String {
    format!(
        "  - target:\n      group: {group}\n      kind: {kind}\n      name: {name}\n    patch: |-\n      \
         - op: replace\n        path: /spec/unhealthyConditions/0/{field}\n        value: 2s\n      \
         - op: replace\n        path: /spec/unhealthyConditions/1/{field}\n        value: 2s\n"
    )
}

/// The guide's kustomization with `component`, and `patches`.
fn kustomization(component: &str, patches: &[String]) -> String {
    format!(
        "{}patches:\n{}",
        guide_kustomization_with(component),
        patches.concat()
    )
}

/// The shipped policy switched to `Remediate` as the guide says (`kubectl patch`), with
/// quick timeouts and `extra` fields; the simulated BMCs speak plain HTTP
/// (`allowInsecureBmc`).
async fn switch_to_remediate(c: &Cluster, extra: Value) {
    let mut spec = json!({"mode": "Remediate", "allowInsecureBmc": true,
        "timeouts": {"powerOffSeconds": 20, "nodeReadySeconds": 60, "readyGraceSeconds": 1}});
    for (key, value) in extra.as_object().into_iter().flatten() {
        spec[key] = value.clone();
    }
    c.merge_policy(&json!({ "spec": spec })).await;
}

/// deploy/ with the annotation health checks (quick), remediating with `policy` added.
async fn by_annotation(policy: Value) -> Cluster {
    let patches = [quick(
        "machine.openshift.io",
        "MachineHealthCheck",
        "baremend-workers",
        "timeout",
    )];
    let c = installed_with(&kustomization("machine-api-annotation", &patches)).await;
    switch_to_remediate(&c, policy).await;
    c
}

/// deploy/ with the NodeHealthCheck component (quick), remediating with `policy` added.
async fn by_node_health_check(policy: Value) -> Cluster {
    let patches = [quick(
        "remediation.medik8s.io",
        "NodeHealthCheck",
        "baremend-workers",
        "duration",
    )];
    let c = installed_with(&kustomization("nodehealthcheck", &patches)).await;
    switch_to_remediate(&c, policy).await;
    c
}

/// deploy/ with the template health checks (quick).
async fn by_template() -> Cluster {
    let patches = [quick(
        "machine.openshift.io",
        "MachineHealthCheck",
        "baremend-workers",
        "timeout",
    )];
    let c = installed_with(&kustomization("machine-api-template", &patches)).await;
    switch_to_remediate(&c, json!({})).await;
    c
}

/// What the guide says a policy needs for the shipped NodeHealthCheck template, which keeps the
/// Nodes (`nodeRelease: OutOfService`) where the policy deletes them.
static TRUSTED_NODE_RELEASE: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({"trust": {"requestMayChooseNodeRelease": true}}));

/// The simulated world on `c`'s plane, with the user's (shipped) health checks and the
/// simulated health-check controllers.
async fn world(c: &Cluster, spec: ClusterSpec) -> RemoteCluster {
    let options = RemoteOptions {
        create_health_checks: false,
        ..RemoteOptions::default()
    };
    world_with(c, spec, options).await
}

/// The simulated world on `c`'s plane, every Node Ready.
async fn world_with(c: &Cluster, spec: ClusterSpec, options: RemoteOptions) -> RemoteCluster {
    let plane = c.plane().expect("a real plane");
    let endpoint = Endpoint {
        url: plane.url().to_owned(),
        ca_pem: plane.ca_pem().to_owned(),
    };
    let admin = Credential::Certificate(plane.admin_identity().clone());
    let world = RemoteCluster::start(spec, endpoint, admin, plane, options)
        .await
        .expect("the simulated world starts on the real server");
    assert_eq!(
        world.ready_nodes(),
        world.hosts().len(),
        "every Node registered and Ready on the real server"
    );
    world
}

/// `baremend run` as deploy/'s ServiceAccount, its log in `<dir>/baremend.log`.
async fn run_baremend(c: &Cluster) -> (tokio::process::Child, std::path::PathBuf) {
    run_baremend_polling(c, "0s").await
}

/// [`run_baremend`] with its power monitor reading every `power_poll`.
async fn run_baremend_polling(
    c: &Cluster,
    power_poll: &str,
) -> (tokio::process::Child, std::path::PathBuf) {
    let kubeconfig = c.dir.join("controller.kubeconfig");
    std::fs::write(&kubeconfig, controller_kubeconfig(c).await).unwrap();
    let log = c.dir.join("baremend.log");
    // Its default log level: what an operator reads.
    let child = common::real::run_command_polling(&kubeconfig, "baremend-remediates", power_poll)
        .env_remove("RUST_LOG")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .expect("baremend runs");
    common::real::lease_held_by(c, "baremend-remediates").await;
    (child, log)
}

/// Waits (up to 2 minutes) for the Remediation of Node `node` to end `Succeeded`; fails at
/// once on `Failed`, and on the deadline with the last status and the requests seen.
async fn succeeded(c: &Cluster, node: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let mut seen = String::from("no Remediation");
    while std::time::Instant::now() < deadline {
        let out = c
            .ok(
                &["get", "remediations.baremend.io", "-A", "-o", "json"],
                None,
            )
            .await;
        let list: Value = serde_json::from_str(&out).unwrap();
        let mine = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["spec"]["nodeName"] == node)
            .cloned();
        if let Some(r) = mine {
            match r["status"]["phase"].as_str() {
                Some("Succeeded") => return r,
                Some("Failed") => panic!("the remediation failed: {:#}", r["status"]),
                _ => seen = format!("{:#}", r["status"]),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (_, requests, _) = c
        .kubectl(
            &[
                "get",
                "machineremediations,noderemediations",
                "-A",
                "-o",
                "yaml",
            ],
            None,
        )
        .await;
    panic!(
        "the remediation of {node} did not succeed in 2 minutes; last seen:\n{seen}\nrequests:\n{requests}"
    )
}

/// Hangs `node`'s host and waits for its remediation; checks the host went off and on, and
/// that nothing was refused to baremend or to a simulated actor.
async fn hang_and_remediate(c: &Cluster, world: &RemoteCluster, node: &str) -> Value {
    let running = run_baremend(c).await;
    remediate_hung(c, world, node, running).await
}

/// [`hang_and_remediate`] with baremend already `running` (and its log).
async fn remediate_hung(
    c: &Cluster,
    world: &RemoteCluster,
    node: &str,
    running: (tokio::process::Child, std::path::PathBuf),
) -> Value {
    let (mut baremend, log) = running;
    let host = world.host(node).expect("the host");
    host.faults
        .hung
        .store(true, std::sync::atomic::Ordering::Relaxed);
    marked_unknown_by_the_real_node_lifecycle(c, node).await;
    let done = succeeded(c, node).await;
    let powers: Vec<Power> = host.host.history().iter().map(|c| c.power).collect();
    assert_eq!(
        powers,
        vec![Power::Off, Power::On],
        "{node}'s power history"
    );
    // Each step is in the log at the default level. The last line follows the status write
    // the test has just read, so it may be a moment behind.
    let text = eventually(
        "each remediation step in baremend's log",
        Duration::from_secs(10),
        async || {
            let text = std::fs::read_to_string(&log).unwrap();
            let missing: Vec<&str> = [
                "PowerOffRequested",
                "Fenced",
                "PowerOnRequested",
                "Succeeded",
            ]
            .into_iter()
            .filter(|step| {
                !text
                    .lines()
                    .any(|l| l.contains("remediation step") && l.contains(step))
            })
            .collect();
            if missing.is_empty() {
                Ok(text)
            } else {
                Err(format!("no step {missing:?} in the log:\n{text}"))
            }
        },
    )
    .await;
    for refused in ["Forbidden", "forbidden", " 403"] {
        assert!(
            !text.contains(refused),
            "the real server refused baremend ({refused}):\n{text}"
        );
    }
    assert!(
        baremend.try_wait().unwrap().is_none(),
        "baremend exited:\n{text}"
    );
    assert_eq!(world.actor_refusals(), Vec::<String>::new());
    let _ = baremend.kill().await;
    done
}

/// Waits until the real controller-manager's node lifecycle marks `node` `Unknown` with its
/// own words (nothing simulated runs a node lifecycle on the real plane).
async fn marked_unknown_by_the_real_node_lifecycle(c: &Cluster, node: &str) {
    eventually(
        &format!("kube-controller-manager marks {node} Unknown"),
        Duration::from_secs(60),
        async || {
            let (_, out, err) = c.kubectl(&["get", "node", node, "-o", "json"], None).await;
            let node: Value = serde_json::from_str(&out).map_err(|_| err.clone())?;
            let ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .cloned()
                .unwrap_or_default();
            if ready["status"] == "Unknown"
                && ready["message"] == "Kubelet stopped posting node status."
            {
                Ok(())
            } else {
                Err(ready.to_string())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_machine_annotation_fences_through_the_baremetalhost_reboot_api() {
    let c = by_annotation(json!({})).await;
    let world = world(&c, spec()).await;
    let done = hang_and_remediate(&c, &world, "worker-1").await;
    assert_eq!(
        done["status"]["strategy"], "BareMetalHostRebootApi",
        "{done:#}"
    );
    assert_eq!(
        done["spec"]["trigger"]["kind"], "MachineAnnotation",
        "{done:#}"
    );
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_is_fenced_through_redfish() {
    let c = by_annotation(json!({"strategies": ["DirectBmc"]})).await;
    let spec = ClusterSpec {
        hosts_detached: true,
        ..spec()
    };
    let world = world(&c, spec).await;
    let done = hang_and_remediate(&c, &world, "worker-0").await;
    assert_eq!(done["status"]["strategy"], "DirectBmc", "{done:#}");
    let driver = done["status"]["driver"].as_str().unwrap_or_default();
    assert!(driver.starts_with("redfish"), "{done:#}");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_host_is_fenced_through_ipmi() {
    let c = by_annotation(json!({"strategies": ["DirectBmc"]})).await;
    let spec = ClusterSpec {
        hosts_detached: true,
        ipmi: true,
        bmh_uses_ipmi: true,
        ..spec()
    };
    let world = world(&c, spec).await;
    let done = hang_and_remediate(&c, &world, "worker-2").await;
    assert_eq!(done["status"]["driver"], "ipmi", "{done:#}");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_health_checks_template_request_is_remediated() {
    let c = by_template().await;
    let world = world(&c, spec()).await;
    let done = hang_and_remediate(&c, &world, "worker-1").await;
    // It was asked by the request the health check made from the template (the health check
    // deleted it once the Machine was healthy again).
    assert_eq!(
        done["spec"]["trigger"]["kind"], "MachineRemediation",
        "{done:#}"
    );
    assert_eq!(done["spec"]["trigger"]["name"], "worker-1", "{done:#}");
    let (_, left, _) = c
        .kubectl(
            &["get", "machineremediations.baremend.io", "-A", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(
        left.trim(),
        "",
        "the health check deletes its request once healthy"
    );
    assert_eq!(done["spec"]["nodeName"], "worker-1");
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_health_checks_template_request_is_remediated() {
    let c = by_node_health_check(TRUSTED_NODE_RELEASE.clone()).await;
    let spec = ClusterSpec {
        node_health_check: true,
        ..spec()
    };
    let world = world(&c, spec).await;
    let done = hang_and_remediate(&c, &world, "worker-0").await;
    assert_eq!(
        done["spec"]["trigger"]["kind"], "NodeRemediation",
        "{done:#}"
    );
    assert_eq!(done["spec"]["trigger"]["name"], "worker-0", "{done:#}");
    assert_eq!(
        done["spec"]["trigger"]["namespace"], "openshift-workload-availability",
        "the request is made in the shipped template's namespace: {done:#}"
    );
    assert_eq!(done["spec"]["nodeName"], "worker-0");
    world.stop().await;
}

/// The real OpenShift MachineHealthCheck controller (machine-api-operator's
/// `cmd/machine-healthcheck`, built by `scripts/kubernetes.sh`), run as its upstream account
/// (`openshift-machine-api/machine-api-controllers`, with a token the server issued) and
/// watching its upstream namespace; its log in `<dir>/machine-healthcheck.log`.
async fn run_real_machine_health_check(c: &Cluster) -> tokio::process::Child {
    let plane = c.plane().expect("a real plane");
    let token = plane
        .token("openshift-machine-api", "machine-api-controllers")
        .await
        .expect("a TokenRequest for the MachineHealthCheck controller");
    let kubeconfig = c.dir.join("machine-healthcheck.kubeconfig");
    std::fs::write(&kubeconfig, plane.kubeconfig_with_token(&token)).unwrap();
    let log = std::fs::File::create(c.dir.join("machine-healthcheck.log")).unwrap();
    let binary = common::kubectl::binaries().path("machine-healthcheck");
    assert!(
        binary.is_file(),
        "{} is missing: run scripts/kubernetes.sh (bash scripts/test.sh does)",
        binary.display()
    );
    tokio::process::Command::new(binary)
        .args(["--namespace", "openshift-machine-api"])
        // Nothing to serve: controller-runtime turns an address of 0 off.
        .args([
            "--metrics-bind-address",
            "0",
            "--health-addr",
            "0",
            "-v",
            "2",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .expect("the MachineHealthCheck controller runs")
}

/// The world with the shipped health checks and no simulated health-check controller: the
/// real one acts.
async fn world_for_the_real_health_check(c: &Cluster) -> RemoteCluster {
    let options = RemoteOptions {
        create_health_checks: false,
        run_health_check_controllers: false,
    };
    world_with(c, spec(), options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_openshift_machine_health_check_annotates_and_baremend_remediates() {
    let c = by_annotation(json!({})).await;
    let world = world_for_the_real_health_check(&c).await;
    let mut mhc = run_real_machine_health_check(&c).await;
    let done = hang_and_remediate(&c, &world, "worker-2").await;
    assert_eq!(
        done["spec"]["trigger"]["kind"], "MachineAnnotation",
        "{done:#}"
    );
    // The real controller took the annotation off once the Machine was healthy again.
    let (_, annotations, _) = c
        .kubectl(
            &[
                "get",
                "machine",
                "worker-2",
                "-n",
                "openshift-machine-api",
                "-o",
                "jsonpath={.metadata.annotations}",
            ],
            None,
        )
        .await;
    assert!(
        !annotations.contains("host.metal3.io/external-remediation"),
        "{annotations}"
    );
    assert!(
        mhc.try_wait().unwrap().is_none(),
        "the MachineHealthCheck controller exited"
    );
    let _ = mhc.kill().await;
    world.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_openshift_machine_health_check_requests_through_baremends_template() {
    let c = by_template().await;
    let world = world_for_the_real_health_check(&c).await;
    let mut mhc = run_real_machine_health_check(&c).await;
    let done = hang_and_remediate(&c, &world, "worker-1").await;
    assert_eq!(
        done["spec"]["trigger"]["kind"], "MachineRemediation",
        "{done:#}"
    );
    assert_eq!(done["spec"]["trigger"]["name"], "worker-1", "{done:#}");
    assert!(
        mhc.try_wait().unwrap().is_none(),
        "the MachineHealthCheck controller exited"
    );
    let _ = mhc.kill().await;
    world.stop().await;
}

/// A tenant: namespace `tenant-a` and a ServiceAccount there with every right on baremend's
/// kinds in it and none elsewhere; kubectl with a token the server issued for it.
async fn tenant(c: &Cluster) -> common::kubectl::Kubectl {
    let manifest = r#"
apiVersion: v1
kind: Namespace
metadata: {name: tenant-a}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: tenant, namespace: tenant-a}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant, namespace: tenant-a}
rules:
  - {apiGroups: [baremend.io], resources: ["*"], verbs: ["*"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant, namespace: tenant-a}
subjects: [{kind: ServiceAccount, name: tenant, namespace: tenant-a}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
"#;
    c.ok(&["apply", "-f", "-"], Some(manifest)).await;
    let plane = c.plane().expect("a real plane");
    let token = plane
        .token("tenant-a", "tenant")
        .await
        .expect("a tenant token");
    let dir = c.dir.join("tenant");
    std::fs::create_dir_all(&dir).unwrap();
    common::kubectl::Kubectl::new(&dir, &plane.kubeconfig_with_token(&token))
}

/// A `NodeRemediation` named after `node` in `namespace`.
fn node_request(namespace: &str, node: &str) -> String {
    format!(
        "apiVersion: baremend.io/v1alpha1\nkind: NodeRemediation\nmetadata:\n  name: {node}\n  namespace: {namespace}\nspec: {{}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_node_remediations_are_refused_by_the_real_server_and_by_baremend() {
    // Four machines and a 50 % storm gate: the three refused requests counted beside one
    // real failure would hold it.
    let mut policy = TRUSTED_NODE_RELEASE.clone();
    policy["storm"] = json!({"maxUnhealthyPercent": 50});
    let c = by_node_health_check(policy).await;
    let spec = ClusterSpec {
        node_health_check: true,
        ..spec()
    };
    let world = world(&c, spec).await;
    let running = run_baremend(&c).await;
    let tenant = tenant(&c).await;
    // The real server's RBAC: not where the health check puts its requests.
    let (ok, _, err) = tenant
        .run(
            &["create", "-f", "-"],
            Some(&node_request("openshift-workload-availability", "worker-1")),
        )
        .await;
    assert!(!ok && err.contains("forbidden"), "{err}");
    // In its own namespace the server accepts them; baremend refuses them.
    let healthy = ["worker-1", "worker-2", "master-0"];
    for node in healthy {
        let (ok, out, err) = tenant
            .run(
                &["create", "-f", "-"],
                Some(&node_request("tenant-a", node)),
            )
            .await;
        assert!(ok, "{out}{err}");
    }
    for node in healthy {
        eventually(
            &format!("tenant-a/{node} Accepted=False NamespaceNotTrusted"),
            Duration::from_secs(30),
            async || {
                let (_, out, _) = c
                    .kubectl(
                        &[
                            "get",
                            "noderemediation",
                            node,
                            "-n",
                            "tenant-a",
                            "-o",
                            "jsonpath={.status.conditions[?(@.type==\"Accepted\")].reason}",
                        ],
                        None,
                    )
                    .await;
                if out.trim() == "NamespaceNotTrusted" {
                    Ok(())
                } else {
                    Err(out)
                }
            },
        )
        .await;
    }
    // A real failure is remediated: the refused requests hold nothing back, and the healthy
    // hosts were never powered.
    let done = remediate_hung(&c, &world, "worker-0", running).await;
    assert_eq!(
        done["spec"]["trigger"]["kind"], "NodeRemediation",
        "{done:#}"
    );
    for node in healthy {
        let host = world.host(node).expect("the host");
        assert!(host.host.history().is_empty(), "{node} was powered");
    }
    world.stop().await;
}

/// `jsonpath` of `kind`/`name` in `namespace`, as kubectl prints it ("" when absent).
async fn jsonpath(c: &Cluster, kind: &str, namespace: &str, name: &str, path: &str) -> String {
    let (_, out, _) = c
        .kubectl(
            &[
                "get",
                kind,
                name,
                "-n",
                namespace,
                "-o",
                &format!("jsonpath={path}"),
            ],
            None,
        )
        .await;
    out.trim().to_owned()
}

/// Issue 39's attacks on the credentials and on the OpenShift Machine path, judged by the real
/// server's RBAC and admission and by `baremend run` with deploy/'s identity: in namespace
/// `tenant-a` (which the policy trusts for nothing), with the controller allowed to read BMC
/// Secrets there as the install guide binds it beside Machines,
/// - someone who may write Machines makes one naming `openshift-machine-api/worker-2`'s host
///   and asks for its remediation: nothing is powered, its Remediation fails saying why;
/// - the tenant (baremend's kinds only, its token issued by the server) pairs an
///   administrator's BMC Secret with an address of its choosing in a `HostBmc` of that
///   Machine: the power monitor (every second) never connects there, and the `HostBmc` says
///   `NamespaceNotTrusted`.
///
/// A real failure is remediated meanwhile with nothing refused; then the namespace is listed
/// in `trust.hostBmcNamespaces` and the same address is connected to (the test's own check
/// that it can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_host_bmc_and_machine_move_nothing_on_the_real_server() {
    let c = by_annotation(json!({})).await;
    let world = world(&c, spec()).await;
    let running = run_baremend_polling(&c, "1s").await;
    let tenant = tenant(&c).await;
    let (address, logins) = common::counting_listener().await;
    let admin = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: baremend-bmc-credentials, namespace: tenant-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: baremend-bmc-credentials}
subjects: [{kind: ServiceAccount, name: baremend, namespace: baremend}]
---
apiVersion: v1
kind: Secret
metadata: {name: rack-bmc, namespace: tenant-a}
stringData: {username: admin, password: rack-secret}
---
apiVersion: machine.openshift.io/v1beta1
kind: Machine
metadata:
  name: evil
  namespace: tenant-a
  annotations:
    metal3.io/BareMetalHost: openshift-machine-api/worker-2
    host.metal3.io/external-remediation: ""
spec: {providerID: "baremetalhost:///openshift-machine-api/worker-2"}
"#;
    c.ok(&["apply", "-f", "-"], Some(admin)).await;
    c.ok(
        &[
            "patch",
            "machines.machine.openshift.io",
            "evil",
            "-n",
            "tenant-a",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            r#"{"status": {"phase": "Running", "nodeRef": {"kind": "Node", "name": "worker-2"}}}"#,
        ],
        None,
    )
    .await;
    let host_bmc = format!(
        "apiVersion: baremend.io/v1alpha1\nkind: HostBmc\nmetadata: {{name: evil, namespace: tenant-a}}\nspec: {{machineName: evil, address: '{address}', credentialsName: rack-bmc}}\n"
    );
    let (ok, out, err) = tenant.run(&["create", "-f", "-"], Some(&host_bmc)).await;
    assert!(ok, "the tenant's HostBmc: {out}{err}");
    // The Machine's host is refused: its Remediation fails with the rule's words.
    let failed = eventually(
        "tenant-a/evil-1 Failed",
        Duration::from_secs(60),
        async || {
            let phase = jsonpath(
                &c,
                "remediations.baremend.io",
                "tenant-a",
                "evil-1",
                "{.status.phase}",
            )
            .await;
            let error = jsonpath(
                &c,
                "remediations.baremend.io",
                "tenant-a",
                "evil-1",
                "{.status.lastError}",
            )
            .await;
            (phase == "Failed")
                .then_some(error.clone())
                .ok_or(format!("{phase}: {error}"))
        },
    )
    .await;
    assert!(
        failed.contains("trust.machineHostNamespaces does not list openshift-machine-api"),
        "{failed}"
    );
    // The HostBmc is told, where its author looks.
    eventually(
        "tenant-a/evil NamespaceNotTrusted",
        Duration::from_secs(30),
        async || {
            let reason = jsonpath(
                &c,
                "hostbmcs.baremend.io",
                "tenant-a",
                "evil",
                r#"{.status.conditions[?(@.type=="Accepted")].reason}"#,
            )
            .await;
            (reason == "NamespaceNotTrusted")
                .then_some(())
                .ok_or(reason)
        },
    )
    .await;
    // A real failure is remediated meanwhile (the monitor reads every second all along).
    remediate_hung(&c, &world, "worker-0", running).await;
    assert_eq!(
        logins.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the controller connected to the tenant's address with the namespace's BMC Secret"
    );
    let worker_2 = world.host("worker-2").expect("the host");
    assert!(worker_2.host.history().is_empty(), "worker-2 was powered");
    let annotations = jsonpath(
        &c,
        "baremetalhosts.metal3.io",
        "openshift-machine-api",
        "worker-2",
        "{.metadata.annotations}",
    )
    .await;
    assert!(!annotations.contains("reboot.metal3.io"), "{annotations}");
    // The same HostBmc believed (an administrator lists the namespace): connected to.
    let running = run_baremend_polling(&c, "1s").await;
    c.merge_policy(&json!({"spec": {"trust": {"hostBmcNamespaces": ["baremend", "openshift-machine-api", "tenant-a"]}}}))
        .await;
    eventually(
        "the listed namespace's HostBmc address connected to",
        Duration::from_secs(30),
        async || {
            let count = logins.load(std::sync::atomic::Ordering::SeqCst);
            (count > 0).then_some(()).ok_or(count.to_string())
        },
    )
    .await;
    drop(running);
    world.stop().await;
}
