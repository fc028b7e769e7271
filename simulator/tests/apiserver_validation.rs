//! Fake-conformance of what the real API server refuses or rewrites in a write: custom
//! resources against their CRD version's structural schema and CEL rules
//! (kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/validation/`,
//! `…/pkg/apiserver/schema/{pruning,defaulting,cel,listtype}/`), and
//! ValidatingAdmissionPolicies (`staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/
//! validating/`). Messages follow `k8s.io/apimachinery/pkg/util/validation/field/errors.go`.
//! Each test pins one rule, over HTTP, and the baremend CRDs of `crds/` are used as shipped.

use std::path::Path;

mod common;

use common::apiserver::Api;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// What these tests add to the shared client: CRDs created and expected to be accepted.
impl Api {
    /// Creates a CRD and expects it to be accepted.
    async fn crd(&self, crd: Value) {
        let (status, body) = self
            .post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                crd,
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    /// Creates one of baremend's own CRDs from `crds/`.
    async fn baremend_crd(&self, file: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../crds")
            .join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        self.crd(serde_yaml::from_str(&text).unwrap()).await;
    }
}

/// A namespaced `Widget` (example.com/v1) with the given schema, status subresource on.
fn widget_crd(schema: Value) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.ready"}},
                "schema": {"openAPIV3Schema": schema}}]}})
}

const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

/// A schema exercising every structural check, with a status.
fn rich_schema() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 10},
            "ratio": {"type": "number", "exclusiveMaximum": true, "maximum": 1},
            "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
            "port": {"x-kubernetes-int-or-string": true},
            "note": {"type": "string", "nullable": true},
            "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3,
                "x-kubernetes-list-type": "set"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 2},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "since": {"type": "string", "format": "date-time"}
        }},
        "status": {"type": "object", "properties": {"ready": {"type": "integer", "minimum": 0}}}
    }})
}

