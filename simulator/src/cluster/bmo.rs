//! A simulated BareMetal Operator (read from metal3-io/baremetal-operator main, August 2026,
//! `internal/controller/metal3.io/baremetalhost_controller.go` `manageHostPower`,
//! `hasRebootAnnotation`, `clearRebootAnnotations`, and `host_state_machine.go`; the
//! release-0.13 branch for the older rule): it powers each BareMetalHost through the real
//! baremend drivers (Redfish or IPMI, from `spec.bmc.address` and the credentials Secret) and
//! honours the reboot API — `reboot.metal3.io` (power off, then on once off) and
//! `reboot.metal3.io/<key>` (held off until every such annotation is gone), value
//! `{"mode":"hard"|"soft","force":bool}` (soft escalates to hard after a timeout; empty or
//! invalid values mean soft, an invalid one with an Event), several requesters (hard wins) —
//! plus `spec.online`, `spec.disablePowerOff` (a power-off becomes a reboot: the host is
//! power-cycled, never reported off, and the suffixless key goes at once) and the `detached`
//! and `paused` annotations. Power is managed by provisioning state (`status.provisioning.state`):
//! `provisioned` and `externally provisioned` honour every reboot key; `available` (and the
//! older `ready`) only those with `"force": true`; `inspecting`, `provisioning` and
//! `deprovisioning` manage no power and drop the suffixless key — and, as BMO 0.13 and older
//! did, every suffixed key too when [`BmoOptions::drops_suffixed_reboot_keys`]; other states
//! manage no power. Every failure counts in `status.errorCount`, and a host with errors is
//! powered off hard. `status.poweredOn` is written only from a power state read back from the
//! BMC. `status.goodCredentials` names the Secret and the resourceVersion of the credentials
//! the BMC last accepted, as metal3 records them; a changed Secret is tried at once, and a
//! refused login is a `registration error`, as metal3 reports a registration with bad
//! credentials.

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

/// How the simulated operator behaves beyond its timing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BmoOptions {
    /// Drop the suffixed reboot keys too on entering inspecting, provisioning or
    /// deprovisioning, as BMO 0.13 and older did (`clearRebootAnnotations`).
    pub drops_suffixed_reboot_keys: bool,
}

/// Where a reboot of a host with `spec.disablePowerOff` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reboot {
    /// Told to power off.
    GoingOff,
    /// Read off, told to power on.
    ComingOn,
}

/// What the operator remembers per host between passes.
#[derive(Default)]
struct HostMemory {
    driver: Option<(String, Arc<dyn PowerDriver>)>,
    requested: Option<(bool, Instant, bool)>,
    next_check: Option<Instant>,
    reboot: Option<Reboot>,
}

fn annotations(bmh: &Value) -> serde_json::Map<String, Value> {
    bmh.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// How a provisioning state's handler treats power and reboot keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateClass {
    /// `provisioned`, `externally provisioned`: power managed, every reboot key honoured.
    Provisioned,
    /// `available`, `ready`: power managed, only forced reboot keys honoured.
    Available,
    /// `inspecting`, `provisioning`, `deprovisioning`: no power management; reboot keys
    /// cleared.
    Clearing,
    /// Any other state: no power management.
    Unmanaged,
}

/// The class of a host's `status.provisioning.state`.
pub fn state_class(bmh: &Value) -> StateClass {
    let state = bmh
        .pointer("/status/provisioning/state")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match state {
        "provisioned" | "externally provisioned" => StateClass::Provisioned,
        "available" | "ready" => StateClass::Available,
        "inspecting" | "provisioning" | "deprovisioning" => StateClass::Clearing,
        _ => StateClass::Unmanaged,
    }
}

/// A host's reboot keys, as `hasRebootAnnotation` reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebootRequests {
    /// Any key counts (with `expect_force`: any forced one).
    pub any: bool,
    /// One that counts asks for hard.
    pub hard: bool,
    /// A value is not valid JSON (taken for soft, unforced).
    pub invalid: bool,
    /// The suffixless key is there (counting or not).
    pub suffixless: bool,
}

