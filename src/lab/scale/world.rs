//! The server a benchmark runs on: the simulated API server with its world ([`LabCluster`]),
//! or a real control plane — etcd, kube-apiserver and kube-controller-manager of the release
//! `scripts/kubernetes.sh` builds — that the same simulated world populates and animates over
//! HTTPS with its actors' upstream credentials (`RemoteCluster`).
//!
//! Expected flow: [`World::simulated`] or [`World::real`] → the benchmark's reads, writes and
//! faults through one interface → dropped: the world's actors stop before its server.
//!
//! Guarantees: baremend is installed the same way on both (its CRDs, `deploy/`'s identity and
//! admission policies, a token the server issued for its ServiceAccount), and the controller's
//! API requests are counted on both: the simulated server records them itself, the real one
//! in its audit log (every request of the controller's ServiceAccount, as received).
//!
//! Caveats: a real plane holds one cluster only (a workload cluster would need a plane each);
//! its Nodes' leases are renewed over HTTPS by 1,000 simulated kubelets at Kubernetes' own
//! intervals, a load a real cluster's API server carries too.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use baremend_sim::cluster::local::{Gvr, Local};
use baremend_sim::cluster::on_server::{RemoteCluster, RemoteOptions};
use baremend_sim::cluster::remote::{Credential, Endpoint, Remote};
use baremend_sim::cluster::{ClusterSpec, HostInfo};
use baremend_sim::plane::{Binaries, ControlPlane, KUBERNETES_VERSION, PlaneOptions};
use baremend_sim::redfish::RedfishSim;
use kube::Client;
use serde_json::Value;

use super::invalid;
use super::requests::{ApiCounts, Traced};
use crate::Result;
use crate::lab::setup::{self, CONTROLLER_ACCOUNT, DEPLOY_NAMESPACE, LabCluster};
use crate::runtime::clock::{parse_rfc3339, since_epoch};

/// Which server a benchmark column ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ServerKind {
    /// baremend's simulated API server.
    Simulated,
    /// A real kube-apiserver with etcd and kube-controller-manager.
    Real,
}

impl ServerKind {
    /// Its part of a folder's name.
    pub(super) fn folder(self) -> &'static str {
        match self {
            ServerKind::Simulated => "simulated",
            ServerKind::Real => "real",
        }
    }

    /// Its name in the table's header.
    pub(super) fn label(self) -> String {
        match self {
            ServerKind::Simulated => "simulated API server".into(),
            ServerKind::Real => format!("real kube-apiserver {KUBERNETES_VERSION}"),
        }
    }
}

/// A real control plane and the simulated world on it.
pub(super) struct RealPlane {
    // Dropped in this order: the world's actors stop before the server they call.
    world: RemoteCluster,
    plane: ControlPlane,
    admin: Local,
    client: Client,
    controller_kubeconfig: String,
    audit: PathBuf,
}

/// The server and world of one benchmark column.
pub(super) enum World {
    /// The simulated API server.
    Simulated(Box<LabCluster>),
    /// A real control plane.
    Real(Box<RealPlane>),
}

/// The user the real API server's audit log records: the controller's ServiceAccount.
fn controller_user() -> String {
    format!("system:serviceaccount:{DEPLOY_NAMESPACE}:{CONTROLLER_ACCOUNT}")
}

impl World {
    /// The simulated API server with `spec`'s world, baremend installed.
    pub(super) async fn simulated(spec: ClusterSpec) -> Result<Self> {
        Ok(World::Simulated(Box::new(LabCluster::start(spec).await?)))
    }

