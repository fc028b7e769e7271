//! `baremend run`: the controller against a cluster, and the composition of its controllers
//! (the Machine controllers and the drift coordinator on one shared watch of Nodes, under one
//! leader election).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tracing::{info, warn};

use crate::drift::controller::{DriftOptions, HelperPods};
use crate::drift::helper::{pinned_by_digest, pinned_to_running};
use crate::duration::{parse_duration, parse_duration_or_off};
use crate::leader::{Elector, Leadership, LeaseConfig};
use crate::metrics::access::{DEFAULT_MAX_REVIEWS, Gate, KubeReviewer, ReviewLimits};
use crate::metrics::server::{DEFAULT_MAX_CONNECTIONS, ServerLimits};
use crate::metrics::tls::{CertSource, server_config};
use crate::metrics::{Metrics, serve_plain, serve_probes, serve_secure};
use crate::remediation::controller::{ControllerOptions, Placement, run_machines, until_stopped};
use crate::runtime::clock::{Clock, SystemClock};
use crate::runtime::node_watch::watch_nodes;
use crate::runtime::read::GetPresent;
use crate::runtime::tasks::Background;
use crate::shard::announcement;
use crate::shard::check::{Shard, ShardCheck};
use crate::{Error, Result};

/// Arguments of `baremend run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The cluster: `--kubeconfig` and `--context`, as the admin commands take them.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The Events' reporting instance; defaults to the pod name.
    #[arg(long, env = "POD_NAME", default_value = "baremend")]
    pub instance: String,
    /// How soon to look again while waiting for a BMC or a Node.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub poll: Duration,
    /// Where to serve `/metrics` (HTTPS with authentication and authorization unless
    /// `--metrics-secure=false`).
    #[arg(long, default_value = "0.0.0.0:8443", value_name = "ADDR:PORT")]
    pub metrics_listen: SocketAddr,
    /// Where to serve the probes `/healthz` and `/readyz` (plain HTTP, unauthenticated).
    #[arg(long, default_value = "0.0.0.0:8081", value_name = "ADDR:PORT")]
    pub probe_listen: SocketAddr,
    /// Serve `/metrics` over HTTPS, only to callers whose bearer token the cluster
    /// authenticates (TokenReview) and authorises to get `/metrics` (SubjectAccessReview).
    /// `false`: plain HTTP to anyone, for labs or behind a proxy of the cluster's own.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub metrics_secure: bool,
    /// A directory holding the serving certificate `tls.crt` and its key `tls.key` (e.g. the
    /// mounted service-ca Secret); read again when they change. Without it (and without
    /// --metrics-tls-cert), a self-signed certificate is generated at start.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["metrics_tls_cert", "metrics_tls_key"])]
    pub metrics_cert_dir: Option<PathBuf>,
    /// The serving certificate (PEM chain); with --metrics-tls-key.
    #[arg(long, value_name = "FILE", requires = "metrics_tls_key")]
    pub metrics_tls_cert: Option<PathBuf>,
    /// The serving certificate's private key (PEM); with --metrics-tls-cert.
    #[arg(long, value_name = "FILE", requires = "metrics_tls_cert")]
    pub metrics_tls_key: Option<PathBuf>,
    /// How long a caller's allowed review is kept before the cluster is asked again (refusals
    /// at most 30s); a revoked binding takes effect within it.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub metrics_auth_cache_ttl: Duration,
    /// The longest a client of the metrics or probe endpoint may take to send a complete
    /// request head (and, over TLS, to finish its handshake); also how long an idle
    /// keep-alive connection is kept.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub metrics_header_read_timeout: Duration,
    /// Connections each of the metrics and probe endpoints serves at once; more wait to be
    /// accepted until one ends.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub metrics_max_connections: usize,
    /// Reviews of new bearer tokens (a TokenReview, then a SubjectAccessReview) in flight at
    /// once; 8 requests per slot may wait, more are answered 503 at once. One review per
    /// token: concurrent requests with the same token share it.
    #[arg(long, default_value_t = DEFAULT_MAX_REVIEWS, value_name = "N")]
    pub metrics_max_reviews: usize,
    /// The longest a request waits for a review slot, and the longest a review may take.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub metrics_review_timeout: Duration,
    /// Elect a leader among the replicas on a Lease; only the leader acts. Turn it off only
    /// for a single replica.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,
    /// The leader Lease's namespace; defaults to the pod's namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "baremend")]
    pub lease_namespace: String,
    /// The leader Lease's name: give each shard its own.
    #[arg(long, default_value = "baremend")]
    pub lease_name: String,
    /// How long the other replicas wait after the last renewal they saw.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader acts without a successful renewal (shorter than the duration).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Only the Machines this label selector matches: one shard of a large fleet (each shard
    /// runs its own replicas with its own --lease-name, all in one --lease-namespace; safety
    /// gates count within the shard). Shards are checked: each announces its selector on its
    /// Lease, and a shard that claims a Machine a shard started before it claims (or claims
    /// every Machine beside another shard) is refused at start, naming both and the Machine.
    #[arg(long, value_name = "SELECTOR")]
    pub machine_selector: Option<String>,
    /// Only the BareMetalHosts this label selector matches are watched: a shard's own, so that
    /// each shard of a management cluster caches its hosts rather than the fleet's. Cluster
    /// API's Metal3 provider labels each host it consumes with `cluster.x-k8s.io/cluster-name`:
    /// a shard by cluster gives both selectors the same clusters. A start whose host exists
    /// but is outside this selector is held (gate `HostNotWatched`), never fenced half-seen.
    #[arg(long, value_name = "SELECTOR")]
    pub host_selector: Option<String>,
    /// The Machine API of the cluster's Machines: `openshift` (machine.openshift.io) or
    /// `cluster-api` (cluster.x-k8s.io, bare metal through metal3's Metal3Machines).
    #[arg(long, value_enum, default_value = "openshift")]
    pub machine_api: crate::api::slim::MachineApi,
    /// How often to read every known host's power for the `baremend_host_power_state` gauge
    /// (each host at its own offset in the interval; BMO-managed hosts from their
    /// BareMetalHost, without a BMC request); 0s turns it off.
    #[arg(long, default_value = "60s", value_parser = parse_duration_or_off)]
    pub power_poll: Duration,
    /// How often to check every fencing path without disrupting it (the reboot API's host
    /// status and credentials, or a BMC login, system read and advertised forced off) into
    /// `baremend_fencing_ready`, with an Event on the Machine when it changes (each Machine at
    /// its own offset in the interval); 0s turns it off.
    #[arg(long, default_value = "10m", value_parser = parse_duration_or_off)]
    pub fencing_check_interval: Duration,
    /// How long a BMC seen contradicting itself (reading Off, then not, with no power request
    /// between, by any reader in the process) stays untrustworthy: none of its readings proves
    /// its host off, and a start that needs it is held.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub bmc_distrust: Duration,
    /// Cluster API: how often a workload cluster's connection in use reads its kubeconfig
    /// Secret again (a rotated one makes a new client) and probes its API server.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub workload_cluster_recheck: Duration,
    /// Cluster API: how long a workload cluster's connection (its client and Node cache) is
    /// kept once nothing needs it (no remediation; with the clusters kept connected, also
    /// none of the watched Machines).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub workload_cluster_idle: Duration,
    /// Cluster API: keep every workload cluster of the watched Machines connected, its Nodes
    /// watched (as Cluster API's cluster cache does), so that a remediation's start does not
    /// wait for a connection; false connects a cluster when a remediation first needs it
    /// (fewer connections and Node caches, a slower start).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub keep_workload_clusters_connected: bool,
    /// Also coordinate the Machine Config Operator's config-drift remediation (where the API
    /// serves MachineConfigPools). With shards, turn it on in one shard only.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub drift: bool,
    /// The image of the drift coordinator's helper pods when the DriftPolicy names none
    /// (the controller's own: it carries `baremend host-file`; deploy/ copies the container's
    /// image here). Helpers run only by digest: a tag is pinned at start to the digest this
    /// replica's own container runs (its Pod's `imageID`).
    #[arg(long, env = "BAREMEND_IMAGE", default_value = "baremend:latest")]
    pub helper_image: String,
    /// The helper pods' image pull policy (deploy/ copies the container's here).
    #[arg(
        long,
        env = "BAREMEND_IMAGE_PULL_POLICY",
        default_value = "IfNotPresent",
        value_parser = ["Always", "IfNotPresent", "Never"]
    )]
    pub helper_image_pull_policy: String,
    /// The service account of the helper pods, in the helper namespace: the one allowed to
    /// run privileged pods (on OpenShift, the `privileged` SecurityContextConstraints).
    #[arg(long, default_value = crate::drift::helper::HELPER_SERVICE_ACCOUNT, value_name = "NAME")]
    pub helper_service_account: String,
    /// The Node this replica runs on (the Downward API's `spec.nodeName`): the leader never
    /// fences it unless another replica is Ready on another Node. Unset: not checked.
    #[arg(long, env = "NODE_NAME", value_name = "NODE")]
    pub node_name: Option<String>,
    /// The label selector of this controller's pods, in its namespace: the replicas that can
    /// take over when the leader fences its own Node.
    #[arg(
        long,
        default_value = "app.kubernetes.io/name=baremend",
        value_name = "SELECTOR"
    )]
    pub peer_selector: String,
}

