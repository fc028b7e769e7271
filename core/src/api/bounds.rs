//! The bounds baremend's CRD schemas put on the strings its specs hold: what the API server
//! checks before an object is stored, so that a typo or an oversized value is refused at
//! `kubectl apply` time with the field named, not found later by the controller.
//!
//! Expected flow: the spec types of this module's siblings name these constants in their
//! `#[schemars(...)]` attributes; `baremend crds` renders them into `crds/`.
//!
//! Guarantees: the name patterns are the API server's own rules for the object they name
//! (kubernetes `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go`:
//! `IsDNS1123Subdomain` for object names, `IsDNS1123Label` for namespaces, `IsConfigMapKey`
//! for ConfigMap and Secret keys), with the same maximum lengths.
//!
//! Caveats: a pattern is checked by the API server's RE2 engine, so none may use
//! look-around; the length bounds are checked separately (`maxLength`), the patterns do not
//! count characters.

/// An object name (`metadata.name` of a Node, Machine, Secret, ConfigMap, HostBmc…): a
/// DNS-1123 subdomain.
pub const DNS_SUBDOMAIN: &str =
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// The longest DNS-1123 subdomain.
pub const DNS_SUBDOMAIN_MAX: u32 = 253;

/// A DNS-1123 subdomain or nothing: a name the controller records as empty when it is
/// unknown (a node in no pool).
pub const DNS_SUBDOMAIN_OR_EMPTY: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";

/// A namespace: a DNS-1123 label.
pub const DNS_LABEL: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// The longest DNS-1123 label.
pub const DNS_LABEL_MAX: u32 = 63;

/// A `namespace/name` reference (a BareMetalHost).
pub const NAMESPACED_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// The longest `namespace/name`.
pub const NAMESPACED_NAME_MAX: u32 = DNS_LABEL_MAX + 1 + DNS_SUBDOMAIN_MAX;

/// A key of a ConfigMap or Secret.
pub const CONFIG_MAP_KEY: &str = r"^[-._a-zA-Z0-9]+$";

/// An object UID as the API server writes it (a UUID; room left for other forms).
pub const UID_MAX: u32 = 128;

/// A container image pinned by digest (`registry/path[:tag]@sha256:<64 hex>`): the helper
/// pods run privileged on a node, so the image they run must not move under a tag.
pub const IMAGE_BY_DIGEST: &str = r"^[A-Za-z0-9][A-Za-z0-9._:/-]*@sha256:[a-f0-9]{64}$";

/// The longest image reference (a 255-character name, a tag and a digest).
pub const IMAGE_MAX: u32 = 512;

/// The largest PEM CA bundle given inline (64 KiB: a few hundred certificates).
pub const CA_BUNDLE_MAX: u32 = 65_536;

/// The longest BMC address (a URL).
pub const ADDRESS_MAX: u32 = 2048;

/// The longest file path or unit name (Linux `PATH_MAX`).
pub const PATH_MAX: u32 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        // The same engine family as the API server's (RE2 semantics, no look-around).
        regex::Regex::new(pattern).unwrap().is_match(text)
    }

    #[test]
    fn names_follow_dns_1123() {
        for good in ["worker-0", "a", "node.example.com", "0-a"] {
            assert!(matches(DNS_SUBDOMAIN, good), "{good}");
        }
        for bad in ["Worker-0", "worker_0", "-a", "a-", "a..b", ""] {
            assert!(!matches(DNS_SUBDOMAIN, bad), "{bad}");
        }
        assert!(matches(DNS_SUBDOMAIN_OR_EMPTY, ""));
        assert!(!matches(DNS_LABEL, "a.b"));
        assert!(matches(
            NAMESPACED_NAME,
            "openshift-machine-api/worker-0.lab"
        ));
        assert!(!matches(NAMESPACED_NAME, "worker-0"));
    }

    #[test]
    fn images_must_name_a_digest() {
        let digest = "a".repeat(64);
        for good in [
            format!("quay.io/acme/baremend@sha256:{digest}"),
            format!("registry:5000/baremend:1.2@sha256:{digest}"),
        ] {
            assert!(matches(IMAGE_BY_DIGEST, &good), "{good}");
        }
        for bad in [
            "quay.io/acme/baremend:latest".to_string(),
            "baremend".to_string(),
            format!("baremend@sha256:{}", "a".repeat(63)),
            format!("baremend@sha256:{}", "A".repeat(64)),
        ] {
            assert!(!matches(IMAGE_BY_DIGEST, &bad), "{bad}");
        }
    }
}
