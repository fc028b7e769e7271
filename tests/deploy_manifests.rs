//! deploy/: every manifest parses into its typed k8s-openapi struct and says what an operator
//! relies on; the alerts and the dashboard use only metrics the controller exports; and the
//! RBAC rules are exactly what the controller's API requests need, checked against every
//! request of an end-to-end run recorded by the simulated API server. (kubectl applies the
//! whole folder in tests/kubectl_install_apiserver.rs.)

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use baremend::api::{DriftPhase, Remediation, RemediationPhase};
use baremend::drift::controller::HelperPods;
use baremend::drift::helper::HELPER_SERVICE_ACCOUNT;
use baremend::leader::LeaseConfig;
use baremend::metrics::access::{Access::Allowed, Gate, KubeReviewer};
use baremend::remediation::controller::ControllerOptions;
use baremend::run::run_elected;
use baremend::runtime::SystemClock;
use baremend_sim::apiserver::{ApiServer, AuditRecord};
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::MACHINE_NAMESPACE;
use baremend_sim::cluster::local::{Gvr, NODES};
use baremend_sim::cluster::mco::disk::SimFile;
use baremend_sim::cluster::timing::Timing;
use baremend_sim::tls::TestCa;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use baremend_testkit as common;

use common::eventually;
use common::lab::Lab;

const CONFIG_MAPS: Gvr = Gvr {
    group: "",
    version: "v1",
    plural: "configmaps",
};

/// The folders of deploy/ that every install applies (or creates once: policies.yaml): the
/// base and the monitoring component. The health checks' components are in
/// tests/kubectl_install_apiserver.rs.
const INSTALLED: [&str; 3] = ["deploy", "deploy/base", "deploy/components/monitoring"];

/// Every YAML document of what every install applies, with the file it came from.
fn documents() -> Vec<(String, Value)> {
    let mut all = Vec::new();
    let root = common::repo_root();
    let files = INSTALLED
        .iter()
        .flat_map(|dir| common::yaml_files(&root.join(dir)));
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for value in common::yaml_documents(&text) {
            all.push((file_name(&path), value));
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
            "Kustomization" | "Component" => {}
            "Namespace" => drop(typed::<Namespace>(&file, &value)),
            "ServiceAccount" => drop(typed::<ServiceAccount>(&file, &value)),
            "ClusterRole" => drop(typed::<ClusterRole>(&file, &value)),
            "ClusterRoleBinding" => drop(typed::<ClusterRoleBinding>(&file, &value)),
            "Role" => drop(typed::<Role>(&file, &value)),
            "RoleBinding" => drop(typed::<RoleBinding>(&file, &value)),
            "Service" => drop(typed::<Service>(&file, &value)),
            "Secret" => drop(typed::<Secret>(&file, &value)),
            "Deployment" => drop(typed::<Deployment>(&file, &value)),
            "ValidatingAdmissionPolicy" => drop(typed::<ValidatingAdmissionPolicy>(&file, &value)),
            "ValidatingAdmissionPolicyBinding" => {
                drop(typed::<ValidatingAdmissionPolicyBinding>(&file, &value))
            }
            // The Prometheus Operator's kinds have no k8s-openapi type: their shape is
            // checked where they are used below.
            "ServiceMonitor" | "PrometheusRule" => {}
            "RemediationPolicy" => drop(typed::<baremend::api::RemediationPolicy>(&file, &value)),
            "DriftPolicy" => drop(typed::<baremend::api::DriftPolicy>(&file, &value)),
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
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ServiceMonitor",
        "PrometheusRule",
        "RemediationPolicy",
        "DriftPolicy",
    ] {
        assert!(kinds.contains(expected), "no {expected} in deploy/");
    }
}

#[test]
fn the_shipped_policies_start_the_first_day_in_dry_run_and_observe() {
    use baremend::api::{DriftMode, DriftPolicy, RemediationMode, RemediationPolicy};
    let remediation: Vec<RemediationPolicy> = of_kind("RemediationPolicy")
        .iter()
        .map(|v| typed("policies.yaml", v))
        .collect();
    let drift: Vec<DriftPolicy> = of_kind("DriftPolicy")
        .iter()
        .map(|v| typed("policies.yaml", v))
        .collect();
    // One of each, named as the controller reads it.
    assert_eq!(remediation.len(), 1);
    assert_eq!(drift.len(), 1);
    assert_eq!(remediation[0].metadata.name.as_deref(), Some("default"));
    assert_eq!(drift[0].metadata.name.as_deref(), Some("default"));
    assert_eq!(remediation[0].spec.mode, RemediationMode::DryRun);
    assert!(!remediation[0].spec.paused);
    assert_eq!(drift[0].spec.mode, DriftMode::Observe);
    // Created once, outside the kustomization (an upgrade's `apply -k` must not switch a
    // cluster that remediates back to dry run), and the guide shows how to create and switch.
    let kustomization =
        std::fs::read_to_string(common::repo_root().join("deploy/base/kustomization.yaml"))
            .unwrap();
    assert!(
        !kustomization.contains("- policies.yaml"),
        "{kustomization}"
    );
    // Created in the install guide, switched in the operations guide.
    let guide = ["docs/guides/install.md", "docs/guides/operate.md"]
        .map(|f| std::fs::read_to_string(common::repo_root().join(f)).unwrap())
        .join("\n");
    for switch in [
        "kubectl create -f deploy/policies.yaml",
        r#"kubectl patch remediationpolicy default --type merge -p '{"spec":{"mode":"Remediate"}}'"#,
        r#"kubectl patch driftpolicy default --type merge -p '{"spec":{"mode":"Remediate"}}'"#,
    ] {
        assert!(guide.contains(switch), "the guides lack {switch}");
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
    // The probes: plain HTTP on their own port (the kubelet has no token); /metrics on
    // HTTPS on another.
    let port_of = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        probe.clone().unwrap().http_get.unwrap().port
    };
    let probes = IntOrString::String("probes".into());
    assert_eq!(port_of(&container.liveness_probe), probes);
    assert_eq!(port_of(&container.readiness_probe), probes);
    let ports: Vec<(String, i32)> = container
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
        .collect();
    assert!(ports.contains(&("probes".into(), 8081)), "{ports:?}");
    assert!(ports.contains(&("https-metrics".into(), 8443)), "{ports:?}");
    for arg in [
        "--probe-listen=0.0.0.0:8081",
        "--metrics-listen=0.0.0.0:8443",
    ] {
        assert!(args.iter().any(|a| a == arg), "{arg} missing: {args:?}");
    }
}

