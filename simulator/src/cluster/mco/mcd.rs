//! A simulated Machine Config Daemon per node, behaving as the real one does with drift:
//! - its drift monitor validates the disk against the node's rendered config and, on a
//!   mismatch, emits `ConfigDriftDetected` and sets `state=Degraded` with the MCD's reason
//!   text (MachineConfigNode `NodeDegraded=True`);
//! - while Degraded it retries with a growing backoff: a forcefile
//!   (`/run/machine-config-daemon-force`) is taken (deleted) and starts the re-apply —
//!   `desiredDrain=drain-<rendered>`, wait for the drain controller, rewrite every file,
//!   `post-config-action=Rebooting`, reboot through the simulated host, validate at boot,
//!   `desiredDrain=uncordon-<rendered>`, wait, `Done`; without a forcefile a disk that
//!   validates again heals without a drain or reboot; otherwise the reason gains the
//!   `unexpected on-disk state validating against <rendered>: ` prefix and
//!   `PreflightConfigDriftCheckFailed` is emitted.
//!
//! - told a new config (`desiredConfig` differs from `currentConfig`, while `Done`) it updates
//!   the node as the real daemon does: `state=Working`, the same drain, file rewrite and
//!   reboot into the new config, then `currentConfig` is the new one and `state=Done`.
//!
//! Nothing runs while the host is off or its OS is hung.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::disk::{NodeDisk, REGULAR, SYMLINK, SimFile};
use super::render::{Rendered, SKIPPED};
use super::{
    CURRENT_CONFIG, DESIRED_CONFIG, DESIRED_DRAIN, FORCE_FILE, LAST_APPLIED_DRAIN, MCO_NAMESPACE,
    POST_CONFIG_ACTION, REASON, STATE, set_mcn_condition,
};
use crate::cluster::NodeFaults;
use crate::cluster::local::{Local, NODES};
use crate::cluster::timing::Timing;
use crate::host::{Power, PowerAction, SimHost};

const COMPONENT: &str = "machineconfigdaemon";

