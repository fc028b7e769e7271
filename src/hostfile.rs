//! `baremend host-file`: the one thing the drift coordinator's short-lived helper pod does on
//! a node, with the node's root filesystem mounted at `--root` (as `oc debug node` mounts it
//! at `/host`): create the MCO's forcefile, remove it, or write a file back with its expected
//! bytes and mode.
//!
//! Paths are absolute paths *on the node*; a path with `..`, or one whose parent directory is
//! a symlink (which would resolve inside the helper's own filesystem, not the node's), is
//! refused. Writes go to a temporary file in the same directory and are renamed into place,
//! so the MCD never validates a half-written file.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{Error, LocalError, Result};

/// What to do.
#[derive(clap::Subcommand, Debug, Clone, PartialEq, Eq)]
pub enum HostFileOp {
    /// Create an empty file if there is none (mode 0644).
    Touch {
        /// The path on the node.
        path: String,
    },
    /// Remove a file if it is there.
    Remove {
        /// The path on the node.
        path: String,
    },
    /// Write a file with the bytes of `--from` and `--mode`, checking their SHA-256.
    Install {
        /// The path on the node.
        path: String,
        /// The file holding the bytes (a mounted Secret key).
        #[arg(long)]
        from: PathBuf,
        /// Permission bits, octal (e.g. 0644).
        #[arg(long, value_parser = parse_mode)]
        mode: u32,
        /// The expected SHA-256 of the bytes, hex.
        #[arg(long)]
        sha256: String,
    },
    /// Set a file's permission bits.
    Chmod {
        /// The path on the node.
        path: String,
        /// Permission bits, octal.
        #[arg(long, value_parser = parse_mode)]
        mode: u32,
    },
}

/// `baremend host-file` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct HostFileArgs {
    /// Where the node's root filesystem is mounted.
    #[arg(long, default_value = "/host")]
    pub root: PathBuf,
    /// The operation.
    #[command(subcommand)]
    pub op: HostFileOp,
}

