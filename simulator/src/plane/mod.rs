//! A real Kubernetes control plane for tests, as controller-runtime's envtest starts one:
//! etcd, kube-apiserver and kube-controller-manager of the release pinned in
//! `tools/kubernetes/`, built by `scripts/kubernetes.sh`, on free loopback ports, their data
//! and logs in a temporary folder.
//!
//! Expected flow: [`Binaries::locate`] finds the built binaries (through
//! [`BINARIES_ENV`], which `scripts/test.sh` sets) → [`ControlPlane::start`] starts the three
//! processes and waits until each is ready → the test talks to it through
//! [`ControlPlane::admin_kubeconfig`], a client certificate of any user
//! ([`ControlPlane::kubeconfig_for`]) or a ServiceAccount token the server issued
//! ([`ControlPlane::token`]) → dropping it kills the processes and removes the folder.
//!
//! Guarantees: the API server authorises with `Node,RBAC`, admits with `NodeRestriction`
//! beside the default plugins (ServiceAccount, ValidatingAdmissionPolicy, …), issues
//! ServiceAccount tokens with a key of its own; kube-controller-manager (unless left out)
//! runs the default controllers — garbage collector, namespace deletion, ServiceAccounts and
//! their tokens, node lifecycle, Deployments, … — with one account per controller, and signs
//! CSRs with the plane's CA. A start that fails says which process and quotes its log.
//!
//! Caveats: no scheduler and no kubelet (pods stay Pending unless something binds them); the
//! ports are found free and then bound by the child, a race another process could win (the
//! start then fails naming the port); `BAREMEND_KEEP_PLANE=1` keeps the folder for a look.

mod pki;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

pub use self::pki::ClusterCa;
use crate::tls::TlsIdentity;
use crate::{Error, Result};

/// The variable naming the folder of the built binaries (`scripts/kubernetes.sh` prints it).
pub const BINARIES_ENV: &str = "BAREMEND_KUBE_BIN";

/// The Kubernetes release the plane runs (`tools/kubernetes/go.mod`).
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// How long each process may take to be ready.
const READY_WITHIN: Duration = Duration::from_secs(90);

/// The service range, whose first address is the `kubernetes` Service's.
const SERVICE_RANGE: &str = "10.0.0.0/24";

fn plane_error(message: impl Into<String>) -> Error {
    Error::Config(message.into())
}

