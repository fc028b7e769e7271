use k8s_pb::api::policy::v1 as policy;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;

use super::schema::FieldType;
use super::*;

/// A body as kubectl sends it: the magic and an Unknown envelope around `raw`.
fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
}

#[test]
fn every_message_field_names_a_message_of_the_table() {
    let table = schema();
    assert!(table.names().count() > 1000);
    for name in table.names() {
        for field in &table.message(name).unwrap().fields {
            if let FieldType::Message(target) = &field.ty {
                assert!(
                    table.message(target).is_some(),
                    "{name}.{} names {target}",
                    field.name
                );
            }
        }
    }
}

#[test]
fn kinds_resolve_to_their_groups_message() {
    let table = schema();
    for (api_version, kind, message) in [
        ("v1", "Event", "api.core.v1.Event"),
        ("events.k8s.io/v1", "Event", "api.events.v1.Event"),
        (
            "policy/v1",
            "PodDisruptionBudget",
            "api.policy.v1.PodDisruptionBudget",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "api.rbac.v1.ClusterRole",
        ),
        (
            "scheduling.k8s.io/v1",
            "PriorityClass",
            "api.scheduling.v1.PriorityClass",
        ),
        (
            "v1",
            "DeleteOptions",
            "apimachinery.pkg.apis.meta.v1.DeleteOptions",
        ),
        (
            "meta.k8s.io/v1",
            "Status",
            "apimachinery.pkg.apis.meta.v1.Status",
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
        ),
        (
            "apiregistration.k8s.io/v1",
            "APIService",
            "kube_aggregator.pkg.apis.apiregistration.v1.APIService",
        ),
    ] {
        assert_eq!(
            table.kind(api_version, kind).as_deref(),
            Some(message),
            "{api_version} {kind}"
        );
    }
    assert_eq!(table.kind("example.com/v1", "Widget"), None);
}

/// What `kubectl create pdb guarded --selector=app=guarded --min-available=1` sends, built
/// with k8s-pb's own message (the Go encoder also writes the empty strings of unset
/// non-pointer fields).
fn kubectl_pdb() -> policy::PodDisruptionBudget {
    policy::PodDisruptionBudget {
        metadata: Some(meta::ObjectMeta {
            name: Some("guarded".into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            resource_version: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        spec: Some(policy::PodDisruptionBudgetSpec {
            min_available: Some(IntOrString {
                r#type: Some(0),
                int_val: Some(1),
                str_val: Some(String::new()),
            }),
            selector: Some(meta::LabelSelector {
                match_labels: [("app".to_owned(), "guarded".to_owned())].into(),
                match_expressions: Vec::new(),
            }),
            ..Default::default()
        }),
        status: Some(policy::PodDisruptionBudgetStatus {
            observed_generation: Some(0),
            disruptions_allowed: Some(0),
            current_healthy: Some(0),
            desired_healthy: Some(0),
            expected_pods: Some(0),
            ..Default::default()
        }),
    }
}

#[test]
fn a_pdb_from_k8s_pb_decodes_as_kubectl_means_it() {
    let body = envelope(
        "policy/v1",
        "PodDisruptionBudget",
        kubectl_pdb().encode_to_vec(),
    );
    assert_eq!(
        decode(&body).unwrap(),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "guarded", "generation": 0},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            "status": {"observedGeneration": 0, "disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}})
    );
}

#[test]
fn an_encoded_pdb_is_what_k8s_pb_reads() {
    let object = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": "default", "creationTimestamp": "2026-11-26T13:00:00Z", "labels": {"a": "b"}},
        "spec": {"maxUnavailable": "50%", "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]}},
        "status": {"disruptionsAllowed": 2, "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3,
            "disruptedPods": {"p": "2026-11-26T13:00:05Z"}}});
    let body = encode(&object).unwrap();
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&body[4..]).unwrap();
    assert_eq!(
        unknown.type_meta.as_ref().unwrap().kind.as_deref(),
        Some("PodDisruptionBudget")
    );
    let pdb = policy::PodDisruptionBudget::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let metadata = pdb.metadata.unwrap();
    assert_eq!(metadata.namespace.as_deref(), Some("default"));
    assert_eq!(
        metadata.creation_timestamp.unwrap().seconds,
        Some(1_795_698_000)
    );
    assert_eq!(metadata.labels.get("a").map(String::as_str), Some("b"));
    let spec = pdb.spec.unwrap();
    assert_eq!(
        spec.max_unavailable.unwrap().str_val.as_deref(),
        Some("50%")
    );
    assert_eq!(
        spec.selector.unwrap().match_expressions[0].values,
        vec!["x", "y"]
    );
    let status = pdb.status.unwrap();
    assert_eq!(status.disruptions_allowed, Some(2));
    assert_eq!(status.disrupted_pods["p"].seconds, Some(1_795_698_005));
    assert_eq!(decode(&body).unwrap(), object);
}

#[test]
fn garbage_unknown_kinds_and_wrong_types_are_errors() {
    assert!(decode(b"k8s\0\x0a\xff").is_err());
    assert!(decode(b"{}").is_err());
    assert!(decode(&envelope("example.com/v1", "Widget", Vec::new())).is_err());
    // A string field holding bytes that are not UTF-8.
    let bad = policy::PodDisruptionBudget::default().encode_to_vec();
    let mut body = envelope("policy/v1", "PodDisruptionBudget", bad);
    body.extend_from_slice(&[0x12, 0x01, 0xff]);
    assert!(decode(&body).is_err());
    let mut raw = Vec::new();
    prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut raw);
    raw.extend_from_slice(&[0x03, 0x0a, 0x01, 0xff]);
    assert!(decode(&envelope("v1", "Namespace", raw)).is_err());
    assert!(
        encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "data": "not a map"})).is_err()
    );
    assert!(
        encode(&json!({"apiVersion": "v1", "kind": "Pod", "spec": {"priority": 1u64 << 40}}))
            .is_err()
    );
    assert!(encode(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "yesterday"}})).is_err());
}

