//! Keeping the planned-reboot mark on the Node as [`super::guard`] decides. It is set or
//! kept from the caches (a lagging cache can only keep it a pass longer); it is lifted only
//! when fresh reads of the Node and of its DriftRemediations decide so too, because the lift
//! lets the machine remediation act on the node. A trigger the MachineHealthCheck left while
//! the node rebooted for us is cleared first, once the node is back Ready from that reboot.

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use super::guard::{Attempt, McoProgress, planned_reboot};
use super::observe::{attempt_number, boot_id, ready};
use super::pass::Pass;
use crate::api::annotations::{EXTERNAL_REMEDIATION, PLANNED_REBOOT};
use crate::api::{DriftEventReason, DriftRemediation};
use crate::leader::Writes;
use crate::runtime::events::Severity;
use crate::runtime::read::GetPresent;
use crate::{Error, Result};

/// The guard's decision for `node`, whose DriftRemediations are `remediations` (oldest first).
fn decide(remediations: &[&DriftRemediation], node: &Node) -> Option<String> {
    let names: Vec<String> = remediations.iter().map(|r| r.name_any()).collect();
    let attempts: Vec<Attempt<'_>> = remediations
        .iter()
        .zip(&names)
        .map(|(r, name)| Attempt {
            name,
            phase: r.phase(),
            force_file_written: r.status.as_ref().is_some_and(|s| s.force_file_written),
        })
        .collect();
    let annotations = node.annotations();
    planned_reboot(
        &attempts,
        McoProgress::from_annotations(annotations),
        annotations.get(PLANNED_REBOOT).map(String::as_str),
    )
}

/// Whether the node is back Ready from a reboot after `owner` asked for the re-apply.
fn came_back(owner: &DriftRemediation, node: &Node) -> bool {
    let before = owner.status.as_ref().and_then(|s| s.boot_before.clone());
    ready(node) && before.is_some() && boot_id(node).is_some() && boot_id(node) != before
}

/// The drift pass's planned-reboot mark on the Machine. Made by `PlannedReboot::of(pass)` where
/// needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct PlannedReboot<'p> {
    pass: &'p Pass,
    /// The leader's leave to write, which its writes take (and check again).
    writes: &'p Writes,
}

impl<'p> PlannedReboot<'p> {
    /// The PlannedReboot of `pass`, writing with the leader's `writes`.
    pub(crate) fn of(pass: &'p Pass, writes: &'p Writes) -> Self {
        PlannedReboot { pass, writes }
    }

    /// Sets, keeps or lifts the planned-reboot mark as the guard decides, and returns the
    /// mark the node carries afterwards. `fresh` is a DriftRemediation this pass has just
    /// persisted: it stands for its cached copy, which may be older.
    pub(super) async fn guard_planned_reboot(
        self,
        fresh: Option<&DriftRemediation>,
    ) -> Result<Option<String>> {
        let cached = self.pass.remediations();
        let mut mine: Vec<&DriftRemediation> = cached
            .iter()
            .map(AsRef::as_ref)
            .filter(|r| fresh.is_none_or(|f| f.name_any() != r.name_any()))
            .collect();
        if let Some(fresh) = fresh {
            mine.push(fresh);
            mine.sort_by_key(|r| attempt_number(r));
        }
        match decide(&mine, &self.pass.node) {
            Some(name) => {
                self.set_planned_reboot(Some(&name)).await?;
                Ok(Some(name))
            }
            None if !self.pass.node.annotations().contains_key(PLANNED_REBOOT) => Ok(None),
            None => self.lift_planned_reboot().await,
        }
    }