/// The folder of the built control-plane binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The binaries [`BINARIES_ENV`] names, each checked to exist; the error says how to
    /// build them.
    pub fn locate() -> Result<Self> {
        let how = "build them with `bash scripts/kubernetes.sh` (scripts/test.sh does) and set \
                   BAREMEND_KUBE_BIN to the folder it prints last";
        let dir = std::env::var_os(BINARIES_ENV)
            .map(PathBuf::from)
            .ok_or_else(|| plane_error(format!("{BINARIES_ENV} is not set: {how}")))?;
        let binaries = Binaries { dir };
        for name in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kubectl",
        ] {
            let path = binaries.path(name);
            if !path.is_file() {
                return Err(plane_error(format!("{} is missing: {how}", path.display())));
            }
        }
        Ok(binaries)
    }

    /// The path of one of them.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The pinned kubectl.
    pub fn kubectl(&self) -> PathBuf {
        self.path("kubectl")
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct PlaneOptions {
    /// Start kube-controller-manager too (default): without it nothing collects garbage,
    /// deletes namespaces or makes ServiceAccounts.
    pub controller_manager: bool,
    /// kube-controller-manager's `--node-monitor-grace-period` (how long a Node's Lease may
    /// go unrenewed before the node lifecycle controller marks it `Unknown`; 50 s upstream),
    /// and its `--node-monitor-period`: a test with simulated kubelets shortens both.
    pub node_monitor: Option<(Duration, Duration)>,
    /// Users whose every request the API server's audit log records, one line per request as
    /// it is received (stage `RequestReceived`, level `Metadata`: verb, URI, time; no bodies),
    /// in [`ControlPlane::audit_log`]: how a benchmark counts a controller's requests on a
    /// server it cannot instrument. Empty (default): no audit log.
    pub audit_users: Vec<String>,
}

impl Default for PlaneOptions {
    fn default() -> Self {
        PlaneOptions {
            controller_manager: true,
            node_monitor: None,
            audit_users: Vec::new(),
        }
    }
}

/// A duration as Go's flags read it (`1500ms`).
fn go_duration(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

impl crate::cluster::accounts::Issuer for ControlPlane {
    fn client(&self, user: &str, groups: &[String]) -> Result<TlsIdentity> {
        // The server adds `system:authenticated` itself.
        let groups: Vec<&str> = groups
            .iter()
            .map(String::as_str)
            .filter(|g| *g != crate::apiserver::auth::AUTHENTICATED)
            .collect();
        self.ca.client(user, &groups)
    }
}

/// The shell that runs each process of the plane: it waits for the process (so that its
/// exit is the process's), and a watchdog beside it kills the process once the shell's
/// standard input — a pipe only this test process writes — reaches its end, which happens
/// when the plane is dropped and also when the test process dies without dropping it
/// (killed by a timeout): no etcd or kube-apiserver outlives its test.
const WATCHDOG: &str =
    r#"exec 3<&0; "$@" & pid=$!; (read _ <&3; kill -9 "$pid" 2>/dev/null) & wait "$pid""#;

/// A child process whose output goes to a log file in the plane's folder.
struct Process {
    name: &'static str,
    child: tokio::process::Child,
    log: PathBuf,
}

impl Process {
    fn spawn(name: &'static str, program: &Path, args: &[String], dir: &Path) -> Result<Self> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log)
            .map_err(|e| plane_error(format!("{}: {e}", log.display())))?;
        let err = file
            .try_clone()
            .map_err(|e| plane_error(format!("{}: {e}", log.display())))?;
        if !program.is_file() {
            return Err(plane_error(format!("{} is missing", program.display())));
        }
        let child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg(name)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| plane_error(format!("cannot run {}: {e}", program.display())))?;
        Ok(Process { name, child, log })
    }

    /// The end of its log (what a failure quotes).
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    /// An error when it has exited.
    fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(plane_error(format!(
                "{} exited ({status}); its log ends:\n{}",
                self.name,
                self.log_tail()
            ))),
            Err(e) => Err(plane_error(format!("{}: {e}", self.name))),
        }
    }
}

/// A folder removed when dropped (kept when `BAREMEND_KEEP_PLANE` is set).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("BAREMEND_KEEP_PLANE").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A running control plane. Dropping it kills its processes and removes its folder.
pub struct ControlPlane {
    // Dropped in this order: the controllers first, etcd last, then the folder.
    controller_manager: Option<Process>,
    apiserver: Process,
    etcd: Process,
    dir: Scratch,
    url: String,
    ca: ClusterCa,
    admin: TlsIdentity,
    http: reqwest::Client,
    started_in: Duration,
    kubectl: PathBuf,
    audit_log: Option<PathBuf>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("dir", &self.dir.0)
            .finish_non_exhaustive()
    }
}

/// A TCP port on loopback that was free a moment ago.
fn free_port() -> Result<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| plane_error(format!("no free port: {e}")))
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|e| plane_error(format!("{}: {e}", path.display())))?;
    Ok(path)
}

