//! Helpers shared by the end-to-end tests: waiting on a condition, the lab, Prometheus, the
//! Python tools venv, free ports, scratch folders and running the `baremend` binary. A test
//! names it `common` (`use baremend_testkit as common;`).

pub mod drift;
pub mod events;
pub mod helper_policy;
pub mod kubectl;
pub mod lab;
pub mod leader;
pub mod prometheus;
pub mod rbac;
pub mod real;
pub mod remediation;
pub mod servers;
mod wait;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

pub use wait::eventually;

/// The repository root (the kit's folder is one below it).
pub fn repo_root() -> PathBuf {
    let kit = Path::new(env!("CARGO_MANIFEST_DIR"));
    kit.parent()
        .expect("the kit is in the repository")
        .to_path_buf()
}

/// The folder of the running test binary's profile (`target/debug`): the test binaries are in
/// its `deps/`, the crate's binaries beside them.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test binary under target/<profile>/deps")
        .to_path_buf()
}

/// The `baremend` binary cargo built for these tests (what `CARGO_BIN_EXE_baremend` names
/// to an integration test).
pub fn baremend_bin() -> PathBuf {
    let bin = profile_dir().join("baremend");
    assert!(
        bin.exists(),
        "{} is missing: run the tests through cargo (cargo nextest run, cargo test), which \
         builds it",
        bin.display()
    );
    bin
}

/// The virtualenv that `scripts/test.sh` builds with the interop tools; a missing one fails the
/// test with the command that installs it.
pub fn venv() -> PathBuf {
    let venv = std::env::var_os("BAREMEND_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/venv"));
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "the interop tools are not installed ({} is missing).\n\
         Install them with `bash scripts/test.sh` (it builds the venv), or by hand:\n  \
         python3 -m venv target/venv && target/venv/bin/pip install -r scripts/requirements-interop.txt",
        python.display()
    );
    venv
}

/// A tool from the venv, checked to exist.
pub fn venv_tool(name: &str) -> PathBuf {
    let tool = venv().join("bin").join(name);
    assert!(
        tool.exists(),
        "{} is missing from the venv; reinstall with: target/venv/bin/pip install -r scripts/requirements-interop.txt",
        tool.display()
    );
    tool
}

/// A fresh scratch folder under cargo's per-test temporary directory.
pub fn scratch(name: &str) -> PathBuf {
    let unique = format!(
        "{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    // cargo's per-test temporary directory (`CARGO_TARGET_TMPDIR`): `target/tmp`.
    let tmp = profile_dir()
        .parent()
        .map(|target| target.join("tmp"))
        .expect("a profile folder under target/");
    let dir = tmp.join(unique);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// A TCP port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs the `baremend` binary with a password in `BMC_PASSWORD`.
pub async fn baremend(args: &[&str], password: Option<&str>) -> Output {
    let mut command = tokio::process::Command::new(baremend_bin());
    command
        .args(args)
        .env_remove("BMC_PASSWORD")
        .kill_on_drop(true);
    if let Some(password) = password {
        command.env("BMC_PASSWORD", password);
    }
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("baremend finishes within 120 s")
        .expect("baremend runs")
}

/// stdout and stderr of a finished process, for assertions and failure messages.
pub fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The path of a program from a Debian package; a missing one fails the test with the
/// command that installs it.
pub fn require_program(program: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "{program} is not installed. Run `bash scripts/test.sh` as root (it installs the \
             test peers), or: apt-get install -y {package}"
        )
    })
}

/// The `.yaml` files of a folder, sorted.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The bodies of a Markdown text's code blocks fenced as `lang` (```` ```bash ````), in order.
pub fn fenced_blocks(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&open) {
        let body = &rest[at + open.len()..];
        let end = body.find("```").expect("a closed code block");
        blocks.push(body[..end].to_owned());
        rest = &body[end + 3..];
    }
    blocks
}

/// The documents of a YAML text, as JSON (empty documents left out).
pub fn yaml_documents(text: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde_json::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// A UDP port that was free a moment ago.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port")
}

/// A copy of the repository's deploy/ in `dir/deploy`, folders included: kustomize takes
/// bases and components by relative path only, so a kustomization written in a test sits
/// beside it.
pub fn copy_of_deploy(dir: &Path) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let target = to.join(path.file_name().unwrap());
            if path.is_dir() {
                copy(&path, &target);
            } else {
                std::fs::copy(&path, &target).unwrap();
            }
        }
    }
    let deploy = dir.join("deploy");
    copy(&repo_root().join("deploy"), &deploy);
    deploy
}

/// A listener that counts the connections made to it: an address no BMC answers at, where
/// a controller that logs in for a HostBmc would show up. Returns it as a Redfish BMC
/// address over plain HTTP, and the count.
pub async fn counting_listener() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (
        format!("redfish+http://{address}/redfish/v1/Systems/1"),
        count,
    )
}
