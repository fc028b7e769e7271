//! The controller's Prometheus metrics (OpenMetrics text) and the endpoints that serve them
//! and the health and readiness probes: `/metrics` over HTTPS to the callers the cluster
//! authorises ([`access`], [`tls`]), or plain when asked for; the probes always plain, on their
//! own port.
//!
//! Counters move when a step is carried out; the gauges (remediations in progress, starts
//! held by each safety gate) are recounted from the watch caches by the controller, so a
//! restart does not leave them wrong.
//!
//! The remediation counters (and the duration histogram) start at zero for every strategy and
//! failure reason: a counter created by its first increment shows up already at 1, and
//! `increase()` needs a sample before it, so the first failure after every restart (and the
//! process restarts on every leadership loss) would pass no alert.

pub mod access;
pub mod drift;

/// The longest label value a series carries of what users name (Machines, Nodes, BMC
/// addresses): a longer one is cut and marked with a hash of the whole, so two values that
/// share their first characters stay two series.
pub const LABEL_VALUE_MAX: usize = 128;

/// `value` as a label value: as it is up to [`LABEL_VALUE_MAX`] characters; longer, its first
/// 111 characters, `~` and 16 hex digits of a hash of the whole (together the maximum).
/// Whoever writes an object chooses its names and a `HostBmc` its address: the cap keeps
/// one series from costing the scraper more than any other. Pure.
pub fn label_value(value: &str) -> String {
    use sha2::{Digest, Sha256};
    if value.chars().count() <= LABEL_VALUE_MAX {
        return value.to_owned();
    }
    let digest = Sha256::digest(value.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let kept: String = value.chars().take(LABEL_VALUE_MAX - 17).collect();
    format!("{kept}~{hash}")
}
pub mod fencing;
pub mod power;
pub mod server;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use self::access::{Access, Gate};
use self::fencing::FencingMetrics;
use self::power::PowerMetrics;
use self::server::{ServerLimits, bind, serve_connections};
use crate::Result;
use crate::api::FenceStrategyName;
use baremend_core::decide::plan::FailReason;
use baremend_core::decide::trust::Refusal;

/// Every reason a request or a `HostBmc` is refused for (`Accepted=False`), as the refusal
/// metrics name it (docs/reference/contracts.md, "Trust"): the refusal's own reasons.
pub fn refusal_reasons() -> impl Iterator<Item = &'static str> {
    Refusal::REASONS.iter().map(|reason| reason.as_str())
}

/// Every fencing strategy, as the remediation counters name it.
pub fn strategies() -> impl Iterator<Item = &'static str> {
    FenceStrategyName::ALL
        .iter()
        .map(|strategy| strategy.as_str())
}

/// Every outcome of a dry run (the `DryRun` condition's reason).
pub const DRY_RUN_OUTCOMES: [&str; 3] = ["WouldFence", "WouldHold", "ProbeFailed"];

/// Labels of the dry-run counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DryRunLabels {
    /// `WouldFence`, `WouldHold` or `ProbeFailed`.
    pub outcome: String,
}

/// The kinds retention deletes, as the pruned counter names them.
pub const PRUNED_KINDS: [&str; 2] = ["Remediation", "DriftRemediation"];

/// Labels of the pruned counter and of the missing-policy gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// `Remediation` or `DriftRemediation` (pruned); `RemediationPolicy` or `DriftPolicy`.
    pub kind: String,
}

/// The kinds of policy object a controller reads (`baremend_policy_missing{kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// `RemediationPolicy`.
    Remediation,
    /// `DriftPolicy`.
    Drift,
}

impl PolicyKind {
    /// The kind's name, as the label value.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Remediation => "RemediationPolicy",
            PolicyKind::Drift => "DriftPolicy",
        }
    }
}

/// Labels of a remediation counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StrategyLabels {
    /// The fencing strategy (`BareMetalHostRebootApi`, `DirectBmc`).
    pub strategy: String,
}

