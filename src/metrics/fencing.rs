//! Fencing readiness metrics: whether each host's fencing path answered its last
//! non-disruptive check, and how many hosts are not ready by reason (a cheap alert).
//!
//! Labels are bounded: the Machine and Node names (one series per Machine, as the power-state
//! series), the path kind (`reboot-api`, `redfish`, `ipmi`, `none`) and the reason, one of
//! [`FENCING_REASONS`]. Never a credential, never an address.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Every reason a fencing path can be not ready (the readiness check's typed reasons).
pub const FENCING_REASONS: [&str; 19] = [
    "NoFencingPath",
    "HostNotFound",
    "HostDetached",
    "HostPaused",
    "PowerOffDisabled",
    "HostInError",
    "CredentialsNotValidated",
    "NoPowerState",
    "HostManaged",
    "BmcMisconfigured",
    "Unreachable",
    "CredentialsRefused",
    "TlsFailed",
    "NoSystem",
    "ForcedOffNotAdvertised",
    "BmcError",
    "CheckFailed",
    "InsecureTransport",
    "BmcUntrustworthy",
];

/// Which host a readiness series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FencingLabels {
    /// The Machine (`namespace/name`).
    pub machine: String,
    /// Its Node, if it has one.
    pub node: String,
    /// `reboot-api`, `redfish`, `ipmi` or `none`.
    pub path: String,
}

/// Labels of the not-ready count.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// One of [`FENCING_REASONS`].
    pub reason: String,
}

/// The fencing readiness metrics.
#[derive(Debug)]
pub struct FencingMetrics {
    ready: Family<FencingLabels, Gauge>,
    not_ready: Family<ReasonLabels, Gauge>,
}

impl FencingMetrics {
    /// Registers the families in `registry`, every reason's count at zero.
    pub fn register(registry: &mut Registry) -> Self {
        let ready = Family::<FencingLabels, Gauge>::default();
        registry.register(
            "fencing_ready",
            "1 while the host's fencing path answered its last non-disruptive check, else 0",
            ready.clone(),
        );
        let not_ready = Family::<ReasonLabels, Gauge>::default();
        registry.register(
            "fencing_not_ready",
            "Hosts whose fencing path is not ready, by reason",
            not_ready.clone(),
        );
        for reason in FENCING_REASONS {
            // Created at zero (the handle is dropped at once).
            not_ready.get_or_create_owned(&ReasonLabels {
                reason: reason.into(),
            });
        }
        FencingMetrics { ready, not_ready }
    }

    /// Records a host's readiness.
    pub fn set_ready(&self, host: &FencingLabels, ready: bool) {
        self.ready.get_or_create(host).set(i64::from(ready));
    }

    /// Drops a host's series (its Machine is gone, out of scope, or its path changed).
    pub fn forget(&self, host: &FencingLabels) {
        self.ready.remove(host);
    }

    /// Sets the not-ready count of every reason: `counts` names those above zero.
    pub fn set_not_ready(&self, counts: &[(&str, usize)]) {
        for reason in FENCING_REASONS {
            let count = counts
                .iter()
                .filter(|(r, _)| *r == reason)
                .map(|(_, n)| *n)
                .sum::<usize>();
            self.not_ready
                .get_or_create(&ReasonLabels {
                    reason: reason.into(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }
}
