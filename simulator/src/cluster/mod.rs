//! A simulated OpenShift bare-metal cluster in one process: the API server, the hosts with
//! their BMCs (Redfish, optionally IPMI), and the actors around the controller under test —
//! kubelets, the node lifecycle controller, the MachineHealthCheck controller and the
//! BareMetal Operator. Machines, BareMetalHosts and Nodes are linked as in OpenShift
//! (`status.nodeRef`, `spec.providerID`, the `metal3.io/BareMetalHost` annotation); in the
//! platform-none flavour ([`ClusterSpec::platform_none`]) there are only Nodes, and each
//! host's BMC is a baremend `HostBmc` naming its Node. In the Cluster API flavour with
//! workload clusters ([`ClusterSpec::workload_clusters`]) it is a management cluster and N
//! workload API servers in the same process (see [`workload`]).

pub mod accounts;
mod bmo;
pub mod control;
pub mod cvo;
pub mod fixtures;
pub mod gvr;
mod kubelet;
pub mod legacy;
mod lifecycle;
pub mod local;
pub mod mco;
mod mhc;
pub mod nhc;
pub mod nhc_rules;
pub mod on_server;
pub mod remote;
pub mod scenario;
pub mod timing;
pub mod workload;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub use self::bmo::{BmoOptions, DETACHED, PAUSED, REBOOT, REBOOT_PREFIX};
pub use self::kubelet::{MachineLink, NodeFaults};
use self::local::{
    BMHS, CAPI_CLUSTERS, CAPI_MACHINES, CAPI_MHCS, CRDS, HOST_BMCS, Local, MACHINES,
    METAL3_MACHINES, MHCS, NAMESPACES, NODES, SECRETS,
};
pub use self::mhc::{CAPI_PAUSED, EXTERNAL_REMEDIATION, STRATEGY_ANNOTATION};
pub use self::scenario::ClusterSpec;
pub use self::workload::WorkloadCluster;
use crate::apiserver::{ApiServer, ApiServerConfig};
use crate::clock::{Clock, SystemClock};
use crate::host::{Power, SimHost};
use crate::ipmi::{IpmiSim, IpmiSimConfig, IpmiUser, privilege};
use crate::redfish::{RedfishSim, RedfishSimConfig};
use crate::{Error, Result};

/// The namespace of Machines, BareMetalHosts and BMC Secrets (and, in the platform-none
/// flavour, of the HostBmcs: OpenShift has it on every platform, and baremend's shipped RBAC
/// reads BMC Secrets there).
pub const MACHINE_NAMESPACE: &str = "openshift-machine-api";

/// Where the NodeHealthCheck's templates, and so its requests, live.
pub const NHC_NAMESPACE: &str = "workload-availability";

/// The Cluster API flavour's cluster name (its Machines live in [`MACHINE_NAMESPACE`] too).
pub const CAPI_CLUSTER_NAME: &str = "sim";
/// The BMC account of every simulated host.
pub const BMC_USERNAME: &str = "admin";

/// One simulated host and its links.
#[derive(Debug, Clone)]
pub struct HostInfo {
    /// Host, Machine, Metal3Machine, BareMetalHost and BMC Secret name (in the management
    /// cluster); the Node name too, outside workload clusters.
    pub name: String,
    /// Its Node's name, in its cluster: [`HostInfo::name`], except for a workload cluster's
    /// host (`master-<i>`, `worker-<i>`, the same names in every workload cluster).
    pub node_name: String,
    /// The workload cluster its Node lives in (None: the one cluster, or the self-hosted one).
    pub cluster: Option<String>,
    /// `master` or `worker`.
    pub role: String,
    /// The host.
    pub host: Arc<SimHost>,
    /// OS faults.
    pub faults: Arc<NodeFaults>,
    /// Its Redfish address.
    pub redfish_address: String,
    /// Its IPMI address, when IPMI is served.
    pub ipmi_address: Option<String>,
}

impl HostInfo {
    /// The BMC address its BareMetalHost or HostBmc names: IPMI when asked for and served,
    /// else Redfish.
    pub fn bmc_address(&self, use_ipmi: bool) -> String {
        match (&self.ipmi_address, use_ipmi) {
            (Some(ipmi), true) => ipmi.clone(),
            _ => self.redfish_address.clone(),
        }
    }

    /// The name of its BMC credentials Secret (`username`, `password`), in
    /// [`MACHINE_NAMESPACE`].
    pub fn bmc_secret(&self) -> String {
        format!("{}-bmc-secret", self.name)
    }
}

/// A running simulated cluster. Dropping it stops everything.
pub struct SimCluster {
    server: ApiServer,
    workloads: Vec<WorkloadCluster>,
    redfish: RedfishSim,
    ipmi: Vec<IpmiSim>,
    hosts: Vec<HostInfo>,
    actors: Vec<JoinHandle<()>>,
    bmc_password: String,
    spec: ClusterSpec,
    mco: Option<mco::SimMco>,
    accounts: accounts::Accounts,
    legacy: legacy::Actions,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("url", &self.server.url())
            .field("hosts", &self.hosts.len())
            .field("workload_clusters", &self.workloads.len())
            .finish_non_exhaustive()
    }
}

fn secret_data(value: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(value)
}

