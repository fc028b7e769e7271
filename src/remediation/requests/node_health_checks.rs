//! NodeHealthChecks that name baremend while they are disabled.
//!
//! The medik8s NodeHealthCheck turns itself off (`Disabled=True`, reason
//! `ConflictingMachineHealthCheckDetected`) while any custom OpenShift MachineHealthCheck
//! exists (medik8s/node-healthcheck-operator, `internal/controller/nodehealthcheck_controller.go`
//! `Reconcile` and `internal/mhc/checker.go` `NeedDisableNHC`); it then creates no requests, and
//! the Nodes it was to hand to baremend are never remediated, with nothing in baremend's own
//! objects to say why. So the controller watches the NodeHealthChecks (where the API serves
//! them) and, for one that names a baremend `NodeRemediationTemplate` while it is disabled,
//! says so where an admin looks: a Warning Event on the NodeHealthCheck (a Normal one once it
//! is enabled again), the condition `NodeHealthCheckDisabled` on each baremend template it
//! names, the gauge `baremend_node_health_checks_disabled`, and a line of `baremend check`
//! ([`list_disabled`]).
//!
//! Observe (the watch, or a list) → plan ([`disabled`], [`notices`], [`template_conditions`]:
//! pure) → execute ([`tell`]: an Event each, a log line; [`set_condition`]; the gauge).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde::Deserialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::api::{Condition, ConditionType, EventReason, NodeRemediationTemplate};
use crate::remediation::pass::context::Context;
use crate::runtime::conditions::upsert_condition;
use crate::runtime::events::{Severity, publish};
use crate::{Error, Result};

/// The NodeHealthCheck's API group.
pub const GROUP: &str = "remediation.medik8s.io";
/// The version baremend reads (the only one the operator serves).
const VERSION: &str = "v1alpha1";
/// The condition a NodeHealthCheck reports while it is off.
const DISABLED: &str = "Disabled";
/// How often the controller looks again whether the API serves NodeHealthChecks, when it
/// did not (the operator may be installed later).
const DISCOVERY_INTERVAL: Duration = Duration::from_secs(300);
/// The Event reasons on the NodeHealthCheck.
const REASON_DISABLED: &str = EventReason::NodeHealthCheckDisabled.as_str();
const REASON_ENABLED: &str = EventReason::NodeHealthCheckEnabled.as_str();

/// NodeHealthChecks, cluster-scoped.
pub fn resource() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: "NodeHealthCheck".into(),
        plural: "nodehealthchecks".into(),
    }
}

