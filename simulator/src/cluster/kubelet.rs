//! A simulated kubelet per host: while the host is on, booted, and neither hung nor cut off,
//! it registers its Node (again, after a deletion), renews its Lease in `kube-node-lease`,
//! keeps the Node Ready, starts the pods bound to it and confirms their deletion. When the
//! host is off or a fault hits, it goes silent, as a real one does.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::local::{LEASES, Local, NODES, PODS, namespace_and_name};
use super::mco::disk::NodeDisk;
use super::timing::Timing;
use crate::apiserver::time::{format_micro_time, format_time};
use crate::host::{Power, SimHost};

/// How often a kubelet of a powered-off host looks whether the power came back.
const OFF_POLL: Duration = Duration::from_millis(50);

/// Faults of the node's OS (the BMC still answers).
#[derive(Debug, Default)]
pub struct NodeFaults {
    /// Kernel hang: nothing runs until the next power cycle.
    pub hung: AtomicBool,
    /// Dead NIC: the node cannot reach the API server until the next power cycle.
    pub nic_down: AtomicBool,
    /// Broken hardware (a dead disk, a failed DIMM): the OS never comes up, and power cycles
    /// do not help; only `recover` (someone fixed it) clears it.
    pub broken: AtomicBool,
    /// The kubelet's image pulls hang: pods bound here stay Pending, and a deletion asked
    /// for meanwhile waits too. Once let go, a pod that was deleted while its start was held
    /// still runs once before it is gone (its container was being created when the deletion
    /// came: the race a real kubelet has), so a helper does its work late.
    pub pods_held: AtomicBool,
    /// Extra time every boot takes while set, in milliseconds (a bare-metal POST, firmware
    /// updates): the Node is NotReady that much longer after each reboot.
    pub slow_boot_ms: AtomicU64,
}

impl NodeFaults {
    pub(crate) fn silent(&self) -> bool {
        self.hung.load(Ordering::Relaxed)
            || self.nic_down.load(Ordering::Relaxed)
            || self.broken.load(Ordering::Relaxed)
    }

    /// How long a boot takes: the timing's boot delay and any extra set by `slow_boot_ms`.
    pub fn boot_delay(&self, timing: &Timing) -> Duration {
        timing.boot_delay + Duration::from_millis(self.slow_boot_ms.load(Ordering::Relaxed))
    }

    /// Clears the faults a power cycle clears (not `broken`).
    fn clear(&self) {
        self.hung.store(false, Ordering::Relaxed);
        self.nic_down.store(false, Ordering::Relaxed);
    }
}

/// The machine a kubelet runs on.
pub struct Machine {
    /// The host (power).
    pub host: Arc<SimHost>,
    /// OS faults.
    pub faults: Arc<NodeFaults>,
    /// The disk, where the simulated MCO runs (helper pods work on it).
    pub disk: Option<Arc<NodeDisk>>,
}

/// Which Machine, if any, a Node belongs to: it decides the Node's Machine annotations and
/// `spec.providerID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineLink {
    /// An OpenShift Machine API Machine (`machine.openshift.io/machine`).
    MachineApi,
    /// A Cluster API Machine (`cluster.x-k8s.io/machine` and its cluster).
    ClusterApi,
    /// No Machine (platform none): no annotation, no provider ID, as a user-provisioned
    /// bare-metal Node has.
    None,
}

/// What a kubelet knows about its node.
#[derive(Debug, Clone)]
pub struct NodeIdentity {
    /// Node name (the host name inside its cluster).
    pub name: String,
    /// Its Machine's name in the (management) cluster: the Node name, except for a workload
    /// cluster's Node (`wc-0-worker-1` for `worker-1`).
    pub machine_name: String,
    /// Its Cluster API cluster (the Machine's `spec.clusterName`).
    pub cluster_name: String,
    /// `master` or `worker`.
    pub role: String,
    /// The Node's Machine.
    pub machine: MachineLink,
    /// Whether the kubelet labels its own Node with its role (`node-role.kubernetes.io/…`):
    /// OpenShift's kubelet does (the MCO passes `--node-labels=node-role.kubernetes.io/<role>`
    /// and OpenShift's NodeRestriction admits it); upstream NodeRestriction refuses a kubelet
    /// every `kubernetes.io` label outside its allowed set (kubernetes v1.36.3
    /// `plugin/pkg/admission/noderestriction/admission.go`, `getForbiddenLabels`), so on an
    /// upstream API server the installer labels each Node instead.
    pub labels_own_role: bool,
}

/// The boot ID of a host's `boot`-th boot, UUID-shaped like `/proc/sys/kernel/random/boot_id`:
/// another one after every power cycle, the same within one boot.
pub fn boot_id(host: &str, boot: usize) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (host, boot).hash(&mut hasher);
    let a = hasher.finish();
    boot.hash(&mut hasher);
    let b = hasher.finish();
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

