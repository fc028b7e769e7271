//! The authentication extractor: a handler that takes [`Authed`] only runs for a valid
//! session token or Basic credentials.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::respond::RedfishError;
use super::service::{Principal, RedfishService};

/// The authenticated caller of a request.
pub(crate) struct Authed(pub Principal);

impl FromRequestParts<Arc<RedfishService>> for Authed {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        service: &Arc<RedfishService>,
    ) -> Result<Self, Self::Rejection> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        service
            .authenticate(header("x-auth-token"), header("authorization"))
            .map(Authed)
            .ok_or_else(|| RedfishError::unauthorized(parts.uri.path()).into_response())
    }
}
