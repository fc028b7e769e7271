//! The uninstall of docs/guides/operate.md, end to end, as an admin runs it with the real kubectl: on
//! a cluster where `deploy/overlays/openshift` is installed, a remediation has succeeded and a
//! config-drift repair is in flight (the MCO rebooting the node), every documented step in its
//! order, then a sweep of every object of every listable kind: nothing of baremend is left on
//! any of them — no object of ours, no annotation, label, finalizer, taint, owner or cordon, no
//! reboot request on a host.

use std::time::Duration;

use baremend::api::annotations::{
    EXTERNAL_REMEDIATION, OUT_OF_SERVICE_TAINT, POWERED_OFF_FOR_REMEDIATION, REBOOT_PREFIX,
};
use baremend::api::{DriftPhase, RemediationPhase};
use serde_json::{Value, json};

use baremend_testkit as common;
use common::drift::DriftLab;

use common::kubectl::{Kubectl, MONITORING_CRDS};
use common::{drift, eventually, scratch};

/// What an object still carries of baremend, one line each (empty: nothing).
///
/// Events are left out: the API server removes them after its event TTL (one hour by
/// default), and docs/guides/operate.md says so. So are `managedFields`, the record of who wrote a
/// field once, which is history rather than state.
fn leftovers(object: &Value) -> Vec<String> {
    let kind = object["kind"].as_str().unwrap_or_default();
    let metadata = &object["metadata"];
    let name = format!(
        "{kind} {}/{}",
        metadata["namespace"].as_str().unwrap_or_default(),
        metadata["name"].as_str().unwrap_or_default()
    );
    let ours = |text: &str| text.contains("baremend");
    let mut found = Vec::new();
    if object["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("baremend.io/"))
    {
        found.push(format!("{name}: an object of baremend's API group"));
    }
    if metadata["name"].as_str().is_some_and(ours) {
        found.push(format!("{name}: named after baremend"));
    }
    for field in ["labels", "annotations"] {
        for (key, value) in metadata[field].as_object().into_iter().flatten() {
            let value = value.as_str().unwrap_or_default();
            if ours(key)
                || ours(value)
                || key.starts_with(REBOOT_PREFIX)
                || key == POWERED_OFF_FOR_REMEDIATION
                || key == EXTERNAL_REMEDIATION
            {
                found.push(format!("{name}: {field} {key}={value}"));
            }
        }
    }
    for finalizer in metadata["finalizers"].as_array().into_iter().flatten() {
        if finalizer.as_str().is_some_and(ours) {
            found.push(format!("{name}: finalizer {finalizer}"));
        }
    }
    for owner in metadata["ownerReferences"].as_array().into_iter().flatten() {
        if owner["apiVersion"].as_str().is_some_and(ours) {
            found.push(format!("{name}: owned by {owner}"));
        }
    }
    if kind == "Node" {
        if object["spec"]["unschedulable"] == true {
            found.push(format!("{name}: left cordoned"));
        }
        for taint in object["spec"]["taints"].as_array().into_iter().flatten() {
            let key = taint["key"].as_str().unwrap_or_default();
            if ours(key) || key == OUT_OF_SERVICE_TAINT {
                found.push(format!("{name}: taint {key}"));
            }
        }
    }
    found
}

/// Every phase of our two kinds, as `kubectl get` prints them (`kind/name phase` a line).
async fn phases(kubectl: &Kubectl) -> Vec<String> {
    let template =
        r#"jsonpath={range .items[*]}{.kind}/{.metadata.name} {.status.phase}{"\n"}{end}"#;
    kubectl
        .ok(&["get", "brem,bdrift", "-A", "-o", template], None)
        .await
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether a `kind/name phase` line is of something no longer under way.
fn ended(line: &str) -> bool {
    let phase = line.rsplit(' ').next().unwrap_or_default();
    let remediation = serde_json::from_value::<RemediationPhase>(json!(phase));
    let drift = serde_json::from_value::<DriftPhase>(json!(phase));
    if line.starts_with("DriftRemediation/") {
        drift.is_ok_and(DriftPhase::is_terminal)
    } else {
        remediation.is_ok_and(RemediationPhase::is_terminal)
    }
}

/// The sweep: every object of every listable kind (Events apart), in every namespace, must
/// carry nothing of baremend; the sweep must have seen each of `expected` kinds (so that it
/// can fail). Returns how many objects and kinds it read.
async fn sweep(kubectl: &Kubectl, expected: &[&str]) -> (usize, usize) {
    let kinds = kubectl
        .ok(&["api-resources", "--verbs=list", "-o", "name"], None)
        .await;
    let kinds: Vec<&str> = kinds
        .lines()
        .filter(|k| !k.is_empty() && *k != "events" && *k != "events.events.k8s.io")
        .collect();
    let all = kubectl
        .ok(&["get", &kinds.join(","), "-A", "-o", "json"], None)
        .await;
    let all: Value = serde_json::from_str(&all).unwrap();
    let items = all["items"].as_array().unwrap();
    for kind in expected {
        assert!(
            items.iter().any(|o| o["kind"] == *kind),
            "the sweep saw no {kind}"
        );
    }
    let left: Vec<String> = items.iter().flat_map(leftovers).collect();
    assert!(
        left.is_empty(),
        "left after the uninstall:\n{}",
        left.join("\n")
    );
    (items.len(), kinds.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstall_as_documented_leaves_nothing_of_baremend_on_any_object() {
    // The whole controller (machines and drift) under deploy/'s ServiceAccount, on a cluster
    // whose own MachineHealthCheck `workers` hands workers to baremend.
    let mut lab = drift::whole(json!({"debounceSeconds": 1})).await;
    let dir = scratch("uninstall");
    let kubectl = Kubectl::new(&dir, &lab.cluster.kubeconfig());
    let overlay = common::repo_root().join("deploy/overlays/openshift");
    let overlay = overlay.to_str().unwrap();
    let crds = common::repo_root().join("crds");
    let crds = crds.to_str().unwrap();
    // Installed as the quick start says (the cluster has the Prometheus Operator's kinds).
    kubectl
        .ok(&["apply", "-f", "-"], Some(MONITORING_CRDS))
        .await;
    kubectl.ok(&["apply", "-f", crds], None).await;
    kubectl.ok(&["apply", "-k", overlay], None).await;

    // A remediation that succeeded, and a drift repair under way: the MCO has the node.
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", RemediationPhase::Succeeded).await;
    lab.drift("worker-1");
    lab.reach("worker-1-1", DriftPhase::Applying).await;

    // 1. Stop new remediations, of both kinds.
    let pause = r#"{"spec":{"paused":true}}"#;
    let observe = r#"{"spec":{"mode":"Observe"}}"#;
    for (kind, patch) in [("remediationpolicy", pause), ("driftpolicy", observe)] {
        let args = ["patch", kind, "default", "--type", "merge", "-p", patch];
        kubectl.ok(&args, None).await;
    }
    // 2. Wait until nothing is under way: the drift repair finishes (a paused policy lets
    // one that acts finish), and the health check's request for the rebooting node ends.
    let last = eventually(
        "nothing of baremend under way",
        Duration::from_secs(90),
        async || {
            let lines = phases(&kubectl).await;
            if lines.iter().all(|l| ended(l)) {
                Ok(lines)
            } else {
                Err(lines.join("\n"))
            }
        },
    )
    .await;
    assert!(
        last.iter()
            .any(|l| l.starts_with("DriftRemediation/worker-1-1 ")),
        "{last:?}"
    );
    // 3. No host carries a reboot request.
    let annotations = kubectl
        .ok(
            &[
                "get",
                "bmh",
                "-A",
                "-o",
                r#"jsonpath={range .items[*]}{.metadata.name} {.metadata.annotations}{"\n"}{end}"#,
            ],
            None,
        )
        .await;
    assert!(!annotations.contains(REBOOT_PREFIX), "{annotations}");
    // 4. Health checks of one's own that name baremend go first (without the strategy, an
    // OpenShift MachineHealthCheck deletes unhealthy Machines itself); then the controller
    // (the in-process controller stops as its Deployment's pods would), then the CRDs.
    kubectl
        .ok(
            &["-n", "openshift-machine-api", "delete", "mhc", "workers"],
            None,
        )
        .await;
    lab.stop().await;
    kubectl
        .ok(
            &["delete", "-k", overlay, "--ignore-not-found", "--wait=true"],
            None,
        )
        .await;
    kubectl
        .ok(&["delete", "-f", crds, "--wait=true"], None)
        .await;
    eventually(
        "the namespace baremend gone",
        Duration::from_secs(30),
        async || {
            let (found, _, _) = kubectl.run(&["get", "namespace", "baremend"], None).await;
            !found
        },
    )
    .await;

    // The sweep: every listable kind, every namespace.
    let (items, kinds) = sweep(
        &kubectl,
        &[
            "Node",
            "Machine",
            "BareMetalHost",
            "MachineConfigPool",
            "Secret",
        ],
    )
    .await;
    // The guide's own check says the same.
    let guide =
        std::fs::read_to_string(common::repo_root().join("docs/guides/operate.md")).unwrap();
    let check = guide
        .split("To check for yourself:\n\n```bash\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the uninstall check in docs/guides/operate.md")
        .replace("\\\n", " ");
    let check = check.split('#').next().unwrap();
    let count = |check: &str| {
        let output = std::process::Command::new("sh")
            .args(["-c", check])
            .env("KUBECONFIG", kubectl.kubeconfig())
            .env("HOME", &dir)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        text.parse::<usize>()
            .unwrap_or_else(|_| panic!("{check}: {output:?}"))
    };
    assert_eq!(count(check), 0, "{check}");
    // And it reads the cluster: the same pipeline counts the objects it saw.
    let kinds_seen = count(&check.replace("grep -c baremend", "grep -c '\"kind\"'"));
    assert!(kinds_seen > items, "{kinds_seen} lines of kind");
    println!("uninstall: {items} objects of {kinds} kinds swept, nothing of baremend left");
}

#[test]
fn the_sweep_sees_each_kind_of_leftover() {
    // The sweep itself must be able to fail: one object with each kind of mark.
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-0",
            "annotations": {"baremend.io/planned-reboot": "x", POWERED_OFF_FOR_REMEDIATION: ""},
            "labels": {"app": "baremend"},
            "finalizers": ["baremend.io/x"],
            "ownerReferences": [{"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation"}]},
        "spec": {"unschedulable": true, "taints": [{"key": OUT_OF_SERVICE_TAINT}]},
    });
    assert_eq!(leftovers(&node).len(), 7, "{:?}", leftovers(&node));
    let host = json!({"apiVersion": "metal3.io/v1alpha1", "kind": "BareMetalHost",
        "metadata": {"name": "worker-0", "annotations": {"reboot.metal3.io/other": "{}"}}});
    assert_eq!(leftovers(&host).len(), 1);
    let ours = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
        "metadata": {"name": "baremend-x"}});
    assert_eq!(leftovers(&ours).len(), 2);
    let clean = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker-0", "labels": {"node-role.kubernetes.io/worker": ""}},
        "spec": {}});
    assert!(leftovers(&clean).is_empty());
}

