//! kubectl (the pinned v1.36.3, a real client) and its kustomize applying what we ship — our
//! CRDs and their printer columns, every documented combination of `deploy/`'s bases and
//! components, the OpenShift overlay and every example of the install guide — to the
//! simulated API server and to a real kube-apiserver (each test runs on both).

use baremend_testkit as common;
use baremend_testkit::on_both_servers;

use common::kubectl::{
    cluster, cluster_on, documented_kustomizations, established, install_prerequisites,
    own_kustomization,
};
use common::servers::ServerKind;

async fn our_crds_apply_and_remediations_print_machine_node_phase_strategy_and_age(
    server: ServerKind,
) {
    let c = cluster_on(server).await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let out = c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    let files = std::fs::read_dir(&crds)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    assert!(files >= 5, "{files} CRD files");
    assert_eq!(out.matches("created").count(), files, "{out}");
    established(&c).await;
    c.ok(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: baremend.io/v1alpha1\nkind: Remediation\nmetadata:\n  name: worker-1-1\n  namespace: default\nspec:\n  machineName: worker-1\n  nodeName: worker-1\n",
        ),
    )
    .await;
    let table = c.ok(&["get", "brem"], None).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "MACHINE", "NODE", "PHASE", "SINCE", "STRATEGY", "AGE"
        ]
    );
    assert!(
        table.contains("worker-1-1   worker-1   worker-1"),
        "{table}"
    );
    // Held in Pending for two hours, with an error: the time in the phase, the error wide.
    let since = "2026-01-01T00:00:00Z";
    let status = format!(
        r#"{{"status":{{"phase":"Pending","phaseSince":"{since}","lastError":"the BMC refused the login"}}}}"#
    );
    c.ok(
        &[
            "patch",
            "brem",
            "worker-1-1",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            &status,
        ],
        None,
    )
    .await;
    let wide = c.ok(&["get", "brem", "-o", "wide"], None).await;
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "MACHINE", "NODE", "PHASE", "SINCE", "STRATEGY", "ATTEMPT", "ERROR", "AGE"
        ]
    );
    let row = wide.lines().nth(1).unwrap();
    assert!(
        row.contains("Pending") && row.contains("the BMC refused the login"),
        "{wide}"
    );
    assert!(
        !row.contains("<unknown>"),
        "the phase's start prints as an age: {wide}"
    );
    // A HostBmc says whether it is used, and why not when wide.
    c.ok(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: baremend.io/v1alpha1\nkind: HostBmc\nmetadata:\n  name: worker-1\n  namespace: default\nspec:\n  nodeName: worker-1\n  address: redfish://10.0.0.9/redfish/v1/Systems/1\n  credentialsName: bmc-worker-1\n",
        ),
    )
    .await;
    let refused = r#"{"status":{"conditions":[{"type":"Accepted","status":"False","reason":"NamespaceNotTrusted","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}"#;
    c.ok(
        &[
            "patch",
            "hbmc",
            "worker-1",
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            refused,
        ],
        None,
    )
    .await;
    let hosts = c.ok(&["get", "hbmc", "-o", "wide"], None).await;
    let header: Vec<&str> = hosts.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "MACHINE", "NODE", "ADDRESS", "ACCEPTED", "REASON", "AGE"
        ]
    );
    assert!(
        hosts.contains("False") && hosts.contains("NamespaceNotTrusted"),
        "{hosts}"
    );
    // The retry of a Failed remediation as docs/guides/operate.md shows it.
    let out = c
        .ok(
            &["annotate", "brem", "worker-1-1", "baremend.io/retry=true"],
            None,
        )
        .await;
    assert!(
        out.contains("remediation.baremend.io/worker-1-1 annotated"),
        "{out}"
    );
    let value = c
        .ok(
            &[
                "get",
                "brem",
                "worker-1-1",
                "-o",
                r"jsonpath={.metadata.annotations.baremend\.io/retry}",
            ],
            None,
        )
        .await;
    assert_eq!(value.trim(), "true");
}

