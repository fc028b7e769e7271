//! The real kubectl (v1.32) as a test runs it: on a kubeconfig of the simulated API server,
//! with a scratch `HOME` of its own, and the Prometheus Operator's kinds that `deploy/`'s
//! monitoring component needs served first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use baremend_sim::apiserver::{ApiServer, ApiServerConfig};
use tokio::io::AsyncWriteExt;

use super::scratch;

/// kubectl on one kubeconfig.
pub struct Kubectl {
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Kubectl {
    /// kubectl on `kubeconfig` (its text), written into `dir`, which is also its `HOME`.
    /// Fails the test with how to install kubectl when it is missing.
    pub fn new(dir: &Path, kubeconfig: &str) -> Self {
        super::require_program(
            "kubectl",
            "kubernetes-client (the machine image ships kubectl v1.32)",
        );
        let path = dir.join("kubeconfig");
        std::fs::write(&path, kubeconfig).expect("kubeconfig written");
        Kubectl {
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
        let mut command = tokio::process::Command::new("kubectl");
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

/// A simulated API server over HTTPS and kubectl on a kubeconfig of it with a bearer token.
pub struct Cluster {
    /// The simulated API server.
    pub server: ApiServer,
    /// kubectl on its kubeconfig.
    pub kubectl: Kubectl,
    /// The kubeconfig file kubectl uses.
    pub kubeconfig: PathBuf,
    /// The scratch folder of the kubeconfig, also kubectl's `HOME`.
    pub dir: PathBuf,
}

/// A fresh simulated API server (TLS) and kubectl on it, in a scratch folder.
pub async fn cluster() -> Cluster {
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
    /// Runs kubectl: whether it succeeded, its stdout and stderr.
    pub async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        self.kubectl.run(args, stdin).await
    }

    /// Runs kubectl and fails the test unless it succeeded; its stdout.
    pub async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        self.kubectl.ok(args, stdin).await
    }
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
