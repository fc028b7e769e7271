//! The benchmark's world: one cluster with one controller, or a Cluster API management
//! cluster with workload clusters and its Machines sharded over controllers; which workers are
//! remediated; and the API requests the controllers make.

use std::time::Duration;

use baremend_sim::cluster::local::{CAPI_MHCS, MACHINE_REMEDIATION_TEMPLATES};
use baremend_sim::cluster::scenario::Workloads;
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::workload::CLUSTER_NAME_LABEL;
use baremend_sim::cluster::{CAPI_PAUSED, ClusterSpec, MACHINE_NAMESPACE};
use serde_json::json;

use super::invalid;
use super::sample::{Target, Trigger};
use super::world::World;
use crate::Result;

/// The sets of workers a run remediates or powers off: ours, the bare floor's, the safe
/// floor's.
const SAMPLE_SETS: usize = 3;

/// The shape of one benchmark run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// Machines in all.
    pub machines: usize,
    /// Cluster API workload clusters (0: one OpenShift cluster holding Machines and Nodes).
    pub workload_clusters: usize,
    /// Controller processes, each with its own Machines (1 without workload clusters).
    pub shards: usize,
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

impl Layout {
    /// One cluster of `machines`, one controller: the single-cluster benchmark.
    pub(super) fn single(machines: usize) -> Self {
        Layout {
            machines,
            workload_clusters: 0,
            shards: 1,
        }
    }

    /// Whether this is a Cluster API fleet.
    pub(super) fn is_fleet(&self) -> bool {
        self.workload_clusters > 0
    }

    /// Checks the shape: whole clusters of 3 control-plane hosts and at least one worker,
    /// and no more shards than clusters.
    pub(super) fn validate(&self) -> Result<()> {
        if !self.is_fleet() {
            return if self.machines >= 4 {
                Ok(())
            } else {
                Err(invalid("--machines", "at least 4 (3 control-plane)"))
            };
        }
        let clusters = self.workload_clusters;
        if !self.machines.is_multiple_of(clusters) || self.machines / clusters < 4 {
            return Err(invalid(
                "--machines",
                format!(
                    "{} machines do not make {clusters} workload clusters of at least 4 (3 control-plane) each: give a multiple of {clusters} of at least {}",
                    self.machines,
                    4 * clusters
                ),
            ));
        }
        if self.shards > clusters {
            return Err(invalid(
                "--shards",
                format!(
                    "{} shards for {clusters} workload clusters: a shard owns whole clusters",
                    self.shards
                ),
            ));
        }
        Ok(())
    }

    /// Checks that `samples` remediations and each floor's as many fit on workers of their
    /// own: ours, the bare floor's and the safe floor's are three disjoint sets spread over the
    /// same workers (see [`Layout::targets_from`]), so a spread of fewer than three workers per
    /// sample would put a floor on hosts ours remediated, or measure fewer than asked.
    pub(super) fn validate_samples(&self, samples: usize) -> Result<()> {
        let workers = self.workers();
        if samples.saturating_mul(SAMPLE_SETS) <= workers {
            return Ok(());
        }
        Err(invalid(
            "--samples",
            format!(
                "{samples} remediations for {} with {workers} workers: ours and the two floors' each need hosts of their own, so at most {} (or give more machines)",
                self.label(),
                workers / SAMPLE_SETS
            ),
        ))
    }

    /// Workers in all (every cluster's hosts but its 3 control-plane ones).
    fn workers(&self) -> usize {
        (self.per_cluster() - 3) * self.workload_clusters.max(1)
    }

    /// Hosts of each cluster (of the one cluster without workload clusters).
    fn per_cluster(&self) -> usize {
        self.machines / self.workload_clusters.max(1)
    }

    /// The simulated world.
    pub(super) fn spec(&self) -> ClusterSpec {
        ClusterSpec {
            masters: 3,
            workers: self.per_cluster() - 3,
            // Fenced through their BMCs directly: registered detached, so the BareMetal
            // Operator holds no BMC connection per host (20,000 of them, both ends in the
            // simulator's one process, would pass the open-files limit).
            hosts_detached: true,
            cluster_api: self.is_fleet(),
            workload_clusters: self.workload_clusters,
            timing: bench_timing(),
            // Some 30 s per 1,000 hosts on two busy cores, and never less than 10 minutes.
            ready_timeout: Duration::from_secs(600.max(self.machines as u64 * 30 / 1000)),
            // No application pods: they only load the simulator's kubelets.
            workloads: Workloads {
                pods_per_worker: 0,
                pdb_min_available: None,
            },
            ..ClusterSpec::default()
        }
    }