/// The components a kustomization names (their folder names).
fn components_of(text: &str) -> Vec<String> {
    let value: serde_json::Value = serde_yaml::from_str(text).unwrap();
    value["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.as_str()?.rsplit('/').next().map(String::from))
        .collect()
}

/// What a rendering of a documented combination must hold, whatever its components.
fn check_rendering(name: &str, documents: &[serde_json::Value]) {
    let of_kind = |kind: &str| -> Vec<&serde_json::Value> {
        documents.iter().filter(|d| d["kind"] == kind).collect()
    };
    // A NodeHealthCheck disables itself while any custom OpenShift MachineHealthCheck exists
    // (medik8s/node-healthcheck-operator, internal/mhc/checker.go `NeedDisableNHC`): no
    // documented combination holds both.
    let custom_mhcs = of_kind("MachineHealthCheck")
        .into_iter()
        .filter(|d| d["apiVersion"] == "machine.openshift.io/v1beta1")
        .count();
    let nhcs = of_kind("NodeHealthCheck").len();
    assert!(
        custom_mhcs == 0 || nhcs == 0,
        "{name}: {nhcs} NodeHealthCheck(s) beside {custom_mhcs} MachineHealthCheck(s)"
    );
    // Every health check names a template of ours that the same combination defines, or the
    // external-baremetal strategy.
    let templates: Vec<(&str, &str)> = documents
        .iter()
        .filter(|d| {
            d["kind"] == "MachineRemediationTemplate" || d["kind"] == "NodeRemediationTemplate"
        })
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    // Our kinds read as our types (a misspelt field would be dropped).
    for document in documents {
        match document["kind"].as_str().unwrap() {
            "MachineRemediationTemplate" => {
                // Read and written back, the request's spec is what was written: nothing
                // dropped (the shipped one is empty: the policy decides).
                let template: baremend::api::MachineRemediationTemplate =
                    serde_json::from_value(document.clone()).unwrap();
                assert_eq!(
                    serde_json::to_value(&template.spec.template.spec).unwrap(),
                    document["spec"]["template"]["spec"],
                    "{name}: {document}"
                );
            }
            "NodeRemediationTemplate" => {
                let _: baremend::api::NodeRemediationTemplate =
                    serde_json::from_value(document.clone()).unwrap();
            }
            _ => {}
        }
    }
    let defined = |reference: &serde_json::Value| {
        reference["apiVersion"] == "baremend.io/v1alpha1"
            && templates.iter().any(|(kind, template)| {
                reference["kind"] == *kind && reference["name"] == *template
            })
    };
    for check in of_kind("MachineHealthCheck") {
        let template = &check["spec"]["remediationTemplate"];
        assert!(
            defined(template)
                || check["metadata"]["annotations"]["machine.openshift.io/remediation-strategy"]
                    == "external-baremetal",
            "{name}: {check}"
        );
    }
    for check in of_kind("NodeHealthCheck") {
        let first = &check["spec"]["escalatingRemediations"][0]["remediationTemplate"];
        assert!(defined(first), "{name}: {check}");
    }
    // The BMC credentials' RoleBinding stays where the Secrets are.
    let binding = of_kind("RoleBinding")
        .into_iter()
        .find(|b| b["metadata"]["name"] == "baremend-bmc-credentials")
        .expect("the BMC credentials' RoleBinding");
    assert_eq!(
        binding["metadata"]["namespace"], "openshift-machine-api",
        "{name}"
    );
    // The drift helpers run the controller's image.
    let deployment = of_kind("Deployment")[0];
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let helper_image = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "BAREMEND_IMAGE")
        .map(|e| e["value"].clone());
    assert_eq!(helper_image, Some(container["image"].clone()), "{name}");
}

