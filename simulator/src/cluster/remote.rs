//! A simulated actor's client of any API server over HTTPS — a real kube-apiserver included —
//! with the actor's own credentials: what lets the simulated world (kubelets, the BareMetal
//! Operator, the health checks) populate and animate a real control plane as it animates its
//! own.
//!
//! Expected flow: an [`Endpoint`] (URL and CA) and a [`Credential`] (a ServiceAccount token
//! the server issued, or a client certificate of its CA, as a kubelet has) make a [`Remote`];
//! `Local::remote` wraps it so that an actor's calls are the same whichever server answers.
//!
//! Guarantees: every call is a real request, with the actor's identity, so the server's
//! authentication, RBAC, Node authorizer, admission and validation judge it; a refusal comes
//! back as the server's own `Status` (code, reason, message). The credential is never in
//! `Debug`, logs or errors.
//!
//! Caveats: the actors are synchronous callers (the in-process store needs no waiting), so a
//! call here blocks its caller until the answer arrives: the request itself runs on a small
//! runtime of its own, and on a multi-threaded runtime the waiting worker hands its other
//! tasks over (`block_in_place`). On a current-thread runtime the caller's other tasks wait
//! for the answer; that is safe only because the server is another process (pointing a
//! [`Remote`] at an API server served by the same current-thread runtime would deadlock).

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use super::gvr::{Gvr, PODS, SERVICE_ACCOUNTS};
use crate::apiserver::errors::{ApiError, ApiResult};
use crate::tls::TlsIdentity;

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an API server listens and the CA its serving certificate chains to.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `https://host:port`.
    pub url: String,
    /// The CA that signed the server's certificate, PEM.
    pub ca_pem: String,
}

/// What an actor authenticates with.
#[derive(Clone)]
pub enum Credential {
    /// A bearer token (a ServiceAccount's, from a TokenRequest).
    Token(String),
    /// A client certificate of the server's client CA (a kubelet's `system:node:<name>`).
    Certificate(TlsIdentity),
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::Token(_) => "Token(<redacted>)",
            Credential::Certificate(_) => "Certificate(<redacted>)",
        })
    }
}

/// One actor's HTTPS client of one API server.
#[derive(Clone)]
pub struct Remote {
    url: Arc<str>,
    http: reqwest::Client,
    token: Option<Arc<str>>,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The runtime the requests run on (the callers block; the requests must not need them).
fn transport() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sim-remote")
            .enable_all()
            .build()
            .unwrap_or_else(|e| {
                // Without threads nothing simulated can run at all.
                panic!("cannot start the remote actors' runtime: {e}")
            })
    })
}

/// Runs `request` on the transport runtime and waits for its answer.
fn wait<F>(request: F) -> ApiResult<Value>
where
    F: Future<Output = ApiResult<Value>> + Send + 'static,
{
    let (answer, answered) = std::sync::mpsc::sync_channel(1);
    transport().spawn(async move {
        let _ = answer.send(request.await);
    });
    let receive = move || answered.recv();
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let received = if multi_threaded {
        tokio::task::block_in_place(receive)
    } else {
        receive()
    };
    received.unwrap_or_else(|_| Err(ApiError::internal("the request was dropped unanswered")))
}

impl Remote {
    /// A client of `endpoint` that authenticates with `credential`.
    pub fn new(endpoint: &Endpoint, credential: &Credential) -> crate::Result<Self> {
        let fail = |what: &str, e: reqwest::Error| crate::Error::Tls(format!("{what}: {e}"));
        let root = reqwest::Certificate::from_pem(endpoint.ca_pem.as_bytes())
            .map_err(|e| fail("the API server's CA", e))?;
        let mut builder = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(root)
            .timeout(REQUEST_TIMEOUT);
        let mut token = None;
        match credential {
            Credential::Token(value) => token = Some(Arc::from(value.as_str())),
            Credential::Certificate(identity) => {
                let pem = format!("{}{}", identity.cert_pem, identity.key_pem);
                let identity = reqwest::Identity::from_pem(pem.as_bytes())
                    .map_err(|e| fail("the client certificate", e))?;
                builder = builder.identity(identity);
            }
        }
        let http = builder.build().map_err(|e| fail("the HTTP client", e))?;
        Ok(Remote {
            url: Arc::from(endpoint.url.trim_end_matches('/')),
            http,
            token,
        })
    }

    /// The path of a resource's group and version (`/api/v1`, `/apis/<group>/<version>`).
    fn group_version(gvr: Gvr) -> String {
        if gvr.group.is_empty() {
            format!("/api/{}", gvr.version)
        } else {
            format!("/apis/{}/{}", gvr.group, gvr.version)
        }
    }

    /// The path of a collection (`namespace` "" or None: cluster-wide or cluster-scoped).
    fn collection(gvr: Gvr, namespace: Option<&str>) -> String {
        let prefix = Self::group_version(gvr);
        match namespace {
            Some(namespace) if !namespace.is_empty() => {
                format!("{prefix}/namespaces/{namespace}/{}", gvr.plural)
            }
            _ => format!("{prefix}/{}", gvr.plural),
        }
    }

    fn object(gvr: Gvr, namespace: &str, name: &str, subresource: &str) -> String {
        let mut path = format!("{}/{name}", Self::collection(gvr, Some(namespace)));
        if !subresource.is_empty() {
            path.push('/');
            path.push_str(subresource);
        }
        path
    }