#[test]
fn a_deeply_nested_message_is_refused_not_overflowed() {
    // A JSONSchemaProps nests itself through `not`; a hostile body nests it thousands deep.
    let mut raw: Vec<u8> = Vec::new();
    for _ in 0..200 {
        let mut outer = Vec::new();
        // JSONSchemaProps.not is field 28.
        prost::encoding::encode_key(28, prost::encoding::WireType::LengthDelimited, &mut outer);
        prost::encoding::encode_varint(raw.len() as u64, &mut outer);
        outer.extend_from_slice(&raw);
        raw = outer;
    }
    let error = codec::message_json(
        schema(),
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
        &raw,
        0,
    )
    .unwrap_err();
    assert!(error.contains("deeply"), "{error}");
}

/// One object of every kind the simulator serves (and the request kinds it decodes), as the
/// store keeps them. Empty lists and maps have no wire form (Go drops them from JSON too,
/// they are all `omitempty`), so the samples hold none.
fn samples() -> Vec<Value> {
    let meta = |name: &str| json!({"name": name, "namespace": "default", "uid": "4b1f2c9e-0000-4000-8000-000000000001", "resourceVersion": "42", "creationTimestamp": "2026-11-26T13:00:00Z", "labels": {"app": name}, "annotations": {"note": "x"}});
    let cluster_meta = |name: &str| json!({"name": name, "uid": "4b1f2c9e-0000-4000-8000-000000000002", "resourceVersion": "43", "creationTimestamp": "2026-11-26T13:00:00Z"});
    let pod_template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {
        "containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}, "env": [{"name": "A", "value": "b"}],
            "readinessProbe": {"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": false,
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": cluster_meta("demo"), "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": cluster_meta("worker-0"), "spec": {"providerID": "baremetal://w0", "taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-26T13:00:01Z"}], "unschedulable": true},
            "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "conditions": [{"type": "Ready", "status": "Unknown", "lastHeartbeatTime": "2026-11-26T13:00:00Z", "lastTransitionTime": "2026-11-26T13:00:02Z", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status."}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}], "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1", "osImage": "rhcos", "containerRuntimeVersion": "cri-o", "kubeletVersion": "v1.32.0", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "default", "uid": "u", "resourceVersion": "9", "creationTimestamp": "2026-11-26T13:00:00Z", "deletionTimestamp": "2026-11-26T13:05:00Z", "deletionGracePeriodSeconds": 30, "generation": 2, "finalizers": ["x/y"], "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r", "controller": true, "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "time": "2026-11-26T13:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]},
            "spec": pod_template["spec"].clone(), "status": {"phase": "Running", "podIP": "10.1.0.4", "podIPs": [{"ip": "10.1.0.4"}], "qosClass": "Burstable", "startTime": "2026-11-26T13:00:03Z",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-26T13:00:04Z"}]}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta("creds"), "type": "Opaque", "data": {"password": "czNjcjN0", "empty": ""}, "immutable": true}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("settings"), "data": {"a": "1", "b": ""}, "binaryData": {"bin": "AAEC"}}),
        json!({"apiVersion": "v1", "kind": "Event", "metadata": meta("web.1"), "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-0", "uid": "u", "apiVersion": "v1", "fieldPath": "spec.containers{web}"},
            "reason": "Pulled", "message": "pulled", "source": {"component": "kubelet", "host": "worker-0"}, "firstTimestamp": "2026-11-26T13:00:00Z", "lastTimestamp": "2026-11-26T13:00:00Z", "count": 1, "type": "Normal", "eventTime": "2026-11-26T13:00:00.123456Z", "reportingComponent": "kubelet", "reportingInstance": "worker-0"}),
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta("web.2"), "eventTime": "2026-11-26T13:00:00.000001Z", "reportingController": "baremend", "reportingInstance": "baremend-0", "action": "Fence", "reason": "Fenced", "regarding": {"kind": "Node", "name": "worker-0"}, "note": "fenced", "type": "Warning",
            "series": {"count": 2, "lastObservedTime": "2026-11-26T13:00:09.500000Z"}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("leader"), "spec": {"holderIdentity": "baremend-0", "leaseDurationSeconds": 15, "acquireTime": "2026-11-26T13:00:00.000000Z", "renewTime": "2026-11-26T13:00:10.250000Z", "leaseTransitions": 3}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("robot"), "secrets": [{"name": "robot-token"}], "imagePullSecrets": [{"name": "pull"}], "automountServiceAccountToken": false}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("web"), "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "http"}, {"name": "alt", "port": 8080, "protocol": "TCP", "targetPort": 8080}], "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"}, "status": {"loadBalancer": {}}}),
        json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta("web"), "subsets": [{"addresses": [{"ip": "10.1.0.4", "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "default"}}], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]}),
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta("web-abc"), "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.4"], "conditions": {"ready": true, "serving": true, "terminating": false}, "nodeName": "worker-0"}], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"), "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template.clone(), "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}}, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
            "status": {"observedGeneration": 1, "replicas": 3, "readyReplicas": 3, "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": "2026-11-26T13:00:00Z", "lastTransitionTime": "2026-11-26T13:00:00Z", "reason": "MinimumReplicasAvailable", "message": "ok"}]}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("once"), "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6, "ttlSecondsAfterFinished": 100, "template": {"metadata": {}, "spec": {"containers": [{"name": "once", "image": "busybox", "command": ["date"]}], "restartPolicy": "Never"}}}, "status": {"active": 1, "startTime": "2026-11-26T13:00:00Z"}}),
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("nightly"), "spec": {"schedule": "0 2 * * *", "timeZone": "Etc/UTC", "concurrencyPolicy": "Forbid", "suspend": false, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"name": "nightly"}, "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "nightly", "image": "busybox"}], "restartPolicy": "OnFailure"}}}}}, "status": {"lastScheduleTime": "2026-11-26T02:00:00Z"}}),
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("compute"), "spec": {"hard": {"pods": "10", "requests.cpu": "4"}, "scopes": ["NotTerminating"]}, "status": {"hard": {"pods": "10"}, "used": {"pods": "2"}}}),
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": cluster_meta("high"), "value": 1000000, "globalDefault": false, "description": "important", "preemptionPolicy": "PreemptLowerPriority"}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": cluster_meta("reader"), "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}, {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}],
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate-to-reader": "true"}}]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": cluster_meta("readers"), "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}, {"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("pod-reader"), "rules": [{"apiGroups": [""], "resources": ["pods"], "resourceNames": ["web-0"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta("pod-readers"), "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"}, "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "devs"}]}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta("guarded"), "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
            "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "conditions": [{"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "", "observedGeneration": 1, "lastTransitionTime": "2026-11-26T13:00:00Z"}]}}),
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": cluster_meta("node-csr"), "spec": {"request": "LS0tLS1CRUdJTg==", "signerName": "kubernetes.io/kube-apiserver-client", "expirationSeconds": 86400, "usages": ["client auth"], "username": "alice", "uid": "1", "groups": ["system:authenticated"], "extra": {"scopes": ["a", "b"]}},
            "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "AdminApproval", "message": "ok", "lastUpdateTime": "2026-11-26T13:00:00Z", "lastTransitionTime": "2026-11-26T13:00:00Z"}], "certificate": "Y2VydA=="}}),
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": cluster_meta("v1.apps"), "spec": {"group": "apps", "version": "v1", "groupPriorityMinimum": 17800, "versionPriority": 15},
            "status": {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": "2026-11-26T13:00:00Z", "reason": "Local", "message": "Local APIServices are always available"}]}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": cluster_meta("widgets.example.com"), "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"spec": {"type": "object", "required": ["size"], "properties": {"size": {"type": "integer", "minimum": 1.0, "default": 3}}}}}},
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}}, "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]},
            "status": {"acceptedNames": {"plural": "widgets", "kind": "Widget"}, "storedVersions": ["v1"]}}),
        json!({"apiVersion": "v1", "kind": "ComponentStatus", "metadata": {"name": "etcd-0"}, "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]}),
        json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": "u", "resourceVersion": "7"}, "propagationPolicy": "Foreground", "dryRun": ["All"]}),
        json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-0", "namespace": "default"}, "deleteOptions": {"gracePeriodSeconds": 10}}),
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "robot"}, "spec": {"audiences": ["api"], "expirationSeconds": 900, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web-0", "uid": "u"}}, "status": {"token": "t", "expirationTimestamp": "2026-11-26T13:15:00Z"}}),
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {}, "spec": {"resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}, "user": "alice", "extra": {"k": ["v"]}}, "status": {"allowed": true, "reason": "rbac"}}),
        json!({"apiVersion": "v1", "kind": "PodDisruptionBudgetList", "metadata": {}, "items": []}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList", "metadata": {"resourceVersion": "44", "continue": "1:1", "remainingItemCount": 3}, "items": [{"metadata": {"name": "a"}, "spec": {"maxUnavailable": 1}, "status": {"disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}}]}),
        json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": "pods \"x\" not found", "reason": "NotFound", "details": {"name": "x", "kind": "pods", "causes": [{"reason": "FieldValueInvalid", "message": "bad", "field": "spec"}], "retryAfterSeconds": 1}, "code": 404}),
    ]
}

#[test]
fn every_served_kind_round_trips_json_protobuf_json() {
    for object in samples() {
        let kind = format!("{} {}", object["apiVersion"], object["kind"]);
        if kind == "\"v1\" \"PodDisruptionBudgetList\"" {
            // Not a kind of the core group.
            assert!(encode(&object).is_err(), "{kind}");
            continue;
        }
        let body = encode(&object).unwrap_or_else(|e| panic!("{kind}: {e}"));
        let back = decode(&body).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(back, object, "{kind}");
    }
}
