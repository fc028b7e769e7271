//! The Redfish driver against real vendor payloads: the Dell iDRAC samples of sushy-oem-idrac,
//! the HPE iLO 5 samples of proliantutils and the Dell, Lenovo XCC and NVIDIA BlueField test
//! data of the libredfish crate, fetched by the test install step
//! (`bash scripts/fetch-vendor-payloads.sh`). First every fetched System and service root is
//! parsed by the driver as served verbatim; then probe, off, on and status run against each
//! vendor mode of the simulator, with the vendors' reset answers.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, Error, PowerDriver, PowerOffMode, PowerState,
    TlsOptions,
};
use baremend_sim::host::{Faults, Power};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, Vendor, VendorPayloads};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod common;

use common::wait_for;

/// The payloads, or a failure that says how to fetch them (never a skip).
fn payloads() -> VendorPayloads {
    VendorPayloads::locate().unwrap_or_else(|e| panic!("{e}"))
}

/// Every fetched JSON file, parsed.
fn documents() -> Vec<(PathBuf, Value)> {
    let files = payloads().files().unwrap();
    files
        .into_iter()
        .map(|(_, file)| {
            let text = std::fs::read_to_string(&file).unwrap();
            let value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", file.display()));
            (file, value)
        })
        .collect()
}

fn odata_type_starts(document: &Value, prefix: &str) -> bool {
    document
        .get("@odata.type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.starts_with(prefix))
}

/// Every System in the payloads (proliantutils keeps several in one file), with its file.
fn systems() -> Vec<(String, Value)> {
    let mut found = Vec::new();
    for (file, document) in documents() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if odata_type_starts(&document, "#ComputerSystem.v") {
            found.push((name, document));
        } else if let Some(object) = document.as_object() {
            for (key, inner) in object {
                if odata_type_starts(inner, "#ComputerSystem.v") {
                    found.push((format!("{name} [{key}]"), inner.clone()));
                }
            }
        }
    }
    found
}

fn driver_config(address: &str) -> DriverConfig {
    let mut config = DriverConfig::new(
        BmcAddress::parse(address).unwrap(),
        Credentials::new("admin", "password"),
        TlsOptions::default(),
    );
    config.request_timeout = Duration::from_secs(2);
    config.task_timeout = Duration::from_secs(5);
    config
}

#[tokio::test]
async fn every_fetched_payload_is_json_and_survives_every_parser() {
    let documents = documents();
    // 15 sushy-oem-idrac samples, 51 proliantutils samples, 31 libredfish test files.
    assert!(documents.len() >= 90, "only {} files", documents.len());
    for (file, document) in &documents {
        let bytes = serde_json::to_vec(document).unwrap();
        // Never panics, whatever the vendor put in (the fuzz target's entry point).
        baremend_drivers::redfish::exercise_parsers(&bytes);
        assert!(document.is_object(), "{}", file.display());
    }
}

#[tokio::test]
async fn every_vendor_system_reads_its_power_state_and_reset_types() {
    let systems = systems();
    // sushy-oem-idrac 1, proliantutils 5, libredfish 4 (Dell, Lenovo, two BlueField).
    assert!(systems.len() >= 10, "only {} Systems", systems.len());
    for (name, system) in systems {
        let server = MockServer::start().await;
        let system_path = system["@odata.id"].as_str().unwrap().to_owned();
        Mock::given(method("GET"))
            .and(path("/redfish/v1/"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"Id": "RootService", "RedfishVersion": "1.6.0",
                       "Systems": {"@odata.id": "/redfish/v1/Systems"}})),
            )
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/redfish/v1/Systems"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"Members": [{"@odata.id": system_path}]})),
            )
            .mount(&server)
            .await;
        // The address parser drops iLO's trailing slash; iLO answers both spellings.
        Mock::given(method("GET"))
            .and(path(same_path(&system_path)))
            .respond_with(ResponseTemplate::new(200).set_body_json(&system))
            .mount(&server)
            .await;
        let reset = &system["Actions"]["#ComputerSystem.Reset"];
        if let Some(info) = reset["@Redfish.ActionInfo"].as_str() {
            Mock::given(method("GET"))
                .and(path(info))
                .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                    "Parameters": [{"Name": "ResetType", "AllowableValues": ["On", "ForceOff"]}]
                })))
                .mount(&server)
                .await;
        }
        let address = format!("redfish+http://{}{system_path}", server.address());
        let driver = Connector::new().connect(driver_config(&address)).unwrap();
        let report = driver
            .probe()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = PowerState::from_redfish(system["PowerState"].as_str().unwrap_or(""));
        assert_eq!(report.power_state, Some(expected), "{name}");
        assert_eq!(
            report.selected_system.trim_end_matches('/'),
            system_path.trim_end_matches('/'),
            "{name}"
        );
        let advertised: Vec<String> = match reset.get("ResetType@Redfish.AllowableValues") {
            Some(values) => serde_json::from_value(values.clone()).unwrap(),
            None if reset.get("@Redfish.ActionInfo").is_some() => {
                vec!["On".into(), "ForceOff".into()]
            }
            None => vec!["(not advertised; standard values assumed)".into()],
        };
        assert_eq!(report.power_operations, advertised, "{name}");
    }
}

