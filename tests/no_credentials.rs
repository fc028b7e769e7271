//! Credentials and session tokens appear nowhere an operator or an attacker could read them:
//! a full remediation over Redfish (login, session, power off and on, logout) and a failed
//! one with a wrong password, both during a password rotation (the Secrets hold a
//! `previousPassword`), then two dry runs whose probes log in and fail to, with every log
//! line captured at debug level; then the logs,
//! Events, metrics, object status and errors are searched for the password, its base64 forms
//! and every session token the BMC issued. One test per binary: it owns the global logger.

use std::io::Write;
use std::sync::{Arc, Mutex};

use baremend::api::RemediationPhase;
use baremend::remediation::controller::ControllerOptions;
use baremend_sim::cluster::ClusterSpec;
use baremend_sim::cluster::local::{BMHS, EVENTS, Gvr, MACHINES, NODES};
use baremend_sim::cluster::timing::Timing;
use base64::Engine;
use serde_json::json;

use baremend_testkit as common;

use common::lab::{Lab, patch_policy};

const PASSWORD: &str = "Sw0rdfish-7c41e9-recognizable";
const WRONG: &str = "Wr0ngfish-0b8d2a-recognizable";
const WRONG_PREVIOUS: &str = "Wr0ngPrev-5d17c3-recognizable";
const NEW: &str = "N3wfish-91ac2e-recognizable";

/// A log sink the test can read back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_or_session_token_in_logs_events_metrics_status_or_errors() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();

    let spec = ClusterSpec {
        timing: Timing::fast(),
        bmc_password: PASSWORD.into(),
        // worker-1 is triggered by hand and worker-0 hangs: two of three workers, which the
        // MachineHealthCheck counts as unhealthy together (annotated Machines count, as in
        // machine-api-operator) and would short-circuit on at its default limit.
        max_unhealthy: "100%".into(),
        ..ClusterSpec::default()
    };
    let policy = json!({"strategies": ["DirectBmc"], "timeouts": {"readyGraceSeconds": 0, "powerOffSeconds": 5}});
    let mut lab = Lab::builder(spec).policy(policy).start().await;
    let api = lab.api.clone();
    for host in ["worker-0", "worker-1", "worker-2"] {
        lab.detach(host);
    }
    // worker-1's Secret holds two wrong passwords: its login fails, and the error must say
    // neither. worker-0's was rotated before its BMC: the new password is refused, the
    // previous one (the BMC's) works. worker-2's holds one wrong password: its dry run's
    // probe fails to log in.
    lab.bmc_password("worker-1", WRONG, Some(WRONG_PREVIOUS));
    lab.bmc_password("worker-0", NEW, Some(PASSWORD));
    lab.bmc_password("worker-2", WRONG, None);

    lab.start_controller(ControllerOptions {
        instance: "leak-test".into(),
        ..lab.options()
    });
    lab.cluster.hang("worker-0");
    lab.trigger("worker-1", true);
    let done = lab.ended("worker-0-1").await;
    let failed = lab.ended("worker-1-1").await;
    // Then dry runs, whose probes log in (worker-0) or fail to (worker-2).
    // Only once the controller reads DryRun: a stale cache would fence worker-0 for real.
    let dry_run =
        json!({"mode": "DryRun", "maxConcurrent": 2, "storm": {"maxUnhealthyPercent": 100}});
    patch_policy(&lab, dry_run).await;
    lab.trigger("worker-0", true);
    lab.trigger("worker-2", true);
    let probed = lab.reach("worker-0-2", RemediationPhase::DryRun).await;
    let refused = lab.reach("worker-2-1", RemediationPhase::DryRun).await;
    lab.kill().await;
    let reason = |r: &baremend::api::Remediation| {
        let status = r.status.as_ref().unwrap();
        let dry = status.conditions.iter().find(|c| c.type_ == "DryRun");
        dry.map(|c| c.reason.clone()).unwrap_or_default()
    };
    assert_eq!(reason(&probed), "WouldFence", "{:?}", probed.status);
    assert_eq!(reason(&refused), "ProbeFailed", "{:?}", refused.status);
    assert_eq!(
        done.status.as_ref().map(|s| s.phase),
        Some(RemediationPhase::Succeeded),
        "{:?}",
        done.status
    );
    assert_eq!(
        failed.status.as_ref().map(|s| s.phase),
        Some(RemediationPhase::Failed)
    );
    let tokens = lab.cluster.redfish().service().issued_tokens();
    assert!(
        !tokens.is_empty(),
        "the remediation logged in with a session"
    );

    let listed = |gvr: Gvr| serde_json::to_string(&api.list(gvr, None)).unwrap();
    let places = [
        ("logs", logs.text()),
        ("Events", listed(EVENTS)),
        ("metrics", lab.metrics.encode()),
        ("Remediations", listed(common::lab::REMEDIATIONS)),
        ("Machines", listed(MACHINES)),
        ("BareMetalHosts", listed(BMHS)),
        ("Nodes", listed(NODES)),
        (
            "errors",
            format!(
                "{:?} {:?} {:?} {:?}",
                done.status, failed.status, probed.status, refused.status
            ),
        ),
    ];
    assert!(
        places[0].1.contains("worker-0"),
        "the logs were captured at debug level"
    );
    let error = failed
        .status
        .as_ref()
        .and_then(|s| s.last_error.clone())
        .unwrap_or_default();
    assert!(
        error.contains("both passwords"),
        "the failure says why: {error}"
    );
    assert!(
        places[1].1.contains("BmcPreviousPasswordUsed"),
        "worker-0 was fenced with its previous password"
    );

    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let mut secrets: Vec<(String, String)> = vec![
        ("the password".into(), PASSWORD.into()),
        ("the wrong password".into(), WRONG.into()),
        ("the password in base64".into(), b64(PASSWORD)),
        ("the wrong password in base64".into(), b64(WRONG)),
        ("the wrong previous password".into(), WRONG_PREVIOUS.into()),
        (
            "the wrong previous password in base64".into(),
            b64(WRONG_PREVIOUS),
        ),
        ("the new password".into(), NEW.into()),
        ("the new password in base64".into(), b64(NEW)),
    ];
    for user in ["admin", "root", baremend_sim::cluster::BMC_USERNAME] {
        secrets.push((
            format!("Basic credentials of {user}"),
            b64(&format!("{user}:{PASSWORD}")),
        ));
    }
    for (index, token) in tokens.iter().enumerate() {
        secrets.push((format!("session token {index}"), token.clone()));
    }
    for (place, text) in &places {
        for (what, secret) in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{what} appears in the {place}"
            );
        }
    }
}
