//! Who each simulated actor is: the account its upstream install creates, with the roles
//! that install grants (`upstream_rbac/*.yaml`, one file per upstream project, trimmed to the
//! API groups the simulated cluster serves, each naming its source files, the version read and
//! what was trimmed), so that an actor
//! is refused exactly what the real one would be, and a remediator's missing aggregated role
//! shows up as the 403 a real health check meets.
//!
//! Expected flow: [`install`] creates the accounts, roles and bindings (and their
//! namespaces) of the actors a cluster runs, before any of them starts; [`Accounts::local`] / [`Accounts::kubelet`] give each
//! actor its in-process client, authorized as its account and reporting every refusal to one
//! [`Refusals`] the tests read.
//!
//! Guarantees: no actor but the installer and the Cluster API health check's workload-cluster
//! view (whose kubeconfig is the workload cluster's admin, as Cluster API's bootstrap writes
//! it) calls the API server unchecked.
//!
//! Caveats: OpenShift deploys the BareMetal Operator through cluster-baremetal-operator under
//! another account; metal3's own install is followed here. The NodeHealthCheck is installed as
//! OLM does (its manager role without the aggregation label a kustomize install adds).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::local::{Local, NAMESPACES, Refusals, manifest_gvr};
use super::remote::{Credential, Endpoint, Remote};
use crate::apiserver::auth::AUTHENTICATED;
use crate::apiserver::auth::node::NODES_GROUP;
use crate::apiserver::{ApiError, Authorizer, Store, UserInfo};
use crate::tls::TlsIdentity;

/// The upstream accounts and roles, per upstream install.
const MACHINE_API_RBAC: &str = include_str!("upstream_rbac/machine-api.yaml");
const CLUSTER_API_RBAC: &str = include_str!("upstream_rbac/cluster-api.yaml");
const NODE_HEALTH_CHECK_RBAC: &str = include_str!("upstream_rbac/node-healthcheck.yaml");
const BAREMETAL_OPERATOR_RBAC: &str = include_str!("upstream_rbac/baremetal-operator.yaml");
const MACHINE_CONFIG_RBAC: &str = include_str!("upstream_rbac/machine-config.yaml");
const CONTROLLER_MANAGER_RBAC: &str = include_str!("upstream_rbac/kube-controller-manager.yaml");

/// The MCO's namespace (`pkg/controller/common/constants.go`, `MCONamespace`).
const MCO_NAMESPACE: &str = "openshift-machine-config-operator";

/// A simulated actor with an upstream account of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// OpenShift's MachineHealthCheck controller (machine-api-operator).
    MachineApi,
    /// The bare-metal machine actuator of OpenShift's machine API (its legacy remediation),
    /// in the same pod and account as the health check.
    MachineController,
    /// Cluster API's manager (its MachineHealthCheck).
    ClusterApi,
    /// medik8s NodeHealthCheck.
    NodeHealthCheck,
    /// metal3's BareMetal Operator.
    BareMetalOperator,
    /// The MCO's machine-config-controller.
    MachineConfigController,
    /// The MCO's machine-config-daemon (its Node writes go as the kubelet).
    MachineConfigDaemon,
    /// kube-controller-manager's shared informers.
    ControllerManager,
    /// The node lifecycle controller's writes.
    NodeLifecycle,
}

impl Actor {
    /// The user the actor authenticates as.
    pub fn user(self) -> UserInfo {
        let account = |namespace, name| UserInfo::service_account(namespace, name, "");
        match self {
            Actor::MachineApi | Actor::MachineController => {
                account("openshift-machine-api", "machine-api-controllers")
            }
            Actor::ClusterApi => account("capi-system", "capi-manager"),
            Actor::NodeHealthCheck => {
                account(super::NHC_NAMESPACE, "node-healthcheck-controller-manager")
            }
            Actor::BareMetalOperator => account(
                "baremetal-operator-system",
                "baremetal-operator-controller-manager",
            ),
            Actor::MachineConfigController => account(MCO_NAMESPACE, "machine-config-controller"),
            Actor::MachineConfigDaemon => account(MCO_NAMESPACE, "machine-config-daemon"),
            Actor::ControllerManager => {
                UserInfo::new("system:kube-controller-manager", &[AUTHENTICATED])
            }
            Actor::NodeLifecycle => account("kube-system", "node-controller"),
        }
    }

