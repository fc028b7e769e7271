//! Redirects from a Redfish BMC: followed only within the BMC's origin (compared parsed:
//! scheme, host, port), never with userinfo in the target, never with the login's password
//! body. The BMC is scripted (wiremock) or simulated over HTTPS; a second server stands for
//! the other origin and records what reached it.

use std::time::Duration;

use baremend_drivers::redfish::RedfishDriver;
use baremend_drivers::{
    BmcAddress, Credentials, DriverConfig, Error, PowerDriver, PowerState, TlsOptions,
};
use baremend_sim::redfish::{AuthSettings, RedfishSim, RedfishSimConfig, Redirect, TlsMode};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SYSTEM: &str = "/redfish/v1/Systems/1";
const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
const PASSWORD: &str = "s3cr3t-Pa55";
const TOKEN: &str = "token-7f3a";

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

fn system(id: &str) -> Value {
    json!({"@odata.id": format!("/redfish/v1/Systems/{id}"), "Id": id, "PowerState": "On",
        "Actions": {"#ComputerSystem.Reset": {"target": format!("/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset")}}})
}

/// A BMC whose service root answers, with a session service that grants [`TOKEN`] when
/// `with_sessions`.
async fn bmc(with_sessions: bool) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/redfish/v1/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(root(with_sessions)))
        .mount(&server)
        .await;
    if with_sessions {
        Mock::given(method("POST"))
            .and(path(SESSIONS))
            .respond_with(
                ResponseTemplate::new(201)
                    .insert_header("X-Auth-Token", TOKEN)
                    .insert_header("Location", format!("{SESSIONS}/1")),
            )
            .mount(&server)
            .await;
    }
    server
}

/// A server that answers everything, as an attacker's would, and records what it got.
async fn elsewhere() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("X-Auth-Token", "stolen")
                .set_body_json(system("1")),
        )
        .mount(&server)
        .await;
    server
}

async fn redirect(server: &MockServer, verb: &str, from: &str, status: u16, to: &str) {
    Mock::given(method(verb))
        .and(path(from))
        .respond_with(ResponseTemplate::new(status).insert_header("Location", to))
        .mount(server)
        .await;
}

fn driver_for(address: &str, tls: TlsOptions) -> RedfishDriver {
    let mut config = DriverConfig::new(
        BmcAddress::parse(address).unwrap(),
        Credentials::new("admin", PASSWORD),
        tls,
    );
    config.request_timeout = Duration::from_secs(5);
    RedfishDriver::new(config.into_redfish()).unwrap()
}

fn driver(server: &MockServer) -> RedfishDriver {
    driver_for(
        &format!("redfish+http://{}{SYSTEM}", server.address()),
        TlsOptions::default(),
    )
}

