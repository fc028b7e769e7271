//! `baremend check` and `baremend run` on a cluster without baremend's CustomResourceDefinitions
//! say what is missing and the command that installs it — on our API server and on the real
//! one (whose answer for a group it does not serve is a plain `404 page not found`).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use baremend_testkit as common;
use baremend_testkit::on_both_servers;

use common::servers::{Server, ServerKind};

/// The fix both commands name.
const FIX: &str = "kubectl apply -f crds/";

/// A bare API server of `kind` and its administrator's kubeconfig, written to a file.
async fn bare(kind: ServerKind) -> (Server, std::path::PathBuf) {
    let server = Server::start(kind).await;
    let dir = common::scratch("not-installed");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, server.admin_kubeconfig()).unwrap();
    (server, kubeconfig)
}

async fn check_says_the_crds_are_missing_and_how_to_install_them(kind: ServerKind) {
    let (_server, kubeconfig) = bare(kind).await;
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_baremend"))
        .arg("check")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "check passed without the CRDs");
    assert!(
        stderr.contains("CustomResourceDefinitions are not installed") && stderr.contains(FIX),
        "{stderr}"
    );
    assert!(!stderr.contains("404"), "a raw 404: {stderr}");
}

async fn run_says_at_its_default_level_what_it_waits_for(kind: ServerKind) {
    let (_server, kubeconfig) = bare(kind).await;
    let mut child = common::real::run_command(&kubeconfig, "not-installed")
        .env_remove("RUST_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut log = Vec::new();
    let said = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buffer = [0u8; 4096];
        loop {
            let n = stderr.read(&mut buffer).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            log.extend_from_slice(&buffer[..n]);
            if String::from_utf8_lossy(&log).contains(FIX) {
                return true;
            }
        }
    })
    .await
    .unwrap_or(false);
    let text = String::from_utf8_lossy(&log).into_owned();
    assert!(said, "run did not say what to install:\n{text}");
    assert!(text.contains("ERROR"), "{text}");
    assert!(
        child.try_wait().unwrap().is_none(),
        "run exited instead of waiting:\n{text}"
    );
    let _ = child.kill().await;
}

on_both_servers!(
    check_says_the_crds_are_missing_and_how_to_install_them,
    run_says_at_its_default_level_what_it_waits_for,
);
