//! Every reader of objects users and other controllers write, on arbitrary JSON: Machine
//! annotations and providerID (which host, which Node), BareMetalHost power and BMC fields,
//! the reboot-API annotations, our policy and HostBmc specs, and the cached Machine and
//! BareMetalHost types (which must survive a round trip).
#![no_main]

use baremend::api::{HostBmcSpec, RemediationPolicySpec};
use baremend::remediation::decide::observe::{
    bare_metal_host_bmc, bare_metal_host_view, machine_host, machine_node,
};
use baremend::api::slim;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = machine_host(&value);
    let _ = machine_node(&value);
    let _ = bare_metal_host_view(&value, "capbm-requested-power-off");
    let _ = bare_metal_host_bmc(&value);
    let _ = serde_json::from_value::<RemediationPolicySpec>(value.clone());
    let _ = serde_json::from_value::<HostBmcSpec>(value.clone());
    if let Ok(machine) = serde_json::from_value::<slim::Machine>(value.clone()) {
        let json = serde_json::to_value(&machine).expect("a cached Machine serializes");
        let _ = machine_host(&json);
        let _ = machine_node(&json);
    }
    if let Ok(host) = serde_json::from_value::<slim::BareMetalHost>(value) {
        let json = serde_json::to_value(&host).expect("a cached host serializes");
        let _ = bare_metal_host_view(&json, "capbm-requested-power-off");
        let _ = bare_metal_host_bmc(&json);
    }
});