#[test]
fn the_metrics_certificate_is_the_service_cas_mounted_where_baremend_reads_it() {
    let deployment: Deployment = typed("deployment.yaml", &of_kind("Deployment")[0]);
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap();
    let dir = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-cert-dir="))
        .expect("--metrics-cert-dir");
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == dir)
        .expect("a volume mounted at the certificate directory");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    let secret = volume.secret.clone().unwrap().secret_name.unwrap();
    let service: Service = typed("service.yaml", &of_kind("Service")[0]);
    let annotations = service.metadata.annotations.unwrap();
    assert_eq!(
        annotations
            .get("service.beta.openshift.io/serving-cert-secret-name")
            .map(String::as_str),
        Some(secret.as_str()),
        "the service CA writes the Secret the pod mounts"
    );
}

#[test]
fn the_service_monitor_scrapes_https_with_a_token_allowed_to_get_metrics() {
    let monitor = &of_kind("ServiceMonitor")[0];
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["scheme"], "https");
    // The endpoint's port is a port of the Service, on the container's HTTPS port.
    let service: Service = typed("service.yaml", &of_kind("Service")[0]);
    let spec = service.spec.unwrap();
    let port = spec
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == endpoint["port"].as_str())
        .expect("the ServiceMonitor's port on the Service");
    assert_eq!(
        port.target_port,
        Some(IntOrString::String("https-metrics".into()))
    );
    // The certificate is verified for the Service's DNS name, with the service CA.
    let name = service.metadata.name.unwrap();
    let namespace = service.metadata.namespace.unwrap();
    let tls = &endpoint["tlsConfig"];
    assert_eq!(tls["serverName"], format!("{name}.{namespace}.svc"));
    assert_eq!(tls["ca"]["configMap"]["name"], "openshift-service-ca.crt");
    assert_ne!(tls["insecureSkipVerify"], true);
    // No file access (user-workload monitoring refuses it): the token comes from a Secret.
    assert!(endpoint.get("bearerTokenFile").is_none() && tls.get("caFile").is_none());
    assert_eq!(endpoint["authorization"]["type"], "Bearer");
    let secret_name = endpoint["authorization"]["credentials"]["name"]
        .as_str()
        .unwrap();
    let secret: Secret = of_kind("Secret")
        .iter()
        .map(|v| typed::<Secret>("serviceaccount.yaml", v))
        .find(|s| s.metadata.name.as_deref() == Some(secret_name))
        .expect("the token Secret in deploy/");
    assert_eq!(
        secret.type_.as_deref(),
        Some("kubernetes.io/service-account-token")
    );
    let account =
        secret.metadata.annotations.unwrap()["kubernetes.io/service-account.name"].clone();
    // That account may get /metrics, and nothing else.
    let granted = grants(&account);
    assert!(!granted.is_empty(), "{account} is bound to nothing");
    for g in &granted {
        assert!(
            g.rule.resources.is_none() && g.rule.api_groups.is_none(),
            "{account} may touch resources"
        );
        assert_eq!(g.rule.non_resource_urls, Some(vec!["/metrics".to_string()]));
        assert_eq!(g.rule.verbs, vec!["get".to_string()]);
    }
}

