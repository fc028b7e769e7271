//! The HTTP face of the simulated API server: authentication, injected faults, discovery and
//! the REST verbs on every served resource.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::ServerState;
use super::auth::escalation::{self, RbacKind};
use super::auth::tokens::request_token;
use super::auth::user::{ANONYMOUS, UserInfo};
use super::auth::{authn, request_info};
use super::csr::{stamp, update_approval};
use super::discovery::{
    DiscoveryRoot, aggregated, group_document, group_list, openapi_document, openapi_root,
    resource_list,
};
use super::errors::{ApiError, ApiResult};
use super::eviction::evict;
use super::kinds::ResourceType;
use super::negotiate::{
    DiscoveryFormat, MediaRanges, Rendering, partial_metadata, partial_metadata_list, wrong_shape,
};
use super::operations::{PatchKind, SubresourceWrite, patch};
use super::pod_logs;
use super::scale::{ScaleTarget, get_scale, write_scale};
use super::selectors::{FieldSelector, LabelSelector};
use super::store::DeleteOptions;
use super::validation::admission::RequestUser;
use super::watch::{WatchRequest, start};

/// Request bodies larger than this are refused (etcd's limit is about 1.5 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

fn percent_decode(text: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => out.push(b' '),
            b'%' if index + 2 < bytes.len() => match (hex(bytes[index + 1]), hex(bytes[index + 2]))
            {
                (Some(high), Some(low)) => {
                    out.push(high * 16 + low);
                    index += 2;
                }
                _ => out.push(b'%'),
            },
            other => out.push(other),
        }
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_map(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (percent_decode(k), percent_decode(v)),
            None => (percent_decode(pair), String::new()),
        })
        .collect()
}

/// A JSON answer, written from `body` as it is (a list of thousands of objects is not copied
/// first: its copy and its encoding were most of a list's time).
fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    let mut bytes = Vec::with_capacity(4096);
    match serde_json::to_writer(&mut bytes, body) {
        Ok(()) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(error) => ApiError::internal(error.to_string()).into_response(),
    }
}

/// An answer in the Kubernetes protobuf encoding.
fn protobuf_response(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf")],
        body,
    )
        .into_response()
}

/// `/openapi/v2`: what kubectl's client-side validation reads when the OpenAPI v3 documents do
/// not know an object's group-version (a kind whose CRD is not installed). Protobuf when asked
/// for, as kubectl does; JSON otherwise.
fn openapi_v2(headers: &HeaderMap) -> Response {
    // The media type the real server answers with (Go's mime parser refuses the `@` of the
    // one kubectl asks for).
    const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
    let version = "v1.32.0";
    let wants_protobuf = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("proto-openapi.spec.v2"));
    if wants_protobuf {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, PROTOBUF)],
            super::protobuf::openapi_v2_document(version),
        )
            .into_response()
    } else {
        json_response(
            StatusCode::OK,
            &json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": version}, "paths": {}}),
        )
    }
}

fn accept(headers: &HeaderMap) -> MediaRanges {
    MediaRanges::parse(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

/// `/api` or `/apis`: the legacy document, or aggregated discovery when the client asks for
/// it (with the media type naming the kind, as client-go checks, and an ETag).
fn discovery_root(
    state: &ServerState,
    headers: &HeaderMap,
    root: DiscoveryRoot,
) -> ApiResult<Response> {
    let version = match accept(headers).discovery()? {
        DiscoveryFormat::Legacy => {
            let legacy = match root {
                DiscoveryRoot::Core => {
                    json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": state.address}]})
                }
                DiscoveryRoot::Groups => group_list(state),
            };
            return Ok(with_vary_accept(json_response(StatusCode::OK, &legacy)));
        }
        DiscoveryFormat::Aggregated(version) => version,
    };
    let body = aggregated(state, root, version).to_string();
    let etag = format!("\"{:016X}\"", fnv1a(body.as_bytes()));
    let content_type = format!(
        "application/json;g=apidiscovery.k8s.io;v={};as=APIGroupDiscoveryList",
        version.as_str()
    );
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|tag| tag.trim() == etag));
    let status = if unchanged {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let body = if unchanged { String::new() } else { body };
    Ok(with_vary_accept(
        (
            status,
            [(header::CONTENT_TYPE, content_type), (header::ETAG, etag)],
            body,
        )
            .into_response(),
    ))
}

/// The discovery roots answer by `Accept`, so caches must key on it.
fn with_vary_accept(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::VARY, header::HeaderValue::from_static("Accept"));
    response
}