fn arg(flag: &str, value: impl std::fmt::Display) -> String {
    format!("--{flag}={value}")
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (unless left out) kube-controller-manager in a new
    /// folder under `parent`, and waits until each is ready.
    pub async fn start(binaries: &Binaries, parent: &Path, options: PlaneOptions) -> Result<Self> {
        let started = Instant::now();
        let dir = parent.join(format!("plane-{}-{}", std::process::id(), free_port()?));
        std::fs::create_dir_all(&dir)
            .map_err(|e| plane_error(format!("{}: {e}", dir.display())))?;
        let scratch = Scratch(dir.clone());
        let ca = ClusterCa::generate()?;
        let admin = ca.client("baremend-test-admin", &["system:masters"])?;
        let http = http_client(&ca, &admin)?;

        let mut etcd = start_etcd(binaries, &dir)?;
        let etcd_url = etcd.1.clone();
        wait_etcd(&http, &mut etcd.0, &etcd_url).await?;

        let port = free_port()?;
        let url = format!("https://127.0.0.1:{port}");
        let audit_log = audit(&dir, &options.audit_users)?;
        let mut args = apiserver_args(&dir, &ca, &etcd_url, port)?;
        if let Some((policy, log)) = &audit_log {
            args.push(arg("audit-policy-file", policy.display()));
            args.push(arg("audit-log-path", log.display()));
        }
        let apiserver_binary = binaries.path("kube-apiserver");
        let mut apiserver = Process::spawn("kube-apiserver", &apiserver_binary, &args, &dir)?;
        wait_ready(&http, &mut apiserver, &format!("{url}/readyz")).await?;

        let mut plane = ControlPlane {
            controller_manager: None,
            apiserver,
            etcd: etcd.0,
            dir: scratch,
            url,
            ca,
            admin,
            http,
            started_in: Duration::ZERO,
            kubectl: binaries.kubectl(),
            audit_log: audit_log.map(|(_, log)| log),
        };
        if options.controller_manager {
            let mut kcm = plane.start_controller_manager(binaries, options.node_monitor)?;
            // The ServiceAccount controller has run once the default namespace has its account.
            let default_account = format!(
                "{}/api/v1/namespaces/default/serviceaccounts/default",
                plane.url
            );
            wait_ready(&plane.http, &mut kcm, &default_account).await?;
            plane.controller_manager = Some(kcm);
        }
        plane.started_in = started.elapsed();
        Ok(plane)
    }

    fn start_controller_manager(
        &self,
        binaries: &Binaries,
        node_monitor: Option<(Duration, Duration)>,
    ) -> Result<Process> {
        let dir = &self.dir.0;
        let identity = self.ca.client("system:kube-controller-manager", &[])?;
        let kubeconfig = write(dir, "kcm.kubeconfig", &self.kubeconfig_for(&identity))?;
        let ca_cert = dir.join("ca.crt");
        let ca_key = write(dir, "ca.key", &self.ca.identity.key_pem)?;
        let mut args = vec![
            arg("kubeconfig", kubeconfig.display()),
            arg(
                "service-account-private-key-file",
                dir.join("sa.key").display(),
            ),
            arg("root-ca-file", ca_cert.display()),
            arg("cluster-signing-cert-file", ca_cert.display()),
            arg("cluster-signing-key-file", ca_key.display()),
            arg("use-service-account-credentials", true),
            arg("leader-elect", false),
            // Nothing to serve: the tests read the API server, not the manager's metrics.
            arg("secure-port", 0),
            arg("controllers", "*"),
            arg("service-cluster-ip-range", SERVICE_RANGE),
        ];
        if let Some((grace, period)) = node_monitor {
            args.push(arg("node-monitor-grace-period", go_duration(grace)));
            args.push(arg("node-monitor-period", go_duration(period)));
        }
        Process::spawn(
            "kube-controller-manager",
            &binaries.path("kube-controller-manager"),
            &args,
            dir,
        )
    }

    /// How long the start took, every process ready.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The API server's address (`https://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The cluster CA, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca.identity.cert_pem
    }

    /// The plane's folder (logs, keys, data).
    pub fn dir(&self) -> &Path {
        &self.dir.0
    }

    /// The pinned kubectl.
    pub fn kubectl(&self) -> &Path {
        &self.kubectl
    }

    /// A client certificate of the plane's CA for `user` in `groups`: any identity a test
    /// needs (a tenant, a Node, an operator's account).
    pub fn identity(&self, user: &str, groups: &[&str]) -> Result<TlsIdentity> {
        self.ca.client(user, groups)
    }

    /// The audit log of [`PlaneOptions::audit_users`]' requests (None when none were asked
    /// for): JSON lines of `audit.k8s.io/v1` Events.
    pub fn audit_log(&self) -> Option<&Path> {
        self.audit_log.as_deref()
    }

    /// The administrator's client certificate (`system:masters`).
    pub fn admin_identity(&self) -> &TlsIdentity {
        &self.admin
    }

    /// A kubeconfig of the cluster administrator (`system:masters`).
    pub fn admin_kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.admin)
    }

    /// A kubeconfig that authenticates with `identity`'s client certificate.
    pub fn kubeconfig_for(&self, identity: &TlsIdentity) -> String {
        let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        self.kubeconfig_with_user(json!({
            "client-certificate-data": b64(&identity.cert_pem),
            "client-key-data": b64(&identity.key_pem),
        }))
    }

    /// A kubeconfig that authenticates with a bearer token.
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        self.kubeconfig_with_user(json!({ "token": token }))
    }

    fn kubeconfig_with_user(&self, user: Value) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem());
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plane", "cluster": {
                "server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "user"}}],
            "current-context": "plane",
        });
        // JSON is YAML: every kubeconfig reader takes it.
        config.to_string()
    }

    /// A token the API server issues for ServiceAccount `namespace/name` (TokenRequest), valid
    /// for an hour.
    pub async fn token(&self, namespace: &str, name: &str) -> Result<String> {
        let url = format!(
            "{}/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            self.url
        );
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        });
        let reply: Value = self.admin_request(self.http.post(&url).json(&body)).await?;
        reply
            .pointer("/status/token")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| plane_error(format!("TokenRequest for {namespace}/{name}: no token")))
    }

    /// Sends an admin request and decodes its JSON answer; an error status is an error that
    /// quotes the body.
    pub async fn admin_request(&self, request: reqwest::RequestBuilder) -> Result<Value> {
        let response = request
            .send()
            .await
            .map_err(|e| plane_error(format!("API server: {e}")))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| plane_error(format!("API server: {e}")))?;
        if !status.is_success() {
            return Err(plane_error(format!("API server answered {status}: {text}")));
        }
        serde_json::from_str(&text).map_err(|e| plane_error(format!("API server's JSON: {e}")))
    }

    /// The admin's HTTP client (trusts the plane's CA, presents the admin certificate).
    pub fn admin_http(&self) -> &reqwest::Client {
        &self.http
    }

    /// An error when a process of the plane has exited (a test that sees a strange answer
    /// asks this first).
    pub fn check_running(&mut self) -> Result<()> {
        self.etcd.check_running()?;
        self.apiserver.check_running()?;
        match &mut self.controller_manager {
            Some(kcm) => kcm.check_running(),
            None => Ok(()),
        }
    }
}

