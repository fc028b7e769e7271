//! The Machines' facts a count of the fleet's health asks, kept from the Machine watch's own
//! events and indexed so that the count touches only the Machines that can change it: a walk
//! over every Machine is cheap in instructions but not in memory (its cache lines cold after
//! seconds idle, about half a microsecond a Machine in the scale benchmark), and it ran on the
//! two cores the start's own round trips needed.
//!
//! Expected flow: the watch hands every event to [`MachineIndex::observe`] just before its
//! reflector applies it to the store; the count takes [`MachineIndex::view`] once and asks it
//! how many Machines a domain has ([`MachineView::count`]), which are notable (a trigger, a
//! control-plane role: [`MachineView::notable`]) and which are on a given Node
//! ([`MachineView::on_node`]).
//!
//! Guarantees: the index applies the events as kube's reflector store does
//! (`runtime::fact_index::Relisted`), so its answers are those of a walk
//! over the store's Machines; the count built on it is swept against that walk in
//! `evidence::health`'s tests.
//!
//! Caveats: updated just before the store, so a reader may see it one event ahead of the
//! store, never behind. A domain is a Cluster API Cluster: a namespace and a Cluster name.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use kube::runtime::watcher::Event;

use crate::api::slim;
use crate::remediation::decide::observe::{MachineFacts, machine_facts};
use crate::remediation::decide::workload::{
    ClusterNodes, NamedNode, machine_cluster, named_node, nodes_named,
};
use crate::runtime::fact_index::{Key, Listed, Relisted, object_key};

/// The Machines' facts, indexed for the count (cheap to clone: one index shared by the
/// Machine watch and the counts).
#[derive(Clone)]
pub struct MachineIndex(Arc<RwLock<Relisted<Machines>>>);

impl Default for MachineIndex {
    fn default() -> Self {
        MachineIndex(Arc::new(RwLock::new(Relisted::new(Machines::default()))))
    }
}

/// The facts of one list and its changes, and the indexes over them.
#[derive(Default)]
struct Machines {
    facts: HashMap<Key, MachineFacts>,
    /// The Machines naming each Node.
    by_node: HashMap<String, HashSet<Key>>,
    /// The Machines with a trigger or a control-plane role.
    notable: HashSet<Key>,
    /// The Machines' names in each domain (namespace, Cluster name).
    domains: HashMap<Key, HashSet<String>>,
}

impl Machines {
    fn insert(&mut self, key: Key, facts: MachineFacts) {
        self.remove(&key);
        if let Some(node) = &facts.node {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        if facts.annotated || facts.control_plane {
            self.notable.insert(key.clone());
        }
        if let Some(cluster) = &facts.cluster {
            self.domains
                .entry((key.0.clone(), cluster.clone()))
                .or_default()
                .insert(key.1.clone());
        }
        self.facts.insert(key, facts);
    }

    fn remove(&mut self, key: &Key) {
        let Some(old) = self.facts.remove(key) else {
            return;
        };
        if let Some(node) = &old.node
            && let Some(keys) = self.by_node.get_mut(node)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_node.remove(node);
            }
        }
        self.notable.remove(key);
        if let Some(cluster) = old.cluster {
            let domain = (key.0.clone(), cluster);
            if let Some(names) = self.domains.get_mut(&domain) {
                names.remove(&key.1);
                if names.is_empty() {
                    self.domains.remove(&domain);
                }
            }
        }
    }
}

impl Listed<slim::Machine> for Machines {
    fn emptied(&self) -> Self {
        Machines::default()
    }

    fn apply(&mut self, machine: &slim::Machine) {
        self.insert(object_key(machine), machine_facts(machine));
    }

    fn delete(&mut self, machine: &slim::Machine) {
        self.remove(&object_key(machine));
    }
}

impl MachineIndex {
    /// Applies one of the Machine watch's events, as the reflector applies it to the store.
    pub fn observe(&self, event: &Event<slim::Machine>) {
        let mut indexed = self.0.write().unwrap_or_else(|e| e.into_inner());
        indexed.observe(event);
    }