/// A stable 64-bit FNV-1a hash (the ETag of a discovery document).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The entry point of every request.
pub(crate) async fn dispatch(State(state): State<Arc<ServerState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let query = query_map(parts.uri.query());
    let user = match identify(&state, &parts.method, &path, &query, &parts.headers) {
        Ok(user) => user,
        Err(error) => return error.into_response(),
    };
    let body = match to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => {
            return ApiError {
                code: 413,
                reason: "RequestEntityTooLarge",
                message: "the request body is too large".into(),
                details: None,
                retry_after: None,
                plain_text: false,
            }
            .into_response();
        }
    };
    let _review = state.reviews.track(&parts.method, &path);
    if let Some((error, delay)) = state.take_fault(&parts.method, &path) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if let Some(error) = error {
            return error.into_response();
        }
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_owned();
    let writes = matches!(parts.method, Method::POST | Method::PUT | Method::DELETE);
    let body = if !body.is_empty()
        && writes
        && content_type.starts_with("application/vnd.kubernetes.protobuf")
    {
        // kubectl's typed clients (every `kubectl create <kind>`, drain, auth can-i) send
        // protobuf.
        match super::protobuf::decode(&body) {
            Ok(object) => Bytes::from(object.to_string()),
            Err(why) => {
                return ApiError::unsupported_media_type(&format!("{content_type}: {why}"))
                    .into_response();
            }
        }
    } else if !body.is_empty()
        && writes
        && content_type.split(';').next().map(str::trim) == Some("application/yaml")
    {
        // `kubectl create -f x.yaml --raw`, client-go's YAML serializer: a real server decodes
        // YAML bodies for create and update as it does JSON ones.
        match serde_yaml::from_slice::<serde_json::Value>(&body) {
            Ok(object) => Bytes::from(object.to_string()),
            Err(why) => {
                return ApiError::bad_request(format!(
                    "the body of the request could not be decoded as YAML: {why}"
                ))
                .into_response();
            }
        }
    } else if !body.is_empty()
        && matches!(parts.method, Method::POST | Method::PUT)
        && !content_type.starts_with("application/json")
        && !content_type.starts_with("*/*")
    {
        // kube-apiserver v1.36.3's words (tests/fidelity_corpus.rs, `configmap-create-as-text`).
        return ApiError::unsupported_media_type(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
        .into_response();
    } else {
        body
    };
    let recorded = state
        .audit
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .map(|log| {
            let at = std::time::Instant::now();
            log.push(super::AuditRecord {
                method: parts.method.to_string(),
                path: path.clone(),
                watch: query.get("watch").is_some_and(|w| w == "true" || w == "1"),
                label_selector: query.get("labelSelector").cloned(),
                at,
                served: None,
            });
            (log.len() - 1, at)
        });
    let request = Call {
        user: &user,
        method: &parts.method,
        path: &path,
        query: &query,
        headers: &parts.headers,
    };
    let response = match route(&state, request, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    // The same record: recording may have restarted meanwhile.
    if let Some((index, at)) = recorded
        && let Some(record) = state
            .audit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(|log| log.get_mut(index))
            .filter(|record| record.at == at)
    {
        record.served = Some(std::time::Instant::now());
    }
    response
}

/// Who is calling (401 for an unknown token, or no token outside the public paths), as whom
/// (impersonation, each part of it authorized), and whether RBAC lets them (403).
fn identify(
    state: &ServerState,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult<UserInfo> {
    let public = matches!(path, "/healthz" | "/readyz" | "/livez" | "/version");
    let user = state
        .authenticate(headers)
        .filter(|user| public || user.username != ANONYMOUS)
        .ok_or_else(ApiError::unauthorized)?;
    let user = match authn::impersonation(headers)? {
        None => user,
        Some(asked) => {
            for check in authn::impersonation_checks(&asked) {
                state.authorizer.check(&user, &check)?;
            }
            authn::impersonated(asked)
        }
    };
    let attributes = request_info::attributes(method.as_str(), path, query);
    state.authorizer.check(&user, &attributes)?;
    Ok(user)
}

/// One authorized request.
#[derive(Clone, Copy)]
struct Call<'a> {
    user: &'a UserInfo,
    method: &'a Method,
    path: &'a str,
    query: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
}

async fn route(state: &Arc<ServerState>, call: Call<'_>, body: Bytes) -> ApiResult<Response> {
    let Call {
        user,
        method,
        path,
        query: _,
        headers,
    } = call;
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        ["healthz"] | ["readyz"] | ["livez"] => Ok("ok".into_response()),
        ["version"] => Ok(json_response(StatusCode::OK, &state.version_info())),
        ["api"] => discovery_root(state, headers, DiscoveryRoot::Core),
        ["api", "v1"] => Ok(json_response(
            StatusCode::OK,
            &resource_list(state, "", "v1"),
        )),
        ["apis"] => discovery_root(state, headers, DiscoveryRoot::Groups),
        ["apis", group, rest @ ..] if super::reviews::owns(group) => {
            super::reviews::route(state, user, method, group, rest, path, &body)
        }
        ["openapi", "v2"] => Ok(openapi_v2(headers)),
        ["openapi", "v3"] => Ok(json_response(StatusCode::OK, &openapi_root(state))),
        ["openapi", "v3", "api", "v1"] => Ok(json_response(
            StatusCode::OK,
            &openapi_document(state, "", "v1"),
        )),
        ["openapi", "v3", "apis", group, version] => {
            if !serves(state, group, version) {
                return Err(ApiError::no_route(path));
            }
            Ok(json_response(
                StatusCode::OK,
                &openapi_document(state, group, version),
            ))
        }
        ["apis", group] => group_document(state, group).map(|g| json_response(StatusCode::OK, &g)),
        ["apis", group, version] => {
            if !serves(state, group, version) {
                return Err(ApiError::no_route(path));
            }
            Ok(json_response(
                StatusCode::OK,
                &resource_list(state, group, version),
            ))
        }
        ["api", "v1", rest @ ..] => resource(state, call, "", "v1", rest, body).await,
        ["apis", group, version, rest @ ..] => {
            resource(state, call, group, version, rest, body).await
        }
        _ => Err(ApiError::no_route(path)),
    }
}