    /// The upstream install that creates its account and roles.
    fn install_manifests(self) -> &'static str {
        match self {
            Actor::MachineApi | Actor::MachineController => MACHINE_API_RBAC,
            Actor::ClusterApi => CLUSTER_API_RBAC,
            Actor::NodeHealthCheck => NODE_HEALTH_CHECK_RBAC,
            Actor::BareMetalOperator => BAREMETAL_OPERATOR_RBAC,
            Actor::MachineConfigController | Actor::MachineConfigDaemon => MACHINE_CONFIG_RBAC,
            Actor::ControllerManager | Actor::NodeLifecycle => CONTROLLER_MANAGER_RBAC,
        }
    }

    /// Every actor.
    pub const ALL: [Actor; 9] = [
        Actor::MachineApi,
        Actor::MachineController,
        Actor::ClusterApi,
        Actor::NodeHealthCheck,
        Actor::BareMetalOperator,
        Actor::MachineConfigController,
        Actor::MachineConfigDaemon,
        Actor::ControllerManager,
        Actor::NodeLifecycle,
    ];

    /// The field manager its writes carry.
    fn manager(self) -> &'static str {
        match self {
            Actor::MachineApi => "machine-healthcheck-controller",
            Actor::MachineController => "machine-controller",
            Actor::ClusterApi => "capi-manager",
            Actor::NodeHealthCheck => "node-healthcheck-controller",
            Actor::BareMetalOperator => "metal3-baremetal-controller",
            Actor::MachineConfigController => "machine-config-controller",
            Actor::MachineConfigDaemon => "machine-config-daemon",
            Actor::ControllerManager | Actor::NodeLifecycle => "kube-controller-manager",
        }
    }
}

/// The kubelet of `node`: `system:node:<node>` in `system:nodes`.
pub fn kubelet_user(node: &str) -> UserInfo {
    UserInfo::new(
        &format!("system:node:{node}"),
        &[NODES_GROUP, AUTHENTICATED],
    )
}

/// The actors' clients of one API server.
#[derive(Debug, Clone)]
pub struct Accounts {
    server: Server,
    refusals: Arc<Refusals>,
}

/// The API server the actors call.
#[derive(Debug, Clone)]
enum Server {
    /// The simulated store, in-process, each call authorized by the simulated authorizer.
    Store {
        store: Arc<Store>,
        authorizer: Arc<Authorizer>,
    },
    /// Any API server over HTTPS, each actor with the credential its upstream install gives
    /// it.
    Remote(Arc<RemoteAccounts>),
}

/// Each actor's credential for a remote API server.
#[derive(Debug)]
pub struct RemoteAccounts {
    /// Per actor: its client, with its ServiceAccount's token or a client certificate
    /// (kube-controller-manager).
    actors: Vec<(Actor, Remote)>,
    /// Per Node name: its kubelet's client, with a client certificate (`system:node:<name>`
    /// in `system:nodes`).
    kubelets: HashMap<String, Remote>,
    /// The administrator's client (the installer's, and a self-hosted cluster's kubeconfig).
    admin: Remote,
}

impl RemoteAccounts {
    /// Credentials for `actors` and the kubelets of `nodes` from the server at `endpoint`:
    /// a ServiceAccount's token by TokenRequest (the accounts must exist: [`install`]), any
    /// other user's client certificate from `issuer`.
    pub fn issue(
        endpoint: &Endpoint,
        admin: Credential,
        issuer: &dyn Issuer,
        actors: &[Actor],
        nodes: &[&str],
    ) -> crate::Result<Self> {
        let installer = Remote::new(endpoint, &admin)?;
        let mut clients = Vec::new();
        for actor in actors {
            let user = actor.user();
            let credential = match service_account(&user.username) {
                Some((namespace, name)) => Credential::Token(
                    installer
                        .token(namespace, name)
                        .map_err(|e| crate::Error::Config(format!("{actor:?}: {}", e.message)))?,
                ),
                None => Credential::Certificate(issuer.client(&user.username, &user.groups)?),
            };
            clients.push((*actor, Remote::new(endpoint, &credential)?));
        }
        let mut kubelets = HashMap::new();
        for node in nodes {
            let user = kubelet_user(node);
            let identity = issuer.client(&user.username, &user.groups)?;
            let credential = Credential::Certificate(identity);
            kubelets.insert((*node).to_owned(), Remote::new(endpoint, &credential)?);
        }
        Ok(RemoteAccounts {
            actors: clients,
            kubelets,
            admin: installer,
        })
    }

    /// The administrator's client, as field manager `manager`.
    pub fn admin(&self, manager: &'static str) -> Local {
        Local::remote(self.admin.clone(), "admin", manager)
    }
}

/// `(namespace, name)` of a ServiceAccount's user name.
fn service_account(username: &str) -> Option<(&str, &str)> {
    username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
}

/// Who signs client certificates the API server trusts (the control plane's CA).
pub trait Issuer {
    /// A client certificate for `user` in `groups`.
    fn client(&self, user: &str, groups: &[String]) -> crate::Result<TlsIdentity>;
}

impl Accounts {
    /// Clients authorized by `authorizer` (the API server's), telling `refusals`.
    pub fn new(store: Arc<Store>, authorizer: Arc<Authorizer>, refusals: Arc<Refusals>) -> Self {
        Accounts {
            server: Server::Store { store, authorizer },
            refusals,
        }
    }

