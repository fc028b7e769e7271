//! deploy/: every manifest parses into its typed k8s-openapi struct and says what an operator
//! relies on; the alerts and the dashboard use only metrics the controller exports; and the
//! RBAC rules are exactly what the controller's API requests need, checked against every
//! request of an end-to-end run recorded by the simulated API server. (kubectl applies the
//! whole folder in tests/kubectl_apiserver.rs.)

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use baremend::api::{DriftPhase, Remediation, RemediationPhase};
use baremend::leader::LeaseConfig;
use baremend::remediation::controller::{ControllerOptions, run_elected};
use baremend::runtime::SystemClock;
use baremend_sim::apiserver::{ApiServer, AuditRecord};
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::local::NODES;
use baremend_sim::cluster::mco::disk::SimFile;
use baremend_sim::cluster::timing::Timing;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use serde::Deserialize;
use serde_json::{Value, json};

mod common;

use common::eventually;
use common::lab::Lab;

/// Every YAML document of deploy/, with the file it came from.
fn documents() -> Vec<(String, Value)> {
    let dir = common::repo_root().join("deploy");
    let mut all = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let value = Value::deserialize(document).unwrap();
            if !value.is_null() {
                all.push((file_name(&path), value));
            }
        }
    }
    all
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

fn typed<T: serde::de::DeserializeOwned>(file: &str, value: &Value) -> T {
    serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn of_kind(kind: &str) -> Vec<Value> {
    documents()
        .into_iter()
        .filter(|(_, v)| v["kind"] == kind)
        .map(|(_, v)| v)
        .collect()
}

#[test]
fn every_manifest_parses_into_its_typed_struct() {
    let mut kinds = BTreeSet::new();
    for (file, value) in documents() {
        let kind = value["kind"].as_str().unwrap_or_default().to_string();
        match kind.as_str() {
            "Kustomization" => {}
            "Namespace" => drop(typed::<Namespace>(&file, &value)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(&file, &value)),
            "ClusterRole" => drop(typed::<ClusterRole>(&file, &value)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(&file, &value)),
            "Role" => drop(typed::<Role>(&file, &value)),
            "RoleBinding" => drop(typed::<RoleBinding>(&file, &value)),
            "Service" => drop(typed::<Service>(&file, &value)),
            "Deployment" => drop(typed::<Deployment>(&file, &value)),
            // The Prometheus Operator's kinds have no k8s-openapi type: their shape is
            // checked where they are used below.
            "ServiceMonitor" | "PrometheusRule" => {}
            other => panic!("{file}: unexpected kind {other}"),
        }
        kinds.insert(kind);
    }
    for expected in [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "Deployment",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(kinds.contains(expected), "no {expected} in deploy/");
    }
}

#[test]
fn the_deployment_runs_two_hardened_replicas_probed_on_our_endpoints() {
    let deployment: Deployment = typed("deployment.yaml", &of_kind("Deployment")[0]);
    let spec = deployment.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("baremend"));
    assert_eq!(
        pod.security_context.unwrap().run_as_non_root,
        Some(true),
        "non-root"
    );
    let anti = pod.affinity.unwrap().pod_anti_affinity.unwrap();
    assert!(
        anti.preferred_during_scheduling_ignored_during_execution
            .is_some()
    );
    let container = &pod.containers[0];
    let security = container.security_context.clone().unwrap();
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    let requests = container.resources.clone().unwrap().requests.unwrap();
    assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
    let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe.clone().unwrap().http_get.unwrap().path.unwrap()
    };
    assert_eq!(path(&container.liveness_probe), "/healthz");
    assert_eq!(path(&container.readiness_probe), "/readyz");
    let args = container.args.clone().unwrap();
    assert_eq!(args[0], "run");
    assert!(args.iter().any(|a| a == "--leader-elect=true"), "{args:?}");
}