/// Reads a host's reboot keys; with `expect_force` only those with `"force": true` count.
pub fn reboot_requests(bmh: &Value, expect_force: bool) -> RebootRequests {
    let mut found = RebootRequests::default();
    for (key, value) in annotations(bmh) {
        if key != REBOOT && !key.starts_with(REBOOT_PREFIX) {
            continue;
        }
        found.suffixless |= key == REBOOT;
        let text = value.as_str().unwrap_or_default();
        let arguments = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| {
                found.invalid = true;
                Value::Null
            })
        };
        if expect_force && arguments.get("force").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        found.any = true;
        found.hard |= arguments.get("mode").and_then(Value::as_str) == Some("hard");
    }
    found
}

/// How many hosts a sweep reconciles between rests (a lab of fewer never rests).
const SWEEP_CHUNK: usize = 256;

/// The rest a sweep takes before its host number `index`, the chunk since the last rest having
/// taken `worked`: none within a chunk. Not a core either: the real operator runs on another
/// machine, and a sweep at full speed over 20,000 hosts took a core from the controllers
/// under test for a tenth of a second; a rest as long as the chunk's work keeps it to half.
fn sweep_rest(index: usize, worked: Duration) -> Option<Duration> {
    (index > 0 && index.is_multiple_of(SWEEP_CHUNK)).then_some(worked)
}

