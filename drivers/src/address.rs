//! BMC addresses in the metal3 BareMetalHost format.

use std::fmt;
use std::net::Ipv6Addr;

use crate::error::{Error, Result};

/// The protocol family an address selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriverKind {
    /// DMTF Redfish over HTTP(S).
    Redfish,
    /// IPMI 2.0 over LAN (RMCP+).
    Ipmi,
}

/// Redfish scheme prefixes accepted from BareMetalHost `spec.bmc.address`. The vendor and
/// virtual-media variants only change how Ironic provisions; power control is plain Redfish.
const REDFISH_SCHEMES: &[&str] = &[
    "redfish",
    "redfish-virtualmedia",
    "idrac-redfish",
    "idrac-virtualmedia",
    "ilo5-redfish",
    "ilo5-virtualmedia",
];

/// Default IPMI-over-LAN port (RMCP).
pub const IPMI_DEFAULT_PORT: u16 = 623;

/// A parsed BMC address.
///
/// Accepted forms (as in metal3):
/// - `redfish://host[:port]/redfish/v1/Systems/ID` — HTTPS; also `redfish+https://`,
///   `redfish+http://` (plain HTTP), and the vendor forms `idrac-redfish://`, `ilo5-redfish://`,
///   `redfish-virtualmedia://`, `idrac-virtualmedia://`, `ilo5-virtualmedia://`, each with an
///   optional `+http`/`+https` suffix. The system path is optional when the BMC has one system.
/// - `ipmi://host[:port]` — port 623 by default; a bare `host[:port]` also means IPMI, as in
///   metal3.
///
/// Hosts are DNS names, IPv4 addresses or bracketed IPv6 addresses (`[fd00::1]:8443`).
/// Credentials inside the address are refused: they belong in the credentials Secret.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BmcAddress {
    scheme: String,
    kind: DriverKind,
    tls: bool,
    host: String,
    port: Option<u16>,
    path: Option<String>,
}

impl BmcAddress {
    /// Parses an address; the error names the address and what is wrong with it.
    pub fn parse(address: &str) -> Result<Self> {
        let trimmed = address.trim();
        let invalid = |reason: &str| Error::InvalidAddress {
            address: redact_userinfo(trimmed),
            reason: reason.to_owned(),
        };
        if trimmed.is_empty() {
            return Err(invalid("the address is empty"));
        }
        if trimmed.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(invalid(
                "the address contains whitespace or control characters",
            ));
        }
        let (scheme, rest) = match trimmed.split_once("://") {
            Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
            None if !trimmed.contains('/') => ("ipmi".to_owned(), trimmed),
            None => {
                return Err(invalid(
                    "no scheme; expected e.g. redfish://host/redfish/v1/Systems/1 or ipmi://host",
                ));
            }
        };
        let (kind, tls) = classify_scheme(&scheme).ok_or_else(|| {
            invalid(&format!(
                "unknown scheme {scheme:?}; supported: ipmi, {} (each Redfish scheme also with +http or +https)",
                REDFISH_SCHEMES.join(", ")
            ))
        })?;
        let (authority, path) = match rest.find('/') {
            Some(index) => rest.split_at(index),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(invalid(
                "credentials must not be part of the address; put them in the credentials Secret",
            ));
        }
        if path.contains(['?', '#']) {
            return Err(invalid("query strings and fragments are not allowed"));
        }
        let (host, port) = split_host_port(authority).map_err(|reason| invalid(&reason))?;
        let path = path.trim_end_matches('/');
        let path = match (kind, path.is_empty()) {
            (_, true) => None,
            (DriverKind::Ipmi, false) => {
                return Err(invalid("an IPMI address has no path"));
            }
            (DriverKind::Redfish, false) => Some(path.to_owned()),
        };
        Ok(BmcAddress {
            scheme,
            kind,
            tls,
            host,
            port,
            path,
        })
    }

    /// The scheme as written, lower-cased (`redfish+https`, `idrac-redfish`, `ipmi`; a bare
    /// `host[:port]` is `ipmi`): which driver a status names.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The protocol family.
    pub fn kind(&self) -> DriverKind {
        self.kind
    }

    /// The host as written in a URL (IPv6 in brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port given in the address, or the protocol's default.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match (self.kind, self.tls) {
            (DriverKind::Ipmi, _) => IPMI_DEFAULT_PORT,
            (DriverKind::Redfish, true) => 443,
            (DriverKind::Redfish, false) => 80,
        })
    }

    /// Whether the transport is TLS (Redfish over HTTPS).
    pub fn uses_tls(&self) -> bool {
        self.tls
    }

    /// The Redfish system path given in the address, if any.
    pub fn system_path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// `https://host:port` or `http://host:port`, for Redfish.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}:{}", self.host, self.port())
    }

    /// `host:port`: the BMC endpoint.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.port())
    }

    /// What at most one request at a time may use: the endpoint, or, where the address names
    /// one system of a Redfish service that serves several (a chassis manager, an emulator),
    /// that system at the endpoint. A BMC that answers one of its systems late must not hold
    /// the fencing of the others behind it; requests about one system still never overlap.
    pub fn request_gate(&self) -> String {
        match (self.kind(), &self.path) {
            (DriverKind::Redfish, Some(path)) => format!("{}{path}", self.endpoint()),
            _ => self.endpoint(),
        }
    }
}