#[test]
fn the_controller_pods_fit_openshift_restricted_v2_with_no_fixed_uid() {
    let deployment: Deployment = typed("deployment.yaml", &of_kind("Deployment")[0]);
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    // restricted-v2 assigns the UID and GID from the namespace's range (MustRunAsRange) and
    // refuses any other; the pod asks only for a non-root user and the runtime's seccomp.
    let security = pod.security_context.clone().unwrap();
    assert_eq!(security.run_as_user, None, "a fixed UID");
    assert_eq!(security.run_as_group, None, "a fixed GID");
    assert_eq!(security.fs_group, None, "a fixed fsGroup");
    assert_eq!(security.supplemental_groups, None);
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.seccomp_profile.unwrap().type_, "RuntimeDefault");
    for host in [pod.host_network, pod.host_pid, pod.host_ipc] {
        assert_ne!(host, Some(true), "a host namespace");
    }
    assert!(
        pod.volumes.iter().flatten().all(|v| v.host_path.is_none()),
        "a hostPath volume"
    );
    for container in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let security = container.security_context.clone().unwrap();
        assert_ne!(security.privileged, Some(true), "{}", container.name);
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(
            security.run_as_user, None,
            "{}: a fixed UID",
            container.name
        );
        assert_eq!(
            security.run_as_group, None,
            "{}: a fixed GID",
            container.name
        );
        let capabilities = security.capabilities.unwrap();
        assert_eq!(capabilities.drop, Some(vec!["ALL".to_string()]));
        assert!(capabilities.add.unwrap_or_default().is_empty());
        for port in container.ports.iter().flatten() {
            assert_eq!(port.host_port, None, "{}: a host port", container.name);
        }
    }
    // Pod Security admission in the namespace admits the privileged helpers and reports
    // anything below restricted; OpenShift keeps these labels and sets no node selector.
    let namespace: Namespace = typed("namespace.yaml", &of_kind("Namespace")[0]);
    let labels = namespace.metadata.labels.unwrap();
    for (key, value) in [
        ("pod-security.kubernetes.io/enforce", "privileged"),
        ("pod-security.kubernetes.io/audit", "restricted"),
        ("pod-security.kubernetes.io/warn", "restricted"),
        ("security.openshift.io/scc.podSecurityLabelSync", "false"),
    ] {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    let annotations = namespace.metadata.annotations.unwrap();
    assert_eq!(
        annotations
            .get("openshift.io/node-selector")
            .map(String::as_str),
        Some("")
    );
}

/// `kubectl kustomize` of a folder, as YAML documents.
fn kustomize(dir: &Path) -> Vec<Value> {
    let output = std::process::Command::new(common::kubectl::binaries().kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs");
    let (out, err) = common::texts(&output);
    assert!(output.status.success(), "kubectl kustomize {dir:?}:\n{err}");
    common::yaml_documents(&out)
}

/// The controller container's image and pull policy, and the helper pods' (its environment).
fn rendered_images(documents: &[Value]) -> [(String, String); 2] {
    let deployment = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env = |name: &str| {
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .unwrap_or_else(|| panic!("no {name}"))
            .to_string()
    };
    [
        (
            container["image"].as_str().unwrap().to_string(),
            container["imagePullPolicy"].as_str().unwrap().to_string(),
        ),
        (env("BAREMEND_IMAGE"), env("BAREMEND_IMAGE_PULL_POLICY")),
    ]
}

/// The image the helpers' admission policy holds for the controller's (the string literal of
/// its variable `controllerImage`).
fn admitted_image(documents: &[Value]) -> String {
    let policy = documents
        .iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .expect("the helpers' admission policy");
    let expression = policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "controllerImage")
        .and_then(|v| v["expression"].as_str())
        .expect("a variable controllerImage");
    expression
        .strip_prefix('\'')
        .and_then(|e| e.strip_suffix('\''))
        .unwrap_or_else(|| panic!("not a string literal: {expression}"))
        .to_string()
}

/// A copy of deploy/'s base in `dir/deploy/base` (kustomize takes a base by relative path
/// only).
fn copy_of_base(dir: &Path) -> std::path::PathBuf {
    common::copy_of_deploy(dir).join("base")
}

