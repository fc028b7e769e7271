//! The alerts and the dashboard against a real Prometheus (Debian's `prometheus`, which
//! `scripts/test.sh` installs): it scrapes two `baremend lab` runs each second — a hung worker
//! fenced directly over Redfish (with the power monitor), and config drift coordinated with the
//! simulated MCO — with the PrometheusRule's groups loaded. Once both stories have ended, every
//! dashboard query and every rule's expression is evaluated through the HTTP API: none may
//! fail, every metric the controller exports has data, every dashboard query has data but the
//! ones listed with their reason, Prometheus evaluated every rule without an error, and no
//! alert is active in the healthy lab. The host's power-state series is checked to have stayed
//! visible all through its remediation.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::process::{Child, Command};

use baremend_testkit as common;

use common::prometheus::{PrometheusApi, exported_metrics, prometheus, rules, value, write_rules};
use common::{eventually, free_port, repo_root, scratch};

/// Dashboard queries that have no number in this lab, and why.
const EXPECTED_EMPTY: [(&str, &str); 2] = [
    (
        "histogram_quantile(0.95, sum by (le) (rate(mco_remediation_duration_seconds_bucket[6h])))",
        "the drift duration histogram gets its series at its first observation (its labels \
         are action x outcome x reason, too many to create up front); the lab's one drift \
         remediation is that observation, so rate() has one sample of it and the quantile is NaN",
    ),
    (
        "histogram_quantile(0.95, sum by (le, step) (rate(baremend_remediation_step_duration_seconds_bucket[6h])))",
        "the step histogram gets each step's series at its first observation; the lab's one \
         remediation is that observation, so rate() has one sample of each and every quantile \
         is NaN",
    ),
];

/// A child process whose output goes to a file of the scratch folder.
/// The Machine the redfish lab fences.
const FENCED: &str = "openshift-machine-api/worker-0";

fn spawn(dir: &Path, name: &str, program: &Path, args: &[String]) -> Child {
    let out = std::fs::File::create(dir.join(format!("{name}.out"))).unwrap();
    let err = std::fs::File::create(dir.join(format!("{name}.err"))).unwrap();
    Command::new(program)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn output_of(dir: &Path, name: &str) -> String {
    let read = |suffix: &str| {
        std::fs::read_to_string(dir.join(format!("{name}.{suffix}"))).unwrap_or_default()
    };
    format!("{}\n{}", read("out"), read("err"))
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("deploy/components/monitoring/dashboard.json"))
            .unwrap(),
    )
    .unwrap();
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| {
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            panel["targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |t| (title.clone(), t["expr"].as_str().unwrap().to_string()))
        })
        .collect()
}

