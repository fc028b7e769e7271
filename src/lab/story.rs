//! The remediation story on the simulated cluster: hang hosts, watch the controller heal them
//! (or refuse to), print every change as it happens and the timing of every persisted step.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use baremend_sim::cluster::local::{
    BMHS, Local, MACHINE_REMEDIATION_TEMPLATES, MACHINE_REMEDIATIONS, MACHINES, NODES,
};
use baremend_sim::cluster::nhc::{NODE_REMEDIATION_TEMPLATES, NODE_REMEDIATIONS};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, NHC_NAMESPACE};
use baremend_sim::host::ObservedPower;
use kube::api::Api;
use serde_json::{Value, json};

use super::setup::LabCluster;
use super::{Scenario, Serving};
use crate::api::annotations::EXTERNAL_REMEDIATION;
use crate::api::slim::MachineApi;
use crate::api::{Remediation, RemediationPhase, RemediationStatus};
use crate::metrics::Metrics;
use crate::runtime::clock::{parse_rfc3339, since_epoch};
use crate::runtime::read::GetPresent;
use crate::{Error, Result};

/// How a target's remediation must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// In this phase.
    Ends(RemediationPhase),
    /// Still `Pending`, held by this gate (its reason), when the others have ended.
    Held(&'static str),
}

/// What a scenario does and how it must end.
struct Plan {
    /// Hosts hung at the start, with how their remediation must end.
    targets: Vec<(&'static str, Expect)>,
    spec: ClusterSpec,
    policy: Value,
}

impl Plan {
    fn of(scenario: Scenario) -> Plan {
        let mut plan = Plan {
            targets: vec![("worker-0", Expect::Ends(RemediationPhase::Succeeded))],
            spec: ClusterSpec {
                timing: Timing::default(),
                ..ClusterSpec::default()
            },
            policy: json!({
                "timeouts": {"powerOffSeconds": 15, "nodeReadySeconds": 60, "readyGraceSeconds": 2},
            }),
        };
        match scenario {
            Scenario::Ipmi => {
                plan.spec.ipmi = true;
                plan.spec.bmh_uses_ipmi = true;
                plan.policy["strategies"] = json!(["DirectBmc"]);
            }
            Scenario::Redfish => plan.policy["strategies"] = json!(["DirectBmc"]),
            Scenario::OutOfService => plan.policy["nodeRelease"] = json!("OutOfService"),
            Scenario::ControlPlane => {
                plan.targets = vec![("master-0", Expect::Ends(RemediationPhase::Succeeded))];
            }
            Scenario::Capi => {
                // A management cluster and one workload cluster, whose Nodes are its own.
                plan.spec.cluster_api = true;
                plan.spec.workload_clusters = 1;
                plan.spec.masters = 1;
                plan.targets = vec![("wc-0-worker-0", Expect::Ends(RemediationPhase::Succeeded))];
            }
            Scenario::CapiFleet => {
                plan.spec.cluster_api = true;
                plan.spec.workload_clusters = 3;
                plan.spec.masters = 1;
                plan.spec.workers = 4;
                // The health checks report every unhealthy Machine: baremend's gates decide.
                plan.spec.max_unhealthy = "100%".into();
                // wc-2's three hung Nodes go NotReady up to a heartbeat apart: all counted
                // before any request.
                plan.spec.timing.unhealthy_timeout = Duration::from_secs(3);
                let done = Expect::Ends(RemediationPhase::Succeeded);
                plan.targets = vec![
                    ("wc-0-worker-1", done),
                    ("wc-1-worker-1", done),
                    ("wc-2-worker-1", Expect::Held("Storm")),
                    ("wc-2-worker-2", Expect::Held("Storm")),
                    ("wc-2-worker-3", Expect::Held("Storm")),
                ];
            }
            Scenario::Nhc => plan.spec.node_health_check = true,
            Scenario::NhcUpi => {
                plan.spec.node_health_check = true;
                plan.spec.platform_none = true;
            }
            Scenario::StuckBmc => {
                plan.targets = vec![("worker-0", Expect::Ends(RemediationPhase::Failed))];
                plan.policy["timeouts"]["powerOffSeconds"] = json!(5);
                plan.policy["strategies"] = json!(["BareMetalHostRebootApi"]);
            }
            Scenario::Storm => {
                plan.targets = vec![
                    ("worker-0", Expect::Ends(RemediationPhase::Succeeded)),
                    ("worker-1", Expect::Ends(RemediationPhase::Succeeded)),
                    ("worker-2", Expect::Ends(RemediationPhase::Cancelled)),
                ];
                // The MachineHealthCheck's own guard would hide the storm: let it report all.
                plan.spec.max_unhealthy = "100%".into();
                // Three hung workers' Nodes go NotReady up to a heartbeat apart: the health
                // check waits long enough after the first that the third is NotReady (and
                // counted by the storm gate) before any trigger is set.
                plan.spec.timing.unhealthy_timeout = Duration::from_secs(3);
            }
            Scenario::Bmh
            | Scenario::PowerDemo
            | Scenario::Scale
            | Scenario::Chaos
            | Scenario::Drift => {}
        }
        plan
    }
}

/// The storm scenario's operator.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Operator {
    /// Waiting until every start is held.
    Waiting,
    /// Fixed one host; waiting for its Node.
    Fixed,
    /// Took its trigger away.
    Done,
}