/// The causes of a 422 as (field, reason) pairs.
fn causes(body: &Value) -> Vec<(String, String)> {
    body["details"]["causes"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or_default().to_owned(),
                        c["reason"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn assert_invalid(status: StatusCode, body: &Value, message: &str) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "Invalid", "{body}");
    assert_eq!(body["message"], message, "{body}");
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_invalid_naming_its_path() {
    let api = Api::start().await;
    api.crd(widget_crd(rich_schema())).await;
    let (status, body) = api
        .post(WIDGETS, widget("w", json!({"size": "three"})))
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
    );
    // A wrong type is `field.TypeInvalid` (kubernetes v1.36.3 apiextensions-apiserver
    // `pkg/apiserver/validation/validation.go`, `InvalidTypeCode`).
    assert_eq!(
        causes(&body),
        [("spec.size".to_owned(), "FieldValueTypeInvalid".to_owned())]
    );
    assert_eq!(body["details"]["group"], "example.com");
    assert_eq!(body["details"]["kind"], "Widget");
}

#[tokio::test]
async fn required_bounds_lengths_and_patterns_are_checked_together() {
    let api = Api::start().await;
    api.crd(widget_crd(rich_schema())).await;
    let (status, body) = api
        .post(WIDGETS, widget("w", json!({"ratio": 1, "name": "ABCDEF"})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = body["message"].as_str().unwrap();
    for part in [
        "spec.size: Required value",
        "spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1",
        "spec.name: Too long: may not be more than 5 bytes",
        "spec.name: Invalid value: \"ABCDEF\": spec.name in body should match '^[a-z]+$'",
    ] {
        assert!(message.contains(part), "{part} missing from {message}");
    }
    // Several errors are listed as an aggregate: `[a, b, …]`.
    assert!(
        message.starts_with("Widget.example.com \"w\" is invalid: ["),
        "{message}"
    );
    let (status, body) = api.post(WIDGETS, widget("w", json!({"size": 0}))).await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
    );
    let (status, body) = api
        .post(WIDGETS, widget("w", json!({"size": 2, "name": "a"})))
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long",
    );
}

#[tokio::test]
async fn int_or_string_nullable_date_time_and_list_sets() {
    let api = Api::start().await;
    api.crd(widget_crd(rich_schema())).await;
    let (status, body) = api
        .post(
            WIDGETS,
            widget(
                "a",
                json!({"size": 1, "port": "http", "note": null, "since": "2026-11-26T10:00:00Z"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["spec"]["note"], Value::Null, "a nullable null is kept");
    let (status, _) = api
        .post(WIDGETS, widget("b", json!({"size": 1, "port": 8080})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = api
        .post(WIDGETS, widget("c", json!({"size": 1, "port": true})))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(causes(&body)[0].0, "spec.port");
    let (status, body) = api
        .post(
            WIDGETS,
            widget("c", json!({"size": 1, "since": "yesterday"})),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"c\" is invalid: spec.since: Invalid value: \"yesterday\": spec.since in body must be of type date-time: \"yesterday\"",
    );
    let (status, body) = api
        .post(
            WIDGETS,
            widget("c", json!({"size": 1, "tags": ["x", "y", "x"]})),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"c\" is invalid: spec.tags[2]: Duplicate value: \"x\"",
    );
    assert_eq!(
        causes(&body),
        [("spec.tags[2]".to_owned(), "FieldValueDuplicate".to_owned())]
    );
    let (status, body) = api
        .post(
            WIDGETS,
            widget("c", json!({"size": 1, "tags": ["a", "b", "c", "d"]})),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"c\" is invalid: spec.tags: Too many: 4: must have at most 3 items",
    );
}

#[tokio::test]
async fn unknown_fields_are_pruned_except_where_preserved_and_defaults_are_applied() {
    let api = Api::start().await;
    api.crd(widget_crd(rich_schema())).await;
    let mut object = widget(
        "w",
        json!({"size": 2, "stray": 1, "free": {"anything": {"goes": true}},
        "labels": {"a": "b"}}),
    );
    object["topLevelStray"] = json!("x");
    object["metadata"]["labels"] = json!({"keep": "me"});
    let (status, body) = api.post(WIDGETS, object).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(body["spec"].get("stray").is_none(), "{body}");
    assert!(body.get("topLevelStray").is_none(), "{body}");
    assert_eq!(body["spec"]["free"], json!({"anything": {"goes": true}}));
    assert_eq!(body["spec"]["labels"], json!({"a": "b"}));
    assert_eq!(body["metadata"]["labels"], json!({"keep": "me"}));
    assert_eq!(
        body["spec"]["color"], "red",
        "the default is applied on create"
    );
    let (_, stored) = api.get(&format!("{WIDGETS}/w")).await;
    assert!(stored["spec"].get("stray").is_none());
}

#[tokio::test]
async fn every_write_path_is_validated() {
    let api = Api::start().await;
    api.crd(widget_crd(rich_schema())).await;
    let (status, created) = api.post(WIDGETS, widget("w", json!({"size": 2}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let path = format!("{WIDGETS}/w");
    let mut replaced = created.clone();
    replaced["spec"]["color"] = json!("green");
    let (status, body) = api.put(&path, replaced).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "update: {body}");
    let (status, body) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"color": "green"}}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "merge patch: {body}"
    );
    let (status, body) = api
        .patch(
            &path,
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/size", "value": 99}]),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "json patch: {body}"
    );
    let (status, body) = api
        .call(
            Method::PATCH,
            // Forced: the create's manager owns spec.size, and a conflict comes before
            // validation.
            &format!("{path}?fieldManager=test&force=true"),
            "application/apply-patch+yaml",
            Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 11}})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "apply: {body}");
    let (status, body) = api
        .patch(
            &format!("{path}/status"),
            "application/merge-patch+json",
            json!({"status": {"ready": -1}}),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: status.ready: Invalid value: -1: status.ready in body should be greater than or equal to 0",
    );
    let (status, body) = api
        .patch(
            &format!("{path}/status"),
            "application/merge-patch+json",
            json!({"status": {"ready": 1, "extra": 2}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["status"],
        json!({"ready": 1}),
        "the status is pruned too"
    );
    // The scale subresource writes `.spec.size`, which the schema bounds.
    let (status, body) = api
        .patch(
            &format!("{path}/scale"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 99}}),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.size: Invalid value: 99: spec.size in body should be less than or equal to 10",
    );
    // A server-side apply that creates is checked as a create.
    let (status, body) = api
        .call(
            Method::PATCH,
            &format!("{WIDGETS}/fresh?fieldManager=test"),
            "application/apply-patch+yaml",
            Some(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "fresh"}, "spec": {"size": "x"}})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "apply-create: {body}"
    );
}

