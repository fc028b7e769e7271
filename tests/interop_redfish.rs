//! Fidelity against real third-party Redfish software:
//! - the DMTF Redfish Service Validator walks our simulator (0 FAIL required);
//! - the DMTF Redfish Protocol Validator checks the HTTP protocol of the simulator over HTTPS
//!   (0 FAIL required, and every ETag assertion must pass rather than go untested);
//! - sushy, the client Ironic and metal3 use, powers a simulated system off and on with session
//!   authentication and refuses reset types we do not advertise;
//! - our driver and `baremend bmc` power systems of the sushy-tools emulator.
//!
//! The tools come from the venv that `scripts/test.sh` builds; a missing one fails the test
//! with the install command.

use baremend_testkit as common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use baremend_drivers::{
    BmcAddress, Connector, CredentialUsed, Credentials, DriverConfig, PowerOffMode, PowerState,
    RetryPolicy, TlsOptions, WaitOptions, retry, wait_for_power_state,
};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode};
use common::{baremend, eventually, free_port, repo_root, scratch, texts, venv_tool};

/// The Redfish CSDL bundled in the `nv-redfish-schema` crate: the validator's offline schemas.
fn csdl_dir() -> PathBuf {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(repo_root().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata JSON");
    let manifest = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "nv-redfish-schema")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("nv-redfish-schema is a dev-dependency; run `cargo fetch`");
    let dir = PathBuf::from(manifest)
        .parent()
        .unwrap()
        .join("redfish-csdl/csdl");
    assert!(
        dir.join("ServiceRoot_v1.xml").exists(),
        "no CSDL in {}",
        dir.display()
    );
    dir
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A DMTF validator from the venv, pointed at `base_url` and at no configuration file.
fn validator_command(tool: &str, base_url: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(venv_tool(tool));
    command.args(["--config", "/nonexistent/config.ini", "--rhost", base_url]);
    command
}

/// Runs a validator in `dir` (its working folder) to the end: its exit status, its output
/// without colour codes, and its error output.
async fn run_validator(
    mut command: tokio::process::Command,
    dir: &Path,
) -> (std::process::ExitStatus, String, String) {
    let output = command
        .current_dir(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the validator runs");
    (
        output.status,
        strip_ansi(&String::from_utf8_lossy(&output.stdout)),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// PASS, WARN, FAIL, NOT TESTED from the validator's closing table.
fn validator_summary(stdout: &str) -> Option<[u64; 4]> {
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.contains("PASS") && l.contains("FAIL") && l.contains("NOT TESTED"))?;
    let counts: Vec<u64> = lines
        .get(header + 2)?
        .split('|')
        .filter_map(|cell| cell.trim().parse().ok())
        .collect();
    counts.try_into().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dmtf_service_validator_finds_no_failure_in_the_simulator() {
    let csdl = csdl_dir();
    let sim = RedfishSim::start(RedfishSimConfig {
        systems: 2,
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap();
    let logs = scratch("rsv");
    let mut command = validator_command("rf_service_validator", sim.base_url());
    command
        .args([
            "-u",
            "admin",
            "-p",
            "password",
            "--authtype",
            "Session",
            "--skipschema",
        ])
        .arg("--schema_directory")
        .arg(&csdl)
        .arg("--logdir")
        .arg(&logs);
    let (status, stdout, stderr) = run_validator(command, &logs).await;
    let [pass, warn, fail, not_tested] = validator_summary(&stdout)
        .unwrap_or_else(|| panic!("no summary table from the validator:\n{stdout}\n{stderr}"));
    println!(
        "Redfish Service Validator: PASS {pass}, WARN {warn}, FAIL {fail}, NOT TESTED {not_tested}"
    );
    assert_eq!(fail, 0, "validator failures:\n{stdout}");
    assert!(
        pass >= 150,
        "suspiciously few checks passed ({pass}):\n{stdout}"
    );
    assert!(
        status.success(),
        "validator exit {status:?}:\n{stdout}\n{stderr}"
    );
    // Cross-check with the per-resource lines, in case the table format changes.
    let per_resource_failures: u64 = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- Pass:"))
        .filter_map(|l| {
            l.split("Fail:")
                .nth(1)?
                .split(',')
                .next()?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert_eq!(per_resource_failures, 0);
    assert!(
        stdout.contains("Validating /redfish/v1/Systems/2/ResetActionInfo"),
        "{stdout}"
    );
}

/// The assertions of the protocol validator about ETags and conditional requests; each must
/// have been tested, and passed, on every row that names it.
const ETAG_ASSERTIONS: &[&str] = &[
    "PROTO_ETAG_ON_GET_ACCOUNT",
    "PROTO_ETAG_RFC7232",
    "RESP_HEADERS_ETAG",
    "PROTO_ETAG_HEADER_AND_PROPERTY",
    "PROTO_ETAG_STABLE_WITHOUT_MODIFICATION",
    "PROTO_ETAG_CONDITIONAL_GET",
    "PROTO_ETAG_IF_MATCH_ENFORCED",
    "PROTO_ETAG_412_WRITE_NOT_APPLIED",
    "PROTO_ETAG_LOST_UPDATE",
    "PROTO_ETAG_ROTATES_ON_WRITE",
    "SEC_ACCOUNTS_SUPPORT_ETAGS",
    "REQ_HEADERS_IF_MATCH",
];

/// PASS, WARN, FAIL, NOT_TESTED from the protocol validator's `Summary - PASS: …` line.
fn protocol_summary(stdout: &str) -> Option<[u64; 4]> {
    let line = stdout.lines().find(|l| l.starts_with("Summary - PASS:"))?;
    let counts: Vec<u64> = ["PASS:", "WARN:", "FAIL:", "NOT_TESTED:"]
        .iter()
        .filter_map(|key| {
            let rest = line.split(key).nth(1)?;
            rest.trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect();
    counts.try_into().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dmtf_protocol_validator_finds_no_failure_and_tests_every_etag_rule() {
    let sim = RedfishSim::start(RedfishSimConfig {
        systems: 2,
        tls: TlsMode::SelfSigned,
        ..RedfishSimConfig::default()
    })
    .await
    .unwrap();
    let dir = scratch("rpv");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, sim.self_signed_cert_pem().unwrap()).unwrap();
    let reports = dir.join("reports");
    let mut command = validator_command("rf_protocol_validator", sim.base_url());
    command
        .args(["-u", "admin", "-p", "password", "--report-type", "tsv"])
        .arg("--avoid-http-redirect")
        .arg("--ca-bundle")
        .arg(&ca)
        .arg("--report-dir")
        .arg(&reports)
        // requests prefers these variables over the CA bundle given on the command line.
        .env_remove("REQUESTS_CA_BUNDLE")
        .env_remove("CURL_CA_BUNDLE");
    let (status, stdout, stderr) = run_validator(command, &dir).await;
    let [pass, warn, fail, not_tested] = protocol_summary(&stdout)
        .unwrap_or_else(|| panic!("no summary from the protocol validator:\n{stdout}\n{stderr}"));
    println!(
        "Redfish Protocol Validator: PASS {pass}, WARN {warn}, FAIL {fail}, NOT_TESTED {not_tested}"
    );
    let report = std::fs::read_dir(&reports)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "tsv"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap_or_else(|| panic!("no TSV report in {}", reports.display()));
    // Assertion, Method, Status code, URI, Result, Message, Requirement
    let rows: Vec<Vec<&str>> = report
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .filter(|cells: &Vec<&str>| cells.len() >= 6)
        .collect();
    let failures: Vec<String> = rows
        .iter()
        .filter(|r| r[4] == "FAIL")
        .map(|r| format!("{} {} {}: {}", r[0], r[1], r[3], r[5]))
        .collect();
    assert_eq!(
        fail,
        0,
        "protocol validator failures:\n{}",
        failures.join("\n")
    );
    assert!(failures.is_empty(), "{failures:?}");
    for assertion in ETAG_ASSERTIONS {
        let results: Vec<(&str, &str)> = rows
            .iter()
            .filter(|r| r[0] == *assertion)
            .map(|r| (r[4], r[5]))
            .collect();
        assert!(!results.is_empty(), "{assertion} is not in the report");
        assert!(
            results.iter().all(|(result, _)| *result == "PASS"),
            "{assertion}: {results:?}"
        );
    }
    assert!(pass >= 250, "suspiciously few checks passed ({pass})");
    assert!(
        status.success(),
        "validator exit {status:?}:\n{stdout}\n{stderr}"
    );
    // The validator created and deleted its own accounts: only the administrator is left.
    let accounts = sim.service().accounts();
    assert_eq!(accounts.len(), 1, "{accounts:?}");
}

async fn run_sushy(sim: &RedfishSim, ca_file: Option<&PathBuf>) {
    let python = venv_tool("python");
    let mut command = tokio::process::Command::new(python);
    command
        .arg(repo_root().join("scripts/interop/sushy_power.py"))
        .args([sim.base_url(), "1", "admin", "password"])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(ca) = ca_file {
        command.arg(ca);
    }
    let output = command.output().await.expect("sushy runs");
    let (out, err) = texts(&output);
    assert!(
        output.status.success() && out.contains("SUSHY OK"),
        "sushy failed:\n{out}\n{err}"
    );
    let stats = sim.service().stats();
    // Only what sushy was asked for reached the BMC: the refused reset types never did.
    let resets: Vec<&str> = stats.resets.iter().map(|r| r.reset_type.as_str()).collect();
    assert_eq!(resets, ["On", "ForceOff"], "{resets:?}");
    assert!(stats.sessions_created >= 1);
    assert_eq!(stats.open_sessions, 0, "sushy deleted its session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_powers_a_simulated_system_with_a_session_and_refuses_unadvertised_resets() {
    let config = RedfishSimConfig {
        power_delay: Duration::from_millis(300),
        ..RedfishSimConfig::default()
    };
    let plain = RedfishSim::start(config.clone()).await.unwrap();
    run_sushy(&plain, None).await;

    let tls = RedfishSim::start(RedfishSimConfig {
        tls: TlsMode::SelfSigned,
        ..config
    })
    .await
    .unwrap();
    let ca = scratch("sushy-tls").join("ca.pem");
    std::fs::write(&ca, tls.self_signed_cert_pem().unwrap()).unwrap();
    run_sushy(&tls, Some(&ca)).await;
}

/// node-0 starts Off, node-1 On (see scripts/interop/sushy_emulator.sh).
const SUSHY_NODE_0: &str = "27946b59-9e44-4fa7-8e91-f3527a1ef094";
const SUSHY_NODE_1: &str = "48295861-2522-3561-6729-621118518810";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_driver_and_baremend_bmc_power_systems_of_the_sushy_tools_emulator() {
    venv_tool("sushy-emulator");
    let port = free_port();
    let state = scratch("sushy-tools");
    let log = std::fs::File::create(state.join("emulator.log")).unwrap();
    let mut emulator = tokio::process::Command::new("bash")
        .arg(repo_root().join("scripts/interop/sushy_emulator.sh"))
        .arg(&state)
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("the sushy-tools emulator starts");
    eventually(
        &format!("sushy-emulator to listen on {port}"),
        Duration::from_secs(30),
        async || match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(_) => Ok(()),
            Err(error) => Err(format!(
                "{error}; its log:\n{}",
                std::fs::read_to_string(state.join("emulator.log")).unwrap_or_default()
            )),
        },
    )
    .await;
    let address = |uuid: &str| format!("redfish+http://127.0.0.1:{port}/redfish/v1/Systems/{uuid}");

    // The emulator applies a power change 1-11 s after the reset, at random.
    let driver_story = async {
        let config = DriverConfig::new(
            BmcAddress::parse(&address(SUSHY_NODE_1)).unwrap(),
            Credentials::new("admin", "password"),
            TlsOptions::default(),
        );
        let driver = Connector::new().connect(config).unwrap();
        let wait = WaitOptions {
            timeout: Duration::from_secs(40),
            initial_interval: Duration::from_millis(250),
            max_interval: Duration::from_secs(1),
            consecutive_reads: 2,
        };
        // sushy-tools keeps its state in SQLite: with the CLI story running beside this one it
        // answers "database is locked" (500) now and then, as a loaded BMC answers 5xx. A
        // real client retries those; so does this story, with the drivers' own retry.
        let policy = RetryPolicy::default();
        let deadline = Some(tokio::time::Instant::now() + Duration::from_secs(60));
        let bmc = address(SUSHY_NODE_1);
        let state = retry(&policy, deadline, &bmc, "GET system", || {
            driver.power_state()
        });
        assert_eq!(state.await.unwrap(), PowerState::On);
        let probe = retry(&policy, deadline, &bmc, "probe", || driver.probe());
        assert_eq!(
            probe.await.unwrap().authentication,
            "basic",
            "sushy-tools has no session service"
        );
        retry(&policy, deadline, &bmc, "power off", || {
            driver.power_off(PowerOffMode::Forced)
        })
        .await
        .unwrap();
        wait_for_power_state(driver.as_ref(), &PowerState::Off, &wait, |_| {})
            .await
            .unwrap();
        retry(&policy, deadline, &bmc, "power on", || driver.power_on())
            .await
            .unwrap();
        wait_for_power_state(driver.as_ref(), &PowerState::On, &wait, |_| {})
            .await
            .unwrap();
        driver.close().await.unwrap();
        // A rotation against sushy-tools' Basic auth (its htpasswd has `password`): the new
        // password is refused with a 401, the previous one accepted.
        let rotating = DriverConfig::new(
            BmcAddress::parse(&address(SUSHY_NODE_1)).unwrap(),
            Credentials::new("admin", "the-new-password").with_previous("password"),
            TlsOptions::default(),
        );
        let rotating = Connector::new().connect(rotating).unwrap();
        let state = retry(&policy, deadline, &bmc, "GET system", || {
            rotating.power_state()
        });
        assert_eq!(state.await.unwrap(), PowerState::On);
        assert_eq!(rotating.credential_used(), Some(CredentialUsed::Previous));
    };
    let cli_story = async {
        let node0 = address(SUSHY_NODE_0);
        let base = [
            "bmc",
            "--address",
            node0.as_str(),
            "--username",
            "admin",
            "--timeout",
            "40s",
        ];
        let status = baremend(&[&base[..], &["status"]].concat(), Some("password")).await;
        assert!(status.status.success(), "{:?}", texts(&status));
        assert_eq!(texts(&status).0.trim(), "Off");
        let on = baremend(&[&base[..], &["on"]].concat(), Some("password")).await;
        assert!(
            on.status.success() && texts(&on).0.contains("On confirmed"),
            "{:?}",
            texts(&on)
        );
        let off = baremend(&[&base[..], &["off"]].concat(), Some("password")).await;
        assert!(
            off.status.success() && texts(&off).0.contains("Off confirmed"),
            "{:?}",
            texts(&off)
        );
        let probe = baremend(&[&base[..], &["probe"]].concat(), Some("password")).await;
        let (out, err) = texts(&probe);
        assert!(
            probe.status.success() && out.contains("ForceOff"),
            "{out}\n{err}"
        );
        let wrong = baremend(&[&base[..], &["status"]].concat(), Some("wrong")).await;
        assert!(
            !wrong.status.success() && texts(&wrong).1.contains("refused the credentials"),
            "{:?}",
            texts(&wrong)
        );
    };
    tokio::join!(driver_story, cli_story);
    let _ = emulator.kill().await;
}
