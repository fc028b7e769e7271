//! The Redfish resource tree: routes and the service root, systems, reset and tasks.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::accounts;
use super::auth::Authed;
use super::metadata::{metadata_xml, odata_document};
use super::respond::{RedfishError, check_if_match, json_response, not_modified, resource};
use super::service::RedfishService;
use crate::host::{PowerAction, SimHost};

type Shared = Arc<RedfishService>;

/// The reset types a host accepts, and what they do.
const RESET_TYPES: &[(&str, PowerAction)] = &[
    ("On", PowerAction::On),
    ("ForceOn", PowerAction::On),
    ("ForceOff", PowerAction::ForceOff),
    ("GracefulShutdown", PowerAction::GracefulShutdown),
    ("ForceRestart", PowerAction::ForceRestart),
    ("PushPowerButton", PowerAction::PushPowerButton),
];

/// The `/redfish` tree.
pub(crate) fn router(service: Shared) -> Router {
    Router::new()
        .route("/redfish", get(version_document))
        .route("/redfish/", get(version_document))
        .route("/redfish/v1", get(service_root))
        .route("/redfish/v1/", get(service_root))
        .route(
            "/redfish/v1/odata",
            get(|| async { json_response(StatusCode::OK, &odata_document()) }),
        )
        .route("/redfish/v1/$metadata", get(metadata))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/Systems/{id}", get(system).patch(patch_system))
        .route(
            "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .route(
            "/redfish/v1/Systems/{id}/ResetActionInfo",
            get(reset_action_info),
        )
        .route(
            "/redfish/v1/TaskService/TaskMonitors/{id}",
            get(task_monitor),
        )
        .route("/redfish/v1/TaskService/Tasks/{id}", get(task))
        .merge(accounts::router())
        .with_state(service)
}

async fn version_document() -> Response {
    resource(
        &json!({"v1": "/redfish/v1/"}),
        "ServiceRoot.v1_15_0",
        "GET, HEAD",
        None,
    )
}

async fn metadata() -> Response {
    let mut response = metadata_xml().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    response
}

async fn service_root(State(service): State<Shared>) -> Response {
    let sessions_on = service.auth_settings().sessions;
    let mut root = json!({
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "@odata.id": "/redfish/v1",
        "Id": "RootService",
        "Name": "baremend simulated BMC",
        "RedfishVersion": "1.15.0",
        "UUID": service.uuid(),
        "Vendor": "baremend",
        "Product": "baremend-sim",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "AccountService": {"@odata.id": "/redfish/v1/AccountService"},
        "Links": {},
        "ProtocolFeaturesSupported": {
            "ExpandQuery": {"ExpandAll": false, "Levels": false, "Links": false, "NoLinks": false},
            "FilterQuery": false,
            "SelectQuery": false,
            "OnlyMemberQuery": false,
            "ExcerptQuery": false
        }
    });
    if sessions_on {
        root["SessionService"] = json!({"@odata.id": "/redfish/v1/SessionService"});
        root["Links"] = json!({"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}});
    }
    resource(&root, "ServiceRoot.v1_15_0", "GET, HEAD", None)
}

async fn systems(State(service): State<Shared>, _: Authed) -> Response {
    let members: Vec<Value> = service
        .hosts()
        .iter()
        .map(|h| json!({"@odata.id": system_path(h)}))
        .collect();
    resource(
        &json!({
            "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
            "@odata.id": "/redfish/v1/Systems",
            "Name": "Computer System Collection",
            "Members@odata.count": members.len(),
            "Members": members,
        }),
        "ComputerSystemCollection",
        "GET, HEAD",
        None,
    )
}

fn system_path(host: &SimHost) -> String {
    format!("/redfish/v1/Systems/{}", host.id())
}

fn find_host<'a>(
    service: &'a RedfishService,
    id: &str,
    uri: &str,
) -> Result<&'a Arc<SimHost>, RedfishError> {
    service.host(id).ok_or_else(|| RedfishError::not_found(uri))
}