/// A NodeHealthCheck, as far as this module reads it.
#[derive(Debug, Default, Deserialize)]
struct HealthCheck {
    #[serde(default)]
    spec: Spec,
    #[serde(default)]
    status: Status,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    remediation_template: Option<TemplateRef>,
    #[serde(default)]
    escalating_remediations: Vec<Escalation>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Escalation {
    remediation_template: TemplateRef,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TemplateRef {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    name: String,
    namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Status {
    #[serde(default)]
    conditions: Vec<TheirCondition>,
}

/// A condition on the NodeHealthCheck (theirs, read only).
#[derive(Debug, Deserialize)]
struct TheirCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
}

/// A NodeHealthCheck that names a baremend template and is disabled: it asks for nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disabled {
    /// The NodeHealthCheck's name.
    pub name: String,
    /// The baremend `NodeRemediationTemplate`s it names (`namespace/name`).
    pub templates: Vec<String>,
    /// The `Disabled` condition's reason, as the NodeHealthCheck wrote it.
    pub reason: String,
    /// Its message.
    pub message: String,
}

impl Disabled {
    /// One line for an admin: what is off, why, and what it means for baremend.
    pub fn describe(&self) -> String {
        let why = if self.message.is_empty() {
            self.reason.clone()
        } else {
            format!("{}: {}", self.reason, self.message)
        };
        let hint = if self.reason == DISABLED_BY_MHC {
            "; a NodeHealthCheck stays off while any custom MachineHealthCheck exists: use one \
             or the other (docs/guides/install.md)"
        } else {
            ""
        };
        format!(
            "NodeHealthCheck {} is Disabled ({why}): it names baremend's NodeRemediationTemplate {} and asks for no remediation while it is off{hint}",
            self.name,
            self.templates.join(", ")
        )
        .replace(['\n', '\r'], " ")
    }
}

/// The reason the NodeHealthCheck gives while a custom MachineHealthCheck exists
/// (`ConditionReasonDisabledMHC` in medik8s/node-healthcheck-operator
/// `api/v1alpha1/nodehealthcheck_types.go`).
pub const DISABLED_BY_MHC: &str = "ConflictingMachineHealthCheckDetected";

/// Whether a template reference names baremend's `NodeRemediationTemplate`.
fn names_baremend(reference: &TemplateRef) -> bool {
    use kube::Resource;
    let group = reference.api_version.split('/').next().unwrap_or_default();
    group == NodeRemediationTemplate::group(&())
        && reference.kind == NodeRemediationTemplate::kind(&())
}

/// The NodeHealthCheck `object` (named `name`) when it names a baremend template and reports
/// `Disabled=True`; None otherwise, also for an object that does not read as one. Pure.
pub fn disabled(name: &str, object: &Value) -> Option<Disabled> {
    let check: HealthCheck = serde_json::from_value(object.clone()).ok()?;
    let templates = baremend_templates(&check);
    if templates.is_empty() {
        return None;
    }
    let condition = check
        .status
        .conditions
        .into_iter()
        .find(|c| c.type_ == DISABLED && c.status == "True")?;
    Some(Disabled {
        name: name.to_string(),
        templates,
        reason: condition.reason,
        message: condition.message,
    })
}

/// The baremend templates a NodeHealthCheck names (`namespace/name`, or `name` alone when the
/// reference has no namespace). Pure.
fn baremend_templates(check: &HealthCheck) -> Vec<String> {
    let references = check.spec.remediation_template.iter().chain(
        check
            .spec
            .escalating_remediations
            .iter()
            .map(|e| &e.remediation_template),
    );
    references
        .filter(|r| names_baremend(r))
        .map(|r| match &r.namespace {
            Some(namespace) => format!("{namespace}/{}", r.name),
            None => r.name.clone(),
        })
        .collect()
}

/// What to tell about one NodeHealthCheck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// It is disabled now (or for another reason than before).
    Disabled(Disabled),
    /// It was disabled and is enabled again (or no longer names baremend).
    Enabled(String),
}

/// The notices between two states (by name, the disabled ones), for the NodeHealthChecks in
/// `present` (one deleted gets none: there is no object to tell it on). Pure.
pub fn notices(
    before: &BTreeMap<String, Disabled>,
    now: &BTreeMap<String, Disabled>,
    present: &dyn Fn(&str) -> bool,
) -> Vec<Notice> {
    let mut told = Vec::new();
    for (name, disabled) in now {
        if before.get(name) != Some(disabled) {
            told.push(Notice::Disabled(disabled.clone()));
        }
    }
    for name in before.keys() {
        if !now.contains_key(name) && present(name) {
            told.push(Notice::Enabled(name.clone()));
        }
    }
    told
}

