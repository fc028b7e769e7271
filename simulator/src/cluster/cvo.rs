//! OpenShift's ClusterVersion `version`, as the cluster-version operator keeps it (openshift/api
//! `config/v1/types_cluster_version.go`): `spec.clusterID` and `spec.channel`;
//! `status.desired` (the release being applied), `status.history` (newest first, `Partial`
//! while applying, then `Completed`) and the conditions `Available`, `Failing`, `Progressing`
//! and `RetrievedUpdates`. While an upgrade is applied `Progressing` is True with the
//! operator's "Working towards <version>: …" message; after it, False with "Cluster version is
//! <version>". Tests start and finish an upgrade with [`set_upgrading`]; nothing rolls by
//! itself (the simulated MCO's pools are rolled by the test, see `mco::SimMco::roll`).

use serde_json::{Value, json};

use super::local::{CLUSTER_VERSIONS, Local};
use crate::apiserver::ApiError;

/// The only ClusterVersion's name.
pub const NAME: &str = "version";

/// The release the simulated cluster runs at first.
pub const INITIAL_VERSION: &str = "4.17.2";

fn image(version: &str) -> String {
    format!("quay.io/openshift-release-dev/ocp-release:{version}-x86_64")
}

fn condition(kind: &str, on: bool, reason: &str, message: &str, at: &str) -> Value {
    json!({"type": kind, "status": if on { "True" } else { "False" }, "reason": reason, "message": message, "lastTransitionTime": at})
}

/// Creates `version` at [`INITIAL_VERSION`], settled.
pub fn install(api: &Local) -> Result<(), ApiError> {
    let now = crate::apiserver::time::format_time(api.wall_time());
    let version = INITIAL_VERSION;
    api.create(
        CLUSTER_VERSIONS,
        "",
        json!({
            "apiVersion": "config.openshift.io/v1",
            "kind": "ClusterVersion",
            "metadata": {"name": NAME},
            "spec": {"clusterID": "5a4c2d9e-8f1b-4c3a-9d7e-0b6f1e2a3c4d", "channel": "stable-4.17"},
        }),
    )?;
    api.merge(
        CLUSTER_VERSIONS,
        "",
        NAME,
        &json!({"status": {
            "desired": {"version": version, "image": image(version)},
            "history": [{"state": "Completed", "version": version, "image": image(version), "startedTime": now, "completionTime": now, "verified": false}],
            "observedGeneration": 1,
            "versionHash": "sim",
            "conditions": [
                condition("Available", true, "", &format!("Done applying {version}"), &now),
                condition("Failing", false, "", "", &now),
                condition("Progressing", false, "", &format!("Cluster version is {version}"), &now),
                condition("RetrievedUpdates", false, "NoChannel", "The update channel has not been configured.", &now),
            ],
        }}),
        true,
    )?;
    Ok(())
}

/// Starts an upgrade to `to` (`Progressing` True, a `Partial` history entry), or with None
/// finishes the one under way (`Progressing` False, the entry `Completed`).
pub fn set_upgrading(api: &Local, to: Option<&str>) -> Result<(), ApiError> {
    let object = api.get(CLUSTER_VERSIONS, "", NAME)?;
    let now = crate::apiserver::time::format_time(api.wall_time());
    let mut history: Vec<Value> = object
        .pointer("/status/history")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (desired, progressing) = match to {
        Some(version) => {
            history.insert(0, json!({"state": "Partial", "version": version, "image": image(version), "startedTime": now, "verified": false}));
            let message = format!("Working towards {version}: 106 of 890 done (11% complete)");
            (
                version.to_owned(),
                condition("Progressing", true, "", &message, &now),
            )
        }
        None => {
            let version = history
                .first()
                .and_then(|h| h["version"].as_str())
                .unwrap_or(INITIAL_VERSION)
                .to_owned();
            if let Some(entry) = history.first_mut() {
                entry["state"] = json!("Completed");
                entry["completionTime"] = json!(now);
            }
            let message = format!("Cluster version is {version}");
            let done = condition("Progressing", false, "", &message, &now);
            (version, done)
        }
    };
    conditions.retain(|c| c["type"] != "Progressing");
    conditions.push(progressing);
    api.merge(
        CLUSTER_VERSIONS,
        "",
        NAME,
        &json!({"status": {
            "desired": {"version": desired, "image": image(&desired)},
            "history": history,
            "conditions": conditions,
        }}),
        true,
    )?;
    Ok(())
}
