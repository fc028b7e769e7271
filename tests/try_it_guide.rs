//! docs/guides/try-it.md, run from the Markdown: every `bash` block of the page, in order, as
//! one script (`bash -e`), from the repository root, with the built `baremend` and
//! `baremend-sim` and the pinned kubectl on `PATH` — what a new user types. It must end well
//! within five minutes, with the dry run and the remediation the page promises.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use baremend_testkit as common;

use common::kubectl::binaries;

/// The page's `bash` blocks, in order, as one script.
fn script() -> String {
    let page = std::fs::read_to_string(common::repo_root().join("docs/guides/try-it.md")).unwrap();
    let blocks = common::fenced_blocks(&page, "bash");
    assert!(blocks.len() >= 6, "{} blocks", blocks.len());
    blocks.join("\n")
}

/// Where cargo put the workspace's binaries (beside this package's `baremend`).
fn binaries_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_baremend"))
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(
        dir.join("baremend-sim").exists(),
        "{} has no baremend-sim: build the workspace (cargo build --workspace)",
        dir.display()
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_try_it_guide_runs_as_written() {
    let kubectl = binaries().kubectl();
    let path = format!(
        "{}:{}:{}",
        binaries_dir().display(),
        kubectl.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut run = tokio::process::Command::new("bash");
    run.arg("-ec")
        .arg(script())
        .current_dir(common::repo_root())
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // The page's trap stops what it started when the script ends; in this test's process
        // group, the test runner's own stop reaches them too.
        .kill_on_drop(true);
    let child = run.spawn().expect("bash runs");
    let output = tokio::time::timeout(Duration::from_secs(200), child.wait_with_output()).await;
    let output = output.expect("the guide ends within five minutes").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    // What the page shows: the dry run's record, then the remediation's success.
    assert!(stdout.contains("condition met"), "{stdout}");
    assert!(stdout.contains("would"), "the dry run's record: {stdout}");
    // The last listing of worker-1-1 (the first is the wait's, as it starts).
    let listed = stdout
        .lines()
        .rfind(|l| l.starts_with("worker-1-1 "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(listed.contains("Succeeded"), "{listed}");
    // Its Events, as the page lists them: fenced, then succeeded.
    for reason in ["Fenced", "Succeeded"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("Normal") && l.contains(reason)),
            "no {reason} Event: {stdout}"
        );
    }
}
