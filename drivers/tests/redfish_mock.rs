//! The Redfish driver against scripted HTTP answers (wiremock): protocol paths that a
//! well-behaved simulator would never take.

use std::time::Duration;

use baremend_drivers::redfish::RedfishDriver;
use baremend_drivers::{
    BmcAddress, CredentialUsed, Credentials, DriverConfig, Error, PowerDriver, PowerOffMode,
    PowerState, TlsOptions,
};
use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SYSTEM: &str = "/redfish/v1/Systems/1";
const RESET: &str = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset";
const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
/// base64("admin:password")
const BASIC: &str = "Basic YWRtaW46cGFzc3dvcmQ=";

fn root(with_sessions: bool) -> Value {
    let mut root = json!({
        "@odata.id": "/redfish/v1",
        "Id": "RootService",
        "RedfishVersion": "1.15.0",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
    });
    if with_sessions {
        root["SessionService"] = json!({"@odata.id": "/redfish/v1/SessionService"});
        root["Links"] = json!({"Sessions": {"@odata.id": SESSIONS}});
    }
    root
}

fn system(power: &str, allowable: Option<&[&str]>) -> Value {
    let mut reset = json!({"target": RESET});
    if let Some(values) = allowable {
        reset["ResetType@Redfish.AllowableValues"] = json!(values);
    }
    json!({"@odata.id": SYSTEM, "Id": "1", "PowerState": power, "Actions": {"#ComputerSystem.Reset": reset}})
}

async fn bmc(with_sessions: bool) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(root(with_sessions)))
        .mount(&server)
        .await;
    server
}

async fn mount_login(server: &MockServer, token: &str, times: Option<u64>) {
    let mut mock = Mock::given(method("POST"))
        .and(path(SESSIONS))
        .and(body_json(
            json!({"UserName": "admin", "Password": "password"}),
        ))
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("X-Auth-Token", token)
                .insert_header("Location", format!("{SESSIONS}/{token}"))
                .set_body_json(json!({"Id": token})),
        );
    if let Some(times) = times {
        mock = mock.up_to_n_times(times);
    }
    mock.mount(server).await;
}

fn driver_with(server: &MockServer, system_path: &str, request_timeout: Duration) -> RedfishDriver {
    let address =
        BmcAddress::parse(&format!("redfish+http://{}{system_path}", server.address())).unwrap();
    let mut config = DriverConfig::new(
        address,
        Credentials::new("admin", "password"),
        TlsOptions::default(),
    );
    config.request_timeout = request_timeout;
    config.task_timeout = Duration::from_secs(10);
    RedfishDriver::new(config.into_redfish()).unwrap()
}

fn driver(server: &MockServer) -> RedfishDriver {
    driver_with(server, SYSTEM, Duration::from_secs(5))
}

/// Answers GETs of `system_path` with `answer`, and reads that system's power state.
async fn read_answered(
    server: &MockServer,
    system_path: &str,
    answer: ResponseTemplate,
) -> Result<PowerState, Error> {
    Mock::given(method("GET"))
        .and(path(system_path))
        .respond_with(answer)
        .mount(server)
        .await;
    driver_with(server, system_path, Duration::from_secs(5))
        .power_state()
        .await
}

async fn requests_to(server: &MockServer, verb: &str, to: &str) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.method.as_str() == verb && r.url.path() == to)
        .count()
}

#[tokio::test]
async fn an_expired_session_is_renewed_once_and_the_request_repeated() {
    let server = bmc(true).await;
    mount_login(&server, "first", Some(1)).await;
    mount_login(&server, "second", None).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .and(header("X-Auth-Token", "first"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .and(header("X-Auth-Token", "second"))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("On", None)))
        .mount(&server)
        .await;
    assert_eq!(driver(&server).power_state().await.unwrap(), PowerState::On);
    assert_eq!(requests_to(&server, "POST", SESSIONS).await, 2);
}

#[tokio::test]
async fn a_session_that_is_refused_again_after_relogin_is_an_authentication_error_without_a_storm()
{
    let server = bmc(true).await;
    mount_login(&server, "t", None).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    let error = driver(&server).power_state().await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    assert!(!error.is_retryable());
    assert_eq!(requests_to(&server, "POST", SESSIONS).await, 2);
    assert_eq!(requests_to(&server, "GET", SYSTEM).await, 2);
}

#[tokio::test]
async fn refused_login_credentials_fail_fast_and_are_not_tried_with_basic() {
    let server = bmc(true).await;
    Mock::given(method("POST"))
        .and(path(SESSIONS))
        .respond_with(ResponseTemplate::new(401))
        .expect(1)
        .mount(&server)
        .await;
    let error = driver(&server).power_state().await.unwrap_err();
    assert!(matches!(error, Error::Authentication { .. }), "{error}");
    assert!(!error.to_string().contains("password\""), "{error}");
    assert_eq!(requests_to(&server, "GET", SYSTEM).await, 0);
}

