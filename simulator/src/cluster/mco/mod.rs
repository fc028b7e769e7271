//! A simulated Machine Config Operator, as much of it as config drift and a pool's update
//! involve: rendered MachineConfigs and pools, a MachineConfigNode per node, a daemon per
//! node ([`mcd`]) and the drain controller, the node controller (a pool's new config, given
//! to `maxUnavailable` nodes at a time) and the pool status ([`mcc`]). The node's files live
//! on a simulated disk ([`disk`]) that tests drift and revert; [`SimMco::roll`] renders a
//! pool's config on a new OS image, as an upgrade does, so that every node reboots into it.

pub mod disk;
pub mod helper;
mod mcc;
pub mod mcd;
pub mod render;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use self::disk::NodeDisk;
use self::render::Rendered;
use super::HostInfo;
use super::local::{Local, MCNS, MCPS, MCS, NAMESPACES};
use super::timing::Timing;
use crate::apiserver::ApiError;

/// Node annotation: the rendered config the node is on.
pub const CURRENT_CONFIG: &str = "machineconfiguration.openshift.io/currentConfig";
/// Node annotation: the rendered config the node should be on.
pub const DESIRED_CONFIG: &str = "machineconfiguration.openshift.io/desiredConfig";
/// Node annotation: `Done`, `Working`, `Degraded`, `Unreconcilable`.
pub const STATE: &str = "machineconfiguration.openshift.io/state";
/// Node annotation: why Degraded.
pub const REASON: &str = "machineconfiguration.openshift.io/reason";
/// Node annotation: the daemon's drain or uncordon request.
pub const DESIRED_DRAIN: &str = "machineconfiguration.openshift.io/desiredDrain";
/// Node annotation: the request the drain controller carried out last.
pub const LAST_APPLIED_DRAIN: &str = "machineconfiguration.openshift.io/lastAppliedDrain";
/// Node annotation: `Rebooting` before a reboot.
pub const POST_CONFIG_ACTION: &str = "machineconfiguration.openshift.io/post-config-action";
/// The forcefile.
pub const FORCE_FILE: &str = "/run/machine-config-daemon-force";
/// Where the MCO's Events go.
pub const MCO_NAMESPACE: &str = "openshift-machine-config-operator";

/// Sets one condition of a node's MachineConfigNode (the transition time moves only when the
/// status changes).
pub fn set_mcn_condition(api: &Local, node: &str, kind: &str, status: &str, message: &str) {
    let Ok(mcn) = api.get(MCNS, "", node) else {
        return;
    };
    let mut conditions: Vec<Value> = mcn
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = crate::apiserver::time::format_time(api.wall_time());
    match conditions.iter_mut().find(|c| c["type"] == kind) {
        Some(c) if c["status"] == status && c["message"] == message => return,
        Some(c) => {
            if c["status"] != status {
                c["lastTransitionTime"] = json!(now);
            }
            c["status"] = json!(status);
            c["message"] = json!(message);
        }
        None => conditions.push(json!({"type": kind, "status": status, "message": message, "reason": "", "lastTransitionTime": now})),
    }
    let _ = api.merge(
        MCNS,
        "",
        node,
        &json!({"status": {"conditions": conditions}}),
        true,
    );
}

/// Every rendered config by name, as the daemons find the one a node is told to take.
pub type Configs = Arc<std::sync::Mutex<HashMap<String, Arc<Rendered>>>>;

/// The simulated MCO of a cluster.
#[derive(Debug, Clone)]
pub struct SimMco {
    /// Rendered config per pool (`master`, `worker`), as installed.
    pub rendered: HashMap<String, Arc<Rendered>>,
    /// Every rendered config, the installed ones and those of later rolls.
    pub configs: Configs,
    /// Disk per node.
    pub disks: HashMap<String, Arc<NodeDisk>>,
    /// Per node: its daemon is down (a crash-looping MCD pod) while set.
    pub daemon_down: HashMap<String, Arc<std::sync::atomic::AtomicBool>>,
}

