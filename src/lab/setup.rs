//! What every lab run needs: the simulated cluster, a kube client on it, baremend's CRDs and
//! policy, and the controller running in this process.

use std::sync::Arc;
use std::time::Duration;

use baremend_sim::cluster::local::{BMHS, Gvr, Local, MACHINES, manifest_gvr};
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, SimCluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api::annotations::{BMH_DETACHED, EXTERNAL_REMEDIATION};
use crate::api::slim::MachineApi;
use crate::api::{RemediationPolicy, all_crds};
use crate::metrics::Metrics;
use crate::remediation::controller::ControllerOptions;
use crate::run::run_controllers;
use crate::runtime::clock::SystemClock;
use crate::{Error, Result};

/// A running simulated cluster with baremend's CRDs installed and `deploy/`'s namespace,
/// ServiceAccounts and RBAC applied, as an install does.
pub struct LabCluster {
    /// The cluster.
    pub cluster: SimCluster,
    /// A kube client on its API server (HTTPS, as a real cluster) with the administrator's
    /// rights: the lab's and the tests' own writes (policies, triggers, faults).
    pub client: Client,
    /// A kube client as the controller's ServiceAccount (`baremend/baremend`), with only what
    /// `deploy/base/rbac.yaml` grants it: what the controller runs on, so a missing grant fails.
    pub controller_client: Client,
    /// The kubeconfig of that client, for a controller run as its own process.
    pub controller_kubeconfig: String,
    /// Direct access to the server's store, for the lab's own observations and faults.
    pub api: Local,
}

/// The namespace `deploy/` installs into.
pub const DEPLOY_NAMESPACE: &str = "baremend";
/// The controller's ServiceAccount there.
pub const CONTROLLER_ACCOUNT: &str = "baremend";

/// The manifests of `deploy/` that make the controller's identity and rights (and the
/// admission policy that limits its pods to the drift helpers' shape), read from the files an
/// install applies (not a copy): a grant missing there is missing in every lab.
const DEPLOY_IDENTITY: [(&str, &str); 6] = [
    (
        "base/namespace.yaml",
        include_str!("../../deploy/base/namespace.yaml"),
    ),
    (
        "base/serviceaccount.yaml",
        include_str!("../../deploy/base/serviceaccount.yaml"),
    ),
    (
        "base/rbac.yaml",
        include_str!("../../deploy/base/rbac.yaml"),
    ),
    (
        "base/rbac-health-checks.yaml",
        include_str!("../../deploy/base/rbac-health-checks.yaml"),
    ),
    (
        "base/helper-admission.yaml",
        include_str!("../../deploy/base/helper-admission.yaml"),
    ),
    (
        "base/records-admission.yaml",
        include_str!("../../deploy/base/records-admission.yaml"),
    ),
];

/// The drift helpers' image in labs: pinned by digest, of the repository deploy/ names
/// (`baremend`), as deploy/'s admission policy requires. No simulated kubelet pulls it.
pub const LAB_HELPER_IMAGE: &str =
    "baremend@sha256:5d3c1f0e9b8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d";
/// What the Cluster API component adds (docs/guides/install.md).
const DEPLOY_CLUSTER_API_RBAC: (&str, &str) = (
    "components/cluster-api/rbac-cluster-api.yaml",
    include_str!("../../deploy/components/cluster-api/rbac-cluster-api.yaml"),
);

/// Creates every object of a multi-document manifest of `deploy/`, as `kubectl create -f`.
fn apply_manifests(api: &Local, file: &str, text: &str) -> Result<()> {
    let invalid = |reason: String| Error::Invalid {
        object: format!("deploy/{file}"),
        reason,
    };
    for document in serde_yaml::Deserializer::from_str(text) {
        let object = Value::deserialize(document).map_err(|e| invalid(e.to_string()))?;
        if object.is_null() {
            continue;
        }
        let gvr = object["kind"]
            .as_str()
            .and_then(manifest_gvr)
            .ok_or_else(|| {
                invalid(format!(
                    "kind {} is not one the lab applies",
                    object["kind"].as_str().unwrap_or("(none)")
                ))
            })?;
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        api.create(gvr, namespace, object.clone())
            .map_err(|e| invalid(e.message))?;
    }
    Ok(())
}

