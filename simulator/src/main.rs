//! `baremend-sim`: run simulated BMCs (and later a simulated cluster) as a process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use baremend_sim::apiserver::{ApiServer, ApiServerConfig};
use baremend_sim::clock::{Clock, SystemClock};
use baremend_sim::cluster::{ClusterSpec, SimCluster};
use baremend_sim::host::{Power, SimHost};
use baremend_sim::ipmi::{IpmiSim, IpmiSimConfig, IpmiUser, privilege};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode, Vendor};
use baremend_sim::tls::TlsIdentity;
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "baremend-sim", version, about = "Simulated BMCs for baremend")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a Redfish BMC with N systems until killed; prints `READY <base-url>` once it
    /// accepts connections.
    Redfish(RedfishArgs),
    /// Serve an IPMI-over-LAN BMC (RMCP+, cipher suites 3 and 17) for one host until killed;
    /// prints `READY <address>` once it accepts datagrams.
    Ipmi(IpmiArgs),
    /// Serve a simulated Kubernetes API server until killed; writes a kubeconfig and prints
    /// `READY <api-url>`.
    Apiserver(ApiserverArgs),
    /// Run a whole simulated cluster (API server, hosts with BMCs, kubelets, node lifecycle,
    /// MachineHealthCheck, BareMetal Operator) until killed; prints `READY <api-url>`.
    Cluster(ClusterArgs),
    /// Inject a fault into a running cluster through its control address.
    Fault(FaultArgs),
}

#[derive(Args)]
struct ClusterArgs {
    /// A scenario file (YAML); the options below override its counts.
    #[arg(long)]
    scenario: Option<PathBuf>,
    /// Control-plane hosts.
    #[arg(long)]
    masters: Option<usize>,
    /// Worker hosts.
    #[arg(long)]
    workers: Option<usize>,
    /// Workload clusters (`wc-0`…, each its own API server with the masters and workers
    /// above); the cluster written to --kubeconfig-out is then their management cluster.
    /// Needs the Cluster API flavour (`clusterApi: true` in the scenario).
    #[arg(long)]
    workload_clusters: Option<usize>,
    /// Where to write the kubeconfig.
    #[arg(long)]
    kubeconfig_out: PathBuf,
    /// Where to serve the control API (faults).
    #[arg(long)]
    control: Option<SocketAddr>,
}

#[derive(Args)]
struct FaultArgs {
    /// The cluster's control address.
    #[arg(long)]
    control: SocketAddr,
    /// hang | nic-down | broken | recover (a node), bmc (a host; JSON faults in --json),
    /// api (an API server fault rule in --json), drop-watches, compact,
    /// workload-api-down | workload-api-up (a workload cluster's API server).
    fault: String,
    /// The node or host name (for node and BMC faults).
    target: Option<String>,
    /// JSON body for bmc and api faults, e.g. '{"stuck_power":true}' or
    /// '{"status":503,"count":3}'.
    #[arg(long)]
    json: Option<String>,
}

#[derive(Args)]
struct ApiserverArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the kubeconfig for kubectl and the controller.
    #[arg(long)]
    kubeconfig_out: PathBuf,
    /// Serve plain HTTP instead of HTTPS.
    #[arg(long)]
    insecure_http: bool,
    /// The bearer token (generated when absent).
    #[arg(long)]
    token: Option<String>,
}

#[derive(Args)]
struct IpmiArgs {
    /// UDP address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:6230")]
    listen: SocketAddr,
    /// Administrator account name (1-16 bytes).
    #[arg(long, default_value = "admin")]
    username: String,
    /// Its password (at most 20 bytes; a simulator: no secret is at stake).
    #[arg(long, default_value = "password")]
    password: String,
    /// An extra account limited to OPERATOR privilege, as NAME:PASSWORD.
    #[arg(long)]
    operator: Option<String>,
    /// An extra account limited to USER privilege, as NAME:PASSWORD.
    #[arg(long)]
    user: Option<String>,
    /// How many sessions may be open at once.
    #[arg(long, default_value_t = 16)]
    max_sessions: usize,
    /// Seconds after which an idle session is dropped.
    #[arg(long, default_value_t = 60)]
    idle_timeout_s: u64,
    /// How long a power transition takes, in milliseconds.
    #[arg(long, default_value_t = 500)]
    power_delay_ms: u64,
    /// The power state the host starts in.
    #[arg(long, value_enum, default_value = "on")]
    initial_power: InitialPower,
}

#[derive(Clone, Copy, ValueEnum)]
enum InitialPower {
    On,
    Off,
}