impl SimMco {
    /// Creates the MCO's objects (rendered configs, pools with `maxUnavailable`, one
    /// MachineConfigNode per node) and writes each node's files.
    pub fn install(
        api: &Local,
        hosts: &[HostInfo],
        max_unavailable: &Value,
    ) -> Result<SimMco, ApiError> {
        api.create(NAMESPACES, "", json!({"metadata": {"name": MCO_NAMESPACE}}))?;
        let mut rendered = HashMap::new();
        for pool in ["master", "worker"] {
            let config = render::rendered(pool);
            api.create(MCS, "", config.object.clone())?;
            let pool_object = render::pool(&config, max_unavailable.clone());
            api.create(MCPS, "", pool_object)?;
            api.merge(
                MCPS,
                "",
                pool,
                &json!({"status": {"configuration": {"name": config.name}}}),
                true,
            )?;
            rendered.insert(pool.to_owned(), Arc::new(config));
        }
        let mut disks = HashMap::new();
        for host in hosts {
            let disk = Arc::new(NodeDisk::default());
            if let Some(config) = rendered.get(&host.role) {
                mcd::install(&disk, config);
                api.create(MCNS, "", json!({
                    "apiVersion": "machineconfiguration.openshift.io/v1",
                    "kind": "MachineConfigNode",
                    "metadata": {"name": host.name},
                    "spec": {"node": {"name": host.name}, "pool": {"name": host.role}, "configVersion": {"desired": config.name}},
                }))?;
            }
            disks.insert(host.name.clone(), disk);
        }
        let daemon_down = hosts
            .iter()
            .map(|h| (h.name.clone(), Arc::default()))
            .collect();
        let configs = rendered
            .values()
            .map(|c| (c.name.clone(), c.clone()))
            .collect();
        Ok(SimMco {
            rendered,
            configs: Arc::new(std::sync::Mutex::new(configs)),
            disks,
            daemon_down,
        })
    }

    /// Renders `pool`'s config on the OS image `image` (as an upgrade's new release does)
    /// and makes it the pool's target: the node controller then gives it to `maxUnavailable`
    /// nodes at a time, and each node's daemon drains, reboots into it and is Done. Returns
    /// the new config's name.
    pub fn roll(&self, api: &Local, pool: &str, image: &str) -> Result<String, ApiError> {
        let target = api.get(MCPS, "", pool)?;
        let current = target
            .pointer("/spec/configuration/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some(base) = self.config(&current) else {
            return Err(ApiError::no_route(pool));
        };
        let next = Arc::new(base.with_os_image(image));
        api.create(MCS, "", next.object.clone())?;
        if let Ok(mut configs) = self.configs.lock() {
            configs.insert(next.name.clone(), next.clone());
        }
        api.merge(
            MCPS,
            "",
            pool,
            &json!({"spec": {"configuration": {"name": next.name}}}),
            false,
        )?;
        Ok(next.name.clone())
    }

    /// A rendered config by name.
    pub fn config(&self, name: &str) -> Option<Arc<Rendered>> {
        self.configs.lock().ok()?.get(name).cloned()
    }

    /// Takes a node's daemon down (it does nothing, as a crash-looping pod) or back up.
    pub fn set_daemon_down(&self, node: &str, down: bool) {
        if let Some(flag) = self.daemon_down.get(node) {
            flag.store(down, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Starts a daemon per node and the controller.
    pub fn start(
        &self,
        accounts: &super::accounts::Accounts,
        hosts: &[HostInfo],
        timing: &Timing,
    ) -> Vec<JoinHandle<()>> {
        use super::accounts::Actor;
        let daemon_api = accounts.local(Actor::MachineConfigDaemon);
        let mut actors = Vec::new();
        for host in hosts {
            let (Some(config), Some(disk)) =
                (self.rendered.get(&host.role), self.disks.get(&host.name))
            else {
                continue;
            };
            let daemon = mcd::Daemon {
                name: host.name.clone(),
                host: host.host.clone(),
                faults: host.faults.clone(),
                disk: disk.clone(),
                rendered: config.clone(),
                configs: self.configs.clone(),
                down: self
                    .daemon_down
                    .get(&host.name)
                    .cloned()
                    .unwrap_or_default(),
                node_writer: accounts.kubelet(&host.name, "machine-config-daemon"),
            };
            actors.push(tokio::spawn(daemon.run(daemon_api.clone(), timing.clone())));
        }
        actors.push(tokio::spawn(mcc::run(
            accounts.local(Actor::MachineConfigController),
            timing.clone(),
        )));
        actors
    }
}
