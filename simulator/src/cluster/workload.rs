//! Cluster API workload clusters: a management cluster (Machines, Metal3Machines,
//! BareMetalHosts, BMC Secrets, MachineHealthChecks) and one API server per workload cluster
//! holding that cluster's Nodes, as Cluster API runs a fleet (read from
//! kubernetes-sigs/cluster-api main, November 2026: `api/core/v1beta1/cluster_types.go` for the
//! Cluster, `util/secret` and `util/kubeconfig/kubeconfig.go` for the kubeconfig Secret,
//! `controllers/clustercache` for how controllers reach a workload cluster).
//!
//! Expected flow: [`start`] starts a workload API server with the accounts its actors need;
//! the management cluster gets its `Cluster` ([`cluster_object`]) and `<cluster>-kubeconfig`
//! Secret ([`kubeconfig_secret`]); management-side controllers reach its Nodes only through
//! that Secret, resolved by a [`ClusterCache`].
//!
//! Guarantees: a [`ClusterCache`] read fails, never returns an empty list, when the Secret is
//! missing or unreadable, names a server no workload cluster has, presents a token that
//! server does not accept, or the server is unreachable.
//!
//! Caveats: the Secret's kubeconfig authenticates with the server's admin token, where Cluster
//! API writes a client certificate signed by the cluster CA; the cache lists Nodes in-process
//! instead of over HTTP (the reachability switch stands for the connection).

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};

use super::accounts::{self, Accounts, Actor};
use super::local::{Local, NODES, Refusals, SECRETS};
use crate::apiserver::{ApiServer, ApiServerConfig, Reachability};
use crate::{Error, Result};

/// Cluster API's label naming a Cluster (`cluster.x-k8s.io/cluster-name`).
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// The type of the Secrets Cluster API writes for a Cluster (`cluster.x-k8s.io/secret`).
pub const CLUSTER_SECRET_TYPE: &str = "cluster.x-k8s.io/secret";
/// The key of the kubeconfig in its Secret.
pub const KUBECONFIG_KEY: &str = "value";

/// One workload cluster: its API server, its actors' accounts and the kubeconfig its Secret
/// holds.
pub struct WorkloadCluster {
    name: String,
    server: ApiServer,
    accounts: Accounts,
    kubeconfig: String,
}

impl std::fmt::Debug for WorkloadCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadCluster")
            .field("name", &self.name)
            .field("url", &self.server.url())
            .finish_non_exhaustive()
    }
}

impl WorkloadCluster {
    /// Its name (`wc-0`…), the Cluster's in the management cluster.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its API server's URL (the kubeconfig's `server`).
    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// The admin kubeconfig its `<cluster>-kubeconfig` Secret holds.
    pub fn kubeconfig(&self) -> &str {
        &self.kubeconfig
    }

    /// Its API server.
    pub fn api_server(&self) -> &ApiServer {
        &self.server
    }

    /// Its actors' clients (kubelets, the node lifecycle controller).
    pub fn accounts(&self) -> &Accounts {
        &self.accounts
    }
}

/// The name of a Cluster's kubeconfig Secret (`<cluster>-kubeconfig`).
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// Starts the API server of workload cluster `name` (`tls`, `version` as the management
/// one) and installs the accounts of the actors that run in it (the controller-manager; the
/// kubelets' rights are the bootstrap policy's), reporting refusals to `refusals`.
pub async fn start(
    name: &str,
    (tls, version): (bool, (u32, u32)),
    refusals: Arc<Refusals>,
) -> Result<WorkloadCluster> {
    let server = ApiServer::start(ApiServerConfig {
        tls,
        kubernetes_version: version,
        ..ApiServerConfig::default()
    })
    .await?;
    let installer = Local::new(server.store().clone(), "baremend-sim-installer");
    accounts::install(
        &installer,
        &[Actor::ControllerManager, Actor::NodeLifecycle],
    )
    .map_err(|e| Error::Config(format!("workload cluster {name}: {}", e.message)))?;
    let accounts = Accounts::new(
        server.store().clone(),
        server.authorizer().clone(),
        refusals,
    );
    let kubeconfig = kubeconfig(name, &server);
    Ok(WorkloadCluster {
        name: name.to_owned(),
        server,
        accounts,
        kubeconfig,
    })
}

/// The admin kubeconfig of a workload cluster, named as Cluster API names it (cluster
/// `<name>`, user `<name>-admin`, context `<name>-admin@<name>`), with the server's CA when it
/// serves HTTPS.
fn kubeconfig(name: &str, server: &ApiServer) -> String {
    let ca = server
        .ca_pem()
        .map(|pem| {
            let data = base64::engine::general_purpose::STANDARD.encode(pem);
            format!("    certificate-authority-data: {data}\n")
        })
        .unwrap_or_default();
    let url = server.url();
    let token = server.token();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {url}\n{ca}contexts:\n- name: {name}-admin@{name}\n  context:\n    cluster: {name}\n    user: {name}-admin\ncurrent-context: {name}-admin@{name}\nusers:\n- name: {name}-admin\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

/// The management cluster's `Cluster` of a workload cluster, provisioned: its control-plane
/// endpoint is the workload API server, `paused` false, and the status Cluster API's
/// controllers leave on a running cluster.
pub fn cluster_object(cluster: &WorkloadCluster, namespace: &str) -> Value {
    let address = cluster
        .url()
        .split("://")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let (host, port) = address.rsplit_once(':').unwrap_or((&address, "443"));
    let port: u16 = port.parse().unwrap_or(443);
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": cluster.name, "namespace": namespace},
        "spec": {"paused": false, "controlPlaneEndpoint": {"host": host, "port": port}},
    })
}

