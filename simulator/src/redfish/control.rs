//! The control API (`/control`, outside the Redfish tree, no authentication): how tests and the
//! `baremend-sim fault` command change a running simulator.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::service::{AuthSettings, RedfishService};
use crate::host::{Faults, Power};
use crate::lockout::LockoutPolicy;

type Shared = Arc<RedfishService>;

pub(crate) fn router(service: Shared) -> Router {
    Router::new()
        .route("/control/stats", get(stats))
        .route("/control/systems/{id}", get(system))
        .route("/control/systems/{id}/faults", put(set_faults))
        .route("/control/systems/{id}/power", put(set_power))
        .route("/control/credentials", put(set_credentials))
        .route("/control/auth", put(set_auth))
        .route("/control/lockout", put(set_lockout))
        .route("/control/lockout/{username}", get(lockout_status))
        .route("/control/sessions/expire", post(expire_sessions))
        .with_state(service)
}

fn no_such_system(id: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("no system {id:?}\n")).into_response()
}

async fn stats(State(service): State<Shared>) -> Response {
    Json(service.stats()).into_response()
}

async fn system(State(service): State<Shared>, Path(id): Path<String>) -> Response {
    let Some(host) = service.host(&id) else {
        return no_such_system(&id);
    };
    Json(json!({
        "id": host.id(),
        "power": host.power(),
        "transition_pending": host.transition_pending(),
        "faults": host.faults(),
        "history": host.history(),
    }))
    .into_response()
}

async fn set_faults(
    State(service): State<Shared>,
    Path(id): Path<String>,
    Json(faults): Json<Faults>,
) -> Response {
    let Some(host) = service.host(&id) else {
        return no_such_system(&id);
    };
    host.set_faults(faults);
    StatusCode::NO_CONTENT.into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetPower {
    power: Power,
}

async fn set_power(
    State(service): State<Shared>,
    Path(id): Path<String>,
    Json(request): Json<SetPower>,
) -> Response {
    if service.set_power(&id, request.power) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        no_such_system(&id)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetCredentials {
    username: String,
    password: String,
}

async fn set_credentials(
    State(service): State<Shared>,
    Json(request): Json<SetCredentials>,
) -> Response {
    service.set_credentials(&request.username, &request.password);
    StatusCode::NO_CONTENT.into_response()
}

async fn set_auth(State(service): State<Shared>, Json(settings): Json<AuthSettings>) -> Response {
    service.set_auth_settings(settings);
    StatusCode::NO_CONTENT.into_response()
}

async fn expire_sessions(State(service): State<Shared>) -> Response {
    service.expire_sessions();
    StatusCode::NO_CONTENT.into_response()
}

async fn set_lockout(State(service): State<Shared>, Json(policy): Json<LockoutPolicy>) -> Response {
    service.set_lockout_policy(policy);
    StatusCode::NO_CONTENT.into_response()
}

async fn lockout_status(State(service): State<Shared>, Path(username): Path<String>) -> Response {
    match service.lockout_status(&username) {
        Some(status) => Json(status).into_response(),
        None => (StatusCode::NOT_FOUND, format!("no account {username:?}\n")).into_response(),
    }
}