    /// What it is, for the table's header.
    pub(super) fn label(&self) -> String {
        if self.is_fleet() {
            format!(
                "fleet: {} machines, {} workload clusters, {} shards",
                self.machines, self.workload_clusters, self.shards
            )
        } else {
            format!("one cluster: {} machines, 1 controller", self.machines)
        }
    }

    /// Each controller's own flags: in a fleet, shard `i` owns the workload clusters
    /// `wc-k` with `k % shards == i` (a label selector on Cluster API's cluster-name label,
    /// disjoint by construction, on its Machines and on its hosts) under its own Lease; the drift coordinator runs in the first
    /// only (the Cluster API world has no Machine Config Operator anyway).
    pub(super) fn controller_flags(&self) -> Vec<Vec<String>> {
        if !self.is_fleet() {
            return vec![Vec::new()];
        }
        (0..self.shards)
            .map(|shard| {
                let clusters: Vec<String> = (shard..self.workload_clusters)
                    .step_by(self.shards)
                    .map(|k| format!("wc-{k}"))
                    .collect();
                let selector = format!("{CLUSTER_NAME_LABEL} in ({})", clusters.join(","));
                let mut flags = vec![
                    "--machine-api=cluster-api".to_owned(),
                    format!("--machine-selector={selector}"),
                    // The hosts of its clusters only, by the label CAPM3 gives each host it
                    // consumes: a shard caches its quarter of the fleet's hosts, not all.
                    format!("--host-selector={selector}"),
                    format!("--lease-name=baremend-shard-{shard}"),
                ];
                if shard > 0 {
                    flags.push("--drift=false".to_owned());
                }
                flags
            })
            .collect()
    }

    /// Prepares the requests' side: in a fleet, baremend's empty `MachineRemediationTemplate`
    /// (what the health checks name) and every MachineHealthCheck paused
    /// (`cluster.x-k8s.io/paused`), because the benchmark writes each request itself at a
    /// known time: a running check would withdraw a request for a Machine whose Node still
    /// reads Ready (a hang is seen only after the Node's 40 s grace).
    pub(super) fn prepare_requests(&self, world: &World) -> Result<()> {
        if !self.is_fleet() {
            return Ok(());
        }
        world.empty_template(MACHINE_REMEDIATION_TEMPLATES, MACHINE_NAMESPACE)?;
        let pause = json!({"metadata": {"annotations": {CAPI_PAUSED: ""}}});
        for mhc in world.api().list_shared(CAPI_MHCS, Some(MACHINE_NAMESPACE)) {
            let name = mhc
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .unwrap_or_default();
            world
                .api()
                .merge(CAPI_MHCS, MACHINE_NAMESPACE, name, &pause, false)
                .map_err(|e| invalid(&format!("MachineHealthCheck {name}"), e.message))?;
        }
        Ok(())
    }

    /// `samples` workers spread evenly over the fleet (in cluster order, so over the clusters
    /// and the shards too).
    pub(super) fn targets(&self, world: &World, samples: usize) -> Vec<Target> {
        self.targets_from(world, samples, 0)
    }

    /// The same spread of workers, each `shift` workers further on: hosts no other set of
    /// the same spread touched (the floors' samples, beside ours).
    pub(super) fn targets_from(&self, world: &World, samples: usize, shift: usize) -> Vec<Target> {
        let workers: Vec<_> = world
            .hosts()
            .iter()
            .filter(|h| h.role == "worker")
            .collect();
        let stride = (workers.len() / samples.max(1)).max(1);
        workers
            .into_iter()
            .skip(shift)
            .step_by(stride)
            .take(samples)
            .map(|h| {
                let (nodes, trigger) =
                    match h.cluster.as_deref().and_then(|c| world.workload_nodes(c)) {
                        Some(nodes) => (nodes, Trigger::Request),
                        None => (world.api().clone(), Trigger::Annotation),
                    };
                Target {
                    machine: h.name.clone(),
                    node: h.node_name.clone(),
                    nodes,
                    trigger,
                }
            })
            .collect()
    }
}