impl SimCluster {
    /// Builds and starts a cluster; returns once every Node is registered and Ready (or
    /// after `spec.ready_timeout`).
    pub async fn start(spec: ClusterSpec) -> Result<Self> {
        spec.validate().map_err(Error::Config)?;
        let started = Instant::now();
        let server = ApiServer::start(ApiServerConfig {
            tls: spec.tls,
            kubernetes_version: spec.kubernetes_version,
            ..ApiServerConfig::default()
        })
        .await?;
        let api = Local::new(server.store().clone(), INSTALLER);
        install_kinds(&api, &spec)?;
        let refusals = Arc::new(local::Refusals::default());
        let workloads = Self::start_workload_clusters(&api, &spec, &refusals).await?;
        let fleet = Fleet::start(&spec).await?;
        populate(&api, &fleet.hosts, &spec, spec.health_checks)?;
        for cluster in &workloads {
            let installer = Local::new(cluster.api_server().store().clone(), INSTALLER);
            let own: Vec<HostInfo> = fleet
                .hosts
                .iter()
                .filter(|h| h.cluster.as_deref() == Some(cluster.name()))
                .cloned()
                .collect();
            Self::place_workloads(&installer, &own, &spec.workloads).map_err(set_up)?;
        }
        let mco = if spec.mco {
            // An OpenShift cluster: its ClusterVersion too.
            api.create(CRDS, "", fixtures::cluster_version_crd())
                .map_err(set_up)?;
            cvo::install(&api).map_err(set_up)?;
            let hosts = &fleet.hosts;
            Some(mco::SimMco::install(&api, hosts, &spec.mco_max_unavailable).map_err(set_up)?)
        } else {
            None
        };
        // Every actor runs as its upstream account, with its upstream rights.
        accounts::install(&api, &spec.actors()).map_err(set_up)?;
        let accounts = accounts::Accounts::new(
            server.store().clone(),
            server.authorizer().clone(),
            refusals,
        );
        let disks = |name: &str| mco.as_ref().and_then(|m| m.disks.get(name).cloned());
        let mut actors = start_kubelets(&fleet.hosts, &spec, true, &disks, |info| {
            workloads
                .iter()
                .find(|c| info.cluster.as_deref() == Some(c.name()))
                .map_or(&accounts, WorkloadCluster::accounts)
        });
        // Each cluster's controller-manager watches its own Nodes, their passes spread over
        // the period.
        let clusters = 1 + workloads.len();
        for (index, own) in std::iter::once(&accounts)
            .chain(workloads.iter().map(WorkloadCluster::accounts))
            .enumerate()
        {
            let phase = lifecycle::phase(spec.timing.monitor_period, index, clusters);
            actors.push(tokio::spawn(lifecycle::run(
                lifecycle::ControllerManager {
                    informers: own.local(accounts::Actor::ControllerManager),
                    writes: own.local(accounts::Actor::NodeLifecycle),
                },
                spec.timing.clone(),
                phase,
            )));
        }
        actors.extend(start_operator(&spec, &accounts));
        let legacy = legacy::Actions::default();
        actors.extend(start_legacy_actuator(&spec, &accounts, &legacy));
        if let Some(mco) = &mco {
            actors.extend(mco.start(&accounts, &fleet.hosts, &spec.timing));
        }
        let Fleet {
            redfish,
            ipmi,
            hosts,
        } = fleet;
        let mut cluster = SimCluster {
            server,
            workloads,
            redfish,
            ipmi,
            hosts,
            actors,
            bmc_password: spec.bmc_password.clone(),
            spec,
            mco,
            accounts,
            legacy,
        };
        let deadline = started + cluster.spec.ready_timeout;
        // Each look lists every Node: often enough for a small cluster, not a burden for a big one.
        let look = Duration::from_millis(20 + cluster.hosts.len() as u64 / 10);
        while Instant::now() < deadline && cluster.ready_nodes() < cluster.hosts.len() {
            tokio::time::sleep(look).await;
        }
        let nodes = if cluster.spec.cluster_api && !cluster.workloads.is_empty() {
            mhc::NodeReader::Workload(workload::ClusterCache::new(&cluster.workloads))
        } else if cluster.spec.cluster_api {
            mhc::NodeReader::Direct(cluster.accounts.workload_admin())
        } else {
            mhc::NodeReader::Direct(cluster.accounts.local(accounts::Actor::MachineApi))
        };
        let checks = start_health_checks(&cluster.spec, &cluster.accounts, nodes);
        cluster.actors.extend(checks);
        let faults = cluster.spec.faults.clone();
        if !faults.is_empty() {
            let hosts = cluster.hosts.clone();
            let switches = cluster
                .workloads
                .iter()
                .map(|c| (c.name().to_owned(), c.api_server().reachability().clone()))
                .collect();
            cluster
                .actors
                .push(tokio::spawn(scenario::play_faults(faults, hosts, switches)));
        }
        Ok(cluster)
    }

    /// Starts the spec's workload API servers and writes each one's `Cluster` (provisioned)
    /// and `<cluster>-kubeconfig` Secret in the management cluster.
    async fn start_workload_clusters(
        api: &Local,
        spec: &ClusterSpec,
        refusals: &Arc<local::Refusals>,
    ) -> Result<Vec<WorkloadCluster>> {
        let fail =
            |e: crate::apiserver::ApiError| Error::Config(format!("cluster set-up: {}", e.message));
        let mut workloads = Vec::new();
        for name in spec.workload_cluster_names() {
            let version = spec.kubernetes_version;
            let cluster = workload::start(&name, (spec.tls, version), refusals.clone()).await?;
            let object = workload::cluster_object(&cluster, MACHINE_NAMESPACE);
            let created = api
                .create(CAPI_CLUSTERS, MACHINE_NAMESPACE, object)
                .map_err(fail)?;
            api.merge(
                CAPI_CLUSTERS,
                MACHINE_NAMESPACE,
                &name,
                &workload::provisioned_status(),
                true,
            )
            .map_err(fail)?;
            let uid = created
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let secret = workload::kubeconfig_secret(&cluster, MACHINE_NAMESPACE, uid);
            api.create(SECRETS, MACHINE_NAMESPACE, secret)
                .map_err(fail)?;
            workloads.push(cluster);
        }
        Ok(workloads)
    }

