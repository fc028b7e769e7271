//! kubectl (the pinned v1.36.3, a real client) against the simulated API server over HTTPS with a bearer
//! token, on objects: get, apply (client- and server-side), patch, label, selectors, delete
//! with finalizers, watch, create, drain, scale, logs and a custom resource's columns and
//! refusals, as against a real cluster.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use baremend_testkit as common;
use baremend_testkit::on_both_servers;

use common::eventually;
use common::kubectl::{cluster, cluster_on};
use common::servers::ServerKind;

const NAMESPACE: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n";

fn configmap(name: &str, labels: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: demo\n  labels: {labels}\ndata:\n  k: \"{value}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_apply_patch_label_and_selectors_work() {
    let c = cluster().await;
    assert!(
        c.ok(&["get", "namespaces"], None)
            .await
            .contains("kube-system")
    );
    c.ok(&["apply", "-f", "-"], Some(NAMESPACE)).await;
    assert!(
        c.ok(
            &["apply", "-f", "-"],
            Some(&configmap("one", "{app: db}", "1"))
        )
        .await
        .contains("created")
    );
    assert!(
        c.ok(
            &["apply", "-f", "-"],
            Some(&configmap("one", "{app: db}", "1"))
        )
        .await
        .contains("unchanged")
    );
    assert!(
        c.ok(
            &["apply", "-f", "-"],
            Some(&configmap("one", "{app: db}", "2"))
        )
        .await
        .contains("configured")
    );
    c.ok(
        &["apply", "-f", "-"],
        Some(&configmap("two", "{app: web}", "1")),
    )
    .await;
    assert_eq!(
        c.ok(
            &["-n", "demo", "get", "cm", "-l", "app=db", "-o", "name"],
            None
        )
        .await
        .trim(),
        "configmap/one"
    );
    assert_eq!(
        c.ok(
            &[
                "-n",
                "demo",
                "get",
                "cm",
                "--field-selector",
                "metadata.name=two",
                "-o",
                "name"
            ],
            None
        )
        .await
        .trim(),
        "configmap/two"
    );
    c.ok(&["-n", "demo", "label", "cm", "one", "tier=back"], None)
        .await;
    c.ok(&["-n", "demo", "annotate", "cm", "one", "note=hi"], None)
        .await;
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "one",
            "--type=merge",
            "-p",
            r#"{"data":{"m":"1"}}"#,
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "one",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/data/j","value":"1"}]"#,
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "one",
            "-p",
            r#"{"metadata":{"finalizers":["a/b"]}}"#,
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "one",
            "--type=strategic",
            "-p",
            r#"{"metadata":{"finalizers":["c/d"]}}"#,
        ],
        None,
    )
    .await;
    let out = c.ok(&["-n", "demo", "get", "cm", "one", "-o", "jsonpath={.data.k},{.data.m},{.data.j},{.metadata.labels.tier},{.metadata.annotations.note},{.metadata.finalizers}"], None).await;
    assert_eq!(out, r#"2,1,1,back,hi,["a/b","c/d"]"#);
    let (ok, _, err) = c
        .kubectl(
            &[
                "-n",
                "demo",
                "patch",
                "cm",
                "one",
                "--type=json",
                "-p",
                r#"[{"op":"test","path":"/data/k","value":"9"}]"#,
            ],
            None,
        )
        .await;
    assert!(!ok && err.contains("invalid"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_reports_conflicts_and_forces() {
    let c = cluster().await;
    c.ok(&["apply", "-f", "-"], Some(NAMESPACE)).await;
    c.ok(
        &["apply", "--server-side", "-f", "-"],
        Some(&configmap("s", "{}", "1")),
    )
    .await;
    let (ok, _, err) = c
        .kubectl(
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            Some(&configmap("s", "{}", "2")),
        )
        .await;
    assert!(!ok && err.contains("conflict with \"kubectl\""), "{err}");
    c.ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&configmap("s", "{}", "2")),
    )
    .await;
    assert_eq!(
        c.ok(
            &["-n", "demo", "get", "cm", "s", "-o", "jsonpath={.data.k}"],
            None
        )
        .await,
        "2"
    );
    let json = c
        .ok(
            &[
                "-n",
                "demo",
                "get",
                "cm",
                "s",
                "-o",
                "json",
                "--show-managed-fields",
            ],
            None,
        )
        .await;
    let object: serde_json::Value = serde_json::from_str(&json).unwrap();
    let owners_of_data: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["fieldsV1"]["f:data"].is_object())
        .map(|m| m["manager"].as_str().unwrap())
        .collect();
    assert_eq!(
        owners_of_data,
        ["other"],
        "the forced apply took .data.k over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_waits_for_finalizers_and_watch_sees_changes() {
    let c = cluster().await;
    c.ok(&["apply", "-f", "-"], Some(NAMESPACE)).await;
    c.ok(&["apply", "-f", "-"], Some(&configmap("f", "{}", "1")))
        .await;
    let mut watch = tokio::process::Command::new(common::kubectl::binaries().kubectl())
        .args([
            "-n",
            "demo",
            "get",
            "cm",
            "-w",
            "--output-watch-events",
            "--request-timeout=4s",
        ])
        .env("KUBECONFIG", &c.kubeconfig)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let printed = Arc::new(Mutex::new(String::new()));
    let watcher = {
        let printed = printed.clone();
        let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Some(line) = lines.next_line().await.unwrap() {
                let mut printed = printed.lock().unwrap();
                printed.push_str(&line);
                printed.push('\n');
            }
            watch.wait().await.unwrap();
            printed.lock().unwrap().clone()
        })
    };
    // The watch lists first (an ADDED line for f) and then watches from that list's
    // resourceVersion: every change made once the line is printed is seen.
    eventually(
        "kubectl's watch to list f",
        Duration::from_secs(4),
        async || printed.lock().unwrap().contains("ADDED"),
    )
    .await;
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "f",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["x/y"]}}"#,
        ],
        None,
    )
    .await;
    c.ok(&["-n", "demo", "delete", "cm", "f", "--wait=false"], None)
        .await;
    assert!(
        c.ok(
            &[
                "-n",
                "demo",
                "get",
                "cm",
                "f",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}"
            ],
            None
        )
        .await
        .ends_with('Z')
    );
    let waiter_kubeconfig = c.kubeconfig.clone();
    let waiter = tokio::spawn(async move {
        tokio::process::Command::new(common::kubectl::binaries().kubectl())
            .args([
                "-n",
                "demo",
                "wait",
                "--for=delete",
                "cm/f",
                "--timeout=20s",
            ])
            .env("KUBECONFIG", waiter_kubeconfig)
            .kill_on_drop(true)
            .output()
            .await
            .unwrap()
    });
    // A negative: for 500 ms `kubectl wait` keeps waiting; no condition to wait for proves
    // that it does not return.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiter.is_finished(),
        "kubectl wait must wait for the finalizer"
    );
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "cm",
            "f",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
        None,
    )
    .await;
    let waited = waiter.await.unwrap();
    assert!(
        waited.status.success(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let events = watcher.await.unwrap();
    for expected in ["ADDED", "MODIFIED", "DELETED"] {
        assert!(
            events.contains(expected),
            "{expected} missing from:\n{events}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_print_their_columns_and_refuse_strategic_patches() {
    let c = cluster().await;
    c.ok(&["apply", "-f", "-"], Some(NAMESPACE)).await;
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.com}\nspec:\n  group: example.com\n  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd]}\n  scope: Namespaced\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n    subresources: {status: {}}\n    additionalPrinterColumns:\n    - {name: Size, type: integer, jsonPath: .spec.size}\n    - {name: Phase, type: string, jsonPath: .status.phase}\n";
    c.ok(&["apply", "-f", "-"], Some(crd)).await;
    c.ok(&["apply", "-f", "-"], Some("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: demo}\nspec: {size: 3}\n")).await;
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "widget",
            "w1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Ready"}}"#,
        ],
        None,
    )
    .await;
    let table = c.ok(&["-n", "demo", "get", "wd"], None).await;
    assert!(table.contains("SIZE") && table.contains("PHASE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["w1", "3", "Ready"]),
        "{table}"
    );
    let (ok, _, err) = c
        .kubectl(
            &[
                "-n",
                "demo",
                "patch",
                "widget",
                "w1",
                "-p",
                r#"{"spec":{"size":4}}"#,
            ],
            None,
        )
        .await;
    assert!(!ok && err.contains("strategic"), "{err}");
}

