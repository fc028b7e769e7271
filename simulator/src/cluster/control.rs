//! The control API of a running simulated cluster (what `baremend-sim fault` talks to):
//! node OS faults, BMC faults, API server faults and workload clusters' API servers going
//! away at runtime.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};

use super::SimCluster;
use crate::apiserver::FaultRule;
use crate::host::Faults;

type Shared = Arc<SimCluster>;

/// The routes.
pub fn router(cluster: Shared) -> Router {
    Router::new()
        .route("/nodes", get(nodes))
        .route("/nodes/{name}/{fault}", post(node_fault))
        .route("/bmc/{name}/faults", put(bmc_faults))
        .route("/workload/{name}/{state}", post(workload_api))
        .route(
            "/apiserver/faults",
            post(api_fault).delete(clear_api_faults),
        )
        .route("/apiserver/drop-watches", post(drop_watches))
        .route("/apiserver/compact", post(compact))
        .with_state(cluster)
}

fn missing(name: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("no host {name:?}\n")).into_response()
}

async fn nodes(State(cluster): State<Shared>) -> Response {
    Json(cluster.node_summary()).into_response()
}

async fn node_fault(
    State(cluster): State<Shared>,
    Path((name, fault)): Path<(String, String)>,
) -> Response {
    let found = match fault.as_str() {
        "hang" => cluster.hang(&name),
        "nic-down" => cluster.nic_down(&name),
        "broken" => cluster.break_host(&name),
        "recover" => cluster.recover(&name),
        other => {
            return (
                StatusCode::BAD_REQUEST,
                format!("unknown node fault {other:?} (hang, nic-down, broken, recover)\n"),
            )
                .into_response();
        }
    };
    if found {
        StatusCode::NO_CONTENT.into_response()
    } else {
        missing(&name)
    }
}

/// A workload cluster's API server goes `down` or comes back `up`.
async fn workload_api(
    State(cluster): State<Shared>,
    Path((name, state)): Path<(String, String)>,
) -> Response {
    let down = match state.as_str() {
        "down" => true,
        "up" => false,
        other => {
            return (
                StatusCode::BAD_REQUEST,
                format!("unknown workload API state {other:?} (down, up)\n"),
            )
                .into_response();
        }
    };
    if cluster.set_workload_api_down(&name, down) {
        StatusCode::NO_CONTENT.into_response()
    } else {
        (
            StatusCode::NOT_FOUND,
            format!("no workload cluster {name:?}\n"),
        )
            .into_response()
    }
}

async fn bmc_faults(
    State(cluster): State<Shared>,
    Path(name): Path<String>,
    Json(faults): Json<Faults>,
) -> Response {
    match cluster.host(&name) {
        Some(info) => {
            info.host.set_faults(faults);
            StatusCode::NO_CONTENT.into_response()
        }
        None => missing(&name),
    }
}

async fn api_fault(State(cluster): State<Shared>, Json(rule): Json<FaultRule>) -> Response {
    cluster.api_server().inject(rule);
    StatusCode::NO_CONTENT.into_response()
}

async fn clear_api_faults(State(cluster): State<Shared>) -> Response {
    cluster.api_server().clear_faults();
    StatusCode::NO_CONTENT.into_response()
}

async fn drop_watches(State(cluster): State<Shared>) -> Response {
    cluster.api_server().drop_watches();
    StatusCode::NO_CONTENT.into_response()
}

async fn compact(State(cluster): State<Shared>) -> Response {
    cluster.api_server().compact();
    StatusCode::NO_CONTENT.into_response()
}