fn advertised_reset_types(host: &SimHost) -> Vec<&'static str> {
    if host.faults().push_button_only {
        vec!["PushPowerButton"]
    } else {
        RESET_TYPES.iter().map(|(name, _)| *name).collect()
    }
}

fn etag(host: &SimHost) -> String {
    format!("W/\"{}\"", host.version())
}

fn system_body(host: &SimHost) -> Value {
    let path = system_path(host);
    let (boot_target, boot_enabled) = host.boot_override();
    json!({
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "@odata.id": path,
        "@odata.etag": etag(host),
        "Id": host.id(),
        "Name": format!("Simulated host {}", host.id()),
        "SystemType": "Physical",
        "Manufacturer": "baremend",
        "Model": "baremend-sim",
        "UUID": host.uuid(),
        "PowerState": host.observe().redfish(),
        "Status": {"State": "Enabled", "Health": "OK"},
        "Boot": {
            "BootSourceOverrideEnabled": boot_enabled,
            "BootSourceOverrideTarget": boot_target,
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "Cd", "BiosSetup"],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": format!("{path}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": advertised_reset_types(host),
                "@Redfish.ActionInfo": format!("{path}/ResetActionInfo"),
            }
        }
    })
}

async fn system(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let host = find_host(&service, &id, uri.path())?;
    if let Some(response) = not_modified(&headers, &etag(host)) {
        return Ok(response);
    }
    let body = system_body(host);
    let etag = body["@odata.etag"].as_str().map(str::to_owned);
    Ok(resource(
        &body,
        "ComputerSystem.v1_20_0",
        "GET, HEAD, PATCH",
        etag.as_deref(),
    ))
}

const BOOT_TARGETS: &[&str] = &["None", "Pxe", "Hdd", "Cd", "BiosSetup"];
const BOOT_ENABLED: &[&str] = &["Disabled", "Once", "Continuous"];

