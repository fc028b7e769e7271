//! *Observe → plan → execute* for one Node: the drift pass's wiring. It reads the Node, its
//! pool and its DriftRemediations, classifies the drift, opens a remediation within the pool's
//! budgets, then asks the pure planner for the next step and hands it to the executor
//! ([`Steps`]). `Pass` holds the primitives (`pass.rs`); each stage is a type of its own.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action;

use super::budget::{Deferred, may_start};
use super::classify::{ConfigState, classify};
use super::observe::{self, attempt_number, node_observation, pool_of, pool_view};
use super::pass::{Pass, record};
use super::pdb::blocking_budgets;
use super::plan::{Observed, PlanPolicy, next_step, recurrence_hold};
use super::retention::{counts_for_recurrence, recurrence_reset, retry_requested};
use crate::api::mco::MachineConfigPool;
use crate::api::{ConditionType, DriftEventReason, DriftStep};
use crate::api::{
    DriftMode, DriftPhase, DriftPolicySpec, DriftRemediation, DriftRemediationSpec,
    DriftRemediationStatus,
};
use crate::drift::housekeeping::Housekeeping;
use crate::drift::mark::PlannedReboot;
use crate::drift::node_ops::NodeOps;
use crate::drift::steps::Steps;
use crate::leader::Writes;
use crate::runtime::clock::{rfc3339, since_epoch};
use crate::runtime::events::Severity;
use crate::{Error, Result};

fn plan_policy(policy: &DriftPolicySpec, poll: Duration) -> PlanPolicy {
    let s = Duration::from_secs;
    PlanPolicy {
        mode: policy.mode,
        action: policy.action,
        debounce: s(policy.debounce_seconds),
        pickup_timeout: s(policy.timeouts.pickup_seconds),
        drain_timeout: s(policy.timeouts.drain_seconds),
        reboot_timeout: s(policy.timeouts.reboot_seconds),
        restore_timeout: s(policy.timeouts.restore_seconds),
        apply_timeout: s(policy.timeouts.apply_seconds),
        max_attempts: policy.max_attempts,
        escalate: policy.escalate_to_machine_remediation,
        drain_before_restore: policy.drain_before_restore,
        poll,
    }
}

impl Pass {
    /// Runs the pass.
    pub async fn run(self) -> Result<Action> {
        // Only the leader passes; every write below takes this leave and checks it again.
        let writes = self.context.leadership.writes()?;
        let writes = &writes;
        let all = self.remediations();
        let state = classify(self.node.annotations());
        // Terminal ones may still owe a cleanup (a forcefile that was not picked up).
        let mut owed = false;
        for ended in all.iter().filter(|r| {
            r.status.as_ref().is_some_and(|s| {
                s.phase.is_terminal() && (s.force_file_written || s.cordoned_by_us)
            })
        }) {
            owed = true;
            NodeOps::of(&self, writes).clean_up(ended).await?;
        }
        // The planned-reboot mark (see `guard`): set before a forcefile is written, kept
        // until the MCO is done with the node — also after a remediation ended.
        let marked = PlannedReboot::of(&self, writes)
            .guard_planned_reboot(None)
            .await?;
        let open = all
            .iter()
            .rev()
            .find(|r| !r.status.as_ref().is_some_and(|s| s.phase.is_terminal()));
        if let Some(open) = open {
            let mut remediation = DriftRemediation::clone(open);
            return self.drive(writes, &mut remediation).await;
        }
        // A re-apply we asked for is not over: no new attempt may start beside it (its
        // forcefile or its unforce helper would meet ours). Nothing wakes this pass when a
        // helper pod ends, so it looks again.
        if owed || marked.is_some() {
            return Ok(Action::requeue(self.context.poll));
        }
        Housekeeping::of(&self, writes)
            .refuse_malformed_retry(all.last())
            .await;
        match &state {
            ConfigState::Drifted(drift) => {
                let latest = all.last();
                // An aborted remediation of the same drift is the admin's "leave it".
                let aborted_same = latest.is_some_and(|r| {
                    r.phase() == DriftPhase::Aborted
                        && r.spec.kind == drift.kind
                        && r.spec.target == drift.target
                });
                // An operator's retry of the latest, Failed attempt opens a new one at once.
                let retry = latest.filter(|r| retry_requested(r));
                // One the recurrence cap failed waits out the window (else every debounce
                // would open an attempt the cap fails at once, for as long as it stays).
                let capped_at = latest
                    .filter(|_| retry.is_none())
                    .filter(|r| r.spec.kind == drift.kind && r.spec.target == drift.target)
                    .and_then(|r| r.status.as_ref())
                    .filter(|s| {
                        s.phase == DriftPhase::Failed
                            && s.conditions.iter().any(|c| {
                                c.type_ == ConditionType::Failed.as_str()
                                    && c.reason == DriftEventReason::DriftRecurring.as_str()
                            })
                    })
                    .and_then(|s| s.detected_at.as_deref())
                    .map(crate::runtime::clock::parse_rfc3339);
                let now = since_epoch(self.context.clock.now());
                let window = Duration::from_secs(self.policy.recurrence_window_seconds);
                if let Some(wait) = recurrence_hold(capped_at, now, window) {
                    return Ok(Action::requeue(wait));
                }
                if !aborted_same {
                    let next = latest.map_or(0, |r| attempt_number(r)) + 1;
                    if let Some(failed) = retry {
                        Housekeeping::of(&self, writes)
                            .mark_retried(failed, &format!("{}-{next}", self.name))
                            .await?;
                    }
                    self.open(writes, drift, next).await?;
                }
            }
            ConfigState::Degraded(why) => self.report_not_drift(&why.to_string()).await,
            _ => {
                if let Ok(mut reported) = self.context.reported.lock() {
                    reported.remove(&self.name);
                }
            }
        }
        // Nothing under way, owed or marked: the housekeeping of the finished ones.
        Housekeeping::of(&self, writes).prune(&all).await?;
        Ok(Action::await_change())
    }

