//! What a start rests on: the safety gates over the fleet's health and the remediations
//! under way, and the fresh reads (the Machine's trigger, every Remediation) that confirm a
//! start decided on the caches, which may lag behind.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;

use super::gates::{Candidate, Fleet, FleetHealth, Held, may_start};
use super::observe::{machine_is_control_plane, node_view};
use super::plan::{NodeView, Phase};
use super::run::{Launched, Pass};
use super::slim;
use crate::api::Remediation;
use crate::api::annotations::{EXTERNAL_REMEDIATION, PLANNED_REBOOT};
use crate::{Error, Result};

impl Pass {
    /// Whether the Machine carries the trigger, read from the API server now (not from the
    /// cache). A Machine that is gone carries none.
    pub(super) async fn trigger_confirmed(&self) -> Result<bool> {
        let api: Api<slim::Machine> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let machine = api
            .get_opt(&self.name)
            .await
            .map_err(Error::kube("GetMachine"))?;
        Ok(machine.is_some_and(|m| m.annotations().contains_key(EXTERNAL_REMEDIATION)))
    }

    /// Every Remediation, read from the API server now (not from the cache).
    pub(super) async fn fresh_remediations(&self) -> Result<Vec<Arc<Remediation>>> {
        let api: Api<Remediation> = Api::all(self.context.client.clone());
        let list = api
            .list(&kube::api::ListParams::default())
            .await
            .map_err(Error::kube("ListRemediations"))?;
        Ok(list.items.into_iter().map(Arc::new).collect())
    }

    /// The Machines' health, for the gates: taken once per step (it walks every Machine and
    /// its Node, milliseconds on a large cluster) and used for both the cached and the fresh
    /// look at the Remediations.
    pub(super) fn fleet_health(&self) -> FleetHealth {
        let machines = self.context.machines.state();
        // The Node of a Machine: Some(Ready or not), None when it has none.
        let node_ready = |machine: &slim::Machine| {
            let node = machine.status.as_ref()?.node_ref.as_ref()?;
            self.context
                .nodes
                .get(&ObjectRef::new(&node.name))
                .map(|n| is_ready(Some(&n)))
        };
        let mut health = FleetHealth {
            machines: machines.len(),
            ..FleetHealth::default()
        };
        for machine in &machines {
            let ready = node_ready(machine);
            if machine.annotations().contains_key(EXTERNAL_REMEDIATION) || ready == Some(false) {
                health.unhealthy += 1;
            }
            // Each Machine's role is read once, from its labels, not per comparison.
            if machine_is_control_plane(machine.labels()) {
                health.control_plane.insert(machine.name_any());
                if ready == Some(true) {
                    health.control_plane_ready += 1;
                }
            }
        }
        health
    }

    /// The safety gates for a start, over `remediations` (`fresh`: read from the API server
    /// just now; otherwise the cache, which may lag).
    pub(super) fn gates(
        &self,
        remediation: &Remediation,
        node: Option<&Node>,
        launched: &mut Launched,
        remediations: &[Arc<Remediation>],
        fresh: bool,
        health: &FleetHealth,
    ) -> std::result::Result<(), Held> {
        if let Some(by) = node.and_then(|n| n.annotations().get(PLANNED_REBOOT)) {
            return Err(Held::PlannedReboot { by: by.clone() });
        }
        let phase_of = |r: &Remediation| r.status.as_ref().map(|s| s.phase).unwrap_or_default();
        // A start the list shows past Pending needs no reminder. One it shows Pending still
        // does; so does one a lagging cache does not show at all (a fresh read that lacks it
        // means it was deleted).
        launched.retain(|(namespace, name), _| {
            let seen = remediations.iter().find(|r| {
                r.namespace().as_deref() == Some(namespace.as_str()) && r.name_any() == *name
            });
            match seen {
                Some(r) => phase_of(r) == Phase::Pending,
                None => !fresh,
            }
        });
        let mut running: Vec<String> = remediations
            .iter()
            .filter(|r| {
                let phase = phase_of(r);
                phase != Phase::Pending
                    && !phase.is_terminal()
                    && r.name_any() != remediation.name_any()
            })
            .map(|r| r.spec.machine_name.clone())
            .collect();
        running.extend(
            launched
                .iter()
                .filter(|((_, name), _)| *name != remediation.name_any())
                .map(|(_, machine)| machine.clone()),
        );
        let fleet = Fleet {
            machines: health.machines,
            unhealthy: health.unhealthy,
            running: running.len(),
            running_control_plane: running
                .iter()
                .filter(|machine| health.control_plane.contains(*machine))
                .count(),
            control_plane: health.control_plane.len(),
            control_plane_ready: health.control_plane_ready,
            out_of_service_taint: self.context.out_of_service_taint,
        };
        let candidate = Candidate {
            control_plane: machine_is_control_plane(self.machine.labels()),
            node_ready: is_ready(node),
        };
        may_start(candidate, fleet, &self.policy)
    }
}

/// Whether a Node is present and Ready.
fn is_ready(node: Option<&Node>) -> bool {
    matches!(
        node_view(node),
        NodeView::Present {
            ready_since: Some(_),
            ..
        }
    )
}