    /// Sends a request to `path` and waits for the JSON answer.
    fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        query: Vec<(&'static str, String)>,
        body: Option<(&'static str, Vec<u8>)>,
    ) -> ApiResult<Value> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .query(&query)
            .header("Accept", "application/json");
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some((content_type, bytes)) = body {
            request = request.header("Content-Type", content_type).body(bytes);
        }
        wait(answer(request))
    }

    /// Reads an object.
    pub fn get(&self, gvr: Gvr, namespace: &str, name: &str) -> ApiResult<Value> {
        let path = Self::object(gvr, namespace, name, "");
        self.send(reqwest::Method::GET, &path, Vec::new(), None)
    }

    /// Lists objects (all namespaces when `namespace` is None), each with its apiVersion and
    /// kind (as the in-process list gives them).
    pub fn list(&self, gvr: Gvr, namespace: Option<&str>, fields: &str) -> ApiResult<Vec<Value>> {
        let mut query = Vec::new();
        if !fields.is_empty() {
            query.push(("fieldSelector", fields.to_owned()));
        }
        let path = Self::collection(gvr, namespace);
        let list = self.send(reqwest::Method::GET, &path, query, None)?;
        let kind = list["kind"]
            .as_str()
            .and_then(|k| k.strip_suffix("List"))
            .unwrap_or_default()
            .to_owned();
        let api_version = list["apiVersion"].clone();
        let Some(Value::Array(items)) = list.get("items").cloned() else {
            return Ok(Vec::new());
        };
        Ok(items
            .into_iter()
            .map(|mut item| {
                if let Some(object) = item.as_object_mut() {
                    object
                        .entry("apiVersion")
                        .or_insert_with(|| api_version.clone());
                    object.entry("kind").or_insert_with(|| json!(kind));
                }
                item
            })
            .collect())
    }

    /// Creates an object as field manager `manager`.
    pub fn create(
        &self,
        gvr: Gvr,
        namespace: &str,
        body: &Value,
        manager: &str,
    ) -> ApiResult<Value> {
        let path = Self::collection(gvr, Some(namespace));
        let query = vec![("fieldManager", manager.to_owned())];
        self.send(reqwest::Method::POST, &path, query, Some(json_body(body)))
    }

    /// JSON-merge-patches an object or its status as field manager `manager`.
    pub fn merge(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: &str,
        body: &Value,
        status: bool,
        manager: &str,
    ) -> ApiResult<Value> {
        let path = Self::object(gvr, namespace, name, if status { "status" } else { "" });
        let body = (
            "application/merge-patch+json",
            body.to_string().into_bytes(),
        );
        let query = vec![("fieldManager", manager.to_owned())];
        self.send(reqwest::Method::PATCH, &path, query, Some(body))
    }

    /// Deletes an object with a grace period (None: the object's own).
    pub fn delete(
        &self,
        gvr: Gvr,
        namespace: &str,
        name: &str,
        grace: Option<i64>,
    ) -> ApiResult<Value> {
        let path = Self::object(gvr, namespace, name, "");
        let mut options = json!({"apiVersion": "v1", "kind": "DeleteOptions"});
        if let Some(seconds) = grace {
            options["gracePeriodSeconds"] = json!(seconds);
        }
        self.send(
            reqwest::Method::DELETE,
            &path,
            Vec::new(),
            Some(json_body(&options)),
        )
    }

    /// Evicts a pod (the server weighs its PodDisruptionBudgets).
    pub fn evict(&self, namespace: &str, name: &str) -> ApiResult<Value> {
        let path = Self::object(PODS, namespace, name, "eviction");
        let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace}});
        self.send(
            reqwest::Method::POST,
            &path,
            Vec::new(),
            Some(json_body(&eviction)),
        )
    }

    /// A token for ServiceAccount `namespace/name` (TokenRequest, valid for a day: the
    /// simulated actors run for a test or an afternoon's playground).
    pub fn token(&self, namespace: &str, name: &str) -> ApiResult<String> {
        let path = Self::object(SERVICE_ACCOUNTS, namespace, name, "token");
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86_400}});
        let body = Some(json_body(&request));
        let answer = self.send(reqwest::Method::POST, &path, Vec::new(), body)?;
        answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                ApiError::internal(format!("TokenRequest for {namespace}/{name}: no token"))
            })
    }

    /// Whether the server serves the resource (its discovery document names it).
    pub fn serves(&self, gvr: Gvr) -> bool {
        self.send(
            reqwest::Method::GET,
            &Self::group_version(gvr),
            Vec::new(),
            None,
        )
        .ok()
        .and_then(|list| list.get("resources").and_then(Value::as_array).cloned())
        .is_some_and(|resources| resources.iter().any(|r| r["name"] == gvr.plural))
    }
}

/// A JSON request body.
fn json_body(value: &Value) -> (&'static str, Vec<u8>) {
    ("application/json", value.to_string().into_bytes())
}

/// The answer to a request: its JSON body, or the server's Status as an error.
async fn answer(request: reqwest::RequestBuilder) -> ApiResult<Value> {
    let response = request
        .send()
        .await
        .map_err(|e| ApiError::internal(format!("the API server did not answer: {e}")))?;
    let code = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("Retry-After")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let bytes = response
        .bytes()
        .await
        .map_err(|e| ApiError::internal(format!("the API server's answer was cut: {e}")))?;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(
        |_| json!({"message": String::from_utf8_lossy(&bytes[..bytes.len().min(512)])}),
    );
    if (200..300).contains(&code) {
        return Ok(body);
    }
    let mut error = ApiError::from_status(code, &body);
    error.retry_after = error.retry_after.or(retry_after);
    Err(error)
}