#[tokio::test]
async fn a_default_added_to_the_crd_shows_on_objects_stored_before() {
    // The real server defaults on read from etcd as well as on write.
    let api = Api::start().await;
    let schema = |with_default: bool| {
        let mut mode = json!({"type": "string"});
        if with_default {
            mode["default"] = json!("fast");
        }
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"mode": mode}}}})
    };
    api.crd(widget_crd(schema(false))).await;
    let (status, _) = api.post(WIDGETS, widget("old", json!({}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
    let (_, mut crd) = api.get(crd_path).await;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema(true);
    let (status, body) = api.put(crd_path, crd).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, old) = api.get(&format!("{WIDGETS}/old")).await;
    assert_eq!(old["spec"]["mode"], "fast", "{old}");
    // A list reads each object as a get does (lists of built-in kinds are written from the
    // stored objects without a copy; a custom resource's are defaulted first).
    let (status, list) = api.get(WIDGETS).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["items"][0]["spec"]["mode"], "fast", "{list}");
    assert_eq!(list["items"][0], old, "{list}");
}

#[tokio::test]
async fn a_list_of_a_built_in_kind_holds_each_object_as_a_get_gives_it() {
    let api = Api::start().await;
    for name in ["a", "b", "c"] {
        let map = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name}, "data": {"key": name}});
        let (status, body) = api.post("/api/v1/namespaces/default/configmaps", map).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (status, list) = api
        .get("/api/v1/namespaces/default/configmaps?limit=2")
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["kind"], "ConfigMapList");
    assert!(list["metadata"]["resourceVersion"].is_string(), "{list}");
    assert_eq!(list["metadata"]["remainingItemCount"], 1, "{list}");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{list}");
    // A typed list's items carry no apiVersion or kind (kube-apiserver v1.36.3,
    // tests/fidelity_corpus.rs); the rest is what a get gives.
    for item in items {
        let name = item["metadata"]["name"].as_str().expect("a name");
        let (_, mut one) = api
            .get(&format!("/api/v1/namespaces/default/configmaps/{name}"))
            .await;
        let fields = one.as_object_mut().unwrap();
        fields.remove("apiVersion");
        fields.remove("kind");
        assert_eq!(item, &one);
    }
}

fn cel_schema() -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object",
    "properties": {
        "min": {"type": "integer"}, "max": {"type": "integer"},
        "owner": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self == oldSelf", "message": "owner is immutable"}]},
        "hosts": {"type": "array", "items": {"type": "string"}}
    },
    "x-kubernetes-validations": [
        {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' exceeds max ' + string(self.max)"},
        {"rule": "!has(self.hosts) || self.hosts.all(h, h.startsWith('bmc-') && h.matches('^[a-z0-9-]+$'))",
            "message": "hosts must be bmc-… names", "fieldPath": ".hosts", "reason": "FieldValueForbidden"}
    ]}}})
}

/// A failed rule on an object prints no value, on a scalar the value itself (kubernetes
/// v1.36.3 `apiextensions-apiserver/pkg/apiserver/schema/cel/validation.go`, as the real
/// server answers in `tests/crd_bounds.rs` and `tests/kubectl_objects_apiserver.rs`).
#[tokio::test]
async fn cel_rules_with_message_expression_field_path_and_reason() {
    let api = Api::start().await;
    api.crd(widget_crd(cel_schema())).await;
    let (status, body) = api
        .post(WIDGETS, widget("w", json!({"min": 5, "max": 2})))
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec: Invalid value: min 5 exceeds max 2",
    );
    let (status, body) = api
        .post(
            WIDGETS,
            widget("w", json!({"min": 1, "max": 2, "hosts": ["bmc-1", "db-2"]})),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.hosts: Forbidden: hosts must be bmc-… names",
    );
    assert_eq!(
        causes(&body),
        [("spec.hosts".to_owned(), "FieldValueForbidden".to_owned())]
    );
    let (status, body) = api
        .post(
            WIDGETS,
            widget(
                "w",
                json!({"min": 1, "max": 2, "hosts": ["bmc-1"], "owner": "a"}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn a_transition_rule_holds_on_update_only() {
    let api = Api::start().await;
    api.crd(widget_crd(cel_schema())).await;
    let (status, _) = api
        .post(
            WIDGETS,
            widget("w", json!({"min": 1, "max": 2, "owner": "a"})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "a create has no oldSelf: the rule is not run"
    );
    let path = format!("{WIDGETS}/w");
    let (status, body) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"owner": "b"}}),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.owner: Invalid value: \"b\": owner is immutable",
    );
    let (status, body) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"max": 3}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "unchanged owner passes: {body}");
}

