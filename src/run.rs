//! `baremend run`: the controller against a cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::duration::parse_duration;
use crate::metrics::{Metrics, serve};
use crate::remediation::controller::{ControllerOptions, run as run_controller};
use crate::remediation::state::SystemClock;
use crate::{Error, Result};

/// Arguments of `baremend run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// A kubeconfig file; without it, the in-cluster configuration (or KUBECONFIG).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The Events' reporting instance; defaults to the pod name.
    #[arg(long, env = "POD_NAME", default_value = "baremend")]
    pub instance: String,
    /// How soon to look again while waiting for a BMC or a Node.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub poll: Duration,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, default_value = "0.0.0.0:8080", value_name = "ADDR:PORT")]
    pub metrics_listen: SocketAddr,
}

async fn client(args: &RunArgs) -> Result<Client> {
    let invalid = |reason: String| Error::Invalid {
        object: "the cluster configuration".into(),
        reason,
    };
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| invalid(e.to_string()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| invalid(e.to_string()))?
        }
        None => Config::infer().await.map_err(|e| invalid(e.to_string()))?,
    };
    // kube would retry 429 and 503 itself for minutes; the controller requeues instead.
    config.default_retry = false;
    Client::try_from(config).map_err(Error::kube("Connect"))
}

/// Runs the controller until SIGINT or SIGTERM.
pub async fn run(args: RunArgs) -> Result<()> {
    let client = client(&args).await?;
    let metrics = Arc::new(Metrics::new());
    let bound = serve(args.metrics_listen, metrics.clone()).await?;
    tracing::info!(%bound, "serving /metrics, /healthz and /readyz");
    let shutdown = async {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate => {}
        }
    };
    run_controller(
        client,
        Arc::new(SystemClock),
        ControllerOptions {
            instance: args.instance,
            poll: args.poll,
            crash_after_step: None,
            metrics,
        },
        shutdown,
    )
    .await
}
