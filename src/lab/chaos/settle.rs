//! When a chaos seed is over: nothing left to do, or a reason why not.

use std::time::{Duration, Instant};

use baremend_sim::cluster::MACHINE_NAMESPACE;
use kube::api::{Api, ListParams};

use super::super::setup::LabCluster;
use super::check::{latest_failed, latest_per_machine, node_ready};
use super::plan::HealthCheck;
use super::trigger;
use crate::api::{Remediation, RemediationPhase};
use crate::{Error, Result};

/// The longest a seed may take to settle after the window before it counts as stuck.
const SETTLE_LIMIT: Duration = Duration::from_secs(40);

/// Every Remediation in the Machines' namespace.
pub(super) async fn list_remediations(lab: &LabCluster) -> Result<Vec<Remediation>> {
    let api: Api<Remediation> = Api::namespaced(lab.client.clone(), MACHINE_NAMESPACE);
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("ListRemediations"))?
        .items)
}

/// Waits until nothing is left to do: every Remediation ended, every Node back and Ready
/// unless its Machine's latest remediation failed or its NodeRemediation was timed out by
/// the NodeHealthCheck (the next remediator's turn, which the simulated cluster does not
/// serve; the latest remediation must not have succeeded), and no trigger without a failed
/// remediation (the annotation, or a request not timed out: a health check withdraws its
/// request once the Machine is healthy); where the MCO runs, also every DriftRemediation
/// ended, no planned-reboot mark left and the MCO idle on every node (see
/// [`super::drift::unsettled`]) — twice in a row, 300 ms apart.
pub(super) async fn settle(
    lab: &LabCluster,
    check: HealthCheck,
) -> std::result::Result<(), String> {
    let started = Instant::now();
    let mut calm = 0;
    loop {
        let why = unsettled(lab, check).await;
        match why {
            None => {
                calm += 1;
                if calm >= 2 {
                    return Ok(());
                }
            }
            Some(why) => {
                calm = 0;
                if started.elapsed() > SETTLE_LIMIT {
                    return Err(format!(
                        "not settled {} s after the faults: {why}",
                        SETTLE_LIMIT.as_secs()
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Whether the Node of `machine` is left to the NodeHealthCheck's next remediator: its
/// request timed out, and its latest remediation (if any) did not bring it back.
fn escalated(
    lab: &LabCluster,
    check: HealthCheck,
    machine: &str,
    latest: Option<&&Remediation>,
) -> bool {
    let succeeded = latest
        .and_then(|r| r.status.as_ref())
        .is_some_and(|s| s.phase == RemediationPhase::Succeeded);
    !succeeded && trigger::timed_out(&lab.api, check, machine)
}

async fn unsettled(lab: &LabCluster, check: HealthCheck) -> Option<String> {
    let remediations = match list_remediations(lab).await {
        Ok(list) => list,
        Err(error) => return Some(error.to_string()),
    };
    for remediation in &remediations {
        let status = remediation.status.clone().unwrap_or_default();
        if !status.phase.is_terminal() {
            return Some(format!(
                "Remediation {} is {:?}",
                remediation.metadata.name.as_deref().unwrap_or_default(),
                status.phase
            ));
        }
    }
    let latest = latest_per_machine(&remediations);
    for info in lab.cluster.hosts() {
        if latest_failed(&latest, &info.name)
            || escalated(lab, check, &info.name, latest.get(&info.name))
        {
            continue;
        }
        // A workload cluster's Node lives there, under its own name.
        let node = match &info.cluster {
            Some(cluster) => super::fleet::workload_reader(lab, cluster)
                .ok_or_else(|| format!("no workload cluster {cluster}"))
                .and_then(|api| {
                    api.get(baremend_sim::cluster::local::NODES, "", &info.node_name)
                        .map_err(|e| format!("{e:?}"))
                }),
            None => lab
                .api
                .get(baremend_sim::cluster::local::NODES, "", &info.name)
                .map_err(|e| format!("{e:?}")),
        };
        let ready = node.as_ref().is_ok_and(node_ready);
        if !ready {
            let latest = latest
                .get(&info.name)
                .and_then(|r| r.status.as_ref())
                .map(|s| {
                    (
                        s.phase,
                        s.steps.iter().map(|t| t.step.clone()).collect::<Vec<_>>(),
                    )
                });
            let conditions = node
                .as_ref()
                .ok()
                .and_then(|n| n.pointer("/status/conditions").cloned());
            return Some(format!(
                "Node {} is not back (Node {}, conditions {conditions:?}; latest remediation {latest:?}; power {:?}; faults {:?})",
                info.name,
                if node.is_ok() { "present" } else { "absent" },
                info.host.history(),
                info.faults,
            ));
        }
        if let Some(left) = trigger::left(&lab.api, check, &info.name) {
            return Some(left);
        }
    }
    if lab.cluster.mco().is_some() {
        // A host kept off by a failed remediation runs no daemon: its MCO state is frozen; so
        // is a hung one left to the NodeHealthCheck's next remediator.
        let gone_for_good =
            |node: &str| latest_failed(&latest, node) || trigger::timed_out(&lab.api, check, node);
        return super::drift::unsettled(&lab.api, &gone_for_good);
    }
    None
}
