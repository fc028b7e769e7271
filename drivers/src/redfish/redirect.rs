//! Which redirects a Redfish driver follows, and how (pure).
//!
//! # Expected flow
//! 1. [`Origin::of`] parses the BMC's base URL once: scheme, host and port, the default port
//!    of the scheme filled in, so that `https://bmc/` and `https://bmc:443/` are one origin.
//! 2. On a 3xx answer with a `Location`, the transport resolves the target against the URL
//!    just asked and calls [`judge`]: only a target of the same origin, without userinfo, is
//!    followed, and never one of a request whose body carries the password (the session login).
//! 3. [`follow_with`] says which method and whether the body go to the target (RFC 9110
//!    15.4: 307 and 308 keep both; 303 becomes GET; 301 and 302 turn a POST into a GET, as
//!    every HTTP client does).
//!
//! # Guarantees
//! - Origins are compared parsed, never as string prefixes: `https://bmc:443@evil/` (userinfo
//!   `bmc:443`, host `evil`), `https://bmc:4430/`, `http://bmc:443/` and `https://bmc.evil/`
//!   are all refused for `https://bmc:443`.
//! - Credentials (HTTP Basic, `X-Auth-Token`) only ever go to the BMC's origin, since nothing
//!   else is followed; the login body is never sent twice, whatever the target.
//! - A refusal names the status and the target's origin, never its userinfo, path or query.
//!
//! # Caveats
//! Hosts are compared as the URL parser normalises them (lower-cased names, canonical IPv4);
//! `bmc` and `bmc.` are different origins, as are a name and its address.

use std::fmt;

use reqwest::{Method, StatusCode, Url};

/// Redirects followed for one request at most.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// A URL's origin: scheme, host and port (the scheme's default when the URL gives none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of an `http` or `https` URL with a host; `None` for anything else.
    pub(crate) fn of(url: &Url) -> Option<Origin> {
        if !matches!(url.scheme(), "http" | "https") {
            return None;
        }
        Some(Origin {
            scheme: url.scheme().to_owned(),
            host: url.host_str()?.to_owned(),
            port: url.port_or_known_default()?,
        })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

/// Why a redirect is not followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The target carries a username or password (`https://bmc:443@evil/`).
    UserInfo,
    /// The target is not an `http`/`https` URL with a host.
    NotHttp,
    /// The target is another origin; what differs is named.
    OtherOrigin {
        /// The target's origin.
        target: Origin,
        /// `scheme`, `host` or `port`.
        differs: &'static str,
    },
    /// The request's body carries the password: it is never sent again.
    CredentialsInBody,
    /// More than [`MAX_REDIRECTS`] in a row.
    TooMany,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::UserInfo => {
                f.write_str("the target carries userinfo (a user name or password before its host)")
            }
            Refusal::NotHttp => f.write_str("the target is not an http(s) URL with a host"),
            Refusal::OtherOrigin { target, differs } => write!(
                f,
                "the target {target} is another origin than the BMC's (its {differs} differs)"
            ),
            Refusal::CredentialsInBody => {
                f.write_str("the request carries the password and is not sent again to any target")
            }
            Refusal::TooMany => write!(f, "more than {MAX_REDIRECTS} redirects in a row"),
        }
    }
}

/// Whether a redirect from a request to `bmc` may go to `target`. `carries_password`: the
/// request's body holds the password (the session login).
pub(crate) fn judge(bmc: &Origin, target: &Url, carries_password: bool) -> Result<(), Refusal> {
    if !target.username().is_empty() || target.password().is_some() {
        return Err(Refusal::UserInfo);
    }
    let origin = Origin::of(target).ok_or(Refusal::NotHttp)?;
    let differs = if origin.scheme != bmc.scheme {
        Some("scheme")
    } else if origin.host != bmc.host {
        Some("host")
    } else if origin.port != bmc.port {
        Some("port")
    } else {
        None
    };
    if let Some(differs) = differs {
        return Err(Refusal::OtherOrigin {
            target: origin,
            differs,
        });
    }
    if carries_password {
        return Err(Refusal::CredentialsInBody);
    }
    Ok(())
}

/// The target's origin for a message, or what can be said of it without its userinfo, path
/// or query.
pub(crate) fn describe_target(target: &Url) -> String {
    match Origin::of(target) {
        Some(origin) => origin.to_string(),
        None => format!("a {}: URL", target.scheme()),
    }
}