#[tokio::test]
async fn a_crd_whose_rule_does_not_compile_is_refused() {
    let api = Api::start().await;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let bad = widget_crd(
        json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.spec.x ==="}]}),
    );
    let (status, body) = api.post(crds, bad).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        causes(&body)[0].0,
        "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
    );
    assert!(body["message"].as_str().unwrap().starts_with(
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Invalid value: \"self.spec.x ===\": compilation failed: "
    ), "{body}");
    let unknown = widget_crd(
        json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "noSuchFunction(self)"}]}}}),
    );
    let (status, body) = api.post(crds, unknown).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("undeclared reference to 'noSuchFunction'"),
        "{body}"
    );
    let (status, _) = api
        .get("/apis/example.com/v1/namespaces/default/widgets")
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a refused CRD serves nothing"
    );
}

#[tokio::test]
async fn baremends_remediation_policy_refuses_a_bogus_mode_and_defaults_the_rest() {
    let api = Api::start().await;
    api.baremend_crd("remediationpolicies.yaml").await;
    let path = "/apis/baremend.io/v1alpha1/remediationpolicies";
    let policy = |spec: Value| json!({"apiVersion": "baremend.io/v1alpha1", "kind": "RemediationPolicy", "metadata": {"name": "x"}, "spec": spec});
    let (status, body) = api.post(path, policy(json!({"mode": "Bogus"}))).await;
    // The supported values come in the schema's order (field.NotSupported keeps it).
    assert_invalid(
        status,
        &body,
        "RemediationPolicy.baremend.io \"x\" is invalid: [spec.mode: Unsupported value: \"Bogus\": supported values: \"Remediate\", \"DryRun\", <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation]",
    );
    // The CRD has a CEL rule, which the unsupported value blocks: that is said at `<nil>`
    // (kubernetes v1.36.3 apiextensions-apiserver `pkg/registry/customresource/strategy.go`,
    // `hasBlockingErr`).
    assert_eq!(
        causes(&body),
        [
            ("spec.mode".to_owned(), "FieldValueNotSupported".to_owned()),
            ("<nil>".to_owned(), "FieldValueInvalid".to_owned())
        ]
    );
    let (status, body) = api.post(path, policy(json!({"maxConcurrent": 0}))).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(causes(&body)[0].0, "spec.maxConcurrent");
    let (status, body) = api.post(path, policy(json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // Left out, the mode is a dry run: only a policy that says Remediate acts.
    assert_eq!(body["spec"]["mode"], "DryRun");
    assert_eq!(body["spec"]["maxConcurrent"], 1);
    assert_eq!(body["spec"]["timeouts"]["powerOffSeconds"], 180);
    assert_eq!(
        body["spec"]["strategies"],
        json!(["BareMetalHostRebootApi", "DirectBmc"])
    );
}

#[tokio::test]
async fn baremends_host_bmc_rules_are_enforced() {
    let api = Api::start().await;
    api.baremend_crd("hostbmcs.yaml").await;
    let path = "/apis/baremend.io/v1alpha1/namespaces/default/hostbmcs";
    let bmc = |spec: Value| json!({"apiVersion": "baremend.io/v1alpha1", "kind": "HostBmc", "metadata": {"name": "h"}, "spec": spec});
    let base = json!({"address": "redfish://10.0.0.1", "credentialsName": "creds"});
    let (status, body) = api.post(path, bmc(base.clone())).await;
    assert_invalid(
        status,
        &body,
        "HostBmc.baremend.io \"h\" is invalid: <nil>: Invalid value: failed rule: has(self.spec.machineName) || has(self.spec.nodeName)",
    );
    let mut insecure = base.clone();
    insecure["nodeName"] = json!("n1");
    insecure["insecureSkipVerify"] = json!(true);
    insecure["caBundle"] = json!("-----BEGIN CERTIFICATE-----");
    let (status, body) = api.post(path, bmc(insecure)).await;
    assert_invalid(
        status,
        &body,
        "HostBmc.baremend.io \"h\" is invalid: <nil>: Invalid value: failed rule: !self.spec.insecureSkipVerify || (!has(self.spec.caBundle) && !has(self.spec.caBundleRef))",
    );
    let mut good = base;
    good["machineName"] = json!("m1");
    let (status, body) = api.post(path, bmc(good)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["spec"]["insecureSkipVerify"], false, "defaulted");
}

// ValidatingAdmissionPolicy.

const POLICIES: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
const BINDINGS: &str = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings";

async fn replica_limit(api: &Api, actions: Value) {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "replica-limit"},
    "spec": {"failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
        "validations": [
            {"expression": "object.spec.replicas <= 5"},
            {"expression": "request.operation != 'UPDATE' || object.spec.replicas >= oldObject.spec.replicas",
                "messageExpression": "'no scaling down by ' + request.userInfo.username"}
        ]}});
    let (status, body) = api.post(POLICIES, policy).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "replica-limit-binding"},
        "spec": {"policyName": "replica-limit", "validationActions": actions,
            "matchResources": {"namespaceSelector": {"matchLabels": {"replica-limit": "on"}}}}});
    let (status, body) = api.post(BINDINGS, binding).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
}