fn pod(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: demo\n  labels: {{app: db}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: db, uid: 0b0c7a52-5a8e-4f55-9b70-2a1d6c6f0e11, controller: true}}]\nspec:\n  nodeName: w0\n  containers: [{{name: c, image: db}}]\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_commands_and_a_drain_blocked_by_a_pdb_until_it_allows_it() {
    let c = cluster().await;
    // Typed clients: protobuf bodies.
    c.ok(&["create", "namespace", "demo"], None).await;
    c.ok(
        &[
            "-n",
            "demo",
            "create",
            "configmap",
            "cm",
            "--from-literal=a=1",
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "-n",
            "demo",
            "create",
            "secret",
            "generic",
            "s",
            "--from-literal=p=q",
        ],
        None,
    )
    .await;
    assert_eq!(
        c.ok(
            &[
                "-n",
                "demo",
                "get",
                "secret",
                "s",
                "-o",
                "jsonpath={.data.p}"
            ],
            None
        )
        .await,
        "cQ=="
    );
    c.ok(&["apply", "-f", "-"], Some("apiVersion: v1\nkind: Node\nmetadata: {name: w0}\nstatus:\n  conditions: [{type: Ready, status: \"True\"}]\n")).await;
    c.ok(&["apply", "-f", "-"], Some("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: db, namespace: demo}\nspec:\n  minAvailable: 2\n  selector: {matchLabels: {app: db}}\n")).await;
    for name in ["db-0", "db-1"] {
        c.ok(&["apply", "-f", "-"], Some(&pod(name))).await;
        c.ok(
            &[
                "-n",
                "demo",
                "patch",
                "pod",
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#,
            ],
            None,
        )
        .await;
    }
    let (ok, out, err) = c
        .kubectl(&["drain", "w0", "--timeout=3s", "--grace-period=0"], None)
        .await;
    assert!(!ok, "the drain must be refused:\n{out}\n{err}");
    assert!(err.contains("disruption budget"), "{err}");
    assert!(
        c.ok(&["get", "node", "w0"], None)
            .await
            .contains("SchedulingDisabled"),
        "cordoned"
    );
    let pods = c
        .ok(&["-n", "demo", "get", "pods", "-o", "name"], None)
        .await;
    assert_eq!(pods.lines().count(), 2, "nothing was evicted: {pods}");
    c.ok(
        &[
            "-n",
            "demo",
            "patch",
            "pdb",
            "db",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":0}}"#,
        ],
        None,
    )
    .await;
    let out = c
        .ok(&["drain", "w0", "--timeout=20s", "--grace-period=0"], None)
        .await;
    assert!(out.contains("drained"), "{out}");
    assert_eq!(
        c.ok(&["-n", "demo", "get", "pods", "-o", "name"], None)
            .await
            .trim(),
        ""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_without_a_namespace_flag_uses_the_contexts_namespace() {
    let c = cluster().await;
    // No `-n`: kubectl's typed clients send a protobuf object whose namespace is empty, posted
    // to the context namespace's URL (`default`), and the server fills it in.
    let out = c
        .ok(&["create", "configmap", "c1", "--from-literal=a=1"], None)
        .await;
    assert!(out.contains("configmap/c1 created"), "{out}");
    let out = c
        .ok(
            &["create", "secret", "generic", "s1", "--from-literal=a=1"],
            None,
        )
        .await;
    assert!(out.contains("secret/s1 created"), "{out}");
    assert_eq!(
        c.ok(
            &[
                "get",
                "configmap",
                "c1",
                "-o",
                "jsonpath={.metadata.namespace}/{.data.a}"
            ],
            None
        )
        .await,
        "default/1"
    );
    assert_eq!(
        c.ok(
            &[
                "get",
                "secret",
                "s1",
                "-o",
                "jsonpath={.metadata.namespace}/{.data.a}"
            ],
            None
        )
        .await,
        "default/MQ=="
    );
    // A manifest naming another namespace, sent to that namespace's URL, still lands there;
    // `-n` with a different one is refused by kubectl itself before anything is sent.
    let (ok, _, err) = c
        .kubectl(
            &["-n", "kube-system", "create", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c2\n  namespace: default\n"),
        )
        .await;
    assert!(!ok && err.contains("namespace"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_a_kind_whose_crd_is_missing_says_so() {
    let c = cluster().await;
    let monitor = "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: m\n  namespace: default\nspec: {}\n";
    let (ok, _, err) = c.kubectl(&["apply", "-f", "-"], Some(monitor)).await;
    assert!(!ok);
    assert!(
        err.contains(
            r#"no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1""#
        ) && err.contains("ensure CRDs are installed first"),
        "{err}"
    );
}

const SCALABLE_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: pools.example.com
spec:
  group: example.com
  names: {kind: Pool, plural: pools, singular: pool}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
    subresources:
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.ready}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_writes_a_custom_resources_replicas() {
    let c = cluster().await;
    c.ok(&["apply", "-f", "-"], Some(SCALABLE_CRD)).await;
    c.ok(
        &["apply", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Pool\nmetadata:\n  name: p\n  namespace: default\nspec:\n  size: 1\n"),
    )
    .await;
    let out = c.ok(&["scale", "pool/p", "--replicas=3"], None).await;
    assert!(out.contains("pool.example.com/p scaled"), "{out}");
    let size = c
        .ok(&["get", "pool", "p", "-o", "jsonpath={.spec.size}"], None)
        .await;
    assert_eq!(size, "3");
    // A precondition on the current replicas: refused when wrong, applied when right.
    let (ok, _, err) = c
        .kubectl(
            &["scale", "pool/p", "--current-replicas=1", "--replicas=5"],
            None,
        )
        .await;
    assert!(
        !ok && err.contains("Expected replicas to be 1, was 3"),
        "{err}"
    );
    c.ok(
        &["scale", "pool/p", "--current-replicas=3", "--replicas=5"],
        None,
    )
    .await;
    let size = c
        .ok(&["get", "pool", "p", "-o", "jsonpath={.spec.size}"], None)
        .await;
    assert_eq!(size, "5");
}

/// kubectl prints a 422 from its details: `The <Kind> "<name>" is invalid: <field>: <message>`
/// (kubernetes `staging/src/k8s.io/kubectl/pkg/cmd/util/helpers.go`, `checkErr` for
/// `IsInvalid`), here with the schema's and a CEL rule's errors of baremend's own CRDs; an
/// unsupported value skips the CRD's rules, which is said as a second cause (listed with `*`).
/// On both servers.
async fn kubectl_apply_of_an_invalid_custom_resource_prints_the_servers_reasons(
    server: ServerKind,
) {
    let c = cluster_on(server).await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    for file in ["remediationpolicies.yaml", "hostbmcs.yaml"] {
        c.ok(&["apply", "-f", crds.join(file).to_str().unwrap()], None)
            .await;
    }
    c.ok(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            "crd/remediationpolicies.baremend.io",
            "crd/hostbmcs.baremend.io",
        ],
        None,
    )
    .await;
    let (ok, out, err) = c
        .kubectl(
            &["apply", "-f", "-"],
            Some("apiVersion: baremend.io/v1alpha1\nkind: RemediationPolicy\nmetadata:\n  name: x\nspec:\n  mode: Bogus\n"),
        )
        .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains(
            "The RemediationPolicy \"x\" is invalid: \n\
             * spec.mode: Unsupported value: \"Bogus\": supported values: \"Remediate\", \"DryRun\"\n\
             * <nil>: Invalid value: null: some validation rules were not checked because the \
             object was invalid; correct the existing errors to complete validation\n"
        ),
        "{err}"
    );
    let (ok, out, err) = c
        .kubectl(
            &["apply", "-f", "-"],
            Some("apiVersion: baremend.io/v1alpha1\nkind: HostBmc\nmetadata:\n  name: h\n  namespace: default\nspec:\n  address: redfish://10.0.0.1\n  credentialsName: creds\n"),
        )
        .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains(
            "The HostBmc \"h\" is invalid: <nil>: Invalid value: failed rule: has(self.spec.machineName) || has(self.spec.nodeName)"
        ),
        "{err}"
    );
    let out = c
        .ok(
            &["apply", "-f", "-"],
            Some("apiVersion: baremend.io/v1alpha1\nkind: RemediationPolicy\nmetadata:\n  name: x\nspec:\n  mode: DryRun\n"),
        )
        .await;
    assert!(
        out.contains("remediationpolicy.baremend.io/x created"),
        "{out}"
    );
    let mode = c
        .ok(
            &["get", "brpol", "x", "-o", "jsonpath={.spec.nodeRelease}"],
            None,
        )
        .await;
    assert_eq!(mode, "Delete", "the schema's default");
}

/// `kubectl get cs` prints the control plane's components as on a 1.32 cluster (the real
/// printer's Name, Status, Message and Error columns), and they cannot be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_componentstatuses_prints_them_healthy() {
    let c = cluster().await;
    let out = c.ok(&["get", "componentstatuses"], None).await;
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["NAME", "STATUS", "MESSAGE", "ERROR"], "{out}");
    let mut names: Vec<&str> = rows[1..].iter().map(|r| r[0]).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["controller-manager", "etcd-0", "scheduler"],
        "{out}"
    );
    assert!(
        rows[1..].iter().all(|r| r[1..] == ["Healthy", "ok"]),
        "{out}"
    );
    let (ok, _, err) = c.kubectl(&["delete", "cs", "scheduler"], None).await;
    assert!(!ok && err.contains("MethodNotAllowed"), "{err}");
}