    /// A real control plane (its binaries where `BAREMEND_KUBE_BIN` says) with `spec`'s
    /// world on it, baremend installed; returns with every Node Ready, or fails.
    pub(super) async fn real(spec: ClusterSpec) -> Result<Self> {
        let binaries = Binaries::locate()?;
        let options = PlaneOptions {
            audit_users: vec![controller_user()],
            ..PlaneOptions::default()
        };
        let plane = ControlPlane::start(&binaries, &std::env::temp_dir(), options).await?;
        println!(
            "  real control plane (etcd, kube-apiserver, kube-controller-manager {KUBERNETES_VERSION}) up in {:.1} s at {}",
            plane.started_in().as_secs_f64(),
            plane.url()
        );
        let endpoint = Endpoint {
            url: plane.url().to_owned(),
            ca_pem: plane.ca_pem().to_owned(),
        };
        let admin_credential = Credential::Certificate(plane.admin_identity().clone());
        let admin = Local::remote(
            Remote::new(&endpoint, &admin_credential)?,
            "admin",
            "baremend-lab",
        );
        let world = RemoteCluster::start(
            spec,
            endpoint,
            admin_credential,
            &plane,
            RemoteOptions::default(),
        )
        .await?;
        let hosts = world.hosts().len();
        if world.ready_nodes() != hosts {
            return Err(invalid(
                "the simulated world on the real control plane",
                format!(
                    "{} of {hosts} Nodes Ready after {:?}",
                    world.ready_nodes(),
                    world.spec().ready_timeout
                ),
            ));
        }
        let client = setup::client_of(&plane.admin_kubeconfig()).await?;
        let installed = setup::install(&client, &admin, world.spec().cluster_api, |token| {
            plane.kubeconfig_with_token(token)
        })
        .await?;
        let audit = plane
            .audit_log()
            .map(PathBuf::from)
            .ok_or_else(|| invalid("the real control plane", "started without an audit log"))?;
        Ok(World::Real(Box::new(RealPlane {
            world,
            plane,
            admin,
            client,
            controller_kubeconfig: installed.controller_kubeconfig,
            audit,
        })))
    }

    /// Which server.
    pub(super) fn kind(&self) -> ServerKind {
        match self {
            World::Simulated(_) => ServerKind::Simulated,
            World::Real(_) => ServerKind::Real,
        }
    }

    /// The administrator's reads and writes (the benchmark's own).
    pub(super) fn api(&self) -> &Local {
        match self {
            World::Simulated(lab) => &lab.api,
            World::Real(real) => &real.admin,
        }
    }

    /// The kubeconfig of the controller's ServiceAccount (our controllers' processes and the
    /// floors' run on it).
    pub(super) fn controller_kubeconfig(&self) -> &str {
        match self {
            World::Simulated(lab) => &lab.controller_kubeconfig,
            World::Real(real) => &real.controller_kubeconfig,
        }
    }

    /// Every host.
    pub(super) fn hosts(&self) -> &[HostInfo] {
        match self {
            World::Simulated(lab) => lab.cluster.hosts(),
            World::Real(real) => real.world.hosts(),
        }
    }

    /// Host `name`.
    pub(super) fn host(&self, name: &str) -> Option<&HostInfo> {
        self.hosts().iter().find(|h| h.name == name)
    }

    /// The Redfish service of every host.
    pub(super) fn redfish(&self) -> &RedfishSim {
        match self {
            World::Simulated(lab) => lab.cluster.redfish(),
            World::Real(real) => real.world.redfish(),
        }
    }

    /// The BMC password of every host.
    pub(super) fn bmc_password(&self) -> &str {
        match self {
            World::Simulated(lab) => lab.cluster.bmc_password(),
            World::Real(real) => real.world.bmc_password(),
        }
    }