/// A token of ServiceAccount `namespace/account`, as its pod would mount (a TokenRequest).
async fn account_token(admin: &Client, namespace: &str, account: &str) -> Result<String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // A lab or a test outlives no day.
            expiration_seconds: Some(24 * 3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let granted = accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .map_err(Error::kube("CreateToken"))?;
    granted
        .status
        .map(|s| s.token)
        .ok_or_else(|| Error::Invalid {
            object: format!("ServiceAccount {namespace}/{account}"),
            reason: "the TokenRequest was answered without a token".into(),
        })
}

/// A client from a kubeconfig of a lab's API server (simulated or real), without kube's own retries (the
/// controller requeues by itself).
pub(crate) async fn client_of(kubeconfig: &str) -> Result<Client> {
    let invalid = |reason: String| Error::Invalid {
        object: "the simulated cluster's kubeconfig".into(),
        reason,
    };
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).map_err(|e| invalid(e.to_string()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| invalid(e.to_string()))?;
    config.default_retry = false;
    Client::try_from(config).map_err(Error::kube("Connect"))
}

/// What an install leaves: the controller's identity on the server.
pub(crate) struct Installed {
    /// A kube client as the controller's ServiceAccount.
    pub controller_client: Client,
    /// Its kubeconfig.
    pub controller_kubeconfig: String,
}

/// Installs baremend on an API server as an install does: its CRDs (through `client`, the
/// administrator's; waited for until the server has established each), then `deploy/`'s
/// namespace, ServiceAccounts, RBAC and admission policies (through `api`, the
/// administrator's too), with the Cluster API component's rights when `cluster_api`. The
/// controller's kubeconfig is `with_token` applied to a token the server issued its
/// ServiceAccount.
pub(crate) async fn install(
    client: &Client,
    api: &Local,
    cluster_api: bool,
    with_token: impl Fn(&str) -> String,
) -> Result<Installed> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in all_crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .map_err(Error::kube("CreateCrd"))?;
    }
    for (_, crd) in all_crds() {
        established(&crds, &crd.metadata.name.unwrap_or_default()).await?;
    }
    let mut manifests = DEPLOY_IDENTITY.to_vec();
    if cluster_api {
        manifests.push(DEPLOY_CLUSTER_API_RBAC);
    }
    for (file, text) in manifests {
        apply_manifests(api, file, text)?;
    }
    let token = account_token(client, DEPLOY_NAMESPACE, CONTROLLER_ACCOUNT).await?;
    let controller_kubeconfig = with_token(&token);
    let controller_client = client_of(&controller_kubeconfig).await?;
    Ok(Installed {
        controller_client,
        controller_kubeconfig,
    })
}

/// Waits (up to 30 s) until the server has established CRD `name`: a real API server serves
/// a new kind a moment after accepting its CRD (the simulated one at once).
async fn established(crds: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let crd = crds.get(name).await.map_err(Error::kube("GetCrd"))?;
        let served = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if served {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Invalid {
                object: format!("CRD {name}"),
                reason: "not established by the API server within 30 s".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the policy `default` with this spec (see [`LabCluster::install_policy`]).
pub(crate) async fn install_policy(client: &Client, mut spec: Value) -> Result<()> {
    if let Some(fields) = spec.as_object_mut() {
        fields
            .entry("allowInsecureBmc")
            .or_insert(Value::Bool(true));
        fields
            .entry("mode")
            .or_insert(Value::String("Remediate".into()));
    }
    let policy: RemediationPolicy = serde_json::from_value(
        json!({"metadata": {"name": "default"}, "spec": spec}),
    )
    .map_err(|e| Error::Invalid {
        object: "lab policy".into(),
        reason: e.to_string(),
    })?;
    Api::<RemediationPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .map_err(Error::kube("CreatePolicy"))?;
    Ok(())
}

/// Sets (as a MachineHealthCheck does) or removes Machine `machine`'s external-remediation
/// trigger through `api`.
pub(crate) fn set_trigger(api: &Local, machine: &str, on: bool) -> Result<()> {
    let value = if on { json!("") } else { Value::Null };
    api.merge(
        MACHINES,
        MACHINE_NAMESPACE,
        machine,
        &json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: value}}}),
        false,
    )
    .map(|_| ())
    .map_err(|e| Error::Invalid {
        object: format!("Machine {machine}"),
        reason: e.message,
    })
}

/// Creates through `api` the template `baremend` a health check names, empty: its requests
/// get the policy's values.
pub(crate) fn empty_template(api: &Local, templates: Gvr, namespace: &str) -> Result<()> {
    api.create(
        templates,
        namespace,
        json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
    )
    .map(|_| ())
    .map_err(|e| Error::Invalid {
        object: format!("{} baremend", templates.plural),
        reason: e.message,
    })
}

