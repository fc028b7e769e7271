//! `baremend status`, `baremend retry` and `baremend ack`: what needs an admin, and the two
//! annotations an admin sets on a failed remediation, without typing them.
//!
//! Expected flow: `status` lists the Remediations and DriftRemediations that are under way,
//! held, or Failed and neither retried nor acknowledged, and a dry run whose Node is still
//! not Ready, each with its reason and the runbook section (or the command) for it; after reading the runbook and fixing the cause, `retry` asks for a new
//! attempt (`baremend.io/retry: "true"`) or `ack` lets retention forget the failure
//! (`baremend.io/acknowledged: "true"`). Guarantees: `retry` and `ack` refuse anything but a
//! Failed remediation with a clear error, and write only their annotation (a merge patch):
//! the controller decides, through every safety gate, what a retry does. Caveats: the
//! controller honours a retry on a Machine's latest Remediation only, and only while its
//! trigger is still there; `status` says so, it cannot change it.

use clap::Args;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::api::annotations::{ACKNOWLEDGED, RETRIED_BY, RETRY};
use crate::api::{ConditionType, DriftPhase, DriftRemediation, Remediation, RemediationPhase};
use crate::run::ClusterArgs;
use crate::runtime::retention::acknowledged;
use crate::{Error, Result};

/// Where the runbook is published: each alert's `runbook_url` and each `status` line point
/// into it, at the section named after the reason or the alert.
pub const RUNBOOK_URL: &str =
    "https://github.com/baremend/baremend/blob/main/docs/guides/runbook.md";

/// The runbook anchor of a section titled `title` (a reason or an alert name): the heading
/// lower-cased, as Markdown renderers make anchors of one-word headings.
pub fn runbook_anchor(title: &str) -> String {
    title.to_ascii_lowercase()
}

/// Arguments of `baremend status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Where the cluster is.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Every remediation, also those that ended well or were dealt with.
    #[arg(long)]
    pub all: bool,
}

/// Which kind of remediation `retry` and `ack` act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A machine `Remediation` (namespaced, `brem`).
    Remediation,
    /// A config-drift `DriftRemediation` (cluster-scoped, `bdrift`).
    Drift,
}

/// Arguments of `baremend retry` and `baremend ack`.
#[derive(Debug, Args)]
pub struct MarkArgs {
    /// Where the cluster is.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The Failed remediation: `name` or `namespace/name` (a DriftRemediation: `name`).
    pub name: String,
    /// The Remediation's namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// What `name` is.
    #[arg(long, value_enum, default_value = "remediation")]
    pub kind: Kind,
}

/// `retry` or `ack`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A new attempt.
    Retry,
    /// Seen; retention may delete it.
    Ack,
}

impl Mark {
    /// The annotation this mark sets.
    pub fn annotation(self) -> &'static str {
        match self {
            Mark::Retry => RETRY,
            Mark::Ack => ACKNOWLEDGED,
        }
    }
}

/// One remediation as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// `Remediation ns/name` or `DriftRemediation name`.
    pub object: String,
    /// `Machine x`, `Node y`.
    pub subject: String,
    /// The phase.
    pub phase: String,
    /// The reason of a failure or of a hold, if any.
    pub reason: Option<String>,
    /// Whether an admin is needed: under way and held, or Failed and not dealt with.
    pub needs_admin: bool,
    /// What to do next, when there is something.
    pub next: Option<String>,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {}", self.object, self.subject, self.phase)?;
        if let Some(reason) = &self.reason {
            write!(f, " {reason}")?;
        }
        if let Some(next) = &self.next {
            write!(f, ": {next}")?;
        }
        Ok(())
    }
}

/// The reason of the condition `type_` with status `status`, if any.
fn condition_reason(
    conditions: &[crate::api::Condition],
    type_: ConditionType,
    status: &str,
) -> Option<String> {
    conditions
        .iter()
        .find(|c| c.type_ == type_.as_str() && c.status == status)
        .map(|c| c.reason.clone())
        .filter(|r| !r.is_empty())
}

