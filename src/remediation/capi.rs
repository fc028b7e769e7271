//! Cluster API Machines: the BareMetalHost of a Machine is found as metal3's provider finds
//! it, Machine → its `spec.infrastructureRef` (a Metal3Machine) → that object's
//! `metal3.io/BareMetalHost: <namespace>/<name>` annotation. The Node comes from the
//! Machine's `status.nodeRef`, as for OpenShift's Machines.
//!
//! Guarantees: read fresh when a remediation starts (the host is then recorded in the
//! Remediation); a missing or malformed reference is an `Unusable` (an Event, and the
//! strategies say the rest), never a guess; the Metal3Machine is read in the Machine's
//! namespace only, and no start passes the `HostNotOwned` gate unless the host is in the
//! Machine's namespace and its `spec.consumerRef` names that Metal3Machine, read fresh
//! ([`Pass::host_owner_gate`], whatever the strategy: the BMC of a host is the host's too). Caveats: a BareMetalHost's `consumerRef` names
//! the Metal3Machine, not the Machine, so a host's changes do not wake the Machine's pass;
//! the pass looks again at its poll interval while it waits for the host.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use super::gates::Held;
use super::observe::{HostRef, Unusable, machine_host};
use super::pass::Pass;
use super::trust::host_consumed_by;
use crate::api::slim::{self, MachineApi};
use crate::{Error, Result};

/// The kind a Cluster API Machine names for bare metal.
const METAL3_MACHINE: &str = "Metal3Machine";

/// metal3's Metal3Machine resource (`infrastructure.cluster.x-k8s.io/v1beta1`).
fn metal3_machine_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructure.cluster.x-k8s.io", "v1beta1", METAL3_MACHINE),
        "metal3machines",
    )
}

impl Pass {
    /// The BareMetalHost of the Machine: from the Machine itself (OpenShift), or through its
    /// Metal3Machine (Cluster API). `Ok(Ok(None))`: it names none.
    pub(super) async fn host_of_machine(
        &self,
        machine_json: &serde_json::Value,
    ) -> Result<std::result::Result<Option<HostRef>, Unusable>> {
        if self.context.machine_api == MachineApi::OpenShift {
            return Ok(machine_host(machine_json));
        }
        let Some(reference) = self
            .subject
            .machine()
            .and_then(|m| m.spec.as_ref())
            .and_then(|s| s.infrastructure_ref.as_ref())
        else {
            return Ok(Ok(None));
        };
        if reference.kind.as_deref() != Some(METAL3_MACHINE) {
            return Ok(Ok(None));
        }
        // Same namespace only (cluster-api-provider-metal3 enforces it too): a Machine may not
        // reach into another namespace for its infrastructure; the gate tells why.
        let namespace = self.namespace.as_str();
        if reference
            .namespace
            .as_deref()
            .is_some_and(|n| n != namespace)
        {
            return Ok(Ok(None));
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.context.client.clone(),
            namespace,
            &metal3_machine_resource(),
        );
        let Some(object) = api
            .get_opt(&reference.name)
            .await
            .map_err(Error::kube("GetMetal3Machine"))?
        else {
            return Ok(Err(Unusable {
                field: "spec.infrastructureRef".into(),
                reason: format!("Metal3Machine {namespace}/{} not found", reference.name),
            }));
        };
        // The Metal3Machine carries the annotation the OpenShift Machine carries; its
        // providerID (`metal3://…`) is not the BareMetalHost form and is passed over.
        let json = serde_json::to_value(&object).unwrap_or_default();
        Ok(machine_host(&json).map_err(|unusable| Unusable {
            field: format!("Metal3Machine {}: {}", reference.name, unusable.field),
            reason: unusable.reason,
        }))
    }
}

impl Pass {
    /// The `HostNotOwned` gate of a Cluster API Machine: its `spec.infrastructureRef` in its own
    /// namespace, and the host recorded at the start in that namespace with a
    /// `spec.consumerRef` naming that Metal3Machine, read from the API server now. Other
    /// Machine APIs and Machines naming no Metal3Machine pass.
    pub(super) async fn host_owner_gate(
        &self,
        remediation: &crate::api::Remediation,
    ) -> Result<std::result::Result<(), Held>> {
        if self.context.machine_api != MachineApi::ClusterApi {
            return Ok(Ok(()));
        }
        let Some(reference) = self
            .subject
            .machine()
            .and_then(|m| m.spec.as_ref())
            .and_then(|s| s.infrastructure_ref.as_ref())
            .filter(|r| r.kind.as_deref() == Some(METAL3_MACHINE))
        else {
            return Ok(Ok(()));
        };
        let held = |why: String| Ok(Err(Held::HostNotOwned { why }));
        if let Some(other) = reference
            .namespace
            .as_deref()
            .filter(|n| *n != self.namespace)
        {
            return held(format!(
                "spec.infrastructureRef names Metal3Machine {other}/{}, outside the Machine's namespace {}",
                reference.name, self.namespace
            ));
        }
        let Some((host_namespace, host)) = remediation
            .spec
            .host
            .as_deref()
            .and_then(|h| h.split_once('/'))
        else {
            // No host: nothing of a BareMetalHost to power.
            return Ok(Ok(()));
        };
        let consumer = if host_namespace == self.namespace {
            let hosts: Api<slim::BareMetalHost> =
                Api::namespaced(self.context.client.clone(), host_namespace);
            let Some(fresh) = hosts
                .get_opt(host)
                .await
                .map_err(Error::kube("GetBareMetalHost"))?
            else {
                return held(format!("BareMetalHost {host_namespace}/{host} not found"));
            };
            fresh.spec.and_then(|s| s.consumer_ref)
        } else {
            // Never read: another namespace's host is refused whatever it says.
            None
        };
        match host_consumed_by(
            &self.namespace,
            &reference.name,
            (host_namespace, host),
            consumer.as_ref(),
        ) {
            Ok(()) => Ok(Ok(())),
            Err(why) => held(why),
        }
    }
}
