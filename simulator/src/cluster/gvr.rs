//! The resources the simulated actors read and write, by group, version and plural.

/// A group, version and plural.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gvr {
    /// API group.
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural.
    pub plural: &'static str,
}

/// Nodes.
pub const NODES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "nodes",
};
/// Pods.
pub const PODS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "pods",
};
/// ServiceAccounts.
pub const SERVICE_ACCOUNTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "serviceaccounts",
};
/// Secrets.
pub const SECRETS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "secrets",
};
/// Namespaces.
pub const NAMESPACES: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "namespaces",
};
/// Events (core).
pub const EVENTS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "events",
};
/// Leases.
pub const LEASES: Gvr = Gvr {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
};
/// PodDisruptionBudgets.
pub const PDBS: Gvr = Gvr {
    group: "policy",
    version: "v1",
    plural: "poddisruptionbudgets",
};
/// CRDs.
pub const CRDS: Gvr = Gvr {
    group: "apiextensions.k8s.io",
    version: "v1",
    plural: "customresourcedefinitions",
};
/// Machines.
pub const MACHINES: Gvr = Gvr {
    group: "machine.openshift.io",
    version: "v1beta1",
    plural: "machines",
};
/// MachineHealthChecks.
pub const MHCS: Gvr = Gvr {
    group: "machine.openshift.io",
    version: "v1beta1",
    plural: "machinehealthchecks",
};
/// Cluster API Machines.
pub const CAPI_MACHINES: Gvr = Gvr {
    group: "cluster.x-k8s.io",
    version: "v1beta1",
    plural: "machines",
};
/// Cluster API Clusters.
pub const CAPI_CLUSTERS: Gvr = Gvr {
    group: "cluster.x-k8s.io",
    version: "v1beta1",
    plural: "clusters",
};
/// Cluster API MachineHealthChecks.
pub const CAPI_MHCS: Gvr = Gvr {
    group: "cluster.x-k8s.io",
    version: "v1beta1",
    plural: "machinehealthchecks",
};
/// metal3's Metal3Machines.
pub const METAL3_MACHINES: Gvr = Gvr {
    group: "infrastructure.cluster.x-k8s.io",
    version: "v1beta1",
    plural: "metal3machines",
};
/// baremend's Cluster API remediation templates.
pub const MACHINE_REMEDIATION_TEMPLATES: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "machineremediationtemplates",
};
/// baremend's Cluster API remediation requests.
pub const MACHINE_REMEDIATIONS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "machineremediations",
};
/// baremend's HostBmcs (a host's BMC, for hosts without a BareMetalHost).
pub const HOST_BMCS: Gvr = Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "hostbmcs",
};
/// BareMetalHosts.
pub const BMHS: Gvr = Gvr {
    group: "metal3.io",
    version: "v1alpha1",
    plural: "baremetalhosts",
};

/// OpenShift's ClusterVersion (cluster-scoped, the one named `version`).
pub const CLUSTER_VERSIONS: Gvr = Gvr {
    group: "config.openshift.io",
    version: "v1",
    plural: "clusterversions",
};

/// MachineConfigPools.
pub const MCPS: Gvr = Gvr {
    group: "machineconfiguration.openshift.io",
    version: "v1",
    plural: "machineconfigpools",
};
/// MachineConfigs.
pub const MCS: Gvr = Gvr {
    group: "machineconfiguration.openshift.io",
    version: "v1",
    plural: "machineconfigs",
};
/// MachineConfigNodes.
pub const MCNS: Gvr = Gvr {
    group: "machineconfiguration.openshift.io",
    version: "v1",
    plural: "machineconfignodes",
};
