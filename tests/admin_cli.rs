//! The admin's commands against the simulated cluster, as a user runs them: `baremend status`
//! names a failed remediation with its reason and runbook section, `retry` and `ack` set their
//! annotation on a Failed one only, and `gather` writes a support bundle (a directory or a
//! `.tar.gz`) with baremend's objects, their Events and the Machine, host and Node involved —
//! and never a Secret, a planted password or a planted token.

use std::path::{Path, PathBuf};

use baremend::api::annotations::{ACKNOWLEDGED, RETRY};
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{BMHS, MACHINES, SECRETS};
use serde_json::{Value, json};

use baremend_testkit as common;

use common::lab::{Lab, REMEDIATIONS, fast};
use common::{scratch, texts};

/// What the test plants where a careless bundle would pick it up.
const PLANTED_PASSWORD: &str = "planted-bmc-password-7f3a";
const PLANTED_TOKEN: &str = "planted-api-token-91c2";
const PLANTED_IN_TEXT: &str = "planted-event-secret-5d0e";
const PLANTED_IN_LOG: &str = "planted-log-bearer-44ab";

/// A lab whose worker-1 failed `PowerOffNotConfirmed` (its BMC's Secret does not exist),
/// with the controller stopped, and credentials planted around it.
async fn failed_lab() -> Lab {
    let policy =
        json!({"timeouts": {"powerOffSeconds": 2, "nodeReadySeconds": 30, "readyGraceSeconds": 1}});
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.detach("worker-1");
    lab.api
        .merge(
            BMHS,
            MACHINE_NAMESPACE,
            "worker-1",
            &json!({"spec": {"bmc": {"credentialsName": "no-such-secret"}}}),
            false,
        )
        .unwrap();
    lab.start_controller(lab.options());
    lab.trigger("worker-1", true);
    lab.failed_untouched("worker-1", "Secret no-such-secret")
        .await;
    lab.stop().await;
    // A Secret with a password (never gathered), a token in a Machine's annotation, and a
    // password in an Event's message about the Machine.
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(PLANTED_PASSWORD);
    lab.api
        .create(
            SECRETS,
            MACHINE_NAMESPACE,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "worker-1-bmc-secret-2", "namespace": MACHINE_NAMESPACE},
                "data": {"username": "YWRtaW4=", "password": encoded}}),
        )
        .unwrap();
    lab.api
        .merge(
            MACHINES,
            MACHINE_NAMESPACE,
            "worker-1",
            &json!({"metadata": {"annotations": {"example.com/api-token": PLANTED_TOKEN}}}),
            false,
        )
        .unwrap();
    lab.api
        .create(
            baremend_sim::cluster::local::EVENTS,
            MACHINE_NAMESPACE,
            json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "worker-1.planted", "namespace": MACHINE_NAMESPACE},
                "involvedObject": {"apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine", "namespace": MACHINE_NAMESPACE, "name": "worker-1"},
                "reason": "Debug", "type": "Normal",
                "message": format!("someone logged in with password={PLANTED_IN_TEXT}")}),
        )
        .unwrap();
    lab
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_failure_and_retry_and_ack_mark_only_a_failed_remediation() {
    let lab = failed_lab().await;
    lab.seed_remediation("worker-2", 1, "Succeeded", json!({}));

    let status = lab.run_baremend(&["status"]).await;
    let (stdout, stderr) = texts(&status);
    assert!(status.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "only the failure needs an admin: {stdout}");
    assert!(
        lines[0].starts_with(
            "Remediation openshift-machine-api/worker-1-1 Machine worker-1 Failed PowerOffNotConfirmed: read "
        ) && lines[0].contains("docs/guides/runbook.md#poweroffnotconfirmed")
            && lines[0].contains("kubectl baremend retry -n openshift-machine-api worker-1-1"),
        "{stdout}"
    );
    let all = lab.run_baremend(&["status", "--all"]).await;
    assert!(
        texts(&all)
            .0
            .contains("Remediation openshift-machine-api/worker-2-1 Machine worker-2 Succeeded")
    );

    // Only a Failed one is retried or acknowledged.
    let refused = lab
        .run_baremend(&["retry", "-n", MACHINE_NAMESPACE, "worker-2-1"])
        .await;
    let (_, stderr) = texts(&refused);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr.contains("Remediation openshift-machine-api/worker-2-1: is Succeeded: only a Failed one is retried"),
        "{stderr}"
    );
    let missing = lab
        .run_baremend(&["ack", "-n", MACHINE_NAMESPACE, "worker-9-1"])
        .await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        texts(&missing).1.contains("NotFound"),
        "{}",
        texts(&missing).1
    );
    let annotations = |name: &str| {
        lab.api.get(REMEDIATIONS, MACHINE_NAMESPACE, name).unwrap()["metadata"]["annotations"]
            .clone()
    };
    assert!(annotations("worker-2-1").get(RETRY).is_none());

    let retried = lab
        .run_baremend(&["retry", "openshift-machine-api/worker-1-1"])
        .await;
    assert!(retried.status.success(), "{:?}", texts(&retried));
    assert_eq!(annotations("worker-1-1")[RETRY], "true");
    let acked = lab
        .run_baremend(&["ack", "-n", MACHINE_NAMESPACE, "worker-1-1"])
        .await;
    assert!(acked.status.success(), "{:?}", texts(&acked));
    assert_eq!(annotations("worker-1-1")[ACKNOWLEDGED], "true");
    let after = lab.run_baremend(&["status"]).await;
    assert!(
        texts(&after)
            .0
            .starts_with("nothing needs you: 2 remediations"),
        "{}",
        texts(&after).0
    );
}