    /// Creates a host's BMC credentials Secret.
    fn create_bmc_secret(
        api: &Local,
        info: &HostInfo,
        password: &str,
    ) -> std::result::Result<(), crate::apiserver::ApiError> {
        api.create(SECRETS, MACHINE_NAMESPACE, json!({"metadata": {"name": info.bmc_secret()}, "type": "Opaque", "data": {"username": secret_data(BMC_USERNAME), "password": secret_data(password)}}))?;
        Ok(())
    }

    /// Creates the BareMetalHost of a host (its Secret exists) and, but in the Cluster API
    /// flavour, its Machine API Machine (that flavour makes its own Machine instead: making
    /// one to delete it would cost a garbage-collector scan of the whole store per host).
    fn register(
        api: &Local,
        info: &HostInfo,
        spec: &ClusterSpec,
    ) -> std::result::Result<(), crate::apiserver::ApiError> {
        let address = info.bmc_address(spec.bmh_uses_ipmi);
        let secret_name = info.bmc_secret();
        let (annotations, operational) = if spec.hosts_detached {
            (json!({bmo::DETACHED: ""}), "detached")
        } else {
            (json!({}), "OK")
        };
        let bmh = api.create(BMHS, MACHINE_NAMESPACE, json!({
            "apiVersion": "metal3.io/v1alpha1",
            "kind": "BareMetalHost",
            "metadata": {"name": info.name, "annotations": annotations},
            "spec": {"online": true, "bmc": {"address": address, "credentialsName": secret_name}, "bootMACAddress": "52:54:00:00:00:01", "consumerRef": {"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine", "name": info.name, "namespace": MACHINE_NAMESPACE}},
        }))?;
        api.merge(BMHS, MACHINE_NAMESPACE, &info.name, &json!({"status": {"poweredOn": true, "operationalStatus": operational, "provisioning": {"state": "provisioned"}}}), true)?;
        if spec.cluster_api {
            return Ok(());
        }
        let uid = bmh
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        api.create(MACHINES, MACHINE_NAMESPACE, json!({
            "apiVersion": "machine.openshift.io/v1beta1",
            "kind": "Machine",
            "metadata": {
                "name": info.name,
                "labels": {"machine.openshift.io/cluster-api-machine-role": info.role, "machine.openshift.io/cluster-api-machine-type": info.role},
                "annotations": {"metal3.io/BareMetalHost": format!("{MACHINE_NAMESPACE}/{}", info.name)},
            },
            "spec": {"providerID": format!("baremetalhost:///{MACHINE_NAMESPACE}/{}/{uid}", info.name)},
        }))?;
        api.merge(MACHINES, MACHINE_NAMESPACE, &info.name, &json!({"status": {"phase": "Running", "nodeRef": {"kind": "Node", "name": info.name}}}), true)?;
        Ok(())
    }

    /// Creates, in the platform-none flavour, each host's `HostBmc` (named after the host, in
    /// [`MACHINE_NAMESPACE`]): `spec.nodeName` its Node, `spec.address` its BMC (IPMI with
    /// `bmhUsesIpmi` and `ipmi`, else Redfish), `spec.credentialsName` its Secret. The kind is
    /// baremend's, so whoever installs baremend's CRDs calls this afterwards (the lab does);
    /// other flavours create none. Returns how many were created.
    pub fn create_host_bmcs(&self) -> Result<usize> {
        if !self.spec.platform_none {
            return Ok(0);
        }
        let api = Local::new(self.server.store().clone(), INSTALLER);
        create_host_bmcs(&api, &self.hosts, self.spec.bmh_uses_ipmi)
    }

    /// Waits, looking `every` so often, until the `HostBmc` kind is served, then creates the
    /// HostBmcs as [`SimCluster::create_host_bmcs`]: the step of an administrator who applies
    /// them once baremend's CRDs are installed (the `baremend-sim cluster` command runs it; a
    /// test that installs the CRDs itself calls `create_host_bmcs` at once).
    pub async fn create_host_bmcs_once_served(&self, every: Duration) -> Result<usize> {
        if !self.spec.platform_none {
            return Ok(0);
        }
        let api = Local::new(self.server.store().clone(), "reader");
        while !api.serves(HOST_BMCS) {
            tokio::time::sleep(every).await;
        }
        self.create_host_bmcs()
    }

