//! baremend's core: the API types and every decision a pass makes, with no client, no async
//! runtime and no I/O. The controller crate (`baremend`) observes the world, asks this crate
//! what to do, and does it.
//!
//! - [`api`]: the custom resources, the slim views of other systems' kinds, the names.
//! - [`decide`]: the remediation's decisions, pure: objects and facts in, a view or a verdict out.
//! - [`drift`]: the drift coordinator's decisions, as pure.
//! - [`retention`]: which finished objects of one Machine or Node to delete.
//! - [`clock`], [`conditions`], [`duration`], [`text`]: the small pure helpers they share.
//!
//! The crate's dependencies are the guarantee: no `kube` (its client and runtime), no
//! `tokio`. `cargo tree -p baremend-core -e normal` shows it; a test in the controller crate
//! reads it.
#![forbid(unsafe_code)]

pub mod api;
pub mod clock;
pub mod conditions;
pub mod decide;
pub mod drift;
pub mod duration;
pub mod retention;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;

// For `cached_kind!` expanded in the controller crate.
#[doc(hidden)]
pub use k8s_openapi;
#[doc(hidden)]
pub use kube_core;

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::process::Command;

    /// The crates this one must never depend on, however indirectly: a client, an async
    /// runtime, an HTTP stack.
    const FORBIDDEN: [&str; 6] = [
        "kube",
        "kube-client",
        "kube-runtime",
        "tokio",
        "hyper",
        "reqwest",
    ];

    #[test]
    fn the_core_depends_on_no_client_no_runtime_and_no_http() {
        // `cargo tree` resolves the features for this crate alone, as a build of it would.
        let output = Command::new(env!("CARGO"))
            .args([
                "tree",
                "-p",
                "baremend-core",
                "-e",
                "normal",
                "--prefix",
                "none",
            ])
            .args(["--offline", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .output()
            .expect("cargo runs");
        let tree = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "cargo tree failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let names: Vec<&str> = tree
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .collect();
        assert!(
            names.contains(&"kube-core"),
            "the tree was not read: {tree}"
        );
        let found: Vec<&str> = FORBIDDEN
            .into_iter()
            .filter(|name| names.contains(name))
            .collect();
        assert!(
            found.is_empty(),
            "baremend-core depends on {found:?}:\n{tree}"
        );
    }

    #[test]
    fn the_core_reads_no_clock_and_does_no_io_of_its_own() {
        // What its dependencies cannot show: the standard library's I/O and the wall clock.
        const IMPURE: [&str; 7] = [
            "std::fs",
            "std::net",
            "std::process",
            "std::env",
            "std::thread",
            "SystemTime::now",
            "Instant::now",
        ];
        let mut found = Vec::new();
        let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                // This file names them to look for them; test files may read fixtures.
                let name = path.file_name().unwrap().to_string_lossy();
                if name == "lib.rs" || name.ends_with("_tests.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                for impure in IMPURE {
                    if code.contains(impure) {
                        found.push(format!("{}: {impure}", path.display()));
                    }
                }
            }
        }
        assert!(found.is_empty(), "baremend-core must stay pure: {found:#?}");
    }
}