/// Every file under `dir`, by relative path, with its text.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                found.push((relative, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    found.sort();
    found
}

fn items(bundle: &[(String, String)], file: &str) -> Vec<Value> {
    let text = &bundle
        .iter()
        .find(|(path, _)| path == file)
        .unwrap_or_else(|| {
            panic!(
                "no {file} in {:?}",
                bundle.iter().map(|f| &f.0).collect::<Vec<_>>()
            )
        })
        .1;
    let list: Value = serde_yaml::from_str(text).unwrap();
    list["items"].as_array().unwrap().clone()
}

fn names(items: &[Value]) -> Vec<&str> {
    items
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gather_writes_a_bundle_of_what_is_involved_without_secrets_or_credentials() {
    let lab = failed_lab().await;
    // A controller pod whose log the API server serves (the lab's controller runs in the
    // test's process: this pod stands for the Deployment's), with a credential in it.
    lab.api
        .create(
            baremend_sim::cluster::local::PODS,
            "baremend",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "baremend-6c9f7-x2x4q", "namespace": "baremend",
                    "labels": {"app.kubernetes.io/name": "baremend"}},
                "spec": {"containers": [{"name": "baremend", "image": "baremend"}]}}),
        )
        .unwrap();
    lab.cluster.api_server().set_pod_log(
        "baremend",
        "baremend-6c9f7-x2x4q",
        "baremend",
        &format!(
            "an old line the tail leaves out\nstarting\nproxy said Authorization: Bearer {PLANTED_IN_LOG}\nfenced worker-1\n"
        ),
    );
    let dir: PathBuf = scratch("gather").join("bundle");
    let output = lab
        .run_baremend(&["gather", "--out", dir.to_str().unwrap(), "--log-lines", "3"])
        .await;
    let (stdout, stderr) = texts(&output);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let bundle = files(&dir);

    assert_eq!(
        names(&items(&bundle, "baremend/remediations.yaml")),
        ["worker-1-1"]
    );
    assert_eq!(
        names(&items(&bundle, "baremend/remediationpolicies.yaml")),
        ["default"]
    );
    // The Machine, host and Node the remediation names, not the fleet.
    assert_eq!(
        names(&items(
            &bundle,
            "cluster/machines.machine.openshift.io.yaml"
        )),
        ["worker-1"]
    );
    assert_eq!(
        names(&items(&bundle, "cluster/baremetalhosts.yaml")),
        ["worker-1"]
    );
    assert_eq!(names(&items(&bundle, "cluster/nodes.yaml")), ["worker-1"]);
    // The remediation's Events, about it and its Machine.
    let events = items(&bundle, "events.yaml");
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    assert!(reasons.contains(&"Debug"), "{reasons:?}");
    assert!(
        events.iter().any(|e| e["reason"] == "Failed"
            && e["note"]
                .as_str()
                .unwrap_or_default()
                .contains("power-off never confirmed")
            && e["note"]
                .as_str()
                .unwrap_or_default()
                .contains("Secret no-such-secret")),
        "{events:?}"
    );
    // The controller pod's log, through the pods/log API, its credentials redacted.
    let log = &bundle
        .iter()
        .find(|(p, _)| p == "logs/baremend-6c9f7-x2x4q/baremend.log")
        .unwrap_or_else(|| {
            panic!(
                "no log in {:?}",
                bundle.iter().map(|f| &f.0).collect::<Vec<_>>()
            )
        })
        .1;
    assert_eq!(log.lines().count(), 3, "{log}");
    assert!(
        log.contains("fenced worker-1") && log.contains("Authorization: <redacted>"),
        "{log}"
    );
    // The health checks that hand baremend its work, all of them.
    let checks = items(
        &bundle,
        "cluster/machinehealthchecks.machine.openshift.io.yaml",
    );
    assert!(!checks.is_empty(), "no MachineHealthCheck gathered");
    // The Cluster API kinds this cluster does not serve have nothing to gather: not a problem
    // (issue 38: they were listed as "not gathered").
    let summary = &bundle.iter().find(|(p, _)| p == "summary.txt").unwrap().1;
    assert!(!summary.contains("cluster.x-k8s.io"), "{summary}");
    assert!(!stdout.contains("not gathered"), "{stdout}");
    assert!(
        summary.contains("logs/baremend-6c9f7-x2x4q/baremend.log: 3 lines"),
        "{summary}"
    );

    // Nothing secret: no Secret object, no planted value in any file, the planted keys kept
    // with their values redacted.
    let everything: String = bundle.iter().map(|(_, t)| t.as_str()).collect();
    assert!(
        !everything.contains("kind: Secret"),
        "a Secret was gathered"
    );
    for planted in [
        PLANTED_PASSWORD,
        PLANTED_TOKEN,
        PLANTED_IN_TEXT,
        PLANTED_IN_LOG,
    ] {
        assert!(!everything.contains(planted), "{planted} in the bundle");
    }
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(PLANTED_PASSWORD);
    assert!(!everything.contains(&encoded));
    let machine = &items(&bundle, "cluster/machines.machine.openshift.io.yaml")[0];
    assert_eq!(
        machine["metadata"]["annotations"]["example.com/api-token"],
        "<redacted>"
    );
    assert!(everything.contains("password=<redacted>"));
    assert!(!everything.contains("managedFields"));

    // The same bundle as a .tar.gz, which tar reads.
    let archive = scratch("gather-tgz").join("support.tar.gz");
    let packed = lab
        .run_baremend(&["gather", "--out", archive.to_str().unwrap()])
        .await;
    assert!(packed.status.success(), "{:?}", texts(&packed));
    let unpacked = scratch("gather-untar");
    let tar = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked)
        .output()
        .unwrap();
    assert!(
        tar.status.success(),
        "{}",
        String::from_utf8_lossy(&tar.stderr)
    );
    let from_tar = files(&unpacked.join("support"));
    let paths = |b: &[(String, String)]| b.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&from_tar), paths(&bundle));
    let tar_text: String = from_tar.iter().map(|(_, t)| t.as_str()).collect();
    for planted in [
        PLANTED_PASSWORD,
        PLANTED_TOKEN,
        PLANTED_IN_TEXT,
        PLANTED_IN_LOG,
    ] {
        assert!(!tar_text.contains(planted), "{planted} in the archive");
    }

    // A directory that holds something is not written into.
    let again = lab
        .run_baremend(&["gather", "--out", dir.to_str().unwrap()])
        .await;
    assert_eq!(again.status.code(), Some(1));
    assert!(
        texts(&again)
            .1
            .contains("exists and is not an empty directory")
    );
}

