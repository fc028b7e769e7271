//! The controllers of a benchmark as their own `baremend run` processes, and what the
//! benchmark reads of them (readiness, resident memory).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::invalid;
use crate::{LocalError, Result};

/// How long a controller may take to fill its caches and answer `/readyz`.
const READY_TIMEOUT: Duration = Duration::from_secs(600);

/// The resident, peak resident and anonymous (heap and stacks, no mapped binary) memory of
/// a process, in KiB.
pub(super) fn memory_kib(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    };
    Some(Memory {
        rss: field("VmRSS:")?,
        peak: field("VmHWM:")?,
        anonymous: field("RssAnon:")?,
    })
}

/// The CPU time a process has used (user and system), from `/proc/<pid>/stat` (in the
/// kernel's clock ticks, 100 a second on Linux).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: the fields are counted after its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime, the line's 14th and 15th fields.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks.saturating_mul(10)))
}

/// A process's memory, in KiB.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Memory {
    /// Resident now.
    pub rss: u64,
    /// The peak resident (VmHWM).
    pub peak: u64,
    /// Resident heap and stacks (no mapped binary).
    pub anonymous: u64,
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

/// The controllers' log filter when `BAREMEND_SCALE_LOG` is set (say `baremend=debug`, to
/// trace a slow remediation): their logs are then kept, and where is printed.
pub(super) fn controller_log_level() -> Option<String> {
    std::env::var("BAREMEND_SCALE_LOG")
        .ok()
        .filter(|level| !level.is_empty())
}

/// How many lines the controllers' logs in `dir` hold (`controller-<i>.log`).
pub(super) fn logged_lines(dir: &Path) -> usize {
    (0..)
        .map(|index| dir.join(format!("controller-{index}.log")))
        .map_while(|path| std::fs::read_to_string(path).ok())
        .map(|text| text.lines().count())
        .sum()
}

/// The controller as its own process.
pub(super) struct ControllerProcess {
    child: tokio::process::Child,
    log: PathBuf,
    port: u16,
}

impl ControllerProcess {
    /// Starts `baremend run` on `kubeconfig` with the benchmark's flags and `extra` ones (a
    /// shard's); [`ControllerProcess::ready`] waits until it serves.
    pub(super) fn spawn(kubeconfig: &Path, log: PathBuf, extra: &[String]) -> Result<Self> {
        let exe = std::env::current_exe().map_err(|e| invalid("the baremend binary", e))?;
        let log_file = std::fs::File::create(&log).map_err(|source| LocalError::WriteFile {
            what: "controller log",
            path: log.clone(),
            source,
        })?;
        let port = free_port()?;
        let child = tokio::process::Command::new(exe)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            // `/readyz` is on the probe port; metrics stay out of the way on a port of their own.
            .arg("--probe-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", free_port()?))
            // One replica (per shard): the benchmark measures remediation, not an election.
            .arg("--leader-elect=false")
            // The power monitor's and the fencing readiness check's reads would count in each
            // remediation's BMC requests.
            .arg("--power-poll=0s")
            .arg("--fencing-check-interval=0s")
            // Pinned, so that its warning of an unpinned image leaves a quiet run's log empty.
            .arg(format!(
                "--helper-image={}",
                crate::lab::setup::LAB_HELPER_IMAGE
            ))
            .args(extra)
            .env(
                "RUST_LOG",
                controller_log_level().unwrap_or_else(|| "warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| invalid("baremend run", e))?;
        Ok(ControllerProcess { child, log, port })
    }

    /// Waits until it answers `/readyz` (its caches filled).
    pub(super) async fn ready(&mut self) -> Result<()> {
        let started = Instant::now();
        while http_status(self.port, "/readyz").await != Some(200) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(invalid(
                    "baremend run",
                    format!("exited ({status}); see {}", self.log.display()),
                ));
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(invalid(
                    "baremend run",
                    format!(
                        "not ready after {READY_TIMEOUT:?}; see {}",
                        self.log.display()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Waits until it has been idle for a second (under 5 % of a core: its first pass over
    /// its Machines done), at most `limit`; how long it waited. A trigger written during that
    /// first pass waits behind it, which is a start-up figure, not a fence latency.
    pub(super) async fn settled(&self, limit: Duration) -> Duration {
        let started = Instant::now();
        let window = Duration::from_secs(1);
        let mut before = cpu_time(self.pid());
        while started.elapsed() < limit {
            tokio::time::sleep(window).await;
            let now = cpu_time(self.pid());
            match (before, now) {
                (Some(before), Some(now)) if now.saturating_sub(before) < window / 20 => break,
                // No figure (the process is gone): nothing to wait for.
                (_, None) => break,
                _ => before = now,
            }
        }
        started.elapsed()
    }

    /// Its process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Its memory now.
    pub(super) fn memory(&self) -> Memory {
        memory_kib(self.pid()).unwrap_or_default()
    }
}