#[tokio::test]
async fn every_vendor_service_root_is_probed_with_a_session_at_its_links_sessions() {
    let roots: Vec<_> = documents()
        .into_iter()
        .filter(|(_, d)| odata_type_starts(d, "#ServiceRoot."))
        .collect();
    // sushy-oem-idrac's iDRAC root, proliantutils' iLO root, libredfish's Supermicro root.
    assert_eq!(roots.len(), 3, "{roots:?}");
    for (file, root) in roots {
        let name = file.display().to_string();
        let server = MockServer::start().await;
        let systems = root["Systems"]["@odata.id"].as_str().unwrap();
        let sessions = root["Links"]["Sessions"]["@odata.id"].as_str().unwrap();
        let system_path = "/redfish/v1/Systems/1";
        for (at, body) in [
            ("/redfish/v1/", root.clone()),
            (systems, json!({"Members": [{"@odata.id": system_path}]})),
            (system_path, json!({"Id": "1", "PowerState": "Off"})),
        ] {
            Mock::given(method("GET"))
                .and(path(at))
                .respond_with(ResponseTemplate::new(200).set_body_json(body))
                .mount(&server)
                .await;
        }
        // The login must go to the root's Links.Sessions (iDRAC: /redfish/v1/Sessions, outside
        // the SessionService; iLO: with a trailing slash).
        Mock::given(method("POST"))
            .and(path(sessions))
            .respond_with(
                ResponseTemplate::new(201)
                    .insert_header("X-Auth-Token", "token")
                    .insert_header("Location", format!("{sessions}/1")),
            )
            .expect(1)
            .mount(&server)
            .await;
        let address = format!("redfish+http://{}", server.address());
        let driver = Connector::new().connect(driver_config(&address)).unwrap();
        let report = driver
            .probe()
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let version = root["RedfishVersion"].as_str().unwrap();
        assert_eq!(report.protocol, format!("Redfish {version}"), "{name}");
        assert_eq!(report.authentication, "session", "{name}");
        assert_eq!(report.selected_system, system_path, "{name}");
    }
}

/// What each vendor mode is expected to show: the System path as the vendor publishes it and
/// the reset types it advertises.
fn expected(vendor: Vendor) -> (&'static str, Vec<&'static str>) {
    match vendor {
        Vendor::Idrac => (
            "/redfish/v1/Systems/System.Embedded.1",
            vec![
                "On",
                "ForceOff",
                "ForceRestart",
                "GracefulRestart",
                "GracefulShutdown",
                "PushPowerButton",
                "Nmi",
                "PowerCycle",
            ],
        ),
        Vendor::Ilo5 => (
            "/redfish/v1/Systems/1/",
            vec!["On", "ForceOff", "ForceRestart", "Nmi", "PushPowerButton"],
        ),
        Vendor::Xcc => (
            "/redfish/v1/Systems/1",
            vec![
                "On",
                "Nmi",
                "GracefulShutdown",
                "GracefulRestart",
                "ForceOn",
                "ForceOff",
                "ForceRestart",
            ],
        ),
        Vendor::BlueField | Vendor::Generic => (
            "/redfish/v1/Systems/Bluefield",
            vec![
                "On",
                "ForceOff",
                "ForceOn",
                "ForceRestart",
                "GracefulRestart",
                "GracefulShutdown",
                "PowerCycle",
                "Nmi",
            ],
        ),
    }
}

async fn vendor_sim(vendor: Vendor, initial_power: Power) -> RedfishSim {
    RedfishSim::start_vendor(
        RedfishSimConfig {
            power_delay: Duration::from_millis(200),
            initial_power,
            ..RedfishSimConfig::default()
        },
        vendor,
    )
    .await
    .unwrap_or_else(|e| panic!("{vendor}: {e}"))
}

fn vendor_driver(sim: &RedfishSim, system_path: &str) -> Arc<dyn PowerDriver> {
    let address = format!("redfish+http://{}{system_path}", sim.local_addr());
    Connector::new().connect(driver_config(&address)).unwrap()
}

/// A path as the address parser keeps it (no trailing slash).
fn same_path(path: &str) -> &str {
    path.trim_end_matches('/')
}

fn resets(sim: &RedfishSim) -> Vec<String> {
    let stats = sim.service().stats();
    stats.resets.into_iter().map(|r| r.reset_type).collect()
}

