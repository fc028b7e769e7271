//! The simulated world on any API server — a real kube-apiserver with its
//! kube-controller-manager, typically (the `plane` module's `ControlPlane`): the hosts and their
//! BMCs, and the actors around the controller under test (kubelets, the BareMetal Operator,
//! the health checks), each calling the server over HTTPS with the credential its upstream
//! install gives it. The same actors, set-up and fixtures as [`super::SimCluster`]; what the
//! real control plane does itself is left to it.
//!
//! Expected flow: [`RemoteCluster::start`] installs the fixtures' kinds and waits until the
//! server has established them, writes the hosts' Secrets, BareMetalHosts, Machines and health check
//! as an installer, creates the actors' upstream accounts, has the server issue their
//! credentials (TokenRequest for ServiceAccounts, client certificates of the plane's CA for
//! kubelets and kube-controller-manager's user), starts the kubelets and the operator, waits
//! for the Nodes, then starts the health checks.
//!
//! Guarantees: no actor calls the server with the administrator's credential (the installer
//! and a self-hosted Cluster API's kubeconfig apart, as upstream); the node lifecycle is the
//! real controller-manager's (Nodes turn `Unknown` and are tainted by it, not by us).
//!
//! Caveats: one cluster only (no workload clusters, which would need a plane each) and no
//! simulated MCO. Upstream NodeRestriction refuses a kubelet its role labels, so the world's
//! labeller (with the installer's credential) gives each Node its role label when it
//! registers, as a kubeadm installer does; OpenShift's kubelet labels itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::accounts::{self, Actor, Issuer, RemoteAccounts};
use super::local::{self, CRDS, Local, NODES, SERVICE_ACCOUNTS};
use super::remote::{Credential, Endpoint, Remote};
use super::{
    ClusterSpec, Fleet, HostInfo, INSTALLER, create_host_bmcs, fixture_crds, install_kinds,
    kubelet, legacy, mhc, populate, scenario, set_up, start_health_checks, start_kubelets,
    start_legacy_actuator, start_operator,
};
use crate::ipmi::IpmiSim;
use crate::redfish::RedfishSim;
use crate::{Error, Result};

/// How long the server may take to establish a CRD, or to give a namespace its account.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// What to set up beside the hosts.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Create the spec's health check (a MachineHealthCheck or NodeHealthCheck of the
    /// simulated cluster's); false when the user installs their own (baremend's `deploy/`
    /// components), which the simulated health-check controllers then act on.
    pub create_health_checks: bool,
    /// Run the simulated health-check controllers (the MachineHealthCheck's, the
    /// NodeHealthCheck's); false when the real ones run beside the world (the real OpenShift
    /// MachineHealthCheck controller, built by `scripts/kubernetes.sh`).
    pub run_health_check_controllers: bool,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            create_health_checks: true,
            run_health_check_controllers: true,
        }
    }
}

/// The simulated world running against a remote API server. Dropping it stops the actors
/// and the BMCs; what it wrote stays on the server.
pub struct RemoteCluster {
    endpoint: Endpoint,
    redfish: RedfishSim,
    ipmi: Vec<IpmiSim>,
    hosts: Vec<HostInfo>,
    actors: Vec<JoinHandle<()>>,
    spec: ClusterSpec,
    accounts: accounts::Accounts,
    installer: Local,
    legacy: legacy::Actions,
}

impl std::fmt::Debug for RemoteCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCluster")
            .field("url", &self.endpoint.url)
            .field("hosts", &self.hosts.len())
            .finish_non_exhaustive()
    }
}