#[tokio::test]
async fn a_validating_admission_policy_denies_a_create_and_an_update() {
    let api = Api::start().await;
    let (_, ns) = api.get("/api/v1/namespaces/default").await;
    let mut ns = ns;
    ns["metadata"]["labels"]["replica-limit"] = json!("on");
    let (status, _) = api.put("/api/v1/namespaces/default", ns).await;
    assert_eq!(status, StatusCode::OK);
    replica_limit(&api, json!(["Deny"])).await;
    let path = "/apis/apps/v1/namespaces/default/deployments";
    let (status, body) = api.post(path, deployment("big", 7)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed expression: object.spec.replicas <= 5"
    );
    let (status, body) = api.post(path, deployment("small", 3)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = api
        .patch(
            &format!("{path}/small"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 2}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    // The request's user is the caller: the server's own token is `baremend-sim`.
    assert_eq!(
        body["message"],
        "deployments.apps \"small\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: no scaling down by kubernetes-admin"
    );
    let (status, body) = api
        .patch(
            &format!("{path}/small"),
            "application/merge-patch+json",
            json!({"spec": {"replicas": 4}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn a_policy_outside_its_binding_or_only_warning_lets_requests_through() {
    let api = Api::start().await;
    // The namespace lacks the label the binding selects: not matched.
    replica_limit(&api, json!(["Deny"])).await;
    let (status, body) = api
        .post(
            "/apis/apps/v1/namespaces/default/deployments",
            deployment("big", 7),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let api = Api::start().await;
    let (_, mut ns) = api.get("/api/v1/namespaces/default").await;
    ns["metadata"]["labels"]["replica-limit"] = json!("on");
    api.put("/api/v1/namespaces/default", ns).await;
    replica_limit(&api, json!(["Warn"])).await;
    let (status, body) = api
        .post(
            "/apis/apps/v1/namespaces/default/deployments",
            deployment("big", 7),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "Warn does not deny: {body}");
}

#[tokio::test]
async fn a_policy_whose_expression_does_not_compile_is_refused() {
    let api = Api::start().await;
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "broken"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "object.data.size() <"}]}});
    let (status, body) = api.post(POLICIES, policy).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(causes(&body)[0].0, "spec.validations[0].expression");
}

#[tokio::test]
async fn a_policy_applies_to_custom_resources_too() {
    let api = Api::start().await;
    api.crd(widget_crd(rich_schema())).await;
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "even"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["*"],
                "operations": ["*"], "resources": ["widgets"]}]},
            "validations": [{"expression": "object.spec.size % 2 == 0", "message": "size must be even", "reason": "Forbidden"}]}});
    assert_eq!(api.post(POLICIES, policy).await.0, StatusCode::CREATED);
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "even-binding"}, "spec": {"policyName": "even", "validationActions": ["Deny"]}});
    assert_eq!(api.post(BINDINGS, binding).await.0, StatusCode::CREATED);
    let (status, body) = api.post(WIDGETS, widget("odd", json!({"size": 3}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(
        body["message"],
        "widgets.example.com \"odd\" is forbidden: ValidatingAdmissionPolicy 'even' with binding 'even-binding' denied request: size must be even"
    );
    let (status, _) = api.post(WIDGETS, widget("even", json!({"size": 4}))).await;
    assert_eq!(status, StatusCode::CREATED);
}

#[tokio::test]
async fn a_policy_sees_the_service_account_that_calls() {
    let api = Api::start().await;
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "no-robots"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression": "!request.userInfo.username.startsWith('system:serviceaccount:') || !('system:serviceaccounts' in request.userInfo.groups)",
                "messageExpression": "request.userInfo.username + ' may not create ' + request.resource.resource"}]}});
    assert_eq!(api.post(POLICIES, policy).await.0, StatusCode::CREATED);
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "no-robots"}, "spec": {"policyName": "no-robots", "validationActions": ["Deny"]}});
    assert_eq!(api.post(BINDINGS, binding).await.0, StatusCode::CREATED);
    api.post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}}),
    )
    .await;
    let (_, issued) = api
        .post(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await;
    let token = issued["status"]["token"].as_str().unwrap();
    // RBAC lets it create ConfigMaps (the bootstrap `edit` role in its namespace): the refusal
    // below is the admission policy's, not the authorizer's.
    let grant = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "robot-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": "default"}]});
    let (status, body) = api
        .post(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings",
            grant,
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let configmap =
        |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let response = api
        .http
        .post(format!(
            "{}/api/v1/namespaces/default/configmaps",
            api.server.url()
        ))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(configmap("by-robot").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["message"],
        "configmaps \"by-robot\" is forbidden: ValidatingAdmissionPolicy 'no-robots' with binding 'no-robots' denied request: system:serviceaccount:default:robot may not create configmaps"
    );
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/configmaps",
            configmap("by-admin"),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the administrator is no service account"
    );
}

