//! One pass over one Node, and the primitives every stage of it uses: its DriftRemediations
//! in the cache, persisting a status (the step before the act), and telling it (Events on the
//! DriftRemediation and the Node). The pass's wiring is `reconcile.rs`; each stage is a type
//! of its own over the pass (`Steps`, `NodeOps`, `PlannedReboot`, `Housekeeping`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};

use super::context::DriftContext;
use super::observe::{attempt_number, pool_of};
use crate::api::{DriftEventReason, DriftStep};
use crate::api::{DriftPhase, DriftPolicySpec, DriftRemediation, DriftRemediationStatus, StepTime};
use crate::leader::Writes;
use crate::runtime::clock::since_epoch;
use crate::runtime::events::Severity;
use crate::{Error, Result};

/// One pass.
pub struct Pass {
    pub(super) node: Arc<Node>,
    pub(super) name: String,
    pub(super) context: Arc<DriftContext>,
    pub(super) policy: DriftPolicySpec,
}

pub(super) fn record(
    status: &mut DriftRemediationStatus,
    step: DriftStep,
    phase: Option<DriftPhase>,
    now: &str,
) {
    status.steps.push(StepTime {
        step: step.into(),
        attempt: 1,
        time: now.into(),
    });
    if let Some(phase) = phase
        && phase != status.phase
    {
        status.phase = phase;
        status.phase_since = Some(now.into());
    }
}

impl Pass {
    /// A pass over `node`.
    pub fn new(node: Arc<Node>, context: Arc<DriftContext>) -> Self {
        let policy = context.policy();
        Pass {
            name: node.name_any(),
            node,
            context,
            policy,
        }
    }

    pub(super) fn api(&self) -> Api<DriftRemediation> {
        Api::all(self.context.client.clone())
    }

    pub(super) fn remediations(&self) -> Vec<Arc<DriftRemediation>> {
        let mut all: Vec<Arc<DriftRemediation>> = self
            .context
            .caches
            .remediations
            .state()
            .into_iter()
            .filter(|r| r.spec.node_name == self.name)
            .collect();
        all.sort_by_key(|r| attempt_number(r));
        all
    }

    pub(super) async fn expected(
        &self,
        remediation: &DriftRemediation,
    ) -> std::result::Result<super::content::Expected, String> {
        let configs: Api<crate::api::mco::MachineConfig> = Api::all(self.context.client.clone());
        let config = configs
            .get(&remediation.spec.rendered_config)
            .await
            .map_err(|e| {
                let why = crate::kube_text(&e);
                format!("cannot read {}: {why}", remediation.spec.rendered_config)
            })?;
        let ignition = config.spec.map(|s| s.config).unwrap_or_default();
        let state = super::content::ExpectedState::from_configs([&ignition])
            .map_err(|e| format!("{}: {e}", remediation.spec.rendered_config))?;
        state
            .files
            .get(&remediation.spec.target)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{} is not in {}",
                    remediation.spec.target, remediation.spec.rendered_config
                )
            })
    }

    /// Counts the end of `remediation` with `outcome` (its terminal phase's name) and, for a
    /// failure, its reason.
    pub(super) fn ended(
        &self,
        remediation: &DriftRemediation,
        outcome: &str,
        reason: Option<DriftEventReason>,
    ) {
        let reason = reason.map_or("", DriftEventReason::as_str);
        let detected = remediation
            .status
            .as_ref()
            .and_then(|s| s.detected_at.as_deref())
            .map(crate::runtime::clock::parse_rfc3339)
            .unwrap_or_default();
        let took = since_epoch(self.context.clock.now()).saturating_sub(detected);
        let action = remediation.spec.action.as_str();
        self.context
            .metrics
            .drift
            .ended(action, outcome, reason, took);
    }

    pub(super) async fn persist(
        &self,
        writes: &Writes,
        remediation: &mut DriftRemediation,
        status: DriftRemediationStatus,
    ) -> Result<()> {
        writes.check()?;
        let mut object = remediation.clone();
        object.status = Some(status);
        *remediation = self
            .api()
            .replace_status(&remediation.name_any(), &PostParams::default(), &object)
            .await
            .map_err(Error::kube("PersistDriftRemediation"))?;
        Ok(())
    }

    /// An Event on the Node alone.
    pub(super) async fn node_event(
        &self,
        severity: Severity,
        reason: DriftEventReason,
        note: String,
    ) {
        let node = self.node.object_ref(&());
        crate::runtime::events::publish(
            &self.context.recorder,
            severity,
            reason.as_str(),
            &note,
            &[(node, None)],
        )
        .await;
    }

    /// An Event on the Node, its pool and the DriftRemediation, each naming another.
    pub(super) async fn event(
        &self,
        remediation: &DriftRemediation,
        severity: Severity,
        reason: DriftEventReason,
        note: String,
    ) {
        let own = remediation.object_ref(&());
        let node = self.node.object_ref(&());
        let pools = self.context.caches.pools.state();
        let mut pairs = vec![(node.clone(), Some(own.clone())), (own.clone(), Some(node))];
        if let Some(pool) = pool_of(&self.node, &pools) {
            pairs.push((pool.object_ref(&()), Some(own)));
        }
        let reason = reason.as_str();
        crate::runtime::events::publish(&self.context.recorder, severity, reason, &note, &pairs)
            .await;
    }
}
