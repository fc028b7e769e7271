//! The simulated Redfish service's protocol behaviour, request by request (no socket, except
//! where connection handling itself is the subject).

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use baremend_sim::clock::SystemClock;
use baremend_sim::host::{Faults, Power, SimHost};
use baremend_sim::redfish::{Account, RedfishService, RedfishSim, RedfishSimConfig, Role, app};
use common::{BASIC, call, eventually, get, service};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn the_service_root_needs_no_auth_and_links_sessions() {
    let (_, app) = service();
    let version = call(&app, "GET", "/redfish", &[], None).await;
    assert_eq!(version.json(), json!({"v1": "/redfish/v1/"}));
    for uri in ["/redfish/v1", "/redfish/v1/"] {
        let root = call(&app, "GET", uri, &[], None).await;
        assert_eq!(root.status, StatusCode::OK);
        assert_eq!(
            root.json()["Links"]["Sessions"]["@odata.id"],
            "/redfish/v1/SessionService/Sessions"
        );
        assert_eq!(root.header("odata-version"), "4.0");
        assert_eq!(root.header("cache-control"), "no-cache");
        assert!(
            root.header("link").contains("ServiceRoot.v1_15_0.json"),
            "{}",
            root.header("link")
        );
        assert_eq!(
            root.header("content-type"),
            "application/json;charset=utf-8"
        );
    }
    let metadata = call(&app, "GET", "/redfish/v1/$metadata", &[], None).await;
    assert_eq!(metadata.header("content-type"), "application/xml");
    assert!(
        String::from_utf8_lossy(&metadata.body).contains("Namespace=\"ComputerSystem.v1_20_0\"")
    );
    let odata = call(&app, "GET", "/redfish/v1/odata", &[], None).await;
    assert_eq!(odata.json()["value"][0]["url"], "/redfish/v1/");
}

#[tokio::test]
async fn resources_without_credentials_get_401_with_a_challenge_and_an_error_body() {
    let (service, app) = service();
    let answer = call(&app, "GET", "/redfish/v1/Systems", &[], None).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(
        answer
            .header("www-authenticate")
            .starts_with("Basic realm=")
    );
    assert_eq!(answer.message_id(), "Base.1.18.ResourceAtUriUnauthorized");
    let wrong = call(
        &app,
        "GET",
        "/redfish/v1/Systems",
        &[("authorization", "Basic YWRtaW46bm9wZQ==")],
        None,
    )
    .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(service.stats().authentication_failures, 1);
}

