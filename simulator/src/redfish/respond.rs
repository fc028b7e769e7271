//! Redfish responses: resources with their headers, and error bodies.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The message registry prefix of every error this service sends.
pub(crate) const BASE: &str = "Base.1.18";

/// `Content-Type` of every JSON answer.
pub(crate) const JSON: &str = "application/json;charset=utf-8";

/// A resource answer: JSON body, `Link: rel=describedby` to its schema, `Allow`, and an `ETag`
/// when given.
pub(crate) fn resource(
    body: &Value,
    schema: &str,
    allow: &'static str,
    etag: Option<&str>,
) -> Response {
    let mut response = json_response(StatusCode::OK, body);
    let headers = response.headers_mut();
    headers.insert(header::ALLOW, HeaderValue::from_static(allow));
    if let Ok(link) = HeaderValue::from_str(&format!(
        "<http://redfish.dmtf.org/schemas/v1/{schema}.json>; rel=describedby"
    )) {
        headers.insert(header::LINK, link);
    }
    if let Some(etag) = etag.and_then(|e| HeaderValue::from_str(e).ok()) {
        headers.insert(header::ETAG, etag);
    }
    response
}

/// Whether an `If-Match` / `If-None-Match` list names `current`: `*` matches anything, and tags
/// are compared weakly (a `W/` prefix is ignored on both sides), as Redfish asks of services.
pub(crate) fn etag_matches(list: &str, current: &str) -> bool {
    let opaque = |tag: &str| {
        let tag = tag.trim();
        tag.strip_prefix("W/").unwrap_or(tag).to_owned()
    };
    let current = opaque(current);
    list.split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || opaque(tag) == current)
}

/// The value of a request header, when it is present and readable.
pub(crate) fn header_text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `304 Not Modified` with the current `ETag` when the request's `If-None-Match` names it.
pub(crate) fn not_modified(headers: &HeaderMap, current: &str) -> Option<Response> {
    let wanted = header_text(headers, header::IF_NONE_MATCH)?;
    if !etag_matches(wanted, current) {
        return None;
    }
    let mut response = StatusCode::NOT_MODIFIED.into_response();
    if let Ok(value) = HeaderValue::from_str(current) {
        response.headers_mut().insert(header::ETAG, value);
    }
    Some(response)
}

/// `412 PreconditionFailed` when the request's `If-Match` does not name `current`.
pub(crate) fn check_if_match(headers: &HeaderMap, current: &str) -> Result<(), RedfishError> {
    match header_text(headers, header::IF_MATCH) {
        Some(wanted) if !etag_matches(wanted, current) => Err(RedfishError::precondition_failed()),
        _ => Ok(()),
    }
}

/// A JSON body with a status.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

/// A Redfish error: status, `Base` message id, text and message arguments.
#[derive(Debug, Clone)]
pub(crate) struct RedfishError {
    pub status: StatusCode,
    pub message_id: &'static str,
    pub message: String,
    pub args: Vec<String>,
    pub resolution: &'static str,
}

impl RedfishError {
    pub(crate) fn new(
        status: StatusCode,
        message_id: &'static str,
        message: impl Into<String>,
    ) -> Self {
        RedfishError {
            status,
            message_id,
            message: message.into(),
            args: Vec::new(),
            resolution: "None.",
        }
    }

    pub(crate) fn args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    pub(crate) fn resolution(mut self, resolution: &'static str) -> Self {
        self.resolution = resolution;
        self
    }

    pub(crate) fn not_found(uri: &str) -> Self {
        RedfishError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("The requested resource at {uri} was not found."),
        )
        .args(&["Resource", uri])
        .resolution("Provide a valid resource identifier and resubmit the request.")
    }

    pub(crate) fn unauthorized(uri: &str) -> Self {
        RedfishError::new(
            StatusCode::UNAUTHORIZED,
            "ResourceAtUriUnauthorized",
            format!("While accessing the resource at {uri}, the service received an authorization error."),
        )
        .args(&[uri, "Unauthorized"])
        .resolution("Ensure that the appropriate access is provided for the service in order for it to access the URI.")
    }

    pub(crate) fn insufficient_privilege() -> Self {
        RedfishError::new(
            StatusCode::FORBIDDEN,
            "InsufficientPrivilege",
            "There are insufficient privileges for the account or credentials associated with the current session to perform the requested operation.",
        )
        .resolution("Either abandon the operation or change the associated access rights and resubmit the request if the operation failed.")
    }

    pub(crate) fn precondition_failed() -> Self {
        RedfishError::new(
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailed",
            "The ETag supplied did not match the ETag required to change this resource.",
        )
        .resolution("Try the operation again using the appropriate ETag.")
    }

    pub(crate) fn property_missing(name: &str) -> Self {
        RedfishError::new(
            StatusCode::BAD_REQUEST,
            "PropertyMissing",
            format!("The property {name} is a required property and must be included in the request."),
        )
        .args(&[name])
        .resolution("Ensure that the property is in the request body and has a valid value and resubmit the request if the operation failed.")
    }

    pub(crate) fn property_unknown(name: &str) -> Self {
        RedfishError::new(
            StatusCode::BAD_REQUEST,
            "PropertyUnknown",
            format!("The property {name} is not in the list of valid properties for the resource."),
        )
        .args(&[name])
        .resolution("Remove the unknown property from the request body and resubmit the request if the operation failed.")
    }

    /// `shown` is the value as it may be shown: never a password.
    pub(crate) fn value_not_in_list(shown: &str, property: &str) -> Self {
        RedfishError::new(
            StatusCode::BAD_REQUEST,
            "PropertyValueNotInList",
            format!("The value {shown} for the property {property} is not in the list of acceptable values."),
        )
        .args(&[shown, property])
        .resolution("Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed.")
    }

    pub(crate) fn malformed_json() -> Self {
        RedfishError::new(
            StatusCode::BAD_REQUEST,
            "MalformedJSON",
            "The request body submitted was malformed JSON and could not be parsed by the receiving service.",
        )
        .resolution("Ensure that the request body is valid JSON and resubmit the request.")
    }

    /// The error body a status code gets when nothing more specific applies (injected faults).
    pub(crate) fn for_status(status: StatusCode) -> Self {
        let (id, message) = match status.as_u16() {
            503 => (
                "ServiceTemporarilyUnavailable",
                "The service is temporarily unavailable.",
            ),
            429 => (
                "ServiceTemporarilyUnavailable",
                "Too many requests; retry later.",
            ),
            401 => (
                "NoValidSession",
                "There is no valid session established with the implementation.",
            ),
            403 => (
                "InsufficientPrivilege",
                "There are insufficient privileges for the requested operation.",
            ),
            404 => ("ResourceNotFound", "The requested resource was not found."),
            _ => (
                "InternalError",
                "The request failed due to an internal service error.",
            ),
        };
        RedfishError::new(status, id, message)
    }
}

impl IntoResponse for RedfishError {
    fn into_response(self) -> Response {
        let id = format!("{BASE}.{}", self.message_id);
        let body = json!({
            "error": {
                "code": id,
                "message": self.message,
                "@Message.ExtendedInfo": [{
                    "@odata.type": "#Message.v1_1_2.Message",
                    "MessageId": id,
                    "Message": self.message,
                    "MessageArgs": self.args,
                    "MessageSeverity": if self.status.is_server_error() { "Critical" } else { "Warning" },
                    "Resolution": self.resolution,
                }]
            }
        });
        let mut response = json_response(self.status, &body);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"baremend-sim\""),
            );
        }
        if matches!(self.status.as_u16(), 429 | 503) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
