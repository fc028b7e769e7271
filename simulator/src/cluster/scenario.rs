//! Scenario files (YAML): the shape of a simulated cluster and its timing.
//!
//! ```yaml
//! masters: 3
//! workers: 3
//! ipmi: false            # also serve every host over IPMI
//! bmhUsesIpmi: false     # BareMetalHosts point at the IPMI address instead of Redfish
//! maxUnhealthy: "40%"
//! remediationTemplate: baremend   # the MHC creates MachineRemediation requests from it
//! clusterApi: false      # cluster.x-k8s.io Machines and Metal3Machines, a Cluster API MHC
//! workloadClusters: 0    # with clusterApi: a management API server and N workload ones
//! nodeHealthCheck: false # a medik8s NodeHealthCheck instead of the MachineHealthCheck
//! platformNone: false    # Nodes and HostBmcs only: no Machines, BareMetalHosts, BMO or MHC
//! escalationTimeout: 60s # its timeout for baremend's step
//! bmoVersion: [0, 14]    # 0.13 and older drop suffixed reboot keys entering (de)provisioning
//! hostsDetached: false   # every BareMetalHost registered detached (the BMO leaves them alone)
//! timing:
//!   powerDelay: 1500ms
//!   bootDelay: 2s
//!   heartbeat: 250ms
//!   nodeGrace: 1500ms
//!   unhealthyTimeout: 1s
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::timing::Timing;
use crate::apiserver::ApiServerConfig;

/// The shape of a simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Control-plane hosts.
    pub masters: usize,
    /// Worker hosts.
    pub workers: usize,
    /// Serve the API over HTTPS.
    pub tls: bool,
    /// Serve every host over IPMI too.
    pub ipmi: bool,
    /// Point BareMetalHosts at the IPMI address.
    pub bmh_uses_ipmi: bool,
    /// The workers' MachineHealthCheck `maxUnhealthy`.
    pub max_unhealthy: String,
    /// The BMC password of every host.
    pub bmc_password: String,
    /// How long `start` waits for every Node to be Ready.
    #[serde(with = "humantime_ms")]
    pub ready_timeout: Duration,
    /// Every interval and delay.
    #[serde(rename = "timing")]
    pub timing: TimingSpec,
    /// Seeds the pseudo-random choices (kubelet heartbeat phases), so runs repeat.
    pub seed: u64,
    /// Pods on the workers.
    pub workloads: Workloads,
    /// Faults applied at given times after start.
    pub faults: Vec<TimedFault>,
    /// The Kubernetes version `/version` reports, `[major, minor]` (e.g. an old cluster
    /// without the out-of-service taint: `[1, 27]`).
    pub kubernetes_version: (u32, u32),
    /// Run a Machine Config Operator (pools, rendered configs, a daemon per node, the drain
    /// and node controllers), for config-drift and pool-update scenarios; an OpenShift
    /// cluster, so with its ClusterVersion `version` too.
    pub mco: bool,
    /// The pools' `maxUnavailable` (an integer or a percentage).
    pub mco_max_unavailable: serde_json::Value,
    /// The workers' MachineHealthCheck names this baremend `MachineRemediationTemplate` (in
    /// the Machines' namespace) in `spec.remediationTemplate` and asks for remediation with a
    /// request object instead of the `external-baremetal` annotation. None: the annotation.
    pub remediation_template: Option<String>,
    /// The Cluster API flavour: Machines of `cluster.x-k8s.io/v1beta1` with metal3's
    /// Metal3Machines between them and their BareMetalHosts, and a Cluster API
    /// MachineHealthCheck for the workers naming the `MachineRemediationTemplate`
    /// `remediationTemplate` (`baremend` when unset). Off: OpenShift's Machine API.
    pub cluster_api: bool,
    /// With `clusterApi`: how many workload clusters (`wc-0`…) the management cluster runs,
    /// each its own API server with `masters` + `workers` hosts whose Nodes live there, its
    /// Cluster and kubeconfig Secret in the management cluster. 0: one self-hosted cluster.
    pub workload_clusters: usize,
    /// A medik8s NodeHealthCheck for the workers instead of the MachineHealthCheck: its
    /// escalating remediations are baremend's `NodeRemediationTemplate` `baremend` (in the
    /// namespace `workload-availability`) for `escalationTimeout`, then a
    /// MachineDeletionRemediation (a kind the simulated cluster does not serve).
    pub node_health_check: bool,
    /// The NodeHealthCheck's timeout for baremend's step.
    #[serde(with = "humantime_ms")]
    pub escalation_timeout: Duration,
    /// The platform-none (user-provisioned) flavour: Nodes without any Machine — no Machines,
    /// Metal3Machines, BareMetalHosts, BareMetal Operator or MachineHealthCheck, no Machine
    /// annotation and no `spec.providerID` on the Nodes. Each host's BMC is described by a
    /// baremend `HostBmc` naming its Node, beside its credentials Secret, in
    /// [`super::MACHINE_NAMESPACE`]: the Secrets exist from the start, the HostBmcs once
    /// baremend's CRD is served ([`super::SimCluster::create_host_bmcs`]). Meant with
    /// `nodeHealthCheck` (the only health check that watches Nodes without Machines); see
    /// [`ClusterSpec::validate`] for what it cannot go with.
    pub platform_none: bool,
    /// The BareMetal Operator version `[major, minor]` the simulated one behaves as: 0.13 and
    /// older drop the suffixed reboot keys too on entering inspecting, provisioning or
    /// deprovisioning (fixed in 0.14). Default: 0.14, the current behaviour.
    pub bmo_version: (u32, u32),
    /// Register every BareMetalHost detached (`baremetalhost.metal3.io/detached`, and the
    /// status the BareMetal Operator gives a detached host): the operator holds no BMC
    /// connection for any of them, as for hosts an operator detached before a direct fencer
    /// takes over. The scale benchmark's tens of thousands of hosts need it: one process
    /// holding both ends of a BMC connection per host would pass the open-files limit.
    pub hosts_detached: bool,
    /// Run OpenShift's legacy bare-metal remediation (cluster-api-provider-baremetal's machine
    /// actuator, [`super::legacy`]) as IPI bare metal does, where it has no off switch: it
    /// power-cycles every Machine carrying `host.metal3.io/external-remediation`. Only for
    /// the machine API flavour with BareMetalHosts. Off by default: the other scenarios model
    /// clusters whose Machines the actuator does not manage.
    pub legacy_actuator: bool,
    /// Create the cluster's own health check (the workers' MachineHealthCheck, or the
    /// NodeHealthCheck); false when the user installs theirs (baremend's `deploy/`), which
    /// the simulated health-check controllers act on all the same.
    pub health_checks: bool,
}