    /// Gives a host the Cluster API flavour's Machine: a `cluster.x-k8s.io` Machine whose
    /// `infrastructureRef` names a Metal3Machine carrying
    /// the `metal3.io/BareMetalHost` annotation, and the host's consumer is the Metal3Machine,
    /// as CAPM3 sets them.
    fn as_cluster_api(
        api: &Local,
        info: &HostInfo,
    ) -> std::result::Result<(), crate::apiserver::ApiError> {
        let name = &info.name;
        let cluster = info.cluster.as_deref().unwrap_or(CAPI_CLUSTER_NAME);
        api.create(METAL3_MACHINES, MACHINE_NAMESPACE, json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1",
            "kind": "Metal3Machine",
            "metadata": {"name": name, "annotations": {"metal3.io/BareMetalHost": format!("{MACHINE_NAMESPACE}/{name}")}},
            "spec": {"providerID": format!("metal3://{MACHINE_NAMESPACE}/{name}/{name}")},
        }))?;
        // CAPM3 labels the host it consumes with its Cluster's name in the same update that
        // sets the consumer (cluster-api-provider-metal3 `baremetal/metal3machine_manager.go`,
        // `setHostLabel`), which is what lets a shard by cluster watch only its hosts.
        api.merge(BMHS, MACHINE_NAMESPACE, name, &json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": cluster}}, "spec": {"consumerRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine", "name": name, "namespace": MACHINE_NAMESPACE}}}), false)?;
        let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
        if info.role == "master" {
            labels["cluster.x-k8s.io/control-plane"] = json!("");
        } else if info.cluster.is_some() {
            labels["cluster.x-k8s.io/deployment-name"] = json!(deployment(cluster));
        } else {
            labels["cluster.x-k8s.io/deployment-name"] = json!("workers");
        }
        api.create(CAPI_MACHINES, MACHINE_NAMESPACE, json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "clusterName": cluster,
                "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "Metal3Machine", "name": name, "namespace": MACHINE_NAMESPACE},
                "providerID": format!("metal3://{MACHINE_NAMESPACE}/{name}/{name}"),
            },
        }))?;
        api.merge(CAPI_MACHINES, MACHINE_NAMESPACE, name, &json!({"status": {"phase": "Running", "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": info.node_name}}}), true)?;
        Ok(())
    }

    /// Creates the workload pods (bound to workers, owned by a ReplicaSet-like controller so
    /// that `kubectl drain` accepts them) and the PDB.
    fn place_workloads(
        api: &Local,
        hosts: &[HostInfo],
        workloads: &scenario::Workloads,
    ) -> std::result::Result<(), crate::apiserver::ApiError> {
        let workers: Vec<&HostInfo> = hosts.iter().filter(|h| h.role == "worker").collect();
        if workers.is_empty() || workloads.pods_per_worker == 0 {
            return Ok(());
        }
        // The namespace may be there already (a real server's installer waits in it for
        // its default ServiceAccount).
        match api.create(NAMESPACES, "", json!({"metadata": {"name": "workloads"}})) {
            Err(error) if error.code != 409 => return Err(error),
            _ => {}
        }
        for worker in &workers {
            for index in 0..workloads.pods_per_worker {
                api.create(local::PODS, "workloads", json!({
                    "metadata": {
                        "name": format!("app-{}-{index}", worker.node_name),
                        "labels": {"app": "app"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app", "uid": "5d4f0c3a-8b2e-4f6a-9c1d-7e8f9a0b1c2d", "controller": true}],
                    },
                    "spec": {"nodeName": worker.node_name, "terminationGracePeriodSeconds": 30, "containers": [{"name": "app", "image": "registry.example/app:1"}]},
                }))?;
            }
        }
        if let Some(min) = workloads.pdb_min_available {
            api.create(local::PDBS, "workloads", json!({"metadata": {"name": "app"}, "spec": {"minAvailable": min, "selector": {"matchLabels": {"app": "app"}}}}))?;
        }
        Ok(())
    }

    /// Every API server's store, with the workload cluster's name (None: the management or
    /// only cluster).
    fn stores(&self) -> impl Iterator<Item = (Option<&str>, &Arc<crate::apiserver::Store>)> {
        std::iter::once((None, self.server.store())).chain(
            self.workloads
                .iter()
                .map(|c| (Some(c.name()), c.api_server().store())),
        )
    }

    /// What the legacy bare-metal remediation did, Machine by Machine, in order (empty unless
    /// the spec runs it: [`ClusterSpec::legacy_actuator`]).
    pub fn legacy_actions(&self) -> Vec<(String, legacy::Action)> {
        self.legacy.all()
    }

    /// How many Nodes are Ready, in every API server.
    pub fn ready_nodes(&self) -> usize {
        self.stores()
            .flat_map(|(_, store)| Local::new(store.clone(), "reader").list(NODES, None))
            .filter(kubelet::ready)
            .count()
    }

    /// The workload clusters (`wc-0`…; empty unless the spec asks for them).
    pub fn workload_clusters(&self) -> &[WorkloadCluster] {
        &self.workloads
    }

    /// A workload cluster by name.
    pub fn workload_cluster(&self, name: &str) -> Option<&WorkloadCluster> {
        self.workloads.iter().find(|c| c.name() == name)
    }

    /// The admin kubeconfig of workload cluster `name` (the one its `<name>-kubeconfig`
    /// Secret holds).
    pub fn workload_kubeconfig(&self, name: &str) -> Option<String> {
        self.workload_cluster(name)
            .map(|c| c.kubeconfig().to_owned())
    }

    /// Makes workload cluster `cluster`'s API server unreachable to its clients (`down`: open
    /// connections and watches cut, new ones closed unanswered; the management cluster's
    /// health check cannot read it either) or reachable again. Its own kubelets and
    /// controller-manager keep going, as behind a partition between the management cluster
    /// and the workload cluster's endpoint. False when there is no such cluster.
    pub fn set_workload_api_down(&self, cluster: &str, down: bool) -> bool {
        self.workload_cluster(cluster)
            .map(|c| c.api_server().set_reachable(!down))
            .is_some()
    }

    /// The spec the cluster was started with.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The API server.
    pub fn api_server(&self) -> &ApiServer {
        &self.server
    }

    /// A kubeconfig for kubectl and controllers.
    pub fn kubeconfig(&self) -> String {
        self.server.kubeconfig()
    }

    /// The Redfish service of every host.
    pub fn redfish(&self) -> &RedfishSim {
        &self.redfish
    }

    /// The hosts.
    pub fn hosts(&self) -> &[HostInfo] {
        &self.hosts
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Option<&HostInfo> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The actors' accounts (each actor's client, authorized as its upstream account).
    pub fn accounts(&self) -> &accounts::Accounts {
        &self.accounts
    }

    /// What the API server refused the simulated actors so far (`<actor> (<user>): <message>`;
    /// Events apart): empty unless an upstream grant, or one baremend ships for them, is
    /// missing.
    pub fn actor_refusals(&self) -> Vec<String> {
        self.accounts.refusals()
    }

    /// The Events the actors tried to record and the API server refused (`<actor>: <reason>
    /// on <kind>/<name> in <namespace>`): what a recorder drops.
    pub fn dropped_events(&self) -> Vec<String> {
        self.accounts.dropped_events()
    }

    /// The simulated Machine Config Operator, when the spec asked for one.
    pub fn mco(&self) -> Option<&mco::SimMco> {
        self.mco.as_ref()
    }

    /// A node's disk (with the simulated MCO).
    pub fn disk(&self, node: &str) -> Option<&Arc<mco::disk::NodeDisk>> {
        self.mco.as_ref().and_then(|m| m.disks.get(node))
    }

    /// The BMC password of every host.
    pub fn bmc_password(&self) -> &str {
        &self.bmc_password
    }

    /// The IPMI BMCs (empty unless the spec asked for IPMI).
    pub fn ipmi(&self) -> &[IpmiSim] {
        &self.ipmi
    }

    /// Hangs a node's kernel: heartbeats stop until the next power cycle.
    pub fn hang(&self, name: &str) -> bool {
        self.host(name)
            .map(|h| h.faults.hung.store(true, Ordering::Relaxed))
            .is_some()
    }

    /// Cuts a node's network: heartbeats stop until the next power cycle.
    pub fn nic_down(&self, name: &str) -> bool {
        self.host(name)
            .map(|h| h.faults.nic_down.store(true, Ordering::Relaxed))
            .is_some()
    }

    /// Breaks a node's hardware: its OS never comes up again, whatever the power does, until
    /// [`SimCluster::recover`].
    pub fn break_host(&self, name: &str) -> bool {
        self.host(name)
            .map(|h| h.faults.broken.store(true, Ordering::Relaxed))
            .is_some()
    }

    /// Holds (or lets go) the start of every pod bound to a node, as an image pull that
    /// hangs: see [`NodeFaults::pods_held`]. A power cycle does not clear it.
    pub fn hold_pods(&self, name: &str, held: bool) -> bool {
        self.host(name)
            .map(|h| h.faults.pods_held.store(held, Ordering::Relaxed))
            .is_some()
    }

    /// Makes every boot of a node take `extra` longer (a slow bare-metal POST), or with
    /// zero as long as the timing says again.
    pub fn slow_boot(&self, name: &str, extra: std::time::Duration) -> bool {
        let millis = u64::try_from(extra.as_millis()).unwrap_or(u64::MAX);
        self.host(name)
            .map(|h| h.faults.slow_boot_ms.store(millis, Ordering::Relaxed))
            .is_some()
    }

    /// Starts an upgrade of the cluster to `to` (its ClusterVersion `Progressing`), or with
    /// None finishes it (with the simulated MCO only: an OpenShift cluster).
    pub fn set_upgrading(&self, to: Option<&str>) -> Result<()> {
        let api = Local::new(self.server.store().clone(), "cluster-version-operator");
        cvo::set_upgrading(&api, to)
            .map_err(|e| Error::Config(format!("ClusterVersion: {}", e.message)))
    }

    /// Rolls `pool` onto a new OS image (the MCO's part of an upgrade): every node in turn,
    /// `maxUnavailable` at a time, drains and reboots into it. Returns the new config.
    pub fn roll_pool(&self, pool: &str, image: &str) -> Result<String> {
        let Some(mco) = &self.mco else {
            return Err(Error::Config(
                "no Machine Config Operator in this cluster".into(),
            ));
        };
        let api = Local::new(self.server.store().clone(), "machine-config-controller");
        mco.roll(&api, pool, image)
            .map_err(|e| Error::Config(format!("roll {pool}: {}", e.message)))
    }

    /// Clears a node's faults without a power cycle (the admin fixed it).
    pub fn recover(&self, name: &str) -> bool {
        self.host(name)
            .map(|h| {
                h.faults.hung.store(false, Ordering::Relaxed);
                h.faults.nic_down.store(false, Ordering::Relaxed);
                h.faults.broken.store(false, Ordering::Relaxed);
            })
            .is_some()
    }

    /// Node names by readiness, for status output; a workload cluster's Nodes as
    /// `<cluster>/<node>`.
    pub fn node_summary(&self) -> HashMap<String, String> {
        self.stores()
            .flat_map(|(cluster, store)| {
                let nodes = Local::new(store.clone(), "reader").list(NODES, None);
                nodes.into_iter().map(move |n| (cluster, n))
            })
            .map(|(cluster, n)| {
                let node = n
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let name = match cluster {
                    Some(cluster) => format!("{cluster}/{node}"),
                    None => node.to_owned(),
                };
                let ready = n
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                    .and_then(|c| c["status"].as_str())
                    .unwrap_or("Unknown")
                    .to_owned();
                (name, ready)
            })
            .collect()
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        for actor in &self.actors {
            actor.abort();
        }
    }
}