/// Whether `status` is a redirect that names its target in `Location`.
pub(crate) fn is_redirect(status: StatusCode) -> bool {
    matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308)
}

/// The method of the request to the target, and whether the body goes with it.
pub(crate) fn follow_with(status: StatusCode, method: &Method) -> (Method, bool) {
    match status.as_u16() {
        307 | 308 => (method.clone(), true),
        303 if *method != Method::HEAD => (Method::GET, false),
        301 | 302 if *method == Method::POST => (Method::GET, false),
        _ => (method.clone(), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(url: &str) -> Origin {
        Origin::of(&Url::parse(url).unwrap()).unwrap()
    }

    fn judged(bmc: &str, target: &str) -> Result<(), Refusal> {
        judge(&origin(bmc), &Url::parse(target).unwrap(), false)
    }

    #[test]
    fn default_ports_are_normalised() {
        assert_eq!(origin("https://bmc/"), origin("https://bmc:443/"));
        assert_eq!(origin("http://BMC:80"), origin("http://bmc/"));
        assert_eq!(
            origin("https://[fd00::1]:443/"),
            origin("https://[fd00::1]/")
        );
        assert_eq!(origin("https://bmc:8443/x").to_string(), "https://bmc:8443");
        assert!(Origin::of(&Url::parse("ftp://bmc/").unwrap()).is_none());
    }

    #[test]
    fn only_the_same_origin_without_userinfo_is_followed() {
        let bmc = "https://bmc:443";
        assert_eq!(judged(bmc, "https://bmc/redfish/v1/Systems/abc"), Ok(()));
        assert_eq!(
            judged(bmc, "https://BMC:443/redfish/v1/Systems/abc"),
            Ok(())
        );
        assert_eq!(judged(bmc, "https://bmc:443@evil/"), Err(Refusal::UserInfo));
        assert_eq!(judged(bmc, "https://admin@bmc/"), Err(Refusal::UserInfo));
        let differs = |target: &str| match judged(bmc, target) {
            Err(Refusal::OtherOrigin { differs, .. }) => differs,
            other => panic!("{target}: {other:?}"),
        };
        assert_eq!(differs("https://bmc:4430/redfish/v1/"), "port");
        assert_eq!(differs("http://bmc:443/redfish/v1/"), "scheme");
        assert_eq!(differs("http://bmc/redfish/v1/"), "scheme");
        assert_eq!(differs("https://bmc.evil/redfish/v1/"), "host");
        assert_eq!(differs("https://evil/"), "host");
        // What a string prefix check let through.
        assert_eq!(differs("https://bmc:4430/"), "port");
        assert_eq!(judged(bmc, "file:///etc/passwd"), Err(Refusal::NotHttp));
    }

    #[test]
    fn a_request_carrying_the_password_is_never_redirected() {
        let bmc = origin("https://bmc");
        let same = Url::parse("https://bmc/redfish/v1/SessionService/Sessions/").unwrap();
        assert_eq!(judge(&bmc, &same, true), Err(Refusal::CredentialsInBody));
        let elsewhere = Url::parse("https://evil/").unwrap();
        assert!(matches!(
            judge(&bmc, &elsewhere, true),
            Err(Refusal::OtherOrigin { .. })
        ));
    }

    #[test]
    fn a_refusal_names_the_origin_and_never_userinfo_path_or_query() {
        let target = Url::parse("https://user:s3cr3t@evil:8443/path?token=abc").unwrap();
        let text = describe_target(&target);
        assert_eq!(text, "https://evil:8443");
        let refusal = judge(&origin("https://bmc"), &target, false).unwrap_err();
        assert!(!refusal.to_string().contains("s3cr3t"));
    }

    #[test]
    fn the_method_and_body_follow_rfc_9110() {
        let post = Method::POST;
        for status in [307, 308] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(follow_with(status, &post), (Method::POST, true));
        }
        for status in [301, 302, 303] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(follow_with(status, &post), (Method::GET, false));
            assert!(is_redirect(status));
        }
        assert_eq!(
            follow_with(StatusCode::MOVED_PERMANENTLY, &Method::GET),
            (Method::GET, true)
        );
        assert!(!is_redirect(StatusCode::NOT_MODIFIED));
    }
}