    /// Clients of a remote API server with the credentials of `accounts`, telling `refusals`.
    pub fn remote(accounts: RemoteAccounts, refusals: Arc<Refusals>) -> Self {
        Accounts {
            server: Server::Remote(Arc::new(accounts)),
            refusals,
        }
    }

    /// The client of `actor`.
    pub fn local(&self, actor: Actor) -> Local {
        let local = match &self.server {
            Server::Store { store, authorizer } => {
                Local::new(store.clone(), actor.manager()).as_user(authorizer.clone(), actor.user())
            }
            Server::Remote(remote) => {
                let client = remote
                    .actors
                    .iter()
                    .find(|(a, _)| *a == actor)
                    .map_or(&remote.admin, |(_, c)| c);
                Local::remote(client.clone(), &actor.user().username, actor.manager())
            }
        };
        local.reporting(self.refusals.clone())
    }

    /// The client of `node`'s kubelet (and of what writes with its credentials).
    pub fn kubelet(&self, node: &str, manager: &'static str) -> Local {
        let user = kubelet_user(node);
        let local = match &self.server {
            Server::Store { store, authorizer } => {
                Local::new(store.clone(), manager).as_user(authorizer.clone(), user)
            }
            Server::Remote(remote) => {
                let client = remote.kubelets.get(node).unwrap_or(&remote.admin);
                Local::remote(client.clone(), &user.username, manager)
            }
        };
        local.reporting(self.refusals.clone())
    }

    /// Cluster API's view of a workload cluster through its kubeconfig Secret: the workload
    /// cluster's admin (here the same API server, a self-hosted cluster).
    pub fn workload_admin(&self) -> Local {
        match &self.server {
            Server::Store { store, .. } => Local::new(store.clone(), "capi-manager"),
            Server::Remote(remote) => remote.admin("capi-manager"),
        }
    }

    /// The refusals so far.
    pub fn refusals(&self) -> Vec<String> {
        self.refusals.all()
    }

    /// The Events refused and dropped so far.
    pub fn dropped_events(&self) -> Vec<String> {
        self.refusals.dropped_events()
    }
}

/// Creates the upstream accounts, roles and bindings of `actors` (and the namespaces they
/// live in) with the installer's client; what exists already is kept. Returns how many
/// objects were created.
pub fn install(installer: &Local, actors: &[Actor]) -> Result<usize, ApiError> {
    let mut files: Vec<&str> = actors.iter().map(|a| a.install_manifests()).collect();
    files.sort_unstable();
    files.dedup();
    let mut created = 0;
    for file in files {
        for object in documents(file)? {
            created += usize::from(install_object(installer, object)?);
        }
    }
    Ok(created)
}

/// The objects of one upstream install.
fn documents(text: &str) -> Result<Vec<Value>, ApiError> {
    serde_yaml::Deserializer::from_str(text)
        .map(|document| {
            Value::deserialize(document)
                .map_err(|e| ApiError::bad_request(format!("upstream RBAC: {e}")))
        })
        .filter(|object| !matches!(object, Ok(Value::Null)))
        .collect()
}

/// Creates one object (its namespace first); Ok(false) when it existed.
fn install_object(installer: &Local, object: Value) -> Result<bool, ApiError> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let gvr = manifest_gvr(kind)
        .ok_or_else(|| ApiError::bad_request(format!("upstream RBAC: kind {kind}")))?;
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !namespace.is_empty() {
        let namespace_object = serde_json::json!({"metadata": {"name": namespace}});
        kept_if_exists(installer.create(NAMESPACES, "", namespace_object))?;
    }
    kept_if_exists(installer.create(gvr, &namespace, object))
}

/// Ok(true) for a creation, Ok(false) for an object already there.
fn kept_if_exists(result: Result<Value, ApiError>) -> Result<bool, ApiError> {
    match result {
        Ok(_) => Ok(true),
        Err(error) if error.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_is_a_kind_the_installer_knows() {
        for actor in Actor::ALL {
            for object in documents(actor.install_manifests()).unwrap() {
                let kind = object["kind"].as_str().unwrap();
                assert!(manifest_gvr(kind).is_some(), "{actor:?}: {kind}");
            }
        }
    }

    #[test]
    fn each_actor_is_a_subject_of_a_binding_in_its_upstream_install() {
        for actor in Actor::ALL {
            let user = actor.user();
            let bound = documents(actor.install_manifests())
                .unwrap()
                .into_iter()
                .filter(|o| o["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
                .flat_map(|o| o["subjects"].as_array().cloned().unwrap_or_default())
                .any(|s| {
                    let name = match s["kind"].as_str() {
                        Some("ServiceAccount") => format!(
                            "system:serviceaccount:{}:{}",
                            s["namespace"].as_str().unwrap_or_default(),
                            s["name"].as_str().unwrap_or_default()
                        ),
                        _ => s["name"].as_str().unwrap_or_default().to_owned(),
                    };
                    name == user.username
                });
            assert!(bound, "{actor:?} ({}) is bound to no role", user.username);
        }
    }
}