/// The field manager of what the simulated cluster installs.
const INSTALLER: &str = "baremend-sim-installer";

/// A set-up step's refusal, as the start's error.
fn set_up(error: crate::apiserver::ApiError) -> Error {
    Error::Config(format!("cluster set-up: {}", error.message))
}

/// The hosts, each with its BMCs (Redfish for all, IPMI each when the spec asks).
struct Fleet {
    redfish: RedfishSim,
    ipmi: Vec<IpmiSim>,
    hosts: Vec<HostInfo>,
}

impl Fleet {
    /// Powers the spec's hosts on and starts their BMCs.
    async fn start(spec: &ClusterSpec) -> Result<Self> {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let names = host_plans(spec);
        let sim_hosts: Vec<Arc<SimHost>> = names
            .iter()
            .map(|(name, ..)| {
                let delay = spec.timing.power_delay;
                Arc::new(SimHost::new(name, Power::On, delay, clock.clone()))
            })
            .collect();
        let redfish = RedfishSim::start_with_hosts(
            RedfishSimConfig {
                username: BMC_USERNAME.into(),
                password: spec.bmc_password.clone(),
                power_delay: spec.timing.power_delay,
                ..RedfishSimConfig::default()
            },
            sim_hosts.clone(),
            clock.clone(),
        )
        .await?;
        let mut ipmi = Vec::new();
        let mut hosts = Vec::new();
        for ((name, node_name, role, cluster), host) in names.iter().zip(&sim_hosts) {
            let ipmi_address = if spec.ipmi {
                let users = vec![IpmiUser {
                    username: BMC_USERNAME.into(),
                    password: spec.bmc_password.clone(),
                    max_privilege: privilege::ADMINISTRATOR,
                }];
                let config = IpmiSimConfig {
                    users,
                    ..IpmiSimConfig::default()
                };
                let sim = IpmiSim::start(config, host.clone(), clock.clone()).await?;
                let address = sim.bmc_address();
                ipmi.push(sim);
                Some(address)
            } else {
                None
            };
            hosts.push(HostInfo {
                name: name.clone(),
                node_name: node_name.clone(),
                cluster: cluster.clone(),
                role: (*role).to_owned(),
                host: host.clone(),
                faults: Arc::new(NodeFaults::default()),
                redfish_address: redfish.bmc_address(name),
                ipmi_address,
            });
        }
        Ok(Fleet {
            redfish,
            ipmi,
            hosts,
        })
    }
}