    async fn report_not_drift(&self, why: &str) {
        let changed = match self.context.reported.lock() {
            Ok(mut reported) => {
                reported
                    .insert(self.name.clone(), why.to_string())
                    .as_deref()
                    != Some(why)
            }
            Err(_) => false,
        };
        if changed {
            let reason = self
                .node
                .annotations()
                .get(crate::api::mco::REASON)
                .cloned()
                .unwrap_or_default();
            let note = format!("not config drift ({why}); left to its owner: {reason}");
            self.node_event(Severity::Warning, DriftEventReason::NotDrift, note)
                .await;
        }
    }

    async fn open(
        &self,
        writes: &Writes,
        drift: &super::classify::Drift,
        attempt: u64,
    ) -> Result<()> {
        let pools = self.context.caches.pools.state();
        let pool = pool_of(&self.node, &pools)
            .map(|p| p.name_any())
            .unwrap_or_default();
        let name = format!("{}-{attempt}", self.name);
        let rendered = self
            .node
            .annotations()
            .get(crate::api::mco::CURRENT_CONFIG)
            .cloned()
            .unwrap_or_default();
        let mut object = DriftRemediation::new(
            &name,
            DriftRemediationSpec {
                node_name: self.name.clone(),
                pool,
                kind: drift.kind,
                target: drift.target.clone(),
                rendered_config: rendered,
                action: self.policy.action,
                abort: false,
            },
        );
        writes.check()?;
        let created = match self.api().create(&PostParams::default(), &object).await {
            Ok(created) => created,
            // Another pass (or a replica before us) made it; the next pass drives it.
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(e) => return Err(Error::kube("CreateDriftRemediation")(e)),
        };
        object = created;
        let now = rfc3339(self.context.clock.now());
        let mut status = DriftRemediationStatus {
            detected_at: Some(now.clone()),
            // Debouncing is the default phase: its start must be set, not left to the
            // creation time (whole seconds).
            phase_since: Some(now.clone()),
            reason: self
                .node
                .annotations()
                .get(crate::api::mco::REASON)
                .cloned(),
            expected_sha256: self.expected_digest(&object).await,
            ..DriftRemediationStatus::default()
        };
        record(
            &mut status,
            DriftStep::DriftDetected,
            Some(DriftPhase::Debouncing),
            &now,
        );
        self.persist(writes, &mut object, status).await?;
        let note = format!(
            "{} drift on {} (against {}); waiting {} s for it to heal by itself",
            drift.kind, drift.target, object.spec.rendered_config, self.policy.debounce_seconds
        );
        self.event(
            &object,
            Severity::Normal,
            DriftEventReason::DriftDetected,
            note,
        )
        .await;
        Ok(())
    }

    /// The SHA-256 of the drifted file's expected content, from the rendered config.
    async fn expected_digest(&self, remediation: &DriftRemediation) -> Option<String> {
        let expected = self.expected(remediation).await.ok()?;
        expected.digest()
    }

