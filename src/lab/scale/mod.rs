//! `baremend lab --scenario scale`: the remediation benchmark.
//!
//! A simulated cluster of `--machines` hosts (fast simulated Redfish BMCs, BareMetalHosts
//! detached so the BareMetal Operator leaves them alone and nothing else talks to the BMCs)
//! runs in this process; the controller runs as a separate `baremend run` process on a real
//! kube client, so that its resident memory is its own. Hosts hang one after another and are
//! remediated directly over Redfish; for each, the simulator's records give:
//! - fence latency: the trigger annotation written → the first power-off request at the BMC;
//! - overhead: the whole remediation (trigger → `Succeeded` persisted) minus the physical
//!   floor, which the simulator knows exactly: power-off (request → off), and power-on to the
//!   Node registered again (request → Node created, boot and kubelet start included);
//! - BMC requests per remediation (the simulator counts every request it answers).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use baremend_sim::cluster::local::{BMHS, Gvr, NODES};
use baremend_sim::cluster::scenario::Workloads;
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use baremend_sim::host::{Power, PowerAction};
use serde_json::{Value, json};

use super::LabArgs;
use super::setup::LabCluster;
use crate::runtime::clock::{parse_rfc3339, since_epoch};
use crate::{Error, LocalError, Result};

const REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "remediations",
};

/// What one remediation measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// How long the simulated API server took to store the trigger.
    write: Duration,
    fence_latency: Duration,
    overhead: Duration,
    total: Duration,
    bmc_requests: u64,
}

fn bench_timing() -> Timing {
    // Kubernetes' own intervals (kubelet lease every 10 s, node monitor every 5 s...), with
    // quick simulated hardware: the benchmark is about the controller, not about waiting.
    Timing {
        power_delay: Duration::from_millis(100),
        boot_delay: Duration::from_millis(200),
        ..Timing::kubernetes_defaults(1.0)
    }
}

fn invalid(object: &str, reason: impl std::fmt::Display) -> Error {
    Error::Invalid {
        object: object.into(),
        reason: reason.to_string(),
    }
}

/// The resident, peak resident and anonymous (heap and stacks, no mapped binary) memory of
/// a process, in KiB.
fn memory_kib(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?, field("RssAnon:")?))
}

