//! Helpers shared by the simulator's tests: waiting on a condition (the root crate's one
//! `eventually`, included from its file), and for the simulated Redfish service a service
//! without a socket and one request at a time through it; the simulated API server over HTTP as
//! the conformance tests call it (`apiserver.rs`).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use baremend_sim::clock::SystemClock;
use baremend_sim::host::{Power, SimHost};
use baremend_sim::redfish::{Account, RedfishService, Role, app};
use serde_json::Value;
use tower::ServiceExt;

pub mod apiserver;

#[path = "../../../testkit/src/wait.rs"]
mod wait;

#[allow(unused_imports)] // not every test file waits
pub use wait::eventually;

/// `admin:password`.
pub const BASIC: &str = "Basic YWRtaW46cGFzc3dvcmQ=";

/// A service with one host (system `1`) and the administrator `admin:password`.
pub fn service() -> (Arc<RedfishService>, Router) {
    let clock = Arc::new(SystemClock::new());
    let host = Arc::new(SimHost::new("1", Power::On, Duration::ZERO, clock.clone()));
    let admin = Account {
        username: "admin".into(),
        password: "password".into(),
        role: Role::Administrator,
    };
    let service = Arc::new(RedfishService::new(vec![host], admin, clock));
    (service.clone(), app(service))
}

/// A whole answer.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn message_id(&self) -> String {
        self.json()["error"]["@Message.ExtendedInfo"][0]["MessageId"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    }
}

/// Sends a ready request and reads the whole answer.
pub async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

/// One request through the service.
pub async fn call(
    app: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    send(app, request.body(body).unwrap()).await
}

/// A GET as the administrator.
pub async fn get(app: &Router, uri: &str) -> Answer {
    call(app, "GET", uri, &[("authorization", BASIC)], None).await
}

/// Installs, as a remediator does, the ClusterRoles that let the health checks use its
/// template and request kinds (here baremend's kinds, which the simulated cluster serves in
/// place): labelled for aggregation into OpenShift's MachineHealthCheck and NodeHealthCheck
/// accounts (`rbac.ext-remediation/aggregate-to-ext-remediation`) and Cluster API's manager
/// (`cluster.x-k8s.io/aggregate-to-manager`). Without them every health check is refused.
pub fn install_remediator_roles(api: &baremend_sim::cluster::local::Local) {
    use baremend_sim::cluster::local::Gvr;
    const CLUSTER_ROLES: Gvr = Gvr {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterroles",
    };
    for (name, label) in [
        (
            "remediator-ext-remediation",
            "rbac.ext-remediation/aggregate-to-ext-remediation",
        ),
        (
            "remediator-cluster-api",
            "cluster.x-k8s.io/aggregate-to-manager",
        ),
    ] {
        let role = serde_json::json!({
            "metadata": {"name": name, "labels": {label: "true"}},
            "rules": [
                {"apiGroups": ["baremend.io"], "resources": ["machineremediationtemplates", "noderemediationtemplates"], "verbs": ["get"]},
                {"apiGroups": ["baremend.io"], "resources": ["machineremediations", "noderemediations"], "verbs": ["create", "get", "list", "watch", "patch", "delete"]},
            ],
        });
        api.create(CLUSTER_ROLES, "", role).unwrap();
    }
}

/// Installs baremend's CRDs from the repository's `crds/` (`files` named there), as the
/// tests that run a health check against baremend's kinds in place need.
pub fn install_crds(api: &baremend_sim::cluster::local::Local, files: &[&str]) {
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds");
    for file in files {
        let text = std::fs::read_to_string(crds.join(file)).unwrap();
        let crd: Value = serde_yaml::from_str(&text).unwrap();
        api.create(baremend_sim::cluster::local::CRDS, "", crd)
            .unwrap();
    }
}