#[tokio::test]
async fn basic_auth_is_used_when_the_bmc_has_no_session_service() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .and(header("Authorization", BASIC))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("Off", None)))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems"))
        .and(header("Authorization", BASIC))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"Members": [{"@odata.id": SYSTEM}]})),
        )
        .mount(&server)
        .await;
    let driver = driver(&server);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::Off);
    let probe = driver.probe().await.unwrap();
    assert_eq!(probe.authentication, "basic");
    assert_eq!(probe.systems, [SYSTEM]);
    assert_eq!(requests_to(&server, "POST", SESSIONS).await, 0);
}

/// A BMC whose system, answered without a session service, advertises `allowable`.
async fn basic_bmc_advertising(allowable: Option<&[&str]>) -> MockServer {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("On", allowable)))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"Members": [{"@odata.id": SYSTEM}]})),
        )
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_probe_says_whether_a_forced_off_is_advertised() {
    for (allowable, forced_off) in [
        (Some(&["On", "ForceOff"][..]), true),
        (Some(&["On", "PushPowerButton"][..]), true),
        (None, true),
        (Some(&["On", "GracefulShutdown", "ForceRestart"][..]), false),
    ] {
        let server = basic_bmc_advertising(allowable).await;
        let probe = driver(&server).probe().await.unwrap();
        assert_eq!(probe.forced_off, forced_off, "{allowable:?}");
        assert_eq!(
            requests_to(&server, "POST", RESET).await,
            0,
            "a probe never resets"
        );
    }
}

#[tokio::test]
async fn a_session_service_that_answers_404_falls_back_to_basic() {
    let server = bmc(true).await;
    Mock::given(method("POST"))
        .and(path(SESSIONS))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .and(header("Authorization", BASIC))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("On", None)))
        .mount(&server)
        .await;
    assert_eq!(driver(&server).power_state().await.unwrap(), PowerState::On);
}

#[tokio::test]
async fn an_accepted_reset_is_followed_through_its_task_monitor() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(system("On", Some(&["On", "ForceOff"]))),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(RESET))
        .and(body_json(json!({"ResetType": "ForceOff"})))
        .respond_with(
            ResponseTemplate::new(202)
                .insert_header("Location", "/redfish/v1/TaskMonitors/7")
                .insert_header("Retry-After", "0"),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/TaskMonitors/7"))
        .respond_with(ResponseTemplate::new(202).insert_header("Retry-After", "0"))
        .up_to_n_times(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/TaskMonitors/7"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"TaskState": "Completed"})))
        .mount(&server)
        .await;
    driver(&server)
        .power_off(PowerOffMode::Forced)
        .await
        .unwrap();
    assert_eq!(
        requests_to(&server, "GET", "/redfish/v1/TaskMonitors/7").await,
        3
    );
}

#[tokio::test]
async fn a_task_that_ends_in_exception_fails_the_power_operation() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("Off", None)))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(RESET))
        .respond_with(
            ResponseTemplate::new(202).insert_header("Location", "/redfish/v1/TaskMonitors/8"),
        )
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/TaskMonitors/8"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"TaskState": "Exception", "Messages": [{"Message": "PSU fault"}]}),
        ))
        .mount(&server)
        .await;
    let error = driver(&server).power_on().await.unwrap_err();
    assert!(matches!(error, Error::TaskFailed { .. }), "{error}");
    assert!(error.to_string().contains("PSU fault"), "{error}");
}

#[tokio::test]
async fn a_task_monitor_on_another_host_is_refused() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("Off", None)))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(RESET))
        .respond_with(
            ResponseTemplate::new(202).insert_header("Location", "http://elsewhere.invalid/task"),
        )
        .mount(&server)
        .await;
    let error = driver(&server).power_on().await.unwrap_err();
    assert!(matches!(error, Error::MalformedResponse { .. }), "{error}");
}

#[tokio::test]
async fn only_push_power_button_is_used_when_only_it_is_advertised() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(system("On", Some(&["PushPowerButton"]))),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(RESET))
        .and(body_json(json!({"ResetType": "PushPowerButton"})))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let driver = driver(&server);
    driver.power_off(PowerOffMode::Forced).await.unwrap();
    let error = driver.power_off(PowerOffMode::Graceful).await.unwrap_err();
    assert!(matches!(error, Error::Unsupported { .. }), "{error}");
    assert!(error.to_string().contains("PushPowerButton"), "{error}");
}

