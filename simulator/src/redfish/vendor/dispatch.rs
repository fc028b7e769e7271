//! Serving a vendor profile: GET of its documents (the System with the host's power state),
//! session login at the vendor's `Links.Sessions`, and the Reset action answered as the vendor
//! does. Paths match with or without a trailing slash.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Profile, ResetStyle, normalize};
use crate::host::{Power, PowerAction, SimHost};
use crate::redfish::accounts;
use crate::redfish::respond::{RedfishError, json_response, resource};
use crate::redfish::service::RedfishService;

struct VendorState {
    service: Arc<RedfishService>,
    profile: Profile,
}

type Shared = Arc<VendorState>;

/// The router that serves `profile` for every path the common routes do not take.
pub(crate) fn router(service: Arc<RedfishService>, profile: Profile) -> Router {
    Router::new()
        .fallback(dispatch)
        .with_state(Arc::new(VendorState { service, profile }))
}

async fn dispatch(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = normalize(uri.path());
    let profile = &state.profile;
    if method == Method::POST && path == profile.sessions_path {
        return accounts::log_in(State(state.service.clone()), uri, body)
            .await
            .into_response();
    }
    if method == Method::GET && path == "/redfish" {
        return json_response(StatusCode::OK, &json!({"v1": "/redfish/v1/"}));
    }
    // The service root is the only document readable without credentials.
    let principal = state.service.authenticate(
        header_text(&headers, "x-auth-token"),
        header_text(&headers, "authorization"),
    );
    if principal.is_none() && path != "/redfish/v1" {
        return RedfishError::unauthorized(uri.path()).into_response();
    }
    match method {
        Method::GET | Method::HEAD => get(&state, path, uri.path()),
        Method::POST if path == profile.reset_target => {
            if !principal.is_some_and(|p| p.role.may_configure_components()) {
                return RedfishError::insufficient_privilege().into_response();
            }
            match state.service.host(&profile.system_id) {
                Some(host) => reset(&state, host, &body),
                None => RedfishError::not_found(uri.path()).into_response(),
            }
        }
        _ if path == profile.reset_target => not_allowed("POST"),
        _ if profile.document(path).is_some() => not_allowed("GET, HEAD"),
        _ => RedfishError::not_found(uri.path()).into_response(),
    }
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn not_allowed(allow: &'static str) -> Response {
    let mut response = RedfishError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "OperationNotAllowed",
        "The HTTP method is not allowed on this resource.",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

fn get(state: &VendorState, path: &str, shown: &str) -> Response {
    let profile = &state.profile;
    let Some(document) = profile.document(path) else {
        return RedfishError::not_found(shown).into_response();
    };
    let mut document = document.clone();
    if path == profile.system_path
        && let Some(host) = state.service.host(&profile.system_id)
    {
        document["PowerState"] = json!(host.observe().redfish());
    }
    let schema = document
        .get("@odata.type")
        .and_then(Value::as_str)
        .map(schema_of)
        .unwrap_or_default();
    resource(&document, &schema, "GET, HEAD", None)
}

/// `#ComputerSystem.v1_10_0.ComputerSystem` → `ComputerSystem.v1_10_0`.
fn schema_of(odata_type: &str) -> String {
    let name = odata_type.trim_start_matches('#');
    name.rsplit_once('.')
        .map_or(name, |(schema, _)| schema)
        .to_owned()
}

/// What a reset type does to the host, and the power it asks for (None: no power change the
/// simulator models, e.g. `Nmi`).
fn action_of(reset_type: &str) -> Option<(PowerAction, Option<Power>)> {
    match reset_type {
        "On" | "ForceOn" => Some((PowerAction::On, Some(Power::On))),
        "ForceOff" => Some((PowerAction::ForceOff, Some(Power::Off))),
        "GracefulShutdown" => Some((PowerAction::GracefulShutdown, Some(Power::Off))),
        "ForceRestart" | "GracefulRestart" | "PowerCycle" => {
            Some((PowerAction::ForceRestart, None))
        }
        "PushPowerButton" => Some((PowerAction::PushPowerButton, None)),
        _ => None,
    }
}

fn reset(state: &VendorState, host: &Arc<SimHost>, body: &[u8]) -> Response {
    let profile = &state.profile;
    let request: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(_) => return RedfishError::malformed_json().into_response(),
    };
    let Some(reset_type) = request
        .get("ResetType")
        .and_then(Value::as_str)
        .filter(|v| profile.reset_types.iter().any(|t| t == v))
    else {
        let shown = request
            .get("ResetType")
            .map_or_else(String::new, |v| v.to_string());
        return RedfishError::value_not_in_list(&shown, "ResetType").into_response();
    };
    let action = action_of(reset_type);
    let wanted = action.and_then(|(_, power)| power);
    let already = wanted.is_some_and(|w| !host.transition_pending() && host.power() == w);
    let style = profile.vendor.reset_style();
    if already && let Some(refusal) = refusal(style, wanted) {
        state.service.record_reset(host, reset_type);
        return refusal;
    }
    match action {
        Some((action, _)) => {
            state.service.reset(host, reset_type, action);
        }
        None => state.service.record_reset(host, reset_type),
    }
    success(style)
}

/// The answer to a reset asking for the state the host already is in, for the vendors that
/// refuse it.
fn refusal(style: ResetStyle, wanted: Option<Power>) -> Option<Response> {
    let state = match wanted {
        Some(Power::Off) => "Off",
        _ => "On",
    };
    match style {
        ResetStyle::Standard | ResetStyle::Bmcweb => None,
        // infra-operator #434: "POST .../ComputerSystem.Reset HTTP/1.1" 409 on an iDRAC 9 whose
        // server was already off. The body's wording is ours; the status is what counts.
        ResetStyle::Idrac => Some(json_response(
            StatusCode::CONFLICT,
            &json!({"error": {
                "code": "Base.1.12.GeneralError",
                "message": "A general error has occurred. See ExtendedInfo for more information",
                "@Message.ExtendedInfo": [{
                    "Message": format!("The server is already powered {state}."),
                    "MessageArgs": [],
                    "MessageId": "Base.1.12.GeneralError",
                    "Resolution": "No response action is required.",
                    "Severity": "Informational"
                }]
            }}),
        )),
        // The body iLO sends (ansible-ilo #1, python-redfish-utility #72), iLO 5 message ids.
        ResetStyle::Ilo => Some(json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {
                "code": "iLO.0.10.ExtendedInfo",
                "message": "See @Message.ExtendedInfo for more information.",
                "@Message.ExtendedInfo": [{
                    "MessageArgs": [format!("Power is {}", state.to_lowercase())],
                    "MessageId": "iLO.2.15.InvalidOperationForSystemState"
                }]
            }}),
        )),
    }
}