fn node_info(boot_id: &str) -> Value {
    json!({"kubeletVersion": "v1.32.0", "operatingSystem": "linux", "architecture": "amd64", "bootID": boot_id})
}

/// The Node's annotations and spec as its Machine's controller leaves them.
fn machine_fields(identity: &NodeIdentity) -> (Value, Value) {
    // Set by the machine-api nodelink controller in OpenShift, or by Cluster API's machine
    // controller; the simulator has neither, so the kubelet writes them (machine and host
    // names are equal, and the Node's too outside workload clusters).
    let mut annotations = json!({"volumes.kubernetes.io/controller-managed-attach-detach": "true"});
    let mut spec = json!({});
    match identity.machine {
        MachineLink::ClusterApi => {
            annotations["cluster.x-k8s.io/machine"] = json!(identity.machine_name);
            annotations["cluster.x-k8s.io/cluster-namespace"] = json!(super::MACHINE_NAMESPACE);
            annotations["cluster.x-k8s.io/cluster-name"] = json!(identity.cluster_name);
        }
        MachineLink::MachineApi => {
            annotations["machine.openshift.io/machine"] =
                json!(format!("{}/{}", super::MACHINE_NAMESPACE, identity.name));
        }
        // Without a cloud provider nothing sets a provider ID on a user-provisioned Node.
        MachineLink::None => {}
    }
    // The Node's providerID is its Machine's: Cluster API's machine controller finds a
    // Machine's Node by it (cluster-api `internal/controllers/machine/
    // machine_controller_noderef.go`, the Node whose `spec.providerID` equals the Machine's),
    // and CAPM3 gives both `metal3://<namespace>/<host>/<Metal3Machine>`.
    match identity.machine {
        MachineLink::ClusterApi => {
            let ns = super::MACHINE_NAMESPACE;
            let name = &identity.machine_name;
            spec["providerID"] = json!(format!("metal3://{ns}/{name}/{name}"));
        }
        MachineLink::MachineApi => {
            spec["providerID"] = json!(format!(
                "baremetalhost:///{}/{}",
                super::MACHINE_NAMESPACE,
                identity.name
            ));
        }
        MachineLink::None => {}
    }
    (annotations, spec)
}

fn node_object(identity: &NodeIdentity, now: &str, boot_id: &str) -> Value {
    let mut labels = json!({
        "kubernetes.io/hostname": identity.name,
        "kubernetes.io/os": "linux",
        "beta.kubernetes.io/os": "linux",
    });
    if identity.labels_own_role {
        labels = role_labels(&identity.role, labels);
    }
    let (annotations, spec) = machine_fields(identity);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": identity.name, "labels": labels, "annotations": annotations},
        "spec": spec,
        "status": {
            "conditions": conditions(now, now),
            "addresses": [{"type": "Hostname", "address": identity.name}],
            "nodeInfo": node_info(boot_id),
            "capacity": {"cpu": "32", "memory": "131072Mi", "pods": "250"},
            "allocatable": {"cpu": "31500m", "memory": "130000Mi", "pods": "250"},
        },
    })
}

/// `labels` with a Node's role labels added (`node-role.kubernetes.io/<role>`, and
/// `…/control-plane` for a master).
pub fn role_labels(role: &str, mut labels: Value) -> Value {
    labels[format!("node-role.kubernetes.io/{role}")] = json!("");
    if role == "master" {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
    }
    labels
}