    /// Lifts the mark if fresh reads agree (else keeps it, or moves it to the attempt that
    /// holds it now); returns the mark left.
    async fn lift_planned_reboot(self) -> Result<Option<String>> {
        // A list by name, not a get: the controller may list Nodes, and needs no more.
        let nodes: Api<Node> = Api::all(self.pass.context.client.clone());
        let by_name = ListParams::default().fields(&format!("metadata.name={}", self.pass.name));
        let Some(node) = nodes
            .list(&by_name)
            .await
            .map_err(Error::kube("ListNode"))?
            .items
            .pop()
        else {
            return Ok(None);
        };
        let Some(marked) = node.annotations().get(PLANNED_REBOOT).cloned() else {
            return Ok(None);
        };
        let api: Api<DriftRemediation> = Api::all(self.pass.context.client.clone());
        let mut listed: Vec<DriftRemediation> = api
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("ListDriftRemediations"))?
            .items
            .into_iter()
            .filter(|r| r.spec.node_name == self.pass.name)
            .collect();
        listed.sort_by_key(attempt_number);
        let refs: Vec<&DriftRemediation> = listed.iter().collect();
        if let Some(still) = decide(&refs, &node) {
            if still != marked {
                self.patch_planned_reboot(Some(&still)).await?;
            }
            return Ok(Some(still));
        }
        let owner = listed.iter().find(|r| r.name_any() == marked);
        // The trigger first: without the mark, the machine remediation would take it.
        if let Some(owner) = owner.filter(|o| came_back(o, &node))
            && let Some(machine) = self.clear_trigger_of_planned_reboot(&node).await?
        {
            let note = format!(
                "the health check took the planned reboot for a failure; {} is back Ready from it, so the trigger on Machine {machine} is cleared",
                self.pass.name
            );
            self.pass
                .event(
                    owner,
                    Severity::Normal,
                    DriftEventReason::TriggerCleared,
                    note,
                )
                .await;
        }
        self.patch_planned_reboot(None).await?;
        let note = format!(
            "the Machine Config Operator is done with {}: the planned-reboot mark of {marked} is lifted",
            self.pass.name
        );
        match owner {
            Some(owner) => {
                self.pass
                    .event(
                        owner,
                        Severity::Normal,
                        DriftEventReason::PlannedRebootLifted,
                        note,
                    )
                    .await
            }
            None => {
                self.pass
                    .node_event(
                        Severity::Normal,
                        DriftEventReason::PlannedRebootLifted,
                        note,
                    )
                    .await
            }
        }
        Ok(None)
    }

    /// Marks the Node as in a reboot a remediation planned (None: not any more), unless the
    /// cached Node shows that already.
    async fn set_planned_reboot(self, by: Option<&str>) -> Result<()> {
        let now = self
            .pass
            .node
            .annotations()
            .get(PLANNED_REBOOT)
            .map(String::as_str);
        if now == by {
            return Ok(());
        }
        self.patch_planned_reboot(by).await
    }

    async fn patch_planned_reboot(self, by: Option<&str>) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.pass.context.client.clone());
        let patch = serde_json::json!({"metadata": {"annotations": {PLANNED_REBOOT: by}}});
        self.writes.check()?;
        nodes
            .patch(
                &self.pass.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(Error::kube("AnnotateNode"))?;
        Ok(())
    }

    /// A MachineHealthCheck that saw the planned reboot as a failure left the
    /// external-remediation trigger on the node's Machine, and the machine remediation holds
    /// it for the planned reboot. The node is back, so the trigger is cleared — before the
    /// mark goes, so the machine remediation cancels instead of fencing a healthy host.
    /// Returns the Machine whose trigger was cleared.
    async fn clear_trigger_of_planned_reboot(self, node: &Node) -> Result<Option<String>> {
        // The Machine whose status.nodeRef names the Node, never the Node's own annotation.
        let Some((namespace, name)) = self.machine_of_node(node).await? else {
            return Ok(None);
        };
        let (namespace, name) = (namespace.as_str(), name.as_str());
        let api: Api<crate::api::slim::Machine> =
            Api::namespaced(self.pass.context.client.clone(), namespace);
        let Some(machine) = api
            .get_present(name)
            .await
            .map_err(Error::kube("GetMachine"))?
        else {
            return Ok(None);
        };
        if !machine.annotations().contains_key(EXTERNAL_REMEDIATION) {
            return Ok(None);
        }
        let patch = serde_json::json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: null}}});
        self.writes.check()?;
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("ClearTrigger"))?;
        Ok(Some(format!("{namespace}/{name}")))
    }

    /// The Machine of `node` as (namespace, name): the one Machine whose `status.nodeRef`
    /// names it (see [`crate::api::slim::machine_of_node`]), listed from the API server now.
    pub(super) async fn machine_of_node(self, node: &Node) -> Result<Option<(String, String)>> {
        let api: Api<crate::api::slim::Machine> = Api::all(self.pass.context.client.clone());
        let machines: Vec<std::sync::Arc<crate::api::slim::Machine>> = api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(Error::kube("ListMachines"))?
            .items
            .into_iter()
            .map(std::sync::Arc::new)
            .collect();
        let uid = node.uid();
        Ok(
            crate::api::slim::machine_of_node(&machines, &node.name_any(), uid.as_deref())
                .map(|m| (m.namespace().unwrap_or_default(), m.name_any())),
        )
    }
}
