//! `baremend lab`: the whole story on simulated hardware, in one process.
//!
//! The default starts the simulated cluster (3 control-plane hosts, 3 workers, BareMetal
//! Operator, MachineHealthCheck, kubelets, Redfish BMCs), runs the controller against its API
//! server over HTTPS on a real kube client, hangs a worker and prints what happens until the
//! Node is back, with a per-step timing table. `--scenario power-demo` is the drivers alone.
//!
//! The stories serve the controller's metrics as `baremend run` does (`--metrics-listen`), and
//! `--linger` keeps the cluster and the controller running that long after the story ends, so
//! that a Prometheus can scrape what the story left (the live alert test does).

pub mod chaos;
mod drift;
mod power_demo;
mod scale;

pub use scale::{FloorArgs, serve_floor};
pub mod setup;
mod story;

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::Result;
use crate::duration::{parse_duration, parse_duration_or_off};

/// Which story to tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// A hung worker, fenced through the BareMetalHost reboot API (the BareMetal Operator
    /// powers the host).
    Bmh,
    /// A hung worker whose BareMetalHost is detached, fenced directly over Redfish.
    Redfish,
    /// A hung worker whose BareMetalHost is detached, fenced directly over IPMI (RMCP+).
    Ipmi,
    /// A hung worker remediated in out-of-service mode: the Node is tainted, not deleted.
    OutOfService,
    /// A hung control-plane host (one at a time, etcd quorum kept).
    ControlPlane,
    /// Cluster API: a hung worker's cluster.x-k8s.io Machine, whose Cluster API
    /// MachineHealthCheck creates a MachineRemediation from baremend's template; the host is
    /// found through the Machine's Metal3Machine, and its Node in the workload cluster's own
    /// API server, through the Cluster's kubeconfig Secret.
    Capi,
    /// Cluster API at fleet scale, in small: a management cluster and three workload
    /// clusters (one control-plane host and four workers each, their Nodes in their own API
    /// servers). One worker hangs in each, remediated at once; two more hang in the third, a
    /// storm there: its starts are held while the other clusters' go ahead.
    CapiFleet,
    /// medik8s NodeHealthCheck: a hung worker's Node, for which the NodeHealthCheck creates a
    /// NodeRemediation from baremend's template (the first of its escalating remediations);
    /// baremend reports the contract's conditions on it.
    Nhc,
    /// medik8s NodeHealthCheck on a cluster without Machines (platform none, UPI bare metal):
    /// a hung worker's Node, found through the HostBmc that names it, fenced directly through
    /// its BMC.
    NhcUpi,
    /// A BMC that accepts power-off and never does it: the Node must never be deleted.
    StuckBmc,
    /// Half the workers hang at once: the storm gate holds every start until an operator
    /// fixes one by hand; then the other two are remediated one at a time.
    Storm,
    /// Config drift on a worker, coordinated with the simulated Machine Config Operator: a
    /// file edited by hand, the debounce, the forcefile, the MCO's drain, rewrite, reboot and
    /// uncordon, verified Done.
    Drift,
    /// The drivers alone: power one simulated host off and on (Redfish, or IPMI with --ipmi).
    PowerDemo,
    /// The benchmark: `--machines` simulated machines, `--samples` remediations one after
    /// another over Redfish, with the controller as its own process; prints fence latency,
    /// overhead, BMC and API requests and the controller's memory. With
    /// `--workload-clusters`, a Cluster API fleet sharded over `--shards` controllers, printed
    /// beside one cluster of `--compare-machines`.
    Scale,
    /// The chaos harness: `--seeds` seeded runs (from `--first-seed`, `--jobs` at a time) of
    /// BMC and API faults, crashes, leader changes, hangs and trigger removals, each checked
    /// against the safety invariants; prints a summary and how to replay a failing seed.
    Chaos,
}

