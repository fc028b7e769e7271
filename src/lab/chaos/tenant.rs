//! The tenant of the chaos seeds: someone with rights only in [`TENANT_NAMESPACE`], which no
//! policy trusts, who asks for a worker's remediation there or claims its Node with a
//! `HostBmc` of its own. The controller must refuse both and change nothing: the checker's
//! invariant 10 fails any Remediation that names the tenant's namespace, and invariant 6
//! counts no trigger from it.
//!
//! Expected flow: the plan draws [`super::plan::Fault::TenantRequest`] or
//! [`super::plan::Fault::TenantHostBmc`] → the harness calls [`request`] or [`claim`] at its
//! time.
//! Guarantees: the objects are made as a tenant would make them (in its namespace, named after
//! the worker, an empty request spec; a `HostBmc` with a Secret of its own), so only their
//! namespace tells them apart from a health check's.
//! Caveats: they are written through the store, not as the tenant's identity: what RBAC lets
//! a tenant do is `tests/trust_attacks_e2e.rs`'s; here only what the controller does with
//! such objects is judged.

use baremend_sim::cluster::local::{HOST_BMCS, Local, MACHINE_REMEDIATIONS, NAMESPACES, SECRETS};
use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;
use serde_json::json;

pub use super::plan::TENANT_NAMESPACE;

/// The tenant's namespace, made on first use.
fn namespace(api: &Local) {
    let _ = api.create(
        NAMESPACES,
        "",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TENANT_NAMESPACE}}),
    );
}

/// The tenant asks for `node`'s remediation in its namespace, with both contracts' requests.
pub(super) fn request(api: &Local, node: &str) {
    namespace(api);
    for (kind, gvr) in [
        ("NodeRemediation", NODE_REMEDIATIONS),
        ("MachineRemediation", MACHINE_REMEDIATIONS),
    ] {
        let _ = api.create(
            gvr,
            TENANT_NAMESPACE,
            json!({"apiVersion": "baremend.io/v1alpha1", "kind": kind,
                "metadata": {"name": node, "namespace": TENANT_NAMESPACE}, "spec": {}}),
        );
    }
}

/// The tenant claims `node` with a `HostBmc` of its own: its own endpoint and Secret.
pub(super) fn claim(api: &Local, node: &str) {
    namespace(api);
    let secret = format!("{node}-tenant-bmc");
    let _ = api.create(
        SECRETS,
        TENANT_NAMESPACE,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": TENANT_NAMESPACE},
            "stringData": {"username": "tenant", "password": "tenant"}}),
    );
    let _ = api.create(
        HOST_BMCS,
        TENANT_NAMESPACE,
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc",
            "metadata": {"name": node, "namespace": TENANT_NAMESPACE},
            "spec": {"nodeName": node, "address": "redfish+http://127.0.0.1:9/redfish/v1/Systems/1",
                "credentialsName": secret}}),
    );
}