/// Labels of the failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The fencing strategy in use when it failed.
    pub strategy: String,
    /// `PowerOffNotConfirmed`, `FenceLost`, `NodeNeverReady` or `RestoreTimedOut`.
    pub reason: String,
}

/// Labels of the refusal metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// The refused object's kind (`NodeRemediation`, `MachineRemediation`, `HostBmc`).
    pub kind: String,
    /// Why (see [`refusal_reasons`]).
    pub reason: String,
}

/// Labels of the safety-gate gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    /// The gate (see [`crate::api::Gate`]).
    pub gate: String,
}

type DurationHistograms = Family<StrategyLabels, Histogram, fn() -> Histogram>;

/// The controller's metrics.
pub struct Metrics {
    registry: Registry,
    started: Family<StrategyLabels, Counter>,
    succeeded: Family<StrategyLabels, Counter>,
    failed: Family<FailureLabels, Counter>,
    dry_runs: Family<DryRunLabels, Counter>,
    machines_deleted: Counter,
    pruned: Family<KindLabels, Counter>,
    in_progress: Gauge,
    held: Family<GateLabels, Gauge>,
    policy_missing: Family<KindLabels, Gauge>,
    refused: Family<RefusalLabels, Counter>,
    refused_now: Family<RefusalLabels, Gauge>,
    duration: DurationHistograms,
    steps: Family<StepLabels, Histogram, fn() -> Histogram>,
    leader: Gauge,
    workload_clusters: Gauge,
    shard_overlap: Gauge,
    node_health_checks_disabled: Gauge,
    ready: AtomicBool,
    /// BMC requests and host power.
    pub power: Arc<PowerMetrics>,
    /// Fencing readiness.
    pub fencing: Arc<FencingMetrics>,
    /// The drift coordinator's (`mco_…`, unprefixed).
    pub drift: Arc<crate::metrics::drift::DriftMetrics>,
}

/// Labels of the per-step duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// The step reached (`Fenced`, `NodeDeleted`…): the time is from the step before it.
    pub step: String,
}