/// What `status` says of a Remediation.
pub fn remediation_row(remediation: &Remediation) -> Row {
    let namespace = remediation.namespace().unwrap_or_default();
    let name = remediation.name_any();
    let status = remediation.status.clone().unwrap_or_default();
    let spec = &remediation.spec;
    let subject = match (&spec.machine_name, &spec.node_name) {
        (Some(machine), _) => format!("Machine {machine}"),
        (None, Some(node)) => format!("Node {node}"),
        (None, None) => "-".to_string(),
    };
    let annotations = remediation.annotations();
    let (reason, needs_admin, next) = match status.phase {
        RemediationPhase::Failed => {
            let reason = condition_reason(&status.conditions, ConditionType::Succeeded, "False");
            let dealt_with = annotations.contains_key(RETRIED_BY) || acknowledged(annotations);
            let runbook = format!(
                "{RUNBOOK_URL}#{}",
                runbook_anchor(reason.as_deref().unwrap_or("failed-remediations"))
            );
            let next = (!dealt_with).then(|| {
                format!(
                    "read {runbook}, fix the cause, then `kubectl baremend retry -n {namespace} {name}` (or `ack` to let it go)"
                )
            });
            (reason, !dealt_with, next)
        }
        RemediationPhase::Pending => {
            let held = condition_reason(&status.conditions, ConditionType::Held, "True");
            let next = held
                .as_ref()
                .map(|gate| format!("held by the {gate} gate ({RUNBOOK_URL}#held-starts)"));
            (held, true, next)
        }
        // Under way: shown until it ends.
        phase => (None, !phase.is_terminal(), None),
    };
    Row {
        object: format!("Remediation {namespace}/{name}"),
        subject,
        phase: format!("{:?}", status.phase),
        reason,
        needs_admin,
        next,
    }
}

/// What `status` says of a dry-run Remediation whose Node is not Ready now (`node_ready`
/// `Some(false)`): the policy decided a fence and did nothing, and the Node is still down, so
/// an admin is needed. None when the Node is Ready, gone, or cannot be read (a workload
/// cluster's). Pure.
pub fn dry_run_row(remediation: &Remediation, node_ready: Option<bool>) -> Option<Row> {
    let status = remediation.status.as_ref()?;
    if status.phase != RemediationPhase::DryRun || node_ready != Some(false) {
        return None;
    }
    let node = remediation.spec.node_name.as_deref().unwrap_or("-");
    let would = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::DryRun.as_str())
        .map(|c| c.message.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "a fence was decided".into());
    let mut row = remediation_row(remediation);
    row.reason = Some("DryRun".into());
    row.needs_admin = true;
    row.next = Some(format!(
        "Node {node} is not Ready and the policy is a dry run ({would}); to remediate, switch the policy: `kubectl patch remediationpolicy default --type merge -p '{{\"spec\":{{\"mode\":\"Remediate\"}}}}'` (docs/guides/operate.md)"
    ));
    Some(row)
}

/// Whether each Node is Ready now, by name (None: the Nodes cannot be listed).
async fn nodes_ready(client: &Client) -> Option<std::collections::HashMap<String, bool>> {
    let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .ok()?;
    Some(
        nodes
            .items
            .iter()
            .map(|node| {
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                    .is_some_and(|c| c.status == "True");
                (node.name_any(), ready)
            })
            .collect(),
    )
}

/// The flagged dry runs of `remediations` (see [`dry_run_row`]): each subject's newest, when
/// its Node is not Ready now. `baremend check` warns with them.
pub async fn dry_runs_beside_nodes_down(client: &Client, remediations: &[Remediation]) -> Vec<Row> {
    let Some(ready) = nodes_ready(client).await else {
        return Vec::new();
    };
    newest_of_each_subject(remediations)
        .into_iter()
        .filter_map(|r| dry_run_row(r, ready.get(r.spec.node_name.as_deref()?).copied()))
        .collect()
}

/// The newest Remediation of each subject (namespace and Machine or Node), as `status` reads
/// them: a dry run is decided again while its trigger stays, each time a new Remediation.
fn newest_of_each_subject(remediations: &[Remediation]) -> Vec<&Remediation> {
    let mut newest: std::collections::HashMap<(String, String), &Remediation> =
        std::collections::HashMap::new();
    for remediation in remediations {
        let key = (
            remediation.namespace().unwrap_or_default(),
            crate::remediation::pass::subject::subject_key(&remediation.spec),
        );
        let created = |r: &Remediation| r.metadata.creation_timestamp.clone();
        match newest.get(&key) {
            Some(seen) if created(seen) >= created(remediation) => {}
            _ => {
                newest.insert(key, remediation);
            }
        }
    }
    newest.into_values().collect()
}