#[derive(Args)]
struct RedfishArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Number of systems, with ids 1..=N.
    #[arg(long, default_value_t = 1)]
    systems: usize,
    /// Administrator account name.
    #[arg(long, default_value = "admin")]
    username: String,
    /// Administrator password (a simulator: no secret is at stake).
    #[arg(long, default_value = "password")]
    password: String,
    /// TLS certificate (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key", conflicts_with = "tls_self_signed")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve HTTPS with a certificate generated at start.
    #[arg(long)]
    tls_self_signed: bool,
    /// With --tls-self-signed: write the generated certificate here, for clients to trust.
    #[arg(long, requires = "tls_self_signed")]
    cert_out: Option<PathBuf>,
    /// How long a power transition takes, in milliseconds.
    #[arg(long, default_value_t = 500)]
    power_delay_ms: u64,
    /// The power state systems start in.
    #[arg(long, value_enum, default_value = "on")]
    initial_power: InitialPower,
    /// Also serve system 1 over IPMI on this UDP address (same host, same faults), with the
    /// same administrator account.
    #[arg(long)]
    ipmi_listen: Option<SocketAddr>,
    /// Play a real BMC from its published payloads (generic, idrac, ilo5, xcc, bluefield): one
    /// system, the vendor's own, with the vendor's reset answers. The payloads come from
    /// `bash scripts/fetch-vendor-payloads.sh` (BAREMEND_VENDOR_PAYLOADS says where).
    #[arg(long, default_value = "generic", value_parser = parse_vendor)]
    vendor: Vendor,
}

fn parse_vendor(name: &str) -> Result<Vendor, String> {
    name.parse().map_err(|e: baremend_sim::Error| e.to_string())
}

