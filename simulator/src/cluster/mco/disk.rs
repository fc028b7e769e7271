//! A node's disk as the Machine Config Daemon sees it: the files and units of its rendered
//! config, which tests drift and revert, and `/run`, a tmpfs emptied by every boot.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// `st_mode` type bits of a regular file.
pub const REGULAR: u32 = 0o100_000;
/// `st_mode` type bits of a symlink.
pub const SYMLINK: u32 = 0o120_000;

/// A file on the simulated disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFile {
    /// The bytes (a symlink's target for a symlink).
    pub bytes: Vec<u8>,
    /// `st_mode`, type bits included.
    pub st_mode: u32,
}

impl SimFile {
    /// A regular file.
    pub fn regular(bytes: &[u8], mode: u32) -> Self {
        SimFile {
            bytes: bytes.to_vec(),
            st_mode: REGULAR | mode,
        }
    }

    /// A symlink to `target`.
    pub fn symlink(target: &str) -> Self {
        SimFile {
            bytes: target.as_bytes().to_vec(),
            st_mode: SYMLINK | 0o777,
        }
    }
}

#[derive(Debug, Default)]
struct Contents {
    files: BTreeMap<String, SimFile>,
    enabled: BTreeMap<String, bool>,
}

/// One node's disk.
#[derive(Debug, Default)]
pub struct NodeDisk {
    contents: Mutex<Contents>,
}

impl NodeDisk {
    fn lock(&self) -> MutexGuard<'_, Contents> {
        self.contents.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The file at `path`.
    pub fn get(&self, path: &str) -> Option<SimFile> {
        self.lock().files.get(path).cloned()
    }

    /// Writes (or replaces) a file.
    pub fn put(&self, path: &str, file: SimFile) {
        self.lock().files.insert(path.to_owned(), file);
    }

    /// Removes a file; whether it was there.
    pub fn remove(&self, path: &str) -> bool {
        self.lock().files.remove(path).is_some()
    }

    /// Sets a file's permission bits; whether it was there.
    pub fn chmod(&self, path: &str, mode: u32) -> bool {
        match self.lock().files.get_mut(path) {
            Some(file) => {
                file.st_mode = (file.st_mode & !0o7777) | (mode & 0o7777);
                true
            }
            None => false,
        }
    }

    /// Whether a unit is enabled (as `systemctl is-enabled` says).
    pub fn unit_enabled(&self, unit: &str) -> Option<bool> {
        self.lock().enabled.get(unit).copied()
    }

    /// Enables or disables a unit.
    pub fn set_unit_enabled(&self, unit: &str, enabled: bool) {
        self.lock().enabled.insert(unit.to_owned(), enabled);
    }

    /// A boot: `/run` is a tmpfs.
    pub fn boot(&self) {
        self.lock()
            .files
            .retain(|path, _| !path.starts_with("/run/"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_is_emptied_by_a_boot_and_etc_is_kept() {
        let disk = NodeDisk::default();
        disk.put(
            "/run/machine-config-daemon-force",
            SimFile::regular(b"", 0o644),
        );
        disk.put("/etc/a", SimFile::regular(b"x", 0o644));
        assert!(disk.chmod("/etc/a", 0o777));
        assert_eq!(disk.get("/etc/a").unwrap().st_mode, 0o100_777);
        disk.boot();
        assert!(disk.get("/run/machine-config-daemon-force").is_none());
        assert!(disk.get("/etc/a").is_some());
    }
}
