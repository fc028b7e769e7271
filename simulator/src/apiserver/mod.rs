//! A simulated Kubernetes API server that real clients (kube-rs, kubectl) use over HTTP(S).
//!
//! Built-in kinds: Namespace, Node, Pod (with eviction), ServiceAccount (with TokenRequest),
//! Secret, ConfigMap, Event (core/v1 and events.k8s.io/v1 over one store), Lease,
//! PodDisruptionBudget (status kept by a simulated disruption controller),
//! CertificateSigningRequest (with approval), APIService (one per served group-version),
//! ValidatingAdmissionPolicy and its binding, and CustomResourceDefinition — every CRD
//! created is served at once, with its status and scale subresources and printer columns —
//! and, stored only, Service, Endpoints, EndpointSlice, Deployment, Job, CronJob,
//! ResourceQuota, PriorityClass and the RBAC kinds; ComponentStatus read-only. Bodies and
//! answers in JSON, YAML (bodies) and the Kubernetes protobuf encoding.
//!
//! The store knows no controller: the server registers the kind rules and the simulated
//! controllers with it at start (`controllers::Controllers::install`), and they run under its
//! lock after every write (see `store::observers`).
//!
//! Semantics follow the real API server where clients can tell (see the fake-conformance
//! tests): legacy and aggregated discovery; one global resourceVersion; list with selectors
//! and consistent pagination; watch with bookmarks, timeouts, 410 Gone and closed lagging
//! streams; metadata-only and Table renderings; create/update/patch (merge, JSON, strategic,
//! server-side apply with field managers); status separation; finalizers; graceful pod
//! deletion; owner-reference garbage collection; eviction against the PDBs' stored status;
//! Status error bodies; injectable failures. Every request is authenticated (the kubeconfig's
//! admin token, TokenRequest and legacy ServiceAccount tokens, tokens minted by tests,
//! impersonation) and authorized by RBAC from the stored Roles, ClusterRoles and bindings,
//! with the bootstrap roles of a real cluster, ClusterRole aggregation and the escalation
//! checks (see [`auth`]). Custom resources are pruned, defaulted and validated against their
//! CRD version's structural schema and CEL rules, and ValidatingAdmissionPolicies are enforced
//! on every create and update (module `validation`). It does not emulate admission webhooks.

mod apiservices;
mod apply;
pub mod auth;
mod controllers;
mod csr;
mod discovery;
pub(crate) mod errors;
pub(crate) mod eviction;
pub(crate) mod kinds;
mod negotiate;
mod objects;
pub(crate) mod operations;
mod patch;
mod pod_logs;
mod protobuf;
mod reviews;
mod routes;
mod scale;
pub mod selectors;
pub(crate) mod store;
mod table;
pub mod time;
pub(crate) mod validation;
mod watch;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, Method};
use base64::Engine;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

pub use self::auth::user::{ADMIN_USER, API_AUDIENCE};
pub use self::auth::{Authorizer, UserInfo};
pub use self::errors::ApiError;
pub use self::reviews::ReviewCounts;
pub use self::store::{EventType, ObjectKey, Store, WatchEvent};
use self::time::{SystemWallClock, WallClock};
use self::validation::admission::RequestUser;
pub use crate::server::Reachability;
use crate::tls::{self, TlsIdentity};
use crate::{Error, Result};

/// Whether a label selector object (`matchLabels`, `matchExpressions`) selects an object.
pub(crate) fn controllers_selector(selector: &Value, object: &Value) -> bool {
    controllers::selector_matches(selector, object)
}

/// A failure to inject into matching requests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultRule {
    /// Only requests with this method (GET, PUT, PATCH, POST, DELETE).
    #[serde(default)]
    pub method: Option<String>,
    /// Only requests whose path contains this.
    #[serde(default)]
    pub path_contains: Option<String>,
    /// Answer with this status (403, 409, 422, 429, 500, 503…); 0 only delays.
    #[serde(default)]
    pub status: u16,
    /// How many requests it hits; unlimited when absent.
    #[serde(default)]
    pub count: Option<u32>,
    /// `Retry-After` seconds for 429/503.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// Delay before answering, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
}

