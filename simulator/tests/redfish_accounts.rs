//! The account service of the simulated Redfish BMC: ETags on ManagerAccount, conditional
//! requests, and accounts created, changed and deleted through the AccountService, as the DMTF
//! protocol validator and real BMCs expect.

mod common;

use axum::Router;
use axum::http::StatusCode;
use baremend_sim::redfish::{Account, Role};
use base64::Engine;
use common::{Answer, BASIC, call, get, service};
use serde_json::{Value, json};

const ACCOUNTS: &str = "/redfish/v1/AccountService/Accounts";
const ADMIN: &str = "/redfish/v1/AccountService/Accounts/1";

fn basic(username: &str, password: &str) -> String {
    let pair = format!("{username}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

fn with_if_match(etag: &str) -> [(&str, &str); 2] {
    [("authorization", BASIC), ("if-match", etag)]
}

async fn create(app: &axum::Router, body: Value) -> Answer {
    call(
        app,
        "POST",
        ACCOUNTS,
        &[("authorization", BASIC)],
        Some(body),
    )
    .await
}

/// Creates `operator1` (Operator) and returns its URI.
async fn create_operator(app: &axum::Router) -> String {
    let created = create(
        app,
        json!({"UserName": "operator1", "Password": "Operator-pw1", "RoleId": "Operator"}),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.json());
    created.header("location").to_owned()
}

/// Every error is a Redfish error body from the Base registry, in JSON.
fn assert_redfish_error(answer: &Answer, status: StatusCode, message_id: &str) {
    assert_eq!(answer.status, status, "{}", answer.json());
    assert_eq!(answer.message_id(), format!("Base.1.18.{message_id}"));
    assert_eq!(answer.json()["error"]["code"], answer.message_id().as_str());
    assert_eq!(
        answer.header("content-type"),
        "application/json;charset=utf-8"
    );
}

#[tokio::test]
async fn account_gets_carry_the_same_etag_in_the_header_and_the_body_and_answer_if_none_match() {
    let (_, app) = service();
    let account = get(&app, ADMIN).await;
    assert_eq!(account.status, StatusCode::OK);
    let etag = account.header("etag").to_owned();
    assert!(
        etag.starts_with("W/\"") && etag.ends_with('"'),
        "an RFC 7232 entity tag: {etag}"
    );
    assert_eq!(account.json()["@odata.etag"], etag.as_str());
    assert_eq!(account.json()["Password"], Value::Null);
    assert_eq!(account.header("allow"), "GET, HEAD, PATCH");
    let head = call(&app, "HEAD", ADMIN, &[("authorization", BASIC)], None).await;
    assert_eq!(head.header("etag"), etag);
    assert!(head.body.is_empty());

    for matching in [etag.as_str(), etag.trim_start_matches("W/"), "*"] {
        let unchanged = call(
            &app,
            "GET",
            ADMIN,
            &[("authorization", BASIC), ("if-none-match", matching)],
            None,
        )
        .await;
        assert_eq!(unchanged.status, StatusCode::NOT_MODIFIED, "{matching}");
        assert_eq!(unchanged.header("etag"), etag);
        assert!(unchanged.body.is_empty());
    }
    let other = call(
        &app,
        "GET",
        ADMIN,
        &[("authorization", BASIC), ("if-none-match", "W/\"other\"")],
        None,
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);
    // Reading does not change the tag.
    assert_eq!(get(&app, ADMIN).await.header("etag"), etag);
}

#[tokio::test]
async fn post_to_accounts_creates_with_201_and_location_and_delete_removes() {
    let (service, app) = service();
    let created = create(
        &app,
        json!({"UserName": "ops", "Password": "Ops-password1", "RoleId": "Operator"}),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json());
    let location = created.header("location").to_owned();
    assert_eq!(location, format!("{ACCOUNTS}/2"));
    let body = created.json();
    assert_eq!(body["@odata.id"], location.as_str());
    assert_eq!(body["UserName"], "ops");
    assert_eq!(body["RoleId"], "Operator");
    assert_eq!(body["Enabled"], true);
    assert_eq!(body["Password"], Value::Null, "a password is never shown");
    assert_eq!(body["@odata.etag"], created.header("etag"));
    assert!(!String::from_utf8_lossy(&created.body).contains("Ops-password1"));

    let collection = get(&app, ACCOUNTS).await;
    assert_eq!(collection.json()["Members@odata.count"], 2);
    assert_eq!(collection.header("allow"), "GET, HEAD, POST");
    let read = get(&app, &location).await;
    assert_eq!(read.header("allow"), "GET, HEAD, PATCH, DELETE");
    assert_eq!(read.header("etag"), created.header("etag"));

    // The new account works, for Basic and for a session.
    let ops = basic("ops", "Ops-password1");
    let systems = call(
        &app,
        "GET",
        "/redfish/v1/Systems",
        &[("authorization", &ops)],
        None,
    )
    .await;
    assert_eq!(systems.status, StatusCode::OK);
    let login = call(
        &app,
        "POST",
        "/redfish/v1/SessionService/Sessions",
        &[],
        Some(json!({"UserName": "ops", "Password": "Ops-password1"})),
    )
    .await;
    assert_eq!(login.status, StatusCode::CREATED);
    let token = login.header("x-auth-token").to_owned();

    let deleted = call(&app, "DELETE", &location, &[("authorization", BASIC)], None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    assert_redfish_error(
        &get(&app, &location).await,
        StatusCode::NOT_FOUND,
        "ResourceNotFound",
    );
    assert_eq!(get(&app, ACCOUNTS).await.json()["Members@odata.count"], 1);
    assert_eq!(service.accounts().len(), 1);
    // Its credentials and its session are gone with it.
    for headers in [
        [("authorization", ops.as_str())],
        [("x-auth-token", token.as_str())],
    ] {
        let refused = call(&app, "GET", "/redfish/v1/Systems", &headers, None).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    }
    let again = call(&app, "DELETE", &location, &[("authorization", BASIC)], None).await;
    assert_redfish_error(&again, StatusCode::NOT_FOUND, "ResourceNotFound");

    // Ids are not reused, and neither are ETags.
    let next = create(
        &app,
        json!({"UserName": "ops", "Password": "Ops-password1", "RoleId": "Operator"}),
    )
    .await;
    assert_eq!(next.header("location"), format!("{ACCOUNTS}/3"));
    assert_ne!(next.header("etag"), created.header("etag"));
}

#[tokio::test]
async fn the_etag_changes_with_every_write_and_if_match_guards_patch_and_delete() {
    let (_, app) = service();
    let uri = create_operator(&app).await;
    let first = get(&app, &uri).await.header("etag").to_owned();

    // A tag the service never issued: 412, and nothing is applied.
    let never = call(
        &app,
        "PATCH",
        &uri,
        &with_if_match("\"never-issued\""),
        Some(json!({"RoleId": "ReadOnly"})),
    )
    .await;
    assert_redfish_error(
        &never,
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
    );
    let unchanged = get(&app, &uri).await;
    assert_eq!(unchanged.json()["RoleId"], "Operator");
    assert_eq!(unchanged.header("etag"), first);

    // The current tag (weak, as read): applied, and the answer is the new representation.
    let applied = call(
        &app,
        "PATCH",
        &uri,
        &with_if_match(&first),
        Some(json!({"RoleId": "ReadOnly"})),
    )
    .await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.json());
    assert_eq!(applied.json()["RoleId"], "ReadOnly");
    let second = applied.header("etag").to_owned();
    assert_ne!(second, first, "a write changes the ETag");
    assert_eq!(applied.json()["@odata.etag"], second.as_str());
    assert_eq!(get(&app, &uri).await.header("etag"), second);

    // The tag read before that write is stale now: a lost update is refused.
    let lost = call(
        &app,
        "PATCH",
        &uri,
        &with_if_match(&first),
        Some(json!({"RoleId": "Operator"})),
    )
    .await;
    assert_redfish_error(&lost, StatusCode::PRECONDITION_FAILED, "PreconditionFailed");
    assert_eq!(get(&app, &uri).await.json()["RoleId"], "ReadOnly");

    // The strong form of the same tag and `*` match too; no If-Match at all is accepted.
    let strong = second.trim_start_matches("W/").to_owned();
    for tag in [strong.as_str(), "*"] {
        let answer = call(
            &app,
            "PATCH",
            &uri,
            &with_if_match(tag),
            Some(json!({"Enabled": true})),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{tag}");
        let again = get(&app, &uri).await.header("etag").to_owned();
        assert!(tag == "*" || again != second);
    }
    let unconditional = call(
        &app,
        "PATCH",
        &uri,
        &[("authorization", BASIC)],
        Some(json!({"RoleId": "Operator"})),
    )
    .await;
    assert_eq!(unconditional.status, StatusCode::OK);

    // DELETE honours If-Match as well.
    let stale_delete = call(&app, "DELETE", &uri, &with_if_match(&first), None).await;
    assert_redfish_error(
        &stale_delete,
        StatusCode::PRECONDITION_FAILED,
        "PreconditionFailed",
    );
    assert_eq!(get(&app, &uri).await.status, StatusCode::OK);
    let current = get(&app, &uri).await.header("etag").to_owned();
    let deleted = call(&app, "DELETE", &uri, &with_if_match(&current), None).await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_simultaneous_writers_holding_the_same_etag_exactly_one_wins() {
    let (_, app) = service();
    let uri = create_operator(&app).await;
    for round in 0..10 {
        let etag = get(&app, &uri).await.header("etag").to_owned();
        let role = if round % 2 == 0 {
            "ReadOnly"
        } else {
            "Operator"
        };
        let writers: Vec<_> = (0..8)
            .map(|_| {
                let (app, uri, etag) = (app.clone(), uri.clone(), etag.clone());
                tokio::spawn(async move {
                    call(
                        &app,
                        "PATCH",
                        &uri,
                        &with_if_match(&etag),
                        Some(json!({ "RoleId": role })),
                    )
                    .await
                    .status
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for writer in writers {
            statuses.push(writer.await.unwrap());
        }
        let winners = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        let refused = statuses
            .iter()
            .filter(|s| **s == StatusCode::PRECONDITION_FAILED)
            .count();
        assert_eq!((winners, refused), (1, 7), "round {round}: {statuses:?}");
        assert_eq!(get(&app, &uri).await.json()["RoleId"], role);
    }
}

#[tokio::test]
async fn bad_account_requests_get_redfish_errors_and_change_nothing() {
    let (service, app) = service();
    let uri = create_operator(&app).await;
    let before = get(&app, &uri).await.body;
    let good = json!({"UserName": "new1", "Password": "Secret-pw-42", "RoleId": "ReadOnly"});
    let with = |key: &str, value: Value| {
        let mut body = good.clone();
        body[key] = value;
        body
    };
    let without = |key: &str| {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(key);
        body
    };
    let long = "x".repeat(65);
    // (body, status, message id) of a POST to the collection; no body: a body that is not JSON.
    #[rustfmt::skip]
    let posts: Vec<(Option<Value>, u16, &str)> = vec![
        (None, 400, "MalformedJSON"),
        (Some(json!([1, 2])), 400, "MalformedJSON"),
        (Some(json!("text")), 400, "MalformedJSON"),
        (Some(without("UserName")), 400, "PropertyMissing"),
        (Some(without("Password")), 400, "PropertyMissing"),
        (Some(without("RoleId")), 400, "PropertyMissing"),
        (Some(with("UserName", json!(5))), 400, "PropertyValueTypeError"),
        (Some(with("UserName", json!(""))), 400, "PropertyValueFormatError"),
        (Some(with("UserName", json!("a:b"))), 400, "PropertyValueFormatError"),
        (Some(with("UserName", json!("a\nb"))), 400, "PropertyValueFormatError"),
        (Some(with("UserName", json!(long))), 400, "PropertyValueFormatError"),
        (Some(with("UserName", json!("admin"))), 409, "ResourceAlreadyExists"),
        (Some(with("Password", json!("short"))), 400, "PropertyValueFormatError"),
        (Some(with("Password", json!(12345678))), 400, "PropertyValueTypeError"),
        (Some(with("RoleId", json!("Root"))), 400, "PropertyValueNotInList"),
        (Some(with("RoleId", json!(null))), 400, "PropertyValueTypeError"),
        (Some(with("Enabled", json!("yes"))), 400, "PropertyValueTypeError"),
        (Some(with("Locked", json!(true))), 400, "PropertyNotWritable"),
        (Some(with("BogusProp", json!("x"))), 400, "PropertyUnknown"),
    ];
    let mixed = json!({"Password": "Another-pw-1", "BogusProp": "foo"});
    #[rustfmt::skip]
    let others: Vec<(&str, &str, Option<Value>, u16, &str)> = vec![
        ("PATCH", &uri, None, 400, "MalformedJSON"),
        ("PATCH", &uri, Some(json!({})), 400, "NoOperation"),
        ("PATCH", &uri, Some(json!({"@odata.id": ACCOUNTS})), 400, "NoOperation"),
        ("PATCH", &uri, Some(json!({"BogusProp": "foo"})), 400, "PropertyUnknown"),
        ("PATCH", &uri, Some(mixed), 400, "PropertyUnknown"),
        ("PATCH", &uri, Some(json!({"Id": "7"})), 400, "PropertyNotWritable"),
        ("PATCH", &uri, Some(json!({"UserName": "admin"})), 409, "ResourceAlreadyExists"),
        ("PATCH", &uri, Some(json!({"RoleId": 3})), 400, "PropertyValueTypeError"),
        ("PATCH", ADMIN, Some(json!({"RoleId": "ReadOnly"})), 400, "PropertyNotWritable"),
        ("PATCH", ADMIN, Some(json!({"Enabled": false})), 400, "PropertyNotWritable"),
        ("DELETE", ADMIN, None, 405, "ResourceCannotBeDeleted"),
        ("PUT", &uri, Some(good.clone()), 405, "OperationNotAllowed"),
        ("PATCH", ACCOUNTS, Some(json!({"Name": "x"})), 405, "OperationNotAllowed"),
    ];
    let cases = posts
        .into_iter()
        .map(|(body, status, id)| ("POST", ACCOUNTS, body, status, id))
        .chain(others);
    for (method, target, body, status, message_id) in cases {
        let raw = match (&body, method) {
            (Some(body), _) => body.to_string(),
            (None, "DELETE") => String::new(),
            (None, _) => "{not json".to_owned(),
        };
        let request = axum::http::Request::builder()
            .method(method)
            .uri(target)
            .header("authorization", BASIC)
            .body(axum::body::Body::from(raw))
            .unwrap();
        let answer = common::send(&app, request).await;
        let context = format!("{method} {target} {body:?}");
        assert_eq!(
            answer.status.as_u16(),
            status,
            "{context}: {}",
            answer.json()
        );
        assert_eq!(
            answer.message_id(),
            format!("Base.1.18.{message_id}"),
            "{context}"
        );
        let text = String::from_utf8_lossy(&answer.body);
        assert!(
            !text.contains("Secret-pw-42") && !text.contains("12345678"),
            "{context}: {text}"
        );
    }
    let admin_delete = call(&app, "DELETE", ADMIN, &[("authorization", BASIC)], None).await;
    assert_eq!(admin_delete.header("allow"), "GET, HEAD, PATCH");
    // Nothing of that was applied.
    assert_eq!(get(&app, &uri).await.body, before);
    assert_eq!(service.accounts().len(), 2);
    assert_eq!(get(&app, ADMIN).await.json()["RoleId"], "Administrator");

    // Unknown ids, including odd ones, are 404 for every method.
    for id in [
        "0",
        "99",
        "-1",
        "1x",
        "18446744073709551616",
        "%2e%2e",
        "..%2F1",
    ] {
        let target = format!("{ACCOUNTS}/{id}");
        for method in ["GET", "PATCH", "DELETE"] {
            let body = (method == "PATCH").then(|| json!({"RoleId": "ReadOnly"}));
            let answer = call(&app, method, &target, &[("authorization", BASIC)], body).await;
            assert_redfish_error(&answer, StatusCode::NOT_FOUND, "ResourceNotFound");
        }
    }
}

#[tokio::test]
async fn the_account_table_has_a_limit() {
    let (service, app) = service();
    let mut created = 1;
    let last = loop {
        let answer = create(
            &app,
            json!({"UserName": format!("user{created}"), "Password": "Limit-pw-1", "RoleId": "ReadOnly"}),
        )
        .await;
        if answer.status != StatusCode::CREATED {
            break answer;
        }
        created += 1;
        assert!(created <= 64, "no limit");
    };
    assert_redfish_error(
        &last,
        StatusCode::BAD_REQUEST,
        "CreateLimitReachedForResource",
    );
    assert_eq!(service.accounts().len(), created);
}

#[tokio::test]
async fn only_account_managers_change_other_accounts_and_anyone_may_change_their_own_password() {
    let (service, app) = service();
    service.add_account(Account {
        username: "viewer".into(),
        password: "Viewer-pw-1".into(),
        role: Role::ReadOnly,
    });
    let viewer = basic("viewer", "Viewer-pw-1");
    let own = format!("{ACCOUNTS}/2");
    let other = create_operator(&app).await;
    let as_viewer = [("authorization", viewer.as_str())];

    let refused = [
        call(
            &app,
            "POST",
            ACCOUNTS,
            &as_viewer,
            Some(json!({"UserName": "x1", "Password": "Xx-password1", "RoleId": "Administrator"})),
        )
        .await,
        call(
            &app,
            "PATCH",
            &other,
            &as_viewer,
            Some(json!({"Password": "Hijacked-pw1"})),
        )
        .await,
        call(&app, "DELETE", &other, &as_viewer, None).await,
        call(
            &app,
            "PATCH",
            &own,
            &as_viewer,
            Some(json!({"RoleId": "Administrator"})),
        )
        .await,
    ];
    for answer in &refused {
        assert_redfish_error(answer, StatusCode::FORBIDDEN, "InsufficientPrivilege");
    }
    assert_eq!(get(&app, &own).await.json()["RoleId"], "ReadOnly");

    for method in ["POST", "PATCH", "DELETE"] {
        let target = if method == "POST" {
            ACCOUNTS
        } else {
            other.as_str()
        };
        let answer = call(
            &app,
            method,
            target,
            &[],
            Some(json!({"RoleId": "ReadOnly"})),
        )
        .await;
        assert_redfish_error(
            &answer,
            StatusCode::UNAUTHORIZED,
            "ResourceAtUriUnauthorized",
        );
    }

    let changed = call(
        &app,
        "PATCH",
        &own,
        &as_viewer,
        Some(json!({"Password": "Viewer-pw-2"})),
    )
    .await;
    assert_eq!(changed.status, StatusCode::OK, "{}", changed.json());
    let old = call(&app, "GET", "/redfish/v1/Systems", &as_viewer, None).await;
    assert_eq!(old.status, StatusCode::UNAUTHORIZED);
    let new = basic("viewer", "Viewer-pw-2");
    let systems = call(
        &app,
        "GET",
        "/redfish/v1/Systems",
        &[("authorization", &new)],
        None,
    )
    .await;
    assert_eq!(systems.status, StatusCode::OK);
}

#[tokio::test]
async fn a_disabled_or_renamed_account_loses_its_sessions_and_cannot_log_in() {
    let (_, app) = service();
    let uri = create_operator(&app).await;
    let admin_patch = |body: Value| {
        let (app, uri) = (app.clone(), uri.clone());
        async move { call(&app, "PATCH", &uri, &[("authorization", BASIC)], Some(body)).await }
    };
    for (change, restore) in [
        (json!({"Enabled": false}), Some(json!({"Enabled": true}))),
        (json!({"UserName": "operator2"}), None),
    ] {
        let token = session_login(&app, "operator1", "Operator-pw1")
            .await
            .header("x-auth-token")
            .to_owned();
        let changed = admin_patch(change.clone()).await;
        assert_eq!(changed.status, StatusCode::OK, "{change}");
        let with_token = call(
            &app,
            "GET",
            "/redfish/v1/Systems",
            &[("x-auth-token", &token)],
            None,
        )
        .await;
        assert_eq!(with_token.status, StatusCode::UNAUTHORIZED, "{change}");
        let again = session_login(&app, "operator1", "Operator-pw1").await;
        assert_eq!(again.status, StatusCode::UNAUTHORIZED, "{change}");
        if let Some(restore) = restore {
            admin_patch(restore).await;
        }
    }
}

#[tokio::test]
async fn arbitrary_account_bodies_never_crash_the_service() {
    let (service, app) = service();
    let uri = create_operator(&app).await;
    let values = [
        json!(null),
        json!(true),
        json!(-1),
        json!(1e308),
        json!(""),
        json!("é\u{0}\u{202e}"),
        json!([]),
        json!({}),
        json!({"nested": {"deep": [1, {"x": null}]}}),
        json!("x".repeat(10_000)),
    ];
    let keys = [
        "UserName",
        "Password",
        "RoleId",
        "Enabled",
        "Locked",
        "@odata.etag",
        "Links",
        "",
    ];
    for key in keys {
        for value in &values {
            let body = json!({ key: value });
            for (method, target) in [("POST", ACCOUNTS), ("PATCH", uri.as_str())] {
                let answer = call(
                    &app,
                    method,
                    target,
                    &[("authorization", BASIC)],
                    Some(body.clone()),
                )
                .await;
                assert!(
                    answer.status.is_client_error() || answer.status.is_success(),
                    "{method} {body}: {}",
                    answer.status
                );
                if answer.status.is_client_error() {
                    assert!(
                        answer.message_id().starts_with("Base.1.18."),
                        "{method} {body}"
                    );
                }
            }
        }
    }
    // The service still answers and the administrator still works.
    assert_eq!(get(&app, ADMIN).await.status, StatusCode::OK);
    assert!(service.accounts().len() <= 16);
}

#[tokio::test]
async fn failed_logins_lock_the_account_out_even_for_its_right_password_as_the_account_service_says()
 {
    let (service, app) = service();
    let settings = get(&app, "/redfish/v1/AccountService").await.json();
    assert_eq!(settings["AccountLockoutThreshold"], 0, "off by default");
    let patch = |body: Value| {
        let app = app.clone();
        async move {
            call(
                &app,
                "PATCH",
                "/redfish/v1/AccountService",
                &[("authorization", BASIC)],
                Some(body),
            )
            .await
        }
    };
    let too_long = patch(json!({"AccountLockoutCounterResetAfter": 301})).await;
    assert_redfish_error(
        &too_long,
        StatusCode::BAD_REQUEST,
        "PropertyValueFormatError",
    );
    let negative = patch(json!({"AccountLockoutThreshold": -1})).await;
    assert_redfish_error(&negative, StatusCode::BAD_REQUEST, "PropertyValueTypeError");
    let read_only = patch(json!({"MinPasswordLength": 1, "AccountLockoutThreshold": 3})).await;
    assert_redfish_error(&read_only, StatusCode::BAD_REQUEST, "PropertyNotWritable");
    assert_eq!(
        service.lockout_policy().threshold,
        0,
        "a bad body changes nothing"
    );
    let patched = patch(json!({"AccountLockoutThreshold": 3})).await;
    assert_eq!(patched.status, StatusCode::OK, "{}", patched.json());
    assert_eq!(patched.header("allow"), "GET, HEAD, PATCH");
    let settings = get(&app, "/redfish/v1/AccountService").await.json();
    assert_eq!(settings["AccountLockoutThreshold"], 3);
    assert_eq!(settings["AccountLockoutDuration"], 300);
    assert_eq!(settings["AccountLockoutCounterResetAfter"], 300);
    assert_eq!(
        session_login(&app, "admin", "wrong-one").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        session_login(&app, "admin", "wrong-two").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        session_login(&app, "admin", "password").await.status,
        StatusCode::CREATED,
        "a good login before the threshold resets the count"
    );
    for _ in 0..3 {
        assert_eq!(
            session_login(&app, "admin", "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        session_login(&app, "admin", "password").await.status,
        StatusCode::UNAUTHORIZED,
        "locked"
    );
    let basic_while_locked = call(&app, "GET", ADMIN, &[("authorization", BASIC)], None).await;
    assert_eq!(basic_while_locked.status, StatusCode::UNAUTHORIZED);
    let status = service.lockout_status("admin").unwrap();
    assert!(status.locked);
    assert_eq!(status.lockouts, 1);
    assert_eq!(status.failed_logins, 2 + 3 + 2);
    // The Basic requests (two GETs and four PATCHes of the AccountService) and the session.
    assert_eq!(status.good_logins, 7);
}

/// `POST` of `user` and `password` to the SessionService: a session login.
async fn session_login(app: &Router, user: &str, password: &str) -> Answer {
    call(
        app,
        "POST",
        "/redfish/v1/SessionService/Sessions",
        &[],
        Some(json!({"UserName": user, "Password": password})),
    )
    .await
}
