//! kubectl (v1.32, a real client) against the simulated API server over HTTPS with a bearer
//! token: the commands operators and our docs use must behave as against a real cluster.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baremend_sim::apiserver::{ApiServer, ApiServerConfig};
use common::kubectl::{Kubectl, MONITORING_CRDS};
use common::{eventually, scratch};
use tokio::io::{AsyncBufReadExt, BufReader};

struct Cluster {
    server: ApiServer,
    kubectl: Kubectl,
    kubeconfig: PathBuf,
    dir: PathBuf,
}

async fn cluster() -> Cluster {
    let server = ApiServer::start(ApiServerConfig {
        tls: true,
        ..ApiServerConfig::default()
    })
    .await
    .unwrap();
    let dir = scratch("kubectl");
    let kubectl = Kubectl::new(&dir, &server.kubeconfig());
    let kubeconfig = kubectl.kubeconfig().to_path_buf();
    Cluster {
        server,
        kubectl,
        kubeconfig,
        dir,
    }
}

impl Cluster {
    async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        self.kubectl.run(args, stdin).await
    }

    async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.kubectl.ok(args, stdin).await
    }
}

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
    let mut watch = tokio::process::Command::new("kubectl")
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
        tokio::process::Command::new("kubectl")
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
async fn our_crds_apply_and_remediations_print_machine_node_phase_strategy_and_age() {
    let c = cluster().await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let out = c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    let files = std::fs::read_dir(&crds)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    assert!(files >= 5, "{files} CRD files");
    assert_eq!(out.matches("created").count(), files, "{out}");
    c.ok(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: baremend.io/v1alpha1\nkind: Remediation\nmetadata:\n  name: worker-1-1\n  namespace: default\nspec:\n  machineName: worker-1\n  nodeName: worker-1\n",
        ),
    )
    .await;
    let table = c.ok(&["get", "brem"], None).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "MACHINE", "NODE", "PHASE", "STRATEGY", "AGE"]
    );
    assert!(
        table.contains("worker-1-1   worker-1   worker-1"),
        "{table}"
    );
    // The retry of a Failed remediation as docs/guides/operate.md shows it.
    let out = c
        .ok(
            &["annotate", "brem", "worker-1-1", "baremend.io/retry=true"],
            None,
        )
        .await;
    assert!(
        out.contains("remediation.baremend.io/worker-1-1 annotated"),
        "{out}"
    );
    let value = c
        .ok(
            &[
                "get",
                "brem",
                "worker-1-1",
                "-o",
                r"jsonpath={.metadata.annotations.baremend\.io/retry}",
            ],
            None,
        )
        .await;
    assert_eq!(value.trim(), "true");
}

/// Every CRD the documented combinations and the examples need: the Prometheus Operator's,
/// OpenShift's, Cluster API's and metal3's, NodeHealthCheck's, then ours; and the namespaces
/// the health checks' objects live in (the operators that own them make them on a cluster).
async fn install_prerequisites(c: &Cluster) {
    c.ok(&["apply", "-f", "-"], Some(MONITORING_CRDS)).await;
    let fixtures = baremend_sim::cluster::fixtures::all()
        .into_iter()
        .chain(baremend_sim::cluster::fixtures::cluster_api_crds())
        .chain([baremend_sim::cluster::fixtures::node_health_check_crd()]);
    for crd in fixtures {
        c.ok(&["apply", "-f", "-"], Some(&crd.to_string())).await;
    }
    let crds = common::repo_root().join("crds");
    let out = c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    for name in ["remediations", "remediationpolicies", "hostbmcs"] {
        assert!(
            out.contains(&format!("{name}.baremend.io created")),
            "{out}"
        );
    }
    for namespace in [
        "openshift-machine-api",
        "metal3",
        "openshift-workload-availability",
    ] {
        c.ok(&["create", "namespace", namespace], None).await;
    }
}

/// A kustomization of an admin's own, in a folder beside a copy of the repository's deploy/
/// (`scratch/baremend/deploy`, so that `../baremend/deploy/...` resolves as the guide writes
/// it); returns its folder.
fn own_kustomization(scratch: &std::path::Path, text: &str) -> PathBuf {
    common::copy_of_deploy(&scratch.join("baremend"));
    let mine = scratch.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), text).unwrap();
    mine
}

/// The kustomizations docs/guides/install.md shows (its YAML blocks of `kind: Kustomization`).
fn documented_kustomizations() -> Vec<String> {
    let guide =
        std::fs::read_to_string(common::repo_root().join("docs/guides/install.md")).unwrap();
    let mut blocks = Vec::new();
    let mut rest = guide.as_str();
    while let Some(at) = rest.find("```yaml\n") {
        let body = &rest[at + "```yaml\n".len()..];
        let end = body.find("```").expect("a closed code block");
        let block = &body[..end];
        // Indented when inside a list item: kustomize reads it unindented.
        let indent = block
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.len() - l.trim_start().len())
            .min()
            .unwrap_or(0);
        let text: String = block
            .lines()
            .map(|l| l.get(indent..).unwrap_or("").to_string() + "\n")
            .collect();
        if text.lines().any(|l| l == "kind: Kustomization") {
            blocks.push(text);
        }
        rest = &body[end + 3..];
    }
    blocks
}

