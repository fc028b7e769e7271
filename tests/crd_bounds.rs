//! The bounds of baremend's CRDs hold through an API server: the CRDs of `crds/` are
//! registered with the simulated API server (which validates custom resources against their
//! structural schema, as kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
//! validation/validation.go` does) and with a real kube-apiserver (every test runs on both:
//! the real one is the judge), an over-long or malformed name, a helper image named by
//! tag, an over-long list and each CEL rule's violation are refused with 422 naming the field
//! or the rule, and every object of baremend's kinds that deploy/ ships is still accepted.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Deserialize;
use serde_json::{Value, json};

use baremend_testkit as common;
use baremend_testkit::on_both_servers;

use common::servers::{Server, ServerKind};

/// An API server of `kind` with every CRD of `crds/` established, and an admin client of it.
async fn start(kind: ServerKind) -> (Server, Client) {
    let server = Server::start(kind).await;
    server.install_crds().await;
    let client = server.admin().await;
    (server, client)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The documents of a YAML file, as JSON.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// The client for `object`'s kind, in its namespace if it has one.
fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let (group, version) = object["apiVersion"]
        .as_str()
        .unwrap()
        .split_once('/')
        .unwrap();
    let kind = object["kind"].as_str().unwrap();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn create(client: &Client, object: Value) -> Result<DynamicObject, kube::Error> {
    if let Some(namespace) = object["metadata"]["namespace"].as_str() {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let wanted = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        // Several objects share a namespace: one made before is fine.
        let _ = namespaces.create(&PostParams::default(), &wanted).await;
    }
    let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    api_for(client, &object)
        .create(&PostParams::default(), &dynamic)
        .await
}

/// Creates `object` and expects a 422 whose causes name `field` (and only it).
async fn assert_refused(client: &Client, object: Value, field: &str) {
    let status = match create(client, object.clone()).await {
        Err(kube::Error::Api(status)) => status,
        other => panic!("{object}: expected a 422, got {other:?}"),
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid", "{status:?}");
    assert!(status.message.contains(field), "{status:?}");
    let causes: Vec<(String, String)> = status
        .details
        .iter()
        .flat_map(|d| d.causes.iter())
        .map(|c| (c.field.clone(), c.message.clone()))
        .collect();
    // A kind with CEL rules says too that they were skipped (a bound's error blocks them):
    // apiextensions-apiserver's `hasBlockingErr`.
    let (skipped, named): (Vec<_>, Vec<_>) = causes.iter().partition(|(f, _)| f == "<nil>");
    assert_eq!(
        named.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
        [field],
        "{status:?}"
    );
    for (_, message) in skipped {
        assert!(
            message
                .contains("some validation rules were not checked because the object was invalid"),
            "{status:?}"
        );
    }
}

/// Creates `object` and expects a 422 whose message holds each of `phrases`.
async fn assert_refused_saying(client: &Client, object: Value, phrases: &[&str]) {
    let status = match create(client, object.clone()).await {
        Err(kube::Error::Api(status)) => status,
        other => panic!("{object}: expected a 422, got {other:?}"),
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{status:?}"
    );
    for phrase in phrases {
        assert!(status.message.contains(phrase), "{phrase:?} in {status:?}");
    }
}

/// Every `x-kubernetes-validations` rule of `crds/`, as (kind, rule).
fn cel_rules() -> Vec<(String, String)> {
    let mut rules = Vec::new();
    for file in yaml_files(&repo().join("crds")) {
        for crd in documents(&file) {
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap().to_owned();
            let mut stack = vec![crd["spec"]["versions"].clone()];
            while let Some(node) = stack.pop() {
                match node {
                    Value::Object(map) => {
                        if let Some(Value::Array(list)) = map.get("x-kubernetes-validations") {
                            for rule in list {
                                rules.push((
                                    kind.clone(),
                                    rule["rule"].as_str().unwrap().to_owned(),
                                ));
                            }
                        }
                        stack.extend(map.into_iter().map(|(_, v)| v));
                    }
                    Value::Array(items) => stack.extend(items),
                    _ => {}
                }
            }
        }
    }
    rules.sort();
    rules
}

/// A Remediation's spec is written once: the server refuses a change of its host or Node
/// with the rule's message, and still takes its status and labels.
async fn a_remediations_spec_cannot_change_after_it_is_written(server: ServerKind) {
    let (_server, client) = start(server).await;
    let remediation = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
        "metadata": {"name": "worker-0-1", "namespace": "default"},
        "spec": {"machineName": "worker-0", "nodeName": "worker-0",
                 "host": "openshift-machine-api/worker-0"}});
    create(&client, remediation.clone()).await.unwrap();
    let api = api_for(&client, &remediation);
    let merge = |patch: Value| kube::api::Patch::Merge(patch);
    let params = kube::api::PatchParams::default();
    for edit in [
        json!({"spec": {"host": "openshift-machine-api/master-0"}}),
        json!({"spec": {"nodeName": "master-0"}}),
        json!({"spec": {"hostBmc": "master-0"}}),
    ] {
        match api.patch("worker-0-1", &params, &merge(edit.clone())).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{edit}: {status:?}");
                assert!(
                    status.message.contains(
                        "spec is written once, when the remediation starts, and cannot change"
                    ),
                    "{edit}: {}",
                    status.message
                );
            }
            other => panic!("{edit} was taken: {other:?}"),
        }
    }
    api.patch(
        "worker-0-1",
        &params,
        &merge(json!({"metadata": {"labels": {"team": "infra"}}})),
    )
    .await
    .expect("labels still change");
    api.patch_status(
        "worker-0-1",
        &params,
        &merge(json!({"status": {"phase": "PoweringOff"}})),
    )
    .await
    .expect("the status still changes");
}