/// The templates (`namespace/name`) whose condition changes between two states, each with the
/// disabled NodeHealthChecks naming it now (none: the condition turns False). A template
/// named without a namespace is left out (there is no object to write on). With no state
/// before (the first look of this leader), every template some NodeHealthCheck names
/// (`named`) is written: a condition a former leader left True must not stay when the check
/// was enabled meanwhile. Pure.
pub fn template_conditions(
    before: Option<&BTreeMap<String, Disabled>>,
    now: &BTreeMap<String, Disabled>,
    named: &BTreeSet<String>,
) -> BTreeMap<String, Vec<Disabled>> {
    let by_template = |state: &BTreeMap<String, Disabled>| {
        let mut templates: BTreeMap<String, Vec<Disabled>> = BTreeMap::new();
        for disabled in state.values() {
            for template in disabled.templates.iter().filter(|t| t.contains('/')) {
                templates
                    .entry(template.clone())
                    .or_default()
                    .push(disabled.clone());
            }
        }
        templates
    };
    let is = by_template(now);
    let Some(before) = before else {
        return named
            .iter()
            .filter(|t| t.contains('/'))
            .map(|t| (t.clone(), is.get(t).cloned().unwrap_or_default()))
            .chain(is.clone())
            .collect();
    };
    let was = by_template(before);
    let mut changed = BTreeMap::new();
    for (template, checks) in &is {
        if was.get(template) != Some(checks) {
            changed.insert(template.clone(), checks.clone());
        }
    }
    for template in was.keys().filter(|t| !is.contains_key(*t)) {
        changed.insert(template.clone(), Vec::new());
    }
    changed
}

