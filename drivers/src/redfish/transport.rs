//! One HTTP exchange with a Redfish service: request building, the per-BMC gate, bounded body
//! reads and the mapping of transport failures to driver errors.

use std::error::Error as StdError;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;

use zeroize::Zeroizing;

use super::model::ErrorBody;
use super::redirect::{
    MAX_REDIRECTS, Origin, Refusal, describe_target, follow_with, is_redirect, judge,
};
use crate::credentials::Password;
use crate::error::{Error, Result, shorten};
use crate::gate::EndpointGate;
use crate::retry::parse_retry_after;
use crate::tls::TlsOptions;

/// Answers larger than this are refused: a BMC resource is a few kilobytes.
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// A Redfish session token: `Debug` never shows it, and it is wiped from memory when dropped.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct SessionToken(Zeroizing<String>);

impl SessionToken {
    pub(crate) fn new(token: &str) -> Self {
        SessionToken(Zeroizing::new(token.to_owned()))
    }

    fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SessionToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionToken(<redacted>)")
    }
}

/// The credentials attached to one request.
#[derive(Clone, Copy)]
pub(crate) enum RequestAuth<'a> {
    None,
    /// HTTP Basic with a username and one of its passwords.
    Basic(&'a str, &'a Password),
    Token(&'a SessionToken),
}

/// An answer, read completely.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The delay the `Retry-After` header asks for, if there is a readable one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        parse_retry_after(self.header("Retry-After")?, SystemTime::now())
    }

    /// The BMC's own error text, if the body is a Redfish error.
    pub(crate) fn error_message(&self) -> String {
        serde_json::from_slice::<ErrorBody>(&self.body)
            .ok()
            .and_then(|body| body.describe())
            .map(|text| shorten(&text))
            .unwrap_or_else(|| {
                self.status
                    .canonical_reason()
                    .unwrap_or("no reason")
                    .to_owned()
            })
    }
}

/// The HTTP side of a Redfish driver.
#[derive(Debug)]
pub(crate) struct Transport {
    bmc: String,
    base_url: String,
    /// The BMC's origin: the only one requests and redirects go to.
    origin: Origin,
    http: reqwest::Client,
    gate: EndpointGate,
    request_timeout: Duration,
}