/// What the story watches of one host, as last printed.
#[derive(Default, PartialEq, Eq, Clone)]
struct Seen {
    node: String,
    triggered: Option<Asked>,
    phase: String,
    held: Option<String>,
    power: String,
}

/// How the story names host `target`'s Node: by its name, with its workload cluster's.
fn node_name(lab: &LabCluster, target: &str) -> String {
    match lab.cluster.host(target) {
        Some(host) => match &host.cluster {
            Some(cluster) => format!("{} of {cluster}", host.node_name),
            None => host.node_name.clone(),
        },
        None => target.to_string(),
    }
}

/// The Node of host `target`, as `Ready=…` (with ` out-of-service`) or `absent`: read in the
/// API server that holds it (its workload cluster's, on a Cluster API fleet).
fn node_state(lab: &LabCluster, target: &str) -> String {
    let (api, name) = match lab.cluster.host(target) {
        Some(host) => match host
            .cluster
            .as_deref()
            .and_then(|c| lab.cluster.workload_cluster(c))
        {
            Some(workload) => (
                Local::new(workload.api_server().store().clone(), "lab"),
                host.node_name.clone(),
            ),
            None => (lab.api.clone(), host.node_name.clone()),
        },
        None => (lab.api.clone(), target.to_string()),
    };
    match api.get(NODES, "", &name) {
        Err(_) => "absent".into(),
        Ok(node) => {
            let ready = node
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .and_then(|c| c["status"].as_str())
                .unwrap_or("?");
            let tainted = node
                .pointer("/spec/taints")
                .and_then(Value::as_array)
                .is_some_and(|t| {
                    t.iter()
                        .any(|t| t["key"] == "node.kubernetes.io/out-of-service")
                });
            format!(
                "Ready={ready}{}",
                if tainted { " out-of-service" } else { "" }
            )
        }
    }
}

/// How a health check asks for a Machine's remediation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Asked {
    /// OpenShift's annotation on the Machine.
    Annotation,
    /// A `MachineRemediation` named after the Machine.
    Request,
    /// A `NodeRemediation` named after the Machine's Node.
    NodeRequest,
}

impl Asked {
    fn what(self) -> &'static str {
        match self {
            Asked::Annotation => "external-remediation annotation",
            Asked::Request => "MachineRemediation request",
            Asked::NodeRequest => "NodeRemediation request",
        }
    }

    fn asker(self) -> &'static str {
        match self {
            Asked::NodeRequest => "NodeHealthCheck",
            Asked::Annotation | Asked::Request => "MachineHealthCheck",
        }
    }

    /// What the request is named after and about.
    fn about(self) -> &'static str {
        match self {
            Asked::NodeRequest => "Node",
            Asked::Annotation | Asked::Request => "Machine",
        }
    }

    fn made(self) -> &'static str {
        match self {
            Asked::Annotation => "set",
            Asked::Request | Asked::NodeRequest => "created",
        }
    }
}

/// How the health check asks for the Machine's remediation now, if it does.
fn triggered(api: &Local, machine: &str) -> Option<Asked> {
    let annotated = api
        .get(MACHINES, MACHINE_NAMESPACE, machine)
        .is_ok_and(|m| {
            m.pointer("/metadata/annotations")
                .and_then(|a| a.get(EXTERNAL_REMEDIATION))
                .is_some()
        });
    if annotated {
        return Some(Asked::Annotation);
    }
    if api
        .get(MACHINE_REMEDIATIONS, MACHINE_NAMESPACE, machine)
        .is_ok()
    {
        return Some(Asked::Request);
    }
    // Machine and Node names are equal in the simulated cluster.
    api.get(NODE_REMEDIATIONS, NHC_NAMESPACE, machine)
        .is_ok()
        .then_some(Asked::NodeRequest)
}

