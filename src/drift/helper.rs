//! The short-lived helper pod that does the one file operation on a node (what
//! `oc debug node/X -- chroot /host touch /run/machine-config-daemon-force` does): pinned to
//! the node, privileged, the node's root mounted at `/host`, running `baremend host-file`.
//! Restored content travels in a Secret mounted read-only, never in the pod spec, and both
//! are owned by the DriftRemediation so they are collected with it.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::json;

use crate::api::mco::FORCE_FILE;

/// The label that ties a helper pod or Secret to its DriftRemediation.
pub const REMEDIATION_LABEL: &str = "baremend.io/drift-remediation";

/// What a helper does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelperOp {
    /// Create the forcefile.
    Force,
    /// Remove the forcefile (an abort, or a request not picked up).
    Unforce,
    /// Write a file back from the Secret (`content` key).
    Install {
        /// The path.
        path: String,
        /// Permission bits.
        mode: u32,
        /// SHA-256 of the content.
        sha256: String,
    },
    /// Set a file's permission bits.
    Chmod {
        /// The path.
        path: String,
        /// Permission bits.
        mode: u32,
    },
}

impl HelperOp {
    /// The suffix of the helper's name.
    pub fn suffix(&self) -> &'static str {
        match self {
            HelperOp::Force => "force",
            HelperOp::Unforce => "unforce",
            HelperOp::Install { .. } => "install",
            HelperOp::Chmod { .. } => "chmod",
        }
    }

    fn arguments(&self) -> Vec<String> {
        let mut words: Vec<String> = ["baremend", "host-file", "--root", "/host"]
            .iter()
            .map(|w| w.to_string())
            .collect();
        match self {
            HelperOp::Force => words.extend(["touch".into(), FORCE_FILE.into()]),
            HelperOp::Unforce => words.extend(["remove".into(), FORCE_FILE.into()]),
            HelperOp::Install { path, mode, sha256 } => words.extend([
                "install".into(),
                path.clone(),
                "--from".into(),
                "/content/content".into(),
                "--mode".into(),
                format!("{mode:04o}"),
                "--sha256".into(),
                sha256.clone(),
            ]),
            HelperOp::Chmod { path, mode } => words.extend([
                "chmod".into(),
                path.clone(),
                "--mode".into(),
                format!("{mode:04o}"),
            ]),
        }
        words
    }
}

/// How helper pods run, whatever they do: the image (it carries the `baremend` command; the
/// controller's own unless the DriftPolicy names another), its pull policy, and the service
/// account whose permission admits a privileged pod (on OpenShift the `privileged`
/// SecurityContextConstraints) — the helpers', not the controller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelperPods {
    /// The image.
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`.
    pub pull_policy: String,
    /// The service account in the helper namespace.
    pub service_account: String,
}

/// The helper pods' service account in deploy/.
pub const HELPER_SERVICE_ACCOUNT: &str = "baremend-drift-helper";

/// Whether `image` names its bits by digest (`<repository>@sha256:<64 hex>`): a helper runs
/// privileged on a node, so its image must not move under a tag (deploy/'s admission policy
/// refuses any other, and so does the coordinator before it asks).
pub fn pinned_by_digest(image: &str) -> bool {
    let Some((repository, digest)) = image.split_once('@') else {
        return false;
    };
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return false;
    };
    !repository.is_empty()
        && !repository.contains(char::is_whitespace)
        && hex.len() == 64
        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The repository of an image reference: without its digest or tag (a registry's port is
/// not a tag).
pub fn repository(image: &str) -> &str {
    if let Some((repository, _)) = image.split_once('@') {
        return repository;
    }
    match (image.rfind(':'), image.rfind('/')) {
        (Some(colon), Some(slash)) if colon > slash => &image[..colon],
        (Some(colon), None) => &image[..colon],
        _ => image,
    }
}

/// `image` pinned to the digest a running container reports (`imageID` of its status, e.g.
/// `quay.io/acme/baremend@sha256:…` or `docker-pullable://baremend@sha256:…`): the same
/// repository, the very bits that run. None when the image ID carries no digest (a runtime
/// that reports a local image ID only).
pub fn pinned_to_running(image: &str, image_id: &str) -> Option<String> {
    if pinned_by_digest(image) {
        return Some(image.to_owned());
    }
    let (_, digest) = image_id.rsplit_once('@')?;
    let pinned = format!("{}@{digest}", repository(image));
    pinned_by_digest(&pinned).then_some(pinned)
}

