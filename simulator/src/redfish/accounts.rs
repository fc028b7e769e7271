//! The session service and the account service.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::auth::Authed;
use super::respond::{
    RedfishError, check_if_match, header_text, json_response, not_modified, resource,
};
use super::service::{
    Account, AccountChange, AccountError, AccountRecord, LoginError, RedfishService, Role,
};
use crate::lockout::LockoutPolicy;

type Shared = Arc<RedfishService>;

const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
const ACCOUNTS: &str = "/redfish/v1/AccountService/Accounts";

/// Password length limits, advertised by the account service.
const MIN_PASSWORD: usize = 8;
const MAX_PASSWORD: usize = 64;
/// The longest user name accepted.
const MAX_USERNAME: usize = 64;

pub(crate) fn router() -> Router<Shared> {
    Router::new()
        .route("/redfish/v1/SessionService", get(session_service))
        .route(SESSIONS, get(sessions).post(log_in))
        .route("/redfish/v1/SessionService/Sessions/Members", post(log_in))
        .route(
            "/redfish/v1/SessionService/Sessions/{id}",
            get(session).delete(delete_session),
        )
        .route(
            "/redfish/v1/AccountService",
            get(account_service).patch(patch_account_service),
        )
        .route(ACCOUNTS, get(accounts).post(create_account))
        .route(
            "/redfish/v1/AccountService/Accounts/{id}",
            get(account).patch(patch_account).delete(delete_account),
        )
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

/// `POST` of a session: also served at a vendor's own `Links.Sessions` path.
pub(crate) async fn log_in(
    State(service): State<Shared>,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, RedfishError> {
    sessions_enabled(&service, uri.path())?;
    let request: Value =
        serde_json::from_slice(&body).map_err(|_| RedfishError::malformed_json())?;
    let field = |name: &'static str| {
        request
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| RedfishError::property_missing(name))
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

fn account_service_body(lockout: &LockoutPolicy) -> Value {
    json!({
        "@odata.type": "#AccountService.v1_13_0.AccountService",
        "@odata.id": "/redfish/v1/AccountService",
        "Id": "AccountService",
        "Name": "Account Service",
        "ServiceEnabled": true,
        "Status": {"State": "Enabled", "Health": "OK"},
        "MinPasswordLength": MIN_PASSWORD,
        "MaxPasswordLength": MAX_PASSWORD,
        "AccountLockoutThreshold": lockout.threshold,
        "AccountLockoutDuration": lockout.duration_secs,
        "AccountLockoutCounterResetAfter": lockout.counter_reset_after_secs,
        "Accounts": {"@odata.id": ACCOUNTS},
        "Roles": {"@odata.id": "/redfish/v1/AccountService/Roles"},
    })
}

fn account_service_resource(lockout: &LockoutPolicy) -> Response {
    resource(
        &account_service_body(lockout),
        "AccountService.v1_13_0",
        "GET, HEAD, PATCH",
        None,
    )
}

async fn account_service(State(service): State<Shared>, _: Authed) -> Response {
    account_service_resource(&service.lockout_policy())
}

/// The AccountService properties a PATCH may set: the lock-out policy. The others it serves
/// are read-only here.
const ACCOUNT_SERVICE_READ_ONLY: &[&str] = &[
    "Id",
    "Name",
    "ServiceEnabled",
    "Status",
    "MinPasswordLength",
    "MaxPasswordLength",
    "Accounts",
    "Roles",
];

/// Applies a PATCH body to `policy`; every property is checked before any is applied.
fn patch_lockout(body: &[u8], mut policy: LockoutPolicy) -> Result<LockoutPolicy, RedfishError> {
    let request: Value =
        serde_json::from_slice(body).map_err(|_| RedfishError::malformed_json())?;
    let Some(request) = request.as_object() else {
        return Err(RedfishError::malformed_json());
    };
    for (key, value) in request {
        let key = key.as_str();
        let number = || value.as_u64().ok_or_else(|| type_error(key, value));
        match key {
            _ if key.starts_with('@') => {}
            "AccountLockoutThreshold" => {
                policy.threshold = u32::try_from(number()?).map_err(|_| type_error(key, value))?
            }
            "AccountLockoutDuration" => policy.duration_secs = number()?,
            "AccountLockoutCounterResetAfter" => policy.counter_reset_after_secs = number()?,
            _ if ACCOUNT_SERVICE_READ_ONLY.contains(&key) => return Err(not_writable(key)),
            _ => return Err(RedfishError::property_unknown(key)),
        }
    }
    if request.is_empty() {
        return Err(no_operation());
    }
    // The schema: the counter resets no later than the lock ends.
    if policy.counter_reset_after_secs > policy.duration_secs {
        let key = "AccountLockoutCounterResetAfter";
        let value = json!(policy.counter_reset_after_secs);
        return Err(format_error(key, &value, "at most AccountLockoutDuration"));
    }
    Ok(policy)
}

/// PATCH of the AccountService: an account manager (ConfigureUsers) sets the lock-out policy.
async fn patch_account_service(
    State(service): State<Shared>,
    Authed(principal): Authed,
    body: Bytes,
) -> Result<Response, RedfishError> {
    if !principal.role.may_configure_users() {
        return Err(RedfishError::insufficient_privilege());
    }
    let policy = patch_lockout(&body, service.lockout_policy())?;
    service.set_lockout_policy(policy);
    Ok(account_service_resource(&policy))
}

async fn accounts(State(service): State<Shared>, _: Authed) -> Response {
    let members = service
        .account_records()
        .into_iter()
        .map(|r| format!("{ACCOUNTS}/{}", r.id))
        .collect();
    resource(
        &collection(
            "#ManagerAccountCollection.ManagerAccountCollection",
            ACCOUNTS,
            "Accounts Collection",
            members,
        ),
        "ManagerAccountCollection",
        "GET, HEAD, POST",
        None,
    )
}

fn account_body(record: &AccountRecord) -> Value {
    json!({
        "@odata.type": "#ManagerAccount.v1_10_0.ManagerAccount",
        "@odata.id": format!("{ACCOUNTS}/{}", record.id),
        "@odata.etag": record.etag,
        "Id": record.id,
        "Name": "User Account",
        "UserName": record.username,
        "Password": null,
        "RoleId": record.role.id(),
        "Enabled": record.enabled,
        "Locked": record.locked,
        "AccountTypes": ["Redfish"],
        "Links": {"Role": {"@odata.id": format!("/redfish/v1/AccountService/Roles/{}", record.role.id())}},
    })
}

/// The account as a resource: body, `ETag` header equal to `@odata.etag`, and an `Allow` that
/// leaves out DELETE for the built-in Administrator.
fn account_resource(status: StatusCode, record: &AccountRecord) -> Response {
    let allow = if record.built_in {
        "GET, HEAD, PATCH"
    } else {
        "GET, HEAD, PATCH, DELETE"
    };
    let mut response = resource(
        &account_body(record),
        "ManagerAccount.v1_10_0",
        allow,
        Some(&record.etag),
    );
    *response.status_mut() = status;
    response
}

fn find_account(
    service: &RedfishService,
    id: &str,
    uri: &str,
) -> Result<AccountRecord, RedfishError> {
    service
        .account_record(id)
        .ok_or_else(|| RedfishError::not_found(uri))
}

async fn account(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let record = find_account(&service, &id, uri.path())?;
    if let Some(response) = not_modified(&headers, &record.etag) {
        return Ok(response);
    }
    Ok(account_resource(StatusCode::OK, &record))
}

/// A value as an error message may show it: never a password, and never very long.
fn shown(property: &str, value: &Value) -> String {
    if property == "Password" {
        return "(hidden)".to_owned();
    }
    let text = value.to_string();
    match text.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// `PropertyValueTypeError` or `PropertyValueFormatError`, which read alike.
fn value_error(
    message_id: &'static str,
    property: &str,
    value: &Value,
    what: &str,
) -> RedfishError {
    let shown = shown(property, value);
    RedfishError::new(
        StatusCode::BAD_REQUEST,
        message_id,
        format!("The value {shown} for the property {property} is not {what} that the property can accept."),
    )
    .args(&[&shown, property])
    .resolution("Correct the value for the property in the request body and resubmit the request if the operation failed.")
}

fn type_error(property: &str, value: &Value) -> RedfishError {
    value_error("PropertyValueTypeError", property, value, "a type")
}

fn format_error(property: &str, value: &Value, rule: &str) -> RedfishError {
    value_error(
        "PropertyValueFormatError",
        property,
        value,
        &format!("a format ({rule})"),
    )
}

fn not_writable(property: &str) -> RedfishError {
    RedfishError::new(
        StatusCode::BAD_REQUEST,
        "PropertyNotWritable",
        format!("The property {property} is a read only property and cannot be assigned a value."),
    )
    .args(&[property])
    .resolution("Remove the property from the request body and resubmit the request if the operation failed.")
}

fn no_operation() -> RedfishError {
    RedfishError::new(
        StatusCode::BAD_REQUEST,
        "NoOperation",
        "The request body submitted contain no data to act upon and no changes to the resource took place.",
    )
    .resolution("Add properties in the JSON object and resubmit the request.")
}

/// Properties of a ManagerAccount that exist but that no request may set.
const READ_ONLY: &[&str] = &[
    "Id",
    "Name",
    "Locked",
    "AccountTypes",
    "Links",
    "Description",
];

/// Reads a ManagerAccount request body (POST or PATCH). Every property is checked before
/// anything is applied: a body with one bad property changes nothing. OData annotations
/// (`@odata.id`, …) are ignored.
fn parse_account(body: &[u8]) -> Result<AccountChange, RedfishError> {
    let request: Value =
        serde_json::from_slice(body).map_err(|_| RedfishError::malformed_json())?;
    let Some(request) = request.as_object() else {
        return Err(RedfishError::malformed_json());
    };
    let mut change = AccountChange::default();
    for (key, value) in request {
        let key = key.as_str();
        match key {
            _ if key.starts_with('@') => {}
            "UserName" => {
                let name = value.as_str().ok_or_else(|| type_error(key, value))?;
                let fine = !name.trim().is_empty()
                    && name.chars().count() <= MAX_USERNAME
                    && !name.contains(':')
                    && !name.chars().any(char::is_control);
                if !fine {
                    return Err(format_error(
                        key,
                        value,
                        "1 to 64 characters, no ':' and no control characters",
                    ));
                }
                change.username = Some(name.to_owned());
            }
            "Password" => {
                let password = value.as_str().ok_or_else(|| type_error(key, value))?;
                if !(MIN_PASSWORD..=MAX_PASSWORD).contains(&password.chars().count()) {
                    return Err(format_error(key, value, "8 to 64 characters"));
                }
                change.password = Some(password.to_owned());
            }
            "RoleId" => {
                let name = value.as_str().ok_or_else(|| type_error(key, value))?;
                let role = Role::from_id(name)
                    .ok_or_else(|| RedfishError::value_not_in_list(&shown(key, value), key))?;
                change.role = Some(role);
            }
            "Enabled" => {
                change.enabled = Some(value.as_bool().ok_or_else(|| type_error(key, value))?)
            }
            _ if READ_ONLY.contains(&key) => return Err(not_writable(key)),
            _ => return Err(RedfishError::property_unknown(key)),
        }
    }
    Ok(change)
}

fn account_error(error: AccountError, uri: &str, username: Option<&str>) -> RedfishError {
    match error {
        AccountError::NotFound => RedfishError::not_found(uri),
        AccountError::PreconditionFailed => RedfishError::precondition_failed(),
        AccountError::UserNameTaken => {
            let name = username.unwrap_or_default();
            RedfishError::new(
                StatusCode::CONFLICT,
                "ResourceAlreadyExists",
                format!("The requested resource of type ManagerAccount with the property UserName with the value {name} already exists."),
            )
            .args(&["ManagerAccount", "UserName", name])
            .resolution("Do not repeat the create operation as the resource has already been created.")
        }
        AccountError::LimitReached => RedfishError::new(
            StatusCode::BAD_REQUEST,
            "CreateLimitReachedForResource",
            "The create operation failed because the resource has reached the limit of possible resources.",
        )
        .resolution("Either delete resources and resubmit the request if the operation failed or do not resubmit the request."),
        AccountError::NotWritable(property) => not_writable(property),
        AccountError::BuiltIn => RedfishError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "ResourceCannotBeDeleted",
            "The delete request failed because the resource requested cannot be deleted.",
        )
        .resolution("Do not attempt to delete a non-deletable resource."),
    }
}

async fn create_account(
    State(service): State<Shared>,
    Authed(principal): Authed,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, RedfishError> {
    if !principal.role.may_configure_users() {
        return Err(RedfishError::insufficient_privilege());
    }
    let change = parse_account(&body)?;
    let AccountChange {
        username: Some(username),
        password: Some(password),
        role: Some(role),
        enabled,
    } = change
    else {
        let name = if change.username.is_none() {
            "UserName"
        } else if change.password.is_none() {
            "Password"
        } else {
            "RoleId"
        };
        return Err(RedfishError::property_missing(name));
    };
    let account = Account {
        username: username.clone(),
        password,
        role,
    };
    let record = service
        .create_account(account, enabled.unwrap_or(true))
        .map_err(|e| account_error(e, uri.path(), Some(&username)))?;
    let mut response = account_resource(StatusCode::CREATED, &record);
    if let Ok(location) = HeaderValue::from_str(&format!("{ACCOUNTS}/{}", record.id)) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// The ETag the write must still find: the one the request's `If-Match` was checked against,
/// unless it holds `*` or is absent.
fn expected_etag<'a>(headers: &HeaderMap, record: &'a AccountRecord) -> Option<&'a str> {
    header_text(headers, header::IF_MATCH)
        .filter(|list| !list.split(',').any(|t| t.trim() == "*"))
        .map(|_| record.etag.as_str())
}

/// PATCH: an account manager (ConfigureUsers) may change any account; anyone else only the
/// password of their own. The precondition is evaluated before the body, as HTTP orders them.
async fn patch_account(
    State(service): State<Shared>,
    Authed(principal): Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, RedfishError> {
    let record = find_account(&service, &id, uri.path())?;
    let manager = principal.role.may_configure_users();
    let own = record.username == principal.username;
    if !manager && !own {
        return Err(RedfishError::insufficient_privilege());
    }
    check_if_match(&headers, &record.etag)?;
    let change = parse_account(&body)?;
    if change.is_empty() {
        return Err(no_operation());
    }
    let only_password =
        change.username.is_none() && change.role.is_none() && change.enabled.is_none();
    if !manager && !only_password {
        return Err(RedfishError::insufficient_privilege());
    }
    let username = change.username.clone();
    let updated = service
        .update_account(&id, expected_etag(&headers, &record), change)
        .map_err(|e| account_error(e, uri.path(), username.as_deref()))?;
    Ok(account_resource(StatusCode::OK, &updated))
}

async fn delete_account(
    State(service): State<Shared>,
    Authed(principal): Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let record = find_account(&service, &id, uri.path())?;
    if !principal.role.may_configure_users() {
        return Err(RedfishError::insufficient_privilege());
    }
    if record.built_in {
        let mut response = account_error(AccountError::BuiltIn, uri.path(), None).into_response();
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD, PATCH"));
        return Ok(response);
    }
    check_if_match(&headers, &record.etag)?;
    service
        .delete_account(&id, expected_etag(&headers, &record))
        .map_err(|e| account_error(e, uri.path(), None))?;
    Ok(StatusCode::NO_CONTENT.into_response())
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