/// The components a kustomization names (their folder names).
fn components_of(text: &str) -> Vec<String> {
    let value: serde_json::Value = serde_yaml::from_str(text).unwrap();
    value["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str()?.rsplit('/').next().map(String::from))
        .collect()
}

/// What a rendering of a documented combination must hold, whatever its components.
fn check_rendering(name: &str, documents: &[serde_json::Value]) {
    let of_kind = |kind: &str| -> Vec<&serde_json::Value> {
        documents.iter().filter(|d| d["kind"] == kind).collect()
    };
    // A NodeHealthCheck disables itself while any custom OpenShift MachineHealthCheck exists
    // (medik8s/node-healthcheck-operator, internal/mhc/checker.go `NeedDisableNHC`): no
    // documented combination holds both.
    let custom_mhcs = of_kind("MachineHealthCheck")
        .into_iter()
        .filter(|d| d["apiVersion"] == "machine.openshift.io/v1beta1")
        .count();
    let nhcs = of_kind("NodeHealthCheck").len();
    assert!(
        custom_mhcs == 0 || nhcs == 0,
        "{name}: {nhcs} NodeHealthCheck(s) beside {custom_mhcs} MachineHealthCheck(s)"
    );
    // Every health check names a template of ours that the same combination defines, or the
    // external-baremetal strategy.
    let templates: Vec<(&str, &str)> = documents
        .iter()
        .filter(|d| {
            d["kind"] == "MachineRemediationTemplate" || d["kind"] == "NodeRemediationTemplate"
        })
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    // Our kinds read as our types (a misspelt field would be dropped).
    for document in documents {
        match document["kind"].as_str().unwrap() {
            "MachineRemediationTemplate" => {
                let template: baremend::api::MachineRemediationTemplate =
                    serde_json::from_value(document.clone()).unwrap();
                assert_ne!(
                    template.spec.template.spec.overrides,
                    baremend::api::PolicyOverrides::default(),
                    "{name}: {document}"
                );
            }
            "NodeRemediationTemplate" => {
                let _: baremend::api::NodeRemediationTemplate =
                    serde_json::from_value(document.clone()).unwrap();
            }
            _ => {}
        }
    }
    let defined = |reference: &serde_json::Value| {
        reference["apiVersion"] == "baremend.io/v1alpha1"
            && templates.iter().any(|(kind, template)| {
                reference["kind"] == *kind && reference["name"] == *template
            })
    };
    for check in of_kind("MachineHealthCheck") {
        let template = &check["spec"]["remediationTemplate"];
        assert!(
            defined(template)
                || check["metadata"]["annotations"]["machine.openshift.io/remediation-strategy"]
                    == "external-baremetal",
            "{name}: {check}"
        );
    }
    for check in of_kind("NodeHealthCheck") {
        let first = &check["spec"]["escalatingRemediations"][0]["remediationTemplate"];
        assert!(defined(first), "{name}: {check}");
    }
    // The BMC credentials' RoleBinding stays where the Secrets are.
    let binding = of_kind("RoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["name"] == "baremend-bmc-credentials")
        .expect("the BMC credentials' RoleBinding");
    assert_eq!(
        binding["metadata"]["namespace"], "openshift-machine-api",
        "{name}"
    );
    // The drift helpers run the controller's image.
    let deployment = of_kind("Deployment")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let helper_image = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "BAREMEND_IMAGE")
        .map(|e| e["value"].clone());
    assert_eq!(helper_image, Some(container["image"].clone()), "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_openshift_overlay_and_creates_the_policies_once() {
    let c = cluster().await;
    let root = common::repo_root();
    install_prerequisites(&c).await;
    let overlay = root.join("deploy/overlays/openshift");
    let out = c
        .ok(&["apply", "-k", overlay.to_str().unwrap()], None)
        .await;
    for object in [
        "namespace/baremend created",
        "serviceaccount/baremend created",
        "serviceaccount/baremend-drift-helper created",
        "role.rbac.authorization.k8s.io/baremend-drift-helper created",
        "rolebinding.rbac.authorization.k8s.io/baremend-drift-helper created",
        "clusterrole.rbac.authorization.k8s.io/baremend created",
        "clusterrole.rbac.authorization.k8s.io/baremend-ext-remediation created",
        "rolebinding.rbac.authorization.k8s.io/baremend-bmc-credentials created",
        "role.rbac.authorization.k8s.io/baremend-leader-election created",
        "configmap/baremend-dashboard created",
        "service/baremend-metrics created",
        "serviceaccount/baremend-metrics-reader created",
        "secret/baremend-metrics-reader-token created",
        "clusterrole.rbac.authorization.k8s.io/baremend-metrics-reader created",
        "clusterrolebinding.rbac.authorization.k8s.io/baremend-metrics-reader created",
        "deployment.apps/baremend created",
        "validatingadmissionpolicy.admissionregistration.k8s.io/baremend-drift-helpers created",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/baremend-drift-helpers created",
        "servicemonitor.monitoring.coreos.com/baremend created",
        "prometheusrule.monitoring.coreos.com/baremend created",
        "role.rbac.authorization.k8s.io/baremend-prometheus-k8s created",
        "rolebinding.rbac.authorization.k8s.io/baremend-prometheus-k8s created",
        "machinehealthcheck.machine.openshift.io/baremend-workers created",
        "machinehealthcheck.machine.openshift.io/baremend-control-plane created",
    ] {
        assert!(out.contains(object), "missing {object:?} in:\n{out}");
    }
    assert!(
        !out.contains("remediationpolicy") && !out.contains("driftpolicy"),
        "the policies are created apart: {out}"
    );
    // Platform monitoring: the namespace is labelled for it.
    let label = c
        .ok(
            &[
                "get",
                "namespace",
                "baremend",
                "-o",
                r"jsonpath={.metadata.labels.openshift\.io/cluster-monitoring}",
            ],
            None,
        )
        .await;
    assert_eq!(label.trim(), "true");
    let policies = root.join("deploy/policies.yaml");
    let created = c
        .ok(&["create", "-f", policies.to_str().unwrap()], None)
        .await;
    for object in [
        "remediationpolicy.baremend.io/default created",
        "driftpolicy.baremend.io/default created",
    ] {
        assert!(
            created.contains(object),
            "missing {object:?} in:\n{created}"
        );
    }
    // The first day's policies: cluster-scoped, in DryRun and Observe, the rest defaulted by
    // the schema.
    for (kind, mode) in [("remediationpolicy", "DryRun"), ("driftpolicy", "Observe")] {
        let spec = c
            .ok(
                &["get", kind, "default", "-o", "jsonpath={.spec.mode}"],
                None,
            )
            .await;
        assert_eq!(spec.trim(), mode, "{kind}");
    }
    // `kubectl get` shows the mode (and whether it is paused) in a column. (The other columns
    // read fields left to the schema's defaults, which the simulated server does not fill in:
    // docs/engineering/simulators.md.)
    let table = c.ok(&["get", "brpol,bdpol"], None).await;
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter().any(|r| r.starts_with(&[
            "remediationpolicy.baremend.io/default",
            "DryRun",
            "false"
        ])),
        "{table}"
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with(&["driftpolicy.baremend.io/default", "Observe"])),
        "{table}"
    );
    // Switched to remediate, a second apply (an upgrade) changes nothing, and the policies
    // cannot be created over.
    c.ok(
        &[
            "patch",
            "remediationpolicy",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"mode":"Remediate"}}"#,
        ],
        None,
    )
    .await;
    let again = c
        .ok(&["apply", "-k", overlay.to_str().unwrap()], None)
        .await;
    assert!(
        !again.contains("configured") && !again.contains("created"),
        "{again}"
    );
    let (ok, _, err) = c
        .kubectl(&["create", "-f", policies.to_str().unwrap()], None)
        .await;
    assert!(!ok && err.contains("AlreadyExists"), "{err}");
    let mode = c
        .ok(
            &[
                "get",
                "remediationpolicy",
                "default",
                "-o",
                "jsonpath={.spec.mode}",
            ],
            None,
        )
        .await;
    assert_eq!(mode.trim(), "Remediate");
    let replicas = c
        .ok(
            &[
                "get",
                "deployment",
                "baremend",
                "-n",
                "baremend",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
            None,
        )
        .await;
    assert_eq!(replicas.trim(), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_every_documented_combination_of_base_and_components() {
    let root = common::repo_root();
    let components: Vec<String> = std::fs::read_dir(root.join("deploy/components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(components.len(), 5, "{components:?}");
    // The shipped overlay (the README's quick start) and every kustomization the guide shows.
    let overlay_text =
        std::fs::read_to_string(root.join("deploy/overlays/openshift/kustomization.yaml")).unwrap();
    let overlay = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../baremend/deploy/overlays/openshift\n";
    let mut combinations = vec![("deploy/overlays/openshift".to_string(), overlay.to_string())];
    for (index, text) in documented_kustomizations().into_iter().enumerate() {
        combinations.push((
            format!("docs/guides/install.md kustomization #{}", index + 1),
            text,
        ));
    }
    assert!(combinations.len() >= 5, "{}", combinations.len());
    let mut used = std::collections::BTreeSet::new();
    let mut roles = Vec::new();
    for (name, text) in &combinations {
        let c = cluster().await;
        install_prerequisites(&c).await;
        let mine = own_kustomization(&c.dir, text);
        let mine = mine.to_str().unwrap();
        let rendered = common::yaml_documents(&c.ok(&["kustomize", mine], None).await);
        check_rendering(name, &rendered);
        // The components named, and those the OpenShift overlay brings when it is named.
        let mut named = components_of(text);
        if text.contains("deploy/overlays/openshift") {
            named.extend(components_of(&overlay_text));
        }
        for component in &named {
            assert!(components.contains(component), "{name}: {component}");
        }
        let exclusive =
            |a: &str, b: &str| !(named.iter().any(|n| n == a) && named.iter().any(|n| n == b));
        assert!(
            exclusive("nodehealthcheck", "machine-api-annotation"),
            "{name}"
        );
        assert!(
            exclusive("nodehealthcheck", "machine-api-template"),
            "{name}"
        );
        assert!(exclusive("cluster-api", "machine-api-annotation"), "{name}");
        assert!(exclusive("cluster-api", "machine-api-template"), "{name}");
        used.extend(named.iter().cloned());
        // Applied: every object is created, then a second apply changes nothing.
        let out = c.ok(&["apply", "-k", mine], None).await;
        assert_eq!(
            out.matches(" created").count(),
            rendered.len(),
            "{name}: {out}"
        );
        let again = c.ok(&["apply", "-k", mine], None).await;
        assert_eq!(
            again.matches(" unchanged").count(),
            rendered.len(),
            "{name}: {again}"
        );
        // On Cluster API the controller reads Cluster API's Machines, with the rights to.
        let args = c
            .ok(
                &[
                    "get",
                    "deployment",
                    "baremend",
                    "-n",
                    "baremend",
                    "-o",
                    "jsonpath={.spec.template.spec.containers[0].args}",
                ],
                None,
            )
            .await;
        let cluster_api = named.iter().any(|n| n == "cluster-api");
        assert_eq!(
            args.contains("--machine-api=cluster-api"),
            cluster_api,
            "{name}: {args}"
        );
        let (has_role, _, _) = c
            .kubectl(&["get", "clusterrole", "baremend-cluster-api"], None)
            .await;
        assert_eq!(has_role, cluster_api, "{name}");
        // Monitoring only where the component is.
        let (monitored, _, _) = c
            .kubectl(
                &["get", "prometheusrule", "baremend", "-n", "baremend"],
                None,
            )
            .await;
        assert_eq!(monitored, named.iter().any(|n| n == "monitoring"), "{name}");
        for check in rendered.iter().filter(|d| {
            d["kind"] == "MachineHealthCheck" && d["apiVersion"] == "machine.openshift.io/v1beta1"
        }) {
            let role = check["spec"]["selector"]["matchLabels"]
                ["machine.openshift.io/cluster-api-machine-role"]
                .as_str()
                .unwrap()
                .to_string();
            // The control plane one at a time.
            if role == "master" {
                assert_eq!(check["spec"]["maxUnhealthy"], 1, "{check}");
            }
            roles.push(role);
        }
    }
    // Every component is in some documented combination; workers, infra and the control plane
    // each have a health check in one.
    let unused: Vec<&String> = components.iter().filter(|c| !used.contains(*c)).collect();
    assert!(unused.is_empty(), "never documented: {unused:?}");
    roles.sort();
    roles.dedup();
    assert_eq!(roles, ["infra", "master", "worker"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_refuses_a_node_health_check_beside_a_custom_machine_health_check() {
    // A NodeHealthCheck disables itself while any custom MachineHealthCheck exists
    // (medik8s/node-healthcheck-operator, internal/mhc/checker.go `NeedDisableNHC`): the
    // components refuse to be built together, in either order, and from the overlay too.
    let c = cluster().await;
    let kustomization = |resource: &str, components: &[&str]| {
        let mut text = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../baremend/deploy/{resource}\ncomponents:\n"
        );
        for component in components {
            text.push_str(&format!("  - ../baremend/deploy/components/{component}\n"));
        }
        text
    };
    let refused = [
        kustomization("base", &["nodehealthcheck", "machine-api-annotation"]),
        kustomization("base", &["machine-api-annotation", "nodehealthcheck"]),
        kustomization("base", &["nodehealthcheck", "machine-api-template"]),
        kustomization("base", &["machine-api-template", "nodehealthcheck"]),
        kustomization("overlays/openshift", &["nodehealthcheck"]),
    ];
    for (index, text) in refused.iter().enumerate() {
        let mine = own_kustomization(&c.dir.join(format!("refused-{index}")), text);
        let (ok, _, err) = c
            .kubectl(&["kustomize", mine.to_str().unwrap()], None)
            .await;
        assert!(!ok, "{text}");
        assert!(
            err.contains("a-nodehealthcheck-disables-itself-beside-any-custom-machinehealthcheck"),
            "{text}: {err}"
        );
    }
    // Each alone, and the machine-api ones together, build.
    for text in [
        kustomization("base", &["nodehealthcheck"]),
        kustomization("base", &["machine-api-annotation", "machine-api-template"]),
    ] {
        let mine = own_kustomization(&c.dir.join("allowed"), &text);
        c.ok(&["kustomize", mine.to_str().unwrap()], None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_every_example_of_the_install_guide() {
    let c = cluster().await;
    let root = common::repo_root();
    install_prerequisites(&c).await;
    c.ok(&["create", "namespace", "baremend"], None).await;
    let files = common::yaml_files(&root.join("deploy/examples"));
    assert!(files.len() >= 3, "{files:?}");
    let guide = std::fs::read_to_string(root.join("docs/guides/install.md")).unwrap();
    let mut templates = Vec::new();
    let mut capi_checks = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            guide.contains(&format!("deploy/examples/{name}")),
            "docs/guides/install.md does not show {name}"
        );
        let documents = common::yaml_documents(&std::fs::read_to_string(file).unwrap());
        let out = c.ok(&["apply", "-f", file.to_str().unwrap()], None).await;
        assert_eq!(
            out.matches(" created").count(),
            documents.len(),
            "{name}: {out}"
        );
        // A second apply changes nothing.
        let again = c.ok(&["apply", "-f", file.to_str().unwrap()], None).await;
        assert_eq!(
            again.matches(" unchanged").count(),
            documents.len(),
            "{again}"
        );
        for document in documents {
            match document["kind"].as_str().unwrap() {
                "MachineHealthCheck" => capi_checks.push(document),
                // Our kinds must read as our types (a misspelt field would be dropped).
                "HostBmc" => {
                    let host: baremend::api::HostBmc =
                        serde_json::from_value(document.clone()).unwrap();
                    assert!(host.spec.ca_bundle_ref.is_some(), "{document}");
                    assert!(!host.spec.insecure_skip_verify);
                }
                "MachineRemediationTemplate" => {
                    let template: baremend::api::MachineRemediationTemplate =
                        serde_json::from_value(document.clone()).unwrap();
                    assert_ne!(
                        template.spec.template.spec.overrides,
                        baremend::api::PolicyOverrides::default(),
                        "{document}"
                    );
                    templates.push(template.metadata.name.unwrap_or_default());
                }
                _ => {}
            }
        }
    }
    // The Cluster API health check names a template of ours that the examples define.
    assert_eq!(capi_checks.len(), 1);
    for check in &capi_checks {
        assert_eq!(check["apiVersion"], "cluster.x-k8s.io/v1beta1", "{check}");
        let template = &check["spec"]["remediationTemplate"];
        assert_eq!(template["kind"], "MachineRemediationTemplate", "{check}");
        assert!(
            templates.iter().any(|t| template["name"] == t.as_str()),
            "{check}"
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_come_from_aggregated_discovery() {
    let c = cluster().await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    // A fresh cache, so that this run discovers everything anew.
    let cache = c.dir.join("api-resources-cache");
    c.server.record_requests();
    let out = c
        .ok(
            &["api-resources", "--cache-dir", cache.to_str().unwrap()],
            None,
        )
        .await;
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    for expected in [
        vec!["pods", "po", "v1", "true", "Pod"],
        vec!["nodes", "no", "v1", "false", "Node"],
        vec![
            "poddisruptionbudgets",
            "pdb",
            "policy/v1",
            "true",
            "PodDisruptionBudget",
        ],
        vec![
            "hostbmcs",
            "hbmc",
            "baremend.io/v1alpha1",
            "true",
            "HostBmc",
        ],
    ] {
        assert!(
            rows.contains(&expected),
            "{expected:?} missing from:\n{out}"
        );
    }
    // kubectl 1.32 asks for aggregated discovery first: `/api` and `/apis` answer everything,
    // and no group-version is fetched one by one.
    let discovery: Vec<String> = c
        .server
        .recorded_requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(discovery.iter().any(|p| p == "/apis"), "{discovery:?}");
    assert!(
        !discovery
            .iter()
            .any(|p| p.starts_with("/api/") || p.starts_with("/apis/")),
        "legacy discovery was used: {discovery:?}"
    );
    // Every group-version has its APIService, printed with the real server's columns.
    let services = c.ok(&["get", "apiservices"], None).await;
    let header: Vec<&str> = services
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"]);
    for name in ["v1.", "v1.apps", "v1alpha1.baremend.io"] {
        assert!(
            services
                .lines()
                .any(|l| l.split_whitespace().take(3).eq([name, "Local", "True"])),
            "{name} missing:\n{services}"
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_token_gives_a_token_kubectl_can_use() {
    let c = cluster().await;
    c.ok(&["create", "serviceaccount", "robot"], None).await;
    let token = c
        .ok(&["create", "token", "robot", "--duration=15m"], None)
        .await;
    let token = token.trim();
    let payload = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(
        &base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
    let lifetime = claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap();
    assert_eq!(lifetime, 900, "--duration=15m arrives");
    // The token is the account's: it may do what RBAC grants the account.
    c.ok(
        &[
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=default:robot",
        ],
        None,
    )
    .await;
    let out = c
        .ok(
            &[
                "--token",
                token,
                "get",
                "serviceaccount",
                "robot",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    assert_eq!(out.trim(), "serviceaccount/robot");
    let (ok, _, err) = c
        .kubectl(&["create", "token", "robot", "--duration=1m"], None)
        .await;
    assert!(
        !ok && err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_approves_a_certificate_signing_request() {
    let c = cluster().await;
    let request = baremend_sim::tls::signing_request("alice").unwrap();
    let manifest = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  name: alice\nspec:\n  request: {request}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 86400\n  usages: [client auth]\n"
    );
    c.ok(&["apply", "-f", "-"], Some(&manifest)).await;
    let pending = c.ok(&["get", "csr", "alice", "--no-headers"], None).await;
    let columns: Vec<&str> = pending.split_whitespace().collect();
    assert_eq!(
        columns.get(2..).unwrap_or_default(),
        [
            "kubernetes.io/kube-apiserver-client",
            "kubernetes-admin",
            "24h",
            "Pending"
        ],
        "{pending}"
    );
    let out = c.ok(&["certificate", "approve", "alice"], None).await;
    assert!(out.contains("approved"), "{out}");
    let approved = c.ok(&["get", "csr", "alice", "--no-headers"], None).await;
    assert!(approved.trim_end().ends_with("Approved"), "{approved}");
    let reason = c
        .ok(
            &[
                "get",
                "csr",
                "alice",
                "-o",
                "jsonpath={.status.conditions[0].reason}",
            ],
            None,
        )
        .await;
    assert_eq!(reason, "KubectlApprove");
}

/// kubectl creates the two review kinds as on a real cluster: found through discovery, the
/// answer in `status`, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_token_and_subject_access_reviews() {
    let c = cluster().await;
    let token = c.server.mint_token("alice", &["team"]);
    let review = format!(
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {token}\n"
    );
    let user = c
        .ok(
            &[
                "create",
                "-f",
                "-",
                "-o",
                "jsonpath={.status.user.username}",
            ],
            Some(&review),
        )
        .await;
    assert_eq!(user, "alice");
    let access = "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: alice\n  groups: [team]\n  nonResourceAttributes: {path: /metrics, verb: get}\n";
    let allowed = |out: String| out.trim().to_owned();
    let jsonpath = ["create", "-f", "-", "-o", "jsonpath={.status.allowed}"];
    assert_eq!(allowed(c.ok(&jsonpath, Some(access)).await), "false");
    c.ok(
        &[
            "create",
            "clusterrole",
            "metrics-reader",
            "--verb=get",
            "--non-resource-url=/metrics",
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "create",
            "clusterrolebinding",
            "team-metrics",
            "--clusterrole=metrics-reader",
            "--group=team",
        ],
        None,
    )
    .await;
    assert_eq!(allowed(c.ok(&jsonpath, Some(access)).await), "true");
    let resources = c
        .ok(&["api-resources", "--api-group=authorization.k8s.io"], None)
        .await;
    assert!(resources.contains("subjectaccessreviews"), "{resources}");
}

/// kubectl prints a 422 from its details: `The <Kind> "<name>" is invalid: <field>: <message>`
/// (kubernetes `staging/src/k8s.io/kubectl/pkg/cmd/util/helpers.go`, `checkErr` for
/// `IsInvalid`), here with the schema's and a CEL rule's errors of baremend's own CRDs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_an_invalid_custom_resource_prints_the_servers_reasons() {
    let c = cluster().await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    for file in ["remediationpolicies.yaml", "hostbmcs.yaml"] {
        c.ok(&["apply", "-f", crds.join(file).to_str().unwrap()], None)
            .await;
    }
    let (ok, out, err) = c
        .kubectl(
            &["apply", "-f", "-"],
            Some("apiVersion: baremend.io/v1alpha1\nkind: RemediationPolicy\nmetadata:\n  name: x\nspec:\n  mode: Bogus\n"),
        )
        .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains(
            "The RemediationPolicy \"x\" is invalid: spec.mode: Unsupported value: \"Bogus\": supported values: \"Remediate\", \"DryRun\""
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
            "The HostBmc \"h\" is invalid: <nil>: Invalid value: \"object\": failed rule: has(self.spec.machineName) || has(self.spec.nodeName)"
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

/// Every `kubectl create <kind>` form (kubectl's typed clients send each object in protobuf,
/// and read the answer in protobuf), in the context's namespace (no `-n`) and with `-n`,
/// printing what kubectl prints against a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_makes_every_built_in_kind_in_protobuf() {
    let c = cluster().await;
    c.ok(&["create", "namespace", "demo"], None).await;
    for namespace in [None, Some("demo")] {
        // Cluster-scoped kinds get a name per round.
        let suffix = if namespace.is_some() { "-n" } else { "" };
        let forms: Vec<(Vec<String>, String)> = [
            (
                "pdb guarded --selector=app=guarded --min-available=1",
                "poddisruptionbudget.policy/guarded",
            ),
            (
                "deployment web --image=nginx:1.27 --replicas=2",
                "deployment.apps/web",
            ),
            (
                "secret generic creds --from-literal=password=s3cr3t",
                "secret/creds",
            ),
            ("service clusterip web --tcp=80:8080", "service/web"),
            (
                "role reader --verb=get,list --resource=pods",
                "role.rbac.authorization.k8s.io/reader",
            ),
            (
                "rolebinding readers --role=reader --user=alice",
                "rolebinding.rbac.authorization.k8s.io/readers",
            ),
            (
                "configmap settings --from-literal=a=1",
                "configmap/settings",
            ),
            ("serviceaccount robot", "serviceaccount/robot"),
            (
                "quota compute --hard=pods=10,requests.cpu=4",
                "resourcequota/compute",
            ),
            ("job once --image=busybox -- date", "job.batch/once"),
            (
                "cronjob nightly --image=busybox --schedule=0_2_*_*_*",
                "cronjob.batch/nightly",
            ),
            (
                &format!("clusterrole viewer{suffix} --verb=get --resource=nodes"),
                &format!("clusterrole.rbac.authorization.k8s.io/viewer{suffix}"),
            ),
            (
                &format!(
                    "clusterrolebinding viewers{suffix} --clusterrole=viewer{suffix} --group=devs"
                ),
                &format!("clusterrolebinding.rbac.authorization.k8s.io/viewers{suffix}"),
            ),
            (
                &format!("priorityclass high{suffix} --value=1000 --description=important"),
                &format!("priorityclass.scheduling.k8s.io/high{suffix}"),
            ),
            (
                &format!("namespace made{suffix}"),
                &format!("namespace/made{suffix}"),
            ),
        ]
        .iter()
        .map(|(form, printed)| {
            // The schedule's spaces are underscores above, to split the form on spaces.
            let words = form.split(' ').map(|w| w.replace('_', " ")).collect();
            (words, format!("{printed} created"))
        })
        .collect();
        for (words, printed) in forms {
            let mut args: Vec<&str> = Vec::new();
            if let Some(namespace) = namespace {
                args.extend(["-n", namespace]);
            }
            args.push("create");
            args.extend(words.iter().map(String::as_str));
            let out = c.ok(&args, None).await;
            assert_eq!(out.trim(), printed, "kubectl {args:?}");
        }
        let expected = namespace.unwrap_or("default");
        for (kind, name) in [
            ("pdb", "guarded"),
            ("deployment", "web"),
            ("secret", "creds"),
            ("service", "web"),
            ("role", "reader"),
            ("rolebinding", "readers"),
            ("configmap", "settings"),
            ("serviceaccount", "robot"),
            ("quota", "compute"),
            ("job", "once"),
            ("cronjob", "nightly"),
        ] {
            let mut args = vec!["get", kind, name, "-o", "jsonpath={.metadata.namespace}"];
            if let Some(namespace) = namespace {
                args.extend(["-n", namespace]);
            }
            assert_eq!(c.ok(&args, None).await, expected, "{kind} {name}");
        }
    }
    // What the typed clients sent arrived whole (read back as JSON).
    let spec = |kind: &'static str, name: &'static str, path: &'static str| {
        let c = &c;
        async move {
            c.ok(
                &[
                    "-n",
                    "demo",
                    "get",
                    kind,
                    name,
                    "-o",
                    &format!("jsonpath={path}"),
                ],
                None,
            )
            .await
        }
    };
    assert_eq!(
        spec(
            "pdb",
            "guarded",
            "{.spec.minAvailable}/{.spec.selector.matchLabels.app}"
        )
        .await,
        "1/guarded"
    );
    assert_eq!(
        spec(
            "deployment",
            "web",
            "{.spec.replicas}/{.spec.template.spec.containers[0].image}/{.metadata.generation}"
        )
        .await,
        "2/nginx:1.27/1"
    );
    assert_eq!(
        spec(
            "service",
            "web",
            "{.spec.ports[0].port}/{.spec.ports[0].targetPort}/{.spec.type}"
        )
        .await,
        "80/8080/ClusterIP"
    );
    assert_eq!(
        spec(
            "rolebinding",
            "readers",
            "{.roleRef.kind}/{.roleRef.name}/{.subjects[0].name}"
        )
        .await,
        "Role/reader/alice"
    );
    assert_eq!(
        spec(
            "quota",
            "compute",
            "{.spec.hard.pods}/{.spec.hard.requests\\.cpu}"
        )
        .await,
        "10/4"
    );
    assert_eq!(
        spec(
            "job",
            "once",
            "{.spec.template.spec.containers[0].command[0]}/{.spec.template.spec.restartPolicy}"
        )
        .await,
        "date/Never"
    );
    assert_eq!(
        spec("cronjob", "nightly", "{.spec.schedule}").await,
        "0 2 * * *"
    );
    assert_eq!(
        c.ok(
            &[
                "get",
                "priorityclass",
                "high-n",
                "-o",
                "jsonpath={.value}/{.description}"
            ],
            None
        )
        .await,
        "1000/important"
    );
    // Already there: the same refusal as from a real server (kubectl's `create pdb` wraps it
    // in "failed to create poddisruptionbudgets").
    let (ok, _, err) = c
        .kubectl(
            &[
                "create",
                "pdb",
                "guarded",
                "--selector=app=guarded",
                "--min-available=1",
            ],
            None,
        )
        .await;
    assert!(
        !ok && err.contains("poddisruptionbudgets.policy \"guarded\" already exists"),
        "{err}"
    );
}

/// `kubectl create -o yaml` prints the server's answer, which its typed client asked and read
/// in protobuf; it matches what `kubectl get -o yaml` reads in JSON. kube-rs reads the same
/// PodDisruptionBudget back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_round_trips_through_protobuf_and_kube_reads_it() {
    let c = cluster().await;
    let fields = "jsonpath={.metadata.uid}|{.metadata.creationTimestamp}|{.metadata.namespace}|{.spec.minAvailable}|{.spec.selector.matchLabels}";
    let created = c
        .ok(
            &[
                "create",
                "pdb",
                "guarded",
                "--selector=app=guarded",
                "--min-available=1",
                "-o",
                fields,
            ],
            None,
        )
        .await;
    let read = c.ok(&["get", "pdb", "guarded", "-o", fields], None).await;
    assert_eq!(created, read);
    // The typed client did send and read protobuf (kubectl logs the exchange at -v=8).
    let (ok, _, log) = c
        .kubectl(
            &[
                "create",
                "pdb",
                "second",
                "--selector=app=x",
                "--max-unavailable=50%",
                "-v=8",
            ],
            None,
        )
        .await;
    assert!(ok, "{log}");
    let answer = log.split("Response Status: 201").nth(1).unwrap_or_default();
    assert!(
        log.contains("Accept: application/vnd.kubernetes.protobuf")
            && answer.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{log}"
    );
    assert_eq!(
        c.ok(
            &[
                "get",
                "pdb",
                "second",
                "-o",
                "jsonpath={.spec.maxUnavailable}"
            ],
            None
        )
        .await,
        "50%"
    );
    assert!(read.contains("|default|1|{\"app\":\"guarded\"}"), "{read}");
    let yaml = c.ok(&["get", "pdb", "guarded", "-o", "yaml"], None).await;
    for line in [
        "kind: PodDisruptionBudget",
        "  minAvailable: 1",
        "      app: guarded",
        "  disruptionsAllowed: 0",
    ] {
        assert!(yaml.contains(line), "{line:?} in\n{yaml}");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&c.server.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let pdbs: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        kube::Api::namespaced(client, "default");
    let pdb = pdbs.get("guarded").await.unwrap();
    let spec = pdb.spec.unwrap();
    assert_eq!(
        spec.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert_eq!(
        spec.selector
            .unwrap()
            .match_labels
            .unwrap()
            .get("app")
            .map(String::as_str),
        Some("guarded")
    );
    assert_eq!(pdb.status.unwrap().expected_pods, 0);
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

/// RBAC as kubectl users meet it: a ServiceAccount's token is refused what no binding grants,
/// with the real server's message; `kubectl auth can-i` (a SelfSubjectAccessReview, and with
/// `--list` a SelfSubjectRulesReview, sent as the impersonated account) tells; a RoleBinding
/// changes the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_refused_what_rbac_does_not_grant_and_auth_can_i_tells() {
    let c = cluster().await;
    c.ok(&["create", "serviceaccount", "nobody"], None).await;
    let token = c.ok(&["create", "token", "nobody"], None).await;
    let token = token.trim();
    let (ok, _, err) = c
        .kubectl(&["--token", token, "get", "secrets", "-A"], None)
        .await;
    assert!(!ok);
    assert!(
        err.contains("Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:default:nobody\" cannot list resource \"secrets\" in API group \"\" at the cluster scope"),
        "{err}"
    );
    let as_nobody = "--as=system:serviceaccount:default:nobody";
    let (ok, out, _) = c
        .kubectl(&["auth", "can-i", "list", "secrets", as_nobody], None)
        .await;
    assert_eq!((ok, out.trim()), (false, "no"));
    let listed = c.ok(&["auth", "can-i", "--list", as_nobody], None).await;
    assert!(
        listed.contains("selfsubjectaccessreviews.authorization.k8s.io")
            && listed.contains("[/api/*]")
            && !listed.contains("secrets"),
        "{listed}"
    );
    c.ok(
        &[
            "create",
            "role",
            "secret-reader",
            "--verb=get,list",
            "--resource=secrets",
        ],
        None,
    )
    .await;
    c.ok(
        &[
            "create",
            "rolebinding",
            "nobody-reads-secrets",
            "--role=secret-reader",
            "--serviceaccount=default:nobody",
        ],
        None,
    )
    .await;
    let out = c
        .ok(&["auth", "can-i", "list", "secrets", as_nobody], None)
        .await;
    assert_eq!(out.trim(), "yes");
    let (ok, out, _) = c
        .kubectl(&["auth", "can-i", "list", "secrets", "-A", as_nobody], None)
        .await;
    assert_eq!(
        (ok, out.trim()),
        (false, "no"),
        "a RoleBinding grants in its namespace only"
    );
    // A kubeconfig of the account's own: what the binding grants, and no more.
    let kubeconfig = c.dir.join("nobody.kubeconfig");
    std::fs::write(&kubeconfig, c.server.kubeconfig_for(token)).unwrap();
    let path = kubeconfig.to_str().unwrap();
    let names = c
        .ok(
            &["--kubeconfig", path, "get", "secrets", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(
        names.trim(),
        "",
        "no secrets in default yet, and the list is allowed"
    );
    let (ok, _, err) = c
        .kubectl(&["--kubeconfig", path, "get", "configmaps"], None)
        .await;
    assert!(
        !ok && err.contains("cannot list resource \"configmaps\""),
        "{err}"
    );
    let whoami = c
        .ok(
            &[
                "--kubeconfig",
                path,
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        )
        .await;
    assert_eq!(whoami, "system:serviceaccount:default:nobody");
}

/// `kubectl logs` reads a Pod's log subresource as from a real server: the Pod's only
/// container, `--tail`, and the real refusal of a container the Pod does not have
/// (kubernetes `pkg/registry/core/pod/strategy.go`, `LogLocation`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_logs_reads_a_pods_log_subresource() {
    let c = cluster().await;
    c.ok(&["apply", "-f", "-"], Some(NAMESPACE)).await;
    c.ok(&["apply", "-f", "-"], Some(&pod("db-0"))).await;
    c.server
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