    /// Drives an open remediation one step.
    /// One observe–plan–execute round of an open remediation.
    async fn drive(&self, writes: &Writes, remediation: &mut DriftRemediation) -> Result<Action> {
        let context = &self.context;
        let pools = context.caches.pools.state();
        let pool: Option<&MachineConfigPool> = pool_of(&self.node, &pools);
        let mcn = context
            .caches
            .mcns
            .get(&kube::runtime::reflector::ObjectRef::new(&self.name));
        let mut node = node_observation(&self.node, remediation, pool, mcn.as_deref());
        let persisted = observe::persisted(remediation);
        let now = since_epoch(context.clock.now());
        let policy = plan_policy(&self.policy, context.poll);
        let phase = persisted.phase;
        let before_start = matches!(phase, DriftPhase::Pending);
        // Starts are decided one at a time: two nodes of a pool must not both pass the budget.
        let _start_lock = if before_start {
            Some(context.starts.lock().await)
        } else {
            None
        };
        let disabled = if before_start {
            observe::drift_disabled(&self.node, pool)
        } else {
            None
        };
        // Held for good before the start (see the planner): no gate or budget to read.
        let acting = policy.mode == DriftMode::Remediate && disabled.is_none();
        let gates = match (before_start && acting, pool) {
            (true, Some(pool)) => self.pool_gates(pool),
            _ => Ok(()),
        };
        let needs_budgets = (before_start && acting && policy.drains())
            || matches!(phase, DriftPhase::Applying | DriftPhase::Draining);
        let (blocking, on_node) = if needs_budgets {
            self.blocking_budgets().await?
        } else {
            (Vec::new(), Vec::new())
        };
        if phase == DriftPhase::Draining {
            node.pods_to_evict = on_node
                .iter()
                .filter(|p| super::pdb::evicted_by_drain(p))
                .count();
        }
        let observed = Observed {
            now,
            node: Some(node.clone()),
            gates,
            blocking,
            recent_attempts: self.recent_attempts(remediation, now),
            disabled,
        };
        let step = next_step(&persisted, &observed, &policy);
        tracing::debug!(remediation = %remediation.name_any(), ?step, "planned");
        Steps::of(self, writes)
            .execute(remediation, step, &node)
            .await
    }

    /// Whether the pool's budget lets this node start: the nodes of the pool disrupted by a
    /// drift remediation under way or by a machine remediation count against it.
    fn pool_gates(&self, pool: &MachineConfigPool) -> std::result::Result<(), Deferred> {
        let context = &self.context;
        let nodes = context.caches.nodes.state();
        let drift_busy = |n: &str| {
            context.caches.remediations.state().iter().any(|r| {
                r.spec.node_name == n
                    && r.status.as_ref().is_some_and(|s| {
                        matches!(
                            s.phase,
                            DriftPhase::ForceRequested
                                | DriftPhase::Applying
                                | DriftPhase::Restoring
                        )
                    })
            })
        };
        let machine_busy = |n: &str| {
            context.caches.machine_remediations.state().iter().any(|r| {
                r.spec.node_name.as_deref() == Some(n)
                    && !r.status.as_ref().is_some_and(|s| s.phase.is_terminal())
            })
        };
        let view = pool_view(pool, &nodes, &self.node, &drift_busy, &machine_busy);
        may_start(&view, &self.name)
    }

    /// The node's other remediations that ended (Succeeded, Failed, Escalated) within the
    /// policy's recurrence window, after the last retry: drift that keeps coming back is
    /// held, not fixed forever.
    fn recent_attempts(&self, remediation: &DriftRemediation, now: Duration) -> u32 {
        let window = Duration::from_secs(self.policy.recurrence_window_seconds);
        let all = self.remediations();
        let reset = recurrence_reset(&all);
        let count = all
            .iter()
            .filter(|r| r.name_any() != remediation.name_any())
            .filter(|r| counts_for_recurrence(r, reset, now, window))
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// The budgets a drain of the node would meet, and the pods on the node.
    async fn blocking_budgets(&self) -> Result<(Vec<super::pdb::Blocking>, Vec<Pod>)> {
        let pods: Api<Pod> = Api::all(self.context.client.clone());
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={}", self.name)))
            .await
            .map_err(Error::kube("ListPodsOnNode"))?
            .items;
        if on_node.is_empty() {
            return Ok((Vec::new(), on_node));
        }
        let budgets: Api<PodDisruptionBudget> = Api::all(self.context.client.clone());
        let budgets = budgets
            .list(&ListParams::default())
            .await
            .map_err(Error::kube("ListPodDisruptionBudgets"))?
            .items;
        Ok((blocking_budgets(&on_node, &budgets), on_node))
    }
}
