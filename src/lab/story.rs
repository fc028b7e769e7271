//! The remediation story on the simulated cluster.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use baremend_sim::cluster::local::{BMHS, Local, MACHINES, NODES};
use baremend_sim::cluster::timing::Timing;
use baremend_sim::cluster::{ClusterSpec, MACHINE_NAMESPACE, SimCluster};
use baremend_sim::host::ObservedPower;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

use super::Scenario;
use crate::api::annotations::{BMH_DETACHED, EXTERNAL_REMEDIATION};
use crate::api::{Remediation, RemediationPhase, RemediationPolicy, all_crds};
use crate::remediation::controller::{ControllerOptions, run as run_controller};
use crate::remediation::state::{SystemClock, parse_rfc3339, since_epoch};
use crate::{Error, Result};

/// What the story watches, as last printed.
#[derive(Default, PartialEq, Eq, Clone)]
struct Seen {
    node: String,
    triggered: bool,
    phase: String,
    power: String,
}

fn node_state(api: &Local, name: &str) -> String {
    match api.get(NODES, "", name) {
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

/// Runs one scenario; Ok when the remediation ended as the scenario expects.
pub async fn run(scenario: Scenario, timeout: Duration) -> Result<()> {
    let target = if scenario == Scenario::ControlPlane {
        "master-0"
    } else {
        "worker-0"
    };
    let spec = ClusterSpec {
        ipmi: scenario == Scenario::Ipmi,
        bmh_uses_ipmi: scenario == Scenario::Ipmi,
        timing: Timing::default(),
        ..ClusterSpec::default()
    };
    println!(
        "starting the simulated cluster: {} control-plane hosts, {} workers ...",
        spec.masters, spec.workers
    );
    let started = Instant::now();
    let cluster = SimCluster::start(spec).await?;
    println!(
        "  all Nodes Ready after {:.1} s; API server {}",
        started.elapsed().as_secs_f64(),
        cluster.api_server().url()
    );

    let kubeconfig = Kubeconfig::from_yaml(&cluster.kubeconfig()).map_err(|e| Error::Invalid {
        object: "the simulated cluster's kubeconfig".into(),
        reason: e.to_string(),
    })?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Invalid {
            object: "the simulated cluster's kubeconfig".into(),
            reason: e.to_string(),
        })?;
    config.default_retry = false;
    let client = Client::try_from(config).map_err(Error::kube("Connect"))?;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in all_crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .map_err(Error::kube("CreateCrd"))?;
    }
    let mut policy = json!({
        "timeouts": {"powerOffSeconds": 15, "nodeReadySeconds": 60, "readyGraceSeconds": 2},
    });
    let api = Local::new(cluster.api_server().store().clone(), "lab");
    match scenario {
        Scenario::Redfish | Scenario::Ipmi => {
            // The BareMetal Operator must let go of the host, or it would power it back on.
            api.merge(
                BMHS,
                MACHINE_NAMESPACE,
                target,
                &json!({"metadata": {"annotations": {BMH_DETACHED: ""}}}),
                false,
            )
            .map_err(|e| Error::Invalid {
                object: format!("BareMetalHost {target}"),
                reason: e.message,
            })?;
            policy["strategies"] = json!(["DirectBmc"]);
            println!("  BareMetalHost {target} detached; policy: fence directly through the BMC");
        }
        Scenario::OutOfService => {
            policy["nodeRelease"] = json!("OutOfService");
            println!("  policy: taint the Node out-of-service instead of deleting it");
        }
        Scenario::StuckBmc => {
            policy["timeouts"]["powerOffSeconds"] = json!(5);
            policy["strategies"] = json!(["BareMetalHostRebootApi"]);
            if let Some(host) = cluster.host(target) {
                let mut faults = host.host.faults();
                faults.stuck_power = true;
                host.host.set_faults(faults);
            }
            println!("  {target}'s BMC accepts power-off and never does it");
        }
        _ => {}
    }
    let policies: Api<RemediationPolicy> = Api::all(client.clone());
    let policy: RemediationPolicy = serde_json::from_value(
        json!({"metadata": {"name": "default"}, "spec": policy}),
    )
    .map_err(|e| Error::Invalid {
        object: "lab policy".into(),
        reason: e.to_string(),
    })?;
    policies
        .create(&PostParams::default(), &policy)
        .await
        .map_err(Error::kube("CreatePolicy"))?;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(run_controller(
        client.clone(),
        Arc::new(SystemClock),
        ControllerOptions {
            instance: "lab".into(),
            poll: Duration::from_millis(250),
            crash_after_step: None,
        },
        async move {
            let _ = stopped.await;
        },
    ));
    println!("controller running (kube client over HTTPS)\n");

    let hung_at = SystemTime::now();
    let t0 = Instant::now();
    cluster.hang(target);
    println!("{:>7}  {target}: kernel hang injected", "0.00 s");
    let remediations: Api<Remediation> = Api::namespaced(client.clone(), MACHINE_NAMESPACE);
    let name = format!("{target}-1");
    let mut seen = Seen::default();
    let mut node_deleted_while_on = false;
    let mut lab_triggered = false;
    let outcome = loop {
        let remediation = remediations
            .get_opt(&name)
            .await
            .map_err(Error::kube("GetRemediation"))?;
        let phase = remediation
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .map(|s| format!("{:?}", s.phase))
            .unwrap_or_else(|| "-".into());
        let power = cluster
            .host(target)
            .map(|h| format!("{:?}", h.host.observe()))
            .unwrap_or_default();
        let now = Seen {
            node: node_state(&api, target),
            triggered: api.get(MACHINES, MACHINE_NAMESPACE, target).is_ok_and(|m| {
                m.pointer("/metadata/annotations")
                    .and_then(|a| a.get(EXTERNAL_REMEDIATION))
                    .is_some()
            }),
            phase,
            power,
        };
        // The simulated MachineHealthCheck covers workers only, as OpenShift's default one
        // does; for a control-plane host the lab stands in for a control-plane health check.
        if scenario == Scenario::ControlPlane
            && now.node == "Ready=Unknown"
            && !now.triggered
            && !lab_triggered
        {
            lab_triggered = true;
            let _ = api.merge(
                MACHINES,
                MACHINE_NAMESPACE,
                target,
                &json!({"metadata": {"annotations": {EXTERNAL_REMEDIATION: ""}}}),
                false,
            );
        }
        if now.node == "absent"
            && cluster
                .host(target)
                .is_some_and(|h| h.host.observe() == ObservedPower::On)
            && seen.node != "absent"
        {
            node_deleted_while_on = true;
        }
        if now != seen {
            let at = format!("{:.2} s", t0.elapsed().as_secs_f64());
            // Within one look, power first: it is what the other changes follow from.
            if now.power != seen.power {
                println!("{at:>7}  host {target}: power {}", now.power);
            }
            if now.node != seen.node {
                println!("{at:>7}  Node {target}: {}", now.node);
            }
            if now.triggered != seen.triggered {
                println!(
                    "{at:>7}  Machine {target}: external-remediation annotation {}",
                    if now.triggered {
                        "set by the MachineHealthCheck"
                    } else {
                        "removed"
                    }
                );
            }
            if now.phase != seen.phase {
                println!("{at:>7}  Remediation {name}: {}", now.phase);
            }
            seen = now;
        }
        let ended = remediation
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .map(|s| s.phase)
            .filter(|p| p.is_terminal());
        if let Some(phase) = ended {
            break (phase, remediation);
        }
        if t0.elapsed() > timeout {
            break (RemediationPhase::Pending, remediation);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = stop.send(());
    let _ = controller.await;

    let (phase, remediation) = outcome;
    println!();
    if let Some(status) = remediation.and_then(|r| r.status) {
        println!("| step | at (since hang) | took |");
        println!("|---|---|---|");
        let base = since_epoch(hung_at);
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
    let expected = if scenario == Scenario::StuckBmc {
        RemediationPhase::Failed
    } else {
        RemediationPhase::Succeeded
    };
    if node_deleted_while_on {
        return Err(Error::Invalid {
            object: format!("Node {target}"),
            reason: "deleted while its host was on".into(),
        });
    }
    if scenario == Scenario::StuckBmc && seen.node == "absent" {
        return Err(Error::Invalid {
            object: format!("Node {target}"),
            reason: "deleted although the host was never proven off".into(),
        });
    }
    if phase == expected {
        println!(
            "\nremediation {name}: {phase:?} after {:.1} s (as expected for this scenario)",
            t0.elapsed().as_secs_f64()
        );
        Ok(())
    } else {
        Err(Error::Invalid {
            object: format!("Remediation {name}"),
            reason: format!("ended {phase:?}, expected {expected:?}"),
        })
    }
}
