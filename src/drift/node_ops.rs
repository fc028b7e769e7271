//! What the coordinator does on and around a node: the helper pods (and the Secret of a
//! restore), removing a forcefile not picked up, and handing a node to the machine
//! remediation.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use super::helper::{self, HelperOp, HelperTarget};
use super::pass::{Pass, record};
use crate::api::DriftStep;
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::{DriftEventReason, DriftRemediation};
use crate::drift::mark::PlannedReboot;
use crate::leader::Writes;
use crate::runtime::clock::rfc3339;
use crate::runtime::events::Severity;
use crate::runtime::read::GetPresent;
use crate::{Error, Result};

/// The drift pass's operations on its Node: the helper pod, cordon, eviction. Made by
/// `NodeOps::of(pass)` where needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct NodeOps<'p> {
    pass: &'p Pass,
    /// The leader's leave to write, which its writes take (and check again).
    writes: &'p Writes,
}

impl<'p> NodeOps<'p> {
    /// The NodeOps of `pass`, writing with the leader's `writes`.
    pub(crate) fn of(pass: &'p Pass, writes: &'p Writes) -> Self {
        NodeOps { pass, writes }
    }

    pub(super) fn target<'a>(
        &'a self,
        remediation: &'a DriftRemediation,
        uid: &'a str,
    ) -> HelperTarget<'a> {
        HelperTarget {
            remediation: remediation.metadata.name.as_deref().unwrap_or_default(),
            uid,
            node: &self.pass.name,
            namespace: &self.pass.policy.helper_namespace,
            image: self
                .pass
                .policy
                .helper_image
                .as_deref()
                .unwrap_or(&self.pass.context.helpers.image),
            pods: &self.pass.context.helpers,
        }
    }

    /// Why the helpers' image may not run, when it is not pinned by digest (the CRD refuses
    /// such a `helperImage`; `--helper-image` is resolved to a digest at start, or left as it
    /// was when that failed). deploy/'s admission policy would refuse the pod too: the
    /// remediation fails before it asks, saying why.
    pub(super) fn unpinned_helper_image(self) -> Option<String> {
        let image = self
            .pass
            .policy
            .helper_image
            .as_deref()
            .unwrap_or(&self.pass.context.helpers.image);
        (!helper::pinned_by_digest(image)).then(|| {
            format!(
                "the helper image {image} is not pinned by digest (<repository>@sha256:<64 hex>): \
                 a privileged helper's image must not move under a tag; set the DriftPolicy's \
                 helperImage, or deploy/'s `images:` digest"
            )
        })
    }

    /// Creates the helper pod for `op` (and the Secret carrying `content`); one that
    /// exists already is left as it is.
    pub(super) async fn start_helper(
        self,
        remediation: &DriftRemediation,
        op: &HelperOp,
        content: Option<Vec<u8>>,
    ) -> Result<()> {
        if let Some(reason) = self.unpinned_helper_image() {
            return Err(Error::Invalid {
                object: format!("the drift helper of {}", remediation.name_any()),
                reason,
            });
        }
        let uid = remediation.uid().unwrap_or_default();
        let target = self.target(remediation, &uid);
        let client = self.pass.context.client.clone();
        if let Some(content) = content {
            let secrets: Api<Secret> = Api::namespaced(client.clone(), target.namespace);
            self.writes.check()?;
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
        self.writes.check()?;
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
        self,
        remediation: &mut DriftRemediation,
        op: &HelperOp,
    ) -> Result<()> {
        let pods: Api<Pod> = Api::namespaced(
            self.pass.context.client.clone(),
            &self.pass.policy.helper_namespace,
        );
        let name = helper::helper_name(&remediation.name_any(), op);
        match pods
            .get_present(&name)
            .await
            .map_err(Error::kube("GetHelperPod"))?
        {
            None => self.start_helper(remediation, op, None).await,
            Some(pod) => {
                if let Some(Err(message)) = helper::outcome(&pod) {
                    let mut status = remediation.status.clone().unwrap_or_default();
                    if status.last_error.as_deref() != Some(message.as_str()) {
                        status.last_error = Some(message.clone());
                        self.pass.persist(self.writes, remediation, status).await?;
                        self.pass
                            .event(
                                remediation,
                                Severity::Warning,
                                DriftEventReason::HelperFailed,
                                message,
                            )
                            .await;
                    }
                }
                Ok(())
            }
        }
    }

    /// Removes a forcefile this remediation wrote and the MCD did not take, then the helpers.
    /// Never waits: what is not over yet is looked at again by a later pass.
    ///
    /// # Expected flow
    /// 1. Our own cordon (a drain before a restore) is lifted — never during an MCO drain.
    /// 2. The force helper must be over: terminated, or gone. One still Pending or Running
    ///    is deleted, and nothing more happens until it is gone (it could still write the
    ///    forcefile after an unforce helper removed it).
    /// 3. The unforce helper runs; once it succeeded `ForceFileRemoved` is recorded and
    ///    `forceFileWritten` cleared, then the helpers are removed.
    pub(super) async fn clean_up(self, remediation: &DriftRemediation) -> Result<()> {
        self.lift_own_cordon(remediation).await?;
        let written = remediation
            .status
            .as_ref()
            .is_some_and(|s| s.force_file_written);
        if !written {
            return self.remove_helpers(remediation).await;
        }
        if !self.force_helper_over(remediation).await? {
            return Ok(());
        }
        let pods: Api<Pod> = Api::namespaced(
            self.pass.context.client.clone(),
            &self.pass.policy.helper_namespace,
        );
        let name = helper::helper_name(&remediation.name_any(), &HelperOp::Unforce);
        let Some(pod) = pods
            .get_present(&name)
            .await
            .map_err(Error::kube("GetHelperPod"))?
        else {
            return self
                .start_helper(remediation, &HelperOp::Unforce, None)
                .await;
        };
        match helper::outcome(&pod) {
            Some(Ok(_)) => self.force_file_removed(remediation).await,
            // Failed: start again (the pod is deleted, a later pass recreates it).
            Some(Err(message)) => {
                self.writes.check()?;
                let _ = pods.delete(&name, &DeleteParams::default()).await;
                self.pass
                    .event(
                        remediation,
                        Severity::Warning,
                        DriftEventReason::HelperFailed,
                        message,
                    )
                    .await;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Lifts the cordon we set for our own drain, unless an MCO drain is pending.
    async fn lift_own_cordon(self, remediation: &DriftRemediation) -> Result<()> {
        let ours = remediation
            .status
            .as_ref()
            .is_some_and(|s| s.cordoned_by_us);
        let annotations = self.pass.node.annotations();
        let mco_draining = annotations.get(crate::api::mco::DESIRED_DRAIN)
            != annotations.get(crate::api::mco::LAST_APPLIED_DRAIN);
        if !ours || mco_draining {
            return Ok(());
        }
        let mut object = remediation.clone();
        let mut status = object.status.clone().unwrap_or_default();
        status.cordoned_by_us = false;
        record(
            &mut status,
            DriftStep::Uncordoned,
            None,
            &rfc3339(self.pass.context.clock.now()),
        );
        self.pass.persist(self.writes, &mut object, status).await?;
        self.set_unschedulable(false).await
    }

    /// Whether the force helper can no longer write the forcefile: it terminated, or its pod
    /// is gone. One still Pending or Running is deleted (once); false until it is gone.
    async fn force_helper_over(self, remediation: &DriftRemediation) -> Result<bool> {
        let pods: Api<Pod> = Api::namespaced(
            self.pass.context.client.clone(),
            &self.pass.policy.helper_namespace,
        );
        let name = helper::helper_name(&remediation.name_any(), &HelperOp::Force);
        let Some(pod) = pods
            .get_present(&name)
            .await
            .map_err(Error::kube("GetHelperPod"))?
        else {
            return Ok(true);
        };
        if helper::outcome(&pod).is_some() {
            return Ok(true);
        }
        if pod.metadata.deletion_timestamp.is_none() {
            self.writes.check()?;
            match pods.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(true),
                Err(e) => return Err(Error::kube("DeleteHelperPod")(e)),
            }
            tracing::info!(pod = %name, "the force helper has not finished; deleted before the unforce helper runs");
        }
        Ok(false)
    }

    /// The unforce helper succeeded: recorded, told, the helpers removed.
    async fn force_file_removed(self, remediation: &DriftRemediation) -> Result<()> {
        let mut object = remediation.clone();
        let mut status = object.status.clone().unwrap_or_default();
        status.force_file_written = false;
        record(
            &mut status,
            DriftStep::ForceFileRemoved,
            None,
            &rfc3339(self.pass.context.clock.now()),
        );
        self.pass.persist(self.writes, &mut object, status).await?;
        self.remove_helpers(&object).await?;
        self.pass
            .event(
                &object,
                Severity::Normal,
                DriftEventReason::ForceFileRemoved,
                format!(
                    "removed {} from {}",
                    crate::api::mco::FORCE_FILE,
                    self.pass.name
                ),
            )
            .await;
        // Nothing of ours is left on the node: the mark may go if the MCO is idle too.
        PlannedReboot::of(self.pass, self.writes)
            .guard_planned_reboot(Some(&object))
            .await?;
        Ok(())
    }

    /// Deletes every helper pod of the remediation and its content Secret (absent ones are
    /// fine).
    pub(super) async fn remove_helpers(self, remediation: &DriftRemediation) -> Result<()> {
        let namespace = &self.pass.policy.helper_namespace;
        let pods: Api<Pod> = Api::namespaced(self.pass.context.client.clone(), namespace);
        let secrets: Api<Secret> = Api::namespaced(self.pass.context.client.clone(), namespace);
        let name = remediation.name_any();
        let install = HelperOp::Install {
            path: String::new(),
            mode: 0,
            sha256: String::new(),
        };
        let chmod = HelperOp::Chmod {
            path: String::new(),
            mode: 0,
        };
        for op in [HelperOp::Force, HelperOp::Unforce, chmod, install.clone()] {
            self.writes.check()?;
            let _ = pods
                .delete(&helper::helper_name(&name, &op), &DeleteParams::default())
                .await;
        }
        self.writes.check()?;
        let _ = secrets
            .delete(
                &helper::helper_name(&name, &install),
                &DeleteParams::default(),
            )
            .await;
        Ok(())
    }

    /// Hands the node to the machine remediation: its Machine — the one whose
    /// `status.nodeRef` names this Node, by name and UID; never the Node's own
    /// `machine.openshift.io/machine` annotation, which its kubelet may write — gets the
    /// trigger.
    pub(super) async fn escalate(self) -> std::result::Result<String, String> {
        let (namespace, name) = PlannedReboot::of(self.pass, self.writes)
            .machine_of_node(&self.pass.node)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no Machine's status.nodeRef names the Node")?;
        let api: Api<crate::api::slim::Machine> =
            Api::namespaced(self.pass.context.client.clone(), &namespace);
        let patch = serde_json::json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}});
        self.writes.check().map_err(|e| e.to_string())?;
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| e.to_string())?;
        Ok(format!("{namespace}/{name}"))
    }

    /// Cordons or uncordons the node (our own drain before a restore only).
    pub(super) async fn set_unschedulable(self, value: bool) -> Result<()> {
        self.writes.check()?;
        let nodes: Api<k8s_openapi::api::core::v1::Node> =
            Api::all(self.pass.context.client.clone());
        let patch = serde_json::json!({"spec": {"unschedulable": value}});
        nodes
            .patch(
                &self.pass.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
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
    pub(super) async fn evict_pods(self) -> Result<Option<String>> {
        self.writes.check()?;
        let all: Api<Pod> = Api::all(self.pass.context.client.clone());
        let on_node = all
            .list(
                &kube::api::ListParams::default()
                    .fields(&format!("spec.nodeName={}", self.pass.name)),
            )
            .await
            .map_err(Error::kube("ListPodsOnNode"))?
            .items;
        let mut refused = None;
        for pod in on_node.iter().filter(|p| super::pdb::evicted_by_drain(p)) {
            let namespace = pod.namespace().unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(self.pass.context.client.clone(), &namespace);
            self.writes.check()?;
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
