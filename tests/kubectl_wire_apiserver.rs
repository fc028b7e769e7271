//! kubectl (the pinned v1.36.3, a real client) and kube-rs on the simulated API server's wire formats:
//! aggregated discovery and protobuf bodies for every built-in kind kubectl creates.

use baremend_testkit as common;

use common::kubectl::cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_come_from_aggregated_discovery() {
    let c = cluster().await;
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    c.ok(&["apply", "-f", crds.to_str().unwrap()], None).await;
    // A fresh cache, so that this run discovers everything anew.
    let cache = c.dir.join("api-resources-cache");
    c.sim().record_requests();
    let out = c
        .ok(
            &["api-resources", "--cache-dir", cache.to_str().unwrap()],
            None,
        )
        .await;
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    for expected in [
        vec!["pods", "po", "v1", "true", "Pod"],
        vec!["nodes", "no", "v1", "false", "Node"],
        vec![
            "poddisruptionbudgets",
            "pdb",
            "policy/v1",
            "true",
            "PodDisruptionBudget",
        ],
        vec![
            "hostbmcs",
            "hbmc",
            "baremend.io/v1alpha1",
            "true",
            "HostBmc",
        ],
    ] {
        assert!(
            rows.contains(&expected),
            "{expected:?} missing from:\n{out}"
        );
    }
    // kubectl 1.32 asks for aggregated discovery first: `/api` and `/apis` answer everything,
    // and no group-version is fetched one by one.
    let discovery: Vec<String> = c
        .sim()
        .recorded_requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(discovery.iter().any(|p| p == "/apis"), "{discovery:?}");
    assert!(
        !discovery
            .iter()
            .any(|p| p.starts_with("/api/") || p.starts_with("/apis/")),
        "legacy discovery was used: {discovery:?}"
    );
    // Every group-version has its APIService, printed with the real server's columns.
    let services = c.ok(&["get", "apiservices"], None).await;
    let header: Vec<&str> = services
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "SERVICE", "AVAILABLE", "AGE"]);
    for name in ["v1.", "v1.apps", "v1alpha1.baremend.io"] {
        assert!(
            services
                .lines()
                .any(|l| l.split_whitespace().take(3).eq([name, "Local", "True"])),
            "{name} missing:\n{services}"
        );
    }
}

/// Every `kubectl create <kind>` form (kubectl's typed clients send each object in protobuf,
/// and read the answer in protobuf), in the context's namespace (no `-n`) and with `-n`,
/// printing what kubectl prints against a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_makes_every_built_in_kind_in_protobuf() {
    let c = cluster().await;
    c.ok(&["create", "namespace", "demo"], None).await;
    for namespace in [None, Some("demo")] {
        // Cluster-scoped kinds get a name per round.
        let suffix = if namespace.is_some() { "-n" } else { "" };
        let forms: Vec<(Vec<String>, String)> = [
            (
                "pdb guarded --selector=app=guarded --min-available=1",
                "poddisruptionbudget.policy/guarded",
            ),
            (
                "deployment web --image=nginx:1.27 --replicas=2",
                "deployment.apps/web",
            ),
            (
                "secret generic creds --from-literal=password=s3cr3t",
                "secret/creds",
            ),
            ("service clusterip web --tcp=80:8080", "service/web"),
            (
                "role reader --verb=get,list --resource=pods",
                "role.rbac.authorization.k8s.io/reader",
            ),
            (
                "rolebinding readers --role=reader --user=alice",
                "rolebinding.rbac.authorization.k8s.io/readers",
            ),
            (
                "configmap settings --from-literal=a=1",
                "configmap/settings",
            ),
            ("serviceaccount robot", "serviceaccount/robot"),
            (
                "quota compute --hard=pods=10,requests.cpu=4",
                "resourcequota/compute",
            ),
            ("job once --image=busybox -- date", "job.batch/once"),
            (
                "cronjob nightly --image=busybox --schedule=0_2_*_*_*",
                "cronjob.batch/nightly",
            ),
            (
                &format!("clusterrole viewer{suffix} --verb=get --resource=nodes"),
                &format!("clusterrole.rbac.authorization.k8s.io/viewer{suffix}"),
            ),
            (
                &format!(
                    "clusterrolebinding viewers{suffix} --clusterrole=viewer{suffix} --group=devs"
                ),
                &format!("clusterrolebinding.rbac.authorization.k8s.io/viewers{suffix}"),
            ),
            (
                &format!("priorityclass high{suffix} --value=1000 --description=important"),
                &format!("priorityclass.scheduling.k8s.io/high{suffix}"),
            ),
            (
                &format!("namespace made{suffix}"),
                &format!("namespace/made{suffix}"),
            ),
        ]
        .iter()
        .map(|(form, printed)| {
            // The schedule's spaces are underscores above, to split the form on spaces.
            let words = form.split(' ').map(|w| w.replace('_', " ")).collect();
            (words, format!("{printed} created"))
        })
        .collect();
        for (words, printed) in forms {
            let mut args: Vec<&str> = Vec::new();
            if let Some(namespace) = namespace {
                args.extend(["-n", namespace]);
            }
            args.push("create");
            args.extend(words.iter().map(String::as_str));
            let out = c.ok(&args, None).await;
            assert_eq!(out.trim(), printed, "kubectl {args:?}");
        }
        let expected = namespace.unwrap_or("default");
        for (kind, name) in [
            ("pdb", "guarded"),
            ("deployment", "web"),
            ("secret", "creds"),
            ("service", "web"),
            ("role", "reader"),
            ("rolebinding", "readers"),
            ("configmap", "settings"),
            ("serviceaccount", "robot"),
            ("quota", "compute"),
            ("job", "once"),
            ("cronjob", "nightly"),
        ] {
            let mut args = vec!["get", kind, name, "-o", "jsonpath={.metadata.namespace}"];
            if let Some(namespace) = namespace {
                args.extend(["-n", namespace]);
            }
            assert_eq!(c.ok(&args, None).await, expected, "{kind} {name}");
        }
    }
    // What the typed clients sent arrived whole (read back as JSON).
    let spec = |kind: &'static str, name: &'static str, path: &'static str| {
        let c = &c;
        async move {
            c.ok(
                &[
                    "-n",
                    "demo",
                    "get",
                    kind,
                    name,
                    "-o",
                    &format!("jsonpath={path}"),
                ],
                None,
            )
            .await
        }
    };
    assert_eq!(
        spec(
            "pdb",
            "guarded",
            "{.spec.minAvailable}/{.spec.selector.matchLabels.app}"
        )
        .await,
        "1/guarded"
    );
    assert_eq!(
        spec(
            "deployment",
            "web",
            "{.spec.replicas}/{.spec.template.spec.containers[0].image}/{.metadata.generation}"
        )
        .await,
        "2/nginx:1.27/1"
    );
    assert_eq!(
        spec(
            "service",
            "web",
            "{.spec.ports[0].port}/{.spec.ports[0].targetPort}/{.spec.type}"
        )
        .await,
        "80/8080/ClusterIP"
    );
    assert_eq!(
        spec(
            "rolebinding",
            "readers",
            "{.roleRef.kind}/{.roleRef.name}/{.subjects[0].name}"
        )
        .await,
        "Role/reader/alice"
    );
    assert_eq!(
        spec(
            "quota",
            "compute",
            "{.spec.hard.pods}/{.spec.hard.requests\\.cpu}"
        )
        .await,
        "10/4"
    );
    assert_eq!(
        spec(
            "job",
            "once",
            "{.spec.template.spec.containers[0].command[0]}/{.spec.template.spec.restartPolicy}"
        )
        .await,
        "date/Never"
    );
    assert_eq!(
        spec("cronjob", "nightly", "{.spec.schedule}").await,
        "0 2 * * *"
    );
    assert_eq!(
        c.ok(
            &[
                "get",
                "priorityclass",
                "high-n",
                "-o",
                "jsonpath={.value}/{.description}"
            ],
            None
        )
        .await,
        "1000/important"
    );
    // Already there: the same refusal as from a real server (kubectl's `create pdb` wraps it
    // in "failed to create poddisruptionbudgets").
    let (ok, _, err) = c
        .kubectl(
            &[
                "create",
                "pdb",
                "guarded",
                "--selector=app=guarded",
                "--min-available=1",
            ],
            None,
        )
        .await;
    assert!(
        !ok && err.contains("poddisruptionbudgets.policy \"guarded\" already exists"),
        "{err}"
    );
}