impl From<InitialPower> for Power {
    fn from(power: InitialPower) -> Power {
        match power {
            InitialPower::On => Power::On,
            InitialPower::Off => Power::Off,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Redfish(args) => run_redfish(args).await,
        Command::Ipmi(args) => run_ipmi(args).await,
        Command::Apiserver(args) => run_apiserver(args).await,
        Command::Cluster(args) => run_cluster(args).await,
        Command::Fault(args) => run_fault(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run_redfish(args: RedfishArgs) -> Result<(), String> {
    let tls = match (&args.tls_cert, &args.tls_key, args.tls_self_signed) {
        (Some(cert), Some(key), _) => TlsMode::Identity(TlsIdentity {
            cert_pem: read(cert)?,
            key_pem: read(key)?,
        }),
        (_, _, true) => TlsMode::SelfSigned,
        _ => TlsMode::Plain,
    };
    let config = RedfishSimConfig {
        listen: args.listen,
        systems: args.systems,
        username: args.username,
        password: args.password,
        power_delay: Duration::from_millis(args.power_delay_ms),
        initial_power: args.initial_power.into(),
        tls,
    };
    if args.vendor != Vendor::Generic && args.systems != 1 {
        return Err(format!(
            "--vendor {} serves the vendor's one system: leave --systems at 1",
            args.vendor
        ));
    }
    let sim = RedfishSim::start_vendor(config.clone(), args.vendor)
        .await
        .map_err(|e| e.to_string())?;
    let first_host = sim.service().hosts().first().cloned();
    let _ipmi = match (args.ipmi_listen, first_host) {
        (Some(listen), Some(host)) => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
            let users = vec![IpmiUser {
                username: config.username.clone(),
                password: config.password.clone(),
                max_privilege: privilege::ADMINISTRATOR,
            }];
            let ipmi = IpmiSim::start(
                IpmiSimConfig {
                    listen,
                    users,
                    ..IpmiSimConfig::default()
                },
                host.clone(),
                clock,
            )
            .await
            .map_err(|e| e.to_string())?;
            eprintln!("system 1 also served over IPMI at {}", ipmi.bmc_address());
            Some(ipmi)
        }
        _ => None,
    };
    if let (Some(path), Some(pem)) = (&args.cert_out, sim.self_signed_cert_pem()) {
        std::fs::write(path, pem).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    println!("READY {}", sim.base_url());
    wait_for_termination().await;
    Ok(())
}

async fn run_ipmi(args: IpmiArgs) -> Result<(), String> {
    let mut users = vec![IpmiUser {
        username: args.username,
        password: args.password,
        max_privilege: privilege::ADMINISTRATOR,
    }];
    for (account, level) in [
        (&args.operator, privilege::OPERATOR),
        (&args.user, privilege::USER),
    ] {
        if let Some(account) = account {
            let (name, password) = account
                .split_once(':')
                .ok_or_else(|| format!("{account:?} is not NAME:PASSWORD"))?;
            users.push(IpmiUser {
                username: name.to_owned(),
                password: password.to_owned(),
                max_privilege: level,
            });
        }
    }
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let host = Arc::new(SimHost::new(
        "1",
        args.initial_power.into(),
        Duration::from_millis(args.power_delay_ms),
        clock.clone(),
    ));
    let config = IpmiSimConfig {
        listen: args.listen,
        users,
        max_sessions: args.max_sessions,
        idle_timeout: Duration::from_secs(args.idle_timeout_s),
        ..IpmiSimConfig::default()
    };
    let sim = IpmiSim::start(config, host, clock)
        .await
        .map_err(|e| e.to_string())?;
    println!("READY {}", sim.bmc_address());
    wait_for_termination().await;
    Ok(())
}

async fn run_apiserver(args: ApiserverArgs) -> Result<(), String> {
    let config = ApiServerConfig {
        listen: args.listen,
        tls: !args.insecure_http,
        token: args.token,
        ..ApiServerConfig::default()
    };
    let server = ApiServer::start(config).await.map_err(|e| e.to_string())?;
    std::fs::write(&args.kubeconfig_out, server.kubeconfig())
        .map_err(|e| format!("cannot write {}: {e}", args.kubeconfig_out.display()))?;
    println!("READY {}", server.url());
    wait_for_termination().await;
    Ok(())
}

async fn run_cluster(args: ClusterArgs) -> Result<(), String> {
    let mut spec = match &args.scenario {
        Some(path) => ClusterSpec::from_yaml(&read(path)?)?,
        None => ClusterSpec::default(),
    };
    if let Some(masters) = args.masters {
        spec.masters = masters;
    }
    if let Some(workers) = args.workers {
        spec.workers = workers;
    }
    if let Some(count) = args.workload_clusters {
        spec.workload_clusters = count;
    }
    spec.validate()?;
    let started = std::time::Instant::now();
    let cluster = Arc::new(SimCluster::start(spec).await.map_err(|e| e.to_string())?);
    std::fs::write(&args.kubeconfig_out, cluster.kubeconfig())
        .map_err(|e| format!("cannot write {}: {e}", args.kubeconfig_out.display()))?;
    if let Some(control) = args.control {
        let listener = tokio::net::TcpListener::bind(control)
            .await
            .map_err(|e| format!("cannot listen on {control}: {e}"))?;
        let router = baremend_sim::cluster::control::router(cluster.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
    }
    eprintln!(
        "{} of {} nodes Ready after {:.2}s",
        cluster.ready_nodes(),
        cluster.hosts().len(),
        started.elapsed().as_secs_f64()
    );
    for workload in cluster.workload_clusters() {
        // Its kubeconfig is in the management cluster's `<name>-kubeconfig` Secret.
        eprintln!("workload cluster {} at {}", workload.name(), workload.url());
    }
    println!("READY {}", cluster.api_server().url());
    if cluster.spec().platform_none {
        // The HostBmc kind is baremend's: its objects come once its CRDs are applied.
        eprintln!("platform none: the HostBmcs appear once baremend's CRDs are installed");
        let cluster = cluster.clone();
        tokio::spawn(async move {
            match cluster
                .create_host_bmcs_once_served(Duration::from_millis(250))
                .await
            {
                Ok(count) => eprintln!("{count} HostBmcs created"),
                Err(error) => eprintln!("the HostBmcs could not be created: {error}"),
            }
        });
    }
    wait_for_termination().await;
    Ok(())
}

async fn run_fault(args: FaultArgs) -> Result<(), String> {
    let target = || {
        args.target
            .clone()
            .ok_or_else(|| format!("the {} fault needs a target", args.fault))
    };
    let (method, path, body) = match args.fault.as_str() {
        "hang" | "nic-down" | "broken" | "recover" => (
            "POST",
            format!("/nodes/{}/{}", target()?, args.fault),
            String::new(),
        ),
        "workload-api-down" | "workload-api-up" => (
            "POST",
            format!(
                "/workload/{}/{}",
                target()?,
                args.fault.trim_start_matches("workload-api-")
            ),
            String::new(),
        ),
        "bmc" => (
            "PUT",
            format!("/bmc/{}/faults", target()?),
            args.json.clone().ok_or("bmc faults need --json")?,
        ),
        "api" => (
            "POST",
            "/apiserver/faults".to_owned(),
            args.json.clone().ok_or("api faults need --json")?,
        ),
        "drop-watches" => ("POST", "/apiserver/drop-watches".to_owned(), String::new()),
        "compact" => ("POST", "/apiserver/compact".to_owned(), String::new()),
        other => return Err(format!("unknown fault {other:?}")),
    };
    let mut stream = tokio::net::TcpStream::connect(args.control)
        .await
        .map_err(|e| format!("cannot reach {}: {e}", args.control))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        args.control,
        body.len()
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    let status = answer.split_whitespace().nth(1).unwrap_or("?");
    if status.starts_with('2') {
        println!("ok");
        Ok(())
    } else {
        Err(format!(
            "the cluster answered {status}: {}",
            answer.split("\r\n\r\n").nth(1).unwrap_or("").trim()
        ))
    }
}

fn read(path: &PathBuf) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

async fn wait_for_termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
