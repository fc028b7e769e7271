//! The durations of a simulated cluster, all scalable: the lab runs the real intervals divided
//! by a time scale.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Parses a Go/Kubernetes duration: `300s`, `10m`, `5m0s`, `1h30m`, `250ms`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let value: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ms" => value / 1000.0,
            "s" => value,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            _ => return None,
        };
        total += Duration::try_from_secs_f64(seconds).ok()?;
        rest = tail;
    }
    Some(total)
}

/// Every interval and delay of the simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Timing {
    /// How long a host takes to power on or off (at the BMC).
    #[serde(with = "millis")]
    pub power_delay: Duration,
    /// From power-on to the kubelet registering the Node.
    #[serde(with = "millis")]
    pub boot_delay: Duration,
    /// How often a kubelet renews its Lease.
    #[serde(with = "millis")]
    pub heartbeat: Duration,
    /// Without a heartbeat for this long a Node becomes Unknown (node-monitor-grace-period).
    #[serde(with = "millis")]
    pub node_grace: Duration,
    /// How often the node lifecycle controller looks.
    #[serde(with = "millis")]
    pub monitor_period: Duration,
    /// How often the MachineHealthCheck controller looks.
    #[serde(with = "millis")]
    pub mhc_period: Duration,
    /// The MachineHealthCheck's unhealthy-condition timeout.
    #[serde(with = "millis")]
    pub unhealthy_timeout: Duration,
    /// The MachineHealthCheck's nodeStartupTimeout.
    #[serde(with = "millis")]
    pub node_startup_timeout: Duration,
    /// How often the BareMetal Operator reconciles a host with a pending change.
    #[serde(with = "millis")]
    pub bmo_period: Duration,
    /// A NodeHealthCheck's expected duration of a single `remediationTemplate` (medik8s
    /// `DefaultRemediationDuration`, 10 min): its request times out through the Node's lease
    /// after three of these.
    #[serde(with = "millis")]
    pub nhc_remediation_duration: Duration,
    /// What a NodeHealthCheck adds to its Node leases' duration (medik8s `LeaseBuffer`, 1 min).
    #[serde(with = "millis")]
    pub nhc_lease_buffer: Duration,
    /// How long the BareMetal Operator waits for a soft power-off before a hard one.
    #[serde(with = "millis")]
    pub soft_power_off_timeout: Duration,
    /// How often a Machine Config Daemon and the drain controller look (the real daemon's
    /// drift monitor reacts at once; its retries start at 1 s).
    #[serde(with = "millis")]
    pub mcd_period: Duration,
    /// The daemon's longest retry backoff while Degraded (60 s in the MCO).
    #[serde(with = "millis")]
    pub mcd_max_backoff: Duration,
    /// How often the drain controller retries a refused drain (1 min in the MCO).
    #[serde(with = "millis")]
    pub drain_retry: Duration,
    /// After this long failing, the drain controller reports `DrainThresholdExceeded`
    /// (10 min in the MCO).
    #[serde(with = "millis")]
    pub drain_threshold: Duration,
}

impl Default for Timing {
    /// Intervals for a lab that tells the story in seconds (the NodeHealthCheck's lease
    /// durations stay upstream's: a story never waits for them).
    fn default() -> Self {
        Timing {
            power_delay: Duration::from_millis(1500),
            boot_delay: Duration::from_millis(2000),
            heartbeat: Duration::from_millis(250),
            node_grace: Duration::from_millis(1500),
            monitor_period: Duration::from_millis(250),
            mhc_period: Duration::from_millis(250),
            unhealthy_timeout: Duration::from_millis(1000),
            node_startup_timeout: Duration::from_secs(60),
            bmo_period: Duration::from_millis(250),
            nhc_remediation_duration: Duration::from_secs(600),
            nhc_lease_buffer: Duration::from_secs(60),
            soft_power_off_timeout: Duration::from_secs(5),
            mcd_period: Duration::from_millis(250),
            mcd_max_backoff: Duration::from_secs(2),
            drain_retry: Duration::from_millis(500),
            drain_threshold: Duration::from_secs(5),
        }
    }
}

impl Timing {
    /// The quickest intervals that still keep every actor's order of events: for tests.
    pub fn fast() -> Self {
        Timing {
            power_delay: Duration::from_millis(300),
            boot_delay: Duration::from_millis(400),
            heartbeat: Duration::from_millis(100),
            node_grace: Duration::from_millis(600),
            monitor_period: Duration::from_millis(100),
            mhc_period: Duration::from_millis(100),
            unhealthy_timeout: Duration::from_millis(500),
            bmo_period: Duration::from_millis(100),
            mcd_period: Duration::from_millis(100),
            mcd_max_backoff: Duration::from_millis(800),
            drain_retry: Duration::from_millis(200),
            drain_threshold: Duration::from_secs(2),
            ..Timing::default()
        }
    }

    /// Kubernetes' own defaults (kubelet lease 10 s, grace 40 s, MHC 300 s, BMO soft-off 180 s),
    /// divided by `scale` (1.0 = real time).
    pub fn kubernetes_defaults(scale: f64) -> Self {
        let scaled = |seconds: f64| Duration::from_secs_f64((seconds / scale.max(1e-6)).max(0.001));
        Timing {
            power_delay: scaled(10.0),
            boot_delay: scaled(120.0),
            heartbeat: scaled(10.0),
            node_grace: scaled(40.0),
            monitor_period: scaled(5.0),
            mhc_period: scaled(5.0),
            unhealthy_timeout: scaled(300.0),
            node_startup_timeout: scaled(600.0),
            bmo_period: scaled(3.0),
            nhc_remediation_duration: scaled(600.0),
            nhc_lease_buffer: scaled(60.0),
            soft_power_off_timeout: scaled(180.0),
            mcd_period: scaled(1.0),
            mcd_max_backoff: scaled(60.0),
            drain_retry: scaled(60.0),
            drain_threshold: scaled(600.0),
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{}ms", value.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_go_duration(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not a duration (e.g. 1500ms, 30s, 5m)"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("300s"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("5m0s"), Some(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        for bad in ["", "5", "5x", "m"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}