/// Each CEL rule of our CRDs, broken by an object that holds every schema bound (so the rule
/// runs), is refused with the rule's message (or, without one, the rule itself); a pattern
/// error does not stop the rules (it is not a blocking error), a bound does.
async fn every_cel_rule_refuses_with_its_message(server: ServerKind) {
    let (_server, client) = start(server).await;
    let base = json!({"nodeName": "worker-0", "address": "redfish://10.0.0.1", "credentialsName": "creds"});
    let with = |extra: Value| {
        let mut spec = base.clone();
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    let policy = |timeouts: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "RemediationPolicy",
            "metadata": {"name": "p"}, "spec": {"timeouts": timeouts}})
    };
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "HostBmc",
            "has(self.spec.machineName) || has(self.spec.nodeName)",
            host_bmc(json!({"address": "redfish://10.0.0.1", "credentialsName": "creds"})),
        ),
        (
            "HostBmc",
            "!has(self.spec.caBundle) || !has(self.spec.caBundleRef)",
            host_bmc(with(
                json!({"caBundle": "x", "caBundleRef": {"kind": "ConfigMap", "name": "ca"}}),
            )),
        ),
        (
            "HostBmc",
            "!self.spec.insecureSkipVerify || (!has(self.spec.caBundle) && !has(self.spec.caBundleRef))",
            host_bmc(with(json!({"insecureSkipVerify": true, "caBundle": "x"}))),
        ),
        (
            "RemediationPolicy",
            "!has(self.spec.timeouts) || self.spec.timeouts.readyGraceSeconds < self.spec.timeouts.nodeReadySeconds",
            policy(json!({"nodeReadySeconds": 60, "readyGraceSeconds": 90})),
        ),
        (
            "Remediation",
            "has(self.spec.machineName) || (has(self.spec.nodeName) && has(self.spec.hostBmc))",
            json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
                "metadata": {"name": "r", "namespace": "default"}, "spec": {"nodeName": "worker-0"}}),
        ),
        // A transition rule: checked on an update (below), not on a creation.
        ("Remediation", "self.spec == oldSelf.spec", Value::Null),
    ];
    let covered: Vec<(String, String)> = {
        let mut c: Vec<_> = cases
            .iter()
            .map(|(k, r, _)| ((*k).to_owned(), (*r).to_owned()))
            .collect();
        c.sort();
        c
    };
    assert_eq!(
        covered,
        cel_rules(),
        "a case for every rule of crds/, and no other"
    );
    for (kind, rule, object) in cases {
        if rule.contains("oldSelf") {
            continue;
        }
        let messages: Vec<String> = yaml_files(&repo().join("crds"))
            .iter()
            .flat_map(|file| documents(file))
            .filter(|crd| crd["spec"]["names"]["kind"] == kind)
            .flat_map(|crd| {
                crd.pointer("/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|r| r["rule"] == rule)
            .map(|r| {
                r["message"]
                    .as_str()
                    .map_or(format!("failed rule: {rule}"), str::to_owned)
            })
            .collect();
        assert_eq!(messages.len(), 1, "{kind}: {rule}");
        assert_refused_saying(&client, object, &[&messages[0]]).await;
    }
    // A pattern error and a rule's: both said (CEL still ran).
    let mut both = host_bmc(with(
        json!({"caBundle": "x", "caBundleRef": {"kind": "ConfigMap", "name": "ca"}}),
    ));
    both["spec"]["nodeName"] = json!("Worker_0");
    assert_refused_saying(
        &client,
        both,
        &[
            "spec.nodeName",
            "should match",
            "failed rule: !has(self.spec.caBundle)",
        ],
    )
    .await;
    // A bound's error and a rule's: the rule is skipped, and that is said.
    let mut blocked = host_bmc(with(
        json!({"caBundle": "x", "caBundleRef": {"kind": "ConfigMap", "name": "ca"}}),
    ));
    blocked["spec"]["nodeName"] = json!("w".repeat(254));
    assert_refused_saying(
        &client,
        blocked.clone(),
        &[
            "spec.nodeName: Too long",
            "some validation rules were not checked",
        ],
    )
    .await;
    let status = match create(&client, blocked).await {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected a 422, got {other:?}"),
    };
    assert!(!status.message.contains("failed rule"), "{status:?}");
}

fn host_bmc(spec: Value) -> Value {
    json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc",
        "metadata": {"name": "h", "namespace": "default"}, "spec": spec})
}

