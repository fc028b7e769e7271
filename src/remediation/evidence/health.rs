//! The fleet's health the start gates judge on (how many Machines are unhealthy, which
//! control-plane members are Ready), counted from the caches.
//!
//! Expected flow: [`HealthCount::take`] snapshots what the count reads (the Machines, the
//! accepted requests, the `HostBmc` claims; a workload cluster connected first), then
//! [`HealthCount::tally`] walks it. A start about to be created counts with
//! [`HealthAhead`]: the walk on a blocking thread while the pass's task creates the
//! Remediation.
//!
//! Guarantees: the tally reads nothing but the snapshot and the Node caches, so the count is
//! the same on the pass's task and off it. A Cluster API Machine's failure domain is its
//! Cluster: only that Cluster's Machines are counted, their Nodes read in the cluster they
//! are in (a workload cluster that cannot be reached counts its Nodes as unknown, and its own
//! start is held by `WorkloadCluster`). Only requests baremend accepts count.
//!
//! Caveats: the walk touches every Machine and its Node's readiness (from the index kept
//! beside the Node cache, `runtime::ready_index`, not a cache lookup per Machine); on a cold
//! CPU cache that is about half a microsecond a Machine (0.5 ms at 1,000 Machines, from 0.8–1.2
//! with the lookups, measured in the scale benchmark), which is why a start counts ahead.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::{HostBmc, slim};
use crate::remediation::decide::gates::FleetHealth;
use crate::remediation::decide::observe::{machine_is_control_plane, node_is_ready};
use crate::remediation::decide::trust::machineless_claims;
use crate::remediation::decide::workload::{ClusterRef, cluster_of};
use crate::remediation::pass::context::Context;
use crate::remediation::pass::subject::{node_is_control_plane, node_key};
use crate::remediation::requests::admission::Verdict;
use crate::remediation::world::workload::Connection;
use crate::runtime::ready_index::ReadyIndex;

/// What the fleet's health is counted from, taken from the caches at one moment.
pub(in crate::remediation) struct HealthCount {
    /// The candidate's Cluster API Cluster; None: every Machine in scope.
    domain: Option<ClusterRef>,
    /// The workload cluster the Machines' Nodes are in; None: the management cluster's.
    workload: Option<Arc<Connection>>,
    /// Every Machine (the tally counts the domain's).
    machines: Vec<Arc<slim::Machine>>,
    /// The management cluster's Nodes (for those without a Machine).
    nodes: Store<Node>,
    /// Each of their readiness (for those of the Machines).
    node_ready: ReadyIndex,
    /// The Machines (namespace, name) an accepted Cluster API request names.
    requested: HashSet<(String, String)>,
    /// The Nodes an accepted NodeHealthCheck request names (not timed out).
    node_requested: HashSet<String>,
    /// The `HostBmc` mappings (the claims of Nodes without a Machine).
    mappings: Vec<Arc<HostBmc>>,
    /// The namespaces whose `HostBmc`s are trusted.
    trusted: Vec<String>,
}

impl HealthCount {
    /// The snapshot, its workload cluster (`cluster`) connected first; `trusted`: the
    /// namespaces whose `HostBmc`s the pass's policy trusts.
    pub(in crate::remediation) async fn take(
        context: Arc<Context>,
        trusted: Vec<String>,
        domain: Option<ClusterRef>,
        cluster: Option<ClusterRef>,
    ) -> Self {
        let workload = match cluster {
            Some(cluster) => context.clients.workloads.connect(&cluster).await.ok(),
            None => None,
        };
        // Every Machine: the domain's are picked in the tally, off the pass's task (a compare
        // per Machine of the fleet).
        let machines = context.caches.machines.state();
        // A Cluster API request counts as the annotation does: a health check found the
        // Machine unhealthy. Only requests baremend accepts count: a refused one (a
        // tenant's, a widening one) must not make a storm that holds real remediation.
        let verdicts = context.policy();
        let requested = context
            .caches
            .machine_requests
            .state()
            .iter()
            .filter(|r| {
                matches!(
                    context.machine_request_verdict(r, &verdicts),
                    Verdict::Accepted(_)
                )
            })
            .map(|r| (r.namespace().unwrap_or_default(), r.name_any()))
            .collect();
        let node_requested = context
            .caches
            .node_requests
            .state()
            .iter()
            .filter(|r| {
                !crate::remediation::requests::node_request(r).timed_out
                    && matches!(
                        context.node_request_verdict(r, &verdicts),
                        Verdict::Accepted(_)
                    )
            })
            .map(|r| crate::remediation::requests::node_of_request(r))
            .collect();
        HealthCount {
            domain,
            workload,
            machines,
            nodes: context.caches.nodes.clone(),
            node_ready: context.caches.node_ready.clone(),
            requested,
            node_requested,
            mappings: context.caches.host_bmcs.state(),
            trusted,
        }
    }

