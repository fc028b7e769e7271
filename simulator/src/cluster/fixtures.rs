//! Minimal CustomResourceDefinitions of the third-party kinds the simulated cluster serves,
//! written for baremend's tests (names, scopes, subresources and printer columns as in
//! OpenShift and metal3; schemas keep unknown fields).

use serde_json::{Value, json};

fn crd(
    group: &str,
    kind: &str,
    plural: &str,
    short: &[&str],
    scope: &str,
    version: &str,
    columns: Value,
) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "listKind": format!("{kind}List"), "plural": plural, "singular": kind.to_ascii_lowercase(), "shortNames": short},
            "scope": scope,
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "additionalPrinterColumns": columns,
            }],
        },
    })
}

/// Machine (machine.openshift.io/v1beta1).
pub fn machine_crd() -> Value {
    crd(
        "machine.openshift.io",
        "Machine",
        "machines",
        &["machine"],
        "Namespaced",
        "v1beta1",
        json!([
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Node", "type": "string", "jsonPath": ".status.nodeRef.name"},
            {"name": "ProviderID", "type": "string", "jsonPath": ".spec.providerID", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    )
}

/// MachineHealthCheck (machine.openshift.io/v1beta1).
pub fn machine_health_check_crd() -> Value {
    crd(
        "machine.openshift.io",
        "MachineHealthCheck",
        "machinehealthchecks",
        &["mhc", "mhcs"],
        "Namespaced",
        "v1beta1",
        json!([
            {"name": "MaxUnhealthy", "type": "string", "jsonPath": ".spec.maxUnhealthy"},
            {"name": "ExpectedMachines", "type": "integer", "jsonPath": ".status.expectedMachines"},
            {"name": "CurrentHealthy", "type": "integer", "jsonPath": ".status.currentHealthy"},
        ]),
    )
}

/// BareMetalHost (metal3.io/v1alpha1).
pub fn bare_metal_host_crd() -> Value {
    crd(
        "metal3.io",
        "BareMetalHost",
        "baremetalhosts",
        &["bmh", "bmhost"],
        "Namespaced",
        "v1alpha1",
        json!([
            {"name": "State", "type": "string", "jsonPath": ".status.provisioning.state"},
            {"name": "Consumer", "type": "string", "jsonPath": ".spec.consumerRef.name"},
            {"name": "Online", "type": "boolean", "jsonPath": ".spec.online"},
            {"name": "PoweredOn", "type": "boolean", "jsonPath": ".status.poweredOn"},
            {"name": "OperationalStatus", "type": "string", "jsonPath": ".status.operationalStatus", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    )
}

/// MachineConfigPool (machineconfiguration.openshift.io/v1, cluster-scoped).
pub fn machine_config_pool_crd() -> Value {
    crd(
        "machineconfiguration.openshift.io",
        "MachineConfigPool",
        "machineconfigpools",
        &["mcp"],
        "Cluster",
        "v1",
        json!([
            {"name": "Config", "type": "string", "jsonPath": ".status.configuration.name"},
            {"name": "MachineCount", "type": "integer", "jsonPath": ".status.machineCount"},
        ]),
    )
}

/// MachineConfig (machineconfiguration.openshift.io/v1, cluster-scoped).
pub fn machine_config_crd() -> Value {
    crd(
        "machineconfiguration.openshift.io",
        "MachineConfig",
        "machineconfigs",
        &["mc"],
        "Cluster",
        "v1",
        json!([
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    )
}

/// MachineConfigNode (machineconfiguration.openshift.io/v1, cluster-scoped).
pub fn machine_config_node_crd() -> Value {
    crd(
        "machineconfiguration.openshift.io",
        "MachineConfigNode",
        "machineconfignodes",
        &["mcn"],
        "Cluster",
        "v1",
        json!([
            {"name": "PoolName", "type": "string", "jsonPath": ".spec.pool.name"},
            {"name": "DesiredConfig", "type": "string", "jsonPath": ".spec.configVersion.desired"},
        ]),
    )
}

/// Metal3Remediation (infrastructure.cluster.x-k8s.io/v1beta1, cluster-api-provider-metal3).
pub fn metal3_remediation_crd() -> Value {
    crd(
        "infrastructure.cluster.x-k8s.io",
        "Metal3Remediation",
        "metal3remediations",
        &["m3r", "m3remediation"],
        "Namespaced",
        "v1beta1",
        json!([
            {"name": "Strategy", "type": "string", "jsonPath": ".spec.strategy.type"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    )
}

/// A medik8s remediation kind (`v1alpha1`, namespaced, named after the Node by
/// NodeHealthCheck).
fn medik8s_crd(group: &str, kind: &str, plural: &str, short: &[&str]) -> Value {
    crd(
        group,
        kind,
        plural,
        short,
        "Namespaced",
        "v1alpha1",
        json!([
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]),
    )
}

/// SelfNodeRemediation (self-node-remediation.medik8s.io/v1alpha1).
pub fn self_node_remediation_crd() -> Value {
    medik8s_crd(
        "self-node-remediation.medik8s.io",
        "SelfNodeRemediation",
        "selfnoderemediations",
        &["snr"],
    )
}

/// FenceAgentsRemediation (fence-agents-remediation.medik8s.io/v1alpha1).
pub fn fence_agents_remediation_crd() -> Value {
    medik8s_crd(
        "fence-agents-remediation.medik8s.io",
        "FenceAgentsRemediation",
        "fenceagentsremediations",
        &["far"],
    )
}

/// MachineDeletionRemediation (machine-deletion-remediation.medik8s.io/v1alpha1).
pub fn machine_deletion_remediation_crd() -> Value {
    medik8s_crd(
        "machine-deletion-remediation.medik8s.io",
        "MachineDeletionRemediation",
        "machinedeletionremediations",
        &["mdr"],
    )
}

/// The other remediators' kinds, which a cluster serves only when they are installed: not
/// in [`all`], installed by the tests that stage another remediator.
pub fn foreign_remediation_crds() -> Vec<Value> {
    vec![
        metal3_remediation_crd(),
        self_node_remediation_crd(),
        fence_agents_remediation_crd(),
        machine_deletion_remediation_crd(),
    ]
}

/// The Cluster API flavour's kinds: Cluster API's Cluster, Machine and MachineHealthCheck and metal3's
/// Metal3Machine (installed only in that flavour: OpenShift clusters do not serve them).
pub fn cluster_api_crds() -> Vec<Value> {
    let namespaced = |group, kind, plural, short, columns| {
        crd(group, kind, plural, short, "Namespaced", "v1beta1", columns)
    };
    vec![
        namespaced(
            "cluster.x-k8s.io",
            "Cluster",
            "clusters",
            &["cl"],
            json!([
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ]),
        ),
        namespaced(
            "cluster.x-k8s.io",
            "Machine",
            "machines",
            &["ma"],
            json!([
                {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"},
                {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeRef.name"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            ]),
        ),
        namespaced(
            "cluster.x-k8s.io",
            "MachineHealthCheck",
            "machinehealthchecks",
            &["mhc", "mhcs"],
            json!([{"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"}]),
        ),
        namespaced(
            "infrastructure.cluster.x-k8s.io",
            "Metal3Machine",
            "metal3machines",
            &["m3m"],
            json!([{"name": "ProviderID", "type": "string", "jsonPath": ".spec.providerID"}]),
        ),
    ]
}

/// OpenShift's ClusterVersion (config.openshift.io/v1, cluster-scoped; one object, `version`),
/// installed with the Machine Config Operator (an OpenShift cluster).
pub fn cluster_version_crd() -> Value {
    crd(
        "config.openshift.io",
        "ClusterVersion",
        "clusterversions",
        &[],
        "Cluster",
        "v1",
        json!([
            {"name": "Version", "type": "string", "jsonPath": ".status.desired.version"},
        ]),
    )
}

/// medik8s's NodeHealthCheck (cluster-scoped), installed only where the scenario asks for it.
pub fn node_health_check_crd() -> Value {
    crd(
        "remediation.medik8s.io",
        "NodeHealthCheck",
        "nodehealthchecks",
        &["nhc"],
        "Cluster",
        "v1alpha1",
        json!([{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]),
    )
}

/// Every fixture CRD.
pub fn all() -> Vec<Value> {
    vec![
        machine_crd(),
        machine_health_check_crd(),
        bare_metal_host_crd(),
        machine_config_pool_crd(),
        machine_config_crd(),
        machine_config_node_crd(),
    ]
}