async fn patch_system(
    State(service): State<Shared>,
    Authed(principal): Authed,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, RedfishError> {
    let host = find_host(&service, &id, uri.path())?;
    if !principal.role.may_configure_components() {
        return Err(RedfishError::insufficient_privilege());
    }
    check_if_match(&headers, &etag(host))?;
    let patch: Value = serde_json::from_slice(&body).map_err(|_| RedfishError::malformed_json())?;
    let Some(patch) = patch.as_object() else {
        return Err(RedfishError::malformed_json());
    };
    let mut target = None;
    let mut enabled = None;
    for (key, value) in patch {
        let Some(boot) = (key == "Boot").then(|| value.as_object()).flatten() else {
            return Err(RedfishError::property_unknown(key));
        };
        for (field, value) in boot {
            let (allowed, slot) = match field.as_str() {
                "BootSourceOverrideTarget" => (BOOT_TARGETS, &mut target),
                "BootSourceOverrideEnabled" => (BOOT_ENABLED, &mut enabled),
                _ => return Err(RedfishError::property_unknown(field)),
            };
            match value.as_str() {
                Some(v) if allowed.contains(&v) => *slot = Some(v.to_owned()),
                _ => return Err(RedfishError::value_not_in_list(&value.to_string(), field)),
            }
        }
    }
    host.set_boot_override(target, enabled);
    let body = system_body(host);
    let etag = body["@odata.etag"].as_str().map(str::to_owned);
    Ok(resource(
        &body,
        "ComputerSystem.v1_20_0",
        "GET, HEAD, PATCH",
        etag.as_deref(),
    ))
}

async fn reset_action_info(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let host = find_host(&service, &id, uri.path())?;
    Ok(resource(
        &json!({
            "@odata.type": "#ActionInfo.v1_3_0.ActionInfo",
            "@odata.id": format!("{}/ResetActionInfo", system_path(host)),
            "Id": "ResetActionInfo",
            "Name": "Reset Action Info",
            "Parameters": [{
                "Name": "ResetType",
                "Required": true,
                "DataType": "String",
                "AllowableValues": advertised_reset_types(host),
            }]
        }),
        "ActionInfo.v1_3_0",
        "GET, HEAD",
        None,
    ))
}

async fn reset(
    State(service): State<Shared>,
    Authed(principal): Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
    body: Bytes,
) -> Result<Response, RedfishError> {
    let host = find_host(&service, &id, uri.path())?;
    if !principal.role.may_configure_components() {
        return Err(RedfishError::insufficient_privilege());
    }
    let request: Value =
        serde_json::from_slice(&body).map_err(|_| RedfishError::malformed_json())?;
    let Some(value) = request.get("ResetType") else {
        return Err(RedfishError::new(
            StatusCode::BAD_REQUEST,
            "ActionParameterMissing",
            "The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
        )
        .args(&["ComputerSystem.Reset", "ResetType"]));
    };
    let advertised = advertised_reset_types(host);
    let action = value
        .as_str()
        .filter(|v| advertised.contains(v))
        .and_then(|v| RESET_TYPES.iter().find(|(name, _)| name == &v))
        .map(|(name, action)| (*name, *action));
    let Some((reset_type, action)) = action else {
        let shown = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        return Err(RedfishError::new(
            StatusCode::BAD_REQUEST,
            "ActionParameterValueNotInList",
            format!("The value '{shown}' for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values."),
        )
        .args(&[&shown, "ResetType", "ComputerSystem.Reset"])
        .resolution("Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed."));
    };
    match service.reset(host, reset_type, action) {
        None => Ok(StatusCode::NO_CONTENT.into_response()),
        Some(task_id) => {
            let mut response = json_response(
                StatusCode::ACCEPTED,
                &task_body(task_id, reset_type, "Running"),
            );
            let headers = response.headers_mut();
            if let Ok(location) =
                HeaderValue::from_str(&format!("/redfish/v1/TaskService/TaskMonitors/{task_id}"))
            {
                headers.insert(header::LOCATION, location);
            }
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            Ok(response)
        }
    }
}

fn task_body(id: u64, reset_type: &str, state: &str) -> Value {
    json!({
        "@odata.type": "#Task.v1_7_0.Task",
        "@odata.id": format!("/redfish/v1/TaskService/Tasks/{id}"),
        "Id": id.to_string(),
        "Name": format!("Reset {reset_type}"),
        "TaskState": state,
        "TaskStatus": "OK",
        "TaskMonitor": format!("/redfish/v1/TaskService/TaskMonitors/{id}"),
        "Messages": [],
    })
}

fn find_task(
    service: &RedfishService,
    id: &str,
    uri: &str,
) -> Result<super::service::Task, RedfishError> {
    id.parse::<u64>()
        .ok()
        .and_then(|id| service.task(id))
        .ok_or_else(|| RedfishError::not_found(uri))
}

async fn task_monitor(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let task = find_task(&service, &id, uri.path())?;
    if !task.host.transition_pending() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let mut response = json_response(
        StatusCode::ACCEPTED,
        &task_body(task.id, &task.reset_type, "Running"),
    );
    let headers = response.headers_mut();
    if let Ok(location) = HeaderValue::from_str(uri.path()) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    Ok(response)
}

async fn task(
    State(service): State<Shared>,
    _: Authed,
    Path(id): Path<String>,
    uri: axum::http::Uri,
) -> Result<Response, RedfishError> {
    let task = find_task(&service, &id, uri.path())?;
    let state = if task.host.transition_pending() {
        "Running"
    } else {
        "Completed"
    };
    Ok(resource(
        &task_body(task.id, &task.reset_type, state),
        "Task.v1_7_0",
        "GET, HEAD",
        None,
    ))
}