#[tokio::test]
async fn probe_off_on_and_status_pass_against_every_vendor_mode() {
    for vendor in Vendor::REAL {
        let (system_path, reset_types) = expected(vendor);
        let sim = vendor_sim(vendor, Power::On).await;
        // The address names the System as the vendor links it (iLO: trailing slash).
        let driver = vendor_driver(&sim, system_path);
        let report = driver
            .probe()
            .await
            .unwrap_or_else(|e| panic!("{vendor}: {e}"));
        assert_eq!(report.authentication, "session", "{vendor}");
        assert_eq!(
            same_path(&report.selected_system),
            same_path(system_path),
            "{vendor}"
        );
        assert_eq!(report.power_operations, reset_types, "{vendor}");
        assert!(
            report.forced_off,
            "{vendor}: every vendor advertises a forced off"
        );
        assert_eq!(report.power_state, Some(PowerState::On), "{vendor}");
        assert_eq!(sim.service().stats().sessions_created, 1, "{vendor}");

        driver
            .power_off(PowerOffMode::Forced)
            .await
            .unwrap_or_else(|e| panic!("{vendor} off: {e}"));
        wait_for(driver.as_ref(), PowerState::Off, 5000)
            .await
            .unwrap_or_else(|e| panic!("{vendor} off: {e}"));
        driver
            .power_on()
            .await
            .unwrap_or_else(|e| panic!("{vendor} on: {e}"));
        wait_for(driver.as_ref(), PowerState::On, 5000)
            .await
            .unwrap_or_else(|e| panic!("{vendor} on: {e}"));
        assert_eq!(resets(&sim), ["ForceOff", "On"], "{vendor}");
        driver.close().await.unwrap();
        assert_eq!(sim.service().stats().open_sessions, 0, "{vendor}");
    }
}

#[tokio::test]
async fn without_a_system_path_each_vendor_mode_yields_its_resettable_system() {
    for vendor in Vendor::REAL {
        let (system_path, _) = expected(vendor);
        let sim = vendor_sim(vendor, Power::Off).await;
        let driver = vendor_driver(&sim, "");
        let report = driver
            .probe()
            .await
            .unwrap_or_else(|e| panic!("{vendor}: {e}"));
        // Discovered from the collection, so as the vendor links it (iLO: trailing slash).
        assert_eq!(report.selected_system, system_path, "{vendor}");
        if vendor == Vendor::BlueField {
            // The second System, listed first, has no Reset action.
            assert_eq!(
                report.systems,
                ["/redfish/v1/Systems/Second", system_path],
                "{vendor}"
            );
        }
        driver.power_on().await.unwrap();
        wait_for(driver.as_ref(), PowerState::On, 5000)
            .await
            .unwrap();
    }
}

/// The host is off, but the BMC's first reading still says On: the driver sends ForceOff and
/// the vendor refuses it as "already off".
fn lagging_reading(sim: &RedfishSim, system_id: &str, reads: Option<u32>) {
    let host = sim.host(system_id).unwrap();
    host.set_faults(Faults {
        stale_power: Some(Power::On),
        stale_reads: reads,
        ..Faults::default()
    });
}

#[tokio::test]
async fn an_already_off_refusal_is_success_only_after_a_fresh_read_confirms_off() {
    for (vendor, system_id, status) in [
        (Vendor::Idrac, "System.Embedded.1", 409),
        (Vendor::Ilo5, "1", 400),
    ] {
        let (system_path, _) = expected(vendor);
        let sim = vendor_sim(vendor, Power::Off).await;
        let driver = vendor_driver(&sim, system_path);
        lagging_reading(&sim, system_id, Some(1));
        driver
            .power_off(PowerOffMode::Forced)
            .await
            .unwrap_or_else(|e| panic!("{vendor}: {e}"));
        assert_eq!(
            resets(&sim),
            ["ForceOff"],
            "{vendor}: the refused reset was sent"
        );
        assert_eq!(sim.host(system_id).unwrap().power(), Power::Off);

        // The reading keeps lying: the refusal cannot be confirmed and stays an error.
        lagging_reading(&sim, system_id, None);
        let error = driver.power_off(PowerOffMode::Forced).await.unwrap_err();
        assert!(
            matches!(error, Error::Http { status: s, .. } if s == status),
            "{vendor}: {error}"
        );
    }
}

#[tokio::test]
async fn an_already_on_refusal_is_success_after_a_fresh_read() {
    for (vendor, system_id) in [(Vendor::Idrac, "System.Embedded.1"), (Vendor::Ilo5, "1")] {
        let (system_path, _) = expected(vendor);
        let sim = vendor_sim(vendor, Power::On).await;
        let driver = vendor_driver(&sim, system_path);
        sim.host(system_id).unwrap().set_faults(Faults {
            stale_power: Some(Power::Off),
            stale_reads: Some(1),
            ..Faults::default()
        });
        driver
            .power_on()
            .await
            .unwrap_or_else(|e| panic!("{vendor}: {e}"));
        assert_eq!(resets(&sim), ["On"], "{vendor}");
        assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    }
}