#[tokio::test]
async fn wrong_methods_get_405_with_allow_and_unknown_paths_404_with_an_error_body() {
    let (_, app) = service();
    for method in ["DELETE", "PATCH", "POST", "FAKEMETHODFORTEST"] {
        let answer = call(
            &app,
            method,
            "/redfish/v1/",
            &[("authorization", BASIC)],
            Some(json!({"x": 1})),
        )
        .await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert!(answer.header("allow").contains("GET"), "{method}");
        assert_eq!(answer.message_id(), "Base.1.18.OperationNotAllowed");
        assert_eq!(answer.header("odata-version"), "4.0");
    }
    let missing = get(&app, "/redfish/v1/Nowhere").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.message_id(), "Base.1.18.ResourceNotFound");
    assert_eq!(
        get(&app, "/redfish/v1/Systems/2").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_wrong_odata_version_gets_412_and_dollar_queries_501() {
    let (_, app) = service();
    let answer = call(
        &app,
        "GET",
        "/redfish/v1/",
        &[("odata-version", "4.1")],
        None,
    )
    .await;
    assert_eq!(answer.status, StatusCode::PRECONDITION_FAILED);
    let query = call(&app, "GET", "/redfish/v1/?$expand=.", &[], None).await;
    assert_eq!(query.status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(query.message_id(), "Base.1.18.QueryNotSupported");
    assert_eq!(
        call(&app, "GET", "/redfish/v1/?plain=1", &[], None)
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn head_answers_like_get_without_a_body() {
    let (_, app) = service();
    let head = call(&app, "HEAD", "/redfish/v1/", &[], None).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(head.header("odata-version"), "4.0");
}

#[tokio::test]
async fn sessions_are_created_without_auth_read_without_their_token_and_deleted() {
    let (service, app) = service();
    let uri = "/redfish/v1/SessionService/Sessions";
    let bad = call(
        &app,
        "POST",
        uri,
        &[],
        Some(json!({"UserName": "admin", "Password": "nope"})),
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    let missing = call(&app, "POST", uri, &[], Some(json!({"UserName": "admin"}))).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.message_id(), "Base.1.18.PropertyMissing");
    let garbage = call(
        &app,
        "POST",
        "/redfish/v1/SessionService/Sessions/Members",
        &[],
        None,
    )
    .await;
    assert_eq!(garbage.message_id(), "Base.1.18.MalformedJSON");

    let created = call(
        &app,
        "POST",
        uri,
        &[],
        Some(json!({"UserName": "admin", "Password": "password"})),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let token = created.header("x-auth-token").to_owned();
    let location = created.header("location").to_owned();
    assert_eq!(token.len(), 48);
    assert_eq!(created.json()["@odata.id"], location.as_str());
    let auth = [("x-auth-token", token.as_str())];
    let session = call(&app, "GET", &location, &auth, None).await;
    assert_eq!(session.json()["UserName"], "admin");
    assert!(!String::from_utf8_lossy(&session.body).contains(&token));
    assert_eq!(
        call(&app, "GET", uri, &auth, None).await.json()["Members@odata.count"],
        1
    );
    assert_eq!(
        call(&app, "DELETE", &location, &auth, None).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&app, "GET", "/redfish/v1/Systems", &auth, None)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(service.stats().sessions_deleted, 1);
}

#[tokio::test]
async fn the_session_limit_is_enforced_so_leaking_clients_are_noticed() {
    let (service, app) = service();
    let login = json!({"UserName": "admin", "Password": "password"});
    for _ in 0..64 {
        let answer = call(
            &app,
            "POST",
            "/redfish/v1/SessionService/Sessions",
            &[],
            Some(login.clone()),
        )
        .await;
        assert_eq!(answer.status, StatusCode::CREATED);
    }
    let refused = call(
        &app,
        "POST",
        "/redfish/v1/SessionService/Sessions",
        &[],
        Some(login),
    )
    .await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.message_id(), "Base.1.18.SessionLimitExceeded");
    // Every login tried is counted, the refused ones too (a wrong password included).
    let wrong = json!({"UserName": "admin", "Password": "nope"});
    let uri = "/redfish/v1/SessionService/Sessions";
    let answer = call(&app, "POST", uri, &[], Some(wrong)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let stats = service.stats();
    assert_eq!(stats.logins, 66, "{stats:?}");
    assert_eq!(stats.sessions_created, 64, "{stats:?}");
    assert_eq!(stats.authentication_failures, 1, "{stats:?}");
}

#[tokio::test]
async fn reset_validates_its_parameter_against_the_advertised_values() {
    let (service, app) = service();
    let uri = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset";
    let headers = [("authorization", BASIC)];
    let missing = call(&app, "POST", uri, &headers, Some(json!({}))).await;
    assert_eq!(missing.message_id(), "Base.1.18.ActionParameterMissing");
    let bogus = call(
        &app,
        "POST",
        uri,
        &headers,
        Some(json!({"ResetType": "Bogus"})),
    )
    .await;
    assert_eq!(bogus.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        bogus.message_id(),
        "Base.1.18.ActionParameterValueNotInList"
    );
    assert_eq!(
        bogus.json()["error"]["@Message.ExtendedInfo"][0]["MessageArgs"],
        json!(["Bogus", "ResetType", "ComputerSystem.Reset"])
    );
    service.host("1").unwrap().set_faults(Faults {
        push_button_only: true,
        ..Faults::default()
    });
    let info = get(&app, "/redfish/v1/Systems/1/ResetActionInfo").await;
    assert_eq!(
        info.json()["Parameters"][0]["AllowableValues"],
        json!(["PushPowerButton"])
    );
    let unadvertised = call(
        &app,
        "POST",
        uri,
        &headers,
        Some(json!({"ResetType": "ForceOff"})),
    )
    .await;
    assert_eq!(unadvertised.status, StatusCode::BAD_REQUEST);
    assert_eq!(service.host("1").unwrap().power(), Power::On);
    let pushed = call(
        &app,
        "POST",
        uri,
        &headers,
        Some(json!({"ResetType": "PushPowerButton"})),
    )
    .await;
    assert_eq!(pushed.status, StatusCode::NO_CONTENT);
    assert_eq!(service.host("1").unwrap().power(), Power::Off);
}

#[tokio::test]
async fn read_only_accounts_may_read_but_not_reset() {
    let (service, app) = service();
    service.add_account(Account {
        username: "ro".into(),
        password: "ro".into(),
        role: Role::ReadOnly,
    });
    let headers = [("authorization", "Basic cm86cm8=")];
    assert_eq!(
        call(&app, "GET", "/redfish/v1/Systems/1", &headers, None)
            .await
            .status,
        StatusCode::OK
    );
    let reset = call(
        &app,
        "POST",
        "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
        &headers,
        Some(json!({"ResetType": "ForceOff"})),
    )
    .await;
    assert_eq!(reset.status, StatusCode::FORBIDDEN);
    assert_eq!(reset.message_id(), "Base.1.18.InsufficientPrivilege");
    let roles = get(&app, "/redfish/v1/AccountService/Roles").await;
    assert_eq!(roles.json()["Members@odata.count"], 3);
}

#[tokio::test]
async fn etags_guard_patches_and_answer_conditional_gets() {
    let (_, app) = service();
    let system = get(&app, "/redfish/v1/Systems/1").await;
    let etag = system.header("etag").to_owned();
    assert_eq!(system.json()["@odata.etag"], etag.as_str());
    let unchanged = call(
        &app,
        "GET",
        "/redfish/v1/Systems/1",
        &[("authorization", BASIC), ("if-none-match", &etag)],
        None,
    )
    .await;
    assert_eq!(unchanged.status, StatusCode::NOT_MODIFIED);
    let patch =
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    let stale = call(
        &app,
        "PATCH",
        "/redfish/v1/Systems/1",
        &[("authorization", BASIC), ("if-match", "W/\"0\"")],
        Some(patch.clone()),
    )
    .await;
    assert_eq!(stale.status, StatusCode::PRECONDITION_FAILED);
    let applied = call(
        &app,
        "PATCH",
        "/redfish/v1/Systems/1",
        &[("authorization", BASIC), ("if-match", &etag)],
        Some(patch),
    )
    .await;
    assert_eq!(applied.status, StatusCode::OK);
    assert_eq!(applied.json()["Boot"]["BootSourceOverrideTarget"], "Pxe");
    assert_ne!(applied.header("etag"), etag);
    let unknown = call(
        &app,
        "PATCH",
        "/redfish/v1/Systems/1",
        &[("authorization", BASIC)],
        Some(json!({"AssetTag": "x"})),
    )
    .await;
    assert_eq!(unknown.message_id(), "Base.1.18.PropertyUnknown");
    let bad_value = call(
        &app,
        "PATCH",
        "/redfish/v1/Systems/1",
        &[("authorization", BASIC)],
        Some(json!({"Boot": {"BootSourceOverrideTarget": "Floppy"}})),
    )
    .await;
    assert_eq!(bad_value.message_id(), "Base.1.18.PropertyValueNotInList");
}

#[tokio::test]
async fn injected_errors_touch_only_their_system_and_carry_retry_after() {
    let (service, app) = service();
    service.host("1").unwrap().set_faults(Faults {
        error_status: Some(503),
        error_count: Some(1),
        ..Faults::default()
    });
    assert_eq!(
        get(&app, "/redfish/v1/Systems").await.status,
        StatusCode::OK
    );
    let failed = get(&app, "/redfish/v1/Systems/1").await;
    assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(failed.header("retry-after"), "1");
    assert_eq!(
        get(&app, "/redfish/v1/Systems/1").await.status,
        StatusCode::OK
    );
    // The Retry-After of a 429 or 503 can be chosen; other statuses have none.
    for (status, retry_after) in [(429, "30"), (503, "30"), (500, "")] {
        service.host("1").unwrap().set_faults(Faults {
            error_status: Some(status),
            error_count: Some(1),
            retry_after_s: Some(30),
            ..Faults::default()
        });
        let failed = get(&app, "/redfish/v1/Systems/1").await;
        assert_eq!(failed.status.as_u16(), status);
        assert_eq!(failed.header("retry-after"), retry_after, "{status}");
    }
}

#[tokio::test]
async fn accepted_resets_expose_a_task_monitor() {
    let clock = Arc::new(SystemClock::new());
    let host = Arc::new(SimHost::new(
        "1",
        Power::On,
        Duration::from_millis(300),
        clock.clone(),
    ));
    host.set_faults(Faults {
        async_reset: true,
        ..Faults::default()
    });
    let admin = Account {
        username: "admin".into(),
        password: "password".into(),
        role: Role::Administrator,
    };
    let app = app(Arc::new(RedfishService::new(vec![host], admin, clock)));
    let accepted = call(
        &app,
        "POST",
        "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
        &[("authorization", BASIC)],
        Some(json!({"ResetType": "ForceOff"})),
    )
    .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    let monitor = accepted.header("location").to_owned();
    assert_eq!(get(&app, &monitor).await.status, StatusCode::ACCEPTED);
    assert_eq!(
        get(&app, "/redfish/v1/TaskService/Tasks/1").await.json()["TaskState"],
        "Running"
    );
    eventually("the task done", Duration::from_secs(5), async || {
        get(&app, &monitor).await.status == StatusCode::NO_CONTENT
    })
    .await;
    assert_eq!(
        get(&app, "/redfish/v1/TaskService/Tasks/1").await.json()["TaskState"],
        "Completed"
    );
}

/// Reads HTTP/1.1 responses off a socket until `count` complete ones arrived.
async fn read_responses(stream: &mut tokio::net::TcpStream, count: usize) -> String {
    let mut text = String::new();
    let mut buffer = [0u8; 4096];
    while text.matches("HTTP/1.1 ").count() < count || !text.ends_with('}') {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        if read == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
    text
}

#[tokio::test]
async fn an_error_answer_consumes_the_request_body_so_keep_alive_framing_holds() {
    let sim = RedfishSim::start(RedfishSimConfig::default())
        .await
        .unwrap();
    let mut stream = tokio::net::TcpStream::connect(sim.local_addr())
        .await
        .unwrap();
    let body = "{\"x\":\"".to_owned() + &"y".repeat(3000) + "\"}";
    let requests = format!(
        "POST /redfish/v1/Nowhere HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}\
         DELETE /redfish/v1/ HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}\
         GET /redfish/v1/ HTTP/1.1\r\nHost: x\r\n\r\n",
        body.len(),
        body.len()
    );
    stream.write_all(requests.as_bytes()).await.unwrap();
    let text = read_responses(&mut stream, 3).await;
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["404", "405", "200"], "{text}");
}

#[tokio::test]
async fn connection_close_is_honoured_and_echoed() {
    let sim = RedfishSim::start(RedfishSimConfig::default())
        .await
        .unwrap();
    let mut stream = tokio::net::TcpStream::connect(sim.local_addr())
        .await
        .unwrap();
    stream
        .write_all(b"GET /redfish/v1/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
}
