//! Cluster API Machines: the BareMetalHost of a Machine is found as metal3's provider finds
//! it, Machine → its `spec.infrastructureRef` (a Metal3Machine) → that object's
//! `metal3.io/BareMetalHost: <namespace>/<name>` annotation. The Node comes from the
//! Machine's `status.nodeRef`, as for OpenShift's Machines.
//!
//! Guarantees: read fresh when a remediation starts (the host is then recorded in the
//! Remediation); a missing or malformed reference is an `Unusable` (an Event, and the
//! strategies say the rest), never a guess. Caveats: a BareMetalHost's `consumerRef` names
//! the Metal3Machine, not the Machine, so a host's changes do not wake the Machine's pass;
//! the pass looks again at its poll interval while it waits for the host.

use std::collections::HashMap;

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use super::observe::{HostRef, Unusable, machine_host};
use super::pass::Pass;
use crate::api::slim::{self, MachineApi};
use crate::{Error, Result};

/// The kind a Cluster API Machine names for bare metal.
const METAL3_MACHINE: &str = "Metal3Machine";

/// metal3's Metal3Machine resource (`infrastructure.cluster.x-k8s.io/v1beta1`).
pub fn metal3_machine_resource() -> ApiResource {
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
        let Some((namespace, name)) = self
            .subject
            .machine()
            .and_then(|m| metal3_machine_of(m, &self.namespace))
        else {
            return Ok(Ok(None));
        };
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.context.client.clone(),
            &namespace,
            &metal3_machine_resource(),
        );
        let Some(object) = api
            .get_opt(&name)
            .await
            .map_err(Error::kube("GetMetal3Machine"))?
        else {
            return Ok(Err(Unusable {
                field: "spec.infrastructureRef".into(),
                reason: format!("Metal3Machine {namespace}/{name} not found"),
            }));
        };
        let json = serde_json::to_value(&object).unwrap_or_default();
        Ok(metal3_machine_host(&name, &json))
    }
}

/// The Metal3Machine of a Cluster API Machine, if it names one: `(namespace, name)` of its
/// `spec.infrastructureRef` when that is a Metal3Machine (`namespace`: the Machine's, unless
/// the reference names one).
pub fn metal3_machine_of(machine: &slim::Machine, namespace: &str) -> Option<(String, String)> {
    let reference = machine.spec.as_ref()?.infrastructure_ref.as_ref()?;
    if reference.kind.as_deref() != Some(METAL3_MACHINE) {
        return None;
    }
    let namespace = reference.namespace.as_deref().unwrap_or(namespace);
    Some((namespace.to_string(), reference.name.clone()))
}

/// The BareMetalHost a Metal3Machine (`name`, read as JSON) names. It carries the annotation
/// the OpenShift Machine carries; its providerID (`metal3://…`) is not the BareMetalHost form
/// and is passed over.
pub fn metal3_machine_host(
    name: &str,
    metal3_machine: &serde_json::Value,
) -> std::result::Result<Option<HostRef>, Unusable> {
    machine_host(metal3_machine).map_err(|unusable| Unusable {
        field: format!("Metal3Machine {name}: {}", unusable.field),
        reason: unusable.reason,
    })
}

/// Each Cluster API Machine's BareMetalHost (by `namespace/name`), through its Metal3Machine,
/// read with a GET as when a remediation starts (the controller's grant on metal3machines is
/// `get`): for `baremend check` and the periodic fencing readiness check, whose Machines carry
/// no host of their own. A Metal3Machine that is gone or names no usable host is the Machine's
/// answer (an error text), not the whole call's.
pub async fn hosts_of_machines(
    client: &kube::Client,
    machines: &[std::sync::Arc<slim::Machine>],
) -> Result<HashMap<String, std::result::Result<Option<HostRef>, String>>> {
    let mut resolved = HashMap::new();
    for machine in machines {
        let namespace = machine.namespace().unwrap_or_default();
        let key = format!("{namespace}/{}", machine.name_any());
        let host = match metal3_machine_of(machine, &namespace) {
            None => Ok(None),
            Some((namespace, name)) => {
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &metal3_machine_resource());
                match api
                    .get_opt(&name)
                    .await
                    .map_err(Error::kube("GetMetal3Machine"))?
                {
                    None => Err(format!("Metal3Machine {namespace}/{name} not found")),
                    Some(object) => {
                        let json = serde_json::to_value(&object).unwrap_or_default();
                        metal3_machine_host(&name, &json).map_err(|e| format!("Machine {key}: {e}"))
                    }
                }
            }
        };
        resolved.insert(key, host);
    }
    Ok(resolved)
}
