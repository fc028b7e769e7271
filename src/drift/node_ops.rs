//! What the coordinator does on and around a node: the helper pods (and the Secret of a
//! restore), removing a forcefile not picked up, and handing a node to the machine
//! remediation.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use super::helper::{self, HelperOp, HelperTarget};
use super::pass::Pass;
use crate::api::annotations::{EXTERNAL_REMEDIATION, NODE_MACHINE, PLANNED_REBOOT};
use crate::api::{DriftRemediation, StepTime};
use crate::remediation::state::rfc3339;
use crate::{Error, Result};

impl Pass {
    pub(super) fn target<'a>(
        &'a self,
        remediation: &'a DriftRemediation,
        uid: &'a str,
    ) -> HelperTarget<'a> {
        HelperTarget {
            remediation: remediation.metadata.name.as_deref().unwrap_or_default(),
            uid,
            node: &self.name,
            namespace: &self.policy.helper_namespace,
            image: self
                .policy
                .helper_image
                .as_deref()
                .unwrap_or(&self.context.helper_image),
        }
    }

    pub(super) async fn start_helper(
        &self,
        remediation: &DriftRemediation,
        op: &HelperOp,
        content: Option<Vec<u8>>,
    ) -> Result<()> {
        self.context.leadership.ensure()?;
        let uid = remediation.uid().unwrap_or_default();
        let target = self.target(remediation, &uid);
        let client = self.context.client.clone();
        if let Some(content) = content {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), target.namespace);
            match secrets
                .create(
                    &PostParams::default(),
                    &helper::content_secret(&target, op, content),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(Error::kube("CreateHelperSecret")(e)),
            }
        }
        let pods: Api<Pod> = Api::namespaced(client, target.namespace);
        match pods
            .create(&PostParams::default(), &helper::pod(&target, op))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(Error::kube("CreateHelperPod")(e)),
        }
    }

    /// While the forcefile is requested: the helper must exist (a crash may have come
    /// between the persisted request and the pod) and a failed helper is reported.
    pub(super) async fn watch_helper(
        &self,
        remediation: &mut DriftRemediation,
        op: &HelperOp,
    ) -> Result<()> {
        let pods: Api<Pod> =
            Api::namespaced(self.context.client.clone(), &self.policy.helper_namespace);
        let name = helper::helper_name(&remediation.name_any(), op);
        match pods
            .get_opt(&name)
            .await
            .map_err(Error::kube("GetHelperPod"))?
        {
            None => self.start_helper(remediation, op, None).await,
            Some(pod) => {
                if let Some(Err(message)) = helper::outcome(&pod) {
                    let mut status = remediation.status.clone().unwrap_or_default();
                    if status.last_error.as_deref() != Some(message.as_str()) {
                        status.last_error = Some(message.clone());
                        self.persist(remediation, status).await?;
                        self.event(remediation, true, "HelperFailed", message).await;
                    }
                }
                Ok(())
            }
        }
    }

    /// Removes a forcefile this remediation wrote and the MCD did not take, then the helpers.
    pub(super) async fn clean_up(&self, remediation: &DriftRemediation) -> Result<()> {
        // Our own cordon is lifted when we give up — never during the MCO's drain.
        let ours = remediation
            .status
            .as_ref()
            .is_some_and(|s| s.cordoned_by_us);
        let annotations = self.node.annotations();
        let mco_draining = annotations.get(crate::api::mco::DESIRED_DRAIN)
            != annotations.get(crate::api::mco::LAST_APPLIED_DRAIN);
        if ours && !mco_draining {
            let mut object = remediation.clone();
            let mut status = object.status.clone().unwrap_or_default();
            status.cordoned_by_us = false;
            let now = rfc3339(self.context.clock.now());
            status.steps.push(StepTime {
                step: "Uncordoned".into(),
                attempt: 1,
                time: now,
            });
            self.persist(&mut object, status).await?;
            self.set_unschedulable(false).await?;
        }
        let written = remediation
            .status
            .as_ref()
            .is_some_and(|s| s.force_file_written);
        if !written {
            self.remove_helpers(remediation).await;
            return Ok(());
        }
        let pods: Api<Pod> =
            Api::namespaced(self.context.client.clone(), &self.policy.helper_namespace);
        let name = helper::helper_name(&remediation.name_any(), &HelperOp::Unforce);
        match pods
            .get_opt(&name)
            .await
            .map_err(Error::kube("GetHelperPod"))?
        {
            None => {
                self.start_helper(remediation, &HelperOp::Unforce, None)
                    .await
            }
            Some(pod) => match helper::outcome(&pod) {
                Some(Ok(_)) => {
                    let mut object = remediation.clone();
                    let mut status = object.status.clone().unwrap_or_default();
                    status.force_file_written = false;
                    let now = rfc3339(self.context.clock.now());
                    status.steps.push(StepTime {
                        step: "ForceFileRemoved".into(),
                        attempt: 1,
                        time: now,
                    });
                    self.persist(&mut object, status).await?;
                    self.remove_helpers(&object).await;
                    self.event(
                        &object,
                        false,
                        "ForceFileRemoved",
                        format!("removed {} from {}", crate::api::mco::FORCE_FILE, self.name),
                    )
                    .await;
                    Ok(())
                }
                // Failed: start again (the pod is deleted, the next pass recreates it).
                Some(Err(message)) => {
                    let _ = pods.delete(&name, &DeleteParams::default()).await;
                    self.event(remediation, true, "HelperFailed", message).await;
                    Ok(())
                }
                None => Ok(()),
            },
        }
    }

    pub(super) async fn remove_helpers(&self, remediation: &DriftRemediation) {
        let namespace = &self.policy.helper_namespace;
        let pods: Api<Pod> = Api::namespaced(self.context.client.clone(), namespace);
        let secrets: Api<Secret> = Api::namespaced(self.context.client.clone(), namespace);
        let name = remediation.name_any();
        for op in [
            HelperOp::Force,
            HelperOp::Unforce,
            HelperOp::Chmod {
                path: String::new(),
                mode: 0,
            },
        ] {
            let _ = pods
                .delete(&helper::helper_name(&name, &op), &DeleteParams::default())
                .await;
        }
        let install = HelperOp::Install {
            path: String::new(),
            mode: 0,
            sha256: String::new(),
        };
        let _ = pods
            .delete(
                &helper::helper_name(&name, &install),
                &DeleteParams::default(),
            )
            .await;
        let _ = secrets
            .delete(
                &helper::helper_name(&name, &install),
                &DeleteParams::default(),
            )
            .await;
    }

    /// Hands the node to the machine remediation: its Machine gets the trigger.
    pub(super) async fn escalate(&self) -> std::result::Result<String, String> {
        let machine = self
            .node
            .annotations()
            .get(NODE_MACHINE)
            .and_then(|m| m.split_once('/'))
            .ok_or("the Node names no Machine")?;
        let (namespace, name) = machine;
        let api: Api<crate::remediation::slim::Machine> =
            Api::namespaced(self.context.client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| e.to_string())?;
        Ok(format!("{namespace}/{name}"))
    }

    /// Marks the Node as in a reboot this remediation planned (None: not any more), so that
    /// the machine remediation does not take it for a hung host.
    pub(super) async fn set_planned_reboot(&self, by: Option<&str>) -> Result<()> {
        let now = self
            .node
            .annotations()
            .get(PLANNED_REBOOT)
            .map(String::as_str);
        if now == by {
            return Ok(());
        }
        self.context.leadership.ensure()?;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.context.client.clone());
        let patch = serde_json::json!({"metadata": {"annotations": {PLANNED_REBOOT: by}}});
        nodes
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("AnnotateNode"))?;
        Ok(())
    }

    /// After a verified re-apply: a MachineHealthCheck that saw the planned reboot as a
    /// failure left the external-remediation trigger on the node's Machine, and the machine
    /// remediation holds it for the planned reboot. The node is healthy again, so the trigger
    /// is cleared — before the planned-reboot mark goes, so the machine remediation cancels
    /// instead of fencing a healthy host. Returns the Machine whose trigger was cleared.
    pub(super) async fn clear_trigger_of_planned_reboot(&self) -> Result<Option<String>> {
        let Some((namespace, name)) = self
            .node
            .annotations()
            .get(NODE_MACHINE)
            .and_then(|m| m.split_once('/'))
        else {
            return Ok(None);
        };
        let api: Api<crate::remediation::slim::Machine> =
            Api::namespaced(self.context.client.clone(), namespace);
        let Some(machine) = api.get_opt(name).await.map_err(Error::kube("GetMachine"))? else {
            return Ok(None);
        };
        if !machine.annotations().contains_key(EXTERNAL_REMEDIATION) {
            return Ok(None);
        }
        self.context.leadership.ensure()?;
        let patch = serde_json::json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: null}}});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube("ClearTrigger"))?;
        Ok(Some(format!("{namespace}/{name}")))
    }

    /// Cordons or uncordons the node (our own drain before a restore only).
    pub(super) async fn set_unschedulable(&self, value: bool) -> Result<()> {
        self.context.leadership.ensure()?;
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.context.client.clone());
        let patch = serde_json::json!({"spec": {"unschedulable": value}});
        nodes
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(Error::kube(if value {
                "CordonNode"
            } else {
                "UncordonNode"
            }))?;
        Ok(())
    }

    /// Evicts every pod a drain evicts from the node, through the Eviction API (a budget
    /// may refuse: the refusal is returned, nothing is forced).
    pub(super) async fn evict_pods(&self) -> Result<Option<String>> {
        self.context.leadership.ensure()?;
        let all: Api<Pod> = Api::all(self.context.client.clone());
        let on_node = all
            .list(&kube::api::ListParams::default().fields(&format!("spec.nodeName={}", self.name)))
            .await
            .map_err(Error::kube("ListPodsOnNode"))?
            .items;
        let mut refused = None;
        for pod in on_node.iter().filter(|p| super::pdb::evicted_by_drain(p)) {
            let namespace = pod.namespace().unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(self.context.client.clone(), &namespace);
            match pods.evict(&pod.name_any(), &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(kube::Error::Api(e)) if e.code == 429 => {
                    refused = Some(format!(
                        "cannot evict {namespace}/{}: {}",
                        pod.name_any(),
                        e.message
                    ));
                }
                Err(e) => return Err(Error::kube("EvictPod")(e)),
            }
        }
        Ok(refused)
    }
}
