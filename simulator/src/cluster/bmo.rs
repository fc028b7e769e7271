//! A simulated BareMetal Operator: it powers each BareMetalHost through the real baremend
//! drivers (Redfish or IPMI, from `spec.bmc.address` and the credentials Secret) and honours
//! the reboot API — `reboot.metal3.io` (power off, then on once off) and
//! `reboot.metal3.io/<key>` (held off until every such annotation is gone), modes hard and
//! soft (soft escalates to hard after a timeout; invalid values mean soft), several
//! requesters (hard wins) — plus `spec.online`, `spec.disablePowerOff` (power-off becomes a
//! reboot, so the host never reads off) and the `detached` and `paused` annotations.
//! `status.poweredOn` is written only from a power state read back from the BMC.
//! `status.goodCredentials` names the Secret and the resourceVersion of the credentials the
//! BMC last accepted, as metal3 records them; a changed Secret is tried at once, and a refused
//! login is a `registration error`, as metal3 reports a registration with bad credentials.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, PowerDriver, PowerOffMode, PowerState,
    TlsOptions,
};
use base64::Engine;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::local::{BMHS, Local, SECRETS};
use super::timing::Timing;

/// The suffixless reboot annotation.
pub const REBOOT: &str = "reboot.metal3.io";
/// The prefix of the suffixed reboot annotations.
pub const REBOOT_PREFIX: &str = "reboot.metal3.io/";
/// Detached hosts are not managed.
pub const DETACHED: &str = "baremetalhost.metal3.io/detached";
/// Paused hosts are not reconciled at all.
pub const PAUSED: &str = "baremetalhost.metal3.io/paused";

/// What the operator remembers per host between passes.
#[derive(Default)]
struct HostMemory {
    driver: Option<(String, Arc<dyn PowerDriver>)>,
    requested: Option<(bool, Instant, bool)>,
    next_check: Option<Instant>,
}