/// The status of a provisioned Cluster.
pub fn provisioned_status() -> Value {
    json!({"status": {"phase": "Provisioned", "controlPlaneReady": true, "infrastructureReady": true}})
}

/// The `<cluster>-kubeconfig` Secret, as Cluster API's kubeconfig util writes it: type
/// [`CLUSTER_SECRET_TYPE`], labelled with its Cluster, owned by it, the kubeconfig under
/// [`KUBECONFIG_KEY`].
pub fn kubeconfig_secret(cluster: &WorkloadCluster, namespace: &str, cluster_uid: &str) -> Value {
    let data = base64::engine::general_purpose::STANDARD.encode(&cluster.kubeconfig);
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": kubeconfig_secret_name(&cluster.name),
            "namespace": namespace,
            "labels": {CLUSTER_NAME_LABEL: cluster.name},
            "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": cluster.name, "uid": cluster_uid}],
        },
        "type": CLUSTER_SECRET_TYPE,
        "data": {KUBECONFIG_KEY: data},
    })
}

/// One workload API server as the cache reaches it.
#[derive(Debug, Clone)]
struct Endpoint {
    token: String,
    admin: Local,
    reachability: Reachability,
}

/// Cluster API's cluster cache, as far as the health check needs it: a Cluster's Nodes read
/// through its kubeconfig Secret, which names the server (resolved in-process by URL).
#[derive(Debug, Clone, Default)]
pub struct ClusterCache {
    endpoints: HashMap<String, Endpoint>,
}

impl ClusterCache {
    /// A cache that knows the servers of `clusters`.
    pub fn new(clusters: &[WorkloadCluster]) -> Self {
        let endpoints = clusters
            .iter()
            .map(|c| {
                let endpoint = Endpoint {
                    token: c.server.token().to_owned(),
                    admin: Local::new(c.server.store().clone(), "capi-manager"),
                    reachability: c.server.reachability().clone(),
                };
                (c.url().to_owned(), endpoint)
            })
            .collect();
        ClusterCache { endpoints }
    }

    /// The Nodes of Cluster `cluster` (in `namespace`), through its kubeconfig Secret read by
    /// `management`; Err says why the workload cluster cannot be read.
    pub fn nodes(
        &self,
        management: &Local,
        namespace: &str,
        cluster: &str,
    ) -> std::result::Result<Vec<Arc<Value>>, String> {
        let name = kubeconfig_secret_name(cluster);
        let secret = management
            .get(SECRETS, namespace, &name)
            .map_err(|e| format!("Secret {namespace}/{name}: {}", e.message))?;
        let kubeconfig = secret
            .pointer(&format!("/data/{KUBECONFIG_KEY}"))
            .and_then(Value::as_str)
            .and_then(|data| base64::engine::general_purpose::STANDARD.decode(data).ok())
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| format!("Secret {namespace}/{name} holds no {KUBECONFIG_KEY:?}"))?;
        let (server, token) = server_and_token(&kubeconfig)
            .ok_or_else(|| format!("Secret {namespace}/{name}: not a usable kubeconfig"))?;
        let endpoint = self
            .endpoints
            .get(&server)
            .ok_or_else(|| format!("{server}: no such server (connection refused)"))?;
        if !endpoint.reachability.is_reachable() {
            return Err(format!("{server}: connection refused"));
        }
        if endpoint.token != token {
            return Err(format!("{server}: Unauthorized"));
        }
        Ok(endpoint.admin.list_shared(NODES, None))
    }
}

/// The server and bearer token of a kubeconfig's current context.
fn server_and_token(kubeconfig: &str) -> Option<(String, String)> {
    let config: Value = serde_yaml::from_str(kubeconfig).ok()?;
    let current = config.get("current-context")?.as_str()?;
    let named = |list: &str, name: &str| {
        config
            .get(list)?
            .as_array()?
            .iter()
            .find(|entry| entry["name"] == name)
            .cloned()
    };
    let context = named("contexts", current)?;
    let cluster = named("clusters", context.pointer("/context/cluster")?.as_str()?)?;
    let user = named("users", context.pointer("/context/user")?.as_str()?)?;
    Some((
        cluster.pointer("/cluster/server")?.as_str()?.to_owned(),
        user.pointer("/user/token")?.as_str()?.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_context_names_the_server_and_token() {
        let config = "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster:\n    server: https://10.0.0.1:6443\n- name: wc-0\n  cluster:\n    server: https://127.0.0.1:1234\ncontexts:\n- name: wc-0-admin@wc-0\n  context:\n    cluster: wc-0\n    user: wc-0-admin\ncurrent-context: wc-0-admin@wc-0\nusers:\n- name: wc-0-admin\n  user:\n    token: t0\n";
        assert_eq!(
            server_and_token(config),
            Some(("https://127.0.0.1:1234".into(), "t0".into()))
        );
        assert_eq!(server_and_token("current-context: missing\n"), None);
        assert_eq!(server_and_token("not: [yaml"), None);
    }
}
