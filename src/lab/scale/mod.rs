//! `baremend lab --scenario scale`: the remediation benchmark.
//!
//! A simulated world runs in this process; the controllers run as separate `baremend run`
//! processes on real kube clients, so that each one's resident memory is its own. Hosts hang
//! one after another and are remediated directly over Redfish (BareMetalHosts detached, so the
//! BareMetal Operator leaves them alone and nothing else talks to the BMCs); for each, the
//! simulator's records give:
//! - fence latency: the trigger stored → the first power-off request at the BMC;
//! - overhead: the whole remediation (trigger → `Succeeded` persisted) minus the physical
//!   floor, which the simulator knows exactly: power-off (request → off), and power-on to the
//!   Node registered again (request → Node created, boot and kubelet start included);
//! - BMC requests per remediation (the simulator counts every request it answers);
//! - the controllers' API requests during it (every simulated API server records them).
//!
//! After ours, two floors are measured on hosts of their own in the same world ([`floor`]):
//! the fastest controller that could exist (a watch and the power-off) and the fastest safe
//! one (plus the fresh reads and the writes our safety rules demand), the safe floor's samples
//! triggered at ours' cadence (`--floor-pace`); the table states our fence latency as a ratio
//! to the safe floor's, the goal that holds on any machine.
//!
//! Two worlds ([`layout`]): one OpenShift cluster (`--machines`, one controller, the trigger
//! annotation), or with `--workload-clusters` a Cluster API management cluster whose
//! Machines are spread over workload clusters (each with its own API server and Nodes) and
//! sharded over `--shards` controllers by cluster (the trigger a `MachineRemediation`). A
//! fleet run first measures the one cluster of `--compare-machines` the same way, and prints
//! both side by side.

mod floor;
mod layout;
mod process;
mod requests;
mod sample;
mod table;
mod world;

pub use self::floor::{FloorArgs, serve as serve_floor};

use std::time::{Duration, Instant};

use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::BMHS;
use serde_json::json;

use self::floor::{Floor, FloorRun, fence_latency};
use self::layout::Layout;
use self::process::{ControllerProcess, Memory};
use self::requests::ApiCounts;
use self::sample::{Sample, remediate};
use self::world::{ServerKind, World};
use super::{FloorPace, LabArgs};
use crate::{Error, LocalError, Result};

/// How long the benchmark waits for a controller to go idle after it is ready.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