/// The error's text, checked to be a permanent one that shows no secret.
fn refusal(error: Error) -> String {
    assert!(
        matches!(error, Error::MalformedResponse { .. }),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    let text = error.to_string();
    for secret in [PASSWORD, TOKEN, "admin:"] {
        assert!(!text.contains(secret), "{text}");
    }
    text
}

async fn received(server: &MockServer) -> Vec<wiremock::Request> {
    server.received_requests().await.unwrap_or_default()
}

#[tokio::test]
async fn a_redirect_within_the_bmc_is_followed_with_its_credentials() {
    for with_sessions in [true, false] {
        let server = bmc(with_sessions).await;
        // The target written absolutely with the default-less explicit port, then a relative
        // hop: both the BMC's own origin.
        let absolute = format!("http://{}/redfish/v1/Systems/uuid-1", server.address());
        redirect(&server, "GET", SYSTEM, 308, &absolute).await;
        let credential = if with_sessions {
            header("X-Auth-Token", TOKEN)
        } else {
            // base64("admin:s3cr3t-Pa55")
            header("Authorization", "Basic YWRtaW46czNjcjN0LVBhNTU=")
        };
        Mock::given(method("GET"))
            .and(path("/redfish/v1/Systems/uuid-1"))
            .and(credential)
            .respond_with(ResponseTemplate::new(200).set_body_json(system("uuid-1")))
            .mount(&server)
            .await;
        let driver = driver(&server);
        assert_eq!(
            driver.power_state().await.unwrap(),
            PowerState::On,
            "sessions: {with_sessions}"
        );
    }
}

/// The targets that are another origin than `bmc_at`, what the refusal says about each, and
/// the origin it names.
fn other_origins(
    bmc_at: std::net::SocketAddr,
    other_port: u16,
) -> [(String, &'static str, String); 4] {
    [
        // `http://bmc:port@evil/` is `https://bmc:443@evil/`: userinfo `bmc:port`, host `evil`.
        (
            format!("http://{bmc_at}@127.0.0.1:{other_port}{SYSTEM}"),
            "userinfo",
            format!("http://127.0.0.1:{other_port}"),
        ),
        (
            format!("http://127.0.0.1:{other_port}{SYSTEM}"),
            "its port differs",
            format!("http://127.0.0.1:{other_port}"),
        ),
        (
            format!("http://localhost:{other_port}{SYSTEM}"),
            "its host differs",
            format!("http://localhost:{other_port}"),
        ),
        // The BMC itself under another name is another origin too.
        (
            format!("http://localhost:{}{SYSTEM}", bmc_at.port()),
            "its host differs",
            format!("http://localhost:{}", bmc_at.port()),
        ),
    ]
}

#[tokio::test]
async fn redirects_to_another_origin_are_refused_and_nothing_reaches_it() {
    for with_sessions in [true, false] {
        for (case, status) in [302, 307, 301, 308].into_iter().enumerate() {
            let server = bmc(with_sessions).await;
            let other = elsewhere().await;
            let (target, why, origin) =
                other_origins(*server.address(), other.address().port())[case].clone();
            redirect(&server, "GET", SYSTEM, status, &target).await;
            let text = refusal(driver(&server).power_state().await.unwrap_err());
            assert!(text.contains(&format!("HTTP {status}")), "{text}");
            assert!(text.contains(&format!("to {origin},")), "{text}");
            assert!(text.contains(why), "{text}");
            assert!(!text.contains('@'), "{text}");
            assert!(
                received(&other).await.is_empty(),
                "{target}: a request reached the other origin"
            );
            let to_system = received(&server)
                .await
                .iter()
                .filter(|r| r.url.path() == SYSTEM)
                .count();
            assert_eq!(to_system, 1, "{target}: asked once, not followed");
        }
    }
}

#[tokio::test]
async fn a_redirect_on_the_login_never_sends_the_password_again() {
    for status in [307, 308] {
        // To another origin: the other server gets nothing, the BMC one login.
        let server = bmc(false).await;
        let other = elsewhere().await;
        Mock::given(method("GET"))
            .and(path("/redfish/v1/"))
            .respond_with(ResponseTemplate::new(200).set_body_json(root(true)))
            .with_priority(1)
            .mount(&server)
            .await;
        let target = format!("http://127.0.0.1:{}{SESSIONS}", other.address().port());
        redirect(&server, "POST", SESSIONS, status, &target).await;
        let error = driver(&server).power_state().await.unwrap_err();
        let text = refusal(error);
        assert!(text.contains(&format!("HTTP {status}")), "{text}");
        assert!(
            text.contains(&format!("http://127.0.0.1:{}", other.address().port())),
            "{text}"
        );
        assert!(
            received(&other).await.is_empty(),
            "HTTP {status}: the login went to the other origin"
        );
        let seen = received(&server).await;
        let logins = seen.iter().filter(|r| r.url.path() == SESSIONS).count();
        assert_eq!(logins, 1, "HTTP {status}: the login was sent once");
        assert!(
            seen.iter()
                .all(|r| !r.headers.contains_key("authorization")),
            "HTTP {status}: no fallback to Basic after a redirected login"
        );

        // Within the BMC: still not sent again.
        let server = bmc(false).await;
        Mock::given(method("GET"))
            .and(path("/redfish/v1/"))
            .respond_with(ResponseTemplate::new(200).set_body_json(root(true)))
            .with_priority(1)
            .mount(&server)
            .await;
        redirect(&server, "POST", SESSIONS, status, "/redfish/v1/Sessions2").await;
        let text = refusal(driver(&server).power_state().await.unwrap_err());
        assert!(text.contains("carries the password"), "{text}");
        let seen = received(&server).await;
        assert_eq!(
            seen.iter().filter(|r| r.method.as_str() == "POST").count(),
            1,
            "HTTP {status}: one POST, not followed"
        );
        assert!(
            seen.iter().all(|r| r.url.path() != "/redfish/v1/Sessions2"),
            "HTTP {status}"
        );
    }
}

#[tokio::test]
async fn a_redirect_from_https_to_http_is_refused() {
    let sim = RedfishSim::start(RedfishSimConfig {
        tls: TlsMode::SelfSigned,
        password: PASSWORD.into(),
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap();
    // Basic only: every request carries the password in its Authorization header.
    sim.service().set_auth_settings(AuthSettings {
        basic_auth: true,
        sessions: false,
    });
    let tls = TlsOptions {
        ca_bundle_pem: sim.self_signed_cert_pem().map(|p| p.as_bytes().to_vec()),
        insecure: false,
    };
    let port = sim.local_addr().port();
    let other = elsewhere().await;
    let other_port = other.address().port();
    for (target, origin) in [
        (
            format!("http://127.0.0.1:{port}{SYSTEM}"),
            format!("http://127.0.0.1:{port}"),
        ),
        (
            format!("http://127.0.0.1:{other_port}{SYSTEM}"),
            format!("http://127.0.0.1:{other_port}"),
        ),
    ] {
        sim.service().redirect(
            SYSTEM,
            Some(Redirect {
                status: 307,
                location: target.clone(),
            }),
        );
        let before = sim.service().stats().requests;
        let driver = driver_for(&sim.bmc_address("1"), tls.clone());
        let text = refusal(driver.power_state().await.unwrap_err());
        assert!(text.contains("its scheme differs"), "{text}");
        assert!(text.contains(&format!("to {origin},")), "{text}");
        // The root, then the system once: nothing more.
        assert_eq!(sim.service().stats().requests - before, 2, "{target}");
    }
    assert!(received(&other).await.is_empty());
    // The same BMC without the redirect works with the same settings.
    sim.service().redirect(SYSTEM, None);
    let driver = driver_for(&sim.bmc_address("1"), tls);
    assert_eq!(driver.power_state().await.unwrap(), PowerState::On);
}