impl fmt::Display for BmcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.host)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        if let Some(path) = &self.path {
            f.write_str(path)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for BmcAddress {
    type Err = Error;

    fn from_str(address: &str) -> Result<Self> {
        BmcAddress::parse(address)
    }
}

fn classify_scheme(scheme: &str) -> Option<(DriverKind, bool)> {
    if scheme == "ipmi" {
        return Some((DriverKind::Ipmi, false));
    }
    let (base, tls) = match scheme.rsplit_once('+') {
        Some((base, "https")) => (base, true),
        Some((base, "http")) => (base, false),
        Some(_) => return None,
        None => (scheme, true),
    };
    REDFISH_SCHEMES
        .contains(&base)
        .then_some((DriverKind::Redfish, tls))
}

fn split_host_port(authority: &str) -> std::result::Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let (literal, after) = bracketed
            .split_once(']')
            .ok_or("an IPv6 address lacks its closing bracket")?;
        literal
            .parse::<Ipv6Addr>()
            .map_err(|_| format!("{literal:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or("unexpected text after the IPv6 address")?,
            ),
        };
        (format!("[{literal}]"), port)
    } else {
        match authority.split_once(':') {
            Some((_, rest)) if rest.contains(':') => {
                return Err("IPv6 addresses must be written in brackets, e.g. [fd00::1]".into());
            }
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    if !host.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!("{host:?} is not a valid host name"));
    }
    let port = match port {
        None => None,
        Some(text) => match text.parse::<u16>() {
            Ok(0) | Err(_) => return Err(format!("bad port {text:?} (expected 1-65535)")),
            Ok(port) => Some(port),
        },
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// Removes `user:password@` from an address before it is shown anywhere.
fn redact_userinfo(address: &str) -> String {
    let (prefix, rest) = match address.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), address),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{prefix}<redacted>@{}", &rest[at + 1..]),
        None => address.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_told_as_written_lower_cased_and_a_bare_host_is_ipmi() {
        let scheme = |a: &str| BmcAddress::parse(a).unwrap().scheme().to_owned();
        assert_eq!(
            scheme("redfish+http://127.0.0.1:8000/redfish/v1/Systems/1"),
            "redfish+http"
        );
        assert_eq!(
            scheme("iDRAC-Redfish://bmc.example/redfish/v1/Systems/1"),
            "idrac-redfish"
        );
        assert_eq!(scheme("ipmi://[fd00::1]:6230"), "ipmi");
        assert_eq!(scheme("10.0.0.5:623"), "ipmi");
    }

    struct Scenario {
        address: &'static str,
        kind: DriverKind,
        base_url: &'static str,
        port: u16,
        system: Option<&'static str>,
    }

    #[test]
    fn systems_of_one_redfish_service_have_gates_of_their_own_an_ipmi_endpoint_one() {
        let gate = |address: &str| BmcAddress::parse(address).unwrap().request_gate();
        let one = gate("redfish+http://127.0.0.1:8000/redfish/v1/Systems/a");
        let other = gate("redfish+http://127.0.0.1:8000/redfish/v1/Systems/b");
        assert_ne!(one, other);
        assert_eq!(
            one,
            gate("redfish+http://127.0.0.1:8000/redfish/v1/Systems/a/")
        );
        // Without a system path the driver finds the only system: the endpoint is the gate.
        assert_eq!(gate("redfish+http://127.0.0.1:8000"), "127.0.0.1:8000");
        assert_eq!(gate("ipmi://10.0.0.5:623"), "10.0.0.5:623");
    }

    #[test]
    fn metal3_addresses_parse_into_kind_url_and_system() {
        let scenarios = [
            Scenario {
                address: "redfish://bmc.example.com/redfish/v1/Systems/1",
                kind: DriverKind::Redfish,
                base_url: "https://bmc.example.com:443",
                port: 443,
                system: Some("/redfish/v1/Systems/1"),
            },
            Scenario {
                address: "redfish+http://127.0.0.1:8000/redfish/v1/Systems/abc/",
                kind: DriverKind::Redfish,
                base_url: "http://127.0.0.1:8000",
                port: 8000,
                system: Some("/redfish/v1/Systems/abc"),
            },
            Scenario {
                address: "REDFISH+HTTPS://[fd00::1]:8443",
                kind: DriverKind::Redfish,
                base_url: "https://[fd00::1]:8443",
                port: 8443,
                system: None,
            },
            Scenario {
                address: "idrac-redfish://10.0.0.5/redfish/v1/Systems/System.Embedded.1",
                kind: DriverKind::Redfish,
                base_url: "https://10.0.0.5:443",
                port: 443,
                system: Some("/redfish/v1/Systems/System.Embedded.1"),
            },
            Scenario {
                address: "ilo5-redfish://ilo.local/",
                kind: DriverKind::Redfish,
                base_url: "https://ilo.local:443",
                port: 443,
                system: None,
            },
            Scenario {
                address: "redfish-virtualmedia+http://bmc:80/redfish/v1/Systems/1",
                kind: DriverKind::Redfish,
                base_url: "http://bmc:80",
                port: 80,
                system: Some("/redfish/v1/Systems/1"),
            },
            Scenario {
                address: "ipmi://10.0.0.7",
                kind: DriverKind::Ipmi,
                base_url: "http://10.0.0.7:623",
                port: 623,
                system: None,
            },
            Scenario {
                address: "ipmi://[::1]:6230",
                kind: DriverKind::Ipmi,
                base_url: "http://[::1]:6230",
                port: 6230,
                system: None,
            },
            Scenario {
                address: "10.0.0.8:6231",
                kind: DriverKind::Ipmi,
                base_url: "http://10.0.0.8:6231",
                port: 6231,
                system: None,
            },
        ];
        for scenario in scenarios {
            let parsed = BmcAddress::parse(scenario.address)
                .unwrap_or_else(|e| panic!("{}: {e}", scenario.address));
            assert_eq!(parsed.kind(), scenario.kind, "{}", scenario.address);
            assert_eq!(parsed.port(), scenario.port, "{}", scenario.address);
            assert_eq!(
                parsed.system_path(),
                scenario.system,
                "{}",
                scenario.address
            );
            if scenario.kind == DriverKind::Redfish {
                assert_eq!(parsed.base_url(), scenario.base_url, "{}", scenario.address);
            }
        }
    }

    #[test]
    fn bad_addresses_get_an_error_naming_the_address_and_the_problem() {
        let cases = [
            ("", "empty"),
            ("ftp://bmc/redfish", "unknown scheme"),
            ("redfish+ftp://bmc", "unknown scheme"),
            ("redfish://", "host is missing"),
            ("redfish://:443/redfish/v1", "host is missing"),
            ("redfish://bmc:0/x", "bad port"),
            ("redfish://bmc:99999", "bad port"),
            ("redfish://bmc:http", "bad port"),
            ("ipmi://bmc/redfish/v1", "no path"),
            ("redfish://fd00::1/redfish/v1", "brackets"),
            ("redfish://[fd00::1/redfish/v1", "closing bracket"),
            ("redfish://[not-v6]/redfish/v1", "not an IPv6"),
            ("redfish://bmc/redfish/v1?x=1", "query"),
            ("redfish://b mc/redfish/v1", "whitespace"),
            ("redfish://bm$c/redfish/v1", "not a valid host"),
            ("bmc/redfish/v1/Systems/1", "no scheme"),
        ];
        for (address, expected) in cases {
            let error = BmcAddress::parse(address).expect_err(address).to_string();
            assert!(error.contains(expected), "{address}: {error}");
            assert!(error.contains("invalid BMC address"), "{address}: {error}");
        }
    }

    #[test]
    fn credentials_in_the_address_are_refused_and_never_echoed() {
        let error = BmcAddress::parse("redfish://root:hunter2@bmc/redfish/v1/Systems/1")
            .expect_err("userinfo must be refused")
            .to_string();
        assert!(error.contains("credentials"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
        assert!(!error.contains("root:"), "{error}");
    }

    #[test]
    fn display_is_a_normalized_address_that_parses_back() {
        let parsed =
            BmcAddress::parse("Redfish+Http://BMC.Local:8000/redfish/v1/Systems/1/").unwrap();
        assert_eq!(
            parsed.to_string(),
            "redfish+http://bmc.local:8000/redfish/v1/Systems/1"
        );
        assert_eq!(BmcAddress::parse(&parsed.to_string()).unwrap(), parsed);
        assert_eq!(parsed.endpoint(), "bmc.local:8000");
    }
}