#[test]
fn the_image_is_named_once_in_the_kustomization_and_reaches_the_helper_pods() {
    // Only the Deployment's container names an image, by the name `images:` replaces.
    let deploy = common::repo_root().join("deploy/base");
    for (file, value) in documents() {
        let text = serde_json::to_string(&value).unwrap();
        let images = text.matches("\"image\":").count();
        let expected = usize::from(value["kind"] == "Deployment");
        assert_eq!(images, expected, "{file}: {text}");
        if value["kind"] == "Kustomization" {
            let entries = value["images"].as_array().expect("an images: entry");
            assert_eq!(entries.len(), 1, "{entries:?}");
            assert_eq!(entries[0]["name"], "baremend");
        }
    }
    let deployment = &of_kind("Deployment")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"], "baremend",
        "the name `images:` replaces"
    );

    // As shipped: the helpers get the container's image and pull policy.
    let rendered = kustomize(&deploy);
    let [controller, helpers] = rendered_images(&rendered);
    assert_eq!(
        controller,
        ("baremend:latest".into(), "IfNotPresent".into())
    );
    assert_eq!(helpers, controller);
    // ... and the helpers' admission policy holds the controller's image.
    assert_eq!(admitted_image(&rendered), controller.0);

    // Pushed elsewhere, by digest, always pulled: one edit of the kustomization (and of the
    // pull policy) reaches the helpers too.
    let copy = copy_of_base(&common::scratch("deploy-copy"));
    let digest = "sha256:6f1c4a9e8d2b7f3c0a5e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a";
    let kustomization = std::fs::read_to_string(copy.join("kustomization.yaml"))
        .unwrap()
        .replace(
            "    newName: baremend\n    newTag: latest\n",
            &format!("    newName: registry.example/ops/baremend\n    digest: {digest}\n"),
        );
    assert!(
        kustomization.contains(digest),
        "the images: entry changed shape"
    );
    std::fs::write(copy.join("kustomization.yaml"), kustomization).unwrap();
    let deployment = std::fs::read_to_string(copy.join("deployment.yaml"))
        .unwrap()
        .replace("imagePullPolicy: IfNotPresent", "imagePullPolicy: Always");
    std::fs::write(copy.join("deployment.yaml"), deployment).unwrap();
    let pushed = format!("registry.example/ops/baremend@{digest}");
    let rendered = kustomize(&copy);
    let [controller, helpers] = rendered_images(&rendered);
    assert_eq!(controller, (pushed.clone(), "Always".into()));
    assert_eq!(helpers, controller);
    assert_eq!(admitted_image(&rendered), pushed);

    // An overlay that sets its own image repeats the replacements (docs/guides/install.md says so).
    let scratch = common::scratch("overlay");
    copy_of_base(&scratch);
    let overlay = scratch.join("overlay");
    std::fs::create_dir(&overlay).unwrap();
    let base: Value =
        serde_yaml::from_str(&std::fs::read_to_string(deploy.join("kustomization.yaml")).unwrap())
            .unwrap();
    let overlay_kustomization = json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../deploy/base"],
        "images": [{"name": "baremend", "newName": "registry.example/ops/baremend", "newTag": "v2"}],
        "replacements": base["replacements"],
    });
    std::fs::write(
        overlay.join("kustomization.yaml"),
        serde_yaml::to_string(&overlay_kustomization).unwrap(),
    )
    .unwrap();
    let rendered = kustomize(&overlay);
    let [controller, helpers] = rendered_images(&rendered);
    assert_eq!(controller.0, "registry.example/ops/baremend:v2");
    assert_eq!(helpers, controller);
    assert_eq!(admitted_image(&rendered), controller.0);
}

#[test]
fn the_containerfile_builds_amd64_and_arm64_with_ca_roots_and_documents_its_arguments() {
    let root = common::repo_root();
    let containerfile = std::fs::read_to_string(root.join("deploy/Containerfile")).unwrap();
    let instructions: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect();
    let stages: Vec<&&str> = instructions
        .iter()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(stages.len(), 2, "{stages:?}");
    // The build stage runs on the build machine and cross-compiles for the target.
    assert!(
        stages[0].starts_with("FROM --platform=$BUILDPLATFORM ")
            && stages[0].ends_with(" AS build"),
        "{}",
        stages[0]
    );
    assert_eq!(*stages[1], "FROM scratch");
    let final_stage: Vec<&str> = instructions
        .iter()
        .skip_while(|l| **l != "FROM scratch")
        .copied()
        .collect();
    // CA roots in the image, where rustls-native-certs looks (SSL_CERT_FILE says so too).
    let roots = "/etc/ssl/certs/ca-certificates.crt";
    assert!(
        final_stage.contains(&format!("COPY --from=build {roots} {roots}").as_str()),
        "{final_stage:?}"
    );
    assert!(final_stage.contains(&format!("ENV SSL_CERT_FILE={roots}").as_str()));
    assert!(final_stage.contains(&"COPY --from=build /baremend /usr/local/bin/baremend"));
    // A numeric non-root user (runAsNonRoot can check it; OpenShift replaces it).
    let user = final_stage
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric USER");
    assert_ne!(uid, 0);
    // Both architectures, each to its musl target, built without the lab and simulators.
    let script = std::fs::read_to_string(root.join("deploy/build-binary.sh")).unwrap();
    for mapping in [
        "amd64) target=x86_64-unknown-linux-musl",
        "arm64) target=aarch64-unknown-linux-musl",
        "amd64) packages=\"$packages gcc-x86-64-linux-gnu",
        "arm64) packages=\"$packages gcc-aarch64-linux-gnu",
    ] {
        assert!(
            script.contains(mapping) || containerfile.contains(mapping),
            "{mapping}"
        );
    }
    assert!(script.contains("cargo build --release --locked --no-default-features"));
    assert!(containerfile.contains("deploy/build-binary.sh \"${TARGETARCH"));
    let refused = std::process::Command::new("sh")
        .arg(root.join("deploy/build-binary.sh"))
        .args(["riscv64", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        common::texts(&refused)
            .1
            .contains("unsupported architecture 'riscv64'")
    );
    // The build context leaves the build output out.
    let ignored = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    assert!(ignored.lines().any(|l| l == "/target"));
    // Every build argument is documented, and so is that no test builds the image.
    let guide = std::fs::read_to_string(root.join("docs/guides/install.md")).unwrap();
    let arguments: Vec<&str> = instructions
        .iter()
        .filter_map(|l| l.strip_prefix("ARG "))
        .map(|a| a.split('=').next().unwrap())
        .collect();
    assert!(arguments.contains(&"TARGETARCH") && arguments.contains(&"RUST_IMAGE"));
    for argument in arguments {
        assert!(
            guide.contains(&format!("`{argument}`")),
            "docs/guides/install.md: {argument}"
        );
    }
    assert!(guide.contains("linux/amd64,linux/arm64"));
    let fidelity = std::fs::read_to_string(root.join("docs/engineering/fidelity.md")).unwrap();
    assert!(fidelity.contains("no container runtime"));
}

#[test]
fn the_image_and_the_deployment_carry_cargos_version_and_the_image_exposes_the_deployments_ports() {
    let root = common::repo_root();
    let version = env!("CARGO_PKG_VERSION");
    let containerfile = std::fs::read_to_string(root.join("deploy/Containerfile")).unwrap();
    let instructions: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .skip_while(|l| *l != "FROM scratch")
        .collect();
    assert!(
        instructions.contains(&format!("ARG VERSION={version}").as_str()),
        "{instructions:?}"
    );
    for label in [
        "org.opencontainers.image.version=\"${VERSION}\"",
        "org.opencontainers.image.revision=\"${REVISION}\"",
        "org.opencontainers.image.licenses=\"Apache-2.0\"",
    ] {
        assert!(containerfile.contains(label), "{label}");
    }
    // The ports are the Deployment's container ports, no other.
    let deployment: Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("deploy/base/deployment.yaml")).unwrap(),
    )
    .unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut ports: Vec<String> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].to_string())
        .collect();
    ports.sort();
    let mut exposed: Vec<String> = instructions
        .iter()
        .filter_map(|l| l.strip_prefix("EXPOSE "))
        .flat_map(|l| l.split_whitespace().map(str::to_string))
        .collect();
    exposed.sort();
    assert_eq!(exposed, ports);
    // The version label on the Deployment and its pods, never in the selector (a selector
    // cannot change on upgrade).
    for labels in [
        &deployment["metadata"]["labels"],
        &deployment["spec"]["template"]["metadata"]["labels"],
    ] {
        assert_eq!(labels["app.kubernetes.io/version"], version);
    }
    assert!(deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/version"].is_null());
    // The binary says the same version.
    let said = std::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .arg("--version")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&said.stdout).into_owned();
    assert!(said.starts_with(&format!("baremend {version}")), "{said}");
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
    let exported = common::prometheus::all_exported_metrics();
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
        &std::fs::read_to_string(
            common::repo_root().join("deploy/components/monitoring/dashboard.json"),
        )
        .unwrap(),
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