/// Go's `%q` for the paths the simulator uses.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Go's `FileMode` text, then the decimal and octal permission bits, as the MCD prints them.
fn mode_text(st_mode: u32) -> String {
    let kind = if st_mode & 0o170_000 == SYMLINK {
        'L'
    } else {
        '-'
    };
    let perms = st_mode & 0o777;
    let mut text = String::from(kind);
    for shift in [6, 3, 0] {
        let bits = (perms >> shift) & 7;
        text.push(if bits & 4 != 0 { 'r' } else { '-' });
        text.push(if bits & 2 != 0 { 'w' } else { '-' });
        text.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    format!("{text}/{perms}/0{perms:o}")
}

/// The first way the disk differs from the config, in the MCD's words.
pub fn validate(disk: &NodeDisk, rendered: &Rendered) -> Option<String> {
    for (path, want) in &rendered.files {
        if SKIPPED.contains(&path.as_str()) {
            continue;
        }
        let Some(have) = disk.get(path) else {
            return Some(format!(
                "could not stat file {}: lstat {path}: no such file or directory",
                quoted(path)
            ));
        };
        if have.st_mode != want.st_mode {
            return Some(format!(
                "mode mismatch for file: {}; expected: {}; received: {}",
                quoted(path),
                mode_text(want.st_mode),
                mode_text(have.st_mode)
            ));
        }
        if have.bytes != want.bytes {
            return Some(format!("content mismatch for file {}", quoted(path)));
        }
    }
    for (unit, enabled) in &rendered.units {
        let actual = disk.unit_enabled(unit).unwrap_or(false);
        if actual != *enabled {
            return Some(format!(
                "unit {} expected enabled={enabled}, but systemd reports {}",
                quoted(unit),
                quoted(if actual { "enabled" } else { "disabled" })
            ));
        }
    }
    None
}

/// Writes every file and unit of the config.
pub fn install(disk: &NodeDisk, rendered: &Rendered) {
    for (path, file) in &rendered.files {
        disk.put(path, file.clone());
    }
    for (unit, enabled) in &rendered.units {
        disk.set_unit_enabled(unit, *enabled);
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Steady,
    Degraded {
        retry_at: Instant,
        backoff: Duration,
    },
    AwaitDrain,
    Rebooting {
        offs: usize,
    },
    Finishing,
}

/// One node's daemon.
pub struct Daemon {
    /// The node.
    pub name: String,
    /// The host (for reboots and power).
    pub host: Arc<SimHost>,
    /// The OS faults (a hung OS runs no daemon).
    pub faults: Arc<NodeFaults>,
    /// The disk.
    pub disk: Arc<NodeDisk>,
    /// The config the node is on (or updating to).
    pub rendered: Arc<Rendered>,
    /// Every rendered config by name (a new one arrives with a pool's update).
    pub configs: super::Configs,
    /// While set, the daemon is down and does nothing.
    pub down: Arc<std::sync::atomic::AtomicBool>,
    /// The daemon's Node writer: the kubelet's credentials (`pkg/daemon/writer.go` writes
    /// the Node's annotations with the kubelet's kubeconfig, so NodeRestriction applies).
    pub node_writer: Local,
}

impl Daemon {
    fn annotate(&self, annotations: Value) -> Option<Value> {
        self.node_writer
            .merge(
                NODES,
                "",
                &self.name,
                &json!({"metadata": {"annotations": annotations}}),
                false,
            )
            .ok()
    }

    fn event(&self, api: &Local, node: &Value, kind: &str, reason: &str, message: &str) {
        api.event_in(MCO_NAMESPACE, node, kind, reason, message, COMPONENT);
    }

    fn set_done(&self, api: &Local, node: &Value) {
        let rendered = &self.rendered.name;
        self.annotate(json!({CURRENT_CONFIG: rendered, STATE: "Done", REASON: ""}));
        set_mcn_condition(
            api,
            &self.name,
            "NodeDegraded",
            "False",
            &format!("Node {} upgrade succeeded", self.name),
        );
        set_mcn_condition(api, &self.name, "Updated", "True", "");
        self.event(
            api,
            node,
            "Normal",
            "NodeDone",
            &format!(
                "Setting node {}, currentConfig {rendered} to Done",
                self.name
            ),
        );
        self.event(
            api,
            node,
            "Normal",
            "ConfigDriftMonitorStarted",
            &format!("Config Drift Monitor started, watching against {rendered}"),
        );
    }

    fn degrade(&self, api: &Local, reason: &str) {
        self.annotate(json!({STATE: "Degraded", REASON: reason}));
        set_mcn_condition(
            api,
            &self.name,
            "NodeDegraded",
            "True",
            &format!("Node {} upgrade failure. {reason}", self.name),
        );
    }

    /// Asks the drain controller to drain the node for `config` (a drift re-apply's or an
    /// update's): the daemon then waits for it.
    fn ask_drain(&self, api: &Local, node: &Value, config: &str) -> Phase {
        set_mcn_condition(api, &self.name, "UpdatePrepared", "True", "");
        self.event(
            api,
            node,
            "Normal",
            "Drain",
            "Draining node to update config.",
        );
        self.annotate(json!({DESIRED_DRAIN: format!("drain-{config}")}));
        Phase::AwaitDrain
    }

    /// A retry's or a boot's validation failed: the reason names the rendered config.
    fn failed_validation(&self, api: &Local, node: &Value, event: &str, reason: &str) {
        let text = format!(
            "unexpected on-disk state validating against {}: {reason}",
            self.rendered.name
        );
        self.event(api, node, "Warning", event, &text);
        self.degrade(api, &text);
    }

    /// Runs until the task is aborted.
    pub async fn run(mut self, api: Local, timing: Timing) {
        let mut phase = Phase::Steady;
        let mut offs_seen = self.host.power_offs();
        let first_backoff = timing.mcd_period * 4;
        // The daemon is a pod: it runs once the OS is up (the kubelet's boot model).
        let mut up_at: Option<Instant> = Some(Instant::now());
        loop {
            tokio::time::sleep(timing.mcd_period).await;
            let offs = self.host.power_offs();
            if offs != offs_seen {
                offs_seen = offs;
                up_at = None;
                self.disk.boot();
            }
            if self.host.power() != Power::On
                || self.faults.silent()
                || self.down.load(std::sync::atomic::Ordering::Relaxed)
            {
                continue;
            }
            let up = *up_at.get_or_insert_with(|| Instant::now() + self.faults.boot_delay(&timing));
            if Instant::now() < up {
                continue;
            }
            let Ok(node) = api.get(NODES, "", &self.name) else {
                continue;
            };
            if !ready(&node) {
                continue;
            }
            let annotation = |key: &str| {
                node.pointer("/metadata/annotations")
                    .and_then(|a| a.get(key))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            let rendered = self.rendered.name.clone();
            if annotation(STATE).is_none() {
                // First start on this node: take the pool's config.
                self.annotate(json!({CURRENT_CONFIG: rendered, DESIRED_CONFIG: rendered, STATE: "Done", REASON: "", DESIRED_DRAIN: format!("uncordon-{rendered}"), LAST_APPLIED_DRAIN: format!("uncordon-{rendered}")}));
                set_mcn_condition(&api, &self.name, "NodeDegraded", "False", "");
                continue;
            }
            let now = Instant::now();
            let told = annotation(DESIRED_CONFIG).filter(|d| *d != rendered);
            if let (Phase::Steady, Some(desired)) = (phase, told)
                && annotation(STATE).as_deref() == Some("Done")
                && let Some(next) = self
                    .configs
                    .lock()
                    .ok()
                    .and_then(|c| c.get(&desired).cloned())
            {
                // An update: Working, then the drain, the files and the reboot of the drift
                // re-apply, into the new config.
                self.rendered = next;
                self.annotate(json!({STATE: "Working", REASON: ""}));
                set_mcn_condition(&api, &self.name, "Updated", "False", "");
                phase = self.ask_drain(&api, &node, &desired);
                continue;
            }
            phase = match phase {
                Phase::Steady => match validate(&self.disk, &self.rendered) {
                    Some(reason) if annotation(STATE).as_deref() == Some("Done") => {
                        self.event(&api, &node, "Warning", "ConfigDriftDetected", &reason);
                        self.degrade(&api, &reason);
                        Phase::Degraded {
                            retry_at: now + first_backoff,
                            backoff: first_backoff,
                        }
                    }
                    _ => Phase::Steady,
                },
                Phase::Degraded { retry_at, .. } if now < retry_at => phase,
                Phase::Degraded { backoff, .. } => {
                    if self.disk.remove(FORCE_FILE) {
                        self.ask_drain(&api, &node, &rendered)
                    } else {
                        match validate(&self.disk, &self.rendered) {
                            None => {
                                // Path A: the disk is right again; a rebootless "update".
                                install(&self.disk, &self.rendered);
                                self.set_done(&api, &node);
                                Phase::Steady
                            }
                            Some(reason) => {
                                self.failed_validation(
                                    &api,
                                    &node,
                                    "PreflightConfigDriftCheckFailed",
                                    &reason,
                                );
                                let backoff = (backoff * 2).min(timing.mcd_max_backoff);
                                Phase::Degraded {
                                    retry_at: now + backoff,
                                    backoff,
                                }
                            }
                        }
                    }
                }
                Phase::AwaitDrain => {
                    if annotation(LAST_APPLIED_DRAIN) == Some(format!("drain-{rendered}")) {
                        install(&self.disk, &self.rendered);
                        self.annotate(json!({POST_CONFIG_ACTION: "Rebooting"}));
                        self.event(
                            &api,
                            &node,
                            "Normal",
                            "Reboot",
                            "Node will reboot into config",
                        );
                        let offs = self.host.power_offs();
                        self.host.request(PowerAction::ForceRestart);
                        Phase::Rebooting { offs }
                    } else {
                        phase
                    }
                }
                Phase::Rebooting { offs } if offs == offs_seen => phase,
                Phase::Rebooting { .. } => {
                    self.annotate(json!({POST_CONFIG_ACTION: ""}));
                    set_mcn_condition(&api, &self.name, "RebootedNode", "True", "");
                    match validate(&self.disk, &self.rendered) {
                        None => {
                            self.annotate(json!({DESIRED_DRAIN: format!("uncordon-{rendered}")}));
                            Phase::Finishing
                        }
                        Some(reason) => {
                            self.failed_validation(
                                &api,
                                &node,
                                "OnDiskStateValidationFailed",
                                &reason,
                            );
                            Phase::Degraded {
                                retry_at: now + first_backoff,
                                backoff: first_backoff,
                            }
                        }
                    }
                }
                Phase::Finishing => {
                    if annotation(LAST_APPLIED_DRAIN) == Some(format!("uncordon-{rendered}")) {
                        self.set_done(&api, &node);
                        Phase::Steady
                    } else {
                        phase
                    }
                }
            };
        }
    }
}

/// Whether a Node's Ready condition is True.
pub(super) fn ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A file as drift tests write it.
pub fn drifted_file(bytes: &[u8], mode: u32) -> SimFile {
    SimFile {
        bytes: bytes.to_vec(),
        st_mode: REGULAR | mode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::mco::render::rendered;

    #[test]
    fn validation_reports_as_the_mcd_does() {
        let config = rendered("worker");
        let disk = NodeDisk::default();
        install(&disk, &config);
        assert_eq!(validate(&disk, &config), None);
        disk.put("/etc/demo/rules.json", drifted_file(b"{}", 0o644));
        assert_eq!(
            validate(&disk, &config).unwrap(),
            r#"content mismatch for file "/etc/demo/rules.json""#
        );
        install(&disk, &config);
        disk.chmod("/etc/sysctl.d/90-demo.conf", 0o777);
        assert_eq!(
            validate(&disk, &config).unwrap(),
            r#"mode mismatch for file: "/etc/sysctl.d/90-demo.conf"; expected: -rw-r--r--/420/0644; received: -rwxrwxrwx/511/0777"#
        );
        install(&disk, &config);
        disk.remove("/etc/demo/registry.key");
        assert!(
            validate(&disk, &config)
                .unwrap()
                .starts_with(r#"could not stat file "/etc/demo/registry.key""#)
        );
        install(&disk, &config);
        disk.set_unit_enabled("demo-agent.service", false);
        assert_eq!(
            validate(&disk, &config).unwrap(),
            r#"unit "demo-agent.service" expected enabled=true, but systemd reports "disabled""#
        );
        install(&disk, &config);
        // The skip list is not validated.
        disk.remove("/etc/kubernetes/kubelet-ca.crt");
        assert_eq!(validate(&disk, &config), None);
    }
}