/// What `status` says of a DriftRemediation.
pub fn drift_row(drift: &DriftRemediation) -> Row {
    let name = drift.name_any();
    let status = drift.status.clone().unwrap_or_default();
    let annotations = drift.annotations();
    // An Escalated one was handed to the machine remediation, which `status` shows itself.
    let failed = status.phase == DriftPhase::Failed;
    let reason = if failed {
        condition_reason(&status.conditions, ConditionType::Failed, "True").or(status.reason)
    } else {
        None
    };
    let dealt_with = annotations.contains_key(RETRIED_BY) || acknowledged(annotations);
    let next = (failed && !dealt_with).then(|| {
        format!(
            "read {RUNBOOK_URL}#{}, fix the cause, then `kubectl baremend retry --kind drift {name}` (or `ack`)",
            runbook_anchor(reason.as_deref().unwrap_or("drift-remediation-failures"))
        )
    });
    Row {
        object: format!("DriftRemediation {name}"),
        subject: format!("Node {}", drift.spec.node_name),
        phase: format!("{:?}", status.phase),
        reason,
        needs_admin: next.is_some() || !status.phase.is_terminal(),
        next,
    }
}

/// Every object of a kind.
async fn list<K>(client: &Client, op: &'static str) -> Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::kube(op))?
        .items)
}

/// Prints one line per remediation that needs an admin (every one with `--all`).
pub async fn status(args: StatusArgs) -> Result<()> {
    let client = args.cluster.client().await?;
    let remediations = list::<Remediation>(&client, "List Remediations").await?;
    // A subject's newest dry run beside its Node still down is flagged: the policy decided
    // and did nothing.
    let ready = nodes_ready(&client).await.unwrap_or_default();
    let newest: Vec<&Remediation> = newest_of_each_subject(&remediations);
    let mut rows: Vec<Row> = remediations
        .iter()
        .map(|r| {
            let node = r.spec.node_name.as_deref().unwrap_or_default();
            newest
                .iter()
                .any(|n| std::ptr::eq(*n, r))
                .then(|| dry_run_row(r, ready.get(node).copied()))
                .flatten()
                .unwrap_or_else(|| remediation_row(r))
        })
        .collect();
    rows.extend(
        list::<DriftRemediation>(&client, "List DriftRemediations")
            .await?
            .iter()
            .map(drift_row),
    );
    let total = rows.len();
    let shown: Vec<&Row> = rows.iter().filter(|r| args.all || r.needs_admin).collect();
    for row in &shown {
        println!("{}", row.to_string().replace(['\n', '\r'], " "));
    }
    if shown.is_empty() {
        println!("nothing needs you: {total} remediations, none under way, held or failed");
    }
    Ok(())
}

/// `namespace/name` or `name` in `namespace` (else the client's default namespace).
fn split_name<'a>(
    name: &'a str,
    namespace: Option<&'a str>,
    client: &'a Client,
) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((namespace, name)) => (namespace, name),
        None => (namespace.unwrap_or(client.default_namespace()), name),
    }
}

