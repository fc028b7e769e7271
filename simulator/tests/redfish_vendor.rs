//! The vendor modes on the wire: the real payloads served at their published paths (with or
//! without a trailing slash) with the host's power state, and each vendor's reset answers. The
//! payloads come from `bash scripts/fetch-vendor-payloads.sh`; without them these tests fail
//! with that command.

use std::time::Duration;

use baremend_sim::host::Power;
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, Vendor, VendorPayloads};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn start(vendor: Vendor, initial_power: Power) -> RedfishSim {
    RedfishSim::start_vendor(
        RedfishSimConfig {
            // Power changes land at once: the answers, not the transitions, are under test.
            power_delay: Duration::ZERO,
            initial_power,
            ..RedfishSimConfig::default()
        },
        vendor,
    )
    .await
    .unwrap_or_else(|e| panic!("{vendor}: {e}"))
}

/// An authenticated request to the simulator.
fn request(sim: &RedfishSim, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, format!("{}{path}", sim.base_url()))
        .basic_auth("admin", Some("password"))
}

/// Status and JSON body (null when there is none).
async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let reply = request.send().await.unwrap();
    let status = reply.status();
    let body = reply.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn get(sim: &RedfishSim, path: &str) -> (StatusCode, Value) {
    answer(request(sim, reqwest::Method::GET, path)).await
}

async fn reset(sim: &RedfishSim, target: &str, reset_type: &str) -> (StatusCode, Value) {
    answer(request(sim, reqwest::Method::POST, target).json(&json!({"ResetType": reset_type})))
        .await
}

/// The vendor's System as published, read from the fetched file.
fn published(package: &str, file: &str, key: Option<&str>) -> Value {
    let payloads = VendorPayloads::locate().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(payloads.dir().join(package).join(file)).unwrap();
    let value: Value = serde_json::from_str(&text).unwrap();
    key.map_or(value.clone(), |k| value[k].clone())
}

