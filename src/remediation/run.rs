//! One reconcile pass over a Machine: find or start its Remediation, then observe, plan and
//! act until the planner says wait. Every step is written to the Remediation's status before
//! it acts, so a restart resumes where the last persisted step left off.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{
    BmcAddress, DriverConfig, PowerDriver, PowerOffMode, PowerState, TlsOptions,
};
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use tracing::info;

use super::controller::{Context, host_resource, machine_resource};
use super::execute;
use super::fence::{ConfirmedOff, FenceStrategy, NotFenced, PowerEvidence, confirm_powered_off};
use super::gates::{Candidate, Fleet, may_start};
use super::observe::{
    self, BmcRef, HostRef, bare_metal_host_bmc, bare_metal_host_view, machine_host,
    machine_is_control_plane, node_view,
};
use super::plan::{
    FailReason, NodeView, Observed, Persisted, Phase, PlanPolicy, ReleaseMode, Step, next_step,
};
use super::state::{persisted, record_step, set_condition, since_epoch, strategy_name};
use crate::api::annotations::{
    BMH_DETACHED, EXTERNAL_REMEDIATION, POWERED_OFF_FOR_REMEDIATION, REBOOT_PREFIX,
};
use crate::api::{
    FenceStrategyName, NodeReleaseMode, Remediation, RemediationPolicySpec, RemediationSpec,
    RemediationStatus,
};
use crate::{Error, Result};

/// The most steps one pass takes before yielding (a safety net; a normal pass ends in Wait).
const MAX_STEPS_PER_PASS: usize = 16;

/// One reconcile of one Machine.
pub struct Pass {
    machine: Arc<DynamicObject>,
    context: Arc<Context>,
    policy: RemediationPolicySpec,
    name: String,
    namespace: String,
}

/// The BMC to use for direct fencing.
struct DirectBmc {
    driver: Arc<dyn PowerDriver>,
}

impl Pass {
    /// A pass over `machine`.
    pub fn new(machine: Arc<DynamicObject>, context: Arc<Context>) -> Self {
        let policy = context.policy();
        Pass {
            name: machine.name_any(),
            namespace: machine.namespace().unwrap_or_default(),
            machine,
            context,
            policy,
        }
    }

    fn machine_json(&self) -> Value {
        serde_json::to_value(&*self.machine).unwrap_or(Value::Null)
    }

    fn triggered(&self) -> bool {
        self.machine
            .annotations()
            .contains_key(EXTERNAL_REMEDIATION)
    }

    fn remediations_of_machine(&self) -> Vec<Arc<Remediation>> {
        let mut all: Vec<Arc<Remediation>> = self
            .context
            .remediations
            .state()
            .into_iter()
            .filter(|r| {
                r.namespace().as_deref() == Some(self.namespace.as_str())
                    && r.spec.machine_name == self.name
            })
            .collect();
        all.sort_by_key(|r| attempt_number(&r.name_any(), &self.name));
        all
    }

    fn remediation_api(&self) -> Api<Remediation> {
        Api::namespaced(self.context.client.clone(), &self.namespace)
    }

    /// Runs the pass.
    pub async fn run(self) -> Result<Action> {
        let existing = self.remediations_of_machine();
        let mut remediation = match existing.last() {
            Some(last)
                if !last
                    .status
                    .as_ref()
                    .map(|s| s.phase)
                    .unwrap_or_default()
                    .is_terminal() =>
            {
                (**last).clone()
            }
            // A Failed remediation keeps the trigger; an operator deletes the Remediation to
            // allow another (it would otherwise loop on a host that cannot be fenced).
            Some(last) if last.status.as_ref().map(|s| s.phase) == Some(Phase::Failed) => {
                return Ok(Action::await_change());
            }
            _ if !self.triggered() => return Ok(Action::await_change()),
            _ => self.start(existing.len() + 1).await?,
        };
        for _ in 0..MAX_STEPS_PER_PASS {
            match self.step(&mut remediation).await? {
                Some(action) => return Ok(action),
                None => continue,
            }
        }
        Ok(Action::requeue(Duration::ZERO))
    }