/// Whether a target's story has come to an end: its remediation ended, or (held, as
/// expected) is held by that gate.
fn settled(expected: Expect, status: Option<&RemediationStatus>) -> bool {
    match (expected, status) {
        (Expect::Ends(_), Some(status)) => status.phase.is_terminal(),
        (Expect::Held(gate), Some(status)) => held_by(status, gate),
        (_, None) => false,
    }
}

/// Whether a target's remediation came to what the plan expects of it.
fn as_expected(expected: Expect, status: Option<&RemediationStatus>) -> bool {
    match (expected, status) {
        (Expect::Ends(phase), Some(status)) => status.phase == phase,
        (Expect::Held(gate), Some(status)) => held_by(status, gate),
        (_, None) => false,
    }
}

/// Pending, and held by `gate` (the `Held` condition's reason).
fn held_by(status: &RemediationStatus, gate: &str) -> bool {
    status.phase == RemediationPhase::Pending
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == "Held" && c.status == "True" && c.reason == gate)
}

fn held_message(status: &RemediationStatus) -> Option<String> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Held" && c.status == "True")
        .map(|c| c.message.clone())
}

/// Prints what changed for one host since the last look.
fn print_changes(at: &str, (target, node): (&str, &str), name: &str, was: &Seen, now: &Seen) {
    // Within one look, power first: it is what the other changes follow from.
    if now.power != was.power {
        println!("{at:>7}  host {target}: power {}", now.power);
    }
    if now.node != was.node {
        println!("{at:>7}  Node {node}: {}", now.node);
    }
    if now.triggered != was.triggered {
        match (now.triggered, was.triggered) {
            (Some(how), _) => println!(
                "{at:>7}  {} {target}: {} {} by the {}",
                how.about(),
                how.what(),
                how.made(),
                how.asker()
            ),
            (None, Some(how)) => {
                println!("{at:>7}  {} {target}: {} removed", how.about(), how.what())
            }
            (None, None) => {}
        }
    }
    if now.phase != was.phase {
        println!("{at:>7}  Remediation {name}: {}", now.phase);
    }
    if now.held != was.held
        && let Some(message) = &now.held
    {
        println!("{at:>7}  Remediation {name}: held: {message}");
    }
}

fn print_timing(name: &str, status: &RemediationStatus, base: Duration) {
    println!("\n{name}:\n");
    println!("| step | at (since hang) | took |");
    println!("|---|---|---|");
    let mut previous = Duration::ZERO;
    for step in &status.steps {
        let at = parse_rfc3339(&step.time).saturating_sub(base);
        println!(
            "| {} | {:.2} s | {:.2} s |",
            step.step,
            at.as_secs_f64(),
            at.saturating_sub(previous).as_secs_f64()
        );
        previous = at;
    }
    if let Some(error) = &status.last_error {
        println!("\nlast error: {error}");
    }
}