fn step_histogram() -> Histogram {
    // 10 ms .. about 45 min: a Node deletion takes milliseconds, a slow boot many minutes.
    Histogram::new(exponential_buckets(0.01, 2.0, 18))
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn duration_histogram() -> Histogram {
    // 1 s .. about 4.5 h: a lab run takes seconds, a slow server's boot an hour.
    Histogram::new(exponential_buckets(1.0, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every metric at zero.
    pub fn new() -> Self {
        // Ours are `baremend_…`; the drift coordinator's carry the names the MCO dashboards
        // expect, so the root registry has no prefix.
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("baremend");
        let started = Family::<StrategyLabels, Counter>::default();
        registry.register(
            "remediations_started",
            "Remediations that requested a power-off",
            started.clone(),
        );
        let succeeded = Family::<StrategyLabels, Counter>::default();
        registry.register(
            "remediations_succeeded",
            "Remediations whose Node came back Ready",
            succeeded.clone(),
        );
        let failed = Family::<FailureLabels, Counter>::default();
        registry.register(
            "remediations_failed",
            "Remediations that failed, by reason",
            failed.clone(),
        );
        let dry_runs = Family::<DryRunLabels, Counter>::default();
        registry.register(
            "remediation_dry_runs",
            "Dry runs recorded (the policy's mode DryRun), by outcome; nothing was changed",
            dry_runs.clone(),
        );
        for outcome in DRY_RUN_OUTCOMES {
            dry_runs.get_or_create_owned(&DryRunLabels {
                outcome: outcome.into(),
            });
        }
        let machines_deleted = Counter::default();
        registry.register(
            "machines_deleted",
            "Machines deleted after a failed remediation (deleteMachineOnFailure)",
            machines_deleted.clone(),
        );
        let pruned = Family::<KindLabels, Counter>::default();
        registry.register(
            "pruned",
            "Finished Remediations and DriftRemediations deleted by retention, by kind",
            pruned.clone(),
        );
        for kind in PRUNED_KINDS {
            pruned.get_or_create_owned(&KindLabels { kind: kind.into() });
        }
        let in_progress = Gauge::default();
        registry.register(
            "remediations_in_progress",
            "Remediations past their start and not ended",
            in_progress.clone(),
        );
        let policy_missing = Family::<KindLabels, Gauge>::default();
        registry.register(
            "policy_missing",
            "1 while the policy object `default` of this kind does not exist: remediation then runs in DryRun, drift in Observe",
            policy_missing.clone(),
        );
        for kind in [PolicyKind::Remediation, PolicyKind::Drift] {
            policy_missing
                .get_or_create(&KindLabels {
                    kind: kind.as_str().into(),
                })
                .set(0);
        }
        let refused = Family::<RefusalLabels, Counter>::default();
        registry.register(
            "requests_refused",
            "Remediation requests and HostBmcs refused (Accepted=False: an untrusted namespace, a false owner, a widening spec, a contested Node), by kind and reason; each changed nothing",
            refused.clone(),
        );
        let refused_now = Family::<RefusalLabels, Gauge>::default();
        registry.register(
            "host_bmcs_refused",
            "HostBmcs refused now, by reason (ContestedNode: two trusted HostBmcs name one Node and neither is used)",
            refused_now.clone(),
        );
        for reason in refusal_reasons() {
            for kind in ["NodeRemediation", "MachineRemediation", "HostBmc"] {
                refused.get_or_create_owned(&RefusalLabels {
                    kind: kind.into(),
                    reason: reason.into(),
                });
            }
            refused_now
                .get_or_create(&RefusalLabels {
                    kind: "HostBmc".into(),
                    reason: reason.into(),
                })
                .set(0);
        }
        let held = Family::<GateLabels, Gauge>::default();
        registry.register(
            "remediations_held",
            "Remediations whose start a safety gate holds, by gate",
            held.clone(),
        );
        for gate in crate::api::Gate::ALL {
            held.get_or_create(&GateLabels {
                gate: gate.as_str().into(),
            })
            .set(0);
        }
        let duration: DurationHistograms = Family::new_with_constructor(duration_histogram);
        registry.register(
            "remediation_duration_seconds",
            "Time from a remediation's creation to its success",
            duration.clone(),
        );
        let steps: Family<StepLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(step_histogram);
        registry.register(
            "remediation_step_duration_seconds",
            "Time from a remediation's previous step to this one, by step",
            steps.clone(),
        );
        let power = Arc::new(PowerMetrics::register(registry));
        let fencing = Arc::new(FencingMetrics::register(registry));
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease (or runs without election)",
            leader.clone(),
        );
        let workload_clusters = Gauge::default();
        registry.register(
            "workload_clusters_connected",
            "Cluster API workload clusters this replica holds a connection to (every cluster of its Machines, or with --keep-workload-clusters-connected=false made on a remediation's first need; dropped when idle)",
            workload_clusters.clone(),
        );
        let shard_overlap = Gauge::default();
        registry.register(
            "shard_overlap",
            "1 while this shard's Machine selector overlaps another live shard's (see the shard's Lease Events)",
            shard_overlap.clone(),
        );
        let node_health_checks_disabled = Gauge::default();
        registry.register(
            "node_health_checks_disabled",
            "NodeHealthChecks that name a baremend NodeRemediationTemplate and are Disabled (they ask for no remediation)",
            node_health_checks_disabled.clone(),
        );
        let drift = Arc::new(crate::metrics::drift::DriftMetrics::register(&mut root));
        for strategy in strategies() {
            let labels = StrategyLabels {
                strategy: strategy.into(),
            };
            // Created at zero (the handles are dropped at once).
            started.get_or_create_owned(&labels);
            succeeded.get_or_create_owned(&labels);
            duration.get_or_create_owned(&labels);
            for reason in FailReason::labels() {
                failed.get_or_create_owned(&FailureLabels {
                    strategy: strategy.into(),
                    reason: reason.into(),
                });
            }
        }
        Metrics {
            registry: root,
            started,
            succeeded,
            failed,
            dry_runs,
            machines_deleted,
            pruned,
            in_progress,
            held,
            policy_missing,
            refused,
            refused_now,
            duration,
            steps,
            leader,
            workload_clusters,
            shard_overlap,
            node_health_checks_disabled,
            ready: AtomicBool::new(false),
            power,
            fencing,
            drift,
        }
    }

    /// A remediation requested its first power-off.
    pub fn remediation_started(&self, strategy: &str) {
        self.started
            .get_or_create(&StrategyLabels {
                strategy: strategy.into(),
            })
            .inc();
    }

    /// A remediation succeeded after `took`.
    pub fn remediation_succeeded(&self, strategy: &str, took: Duration) {
        let labels = StrategyLabels {
            strategy: strategy.into(),
        };
        self.succeeded.get_or_create(&labels).inc();
        self.duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A remediation failed.
    pub fn remediation_failed(&self, strategy: &str, reason: &str) {
        self.failed
            .get_or_create(&FailureLabels {
                strategy: strategy.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// A dry run was recorded with `outcome` (see [`DRY_RUN_OUTCOMES`]).
    pub fn remediation_dry_run(&self, outcome: &str) {
        self.dry_runs
            .get_or_create(&DryRunLabels {
                outcome: outcome.into(),
            })
            .inc();
    }

    /// Retention deleted `count` finished objects of `kind` (see [`PRUNED_KINDS`]).
    pub fn pruned(&self, kind: &str, count: usize) {
        self.pruned
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    /// A Machine was deleted after a failed remediation.
    pub fn machine_deleted(&self) {
        self.machines_deleted.inc();
    }

    /// A request or a `HostBmc` of `kind` was refused for `reason` (counted once per refusal
    /// told, not per pass).
    pub fn refused(&self, kind: &str, reason: &str) {
        self.refused
            .get_or_create(&RefusalLabels {
                kind: kind.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Sets how many `HostBmc`s are refused now, per reason.
    pub fn set_host_bmcs_refused(&self, by_reason: &[(&str, usize)]) {
        for reason in refusal_reasons() {
            let count = by_reason
                .iter()
                .filter(|(r, _)| *r == reason)
                .map(|(_, n)| *n)
                .sum::<usize>();
            self.refused_now
                .get_or_create(&RefusalLabels {
                    kind: "HostBmc".into(),
                    reason: reason.into(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// Sets whether the policy object of `kind` is missing.
    pub fn set_policy_missing(&self, kind: PolicyKind, missing: bool) {
        self.policy_missing
            .get_or_create(&KindLabels {
                kind: kind.as_str().into(),
            })
            .set(i64::from(missing));
    }

    /// Sets how many NodeHealthChecks naming baremend are disabled.
    pub fn set_node_health_checks_disabled(&self, count: usize) {
        self.node_health_checks_disabled
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Sets the gauges recounted from the caches.
    pub fn set_counts(&self, in_progress: usize, held: &[(&str, usize)]) {
        self.in_progress
            .set(i64::try_from(in_progress).unwrap_or(i64::MAX));
        for gate in crate::api::Gate::ALL.iter().map(|g| g.as_str()) {
            let count = held
                .iter()
                .filter(|(g, _)| *g == gate)
                .map(|(_, n)| *n)
                .sum::<usize>();
            self.held
                .get_or_create(&GateLabels { gate: gate.into() })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// A remediation reached `step`, `took` after its previous step.
    pub fn step_reached(&self, step: &str, took: Duration) {
        self.steps
            .get_or_create(&StepLabels { step: step.into() })
            .observe(took.as_secs_f64());
    }

    /// How many workload clusters are connected.
    pub fn set_workload_clusters(&self, connected: usize) {
        self.workload_clusters
            .set(i64::try_from(connected).unwrap_or(i64::MAX));
    }

    /// Whether this replica leads.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Whether the last shard check found another live shard overlapping this one.
    pub fn set_shard_overlap(&self, overlapping: bool) {
        self.shard_overlap.set(i64::from(overlapping));
    }

    /// Marks the controller ready (every watch cache filled) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the controller is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The metrics in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        if encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics_text(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], metrics.encode())
}

async fn readiness(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    if metrics.is_ready() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "watch caches not filled yet\n",
        )
    }
}

fn probes() -> Router<Arc<Metrics>> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readiness))
}

fn spawn_plain(listener: tokio::net::TcpListener, app: Router, limits: ServerLimits) {
    tokio::spawn(serve_connections(listener, None, app, limits));
}

/// Binds `listen` and serves `/metrics`, `/healthz` and `/readyz` over plain HTTP, without
/// authentication, from a spawned task (`baremend lab`, and `baremend run
/// --metrics-secure=false` behind a proxy of the cluster's own), within the default
/// [`ServerLimits`]. Returns the bound address (`listen` may ask for port 0).
pub async fn serve(listen: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr> {
    serve_plain(listen, metrics, ServerLimits::default()).await
}

/// [`serve`] within `limits`.
pub async fn serve_plain(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    limits: ServerLimits,
) -> Result<SocketAddr> {
    let (listener, bound) = bind(listen).await?;
    let app = probes()
        .route("/metrics", get(metrics_text))
        .with_state(metrics);
    spawn_plain(listener, app, limits);
    Ok(bound)
}

/// Binds `listen` and serves only the probes `/healthz` and `/readyz`, plain and
/// unauthenticated (the kubelet's probes carry no token), within `limits`.
pub async fn serve_probes(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    limits: ServerLimits,
) -> Result<SocketAddr> {
    let (listener, bound) = bind(listen).await?;
    spawn_plain(listener, probes().with_state(metrics), limits);
    Ok(bound)
}

/// Lets the request through only when the gate allows its caller.
async fn authorised(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    match gate.check(request.headers()).await {
        Access::Allowed => next.run(request).await,
        Access::Unauthenticated => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a bearer token the cluster knows is required\n",
        )
            .into_response(),
        Access::Forbidden => (
            StatusCode::FORBIDDEN,
            "this user may not get /metrics (see the baremend-metrics-reader ClusterRole)\n",
        )
            .into_response(),
        Access::Overloaded => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "too many new callers are being reviewed at once; try again\n",
        )
            .into_response(),
        other => (
            other.status(),
            "the caller could not be reviewed; try again\n",
        )
            .into_response(),
    }
}

/// Binds `listen` and serves `/metrics` over HTTPS with `tls`, to the callers `gate` allows,
/// within `limits`.
pub async fn serve_secure(
    listen: SocketAddr,
    metrics: Arc<Metrics>,
    tls: Arc<rustls::ServerConfig>,
    gate: Arc<Gate>,
    limits: ServerLimits,
) -> Result<SocketAddr> {
    let (listener, bound) = bind(listen).await?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
        .layer(from_fn_with_state(gate, authorised));
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(serve_connections(listener, Some(acceptor), app, limits));
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_label_values_are_capped_and_stay_apart() {
        assert_eq!(
            label_value("openshift-machine-api/worker-0"),
            "openshift-machine-api/worker-0"
        );
        let long = |tail: &str| format!("tenant-a/{}{tail}", "x".repeat(300));
        let (a, b) = (label_value(&long("a")), label_value(&long("b")));
        assert_eq!(a.chars().count(), LABEL_VALUE_MAX);
        assert_eq!(b.chars().count(), LABEL_VALUE_MAX);
        assert_ne!(a, b);
        assert!(a.starts_with("tenant-a/xxx") && a.contains('~'), "{a}");
        let exact = "y".repeat(LABEL_VALUE_MAX);
        assert_eq!(label_value(&exact), exact);
    }

    #[test]
    fn counters_and_gauges_appear_in_openmetrics_text() {
        let metrics = Metrics::new();
        metrics.remediation_started("DirectBmc");
        metrics.remediation_succeeded("DirectBmc", Duration::from_secs(3));
        metrics.remediation_failed("BareMetalHostRebootApi", "NodeNeverReady");
        metrics.set_counts(2, &[("Storm", 3)]);
        let text = metrics.encode();
        for line in [
            "baremend_remediations_started_total{strategy=\"DirectBmc\"} 1",
            "baremend_remediations_succeeded_total{strategy=\"DirectBmc\"} 1",
            "baremend_remediations_failed_total{strategy=\"BareMetalHostRebootApi\",reason=\"NodeNeverReady\"} 1",
            "baremend_remediations_in_progress 2",
            "baremend_remediations_held{gate=\"Storm\"} 3",
            "baremend_remediations_held{gate=\"Quorum\"} 0",
            "baremend_remediation_duration_seconds_count{strategy=\"DirectBmc\"} 1",
            "baremend_machines_deleted_total 0",
            "baremend_pruned_total{kind=\"Remediation\"} 0",
            "baremend_pruned_total{kind=\"DriftRemediation\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn counters_start_at_zero_for_every_known_label_so_the_first_failure_is_an_increase() {
        use super::drift::OUTCOMES_WITHOUT_REASON;
        use crate::api::DriftAction;
        use baremend_core::drift::plan::FailReason as DriftFailure;
        let text = Metrics::new().encode();
        let mut expected = Vec::new();
        for strategy in strategies() {
            let s = format!("strategy=\"{strategy}\"");
            expected.push(format!("baremend_remediations_started_total{{{s}}} 0"));
            expected.push(format!("baremend_remediations_succeeded_total{{{s}}} 0"));
            expected.push(format!(
                "baremend_remediation_duration_seconds_count{{{s}}} 0"
            ));
            for reason in FailReason::labels() {
                expected.push(format!(
                    "baremend_remediations_failed_total{{{s},reason=\"{reason}\"}} 0"
                ));
            }
        }
        for action in DriftAction::ALL.iter().map(|a| a.as_str()) {
            let reasons = OUTCOMES_WITHOUT_REASON
                .iter()
                .map(|outcome| (*outcome, ""))
                .chain(
                    DriftFailure::every_failure()
                        .into_iter()
                        .map(|reason| ("Failed", reason)),
                );
            for (outcome, reason) in reasons {
                expected.push(format!(
                    "mco_remediations_total{{action=\"{action}\",outcome=\"{outcome}\",reason=\"{reason}\"}} 0"
                ));
            }
        }
        expected.push("baremend_drift_coordinator_running 0".into());
        for line in &expected {
            assert!(text.contains(line.as_str()), "{line} missing in:\n{text}");
        }
        assert_eq!(expected.len(), 2 * (3 + 4) + 2 * (4 + 10) + 1);
    }

    async fn get(at: SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(at).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn the_endpoint_serves_metrics_health_and_readiness() {
        let metrics = Arc::new(Metrics::new());
        let at = serve(([127, 0, 0, 1], 0).into(), metrics.clone())
            .await
            .unwrap();
        metrics.remediation_started("DirectBmc");
        let answer = get(at, "/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("application/openmetrics-text"), "{answer}");
        assert!(answer.contains("baremend_remediations_started_total{strategy=\"DirectBmc\"} 1"));
        assert!(get(at, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(at, "/readyz").await.starts_with("HTTP/1.1 503"));
        metrics.set_ready(true);
        assert!(get(at, "/readyz").await.starts_with("HTTP/1.1 200"));
    }
}