/// Pods placed on the workers, so that drains and evictions meet real PDBs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Workloads {
    /// Pods per worker (a replicated app spread over the workers).
    pub pods_per_worker: usize,
    /// A PodDisruptionBudget with this `minAvailable` covers the app (none when absent).
    pub pdb_min_available: Option<usize>,
}

impl Default for Workloads {
    fn default() -> Self {
        Workloads {
            pods_per_worker: 2,
            pdb_min_available: None,
        }
    }
}

/// One fault of a scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TimedFault {
    /// When, after the cluster is up.
    #[serde(with = "humantime_ms")]
    pub at: Duration,
    /// `hang`, `nic-down`, `broken` or `recover` (a node); `bmc-stuck`, `bmc-unreachable`, `bmc-clear`
    /// (a host's BMC); `workloadApiDown`, `workloadApiUp` (a workload cluster's API server).
    pub fault: String,
    /// The host (its management-side name), or the workload cluster (`wc-0`).
    pub target: String,
}

/// The fault that makes a workload cluster's API server unreachable to its clients.
pub const WORKLOAD_API_DOWN: &str = "workloadApiDown";
/// The fault that makes it reachable again.
pub const WORKLOAD_API_UP: &str = "workloadApiUp";
/// The most workload clusters a spec may ask for (each is an API server with its own port).
pub const MAX_WORKLOAD_CLUSTERS: usize = 200;

/// Timing in a scenario file (camelCase keys over [`Timing`]).
pub type TimingSpec = Timing;

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            masters: 3,
            workers: 3,
            tls: true,
            ipmi: false,
            bmh_uses_ipmi: false,
            max_unhealthy: "40%".into(),
            bmc_password: "sim-bmc-password".into(),
            ready_timeout: Duration::from_secs(30),
            timing: Timing::default(),
            seed: 1,
            workloads: Workloads::default(),
            faults: Vec::new(),
            kubernetes_version: ApiServerConfig::default().kubernetes_version,
            mco: false,
            mco_max_unavailable: serde_json::json!(1),
            remediation_template: None,
            cluster_api: false,
            workload_clusters: 0,
            node_health_check: false,
            escalation_timeout: Duration::from_secs(60),
            platform_none: false,
            bmo_version: (0, 14),
            hosts_detached: false,
            legacy_actuator: false,
            health_checks: true,
        }
    }
}