fn annotations(bmh: &Value) -> serde_json::Map<String, Value> {
    bmh.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// (any reboot annotation, any asks for hard, any invalid value) of a host.
fn reboot_requests(bmh: &Value) -> (bool, bool, bool, bool) {
    let mut any = false;
    let mut hard = false;
    let mut invalid = false;
    let mut suffixless = false;
    for (key, value) in annotations(bmh) {
        if key != REBOOT && !key.starts_with(REBOOT_PREFIX) {
            continue;
        }
        any = true;
        suffixless |= key == REBOOT;
        let text = value.as_str().unwrap_or_default();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(text) {
            Ok(arguments) => hard |= arguments.get("mode").and_then(Value::as_str) == Some("hard"),
            Err(_) => invalid = true,
        }
    }
    (any, hard, invalid, suffixless)
}

/// Runs the operator until the task is aborted.
pub async fn run(api: Local, timing: Timing) {
    let connector = Connector::new();
    let mut memory: HashMap<String, HostMemory> = HashMap::new();
    loop {
        tokio::time::sleep(timing.bmo_period).await;
        for bmh in api.list_shared(BMHS, None) {
            let key = format!(
                "{}/{}",
                bmh.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                bmh.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            let state = memory.entry(key).or_default();
            reconcile(&api, &connector, &bmh, state, &timing).await;
        }
    }
}

/// The `status.goodCredentials` a successful login with the host's Secret as it is now records
/// (None when the Secret is not there).
fn good_credentials(api: &Local, bmh: &Value, namespace: &str) -> Option<Value> {
    let name = bmh.pointer("/spec/bmc/credentialsName")?.as_str()?;
    let secret = api.get(SECRETS, namespace, name).ok()?;
    let version = secret.pointer("/metadata/resourceVersion")?.clone();
    Some(
        json!({"credentials": {"name": name, "namespace": namespace}, "credentialsVersion": version}),
    )
}

fn driver_for(
    api: &Local,
    connector: &Connector,
    bmh: &Value,
    memory: &mut HostMemory,
) -> Result<Arc<dyn PowerDriver>, String> {
    let namespace = bmh
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let address = bmh
        .pointer("/spec/bmc/address")
        .and_then(Value::as_str)
        .ok_or("spec.bmc.address is missing")?;
    let secret_name = bmh
        .pointer("/spec/bmc/credentialsName")
        .and_then(Value::as_str)
        .ok_or("spec.bmc.credentialsName is missing")?;
    let secret = api
        .get(SECRETS, namespace, secret_name)
        .map_err(|e| e.message)?;
    let decode = |key: &str| -> Result<String, String> {
        let encoded = secret
            .pointer(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .ok_or(format!("the credentials Secret has no {key}"))?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| format!("the {key} of the credentials Secret is not base64"))?;
        String::from_utf8(bytes).map_err(|_| format!("the {key} is not UTF-8"))
    };
    let (username, password) = (decode("username")?, decode("password")?);
    // A changed Secret (its resourceVersion) means a new login, as metal3 registers again.
    let version = secret
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let identity = format!("{address}|{secret_name}|{version}");
    if let Some((known, driver)) = &memory.driver
        && *known == identity
    {
        return Ok(driver.clone());
    }
    let insecure = bmh
        .pointer("/spec/bmc/disableCertificateVerification")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let address = BmcAddress::parse(address).map_err(|e| e.to_string())?;
    let mut config = DriverConfig::new(
        address,
        Credentials::new(username, password),
        TlsOptions {
            ca_bundle_pem: None,
            insecure,
        },
    );
    config.request_timeout = Duration::from_secs(5);
    config.ipmi.reply_timeout = Duration::from_millis(500);
    let driver = connector.connect(config).map_err(|e| e.to_string())?;
    memory.driver = Some((identity, driver.clone()));
    Ok(driver)
}

async fn reconcile(
    api: &Local,
    connector: &Connector,
    bmh: &Value,
    memory: &mut HostMemory,
    timing: &Timing,
) {
    let ann = annotations(bmh);
    if ann.contains_key(PAUSED) {
        return;
    }
    let namespace = bmh
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = bmh
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let set_status = |status: Value| {
        let _ = api.merge(BMHS, &namespace, &name, &json!({"status": status}), true);
    };
    if ann.contains_key(DETACHED) {
        if bmh
            .pointer("/status/operationalStatus")
            .and_then(Value::as_str)
            != Some("detached")
        {
            set_status(json!({"operationalStatus": "detached"}));
        }
        return;
    }
    let (rebooting, hard, invalid, suffixless) = reboot_requests(bmh);
    if invalid && memory.requested.is_none() {
        api.event(
            bmh,
            "Warning",
            "InvalidAnnotationValue",
            "a reboot annotation value is not valid JSON; using soft mode",
            "metal3-baremetal-controller",
        );
    }
    let online = bmh
        .pointer("/spec/online")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    let disable_power_off = bmh
        .pointer("/spec/disablePowerOff")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let want_on = (online && !rebooting) || disable_power_off;
    let known = bmh.pointer("/status/poweredOn").and_then(Value::as_bool);
    // Read the BMC only when a change is pending, or now and then (steady-state check).
    let good = good_credentials(api, bmh, &namespace);
    let pending = known != Some(want_on)
        || memory.requested.is_some()
        || (suffixless && known == Some(false))
        || good.as_ref() != bmh.pointer("/status/goodCredentials");
    let due = memory.next_check.is_none_or(|t| Instant::now() >= t);
    if !pending && !due {
        return;
    }
    memory.next_check = Some(Instant::now() + timing.bmo_period * 40);
    let driver = match driver_for(api, connector, bmh, memory) {
        Ok(driver) => driver,
        Err(why) => {
            set_status(
                json!({"operationalStatus": "error", "errorType": "registration error", "errorMessage": why}),
            );
            return;
        }
    };
    let state = match driver.power_state().await {
        Ok(state) => state,
        Err(error) => {
            let kind = match error {
                baremend_drivers::Error::Authentication { .. } => "registration error",
                _ => "power management error",
            };
            set_status(
                json!({"operationalStatus": "error", "errorType": kind, "errorMessage": error.to_string()}),
            );
            return;
        }
    };
    // The BMC accepted these credentials: metal3 records which, by the Secret's version.
    if let Some(good) = good
        && Some(&good) != bmh.pointer("/status/goodCredentials")
    {
        set_status(json!({"goodCredentials": good}));
    }
    let is_on = match state {
        PowerState::On => Some(true),
        PowerState::Off => Some(false),
        _ => None,
    };
    if let Some(is_on) = is_on {
        let healthy = bmh
            .pointer("/status/operationalStatus")
            .and_then(Value::as_str)
            == Some("OK");
        if known != Some(is_on) || !healthy {
            set_status(
                json!({"poweredOn": is_on, "operationalStatus": "OK", "errorType": null, "errorMessage": null}),
            );
        }
        if is_on == want_on {
            memory.requested = None;
            // The suffixless form is fire-and-forget: once the host is off, it goes.
            if suffixless && !is_on {
                let _ = api.merge(
                    BMHS,
                    &namespace,
                    &name,
                    &json!({"metadata": {"annotations": {REBOOT: null}}}),
                    false,
                );
            }
            return;
        }
    }
    // Ask again only now and then: BMCs take time and dislike repeated commands.
    let hard_now = hard
        || memory
            .requested
            .is_some_and(|(_, at, soft)| soft && at.elapsed() > timing.soft_power_off_timeout);
    let recent = memory.requested.is_some_and(|(on, at, soft)| {
        on == want_on && at.elapsed() < timing.power_delay * 4 && !(soft && hard_now)
    });
    if recent {
        return;
    }
    let result = if want_on {
        driver.power_on().await
    } else if hard_now {
        driver.power_off(PowerOffMode::Forced).await
    } else {
        driver.power_off(PowerOffMode::Graceful).await
    };
    match result {
        Ok(()) => memory.requested = Some((want_on, Instant::now(), !want_on && !hard_now)),
        Err(error) => set_status(
            json!({"operationalStatus": "error", "errorType": "power management error", "errorMessage": error.to_string()}),
        ),
    }
}
