//! The floors of the remediation benchmark: the fastest controllers that could exist on the
//! same simulated world, measured in the same run as ours so that our figures read as ratios
//! to them on any machine.
//!
//! - [`Floor::Bare`]: a watch on the trigger and, on seeing it, the BMC's power-off at once —
//!   no read, no write — over a connection opened beforehand, with Basic credentials read
//!   beforehand.
//! - [`Floor::Safe`]: the same plus what our safety rules demand before a power-off: the
//!   record persisted before acting (a Remediation created, its `PowerOffRequested` step
//!   written to its status) and, between the two, the fresh reads of a start (the Machine, its
//!   host, the Remediations that may already hold the host, the discovery and the other
//!   remediators' kinds it serves, and under Cluster API the request; at once, as ours makes
//!   them); then the power-off.
//!
//! Expected flow: [`FloorRun::start`] runs the floor as a process of its own (`baremend
//! lab-floor`, [`serve`]), which opens the BMC connection and the watch and says when it is
//! ready; each sample is [`fence_latency`]: hang the host, store the trigger, wait for the
//! power-off at the BMC.
//! Guarantees: a floor's latency is measured as ours is (trigger stored → the power-off
//! request at the BMC, both in the simulator's records), on hosts ours did not touch, with
//! our controllers stopped; a floor is a process of its own, as our controller is, with the
//! same client built from the same kubeconfig: a controller that could exist talks to its
//! API server over a socket from another process, and pays what that costs, as ours does.
//! Caveats: they only power off: their hosts stay off. The floors run after ours, not beside
//! them (ours would act on their triggers). The safe floor's samples are triggered at ours'
//! cadence by default (`--floor-pace`), so that its p99 is taken over as many minutes of a
//! shared machine as ours, by a process that idles between starts as ours does; back to back
//! (100 in under a second, where ours' 100 whole remediations take minutes) a slow stretch
//! lands among ours' samples far more often than among the floor's, and a warm process
//! answers faster: 1.9–3.6 ms at p50 back to back against 4.0–5.2 paced, over three runs of
//! each world (docs/engineering/benchmarks.md, 2026-12-02). The bare floor, which no goal is set
//! against, still runs back to back: the fastest figure there is, in under a second. Until
//! 2026-12-01 (afternoon) the safe floor made neither the discovery nor the other remediators'
//! lists, nor the Cluster API request's read: the `ForeignRemediation` gate's evidence and the
//! trigger's, which ours reads fresh at every start as the others. Until 2026-12-01 the floors
//! ran in the benchmark's own process, beside the simulated API server; moved to processes of
//! their own the safe floor's figures did not move (2 / 4–5 ms at p50 / p99 against 2 / 4 ms),
//! so the ratios recorded before hold against this floor too.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use baremend_sim::cluster::MACHINE_NAMESPACE;
use base64::Engine;
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::invalid;
use super::requests::Traced;
use super::sample::{Target, Trigger, clear_trigger, host_of, micros, set_trigger, traced};
use super::world::World;
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::slim::{BareMetalHost, MachineApi};
use crate::api::{
    MachineRemediation, Remediation, RemediationPhase, RemediationSpec, RemediationStatus,
    RemediationStep,
};
use crate::remediation::decide::gates::ForeignKind;
use crate::remediation::decide::state::record_step;
use crate::remediation::evidence::foreign::{foreign_resource, served_foreign_kinds};
use crate::{LocalError, Result};

/// Which floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Floor {
    /// The watch and the power-off, nothing else.
    Bare,
    /// The fresh reads and the writes our safety rules demand, then the power-off.
    Safe,
}

impl Floor {
    /// Its name in the table.
    pub(super) fn label(self) -> &'static str {
        match self {
            Floor::Bare => "bare floor",
            Floor::Safe => "safe floor",
        }
    }

    /// Its name in file names.
    fn file_name(self) -> &'static str {
        match self {
            Floor::Bare => "bare",
            Floor::Safe => "safe",
        }
    }
}

/// Where a host's power-off goes: its BMC's `host:port` and its Reset action's path.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ResetTarget {
    authority: String,
    path: String,
}