fn invalid(object: &str, reason: impl std::fmt::Display) -> Error {
    Error::Invalid {
        object: object.into(),
        reason: reason.to_string(),
    }
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

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn mb(kib: u64) -> f64 {
    kib as f64 * 1024.0 / 1e6
}

/// What one run measured.
struct Figures {
    layout: Layout,
    /// The server it ran on.
    server: ServerKind,
    /// The real control plane's start (None on the simulated server).
    plane_started: Option<Duration>,
    samples: Vec<Sample>,
    /// Each controller's memory at the end (after the remediations).
    memory: Vec<Memory>,
    /// The controllers' API requests from their start until every one was ready.
    start_requests: ApiCounts,
    /// Simulated cluster start → every Node Ready.
    cluster_up: Duration,
    /// Every BareMetalHost detached, the policy installed.
    prepared: Duration,
    /// Controllers started → every one ready (caches filled).
    controllers_ready: Duration,
    /// Controllers ready → every one idle (its first pass over its Machines done).
    controllers_settled: Duration,
    /// The floors' fence latencies, measured in the same world after ours (sorted).
    floors: Vec<(Floor, Vec<Duration>)>,
    /// How far apart the safe floor's samples were triggered (`--floor-pace`).
    safe_floor_spacing: Duration,
}

impl Figures {
    /// Our fence latencies, sorted.
    fn fence_latencies(&self) -> Vec<Duration> {
        let mut values: Vec<Duration> = self.samples.iter().map(|s| s.fence_latency).collect();
        values.sort();
        values
    }

    /// A floor's fence latencies (sorted; empty when it was not measured).
    fn floor(&self, which: Floor) -> &[Duration] {
        self.floors
            .iter()
            .find(|(floor, _)| *floor == which)
            .map_or(&[], |(_, values)| values.as_slice())
    }
}

/// Runs the benchmark: one cluster, or the compared cluster and then the fleet.
pub async fn run(args: &LabArgs) -> Result<()> {
    let main = Layout {
        machines: args.machines as usize,
        workload_clusters: args.workload_clusters as usize,
        shards: args.shards as usize,
    };
    main.validate()?;
    let mut runs = Vec::new();
    if args.real_plane {
        if main.is_fleet() {
            return Err(invalid(
                "--real-plane",
                "a real control plane holds one cluster: leave out --workload-clusters",
            ));
        }
        // Before the first column: a missing plane should not cost a simulated run.
        baremend_sim::plane::Binaries::locate()?;
        // The same world on both servers, one after the other, in one run.
        runs.push((main, ServerKind::Simulated));
        runs.push((main, ServerKind::Real));
    } else {
        if main.is_fleet() && args.compare_machines > 0 {
            let compared = Layout::single(args.compare_machines as usize);
            compared.validate()?;
            runs.push((compared, ServerKind::Simulated));
        }
        runs.push((main, ServerKind::Simulated));
    }
    for (layout, _) in &runs {
        layout.validate_samples(args.samples as usize)?;
    }
    // Run by run, every world in turn: a machine that slows for a while slows one run of
    // each, not every run of one.
    let mut columns: Vec<Vec<Figures>> = runs.iter().map(|_| Vec::new()).collect();
    for run in 1..=args.runs {
        for ((layout, server), column) in runs.iter().zip(&mut columns) {
            if args.runs > 1 {
                println!("## run {run} of {}", args.runs);
            }
            column.push(bench(*layout, *server, args).await?);
        }
    }
    table::print(&columns);
    Ok(())
}

/// Brings one world up on `server` and measures `--samples` remediations in it, one after
/// another.
async fn bench(layout: Layout, server: ServerKind, args: &LabArgs) -> Result<Figures> {
    let spec = layout.spec();
    println!(
        "scale benchmark, {} on the {}: {} control-plane and {} workers per cluster, {} remediations one after another, \
         simulated BMC power delay {:?}, boot {:?}",
        layout.label(),
        server.label(),
        spec.masters,
        spec.workers,
        args.samples,
        spec.timing.power_delay,
        spec.timing.boot_delay
    );
    let started = Instant::now();
    let lab = match server {
        ServerKind::Simulated => World::simulated(spec).await?,
        ServerKind::Real => World::real(spec).await?,
    };
    let cluster_up = started.elapsed();
    let hosts = lab.hosts().len();
    println!(
        "  cluster up in {} ({} of {hosts} Nodes Ready)",
        secs(cluster_up),
        lab.ready_nodes()
    );
    let started = Instant::now();
    prepare(&lab, &layout).await?;
    let prepared = started.elapsed();
    println!(
        "  hosts detached and policy installed in {}",
        secs(prepared)
    );

    let dir = std::env::temp_dir().join(format!(
        "baremend-scale-{}-{}",
        std::process::id(),
        server.folder()
    ));
    std::fs::create_dir_all(&dir).map_err(|source| LocalError::WriteFile {
        what: "benchmark directory",
        path: dir.clone(),
        source,
    })?;
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, lab.controller_kubeconfig()).map_err(|source| {
        LocalError::WriteFile {
            what: "kubeconfig",
            path: kubeconfig.clone(),
            source,
        }
    })?;
    lab.record_requests();
    let started = Instant::now();
    let mut controllers = Vec::new();
    for (index, flags) in layout.controller_flags().iter().enumerate() {
        let log = dir.join(format!("controller-{index}.log"));
        controllers.push(ControllerProcess::spawn(&kubeconfig, log, flags)?);
    }
    for controller in &mut controllers {
        controller.ready().await?;
    }
    let controllers_ready = started.elapsed();
    let start_requests = lab.api_counts();
    for (index, controller) in controllers.iter().enumerate() {
        println!(
            "  controller {index} (pid {}) ready, caches filled: {:.1} MB resident",
            controller.pid(),
            mb(controller.memory().rss)
        );
    }
    println!(
        "  {} controller(s) ready in {}; {} requests to the management API server ({} watches) and {} to the workload API servers ({} watches) until then",
        controllers.len(),
        secs(controllers_ready),
        start_requests.management,
        start_requests.management_watches,
        start_requests.workload,
        start_requests.workload_watches
    );

    // The samples start once every controller has made its first pass over its Machines:
    // a trigger written meanwhile waits behind thousands of passes (a start-up figure).
    let mut controllers_settled = Duration::ZERO;
    for controller in &controllers {
        controllers_settled += controller.settled(SETTLE_LIMIT).await;
    }
    println!(
        "  controllers idle (first passes done) {} after ready",
        secs(controllers_settled)
    );
    let mut samples = Vec::new();
    let sampling = Instant::now();
    for (index, target) in layout
        .targets(&lab, args.samples as usize)
        .iter()
        .enumerate()
    {
        let sample = remediate(&lab, target, args.timeout).await?;
        println!(
            "  {:>3}. {}: trigger stored in {}, fence latency {}, total {}, overhead {}, {} BMC requests, {} management / {} workload API requests",
            index + 1,
            target.machine,
            ms(sample.write),
            ms(sample.fence_latency),
            ms(sample.total),
            ms(sample.overhead),
            sample.bmc_requests,
            sample.api.management,
            sample.api.workload
        );
        print_trace(&sample.trace);
        samples.push(sample);
    }
    let sampled = sampling.elapsed();
    let cadence = sampled / u32::try_from(samples.len().max(1)).unwrap_or(u32::MAX);
    println!(
        "  ours: {} remediations in {}, one triggered every {}",
        samples.len(),
        secs(sampled),
        secs(cadence)
    );
    let memory = controllers.iter().map(ControllerProcess::memory).collect();
    drop(controllers);
    let safe_floor_spacing = match args.floor_pace {
        FloorPace::Ours => cadence,
        FloorPace::Every(spacing) => spacing,
    };
    let mut floors = Vec::new();
    for (shift, floor, spacing) in [
        (1, Floor::Bare, Duration::ZERO),
        (2, Floor::Safe, safe_floor_spacing),
    ] {
        floors.push((
            floor,
            measure_floor(&lab, &layout, args, floor, (shift, spacing, &dir)).await?,
        ));
    }
    // Kept when asked for, and when a controller warned (at its default level, a warning is
    // what explains an outlier).
    let warnings = process::logged_lines(&dir);
    if process::controller_log_level().is_some() || warnings > 0 {
        println!(
            "  the controllers' logs ({warnings} lines) are kept in {}",
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!();
    let plane_started = lab.plane_started_in();
    lab.stop().await;
    Ok(Figures {
        layout,
        server,
        plane_started,
        samples,
        memory,
        start_requests,
        cluster_up,
        prepared,
        controllers_ready,
        controllers_settled,
        floors,
        safe_floor_spacing,
    })
}

/// Prints a sample's traced API requests (see `sample::TRACE`), one a line.
fn print_trace(trace: &[requests::Traced]) {
    for traced in trace {
        let took = traced
            .took
            .map(|took| format!(" ({:.1} ms)", took.as_secs_f64() * 1000.0))
            .unwrap_or_default();
        println!(
            "       +{:>6.1} ms {:<10} {:<6} {}{took}",
            traced.after.as_secs_f64() * 1000.0,
            traced.server,
            traced.method,
            traced.path
        );
    }
}

/// A floor's fence latencies on `--samples` hosts of their own (sorted), our controllers
/// stopped, triggered `spacing` apart (from one trigger to the next; zero: back to back).
async fn measure_floor(
    lab: &World,
    layout: &Layout,
    args: &LabArgs,
    floor: Floor,
    (shift, spacing, dir): (usize, Duration, &std::path::Path),
) -> Result<Vec<Duration>> {
    let targets = layout.targets_from(lab, args.samples as usize, shift);
    let kubeconfig = dir.join("kubeconfig");
    let running = FloorRun::start(lab, floor, &targets, (dir, &kubeconfig)).await?;
    let mut values = Vec::new();
    let began = tokio::time::Instant::now();
    for (index, target) in targets.iter().enumerate() {
        // Slots from the first trigger on: a slow sample eats into the next gap, as a slow
        // remediation of ours delays our next trigger.
        let slot = spacing.saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
        tokio::time::sleep_until(began + slot).await;
        let (latency, trace) = fence_latency(lab, target, args.timeout)
            .await
            .map_err(|error| {
                invalid(
                    floor.label(),
                    format!("{error}; its log: {}", running.log.display()),
                )
            })?;
        if !trace.is_empty() {
            println!(
                "  {}, {}: fence latency {}",
                floor.label(),
                target.machine,
                ms(latency)
            );
            print_trace(&trace);
        }
        values.push(latency);
    }
    let span = began.elapsed();
    drop(running);
    values.sort();
    println!(
        "  {}: fence latency p50 {}, p99 {} over {} hosts, triggered {} apart ({} in all)",
        floor.label(),
        ms(percentile(&values, 50)),
        ms(percentile(&values, 99)),
        values.len(),
        secs(spacing),
        secs(span)
    );
    Ok(values)
}

/// Checks that every BareMetalHost is detached (registered so: fenced directly, and nobody
/// else reads their BMCs, so every request the simulator counts is the controller's),
/// prepares the requests' side and installs the policy.
async fn prepare(lab: &World, layout: &Layout) -> Result<()> {
    // Registered detached (`Layout::spec`), with the status the BareMetal Operator gives a
    // detached host: every one must read so before the controllers fence them directly.
    let detached = lab
        .api()
        .list_shared(BMHS, Some(MACHINE_NAMESPACE))
        .iter()
        .filter(|h| h.pointer("/status/operationalStatus") == Some(&json!("detached")))
        .count();
    let hosts = lab.hosts().len();
    if detached != hosts {
        return Err(invalid(
            "the simulated world",
            format!("{detached} of {hosts} hosts detached; every one is registered so"),
        ));
    }
    layout.prepare_requests(lab)?;
    lab.install_policy(json!({
        "strategies": ["DirectBmc"],
        "timeouts": {"powerOffSeconds": 30, "nodeReadySeconds": 120, "readyGraceSeconds": 0},
    }))
    .await
}
