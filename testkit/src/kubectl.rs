//! The real kubectl — the one pinned with the control plane (`tools/kubernetes/`, v1.36.3) —
//! as a test runs it: on a kubeconfig of the simulated API server or of a real control plane,
//! with a scratch `HOME` of its own, and the Prometheus Operator's kinds that `deploy/`'s
//! monitoring component needs served first.

use std::path::{Path, PathBuf};

use std::process::Stdio;
use std::time::Duration;

use baremend_sim::apiserver::ApiServer;
use baremend_sim::plane::{Binaries, ControlPlane};
use tokio::io::AsyncWriteExt;

use super::scratch;

/// kubectl on one kubeconfig.
pub struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

/// The pinned control-plane binaries; a missing build fails the test with how to make it.
pub fn binaries() -> Binaries {
    Binaries::locate().unwrap_or_else(|e| panic!("{e}"))
}

impl Kubectl {
    /// kubectl on `kubeconfig` (its text), written into `dir`, which is also its `HOME`.
    /// Fails the test with how to build kubectl when it is missing.
    pub fn new(dir: &Path, kubeconfig: &str) -> Self {
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig).expect("kubeconfig written");
        Kubectl {
            program: binaries().kubectl(),
            kubeconfig: path,
            home: dir.to_path_buf(),
        }
    }

    /// The kubeconfig file.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Runs kubectl with `args` (and `stdin`): whether it succeeded, its stdout and stderr.
    pub async fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("kubectl runs");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().unwrap();
            pipe.write_all(input.as_bytes()).await.unwrap();
        }
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl finishes")
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Runs kubectl and fails the test unless it succeeded; its stdout.
    pub async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = self.run(args, stdin).await;
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }
}

/// An API server over HTTPS and kubectl on an administrator's kubeconfig of it.
pub struct Cluster {
    /// The API server.
    pub server: super::servers::Server,
    /// kubectl on its kubeconfig.
    pub kubectl: Kubectl,
    /// The kubeconfig file kubectl uses.
    pub kubeconfig: PathBuf,
    /// The scratch folder of the kubeconfig, also kubectl's `HOME`.
    pub dir: PathBuf,
}

/// A fresh simulated API server (TLS) and kubectl on it, in a scratch folder.
pub async fn cluster() -> Cluster {
    cluster_on(super::servers::ServerKind::Simulated).await
}

/// A fresh real control plane (etcd, kube-apiserver, kube-controller-manager) and kubectl on
/// its administrator's kubeconfig, in a scratch folder.
pub async fn real_cluster() -> Cluster {
    cluster_on(super::servers::ServerKind::Real).await
}

/// A fresh API server of `kind` (`servers::Server::start`) and kubectl on its
/// administrator's kubeconfig, in a scratch folder.
pub async fn cluster_on(kind: super::servers::ServerKind) -> Cluster {
    let server = super::servers::Server::start(kind).await;
    let dir = scratch("kubectl");
    let kubectl = Kubectl::new(&dir, &server.admin_kubeconfig());
    let kubeconfig = kubectl.kubeconfig().to_path_buf();
    Cluster {
        server,
        kubectl,
        kubeconfig,
        dir,
    }
}

impl Cluster {
    /// The simulated API server (the test is one of the simulator's own).
    pub fn sim(&self) -> &ApiServer {
        self.server.sim()
    }

    /// A kubeconfig of `user` in `groups`.
    pub fn kubeconfig_of(&self, user: &str, groups: &[&str]) -> String {
        self.server.kubeconfig_of(user, groups)
    }

    /// The real control plane, when it is one.
    pub fn plane(&self) -> Option<&ControlPlane> {
        self.server.plane()
    }

    /// Runs kubectl: whether it succeeded, its stdout and stderr.
    pub async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        self.kubectl.run(args, stdin).await
    }

    /// Runs kubectl and fails the test unless it succeeded; its stdout.
    pub async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.kubectl.ok(args, stdin).await
    }

    /// Merge-patches the `RemediationPolicy` `default` with `patch` (`kubectl patch … --type
    /// merge`, as the install guide switches it), failing the test unless it succeeded.
    pub async fn merge_policy(&self, patch: &serde_json::Value) {
        let patch = patch.to_string();
        let args = [
            "patch",
            "remediationpolicy",
            "default",
            "--type",
            "merge",
            "-p",
            &patch,
        ];
        self.ok(&args, None).await;
    }
}

/// Every CRD the documented combinations and the examples need: the Prometheus Operator's,
/// OpenShift's, Cluster API's and metal3's, NodeHealthCheck's, then ours; and the namespaces
/// the health checks' objects live in (the operators that own them make them on a cluster).
pub async fn install_prerequisites(c: &Cluster) {
    c.ok(&["apply", "-f", "-"], Some(MONITORING_CRDS)).await;
    let fixtures = baremend_sim::cluster::fixtures::all()
        .into_iter()
        .chain(baremend_sim::cluster::fixtures::cluster_api_crds())
        .chain([baremend_sim::cluster::fixtures::node_health_check_crd()]);
    for crd in fixtures {
        c.ok(&["apply", "-f", "-"], Some(&crd.to_string())).await;
    }
    let crds = super::repo_root().join("crds");
    let out = c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    for name in ["remediations", "remediationpolicies", "hostbmcs"] {
        assert!(
            out.contains(&format!("{name}.baremend.io created")),
            "{out}"
        );
    }
    established(c).await;
    for namespace in [
        "openshift-machine-api",
        "metal3",
        "openshift-workload-availability",
    ] {
        c.ok(&["create", "namespace", namespace], None).await;
    }
}

/// Waits until every CRD is established (a real server serves a new kind a moment after its
/// CRD is created; kubectl finds no kind before).
pub async fn established(c: &Cluster) {
    c.ok(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ],
        None,
    )
    .await;
}

/// A kustomization of an admin's own, in a folder beside a copy of the repository's deploy/
/// (`scratch/baremend/deploy`, so that `../baremend/deploy/...` resolves as the guide writes
/// it); returns its folder.
pub fn own_kustomization(scratch: &std::path::Path, text: &str) -> PathBuf {
    super::copy_of_deploy(&scratch.join("baremend"));
    let mine = scratch.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), text).unwrap();
    mine
}

/// The kustomizations docs/guides/install.md shows (its YAML blocks of `kind: Kustomization`).
pub fn documented_kustomizations() -> Vec<String> {
    let guide = std::fs::read_to_string(super::repo_root().join("docs/guides/install.md")).unwrap();
    super::fenced_blocks(&guide, "yaml")
        .iter()
        .map(|block| {
            // Indented when inside a list item: kustomize reads it unindented.
            let indent = block
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            block
                .lines()
                .map(|l| l.get(indent..).unwrap_or("").to_string() + "\n")
                .collect::<String>()
        })
        .filter(|text| text.lines().any(|l| l == "kind: Kustomization"))
        .collect()
}

/// The Prometheus Operator's two kinds that deploy/ uses, as a cluster with it has them
/// (schemas left open: only the kinds matter to the apply).
pub const MONITORING_CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: prometheusrules.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, plural: prometheusrules, singular: prometheusrule, listKind: PrometheusRuleList}
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
"#;