impl HelperPods {
    /// Helpers of `image`, pulled if not present, as [`HELPER_SERVICE_ACCOUNT`].
    pub fn new(image: impl Into<String>) -> Self {
        HelperPods {
            image: image.into(),
            pull_policy: "IfNotPresent".into(),
            service_account: HELPER_SERVICE_ACCOUNT.into(),
        }
    }
}

/// Where and as whom a helper runs.
#[derive(Debug, Clone)]
pub struct HelperTarget<'a> {
    /// The DriftRemediation's name (the helper's name starts with it).
    pub remediation: &'a str,
    /// Its UID (for the owner reference).
    pub uid: &'a str,
    /// The node.
    pub node: &'a str,
    /// The namespace.
    pub namespace: &'a str,
    /// The image (it carries the `baremend` command).
    pub image: &'a str,
    /// The image's pull policy and the service account.
    pub pods: &'a HelperPods,
}

fn meta(target: &HelperTarget<'_>, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(target.namespace.into()),
        labels: Some(BTreeMap::from([
            ("app.kubernetes.io/managed-by".into(), "baremend".into()),
            (REMEDIATION_LABEL.into(), target.remediation.into()),
        ])),
        owner_references: Some(vec![OwnerReference {
            api_version: "baremend.io/v1alpha1".into(),
            kind: "DriftRemediation".into(),
            name: target.remediation.into(),
            uid: target.uid.into(),
            ..OwnerReference::default()
        }]),
        ..ObjectMeta::default()
    }
}

/// The name of a helper pod (and of its content Secret).
pub fn helper_name(remediation: &str, op: &HelperOp) -> String {
    format!("{remediation}-{}", op.suffix())
}