async fn names_must_be_dns_subdomains_of_at_most_253_characters(server: ServerKind) {
    let (_server, client) = start(server).await;
    let spec = |node: &str| json!({"nodeName": node, "address": "redfish://10.0.0.1", "credentialsName": "creds"});
    // 253 characters in labels of 63 is the longest name a Node can have.
    let longest = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61),
    ]
    .join(".");
    assert_eq!(longest.len(), 253);
    let mut accepted = host_bmc(spec(&longest));
    accepted["metadata"]["name"] = json!("longest");
    create(&client, accepted).await.unwrap();
    let too_long = format!("{longest}e");
    for bad in [too_long.as_str(), "Worker-0", "worker_0", "-worker"] {
        assert_refused(&client, host_bmc(spec(bad)), "spec.nodeName").await;
    }
    let mut bad_secret = spec("worker-0");
    bad_secret["credentialsName"] = json!("Creds");
    assert_refused(&client, host_bmc(bad_secret), "spec.credentialsName").await;

    let remediation = |spec: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "Remediation",
            "metadata": {"name": "r", "namespace": "default"}, "spec": spec})
    };
    assert_refused(
        &client,
        remediation(json!({"machineName": "Worker_0"})),
        "spec.machineName",
    )
    .await;
    assert_refused(
        &client,
        remediation(json!({"machineName": "w", "host": "worker-0"})),
        "spec.host",
    )
    .await;
    assert_refused(
        &client,
        remediation(json!({"machineName": "w",
            "trigger": {"kind": "NodeRemediation", "namespace": "a.b"}})),
        "spec.trigger.namespace",
    )
    .await;
}

async fn a_helper_image_must_be_pinned_by_digest_and_its_namespace_a_label(server: ServerKind) {
    let (_server, client) = start(server).await;
    let policy = |name: &str, spec: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "DriftPolicy",
            "metadata": {"name": name}, "spec": spec})
    };
    assert_refused(
        &client,
        policy("tag", json!({"helperImage": "quay.io/acme/baremend:1.4"})),
        "spec.helperImage",
    )
    .await;
    assert_refused(
        &client,
        policy("ns", json!({"helperNamespace": "baremend.system"})),
        "spec.helperNamespace",
    )
    .await;
    let pinned = format!("quay.io/acme/baremend@sha256:{}", "0f".repeat(32));
    let created = create(&client, policy("pinned", json!({"helperImage": pinned})))
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["helperImage"], json!(pinned));
    // Unset, it stays unset (the controller's own image) and the namespace is defaulted.
    let created = create(&client, policy("default", json!({}))).await.unwrap();
    assert!(created.data["spec"].get("helperImage").is_none());
    assert_eq!(created.data["spec"]["helperNamespace"], "baremend");
}