fn percentile(sorted: &[Duration], percent: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank: the smallest value with at least `percent` % of the samples at or below.
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// A free loopback port for one of the controller's endpoints.
fn free_port() -> Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| invalid("a loopback port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| invalid("a loopback port", e))?
        .port();
    Ok(port)
}

async fn http_status(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// The controller as its own process.
struct ControllerProcess {
    child: tokio::process::Child,
    log: PathBuf,
}

impl ControllerProcess {
    async fn start(kubeconfig: &Path, log: PathBuf, port: u16) -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| invalid("the baremend binary", e))?;
        let log_file = std::fs::File::create(&log).map_err(|source| LocalError::WriteFile {
            what: "controller log",
            path: log.clone(),
            source,
        })?;
        let child = tokio::process::Command::new(exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            // `/readyz` is on the probe port; metrics stay out of the way on a port of their own.
            .arg("--probe-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", free_port()?))
            // One replica: the benchmark measures remediation, not an election.
            .arg("--leader-elect=false")
            // The power monitor's and the fencing readiness check's reads would count in each
            // remediation's BMC requests.
            .arg("--power-poll=0s")
            .arg("--fencing-check-interval=0s")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| invalid("baremend run", e))?;
        let process = ControllerProcess { child, log };
        let started = Instant::now();
        while http_status(port, "/readyz").await != Some(200) {
            if started.elapsed() > Duration::from_secs(300) {
                return Err(invalid(
                    "baremend run",
                    format!("not ready after 300 s; see {}", process.log.display()),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(process)
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}

/// Remediates `worker` once and measures it.
async fn remediate(lab: &LabCluster, worker: &str, timeout: Duration) -> Result<Sample> {
    let host = lab
        .cluster
        .host(worker)
        .ok_or_else(|| invalid(worker, "no such host"))?
        .host
        .clone();
    let redfish = lab.cluster.redfish().service().clone();
    let requests_before = redfish.stats().requests;
    let requests_seen = host.requests().len();
    let history_seen = host.history().len();
    lab.cluster.hang(worker);
    let before_write = host.clock_ms();
    lab.set_trigger(worker, true)?;
    // "Written" is when the API server has stored it: the write itself may wait for the
    // simulator's store, which is the simulator's time, not the controller's.
    let wall0 = SystemTime::now();
    let host0 = host.clock_ms();
    let write = host0.saturating_sub(before_write);
    let started = Instant::now();
    // The Node is back when one with another UID exists (a look may miss the gap between
    // the deletion and the new registration when the machine is busy).
    let uid_of = |node: Value| node.pointer("/metadata/uid").cloned();
    let old_uid = lab.api.get(NODES, "", worker).ok().and_then(uid_of);
    let mut node_back_ms = None;
    let succeeded_at = loop {
        let uid = lab.api.get(NODES, "", worker).ok().and_then(uid_of);
        if uid.is_some() && uid != old_uid && node_back_ms.is_none() {
            node_back_ms = Some(host.clock_ms());
        }
        let name = format!("{worker}-1");
        let status = lab
            .api
            .get(REMEDIATIONS, MACHINE_NAMESPACE, &name)
            .ok()
            .and_then(|r| r.get("status").cloned())
            .unwrap_or(Value::Null);
        match status["phase"].as_str() {
            Some("Succeeded") => {
                let at = status["steps"]
                    .as_array()
                    .and_then(|s| s.iter().rev().find(|s| s["step"] == "Succeeded"))
                    .and_then(|s| s["time"].as_str())
                    .map(parse_rfc3339)
                    .unwrap_or_default();
                break at;
            }
            Some(phase @ ("Failed" | "Cancelled")) => {
                return Err(invalid(
                    &format!("Remediation {name}"),
                    format!("ended {phase}: {}", status["lastError"]),
                ));
            }
            _ => {}
        }
        if started.elapsed() > timeout {
            return Err(invalid(
                &format!("Remediation {name}"),
                format!("not done after {timeout:?}: {status}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // The session is closed right after the end; let its DELETE arrive.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let requests = host.requests();
    let new_requests = &requests[requests_seen.min(requests.len())..];
    let off_request = new_requests
        .iter()
        .find(|r| r.action == PowerAction::ForceOff)
        .map(|r| r.at_ms)
        .ok_or_else(|| invalid(worker, "no power-off request reached the BMC"))?;
    let on_request = new_requests
        .iter()
        .find(|r| r.action == PowerAction::On && r.at_ms >= off_request)
        .map(|r| r.at_ms)
        .ok_or_else(|| invalid(worker, "no power-on request reached the BMC"))?;
    let history = host.history();
    let off_reached = history[history_seen.min(history.len())..]
        .iter()
        .find(|c| c.power == Power::Off)
        .map(|c| c.at_ms)
        .ok_or_else(|| invalid(worker, "the host never went off"))?;
    let node_back = node_back_ms.ok_or_else(|| invalid(worker, "the Node never came back"))?;
    let millis = |ms: u128| Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    let total = succeeded_at.saturating_sub(since_epoch(wall0));
    let floor = millis(off_reached.saturating_sub(off_request))
        + millis(node_back.saturating_sub(on_request));
    Ok(Sample {
        write: millis(write),
        fence_latency: millis(off_request.saturating_sub(host0)),
        overhead: total.saturating_sub(floor),
        total,
        bmc_requests: redfish.stats().requests - requests_before,
    })
}

/// Runs the benchmark.
pub async fn run(args: &LabArgs) -> Result<()> {
    let machines = args.machines as usize;
    let spec = ClusterSpec {
        masters: 3,
        workers: machines - 3,
        timing: bench_timing(),
        ready_timeout: Duration::from_secs(600),
        // No application pods: they only load the simulator's kubelets.
        workloads: Workloads {
            pods_per_worker: 0,
            pdb_min_available: None,
        },
        ..ClusterSpec::default()
    };
    println!(
        "scale benchmark: {machines} machines (3 control-plane, {} workers), {} remediations, \
         simulated BMC power delay {:?}, boot {:?}",
        spec.workers, args.samples, spec.timing.power_delay, spec.timing.boot_delay
    );
    let started = Instant::now();
    let lab = LabCluster::start(spec.clone()).await?;
    println!(
        "  cluster up in {:.1} s ({} Nodes Ready)",
        started.elapsed().as_secs_f64(),
        lab.cluster.ready_nodes()
    );
    // Hosts without a managing BareMetal Operator: fenced directly, and nobody else reads
    // their BMCs, so every request the simulator counts is the controller's.
    for info in lab.cluster.hosts() {
        lab.detach(&info.name)?;
    }
    // Wait until the operator has let go of every host (its early reads are done then).
    let started = Instant::now();
    loop {
        let detached = lab
            .api
            .list(BMHS, Some(MACHINE_NAMESPACE))
            .iter()
            .filter(|h| h.pointer("/status/operationalStatus") == Some(&json!("detached")))
            .count();
        if detached == lab.cluster.hosts().len() {
            break;
        }
        if started.elapsed() > Duration::from_secs(300) {
            return Err(invalid(
                "the BareMetal Operator",
                format!("{detached} hosts detached after 300 s"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    lab.install_policy(json!({
        "strategies": ["DirectBmc"],
        "timeouts": {"powerOffSeconds": 30, "nodeReadySeconds": 120, "readyGraceSeconds": 0},
    }))
    .await?;

    let dir = std::env::temp_dir().join(format!("baremend-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| LocalError::WriteFile {
        what: "benchmark directory",
        path: dir.clone(),
        source,
    })?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, &lab.controller_kubeconfig).map_err(|source| {
        LocalError::WriteFile {
            what: "kubeconfig",
            path: kubeconfig.clone(),
            source,
        }
    })?;
    let port = free_port()?;
    let started = Instant::now();
    let controller =
        ControllerProcess::start(&kubeconfig, dir.join("controller.log"), port).await?;
    let (idle_rss, _, _) = memory_kib(controller.pid()).unwrap_or_default();
    println!(
        "  controller (pid {}) ready in {:.1} s, caches filled: {:.1} MiB resident",
        controller.pid(),
        started.elapsed().as_secs_f64(),
        idle_rss as f64 / 1024.0
    );

    let workers: Vec<String> = lab
        .cluster
        .hosts()
        .iter()
        .filter(|h| h.role == "worker")
        .map(|h| h.name.clone())
        .collect();
    let stride = (workers.len() / args.samples as usize).max(1);
    let mut samples = Vec::new();
    for (index, worker) in workers
        .iter()
        .step_by(stride)
        .take(args.samples as usize)
        .enumerate()
    {
        let sample = remediate(&lab, worker, args.timeout).await?;
        println!(
            "  {:>3}. {worker}: trigger stored in {}, fence latency {}, total {}, overhead {}, {} BMC requests",
            index + 1,
            ms(sample.write),
            ms(sample.fence_latency),
            ms(sample.total),
            ms(sample.overhead),
            sample.bmc_requests
        );
        samples.push(sample);
    }
    let (rss, peak, anonymous) = memory_kib(controller.pid()).unwrap_or_default();
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);

    let mut fence: Vec<Duration> = samples.iter().map(|s| s.fence_latency).collect();
    let mut overhead: Vec<Duration> = samples.iter().map(|s| s.overhead).collect();
    fence.sort();
    overhead.sort();
    let requests: Vec<u64> = samples.iter().map(|s| s.bmc_requests).collect();
    let max_requests = requests.iter().copied().max().unwrap_or(0);
    let mean_requests = requests.iter().sum::<u64>() as f64 / requests.len().max(1) as f64;
    println!(
        "\n| measure ({machines} machines, {} remediations) | value | goal |",
        samples.len()
    );
    println!("|---|---|---|");
    println!("| fence latency p50 | {} | |", ms(percentile(&fence, 50)));
    println!(
        "| fence latency p99 | {} | ≤ 50 ms |",
        ms(percentile(&fence, 99))
    );
    println!(
        "| overhead over the physical floor p50 | {} | |",
        ms(percentile(&overhead, 50))
    );
    println!(
        "| overhead over the physical floor p99 | {} | ≤ 1 s |",
        ms(percentile(&overhead, 99))
    );
    println!(
        "| Redfish requests per remediation (mean / max) | {mean_requests:.1} / {max_requests} | ≤ 12 |"
    );
    let mb = |kib: u64| kib as f64 * 1024.0 / 1e6;
    println!(
        "| controller resident memory (now / peak; heap and stacks) | {:.1} MB / {:.1} MB; {:.1} MB | ≤ 100 MB |",
        mb(rss),
        mb(peak),
        mb(anonymous)
    );
    Ok(())
}