/// Where `run` and the admin commands (`check`, `status`, `retry`, `ack`, `gather`) find the
/// cluster: the flags kubectl's plugins are expected to accept, so that
/// `kubectl baremend … --context X` reaches the cluster `kubectl … --context X` does.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// A kubeconfig file; without it, KUBECONFIG or ~/.kube/config, and inside a pod the
    /// in-cluster configuration (its ServiceAccount).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current one.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl ClusterArgs {
    /// A client of the cluster these flags name (it does not retry on its own): the
    /// kubeconfig file, else KUBECONFIG or ~/.kube/config when a context is named, else the
    /// in-cluster configuration first (as a pod runs it).
    pub async fn client(&self) -> Result<Client> {
        let invalid = |reason: String| Error::Invalid {
            object: "the cluster configuration".into(),
            reason,
        };
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| invalid(e.to_string()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| invalid(e.to_string()))?
            }
            (None, Some(_)) => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| invalid(e.to_string()))?,
            (None, None) => Config::infer().await.map_err(|e| invalid(e.to_string()))?,
        };
        // kube would retry 429 and 503 itself for minutes; the controller requeues instead.
        config.default_retry = false;
        Client::try_from(config).map_err(Error::kube("Connect"))
    }
}

/// How often `run` says again that baremend's kinds are not installed while it waits.
const NOT_INSTALLED_RETELL: Duration = Duration::from_secs(30);

