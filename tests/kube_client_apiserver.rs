//! kube-rs, the client the controller uses, against the simulated API server over HTTPS with
//! a kubeconfig: typed CRUD and conflicts, the watcher across dropped watches and compaction,
//! `finalizer()`, server-side apply, the events Recorder and eviction. The controller must
//! not be able to tell this server from a real one.

use std::sync::Arc;
use std::time::Duration;

use baremend_sim::apiserver::{ApiServer, ApiServerConfig};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, finalizer, watcher};
use kube::{Client, Config, Resource};
use serde_json::json;

async fn start() -> (ApiServer, Client) {
    start_with(ApiServerConfig {
        tls: true,
        bookmark_interval: Duration::from_millis(200),
        ..ApiServerConfig::default()
    })
    .await
}

async fn start_with(config: ApiServerConfig) -> (ApiServer, Client) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server = ApiServer::start(config).await.unwrap();
    let kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    // kube retries 429/503 by itself (15 times, up to 1000 s apart) unless told not to; the
    // tests want to see the refusals, as the controller will.
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    (server, client)
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_crud_and_a_stale_replace_conflicts() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &configmap("a"))
        .await
        .unwrap();
    let mut changed = created.clone();
    changed.data = Some([("k".to_owned(), "w".to_owned())].into());
    api.replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    let error = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"))
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let missing = api.get_opt("nope").await.unwrap();
    assert!(missing.is_none());
    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_sees_every_change_across_dropped_watches_and_compaction() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    let watch_api = api.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher(watch_api, watcher::Config::default())
            .applied_objects()
            .boxed();
        // A dropped or compacted watch surfaces as an error item (410 Gone and the like)
        // before the watcher re-lists; a consumer keeps reading, as the controller's
        // backoff-wrapped streams do (the sleep is that backoff, not a wait on a condition).
        while let Some(item) = stream.next().await {
            let Ok(object) = item else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let value = object
                .data
                .as_ref()
                .and_then(|d| d.get("k").cloned())
                .unwrap_or_default();
            let _ = sender.send(format!(
                "{}={value}",
                object.metadata.name.unwrap_or_default()
            ));
        }
    });
    let mut seen = Vec::new();
    let mut expect =
        async |wanted: &str, receiver: &mut tokio::sync::mpsc::UnboundedReceiver<String>| {
            while !seen.iter().any(|s: &String| s == wanted) {
                let next = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
                    .await
                    .unwrap_or_else(|_| panic!("the watcher delivers {wanted}"))
                    .unwrap();
                seen.push(next);
            }
        };
    api.create(&PostParams::default(), &configmap("w"))
        .await
        .unwrap();
    expect("w=v", &mut receiver).await;
    server.drop_watches();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "after-drop"}})),
    )
    .await
    .unwrap();
    expect("w=after-drop", &mut receiver).await;
    server.drop_watches();
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "after-compaction"}})),
    )
    .await
    .unwrap();
    server.compact();
    expect("w=after-compaction", &mut receiver).await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_helper_adds_runs_cleanup_and_removes() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &configmap("f"))
        .await
        .unwrap();
    let run = |object: ConfigMap| {
        let api = api.clone();
        async move {
            finalizer(
                &api,
                "baremend.io/test",
                Arc::new(object),
                |event| async move {
                    match event {
                        finalizer::Event::Apply(_) | finalizer::Event::Cleanup(_) => {
                            Ok::<_, kube::Error>(kube::runtime::controller::Action::await_change())
                        }
                    }
                },
            )
            .await
        }
    };
    run(api.get("f").await.unwrap()).await.unwrap();
    assert_eq!(
        api.get("f").await.unwrap().metadata.finalizers,
        Some(vec!["baremend.io/test".to_owned()])
    );
    api.delete("f", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("f").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    run(deleting).await.unwrap();
    assert!(api.get_opt("f").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_and_conflicts_through_kube() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let apply = |manager: &'static str, value: &'static str, force: bool| {
        let api = api.clone();
        async move {
            let mut params = PatchParams::apply(manager);
            params.force = force;
            api.patch("s", &params, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}, "data": {"k": value}}))).await
        }
    };
    apply("one", "1", false).await.unwrap();
    match apply("two", "2", false).await.unwrap_err() {
        kube::Error::Api(status) => assert_eq!(status.code, 409),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced = apply("two", "2", true).await.unwrap();
    assert_eq!(forced.data.unwrap()["k"], "2");
}