/// Runs one scenario; Ok when every remediation ended as the scenario expects and no Node
/// was released while its host was on.
pub async fn run(scenario: Scenario, timeout: Duration, serving: Serving) -> Result<()> {
    let plan = Plan::of(scenario);
    match plan.spec.workload_clusters {
        0 => println!(
            "starting the simulated cluster: {} control-plane hosts, {} workers ...",
            plan.spec.masters, plan.spec.workers
        ),
        clusters => println!(
            "starting the simulated Cluster API management cluster and {clusters} workload cluster(s) of {} control-plane host(s) and {} workers each ...",
            plan.spec.masters, plan.spec.workers
        ),
    }
    let started = Instant::now();
    let lab = LabCluster::start(plan.spec.clone()).await?;
    println!(
        "  all Nodes Ready after {:.1} s; API server {}",
        started.elapsed().as_secs_f64(),
        lab.cluster.api_server().url()
    );
    let api = &lab.api;
    if plan.spec.cluster_api {
        lab.empty_template(MACHINE_REMEDIATION_TEMPLATES, MACHINE_NAMESPACE)?;
    }
    for (target, _) in &plan.targets {
        prepare(scenario, &lab, target)?;
    }
    if matches!(scenario, Scenario::Redfish | Scenario::Ipmi) {
        detach_the_others(&lab, &plan)?;
    }
    lab.install_policy(plan.policy.clone()).await?;
    let metrics = Arc::new(Metrics::new());
    let metrics_at = serving.serve(metrics.clone()).await?;
    let machine_api = if plan.spec.cluster_api {
        MachineApi::ClusterApi
    } else {
        MachineApi::OpenShift
    };
    let controller = lab.start_controller(metrics.clone(), Duration::from_millis(250), machine_api);
    println!(
        "controller running (kube client over HTTPS), metrics at http://{metrics_at}/metrics\n"
    );

    let hung_at = SystemTime::now();
    let t0 = Instant::now();
    for (target, _) in &plan.targets {
        lab.cluster.hang(target);
        println!("{:>7}  {target}: kernel hang injected", "0.00 s");
    }
    let remediations: Api<Remediation> = Api::namespaced(lab.client.clone(), MACHINE_NAMESPACE);
    let mut seen: BTreeMap<&str, Seen> = BTreeMap::new();
    let mut released_while_on: Option<&str> = None;
    let mut lab_triggered = false;
    let mut all_held_since: Option<Instant> = None;
    let mut operator = Operator::Waiting;
    let mut last: BTreeMap<&str, Option<RemediationStatus>> = BTreeMap::new();
    loop {
        let mut ended = 0;
        let mut held = 0;
        for (target, expected) in &plan.targets {
            let name = format!("{target}-1");
            let status = remediations
                .get_present(&name)
                .await
                .map_err(Error::kube("GetRemediation"))?
                .and_then(|r| r.status);
            let power = lab
                .cluster
                .host(target)
                .map(|h| format!("{:?}", h.host.observe()))
                .unwrap_or_default();
            let now = Seen {
                node: node_state(&lab, target),
                triggered: triggered(api, target),
                phase: status
                    .as_ref()
                    .map(|s| format!("{:?}", s.phase))
                    .unwrap_or_else(|| "-".into()),
                held: status.as_ref().and_then(held_message),
                power,
            };
            // The simulated MachineHealthCheck covers workers only, as OpenShift's default
            // one does; for a control-plane host the lab stands in for a control-plane check.
            if scenario == Scenario::ControlPlane
                && now.node == "Ready=Unknown"
                && now.triggered.is_none()
                && !lab_triggered
            {
                lab_triggered = true;
                let _ = lab.set_trigger(target, true);
            }
            let was = seen.entry(target).or_insert_with(|| Seen {
                phase: "-".into(),
                ..Seen::default()
            });
            let released = now.node == "absent" || now.node.contains("out-of-service");
            let was_released = was.node == "absent" || was.node.contains("out-of-service");
            if released
                && !was_released
                && lab
                    .cluster
                    .host(target)
                    .is_some_and(|h| h.host.observe() == ObservedPower::On)
            {
                released_while_on = Some(target);
            }
            if now != *was {
                let at = format!("{:.2} s", t0.elapsed().as_secs_f64());
                print_changes(&at, (target, &node_name(&lab, target)), &name, was, &now);
                *was = now;
            }
            ended += usize::from(settled(*expected, status.as_ref()));
            held += usize::from(status.as_ref().and_then(held_message).is_some());
            last.insert(target, status);
        }
        // The storm: once every start is held, an operator fixes one host by hand, and when
        // its Node is Ready again takes its trigger away (earlier, the health check would
        // put it back); the share of unhealthy machines drops under the gate's.
        if scenario == Scenario::Storm {
            let at = format!("{:.2} s", t0.elapsed().as_secs_f64());
            match operator {
                Operator::Waiting if held == plan.targets.len() => {
                    let since = *all_held_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= Duration::from_secs(3) {
                        lab.cluster.recover("worker-2");
                        println!("{at:>7}  operator: worker-2 fixed by hand");
                        operator = Operator::Fixed;
                    }
                }
                Operator::Waiting => all_held_since = None,
                Operator::Fixed if node_state(&lab, "worker-2") == "Ready=True" => {
                    let _ = lab.set_trigger("worker-2", false);
                    println!("{at:>7}  operator: worker-2 is Ready, its trigger removed");
                    operator = Operator::Done;
                }
                Operator::Fixed | Operator::Done => {}
            }
        }
        if ended == plan.targets.len() || t0.elapsed() > timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let story_took = t0.elapsed();
    serving.linger(metrics_at).await;
    controller.stop().await;

    let base = since_epoch(hung_at);
    for (target, status) in &last {
        if let Some(status) = status.as_ref().filter(|s| !s.steps.is_empty()) {
            print_timing(&format!("{target}-1"), status, base);
        }
    }
    println!("\nremediation metrics:");
    // Every strategy and reason has its series from the start: those at zero are left out.
    let nonzero = |l: &str| {
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| v != 0.0)
    };
    for line in metrics.encode().lines().filter(|l| {
        (l.starts_with("baremend_remediations_")
            || (l.starts_with("baremend_remediation_") && l.contains("duration_seconds_sum")))
            && nonzero(l)
    }) {
        println!("  {line}");
    }
    if let Some(target) = released_while_on {
        return Err(Error::Invalid {
            object: format!("Node {target}"),
            reason: "released while its host was on".into(),
        });
    }
    let mut wrong = Vec::new();
    for (target, expected) in &plan.targets {
        let status = last.get(target).and_then(|s| s.as_ref());
        if !as_expected(*expected, status) {
            let phase = status.map(|s| s.phase).unwrap_or_default();
            let held = status.and_then(held_message).unwrap_or_default();
            wrong.push(format!(
                "{target}-1 is {phase:?} ({held}), expected {expected:?}"
            ));
        }
        if let Expect::Held(_) = expected
            && lab
                .cluster
                .host(target)
                .is_some_and(|h| !h.host.history().is_empty())
        {
            wrong.push(format!(
                "{target}'s power changed although its start was held"
            ));
        }
        let node = seen.get(target).map(|s| s.node.as_str()).unwrap_or("");
        if *expected == Expect::Ends(RemediationPhase::Failed) && node == "absent" {
            wrong.push(format!(
                "Node {target} deleted although the host was never proven off"
            ));
        }
    }
    if !wrong.is_empty() {
        return Err(Error::Invalid {
            object: "the lab".into(),
            reason: wrong.join("; "),
        });
    }
    let summary: Vec<String> = plan
        .targets
        .iter()
        .map(|(target, expected)| match expected {
            Expect::Ends(phase) => format!("{target}-1 {phase:?}"),
            Expect::Held(gate) => format!("{target}-1 held ({gate})"),
        })
        .collect();
    println!(
        "\nremediation {}: after {:.1} s (as expected for this scenario)",
        summary.join(", "),
        story_took.as_secs_f64()
    );
    Ok(())
}