#[tokio::test]
async fn each_vendor_system_is_its_published_payload_with_the_hosts_power_state() {
    let cases = [
        (
            Vendor::Idrac,
            "/redfish/v1/Systems/System.Embedded.1",
            published("sushy-oem-idrac", "system.json", None),
        ),
        (
            Vendor::Ilo5,
            "/redfish/v1/Systems/1/",
            published("proliantutils", "system.json", Some("default")),
        ),
        (
            Vendor::Xcc,
            "/redfish/v1/Systems/1",
            published("libredfish", "system_lenovo.json", None),
        ),
        (
            Vendor::BlueField,
            "/redfish/v1/Systems/Bluefield",
            published("libredfish", "system_bluefield_boot_valid.json", None),
        ),
    ];
    for (vendor, path, mut expected) in cases {
        let sim = start(vendor, Power::Off).await;
        expected["PowerState"] = json!("Off");
        let trimmed = path.trim_end_matches('/');
        for spelling in [trimmed.to_owned(), format!("{trimmed}/")] {
            let (status, body) = get(&sim, &spelling).await;
            assert_eq!(status, StatusCode::OK, "{vendor} {spelling}");
            assert_eq!(body, expected, "{vendor} {spelling}");
        }
        let root = reqwest::get(format!("{}/redfish/v1/", sim.base_url()))
            .await
            .unwrap();
        assert_eq!(
            root.status(),
            StatusCode::OK,
            "{vendor}: the root needs no auth"
        );
        let version: Value = reqwest::get(format!("{}/redfish", sim.base_url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(version, json!({"v1": "/redfish/v1/"}), "{vendor}");
        let unauthenticated = reqwest::get(format!("{}{path}", sim.base_url()))
            .await
            .unwrap();
        assert_eq!(
            unauthenticated.status(),
            StatusCode::UNAUTHORIZED,
            "{vendor}"
        );
    }
}

#[tokio::test]
async fn idrac_refuses_a_reset_to_the_current_state_with_409() {
    let sim = start(Vendor::Idrac, Power::Off).await;
    let target = "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset";
    let (status, _) = reset(&sim, target, "ForceOff").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(sim.host("System.Embedded.1").unwrap().power(), Power::Off);
    let (status, _) = reset(&sim, target, "On").await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(sim.host("System.Embedded.1").unwrap().power(), Power::On);
    let (status, _) = reset(&sim, target, "On").await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = reset(&sim, target, "ForceOn").await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "not advertised by this iDRAC"
    );
    let delete = request(&sim, reqwest::Method::DELETE, target)
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(delete.headers()["allow"], "POST");
    // Login at the root's Links.Sessions, outside the SessionService.
    let login = reqwest::Client::new()
        .post(format!("{}/redfish/v1/Sessions", sim.base_url()))
        .json(&json!({"UserName": "admin", "Password": "password"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::CREATED);
    assert!(login.headers().contains_key("x-auth-token"));
}

#[tokio::test]
async fn ilo_answers_200_with_a_success_body_and_400_when_already_there() {
    let sim = start(Vendor::Ilo5, Power::Off).await;
    // The target as published, trailing slash included.
    let target = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset/";
    let (status, body) = reset(&sim, target, "On").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["error"]["@Message.ExtendedInfo"][0]["MessageId"],
        "Base.1.4.Success"
    );
    assert_eq!(sim.host("1").unwrap().power(), Power::On);
    let (status, body) = reset(&sim, target, "On").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let id = body["error"]["@Message.ExtendedInfo"][0]["MessageId"]
        .as_str()
        .unwrap();
    assert!(id.ends_with("InvalidOperationForSystemState"), "{id}");
}

#[tokio::test]
async fn bluefield_lists_reset_types_only_in_its_action_info_and_a_second_system_without_reset() {
    let sim = start(Vendor::BlueField, Power::On).await;
    let (_, system) = get(&sim, "/redfish/v1/Systems/Bluefield").await;
    let action = &system["Actions"]["#ComputerSystem.Reset"];
    assert!(action.get("ResetType@Redfish.AllowableValues").is_none());
    let (status, info) = get(&sim, action["@Redfish.ActionInfo"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        info["Parameters"][0]["AllowableValues"],
        json!([
            "On",
            "ForceOff",
            "ForceOn",
            "ForceRestart",
            "GracefulRestart",
            "GracefulShutdown",
            "PowerCycle",
            "Nmi"
        ])
    );
    let (_, systems) = get(&sim, "/redfish/v1/Systems").await;
    assert_eq!(
        systems["Members"][0]["@odata.id"],
        "/redfish/v1/Systems/Second"
    );
    let (_, second) = get(&sim, "/redfish/v1/Systems/Second").await;
    assert!(second.get("Actions").is_none(), "{second}");
    let target = action["target"].as_str().unwrap();
    for _ in 0..2 {
        let (status, body) = reset(&sim, target, "ForceOff").await;
        assert_eq!(status, StatusCode::OK);
        let id = body["@Message.ExtendedInfo"][0]["MessageId"]
            .as_str()
            .unwrap();
        assert!(id.ends_with("Success"), "{id}");
    }
    assert_eq!(sim.host("Bluefield").unwrap().power(), Power::Off);
}

#[tokio::test]
async fn xcc_answers_204_even_when_already_there() {
    let sim = start(Vendor::Xcc, Power::On).await;
    let target = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset";
    for _ in 0..2 {
        let (status, _) = reset(&sim, target, "On").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
    }
    let (status, _) = reset(&sim, target, "PushPowerButton").await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "not advertised by this XCC"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_plays_a_vendor_and_names_the_valid_ones() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend-sim"))
        .args(["redfish", "--listen", "127.0.0.1:0", "--vendor", "idrac"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let base = ready
        .strip_prefix("READY ")
        .unwrap_or_else(|| panic!("{ready}"));
    let root: Value = reqwest::get(format!("{base}/redfish/v1"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(root["Product"], "Integrated Dell Remote Access Controller");
    child.kill().await.unwrap();

    let bogus = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend-sim"))
        .args([
            "redfish",
            "--listen",
            "127.0.0.1:0",
            "--vendor",
            "supermicro",
        ])
        .output()
        .await
        .unwrap();
    assert!(!bogus.status.success());
    let err = String::from_utf8_lossy(&bogus.stderr);
    assert!(err.contains("idrac, ilo5, xcc, bluefield"), "{err}");
}
