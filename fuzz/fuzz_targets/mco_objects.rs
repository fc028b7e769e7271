//! The drift coordinator's readers of what the Machine Config Operator (and whoever edits its
//! objects) writes: the MCD's reason text and a Node's MCO annotations, rendered Ignition
//! configs (data URLs, gzip, units), pools (maxUnavailable, selectors) and our DriftPolicy.
#![no_main]

use std::collections::BTreeMap;

use baremend::api::DriftPolicySpec;
use baremend::api::mco::{MachineConfig, MachineConfigPool};
use baremend::drift::classify::{classify, parse_reason};
use baremend::drift::content::{ExpectedState, decode_data_url};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_reason(text);
        let _ = decode_data_url(text);
        let annotations = BTreeMap::from([
            ("machineconfiguration.openshift.io/state".to_string(), "Degraded".to_string()),
            ("machineconfiguration.openshift.io/currentConfig".to_string(), "r".to_string()),
            ("machineconfiguration.openshift.io/desiredConfig".to_string(), "r".to_string()),
            ("machineconfiguration.openshift.io/reason".to_string(), text.to_string()),
        ]);
        let _ = classify(&annotations);
    }
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = ExpectedState::from_configs([&value]);
    if let Ok(config) = serde_json::from_value::<MachineConfig>(value.clone())
        && let Some(spec) = config.spec
    {
        let _ = ExpectedState::from_configs([&spec.config]);
    }
    if let Ok(pool) = serde_json::from_value::<MachineConfigPool>(value.clone()) {
        let _ = pool.max_unavailable(7);
        let _ = pool.selects(&BTreeMap::new());
        let _ = pool.rolling_out();
    }
    let _ = serde_json::from_value::<DriftPolicySpec>(value);
});
