//! The remediation end-to-end tests' own kit: the lab with the controller started as those
//! tests configure it, and the checks they share on Remediations, Machines, Nodes and Events.

use baremend::api::{Remediation, RemediationPhase};
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::local::{BMHS, EVENTS, MACHINES, NODES};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE};
use serde_json::{Value, json};

use super::lab::{Lab, fast, fast_policy, steps};

/// The lab with the controller started.
pub async fn start(spec: ClusterSpec, policy: Value) -> Lab {
    start_prepared(spec, policy, |_| {}).await
}

/// The lab, changed by `prepare` before the controller starts.
pub async fn start_prepared(spec: ClusterSpec, policy: Value, prepare: impl FnOnce(&Lab)) -> Lab {
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    prepare(&lab);
    lab.start_controller(options(&lab));
    lab
}

/// The controller's options in the remediation end-to-end tests.
pub fn options(lab: &Lab) -> ControllerOptions {
    ControllerOptions {
        instance: "test".into(),
        ..lab.options()
    }
}

impl Lab {
    /// The Remediation once `Succeeded`, no simulated actor having been refused on the way.
    pub async fn succeeded(&self, name: &str) -> Remediation {
        let done = self.reach(name, RemediationPhase::Succeeded).await;
        self.assert_no_actor_refused();
        done
    }

    /// The Remediation once `Failed`.
    pub async fn failed(&self, name: &str) -> Remediation {
        self.reach(name, RemediationPhase::Failed).await
    }

    /// Labels a Node `team=db`, a label the remediation must restore on the new Node.
    pub fn label(&self, node: &str) {
        self.api
            .merge(
                NODES,
                "",
                node,
                &json!({"metadata": {"labels": {"team": "db"}}}),
                false,
            )
            .unwrap();
    }

    /// `host` was powered off once and on once.
    pub fn assert_one_power_cycle(&self, host: &str) {
        assert_eq!(
            self.power_history(host),
            [
                baremend_sim::host::Power::Off,
                baremend_sim::host::Power::On
            ],
            "{host}"
        );
    }

    /// What a Node is before its remediation (its UID and boot ID), to tell the Node that
    /// comes back from it.
    pub fn node_before(&self, node: &str) -> NodeBefore {
        let node = self.api.get(NODES, "", node).unwrap();
        NodeBefore {
            uid: node["metadata"]["uid"].clone(),
            boot_id: node["status"]["nodeInfo"]["bootID"].clone(),
        }
    }

    /// The main path's outcome, whichever way the host was fenced: the host went Off and then
    /// On once, at its BMC (not only as our status says); the Node is a new one (a new UID)
    /// from a new boot (a new boot ID), Ready, with its label restored; the Machine carries
    /// neither the trigger nor our power-off mark. What each path leaves elsewhere (a
    /// session, a reboot annotation) its test checks.
    pub fn assert_main_path(&self, machine: &str, before: &NodeBefore) {
        self.assert_one_power_cycle(machine);
        let node = self.api.get(NODES, "", machine).unwrap();
        assert_ne!(node["metadata"]["uid"], before.uid, "{machine}: a new Node");
        let boot_id = &node["status"]["nodeInfo"]["bootID"];
        assert!(
            boot_id.as_str().is_some_and(|b| !b.is_empty()) && *boot_id != before.boot_id,
            "{machine}: a new boot ({} before, {boot_id} now)",
            before.boot_id
        );
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "{machine}: the new Node is Ready: {node}");
        self.assert_label_restored(machine, machine);
        self.assert_machine_clean(machine);
    }

    /// The Node carries the `team=db` label again (see [`Lab::label`]).
    pub fn assert_label_restored(&self, node: &str, context: &str) {
        let node = self.api.get(NODES, "", node).unwrap();
        assert_eq!(node["metadata"]["labels"]["team"], "db", "{context}");
    }

    /// Merges `patch` into a Machine.
    pub fn merge_machine(&self, name: &str, patch: Value) {
        self.api
            .merge(MACHINES, MACHINE_NAMESPACE, name, &patch, false)
            .unwrap();
    }

    /// Merges `bmc` into a BareMetalHost's `spec.bmc`.
    pub fn set_bmc(&self, host: &str, bmc: Value) {
        self.api
            .merge(
                BMHS,
                MACHINE_NAMESPACE,
                host,
                &json!({"spec": {"bmc": bmc}}),
                false,
            )
            .unwrap();
    }

    /// One annotation of a Machine, if it has it.
    pub fn machine_annotation(&self, name: &str, key: &str) -> Option<Value> {
        let machine = self.api.get(MACHINES, MACHINE_NAMESPACE, name).unwrap();
        machine["metadata"]["annotations"].get(key).cloned()
    }

    /// Neither the trigger nor our power-off mark is left on the Machine.
    pub fn assert_machine_clean(&self, name: &str) {
        let machine = self.api.get(MACHINES, MACHINE_NAMESPACE, name).unwrap();
        let annotations = machine["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for key in [
            "host.metal3.io/external-remediation",
            "remediation.metal3.io/powered-off-for-remediation",
        ] {
            assert!(!annotations.contains_key(key), "{name}: {annotations:?}");
        }
    }

    /// Every Event in the Machines' namespace, as JSON text: for checks that no Event carries
    /// something (a password); to wait for one Event, see [`super::events::told_on`].
    pub fn events_text(&self) -> String {
        let events = self.api.list(EVENTS, Some(MACHINE_NAMESPACE));
        serde_json::to_string(&events).unwrap()
    }
}

/// A Node's UID and boot ID before its remediation ([`Lab::node_before`]).
pub struct NodeBefore {
    uid: Value,
    boot_id: Value,
}

/// Every step of a deleting remediation happened exactly once.
pub fn assert_each_step_once(remediation: &Remediation) {
    super::lab::assert_each_step_once(&steps(remediation));
}

/// The condition of that type; the test fails without it.
pub fn condition<'a>(
    status: &'a baremend::api::RemediationStatus,
    type_: &str,
) -> &'a baremend::api::Condition {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"))
}

/// The steps named in `order` are all recorded, in that order (others may come between).
pub fn assert_in_order(remediation: &Remediation, order: &[&str]) {
    let steps = steps(remediation);
    let mut last = 0;
    for step in order {
        let at = steps
            .iter()
            .position(|s| s == step)
            .unwrap_or_else(|| panic!("{step} missing in {steps:?}"));
        assert!(at >= last, "{step} out of order in {steps:?}");
        last = at;
    }
}

/// A fault on every DELETE of the Node: the remediation stays `Fenced` until it is cleared.
pub fn block_node_deletion(lab: &Lab, node: &str) {
    lab.cluster
        .api_server()
        .inject(baremend_sim::apiserver::FaultRule {
            method: Some("DELETE".into()),
            path_contains: Some(format!("/nodes/{node}")),
            status: 500,
            count: None,
            retry_after: None,
            delay_ms: 0,
        });
}

/// worker-0 hung and its remediation `Fenced`, held there by a Node that cannot be deleted;
/// with the Node's UID from before.
pub async fn held_at_fenced() -> (Lab, Value) {
    let lab = start(fast(), fast_policy()).await;
    let old_uid = lab.api.get(NODES, "", "worker-0").unwrap()["metadata"]["uid"].clone();
    block_node_deletion(&lab, "worker-0");
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", RemediationPhase::Fenced).await;
    (lab, old_uid)
}