fn parse_mode(text: &str) -> std::result::Result<u32, String> {
    u32::from_str_radix(text.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{text:?} is not an octal permission value"))
}

fn bad(path: &str, why: &str) -> Error {
    LocalError::HostFile(format!("{path}: {why}")).into()
}

/// The node path under `root`, refusing `..`, relative paths and symlinked parents.
pub fn resolve(root: &Path, path: &str) -> Result<PathBuf> {
    let on_node = Path::new(path);
    if !on_node.is_absolute() {
        return Err(bad(path, "not an absolute path"));
    }
    let mut resolved = root.to_path_buf();
    let components: Vec<Component> = on_node.components().collect();
    for (i, component) in components.iter().enumerate() {
        match component {
            Component::RootDir => {}
            Component::Normal(part) => {
                resolved.push(part);
                let last = i + 1 == components.len();
                if !last
                    && fs::symlink_metadata(&resolved).is_ok_and(|m| m.file_type().is_symlink())
                {
                    return Err(bad(path, "a parent directory is a symlink"));
                }
            }
            _ => return Err(bad(path, "only plain components are allowed (no `..`)")),
        }
    }
    if resolved == root {
        return Err(bad(path, "names no file"));
    }
    Ok(resolved)
}

/// Runs one operation; returns a line saying what was done.
pub fn run(args: &HostFileArgs) -> Result<String> {
    let io = |path: &str, e: std::io::Error| bad(path, &e.to_string());
    match &args.op {
        HostFileOp::Touch { path } => {
            let target = resolve(&args.root, path)?;
            if target.exists() {
                return Ok(format!("{path} is already there"));
            }
            let file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(|e| io(path, e))?;
            file.set_permissions(fs::Permissions::from_mode(0o644))
                .map_err(|e| io(path, e))?;
            Ok(format!("created {path}"))
        }
        HostFileOp::Remove { path } => {
            let target = resolve(&args.root, path)?;
            match fs::remove_file(&target) {
                Ok(()) => Ok(format!("removed {path}")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Ok(format!("{path} was not there"))
                }
                Err(e) => Err(io(path, e)),
            }
        }
        HostFileOp::Install {
            path,
            from,
            mode,
            sha256,
        } => {
            let target = resolve(&args.root, path)?;
            let bytes = fs::read(from).map_err(|e| io(path, e))?;
            let digest: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if !digest.eq_ignore_ascii_case(sha256) {
                return Err(bad(path, "the content does not have the expected SHA-256"));
            }
            let dir = target
                .parent()
                .ok_or_else(|| bad(path, "has no directory"))?;
            fs::create_dir_all(dir).map_err(|e| io(path, e))?;
            let temp = dir.join(format!(
                ".{}.baremend",
                target
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ));
            let mut file = fs::File::create(&temp).map_err(|e| io(path, e))?;
            file.write_all(&bytes).map_err(|e| io(path, e))?;
            file.set_permissions(fs::Permissions::from_mode(*mode))
                .map_err(|e| io(path, e))?;
            file.sync_all().map_err(|e| io(path, e))?;
            fs::rename(&temp, &target).map_err(|e| io(path, e))?;
            Ok(format!(
                "wrote {path} ({} bytes, mode {mode:04o})",
                bytes.len()
            ))
        }
        HostFileOp::Chmod { path, mode } => {
            let target = resolve(&args.root, path)?;
            fs::set_permissions(&target, fs::Permissions::from_mode(*mode))
                .map_err(|e| io(path, e))?;
            Ok(format!("set {path} to mode {mode:04o}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Root(PathBuf);

    impl Root {
        fn new(name: &str) -> Root {
            let dir = std::env::temp_dir()
                .join(format!("baremend-hostfile-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("run")).unwrap();
            fs::create_dir_all(dir.join("etc")).unwrap();
            Root(dir)
        }

        fn args(&self, op: HostFileOp) -> HostFileArgs {
            HostFileArgs {
                root: self.0.clone(),
                op,
            }
        }
    }

    impl Drop for Root {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_forcefile_is_created_once_and_removed() {
        let root = Root::new("force");
        let touch = root.args(HostFileOp::Touch {
            path: "/run/machine-config-daemon-force".into(),
        });
        assert_eq!(
            run(&touch).unwrap(),
            "created /run/machine-config-daemon-force"
        );
        assert!(root.0.join("run/machine-config-daemon-force").exists());
        assert!(run(&touch).unwrap().contains("already"));
        let remove = root.args(HostFileOp::Remove {
            path: "/run/machine-config-daemon-force".into(),
        });
        assert!(run(&remove).unwrap().starts_with("removed"));
        assert!(run(&remove).unwrap().contains("was not there"));
    }

    #[test]
    fn install_writes_the_checked_bytes_and_mode_in_place() {
        let root = Root::new("install");
        let source = root.0.join("content");
        fs::write(&source, b"expected\n").unwrap();
        fs::write(root.0.join("etc/foo"), b"drifted").unwrap();
        let sha = crate::drift::content::sha256_hex(b"expected\n");
        let install = root.args(HostFileOp::Install {
            path: "/etc/foo".into(),
            from: source.clone(),
            mode: 0o640,
            sha256: sha,
        });
        run(&install).unwrap();
        assert_eq!(fs::read(root.0.join("etc/foo")).unwrap(), b"expected\n");
        let mode = fs::metadata(root.0.join("etc/foo"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o640);
        let wrong = root.args(HostFileOp::Install {
            path: "/etc/foo".into(),
            from: source,
            mode: 0o644,
            sha256: "00".into(),
        });
        assert!(run(&wrong).unwrap_err().to_string().contains("SHA-256"));
    }

    #[test]
    fn paths_that_could_leave_the_node_root_are_refused() {
        let root = Root::new("escape");
        for path in ["relative", "/etc/../../outside", "/"] {
            assert!(resolve(&root.0, path).is_err(), "{path}");
        }
        std::os::unix::fs::symlink("/tmp", root.0.join("etc/link")).unwrap();
        let error = resolve(&root.0, "/etc/link/x").unwrap_err().to_string();
        assert!(error.contains("symlink"), "{error}");
        assert!(parse_mode("0644").is_ok() && parse_mode("99").is_err());
    }
}