impl LabCluster {
    /// Starts the cluster and installs the CRDs (then, on a platform-none cluster, each
    /// host's `HostBmc`).
    pub async fn start(spec: ClusterSpec) -> Result<Self> {
        let cluster = SimCluster::start(spec).await?;
        let client = client_of(&cluster.kubeconfig()).await?;
        let api = Local::new(cluster.api_server().store().clone(), "lab");
        let admin_kubeconfig = cluster.kubeconfig();
        let admin_token = cluster.api_server().token().to_owned();
        let installed = install(&client, &api, cluster.spec().cluster_api, |token| {
            admin_kubeconfig.replace(&admin_token, token)
        })
        .await?;
        // A platform-none cluster's hosts are described by HostBmcs: served from now on.
        cluster.create_host_bmcs()?;
        Ok(LabCluster {
            cluster,
            client,
            controller_client: installed.controller_client,
            controller_kubeconfig: installed.controller_kubeconfig,
            api,
        })
    }

    /// A kube client as ServiceAccount `namespace/account` (which must exist), with only the
    /// rights RBAC grants it: a tenant's identity, say.
    pub async fn account_client(&self, namespace: &str, account: &str) -> Result<Client> {
        let token = account_token(&self.client, namespace, account).await?;
        let kubeconfig = self
            .cluster
            .kubeconfig()
            .replace(self.cluster.api_server().token(), &token);
        client_of(&kubeconfig).await
    }

    /// Creates the policy `default` with this spec. The simulated cluster's Redfish BMCs
    /// speak plain HTTP on the loopback interface, which a policy must allow before their
    /// reads prove anything (`allowInsecureBmc`): the lab allows it, as the operator of such
    /// a cluster would, unless the spec says otherwise. The lab remediates (`mode:
    /// Remediate`) unless the spec says `DryRun`: a playground's hosts are there to be
    /// power-cycled, where a policy that leaves `mode` out is a dry run.
    pub async fn install_policy(&self, spec: Value) -> Result<()> {
        install_policy(&self.client, spec).await
    }

    /// Sets (as a MachineHealthCheck does) or removes the external-remediation trigger.
    pub fn set_trigger(&self, machine: &str, on: bool) -> Result<()> {
        set_trigger(&self.api, machine, on)
    }

    /// Creates the template `baremend` a health check names, empty: its requests get the
    /// policy's values.
    pub fn empty_template(&self, templates: Gvr, namespace: &str) -> Result<()> {
        empty_template(&self.api, templates, namespace)
    }

    /// Detaches a BareMetalHost: its BareMetal Operator lets go of it (it is then fenced
    /// directly over its BMC, and nobody else reads that BMC).
    pub fn detach(&self, host: &str) -> Result<()> {
        self.api
            .merge(
                BMHS,
                MACHINE_NAMESPACE,
                host,
                &json!({"metadata": {"annotations": {BMH_DETACHED: ""}}}),
                false,
            )
            .map(|_| ())
            .map_err(|e| Error::Invalid {
                object: format!("BareMetalHost {host}"),
                reason: e.message,
            })
    }

    /// Starts the controller on this cluster, with the power monitor reading every host each
    /// second (`baremend run` reads each minute) and the fencing readiness check every 5 s
    /// (`baremend run`: every 10 minutes); it runs until the handle is stopped.
    pub fn start_controller(
        &self,
        metrics: Arc<Metrics>,
        poll: Duration,
        machine_api: MachineApi,
    ) -> RunningController {
        let (stop, stopped) = oneshot::channel::<()>();
        // Wired as `baremend run` wires them (`run_controllers`), without the drift
        // coordinator (no helper pods asked for).
        let task = tokio::spawn(run_controllers(
            self.controller_client.clone(),
            Arc::new(SystemClock),
            ControllerOptions {
                instance: "lab".into(),
                poll,
                metrics,
                power_poll: Some(Duration::from_secs(1)),
                fencing_check: Some(Duration::from_secs(5)),
                machine_api,
                ..ControllerOptions::default()
            },
            async move {
                let _ = stopped.await;
            },
        ));
        RunningController { stop, task }
    }
}

/// The controller running in a task.
pub struct RunningController {
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<()>>,
}

impl RunningController {
    /// Stops it and waits until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