    /// Hangs host `name`'s OS (its kubelet stops; the BMC still answers).
    pub(super) fn hang(&self, name: &str) -> Result<()> {
        let host = self
            .host(name)
            .ok_or_else(|| invalid(name, "no such host"))?;
        host.faults
            .hung
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// How many Nodes are Ready (the management cluster's, or the one cluster's).
    pub(super) fn ready_nodes(&self) -> usize {
        match self {
            World::Simulated(lab) => lab.cluster.ready_nodes(),
            World::Real(real) => real.world.ready_nodes(),
        }
    }

    /// Where the Node of a host of workload cluster `cluster` lives (None: in [`World::api`]).
    pub(super) fn workload_nodes(&self, cluster: &str) -> Option<Local> {
        match self {
            World::Simulated(lab) => lab
                .cluster
                .workload_cluster(cluster)
                .map(|c| Local::new(c.api_server().store().clone(), "lab")),
            World::Real(_) => None,
        }
    }

    /// Installs the policy `default` (the lab's: insecure BMCs allowed, `Remediate`).
    pub(super) async fn install_policy(&self, spec: Value) -> Result<()> {
        let client = match self {
            World::Simulated(lab) => &lab.client,
            World::Real(real) => &real.client,
        };
        setup::install_policy(client, spec).await
    }

    /// Sets or removes Machine `machine`'s external-remediation trigger.
    pub(super) fn set_trigger(&self, machine: &str, on: bool) -> Result<()> {
        setup::set_trigger(self.api(), machine, on)
    }

    /// Creates the empty template `baremend`.
    pub(super) fn empty_template(&self, templates: Gvr, namespace: &str) -> Result<()> {
        setup::empty_template(self.api(), templates, namespace)
    }

    /// Starts counting the controllers' API requests (the real server's audit log counts
    /// from its start; only the controller's account is in it).
    pub(super) fn record_requests(&self) {
        if let World::Simulated(lab) = self {
            lab.cluster.api_server().record_requests();
            for cluster in lab.cluster.workload_clusters() {
                cluster.api_server().record_requests();
            }
        }
    }

    /// The controllers' API requests so far.
    pub(super) fn api_counts(&self) -> ApiCounts {
        match self {
            World::Simulated(lab) => ApiCounts::of_lab(lab),
            World::Real(real) => {
                let events = audit_events(&real.audit);
                ApiCounts {
                    management: events.len() as u64,
                    management_watches: events.iter().filter(|e| e.watch).count() as u64,
                    ..ApiCounts::default()
                }
            }
        }
    }

    /// The controllers' API requests from `from` on, first to last.
    pub(super) fn timeline(&self, from: Instant) -> Vec<Traced> {
        match self {
            World::Simulated(lab) => super::requests::timeline(lab, from),
            World::Real(real) => {
                // The audit log's times are wall-clock: `from` as one.
                let wall_from = since_epoch(SystemTime::now()).saturating_sub(from.elapsed());
                audit_events(&real.audit)
                    .into_iter()
                    .filter(|e| e.at >= wall_from)
                    .map(|e| Traced {
                        after: e.at - wall_from,
                        took: None,
                        server: "management".into(),
                        method: e.verb,
                        path: e.uri,
                    })
                    .collect()
            }
        }
    }

    /// Stops the world's actors (each in the middle of a request finishes it first), then
    /// its server: nothing of it runs on after this.
    pub(super) async fn stop(self) {
        if let World::Real(real) = self {
            let RealPlane { world, plane, .. } = *real;
            world.stop().await;
            drop(plane);
        }
    }

    /// The real plane's start time, for the table (None on the simulated server).
    pub(super) fn plane_started_in(&self) -> Option<Duration> {
        match self {
            World::Simulated(_) => None,
            World::Real(real) => Some(real.plane.started_in()),
        }
    }
}

/// One request in the real server's audit log.
struct AuditEvent {
    /// When it was received, since the epoch.
    at: Duration,
    verb: String,
    uri: String,
    watch: bool,
}

/// The audit log's events, in the order the server wrote them (a line it is still writing,
/// or one that is not an event, is left out).
fn audit_events(path: &std::path::Path) -> Vec<AuditEvent> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["stage"] == "RequestReceived")
        .map(|event| {
            let verb = event["verb"].as_str().unwrap_or_default().to_owned();
            AuditEvent {
                at: parse_rfc3339(event["requestReceivedTimestamp"].as_str().unwrap_or("")),
                watch: verb == "watch",
                uri: event["requestURI"].as_str().unwrap_or_default().to_owned(),
                // Methods as the simulated server records them.
                verb: http_method(&verb).to_owned(),
            }
        })
        .collect()
}

/// The HTTP method of an audit verb.
fn http_method(verb: &str) -> &'static str {
    match verb {
        "get" | "list" | "watch" => "GET",
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_log_gives_each_received_request_once() {
        let dir = std::env::temp_dir().join(format!("baremend-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let lines = [
            r#"{"kind":"Event","stage":"RequestReceived","verb":"watch","requestURI":"/api/v1/nodes?watch=true","requestReceivedTimestamp":"2026-11-30T00:00:01.250000Z"}"#,
            r#"{"kind":"Event","stage":"RequestReceived","verb":"patch","requestURI":"/apis/baremend.io/v1alpha1/namespaces/m/remediations/w-1/status","requestReceivedTimestamp":"2026-11-30T00:00:02.000000Z"}"#,
            r#"{"kind":"Event","stage":"ResponseComplete","verb":"patch","requestURI":"/x","requestReceivedTimestamp":"2026-11-30T00:00:02.000000Z"}"#,
            r#"{"kind":"Event","stage":"RequestRec"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let events = audit_events(&path);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            events.len(),
            2,
            "a later stage and a half-written line are not requests"
        );
        assert!(events[0].watch);
        assert_eq!(events[1].verb, "PATCH");
        assert_eq!(
            events[1].at - events[0].at,
            Duration::from_millis(750),
            "times kept to the millisecond"
        );
        assert!(events[1].uri.ends_with("/status"));
    }
}