/// What a floor's process is told, in a file of the benchmark's directory that only its
/// owner reads (it holds the BMCs' credentials; no `Debug`, so that they are never printed).
#[derive(Serialize, Deserialize)]
struct FloorSpec {
    floor: Floor,
    trigger: Trigger,
    /// Each target Machine's power-off, by the Machine's name.
    resets: HashMap<String, ResetTarget>,
    /// The BMC service all of them are behind.
    authority: String,
    /// The Basic credentials (base64 of `user:password`).
    credentials: String,
}

/// What a floor's process prints once its watch has listed and its BMC is connected.
const READY_LINE: &str = "ready";

/// How long a floor's process may take to connect and list.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A floor running as its own process, killed when dropped (it also ends by itself when
/// its standard input closes: the benchmark that started it has gone).
pub(super) struct FloorRun {
    _child: tokio::process::Child,
    /// Where its standard error goes.
    pub log: PathBuf,
}

impl FloorRun {
    /// Starts `floor` for `targets` as `baremend lab-floor` on `kubeconfig` (the one our
    /// controllers run on); returns once it says its BMC is connected and its watch has
    /// listed. Its spec and its log go to `dir`.
    pub(super) async fn start(
        world: &World,
        floor: Floor,
        targets: &[Target],
        (dir, kubeconfig): (&Path, &Path),
    ) -> Result<Self> {
        let spec = spec_for(world, floor, targets)?;
        let spec_path = dir.join(format!("floor-{}.json", floor.file_name()));
        write_private(&spec_path, &spec)?;
        let log = dir.join(format!("floor-{}.log", floor.file_name()));
        let log_file = std::fs::File::create(&log).map_err(|source| LocalError::WriteFile {
            what: "floor log",
            path: log.clone(),
            source,
        })?;
        let exe = std::env::current_exe().map_err(|e| invalid("the baremend binary", e))?;
        let mut child = tokio::process::Command::new(exe)
            .arg("lab-floor")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--spec")
            .arg(&spec_path)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| invalid("baremend lab-floor", e))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| invalid("baremend lab-floor", "no standard output"))?;
        let mut lines = BufReader::new(stdout).lines();
        let said = tokio::time::timeout(READY_TIMEOUT, lines.next_line()).await;
        match said {
            Ok(Ok(Some(line))) if line == READY_LINE => Ok(FloorRun { _child: child, log }),
            Err(_) => Err(invalid(
                floor.label(),
                format!("not ready within {READY_TIMEOUT:?}; see {}", log.display()),
            )),
            _ => Err(invalid(
                floor.label(),
                format!("ended before it was ready; see {}", log.display()),
            )),
        }
    }
}

/// `floor`'s spec for `targets`: their BMCs' Reset paths, and the credentials.
fn spec_for(world: &World, floor: Floor, targets: &[Target]) -> Result<FloorSpec> {
    let mut resets = HashMap::new();
    for target in targets {
        let info = world
            .host(&target.machine)
            .ok_or_else(|| invalid(&target.machine, "no such host"))?;
        resets.insert(target.machine.clone(), reset_target(&info.redfish_address)?);
    }
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        baremend_sim::cluster::BMC_USERNAME,
        world.bmc_password()
    ));
    let authority = resets
        .values()
        .next()
        .map(|r| r.authority.clone())
        .ok_or_else(|| invalid("the floor", "no target"))?;
    Ok(FloorSpec {
        floor,
        trigger: targets.first().map_or(Trigger::Annotation, |t| t.trigger),
        resets,
        authority,
        credentials,
    })
}

/// Writes `spec` to `path`, readable and writable by its owner only.
fn write_private(path: &Path, spec: &FloorSpec) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let text = serde_json::to_vec(spec).map_err(|e| invalid("the floor's spec", e))?;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(&text))
        .map_err(|source| {
            LocalError::WriteFile {
                what: "floor spec",
                path: path.to_owned(),
                source,
            }
            .into()
        })
}

/// Arguments of `baremend lab-floor` (hidden): one floor of the scale benchmark, as a
/// process of its own; the benchmark starts it.
#[derive(Debug, clap::Args)]
pub struct FloorArgs {
    /// The cluster, as the controller reaches it.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// The floor's spec, written by the benchmark.
    #[arg(long, value_name = "FILE")]
    pub spec: PathBuf,
}