impl RemoteCluster {
    /// Populates and animates the API server at `endpoint` (administered with `admin`, the
    /// actors' client certificates signed by `issuer`) with the world `spec` describes;
    /// returns once every Node is registered and Ready (or after `spec.ready_timeout`).
    pub async fn start(
        spec: ClusterSpec,
        endpoint: Endpoint,
        admin: Credential,
        issuer: &dyn Issuer,
        options: RemoteOptions,
    ) -> Result<Self> {
        spec.validate().map_err(Error::Config)?;
        refuse_what_one_server_cannot_hold(&spec)?;
        let started = Instant::now();
        let installer = Local::remote(Remote::new(&endpoint, &admin)?, "admin", INSTALLER);
        install_kinds(&installer, &spec)?;
        wait_until_established(&installer, &spec).await?;
        let fleet = Fleet::start(&spec).await?;
        wait_for_default_account(&installer, "workloads", &spec).await?;
        populate(
            &installer,
            &fleet.hosts,
            &spec,
            options.create_health_checks && spec.health_checks,
        )?;
        // kube-controller-manager is the real one: only the simulated actors' accounts.
        let actors: Vec<Actor> = spec
            .actors()
            .into_iter()
            .filter(|a| !matches!(a, Actor::ControllerManager | Actor::NodeLifecycle))
            .collect();
        accounts::install(&installer, &actors).map_err(set_up)?;
        let nodes: Vec<&str> = fleet.hosts.iter().map(|h| h.node_name.as_str()).collect();
        let credentials = RemoteAccounts::issue(&endpoint, admin, issuer, &actors, &nodes)?;
        let refusals = Arc::new(local::Refusals::default());
        let accounts = accounts::Accounts::remote(credentials, refusals);
        let no_disk = |_: &str| None;
        let mut running = start_kubelets(&fleet.hosts, &spec, false, &no_disk, |_| &accounts);
        running.push(tokio::spawn(label_roles(
            installer.clone(),
            fleet.hosts.clone(),
            spec.timing.heartbeat,
        )));
        running.extend(start_operator(&spec, &accounts));
        let legacy = legacy::Actions::default();
        running.extend(start_legacy_actuator(&spec, &accounts, &legacy));
        let Fleet {
            redfish,
            ipmi,
            hosts,
        } = fleet;
        let mut cluster = RemoteCluster {
            endpoint,
            redfish,
            ipmi,
            hosts,
            actors: running,
            spec,
            accounts,
            installer,
            legacy,
        };
        let deadline = started + cluster.spec.ready_timeout;
        while Instant::now() < deadline && cluster.ready_nodes() < cluster.hosts.len() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let nodes = if cluster.spec.cluster_api {
            mhc::NodeReader::Direct(cluster.accounts.workload_admin())
        } else {
            mhc::NodeReader::Direct(cluster.accounts.local(Actor::MachineApi))
        };
        if options.run_health_check_controllers {
            let checks = start_health_checks(&cluster.spec, &cluster.accounts, nodes);
            cluster.actors.extend(checks);
        }
        let faults = cluster.spec.faults.clone();
        if !faults.is_empty() {
            let hosts = cluster.hosts.clone();
            let play = scenario::play_faults(faults, hosts, Vec::new());
            cluster.actors.push(tokio::spawn(play));
        }
        Ok(cluster)
    }

    /// What the legacy bare-metal remediation did (empty unless the spec runs it).
    pub fn legacy_actions(&self) -> Vec<(String, legacy::Action)> {
        self.legacy.all()
    }

    /// How many Nodes are Ready.
    pub fn ready_nodes(&self) -> usize {
        self.installer
            .list(NODES, None)
            .iter()
            .filter(|n| kubelet::ready(n))
            .count()
    }

    /// The server's address and CA.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The spec the world was started with.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The hosts.
    pub fn hosts(&self) -> &[HostInfo] {
        &self.hosts
    }

    /// A host by name.
    pub fn host(&self, name: &str) -> Option<&HostInfo> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// The Redfish service of every host.
    pub fn redfish(&self) -> &RedfishSim {
        &self.redfish
    }

    /// The IPMI BMCs (empty unless the spec asked for IPMI).
    pub fn ipmi(&self) -> &[IpmiSim] {
        &self.ipmi
    }

    /// The BMC password of every host.
    pub fn bmc_password(&self) -> &str {
        &self.spec.bmc_password
    }

    /// What the server refused the simulated actors so far (`<actor> (<user>): <message>`;
    /// Events apart): empty unless a grant their upstream install gives is missing.
    pub fn actor_refusals(&self) -> Vec<String> {
        self.accounts.refusals()
    }