impl ClusterSpec {
    /// Parses a scenario; unknown keys and unknown faults are errors, so a typo never goes
    /// unnoticed.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        let spec: ClusterSpec =
            serde_yaml::from_str(text).map_err(|e| format!("invalid scenario: {e}"))?;
        for fault in &spec.faults {
            if !matches!(
                fault.fault.as_str(),
                "hang"
                    | "nic-down"
                    | "broken"
                    | "recover"
                    | "bmc-stuck"
                    | "bmc-unreachable"
                    | "bmc-clear"
                    | WORKLOAD_API_DOWN
                    | WORKLOAD_API_UP
            ) {
                return Err(format!("invalid scenario: unknown fault {:?}", fault.fault));
            }
        }
        spec.validate()
            .map_err(|reason| format!("invalid scenario: {reason}"))?;
        Ok(spec)
    }

    /// How the simulated BareMetal Operator behaves for [`ClusterSpec::bmo_version`].
    pub fn bmo_options(&self) -> super::BmoOptions {
        super::BmoOptions {
            drops_suffixed_reboot_keys: self.bmo_version <= (0, 13),
        }
    }

    /// The actors with an upstream account that a cluster of this flavour runs.
    pub fn actors(&self) -> Vec<super::accounts::Actor> {
        use super::accounts::Actor;
        let mut actors = vec![Actor::ControllerManager, Actor::NodeLifecycle];
        if !self.platform_none {
            actors.push(Actor::BareMetalOperator);
            actors.push(if self.cluster_api {
                Actor::ClusterApi
            } else {
                Actor::MachineApi
            });
        }
        if self.legacy_actuator {
            actors.push(Actor::MachineController);
        }
        if self.node_health_check {
            actors.push(Actor::NodeHealthCheck);
        }
        if self.mco {
            actors.extend([Actor::MachineConfigController, Actor::MachineConfigDaemon]);
        }
        actors
    }

    /// The workload clusters' names: `wc-0`…`wc-{N-1}`.
    pub fn workload_cluster_names(&self) -> Vec<String> {
        (0..self.workload_clusters)
            .map(|k| format!("wc-{k}"))
            .collect()
    }

    /// Which Machine the Nodes of this flavour belong to.
    pub fn machine_link(&self) -> super::MachineLink {
        match (self.platform_none, self.cluster_api) {
            (true, _) => super::MachineLink::None,
            (false, true) => super::MachineLink::ClusterApi,
            (false, false) => super::MachineLink::MachineApi,
        }
    }

    /// Refuses the flavour combinations that describe no cluster: a platform-none cluster has
    /// no Machines, so no Cluster API flavour and no MachineHealthCheck whose template
    /// (`remediationTemplate`) could be named. A platform-none cluster without
    /// `nodeHealthCheck` is allowed: nothing there asks for remediation by itself, and a test
    /// (or a user's own health checker) creates the `NodeRemediation` requests.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_workload_clusters()?;
        if self.legacy_actuator && (self.cluster_api || self.platform_none) {
            return Err(
                "legacyActuator is OpenShift's machine API on IPI bare metal: not with clusterApi or platformNone"
                    .into(),
            );
        }
        if !self.platform_none {
            return Ok(());
        }
        if self.cluster_api {
            return Err(
                "platformNone has no Machines, so it cannot be the Cluster API flavour (clusterApi)"
                    .into(),
            );
        }
        if let Some(template) = &self.remediation_template {
            return Err(format!(
                "platformNone has no MachineHealthCheck to name the remediationTemplate {template:?}; a NodeHealthCheck (nodeHealthCheck) names baremend's NodeRemediationTemplate"
            ));
        }
        Ok(())
    }
}

