//! `baremend check`: every Machine baremend would remediate has its fencing path checked
//! once, exactly as the controller's periodic check does (see
//! [`crate::remediation::readiness::fencing_check`]), and gets one line: Machine, Node, fencing path,
//! READY or NOT READY with the reason. Nothing is changed: no power request, no write.
//! Run it on day one, before trusting remediation, and after any BMC or credentials change.
//! A NodeHealthCheck that names baremend while it is Disabled gets a line first (it asks for
//! no remediation: [`crate::remediation::requests::node_health_checks`]), and fails the check too.
//! So does an OpenShift MachineHealthCheck that hands Machines over by the annotation where the
//! legacy bare-metal remediation acts on it too (`legacy.rs`): two remediators on one host.

mod legacy;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::Connector;
use clap::Args;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::api::slim::{self, MachineApi};
use crate::api::{
    HostBmc, NodeRemediationTemplate, Remediation, RemediationPolicy, RemediationPolicySpec,
};
use crate::duration::parse_duration;
use crate::remediation::act::probe::ProbeTerms;
use crate::remediation::decide::lease_budget::nhc_lease_warning;
use crate::remediation::decide::observe::HostRef;
use crate::remediation::decide::trust::machineless_node;
use crate::remediation::decide::trust::narrow;
use crate::remediation::evidence::capi::hosts_of_machines;
use crate::remediation::readiness::fencing_check::{
    CHECKS_AT_ONCE, Fleet, Probes, check, describe, targets,
};
use crate::remediation::requests::node_health_checks::{Disabled, list_disabled};
use crate::run::ClusterArgs;
use crate::runtime::informer::POLICY_NAME;
use crate::{Error, Result};

/// Arguments of `baremend check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Where the cluster is.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Only this Machine, or Node without a Machine (`name`, or `namespace/name`; a Node's
    /// namespace is its `HostBmc`'s).
    #[arg(long, value_name = "NAME")]
    pub machine: Option<String>,
    /// How long each fencing path's probe may take (login, reads and logout).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The Machine API of the cluster's Machines, as the controller's own flag:
    /// `openshift` (machine.openshift.io) or `cluster-api` (cluster.x-k8s.io, each host found
    /// through the Machine's Metal3Machine).
    #[arg(long, value_enum, default_value = "openshift")]
    pub machine_api: MachineApi,
}