fn recorder(client: &Client, instance: Option<&str>) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: "baremend".into(),
            instance: instance.map(str::to_owned),
        },
    )
}

fn event(type_: EventType, reason: &str, note: &str, action: &str) -> Event {
    Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: action.into(),
        secondary: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_publishes_events_readable_by_involved_object() {
    let (_server, client) = start().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "w0"}})).unwrap(),
        )
        .await
        .unwrap();
    let recorder = recorder(&client, Some("test"));
    let event = event(EventType::Normal, "Fenced", "host is off", "Fence");
    recorder
        .publish(&event, &node.object_ref(&()))
        .await
        .unwrap();
    recorder
        .publish(&event, &node.object_ref(&()))
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(client);
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=w0"))
        .await
        .unwrap();
    assert!(!list.items.is_empty());
    assert_eq!(list.items[0].reason.as_deref(), Some("Fenced"));
}

/// A Ready pod `p` and a budget `x` (minAvailable 1) that selects it.
async fn guarded_pod(client: Client) -> (Api<Pod>, Api<PodDisruptionBudget>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"nodeName": "w0", "containers": [{"name": "c", "image": "i"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status("p", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))).await.unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, "default");
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}})).unwrap();
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();
    (pods, pdbs)
}

/// Lets budget `x` allow every disruption (minAvailable 0).
async fn relax(pdbs: &Api<PodDisruptionBudget>) {
    pdbs.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 0}})),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_through_kube_respects_the_pdb() {
    let (_server, client) = start().await;
    let (pods, pdbs) = guarded_pod(client).await;
    match pods.evict("p", &EvictParams::default()).await.unwrap_err() {
        kube::Error::Api(status) => assert_eq!(status.code, 429),
        other => panic!("expected 429, got {other:?}"),
    }
    relax(&pdbs).await;
    pods.evict("p", &EvictParams::default()).await.unwrap();
    assert!(
        pods.get("p")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_crds_register_and_our_typed_objects_round_trip_with_status() {
    use baremend::api::{
        NodeBackup, Remediation, RemediationPhase, RemediationPolicy, RemediationSpec,
        RemediationStatus, StepTime, all_crds,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let (_server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in all_crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    // Discovery serves them at once: a typed list works.
    let remediations: Api<Remediation> = Api::namespaced(client.clone(), "default");
    assert!(
        remediations
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let mut object = Remediation::new(
        "worker-0-1",
        RemediationSpec {
            machine_name: Some("worker-0".into()),
            host_bmc: None,
            machine_uid: Some("uid-1".into()),
            node_name: Some("worker-0".into()),
            host: Some("openshift-machine-api/worker-0".into()),
            trigger: None,
        },
    );
    object.status = Some(RemediationStatus {
        phase: RemediationPhase::Succeeded,
        ..RemediationStatus::default()
    });
    let created = remediations
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    // Status is a subresource: a create does not set it.
    assert_eq!(created.status, None);

    let status = RemediationStatus {
        phase: RemediationPhase::Fenced,
        attempt: Some(1),
        strategy: Some("BareMetalHostRebootApi".into()),
        node_backup: Some(NodeBackup {
            labels: [("role".to_string(), "db".to_string())].into(),
            annotations: Default::default(),
            taints: vec![baremend::api::SavedTaint {
                key: "dedicated".into(),
                value: Some("db".into()),
                effect: "NoSchedule".into(),
            }],
        }),
        steps: vec![StepTime {
            step: "Fenced".into(),
            attempt: 1,
            time: "2026-11-21T10:00:00Z".into(),
        }],
        ..RemediationStatus::default()
    };
    remediations
        .patch_status(
            "worker-0-1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap();
    let read = remediations.get("worker-0-1").await.unwrap();
    assert_eq!(read.status, Some(status));
    assert_eq!(read.spec.machine_name.as_deref(), Some("worker-0"));

    // The cluster-scoped policy is cluster-scoped.
    let policies: Api<RemediationPolicy> = Api::all(client);
    let policy: RemediationPolicy =
        serde_json::from_value(json!({"metadata": {"name": "default"}, "spec": {}})).unwrap();
    let created = policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    assert_eq!(created.spec.max_concurrent, 1);
    assert_eq!(created.metadata.namespace, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorder_publishes_events_about_the_kubernetes_service() {
    let (_server, client) = start().await;
    // Present in every cluster, without anyone creating it.
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    let service = services.get("kubernetes").await.unwrap();
    let ports = service.spec.as_ref().and_then(|s| s.ports.clone()).unwrap();
    assert_eq!(
        (ports[0].name.as_deref(), ports[0].port),
        (Some("https"), 443)
    );
    let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
        Api::namespaced(client.clone(), "default");
    let slice = slices.get("kubernetes").await.unwrap();
    assert_eq!(slice.address_type, "IPv4");
    let recorder = recorder(&client, None);
    let event = event(EventType::Warning, "Started", "controller up", "Start");
    recorder
        .publish(&event, &service.object_ref(&()))
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=kubernetes"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "{list:?}");
    assert_eq!(
        list.items[0].involved_object.kind.as_deref(),
        Some("Service")
    );
    assert_eq!(list.items[0].reason.as_deref(), Some("Started"));
}

/// One group of a discovery, in a form both of kube's discoveries can be compared in: the
/// preferred version and, per version, each resource's kind, plural, scope and verbs with its
/// subresources' names and verbs.
fn discovery_summary(discovery: &kube::Discovery) -> Vec<String> {
    let mut summary = Vec::new();
    for group in discovery.groups_alphabetical() {
        summary.push(format!(
            "group {:?} preferred {:?}",
            group.name(),
            group.preferred_version()
        ));
        for version in group.versions() {
            let mut lines: Vec<String> = group
                .versioned_resources(version)
                .into_iter()
                .map(|(resource, caps)| {
                    let subresources: Vec<String> = caps
                        .subresources
                        .iter()
                        .map(|(sub, sub_caps)| format!("{}{:?}", sub.plural, sub_caps.operations))
                        .collect();
                    format!(
                        "{}/{} {} {} {:?} {:?} {subresources:?}",
                        resource.api_version,
                        resource.plural,
                        resource.kind,
                        resource.plural,
                        caps.scope,
                        caps.operations
                    )
                })
                .collect();
            lines.sort();
            summary.extend(lines);
        }
    }
    summary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_discovery_finds_what_the_legacy_discovery_finds() {
    use baremend::api::all_crds;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let (_server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in all_crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let aggregated = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let legacy = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert_eq!(discovery_summary(&aggregated), discovery_summary(&legacy));
    // Not two empty answers: the core group, policy and our CRDs' group are there.
    for (group, kind) in [("", "Pod"), ("policy", "PodDisruptionBudget")] {
        let found = aggregated
            .get(group)
            .and_then(|g| g.recommended_kind(kind))
            .unwrap_or_else(|| panic!("{kind} not discovered"));
        assert!(found.1.operations.iter().any(|verb| verb == "watch"));
    }
    let (_, remediation) = all_crds().into_iter().next().unwrap();
    let group = remediation.spec.group.clone();
    let kind = remediation.spec.names.kind.clone();
    assert!(
        aggregated
            .get(&group)
            .and_then(|g| g.recommended_kind(&kind))
            .is_some(),
        "{kind}.{group} not discovered"
    );
    let pods = aggregated.get("").unwrap().recommended_kind("Pod").unwrap();
    let subresources: Vec<&str> = pods
        .1
        .subresources
        .iter()
        .map(|(s, _)| s.plural.as_str())
        .collect();
    assert!(subresources.contains(&"eviction") && subresources.contains(&"status"));
}

/// The kind a metadata-only answer names (`PartialObjectMetadata` from a real server, the
/// object's own kind from a server that ignores the request).
fn partial_kind<K>(object: &kube::core::PartialObjectMeta<K>) -> String {
    object
        .types
        .as_ref()
        .map(|t| format!("{} {}", t.api_version, t.kind))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_get_patch_and_watcher() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &configmap("m"))
        .await
        .unwrap();
    let got = api.get_metadata("m").await.unwrap();
    assert_eq!(partial_kind(&got), "meta.k8s.io/v1 PartialObjectMetadata");
    assert_eq!(got.metadata.name.as_deref(), Some("m"));
    let patched = api
        .patch_metadata(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"seen": "patch"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        partial_kind(&patched),
        "meta.k8s.io/v1 PartialObjectMetadata"
    );
    assert_eq!(
        patched
            .metadata
            .labels
            .unwrap_or_default()
            .get("seen")
            .map(String::as_str),
        Some("patch")
    );

    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
    // kube's metadata watcher: an `Api` of `PartialObjectMeta` lists and watches with the
    // metadata-only media types.
    let watch_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(client, "default");
    let task = tokio::spawn(async move {
        let mut stream = watcher(watch_api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(object)) = stream.next().await {
            let label = object
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("seen").cloned())
                .unwrap_or_default();
            let _ = sender.send((partial_kind(&object), label));
        }
    });
    let initial = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
        .await
        .expect("the watcher lists")
        .unwrap();
    assert_eq!(
        initial,
        (
            "meta.k8s.io/v1 PartialObjectMetadata".to_owned(),
            "patch".to_owned()
        )
    );
    api.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"seen": "watch"}}})),
    )
    .await
    .unwrap();
    let changed = tokio::time::timeout(Duration::from_secs(10), receiver.recv())
        .await
        .expect("the watcher sees the change")
        .unwrap();
    assert_eq!(
        changed,
        (
            "meta.k8s.io/v1 PartialObjectMetadata".to_owned(),
            "watch".to_owned()
        )
    );
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_subresource_of_a_custom_resource_through_kube() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};

    let (_server, client) = start().await;
    let crd: CustomResourceDefinition = serde_json::from_value(json!({"metadata": {"name": "pools.example.com"}, "spec": {"group": "example.com", "names": {"kind": "Pool", "plural": "pools"}, "scope": "Namespaced", "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.ready"}}, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Pool"),
        "pools",
    );
    let pools: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let pool: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Pool", "metadata": {"name": "p"}, "spec": {"size": 2}})).unwrap();
    pools.create(&PostParams::default(), &pool).await.unwrap();

    let scale = pools.get_scale("p").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(scale.status.map(|s| s.replicas), Some(0));
    let scaled = pools
        .patch_scale(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.as_ref().and_then(|s| s.replicas), Some(4));
    let mut replaced = scaled.clone();
    replaced.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(1) });
    let replaced = pools
        .replace_scale("p", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(replaced.spec.and_then(|s| s.replicas), Some(1));
    // The stale Scale (its resourceVersion is before the replace) conflicts.
    let error = pools
        .replace_scale("p", &PostParams::default(), &scaled)
        .await
        .unwrap_err();
    assert!(
        matches!(error, kube::Error::Api(ref s) if s.code == 409),
        "{error:?}"
    );
    let object = pools.get("p").await.unwrap();
    assert_eq!(object.data["spec"]["size"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_rewatches_without_a_relist_when_a_lagging_watch_is_closed() {
    let (server, client) = start_with(ApiServerConfig {
        tls: true,
        watch_buffer: 64,
        ..ApiServerConfig::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &configmap("first"))
        .await
        .unwrap();
    server.record_requests();
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the watcher lists")
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("first"));
    // A change seen through the watch proves the watch is open.
    let watching = async {
        api.create(&PostParams::default(), &configmap("second"))
            .await
            .unwrap();
    };
    let (_, second) = tokio::join!(
        watching,
        tokio::time::timeout(Duration::from_secs(10), stream.next())
    );
    let second = second.expect("the watch delivers").unwrap().unwrap();
    assert_eq!(second.metadata.name.as_deref(), Some("second"));
    // The stream is not read while many large changes happen: its watch falls behind.
    let blob = "x".repeat(32 * 1024);
    let total = 1000;
    for index in 0..total {
        let object: ConfigMap = serde_json::from_value(
            json!({"metadata": {"name": format!("c{index}")}, "data": {"blob": blob}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < total {
        let item = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("the watcher delivers every change")
            .unwrap();
        let object = item.expect("no error: the closed watch is resumed, not failed");
        seen.insert(object.metadata.name.unwrap_or_default());
    }
    // The server closed the lagging watch (else one watch would have carried everything), and
    // the watcher resumed it from its last version instead of listing again.
    let requests: Vec<_> = server
        .recorded_requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/configmaps"))
        .collect();
    let lists = requests.iter().filter(|r| !r.watch).count();
    let watches = requests.iter().filter(|r| r.watch).count();
    assert_eq!(lists, 1, "{requests:?}");
    assert!(
        watches >= 2,
        "the lagging watch was not closed: {requests:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_through_kube_waits_for_the_disruption_controller() {
    let (server, client) = start().await;
    let (pods, pdbs) = guarded_pod(client).await;
    // The budget is relaxed while the disruption controller lags: the stored status still
    // describes the old spec, so the eviction is refused as "still being processed".
    server.pause_disruption_controller(true);
    relax(&pdbs).await;
    match pods.evict("p", &EvictParams::default()).await.unwrap_err() {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 429);
            let causes = status.details.map(|d| d.causes).unwrap_or_default();
            assert!(
                causes
                    .iter()
                    .any(|c| c.message.contains("still being processed")),
                "{causes:?}"
            );
        }
        other => panic!("expected 429, got {other:?}"),
    }
    server.pause_disruption_controller(false);
    pods.evict("p", &EvictParams::default()).await.unwrap();
    let stored = pdbs.get("x").await.unwrap().status.unwrap();
    assert_eq!(stored.observed_generation, Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_services_list_every_served_group_version_through_kube() {
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;

    let (_server, client) = start().await;
    let services: Vec<APIService> = Api::<APIService>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut names: Vec<String> = services
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    // The same group-versions kube's discovery finds, the core one named "v1.".
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    let mut discovered: Vec<String> = discovery
        .groups()
        .flat_map(|g| {
            g.versions()
                .map(|v| format!("{v}.{}", g.name()))
                .collect::<Vec<_>>()
        })
        .collect();
    discovered.sort();
    assert_eq!(names, discovered);
    for service in &services {
        let available = service
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Available"))
            .map(|c| (c.status.clone(), c.reason.clone()));
        assert_eq!(
            available,
            Some(("True".to_owned(), Some("Local".to_owned()))),
            "{:?}",
            service.metadata.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_request_through_kube_gives_a_token_that_authenticates() {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};

    let (server, client) = start().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // The API server's own audience: a token for another is not accepted by it.
            audiences: vec![baremend_sim::apiserver::API_AUDIENCE.into()],
            expiration_seconds: Some(900),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request("robot", &PostParams::default(), &request)
        .await
        .unwrap();
    let status = issued.status.expect("the token is in the status");
    assert!(!status.token.is_empty());
    // A client holding only that token is let in, to do what RBAC grants it (view).
    let binding: k8s_openapi::api::rbac::v1::ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "robot-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "namespace": "default", "name": "robot"}]}))
    .unwrap();
    Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(accounts.clone().into_client())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let mut kubeconfig = Kubeconfig::from_yaml(&server.kubeconfig()).unwrap();
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.token = Some(status.token.clone().into());
        }
    }
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.default_retry = false;
    let robot = Client::try_from(config).unwrap();
    let namespaces = Api::<Namespace>::all(robot.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(!namespaces.items.is_empty());
    // Deleting the account ends the token.
    accounts
        .delete("robot", &DeleteParams::default())
        .await
        .unwrap();
    match Api::<Namespace>::all(robot)
        .list(&ListParams::default())
        .await
        .unwrap_err()
    {
        kube::Error::Api(status) => assert_eq!(status.code, 401),
        other => panic!("expected 401, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_signing_request_is_approved_through_kube() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

    let (_server, client) = start().await;
    let request = baremend_sim::tls::signing_request("alice").unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let csr: CertificateSigningRequest = serde_json::from_value(json!({"metadata": {"name": "alice"}, "spec": {"request": request, "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}})).unwrap();
    let created = csrs.create(&PostParams::default(), &csr).await.unwrap();
    assert_eq!(created.spec.username.as_deref(), Some("kubernetes-admin"));
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "approved by the test"}]}});
    let approved = csrs
        .patch_approval("alice", &PatchParams::default(), &Patch::Merge(approval))
        .await
        .unwrap();
    let conditions = approved
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert_eq!(conditions.len(), 1);
    assert_eq!(
        (conditions[0].type_.as_str(), conditions[0].status.as_str()),
        ("Approved", "True")
    );
    assert!(conditions[0].last_update_time.is_some());
    let read = csrs.get_approval("alice").await.unwrap();
    assert_eq!(
        read.status.and_then(|s| s.conditions).map(|c| c.len()),
        Some(1)
    );
}

/// kube-client's own `csr_can_be_approved` (kube-client `src/lib.rs`) against the simulator: a
/// request with `expirationSeconds`, approved through `/approval` with a condition type of the
/// client's own (`ApprovedFake`), read back through `/approval`, then deleted — all as a real
/// server accepts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubes_own_csr_test_passes() {
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequest, CertificateSigningRequestCondition,
        CertificateSigningRequestStatus,
    };

    let (_server, client) = start().await;
    let request = baremend_sim::tls::signing_request("angela").unwrap();
    let csr: CertificateSigningRequest = serde_json::from_value(json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "fake"},
        "spec": {"request": request, "signerName": "kubernetes.io/kube-apiserver-client",
            "expirationSeconds": 86400, "usages": ["client auth"]},
    }))
    .unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(client);
    let created = csrs.create(&PostParams::default(), &csr).await.unwrap();
    assert_eq!(created.spec.expiration_seconds, Some(86400));
    let status = CertificateSigningRequestStatus {
        certificate: None,
        conditions: Some(vec![CertificateSigningRequestCondition {
            type_: "ApprovedFake".into(),
            last_update_time: None,
            last_transition_time: None,
            message: Some("ApprovedFake by kube-rs client".into()),
            reason: Some("kube-rsClient".into()),
            status: "True".into(),
        }]),
    };
    csrs.patch_approval(
        "fake",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap();
    let read = csrs.get_approval("fake").await.unwrap();
    let conditions = read.status.unwrap().conditions.unwrap();
    assert_eq!(conditions[0].type_, "ApprovedFake");
    assert!(conditions[0].last_update_time.is_some());
    csrs.delete("fake", &DeleteParams::default()).await.unwrap();
    assert!(csrs.get_opt("fake").await.unwrap().is_none());
}

/// `componentstatuses` as a 1.32 server serves them: the scheduler, the controller-manager and
/// etcd, Healthy, readable and listable but not writable; kube's events Recorder test
/// (kube-runtime `src/events.rs`, `event_recorder_attaches_events_without_namespace`) attaches
/// events to one, and they land in `default`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn component_statuses_are_served_read_only_and_take_events() {
    use k8s_openapi::api::core::v1::ComponentStatus;

    let (_server, client) = start().await;
    let statuses: Api<ComponentStatus> = Api::all(client.clone());
    let list = statuses.list(&ListParams::default()).await.unwrap();
    let mut names: Vec<String> = list
        .items
        .iter()
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    assert_eq!(names, ["controller-manager", "etcd-0", "scheduler"]);
    for status in &list.items {
        let condition = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(
            (condition.type_.as_str(), condition.status.as_str()),
            ("Healthy", "True")
        );
    }
    let scheduler = statuses.get("scheduler").await.unwrap();
    let mut copy = scheduler.clone();
    copy.metadata = kube::api::ObjectMeta {
        name: Some("mine".into()),
        ..Default::default()
    };
    match statuses
        .create(&PostParams::default(), &copy)
        .await
        .unwrap_err()
    {
        kube::Error::Api(status) => assert_eq!(
            (status.code, status.reason.as_str()),
            (405, "MethodNotAllowed")
        ),
        other => panic!("expected 405, got {other:?}"),
    }
    let recorder = Recorder::new(client.clone(), "kube".into());
    let published = event(
        EventType::Normal,
        "VeryCoolServiceNoNamespace",
        "without namespace",
        "Test event",
    );
    recorder
        .publish(&published, &scheduler.object_ref(&()))
        .await
        .unwrap();
    recorder
        .publish(&published, &scheduler.object_ref(&()))
        .await
        .unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let found = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("VeryCoolServiceNoNamespace"))
        .unwrap();
    assert_eq!(found.regarding.unwrap().name.as_deref(), Some("scheduler"));
    assert!(found.series.is_some());
}