/// Whether `group/version` is served.
fn serves(state: &ServerState, group: &str, version: &str) -> bool {
    state.store.serves(group, version)
}

/// What a resource path names.
struct Target {
    ty: Arc<ResourceType>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_target(
    state: &ServerState,
    group: &str,
    version: &str,
    rest: &[&str],
    path: &str,
) -> ApiResult<Target> {
    let lookup = |plural: &str| {
        state
            .store
            .resource_type(group, version, plural)
            .ok_or_else(|| ApiError::no_route(path))
    };
    let namespace_object = group.is_empty()
        && rest.first() == Some(&"namespaces")
        && (rest.len() <= 2 || (rest.len() == 3 && matches!(rest[2], "status" | "finalize")));
    let (namespace, rest) = match rest {
        ["namespaces", namespace, tail @ ..] if !namespace_object && !tail.is_empty() => {
            (Some((*namespace).to_owned()), tail)
        }
        other => (None, other),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some((*name).to_owned()), None),
        [plural, name, sub] => (*plural, Some((*name).to_owned()), Some((*sub).to_owned())),
        _ => return Err(ApiError::no_route(path)),
    };
    let ty = lookup(plural)?;
    if namespace.is_some() && !ty.namespaced {
        return Err(ApiError::no_route(path));
    }
    if ty.namespaced && namespace.is_none() && name.is_some() {
        return Err(ApiError::no_route(path));
    }
    match (subresource.as_deref(), ty.plural.as_str()) {
        (None, _) => {}
        (Some("status"), _) if ty.status_subresource => {}
        (Some("scale"), _) if ty.scale.is_some() => {}
        (Some("eviction"), "pods") if ty.group.is_empty() => {}
        (Some("log"), "pods") if ty.group.is_empty() => {}
        (Some("token"), "serviceaccounts") if ty.group.is_empty() => {}
        (Some("approval"), "certificatesigningrequests") if ty.group == "certificates.k8s.io" => {}
        (Some("finalize"), "namespaces") => {}
        _ => return Err(ApiError::no_route(path)),
    }
    Ok(Target {
        ty,
        namespace,
        name,
        subresource,
    })
}