/// What the cluster holds that the check reads.
struct Listed {
    machines: Vec<Arc<slim::Machine>>,
    hosts: HashMap<(String, String), Arc<slim::BareMetalHost>>,
    /// Cluster API: each Machine's host, found through its Metal3Machine.
    resolved_hosts: Option<HashMap<String, std::result::Result<Option<HostRef>, String>>>,
    host_bmcs: Vec<Arc<HostBmc>>,
    remediations: Vec<Arc<Remediation>>,
    policy: RemediationPolicySpec,
    /// The NodeHealthCheck templates (a NodeHealthCheck names them).
    node_templates: Vec<Arc<NodeRemediationTemplate>>,
    /// The labels of every Node, when a `HostBmc` names a Node without a Machine (its role
    /// says whether it is control plane).
    node_labels: HashMap<String, BTreeMap<String, String>>,
    /// What the cluster does not serve, told before the lines (a cluster without the
    /// BareMetal Operator, or without a Machine API, is checked for what it has).
    notes: Vec<String>,
    /// Health checks that hand Machines over where the legacy bare-metal remediation acts on
    /// them too (`legacy.rs`): failures, one line each.
    legacy_conflicts: Vec<String>,
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

/// Whether a failed list means the API server does not serve the kind (its CRD is not
/// installed): a 404 for the whole collection.
fn not_served(error: &Error) -> bool {
    matches!(
        error,
        Error::Kube {
            source: kube::Error::Api(status),
            ..
        } if status.code == 404
    )
}

/// Lists a kind the cluster may not serve: empty, with a note saying so, when it does not.
async fn list_if_served<K>(
    client: &Client,
    what: &'static str,
    absent: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<Arc<K>>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match list_all::<K>(client, what).await {
        Err(error) if not_served(&error) => {
            let plural = K::plural(&());
            let group = K::group(&());
            notes.push(format!(
                "note: this cluster serves no {plural}.{group}: {absent}"
            ));
            Ok(Vec::new())
        }
        other => other,
    }
}

/// The cluster's Machines of `api` (Cluster API ones as the controller sees them).
async fn machines(
    client: &Client,
    api: MachineApi,
    notes: &mut Vec<String>,
) -> Result<Vec<Arc<slim::Machine>>> {
    let absent = match api {
        MachineApi::OpenShift => {
            "no Machine is checked (on Cluster API, give --machine-api cluster-api)"
        }
        MachineApi::ClusterApi => {
            "no Machine is checked (on OpenShift, give --machine-api openshift)"
        }
    };
    match api {
        MachineApi::OpenShift => list_if_served(client, "List Machines", absent, notes).await,
        MachineApi::ClusterApi => {
            Ok(
                list_if_served::<slim::CapiMachine>(client, "List Machines", absent, notes)
                    .await?
                    .into_iter()
                    .map(|m| Arc::new(slim::Machine::from((*m).clone())))
                    .collect(),
            )
        }
    }
}

async fn list(client: &Client, machine_api: MachineApi) -> Result<Listed> {
    let mut notes = Vec::new();
    let hosts = list_if_served::<slim::BareMetalHost>(
        client,
        "List BareMetalHosts",
        "the reboot API is no fencing path here; hosts are fenced through their HostBmcs",
        &mut notes,
    )
    .await?;
    let policies = match list_all::<RemediationPolicy>(client, "List RemediationPolicies").await {
        Err(error) if not_served(&error) => return Err(crate::installed::not_installed()),
        other => other?,
    };
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
    let machines = machines(client, machine_api, &mut notes).await?;
    let legacy_conflicts = match machine_api {
        MachineApi::OpenShift => {
            let checks = match list_all(client, "List MachineHealthChecks").await {
                Ok(checks) => checks,
                Err(error) if not_served(&error) => Vec::new(),
                // Only this check needs them: the fencing paths are still checked.
                Err(error) => {
                    eprintln!(
                        "warning: the health checks are not checked against the legacy bare-metal remediation: {error}"
                    );
                    Vec::new()
                }
            };
            legacy::conflicts(&checks, &machines)
        }
        // Cluster API's health checks ask through templates only.
        MachineApi::ClusterApi => Vec::new(),
    };
    let resolved_hosts = match machine_api {
        MachineApi::OpenShift => None,
        MachineApi::ClusterApi => Some(hosts_of_machines(client, &machines).await?),
    };
    Ok(Listed {
        machines,
        hosts: hosts
            .into_iter()
            .map(|h| ((h.namespace().unwrap_or_default(), h.name_any()), h))
            .collect(),
        resolved_hosts,
        host_bmcs,
        node_labels,
        remediations: list_all(client, "List Remediations").await?,
        // Only for a warning: a cluster or an account that cannot list them still gets its
        // fencing check.
        node_templates: match list_all(client, "List NodeRemediationTemplates").await {
            Ok(templates) => templates,
            Err(error) => {
                eprintln!(
                    "warning: NodeHealthCheck's lease not checked: cannot list NodeRemediationTemplates: {error}"
                );
                Vec::new()
            }
        },
        legacy_conflicts,
        policy: policies
            .iter()
            .find(|p| p.name_any() == POLICY_NAME)
            .map(|p| p.spec.clone())
            .unwrap_or_else(RemediationPolicySpec::unconfigured),
        notes,
    })
}

/// The policy as each NodeHealthCheck template applies it, where its power cycles would
/// outlast NodeHealthCheck's lease: one warning each (see
/// [`crate::remediation::decide::lease_budget`]). Nothing without a template: a MachineHealthCheck
/// has no such lease.
fn lease_warnings(
    policy: &RemediationPolicySpec,
    templates: &[Arc<NodeRemediationTemplate>],
) -> Vec<String> {
    templates
        .iter()
        .filter_map(|t| {
            let name = format!(
                "NodeRemediationTemplate {}/{}",
                t.namespace().unwrap_or_default(),
                t.name_any()
            );
            // Its requests get the policy narrowed by the template, or are refused.
            match narrow(policy, &t.spec.template.spec.overrides) {
                Ok(applied) => {
                    let what =
                        format!("{name} (RemediationPolicy {POLICY_NAME} with its overrides)");
                    nhc_lease_warning(&what, &applied)
                }
                Err(refusal) => Some(format!(
                    "{name}: its requests would be refused ({}): {refusal}",
                    refusal.reason()
                )),
            }
        })
        .collect()
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
    let client = args.cluster.client().await?;
    // First what would keep any request from coming: a NodeHealthCheck naming baremend that
    // is off (one line each, and the exit code).
    let disabled = list_disabled(&client).await?;
    for check in &disabled {
        println!("{}", check.describe());
    }
    let listed = list(&client, args.machine_api).await?;
    for note in &listed.notes {
        println!("{note}");
    }
    for conflict in &listed.legacy_conflicts {
        println!("error: {conflict}");
    }
    // Warnings, not failures: the fencing paths may all be ready.
    for warning in lease_warnings(&listed.policy, &listed.node_templates) {
        eprintln!("warning: {warning}");
    }
    // A policy still in dry run beside a Node that stays down: decided, and nothing done.
    if listed.policy.mode == crate::api::RemediationMode::DryRun {
        let remediations: Vec<_> = listed.remediations.iter().map(|r| (**r).clone()).collect();
        for row in crate::status::dry_runs_beside_nodes_down(&client, &remediations).await {
            let line = row.to_string().replace(['\n', '\r'], " ");
            eprintln!("warning: {line}");
        }
    }
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
        resolved_hosts: listed.resolved_hosts.as_ref(),
    };
    let mut targets = targets(&fleet);
    targets.retain(|t| is_wanted(&t.key, args.machine.as_deref()));
    if targets.is_empty() {
        if let Some(error) = disabled_error(&disabled) {
            return Err(error);
        }
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
    if !listed.legacy_conflicts.is_empty() {
        return Err(Error::Invalid {
            object: "MachineHealthChecks".into(),
            reason: format!(
                "{} MachineHealthCheck(s) hand Machines to two remediators at once (above)",
                listed.legacy_conflicts.len()
            ),
        });
    }
    if not_ready > 0 {
        return Err(Error::Invalid {
            object: "fencing readiness".into(),
            reason: format!("{not_ready} of {total} Machines could not be fenced now"),
        });
    }
    disabled_error(&disabled).map_or(Ok(()), Err)
}

/// The error `check` ends with when NodeHealthChecks naming baremend are disabled.
fn disabled_error(disabled: &[Disabled]) -> Option<Error> {
    (!disabled.is_empty()).then(|| Error::Invalid {
        object: "NodeHealthChecks".into(),
        reason: format!(
            "{} NodeHealthCheck(s) naming baremend are Disabled and ask for no remediation",
            disabled.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(name: &str, spec: serde_json::Value) -> Arc<NodeRemediationTemplate> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "baremend.io/v1alpha1",
                "kind": "NodeRemediationTemplate",
                "metadata": {"name": name, "namespace": "workload-availability"},
                "spec": {"template": {"spec": spec}},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn each_nodehealthcheck_template_that_outlasts_the_lease_is_warned_about() {
        let policy = RemediationPolicySpec::default();
        assert!(
            lease_warnings(&policy, &[]).is_empty(),
            "no NodeHealthCheck template"
        );
        // Within the default policy: a template inherits it or narrows it; asking for more
        // cycles than the policy allows is a refusal, told as such.
        let templates = [
            template("baremend", serde_json::json!({})),
            template("patient", serde_json::json!({"maxAttempts": 4})),
        ];
        let warnings = lease_warnings(&policy, &templates);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with(
                "NodeRemediationTemplate workload-availability/patient: its requests would be refused (WidensPolicy)"
            ),
            "{warnings:?}"
        );
        // A policy that outlasts the lease reaches every template that inherits it; one that
        // narrows it to fit is not warned about.
        let long = RemediationPolicySpec {
            max_attempts: 4,
            ..RemediationPolicySpec::default()
        };
        let templates = [
            template("baremend", serde_json::json!({})),
            template("narrow", serde_json::json!({"maxAttempts": 2})),
        ];
        let warnings = lease_warnings(&long, &templates);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("NodeRemediationTemplate workload-availability/baremend (RemediationPolicy default with its overrides): maxAttempts 4"),
            "{warnings:?}"
        );
    }

    #[test]
    fn a_machine_is_named_by_name_or_namespace_and_name() {
        assert!(is_wanted("m/w0", None));
        assert!(is_wanted("m/w0", Some("w0")));
        assert!(is_wanted("m/w0", Some("m/w0")));
        assert!(!is_wanted("m/w0", Some("n/w0")));
        assert!(!is_wanted("m/w0", Some("w1")));
    }
}