    /// The Events the actors tried to record and the server refused.
    pub fn dropped_events(&self) -> Vec<String> {
        self.accounts.dropped_events()
    }

    /// Creates, in the platform-none flavour, each host's `HostBmc` (baremend's CRDs must be
    /// installed); returns how many.
    pub fn create_host_bmcs(&self) -> Result<usize> {
        if !self.spec.platform_none {
            return Ok(0);
        }
        create_host_bmcs(&self.installer, &self.hosts, self.spec.bmh_uses_ipmi)
    }

    /// Stops the actors and waits until each has (one in the middle of a request finishes
    /// it first): after this nothing of the world calls the server.
    pub async fn stop(mut self) {
        for actor in std::mem::take(&mut self.actors) {
            actor.abort();
            let _ = actor.await;
        }
    }
}

impl Drop for RemoteCluster {
    fn drop(&mut self) {
        for actor in &self.actors {
            actor.abort();
        }
    }
}

/// Refuses what this world does not simulate on one API server, with why.
fn refuse_what_one_server_cannot_hold(spec: &ClusterSpec) -> Result<()> {
    if spec.workload_clusters > 0 {
        return Err(Error::Config(
            "workloadClusters needs an API server per workload cluster; on one API server \
             use clusterApi without workload clusters (a self-hosted cluster)"
                .into(),
        ));
    }
    if spec.mco {
        return Err(Error::Config(
            "the simulated Machine Config Operator runs on the simulated cluster only".into(),
        ));
    }
    Ok(())
}

/// Waits until the server has established every CRD `install_kinds` created (a real API
/// server takes a moment to accept a new CRD's kind; its `Established` condition says when).
async fn wait_until_established(api: &Local, spec: &ClusterSpec) -> Result<()> {
    let deadline = Instant::now() + SERVED_WITHIN;
    for crd in fixture_crds(spec) {
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        while !api.get(CRDS, "", name).is_ok_and(|crd| established(&crd)) {
            if Instant::now() > deadline {
                return Err(Error::Config(format!(
                    "the API server has not established CRD {name} after {SERVED_WITHIN:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Whether a CRD's `Established` condition is `True`.
fn established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

/// Creates the workload pods' namespace and waits until the real ServiceAccount controller
/// gives it its `default` account (the server refuses pods without it).
async fn wait_for_default_account(api: &Local, namespace: &str, spec: &ClusterSpec) -> Result<()> {
    if spec.workloads.pods_per_worker == 0 || spec.workers == 0 {
        return Ok(());
    }
    let object = json!({"metadata": {"name": namespace}});
    match api.create(local::NAMESPACES, "", object) {
        Ok(_) => {}
        Err(e) if e.code == 409 => {}
        Err(e) => return Err(set_up(e)),
    }
    let deadline = Instant::now() + SERVED_WITHIN;
    while api.get(SERVICE_ACCOUNTS, namespace, "default").is_err() {
        if Instant::now() > deadline {
            return Err(Error::Config(format!(
                "no ServiceAccount default in {namespace} after {SERVED_WITHIN:?}: is \
                 kube-controller-manager running?"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Gives each host's Node its role labels when it registers (again after a deletion), as an
/// installer does where the kubelet may not.
async fn label_roles(api: Local, hosts: Vec<HostInfo>, every: Duration) {
    loop {
        for node in api.list(NODES, None) {
            let Some(name) = node.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            let Some(host) = hosts.iter().find(|h| h.node_name == name) else {
                continue;
            };
            let wanted = kubelet::role_labels(&host.role, json!({}));
            let labels = node
                .pointer("/metadata/labels")
                .cloned()
                .unwrap_or_default();
            let missing = wanted
                .as_object()
                .into_iter()
                .flatten()
                .any(|(key, _)| labels.get(key).is_none());
            if missing {
                let patch = json!({"metadata": {"labels": wanted}});
                let _ = api.merge(NODES, "", name, &patch, false);
            }
        }
        tokio::time::sleep(every).await;
    }
}