/// Runs the controller until SIGINT or SIGTERM.
pub async fn run(args: RunArgs) -> Result<()> {
    let client = args.cluster.client().await?;
    let metrics = Arc::new(Metrics::new());
    serve_endpoints(&args, &client, &metrics).await?;
    crate::installed::wait_until_served(&client, NOT_INSTALLED_RETELL).await;
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
    let options = ControllerOptions {
        instance: args.instance.clone(),
        poll: args.poll,
        metrics,
        leadership: Leadership::unconditional(),
        after_persist: None,
        machine_selector: args.machine_selector.clone(),
        host_selector: args.host_selector.clone(),
        machine_api: args.machine_api,
        power_poll: (!args.power_poll.is_zero()).then_some(args.power_poll),
        fencing_check: (!args.fencing_check_interval.is_zero())
            .then_some(args.fencing_check_interval),
        bmc_distrust: args.bmc_distrust,
        workload_clusters: crate::remediation::world::workload::Lifetimes {
            recheck: args.workload_cluster_recheck,
            idle: args.workload_cluster_idle,
            keep_connected: args.keep_workload_clusters_connected,
        },
        // Replicas read in the same order; the pod name spreads different shards apart.
        power_poll_seed: args
            .instance
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b))),
        drift_helpers: if args.drift {
            Some(HelperPods {
                image: helper_image(&client, &args).await,
                pull_policy: args.helper_image_pull_policy.clone(),
                service_account: args.helper_service_account.clone(),
            })
        } else {
            None
        },
        placement: args.node_name.as_ref().map(|node| Placement {
            node: node.clone(),
            namespace: args.lease_namespace.clone(),
            pod: args.instance.clone(),
            peers: args.peer_selector.clone(),
        }),
    };
    if let Some(selector) = &args.host_selector {
        validate_host_selector(&client, selector).await?;
    }
    if !args.leader_elect {
        // Without a Lease this replica announces no claim, so it yields to every shard whose
        // claim overlaps its own.
        let check = ShardCheck::new(
            client.clone(),
            Arc::new(SystemClock),
            options.metrics.clone(),
            Shard {
                machine_api: args.machine_api,
                namespace: args.lease_namespace.clone(),
                lease: None,
                selector: args.machine_selector.clone(),
                instance: args.instance.clone(),
            },
        );
        check.validate().await?;
        check.at_start(args.retry_period).await?;
        let controllers = run_controllers(client, Arc::new(SystemClock), options, shutdown);
        return tokio::select! {
            result = controllers => result,
            refusal = check.watch(args.lease_duration) => Err(refusal),
        };
    }
    let lease = LeaseConfig {
        namespace: args.lease_namespace,
        name: args.lease_name,
        identity: identity(&args.instance),
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
    };
    run_elected(client, Arc::new(SystemClock), options, lease, shutdown).await
}