/// The same uninstall on a real kube-apiserver (the real namespace and garbage collectors):
/// deploy/ installed as the install guide says, `baremend run` as its ServiceAccount until it
/// holds its Lease, then the guide's steps that apply without machines — pause, delete the
/// kustomization, delete the CRDs — and the sweep of every object of every listable kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_server_the_uninstall_leaves_nothing_of_baremend_on_any_object() {
    let c = common::real::installed().await;
    let kubeconfig = c.dir.join("controller.kubeconfig");
    std::fs::write(&kubeconfig, common::real::controller_kubeconfig(&c).await).unwrap();
    let mut controller = common::real::run_command(&kubeconfig, "baremend-uninstall")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("baremend runs");
    common::real::lease_held_by(&c, "baremend-uninstall").await;
    // 1. Stop new remediations, of both kinds; then the controller goes with its Deployment.
    let pause = r#"{"spec":{"paused":true}}"#;
    let observe = r#"{"spec":{"mode":"Observe"}}"#;
    for (kind, patch) in [("remediationpolicy", pause), ("driftpolicy", observe)] {
        c.ok(
            &["patch", kind, "default", "--type", "merge", "-p", patch],
            None,
        )
        .await;
    }
    let _ = controller.kill().await;
    let mine = c.dir.join("mine");
    let crds = common::repo_root().join("crds");
    c.ok(
        &[
            "delete",
            "-k",
            mine.to_str().unwrap(),
            "--ignore-not-found",
            "--wait=true",
        ],
        None,
    )
    .await;
    c.ok(
        &["delete", "-f", crds.to_str().unwrap(), "--wait=true"],
        None,
    )
    .await;
    // The real namespace controller empties the namespace before it goes.
    eventually(
        "the namespace baremend gone",
        Duration::from_secs(60),
        async || {
            let (found, _, _) = c.kubectl(&["get", "namespace", "baremend"], None).await;
            !found
        },
    )
    .await;
    let (items, kinds) = sweep(
        &c.kubectl,
        &[
            "Namespace",
            "ClusterRole",
            "ServiceAccount",
            "CustomResourceDefinition",
        ],
    )
    .await;
    println!(
        "uninstall on a real server: {items} objects of {kinds} kinds swept, nothing of baremend left"
    );
}