/// How to start the API server.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Where to listen; port 0 picks one.
    pub listen: SocketAddr,
    /// Serve HTTPS with a generated certificate (the CA goes into the kubeconfig).
    pub tls: bool,
    /// The bearer token clients must present; generated when None.
    pub token: Option<String>,
    /// How many changes the watch log keeps before older resourceVersions get 410 Gone.
    pub event_log_capacity: usize,
    /// How many changes a watch may fall behind its client before the server closes its
    /// stream (the real server's per-watcher buffer; the client then re-watches from the
    /// last version it saw).
    pub watch_buffer: usize,
    /// How often watches with bookmarks get one.
    pub bookmark_interval: Duration,
    /// The Kubernetes version reported by /version.
    pub kubernetes_version: (u32, u32),
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        ApiServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: false,
            token: None,
            event_log_capacity: 100_000,
            watch_buffer: 65_536,
            bookmark_interval: Duration::from_secs(10),
            kubernetes_version: (1, 32),
        }
    }
}

/// What request handlers share.
/// One request as an audit log keeps it: enough to tell the RBAC verb and resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// GET, POST, PUT, PATCH, DELETE.
    pub method: String,
    /// The URL path.
    pub path: String,
    /// A watch (`?watch=true`) rather than a list.
    pub watch: bool,
    /// The `labelSelector` asked for, if any.
    pub label_selector: Option<String>,
    /// When it was read (authorized, its body whole, before it is served).
    pub at: std::time::Instant,
    /// When its answer was ready (its head; a watch's or a list's body streams after);
    /// None until then, or when recording restarted in between.
    pub served: Option<std::time::Instant>,
}

pub(crate) struct ServerState {
    pub store: Arc<Store>,
    faults: Mutex<Vec<FaultRule>>,
    /// The requests served, while a test records them (None: not recording).
    pub audit: Mutex<Option<Vec<AuditRecord>>>,
    pub stop_watches: broadcast::Sender<()>,
    pub bookmark_interval: Duration,
    pub wall: Arc<dyn WallClock>,
    pub address: String,
    version: (u32, u32),
    /// Signs and checks the ServiceAccount tokens of TokenRequests.
    pub tokens: auth::tokens::TokenIssuer,
    /// The review counters.
    reviews: reviews::Reviews,
    /// The tokens besides the ServiceAccount ones (the admin's, minted ones).
    authenticator: auth::authn::Authenticator,
    /// RBAC.
    pub authorizer: Arc<Authorizer>,
    /// The CA of the server's certificate (TLS only), as token Secrets carry it.
    pub ca_pem: Option<String>,
    /// What each Pod's containers logged (the log subresource).
    pod_logs: pod_logs::PodLogs,
}

impl ServerState {
    /// Who sent a request: the user of its bearer token (None: a token no authenticator
    /// knows), anonymous without one.
    fn authenticate(&self, headers: &HeaderMap) -> Option<UserInfo> {
        let Some(token) = auth::authn::bearer(headers) else {
            return Some(auth::authn::anonymous());
        };
        self.authenticator
            .authenticate(
                &self.store,
                &self.tokens,
                token,
                &[],
                self.wall.since_epoch().as_secs(),
            )
            .map(|found| found.user)
    }

    /// The first fault that matches the request, consumed.
    fn take_fault(&self, method: &Method, path: &str) -> Option<(Option<ApiError>, Duration)> {
        let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
        let index = faults.iter().position(|rule| {
            rule.method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method.as_str()))
                && rule
                    .path_contains
                    .as_deref()
                    .is_none_or(|p| path.contains(p))
        })?;
        let rule = faults[index].clone();
        match rule.count {
            Some(1) => {
                faults.remove(index);
            }
            Some(n) => faults[index].count = Some(n - 1),
            None => {}
        }
        let error = (rule.status != 0).then(|| ApiError::injected(rule.status, rule.retry_after));
        Some((error, Duration::from_millis(rule.delay_ms)))
    }

    fn version_info(&self) -> Value {
        let (major, minor) = self.version;
        json!({
            "major": major.to_string(),
            "minor": minor.to_string(),
            "gitVersion": format!("v{major}.{minor}.0"),
            "gitCommit": "baremend-sim",
            "gitTreeState": "clean",
            "buildDate": "2026-11-01T00:00:00Z",
            "goVersion": "go1.23.0",
            "compiler": "gc",
            "platform": "linux/amd64",
        })
    }
}