fn parse_json(body: &Bytes) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// An apply patch's body: YAML (JSON is YAML), as `application/apply-patch+yaml` says.
fn parse_apply(body: &Bytes) -> ApiResult<Value> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

/// The kinds whose immediate deletion answers the deleted object (their registries set
/// `ReturnDeletedObject`, kubernetes v1.36.3 `pkg/registry/**/storage.go`); any other answers a
/// `Success` Status naming it. A deletion still pending (finalizers, a grace period) answers
/// the object whatever the kind.
const RETURNS_DELETED_OBJECT: &[(&str, &str)] = &[
    ("", "namespaces"),
    ("", "pods"),
    ("", "services"),
    ("", "serviceaccounts"),
    ("", "persistentvolumes"),
    ("", "persistentvolumeclaims"),
    ("", "podtemplates"),
    ("", "resourcequotas"),
    ("storage.k8s.io", "storageclasses"),
    ("storage.k8s.io", "csidrivers"),
    ("storage.k8s.io", "csinodes"),
    ("storage.k8s.io", "volumeattachments"),
    ("storage.k8s.io", "volumeattributesclasses"),
];

/// What a DELETE of one object answers.
fn deletion_answer(ty: &ResourceType, deleted: Value, pending: bool) -> Value {
    let kept = RETURNS_DELETED_OBJECT.contains(&(ty.group.as_str(), ty.plural.as_str()));
    if pending || kept || ty.group == "resource.k8s.io" {
        return deleted;
    }
    let mut details = super::errors::details(
        &ty.group,
        &ty.plural,
        deleted
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    details["uid"] = deleted
        .pointer("/metadata/uid")
        .cloned()
        .unwrap_or(Value::Null);
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": details})
}

/// Strict field validation (`fieldValidation=Strict`, what kubectl sends by default): a body
/// with a field the kind's schema does not declare is refused, where it would otherwise be
/// pruned silently, in kube-apiserver v1.36.3's words (`RemediationPolicy in version
/// "v1alpha1" cannot be handled as a RemediationPolicy: strict decoding error: unknown field
/// "spec.mdoe"`; found by the real-plane test of a misspelled policy field). Kinds without a
/// schema (our built-ins) are not checked.
fn strict_fields(
    ty: &ResourceType,
    version: &str,
    query: &HashMap<String, String>,
    body: &Value,
) -> ApiResult<()> {
    if query.get("fieldValidation").map(String::as_str) != Some("Strict") {
        return Ok(());
    }
    let Some(schema) = ty.schemas.as_ref().and_then(|s| s.version(version)) else {
        return Ok(());
    };
    let mut unknown = Vec::new();
    schema.unknown_fields(body, true, "", &mut unknown);
    if unknown.is_empty() {
        return Ok(());
    }
    let fields: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        fields.join(", "),
        kind = ty.kind
    )))
}

fn dry_run(query: &HashMap<String, String>) -> bool {
    query.get("dryRun").is_some_and(|v| v == "All")
}

fn manager(query: &HashMap<String, String>, headers: &HeaderMap) -> String {
    query
        .get("fieldManager")
        .cloned()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| {
            headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .and_then(|ua| ua.split('/').next())
                .filter(|m| !m.is_empty())
                .unwrap_or("unknown")
                .to_owned()
        })
}

