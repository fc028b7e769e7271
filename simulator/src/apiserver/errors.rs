//! API errors as `Status` bodies, the way `kube::Error::Api` and kubectl read them.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// An API error.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub code: u16,
    /// `StatusReason`, e.g. `NotFound`, `Conflict`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status (name, group, kind, causes).
    pub details: Option<Value>,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
    /// Answered as Go's `http.NotFound` does (plain text `404 page not found`), not as a
    /// Status: what kube-apiserver's mux answers for a path that names no API.
    pub plain_text: bool,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
            plain_text: false,
        }
    }

    fn with_details(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.details = Some(details(group, kind, name));
        self
    }

    /// 404 for a named object.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        ApiError::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(group, plural, name)
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        let mut error = ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        );
        // kube-apiserver v1.36.3 answers a group, version or resource it does not serve from
        // its mux's not-found handler: `404 page not found`, text/plain, no Status (found by
        // the fidelity corpus's `unknown-group` and `unknown-kind`; a client that looks for a
        // `NotFound` reason misses it).
        error.plain_text = true;
        error
    }

    /// 409 AlreadyExists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(group, plural, name)
    }

    /// 409 Conflict on a stale resourceVersion or a failed precondition.
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let resource = qualified(group, plural);
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .with_details(group, plural, name)
    }

    /// 409 Conflict for a write based on a resourceVersion that is no longer the current one.
    pub fn stale(group: &str, plural: &str, name: &str) -> Self {
        ApiError::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with causes.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[(&str, String)]) -> Self {
        let text: Vec<String> = causes
            .iter()
            .map(|(field, message)| format!("{field}: {message}"))
            .collect();
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {}", text.join(", ")),
        );
        let mut found = details(group, kind, name);
        found["causes"] = causes.iter().map(|(field, message)| json!({"reason": "FieldValueInvalid", "message": message, "field": field})).collect();
        error.details = Some(found);
        error
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden for a named object.
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let resource = qualified(group, plural);
        ApiError::new(
            403,
            "Forbidden",
            format!("{resource} \"{name}\" is forbidden: {why}"),
        )
        .with_details(group, plural, name)
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(verb: &str, resource: &str) -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({verb} {resource})"
            ),
        )
    }

    /// 410 Gone for an expired resourceVersion.
    pub fn gone(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 422 for an apply patch without `fieldManager` (kube-apiserver v1.36.3 validates the
    /// PatchOptions: `PatchOptions.meta.k8s.io "" is invalid`).
    pub fn apply_without_manager() -> Self {
        let message = "Required value: is required for apply patch";
        let mut error = ApiError::new(
            422,
            "Invalid",
            format!("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: {message}"),
        );
        error.details = Some(json!({"group": "meta.k8s.io", "kind": "PatchOptions",
            "causes": [{"reason": "FieldValueRequired", "message": message, "field": "fieldManager"}]}));
        error
    }

    /// 422 for a JSON patch that does not apply (a missing path, a failed test): kube-apiserver
    /// v1.36.3 says no more than a generic server response does, with empty details.
    pub fn json_patch_refused() -> Self {
        let mut error = ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        error.details = Some(json!({}));
        error
    }

    /// 415 for a body the server cannot decode.
    pub fn unsupported_media_type(message: &str) -> Self {
        ApiError::new(415, "UnsupportedMediaType", message)
    }

    /// 415 for a patch of a type the server does not know: kube-apiserver v1.36.3 answers the
    /// status line's words only, with empty details.
    pub fn unknown_patch_type() -> Self {
        let mut error = ApiError::new(415, "UnsupportedMediaType", "415: Unsupported Media Type");
        error.details = Some(json!({}));
        error
    }

    /// 406 NotAcceptable: no representation the client accepts can be produced.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        ApiError::new(406, "NotAcceptable", message)
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>, retry_after: Option<u64>) -> Self {
        let mut error = ApiError::new(429, "TooManyRequests", message);
        error.retry_after = retry_after;
        error
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(500, "InternalError", message)
    }

    /// An injected failure with an arbitrary status code.
    pub fn injected(code: u16, retry_after: Option<u64>) -> Self {
        let reason = match code {
            403 => "Forbidden",
            409 => "Conflict",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        let mut error = ApiError::new(code, reason, format!("injected failure ({code})"));
        error.retry_after = retry_after;
        error
    }

    /// The error a server's `Status` answer describes (an API server's refusal read by a
    /// client): its code, reason, message and details.
    pub fn from_status(code: u16, status: &Value) -> Self {
        const REASONS: [&str; 18] = [
            "NotFound",
            "AlreadyExists",
            "Conflict",
            "Invalid",
            "Forbidden",
            "Unauthorized",
            "BadRequest",
            "MethodNotAllowed",
            "Gone",
            "Expired",
            "TooManyRequests",
            "InternalError",
            "ServiceUnavailable",
            "Timeout",
            "UnsupportedMediaType",
            "NotAcceptable",
            "RequestEntityTooLarge",
            "ServerTimeout",
        ];
        let said = status["reason"].as_str().unwrap_or_default();
        let reason = REASONS
            .into_iter()
            .find(|r| *r == said)
            .unwrap_or("Unknown");
        let message = status["message"]
            .as_str()
            .map_or_else(|| format!("the server answered {code}"), str::to_owned);
        let mut error = ApiError::new(code, reason, message);
        error.details = status.get("details").cloned();
        error.retry_after = status
            .pointer("/details/retryAfterSeconds")
            .and_then(Value::as_u64);
        error
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        if let Some(seconds) = self.retry_after {
            let details = status["details"].as_object().cloned().unwrap_or_default();
            let mut details = Value::Object(details);
            details["retryAfterSeconds"] = json!(seconds);
            status["details"] = details;
        }
        status
    }
}

/// `pods`, or `machines.machine.openshift.io`.
pub fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.plain_text {
            let headers = [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ];
            return (status, headers, "404 page not found\n").into_response();
        }
        let mut response = (status, axum::Json(self.status())).into_response();
        if let Some(seconds) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

/// Result alias for API operations.
pub type ApiResult<T> = Result<T, ApiError>;

/// A Status's details: `name` and `group` left out when empty (`metav1.StatusDetails` has
/// them `omitempty`; kube-apiserver v1.36.3 answers `{"name": …, "kind": …}` for core kinds).
pub(crate) fn details(group: &str, kind: &str, name: &str) -> Value {
    let mut found = json!({"kind": kind});
    if !name.is_empty() {
        found["name"] = json!(name);
    }
    if !group.is_empty() {
        found["group"] = json!(group);
    }
    found
}