fn success(style: ResetStyle) -> Response {
    match style {
        ResetStyle::Standard | ResetStyle::Idrac => StatusCode::NO_CONTENT.into_response(),
        ResetStyle::Ilo => json_response(
            StatusCode::OK,
            &json!({"error": {
                "code": "iLO.0.10.ExtendedInfo",
                "message": "See @Message.ExtendedInfo for more information.",
                "@Message.ExtendedInfo": [{"MessageId": "Base.1.4.Success"}]
            }}),
        ),
        ResetStyle::Bmcweb => json_response(
            StatusCode::OK,
            &json!({"@Message.ExtendedInfo": [{
                "@odata.type": "#Message.v1_1_1.Message",
                "Message": "The request completed successfully.",
                "MessageArgs": [],
                "MessageId": "Base.1.13.0.Success",
                "MessageSeverity": "OK",
                "Resolution": "None"
            }]}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_drop_the_hash_and_the_type_name() {
        assert_eq!(
            schema_of("#ComputerSystem.v1_10_0.ComputerSystem"),
            "ComputerSystem.v1_10_0"
        );
        assert_eq!(schema_of("Plain"), "Plain");
    }

    #[test]
    fn only_idrac_and_ilo_refuse_a_reset_to_the_current_state() {
        assert_eq!(
            refusal(ResetStyle::Idrac, Some(Power::Off)).map(|r| r.status()),
            Some(StatusCode::CONFLICT)
        );
        assert_eq!(
            refusal(ResetStyle::Ilo, Some(Power::On)).map(|r| r.status()),
            Some(StatusCode::BAD_REQUEST)
        );
        assert!(refusal(ResetStyle::Standard, Some(Power::On)).is_none());
        assert!(refusal(ResetStyle::Bmcweb, Some(Power::Off)).is_none());
        assert_eq!(success(ResetStyle::Ilo).status(), StatusCode::OK);
        assert_eq!(success(ResetStyle::Idrac).status(), StatusCode::NO_CONTENT);
    }
}