/// A request on a served resource: its subresources that answer on their own (`scale`,
/// `approval`, `log`), then one handler per verb.
async fn resource(
    state: &Arc<ServerState>,
    call: Call<'_>,
    group: &str,
    version: &str,
    rest: &[&str],
    body: Bytes,
) -> ApiResult<Response> {
    let Call {
        user,
        method,
        path,
        query,
        headers,
    } = call;
    // NodeRestriction and admission policies judge the caller: passed with each write.
    let caller = RequestUser::of(user);
    let target = parse_target(state, group, version, rest, path)?;
    match target.subresource.as_deref() {
        Some("scale") => {
            let request = (method, path, query, headers, &body);
            return scale_request(state, &caller, &target, version, request);
        }
        Some("approval") => {
            return approval_request(state, method, &target, path, query, headers, &body);
        }
        Some("log") => {
            let (namespace, name) = (target.namespace.as_deref(), target.name.as_deref());
            return pod_logs::serve(
                &state.store,
                &state.pod_logs,
                method,
                namespace.unwrap_or_default(),
                name.unwrap_or_default(),
                query,
            );
        }
        _ => {}
    }
    let rendering = accept(headers).rendering()?;
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    if target.ty.is_read_only() && (*method != Method::GET || watch) {
        // ComponentStatus is served for get and list only, as by the real server.
        let verb = if watch { "watch" } else { method.as_str() };
        return Err(ApiError::method_not_allowed(verb, &target.ty.plural));
    }
    let list = target.name.is_none() && matches!(*method, Method::GET | Method::DELETE) && !watch;
    check_shape(rendering, list)?;
    let served = Served {
        state,
        call,
        caller,
        version,
        namespace: target.namespace.clone().unwrap_or_default(),
        status: target.subresource.as_deref() == Some("status"),
        // Writes of RBAC objects must not grant what the caller does not hold.
        rbac: RbacKind::of(group, &target.ty.plural).filter(|_| target.subresource.is_none()),
        rendering,
        // Objects and lists in the client's encoding: protobuf when it prefers it (kubectl's
        // typed clients), JSON otherwise and for what has no protobuf message.
        protobuf: rendering == Rendering::Object && accept(headers).prefers_protobuf(),
        target,
        body,
    };
    let subresource = served.target.subresource.as_deref();
    match (method.clone(), served.target.name.as_deref()) {
        (Method::GET, None) if watch => served.watch(),
        (Method::GET, None) => served.list(),
        (Method::GET, Some(name)) => served.get(name),
        (Method::POST, None) => served.create(),
        (Method::POST, Some(name)) if subresource == Some("eviction") => served.evict(name),
        (Method::POST, Some(name)) if subresource == Some("token") => served.issue_token(name),
        (Method::PUT, Some(name)) => served.replace(name),
        (Method::PATCH, Some(name)) => served.patch(name),
        (Method::DELETE, Some(name)) => served.delete(name),
        (Method::DELETE, None) => served.delete_collection(),
        (method, _) => Err(ApiError::method_not_allowed(method.as_str(), path)),
    }
}

/// One request on a served resource, past authentication and authorization, as each verb's
/// handler reads it.
struct Served<'a> {
    state: &'a Arc<ServerState>,
    call: Call<'a>,
    /// Who writes, as NodeRestriction and admission policies judge it.
    caller: RequestUser,
    target: Target,
    version: &'a str,
    /// The path's namespace (empty for a cluster-scoped kind or an all-namespaces list).
    namespace: String,
    /// A write through the status subresource.
    status: bool,
    /// The RBAC kind written, for the escalation check.
    rbac: Option<RbacKind>,
    rendering: Rendering,
    protobuf: bool,
    body: Bytes,
}