    /// The count: every Machine in scope and its Node, then (outside a Cluster API domain)
    /// every Node without a Machine that a trusted `HostBmc` claims.
    pub(in crate::remediation) fn tally(self) -> FleetHealth {
        // Compared in place: a ClusterRef made per Machine is two copies of names for every
        // Machine of the fleet.
        let machines: Vec<&Arc<slim::Machine>> = self
            .machines
            .iter()
            .filter(|m| {
                self.domain.as_ref().is_none_or(|d| {
                    cluster_of(m) == Some(d.name.as_str())
                        && m.metadata.namespace.as_deref().unwrap_or_default() == d.namespace
                })
            })
            .collect();
        let mut health = FleetHealth {
            machines: machines.len(),
            members: self
                .domain
                .is_some()
                .then(|| machines.iter().map(|m| m.name_any()).collect()),
            ..FleetHealth::default()
        };
        // What only Nodes without a Machine need is gathered only when there are such claims:
        // thousands of copies of names are milliseconds.
        let mut machine_nodes = HashSet::new();
        // The Nodes' readiness from the index kept beside their cache: one lock for the walk,
        // not a cache lookup per Machine.
        let index = match &self.workload {
            Some(workload) => workload.node_ready(),
            None => &self.node_ready,
        };
        let node_ready = index.view();
        for machine in machines {
            let node = machine.status.as_ref().and_then(|s| s.node_ref.as_ref());
            // Some(Ready or not); None: it has no Node, or its Node is not cached.
            let ready = node.and_then(|node| node_ready.ready(&node.name));
            if let Some(node) = node
                && !self.mappings.is_empty()
            {
                machine_nodes.insert(node.name.clone());
            }
            if machine.annotations().contains_key(EXTERNAL_REMEDIATION)
                || (!self.requested.is_empty()
                    && self
                        .requested
                        .contains(&(machine.namespace().unwrap_or_default(), machine.name_any())))
                || node.is_some_and(|n| self.node_requested.contains(&n.name))
                || ready == Some(false)
            {
                health.unhealthy += 1;
            }
            // Each Machine's role is read once, from its labels, not per comparison.
            if machine_is_control_plane(machine.labels()) {
                health.control_plane.insert(machine.name_any());
                if ready == Some(true) {
                    health.control_plane_ready += 1;
                }
            }
        }
        drop(node_ready);
        if self.domain.is_none() {
            // Nodes without a Machine are the cluster baremend runs in: not a Cluster's.
            self.tally_machineless(&machine_nodes, &mut health);
        }
        health
    }

    /// The Nodes without a Machine a trusted `HostBmc` claims, counted into `health`.
    fn tally_machineless(&self, machine_nodes: &HashSet<String>, health: &mut FleetHealth) {
        let subjects = machineless_claims(&self.mappings, &self.trusted, machine_nodes).subjects;
        for node in subjects.into_keys() {
            let cached = self.nodes.get(&ObjectRef::new(&node));
            let ready = cached.as_deref().map(node_is_ready);
            health.machines += 1;
            if self.node_requested.contains(&node) || ready == Some(false) {
                health.unhealthy += 1;
            }
            if cached.is_some_and(|n| node_is_control_plane(n.labels())) {
                health.control_plane.insert(node_key(&node));
                if ready == Some(true) {
                    health.control_plane_ready += 1;
                }
            }
        }
    }
}

/// The fleet's health counted off the pass's task: the snapshot taken on a task of its own,
/// the walk on a blocking thread (CPU work that would otherwise hold the task the pass's
/// requests are sent from). Dropped unfinished, the count ends on its own, unread.
pub(in crate::remediation) struct HealthAhead(
    tokio::task::JoinHandle<Result<FleetHealth, tokio::task::JoinError>>,
);

impl HealthAhead {
    /// Begins counting from what `count` takes.
    pub(in crate::remediation) fn begin(
        count: impl Future<Output = HealthCount> + Send + 'static,
    ) -> Self {
        HealthAhead(tokio::spawn(async move {
            let count = count.await;
            tokio::task::spawn_blocking(move || count.tally()).await
        }))
    }

    /// The count, once done. A count that failed (it panicked) is counted again by `again`,
    /// on the caller's task.
    pub(in crate::remediation) async fn finish(
        self,
        again: impl Future<Output = FleetHealth>,
    ) -> FleetHealth {
        match self.0.await {
            Ok(Ok(health)) => health,
            Ok(Err(failed)) | Err(failed) => {
                tracing::warn!(error = %failed, "the fleet's health counted ahead failed: counted again");
                again.await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_count_ahead_that_failed_is_counted_again_on_the_callers_task() {
        let again = |machines| async move {
            FleetHealth {
                machines,
                ..FleetHealth::default()
            }
        };
        let failed = HealthAhead::begin(async { panic!("the snapshot failed") });
        assert_eq!(failed.finish(again(3)).await.machines, 3);
    }
}