impl ClusterSpec {
    /// Workload clusters are Cluster API's: they need `clusterApi`, and the flavours that run
    /// in the one cluster holding the Nodes (the MCO, a NodeHealthCheck) are not simulated
    /// across clusters.
    fn validate_workload_clusters(&self) -> Result<(), String> {
        let count = self.workload_clusters;
        let names = self.workload_cluster_names();
        for fault in &self.faults {
            if matches!(fault.fault.as_str(), WORKLOAD_API_DOWN | WORKLOAD_API_UP)
                && !names.contains(&fault.target)
            {
                return Err(format!(
                    "fault {} names {:?}, which is not a workload cluster (workloadClusters: {count}: wc-0…)",
                    fault.fault, fault.target
                ));
            }
        }
        if count == 0 {
            return Ok(());
        }
        if !self.cluster_api {
            return Err(format!(
                "workloadClusters: {count} needs clusterApi: true (workload clusters are the Cluster API management model)"
            ));
        }
        if count > MAX_WORKLOAD_CLUSTERS {
            return Err(format!(
                "workloadClusters: {count} is more than {MAX_WORKLOAD_CLUSTERS}"
            ));
        }
        if self.mco || self.node_health_check {
            return Err(format!(
                "workloadClusters: {count} cannot go with mco or nodeHealthCheck (they run in a single cluster)"
            ));
        }
        Ok(())
    }
}

mod humantime_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{}ms", value.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::super::timing::parse_go_duration(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a duration")))
    }
}