impl Served<'_> {
    fn ty(&self) -> &ResourceType {
        &self.target.ty
    }

    fn query(&self) -> &HashMap<String, String> {
        self.call.query
    }

    /// One object or list in the rendering and encoding the client asked for.
    fn answer(&self, code: StatusCode, object: Value) -> Response {
        let object = match self.rendering {
            Rendering::Metadata(version) => partial_metadata(version, &object),
            _ => object,
        };
        match self.protobuf.then(|| super::protobuf::encode(&object)) {
            Some(Ok(bytes)) => protobuf_response(code, bytes),
            _ => json_response(code, &object),
        }
    }

    /// `objects` as a Table (`kubectl get`'s rendering).
    fn table(&self, objects: &[Value], rv: &str, next: Option<&str>) -> Response {
        let include_object = self
            .query()
            .get("includeObject")
            .is_some_and(|v| v == "Object");
        let table = super::table::table(
            self.ty(),
            objects,
            rv,
            next,
            self.state.wall.since_epoch(),
            include_object,
        );
        json_response(StatusCode::OK, &table)
    }

    /// `GET` of a collection with `watch`: the stream of changes.
    fn watch(&self) -> ApiResult<Response> {
        let (labels, fields) = selectors(self.query(), &self.ty().plural)?;
        let scope = WatchScope {
            ty: self.target.ty.clone(),
            version: self.version,
            namespace: self.target.namespace.clone(),
            labels,
            fields,
        };
        let request = watch_request(self.state, scope, self.query(), self.rendering)?;
        let wall = self.state.wall.clone();
        start(
            self.state.store.clone(),
            request,
            self.state.stop_watches.subscribe(),
            move || wall.since_epoch(),
        )
    }

    /// `GET` of a collection: one page of the list.
    fn list(&self) -> ApiResult<Response> {
        let (labels, fields) = selectors(self.query(), &self.ty().plural)?;
        let limit = self
            .query()
            .get("limit")
            .and_then(|l| l.parse::<usize>().ok())
            .filter(|l| *l > 0);
        let page = self.state.store.list_page(
            self.ty(),
            self.version,
            self.target.namespace.as_deref(),
            &labels,
            &fields,
            limit,
            self.query()
                .get("continue")
                .map(String::as_str)
                .filter(|c| !c.is_empty()),
        )?;
        if self.rendering == Rendering::Object && !self.protobuf {
            // The common answer, written from the store's objects as they are.
            return Ok(json_response(StatusCode::OK, &page));
        }
        let list = page.into_value();
        match self.rendering {
            Rendering::Table => {
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let rv = list["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                Ok(self.table(&items, rv, list["metadata"]["continue"].as_str()))
            }
            Rendering::MetadataList(version) => Ok(json_response(
                StatusCode::OK,
                &partial_metadata_list(version, &list),
            )),
            _ => Ok(self.answer(StatusCode::OK, list)),
        }
    }

    /// `GET` of one object (or its status).
    fn get(&self, name: &str) -> ApiResult<Response> {
        let object = self
            .state
            .store
            .get(self.ty(), self.version, &self.namespace, name)?;
        if self.rendering == Rendering::Table && !self.status {
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            return Ok(self.table(&[object], &rv, None));
        }
        Ok(self.answer(StatusCode::OK, object))
    }

    /// `POST` to a collection: a create.
    fn create(&self) -> ApiResult<Response> {
        let ty = self.ty();
        if self.target.namespace.is_none() && ty.namespaced {
            return Err(ApiError::method_not_allowed("POST", self.call.path));
        }
        let mut object = parse_json(&self.body)?;
        strict_fields(ty, self.version, self.query(), &object)?;
        if ty.group == "certificates.k8s.io" && ty.plural == "certificatesigningrequests" {
            stamp(&mut object, self.call.user);
        }
        self.no_escalation(&object)?;
        // A create is an update from nothing: its manager owns what it set (the real
        // server's field manager records every write, not only applies).
        let manager = manager(self.query(), self.call.headers);
        super::apply::record_update(ty, self.version, &json!({}), &mut object, &manager);
        let created = self.state.store.create(
            &self.caller,
            ty,
            self.version,
            &self.namespace,
            object,
            dry_run(self.query()),
        )?;
        Ok(self.answer(StatusCode::CREATED, created))
    }

    /// The escalation check of a write of an RBAC object (none for other kinds).
    fn no_escalation(&self, object: &Value) -> ApiResult<()> {
        match self.rbac {
            Some(kind) => escalation::check(
                &self.state.authorizer,
                self.call.user,
                kind,
                &self.namespace,
                object,
            ),
            None => Ok(()),
        }
    }

    /// `POST …/pods/<name>/eviction`.
    fn evict(&self, name: &str) -> ApiResult<Response> {
        let eviction = parse_json(&self.body)?;
        evict(
            &self.state.store,
            &self.caller,
            &self.namespace,
            name,
            &eviction,
        )?;
        Ok(json_response(
            StatusCode::CREATED,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        ))
    }

    /// `POST …/serviceaccounts/<name>/token`.
    fn issue_token(&self, name: &str) -> ApiResult<Response> {
        let issued = request_token(
            &self.state.store,
            &self.state.tokens,
            &self.namespace,
            name,
            &parse_json(&self.body)?,
            self.state.wall.since_epoch().as_secs(),
        )?;
        Ok(json_response(StatusCode::CREATED, &issued))
    }

    /// `PUT` of one object (or its status).
    fn replace(&self, name: &str) -> ApiResult<Response> {
        let object = parse_json(&self.body)?;
        strict_fields(self.ty(), self.version, self.query(), &object)?;
        self.no_escalation(&object)?;
        let updated = self.state.store.update(
            &self.caller,
            self.ty(),
            self.version,
            &self.namespace,
            name,
            object,
            self.status,
            dry_run(self.query()),
        )?;
        Ok(self.answer(StatusCode::OK, updated))
    }

    /// `PATCH` of one object (or its status): JSON, merge, strategic merge or apply.
    fn patch(&self, name: &str) -> ApiResult<Response> {
        let (query, ty) = (self.query(), self.ty());
        let content_type = self
            .call
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let mut kind =
            PatchKind::from_content_type(content_type).ok_or_else(ApiError::unknown_patch_type)?;
        if let PatchKind::Apply { manager: m, force } = &mut kind {
            *m = query.get("fieldManager").cloned().unwrap_or_default();
            *force = query.get("force").is_some_and(|f| f == "true");
        }
        let store = &self.state.store;
        let existed = store.get(ty, self.version, &self.namespace, name).is_ok();
        let patch_body = match &kind {
            PatchKind::Apply { manager, .. } if manager.is_empty() => {
                return Err(ApiError::apply_without_manager());
            }
            PatchKind::Apply { .. } => parse_apply(&self.body)?,
            _ => parse_json(&self.body)?,
        };
        strict_fields(ty, self.version, query, &patch_body)?;
        let manager = manager(query, self.call.headers);
        let run = |dry_run: bool| {
            patch(
                store,
                &self.caller,
                ty,
                self.version,
                &self.namespace,
                name,
                &kind,
                &patch_body,
                self.status,
                &manager,
                dry_run,
            )
        };
        if self.rbac.is_some() {
            // The object the patch would store, without storing it.
            self.no_escalation(&run(true)?)?;
        }
        let patched = run(dry_run(query))?;
        let code = if existed {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        Ok(self.answer(code, patched))
    }

    /// `DELETE` of one object.
    fn delete(&self, name: &str) -> ApiResult<Response> {
        let store = &self.state.store;
        let options = delete_options(self.query(), &self.body)?;
        let deleted = store.delete(
            &self.caller,
            self.ty(),
            self.version,
            &self.namespace,
            name,
            &options,
        )?;
        let pending = store
            .get(self.ty(), self.version, &self.namespace, name)
            .is_ok();
        Ok(self.answer(StatusCode::OK, deletion_answer(self.ty(), deleted, pending)))
    }

    /// `DELETE` of a collection: each object the selectors match, one by one.
    fn delete_collection(&self) -> ApiResult<Response> {
        let (store, ty, version) = (&self.state.store, self.ty(), self.version);
        let (labels, fields) = selectors(self.query(), &ty.plural)?;
        let options = delete_options(self.query(), &self.body)?;
        let namespace = self.target.namespace.as_deref();
        let list = store.list(ty, version, namespace, &labels, &fields, None, None)?;
        let mut deleted = Vec::new();
        for item in list["items"].as_array().cloned().unwrap_or_default() {
            let name = item["metadata"]["name"].as_str().unwrap_or_default();
            let ns = item["metadata"]["namespace"].as_str().unwrap_or_default();
            if let Ok(object) = store.delete(&self.caller, ty, version, ns, name, &options) {
                deleted.push(object);
            }
        }
        let list = json!({"apiVersion": ty.api_version(version), "kind": format!("{}List", ty.kind), "metadata": {"resourceVersion": store.revision().to_string()}, "items": deleted});
        let list = match self.rendering {
            Rendering::MetadataList(version) => partial_metadata_list(version, &list),
            _ => list,
        };
        Ok(json_response(StatusCode::OK, &list))
    }
}

/// What a `PUT` or `PATCH` of a whole-object subresource (`/scale`, `/approval`) carries;
/// None for a `GET`.
fn subresource_write(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult<Option<SubresourceWrite>> {
    match *method {
        Method::GET => Ok(None),
        Method::PUT => Ok(Some(SubresourceWrite::Replace(parse_json(body)?))),
        Method::PATCH => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(content_type)
                .filter(|k| matches!(k, PatchKind::Merge | PatchKind::Json))
                .ok_or_else(ApiError::unknown_patch_type)?;
            Ok(Some(SubresourceWrite::Patch(kind, parse_json(body)?)))
        }
        ref other => Err(ApiError::method_not_allowed(other.as_str(), path)),
    }
}

/// `GET`, `PUT` and `PATCH …/approval` of a CertificateSigningRequest.
fn approval_request(
    state: &ServerState,
    method: &Method,
    target: &Target,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> ApiResult<Response> {
    let name = target.name.as_deref().unwrap_or_default();
    let Some(write) = subresource_write(method, path, headers, body)? else {
        let object = state.store.get(&target.ty, "v1", "", name)?;
        return Ok(json_response(StatusCode::OK, &object));
    };
    let updated = update_approval(&state.store, &target.ty, name, &write, dry_run(query))?;
    Ok(json_response(StatusCode::OK, &updated))
}

/// An HTTP request's method, path, query, headers and body, for a subresource's handler.
type SubresourceRequest<'a> = (
    &'a Method,
    &'a str,
    &'a HashMap<String, String>,
    &'a HeaderMap,
    &'a Bytes,
);

/// `GET`, `PUT` and `PATCH …/scale` of a custom resource, by `caller`.
fn scale_request(
    state: &ServerState,
    caller: &RequestUser,
    target: &Target,
    version: &str,
    (method, path, query, headers, body): SubresourceRequest<'_>,
) -> ApiResult<Response> {
    let scale_target = ScaleTarget {
        ty: &target.ty,
        version,
        namespace: target.namespace.as_deref().unwrap_or_default(),
        name: target.name.as_deref().unwrap_or_default(),
        path,
    };
    let Some(write) = subresource_write(method, path, headers, body)? else {
        let scale = get_scale(&state.store, scale_target)?;
        return Ok(json_response(StatusCode::OK, &scale));
    };
    let scale = write_scale(
        &state.store,
        caller,
        scale_target,
        &write,
        &manager(query, headers),
        dry_run(query),
    )?;
    Ok(json_response(StatusCode::OK, &scale))
}

/// The label and field selectors of a list, a watch or a collection delete.
fn selectors(
    query: &HashMap<String, String>,
    plural: &str,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").map_or("", String::as_str),
        plural,
    )
    .map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

/// The objects a watch covers.
struct WatchScope<'a> {
    ty: Arc<ResourceType>,
    version: &'a str,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

/// What a `?watch=true` asks for.
fn watch_request(
    state: &ServerState,
    scope: WatchScope<'_>,
    query: &HashMap<String, String>,
    rendering: Rendering,
) -> ApiResult<WatchRequest> {
    let resource_version = match query.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?,
        ),
    };
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    Ok(WatchRequest {
        ty: scope.ty,
        version: scope.version.to_owned(),
        namespace: scope.namespace,
        labels: scope.labels,
        fields: scope.fields,
        resource_version,
        bookmarks: query
            .get("allowWatchBookmarks")
            .is_some_and(|v| v == "true"),
        timeout,
        bookmark_interval: state.bookmark_interval,
        rendering,
        initial_events_end: query.get("sendInitialEvents").is_some_and(|v| v == "true"),
    })
}