/// The `baremend_…` and `mco_…` metric names a PromQL expression uses.
fn used_metrics(expr: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut rest = expr;
    let next = |text: &str| {
        ["baremend_", "mco_"]
            .iter()
            .filter_map(|prefix| text.find(prefix))
            .min()
    };
    while let Some(at) = next(rest) {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        used.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    used
}

#[test]
fn alerts_and_dashboard_use_only_exported_metrics() {
    let exported = common::prometheus::exported_metrics();
    assert!(
        exported.contains("baremend_remediations_failed_total"),
        "{exported:?}"
    );
    let rule = &of_kind("PrometheusRule")[0];
    let groups = rule["spec"]["groups"].as_array().unwrap();
    let rules: Vec<&Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    // Recording rules make series of their own, usable by the alerts.
    let mut known = exported.clone();
    known.extend(
        rules
            .iter()
            .filter_map(|r| r["record"].as_str().map(String::from)),
    );
    let mut alerts = BTreeSet::new();
    for rule in rules {
        let expr = rule["expr"].as_str().unwrap();
        let used = used_metrics(expr);
        assert!(!used.is_empty(), "{expr}");
        for name in used {
            assert!(known.contains(&name), "rule uses unknown metric {name}");
        }
        if let Some(alert) = rule["alert"].as_str() {
            assert!(rule["labels"]["severity"].is_string(), "{rule}");
            alerts.insert(alert.to_string());
        }
    }
    for alert in [
        "BaremendRemediationFailed",
        "BaremendRemediationStuck",
        "BaremendStormGateHolding",
        "BaremendNoLeader",
        "BaremendBmcUnreachable",
        "BaremendHostPowerUnknown",
        "BaremendHostPoweredOffTooLong",
        "NodeConfigurationDrift",
        "BaremendDriftOnSeveralNodes",
        "BaremendDriftRemediationFailureRate",
        "BaremendNodeRebootsTooOften",
        "BaremendDriftCoordinatorUnavailable",
    ] {
        assert!(alerts.contains(alert), "no {alert}");
    }
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(common::repo_root().join("deploy/dashboard.json")).unwrap(),
    )
    .unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 4);
    for panel in panels {
        for target in panel["targets"].as_array().unwrap() {
            for name in used_metrics(target["expr"].as_str().unwrap()) {
                assert!(
                    exported.contains(&name),
                    "dashboard uses unknown metric {name}"
                );
            }
        }
    }
    let monitor = &of_kind("ServiceMonitor")[0];
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
}

/// What RBAC sees of a request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Access {
    group: String,
    resource: String,
    verb: String,
    namespace: Option<String>,
}

/// A resource request's RBAC verb and resource; None for non-resource paths (/version).
fn access(record: &AuditRecord) -> Option<Access> {
    let parts: Vec<&str> = record.path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => ((*group).to_string(), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, tail @ ..] if !tail.is_empty() => {
            (Some((*namespace).to_string()), tail)
        }
        other => (None, other),
    };
    let (resource, named) = match rest {
        [plural] => ((*plural).to_string(), false),
        [plural, _name] => ((*plural).to_string(), true),
        [plural, _name, sub] => (format!("{plural}/{sub}"), true),
        _ => return None,
    };
    let verb = match (record.method.as_str(), named, record.watch) {
        ("GET", _, true) => "watch",
        ("GET", true, false) => "get",
        ("GET", false, false) => "list",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => return None,
    };
    Some(Access {
        group,
        resource,
        verb: verb.into(),
        namespace,
    })
}

/// A rule and the namespace it is bound in (None: cluster-wide).
struct Granted {
    rule: PolicyRule,
    namespace: Option<String>,
}