#[tokio::test]
async fn reset_types_come_from_action_info_and_unadvertised_ones_are_never_sent() {
    let server = bmc(false).await;
    let mut body = system("On", None);
    body["Actions"]["#ComputerSystem.Reset"]["@Redfish.ActionInfo"] =
        json!("/redfish/v1/Systems/1/ResetActionInfo");
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems/1/ResetActionInfo"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "Parameters": [{"Name": "ResetType", "AllowableValues": ["On", "GracefulShutdown"]}]
        })))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(RESET))
        .and(body_json(json!({"ResetType": "GracefulShutdown"})))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&server)
        .await;
    let driver = driver(&server);
    let error = driver.power_off(PowerOffMode::Forced).await.unwrap_err();
    assert!(matches!(error, Error::Unsupported { .. }), "{error}");
    driver.power_off(PowerOffMode::Graceful).await.unwrap();
}

#[tokio::test]
async fn malformed_json_is_a_typed_permanent_error() {
    let server = bmc(false).await;
    let cases = [
        (
            "a body cut short",
            SYSTEM,
            ResponseTemplate::new(200).set_body_raw("{\"PowerState\": \"On\",", "application/json"),
        ),
        (
            "a PowerState that is a number",
            "/redfish/v1/Systems/2",
            ResponseTemplate::new(200).set_body_json(json!({"PowerState": 1})),
        ),
    ];
    for (case, system_path, answer) in cases {
        let error = read_answered(&server, system_path, answer)
            .await
            .unwrap_err();
        assert!(
            matches!(error, Error::MalformedResponse { .. }) && !error.is_retryable(),
            "{case}: {error}"
        );
    }
}

#[tokio::test]
async fn a_slow_bmc_gives_a_retryable_timeout() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(system("On", None))
                .set_delay(Duration::from_secs(3)),
        )
        .mount(&server)
        .await;
    let started = std::time::Instant::now();
    let error = driver_with(&server, SYSTEM, Duration::from_millis(300))
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Timeout { .. }), "{error}");
    assert!(error.is_retryable());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn unknown_and_missing_power_states_are_kept_as_unknown() {
    let server = bmc(false).await;
    let cases = [
        ("an unknown state", SYSTEM, system("Paused", None), "Paused"),
        (
            "no PowerState (only one under Oem)",
            "/redfish/v1/Systems/2",
            json!({"Id": "2", "Oem": {"Vendor": {"PowerState": "weird"}}}),
            "",
        ),
    ];
    for (case, system_path, body, kept) in cases {
        let answer = ResponseTemplate::new(200).set_body_json(body);
        assert_eq!(
            read_answered(&server, system_path, answer).await.unwrap(),
            PowerState::Unknown(kept.into()),
            "{case}"
        );
    }
}

#[tokio::test]
async fn the_only_system_is_found_and_several_without_a_path_are_an_error_listing_them() {
    let server = bmc(false).await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "Members": [{"@odata.id": "/redfish/v1/Systems/a"}, {"@odata.id": "/redfish/v1/Systems/b"}]
        })))
        .mount(&server)
        .await;
    // Both can be reset: the driver cannot choose.
    for member in ["/redfish/v1/Systems/a", "/redfish/v1/Systems/b"] {
        Mock::given(method("GET"))
            .and(path(member))
            .respond_with(ResponseTemplate::new(200).set_body_json(system("On", None)))
            .mount(&server)
            .await;
    }
    let error = driver_with(&server, "", Duration::from_secs(5))
        .power_state()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::AmbiguousSystem { .. }), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("/redfish/v1/Systems/a") && text.contains("/redfish/v1/Systems/b"),
        "{text}"
    );

    // Of two systems only one has a Reset action: that one is the host.
    let one_resettable = bmc(false).await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "Members": [{"@odata.id": "/redfish/v1/Systems/board"}, {"@odata.id": SYSTEM}]
        })))
        .mount(&one_resettable)
        .await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems/board"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"Id": "board", "PowerState": "On"})),
        )
        .mount(&one_resettable)
        .await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("Off", None)))
        .mount(&one_resettable)
        .await;
    assert_eq!(
        driver_with(&one_resettable, "", Duration::from_secs(5))
            .power_state()
            .await
            .unwrap(),
        PowerState::Off
    );

    let single = bmc(false).await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/Systems"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"Members": [{"@odata.id": SYSTEM}]})),
        )
        .mount(&single)
        .await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("On", None)))
        .mount(&single)
        .await;
    assert_eq!(
        driver_with(&single, "", Duration::from_secs(5))
            .power_state()
            .await
            .unwrap(),
        PowerState::On
    );
}