/// The `NodeHealthCheckDisabled` condition for a template named by `checks` (the disabled
/// ones; none: False), at `now`. Pure.
pub fn template_condition(checks: &[Disabled], now: SystemTime) -> Condition {
    let (truth, reason, message) = match checks {
        [] => (
            false,
            "NodeHealthChecksEnabled".to_string(),
            "no NodeHealthCheck naming this template is Disabled".to_string(),
        ),
        [first, ..] => (
            true,
            // A reason is CamelCase; the NodeHealthCheck's always is, but it is not ours.
            if !first.reason.is_empty() && first.reason.chars().all(|c| c.is_ascii_alphanumeric()) {
                first.reason.clone()
            } else {
                REASON_DISABLED.to_string()
            },
            checks
                .iter()
                .map(Disabled::describe)
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    let mut conditions = Vec::new();
    upsert_condition(
        &mut conditions,
        ConditionType::NodeHealthCheckDisabled,
        truth,
        &reason,
        &message,
        now,
    );
    conditions.remove(0)
}

/// Writes the condition on the template `key` (`namespace/name`); a template that does not
/// exist is no error (the NodeHealthCheck names one that is not there: its Event says it).
async fn set_condition(context: &Context, key: &str, condition: Condition) {
    use kube::api::{Patch, PatchParams};
    let Some((namespace, name)) = key.split_once('/') else {
        return;
    };
    let api: Api<NodeRemediationTemplate> =
        Api::namespaced(context.clients.kube.clone(), namespace);
    let patch = Patch::Merge(serde_json::json!({"status": {"conditions": [condition]}}));
    // Only the leader writes (the watch runs beside the controllers, after the election).
    if context.leadership.writes().is_err() {
        return;
    }
    match api
        .patch_status(name, &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => {
            warn!(%error, template = key, "cannot write the NodeHealthCheckDisabled condition")
        }
    }
}

/// Every baremend template some NodeHealthCheck among `objects` names. Pure.
fn named_templates(objects: &[Arc<DynamicObject>]) -> BTreeSet<String> {
    objects
        .iter()
        .filter_map(|object| serde_json::to_value(&**object).ok())
        .filter_map(|value| serde_json::from_value::<HealthCheck>(value).ok())
        .flat_map(|check| baremend_templates(&check))
        .collect()
}

/// The disabled NodeHealthChecks naming baremend among `objects`, by name. Pure.
fn disabled_of(objects: &[Arc<DynamicObject>]) -> BTreeMap<String, Disabled> {
    objects
        .iter()
        .filter_map(|object| {
            let name = object.name_any();
            let value = serde_json::to_value(&**object).ok()?;
            Some((name.clone(), disabled(&name, &value)?))
        })
        .collect()
}

/// Whether the API server serves NodeHealthChecks now.
async fn served(client: &Client) -> Result<bool> {
    let groups = client
        .list_api_groups()
        .await
        .map_err(Error::kube("DiscoverApiGroups"))?;
    Ok(groups.groups.iter().any(|g| g.name == GROUP))
}

/// Every disabled NodeHealthCheck that names baremend, listed now; none where the API serves
/// no NodeHealthChecks. `baremend check` tells each.
pub async fn list_disabled(client: &Client) -> Result<Vec<Disabled>> {
    if !served(client).await? {
        return Ok(Vec::new());
    }
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(Error::kube("List NodeHealthChecks"))?;
    let objects: Vec<Arc<DynamicObject>> = listed.items.into_iter().map(Arc::new).collect();
    Ok(disabled_of(&objects).into_values().collect())
}

/// The reference to a NodeHealthCheck for an Event.
fn reference(name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/{VERSION}")),
        kind: Some("NodeHealthCheck".into()),
        name: Some(name.into()),
        uid,
        ..ObjectReference::default()
    }
}

/// Tells one notice: an Event on the NodeHealthCheck and a log line.
async fn tell(context: &Context, notice: &Notice, uid: Option<String>) {
    match notice {
        Notice::Disabled(disabled) => {
            let note = disabled.describe();
            warn!(node_health_check = %disabled.name, reason = %disabled.reason, "{note}");
            let pairs = [(reference(&disabled.name, uid), None)];
            publish(
                &context.clients.recorder,
                Severity::Warning,
                REASON_DISABLED,
                &note,
                &pairs,
            )
            .await;
        }
        Notice::Enabled(name) => {
            let note = format!(
                "NodeHealthCheck {name} is enabled again (or names baremend no more): it may ask baremend for remediations"
            );
            info!(node_health_check = %name, "{note}");
            let pairs = [(reference(name, uid), None)];
            publish(
                &context.clients.recorder,
                Severity::Normal,
                REASON_ENABLED,
                &note,
                &pairs,
            )
            .await;
        }
    }
}

/// Watches the NodeHealthChecks while the API serves them and tells every change of a
/// disabled one that names baremend; runs until dropped.
pub async fn run(context: Arc<Context>) {
    loop {
        match served(&context.clients.kube).await {
            Ok(true) => watch(&context).await,
            Ok(false) => {}
            Err(error) => warn!(%error, "cannot tell whether the API serves NodeHealthChecks"),
        }
        tokio::time::sleep(DISCOVERY_INTERVAL).await;
    }
}

/// The watch: after every change the whole set is decided again (NodeHealthChecks are few).
async fn watch(context: &Context) {
    let api: Api<DynamicObject> = Api::all_with(context.clients.kube.clone(), &resource());
    let writer = reflector::store::Writer::new(resource());
    let store = writer.as_reader();
    let mut changes = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .boxed();
    let mut before: Option<BTreeMap<String, Disabled>> = None;
    while let Some(change) = changes.next().await {
        match change {
            Err(error) => {
                warn!(%error, "watching NodeHealthChecks");
                // Their CRD removed (the operator uninstalled): back to looking for it now
                // and then, rather than a watch that fails forever.
                if matches!(served(&context.clients.kube).await, Ok(false)) {
                    return;
                }
                continue;
            }
            // A (re)list under way: the store is replaced whole at its end.
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => continue,
            Ok(_) => {}
        }
        let objects = store.state();
        let now = disabled_of(&objects);
        let uid = |name: &str| {
            objects
                .iter()
                .find(|o| o.name_any() == name)
                .and_then(|o| o.uid())
        };
        let previous = before.clone().unwrap_or_default();
        for notice in notices(&previous, &now, &|name| uid(name).is_some()) {
            let name = match &notice {
                Notice::Disabled(d) => d.name.clone(),
                Notice::Enabled(name) => name.clone(),
            };
            tell(context, &notice, uid(&name)).await;
        }
        let at = context.clock.now();
        let named = named_templates(&objects);
        for (template, checks) in template_conditions(before.as_ref(), &now, &named) {
            set_condition(context, &template, template_condition(&checks, at)).await;
        }
        context.metrics.set_node_health_checks_disabled(now.len());
        before = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(template: Value, condition: Option<(&str, &str)>) -> Value {
        let conditions: Vec<Value> = condition
            .into_iter()
            .map(|(status, reason)| {
                json!({"type": "Disabled", "status": status, "reason": reason, "message": "m"})
            })
            .collect();
        json!({
            "metadata": {"name": "workers"},
            "spec": {"escalatingRemediations": [
                {"remediationTemplate": template, "order": 0, "timeout": "20m"},
            ]},
            "status": {"conditions": conditions},
        })
    }

    fn ours() -> Value {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "NodeRemediationTemplate", "namespace": "nhc", "name": "baremend"})
    }

    #[test]
    fn a_check_naming_baremend_is_disabled_only_while_its_condition_is_true() {
        // The reason as medik8s/node-healthcheck-operator writes it
        // (api/v1alpha1 ConditionReasonDisabledMHC, set in
        // internal/controller/nodehealthcheck_controller.go `Reconcile`).
        let off = check(ours(), Some(("True", DISABLED_BY_MHC)));
        let found = disabled("workers", &off).unwrap();
        assert_eq!(found.templates, ["nhc/baremend"]);
        assert_eq!(found.reason, DISABLED_BY_MHC);
        assert!(
            found.describe().contains("custom MachineHealthCheck"),
            "{}",
            found.describe()
        );
        assert!(found.describe().contains(DISABLED_BY_MHC));
        for enabled in [None, Some(("False", "NodeHealthCheckEnabled"))] {
            assert_eq!(disabled("workers", &check(ours(), enabled)), None);
        }
        // Another reason is told as it is, without the MachineHealthCheck hint.
        let other = disabled(
            "workers",
            &check(ours(), Some(("True", "TemplateNotFound"))),
        )
        .unwrap();
        assert!(!other.describe().contains("custom MachineHealthCheck"));
    }

    #[test]
    fn a_disabled_check_that_names_no_baremend_template_is_none_of_ours() {
        let theirs = json!({"apiVersion": "self-node-remediation.medik8s.io/v1alpha1", "kind": "SelfNodeRemediationTemplate", "name": "snr"});
        let same_kind_other_group =
            json!({"apiVersion": "example.com/v1", "kind": "NodeRemediationTemplate", "name": "x"});
        for template in [theirs, same_kind_other_group] {
            assert_eq!(
                disabled("workers", &check(template, Some(("True", DISABLED_BY_MHC)))),
                None
            );
        }
        // The single-template form names baremend too.
        let single = json!({
            "spec": {"remediationTemplate": ours()},
            "status": {"conditions": [{"type": "Disabled", "status": "True", "reason": DISABLED_BY_MHC}]},
        });
        assert!(disabled("single", &single).is_some());
        // Not a NodeHealthCheck's shape: nothing, no panic.
        assert_eq!(
            disabled("odd", &json!({"spec": {"escalatingRemediations": "x"}})),
            None
        );
    }

    #[test]
    fn notices_tell_each_change_once_and_nothing_for_a_deleted_check() {
        let off = |reason: &str| Disabled {
            name: "a".into(),
            templates: vec!["nhc/baremend".into()],
            reason: reason.into(),
            message: String::new(),
        };
        let state = |d: Option<Disabled>| -> BTreeMap<String, Disabled> {
            d.into_iter().map(|d| (d.name.clone(), d)).collect()
        };
        let present = |_: &str| true;
        let gone = |_: &str| false;
        let none = state(None);
        let mhc = state(Some(off(DISABLED_BY_MHC)));
        let other = state(Some(off("Other")));
        assert_eq!(notices(&none, &none, &present), []);
        assert_eq!(
            notices(&none, &mhc, &present),
            [Notice::Disabled(off(DISABLED_BY_MHC))]
        );
        assert_eq!(notices(&mhc, &mhc, &present), []);
        assert_eq!(
            notices(&mhc, &other, &present),
            [Notice::Disabled(off("Other"))]
        );
        assert_eq!(
            notices(&mhc, &none, &present),
            [Notice::Enabled("a".into())]
        );
        assert_eq!(notices(&mhc, &none, &gone), []);
    }

    #[test]
    fn a_template_gets_its_condition_when_the_checks_naming_it_change_and_only_then() {
        let off = |name: &str, templates: &[&str]| Disabled {
            name: name.into(),
            templates: templates.iter().map(|t| t.to_string()).collect(),
            reason: DISABLED_BY_MHC.into(),
            message: String::new(),
        };
        let state = |checks: Vec<Disabled>| -> BTreeMap<String, Disabled> {
            checks.into_iter().map(|d| (d.name.clone(), d)).collect()
        };
        let none = state(vec![]);
        let a = state(vec![off("a", &["nhc/t1", "nhc/t2"])]);
        let ab = state(vec![off("a", &["nhc/t1", "nhc/t2"]), off("b", &["nhc/t1"])]);
        let named: BTreeSet<String> = ["nhc/t1", "nhc/t2", "nhc/t3", "bare"]
            .map(String::from)
            .into();
        let changes = |before: &BTreeMap<String, Disabled>, now| {
            template_conditions(Some(before), now, &named)
        };
        assert!(changes(&none, &none).is_empty());
        let first = changes(&none, &a);
        assert_eq!(first.keys().collect::<Vec<_>>(), ["nhc/t1", "nhc/t2"]);
        assert!(changes(&a, &a).is_empty());
        // A second check naming t1: only t1 changes.
        let second = changes(&a, &ab);
        assert_eq!(second.keys().collect::<Vec<_>>(), ["nhc/t1"]);
        assert_eq!(second["nhc/t1"].len(), 2);
        // All enabled: both back to False (no checks).
        let back = changes(&ab, &none);
        assert_eq!(back.keys().collect::<Vec<_>>(), ["nhc/t1", "nhc/t2"]);
        assert!(back.values().all(Vec::is_empty));
        // A template named without a namespace gets nothing.
        assert!(changes(&none, &state(vec![off("c", &["bare"])])).is_empty());
        // A leader's first look writes every named template: True where a disabled check
        // names it, False elsewhere (a former leader's True must not stay).
        let fresh = template_conditions(None, &a, &named);
        assert_eq!(
            fresh.keys().collect::<Vec<_>>(),
            ["nhc/t1", "nhc/t2", "nhc/t3"]
        );
        assert_eq!(fresh["nhc/t1"].len(), 1);
        assert!(fresh["nhc/t3"].is_empty());

        let at = SystemTime::UNIX_EPOCH;
        let on = template_condition(&ab.values().cloned().collect::<Vec<_>>(), at);
        assert_eq!(on.type_, "NodeHealthCheckDisabled");
        assert_eq!(
            (on.status.as_str(), on.reason.as_str()),
            ("True", DISABLED_BY_MHC)
        );
        assert!(
            on.message.contains("NodeHealthCheck a ") && on.message.contains("NodeHealthCheck b ")
        );
        let odd = Disabled {
            reason: "not camel: case".into(),
            ..off("d", &["nhc/t1"])
        };
        assert_eq!(
            template_condition(&[odd], at).reason,
            "NodeHealthCheckDisabled"
        );
        let cleared = template_condition(&[], at);
        assert_eq!(
            (cleared.status.as_str(), cleared.reason.as_str()),
            ("False", "NodeHealthChecksEnabled")
        );
    }
}