/// Runs a floor until its standard input closes: its BMC connected and its watch listed, it
/// prints [`READY_LINE`], then powers off each target's host on the target's first trigger.
pub async fn serve(args: FloorArgs) -> Result<()> {
    let text =
        std::fs::read(&args.spec).map_err(|e| invalid(&args.spec.display().to_string(), e))?;
    let spec: FloorSpec =
        serde_json::from_slice(&text).map_err(|e| invalid(&args.spec.display().to_string(), e))?;
    let cluster = crate::run::ClusterArgs {
        kubeconfig: Some(args.kubeconfig),
        context: None,
    };
    let client = cluster.client().await?;
    // The other remediators' kinds served, discovered once as ours discovers at its start.
    let groups = client
        .list_api_groups()
        .await
        .map_err(|e| invalid("the floor's discovery", e))?;
    let reads = Arc::new(FreshReads {
        trigger: spec.trigger,
        foreign: served_foreign_kinds(&groups),
    });
    let bmc = Arc::new(Bmc {
        connection: Mutex::new(Some(connect(&spec.authority).await?)),
        authority: spec.authority,
        credentials: spec.credentials,
    });
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watching = tokio::spawn(watch(client, spec.floor, reads, spec.resets, bmc, ready_tx));
    ready_rx
        .await
        .map_err(|_| invalid("the floor's watch", "ended before it was ready"))?;
    println!("{READY_LINE}");
    // The benchmark holds our standard input open while it needs us.
    let _ = tokio::task::spawn_blocking(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
    })
    .await;
    watching.abort();
    Ok(())
}

/// `redfish+http://host:port/redfish/v1/Systems/id` → its authority and Reset path.
fn reset_target(address: &str) -> Result<ResetTarget> {
    let rest = address
        .strip_prefix("redfish+http://")
        .ok_or_else(|| invalid(address, "the floors speak plain HTTP to the lab's BMCs"))?;
    let (authority, system) = rest
        .split_once('/')
        .ok_or_else(|| invalid(address, "no system path"))?;
    Ok(ResetTarget {
        authority: authority.to_owned(),
        path: format!("/{system}/Actions/ComputerSystem.Reset"),
    })
}

/// The BMC service, over one kept-alive connection.
struct Bmc {
    authority: String,
    credentials: String,
    connection: Mutex<Option<TcpStream>>,
}

impl Bmc {
    /// Sends the power-off; a connection the BMC closed meanwhile is opened again once.
    async fn power_off(&self, path: &str) -> Result<()> {
        let mut connection = self.connection.lock().await;
        for _ in 0..2 {
            let stream = match connection.take() {
                Some(stream) => stream,
                None => connect(&self.authority).await?,
            };
            if let Ok(stream) = self.post_reset(stream, path).await {
                *connection = Some(stream);
                return Ok(());
            }
        }
        Err(invalid(&self.authority, "the power-off failed twice"))
    }

    async fn post_reset(&self, mut stream: TcpStream, path: &str) -> std::io::Result<TcpStream> {
        let body = br#"{"ResetType":"ForceOff"}"#;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.authority,
            self.credentials,
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        read_answer(&mut stream).await?;
        Ok(stream)
    }
}

