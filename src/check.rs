//! `baremend check`: every Machine baremend would remediate has its fencing path checked
//! once, exactly as the controller's periodic check does (see
//! [`crate::remediation::fencing_check`]), and gets one line: Machine, Node, fencing path,
//! READY or NOT READY with the reason. Nothing is changed: no power request, no write.
//! Run it on day one, before trusting remediation, and after any BMC or credentials change.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::Connector;
use clap::Args;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::api::slim;
use crate::api::{HostBmc, Remediation, RemediationPolicy, RemediationPolicySpec};
use crate::duration::parse_duration;
use crate::remediation::fencing_check::{CHECKS_AT_ONCE, Fleet, Probes, check, describe, targets};
use crate::remediation::observe::HostRef;
use crate::remediation::probe::ProbeTerms;
use crate::remediation::subject::machineless_node;
use crate::runtime::informer::POLICY_NAME;
use crate::{Error, Result};

/// Arguments of `baremend check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// A kubeconfig file; without it, the in-cluster configuration (or KUBECONFIG).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Only this Machine, or Node without a Machine (`name`, or `namespace/name`; a Node's
    /// namespace is its `HostBmc`'s).
    #[arg(long, value_name = "NAME")]
    pub machine: Option<String>,
    /// How long each fencing path's probe may take (login, reads and logout).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// What the cluster holds that the check reads.
struct Listed {
    machines: Vec<Arc<slim::Machine>>,
    hosts: HashMap<(String, String), Arc<slim::BareMetalHost>>,
    host_bmcs: Vec<Arc<HostBmc>>,
    remediations: Vec<Arc<Remediation>>,
    policy: RemediationPolicySpec,
    /// The labels of every Node, when a `HostBmc` names a Node without a Machine (its role
    /// says whether it is control plane).
    node_labels: HashMap<String, BTreeMap<String, String>>,
}

async fn list_all<K>(client: &Client, what: &'static str) -> Result<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let listed = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::kube(what))?;
    Ok(listed.items.into_iter().map(Arc::new).collect())
}

async fn list(client: &Client) -> Result<Listed> {
    let hosts = list_all::<slim::BareMetalHost>(client, "List BareMetalHosts").await?;
    let policies = list_all::<RemediationPolicy>(client, "List RemediationPolicies").await?;
    let host_bmcs: Vec<Arc<HostBmc>> = list_all(client, "List HostBmcs").await?;
    let node_labels = if host_bmcs.iter().any(|m| machineless_node(m).is_some()) {
        // Their metadata only: labels are all the check reads of them.
        Api::<Node>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map_err(Error::kube("List Nodes"))?
            .items
            .into_iter()
            .map(|n| (n.name_any(), n.metadata.labels.unwrap_or_default()))
            .collect()
    } else {
        HashMap::new()
    };
    Ok(Listed {
        machines: list_all(client, "List Machines").await?,
        hosts: hosts
            .into_iter()
            .map(|h| ((h.namespace().unwrap_or_default(), h.name_any()), h))
            .collect(),
        host_bmcs,
        node_labels,
        remediations: list_all(client, "List Remediations").await?,
        policy: policies
            .iter()
            .find(|p| p.name_any() == POLICY_NAME)
            .map(|p| p.spec.clone())
            .unwrap_or_else(RemediationPolicySpec::unconfigured),
    })
}

/// Whether `key` (`namespace/name`) is the Machine `wanted` names.
fn is_wanted(key: &str, wanted: Option<&str>) -> bool {
    match wanted {
        None => true,
        Some(wanted) if wanted.contains('/') => key == wanted,
        Some(wanted) => key.rsplit('/').next() == Some(wanted),
    }
}

/// Checks every Machine (or `--machine`) once and prints one line each; an error when any
/// is not ready, so that the exit code says it.
pub async fn run(args: CheckArgs) -> Result<()> {
    let client = crate::run::cluster_client(args.kubeconfig.as_deref()).await?;
    let listed = list(&client).await?;
    let lookup = |r: &HostRef| {
        listed
            .hosts
            .get(&(r.namespace.clone(), r.name.clone()))
            .cloned()
    };
    let fleet = Fleet {
        machines: &listed.machines,
        host: &lookup,
        host_bmcs: &listed.host_bmcs,
        remediations: &listed.remediations,
        policy: &listed.policy,
        node_labels: &|name: &str| listed.node_labels.get(name).cloned(),
    };
    let mut targets = targets(&fleet);
    targets.retain(|t| is_wanted(&t.key, args.machine.as_deref()));
    if targets.is_empty() {
        return Err(Error::Invalid {
            object: "baremend check".into(),
            reason: match &args.machine {
                Some(name) => {
                    format!("no Machine or Machine-less Node {name} that baremend would remediate")
                }
                None => "no Machine or Machine-less Node that baremend would remediate".into(),
            },
        });
    }
    let connector = Connector::new();
    let probes = Probes {
        client: &client,
        connector: &connector,
        strategies: &listed.policy.strategies,
        reboot_key: &listed.policy.reboot_key,
        timeout: args.timeout,
        terms: ProbeTerms {
            allow_insecure: listed.policy.allow_insecure_bmc,
            ..ProbeTerms::default()
        },
    };
    let total = targets.len();
    let mut lines = futures_util::stream::iter(targets)
        .map(|target| {
            let probes = &probes;
            async move {
                let node = if target.node.is_empty() {
                    "-"
                } else {
                    &target.node
                };
                if target.remediating {
                    let line = format!("{} {node} under remediation: not checked", target.key);
                    return (line, true);
                }
                let readiness = check(probes, &target).await;
                let line = format!("{} {node} {}", target.key, describe(&readiness));
                (line, readiness.is_ready())
            }
        })
        .buffered(CHECKS_AT_ONCE);
    let mut not_ready = 0;
    while let Some((line, ready)) = lines.next().await {
        println!("{}", line.replace(['\n', '\r'], " "));
        not_ready += usize::from(!ready);
    }
    if not_ready > 0 {
        return Err(Error::Invalid {
            object: "fencing readiness".into(),
            reason: format!("{not_ready} of {total} Machines could not be fenced now"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_is_named_by_name_or_namespace_and_name() {
        assert!(is_wanted("m/w0", None));
        assert!(is_wanted("m/w0", Some("w0")));
        assert!(is_wanted("m/w0", Some("m/w0")));
        assert!(!is_wanted("m/w0", Some("n/w0")));
        assert!(!is_wanted("m/w0", Some("w1")));
    }
}