/// Applies a scenario's faults at their times (after the cluster is up); `workloads`: each
/// workload cluster's name and API server switch.
pub(crate) async fn play_faults(
    mut faults: Vec<TimedFault>,
    hosts: Vec<super::HostInfo>,
    workloads: Vec<(String, crate::apiserver::Reachability)>,
) {
    use std::sync::atomic::Ordering;

    use crate::host::Faults;

    faults.sort_by_key(|f| f.at);
    let started = tokio::time::Instant::now();
    for fault in faults {
        tokio::time::sleep_until(started + fault.at).await;
        if matches!(fault.fault.as_str(), WORKLOAD_API_DOWN | WORKLOAD_API_UP) {
            match workloads.iter().find(|(name, _)| *name == fault.target) {
                Some((_, switch)) => switch.set(fault.fault == WORKLOAD_API_UP),
                None => {
                    tracing::warn!(target = %fault.target, "scenario fault for an unknown workload cluster")
                }
            }
            tracing::info!(fault = %fault.fault, target = %fault.target, "scenario fault applied");
            continue;
        }
        let Some(host) = hosts.iter().find(|h| h.name == fault.target) else {
            tracing::warn!(target = %fault.target, "scenario fault for an unknown host");
            continue;
        };
        match fault.fault.as_str() {
            "hang" => host.faults.hung.store(true, Ordering::Relaxed),
            "nic-down" => host.faults.nic_down.store(true, Ordering::Relaxed),
            "broken" => host.faults.broken.store(true, Ordering::Relaxed),
            "recover" => {
                host.faults.hung.store(false, Ordering::Relaxed);
                host.faults.nic_down.store(false, Ordering::Relaxed);
                host.faults.broken.store(false, Ordering::Relaxed);
            }
            "bmc-stuck" => host.host.set_faults(Faults {
                stuck_power: true,
                ..host.host.faults()
            }),
            "bmc-unreachable" => host.host.set_faults(Faults {
                drop_connections: true,
                ..host.host.faults()
            }),
            _ => host.host.set_faults(Faults::default()),
        }
        tracing::info!(fault = %fault.fault, target = %fault.target, "scenario fault applied");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_typos_are_refused() {
        let spec = ClusterSpec::from_yaml(
            "masters: 1\nworkers: 2\ntiming:\n  powerDelay: 200ms\n  nodeGrace: 2s\n",
        )
        .unwrap();
        assert_eq!((spec.masters, spec.workers), (1, 2));
        assert_eq!(spec.timing.power_delay, Duration::from_millis(200));
        assert_eq!(spec.timing.node_grace, Duration::from_secs(2));
        assert!(ClusterSpec::from_yaml("workerz: 2\n").is_err());
        assert!(ClusterSpec::from_yaml("timing: {powerDelay: soon}\n").is_err());
        let faults =
            ClusterSpec::from_yaml("faults:\n- {at: 5s, fault: hang, target: worker-0}\n").unwrap();
        assert_eq!(faults.faults[0].at, Duration::from_secs(5));
        assert!(
            ClusterSpec::from_yaml("faults:\n- {at: 5s, fault: explode, target: worker-0}\n")
                .is_err()
        );
    }

    #[test]
    fn the_health_check_scenarios_parse_with_their_health_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let read = |name: &str| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            ClusterSpec::from_yaml(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        let capi = read("capi.yaml");
        assert!(capi.cluster_api && !capi.node_health_check);
        assert_eq!(capi.workload_clusters, 0);
        assert_eq!(capi.remediation_template.as_deref(), Some("baremend"));
        let workload = read("capi-workload.yaml");
        assert!(workload.cluster_api && workload.workload_clusters == 1);
        assert_eq!((workload.masters, workload.workers), (1, 3));
        assert_eq!(workload.timing, capi.timing);
        assert_eq!(workload.faults[0].target, "wc-0-worker-0");
        let fleet = read("capi-fleet.yaml");
        assert!(fleet.cluster_api && fleet.workload_clusters == 3);
        assert_eq!((fleet.masters, fleet.workers), (1, 4));
        assert_eq!(fleet.max_unhealthy, "100%");
        let hung: Vec<&str> = fleet.faults.iter().map(|f| f.target.as_str()).collect();
        assert_eq!(
            hung,
            [
                "wc-0-worker-1",
                "wc-1-worker-1",
                "wc-2-worker-1",
                "wc-2-worker-2",
                "wc-2-worker-3"
            ]
        );
        let nhc = read("nhc.yaml");
        assert!(nhc.node_health_check && !nhc.cluster_api);
        assert_eq!(nhc.escalation_timeout, Duration::from_secs(30));
        assert_eq!(nhc.faults.len(), 2);
        let upi = read("nhc-upi.yaml");
        assert!(upi.platform_none && upi.node_health_check && !upi.cluster_api);
        assert_eq!(upi.remediation_template, None);
        assert_eq!(upi.escalation_timeout, Duration::from_secs(30));
        assert_eq!(upi.faults.len(), 1);
    }

    #[test]
    fn workload_clusters_need_the_cluster_api_flavour() {
        let refused = ClusterSpec::from_yaml("workloadClusters: 1\n").unwrap_err();
        assert!(refused.contains("clusterApi"), "{refused}");
        let spec = ClusterSpec {
            workload_clusters: 1,
            ..ClusterSpec::default()
        };
        assert!(spec.validate().is_err());
        assert!(ClusterSpec::from_yaml("clusterApi: true\nworkloadClusters: 2\n").is_ok());
        let mco = ClusterSpec::from_yaml("clusterApi: true\nworkloadClusters: 1\nmco: true\n");
        assert!(mco.unwrap_err().contains("mco"));
        let many = ClusterSpec::from_yaml("clusterApi: true\nworkloadClusters: 100000\n");
        assert!(many.unwrap_err().contains("more than"));
        // A workload fault must name a workload cluster.
        let fault = "faults:\n- {at: 1s, fault: workloadApiDown, target: wc-1}\n";
        let one =
            ClusterSpec::from_yaml(&format!("clusterApi: true\nworkloadClusters: 1\n{fault}"));
        assert!(one.unwrap_err().contains("wc-1"));
        let two =
            ClusterSpec::from_yaml(&format!("clusterApi: true\nworkloadClusters: 2\n{fault}"));
        assert_eq!(two.unwrap().faults[0].fault, WORKLOAD_API_DOWN);
        assert_eq!(ClusterSpec::default().workload_clusters, 0);
    }

    #[test]
    fn platform_none_refuses_the_machine_flavours() {
        let upi = ClusterSpec::from_yaml("platformNone: true\nnodeHealthCheck: true\n").unwrap();
        assert!(upi.platform_none && !ClusterSpec::default().platform_none);
        let capi = ClusterSpec::from_yaml("platformNone: true\nclusterApi: true\n").unwrap_err();
        assert!(capi.contains("clusterApi"), "{capi}");
        let template =
            ClusterSpec::from_yaml("platformNone: true\nremediationTemplate: baremend\n")
                .unwrap_err();
        assert!(template.contains("remediationTemplate"), "{template}");
        // Without a NodeHealthCheck: allowed, the requests come from elsewhere.
        assert!(ClusterSpec::from_yaml("platformNone: true\n").is_ok());
        // The same rules when a spec is built in code.
        let spec = ClusterSpec {
            platform_none: true,
            cluster_api: true,
            ..ClusterSpec::default()
        };
        assert!(spec.validate().is_err());
    }
}