/// Whether a result has a number (a NaN, as `histogram_quantile` gives over no rate, has none).
fn has_number(result: &[Value]) -> bool {
    result.iter().any(|sample| !value(sample).is_nan())
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scraping_the_lab_evaluates_every_alert_and_dashboard_query() {
    let server = prometheus();
    let dir = scratch("prometheus-live");
    write_rules(&dir);
    let labs = [("redfish", free_port()), ("drift", free_port())];
    let api = PrometheusApi { port: free_port() };
    let targets: Vec<String> = labs
        .iter()
        .map(|(_, port)| format!("'127.0.0.1:{port}'"))
        .collect();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [rules.yaml]\n\
             scrape_configs:\n  - job_name: baremend\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let mut prometheus = spawn(
        &dir,
        "prometheus",
        &server,
        &[
            format!("--config.file={}", dir.join("prometheus.yml").display()),
            format!("--storage.tsdb.path={}", dir.join("data").display()),
            format!("--web.listen-address=127.0.0.1:{}", api.port),
        ],
    );
    eventually(
        "Prometheus ready",
        Duration::from_secs(60),
        async || match api.get("/-/ready").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}\n{}", output_of(&dir, "prometheus"))),
        },
    )
    .await;

    // Both labs run at once and stay up (--linger) after their stories, until killed.
    let mut running: Vec<(&str, u16, Child)> = labs
        .iter()
        .map(|(scenario, port)| {
            let child = spawn(
                &dir,
                scenario,
                Path::new(env!("CARGO_BIN_EXE_baremend")),
                &[
                    "lab".into(),
                    "--scenario".into(),
                    (*scenario).into(),
                    "--metrics-listen".into(),
                    format!("127.0.0.1:{port}"),
                    "--linger".into(),
                    "600s".into(),
                ],
            );
            (*scenario, *port, child)
        })
        .collect();
    for (scenario, _, child) in &mut running {
        eventually(
            &format!("the {scenario} story ended"),
            Duration::from_secs(180),
            async || {
                let said = output_of(&dir, scenario);
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("the {scenario} lab exited ({status}) before its story ended:\n{said}");
                }
                said.contains("the story has ended")
                    .then_some(())
                    .ok_or(said)
            },
        )
        .await;
    }
    // Two scrapes of each lab after both stories ended, and the rules evaluated on them.
    let ended = now();
    eventually(
        "two scrapes of each lab after the stories",
        Duration::from_secs(30),
        async || {
            let scraped = api
                .query("timestamp(up{job=\"baremend\"} == 1)")
                .await
                .iter()
                .filter(|s| value(s) > ended + 2.0)
                .count();
            (scraped == labs.len()).then_some(()).ok_or(scraped)
        },
    )
    .await;
    eventually(
        "the success rate recorded",
        Duration::from_secs(30),
        async || !api.query("mco_remediation_success_rate").await.is_empty(),
    )
    .await;

    // What the stories did, as Prometheus saw it.
    let redfish = format!("127.0.0.1:{}", labs[0].1);
    let one = |result: Vec<Value>| result.first().map(value);
    assert_eq!(
        one(api
            .query(&format!(
                "baremend_remediations_succeeded_total{{instance=\"{redfish}\",strategy=\"DirectBmc\"}}"
            ))
            .await),
        Some(1.0)
    );
    assert_eq!(
        one(api
            .query("sum(mco_remediations_total{action=\"Force\",outcome=\"Succeeded\"})")
            .await),
        Some(1.0)
    );
    assert_eq!(
        one(api.query("mco_remediation_success_rate").await),
        Some(1.0)
    );
    // The redfish lab's fencing readiness check found all six hosts fenceable.
    eventually(
        "every host of the redfish lab fenceable",
        Duration::from_secs(30),
        async || {
            let ready = one(api
                .query(&format!(
                    "sum(baremend_fencing_ready{{instance=\"{redfish}\"}} == 1)"
                ))
                .await);
            let not_ready = one(api
                .query(&format!(
                    "sum(baremend_fencing_not_ready{{instance=\"{redfish}\"}})"
                ))
                .await);
            (ready == Some(6.0) && not_ready == Some(0.0))
                .then_some(())
                .ok_or(format!("ready {ready:?}, not ready {not_ready:?}"))
        },
    )
    .await;
    // Drift is coordinated in the drift lab only (the other has no MachineConfigPools).
    let drift = format!("127.0.0.1:{}", labs[1].1);
    for (instance, running) in [(&redfish, 0.0), (&drift, 1.0)] {
        assert_eq!(
            one(api
                .query(&format!(
                    "baremend_drift_coordinator_running{{instance=\"{instance}\"}}"
                ))
                .await),
            Some(running),
            "{instance}"
        );
    }

    // The hung host's power-state series stayed visible all through its remediation (fed by
    // the remediation's own BMC reads) and showed it off. (Every host of the redfish lab is
    // read over Redfish: its policy fences only through the BMC, so all are detached.)
    let window = "[15m:1s]";
    let in_progress =
        format!("sum(baremend_remediations_in_progress{{instance=\"{redfish}\"}}) > 0");
    let remediating = one(api
        .query(&format!("count_over_time(({in_progress}){window})"))
        .await)
    .unwrap_or(0.0);
    let shown = one(api
        .query(&format!(
            "count_over_time((sum(baremend_host_power_state{{instance=\"{redfish}\",machine=\"{FENCED}\",driver=\"redfish\"}}) > 0 and on() {in_progress}){window})"
        ))
        .await)
    .unwrap_or(0.0);
    assert!(remediating > 0.0, "no remediation in progress seen");
    assert_eq!(
        shown, remediating,
        "the redfish host's series was missing at some of the {remediating} instants of its remediation"
    );
    assert_eq!(
        one(api
            .query(&format!(
                "max_over_time(baremend_host_power_state{{instance=\"{redfish}\",machine=\"{FENCED}\",driver=\"redfish\",state=\"off\"}}[15m])"
            ))
            .await),
        Some(1.0),
        "the fenced host never showed off"
    );

    // Every metric the controller exports has data.
    let names: BTreeSet<String> = api
        .query("count by (__name__) ({__name__=~\"baremend_.+|mco_.+\"})")
        .await
        .iter()
        .filter_map(|s| s["metric"]["__name__"].as_str().map(String::from))
        .collect();
    let without: Vec<String> = exported_metrics()
        .into_iter()
        .filter(|name| !names.contains(name))
        .collect();
    assert!(
        without.is_empty(),
        "exported metrics without data: {without:?}"
    );

    // Every dashboard query: no error, and a number unless listed with its reason.
    let mut report = Vec::new();
    let mut missing = Vec::new();
    let queries = dashboard_queries();
    for (title, expr) in &queries {
        let result = api.query(expr).await;
        let expected_empty = EXPECTED_EMPTY.iter().any(|(e, _)| e == expr);
        let numbered = has_number(&result);
        if numbered == expected_empty {
            missing.push(format!("{title}: {expr} -> {result:?}"));
        }
        report.push(format!(
            "  dashboard  {:>2} series{}  {expr}",
            result.len(),
            if numbered { "" } else { " (NaN)" }
        ));
    }
    assert!(
        missing.is_empty(),
        "dashboard queries whose data is not as expected (EXPECTED_EMPTY lists the ones without):\n{}",
        missing.join("\n")
    );
    // Every rule's expression: no error; the alerts all silent in the healthy lab.
    let mut firing = Vec::new();
    for rule in rules() {
        let result = api.query(&rule.expr).await;
        if rule.alert && !result.is_empty() {
            firing.push(format!("{}: {result:?}", rule.name));
        }
        report.push(format!(
            "  {:<9}  {:>2} series  {}",
            if rule.alert { "alert" } else { "record" },
            result.len(),
            rule.name
        ));
    }
    assert!(firing.is_empty(), "alerts in the healthy lab: {firing:?}");
    // Prometheus evaluated every rule itself, without an error.
    let loaded = api.json("/api/v1/rules").await;
    let evaluated: Vec<&Value> = loaded["data"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(evaluated.len(), rules().len());
    for rule in &evaluated {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
    // Prometheus' alert states are those of its last evaluation (every second), which may
    // precede the last scrapes: the drift story's own drift made NodeConfigurationDrift
    // pending while it lasted. Once evaluated on the scrapes after the stories, none stays.
    eventually(
        "no alert pending or firing once the rules see the ended stories",
        Duration::from_secs(10),
        async || {
            let active = api.json("/api/v1/alerts").await;
            let alerts = active["data"]["alerts"].clone();
            (alerts == Value::Array(Vec::new()))
                .then_some(())
                .ok_or(alerts)
        },
    )
    .await;

    for (_, _, child) in &mut running {
        child.kill().await.unwrap();
    }
    prometheus.kill().await.unwrap();
    println!(
        "live Prometheus: {} dashboard queries ({} with no number, as expected) and {} rule expressions evaluated without an error; {} exported metrics all with data; {} rules healthy, no alert active; the fenced host's power series present at all {remediating} instants (1 s apart) of its remediation and showing it off\n{}",
        queries.len(),
        EXPECTED_EMPTY.len(),
        rules().len(),
        exported_metrics().len(),
        evaluated.len(),
        report.join("\n")
    );
}