fn grants() -> Vec<Granted> {
    let roles: Vec<(String, Option<String>, Vec<PolicyRule>)> = of_kind("ClusterRole")
        .iter()
        .map(|v| {
            let role: ClusterRole = typed("rbac.yaml", v);
            (
                format!("ClusterRole/{}", role.metadata.name.unwrap()),
                None,
                role.rules.unwrap_or_default(),
            )
        })
        .chain(of_kind("Role").iter().map(|v| {
            let role: Role = typed("rbac.yaml", v);
            (
                format!("Role/{}", role.metadata.name.unwrap()),
                role.metadata.namespace,
                role.rules.unwrap_or_default(),
            )
        }))
        .collect();
    let rules_of = |kind: &str, name: &str| -> Vec<PolicyRule> {
        roles
            .iter()
            .find(|(id, _, _)| *id == format!("{kind}/{name}"))
            .map(|(_, _, rules)| rules.clone())
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let mut granted = Vec::new();
    for value in of_kind("ClusterRoleBinding") {
        let binding: ClusterRoleBinding = typed("rbac.yaml", &value);
        for rule in rules_of(&binding.role_ref.kind, &binding.role_ref.name) {
            granted.push(Granted {
                rule,
                namespace: None,
            });
        }
    }
    for value in of_kind("RoleBinding") {
        let binding: RoleBinding = typed("rbac.yaml", &value);
        for rule in rules_of(&binding.role_ref.kind, &binding.role_ref.name) {
            granted.push(Granted {
                rule,
                namespace: binding.metadata.namespace.clone(),
            });
        }
    }
    granted
}

fn allows(granted: &Granted, access: &Access) -> bool {
    let rule = &granted.rule;
    let has = |list: &Option<Vec<String>>, item: &str| {
        list.iter().flatten().any(|x| x == item || x == "*")
    };
    (granted.namespace.is_none() || granted.namespace == access.namespace)
        && rule.api_groups.iter().flatten().any(|g| *g == access.group)
        && has(&rule.resources, &access.resource)
        && rule.verbs.contains(&access.verb)
}

/// Calls on paths the end-to-end run does not take, each with the reason it is granted.
const RARE: &[(&str, &str, &str, &str)] = &[
    (
        "machine.openshift.io",
        "machines",
        "delete",
        "deleteMachineOnFailure",
    ),
    (
        "baremend.io",
        "remediations",
        "get",
        "a creation that races its own earlier one (409)",
    ),
    (
        "events.k8s.io",
        "events",
        "patch",
        "a repeated Event's series count",
    ),
    (
        "security.openshift.io",
        "securitycontextconstraints",
        "use",
        "admission of the privileged helper pods on OpenShift (no API call)",
    ),
    (
        "",
        "secrets",
        "create",
        "the Restore action's content Secret",
    ),
    (
        "",
        "secrets",
        "delete",
        "the Restore action's content Secret",
    ),
    (
        "",
        "pods/eviction",
        "create",
        "drainBeforeRestore: our own drain",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rbac_rules_are_exactly_what_the_controller_calls() {
    // The reboot API first; worker-1 is detached, so it escalates to its BMC over Redfish.
    let policy = json!({
        "strategies": ["BareMetalHostRebootApi", "DirectBmc"],
        "timeouts": {"readyGraceSeconds": 0, "powerOffSeconds": 2},
    });
    let spec = ClusterSpec {
        timing: Timing::fast(),
        // With a Machine Config Operator: the drift coordinator's calls are checked too.
        mco: true,
        ..ClusterSpec::default()
    };
    let lab = Lab::builder(spec)
        .policy(policy)
        .drift_policy(json!({"debounceSeconds": 1}))
        .start()
        .await;
    lab.detach("worker-1");
    // An operator's label, which the returning Node gets back (a Node patch).
    lab.api
        .merge(
            NODES,
            "",
            "worker-0",
            &json!({"metadata": {"labels": {"team": "db"}}}),
            false,
        )
        .unwrap();
    let server = lab.cluster.api_server();
    server.record_requests();
    let options = ControllerOptions {
        drift_helper_image: Some("baremend:test".into()),
        ..lab.options()
    };
    let controller = tokio::spawn(run_elected(
        lab.client.clone(),
        Arc::new(SystemClock),
        options,
        LeaseConfig {
            namespace: "baremend".into(),
            name: "baremend".into(),
            identity: "rbac-test".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_millis(500),
        },
        std::future::pending(),
    ));
    // Read through the store: the test's own reads must not count as the controller's.
    let phase = |r: Remediation| r.status.map(|s| s.phase);
    lab.cluster.hang("worker-0");
    assert_eq!(
        phase(lab.ended("worker-0-1").await),
        Some(RemediationPhase::Succeeded)
    );
    lab.trigger("worker-1", true);
    assert_eq!(
        phase(lab.ended("worker-1-1").await),
        Some(RemediationPhase::Succeeded)
    );
    // Config drift on worker-2, force-reapplied through the MCO.
    lab.cluster
        .disk("worker-2")
        .unwrap()
        .put("/etc/demo/rules.json", SimFile::regular(b"[]", 0o644));
    lab.reach("worker-2-1", DriftPhase::Succeeded).await;
    let granted = grants();
    // The calls that come last (the Lease's renewals, every 500 ms) may not have come yet.
    eventually(
        "a call for every grant",
        Duration::from_secs(10),
        async || {
            let unneeded = unneeded(&granted, &used(server));
            unneeded.is_empty().then_some(()).ok_or(unneeded.join("\n"))
        },
    )
    .await;
    controller.abort();

    let used = used(server);
    assert!(!used.is_empty());
    for access in &used {
        assert!(
            granted.iter().any(|g| allows(g, access)),
            "the controller needs {access:?}, which deploy/rbac.yaml does not grant"
        );
    }
    // And nothing is granted that no call needs.
    let unneeded = unneeded(&granted, &used);
    assert!(unneeded.is_empty(), "{}", unneeded.join("\n"));
}

/// Every call the API server recorded.
fn used(server: &ApiServer) -> BTreeSet<Access> {
    server
        .recorded_requests()
        .iter()
        .filter_map(access)
        .collect()
}

/// The grants that no call in `used` needs (and that are not rare), one line each.
fn unneeded(granted: &[Granted], used: &BTreeSet<Access>) -> Vec<String> {
    let mut unneeded = Vec::new();
    for g in granted {
        for group in g.rule.api_groups.iter().flatten() {
            for resource in g.rule.resources.iter().flatten() {
                for verb in &g.rule.verbs {
                    let needed = used
                        .iter()
                        .any(|a| a.group == *group && a.resource == *resource && a.verb == *verb);
                    let rare = RARE
                        .iter()
                        .any(|(rg, rr, rv, _)| rg == group && rr == resource && rv == verb);
                    if !(needed || rare) {
                        unneeded.push(format!(
                            "deploy/rbac.yaml grants {verb} on {group}/{resource}, which no call needs"
                        ));
                    }
                }
            }
        }
    }
    unneeded
}
