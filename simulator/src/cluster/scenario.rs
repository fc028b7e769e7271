//! Scenario files (YAML): the shape of a simulated cluster and its timing.
//!
//! ```yaml
//! masters: 3
//! workers: 3
//! ipmi: false            # also serve every host over IPMI
//! bmhUsesIpmi: false     # BareMetalHosts point at the IPMI address instead of Redfish
//! maxUnhealthy: "40%"
//! timing:
//!   powerDelay: 1500ms
//!   bootDelay: 2s
//!   heartbeat: 250ms
//!   nodeGrace: 1500ms
//!   unhealthyTimeout: 1s
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::timing::Timing;

/// The shape of a simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Control-plane hosts.
    pub masters: usize,
    /// Worker hosts.
    pub workers: usize,
    /// Serve the API over HTTPS.
    pub tls: bool,
    /// Serve every host over IPMI too.
    pub ipmi: bool,
    /// Point BareMetalHosts at the IPMI address.
    pub bmh_uses_ipmi: bool,
    /// The workers' MachineHealthCheck `maxUnhealthy`.
    pub max_unhealthy: String,
    /// The BMC password of every host.
    pub bmc_password: String,
    /// How long `start` waits for every Node to be Ready.
    #[serde(with = "humantime_ms")]
    pub ready_timeout: Duration,
    /// Every interval and delay.
    #[serde(rename = "timing")]
    pub timing: TimingSpec,
}

/// Timing in a scenario file (camelCase keys over [`Timing`]).
pub type TimingSpec = Timing;

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            masters: 3,
            workers: 3,
            tls: true,
            ipmi: false,
            bmh_uses_ipmi: false,
            max_unhealthy: "40%".into(),
            bmc_password: "sim-bmc-password".into(),
            ready_timeout: Duration::from_secs(30),
            timing: Timing::default(),
        }
    }
}

impl ClusterSpec {
    /// Parses a scenario; unknown keys are errors, so a typo never goes unnoticed.
    pub fn from_yaml(text: &str) -> Result<Self, String> {
        serde_yaml::from_str(text).map_err(|e| format!("invalid scenario: {e}"))
    }
}

mod humantime_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{}ms", value.as_millis()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::super::timing::parse_go_duration(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a duration")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_typos_are_refused() {
        let spec = ClusterSpec::from_yaml(
            "masters: 1\nworkers: 2\ntiming:\n  powerDelay: 200ms\n  nodeGrace: 2s\n",
        )
        .unwrap();
        assert_eq!((spec.masters, spec.workers), (1, 2));
        assert_eq!(spec.timing.power_delay, Duration::from_millis(200));
        assert_eq!(spec.timing.node_grace, Duration::from_secs(2));
        assert!(ClusterSpec::from_yaml("workerz: 2\n").is_err());
        assert!(ClusterSpec::from_yaml("timing: {powerDelay: soon}\n").is_err());
    }
}