#[tokio::test]
async fn a_tightened_crd_lets_an_update_keep_a_value_it_does_not_touch() {
    // Validation ratcheting (apiextensions-apiserver, on by default since 1.30): only the
    // values an update changes are checked against the new schema.
    let api = Api::start().await;
    let schema = |max: i64| {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "size": {"type": "integer", "maximum": max}, "note": {"type": "string"}}}}})
    };
    api.crd(widget_crd(schema(10))).await;
    let (status, _) = api.post(WIDGETS, widget("w", json!({"size": 8}))).await;
    assert_eq!(status, StatusCode::CREATED);
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com";
    let (_, mut crd) = api.get(crd_path).await;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = schema(5);
    assert_eq!(api.put(crd_path, crd).await.0, StatusCode::OK);
    let path = format!("{WIDGETS}/w");
    let (status, body) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"note": "hi"}}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the untouched size ratchets: {body}"
    );
    let (status, body) = api
        .patch(
            &path,
            "application/merge-patch+json",
            json!({"spec": {"size": 7}}),
        )
        .await;
    assert_invalid(
        status,
        &body,
        "Widget.example.com \"w\" is invalid: spec.size: Invalid value: 7: spec.size in body should be less than or equal to 5",
    );
}

/// A policy applies only where every `matchConditions` expression holds (one false: the
/// policy is skipped, kubernetes `staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/
/// matchconditions/matcher.go`, `Match`), and a variable may read the ones declared before it
/// (`…/plugin/cel/composition.go`): what deploy/'s helper policy is made of — scoped to one
/// caller, the controller's image split into its repository.
#[tokio::test]
async fn match_conditions_scope_a_policy_to_one_caller_and_variables_build_on_each_other() {
    let api = Api::start().await;
    let policy = |name: &str, caller: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "matchConditions": [{"name": "caller", "expression": format!("request.userInfo.username == '{caller}'")}],
            "variables": [
                {"name": "image", "expression": "'registry:5000/team/app:v1'"},
                {"name": "repository", "expression": "variables.image.lastIndexOf(':') > variables.image.lastIndexOf('/') ? variables.image.substring(0, variables.image.lastIndexOf(':')) : variables.image"},
            ],
            "validations": [{"expression": "has(object.data) && object.data.repository == variables.repository",
                "messageExpression": "'the repository is ' + variables.repository"}]}})
    };
    let bind = |name: &str| {
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}})
    };
    // Someone else's policy: its condition is false for the administrator, so it is skipped.
    assert_eq!(
        api.post(POLICIES, policy("others", "system:serviceaccount:x:y"))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post(BINDINGS, bind("others")).await.0,
        StatusCode::CREATED
    );
    let configmap = |name: &str, repository: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"repository": repository}})
    };
    let path = "/api/v1/namespaces/default/configmaps";
    let (status, body) = api.post(path, configmap("skipped", "elsewhere")).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // The administrator's own: applied; the port is not taken for a tag.
    assert_eq!(
        api.post(POLICIES, policy("mine", "kubernetes-admin"))
            .await
            .0,
        StatusCode::CREATED
    );
    assert_eq!(
        api.post(BINDINGS, bind("mine")).await.0,
        StatusCode::CREATED
    );
    let (status, body) = api.post(path, configmap("wrong", "registry")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["message"],
        "configmaps \"wrong\" is forbidden: ValidatingAdmissionPolicy 'mine' with binding 'mine' denied request: the repository is registry:5000/team/app"
    );
    let (status, body) = api
        .post(path, configmap("right", "registry:5000/team/app"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}
