//! How the driver authenticates: a Redfish session when the BMC offers one, HTTP Basic when it
//! does not.

use reqwest::{Method, StatusCode};
use serde_json::json;
use zeroize::Zeroize;

use super::model::ServiceRoot;
use super::transport::{Reply, RequestAuth, SessionToken, Transport};
use crate::credentials::{CredentialUsed, Credentials};
use crate::error::{Error, Result};
use crate::rotation::Attempt;

/// Where sessions are created when the service root does not say (the Redfish default).
const DEFAULT_SESSIONS_PATH: &str = "/redfish/v1/SessionService/Sessions";

/// The authentication the driver currently uses.
#[derive(Debug, Default)]
pub(crate) enum Auth {
    /// Not logged in yet (or the session was dropped).
    #[default]
    LoggedOut,
    /// A Redfish session: the token, and the session resource to delete on close.
    Session {
        token: SessionToken,
        location: Option<String>,
    },
    /// HTTP Basic on every request with one of the passwords: the BMC has no usable session
    /// service.
    Basic(CredentialUsed),
}

impl Auth {
    pub(crate) fn request_auth<'a>(&'a self, credentials: &'a Credentials) -> RequestAuth<'a> {
        match self {
            Auth::LoggedOut => RequestAuth::None,
            Auth::Session { token, .. } => RequestAuth::Token(token),
            Auth::Basic(which) => RequestAuth::Basic(
                &credentials.username,
                credentials
                    .password_for(*which)
                    .unwrap_or(&credentials.password),
            ),
        }
    }

    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Auth::LoggedOut => "none",
            Auth::Session { .. } => "session",
            Auth::Basic(_) => "basic",
        }
    }
}

/// Where the service root says sessions are created, if it has a session service at all.
pub(crate) fn sessions_path(root: &ServiceRoot) -> Option<String> {
    if let Some(link) = root.links.as_ref().and_then(|l| l.sessions.as_ref()) {
        return Some(link.id.clone());
    }
    root.session_service
        .as_ref()
        .map(|_| DEFAULT_SESSIONS_PATH.to_owned())
}

/// Creates a session with the password `which` names; falls back to Basic (with that
/// password) when the BMC has no usable session service.
///
/// A 401 is a refusal of the password ([`Attempt::Refused`]): the caller may try the other
/// password of a rotation once. A 403 is final (the account lacks the privilege, or is
/// disabled: another password would not change that). Neither is ever repeated, since every
/// failed attempt counts towards the BMC's account lock-out.
pub(crate) async fn log_in(
    transport: &Transport,
    credentials: &Credentials,
    which: CredentialUsed,
    path: &str,
) -> Result<Attempt<Auth>> {
    const OPERATION: &str = "session login";
    let password = credentials
        .password_for(which)
        .unwrap_or(&credentials.password);
    let body = LoginBody(json!({
        "UserName": credentials.username,
        "Password": password.expose(),
    }));
    let reply = transport.send_password(path, &body.0, OPERATION).await?;
    drop(body);
    match reply.status {
        status if status.is_success() => match reply.header("X-Auth-Token") {
            Some(token) if !token.is_empty() => {
                let location = reply.header("Location").map(str::to_owned).or_else(|| {
                    serde_json::from_slice::<serde_json::Value>(&reply.body)
                        .ok()
                        .and_then(|v| v.get("@odata.id")?.as_str().map(str::to_owned))
                });
                Ok(Attempt::Accepted(Auth::Session {
                    token: SessionToken::new(token),
                    location,
                }))
            }
            _ => {
                tracing::debug!(
                    bmc = transport.bmc(),
                    "session created without a token; using Basic auth"
                );
                Ok(Attempt::Accepted(Auth::Basic(which)))
            }
        },
        StatusCode::UNAUTHORIZED => Ok(Attempt::Refused(refusal(
            transport,
            credentials,
            which,
            &reply,
        ))),
        StatusCode::FORBIDDEN => Err(refusal(transport, credentials, which, &reply)),
        status if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS => {
            Err(transport.status_error(&reply, OPERATION))
        }
        _ => {
            tracing::debug!(
                bmc = transport.bmc(),
                status = reply.status.as_u16(),
                "no usable session service; using Basic auth"
            );
            Ok(Attempt::Accepted(Auth::Basic(which)))
        }
    }
}

/// A login body: the password in it is wiped when it is dropped (the copy reqwest serialises
/// it into is not ours to wipe).
struct LoginBody(serde_json::Value);

impl Drop for LoginBody {
    fn drop(&mut self) {
        if let Some(serde_json::Value::String(password)) = self.0.get_mut("Password") {
            password.zeroize();
        }
    }
}

/// The error for a refused session login: the account and which password, never its value.
fn refusal(
    transport: &Transport,
    credentials: &Credentials,
    which: CredentialUsed,
    reply: &Reply,
) -> Error {
    Error::Authentication {
        bmc: transport.bmc().to_owned(),
        detail: format!(
            "session login as {:?} with the {which} password refused with HTTP {} ({})",
            credentials.username,
            reply.status.as_u16(),
            reply.error_message()
        ),
    }
}

/// Deletes a session. Failures are only logged: the BMC expires sessions on its own.
pub(crate) async fn log_out(transport: &Transport, auth: Auth) {
    let Auth::Session {
        token,
        location: Some(location),
    } = auth
    else {
        return;
    };
    let result = transport
        .send(
            Method::DELETE,
            &location,
            RequestAuth::Token(&token),
            None,
            "session logout",
        )
        .await;
    match result {
        Ok(reply) if reply.status.is_success() || reply.status == StatusCode::NOT_FOUND => {}
        Ok(reply) => tracing::debug!(
            bmc = transport.bmc(),
            status = reply.status.as_u16(),
            "session logout was refused"
        ),
        Err(error) => tracing::debug!(bmc = transport.bmc(), %error, "session logout failed"),
    }
}