/// Under a policy that fences only through the BMC, a host its BareMetal Operator manages
/// cannot be fenced (the operator would power it back on): the fencing readiness check would
/// rightly call it not ready. The lab's other hosts are let go of too, so that every host is
/// fenceable as the policy says.
fn detach_the_others(lab: &LabCluster, plan: &Plan) -> Result<()> {
    let hosts = lab.api.list(BMHS, Some(MACHINE_NAMESPACE));
    let mut others: Vec<&str> = hosts
        .iter()
        .filter_map(|h| h.pointer("/metadata/name").and_then(Value::as_str))
        .filter(|name| plan.targets.iter().all(|(target, _)| target != name))
        .collect();
    others.sort_unstable();
    for host in &others {
        lab.detach(host)?;
    }
    println!(
        "  the other BareMetalHosts detached too ({}): the policy fences every host through its BMC",
        others.join(", ")
    );
    Ok(())
}

/// Prepares one target host for the scenario.
fn prepare(scenario: Scenario, lab: &LabCluster, target: &str) -> Result<()> {
    match scenario {
        Scenario::Redfish | Scenario::Ipmi => {
            // The BareMetal Operator must let go of the host, or it would power it back on.
            lab.detach(target)?;
            println!("  BareMetalHost {target} detached; policy: fence directly through the BMC");
        }
        Scenario::OutOfService => {
            println!("  policy: taint the Node out-of-service instead of deleting it");
        }
        Scenario::StuckBmc => {
            if let Some(host) = lab.cluster.host(target) {
                let mut faults = host.host.faults();
                faults.stuck_power = true;
                host.host.set_faults(faults);
            }
            println!("  {target}'s BMC accepts power-off and never does it");
        }
        Scenario::Storm => {
            println!("  {target} will hang with the others: half the workers at once");
        }
        Scenario::Nhc | Scenario::NhcUpi => {
            lab.empty_template(NODE_REMEDIATION_TEMPLATES, NHC_NAMESPACE)?;
            println!(
                "  medik8s NodeHealthCheck: escalating remediations, baremend's NodeRemediationTemplate first (60 s), then MachineDeletionRemediation"
            );
            if scenario == Scenario::NhcUpi {
                println!(
                    "  platform none: no Machines, no BareMetalHosts; HostBmc {target} names the Node and its Redfish BMC"
                );
            }
        }
        Scenario::Capi | Scenario::CapiFleet => {
            let host = lab.cluster.host(target);
            let cluster = host.and_then(|h| h.cluster.clone()).unwrap_or_default();
            let node = host.map(|h| h.node_name.clone()).unwrap_or_default();
            println!(
                "  Cluster API: {target} is a cluster.x-k8s.io Machine of Cluster {cluster} with a Metal3Machine; its Node {node} lives in {cluster}'s own API server, reached through Secret {cluster}-kubeconfig; its MachineHealthCheck names baremend's MachineRemediationTemplate"
            );
        }
        _ => {}
    }
    Ok(())
}