    /// The index as it is now, held for one count (writers wait meanwhile: not across an
    /// await).
    pub fn view(&self) -> MachineView<'_> {
        MachineView(self.0.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A domain: a Cluster API Cluster's namespace and name; None: every Machine.
pub type Domain<'d> = Option<(&'d str, &'d str)>;

/// The index held for one count.
pub struct MachineView<'a>(RwLockReadGuard<'a, Relisted<Machines>>);

impl MachineView<'_> {
    /// Whether the Machine `namespace`/`facts` is in `domain`.
    pub fn in_domain(namespace: &str, facts: &MachineFacts, domain: Domain<'_>) -> bool {
        domain.is_none_or(|(domain_namespace, cluster)| {
            namespace == domain_namespace && facts.cluster.as_deref() == Some(cluster)
        })
    }

    /// How many Machines `domain` has.
    pub fn count(&self, domain: Domain<'_>) -> usize {
        let machines = &self.0.live;
        match domain {
            None => machines.facts.len(),
            Some((namespace, cluster)) => machines
                .domains
                .get(&(namespace.to_owned(), cluster.to_owned()))
                .map_or(0, HashSet::len),
        }
    }

    /// The names of `domain`'s Machines (a Cluster's, in its namespace).
    pub fn members(&self, (namespace, cluster): (&str, &str)) -> HashSet<String> {
        self.0
            .live
            .domains
            .get(&(namespace.to_owned(), cluster.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// Where the Nodes of `machine`'s Cluster live: what `decide::workload::cluster_nodes`
    /// judges over every cached Machine, judged over the Nodes this index keeps for the
    /// Cluster's Machines (`provider_id_of`: whether this cluster has a Node of that name, and
    /// its providerID).
    pub fn cluster_nodes(
        &self,
        machine: &slim::Machine,
        provider_id_of: impl Fn(&str) -> Option<Option<String>>,
    ) -> ClusterNodes {
        let members = match machine_cluster(machine) {
            Some(cluster) => self.named_nodes((&cluster.namespace, &cluster.name)),
            None => Vec::new(),
        };
        nodes_named(
            named_node(machine).into_iter().chain(members),
            provider_id_of,
        )
    }

    /// The Node each Machine of a Cluster (`namespace`, `cluster`) names, with the Machine's
    /// providerID.
    fn named_nodes(&self, (namespace, cluster): (&str, &str)) -> Vec<NamedNode<'_>> {
        let machines = &self.0.live;
        let Some(names) = machines
            .domains
            .get(&(namespace.to_owned(), cluster.to_owned()))
        else {
            return Vec::new();
        };
        names
            .iter()
            .filter_map(|name| machines.facts.get(&(namespace.to_owned(), name.clone())))
            .filter_map(|facts| Some((facts.node.as_deref()?, facts.provider_id.as_deref())))
            .collect()
    }

    /// The Machine `namespace`/`name`'s facts, if it is cached.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&MachineFacts> {
        self.0
            .live
            .facts
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// The Machines with a trigger or a control-plane role, with their namespace and name.
    pub fn notable(&self) -> impl Iterator<Item = (&str, &str, &MachineFacts)> {
        let machines = &self.0.live;
        machines.notable.iter().filter_map(|key| {
            let facts = machines.facts.get(key)?;
            Some((key.0.as_str(), key.1.as_str(), facts))
        })
    }

    /// The Machines whose Node is `node`.
    pub fn on_node(&self, node: &str) -> impl Iterator<Item = (&str, &str, &MachineFacts)> {
        let machines = &self.0.live;
        machines
            .by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|key| {
                let facts = machines.facts.get(key)?;
                Some((key.0.as_str(), key.1.as_str(), facts))
            })
    }

    /// Every Node a Machine names.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.0.live.by_node.keys().map(String::as_str)
    }
}