/// Installs the kinds the spec's actors serve (the fixtures' CRDs) and their namespaces;
/// what exists already (installed by the user beforehand) is kept.
fn install_kinds(api: &Local, spec: &ClusterSpec) -> Result<()> {
    let mut namespaces = vec![MACHINE_NAMESPACE];
    if spec.node_health_check {
        namespaces.push(NHC_NAMESPACE);
    }
    for crd in fixture_crds(spec) {
        kept_if_exists(api.create(CRDS, "", crd))?;
    }
    for name in namespaces {
        kept_if_exists(api.create(NAMESPACES, "", json!({"metadata": {"name": name}})))?;
    }
    Ok(())
}

/// The fixtures' CRDs the spec's actors need: the Machine API and metal3 kinds, Cluster
/// API's in that flavour, NodeHealthCheck's with one.
fn fixture_crds(spec: &ClusterSpec) -> Vec<Value> {
    let mut crds = fixtures::all();
    if spec.cluster_api {
        crds.extend(fixtures::cluster_api_crds());
    }
    if spec.node_health_check {
        crds.push(fixtures::node_health_check_crd());
    }
    crds
}

/// Creates each host's `HostBmc` (in the platform-none flavour: [`host_bmc`]) with `api`;
/// returns how many.
fn create_host_bmcs(api: &Local, hosts: &[HostInfo], use_ipmi: bool) -> Result<usize> {
    for info in hosts {
        api.create(HOST_BMCS, MACHINE_NAMESPACE, host_bmc(info, use_ipmi))
            .map_err(|e| {
                Error::Config(format!(
                    "HostBmc {} not created (is baremend's HostBmc CRD installed?): {}",
                    info.name, e.message
                ))
            })?;
    }
    Ok(hosts.len())
}

/// A creation's result, an object that exists already being no error.
fn kept_if_exists(created: std::result::Result<Value, crate::apiserver::ApiError>) -> Result<()> {
    match created {
        Err(error) if error.code != 409 => Err(set_up(error)),
        _ => Ok(()),
    }
}