/// What deploy/ grants the service account `baremend/<account>`.
fn grants(account: &str) -> Vec<Granted> {
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
    let to_account = |subjects: &Option<Vec<Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount"
                && s.name == account
                && s.namespace.as_deref() == Some("baremend")
        })
    };
    let mut granted = Vec::new();
    for value in of_kind("ClusterRoleBinding") {
        let binding: ClusterRoleBinding = typed("rbac.yaml", &value);
        if !to_account(&binding.subjects) {
            continue;
        }
        for rule in rules_of(&binding.role_ref.kind, &binding.role_ref.name) {
            granted.push(Granted {
                rule,
                namespace: None,
            });
        }
    }
    for value in of_kind("RoleBinding") {
        let binding: RoleBinding = typed("rbac.yaml", &value);
        if !to_account(&binding.subjects) {
            continue;
        }
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
    (
        "remediation.medik8s.io",
        "nodehealthchecks",
        "list",
        "served only with the Node Health Check Operator (the run without Machines calls it)",
    ),
    (
        "baremend.io",
        "noderemediationtemplates/status",
        "patch",
        "only with NodeHealthChecks: the template's condition (the run without Machines writes it)",
    ),
    (
        "remediation.medik8s.io",
        "nodehealthchecks",
        "watch",
        "served only with the Node Health Check Operator (the run without Machines calls it)",
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rbac_rules_are_exactly_what_the_controller_calls() {
    // The reboot API first; worker-1 is detached, so it escalates to its BMC over Redfish and
    // HTTPS, verified with the CA bundle its annotation names (a ConfigMap).
    let policy = json!({
        "strategies": ["BareMetalHostRebootApi", "DirectBmc"],
        "timeouts": {"readyGraceSeconds": 0, "powerOffSeconds": 2},
        "retention": {"keepFinished": 1},
        // The test makes the NodeHealthCheck's request itself (no NodeHealthCheck names the
        // namespace).
        "trust": {"requestNamespaces": ["workload-availability"]},
        // Not a storm test: on two busy cores a Node's 100 ms heartbeats can lapse past their
        // 600 ms grace, and the health check then marks a healthy worker, which beside the
        // test's own requests made a storm once that held master-0 (CI, 2026-11-30).
        "storm": {"maxUnhealthyPercent": 100},
    });
    let spec = ClusterSpec {
        timing: Timing::fast(),
        // With a Machine Config Operator: the drift coordinator's calls are checked too.
        mco: true,
        ..ClusterSpec::default()
    };
    let lab = Lab::builder(spec)
        .policy(policy)
        // A debounce of 3 s: the test takes the drifted node's daemon down within it.
        .drift_policy(json!({"debounceSeconds": 3, "retention": {"keepFinished": 1}}))
        .start()
        .await;
    // Earlier failures an operator asked to retry (the retries mark them, a patch), and
    // older finished attempts (retention deletes them).
    let retry = json!({"baremend.io/retry": "true"});
    lab.seed_remediation("worker-1", 1, "Failed", retry.clone());
    lab.seed_drift_remediation("worker-2", 1, "Succeeded", json!({}));
    lab.seed_drift_remediation("worker-2", 2, "Failed", retry);
    lab.detach("worker-1");
    // The other remediators' kinds are served: the ForeignRemediation gate lists them.
    lab.serve_foreign_remediations();
    let ca = TestCa::generate("rbac test BMC CA").unwrap();
    let (_tls_bmc, address) = lab.tls_bmc("worker-1", &ca).await;
    lab.api
        .create(
            CONFIG_MAPS,
            MACHINE_NAMESPACE,
            json!({"metadata": {"name": "bmc-ca"}, "data": {"ca.crt": ca.ca_pem()}}),
        )
        .unwrap();
    lab.merge_host(
        "worker-1",
        json!({"annotations": {"baremend.io/bmc-ca-bundle": "ConfigMap/bmc-ca"}}),
        json!({"address": address}),
    );
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
    // A HostBmc from a namespace the policy does not trust: refused on its status.
    lab.api
        .create(
            baremend_sim::cluster::local::NAMESPACES,
            "",
            json!({"metadata": {"name": "tenant-a"}}),
        )
        .unwrap();
    lab.api
        .create(
            baremend_sim::cluster::local::HOST_BMCS,
            "tenant-a",
            json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc", "metadata": {"name": "theirs"},
                "spec": {"nodeName": "elsewhere", "address": "ipmi://127.0.0.1:1", "credentialsName": "theirs"}}),
        )
        .unwrap();
    let server = lab.cluster.api_server();
    server.record_requests();
    let options = ControllerOptions {
        drift_helpers: Some(HelperPods::new(baremend::lab::setup::LAB_HELPER_IMAGE)),
        ..lab.options()
    };
    let controller = tokio::spawn(run_elected(
        lab.controller_client.clone(),
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
    // A scrape of /metrics: its caller's TokenReview and SubjectAccessReview, made as the
    // endpoint makes them.
    let scraper = "system:serviceaccount:baremend:baremend-metrics-reader";
    let token = server.mint_token(scraper, &["system:serviceaccounts"]);
    // What deploy/base/rbac.yaml grants the scraper's account is in the cluster: the lab applied
    // it. The reviews are made with the controller's own rights.
    let reviewer = Arc::new(KubeReviewer::new(lab.controller_client.clone()));
    let gate = Gate::new(reviewer, Arc::new(SystemClock), Duration::from_secs(60));
    let mut headers = axum::http::HeaderMap::new();
    headers.insert(
        axum::http::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    assert_eq!(gate.check(&headers).await, Allowed);
    // Read through the store: the test's own reads must not count as the controller's.
    let phase = |r: Remediation| r.status.map(|s| s.phase);
    lab.cluster.hang("worker-0");
    assert_eq!(
        phase(lab.ended("worker-0-1").await),
        Some(RemediationPhase::Succeeded)
    );
    // worker-1 through a health check's request instead of the annotation.
    let machine = lab
        .api
        .get(
            baremend_sim::cluster::local::MACHINES,
            MACHINE_NAMESPACE,
            "worker-1",
        )
        .unwrap();
    lab.api
        .create(
            baremend_sim::cluster::local::MACHINE_REMEDIATIONS,
            MACHINE_NAMESPACE,
            json!({
                "metadata": {"name": "worker-1", "ownerReferences": [{
                    "apiVersion": "machine.openshift.io/v1beta1", "kind": "Machine",
                    "name": "worker-1", "uid": machine["metadata"]["uid"],
                }]},
                "spec": {},
            }),
        )
        .unwrap();
    assert_eq!(
        phase(lab.ended("worker-1-2").await),
        Some(RemediationPhase::Succeeded)
    );
    // The health check withdraws its request once the Machine is healthy; so does the test.
    lab.api
        .delete(
            baremend_sim::cluster::local::MACHINE_REMEDIATIONS,
            MACHINE_NAMESPACE,
            "worker-1",
            None,
        )
        .unwrap();
    // master-0 through a NodeHealthCheck's request, named after its Node.
    lab.api
        .create(
            baremend_sim::cluster::local::NAMESPACES,
            "",
            json!({"metadata": {"name": "workload-availability"}}),
        )
        .unwrap();
    lab.api
        .create(
            NODE_REMEDIATIONS,
            "workload-availability",
            json!({"metadata": {"name": "master-0"}, "spec": {}}),
        )
        .unwrap();
    assert_eq!(
        phase(lab.ended("master-0-1").await),
        Some(RemediationPhase::Succeeded)
    );
    // Config drift on worker-2, force-reapplied through the MCO. Its daemon is held down while
    // the forcefile is requested, so that the coordinator watches its helper (a `get` of the
    // helper's Pod) whatever the load: on two busy cores the daemon could otherwise take the
    // forcefile before any pass looked, and the helper's Pod was never read (CI, 2026-11-30).
    let mco = lab.cluster.mco().unwrap().clone();
    lab.cluster
        .disk("worker-2")
        .unwrap()
        .put("/etc/demo/rules.json", SimFile::regular(b"[]", 0o644));
    lab.reach("worker-2-3", DriftPhase::Debouncing).await;
    mco.set_daemon_down("worker-2", true);
    lab.reach("worker-2-3", DriftPhase::ForceRequested).await;
    eventually(
        "the force helper's Pod read",
        Duration::from_secs(30),
        async || {
            used(server)
                .iter()
                .any(|a| a.resource == "pods" && a.verb == "get")
        },
    )
    .await;
    mco.set_daemon_down("worker-2", false);
    lab.reach("worker-2-3", DriftPhase::Succeeded).await;
    let granted = grants("baremend");
    // The calls that come last (the Lease's renewals, every 500 ms) may not have come yet.
    eventually(
        "a call for every grant",
        // A positive wait: it ends at the first look that finds them all. Two busy cores and
        // the binary's other tests can hold the drift coordinator's first status write back;
        // in a full run beside the chaos seeds (52 s since invariant 13) its helper Pod's
        // first read came later than 30 s once (2026-11-30; 7.7 s alone).
        Duration::from_secs(60),
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
            "the controller needs {access:?}, which deploy/base/rbac.yaml does not grant"
        );
    }
    // And nothing is granted that no call needs.
    let unneeded = unneeded(&granted, &used);
    assert!(unneeded.is_empty(), "{}", unneeded.join("\n"));
}

#[test]
fn only_the_drift_helpers_account_may_use_the_privileged_scc_and_nothing_else() {
    let scc = |granted: &Granted| {
        granted
            .rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == "securitycontextconstraints")
    };
    // The controller's pods fit restricted-v2: its account may use no SCC at all.
    let controller = grants("baremend");
    assert!(!controller.is_empty());
    assert!(!controller.iter().any(scc), "the controller may use an SCC");
    // The helpers' account: exactly `use` of `privileged`, only in the helper namespace.
    let helpers = grants(HELPER_SERVICE_ACCOUNT);
    assert_eq!(helpers.len(), 1, "the helpers' account has other grants");
    let rule = &helpers[0].rule;
    assert_eq!(helpers[0].namespace.as_deref(), Some("baremend"));
    assert_eq!(
        rule.api_groups,
        Some(vec!["security.openshift.io".to_string()])
    );
    assert_eq!(
        rule.resources,
        Some(vec!["securitycontextconstraints".to_string()])
    );
    assert_eq!(rule.resource_names, Some(vec!["privileged".to_string()]));
    assert_eq!(rule.verbs, vec!["use".to_string()]);
    // The account exists, mounts no token, and is the one the helper pods name.
    let account = of_kind("ServiceAccount")
        .into_iter()
        .map(|v| typed::<ServiceAccount>("serviceaccount.yaml", &v))
        .find(|a| a.metadata.name.as_deref() == Some(HELPER_SERVICE_ACCOUNT))
        .expect("the helpers' ServiceAccount in deploy/");
    assert_eq!(account.metadata.namespace.as_deref(), Some("baremend"));
    assert_eq!(account.automount_service_account_token, Some(false));
    assert_eq!(
        HelperPods::new("any").service_account,
        HELPER_SERVICE_ACCOUNT
    );
}

#[test]
fn the_install_guide_explains_every_granted_permission() {
    let guide =
        std::fs::read_to_string(common::repo_root().join("docs/guides/install.md")).unwrap();
    let section = guide
        .split("## Every permission, and why")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the permissions section of docs/guides/install.md");
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ")).collect();
    let rules: Vec<PolicyRule> = of_kind("ClusterRole")
        .iter()
        .flat_map(|v| {
            typed::<ClusterRole>("rbac.yaml", v)
                .rules
                .unwrap_or_default()
        })
        .chain(
            of_kind("Role")
                .iter()
                .flat_map(|v| typed::<Role>("rbac.yaml", v).rules.unwrap_or_default()),
        )
        .collect();
    assert!(rules.len() > 10);
    for rule in rules {
        for resource in rule.resources.iter().flatten() {
            for verb in &rule.verbs {
                // A row naming the resource, with the verb as a word of its own.
                let explained = rows.iter().any(|row| {
                    row.contains(&format!("`{resource}`"))
                        && row
                            .split(|c: char| !c.is_ascii_alphanumeric())
                            .any(|word| word == verb)
                });
                assert!(
                    explained,
                    "docs/guides/install.md does not explain {verb} on {resource}"
                );
            }
        }
    }
}

/// baremend's NodeHealthCheck requests.
const NODE_REMEDIATIONS: baremend_sim::cluster::local::Gvr = baremend_sim::cluster::local::Gvr {
    group: "baremend.io",
    version: "v1alpha1",
    plural: "noderemediations",
};

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
                            "deploy/base/rbac.yaml grants {verb} on {group}/{resource}, which no call needs"
                        ));
                    }
                }
            }
        }
    }
    unneeded
}

