//! The fleet's health the start gates judge on (how many Machines are unhealthy, which
//! control-plane members are Ready), counted from the caches.
//!
//! Expected flow: [`HealthCount::take`] snapshots what the count reads (the accepted
//! requests, the `HostBmc` claims; a workload cluster connected first), then
//! [`HealthCount::tally`] counts it from the indexes kept beside the Machine and Node caches
//! (`world::machine_index`, `runtime::ready_index`). A start about to be created counts with
//! [`HealthAhead`]: off the pass's task while the pass creates the Remediation.
//!
//! Guarantees: the tally reads nothing but the snapshot and the caches' indexes, so the count
//! is the same on the pass's task and off it, and it is the count a walk over every cached
//! Machine and its Node would make (swept against that walk in the tests). A Cluster API
//! Machine's failure domain is its Cluster: only that Cluster's Machines are counted, their
//! Nodes read in the cluster they are in (a workload cluster that cannot be reached counts its
//! Nodes as unknown, and its own start is held by `WorkloadCluster`). Only requests baremend
//! accepts count.
//!
//! Caveats: the count touches the Machines with a trigger or a control-plane role, those on a
//! Node that is not Ready and those a request names, not every Machine: in a storm that is
//! many, and the storm gate holds the starts then. The Nodes without a Machine that a
//! `HostBmc` claims are still read from the Node cache one by one (there are few).

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::api::HostBmc;
use crate::remediation::decide::gates::FleetHealth;
use crate::remediation::decide::observe::{MachineFacts, node_is_ready};
use crate::remediation::decide::trust::machineless_claims;
use crate::remediation::decide::workload::ClusterRef;
use crate::remediation::pass::context::Context;
use crate::remediation::pass::subject::{node_is_control_plane, node_key};
use crate::remediation::requests::admission::Verdict;
use crate::remediation::world::machine_index::{MachineIndex, MachineView};
use crate::remediation::world::workload::Connection;
use crate::runtime::ready_index::{ReadyIndex, not_ready, ready};

/// What the fleet's health is counted from, taken from the caches at one moment.
pub(in crate::remediation) struct HealthCount {
    /// The candidate's Cluster API Cluster; None: every Machine in scope.
    domain: Option<ClusterRef>,
    /// The workload cluster the Machines' Nodes are in; None: the management cluster's.
    workload: Option<Arc<Connection>>,
    /// Every Machine's facts (the tally counts the domain's).
    machines: MachineIndex,
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
        // The Machines' index, read in the tally (the domain's Machines picked there).
        let machines = context.caches.machine_facts.clone();
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
    /// every Node without a Machine that a trusted `HostBmc` claims. Only the Machines that
    /// can be unhealthy or count for the control plane are looked at: those with a trigger or
    /// a control-plane role, those on a Node that is not Ready, and those a request names.
    pub(in crate::remediation) fn tally(self) -> FleetHealth {
        let domain = self
            .domain
            .as_ref()
            .map(|d| (d.namespace.as_str(), d.name.as_str()));
        // The indexes kept beside the caches: one lock each for the count.
        let index = match &self.workload {
            Some(workload) => workload.node_ready(),
            None => &self.node_ready,
        };
        let node_ready = index.view();
        let machines = self.machines.view();
        let mut health = FleetHealth {
            machines: machines.count(domain),
            members: domain.map(|d| machines.members(d)),
            ..FleetHealth::default()
        };
        let in_domain = |namespace: &str, facts: &MachineFacts| {
            MachineView::in_domain(namespace, facts, domain)
        };
        let mut unhealthy: HashSet<(&str, &str)> = HashSet::new();
        for (namespace, name, facts) in machines.notable() {
            if !in_domain(namespace, facts) {
                continue;
            }
            // Some(Ready or not); None: it has no Node, or its Node is not cached.
            let ready = facts.node.as_deref().and_then(|n| ready(&node_ready, n));
            if facts.annotated {
                unhealthy.insert((namespace, name));
            }
            if facts.control_plane {
                health.control_plane.insert(name.to_owned());
                health.control_plane_nodes.extend(facts.node.clone());
                if ready == Some(true) {
                    health.control_plane_ready += 1;
                }
            }
        }
        // A Node that is not Ready, or one a NodeHealthCheck request names, makes its
        // Machines unhealthy.
        let nodes = not_ready(&node_ready).chain(self.node_requested.iter().map(String::as_str));
        for node in nodes {
            for (namespace, name, facts) in machines.on_node(node) {
                if in_domain(namespace, facts) {
                    unhealthy.insert((namespace, name));
                }
            }
        }
        for (namespace, name) in &self.requested {
            if machines
                .get(namespace, name)
                .is_some_and(|facts| in_domain(namespace, facts))
            {
                unhealthy.insert((namespace, name));
            }
        }
        health.unhealthy = unhealthy.len();
        drop(unhealthy);
        // What only Nodes without a Machine need is gathered only when there are such claims:
        // thousands of copies of names are milliseconds.
        let machine_nodes: HashSet<String> = if self.domain.is_none() && !self.mappings.is_empty() {
            machines.nodes().map(str::to_owned).collect()
        } else {
            HashSet::new()
        };
        drop(machines);
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
                health.control_plane_nodes.push(node.clone());
                if ready == Some(true) {
                    health.control_plane_ready += 1;
                }
            }
        }
    }
}

