//! Prometheus for the tests of the alerts and the dashboard: the rules of
//! deploy/components/monitoring/prometheusrule.yaml as the rule file promtool and Prometheus read, the metric names
//! the controller exports, and a small client of Prometheus's HTTP API.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use baremend::metrics::Metrics;
use baremend::metrics::power::HostSeries;
use serde::Deserialize;
use serde_json::Value;

use super::{repo_root, require_program};

/// `promtool`, from Debian's `prometheus`; a missing one fails the test with the install command.
pub fn promtool() -> PathBuf {
    require_program("promtool", "prometheus")
}

/// The `prometheus` server, from Debian's `prometheus`.
pub fn prometheus() -> PathBuf {
    require_program("prometheus", "prometheus")
}

/// The PrometheusRule of deploy/ (its only document).
pub fn prometheus_rule() -> Value {
    let text = std::fs::read_to_string(
        repo_root().join("deploy/components/monitoring/prometheusrule.yaml"),
    )
    .unwrap();
    let rule = Value::deserialize(serde_yaml::Deserializer::from_str(&text)).unwrap();
    assert_eq!(rule["kind"], "PrometheusRule");
    rule
}

/// One alerting or recording rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The alert's or the recorded series' name.
    pub name: String,
    /// Whether it is an alert (else a recording rule).
    pub alert: bool,
    /// Its PromQL.
    pub expr: String,
}

/// Every rule of the PrometheusRule, in order.
pub fn rules() -> Vec<Rule> {
    let rule = prometheus_rule();
    rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap().clone())
        .map(|r| {
            let (name, alert) = match (r["alert"].as_str(), r["record"].as_str()) {
                (Some(alert), None) => (alert, true),
                (None, Some(record)) => (record, false),
                _ => panic!("neither an alert nor a recording rule: {r}"),
            };
            Rule {
                name: name.to_string(),
                alert,
                expr: r["expr"].as_str().unwrap().to_string(),
            }
        })
        .collect()
}

/// Writes the PrometheusRule's `spec` (its rule groups) to `dir/rules.yaml`, the rule file
/// promtool and Prometheus read; returns its path.
pub fn write_rules(dir: &Path) -> PathBuf {
    let path = dir.join("rules.yaml");
    let groups = serde_yaml::to_string(&prometheus_rule()["spec"]).unwrap();
    std::fs::write(&path, groups).unwrap();
    path
}

/// The series families the controller exports, as the reference names them (a counter's with
/// `_total`), with their types.
pub fn exported_families() -> std::collections::BTreeMap<String, String> {
    declared(&every_family().encode())
        .map(|(name, kind)| {
            let series = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            (series, kind.to_owned())
        })
        .collect()
}

/// The metric names the controller exports, as Prometheus stores them (`# TYPE` lines; a
/// labelled family shows only once it has a series, so each gets one).
pub fn exported_metrics() -> BTreeSet<String> {
    stored_names(&filled_metrics())
}

/// As [`exported_metrics`], with the families a healthy lab has no data for too.
pub fn all_exported_metrics() -> BTreeSet<String> {
    stored_names(&every_family().encode())
}

/// The names Prometheus stores for the families an encoding declares (`# TYPE` lines).
fn stored_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (name, kind) in declared(text) {
        match kind {
            "counter" => {
                names.insert(format!("{name}_total"));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The families an OpenMetrics text declares (its `# TYPE` lines): each name with its type.
fn declared(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| {
        let mut parts = line.strip_prefix("# TYPE ")?.split_whitespace();
        Some((parts.next()?, parts.next()?))
    })
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server's HTTP API on a loopback port.
#[derive(Debug, Clone, Copy)]
pub struct PrometheusApi {
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl PrometheusApi {
    /// GETs `path` (with its query string); returns the status code and the body. HTTP/1.0,
    /// so that the answer is never chunked and ends with the connection.
    pub async fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        Ok((status, body.to_string()))
    }

    /// The JSON answer of an API path; a failed request or an error status fails the test.
    pub async fn json(&self, path: &str) -> Value {
        let (status, body) = self
            .get(path)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let value: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"));
        assert!(
            status == 200 && value["status"] == "success",
            "GET {path}: {status} {body}"
        );
        value
    }

    /// An instant query at the server's now: its result (a vector's samples). A query the
    /// server refuses or fails to evaluate fails the test, with the error.
    pub async fn query(&self, promql: &str) -> Vec<Value> {
        let answer = self
            .json(&format!("/api/v1/query?query={}", encode(promql)))
            .await;
        match answer["data"]["resultType"].as_str() {
            Some("vector") => answer["data"]["result"].as_array().unwrap().clone(),
            Some("scalar") => {
                vec![serde_json::json!({"metric": {}, "value": answer["data"]["result"]})]
            }
            other => panic!("{promql}: unexpected result type {other:?}: {answer}"),
        }
    }
}

/// A sample's value.
pub fn value(sample: &Value) -> f64 {
    sample["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {sample}"))
}

/// The metric families a healthy lab has data for, each with one series at least (an empty
/// labelled family is not encoded), as the controller's registry encodes them.
fn filled_metrics() -> String {
    filled().encode()
}

/// A registry with a series in each family a healthy lab has data for.
fn filled() -> Metrics {
    let metrics = Metrics::new();
    metrics.remediation_started("DirectBmc");
    metrics.remediation_succeeded("DirectBmc", Duration::from_secs(1));
    metrics.remediation_failed("DirectBmc", "NodeNeverReady");
    metrics.step_reached("Fenced", Duration::from_millis(300));
    metrics
        .power
        .bmc_request("redfish", "power_state", "ok", Duration::from_millis(5));
    let host = HostSeries {
        machine: "ns/m".into(),
        node: "n".into(),
        bmc: "redfish://b".into(),
        driver: "redfish".into(),
    };
    metrics
        .power
        .set_host_power(&host, Some(baremend_drivers::PowerState::On));
    metrics.fencing.set_ready(
        &baremend::metrics::fencing::FencingLabels {
            machine: "ns/m".into(),
            node: "n".into(),
            path: "redfish".into(),
        },
        true,
    );
    metrics.drift.set_pool("worker", 1, 0);
    metrics
        .drift
        .ended("Force", "Succeeded", "", Duration::from_secs(60));
    metrics.drift.set_reboots("worker-0", "worker", 1);
    metrics
}

/// A registry with a series in every family: those of a healthy lab, and the two it has no
/// data for (a password rotation half done, a BMC contradicting itself).
fn every_family() -> Metrics {
    let metrics = filled();
    let host = HostSeries {
        machine: "ns/m".into(),
        node: "n".into(),
        bmc: "redfish://b".into(),
        driver: "redfish".into(),
    };
    let previous = baremend_drivers::CredentialUsed::Previous;
    metrics.power.set_credential_used(&host, Some(previous));
    metrics.power.set_untrustworthy(&["redfish://b".into()]);
    metrics
}
