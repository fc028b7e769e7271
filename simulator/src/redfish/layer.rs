//! What every Redfish request goes through before and after its route: request accounting,
//! body buffering, the protocol checks validators make, injected faults, and the headers every
//! answer carries.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::respond::RedfishError;
use super::service::{RedfishService, Redirect};
use crate::host::RequestFault;
use crate::server::DropConnection;

/// Request bodies larger than this are refused (a Redfish request is a few hundred bytes).
const MAX_REQUEST_BYTES: usize = 1024 * 1024;

pub(crate) async fn redfish_layer(
    State(service): State<Arc<RedfishService>>,
    request: Request,
    next: Next,
) -> Response {
    let _in_flight = service.begin_request();
    let (parts, body) = request.into_parts();
    // The body is always read to its end, even for requests answered with an error: an unread
    // body breaks the framing of the next request on a keep-alive connection.
    let Ok(body) = to_bytes(body, MAX_REQUEST_BYTES).await else {
        return finish(
            RedfishError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PayloadTooLarge",
                "The request body is too large.",
            )
            .into_response(),
        );
    };
    if let Some(rejection) = protocol_rejection(&parts) {
        return finish(rejection.into_response());
    }
    if let Some(redirect) = service.redirect_for(parts.uri.path()) {
        return finish(redirect_response(&redirect));
    }
    if let Some(host) = system_id(parts.uri.path()).and_then(|id| service.host(id)) {
        let (fault, latency) = host.request_fault();
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        match fault {
            RequestFault::None => {}
            RequestFault::Drop => {
                let mut response = Response::new(Body::empty());
                response.extensions_mut().insert(DropConnection);
                return response;
            }
            RequestFault::Status(status) => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let mut response = RedfishError::for_status(status).into_response();
                if let Some(seconds) = host.faults().retry_after_s
                    && response.headers().contains_key(header::RETRY_AFTER)
                {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
                }
                return finish(response);
            }
        }
    }
    finish(next.run(Request::from_parts(parts, Body::from(body))).await)
}

/// The checks the DMTF protocol validator makes of every service.
fn protocol_rejection(parts: &axum::http::request::Parts) -> Option<RedfishError> {
    if let Some(version) = parts.headers.get("odata-version")
        && version.as_bytes() != b"4.0"
    {
        return Some(
            RedfishError::new(
                StatusCode::PRECONDITION_FAILED,
                "HeaderInvalid",
                "The header OData-Version must be 4.0.",
            )
            .args(&["OData-Version"]),
        );
    }
    let query = parts.uri.query().unwrap_or("");
    let unsupported = query
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .find(|key| key.starts_with('$'))?;
    Some(
        RedfishError::new(
            StatusCode::NOT_IMPLEMENTED,
            "QueryNotSupported",
            format!("Querying with {unsupported} is not supported by the implementation."),
        )
        .resolution(
            "Remove the query parameters and resubmit the request if the operation failed.",
        ),
    )
}

/// A redirect's answer: its status, its `Location`, no body.
fn redirect_response(redirect: &Redirect) -> Response {
    let status = StatusCode::from_u16(redirect.status).unwrap_or(StatusCode::FOUND);
    let mut response = status.into_response();
    if let Ok(location) = HeaderValue::from_str(&redirect.location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// `/redfish/v1/Systems/{id}...` → `id`.
fn system_id(path: &str) -> Option<&str> {
    path.strip_prefix("/redfish/v1/Systems/")?
        .split('/')
        .next()
        .filter(|id| !id.is_empty())
}

fn finish(mut response: Response) -> Response {
    if response.status() == StatusCode::METHOD_NOT_ALLOWED
        && !response.headers().contains_key(header::CONTENT_TYPE)
    {
        let allow = response.headers().get(header::ALLOW).cloned();
        response = RedfishError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "OperationNotAllowed",
            "The HTTP method is not allowed on this resource.",
        )
        .into_response();
        if let Some(allow) = allow {
            response.headers_mut().insert(header::ALLOW, allow);
        }
    }
    let headers = response.headers_mut();
    headers.insert("odata-version", HeaderValue::from_static("4.0"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The answer for any path the service does not have.
pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    RedfishError::not_found(uri.path()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_ids_are_taken_from_system_paths_only() {
        assert_eq!(system_id("/redfish/v1/Systems/1"), Some("1"));
        assert_eq!(
            system_id("/redfish/v1/Systems/abc/Actions/ComputerSystem.Reset"),
            Some("abc")
        );
        assert_eq!(system_id("/redfish/v1/Systems"), None);
        assert_eq!(system_id("/redfish/v1/Systems/"), None);
        assert_eq!(system_id("/redfish/v1/SessionService"), None);
    }
}