    async fn start(&self, number: usize) -> Result<Remediation> {
        let machine_json = self.machine_json();
        let host = machine_host(&machine_json).ok().flatten();
        let mut object = Remediation::new(
            &format!("{}-{number}", self.name),
            RemediationSpec {
                machine_name: self.name.clone(),
                machine_uid: self.machine.uid(),
                node_name: observe::machine_node(&machine_json),
                host: host.map(|h| h.to_string()),
            },
        );
        object.metadata.namespace = Some(self.namespace.clone());
        object.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "machine.openshift.io/v1beta1".into(),
            kind: "Machine".into(),
            name: self.name.clone(),
            uid: self.machine.uid().unwrap_or_default(),
            ..OwnerReference::default()
        }]);
        let api = self.remediation_api();
        let created = match api.create(&PostParams::default(), &object).await {
            Ok(created) => created,
            // Created by an earlier pass whose store update has not arrived yet.
            Err(kube::Error::Api(status)) if status.code == 409 => api
                .get(&object.name_any())
                .await
                .map_err(Error::kube("GetRemediation"))?,
            Err(source) => return Err(Error::kube("CreateRemediation")(source)),
        };
        info!(machine = %self.name, remediation = %created.name_any(), "remediation started");
        Ok(created)
    }

    fn plan_policy(&self) -> PlanPolicy {
        let t = &self.policy.timeouts;
        PlanPolicy {
            strategies: self.policy.strategies.len(),
            power_off_timeout: Duration::from_secs(t.power_off_seconds.into()),
            node_timeout: Duration::from_secs(t.node_ready_seconds.into()),
            ready_grace: Duration::from_secs(t.ready_grace_seconds.into()),
            max_attempts: self.policy.max_attempts,
            release: match self.policy.node_release {
                NodeReleaseMode::Delete => ReleaseMode::Delete,
                NodeReleaseMode::OutOfService => ReleaseMode::OutOfService,
            },
            poll: self.context.poll,
        }
    }

    fn strategy_at(&self, index: usize) -> FenceStrategyName {
        self.policy
            .strategies
            .get(index)
            .copied()
            .unwrap_or(FenceStrategyName::BareMetalHostRebootApi)
    }

    fn node(&self, remediation: &Remediation) -> Option<Arc<Node>> {
        let name = remediation.spec.node_name.as_deref()?;
        self.context.nodes.get(&ObjectRef::new(name))
    }

    fn host(&self, remediation: &Remediation) -> Option<(HostRef, Option<Arc<DynamicObject>>)> {
        let text = remediation.spec.host.as_deref()?;
        let (namespace, name) = text.split_once('/')?;
        let host_ref = HostRef {
            namespace: namespace.into(),
            name: name.into(),
        };
        let object = self
            .context
            .hosts
            .get(&ObjectRef::new_with(name, host_resource()).within(namespace));
        Some((host_ref, object))
    }

    /// One observe–plan–act round. `None`: go on with the next step at once.
    async fn step(&self, remediation: &mut Remediation) -> Result<Option<Action>> {
        let status = remediation.status.clone().unwrap_or_default();
        let created = remediation
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0)))
            .unwrap_or_else(|| since_epoch(self.context.clock.now()));
        let state = persisted(&status, &self.policy.strategies, created);
        let strategy = self.strategy_at(state.strategy);
        let node = self.node(remediation);

        // Evidence only where it matters: a BMC is read while fencing and before release.
        let proof = if matches!(state.phase, Phase::PoweringOff | Phase::Fenced) {
            self.evidence(remediation, strategy).await
        } else {
            Err(NotFenced::NotYet("not checked in this phase".into()))
        };
        let may = if state.phase == Phase::Pending {
            self.gates(remediation, node.as_deref())
        } else {
            Ok(())
        };
        let observed = Observed {
            now: since_epoch(self.context.clock.now()),
            triggered: self.triggered(),
            fence: proof.as_ref().map(|_| ()).map_err(Clone::clone),
            node: node_view(node.as_deref()),
            may_start: may,
        };
        let step = next_step(&state, &observed, &self.plan_policy());
        tracing::debug!(remediation = %remediation.name_any(), ?step, "planned");
        self.act(remediation, status, &state, step, proof.ok(), node)
            .await
    }

    fn gates(
        &self,
        remediation: &Remediation,
        node: Option<&Node>,
    ) -> std::result::Result<(), String> {
        let machines = self.context.machines.state();
        let remediations = self.context.remediations.state();
        let running: Vec<_> = remediations
            .iter()
            .filter(|r| {
                let phase = r.status.as_ref().map(|s| s.phase).unwrap_or_default();
                phase != Phase::Pending
                    && !phase.is_terminal()
                    && r.name_any() != remediation.name_any()
            })
            .collect();
        // Each Machine's role is read once, from its labels, not per comparison.
        let control_plane: Vec<&Arc<DynamicObject>> = machines
            .iter()
            .filter(|m| machine_is_control_plane(m.labels()))
            .collect();
        let control_plane_names: HashSet<String> =
            control_plane.iter().map(|m| m.name_any()).collect();
        let ready = |node_name: Option<String>| {
            node_name
                .and_then(|n| self.context.nodes.get(&ObjectRef::new(&n)))
                .is_some_and(|n| {
                    matches!(
                        node_view(Some(&n)),
                        NodeView::Present {
                            ready_since: Some(_)
                        }
                    )
                })
        };
        let fleet = Fleet {
            machines: machines.len(),
            triggered: machines
                .iter()
                .filter(|m| m.annotations().contains_key(EXTERNAL_REMEDIATION))
                .count(),
            running: running.len(),
            running_control_plane: running
                .iter()
                .filter(|r| control_plane_names.contains(&r.spec.machine_name))
                .count(),
            control_plane: control_plane.len(),
            // DynamicObject keeps everything but metadata in `data`: status.nodeRef is there.
            control_plane_ready: control_plane
                .iter()
                .filter(|m| ready(observe::machine_node(&m.data)))
                .count(),
        };
        let candidate = Candidate {
            control_plane: machine_is_control_plane(self.machine.labels()),
            node_ready: matches!(
                node_view(node),
                NodeView::Present {
                    ready_since: Some(_)
                }
            ),
        };
        may_start(candidate, fleet, &self.policy).map_err(|held| held.to_string())
    }

    async fn evidence(
        &self,
        remediation: &Remediation,
        strategy: FenceStrategyName,
    ) -> std::result::Result<ConfirmedOff, NotFenced> {
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => {
                let Some((host_ref, host)) = self.host(remediation) else {
                    return Err(NotFenced::Untrustworthy(
                        "the Machine names no BareMetalHost".into(),
                    ));
                };
                let Some(host) = host else {
                    return Err(NotFenced::Untrustworthy(format!(
                        "BareMetalHost {host_ref} not found"
                    )));
                };
                let json = serde_json::to_value(&*host).unwrap_or(Value::Null);
                let view = bare_metal_host_view(&json, &self.policy.reboot_key);
                confirm_powered_off(
                    &FenceStrategy::BareMetalHostRebootApi,
                    &PowerEvidence::BareMetalHost(view),
                )
            }
            FenceStrategyName::DirectBmc => {
                let bmc = self
                    .direct_bmc(remediation)
                    .await
                    .map_err(|e| NotFenced::Untrustworthy(e.to_string()))?;
                // Two consecutive fresh reads must both say Off.
                let mut off = true;
                for _ in 0..2 {
                    match bmc.driver.power_state().await {
                        Ok(PowerState::Off) => {}
                        Ok(_) => {
                            off = false;
                            break;
                        }
                        Err(error) => {
                            return Err(NotFenced::NotYet(format!("BMC read failed: {error}")));
                        }
                    }
                }
                confirm_powered_off(&FenceStrategy::DirectBmc, &PowerEvidence::BmcReadOff(off))
            }
        }
    }

    /// The BMC for direct fencing: from a `HostBmc` naming the Machine or Node, else from an
    /// unmanaged (detached) BareMetalHost. A managed host is refused: its operator would power
    /// it back on.
    async fn direct_bmc(&self, remediation: &Remediation) -> Result<DirectBmc> {
        let invalid = |reason: String| Error::Invalid {
            object: format!("Machine {}/{}", self.namespace, self.name),
            reason,
        };
        let mapping = self.context.host_bmcs.state().into_iter().find(|m| {
            m.namespace().as_deref() == Some(self.namespace.as_str())
                && (m.spec.machine_name.as_deref() == Some(self.name.as_str())
                    || (m.spec.node_name.is_some()
                        && m.spec.node_name == remediation.spec.node_name))
        });
        let (bmc, tls) = match (&mapping, self.host(remediation)) {
            (Some(mapping), _) => (
                BmcRef {
                    address: mapping.spec.address.clone(),
                    credentials_name: mapping.spec.credentials_name.clone(),
                },
                TlsOptions {
                    ca_bundle_pem: mapping.spec.ca_bundle.clone().map(String::into_bytes),
                    insecure: mapping.spec.insecure_skip_verify,
                },
            ),
            (None, Some((host_ref, Some(host)))) => {
                let json = serde_json::to_value(&*host).unwrap_or(Value::Null);
                let detached = host.annotations().contains_key(BMH_DETACHED)
                    || json
                        .pointer("/status/operationalStatus")
                        .and_then(Value::as_str)
                        == Some("detached");
                if !detached {
                    return Err(invalid(format!(
                        "BareMetalHost {host_ref} is managed by the BareMetal Operator, which would power it back on; direct BMC fencing needs it detached or a HostBmc"
                    )));
                }
                let bmc = bare_metal_host_bmc(&json)
                    .map_err(|e| invalid(format!("BareMetalHost {host_ref}: {e}")))?;
                let insecure = json
                    .pointer("/spec/bmc/disableCertificateVerification")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                (
                    bmc,
                    TlsOptions {
                        ca_bundle_pem: None,
                        insecure,
                    },
                )
            }
            _ => {
                return Err(invalid(
                    "no HostBmc and no BareMetalHost names its BMC".into(),
                ));
            }
        };
        let address = BmcAddress::parse(&bmc.address).map_err(|e| invalid(e.to_string()))?;
        let secrets: Api<Secret> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let secret = secrets
            .get(&bmc.credentials_name)
            .await
            .map_err(|e| invalid(format!("Secret {}: {e}", bmc.credentials_name)))?;
        let credentials = observe::secret_credentials(&secret)
            .map_err(|e| invalid(format!("Secret {}: {e}", bmc.credentials_name)))?;
        let driver =
            self.context
                .connector
                .connect(DriverConfig::new(address, credentials, tls))?;
        Ok(DirectBmc { driver })
    }

    async fn persist(
        &self,
        remediation: &mut Remediation,
        status: RemediationStatus,
    ) -> Result<()> {
        let mut object = remediation.clone();
        object.status = Some(status);
        // replace_status carries the resourceVersion: a concurrent writer makes it fail with
        // 409 instead of being overwritten.
        let updated = self
            .remediation_api()
            .replace_status(&remediation.name_any(), &PostParams::default(), &object)
            .await
            .map_err(Error::kube("PersistRemediation"))?;
        *remediation = updated;
        let last = remediation
            .status
            .as_ref()
            .and_then(|s| s.steps.last())
            .map(|s| s.step.as_str());
        if let Some(crash) = &self.context.crash_after_step
            && last == Some(crash.as_str())
            && !self
                .context
                .crashed
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return Err(Error::InjectedCrash(crash.clone()));
        }
        Ok(())
    }

    async fn event(&self, remediation: &Remediation, warning: bool, reason: &str, note: String) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note.chars().take(1024).collect()),
            action: reason.into(),
            secondary: None,
        };
        let reference = remediation.object_ref(&());
        if let Err(error) = self.context.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, "cannot publish an Event");
        }
    }

    fn machines_api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.context.client.clone(),
            &self.namespace,
            &machine_resource(),
        )
    }

    fn reboot_annotation(&self) -> String {
        format!("{REBOOT_PREFIX}{}", self.policy.reboot_key)
    }

    async fn request_power(
        &self,
        remediation: &Remediation,
        strategy: FenceStrategyName,
        off: bool,
    ) -> Result<()> {
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => {
                let Some((host_ref, _)) = self.host(remediation) else {
                    // Nothing to ask; the evidence says why and the planner escalates.
                    return Ok(());
                };
                let hosts = Api::namespaced_with(
                    self.context.client.clone(),
                    &host_ref.namespace,
                    &host_resource(),
                );
                execute::set_annotation(
                    &hosts,
                    &host_ref.name,
                    &self.reboot_annotation(),
                    off.then_some(r#"{"mode":"hard"}"#),
                    if off {
                        "RequestPowerOff"
                    } else {
                        "RequestPowerOn"
                    },
                )
                .await
            }
            FenceStrategyName::DirectBmc => {
                let bmc = self.direct_bmc(remediation).await?;
                if off {
                    bmc.driver.power_off(PowerOffMode::Forced).await?;
                } else {
                    bmc.driver.power_on().await?;
                }
                Ok(())
            }
        }
    }

    /// Withdraws every power-off request this remediation made (all strategies up to the
    /// current one), so the host comes back on.
    async fn withdraw_all(&self, remediation: &Remediation, upto: usize) -> Result<()> {
        for index in 0..=upto.min(self.policy.strategies.len().saturating_sub(1)) {
            let strategy = self.strategy_at(index);
            match strategy {
                FenceStrategyName::BareMetalHostRebootApi if self.host(remediation).is_none() => {}
                FenceStrategyName::DirectBmc if self.direct_bmc(remediation).await.is_err() => {}
                _ => self.request_power(remediation, strategy, false).await?,
            }
        }
        Ok(())
    }

    async fn act(
        &self,
        remediation: &mut Remediation,
        mut status: RemediationStatus,
        state: &Persisted,
        step: Step,
        proof: Option<ConfirmedOff>,
        node: Option<Arc<Node>>,
    ) -> Result<Option<Action>> {
        let now = self.context.clock.now();
        let nodes: Api<Node> = Api::all(self.context.client.clone());
        match step {
            Step::Done => return Ok(Some(Action::await_change())),
            Step::Wait { after } => {
                // A crash between persisting a request and making it leaves the phase without
                // its request: make sure it is in place while waiting.
                match state.phase {
                    Phase::PoweringOff => {
                        self.ensure_request(remediation, state, true).await?;
                    }
                    Phase::PoweringOn => {
                        self.ensure_request(remediation, state, false).await?;
                    }
                    _ => {}
                }
                return Ok(Some(Action::requeue(after)));
            }
            Step::Hold { reason } => {
                let was = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Held" && c.status == "True" && c.message == reason);
                if !was {
                    set_condition(&mut status, "Held", true, "SafetyGate", &reason, now);
                    self.persist(remediation, status).await?;
                    self.event(remediation, true, "Held", reason).await;
                }
                return Ok(Some(Action::requeue(Duration::from_secs(5))));
            }
            Step::Cancel => {
                record_step(&mut status, "Cancelled", Some(Phase::Cancelled), now);
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    false,
                    "Cancelled",
                    "the trigger went away before anything was done".into(),
                )
                .await;
                return Ok(Some(Action::await_change()));
            }
            Step::RequestPowerOff { strategy } => {
                let name = self.strategy_at(strategy);
                status.strategy = Some(strategy_name(name).into());
                status.driver = Some(self.driver_name(remediation, name).await);
                status.attempt = Some(state.attempt);
                set_condition(&mut status, "Held", false, "Started", "", now);
                record_step(
                    &mut status,
                    "PowerOffRequested",
                    Some(Phase::PoweringOff),
                    now,
                );
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    false,
                    "PowerOffRequested",
                    format!("fencing with {}", strategy_name(name)),
                )
                .await;
                if let Err(error) = self.request_power(remediation, name, true).await {
                    self.note_error(remediation, &error).await?;
                }
            }
            Step::WithdrawPowerOff => {
                self.withdraw_all(remediation, state.strategy).await?;
                record_step(
                    &mut status,
                    "PowerOffWithdrawn",
                    Some(Phase::Cancelled),
                    now,
                );
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    false,
                    "Cancelled",
                    "the trigger went away before the host was proven off; power-off withdrawn"
                        .into(),
                )
                .await;
                return Ok(Some(Action::await_change()));
            }
            Step::MarkFenced => {
                if proof.is_none() {
                    return Ok(Some(Action::requeue(self.context.poll)));
                }
                status.last_power_state = Some("Off".into());
                let by = status.strategy.clone().unwrap_or_default();
                set_condition(
                    &mut status,
                    "Fenced",
                    true,
                    "PowerOffConfirmed",
                    &format!("confirmed by {by}"),
                    now,
                );
                record_step(&mut status, "Fenced", Some(Phase::Fenced), now);
                self.persist(remediation, status).await?;
                execute::set_annotation(
                    &self.machines_api(),
                    &self.name,
                    POWERED_OFF_FOR_REMEDIATION,
                    Some(""),
                    "MarkMachine",
                )
                .await?;
                self.event(
                    remediation,
                    false,
                    "Fenced",
                    "the host is proven off".into(),
                )
                .await;
            }
            Step::BackUpNode => {
                if let Some(node) = &node {
                    status.node_backup = Some(execute::backup_of(node));
                    record_step(&mut status, "NodeBackedUp", None, now);
                    self.persist(remediation, status).await?;
                }
            }
            Step::ReleaseNode(mode) => {
                // The proof is taken again now, not remembered: a host turned back on since
                // the Fenced step is not off any more.
                let Some(proof) = proof else {
                    return Ok(Some(Action::requeue(self.context.poll)));
                };
                let node_name = remediation.spec.node_name.clone();
                match (mode, &node, node_name) {
                    (ReleaseMode::Delete, Some(node), Some(name)) => {
                        record_step(&mut status, "NodeDeleting", None, now);
                        self.persist(remediation, status.clone()).await?;
                        execute::delete_node(&proof, &nodes, &name, node.uid()).await?;
                        record_step(&mut status, "NodeDeleted", Some(Phase::NodeReleased), now);
                    }
                    (ReleaseMode::OutOfService, Some(node), Some(_)) => {
                        record_step(&mut status, "NodeTainting", None, now);
                        self.persist(remediation, status.clone()).await?;
                        execute::taint_out_of_service(&proof, &nodes, node).await?;
                        record_step(&mut status, "NodeTainted", Some(Phase::NodeReleased), now);
                    }
                    _ => record_step(&mut status, "NodeAbsent", Some(Phase::NodeReleased), now),
                }
                self.persist(remediation, status).await?;
            }
            Step::RequestPowerOn => {
                record_step(
                    &mut status,
                    "PowerOnRequested",
                    Some(Phase::PoweringOn),
                    now,
                );
                self.persist(remediation, status).await?;
                self.withdraw_all(remediation, state.strategy).await?;
                self.event(
                    remediation,
                    false,
                    "PowerOnRequested",
                    "powering the host on".into(),
                )
                .await;
            }
            Step::Restore => {
                if state.phase != Phase::Restoring {
                    record_step(&mut status, "Restoring", Some(Phase::Restoring), now);
                    self.persist(remediation, status.clone()).await?;
                }
                if let Some(node) = &node {
                    if let Some(backup) = &status.node_backup {
                        execute::restore_node(&nodes, node, backup).await?;
                    }
                    execute::remove_out_of_service(&nodes, node).await?;
                }
                self.withdraw_all(remediation, state.strategy).await?;
                let machines = self.machines_api();
                execute::set_annotation(
                    &machines,
                    &self.name,
                    POWERED_OFF_FOR_REMEDIATION,
                    None,
                    "UnmarkMachine",
                )
                .await?;
                execute::set_annotation(
                    &machines,
                    &self.name,
                    EXTERNAL_REMEDIATION,
                    None,
                    "RemoveTrigger",
                )
                .await?;
                set_condition(
                    &mut status,
                    "Succeeded",
                    true,
                    "NodeBack",
                    "the Node is Ready again",
                    now,
                );
                record_step(&mut status, "Succeeded", Some(Phase::Succeeded), now);
                self.persist(remediation, status).await?;
                self.event(remediation, false, "Succeeded", "the Node is back".into())
                    .await;
                return Ok(Some(Action::await_change()));
            }
            Step::Escalate { to, why } => {
                let name = self.strategy_at(to);
                status.strategy = Some(strategy_name(name).into());
                status.driver = Some(self.driver_name(remediation, name).await);
                status.last_error = Some(why.clone());
                record_step(&mut status, "Escalated", None, now);
                status.phase_since = Some(super::state::rfc3339(now));
                self.persist(remediation, status).await?;
                self.event(
                    remediation,
                    true,
                    "Escalated",
                    format!("{why}; trying {}", strategy_name(name)),
                )
                .await;
                if let Err(error) = self.request_power(remediation, name, true).await {
                    self.note_error(remediation, &error).await?;
                }
            }
            Step::Retry { attempt } => {
                status.attempt = Some(attempt);
                let name = self.strategy_at(0);
                status.strategy = Some(strategy_name(name).into());
                status.last_error = Some("the Node did not come back".into());
                record_step(&mut status, "Retry", Some(Phase::PoweringOff), now);
                status.phase_since = Some(super::state::rfc3339(now));
                self.persist(remediation, status).await?;
                self.event(remediation, true, "Retry", format!("power cycle {attempt}"))
                    .await;
                if let Err(error) = self.request_power(remediation, name, true).await {
                    self.note_error(remediation, &error).await?;
                }
            }
            Step::Fail(reason) => {
                let message = match &reason {
                    FailReason::PowerOffNotConfirmed(why) => {
                        format!("power-off never confirmed, the Node is left alone: {why}")
                    }
                    FailReason::NodeNeverReady => {
                        "the Node did not come back in any power cycle".to_string()
                    }
                };
                status.last_error = Some(message.clone());
                set_condition(&mut status, "Succeeded", false, "Failed", &message, now);
                record_step(&mut status, "Failed", Some(Phase::Failed), now);
                self.persist(remediation, status).await?;
                self.event(remediation, true, "Failed", message).await;
                return Ok(Some(Action::await_change()));
            }
        }
        Ok(None)
    }

    /// Re-makes a power request that a crash may have lost: at once for the reboot API (the
    /// cached host shows whether our annotation is there), after a quiet period for a BMC
    /// (which may still be acting on the first request).
    async fn ensure_request(
        &self,
        remediation: &mut Remediation,
        state: &Persisted,
        off: bool,
    ) -> Result<()> {
        let strategy = self.strategy_at(state.strategy);
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => {
                let Some((_, Some(host))) = self.host(remediation) else {
                    return Ok(());
                };
                let json = serde_json::to_value(&*host).unwrap_or(Value::Null);
                let requested =
                    bare_metal_host_view(&json, &self.policy.reboot_key).power_off_requested;
                if off && !requested {
                    self.request_power(remediation, strategy, true).await?;
                } else if !off && requested {
                    self.withdraw_all(remediation, state.strategy).await?;
                }
            }
            FenceStrategyName::DirectBmc => {
                let quiet = (self.context.poll * 10).max(Duration::from_secs(5));
                let waited =
                    since_epoch(self.context.clock.now()).saturating_sub(state.phase_since);
                if waited < quiet {
                    return Ok(());
                }
                let bmc = self.direct_bmc(remediation).await?;
                let power = bmc.driver.power_state().await?;
                if off && power == PowerState::On {
                    bmc.driver.power_off(PowerOffMode::Forced).await?;
                } else if !off && power == PowerState::Off {
                    bmc.driver.power_on().await?;
                }
            }
        }
        Ok(())
    }

    async fn driver_name(&self, remediation: &Remediation, strategy: FenceStrategyName) -> String {
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => "bmh-reboot-api".into(),
            FenceStrategyName::DirectBmc => match self.direct_bmc(remediation).await {
                Ok(bmc) => bmc
                    .driver
                    .bmc()
                    .split(':')
                    .next()
                    .unwrap_or("bmc")
                    .to_string(),
                Err(_) => "unavailable".into(),
            },
        }
    }

    async fn note_error(&self, remediation: &mut Remediation, error: &Error) -> Result<()> {
        let mut status = remediation.status.clone().unwrap_or_default();
        let text = error.to_string().replace(['\n', '\r'], " ");
        status.last_error = Some(text.clone());
        self.persist(remediation, status).await?;
        self.event(remediation, true, "StepFailed", text).await;
        Ok(())
    }
}

/// The attempt number in a Remediation name `<machine>-<n>`.
fn attempt_number(remediation: &str, machine: &str) -> u64 {
    remediation
        .strip_prefix(machine)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