/// Arguments of `baremend lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// The story to tell.
    #[arg(long, value_enum, default_value = "bmh")]
    pub scenario: Scenario,
    /// Give up when the remediation has not ended after this long.
    #[arg(long, default_value = "100s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// power-demo: how long the simulated host takes to change power.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub power_delay: Duration,
    /// power-demo: serve the simulated BMC over HTTPS.
    #[arg(long, conflicts_with = "ipmi")]
    pub tls: bool,
    /// power-demo: drive the host over IPMI instead of Redfish.
    #[arg(long)]
    pub ipmi: bool,
    /// scale: machines in the simulated cluster (3 of them control-plane).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(4..=20000))]
    pub machines: u32,
    /// scale: remediations to measure, one after another (and as many for each floor, on
    /// hosts of their own: at most a third of the workers). Below 100 a p99 is a run's slowest.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub samples: u32,
    /// scale: spread the machines over this many Cluster API workload clusters (each with its
    /// own API server and Nodes, 3 of its machines control-plane) of one management cluster;
    /// 0: one OpenShift cluster.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=200))]
    pub workload_clusters: u32,
    /// scale, with --workload-clusters: controller processes, each owning whole workload
    /// clusters (by a --machine-selector and a --host-selector on the cluster-name label).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub shards: u32,
    /// scale, with --workload-clusters: first measure one cluster of this many machines with
    /// one controller, and print both side by side (0: the fleet only).
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(0..=20000))]
    pub compare_machines: u32,
    /// scale: measure each world this many times (one after another, every world in turn)
    /// and print each figure's median and spread, flagging a spread over 20 %.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// scale: how far apart the safe floor's samples are triggered. `ours` (the default): at
    /// our controllers' cadence in the same world (their remediations' span over their count),
    /// so that the floor's p99 is taken over as many minutes of the machine as ours, by a
    /// process that idles between starts as ours does; or a duration (`0s`: back to back, in
    /// well under a second). The bare floor runs back to back.
    #[arg(long, default_value = "ours", value_name = "ours|DURATION", value_parser = parse_floor_pace)]
    pub floor_pace: FloorPace,
    /// scale: measure the same cluster twice in one run, on the simulated API server and then
    /// on a real control plane (etcd, kube-apiserver and kube-controller-manager, built by
    /// `scripts/kubernetes.sh`, found through BAREMEND_KUBE_BIN) that the simulated world
    /// drives over HTTPS; print both side by side.
    #[arg(long)]
    pub real_plane: bool,
    /// chaos: how many seeds to run.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// chaos: the first seed.
    #[arg(long, default_value_t = 0)]
    pub first_seed: u64,
    /// chaos: exactly these seeds (comma-separated), instead of --first-seed and --seeds.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["seeds", "first_seed"])]
    pub seed_list: Vec<u64>,
    /// chaos: print each seed's line as it ends (what it judged, how its remediations ended,
    /// its faults): what a curated set of seeds is picked by.
    #[arg(long)]
    pub per_seed: bool,
    /// chaos: seeds run at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// The remediation stories and drift: where to serve the controller's `/metrics` (port 0:
    /// any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR:PORT")]
    pub metrics_listen: SocketAddr,
    /// The remediation stories and drift: once the story has ended, keep the cluster and the
    /// controller running, and the metrics served, this long (for a Prometheus to scrape).
    #[arg(long, default_value = "0s", value_parser = parse_duration_or_off)]
    pub linger: Duration,
}

/// How far apart the scale benchmark's safe floor triggers its samples (`--floor-pace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorPace {
    /// At our controllers' mean interval between triggers, measured in the same world.
    Ours,
    /// A fixed interval (zero: back to back).
    Every(Duration),
}

/// `ours`, or a duration (`0s` and the like: back to back).
fn parse_floor_pace(text: &str) -> std::result::Result<FloorPace, String> {
    if text.trim() == "ours" {
        return Ok(FloorPace::Ours);
    }
    parse_duration_or_off(text)
        .map(FloorPace::Every)
        .map_err(|e| format!("{e}; or `ours`, our controllers' cadence"))
}

/// Where a story serves its controller's metrics, and how long after its end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Serving {
    listen: SocketAddr,
    linger: Duration,
}

impl Serving {
    /// Serves `metrics` on the address asked for; returns the bound one.
    async fn serve(&self, metrics: std::sync::Arc<crate::metrics::Metrics>) -> Result<SocketAddr> {
        crate::metrics::serve(self.listen, metrics).await
    }

    /// Waits out `--linger` (if asked), saying so, before the story stops its controller.
    async fn linger(&self, at: SocketAddr) {
        if self.linger.is_zero() {
            return;
        }
        println!(
            "\nthe story has ended; the controller keeps running and http://{at}/metrics stays served for {:?} (--linger)",
            self.linger
        );
        tokio::time::sleep(self.linger).await;
    }
}

/// Runs the lab.
pub async fn run(args: LabArgs) -> Result<()> {
    let serving = Serving {
        listen: args.metrics_listen,
        linger: args.linger,
    };
    match args.scenario {
        Scenario::PowerDemo => power_demo::run(&args).await,
        Scenario::Scale => scale::run(&args).await,
        Scenario::Chaos => {
            let seeds = if args.seed_list.is_empty() {
                chaos::Seeds::Range {
                    first: args.first_seed,
                    count: args.seeds,
                }
            } else {
                chaos::Seeds::List(args.seed_list.clone())
            };
            chaos::run(seeds, args.jobs as usize, args.per_seed).await
        }
        Scenario::Drift => drift::run(args.timeout, serving).await,
        scenario => story::run(scenario, args.timeout, serving).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_pace_is_ours_or_a_duration_and_anything_else_says_both() {
        assert_eq!(parse_floor_pace("ours"), Ok(FloorPace::Ours));
        assert_eq!(
            parse_floor_pace("2s"),
            Ok(FloorPace::Every(Duration::from_secs(2)))
        );
        assert_eq!(parse_floor_pace("0s"), Ok(FloorPace::Every(Duration::ZERO)));
        for bad in ["soon", "-1s", "2 weeks", ""] {
            let error = parse_floor_pace(bad).unwrap_err();
            assert!(error.contains("`ours`"), "{bad:?}: {error}");
        }
    }
}
