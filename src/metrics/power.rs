//! BMC and host power metrics: every BMC request counted and timed by driver, operation and
//! outcome, and the last known power state of every host the controller knows.
//!
//! Labels are bounded and never secret: driver kinds, operation names, error categories,
//! Machine and Node names and BMC addresses, which carry no credentials.

use std::time::Duration;

use baremend_drivers::{CredentialUsed, PowerState};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the BMC request counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `redfish` or `ipmi`.
    pub driver: String,
    /// `power_state`, `power_off`, `power_on`, `probe`, `close`.
    pub operation: String,
    /// `ok`, or the error's category (`timeout`, `unreachable`, `authentication`…).
    pub outcome: String,
}

/// Labels of the BMC latency histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// `redfish` or `ipmi`.
    pub driver: String,
    /// The operation.
    pub operation: String,
}

/// Which host a power-state series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostLabels {
    /// The Machine (`namespace/name`).
    pub machine: String,
    /// Its Node, if it has one.
    pub node: String,
    /// The BMC address (or `BareMetalHost ns/name` when the BareMetal Operator reports it).
    pub bmc: String,
    /// `redfish`, `ipmi`, or `baremetalhost` (read from the host's status, no BMC request).
    pub driver: String,
    /// `on`, `off` or `unknown`: the series of the current state is 1, the others 0.
    pub state: String,
}

/// Which host a per-host series (other than the power state) is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HostIdLabels {
    /// The Machine (`namespace/name`).
    pub machine: String,
    /// Its Node, if it has one.
    pub node: String,
    /// The BMC address.
    pub bmc: String,
    /// `redfish` or `ipmi`.
    pub driver: String,
}

/// The power states a host series can show.
pub const HOST_STATES: [&str; 3] = ["on", "off", "unknown"];

/// The metrics of BMC requests and host power.
#[derive(Debug)]
pub struct PowerMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    hosts: Family<HostLabels, Gauge>,
    previous_password: Family<HostIdLabels, Gauge>,
    untrustworthy: Family<BmcLabels, Gauge>,
    /// The BMCs shown untrustworthy now.
    shown_untrustworthy: std::sync::Mutex<Vec<String>>,
}

/// Which BMC a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BmcLabels {
    /// The BMC address, without credentials.
    pub bmc: String,
}

fn latency_histogram() -> Histogram {
    // 5 ms .. about 80 s: a local BMC answers in milliseconds, a struggling one in seconds.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

/// A host as its power-state series name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostSeries {
    /// The Machine (`namespace/name`).
    pub machine: String,
    /// Its Node.
    pub node: String,
    /// The BMC address or the BareMetalHost.
    pub bmc: String,
    /// The driver kind or `baremetalhost`.
    pub driver: String,
}

impl HostSeries {
    fn labels(&self, state: &str) -> HostLabels {
        HostLabels {
            machine: super::label_value(&self.machine),
            node: super::label_value(&self.node),
            bmc: super::label_value(&self.bmc),
            driver: self.driver.clone(),
            state: state.into(),
        }
    }

    fn id_labels(&self) -> HostIdLabels {
        HostIdLabels {
            machine: super::label_value(&self.machine),
            node: super::label_value(&self.node),
            bmc: super::label_value(&self.bmc),
            driver: self.driver.clone(),
        }
    }
}

impl PowerMetrics {
    /// Registers the families in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "bmc_requests",
            "BMC requests, by driver, operation and outcome",
            requests.clone(),
        );
        let latency: Family<LatencyLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register(
            "bmc_request_duration_seconds",
            "Time a BMC operation took, by driver and operation",
            latency.clone(),
        );
        let hosts = Family::<HostLabels, Gauge>::default();
        registry.register(
            "host_power_state",
            "The last power state read for each host (1 on the series of the current state)",
            hosts.clone(),
        );
        let previous_password = Family::<HostIdLabels, Gauge>::default();
        registry.register(
            "bmc_previous_password_in_use",
            "1 while the host's BMC accepts only the previous password of its Secret",
            previous_password.clone(),
        );
        let untrustworthy = Family::<BmcLabels, Gauge>::default();
        registry.register(
            "bmc_untrustworthy",
            "1 while the BMC is untrustworthy: it was seen reading Off, then not, with no power request between; no reading of it proves its host off",
            untrustworthy.clone(),
        );
        PowerMetrics {
            requests,
            latency,
            hosts,
            previous_password,
            untrustworthy,
            shown_untrustworthy: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Counts and times one BMC operation.
    pub fn bmc_request(&self, driver: &str, operation: &str, outcome: &str, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                driver: driver.into(),
                operation: operation.into(),
                outcome: outcome.into(),
            })
            .inc();
        self.latency
            .get_or_create(&LatencyLabels {
                driver: driver.into(),
                operation: operation.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// Records a host's power state; None when it could not be read.
    pub fn set_host_power(&self, host: &HostSeries, state: Option<PowerState>) {
        let current = match state {
            Some(PowerState::On) => "on",
            Some(PowerState::Off) => "off",
            _ => "unknown",
        };
        for name in HOST_STATES {
            self.hosts
                .get_or_create(&host.labels(name))
                .set(i64::from(name == current));
        }
    }

    /// Records which password of its Secret the host's BMC accepted at the last login; no
    /// login yet (`None`) leaves the series as it is.
    pub fn set_credential_used(&self, host: &HostSeries, used: Option<CredentialUsed>) {
        if let Some(used) = used {
            self.previous_password
                .get_or_create(&host.id_labels())
                .set(i64::from(used == CredentialUsed::Previous));
        }
    }

    /// Shows exactly `bmcs` as untrustworthy (a series of 1 each); the others' series go.
    pub fn set_untrustworthy(&self, bmcs: &[String]) {
        let mut shown = self
            .shown_untrustworthy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for gone in shown.iter().filter(|b| !bmcs.contains(b)) {
            let bmc = super::label_value(gone);
            self.untrustworthy.remove(&BmcLabels { bmc });
        }
        for bmc in bmcs {
            self.untrustworthy
                .get_or_create(&BmcLabels {
                    bmc: super::label_value(bmc),
                })
                .set(1);
        }
        *shown = bmcs.to_vec();
    }

    /// Drops a host's series (its Machine is gone, or its BMC changed).
    pub fn forget_host(&self, host: &HostSeries) {
        for name in HOST_STATES {
            self.hosts.remove(&host.labels(name));
        }
        self.previous_password.remove(&host.id_labels());
    }
}