fn http_client(ca: &ClusterCa, admin: &TlsIdentity) -> Result<reqwest::Client> {
    let root = reqwest::Certificate::from_pem(ca.identity.cert_pem.as_bytes())
        .map_err(|e| plane_error(format!("CA certificate: {e}")))?;
    let identity =
        reqwest::Identity::from_pem(format!("{}{}", admin.cert_pem, admin.key_pem).as_bytes())
            .map_err(|e| plane_error(format!("admin certificate: {e}")))?;
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(root)
        .identity(identity)
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| plane_error(format!("HTTP client: {e}")))
}

fn start_etcd(binaries: &Binaries, dir: &Path) -> Result<(Process, String)> {
    let client = format!("http://127.0.0.1:{}", free_port()?);
    let peer = format!("http://127.0.0.1:{}", free_port()?);
    let args = vec![
        arg("data-dir", dir.join("etcd").display()),
        arg("listen-client-urls", &client),
        arg("advertise-client-urls", &client),
        arg("listen-peer-urls", &peer),
        arg("initial-advertise-peer-urls", &peer),
        arg("initial-cluster", format!("default={peer}")),
        // A test's data need not survive a crash: no fsync, as envtest runs it.
        arg("unsafe-no-fsync", true),
        arg("log-level", "warn"),
    ];
    Ok((
        Process::spawn("etcd", &binaries.path("etcd"), &args, dir)?,
        client,
    ))
}