/// The helper pod for `op`.
pub fn pod(target: &HelperTarget<'_>, op: &HelperOp) -> Pod {
    let name = helper_name(target.remediation, op);
    let mut mounts = vec![json!({"name": "host", "mountPath": "/host"})];
    let mut volumes = vec![json!({"name": "host", "hostPath": {"path": "/", "type": "Directory"}})];
    if matches!(op, HelperOp::Install { .. }) {
        mounts.push(json!({"name": "content", "mountPath": "/content", "readOnly": true}));
        volumes
            .push(json!({"name": "content", "secret": {"secretName": name, "defaultMode": 0o400}}));
    }
    let spec = json!({
        "nodeName": target.node,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": 300,
        "tolerations": [{"operator": "Exists"}],
        "serviceAccountName": target.pods.service_account,
        "automountServiceAccountToken": false,
        "containers": [{
            "name": "host-file",
            "image": target.image,
            "imagePullPolicy": target.pods.pull_policy,
            "command": op.arguments(),
            "securityContext": {"privileged": true, "runAsUser": 0},
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    });
    Pod {
        metadata: meta(target, name),
        // The JSON above is a valid PodSpec by construction; a failure would be a bug here.
        spec: serde_json::from_value(spec).ok(),
        status: None,
    }
}

/// The Secret that carries restored content to an install helper.
pub fn content_secret(target: &HelperTarget<'_>, op: &HelperOp, content: Vec<u8>) -> Secret {
    Secret {
        metadata: meta(target, helper_name(target.remediation, op)),
        data: Some(BTreeMap::from([("content".into(), ByteString(content))])),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// How a helper pod ended: None while running, Ok(message) or Err(message).
pub fn outcome(pod: &Pod) -> Option<Result<String, String>> {
    let status = pod.status.as_ref()?;
    let message = status
        .container_statuses
        .iter()
        .flatten()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .unwrap_or_default();
    match status.phase.as_deref() {
        Some("Succeeded") => Some(Ok(message)),
        Some("Failed") => Some(Err(if message.is_empty() {
            status
                .reason
                .clone()
                .unwrap_or_else(|| "the helper pod failed".into())
        } else {
            message
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> HelperTarget<'static> {
        static PODS: std::sync::LazyLock<HelperPods> =
            std::sync::LazyLock::new(|| HelperPods::new("unused"));
        HelperTarget {
            remediation: "worker-0-1",
            uid: "u-1",
            node: "worker-0",
            namespace: "baremend",
            image: "baremend:dev",
            pods: &PODS,
        }
    }

    #[test]
    fn the_force_helper_is_pinned_privileged_and_owned() {
        let pod = pod(&target(), &HelperOp::Force);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("worker-0"));
        let container = &spec.containers[0];
        assert_eq!(
            container.command.as_ref().unwrap().join(" "),
            "baremend host-file --root /host touch /run/machine-config-daemon-force"
        );
        assert_eq!(
            container.security_context.as_ref().unwrap().privileged,
            Some(true)
        );
        assert_eq!(pod.metadata.owner_references.unwrap()[0].uid, "u-1");
        assert_eq!(pod.metadata.name.as_deref(), Some("worker-0-1-force"));
        // An explicit pull policy, and the helpers' own service account (no token mounted).
        assert_eq!(container.image.as_deref(), Some("baremend:dev"));
        assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            spec.service_account_name.as_deref(),
            Some("baremend-drift-helper")
        );
        assert_eq!(spec.automount_service_account_token, Some(false));
    }

    const DIGEST: &str = "sha256:6f1c4a9e8d2b7f3c0a5e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a";

    #[test]
    fn only_an_image_named_by_digest_is_pinned() {
        assert!(pinned_by_digest(&format!("quay.io/acme/baremend@{DIGEST}")));
        assert!(pinned_by_digest(&format!(
            "registry:5000/baremend@{DIGEST}"
        )));
        for image in [
            "baremend",
            "baremend:latest",
            "quay.io/acme/baremend:v1",
            &format!("@{DIGEST}"),
            "baremend@sha256:abc",
            &format!("baremend@{}", DIGEST.to_uppercase()),
            &format!("baremend@sha512:{}", &DIGEST[7..]),
            &format!("bare mend@{DIGEST}"),
        ] {
            assert!(!pinned_by_digest(image), "{image}");
        }
    }

    #[test]
    fn a_tag_is_pinned_to_the_digest_its_container_runs() {
        let running = |image: &str, id: &str| pinned_to_running(image, id);
        let id = format!("quay.io/acme/baremend@{DIGEST}");
        assert_eq!(
            running("quay.io/acme/baremend:v1", &id),
            Some(format!("quay.io/acme/baremend@{DIGEST}"))
        );
        // The runtime's spelling of the repository is not the one the pod spec pulls.
        assert_eq!(
            running(
                "registry:5000/baremend:latest",
                &format!("docker-pullable://registry:5000/baremend@{DIGEST}")
            ),
            Some(format!("registry:5000/baremend@{DIGEST}"))
        );
        assert_eq!(
            running("registry:5000/baremend", &id),
            Some(format!("registry:5000/baremend@{DIGEST}"))
        );
        // Already pinned: kept as it is.
        let pinned = format!("quay.io/acme/baremend@{DIGEST}");
        assert_eq!(running(&pinned, "whatever"), Some(pinned.clone()));
        // No digest to pin to.
        assert_eq!(running("baremend:latest", DIGEST), None);
        assert_eq!(running("baremend:latest", "baremend@sha256:abc"), None);
    }

    #[test]
    fn an_install_helper_reads_its_content_from_a_mounted_secret() {
        let op = HelperOp::Install {
            path: "/etc/a".into(),
            mode: 0o600,
            sha256: "ab".into(),
        };
        let pod = pod(&target(), &op);
        let text = serde_json::to_string(&pod).unwrap();
        assert!(
            text.contains("\"secretName\":\"worker-0-1-install\""),
            "{text}"
        );
        assert!(text.contains("--mode\",\"0600\""), "{text}");
        let secret = content_secret(&target(), &op, b"secret bytes".to_vec());
        assert_eq!(secret.metadata.name.as_deref(), Some("worker-0-1-install"));
        // The content is in the Secret, not in the pod.
        assert!(!text.contains("secret bytes"));
    }
}