/// Sets the mark's annotation on a Failed remediation; refuses anything else.
pub async fn mark(mark: Mark, args: MarkArgs) -> Result<()> {
    let client = args.cluster.client().await?;
    let patch = Patch::Merge(json!({"metadata": {"annotations": {mark.annotation(): "true"}}}));
    let params = PatchParams::default();
    let object = match args.kind {
        Kind::Remediation => {
            let (namespace, name) = split_name(&args.name, args.namespace.as_deref(), &client);
            let api: Api<Remediation> = Api::namespaced(client.clone(), namespace);
            let found = api.get(name).await.map_err(Error::kube("GetRemediation"))?;
            let phase = found.phase();
            let object = format!("Remediation {namespace}/{name}");
            if phase != RemediationPhase::Failed {
                return Err(refused(&object, &format!("{phase:?}"), mark));
            }
            api.patch(name, &params, &patch)
                .await
                .map_err(Error::kube("PatchRemediation"))?;
            object
        }
        Kind::Drift => {
            let name = args.name.rsplit('/').next().unwrap_or(&args.name);
            let api: Api<DriftRemediation> = Api::all(client.clone());
            let found = api
                .get(name)
                .await
                .map_err(Error::kube("GetDriftRemediation"))?;
            let phase = found.phase();
            let object = format!("DriftRemediation {name}");
            if phase != DriftPhase::Failed {
                return Err(refused(&object, &format!("{phase:?}"), mark));
            }
            api.patch(name, &params, &patch)
                .await
                .map_err(Error::kube("PatchDriftRemediation"))?;
            object
        }
    };
    let said = match mark {
        Mark::Retry => {
            "retry asked: the controller starts a new attempt through every safety gate while the trigger is there (`kubectl baremend status` shows it)"
        }
        Mark::Ack => {
            "acknowledged: retention may delete it once it is older than the policy's keepFinished newest"
        }
    };
    println!("{object}: {said}");
    Ok(())
}

fn refused(object: &str, phase: &str, mark: Mark) -> Error {
    let what = match mark {
        Mark::Retry => "retried",
        Mark::Ack => "acknowledged",
    };
    Error::Invalid {
        object: object.to_string(),
        reason: format!("is {phase}: only a Failed one is {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn drift(phase: &str, annotations: serde_json::Value) -> DriftRemediation {
        serde_json::from_value(json!({
            "metadata": {"name": "w0-1", "annotations": annotations},
            "spec": {"nodeName": "w0", "kind": "Content", "target": "/etc/x", "action": "Force"},
            "status": {"phase": phase, "conditions": [{"type": "Failed", "status": "True", "reason": "DrainTimeout", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    #[test]
    fn a_dry_run_beside_a_node_still_down_needs_an_admin() {
        let remediation: Remediation = serde_json::from_value(json!({
            "apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
            "metadata": {"name": "worker-3-1", "namespace": "m"},
            "spec": {"machineName": "worker-3", "nodeName": "worker-3"},
            "status": {"phase": "DryRun", "conditions": [{"type": "DryRun", "status": "True", "reason": "WouldFence", "message": "dry run: would fence with BareMetalHostRebootApi", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap();
        let row = dry_run_row(&remediation, Some(false)).unwrap();
        assert!(row.needs_admin);
        let line = row.to_string();
        assert!(
            line.contains("DryRun") && line.contains("Node worker-3 is not Ready"),
            "{line}"
        );
        assert!(
            line.contains("would fence with BareMetalHostRebootApi"),
            "{line}"
        );
        assert!(line.contains(r#"{"spec":{"mode":"Remediate"}}"#), "{line}");
        // The Node is back, gone, or unreadable: nothing to flag.
        for ready in [Some(true), None] {
            assert!(dry_run_row(&remediation, ready).is_none());
        }
        assert!(!remediation_row(&remediation).needs_admin);
    }

    #[test]
    fn a_failed_drift_needs_an_admin_until_it_is_retried_or_acknowledged() {
        let failed = drift_row(&drift("Failed", json!({})));
        assert!(failed.needs_admin);
        assert_eq!(failed.reason.as_deref(), Some("DrainTimeout"));
        let next = failed.next.unwrap();
        assert!(
            next.contains("docs/guides/runbook.md#draintimeout"),
            "{next}"
        );
        assert!(
            next.contains("kubectl baremend retry --kind drift w0-1"),
            "{next}"
        );
        for dealt_with in [json!({ACKNOWLEDGED: "true"}), json!({RETRIED_BY: "w0-2"})] {
            assert!(!drift_row(&drift("Failed", dealt_with)).needs_admin);
        }
        // Handed to the machine remediation, or ended well: nothing to do here.
        for phase in ["Escalated", "Succeeded", "SelfHealed"] {
            let row = drift_row(&drift(phase, json!({})));
            assert!(!row.needs_admin && row.next.is_none(), "{phase}");
        }
        assert!(drift_row(&drift("Draining", json!({}))).needs_admin);
    }
}