async fn kubectl_applies_the_openshift_overlay_and_creates_the_policies_once(server: ServerKind) {
    let c = cluster_on(server).await;
    let root = common::repo_root();
    install_prerequisites(&c).await;
    let overlay = root.join("deploy/overlays/openshift");
    let out = c
        .ok(&["apply", "-k", overlay.to_str().unwrap()], None)
        .await;
    for object in [
        "namespace/baremend created",
        "serviceaccount/baremend created",
        "serviceaccount/baremend-drift-helper created",
        "role.rbac.authorization.k8s.io/baremend-drift-helper created",
        "rolebinding.rbac.authorization.k8s.io/baremend-drift-helper created",
        "clusterrole.rbac.authorization.k8s.io/baremend created",
        "clusterrole.rbac.authorization.k8s.io/baremend-ext-remediation created",
        "rolebinding.rbac.authorization.k8s.io/baremend-bmc-credentials created",
        "role.rbac.authorization.k8s.io/baremend-leader-election created",
        "configmap/baremend-dashboard created",
        "service/baremend-metrics created",
        "serviceaccount/baremend-metrics-reader created",
        "secret/baremend-metrics-reader-token created",
        "clusterrole.rbac.authorization.k8s.io/baremend-metrics-reader created",
        "clusterrolebinding.rbac.authorization.k8s.io/baremend-metrics-reader created",
        "deployment.apps/baremend created",
        "validatingadmissionpolicy.admissionregistration.k8s.io/baremend-drift-helpers created",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/baremend-drift-helpers created",
        "validatingadmissionpolicy.admissionregistration.k8s.io/baremend-records created",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/baremend-records created",
        "servicemonitor.monitoring.coreos.com/baremend created",
        "prometheusrule.monitoring.coreos.com/baremend created",
        "role.rbac.authorization.k8s.io/baremend-prometheus-k8s created",
        "rolebinding.rbac.authorization.k8s.io/baremend-prometheus-k8s created",
        "machinehealthcheck.machine.openshift.io/baremend-workers created",
        "machinehealthcheck.machine.openshift.io/baremend-control-plane created",
        "machineremediationtemplate.baremend.io/baremend created",
    ] {
        assert!(out.contains(object), "missing {object:?} in:\n{out}");
    }
    assert!(
        !out.contains("remediationpolicy") && !out.contains("driftpolicy"),
        "the policies are created apart: {out}"
    );
    // Platform monitoring: the namespace is labelled for it.
    let label = c
        .ok(
            &[
                "get",
                "namespace",
                "baremend",
                "-o",
                r"jsonpath={.metadata.labels.openshift\.io/cluster-monitoring}",
            ],
            None,
        )
        .await;
    assert_eq!(label.trim(), "true");
    let policies = root.join("deploy/policies.yaml");
    let created = c
        .ok(&["create", "-f", policies.to_str().unwrap()], None)
        .await;
    for object in [
        "remediationpolicy.baremend.io/default created",
        "driftpolicy.baremend.io/default created",
    ] {
        assert!(
            created.contains(object),
            "missing {object:?} in:\n{created}"
        );
    }
    // The first day's policies: cluster-scoped, in DryRun and Observe, the rest defaulted by
    // the schema.
    for (kind, mode) in [("remediationpolicy", "DryRun"), ("driftpolicy", "Observe")] {
        let spec = c
            .ok(
                &["get", kind, "default", "-o", "jsonpath={.spec.mode}"],
                None,
            )
            .await;
        assert_eq!(spec.trim(), mode, "{kind}");
    }
    // `kubectl get` shows the mode (and whether it is paused) in a column. (The other columns
    // read fields left to the schema's defaults, which the simulated server does not fill in:
    // docs/engineering/simulators.md.)
    let table = c.ok(&["get", "brpol,bdpol"], None).await;
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.iter().any(|r| r.starts_with(&[
            "remediationpolicy.baremend.io/default",
            "DryRun",
            "false"
        ])),
        "{table}"
    );
    assert!(
        rows.iter()
            .any(|r| r.starts_with(&["driftpolicy.baremend.io/default", "Observe"])),
        "{table}"
    );
    // Switched to remediate, a second apply (an upgrade) changes nothing, and the policies
    // cannot be created over.
    c.merge_policy(&serde_json::json!({"spec": {"mode": "Remediate"}}))
        .await;
    let again = c
        .ok(&["apply", "-k", overlay.to_str().unwrap()], None)
        .await;
    assert!(
        !again.contains("configured") && !again.contains("created"),
        "{again}"
    );
    let (ok, _, err) = c
        .kubectl(&["create", "-f", policies.to_str().unwrap()], None)
        .await;
    assert!(!ok && err.contains("AlreadyExists"), "{err}");
    let mode = policy_mode(&c).await;
    assert_eq!(mode.trim(), "Remediate");
    let replicas = c
        .ok(
            &[
                "get",
                "deployment",
                "baremend",
                "-n",
                "baremend",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
            None,
        )
        .await;
    assert_eq!(replicas.trim(), "2");
}

