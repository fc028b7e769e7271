//! The session service and the account service.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::auth::Authed;
use super::respond::{RedfishError, json_response, resource};
use super::service::{LoginError, RedfishService, Role};

type Shared = Arc<RedfishService>;

const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/redfish/v1/SessionService", get(session_service))
        .route(SESSIONS, get(sessions).post(log_in))
        .route("/redfish/v1/SessionService/Sessions/Members", post(log_in))
        .route(
            "/redfish/v1/SessionService/Sessions/{id}",
            get(session).delete(delete_session),
        )
        .route("/redfish/v1/AccountService", get(account_service))
        .route("/redfish/v1/AccountService/Accounts", get(accounts))
        .route("/redfish/v1/AccountService/Accounts/{id}", get(account))
        .route("/redfish/v1/AccountService/Roles", get(roles))
        .route("/redfish/v1/AccountService/Roles/{id}", get(role))
}

fn sessions_enabled(service: &RedfishService, uri: &str) -> Result<(), RedfishError> {
    if service.auth_settings().sessions {
        Ok(())
    } else {
        Err(RedfishError::not_found(uri))
    }
}

async fn session_service(
    State(service): State<Shared>,
    _: Authed,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    sessions_enabled(&service, uri.path())?;
    Ok(resource(
        &json!({
            "@odata.type": "#SessionService.v1_1_8.SessionService",
            "@odata.id": "/redfish/v1/SessionService",
            "Id": "SessionService",
            "Name": "Session Service",
            "ServiceEnabled": true,
            "SessionTimeout": service.session_timeout().as_secs(),
            "Status": {"State": "Enabled", "Health": "OK"},
            "Sessions": {"@odata.id": SESSIONS},
        }),
        "SessionService.v1_1_8",
        "GET, HEAD",
        None,
    ))
}

fn collection(odata_type: &str, id: &str, name: &str, members: Vec<String>) -> Value {
    let members: Vec<Value> = members
        .into_iter()
        .map(|m| json!({"@odata.id": m}))
        .collect();
    json!({
        "@odata.type": odata_type,
        "@odata.id": id,
        "Name": name,
        "Members@odata.count": members.len(),
        "Members": members,
    })
}

async fn sessions(
    State(service): State<Shared>,
    _: Authed,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    sessions_enabled(&service, uri.path())?;
    let members = service
        .sessions()
        .into_iter()
        .map(|(id, _)| format!("{SESSIONS}/{id}"))
        .collect();
    Ok(resource(
        &collection(
            "#SessionCollection.SessionCollection",
            SESSIONS,
            "Session Collection",
            members,
        ),
        "SessionCollection",
        "GET, HEAD, POST",
        None,
    ))
}

fn session_body(id: &str, username: &str) -> Value {
    json!({
        "@odata.type": "#Session.v1_6_0.Session",
        "@odata.id": format!("{SESSIONS}/{id}"),
        "Id": id,
        "Name": "User Session",
        "UserName": username,
        "Password": null,
    })
}

async fn log_in(
    State(service): State<Shared>,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, RedfishError> {
    sessions_enabled(&service, uri.path())?;
    let request: Value =
        serde_json::from_slice(&body).map_err(|_| RedfishError::malformed_json())?;
    let field = |name: &'static str| {
        request.get(name).and_then(Value::as_str).ok_or_else(|| {
            RedfishError::new(
                StatusCode::BAD_REQUEST,
                "PropertyMissing",
                format!("The property {name} is a required property and must be included in the request."),
            )
            .args(&[name])
        })
    };
    let username = field("UserName")?;
    let password = field("Password")?;
    let (token, id) = service.log_in(username, password).map_err(|error| match error {
        LoginError::BadCredentials => RedfishError::unauthorized(uri.path()),
        LoginError::SessionsDisabled => RedfishError::not_found(uri.path()),
        LoginError::TooManySessions => RedfishError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SessionLimitExceeded",
            "The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
        ),
    })?;
    let mut response = json_response(StatusCode::CREATED, &session_body(&id, username));
    let headers = response.headers_mut();
    if let Ok(mut value) = HeaderValue::from_str(&token) {
        value.set_sensitive(true);
        headers.insert("x-auth-token", value);
    }
    if let Ok(location) = HeaderValue::from_str(&format!("{SESSIONS}/{id}")) {
        headers.insert(header::LOCATION, location);
    }
    Ok(response)
}

async fn session(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let (id, username) = service
        .sessions()
        .into_iter()
        .find(|(session, _)| *session == id)
        .ok_or_else(|| RedfishError::not_found(uri.path()))?;
    Ok(resource(
        &session_body(&id, &username),
        "Session.v1_6_0",
        "GET, HEAD, DELETE",
        None,
    ))
}

async fn delete_session(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    if service.delete_session(&id) {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(RedfishError::not_found(uri.path()))
    }
}

async fn account_service(_: Authed) -> Response {
    resource(
        &json!({
            "@odata.type": "#AccountService.v1_13_0.AccountService",
            "@odata.id": "/redfish/v1/AccountService",
            "Id": "AccountService",
            "Name": "Account Service",
            "ServiceEnabled": true,
            "Status": {"State": "Enabled", "Health": "OK"},
            "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"},
            "Roles": {"@odata.id": "/redfish/v1/AccountService/Roles"},
        }),
        "AccountService.v1_13_0",
        "GET, HEAD",
        None,
    )
}

async fn accounts(State(service): State<Shared>, _: Authed) -> Response {
    let members = (1..=service.accounts().len())
        .map(|n| format!("/redfish/v1/AccountService/Accounts/{n}"))
        .collect();
    resource(
        &collection(
            "#ManagerAccountCollection.ManagerAccountCollection",
            "/redfish/v1/AccountService/Accounts",
            "Accounts Collection",
            members,
        ),
        "ManagerAccountCollection",
        "GET, HEAD",
        None,
    )
}

async fn account(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let accounts = service.accounts();
    let account = id
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|index| accounts.get(index))
        .ok_or_else(|| RedfishError::not_found(uri.path()))?;
    Ok(resource(
        &json!({
            "@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
            "@odata.id": format!("/redfish/v1/AccountService/Accounts/{id}"),
            "Id": id,
            "Name": "User Account",
            "UserName": account.username,
            "Password": null,
            "RoleId": account.role.id(),
            "Enabled": true,
            "Locked": false,
            "AccountTypes": ["Redfish"],
            "Links": {"Role": {"@odata.id": format!("/redfish/v1/AccountService/Roles/{}", account.role.id())}},
        }),
        "ManagerAccount.v1_10_0",
        "GET, HEAD",
        None,
    ))
}

async fn roles(_: Authed) -> Response {
    let members = Role::ALL
        .iter()
        .map(|r| format!("/redfish/v1/AccountService/Roles/{}", r.id()))
        .collect();
    resource(
        &collection(
            "#RoleCollection.RoleCollection",
            "/redfish/v1/AccountService/Roles",
            "Roles Collection",
            members,
        ),
        "RoleCollection",
        "GET, HEAD",
        None,
    )
}

async fn role(
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let role = Role::from_id(&id).ok_or_else(|| RedfishError::not_found(uri.path()))?;
    Ok(resource(
        &json!({
            "@odata.type": "#Role.v1_3_1.Role",
            "@odata.id": format!("/redfish/v1/AccountService/Roles/{}", role.id()),
            "Id": role.id(),
            "Name": format!("{} Role", role.id()),
            "RoleId": role.id(),
            "IsPredefined": true,
            "AssignedPrivileges": role.privileges(),
        }),
        "Role.v1_3_1",
        "GET, HEAD",
        None,
    ))
}