/// Refuses a metadata rendering of the wrong shape (a list's for one object, or one
/// object's for a list), with the real server's 406.
fn check_shape(rendering: Rendering, list: bool) -> ApiResult<()> {
    match (rendering, list) {
        (Rendering::Metadata(_), true) => Err(wrong_shape("PartialObjectMetadata", "a list")),
        (Rendering::MetadataList(_), false) => {
            Err(wrong_shape("PartialObjectMetadataList", "not a list"))
        }
        _ => Ok(()),
    }
}

fn delete_options(query: &HashMap<String, String>, body: &Bytes) -> ApiResult<DeleteOptions> {
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let grace = query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse::<i64>().ok())
        .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64));
    let propagation = query.get("propagationPolicy").cloned().or_else(|| {
        body.get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let dry_run = dry_run(query)
        || body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    Ok(DeleteOptions {
        uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_owned),
        resource_version: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_owned),
        grace_period_seconds: grace,
        orphan: propagation.as_deref() == Some("Orphan")
            || body.get("orphanDependents").and_then(Value::as_bool) == Some(true),
        dry_run,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_percent_decoded() {
        let query = query_map(Some("labelSelector=app%3Ddb%2Ctier+in+%28a%29&watch=1&x"));
        assert_eq!(query["labelSelector"], "app=db,tier in (a)");
        assert_eq!(query["watch"], "1");
        assert_eq!(query["x"], "");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
