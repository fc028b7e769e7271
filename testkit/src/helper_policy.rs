//! deploy/'s admission policy for the drift helpers (`deploy/base/helper-admission.yaml`) as
//! the controller's own ServiceAccount meets it: a helper pod as the drift coordinator builds
//! it, every way out of that shape with the policy's message, and the check of a refusal.
//! Shared by the attack test on the simulated cluster (`trust_attacks_e2e`) and the same
//! attacks on a real kube-apiserver (`real_plane_e2e`).

use baremend::drift::helper::{self, HelperOp, HelperPods, HelperTarget};
use baremend::lab::setup::LAB_HELPER_IMAGE;
use baremend_sim::cluster::local::Gvr;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The admission policy of deploy/base/helper-admission.yaml, as the controller's own
/// ServiceAccount meets it.
pub const HELPER_POLICY: &str = "baremend-drift-helpers";

/// The namespace of deploy/ (the helpers', the controller's).
pub const HELPERS: &str = baremend::lab::setup::DEPLOY_NAMESPACE;

/// A helper pod as the drift coordinator builds it (`src/drift/helper.rs`), named `name`,
/// doing `op`, as JSON to tamper with. The node does not exist: nothing runs it. Its owner, a
/// DriftRemediation, does not exist either: the reference is dropped so that the garbage
/// collector leaves what was admitted in place (the policy does not read it).
pub fn helper_pod(name: &str, op: &HelperOp) -> Value {
    let pods = HelperPods::new(LAB_HELPER_IMAGE);
    let target = HelperTarget {
        remediation: name,
        uid: "0b7e5c1a-0000-4000-8000-000000000001",
        node: "no-such-node",
        namespace: HELPERS,
        image: LAB_HELPER_IMAGE,
        pods: &pods,
    };
    let mut pod = serde_json::to_value(helper::pod(&target, op)).unwrap();
    pod["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    pod
}

/// Creates `pod` with `client`'s identity in the helpers' namespace.
pub async fn create_pod(client: &Client, pod: &Value) -> kube::Result<Pod> {
    let pod: Pod = serde_json::from_value(pod.clone()).unwrap();
    Api::<Pod>::namespaced(client.clone(), HELPERS)
        .create(&PostParams::default(), &pod)
        .await
}

/// Every helper the coordinator builds (the install's content Secret included).
pub fn admitted_ops() -> [HelperOp; 4] {
    [
        HelperOp::Force,
        HelperOp::Unforce,
        HelperOp::Install {
            path: "/etc/demo/rules.json".into(),
            mode: 0o644,
            sha256: "ab".repeat(32),
        },
        HelperOp::Chmod {
            path: "/etc/demo/rules.json".into(),
            mode: 0o600,
        },
    ]
}

/// The policy's words for a volume out of the shape.
pub const MOUNTS: &str = "a helper pod mounts the node's / as its one hostPath and no other volume but its own content Secret";

/// The attack: the force helper with the node's /etc mounted besides its / (`attack-force`).
pub fn extra_host_path_attack() -> Value {
    let mut attack = helper_pod("attack", &HelperOp::Force);
    attack["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "etc", "hostPath": {"path": "/etc"}}));
    attack["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "etc", "mountPath": "/etc-of-the-node"}));
    attack
}

/// Every other way out of the helpers' shape, one at a time: what, the change, the policy's
/// message. `image` is how the policy names the image it admits: the controller's own when
/// deploy/ was rendered with it pinned (kustomize copies it in), else `baremend@sha256:…` (the
/// labs apply the base as written).
pub fn deviations(image: &str) -> Vec<(&'static str, Tamper, String)> {
    let mounts = MOUNTS.to_owned();
    let pinned =
        format!("a helper pod runs the image of the controller, pinned by digest ({image})");
    vec![
        (
            "another hostPath",
            |p| p["spec"]["volumes"][0]["hostPath"]["path"] = json!("/var/lib/kubelet"),
            mounts.clone(),
        ),
        (
            "another Secret",
            |p| {
                p["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "tls", "secret": {"secretName": "baremend-metrics-tls"}}))
            },
            mounts.clone(),
        ),
        (
            "an emptyDir",
            |p| {
                p["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "scratch", "emptyDir": {}}))
            },
            mounts.clone(),
        ),
        (
            "a tag",
            |p| p["spec"]["containers"][0]["image"] = json!("baremend:latest"),
            pinned.clone(),
        ),
        (
            "another repository's digest",
            |p| {
                p["spec"]["containers"][0]["image"] =
                    json!(LAB_HELPER_IMAGE.replacen("baremend", "attacker/tools", 1))
            },
            pinned.clone(),
        ),
        (
            "a shell",
            |p| p["spec"]["containers"][0]["command"] = json!(["sh", "-c", "chroot /host"]),
            "a helper pod runs `baremend host-file --root /host …` and nothing else".to_owned(),
        ),
        (
            "arguments after the command",
            |p| p["spec"]["containers"][0]["args"] = json!(["; sh"]),
            "a helper pod runs `baremend host-file --root /host …` and nothing else".to_owned(),
        ),
        (
            "the token mounted",
            |p| p["spec"]["automountServiceAccountToken"] = json!(true),
            "a helper pod mounts no service-account token (automountServiceAccountToken: false)"
                .to_owned(),
        ),
        (
            "the controller's own account",
            |p| p["spec"]["serviceAccountName"] = json!("baremend"),
            "a pod of the controller's account runs as the helpers' account baremend-drift-helper"
                .to_owned(),
        ),
        (
            "an init container",
            |p| {
                // Named apart: a real server refuses two containers of one name before any
                // admission policy runs (Pod validation), which is not what this tries.
                let mut container = p["spec"]["containers"][0].clone();
                container["name"] = json!("init");
                p["spec"]["initContainers"] = json!([container]);
            },
            "a helper pod has one container and no init or ephemeral containers".to_owned(),
        ),
        (
            "a Secret through the environment",
            |p| {
                p["spec"]["containers"][0]["envFrom"] =
                    json!([{"secretRef": {"name": "baremend-metrics-tls"}}])
            },
            "a helper pod reads no environment (no Secret or ConfigMap through env)".to_owned(),
        ),
        (
            "an exec liveness probe",
            |p| {
                p["spec"]["containers"][0]["livenessProbe"] =
                    json!({"exec": {"command": ["sh", "-c", "chroot /host"]}})
            },
            RUNS_NOTHING_ELSE.to_owned(),
        ),
        (
            "a postStart hook",
            |p| {
                p["spec"]["containers"][0]["lifecycle"] =
                    json!({"postStart": {"exec": {"command": ["sh", "-c", "chroot /host"]}}})
            },
            RUNS_NOTHING_ELSE.to_owned(),
        ),
        (
            "a working directory",
            |p| p["spec"]["containers"][0]["workingDir"] = json!("/host/etc"),
            RUNS_NOTHING_ELSE.to_owned(),
        ),
        (
            "the node's / mounted elsewhere",
            |p| p["spec"]["containers"][0]["volumeMounts"][0]["mountPath"] = json!("/etc"),
            MOUNTED_AS_BUILT.to_owned(),
        ),
        (
            "a subPath of the node's /",
            |p| p["spec"]["containers"][0]["volumeMounts"][0]["subPath"] = json!("etc/kubernetes"),
            MOUNTED_AS_BUILT.to_owned(),
        ),
        (
            "the host's PID namespace",
            |p| p["spec"]["hostPID"] = json!(true),
            "a helper pod shares no host namespace".to_owned(),
        ),
    ]
}

/// What the policy says to a helper that would run more than its command.
const RUNS_NOTHING_ELSE: &str =
    "a helper pod runs nothing but its command: no lifecycle hooks, probes or working directory";

/// What the policy says to a helper mounted otherwise than the controller mounts it.
const MOUNTED_AS_BUILT: &str =
    "a helper pod mounts the node's / at /host and its content Secret read-only at /content, whole";

/// A change to a helper pod (JSON).
pub type Tamper = fn(&mut Value);

/// The bindings of ValidatingAdmissionPolicies.
pub const POLICY_BINDINGS: Gvr = Gvr {
    group: "admissionregistration.k8s.io",
    version: "v1",
    plural: "validatingadmissionpolicybindings",
};

/// Asserts deploy/'s helper policy refused the creation of pod `name` with 422 Invalid and
/// `message`, in upstream's words: `admission.NewForbidden` around `ValidatingAdmissionPolicy
/// '<p>' with binding '<b>' denied request: …`, with the policy's reason and code (kubernetes
/// v1.36.3 `staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/
/// dispatcher.go`), as the real server answers in `real_plane_e2e`.
pub fn refused_by_policy<T: std::fmt::Debug>(result: kube::Result<T>, name: &str, message: &str) {
    let expected = format!(
        "pods \"{name}\" is forbidden: ValidatingAdmissionPolicy '{HELPER_POLICY}' with binding \
         '{HELPER_POLICY}' denied request: {message}"
    );
    match result {
        Err(kube::Error::Api(status)) if status.code == 422 && status.reason == "Invalid" => {
            assert_eq!(status.message, expected);
        }
        other => panic!("expected 422 Invalid ({expected}), got {other:?}"),
    }
}