/// `kubectl create -o yaml` prints the server's answer, which its typed client asked and read
/// in protobuf; it matches what `kubectl get -o yaml` reads in JSON. kube-rs reads the same
/// PodDisruptionBudget back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_round_trips_through_protobuf_and_kube_reads_it() {
    let c = cluster().await;
    let fields = "jsonpath={.metadata.uid}|{.metadata.creationTimestamp}|{.metadata.namespace}|{.spec.minAvailable}|{.spec.selector.matchLabels}";
    let created = c
        .ok(
            &[
                "create",
                "pdb",
                "guarded",
                "--selector=app=guarded",
                "--min-available=1",
                "-o",
                fields,
            ],
            None,
        )
        .await;
    let read = c.ok(&["get", "pdb", "guarded", "-o", fields], None).await;
    assert_eq!(created, read);
    // The typed client did send and read protobuf (kubectl logs the exchange at -v=8).
    let (ok, _, log) = c
        .kubectl(
            &[
                "create",
                "pdb",
                "second",
                "--selector=app=x",
                "--max-unavailable=50%",
                "-v=8",
            ],
            None,
        )
        .await;
    assert!(ok, "{log}");
    // kubectl 1.36 logs the answer as `"Response" status="201 Created" headers=<…>`.
    let answer = log
        .split("status=\"201 Created\"")
        .nth(1)
        .unwrap_or_default();
    assert!(
        log.contains("Accept: application/vnd.kubernetes.protobuf")
            && answer.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{log}"
    );
    assert_eq!(
        c.ok(
            &[
                "get",
                "pdb",
                "second",
                "-o",
                "jsonpath={.spec.maxUnavailable}"
            ],
            None
        )
        .await,
        "50%"
    );
    assert!(read.contains("|default|1|{\"app\":\"guarded\"}"), "{read}");
    let yaml = c.ok(&["get", "pdb", "guarded", "-o", "yaml"], None).await;
    for line in [
        "kind: PodDisruptionBudget",
        "  minAvailable: 1",
        "      app: guarded",
        "  disruptionsAllowed: 0",
    ] {
        assert!(yaml.contains(line), "{line:?} in\n{yaml}");
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&c.sim().kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let pdbs: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        kube::Api::namespaced(client, "default");
    let pdb = pdbs.get("guarded").await.unwrap();
    let spec = pdb.spec.unwrap();
    assert_eq!(
        spec.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    assert_eq!(
        spec.selector
            .unwrap()
            .match_labels
            .unwrap()
            .get("app")
            .map(String::as_str),
        Some("guarded")
    );
    assert_eq!(pdb.status.unwrap().expected_pods, 0);
}
