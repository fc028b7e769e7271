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
//! the worker, an empty request spec; a `HostBmc` pairing an administrator's BMC Secret with
//! an endpoint that counts who connects), so only their namespace tells them apart from a
//! health check's or an administrator's.
//! Caveats: they are written through the store, not as the tenant's identity: what RBAC lets
//! a tenant do is `tests/trust_attacks_e2e.rs`'s; here only what the controller does with
//! such objects is judged.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use baremend_sim::cluster::local::{HOST_BMCS, Local, MACHINE_REMEDIATIONS, NAMESPACES, SECRETS};
use baremend_sim::cluster::nhc::NODE_REMEDIATIONS;
use serde_json::json;

pub use super::plan::TENANT_NAMESPACE;
use crate::runtime::tasks::Background;

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

/// The endpoint of a tenant's `HostBmc`: a listener that counts the connections made to it
/// (invariant 10: there must be none), kept listening while this value lives.
#[derive(Debug)]
pub struct TenantBmc {
    /// The Node the `HostBmc` claims.
    pub node: String,
    connections: Arc<AtomicUsize>,
    _listening: Background,
}

impl TenantBmc {
    /// An endpoint listening on a free loopback port for the tenant's claim of `node`, and
    /// that port.
    pub async fn listen(node: &str) -> Result<(TenantBmc, u16), String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("the tenant's BMC endpoint cannot listen: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("the tenant's BMC endpoint has no address: {e}"))?
            .port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let listening = Background::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                drop(stream);
            }
        });
        let endpoint = TenantBmc {
            node: node.to_owned(),
            connections,
            _listening: listening,
        };
        Ok((endpoint, port))
    }

    /// How many connections reached the endpoint.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}

/// The tenant claims `node` with a `HostBmc` of its own: an endpoint of its choosing (a
/// listener of [`TenantBmc`]) paired with a BMC Secret an administrator keeps in the tenant's
/// namespace, which the tenant may name but not read — sent anywhere, the Secret's username
/// and password would be the tenant's. Over HTTPS, so that only trust can keep the
/// controller away, not the policy's refusal of insecure BMCs.
pub(super) async fn claim(api: &Local, node: &str, password: &str) -> Result<TenantBmc, String> {
    namespace(api);
    let (endpoint, port) = TenantBmc::listen(node).await?;
    let secret = format!("{node}-admin-bmc");
    let made = |gvr, object| {
        api.create(gvr, TENANT_NAMESPACE, object)
            .map(|_| ())
            .map_err(|e| format!("the tenant's HostBmc for {node}: {e:?}"))
    };
    made(
        SECRETS,
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": TENANT_NAMESPACE},
            "stringData": {"username": "admin", "password": password}}),
    )?;
    made(
        HOST_BMCS,
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc",
            "metadata": {"name": node, "namespace": TENANT_NAMESPACE},
            "spec": {"nodeName": node,
                "address": format!("redfish://127.0.0.1:{port}/redfish/v1/Systems/1"),
                "credentialsName": secret}}),
    )?;
    Ok(endpoint)
}
