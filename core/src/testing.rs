//! Fixtures for tests of the decisions, here and in the controller crate (feature
//! `testing`, asked for by its tests only).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{HostBmc, HostBmcSpec};

/// A `HostBmc` `namespace/name` naming `machine` and `node`, created at second `at`.
pub fn mapping_at(
    namespace: &str,
    name: &str,
    machine: Option<&str>,
    node: Option<&str>,
    at: i64,
) -> Arc<HostBmc> {
    let mut object = HostBmc::new(
        name,
        HostBmcSpec {
            machine_name: machine.map(str::to_string),
            node_name: node.map(str::to_string),
            address: "redfish://bmc".into(),
            credentials_name: "creds".into(),
            ca_bundle: None,
            ca_bundle_ref: None,
            insecure_skip_verify: false,
        },
    );
    object.metadata.namespace = Some(namespace.into());
    object.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(at).unwrap_or_default(),
    ));
    Arc::new(object)
}