/// Writes what an installed cluster holds about its hosts: BMC Secrets, BareMetalHosts and
/// Machines, the health check (unless `health_checks` is false: the user installs theirs),
/// and (in the one cluster) the workload pods.
fn populate(
    api: &Local,
    hosts: &[HostInfo],
    spec: &ClusterSpec,
    health_checks: bool,
) -> Result<()> {
    for info in hosts {
        SimCluster::create_bmc_secret(api, info, &spec.bmc_password).map_err(set_up)?;
        if spec.platform_none {
            continue;
        }
        SimCluster::register(api, info, spec).map_err(set_up)?;
        if spec.cluster_api {
            SimCluster::as_cluster_api(api, info).map_err(set_up)?;
        }
    }
    let workload_clusters = spec.workload_cluster_names();
    if !health_checks {
        // The user's own health checks (with the simulated controllers acting on them).
    } else if spec.node_health_check {
        api.create(nhc::NHCS, "", node_health_check(spec))
            .map_err(set_up)?;
    } else if spec.platform_none {
        // No Machines, so no MachineHealthCheck: the requests come from elsewhere.
    } else if spec.cluster_api && workload_clusters.is_empty() {
        let mhc = capi_health_check(spec, CAPI_CLUSTER_NAME, "workers");
        api.create(CAPI_MHCS, MACHINE_NAMESPACE, mhc)
            .map_err(set_up)?;
    } else if spec.cluster_api {
        for cluster in &workload_clusters {
            let mhc = capi_health_check(spec, cluster, &deployment(cluster));
            api.create(CAPI_MHCS, MACHINE_NAMESPACE, mhc)
                .map_err(set_up)?;
        }
    } else {
        api.create(MHCS, MACHINE_NAMESPACE, machine_api_health_check(spec))
            .map_err(set_up)?;
    }
    // The pods run where their Nodes are: here in the one cluster (each workload cluster
    // gets its own from the caller).
    if workload_clusters.is_empty() {
        SimCluster::place_workloads(api, hosts, &spec.workloads).map_err(set_up)?;
    }
    Ok(())
}

/// Starts each host's kubelet, in the cluster `accounts_of` gives for it, its disk from
/// `disk_of` (with the simulated MCO), labelling its Node with its role or not.
fn start_kubelets<'a>(
    hosts: &[HostInfo],
    spec: &ClusterSpec,
    labels_own_role: bool,
    disk_of: &dyn Fn(&str) -> Option<Arc<mco::disk::NodeDisk>>,
    accounts_of: impl Fn(&HostInfo) -> &'a accounts::Accounts,
) -> Vec<JoinHandle<()>> {
    let mut seed = spec.seed.max(1);
    let mut actors = Vec::new();
    for info in hosts {
        let identity = kubelet::NodeIdentity {
            name: info.node_name.clone(),
            machine_name: info.name.clone(),
            cluster_name: info
                .cluster
                .as_deref()
                .unwrap_or(CAPI_CLUSTER_NAME)
                .to_owned(),
            role: info.role.clone(),
            machine: spec.machine_link(),
            labels_own_role,
        };
        // Spread heartbeats over the interval, deterministically for a seed (xorshift).
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let phase = spec.timing.heartbeat.mul_f64((seed % 1000) as f64 / 1000.0);
        actors.push(tokio::spawn(kubelet::run(
            accounts_of(info).kubelet(&info.node_name, "kubelet"),
            kubelet::Machine {
                host: info.host.clone(),
                faults: info.faults.clone(),
                disk: disk_of(&info.name),
            },
            identity,
            spec.timing.clone(),
            phase,
        )));
    }
    actors
}

/// Starts the BareMetal Operator (not on platform none, which has no BareMetalHosts).
fn start_operator(spec: &ClusterSpec, accounts: &accounts::Accounts) -> Option<JoinHandle<()>> {
    (!spec.platform_none).then(|| {
        tokio::spawn(bmo::run(
            accounts.local(accounts::Actor::BareMetalOperator),
            spec.timing.clone(),
            spec.bmo_options(),
        ))
    })
}

/// Starts OpenShift's legacy bare-metal remediation when the spec runs it, recording into
/// `actions`.
fn start_legacy_actuator(
    spec: &ClusterSpec,
    accounts: &accounts::Accounts,
    actions: &legacy::Actions,
) -> Option<JoinHandle<()>> {
    spec.legacy_actuator.then(|| {
        tokio::spawn(legacy::run(
            accounts.local(accounts::Actor::MachineController),
            spec.timing.clone(),
            actions.clone(),
        ))
    })
}

/// Starts the spec's health checks once the Nodes are up: Machines carry their nodeRef from
/// the start here (in OpenShift it appears when the Node registers), so a health check
/// started earlier would take a Node still registering for a missing one. `nodes` is how
/// a MachineHealthCheck reads Nodes (OpenShift's with its own account; Cluster API's through
/// the workload cluster's kubeconfig).
fn start_health_checks(
    spec: &ClusterSpec,
    accounts: &accounts::Accounts,
    nodes: mhc::NodeReader,
) -> Vec<JoinHandle<()>> {
    let mut actors = Vec::new();
    if spec.node_health_check {
        actors.push(tokio::spawn(nhc::run(
            accounts.local(accounts::Actor::NodeHealthCheck),
            spec.timing.clone(),
        )));
    }
    if !spec.platform_none {
        let (health_check, flavour) = if spec.cluster_api {
            let manager = accounts.local(accounts::Actor::ClusterApi);
            (manager, mhc::Flavour::ClusterApi)
        } else {
            let controllers = accounts.local(accounts::Actor::MachineApi);
            (controllers, mhc::Flavour::MachineApi)
        };
        let timing = spec.timing.clone();
        actors.push(tokio::spawn(mhc::run(health_check, nodes, flavour, timing)));
    }
    actors
}