async fn connect(authority: &str) -> Result<TcpStream> {
    let stream = TcpStream::connect(authority)
        .await
        .map_err(|e| invalid(authority, format!("cannot connect: {e}")))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Reads one HTTP answer (its head, then `Content-Length` bytes); an error answer is an error.
async fn read_answer(stream: &mut TcpStream) -> std::io::Result<()> {
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned());
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let read = stream.read(&mut chunk).await?;
        if read == 0 {
            return Err(bad("closed"));
        }
        buffer.extend_from_slice(&chunk[..read]);
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if buffer.len() > 64 * 1024 {
            return Err(bad("a head over 64 KiB"));
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 2") {
        return Err(bad("not a success"));
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut left = (head_end + length).saturating_sub(buffer.len());
    while left > 0 {
        let read = stream.read(&mut chunk[..left.min(4096)]).await?;
        if read == 0 {
            return Err(bad("closed mid-body"));
        }
        left -= read;
    }
    Ok(())
}

/// What a safe start reads fresh beyond the Machine, its host and the Remediations.
struct FreshReads {
    /// How the remediation is asked for: under Cluster API the request is read too.
    trigger: Trigger,
    /// The other remediators' kinds served (at their versions), listed beside the discovery.
    foreign: Vec<(ForeignKind, String)>,
}

/// The watch on the trigger's object: each target's first trigger is acted on once.
async fn watch(
    client: kube::Client,
    floor: Floor,
    reads: Arc<FreshReads>,
    resets: HashMap<String, ResetTarget>,
    bmc: Arc<Bmc>,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let trigger = reads.trigger;
    let resource = match trigger {
        Trigger::Annotation => machine_api(trigger).resource(),
        Trigger::Request => ApiResource::erase::<MachineRemediation>(&()),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), MACHINE_NAMESPACE, &resource);
    let mut ready = Some(ready);
    let mut fired = std::collections::HashSet::new();
    let mut events = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let object = match event {
            Ok(watcher::Event::InitDone) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                continue;
            }
            Ok(watcher::Event::Apply(object)) => object,
            _ => continue,
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        let asked = match trigger {
            Trigger::Annotation => object
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(EXTERNAL_REMEDIATION)),
            Trigger::Request => true,
        };
        let Some(reset) = resets.get(&name).filter(|_| asked) else {
            continue;
        };
        if !fired.insert(name.clone()) {
            continue;
        }
        let (client, bmc, reset, reads) =
            (client.clone(), bmc.clone(), reset.clone(), reads.clone());
        tokio::spawn(async move {
            if floor == Floor::Safe
                && let Err(error) = safe_start(&client, &name, &reads).await
            {
                eprintln!("  the safe floor's start of {name} failed: {error}");
                return;
            }
            if let Err(error) = bmc.power_off(&reset.path).await {
                eprintln!("  the floor's power-off of {name} failed: {error}");
            }
        });
    }
}

/// What the safe floor does before a power-off: the record persisted (created, then the
/// step written as our controller writes it, with [`record_step`]) and, between the two, the
/// fresh reads of a start at once.
///
/// The record is created before the reads, as ours creates it: on a real kube-apiserver a
/// consistent list of a kind nobody wrote lately waits for etcd's next progress notification
/// (the watch cache must catch up with etcd's newest revision first: tens of milliseconds),
/// and a write of that kind just before makes the cache current. Read first, the floor was
/// 3× slower than ours there (84 against 23 ms at the median): no floor at all.
///
/// The reads are ours at a start: the Machine (its trigger), its host, the Remediations that
/// may hold the host, the discovery and each other remediator's kind it served at the floor's
/// start (the `ForeignRemediation` gate's evidence; a kind served since is not looked for,
/// where ours would list it after its discovery) and, under Cluster API, the request.
async fn safe_start(client: &kube::Client, machine: &str, reads: &FreshReads) -> Result<()> {
    let trigger = reads.trigger;
    let remediations: Api<Remediation> = Api::namespaced(client.clone(), MACHINE_NAMESPACE);
    let machines = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        MACHINE_NAMESPACE,
        &machine_api(trigger).resource(),
    );
    let hosts = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        MACHINE_NAMESPACE,
        &ApiResource::erase::<BareMetalHost>(&()),
    );
    let kube_error = |what: &'static str| move |e: kube::Error| invalid(what, e);
    let name = format!("{machine}-floor");
    let mut record = Remediation::new(
        &name,
        RemediationSpec {
            host: Some(format!("{MACHINE_NAMESPACE}/{machine}")),
            ..RemediationSpec::of_machine(machine)
        },
    );
    record.metadata.labels = Some([("floor-host".to_owned(), machine.to_owned())].into());
    let mut created = remediations
        .create(&PostParams::default(), &record)
        .await
        .map_err(kube_error("the record's creation"))?;
    let holding = ListParams::default().labels(&format!("floor-host={machine}"));
    let foreign = reads.foreign.iter().map(|(kind, version)| {
        let api = Api::<DynamicObject>::all_with(client.clone(), &foreign_resource(*kind, version));
        async move {
            // As ours: a group served without this kind at that version answers 404 (none).
            match api.list(&ListParams::default()).await {
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                listed => listed.map(|_| ()),
            }
        }
    });
    let request = async {
        match trigger {
            Trigger::Request => {
                let requests: Api<MachineRemediation> =
                    Api::namespaced(client.clone(), MACHINE_NAMESPACE);
                requests.get(machine).await.map(|_| ())
            }
            Trigger::Annotation => Ok(()),
        }
    };
    let (machine_read, host_read, held, discovered, listed, request_read) = tokio::join!(
        machines.get(machine),
        hosts.get(machine),
        remediations.list(&holding),
        client.list_api_groups(),
        futures_util::future::try_join_all(foreign),
        request,
    );
    machine_read.map_err(kube_error("the Machine's fresh read"))?;
    host_read.map_err(kube_error("the host's fresh read"))?;
    held.map_err(kube_error("the Remediations that may hold the host"))?;
    discovered.map_err(kube_error("the discovery"))?;
    listed.map_err(kube_error("the other remediators' lists"))?;
    request_read.map_err(kube_error("the request's fresh read"))?;
    // The step persisted before the power-off, with the verb our controller writes status by
    // (its role may update the status subresource, not patch it).
    let mut status = RemediationStatus::default();
    record_step(
        &mut status,
        RemediationStep::PowerOffRequested,
        Some(RemediationPhase::PoweringOff),
        SystemTime::now(),
    );
    created.status = Some(status);
    remediations
        .replace_status(&name, &PostParams::default(), &created)
        .await
        .map_err(kube_error("the step's write"))?;
    Ok(())
}