/// A running simulated API server. Dropping it stops it.
pub struct ApiServer {
    state: Arc<ServerState>,
    /// Whether clients reach it (see [`ApiServer::set_reachable`]).
    reachability: Reachability,
    url: String,
    ca_pem: Option<String>,
    token: String,
    /// The simulated controllers observing the store (held to pause one of them).
    controllers: Arc<controllers::Controllers>,
    task: JoinHandle<()>,
    /// The RBAC controllers (ClusterRole aggregation, the token controller).
    auth_controllers: JoinHandle<()>,
    /// The namespace controller (kube-controller-manager's, apart from the server).
    namespace_controller: JoinHandle<()>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Starts a server on the system wall clock.
    pub async fn start(config: ApiServerConfig) -> Result<Self> {
        Self::start_with_clock(config, Arc::new(SystemWallClock)).await
    }

    /// Starts a server whose timestamps come from `wall`.
    pub async fn start_with_clock(
        config: ApiServerConfig,
        wall: Arc<dyn WallClock>,
    ) -> Result<Self> {
        let token = match config.token {
            Some(token) if !token.is_empty() => token,
            _ => {
                let mut bytes = [0u8; 24];
                let _ = SystemRandom::new().fill(&mut bytes);
                bytes.iter().map(|b| format!("{b:02x}")).collect()
            }
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Listen {
                address: config.listen.to_string(),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| Error::Listen {
            address: config.listen.to_string(),
            source,
        })?;
        let (acceptor, ca_pem) = if config.tls {
            let identity: TlsIdentity = tls::self_signed(tls::LOCAL_NAMES)?;
            (Some(tls::acceptor(&identity)?), Some(identity.cert_pem))
        } else {
            (None, None)
        };
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{local}");
        let (stop_watches, _) = broadcast::channel(4);
        let store = Store::new(wall.clone(), config.event_log_capacity, config.watch_buffer);
        // The store knows no controller: the server registers them before it serves, and
        // before the bootstrap policy is written (its writes follow the kind rules too).
        let controllers = controllers::Controllers::install(&store);
        bootstrap_policy(&store);
        auth::controllers::sync_aggregation(&store);
        let state = Arc::new(ServerState {
            authorizer: Authorizer::new(store.clone()),
            store,
            audit: Mutex::new(None),
            faults: Mutex::new(Vec::new()),
            stop_watches,
            bookmark_interval: config.bookmark_interval,
            wall,
            address: local.to_string(),
            version: config.kubernetes_version,
            tokens: auth::tokens::TokenIssuer::generate().map_err(Error::Config)?,
            reviews: reviews::Reviews::default(),
            authenticator: auth::authn::Authenticator::new(&token),
            ca_pem: ca_pem.clone(),
            pod_logs: pod_logs::PodLogs::default(),
        });
        let auth_controllers = auth::controllers::spawn(state.clone());
        let namespace_controller = controllers::spawn_namespace_controller(state.store.clone());
        let router = Router::new()
            .fallback(routes::dispatch)
            .with_state(state.clone());
        let reachability = Reachability::default();
        let task =
            crate::server::spawn_switchable(listener, acceptor, router, Some(reachability.clone()));
        Ok(ApiServer {
            reachability,
            state,
            url,
            ca_pem,
            token,
            controllers,
            task,
            auth_controllers,
            namespace_controller,
        })
    }

    /// `http(s)://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The CA of its serving certificate (PEM), when it serves HTTPS.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Makes the server unreachable to its clients (`false`): open connections and watches
    /// are cut and new connections closed unanswered, until it is reachable again (`true`).
    /// In-process clients ([`Store`] users) are not affected.
    pub fn set_reachable(&self, reachable: bool) {
        self.reachability.set(reachable);
    }

    /// The switch of [`ApiServer::set_reachable`], shareable with whoever must see it.
    pub fn reachability(&self) -> &Reachability {
        &self.reachability
    }

    /// The bearer token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The store, for in-process actors and tests.
    pub fn store(&self) -> &Arc<Store> {
        &self.state.store
    }

    /// The RBAC authorizer (for in-process actors that act as a user: `Local::as_user`).
    pub fn authorizer(&self) -> &Arc<Authorizer> {
        &self.state.authorizer
    }

    /// A kubeconfig (YAML) that points kubectl and kube-rs at this server as the cluster
    /// admin (`system:masters`).
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.token)
    }

    /// A kubeconfig that presents `token` (a ServiceAccount's, a minted one) instead of the
    /// admin's.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        let ca = self
            .ca_pem
            .as_ref()
            .map(|pem| {
                format!(
                    "    certificate-authority-data: {}\n",
                    base64::engine::general_purpose::STANDARD.encode(pem)
                )
            })
            .unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: baremend-sim\n  cluster:\n    server: {}\n{ca}contexts:\n- name: baremend-sim\n  context:\n    cluster: baremend-sim\n    user: baremend-sim\n    namespace: default\ncurrent-context: baremend-sim\nusers:\n- name: baremend-sim\n  user:\n    token: {}\npreferences: {{}}\n",
            self.url, token
        )
    }

    /// Sets what a Pod's container logged: `GET …/pods/{pod}/log` serves it.
    pub fn set_pod_log(&self, namespace: &str, pod: &str, container: &str, text: &str) {
        self.state.pod_logs.set(namespace, pod, container, text);
    }

    /// Injects a failure into the requests it matches.
    pub fn inject(&self, rule: FaultRule) {
        self.state
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rule);
    }

    /// The injected failures not used up yet.
    pub fn pending_faults(&self) -> Vec<FaultRule> {
        self.state
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Starts recording every request (and forgets the ones recorded before).
    pub fn record_requests(&self) {
        *self.state.audit.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    }

    /// The requests recorded since [`ApiServer::record_requests`].
    pub fn recorded_requests(&self) -> Vec<AuditRecord> {
        self.state
            .audit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// Removes every injected failure.
    pub fn clear_faults(&self) {
        self.state
            .faults
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Ends every open watch stream now (clients must re-watch).
    pub fn drop_watches(&self) {
        let _ = self.state.stop_watches.send(());
    }

    /// Makes one kind's cache lag: every watch ends now, and the next GET whose path contains
    /// `path` (the re-list or re-watch; name the cluster-wide path, e.g.
    /// `v1alpha1/baremetalhosts`, so that reads of one object stay prompt) is answered `ms`
    /// late.
    pub fn slow_watch(&self, path: &str, ms: u64) {
        self.inject(FaultRule {
            method: Some("GET".into()),
            path_contains: Some(path.into()),
            status: 0,
            count: Some(1),
            retry_after: None,
            delay_ms: ms,
        });
        self.drop_watches();
    }

    /// Holds the disruption controller back (PodDisruptionBudget statuses go stale, and a
    /// budget whose spec changed meanwhile refuses evictions until it catches up), or lets it
    /// catch up.
    pub fn pause_disruption_controller(&self, paused: bool) {
        self.controllers.pause_disruption(&self.state.store, paused);
    }

    /// Forgets the watch history: every older resourceVersion becomes 410 Gone.
    pub fn compact(&self) {
        self.state.store.compact();
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
        self.auth_controllers.abort();
        self.namespace_controller.abort();
    }
}

/// Creates the bootstrap ClusterRoles and ClusterRoleBindings (see [`auth::bootstrap`]).
fn bootstrap_policy(store: &Store) {
    let registry = store.registry();
    for object in auth::bootstrap::objects() {
        let plural = match object["kind"].as_str() {
            Some("ClusterRole") => "clusterroles",
            _ => "clusterrolebindings",
        };
        if let Some(ty) = registry.get(auth::RBAC_GROUP, "v1", plural) {
            let _ = store.create(&RequestUser::in_process(), &ty, "v1", "", object, false);
        }
    }
}