async fn lists_and_blobs_are_bounded(server: ServerKind) {
    let (_server, client) = start(server).await;
    let four = ["DirectBmc", "DirectBmc", "DirectBmc", "DirectBmc"];
    let template = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "MachineRemediationTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"template": {"spec": {"strategies": four}}}});
    assert_refused(&client, template, "spec.template.spec.strategies").await;
    let policy = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "RemediationPolicy",
        "metadata": {"name": "p"}, "spec": {"strategies": four}});
    assert_refused(&client, policy, "spec.strategies").await;
    let bundle = "A".repeat(64 * 1024 + 1);
    let spec = json!({"machineName": "m", "address": "redfish://10.0.0.1",
        "credentialsName": "creds", "caBundle": bundle});
    assert_refused(&client, host_bmc(spec), "spec.caBundle").await;
    let drift = json!({"apiVersion": "baremend.io/v1alpha1", "kind": "DriftRemediation",
        "metadata": {"name": "d"}, "spec": {"nodeName": "n", "kind": "Content",
            "target": format!("/{}", "x".repeat(4096)), "action": "Force"}});
    assert_refused(&client, drift, "spec.target").await;
}

async fn every_object_of_ours_that_deploy_ships_is_accepted(server: ServerKind) {
    let (_server, client) = start(server).await;
    let mut files = vec![repo().join("deploy/policies.yaml")];
    files.extend(yaml_files(&repo().join("deploy/examples")));
    let mut created = Vec::new();
    for file in files {
        for object in documents(&file) {
            let ours = object["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("baremend.io/"));
            if !ours {
                continue;
            }
            let kind = object["kind"].as_str().unwrap().to_owned();
            if let Err(error) = create(&client, object).await {
                panic!("{}: {kind}: {error}", file.display());
            }
            created.push(kind);
        }
    }
    // The shipped policies and both kinds of HostBmc example are among them.
    for kind in ["RemediationPolicy", "DriftPolicy", "HostBmc"] {
        assert!(created.iter().any(|k| k == kind), "{kind}: {created:?}");
    }
}

async fn a_policy_whose_ready_grace_outlasts_its_node_ready_deadline_is_refused(
    server: ServerKind,
) {
    // A Node counts as back only once Ready for the grace period, within the node-ready
    // deadline: with a grace as long as the deadline every remediation would end
    // NodeNeverReady. The grace defaults to 30 s, so a deadline of 30 s alone is refused too.
    let (_server, client) = start(server).await;
    let policy = |name: &str, timeouts: Value| {
        json!({"apiVersion": "baremend.io/v1alpha1", "kind": "RemediationPolicy",
            "metadata": {"name": name}, "spec": {"timeouts": timeouts}})
    };
    for (name, timeouts) in [
        ("equal", json!({"nodeReadySeconds": 30})),
        (
            "longer",
            json!({"nodeReadySeconds": 60, "readyGraceSeconds": 61}),
        ),
    ] {
        let refused = match create(&client, policy(name, timeouts)).await {
            Err(kube::Error::Api(status)) => status,
            other => panic!("{name}: expected a 422, got {other:?}"),
        };
        assert_eq!(refused.code, 422, "{refused:?}");
        assert!(
            refused
                .message
                .contains("readyGraceSeconds must be shorter than timeouts.nodeReadySeconds"),
            "{refused:?}"
        );
    }
    for (name, timeouts) in [
        (
            "shorter",
            json!({"nodeReadySeconds": 30, "readyGraceSeconds": 2}),
        ),
        ("defaults", json!({})),
    ] {
        create(&client, policy(name, timeouts)).await.unwrap();
    }
}

on_both_servers!(
    a_remediations_spec_cannot_change_after_it_is_written,
    every_cel_rule_refuses_with_its_message,
    names_must_be_dns_subdomains_of_at_most_253_characters,
    a_helper_image_must_be_pinned_by_digest_and_its_namespace_a_label,
    lists_and_blobs_are_bounded,
    every_object_of_ours_that_deploy_ships_is_accepted,
    a_policy_whose_ready_grace_outlasts_its_node_ready_deadline_is_refused,
);