/// The helpers' image: `--helper-image` when pinned by digest; a tag pinned to the digest this
/// replica's own container runs (read from its Pod, `--instance` in `--lease-namespace`, which
/// deploy/ fills from the Downward API). When that cannot be read the tag is kept, logged, and
/// every helper is refused with the reason (`HelperImageNotPinned` on the DriftRemediation).
/// Refuses a `--host-selector` the API server does not accept, at start: the host watch would
/// otherwise retry it forever and the replica never become ready. Any other failure is left
/// to the watch, which retries.
async fn validate_host_selector(client: &Client, selector: &str) -> Result<()> {
    let hosts: Api<crate::api::slim::BareMetalHost> = Api::all(client.clone());
    let params = kube::api::ListParams::default().labels(selector).limit(1);
    match hosts.list_metadata(&params).await {
        Err(kube::Error::Api(status)) if status.code == 400 => Err(Error::Invalid {
            object: "--host-selector".into(),
            reason: format!(
                "{selector:?} is not a label selector the API server accepts: {}",
                status.message
            ),
        }),
        Err(error) => {
            warn!(%error, "cannot check --host-selector now; the host watch retries");
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

async fn helper_image(client: &Client, args: &RunArgs) -> String {
    let image = &args.helper_image;
    if pinned_by_digest(image) {
        return image.clone();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.lease_namespace);
    let mut running = None;
    // The kubelet reports the running container's image ID a moment after it starts.
    for _ in 0..10 {
        let pod = match pods.get_present(&args.instance).await {
            Ok(Some(pod)) => pod,
            // Not run as deploy/'s pod (a kubeconfig from outside the cluster).
            Ok(None) => break,
            Err(error) => {
                warn!(%error, "cannot read this replica's Pod for its image digest");
                break;
            }
        };
        running = pod
            .status
            .and_then(|s| s.container_statuses)
            .into_iter()
            .flatten()
            // deploy/'s container name.
            .find(|c| c.name == "baremend")
            .and_then(|c| pinned_to_running(image, &c.image_id));
        if running.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    match running {
        Some(pinned) => {
            info!(tag = %image, %pinned, "the drift helpers run the digest this replica runs");
            pinned
        }
        None => {
            warn!(
                %image,
                "the helper image is not pinned by digest and this replica's Pod names no digest: \
                 drift helpers are refused (set deploy/'s `images:` digest)"
            );
            image.clone()
        }
    }
}

/// Runs the Machine controllers and, when `options.drift_helpers` asks for it and the API
/// serves MachineConfigPools, the drift coordinator beside them — one watch of Nodes shared by
/// all three (on a large cluster a second cache of every Node, and a second stream of their
/// updates to decode, would cost as much as the rest together) — until `shutdown` resolves.
pub async fn run_controllers(
    client: Client,
    clock: Arc<dyn Clock>,
    options: ControllerOptions,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    let drift = match &options.drift_helpers {
        Some(helpers) if crate::drift::controller::mco_served(&client).await => {
            Some(DriftOptions {
                instance: options.instance.clone(),
                poll: options.poll.max(Duration::from_millis(100)),
                metrics: options.metrics.clone(),
                leadership: options.leadership.clone(),
                helpers: helpers.clone(),
            })
        }
        Some(_) => {
            info!("the API serves no MachineConfigPools: the drift coordinator stays off");
            None
        }
        None => None,
    };
    // The Machine controller, the controller of Machine-less Nodes, and the drift coordinator.
    let consumers = if drift.is_some() { 3 } else { 2 };
    let (mut feeds, node_watch) = watch_nodes(&client, consumers)?;
    let machine_nodes = (feeds.remove(0), feeds.remove(0));
    let Some(drift) = drift else {
        let result = run_machines(client, clock, options, machine_nodes, shutdown).await;
        drop(node_watch);
        return result;
    };
    let drift_nodes = feeds.remove(0);
    // One shutdown for both.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let signal = Background::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let (machines, drifts) = tokio::join!(
        run_machines(
            client.clone(),
            clock.clone(),
            options,
            machine_nodes,
            until_stopped(stopped.clone())
        ),
        crate::drift::controller::run(
            client,
            clock,
            drift,
            Some(drift_nodes),
            until_stopped(stopped)
        ),
    );
    drop((signal, node_watch));
    machines.and(drifts)
}

/// Runs the controllers ([`run_controllers`]) while this replica holds the Lease of `lease`,
/// until `shutdown` resolves (then the Lease is released) or leadership is lost (then the
/// controllers are dropped at once, in-flight passes included, and [`Error::LeadershipLost`]
/// returned: the process should exit and be restarted as a candidate, as client-go's
/// controllers do). The Lease announces the shard's claim (`options.machine_selector`); once
/// it holds the Lease and before acting, and every lease duration while acting, the replica
/// checks the other shards' claims ([`crate::shard`]) and returns the refusal, the Lease
/// released, when one made before its own overlaps it.
pub async fn run_elected(
    client: Client,
    clock: Arc<dyn Clock>,
    mut options: ControllerOptions,
    lease: LeaseConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    lease.validate()?;
    let leadership = Leadership::elected().for_shard(&lease.name);
    options.leadership = leadership.clone();
    let metrics = options.metrics.clone();
    let check = ShardCheck::new(
        client.clone(),
        clock.clone(),
        metrics.clone(),
        Shard {
            machine_api: options.machine_api,
            namespace: lease.namespace.clone(),
            lease: Some(lease.name.clone()),
            selector: options.machine_selector.clone(),
            instance: options.instance.clone(),
        },
    );
    check.validate().await?;
    metrics.set_leader(false);
    // A standby is healthy and ready: it only waits.
    metrics.set_ready(true);
    let mut elector = Elector::new(client.clone(), lease.clone(), leadership)
        .announcing(announcement(check.selector()));
    let mut shutdown = std::pin::pin!(shutdown);
    tokio::select! {
        () = elector.acquire() => {}
        () = &mut shutdown => return Ok(()),
    }
    let lost = || Error::LeadershipLost(format!("{}/{}", lease.namespace, lease.name));
    // The claim is announced (the Lease is ours): no shard that took its Lease before this
    // one may claim a Machine this one claims. Checked before acting, renewing meanwhile.
    let checked = tokio::select! {
        result = check.at_start(lease.retry_period) => result,
        () = elector.keep() => return Err(lost()),
        () = &mut shutdown => {
            elector.release().await;
            return Ok(());
        }
    };
    if let Err(refusal) = checked {
        // Released, so that the refused claim stops counting at once.
        elector.release().await;
        return Err(refusal);
    }
    metrics.set_leader(true);
    metrics.set_ready(false);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controllers = run_controllers(client, clock, options, async move {
        let _ = stopped.await;
    });
    let mut controllers = std::pin::pin!(controllers);
    let outcome = tokio::select! {
        result = &mut controllers => result,
        () = elector.keep() => Err(lost()),
        // A claim made before this one overlaps it: stop acting, give the Lease up.
        refusal = check.watch(lease.lease_duration) => Err(refusal),
        () = &mut shutdown => {
            let _ = stop.send(());
            // In-flight passes finish, still only while the Lease is ours.
            tokio::select! {
                result = &mut controllers => result,
                () = elector.keep() => Err(lost()),
            }
        }
    };
    metrics.set_leader(false);
    if !matches!(outcome, Err(Error::LeadershipLost(_))) {
        elector.release().await;
    }
    outcome
}

/// Serves the probes and `/metrics` as the flags ask.
async fn serve_endpoints(args: &RunArgs, client: &Client, metrics: &Arc<Metrics>) -> Result<()> {
    let limits = ServerLimits {
        header_read_timeout: args.metrics_header_read_timeout,
        max_connections: args.metrics_max_connections,
    };
    let probes = serve_probes(args.probe_listen, metrics.clone(), limits).await?;
    tracing::info!(%probes, "serving /healthz and /readyz (plain HTTP)");
    if !args.metrics_secure {
        let bound = serve_plain(args.metrics_listen, metrics.clone(), limits).await?;
        tracing::warn!(%bound, "serving /metrics over plain HTTP to anyone (--metrics-secure=false)");
        return Ok(());
    }
    let source = CertSource::from_args(
        args.metrics_cert_dir.as_deref(),
        args.metrics_tls_cert.as_deref(),
        args.metrics_tls_key.as_deref(),
        &args.instance,
    );
    let tls = server_config(&source)?;
    let reviewer = Arc::new(KubeReviewer::new(client.clone()));
    let gate = Arc::new(Gate::with_limits(
        reviewer,
        Arc::new(SystemClock),
        args.metrics_auth_cache_ttl,
        ReviewLimits::new(args.metrics_max_reviews, args.metrics_review_timeout),
    ));
    let bound = serve_secure(args.metrics_listen, metrics.clone(), tls, gate, limits).await?;
    tracing::info!(%bound, "serving /metrics over HTTPS to callers the cluster authorises");
    Ok(())
}

/// A replica's identity: the pod name, made unique for restarts of the same pod (a restarted
/// replica must not take its predecessor's renewals for its own).
fn identity(instance: &str) -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{instance}_{:x}_{started:x}", std::process::id())
}
