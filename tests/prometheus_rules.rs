//! The alerts and the recording rule of deploy/components/monitoring/prometheusrule.yaml, checked by Prometheus's own
//! tool (Debian's `prometheus` package, which `scripts/test.sh` installs): `promtool check
//! rules` on the PrometheusRule's groups, and `promtool test rules` on the unit tests in
//! tests/promtool/, where every alert has a case that must fire and one that must stay silent
//! and the recording rule one that records a value and one that records nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::Value;

use baremend_testkit as common;

use common::prometheus::{promtool, rules, write_rules};
use common::{repo_root, scratch};

fn run(args: &[&str], files: &[PathBuf], dir: &Path) -> Output {
    Command::new(promtool())
        .args(args)
        .args(files)
        .current_dir(dir)
        .output()
        .expect("promtool runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The unit-test files of tests/promtool/, copied beside `dir/rules.yaml` (promtool reads
/// `rule_files` relative to each test file), with their parsed content.
fn unit_tests(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("tests/promtool"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
        .into_iter()
        .map(|source| {
            let copy = dir.join(source.file_name().unwrap());
            std::fs::copy(&source, &copy).unwrap();
            let text = std::fs::read_to_string(&source).unwrap();
            let parsed = Value::deserialize(serde_yaml::Deserializer::from_str(&text)).unwrap();
            (copy, parsed)
        })
        .collect()
}

#[test]
fn promtool_checks_every_rule_of_the_prometheus_rule() {
    let dir = scratch("promtool-check");
    let file = write_rules(&dir);
    let output = run(&["check", "rules"], &[file], &dir);
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    let count = rules().len();
    assert!(
        said.contains(&format!("SUCCESS: {count} rules found")),
        "{count} rules expected:\n{said}"
    );
    println!("promtool check rules: {}", said.trim().replace('\n', " "));
}

/// Which way each case of each rule goes: (fires, stays silent) counts per rule name.
fn cases(tests: &[(PathBuf, Value)]) -> (BTreeMap<String, (usize, usize)>, usize) {
    let mut by_rule: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut groups = 0;
    let records: Vec<String> = rules()
        .into_iter()
        .filter(|r| !r.alert)
        .map(|r| r.name)
        .collect();
    for (_, file) in tests {
        for test in file["tests"].as_array().unwrap() {
            groups += 1;
            for case in test["alert_rule_test"].as_array().into_iter().flatten() {
                let alert = case["alertname"].as_str().unwrap().to_string();
                let fires = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
                let entry = by_rule.entry(alert).or_default();
                if fires { entry.0 += 1 } else { entry.1 += 1 }
            }
            for case in test["promql_expr_test"].as_array().into_iter().flatten() {
                let expr = case["expr"].as_str().unwrap();
                let Some(record) = records.iter().find(|r| expr.contains(r.as_str())) else {
                    continue;
                };
                let records_a_value = case["exp_samples"]
                    .as_array()
                    .is_some_and(|s| !s.is_empty());
                let entry = by_rule.entry(record.clone()).or_default();
                if records_a_value {
                    entry.0 += 1
                } else {
                    entry.1 += 1
                }
            }
        }
    }
    (by_rule, groups)
}

#[test]
fn promtool_unit_tests_pass_with_a_firing_and_a_silent_case_for_every_rule() {
    let dir = scratch("promtool-test");
    write_rules(&dir);
    let tests = unit_tests(&dir);
    let files: Vec<PathBuf> = tests.iter().map(|(path, _)| path.clone()).collect();
    let output = run(&["test", "rules"], &files, &dir);
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert_eq!(said.matches("SUCCESS").count(), files.len(), "{said}");

    let (by_rule, groups) = cases(&tests);
    let mut missing = Vec::new();
    for rule in rules() {
        let (fires, silent) = by_rule.get(&rule.name).copied().unwrap_or_default();
        if fires == 0 || silent == 0 {
            missing.push(format!("{} ({fires} firing, {silent} silent)", rule.name));
        }
    }
    assert!(
        missing.is_empty(),
        "rules without a case each way: {missing:?}"
    );
    let unknown: Vec<&String> = by_rule
        .keys()
        .filter(|name| !rules().iter().any(|r| &r.name == *name))
        .collect();
    assert!(unknown.is_empty(), "cases of no rule: {unknown:?}");
    let (fire, silent) = by_rule
        .values()
        .fold((0, 0), |(f, s), (a, b)| (f + a, s + b));
    let alerts = rules().iter().filter(|r| r.alert).count();
    println!(
        "promtool test rules: {} files, {groups} test groups, {} cases ({fire} firing or recording, {silent} silent) over {alerts} alerts and {} recording rule(s): all pass",
        files.len(),
        fire + silent,
        rules().len() - alerts
    );
}

#[test]
fn promtool_fails_a_unit_test_whose_expectation_is_wrong() {
    // The negative control: in each file, the first case that expects an alert is made to
    // expect none. promtool must fail and name that alert, or its passes would prove nothing.
    let dir = scratch("promtool-wrong");
    write_rules(&dir);
    for (path, mut file) in unit_tests(&dir) {
        let case = file["tests"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .flat_map(|test| test["alert_rule_test"].as_array_mut().into_iter().flatten())
            .find(|case| case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
            .unwrap_or_else(|| panic!("{} has no firing case", path.display()));
        case["exp_alerts"] = Value::Array(Vec::new());
        let alert = case["alertname"].as_str().unwrap().to_string();
        std::fs::write(&path, serde_yaml::to_string(&file).unwrap()).unwrap();
        let output = run(&["test", "rules"], std::slice::from_ref(&path), &dir);
        let said = text(&output);
        assert!(!output.status.success(), "{}: {said}", path.display());
        assert!(
            said.contains("FAILED") && said.contains(&alert),
            "{}: {said}",
            path.display()
        );
    }
}

/// The anchors GitHub makes of the headings of a Markdown file: lower case, spaces to `-`,
/// other punctuation dropped.
fn anchors(markdown: &str) -> std::collections::BTreeSet<String> {
    markdown
        .lines()
        .filter_map(|l| {
            l.strip_prefix('#')
                .map(|h| h.trim_start_matches('#').trim())
        })
        .map(|heading| {
            heading
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn every_alert_has_a_description_and_a_runbook_url_to_its_own_section_of_the_runbook() {
    use baremend::status::{RUNBOOK_URL, runbook_anchor};
    let runbook = std::fs::read_to_string(repo_root().join("docs/guides/runbook.md")).unwrap();
    let anchors = anchors(&runbook);
    let rule = common::prometheus::prometheus_rule();
    let mut alerts = 0;
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            alerts += 1;
            let annotations = &rule["annotations"];
            for key in ["summary", "description"] {
                assert!(
                    annotations[key]
                        .as_str()
                        .is_some_and(|t| !t.trim().is_empty()),
                    "{alert} has no {key}"
                );
            }
            let url = annotations["runbook_url"]
                .as_str()
                .unwrap_or_else(|| panic!("{alert} has no runbook_url"));
            let (base, anchor) = url.split_once('#').expect("an anchor");
            assert_eq!(base, RUNBOOK_URL, "{alert}");
            assert_eq!(anchor, runbook_anchor(alert), "{alert}: its own section");
            assert!(
                anchors.contains(anchor),
                "docs/guides/runbook.md has no section {anchor}"
            );
        }
    }
    assert!(alerts >= 16, "{alerts} alerts");
    // Links inside the runbook land on its own sections.
    for (at, _) in runbook.match_indices("](#") {
        let anchor = &runbook[at + 3..];
        let anchor = &anchor[..anchor.find(')').unwrap()];
        assert!(
            anchors.contains(anchor),
            "a link to #{anchor}, which is no section"
        );
    }
}

#[test]
fn every_failure_reason_in_the_code_has_a_section_of_the_runbook() {
    use baremend::status::runbook_anchor;
    let runbook = std::fs::read_to_string(repo_root().join("docs/guides/runbook.md")).unwrap();
    let anchors = anchors(&runbook);
    let reasons: Vec<&str> = baremend::remediation::decide::plan::FailReason::labels()
        .into_iter()
        .chain(baremend::drift::plan::FailReason::reasons())
        .chain(
            baremend::remediation::decide::readiness::Reason::ALL
                .iter()
                .map(|r| r.as_str()),
        )
        // What `baremend status` points at besides the reasons.
        .chain([
            "Escalated",
            "held starts",
            "failed remediations",
            "drift remediation failures",
        ])
        .collect();
    let missing: Vec<&&str> = reasons
        .iter()
        .filter(|r| !anchors.contains(&runbook_anchor(&r.replace(' ', "-"))))
        .collect();
    assert!(missing.is_empty(), "no runbook section for {missing:?}");
    println!(
        "docs/guides/runbook.md: {} sections, {} reasons each with one",
        anchors.len(),
        reasons.len()
    );
}