async fn wait_etcd(http: &reqwest::Client, etcd: &mut Process, url: &str) -> Result<()> {
    wait_ready(http, etcd, &format!("{url}/health")).await
}

/// The audit policy for `users` (each request recorded once, as received, without bodies)
/// and the log's path; None without users.
fn audit(dir: &Path, users: &[String]) -> Result<Option<(PathBuf, PathBuf)>> {
    if users.is_empty() {
        return Ok(None);
    }
    let policy = json!({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        // One event per request, when it arrives: a watch counts when opened, not when it ends.
        "omitStages": ["ResponseStarted", "ResponseComplete", "Panic"],
        "rules": [
            {"level": "Metadata", "users": users},
            {"level": "None"},
        ],
    });
    let policy = write(dir, "audit-policy.json", &policy.to_string())?;
    Ok(Some((policy, dir.join("audit.log"))))
}

fn apiserver_args(dir: &Path, ca: &ClusterCa, etcd: &str, port: u16) -> Result<Vec<String>> {
    let ca_cert = write(dir, "ca.crt", &ca.identity.cert_pem)?;
    let serving = ca.serving()?;
    let cert = write(dir, "apiserver.crt", &serving.cert_pem)?;
    let key = write(dir, "apiserver.key", &serving.key_pem)?;
    let (private, public) = pki::service_account_key()?;
    let sa_key = write(dir, "sa.key", &private)?;
    let sa_pub = write(dir, "sa.pub", &public)?;
    let args = vec![
        arg("etcd-servers", etcd),
        arg("bind-address", "127.0.0.1"),
        // A machine without a default route has no address to advertise otherwise.
        arg("advertise-address", "127.0.0.1"),
        arg("secure-port", port),
        arg("cert-dir", dir.join("certs").display()),
        arg("tls-cert-file", cert.display()),
        arg("tls-private-key-file", key.display()),
        arg("client-ca-file", ca_cert.display()),
        arg("service-cluster-ip-range", SERVICE_RANGE),
        arg("allow-privileged", true),
        arg("authorization-mode", "Node,RBAC"),
        arg("enable-admission-plugins", "NodeRestriction"),
        // A cluster's usual issuer (and so the tokens' default audience), as our simulator's.
        arg("service-account-issuer", "https://kubernetes.default.svc"),
        arg("service-account-key-file", sa_pub.display()),
        arg("service-account-signing-key-file", sa_key.display()),
        arg("profiling", false),
    ];
    Ok(args)
}

/// Polls `url` until it answers 200, failing at once if the process exits.
async fn wait_ready(http: &reqwest::Client, process: &mut Process, url: &str) -> Result<()> {
    let deadline = Instant::now() + READY_WITHIN;
    let mut last = String::from("no answer yet");
    while Instant::now() < deadline {
        process.check_running()?;
        match http.get(url).timeout(Duration::from_secs(5)).send().await {
            Ok(response) if response.status().is_success() => return Ok(()),
            Ok(response) => last = format!("{} answered {}", url, response.status()),
            Err(e) => last = format!("{url}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(plane_error(format!(
        "{} was not ready within {READY_WITHIN:?} ({last}); its log ends:\n{}",
        process.name,
        process.log_tail()
    )))
}