#[tokio::test]
async fn status_codes_map_to_retryable_and_permanent_errors() {
    let server = bmc(false).await;
    // (system, the status it answers, the error that is, whether that is retryable)
    type Case = (&'static str, u16, fn(&Error) -> bool, bool);
    let cases: [Case; 4] = [
        (
            "/redfish/v1/Systems/busy",
            503,
            |e| matches!(e, Error::Busy { .. }),
            true,
        ),
        (
            "/redfish/v1/Systems/broken",
            500,
            |e| matches!(e, Error::Http { status: 500, .. }),
            true,
        ),
        (
            "/redfish/v1/Systems/gone",
            404,
            |e| matches!(e, Error::SystemNotFound { .. }),
            false,
        ),
        (
            "/redfish/v1/Systems/denied",
            403,
            |e| matches!(e, Error::Authentication { .. }),
            false,
        ),
    ];
    for (system_path, status, expected, retryable) in cases {
        let error = read_answered(&server, system_path, ResponseTemplate::new(status))
            .await
            .unwrap_err();
        assert!(
            expected(&error) && error.is_retryable() == retryable,
            "{system_path} ({status}): {error}"
        );
    }
}

#[tokio::test]
async fn close_deletes_the_session_and_the_next_call_logs_in_again() {
    let server = bmc(true).await;
    mount_login(&server, "tok", None).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .and(header("X-Auth-Token", "tok"))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("On", None)))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{SESSIONS}/tok")))
        .and(header("X-Auth-Token", "tok"))
        .respond_with(ResponseTemplate::new(204))
        .expect(2)
        .mount(&server)
        .await;
    let driver = driver(&server);
    driver.power_state().await.unwrap();
    driver.close().await.unwrap();
    driver.close().await.unwrap();
    driver.power_state().await.unwrap();
    driver.close().await.unwrap();
    assert_eq!(requests_to(&server, "POST", SESSIONS).await, 2);
}

#[tokio::test]
async fn debug_output_of_a_driver_shows_neither_password_nor_token() {
    let server = bmc(true).await;
    mount_login(&server, "very-secret-token", None).await;
    Mock::given(method("GET"))
        .and(path(SYSTEM))
        .respond_with(ResponseTemplate::new(200).set_body_json(system("On", None)))
        .mount(&server)
        .await;
    let driver = driver(&server);
    driver.power_state().await.unwrap();
    let shown = format!("{driver:?}");
    assert!(
        !shown.contains("very-secret-token") && !shown.contains("password"),
        "{shown}"
    );
}

fn rotating_driver(server: &MockServer) -> RedfishDriver {
    let address =
        BmcAddress::parse(&format!("redfish+http://{}{SYSTEM}", server.address())).unwrap();
    let credentials = Credentials::new("admin", "new-password").with_previous("password");
    RedfishDriver::new(
        DriverConfig::new(address, credentials, TlsOptions::default()).into_redfish(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_protected_root_gets_the_previous_password_once_when_the_current_one_is_refused() {
    let server = MockServer::start().await;
    for (path_of, body) in [("/redfish/v1/", root(false)), (SYSTEM, system("On", None))] {
        Mock::given(method("GET"))
            .and(path(path_of))
            .and(header("Authorization", BASIC))
            .respond_with(ResponseTemplate::new(200).set_body_json(body))
            .mount(&server)
            .await;
    }
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401))
        .mount(&server)
        .await;
    let driver = rotating_driver(&server);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
    assert_eq!(driver.credential_used(), Some(CredentialUsed::Previous));
    // Without credentials, with the new password, with the previous one; then the system with
    // the one that worked.
    assert_eq!(requests_to(&server, "GET", "/redfish/v1/").await, 3);
    assert_eq!(requests_to(&server, "GET", SYSTEM).await, 1);
}

#[tokio::test]
async fn only_a_401_on_login_brings_the_previous_password_never_a_403_or_a_busy_answer() {
    for (status, busy) in [(403, false), (503, true), (401, false)] {
        let server = bmc(true).await;
        Mock::given(method("POST"))
            .and(path(SESSIONS))
            .respond_with(ResponseTemplate::new(status))
            .mount(&server)
            .await;
        let error = rotating_driver(&server).power_state().await.unwrap_err();
        assert_eq!(
            matches!(error, Error::Busy { .. }),
            busy,
            "{status}: {error}"
        );
        let logins = requests_to(&server, "POST", SESSIONS).await;
        let expected = if status == 401 { 2 } else { 1 };
        assert_eq!(logins, expected, "HTTP {status}: {error}");
    }
}