/// Issue 38, "state at a glance". Before: a dry run is an ended phase, so `baremend status`
/// said "nothing needs you" while a hung Node was left alone by a policy still in dry run.
/// Now the dry run of a Node that is still not Ready is a line with what would be done and
/// the command that switches the policy; once the Node is Ready again it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_flags_a_dry_run_beside_a_node_still_down() {
    let policy = json!({"mode": "DryRun", "timeouts": {"readyGraceSeconds": 1}});
    let mut lab = Lab::builder(fast()).policy(policy).start().await;
    lab.start_controller(lab.options());
    lab.cluster.hang("worker-0");
    lab.reach("worker-0-1", baremend::api::RemediationPhase::DryRun)
        .await;
    lab.node_ready_is("worker-0", "Unknown").await;
    let status = lab.run_baremend(&["status"]).await;
    let (stdout, stderr) = texts(&status);
    assert!(status.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Remediation openshift-machine-api/worker-0-"))
        .unwrap_or_else(|| panic!("the dry run is not flagged: {stdout}"));
    assert!(
        line.contains("Machine worker-0 DryRun DryRun: Node worker-0 is not Ready and the policy is a dry run (dry run: would fence with"),
        "{line}"
    );
    assert!(line.contains(r#"{"spec":{"mode":"Remediate"}}"#), "{line}");
    // `check` warns of it beside its fencing lines.
    let check = lab.run_baremend(&["check"]).await;
    let (stdout, stderr) = texts(&check);
    assert!(
        stderr.contains("warning: Remediation openshift-machine-api/worker-0-")
            && stderr.contains("Node worker-0 is not Ready and the policy is a dry run"),
        "{stdout}\n{stderr}"
    );
    // Back: nothing to flag.
    lab.cluster.recover("worker-0");
    lab.node_ready_is("worker-0", "True").await;
    let after = lab.run_baremend(&["status"]).await;
    let (stdout, _) = texts(&after);
    assert!(!stdout.contains("DryRun"), "{stdout}");
    lab.stop().await;
}