async fn kubectl_applies_every_documented_combination_of_base_and_components(server: ServerKind) {
    let root = common::repo_root();
    let components: Vec<String> = std::fs::read_dir(root.join("deploy/components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(components.len(), 6, "{components:?}");
    // The shipped overlay (the README's quick start) and every kustomization the guide shows.
    let overlay_text =
        std::fs::read_to_string(root.join("deploy/overlays/openshift/kustomization.yaml")).unwrap();
    let overlay = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../baremend/deploy/overlays/openshift\n";
    let mut combinations = vec![("deploy/overlays/openshift".to_string(), overlay.to_string())];
    for (index, text) in documented_kustomizations().into_iter().enumerate() {
        combinations.push((
            format!("docs/guides/install.md kustomization #{}", index + 1),
            text,
        ));
    }
    assert!(combinations.len() >= 5, "{}", combinations.len());
    let mut used = std::collections::BTreeSet::new();
    let mut roles = Vec::new();
    for (name, text) in &combinations {
        let c = cluster_on(server).await;
        install_prerequisites(&c).await;
        let mine = own_kustomization(&c.dir, text);
        let mine = mine.to_str().unwrap();
        let rendered = common::yaml_documents(&c.ok(&["kustomize", mine], None).await);
        check_rendering(name, &rendered);
        // The components named, and those the OpenShift overlay brings when it is named.
        let mut named = components_of(text);
        if text.contains("deploy/overlays/openshift") {
            named.extend(components_of(&overlay_text));
        }
        for component in &named {
            assert!(components.contains(component), "{name}: {component}");
        }
        let exclusive =
            |a: &str, b: &str| !(named.iter().any(|n| n == a) && named.iter().any(|n| n == b));
        assert!(
            exclusive("nodehealthcheck", "machine-api-annotation"),
            "{name}"
        );
        assert!(
            exclusive("nodehealthcheck", "machine-api-template"),
            "{name}"
        );
        assert!(exclusive("cluster-api", "machine-api-annotation"), "{name}");
        assert!(exclusive("cluster-api", "machine-api-template"), "{name}");
        used.extend(named.iter().cloned());
        // Applied: every object is created, then a second apply changes nothing.
        let out = c.ok(&["apply", "-k", mine], None).await;
        assert_eq!(
            out.matches(" created").count(),
            rendered.len(),
            "{name}: {out}"
        );
        let again = c.ok(&["apply", "-k", mine], None).await;
        assert_eq!(
            again.matches(" unchanged").count(),
            rendered.len(),
            "{name}: {again}"
        );
        // On Cluster API the controller reads Cluster API's Machines, with the rights to.
        let args = c
            .ok(
                &[
                    "get",
                    "deployment",
                    "baremend",
                    "-n",
                    "baremend",
                    "-o",
                    "jsonpath={.spec.template.spec.containers[0].args}",
                ],
                None,
            )
            .await;
        let cluster_api = named.iter().any(|n| n == "cluster-api");
        assert_eq!(
            args.contains("--machine-api=cluster-api"),
            cluster_api,
            "{name}: {args}"
        );
        let (has_role, _, _) = c
            .kubectl(&["get", "clusterrole", "baremend-cluster-api"], None)
            .await;
        assert_eq!(has_role, cluster_api, "{name}");
        // Monitoring only where the component is.
        let (monitored, _, _) = c
            .kubectl(
                &["get", "prometheusrule", "baremend", "-n", "baremend"],
                None,
            )
            .await;
        assert_eq!(monitored, named.iter().any(|n| n == "monitoring"), "{name}");
        for check in rendered.iter().filter(|d| {
            d["kind"] == "MachineHealthCheck" && d["apiVersion"] == "machine.openshift.io/v1beta1"
        }) {
            let role = check["spec"]["selector"]["matchLabels"]
                ["machine.openshift.io/cluster-api-machine-role"]
                .as_str()
                .unwrap()
                .to_string();
            // The control plane one at a time.
            if role == "master" {
                assert_eq!(check["spec"]["maxUnhealthy"], 1, "{check}");
            }
            roles.push(role);
        }
    }
    // Every component is in some documented combination; workers and the control plane each
    // have a health check in one (infra Machines in deploy/examples/).
    let unused: Vec<&String> = components.iter().filter(|c| !used.contains(*c)).collect();
    assert!(unused.is_empty(), "never documented: {unused:?}");
    roles.sort();
    roles.dedup();
    assert_eq!(roles, ["master", "worker"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_refuses_a_node_health_check_beside_a_custom_machine_health_check() {
    // A NodeHealthCheck disables itself while any custom MachineHealthCheck exists
    // (medik8s/node-healthcheck-operator, internal/mhc/checker.go `NeedDisableNHC`): the
    // components refuse to be built together, in either order, and from the overlay too.
    let c = cluster().await;
    let kustomization = |resource: &str, components: &[&str]| {
        let mut text = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../baremend/deploy/{resource}\ncomponents:\n"
        );
        for component in components {
            text.push_str(&format!("  - ../baremend/deploy/components/{component}\n"));
        }
        text
    };
    let refused = [
        kustomization("base", &["nodehealthcheck", "machine-api-annotation"]),
        kustomization("base", &["machine-api-annotation", "nodehealthcheck"]),
        kustomization("base", &["nodehealthcheck", "machine-api-template"]),
        kustomization("base", &["machine-api-template", "nodehealthcheck"]),
        kustomization("overlays/openshift", &["nodehealthcheck"]),
    ];
    for (index, text) in refused.iter().enumerate() {
        let mine = own_kustomization(&c.dir.join(format!("refused-{index}")), text);
        let (ok, _, err) = c
            .kubectl(&["kustomize", mine.to_str().unwrap()], None)
            .await;
        assert!(!ok, "{text}");
        assert!(
            err.contains("a-nodehealthcheck-disables-itself-beside-any-custom-machinehealthcheck"),
            "{text}: {err}"
        );
    }
    // Each alone builds.
    for text in [
        kustomization("base", &["nodehealthcheck"]),
        kustomization("base", &["machine-api-annotation"]),
        kustomization("base", &["machine-api-template"]),
    ] {
        let mine = own_kustomization(&c.dir.join("allowed"), &text);
        c.ok(&["kustomize", mine.to_str().unwrap()], None).await;
    }
    // The two machine-api ones hold health checks of the same names: one per Machine, never
    // the annotation beside the template (which would let the legacy remediation act).
    for text in [
        kustomization("base", &["machine-api-annotation", "machine-api-template"]),
        kustomization("overlays/openshift", &["machine-api-annotation"]),
    ] {
        let mine = own_kustomization(&c.dir.join("both"), &text);
        let (ok, _, err) = c
            .kubectl(&["kustomize", mine.to_str().unwrap()], None)
            .await;
        assert!(!ok, "{text}");
        assert!(
            err.contains("MachineHealthCheck") && err.contains("baremend-workers"),
            "{text}: {err}"
        );
    }
}

async fn kubectl_applies_every_example_of_the_install_guide(server: ServerKind) {
    let c = cluster_on(server).await;
    let root = common::repo_root();
    install_prerequisites(&c).await;
    c.ok(&["create", "namespace", "baremend"], None).await;
    let files = common::yaml_files(&root.join("deploy/examples"));
    assert!(files.len() >= 3, "{files:?}");
    let guide = std::fs::read_to_string(root.join("docs/guides/install.md")).unwrap();
    let mut templates = Vec::new();
    let mut health_checks = Vec::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            guide.contains(&format!("deploy/examples/{name}")),
            "docs/guides/install.md does not show {name}"
        );
        let documents = common::yaml_documents(&std::fs::read_to_string(file).unwrap());
        let out = c.ok(&["apply", "-f", file.to_str().unwrap()], None).await;
        assert_eq!(
            out.matches(" created").count(),
            documents.len(),
            "{name}: {out}"
        );
        // A second apply changes nothing.
        let again = c.ok(&["apply", "-f", file.to_str().unwrap()], None).await;
        assert_eq!(
            again.matches(" unchanged").count(),
            documents.len(),
            "{again}"
        );
        for document in documents {
            match document["kind"].as_str().unwrap() {
                "MachineHealthCheck" => health_checks.push(document),
                // Our kinds must read as our types (a misspelt field would be dropped).
                "HostBmc" => {
                    let host: baremend::api::HostBmc =
                        serde_json::from_value(document.clone()).unwrap();
                    assert!(host.spec.ca_bundle_ref.is_some(), "{document}");
                    assert!(!host.spec.insecure_skip_verify);
                }
                "MachineRemediationTemplate" => {
                    let template: baremend::api::MachineRemediationTemplate =
                        serde_json::from_value(document.clone()).unwrap();
                    assert_ne!(
                        template.spec.template.spec.overrides,
                        baremend::api::PolicyOverrides::default(),
                        "{document}"
                    );
                    templates.push(template.metadata.name.unwrap_or_default());
                }
                _ => {}
            }
        }
    }
    // A Cluster API health check and an OpenShift one, each naming a template of ours that
    // the examples define.
    let versions: Vec<&str> = health_checks
        .iter()
        .map(|c| c["apiVersion"].as_str().unwrap())
        .collect();
    assert_eq!(
        versions,
        ["cluster.x-k8s.io/v1beta1", "machine.openshift.io/v1beta1"]
    );
    for check in &health_checks {
        let template = &check["spec"]["remediationTemplate"];
        assert_eq!(template["kind"], "MachineRemediationTemplate", "{check}");
        assert!(
            templates.iter().any(|t| template["name"] == t.as_str()),
            "{check}"
        );
    }
}

/// The mode of the RemediationPolicy `default`.
async fn policy_mode(c: &common::kubectl::Cluster) -> String {
    let args = [
        "get",
        "remediationpolicy",
        "default",
        "-o",
        "jsonpath={.spec.mode}",
    ];
    c.ok(&args, None).await.trim().to_owned()
}

/// A policy that leaves `mode` out is a dry run, and one that misspells it is refused by
/// kubectl's strict field validation (the server names the unknown field): neither is live.
async fn a_policy_without_a_mode_is_a_dry_run_and_a_misspelled_mode_is_refused(server: ServerKind) {
    let c = cluster_on(server).await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    established(&c).await;
    let policy = |spec: &str| {
        format!(
            "apiVersion: baremend.io/v1alpha1\nkind: RemediationPolicy\nmetadata:\n  name: default\nspec:\n{spec}"
        )
    };
    let (ok, out, err) = c
        .kubectl(&["apply", "-f", "-"], Some(&policy("  mdoe: Remediate\n")))
        .await;
    assert!(!ok, "a misspelled field was accepted: {out}");
    assert!(err.contains(r#"unknown field "spec.mdoe""#), "{err}");
    c.ok(&["apply", "-f", "-"], Some(&policy("  paused: false\n")))
        .await;
    let mode = policy_mode(&c).await;
    assert_eq!(mode, "DryRun");
}

/// deploy/'s records policy (`deploy/base/records-admission.yaml`), judged by each server's
/// own CEL: only the controller's account creates a Remediation or DriftRemediation or writes
/// their status; an administrator may abort a DriftRemediation and label a record, never
/// retarget one.
async fn only_the_controller_writes_its_records(server: ServerKind) {
    let c = cluster_on(server).await;
    let root = common::repo_root();
    c.ok(&["apply", "-f", root.join("crds").to_str().unwrap()], None)
        .await;
    established(&c).await;
    // Records an earlier controller left, made before the policy exists.
    let drift = "apiVersion: baremend.io/v1alpha1\nkind: DriftRemediation\nmetadata:\n  name: worker-2-1\nspec:\n  nodeName: worker-2\n  kind: Content\n  target: /etc/demo/rules.json\n  action: Force\n";
    c.ok(&["create", "-f", "-"], Some(drift)).await;
    let policy = root.join("deploy/base/records-admission.yaml");
    c.ok(&["apply", "-f", policy.to_str().unwrap()], None).await;
    let forged = "apiVersion: baremend.io/v1alpha1\nkind: Remediation\nmetadata:\n  name: worker-0-1\n  namespace: default\nspec:\n  machineName: worker-0\n";
    // A policy takes effect once the server has compiled it: asked until it refuses.
    common::eventually(
        "the records policy refuses an administrator's Remediation",
        std::time::Duration::from_secs(30),
        async || {
            let (ok, out, err) = c.kubectl(&["create", "-f", "-"], Some(forged)).await;
            if ok {
                c.ok(
                    &["delete", "remediation", "worker-0-1", "-n", "default"],
                    None,
                )
                .await;
                return Err(format!("created: {out}"));
            }
            match err.contains("only baremend's controller creates Remediations") {
                true => Ok(()),
                false => Err(err),
            }
        },
    )
    .await;
    let patch = |body: &'static str, status: bool| {
        let mut args = vec![
            "patch",
            "driftremediation",
            "worker-2-1",
            "--type",
            "merge",
            "-p",
            body,
        ];
        if status {
            args.extend(["--subresource", "status"]);
        }
        args
    };
    let (ok, _, err) = c
        .kubectl(&patch(r#"{"spec":{"nodeName":"worker-0"}}"#, false), None)
        .await;
    assert!(!ok, "an administrator retargeted a DriftRemediation");
    assert!(
        err.contains("only spec.abort of a DriftRemediation"),
        "{err}"
    );
    let (ok, _, err) = c
        .kubectl(&patch(r#"{"status":{"phase":"Succeeded"}}"#, true), None)
        .await;
    assert!(!ok, "an administrator wrote a record's status");
    assert!(err.contains("writes the status of its records"), "{err}");
    c.ok(&patch(r#"{"spec":{"abort":true}}"#, false), None)
        .await;
    c.ok(
        &patch(r#"{"metadata":{"labels":{"team":"infra"}}}"#, false),
        None,
    )
    .await;
    c.ok(&["delete", "driftremediation", "worker-2-1"], None)
        .await;
}

on_both_servers!(
    only_the_controller_writes_its_records,
    our_crds_apply_and_remediations_print_machine_node_phase_strategy_and_age,
    kubectl_applies_the_openshift_overlay_and_creates_the_policies_once,
    kubectl_applies_every_documented_combination_of_base_and_components,
    kubectl_applies_every_example_of_the_install_guide,
    a_policy_without_a_mode_is_a_dry_run_and_a_misspelled_mode_is_refused,
);