/// A host's `HostBmc` (baremend.io/v1alpha1): its Node, BMC address and credentials Secret.
fn host_bmc(info: &HostInfo, use_ipmi: bool) -> Value {
    json!({
        "apiVersion": "baremend.io/v1alpha1",
        "kind": "HostBmc",
        "metadata": {"name": info.name, "namespace": MACHINE_NAMESPACE},
        "spec": {
            "nodeName": info.name,
            "address": info.bmc_address(use_ipmi),
            "credentialsName": info.bmc_secret(),
        },
    })
}

/// The workers' OpenShift MachineHealthCheck: the external-baremetal annotation, or a
/// remediation template, as an operator configures one.
fn machine_api_health_check(spec: &ClusterSpec) -> Value {
    // Either the external-baremetal annotation or a remediation template, as an operator
    // configures one MachineHealthCheck.
    let (annotations, template) = match &spec.remediation_template {
        None => (
            json!({STRATEGY_ANNOTATION: "external-baremetal"}),
            Value::Null,
        ),
        Some(name) => (
            json!({}),
            json!({"apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediationTemplate", "name": name}),
        ),
    };
    let mut mhc = json!({
        "apiVersion": "machine.openshift.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "workers", "namespace": MACHINE_NAMESPACE, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"machine.openshift.io/cluster-api-machine-role": "worker"}},
            "unhealthyConditions": unhealthy_conditions(spec),
            "maxUnhealthy": spec.max_unhealthy,
            "nodeStartupTimeout": format!("{}ms", spec.timing.node_startup_timeout.as_millis()),
        },
    });
    if !template.is_null() {
        mhc["spec"]["remediationTemplate"] = template;
    }
    mhc
}

/// The workers' unhealthy conditions and timeouts, the same in both flavours.
fn unhealthy_conditions(spec: &ClusterSpec) -> Value {
    let timeout = format!("{}ms", spec.timing.unhealthy_timeout.as_millis());
    json!([
        {"type": "Ready", "status": "False", "timeout": timeout},
        {"type": "Ready", "status": "Unknown", "timeout": timeout},
    ])
}

/// The name of a workload cluster's workers' MachineDeployment (its Machines' label).
fn deployment(cluster: &str) -> String {
    format!("{cluster}-workers")
}

/// Each host to build: management-side name, Node name, role and workload cluster — the
/// spec's masters and workers once, or in each workload cluster.
fn host_plans(spec: &ClusterSpec) -> Vec<(String, String, &'static str, Option<String>)> {
    let roles = || {
        (0..spec.masters)
            .map(|i| (format!("master-{i}"), "master"))
            .chain((0..spec.workers).map(|i| (format!("worker-{i}"), "worker")))
    };
    let clusters = spec.workload_cluster_names();
    if clusters.is_empty() {
        return roles()
            .map(|(node, role)| (node.clone(), node, role, None))
            .collect();
    }
    clusters
        .iter()
        .flat_map(|cluster| {
            roles().map(move |(node, role)| {
                (
                    format!("{cluster}-{node}"),
                    node,
                    role,
                    Some(cluster.clone()),
                )
            })
        })
        .collect()
}

/// The workers' Cluster API MachineHealthCheck of `cluster` (its workers' MachineDeployment
/// `deployment`), naming baremend's remediation template.
fn capi_health_check(spec: &ClusterSpec, cluster: &str, deployment: &str) -> Value {
    let template = spec.remediation_template.as_deref().unwrap_or("baremend");
    let name = if cluster == CAPI_CLUSTER_NAME {
        "workers".to_owned()
    } else {
        deployment.to_owned()
    };
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineHealthCheck",
        "metadata": {"name": name, "namespace": MACHINE_NAMESPACE, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": {
            "clusterName": cluster,
            "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": deployment}},
            "unhealthyConditions": unhealthy_conditions(spec),
            "maxUnhealthy": spec.max_unhealthy,
            "nodeStartupTimeout": format!("{}ms", spec.timing.node_startup_timeout.as_millis()),
            "remediationTemplate": {"apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediationTemplate", "name": template},
        },
    })
}

/// The workers' NodeHealthCheck: baremend first, for `escalationTimeout`, then a remediator
/// the simulated cluster does not serve.
fn node_health_check(spec: &ClusterSpec) -> Value {
    let duration = format!("{}ms", spec.timing.unhealthy_timeout.as_millis());
    json!({
        "apiVersion": "remediation.medik8s.io/v1alpha1",
        "kind": "NodeHealthCheck",
        "metadata": {"name": "workers"},
        "spec": {
            "selector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}},
            "unhealthyConditions": [
                {"type": "Ready", "status": "False", "duration": duration},
                {"type": "Ready", "status": "Unknown", "duration": duration},
            ],
            "escalatingRemediations": [
                {
                    "remediationTemplate": {"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate", "namespace": NHC_NAMESPACE, "name": "baremend"},
                    "order": 0,
                    "timeout": format!("{}ms", spec.escalation_timeout.as_millis()),
                },
                {
                    "remediationTemplate": {"apiVersion": "machine-deletion-remediation.medik8s.io/v1alpha1", "kind": "MachineDeletionRemediationTemplate", "namespace": NHC_NAMESPACE, "name": "default"},
                    "order": 1,
                    "timeout": "30m",
                },
            ],
        },
    })
}