fn conditions(heartbeat: &str, transition: &str) -> Value {
    let condition = |kind: &str, status: &str, reason: &str| json!({"type": kind, "status": status, "reason": reason, "message": reason, "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition});
    json!([
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        condition("Ready", "True", "KubeletReady"),
    ])
}

/// Whether a Node's `Ready` condition is `True`.
pub fn ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Runs the kubelet of one host until the task is aborted.
pub async fn run(
    api: Local,
    machine: Machine,
    identity: NodeIdentity,
    timing: Timing,
    phase: Duration,
) {
    let Machine { host, faults, disk } = machine;
    tokio::time::sleep(phase).await;
    let mut booted_at: Option<Instant> = None;
    let mut last_status = Instant::now() - Duration::from_secs(3600);
    let mut offs_seen = host.power_offs();
    // A kubelet that starts posts its status at once, with this boot's ID.
    let mut boot_reported = false;
    let mut nap = Duration::ZERO;
    // Pods whose start was held (`pods_held`): their containers are being created.
    let mut starting = HashSet::new();
    loop {
        tokio::time::sleep(nap).await;
        nap = timing.heartbeat;
        // A power cycle clears OS faults and reboots, even one shorter than a heartbeat.
        let offs = host.power_offs();
        if offs != offs_seen {
            offs_seen = offs;
            booted_at = None;
            boot_reported = false;
            faults.clear();
        }
        if host.power() != Power::On {
            // Off: the next boot starts when the power comes back, so look often.
            nap = OFF_POLL.min(timing.heartbeat);
            continue;
        }
        let booted = *booted_at.get_or_insert_with(|| Instant::now() + faults.boot_delay(&timing));
        let now = Instant::now();
        if now < booted {
            // The kubelet starts when the OS is up, not at a heartbeat.
            nap = booted - now;
            continue;
        }
        if faults.silent() {
            continue;
        }
        // Per host: Nodes of two workload clusters may share a name.
        let boot = boot_id(&identity.machine_name, offs_seen);
        let now = format_time(api.wall_time());
        // Node status at start, then at most every 10 heartbeats unless it needs a change.
        let node = api.get_shared(NODES, "", &identity.name);
        match node {
            Err(error) if error.code == 404 => {
                if api
                    .create(NODES, "", node_object(&identity, &now, &boot))
                    .is_ok()
                {
                    boot_reported = true;
                }
                last_status = Instant::now();
            }
            Ok(node)
                if !boot_reported
                    || !ready(&node)
                    || last_status.elapsed() >= timing.heartbeat * 10 =>
            {
                let transition = if ready(&node) {
                    node.pointer("/status/conditions")
                        .and_then(Value::as_array)
                        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                        .and_then(|c| c["lastTransitionTime"].as_str())
                        .unwrap_or(&now)
                        .to_owned()
                } else {
                    now.clone()
                };
                let written = api.merge(
                    NODES,
                    "",
                    &identity.name,
                    &json!({"status": {"conditions": conditions(&now, &transition), "nodeInfo": node_info(&boot)}}),
                    true,
                );
                boot_reported |= written.is_ok();
                last_status = Instant::now();
            }
            _ => {}
        }
        renew_lease(&api, &identity.name, &timing);
        if faults.pods_held.load(Ordering::Relaxed) {
            note_held_pods(&api, &identity.name, &mut starting);
        } else {
            run_pods(&api, &identity.name, disk.as_deref(), &mut starting);
        }
    }
}

fn renew_lease(api: &Local, node: &str, timing: &Timing) {
    let renew = format_micro_time(api.wall_time());
    let seconds = timing.node_grace.as_secs().max(1);
    match api.get_shared(LEASES, "kube-node-lease", node) {
        Ok(_) => {
            let _ = api.merge(
                LEASES,
                "kube-node-lease",
                node,
                &json!({"spec": {"renewTime": renew}}),
                false,
            );
        }
        Err(_) => {
            let _ = api.create(
                LEASES,
                "kube-node-lease",
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": node}, "spec": {"holderIdentity": node, "leaseDurationSeconds": seconds, "renewTime": renew}}),
            );
        }
    }
}

fn pending(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Pending")
}

/// While starts are held: remembers the Pending pods, starts nothing, confirms nothing.
fn note_held_pods(api: &Local, node: &str, starting: &mut HashSet<(String, String)>) {
    for pod in api.list_selected(PODS, None, &format!("spec.nodeName={node}")) {
        if pending(&pod) {
            let (namespace, name) = namespace_and_name(&pod);
            starting.insert((namespace.to_owned(), name.to_owned()));
        }
    }
}

/// Starts pending pods bound here and confirms the deletion of terminating ones (a helper
/// whose start was held and that was deleted meanwhile does its work first).
fn run_pods(
    api: &Local,
    node: &str,
    disk: Option<&NodeDisk>,
    starting: &mut HashSet<(String, String)>,
) {
    for pod in api.list_selected(PODS, None, &format!("spec.nodeName={node}")) {
        let (namespace, name) = namespace_and_name(&pod);
        let was_starting = starting.remove(&(namespace.to_owned(), name.to_owned()));
        if pod.pointer("/metadata/deletionTimestamp").is_some() {
            if was_starting && pending(&pod) {
                let _ = disk.and_then(|d| super::mco::helper::run(api, &pod, d));
            }
            let _ = api.delete(PODS, namespace, name, Some(0));
        } else if pending(&pod) {
            // A helper that works on the node's files runs to completion, like a Job's pod.
            if let Some(status) = disk.and_then(|d| super::mco::helper::run(api, &pod, d)) {
                let _ = api.merge(PODS, namespace, name, &json!({"status": status}), true);
                continue;
            }
            let containers: Vec<Value> = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(|c| c.iter().map(|c| json!({"name": c["name"], "ready": true, "restartCount": 0, "image": c["image"], "started": true, "state": {"running": {}}})).collect())
                .unwrap_or_default();
            let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}, {"type": "PodScheduled", "status": "True"}], "containerStatuses": containers}});
            let _ = api.merge(PODS, namespace, name, &status, true);
        }
    }
}
