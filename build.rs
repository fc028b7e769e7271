//! The version `baremend --version` prints: Cargo's package version, and the commit it was
//! built from when that is cheap to know — `BAREMEND_GIT_COMMIT` (the image's build passes
//! its `REVISION` argument, since the container context has no `.git`), else `git` when the
//! sources are a checkout. Neither is required: without them the version stands alone.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=BAREMEND_GIT_COMMIT");
    let commit = match std::env::var("BAREMEND_GIT_COMMIT") {
        Ok(commit) if !commit.trim().is_empty() => Some(commit.trim().to_string()),
        _ => {
            // A new commit or a branch switch changes these files: the version follows.
            for path in ["HEAD", "packed-refs"] {
                if let Some(file) = git(&["rev-parse", "--git-path", path]) {
                    println!("cargo:rerun-if-changed={file}");
                }
            }
            if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"])
                && let Some(file) = git(&["rev-parse", "--git-path", &reference])
            {
                println!("cargo:rerun-if-changed={file}");
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        }
    };
    let version = env!("CARGO_PKG_VERSION");
    let full = match commit {
        // Only a commit-like word: an argument that is not one is not printed.
        Some(commit) if commit.chars().all(|c| c.is_ascii_alphanumeric()) && commit.len() <= 40 => {
            format!("{version} (commit {commit})")
        }
        _ => version.to_string(),
    };
    println!("cargo:rustc-env=BAREMEND_VERSION={full}");
}