/// What `deploy/components/cluster-api/rbac-cluster-api.yaml` grants (one ClusterRole, bound to the
/// controller's account there).
fn cluster_api_grants() -> Vec<Granted> {
    let path = common::repo_root().join("deploy/components/cluster-api/rbac-cluster-api.yaml");
    let documents = common::yaml_documents(&std::fs::read_to_string(path).unwrap());
    let binding: ClusterRoleBinding = documents
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .map(|d| typed("rbac-cluster-api.yaml", d))
        .expect("a ClusterRoleBinding");
    assert!(
        binding
            .subjects
            .iter()
            .flatten()
            .any(|s| s.kind == "ServiceAccount"
                && s.name == "baremend"
                && s.namespace.as_deref() == Some("baremend"))
    );
    // Only the role bound to the controller: the example's other ClusterRole is the Cluster
    // API manager's (aggregated into its role), not baremend's.
    documents
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == binding.role_ref.name)
        .flat_map(|d| {
            typed::<ClusterRole>("rbac-cluster-api.yaml", d)
                .rules
                .unwrap_or_default()
        })
        .map(|rule| Granted {
            rule,
            namespace: None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_cluster_api_the_controller_calls_only_what_the_rbac_and_its_cluster_api_example_grant()
{
    let spec = ClusterSpec {
        timing: Timing::fast(),
        cluster_api: true,
        ..ClusterSpec::default()
    };
    let mut lab = Lab::builder(spec)
        .policy(json!({"timeouts": {"readyGraceSeconds": 0}}))
        .start()
        .await;
    lab.api
        .create(
            baremend_sim::cluster::local::MACHINE_REMEDIATION_TEMPLATES,
            MACHINE_NAMESPACE,
            json!({"metadata": {"name": "baremend"}, "spec": {"template": {"spec": {}}}}),
        )
        .unwrap();
    lab.cluster.api_server().record_requests();
    let options = ControllerOptions {
        machine_api: baremend::api::slim::MachineApi::ClusterApi,
        ..lab.options()
    };
    lab.start_controller(options);
    lab.cluster.hang("worker-0");
    let done = lab.ended("worker-0-1").await;
    assert_eq!(
        done.status.map(|s| s.phase),
        Some(RemediationPhase::Succeeded)
    );
    let used = used(lab.cluster.api_server());
    let extra = cluster_api_grants();
    let mut granted = grants("baremend");
    granted.extend(cluster_api_grants());
    for access in &used {
        assert!(
            granted.iter().any(|g| allows(g, access)),
            "on Cluster API the controller needs {access:?}, which neither deploy/base/rbac.yaml nor the example grants"
        );
    }
    // Every extra grant is called for, but the deletion of a Machine (deleteMachineOnFailure,
    // as for OpenShift's Machines), the read of a Cluster, made only for a Machine whose Node
    // is in a workload cluster (tests/workload_clusters_e2e.rs runs with these grants), and
    // the read of a Metal3Machine, made only when no host of the cache claims it
    // (tests/trust_attacks_e2e.rs) and by `baremend check` (tests/check_cli.rs).
    for g in &extra {
        for group in g.rule.api_groups.iter().flatten() {
            for resource in g.rule.resources.iter().flatten() {
                let unused_here = |verb: &str| {
                    verb == "delete" || resource == "clusters" || resource == "metal3machines"
                };
                for verb in g.rule.verbs.iter().filter(|v| !unused_here(v)) {
                    assert!(
                        used.iter().any(|a| a.group == *group
                            && a.resource == *resource
                            && a.verb == *verb),
                        "{verb} {group}/{resource} is granted and never called"
                    );
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_without_machines_the_controller_calls_only_what_the_rbac_grants() {
    // Platform none: a NodeHealthCheck asks for a Node, its HostBmc names the BMC.
    let spec = ClusterSpec {
        timing: Timing::fast(),
        platform_none: true,
        node_health_check: true,
        ..ClusterSpec::default()
    };
    let mut lab = Lab::builder(spec)
        .policy(json!({"timeouts": {"readyGraceSeconds": 0}}))
        .start()
        .await;
    lab.baremend_node_template();
    lab.cluster.api_server().record_requests();
    lab.start_controller(lab.options());
    lab.cluster.hang("worker-0");
    let done = lab.ended("worker-0-1").await;
    assert_eq!(
        done.status.map(|s| s.phase),
        Some(RemediationPhase::Succeeded)
    );
    assert_eq!(done.spec.host_bmc.as_deref(), Some("worker-0"));
    let used = used(lab.cluster.api_server());
    let granted = grants("baremend");
    for access in &used {
        assert!(
            granted.iter().any(|g| allows(g, access)),
            "without Machines the controller needs {access:?}, which deploy/base/rbac.yaml does not grant"
        );
    }
    // What this run is about was called: the Node's Events, the HostBmc's Secret, the request,
    // and the NodeHealthChecks watched (one disabled would be told; the template's condition is
    // written False on the first look).
    for (group, resource, verb) in [
        ("remediation.medik8s.io", "nodehealthchecks", "list"),
        ("remediation.medik8s.io", "nodehealthchecks", "watch"),
        ("baremend.io", "noderemediationtemplates/status", "patch"),
        ("events.k8s.io", "events", "create"),
        ("", "secrets", "get"),
        ("baremend.io", "noderemediations/status", "patch"),
        ("baremend.io", "remediations", "create"),
    ] {
        assert!(
            used.iter()
                .any(|a| a.group == group && a.resource == resource && a.verb == verb),
            "{verb} {group}/{resource} never called: {used:?}"
        );
    }
}