/// The Machines a trigger is on: OpenShift's (the annotation), or Cluster API's in the fleet
/// (a `MachineRemediation` request).
fn machine_api(trigger: Trigger) -> MachineApi {
    match trigger {
        Trigger::Annotation => MachineApi::OpenShift,
        Trigger::Request => MachineApi::ClusterApi,
    }
}

/// One floor sample: `target`'s host hung and its trigger stored, then the time from the
/// trigger stored to the power-off request at the BMC, and (with `BAREMEND_SCALE_TRACE`) the
/// floor's API requests until then.
pub(super) async fn fence_latency(
    world: &World,
    target: &Target,
    timeout: Duration,
) -> Result<(Duration, Vec<Traced>)> {
    use baremend_sim::host::PowerAction;
    let worker = target.machine.as_str();
    let host = host_of(world, worker)?;
    let seen = host.requests().len();
    world.hang(worker)?;
    set_trigger(world, target)?;
    let stored = host.clock_us();
    let started = std::time::Instant::now();
    loop {
        let requests = host.requests();
        if let Some(off) = requests[seen.min(requests.len())..]
            .iter()
            .find(|r| r.action == PowerAction::ForceOff)
        {
            let latency = micros(off.at_us.saturating_sub(stored));
            let trace = traced(world, started, latency);
            // The trigger withdrawn, as a health check does once it is answered, so that a
            // small world's host can serve the next floor too.
            clear_trigger(world, target)?;
            return Ok((latency, trace));
        }
        if started.elapsed() > timeout {
            return Err(invalid(worker, "the floor sent no power-off in time"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_floor_spec_is_written_for_its_owner_only_and_read_back_whole() {
        let dir = std::env::temp_dir().join(format!("baremend-floor-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("floor-safe.json");
        let spec = FloorSpec {
            floor: Floor::Safe,
            trigger: Trigger::Request,
            resets: [(
                "worker-1".to_owned(),
                reset_target("redfish+http://127.0.0.1:8000/redfish/v1/Systems/worker-1").unwrap(),
            )]
            .into(),
            authority: "127.0.0.1:8000".into(),
            credentials: "c2VjcmV0".into(),
        };
        write_private(&path, &spec).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read: FloorSpec = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(read.floor, Floor::Safe);
        assert_eq!(read.trigger, Trigger::Request);
        let reset = &read.resets["worker-1"];
        assert_eq!(reset.authority, "127.0.0.1:8000");
        assert_eq!(
            reset.path,
            "/redfish/v1/Systems/worker-1/Actions/ComputerSystem.Reset"
        );
        assert_eq!(read.credentials, "c2VjcmV0");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_floors_speak_plain_http_to_the_labs_bmcs_only() {
        assert!(reset_target("redfish+https://127.0.0.1:8000/redfish/v1/Systems/a").is_err());
        assert!(reset_target("redfish+http://127.0.0.1:8000").is_err());
    }
}