/// The fleet's health counted off the pass's task: the snapshot taken on a task of its own,
/// the count on a blocking thread (CPU work that would otherwise hold the task the pass's
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
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use crate::api::annotations::{CAPI_CONTROL_PLANE, EXTERNAL_REMEDIATION};
    use crate::api::slim;
    use crate::remediation::decide::observe::machine_is_control_plane;
    use crate::remediation::decide::workload::{cluster_nodes, cluster_of};
    use crate::runtime::ready_index::ready_index;

    /// A Machine `namespace`/`name` on `node`, in Cluster `cluster`, with the trigger or a
    /// control-plane role.
    fn machine(
        (namespace, name): (&str, &str),
        node: Option<&str>,
        cluster: Option<&str>,
        (annotated, control_plane): (bool, bool),
    ) -> slim::Machine {
        let mut metadata = json!({"name": name, "namespace": namespace});
        if annotated {
            metadata["annotations"] = json!({EXTERNAL_REMEDIATION: ""});
        }
        if control_plane {
            metadata["labels"] = json!({CAPI_CONTROL_PLANE: ""});
        }
        let mut object = json!({"metadata": metadata});
        if let Some(cluster) = cluster {
            object["spec"] = json!({"clusterName": cluster});
        }
        if let Some(node) = node {
            object["status"] = json!({"nodeRef": {"name": node}});
        }
        serde_json::from_value(object).expect("a Machine")
    }

    fn node(name: &str, ready: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        }))
        .expect("a Node")
    }

    /// The count as a walk over every cached Machine would make it (the count before the
    /// index, kept here as the reference).
    fn walked(
        machines: &[Arc<slim::Machine>],
        nodes: &Store<Node>,
        (requested, node_requested): (&HashSet<(String, String)>, &HashSet<String>),
        domain: Option<&ClusterRef>,
    ) -> FleetHealth {
        let in_domain: Vec<&Arc<slim::Machine>> = machines
            .iter()
            .filter(|m| {
                domain.is_none_or(|d| {
                    cluster_of(m) == Some(d.name.as_str())
                        && m.namespace().unwrap_or_default() == d.namespace
                })
            })
            .collect();
        let mut health = FleetHealth {
            machines: in_domain.len(),
            members: domain.map(|_| in_domain.iter().map(|m| m.name_any()).collect()),
            ..FleetHealth::default()
        };
        for machine in in_domain {
            let node = machine.status.as_ref().and_then(|s| s.node_ref.as_ref());
            let ready = node.and_then(|n| {
                nodes
                    .get(&ObjectRef::new(&n.name))
                    .as_deref()
                    .map(node_is_ready)
            });
            if machine.annotations().contains_key(EXTERNAL_REMEDIATION)
                || requested
                    .contains(&(machine.namespace().unwrap_or_default(), machine.name_any()))
                || node.is_some_and(|n| node_requested.contains(&n.name))
                || ready == Some(false)
            {
                health.unhealthy += 1;
            }
            if machine_is_control_plane(machine.labels()) {
                health.control_plane.insert(machine.name_any());
                health
                    .control_plane_nodes
                    .extend(node.map(|n| n.name.clone()));
                if ready == Some(true) {
                    health.control_plane_ready += 1;
                }
            }
        }
        health
    }

    /// Every change of three Machines (one name in two namespaces, and another) the count
    /// tells apart: Node, Cluster, trigger, role, deletion, and a re-list.
    fn machine_events() -> Vec<Event<slim::Machine>> {
        let mut all = vec![Event::Init, Event::InitDone];
        for key in [("a", "m"), ("b", "m"), ("a", "k")] {
            for (node, cluster, flags) in [
                (Some("n1"), Some("c"), (true, false)),
                (Some("n2"), Some("c"), (false, true)),
                (Some("n1"), None, (false, false)),
                (None, Some("c"), (false, false)),
            ] {
                all.push(Event::Apply(machine(key, node, cluster, flags)));
                all.push(Event::InitApply(machine(key, node, cluster, flags)));
            }
            all.push(Event::Delete(machine(key, None, None, (false, false))));
        }
        all
    }

    /// Where each cached Machine's Cluster's Nodes live, judged from the index as a pass
    /// judges it (`MachineView::cluster_nodes`), is what the walk over every Machine judges.
    fn same_placement(
        store: &Store<slim::Machine>,
        index: &MachineIndex,
        nodes: &Store<Node>,
        context: &str,
    ) {
        let provider_id_of = |name: &str| {
            let node = nodes.get(&ObjectRef::new(name))?;
            Some(node.spec.as_ref().and_then(|s| s.provider_id.clone()))
        };
        let view = index.view();
        let all = store.state();
        for machine in &all {
            let indexed = view.cluster_nodes(machine, provider_id_of);
            let walked = cluster_nodes(machine, &all, provider_id_of);
            assert_eq!(
                std::mem::discriminant(&indexed),
                std::mem::discriminant(&walked),
                "{context}: {indexed:?} / {walked:?}"
            );
        }
    }

    #[test]
    fn the_indexed_count_is_the_walk_over_every_machine_after_every_sequence_of_changes() {
        let events = machine_events();
        let n = events.len();
        let requests: [HashSet<(String, String)>; 2] =
            [HashSet::new(), [("a".into(), "k".into())].into()];
        let node_requests: [HashSet<String>; 2] = [HashSet::new(), ["n2".into()].into()];
        let domains = [
            None,
            Some(ClusterRef {
                namespace: "a".into(),
                name: "c".into(),
            }),
        ];
        let mut counted = 0;
        for code in 0..n.pow(3) {
            let (store, mut writer) = reflector::store::<slim::Machine>();
            let index = MachineIndex::default();
            let mut rest = code;
            for _ in 0..3 {
                let event = &events[rest % n];
                rest /= n;
                index.observe(event);
                writer.apply_watcher_event(event);
            }
            // The Nodes: n1 Ready, not Ready or not cached; n2 Ready or not.
            for (n1, n2) in [(Some(true), true), (Some(false), true), (None, false)] {
                let (nodes, mut node_writer) = reflector::store::<Node>();
                let node_ready = ready_index();
                let mut apply = |event: Event<Node>| {
                    node_ready.observe(&event);
                    node_writer.apply_watcher_event(&event);
                };
                if let Some(ready) = n1 {
                    apply(Event::Apply(node("n1", ready)));
                }
                apply(Event::Apply(node("n2", n2)));
                same_placement(
                    &store,
                    &index,
                    &nodes,
                    &format!("sequence {code}, {n1:?}/{n2}"),
                );
                for requested in &requests {
                    for node_requested in &node_requests {
                        for domain in &domains {
                            let count = HealthCount {
                                domain: domain.clone(),
                                workload: None,
                                machines: index.clone(),
                                nodes: nodes.clone(),
                                node_ready: node_ready.clone(),
                                requested: requested.clone(),
                                node_requested: node_requested.clone(),
                                mappings: Vec::new(),
                                trusted: Vec::new(),
                            };
                            let want = walked(
                                &store.state(),
                                &nodes,
                                (requested, node_requested),
                                domain.as_ref(),
                            );
                            let got = count.tally();
                            let context = format!("sequence {code}, {n1:?}/{n2}, {domain:?}");
                            assert_eq!(got.machines, want.machines, "{context}");
                            assert_eq!(got.unhealthy, want.unhealthy, "{context}");
                            assert_eq!(got.control_plane, want.control_plane, "{context}");
                            assert_eq!(
                                got.control_plane_ready, want.control_plane_ready,
                                "{context}"
                            );
                            assert_eq!(got.members, want.members, "{context}");
                            let sorted = |mut nodes: Vec<String>| {
                                nodes.sort();
                                nodes
                            };
                            assert_eq!(
                                sorted(got.control_plane_nodes),
                                sorted(want.control_plane_nodes),
                                "{context}"
                            );
                            counted += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(counted, n.pow(3) * 3 * 8);
    }

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