/// `kubectl logs` reads a Pod's log subresource as from a real server: the Pod's only
/// container, `--tail`, and the real refusal of a container the Pod does not have
/// (kubernetes `pkg/registry/core/pod/strategy.go`, `LogLocation`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_a_pods_log_subresource() {
    let c = cluster().await;
    c.ok(&["apply", "-f", "-"], Some(NAMESPACE)).await;
    c.ok(&["apply", "-f", "-"], Some(&pod("db-0"))).await;
    c.sim()
        .set_pod_log("demo", "db-0", "c", "one\ntwo\nthree\n");
    let all = c.ok(&["-n", "demo", "logs", "db-0"], None).await;
    assert_eq!(all, "one\ntwo\nthree\n");
    let tail = c
        .ok(&["-n", "demo", "logs", "db-0", "--tail=2"], None)
        .await;
    assert_eq!(tail, "two\nthree\n");
    let (ok, _, err) = c
        .kubectl(&["-n", "demo", "logs", "db-0", "-c", "nope"], None)
        .await;
    assert!(!ok);
    assert!(
        err.contains("container nope is not valid for pod db-0"),
        "{err}"
    );
    let (ok, _, err) = c.kubectl(&["-n", "demo", "logs", "db-9"], None).await;
    assert!(!ok && err.contains("pods \"db-9\" not found"), "{err}");
}

on_both_servers!(kubectl_apply_of_an_invalid_custom_resource_prints_the_servers_reasons);