/// Runs the operator until the task is aborted.
pub async fn run(api: Local, timing: Timing, options: BmoOptions) {
    let connector = Connector::new();
    let mut memory: HashMap<String, HostMemory> = HashMap::new();
    loop {
        tokio::time::sleep(timing.bmo_period).await;
        let mut chunk = Instant::now();
        for (index, bmh) in api.list_shared(BMHS, None).into_iter().enumerate() {
            // The real operator reconciles each host apart: a sweep of thousands must not
            // hold a worker of the simulated world (its API servers' answers wait behind it).
            tokio::task::consume_budget().await;
            if let Some(rest) = sweep_rest(index, chunk.elapsed()) {
                tokio::time::sleep(rest).await;
                chunk = Instant::now();
            }
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
            reconcile(&api, &connector, &bmh, state, (&timing, options)).await;
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

/// The host's namespace and name.
fn host_key(bmh: &Value) -> (String, String) {
    let (namespace, name) = super::local::namespace_and_name(bmh);
    (namespace.to_owned(), name.to_owned())
}

/// Merges `status` into the host's status.
fn set_status(api: &Local, bmh: &Value, status: Value) {
    let (namespace, name) = host_key(bmh);
    let _ = api.merge(BMHS, &namespace, &name, &json!({"status": status}), true);
}

/// Records a failure as `setErrorMessage` does: operational status `error`, its type and
/// message, and one more in `errorCount`.
fn set_error(api: &Local, bmh: &Value, kind: &str, message: String) {
    let count = bmh
        .pointer("/status/errorCount")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    set_status(
        api,
        bmh,
        json!({"operationalStatus": "error", "errorType": kind, "errorMessage": message, "errorCount": count + 1}),
    );
}

/// Removes reboot keys: the suffixless one, and the suffixed ones too when `all`.
fn clear_reboot_keys(api: &Local, bmh: &Value, all: bool) {
    let doomed: serde_json::Map<String, Value> = annotations(bmh)
        .into_iter()
        .filter(|(key, _)| key == REBOOT || (all && key.starts_with(REBOOT_PREFIX)))
        .map(|(key, _)| (key, Value::Null))
        .collect();
    if doomed.is_empty() {
        return;
    }
    let (namespace, name) = host_key(bmh);
    let patch = json!({"metadata": {"annotations": doomed}});
    let _ = api.merge(BMHS, &namespace, &name, &patch, false);
}

async fn reconcile(
    api: &Local,
    connector: &Connector,
    bmh: &Value,
    memory: &mut HostMemory,
    (timing, options): (&Timing, BmoOptions),
) {
    let ann = annotations(bmh);
    if ann.contains_key(PAUSED) {
        return;
    }
    if ann.contains_key(DETACHED) {
        // metal3 deletes a detached host's Ironic node (baremetal-operator
        // `pkg/provisioner/ironic/ironic.go`, `Detach`): its BMC session and connection go too.
        memory.driver = None;
        if bmh
            .pointer("/status/operationalStatus")
            .and_then(Value::as_str)
            != Some("detached")
        {
            set_status(api, bmh, json!({"operationalStatus": "detached"}));
        }
        return;
    }
    match state_class(bmh) {
        StateClass::Clearing => clear_reboot_keys(api, bmh, options.drops_suffixed_reboot_keys),
        StateClass::Unmanaged => {}
        StateClass::Provisioned => manage_power(api, connector, bmh, memory, (timing, false)).await,
        StateClass::Available => manage_power(api, connector, bmh, memory, (timing, true)).await,
    }
}

/// `manageHostPower`: reads the host's power and moves it towards what `spec.online` and the
/// reboot keys ask (`expect_force`: only forced keys count, for hosts not provisioned).
async fn manage_power(
    api: &Local,
    connector: &Connector,
    bmh: &Value,
    memory: &mut HostMemory,
    (timing, expect_force): (&Timing, bool),
) {
    let (namespace, _) = host_key(bmh);
    let requests = reboot_requests(bmh, expect_force);
    if requests.invalid && memory.requested.is_none() {
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
    let want_on = online && !requests.any;
    let known = bmh.pointer("/status/poweredOn").and_then(Value::as_bool);
    // Read the BMC only when a change is pending, or now and then (steady-state check).
    let good = good_credentials(api, bmh, &namespace);
    let pending = known != Some(want_on)
        || memory.requested.is_some()
        || memory.reboot.is_some()
        || (requests.suffixless && known == Some(false))
        || good.as_ref() != bmh.pointer("/status/goodCredentials");
    let due = memory.next_check.is_none_or(|t| Instant::now() >= t);
    if !pending && !due {
        return;
    }
    memory.next_check = Some(Instant::now() + timing.bmo_period * 40);
    let Some((driver, is_on)) = read_power(api, connector, bmh, memory, good).await else {
        return;
    };
    let disable_power_off = bmh
        .pointer("/spec/disablePowerOff")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if disable_power_off && (!want_on || memory.reboot.is_some()) {
        reboot_instead(api, bmh, memory, (&driver, is_on), requests).await;
        return;
    }
    if let Some(is_on) = is_on {
        record_power(api, bmh, is_on);
        if is_on == want_on {
            memory.requested = None;
            settle(api, bmh, is_on, requests);
            return;
        }
    }
    change_power(api, bmh, memory, &driver, (want_on, requests, timing)).await;
}

/// Logs in (recording a refusal) and reads the power state (recording a failure): the driver
/// and the state (None when neither on nor off).
async fn read_power(
    api: &Local,
    connector: &Connector,
    bmh: &Value,
    memory: &mut HostMemory,
    good: Option<Value>,
) -> Option<(Arc<dyn PowerDriver>, Option<bool>)> {
    let driver = match driver_for(api, connector, bmh, memory) {
        Ok(driver) => driver,
        Err(why) => {
            set_error(api, bmh, "registration error", why);
            return None;
        }
    };
    let state = match driver.power_state().await {
        Ok(state) => state,
        Err(error) => {
            let kind = match error {
                baremend_drivers::Error::Authentication { .. } => "registration error",
                _ => "power management error",
            };
            set_error(api, bmh, kind, error.to_string());
            return None;
        }
    };
    // The BMC accepted these credentials: metal3 records which, by the Secret's version.
    if let Some(good) = good
        && Some(&good) != bmh.pointer("/status/goodCredentials")
    {
        set_status(api, bmh, json!({"goodCredentials": good}));
    }
    let is_on = match state {
        PowerState::On => Some(true),
        PowerState::Off => Some(false),
        _ => None,
    };
    Some((driver, is_on))
}

/// Writes the power state read back, and clears an error.
fn record_power(api: &Local, bmh: &Value, is_on: bool) {
    let known = bmh.pointer("/status/poweredOn").and_then(Value::as_bool);
    let healthy = bmh
        .pointer("/status/operationalStatus")
        .and_then(Value::as_str)
        == Some("OK");
    if known != Some(is_on) || !healthy {
        set_status(
            api,
            bmh,
            json!({"poweredOn": is_on, "operationalStatus": "OK", "errorType": null, "errorMessage": null}),
        );
    }
}

/// The host reached the wanted state: no errors count any more, and the suffixless key (fire
/// and forget) goes once the host is off.
fn settle(api: &Local, bmh: &Value, is_on: bool, requests: RebootRequests) {
    let (namespace, name) = host_key(bmh);
    let errors = bmh
        .pointer("/status/errorCount")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if errors > 0 {
        set_status(api, bmh, json!({"errorCount": 0}));
    }
    if requests.suffixless && !is_on {
        let patch = json!({"metadata": {"annotations": {REBOOT: null}}});
        let _ = api.merge(BMHS, &namespace, &name, &patch, false);
    }
}

/// Tells the BMC to power on or off (hard when asked, when the host has errors, or once a soft
/// power-off took too long); asks again only now and then.
async fn change_power(
    api: &Local,
    bmh: &Value,
    memory: &mut HostMemory,
    driver: &Arc<dyn PowerDriver>,
    (want_on, requests, timing): (bool, RebootRequests, &Timing),
) {
    let errors = bmh
        .pointer("/status/errorCount")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    // Ask again only now and then: BMCs take time and dislike repeated commands.
    let hard_now = requests.hard
        || errors > 0
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
        Err(error) => set_error(api, bmh, "power management error", error.to_string()),
    }
}

/// A host with `spec.disablePowerOff` asked to power off is rebooted instead (ironic's
/// `rebooting` target): powered off and on again in one operation, so it is never reported
/// off; the suffixless key goes as soon as the reboot is asked for. A suffixed key left on the
/// host asks again once the reboot is done, as upstream asks on every reconcile.
async fn reboot_instead(
    api: &Local,
    bmh: &Value,
    memory: &mut HostMemory,
    (driver, is_on): (&Arc<dyn PowerDriver>, Option<bool>),
    requests: RebootRequests,
) {
    let result = match (memory.reboot, is_on) {
        (None, _) => {
            let mode = if requests.hard {
                PowerOffMode::Forced
            } else {
                PowerOffMode::Graceful
            };
            let result = driver.power_off(mode).await;
            if result.is_ok() {
                memory.reboot = Some(Reboot::GoingOff);
                if requests.suffixless {
                    clear_reboot_keys(api, bmh, false);
                }
            }
            result
        }
        (Some(Reboot::GoingOff), Some(false)) => {
            let result = driver.power_on().await;
            if result.is_ok() {
                memory.reboot = Some(Reboot::ComingOn);
            }
            result
        }
        (Some(Reboot::ComingOn), Some(true)) => {
            memory.reboot = None;
            record_power(api, bmh, true);
            Ok(())
        }
        _ => Ok(()),
    };
    if let Err(error) = result {
        set_error(api, bmh, "power management error", error.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_rests_as_long_as_each_chunk_worked_and_a_small_lab_never_rests() {
        let worked = Duration::from_millis(3);
        // A lab of fewer hosts than a chunk: no rest anywhere in its sweep.
        assert!((0..SWEEP_CHUNK).all(|i| sweep_rest(i, worked).is_none()));
        // 20,000 hosts: a rest before each new chunk, as long as the last one's work.
        let rests: Vec<usize> = (0..20_000)
            .filter(|&i| sweep_rest(i, worked) == Some(worked))
            .collect();
        assert_eq!(rests.len(), 20_000 / SWEEP_CHUNK);
        assert_eq!(rests[0], SWEEP_CHUNK);
        assert!(rests.windows(2).all(|w| w[1] - w[0] == SWEEP_CHUNK));
    }
}