impl Transport {
    pub(crate) fn new(
        bmc: String,
        base_url: String,
        tls: &TlsOptions,
        request_timeout: Duration,
        gate: EndpointGate,
    ) -> Result<Self> {
        let origin = Url::parse(&base_url)
            .ok()
            .as_ref()
            .and_then(Origin::of)
            .ok_or_else(|| Error::Configuration {
                bmc: bmc.clone(),
                reason: "the BMC address is not an http(s) URL with a host".into(),
            })?;
        // Redirects are followed by `send`, not by reqwest: only to the BMC's own origin
        // (sushy-tools redirects a system name to its UUID), and never with the password body
        // of a login (see `redirect`).
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(request_timeout)
            .connect_timeout(request_timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(1)
            .pool_idle_timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("baremend/", env!("CARGO_PKG_VERSION")));
        if base_url.starts_with("http://") {
            // Plain HTTP never verifies a certificate: loading the system roots (milliseconds
            // per client) would only slow down every new driver.
            builder = builder.tls_built_in_root_certs(false);
        }
        if tls.insecure {
            builder = builder.danger_accept_invalid_certs(true);
        }
        if let Some(pem) = &tls.ca_bundle_pem {
            let certificates =
                reqwest::Certificate::from_pem_bundle(pem).map_err(|e| Error::Configuration {
                    bmc: bmc.clone(),
                    reason: format!("the CA bundle is not valid PEM: {e}"),
                })?;
            if certificates.is_empty() {
                return Err(Error::Configuration {
                    bmc,
                    reason: "the CA bundle holds no certificate".into(),
                });
            }
            builder = builder.tls_built_in_root_certs(false);
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().map_err(|e| Error::Configuration {
            bmc: bmc.clone(),
            reason: format!("cannot build the HTTP client: {}", error_chain(&e)),
        })?;
        Ok(Transport {
            bmc,
            base_url,
            origin,
            http,
            gate,
            request_timeout,
        })
    }

    pub(crate) fn bmc(&self) -> &str {
        &self.bmc
    }

    /// Resolves a path or a same-origin absolute URL from the BMC into a request URL.
    fn url(&self, path: &str, operation: &str) -> Result<Url> {
        let outside = || {
            self.malformed(
                operation,
                format!("link {:?} does not point into this BMC", shorten(path)),
            )
        };
        let url = if path.starts_with('/') {
            Url::parse(&format!("{}{path}", self.base_url))
        } else {
            Url::parse(path)
        }
        .map_err(|_| outside())?;
        match judge(&self.origin, &url, false) {
            Ok(()) => Ok(url),
            Err(_) => Err(outside()),
        }
    }

    /// Sends one request and reads the whole answer, following redirects to the BMC's own
    /// origin (at most [`MAX_REDIRECTS`]); a redirect anywhere else is an error, so that
    /// credentials never leave the BMC's origin. At most one request per BMC endpoint is in
    /// flight at a time; callers waiting for the gate count against nobody's timeout.
    pub(crate) async fn send(
        &self,
        method: Method,
        path: &str,
        auth: RequestAuth<'_>,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Reply> {
        self.send_following(method, path, auth, body, false, operation)
            .await
    }

    /// POSTs a body that carries the password (the session login): a redirect is never
    /// followed, whatever its target, and is an error naming its status and the target's
    /// origin.
    pub(crate) async fn send_password(
        &self,
        path: &str,
        body: &serde_json::Value,
        operation: &str,
    ) -> Result<Reply> {
        self.send_following(
            Method::POST,
            path,
            RequestAuth::None,
            Some(body),
            true,
            operation,
        )
        .await
    }

    async fn send_following(
        &self,
        mut method: Method,
        path: &str,
        auth: RequestAuth<'_>,
        mut body: Option<&serde_json::Value>,
        carries_password: bool,
        operation: &str,
    ) -> Result<Reply> {
        let mut url = self.url(path, operation)?;
        let _in_flight = self.gate.lock().await;
        let mut hops = 0;
        loop {
            let reply = self
                .exchange(method.clone(), url.clone(), auth, body, operation)
                .await?;
            let location = match reply.header("Location") {
                Some(location) if is_redirect(reply.status) => location,
                _ => return Ok(reply),
            };
            let status = reply.status.as_u16();
            let target = url.join(location).map_err(|_| {
                self.malformed(
                    operation,
                    format!("HTTP {status} with a Location that is not a URL"),
                )
            })?;
            let verdict = if hops >= MAX_REDIRECTS {
                Err(Refusal::TooMany)
            } else {
                judge(&self.origin, &target, carries_password)
            };
            if let Err(refusal) = verdict {
                return Err(self.malformed(
                    operation,
                    format!(
                        "redirected with HTTP {status} to {}, not followed: {refusal}",
                        describe_target(&target)
                    ),
                ));
            }
            let (next, keep_body) = follow_with(reply.status, &method);
            tracing::debug!(bmc = %self.bmc, operation, status, "following a redirect within the BMC");
            method = next;
            body = body.filter(|_| keep_body);
            url = target;
            hops += 1;
        }
    }

    /// One request and its whole answer, with the gate already held.
    async fn exchange(
        &self,
        method: Method,
        url: Url,
        auth: RequestAuth<'_>,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Reply> {
        let mut request = self
            .http
            .request(method, url)
            .header("OData-Version", HeaderValue::from_static("4.0"))
            .header("Accept", HeaderValue::from_static("application/json"));
        request = match auth {
            RequestAuth::None => request,
            RequestAuth::Basic(username, password) => {
                request.basic_auth(username, Some(password.expose()))
            }
            RequestAuth::Token(token) => {
                let mut value = HeaderValue::from_str(token.expose()).map_err(|_| {
                    self.malformed(operation, "the session token is not a valid header value")
                })?;
                value.set_sensitive(true);
                request.header("X-Auth-Token", value)
            }
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.transport_error(&e, operation))?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport_error(&e, operation))?
        {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(self.malformed(
                    operation,
                    format!("the answer is larger than {MAX_BODY_BYTES} bytes"),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        tracing::trace!(bmc = %self.bmc, operation, status = status.as_u16(), "redfish exchange");
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    /// Turns a non-success answer into the matching error. 401 and 403 become
    /// [`Error::Authentication`]; 429 and 503 [`Error::Busy`]; 404 on a system is handled by the
    /// caller, which knows what was looked for.
    pub(crate) fn check(&self, reply: Reply, operation: &str) -> Result<Reply> {
        if reply.status.is_success() {
            return Ok(reply);
        }
        Err(self.status_error(&reply, operation))
    }

    /// The error for a non-success answer (see [`Transport::check`]).
    pub(crate) fn status_error(&self, reply: &Reply, operation: &str) -> Error {
        let status = reply.status;
        let message = reply.error_message();
        match status.as_u16() {
            401 => Error::Authentication {
                bmc: self.bmc.clone(),
                detail: format!("{operation}: HTTP 401 ({message})"),
            },
            403 => Error::Authentication {
                bmc: self.bmc.clone(),
                detail: format!(
                    "{operation}: HTTP 403, the account lacks the privilege ({message})"
                ),
            },
            429 | 503 => Error::Busy {
                bmc: self.bmc.clone(),
                detail: format!("{operation}: HTTP {} ({message})", status.as_u16()),
                retry_after: reply.retry_after(),
            },
            code => Error::Http {
                bmc: self.bmc.clone(),
                operation: operation.to_owned(),
                status: code,
                message,
            },
        }
    }

    /// Parses a JSON body, or says precisely why it cannot.
    pub(crate) fn parse<T: DeserializeOwned>(&self, reply: &Reply, operation: &str) -> Result<T> {
        serde_json::from_slice(&reply.body).map_err(|e| {
            self.malformed(operation, format!("the body is not the expected JSON: {e}"))
        })
    }

    pub(crate) fn malformed(&self, operation: &str, detail: impl Into<String>) -> Error {
        Error::MalformedResponse {
            bmc: self.bmc.clone(),
            operation: operation.to_owned(),
            detail: detail.into(),
        }
    }

    fn transport_error(&self, error: &reqwest::Error, operation: &str) -> Error {
        if let Some(tls) = find_tls_error(error) {
            return Error::Tls {
                bmc: self.bmc.clone(),
                detail: tls,
            };
        }
        if error.is_timeout() {
            return Error::Timeout {
                bmc: self.bmc.clone(),
                operation: operation.to_owned(),
                timeout: self.request_timeout,
            };
        }
        Error::Unreachable {
            bmc: self.bmc.clone(),
            detail: format!("{operation}: {}", error_chain(error)),
        }
    }
}

/// The rustls error somewhere in the cause chain, if the failure was a TLS one. `io::Error`
/// hides its wrapped error from `source()`, and reqwest nests one in another, so those are
/// opened explicitly.
fn find_tls_error(error: &(dyn StdError + 'static)) -> Option<String> {
    if let Some(tls) = error.downcast_ref::<rustls::Error>() {
        return Some(tls.to_string());
    }
    if let Some(inner) = error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        && let Some(found) = find_tls_error(inner)
    {
        return Some(found);
    }
    error.source().and_then(find_tls_error)
}

/// `outer: inner: innermost`, without the URL that reqwest puts into its own message.
fn error_chain(error: &reqwest::Error) -> String {
    let mut parts = Vec::new();
    let mut current = error.source();
    while let Some(cause) = current {
        let text = cause.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        current = cause.source();
    }
    if parts.is_empty() {
        parts.push(
            if error.is_connect() {
                "connection failed"
            } else {
                "request failed"
            }
            .to_owned(),
        );
    }
    parts.join(": ")
}
