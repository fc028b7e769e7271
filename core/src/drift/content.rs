//! What a file or unit should look like on a node, computed from the node's rendered
//! MachineConfig (the one its `currentConfig` names; the sources are never re-merged).
//!
//! Ignition's rules, as the Machine Config Daemon validates them:
//! - `storage.files[]`: `contents.source` is an RFC 2397 data URL (`data:,<percent-encoded>`
//!   or `data:…;base64,<base64>`), no source is an empty file, `contents.compression` may be
//!   `gzip`; `mode` is decimal (420 = 0644) and defaults to 0644.
//! - `systemd.units[]` live at `/etc/systemd/system/<name>` (mode 0644), a masked unit is a
//!   symlink to `/dev/null`, a unit without contents is not checked; drop-ins at
//!   `<name>.d/<dropin>`, where an empty drop-in must be absent or empty.
//! - A few paths are never validated (the skip list).
//! - Later entries win: within a config, and across configs given in merge order.
//!
//! Contents may be secrets: only their SHA-256 is ever recorded or logged.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Paths the MCD never validates.
pub const SKIPPED_PATHS: [&str; 3] = [
    "/etc/kubernetes/kubelet-ca.crt",
    "/etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem",
    "/etc/mco/internal-registry-pull-secret.json",
];

/// Where systemd units are written.
const UNIT_DIR: &str = "/etc/systemd/system";

/// The largest decoded file the engine accepts (a config is not a place for bigger ones).
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The file-type bits of a regular file and of a symlink (as `lstat` reports them).
const REGULAR_FILE: u32 = 0o100_000;

/// What the config says a path should be.
#[derive(Clone, PartialEq, Eq)]
pub enum Expected {
    /// A regular file with these bytes and permission bits.
    File {
        /// The decoded content.
        bytes: Vec<u8>,
        /// The permission bits (e.g. 0o644).
        mode: u32,
    },
    /// A symlink to this target (a masked unit: `/dev/null`).
    Symlink(String),
    /// Absent, or an empty file (an empty drop-in).
    AbsentOrEmpty,
}

impl fmt::Debug for Expected {
    // Contents may be secrets: Debug shows their hash, never the bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expected::File { bytes, mode } => write!(
                f,
                "File {{ sha256: {}, len: {}, mode: {mode:o} }}",
                sha256_hex(bytes),
                bytes.len()
            ),
            Expected::Symlink(target) => write!(f, "Symlink({target:?})"),
            Expected::AbsentOrEmpty => f.write_str("AbsentOrEmpty"),
        }
    }
}

/// What is on disk at a path, as `lstat` and a read tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDisk {
    /// Nothing there.
    Absent,
    /// A regular file: its full `st_mode` (type bits included) and its bytes' SHA-256.
    File {
        /// `st_mode`.
        st_mode: u32,
        /// SHA-256 of the bytes, hex.
        sha256: String,
        /// Length in bytes.
        len: u64,
    },
    /// A symlink and its target.
    Symlink(String),
    /// Something else (a directory, a device…), with its `st_mode`.
    Other(u32),
}

/// How a path differs from the config, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The bytes differ.
    Content,
    /// The mode or the file type differs.
    Mode,
    /// The file is missing.
    Missing,
}

impl Expected {
    /// Compares what is on disk with the config, in the MCD's order: existence, then the
    /// mode (type bits included, so a symlink where a file belongs is a mode mismatch),
    /// then the bytes.
    pub fn check(&self, disk: &OnDisk) -> Option<Mismatch> {
        match (self, disk) {
            (Expected::File { .. }, OnDisk::Absent) => Some(Mismatch::Missing),
            (
                Expected::File { bytes, mode },
                OnDisk::File {
                    st_mode, sha256, ..
                },
            ) => {
                if *st_mode != REGULAR_FILE | mode {
                    Some(Mismatch::Mode)
                } else if *sha256 != sha256_hex(bytes) {
                    Some(Mismatch::Content)
                } else {
                    None
                }
            }
            (Expected::File { .. }, _) => Some(Mismatch::Mode),
            (Expected::Symlink(target), OnDisk::Symlink(actual)) if target == actual => None,
            (Expected::Symlink(_), OnDisk::Absent) => Some(Mismatch::Missing),
            (Expected::Symlink(_), _) => Some(Mismatch::Mode),
            (Expected::AbsentOrEmpty, OnDisk::Absent) => None,
            (Expected::AbsentOrEmpty, OnDisk::File { len: 0, .. }) => None,
            (Expected::AbsentOrEmpty, OnDisk::File { .. }) => Some(Mismatch::Content),
            (Expected::AbsentOrEmpty, _) => Some(Mismatch::Mode),
        }
    }

    /// The SHA-256 of the expected bytes (what an audit record keeps).
    pub fn digest(&self) -> Option<String> {
        match self {
            Expected::File { bytes, .. } => Some(sha256_hex(bytes)),
            _ => None,
        }
    }
}

/// A unit's expected enablement (checked with `systemctl is-enabled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitEnablement {
    /// Whether it should be enabled.
    pub enabled: bool,
}

/// Why a config cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct ContentError {
    /// The file or unit the problem is in (or `config`).
    pub path: String,
    /// What is wrong.
    pub problem: String,
}

/// Every expectation of a config, by path, plus unit enablement by unit name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpectedState {
    /// Path → what it should be (skipped paths are not here).
    pub files: BTreeMap<String, Expected>,
    /// Unit name → enablement, for units that set `enabled`.
    pub units: BTreeMap<String, UnitEnablement>,
}

#[derive(Default)]
struct UnitSpec {
    enabled: Option<bool>,
    mask: Option<bool>,
    contents: Option<String>,
    dropins: BTreeMap<String, Option<String>>,
}

impl ExpectedState {
    /// The expectations of Ignition configs taken in merge order (later wins per path and
    /// per unit field). For a node, pass its rendered config alone.
    pub fn from_configs<'a>(
        configs: impl IntoIterator<Item = &'a Value>,
    ) -> Result<Self, ContentError> {
        let mut files: BTreeMap<String, Expected> = BTreeMap::new();
        let mut units: BTreeMap<String, UnitSpec> = BTreeMap::new();
        for config in configs {
            let problem = |what: &str| ContentError {
                path: "config".into(),
                problem: what.into(),
            };
            if !config.is_object() {
                return Err(problem("the Ignition config is not an object"));
            }
            for file in array_at(config, "/storage/files").map_err(|p| problem(&p))? {
                let (path, expected) = file_entry(file)?;
                files.insert(path, expected);
            }
            for unit in array_at(config, "/systemd/units").map_err(|p| problem(&p))? {
                merge_unit(&mut units, unit)?;
            }
        }
        let mut state = ExpectedState::default();
        for (path, expected) in files {
            if !SKIPPED_PATHS.contains(&path.as_str()) {
                state.files.insert(path, expected);
            }
        }
        for (name, unit) in units {
            let path = format!("{UNIT_DIR}/{name}");
            if unit.mask == Some(true) {
                state
                    .files
                    .insert(path, Expected::Symlink("/dev/null".into()));
            } else if let Some(contents) = unit.contents.filter(|c| !c.is_empty()) {
                state.files.insert(
                    path,
                    Expected::File {
                        bytes: contents.into_bytes(),
                        mode: 0o644,
                    },
                );
            }
            for (dropin, contents) in unit.dropins {
                let path = format!("{UNIT_DIR}/{name}.d/{dropin}");
                let expected = match contents.filter(|c| !c.is_empty()) {
                    Some(contents) => Expected::File {
                        bytes: contents.into_bytes(),
                        mode: 0o644,
                    },
                    None => Expected::AbsentOrEmpty,
                };
                state.files.insert(path, expected);
            }
            if let Some(enabled) = unit.enabled {
                state.units.insert(name, UnitEnablement { enabled });
            }
        }
        Ok(state)
    }
}

fn array_at<'a>(config: &'a Value, pointer: &str) -> Result<&'a [Value], String> {
    match config.pointer(pointer) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(_) => Err(format!("{pointer} is not a list")),
    }
}

fn string_field<'a>(
    entry: &'a Value,
    field: &str,
    path: &str,
) -> Result<Option<&'a str>, ContentError> {
    match entry.pointer(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ContentError {
            path: path.into(),
            problem: format!("{} is not a string", field.trim_start_matches('/')),
        }),
    }
}

fn file_entry(file: &Value) -> Result<(String, Expected), ContentError> {
    let path = string_field(file, "/path", "a file")?
        .filter(|p| p.starts_with('/'))
        .ok_or(ContentError {
            path: "a file".into(),
            problem: "path is missing or not absolute".into(),
        })?
        .to_string();
    let error = |problem: String| ContentError {
        path: path.clone(),
        problem,
    };
    let mode = match file.get("mode") {
        None | Some(Value::Null) => 0o644,
        Some(value) => value
            .as_u64()
            .filter(|m| *m <= 0o7777)
            .and_then(|m| u32::try_from(m).ok())
            .ok_or_else(|| error(format!("mode {value} is not a permission value")))?,
    };
    let raw = match string_field(file, "/contents/source", &path)? {
        None => Vec::new(),
        Some(url) => decode_data_url(url).map_err(error)?,
    };
    let bytes = match string_field(file, "/contents/compression", &path)? {
        None | Some("") => raw,
        Some("gzip") => gunzip(&raw).map_err(error)?,
        Some(other) => return Err(error(format!("unknown compression {other:?}"))),
    };
    Ok((path, Expected::File { bytes, mode }))
}

fn merge_unit(units: &mut BTreeMap<String, UnitSpec>, unit: &Value) -> Result<(), ContentError> {
    let name = string_field(unit, "/name", "a unit")?
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .ok_or(ContentError {
            path: "a unit".into(),
            problem: "name is missing or not a unit name".into(),
        })?
        .to_string();
    let spec = units.entry(name.clone()).or_default();
    if let Some(enabled) = unit.get("enabled").and_then(Value::as_bool) {
        spec.enabled = Some(enabled);
    }
    if let Some(mask) = unit.get("mask").and_then(Value::as_bool) {
        spec.mask = Some(mask);
    }
    if let Some(contents) = string_field(unit, "/contents", &name)? {
        spec.contents = Some(contents.to_string());
    }
    for dropin in array_at(unit, "/dropins").map_err(|problem| ContentError {
        path: name.clone(),
        problem,
    })? {
        let dropin_name = string_field(dropin, "/name", &name)?
            .filter(|n| !n.is_empty() && !n.contains('/'))
            .ok_or(ContentError {
                path: name.clone(),
                problem: "a drop-in has no valid name".into(),
            })?;
        let contents = string_field(dropin, "/contents", &name)?.map(String::from);
        spec.dropins.insert(dropin_name.to_string(), contents);
    }
    Ok(())
}

/// Decodes an RFC 2397 data URL: `data:[<media type>][;base64],<data>`.
pub fn decode_data_url(url: &str) -> Result<Vec<u8>, String> {
    let rest = url
        .strip_prefix("data:")
        .ok_or("the source is not a data URL (remote sources are inlined when rendered)")?;
    let (header, data) = rest.split_once(',').ok_or("the data URL has no comma")?;
    let data = percent_decode(data)?;
    if header.split(';').any(|p| p.eq_ignore_ascii_case("base64")) {
        let text: Vec<u8> = data
            .into_iter()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(&text)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(&text))
            .map_err(|e| format!("the data URL's base64 is invalid: {e}"))
    } else {
        Ok(data)
    }
}

fn percent_decode(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at byte {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn gunzip(data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("the gzip content is invalid: {e}"))?;
    if out.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("the file is larger than {MAX_FILE_BYTES} bytes"));
    }
    Ok(out)
}

/// Hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use serde_json::json;

    use super::*;

    fn file(bytes: &[u8], mode: u32) -> Expected {
        Expected::File {
            bytes: bytes.to_vec(),
            mode,
        }
    }

    fn gzip_base64(bytes: &[u8]) -> String {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        base64::engine::general_purpose::STANDARD.encode(encoder.finish().unwrap())
    }

    #[test]
    fn percent_encoded_base64_gzip_and_absent_sources_decode() {
        let config = json!({"ignition": {"version": "3.4.0"}, "storage": {"files": [
            {"path": "/etc/plain", "contents": {"source": "data:,hello%20world%0A"}, "mode": 420},
            {"path": "/etc/b64", "contents": {"source": "data:text/plain;charset=utf-8;base64,aGVsbG8K"}, "mode": 493},
            {"path": "/etc/gz", "contents": {"source": format!("data:;base64,{}", gzip_base64(b"zipped\n")), "compression": "gzip"}},
            {"path": "/etc/empty"},
        ]}});
        let state = ExpectedState::from_configs([&config]).unwrap();
        assert_eq!(state.files["/etc/plain"], file(b"hello world\n", 0o644));
        assert_eq!(state.files["/etc/b64"], file(b"hello\n", 0o755));
        assert_eq!(state.files["/etc/gz"], file(b"zipped\n", 0o644));
        assert_eq!(state.files["/etc/empty"], file(b"", 0o644));
    }

    #[test]
    fn later_entries_win_within_and_across_configs() {
        let first = json!({"storage": {"files": [
            {"path": "/etc/a", "contents": {"source": "data:,one"}},
            {"path": "/etc/a", "contents": {"source": "data:,two"}},
        ]}, "systemd": {"units": [{"name": "x.service", "enabled": true, "contents": "[Unit]\n"}]}});
        let second = json!({"storage": {"files": [
            {"path": "/etc/a", "contents": {"source": "data:,three"}, "mode": 384},
        ]}, "systemd": {"units": [{"name": "x.service", "enabled": false}]}});
        let state = ExpectedState::from_configs([&first]).unwrap();
        assert_eq!(state.files["/etc/a"], file(b"two", 0o644));
        let state = ExpectedState::from_configs([&first, &second]).unwrap();
        assert_eq!(state.files["/etc/a"], file(b"three", 0o600));
        // The later unit sets only `enabled`; the contents of the earlier one stay.
        assert_eq!(state.units["x.service"], UnitEnablement { enabled: false });
        assert_eq!(
            state.files["/etc/systemd/system/x.service"],
            file(b"[Unit]\n", 0o644)
        );
    }

    #[test]
    fn units_masks_and_dropins_have_their_paths_and_rules() {
        let config = json!({"systemd": {"units": [
            {"name": "a.service", "enabled": true, "contents": "[Service]\n",
             "dropins": [{"name": "10-x.conf", "contents": "[Service]\nX=1\n"}, {"name": "20-empty.conf"}]},
            {"name": "masked.service", "mask": true},
            {"name": "no-content.service", "enabled": false},
        ]}});
        let state = ExpectedState::from_configs([&config]).unwrap();
        let files = &state.files;
        assert_eq!(
            files["/etc/systemd/system/a.service"],
            file(b"[Service]\n", 0o644)
        );
        assert_eq!(
            files["/etc/systemd/system/a.service.d/10-x.conf"],
            file(b"[Service]\nX=1\n", 0o644)
        );
        assert_eq!(
            files["/etc/systemd/system/a.service.d/20-empty.conf"],
            Expected::AbsentOrEmpty
        );
        assert_eq!(
            files["/etc/systemd/system/masked.service"],
            Expected::Symlink("/dev/null".into())
        );
        assert!(!files.contains_key("/etc/systemd/system/no-content.service"));
        assert_eq!(
            state.units["no-content.service"],
            UnitEnablement { enabled: false }
        );
    }

    #[test]
    fn skipped_paths_are_never_expected() {
        let files: Vec<Value> = SKIPPED_PATHS
            .iter()
            .map(|p| json!({"path": p, "contents": {"source": "data:,x"}}))
            .collect();
        let state = ExpectedState::from_configs([&json!({"storage": {"files": files}})]).unwrap();
        assert!(state.files.is_empty());
    }

    #[test]
    fn on_disk_state_is_checked_for_existence_then_mode_then_content() {
        let expected = file(b"abc", 0o644);
        let on_disk = |st_mode: u32, bytes: &[u8]| OnDisk::File {
            st_mode,
            sha256: sha256_hex(bytes),
            len: bytes.len() as u64,
        };
        assert_eq!(expected.check(&on_disk(0o100_644, b"abc")), None);
        assert_eq!(
            expected.check(&on_disk(0o100_644, b"abd")),
            Some(Mismatch::Content)
        );
        assert_eq!(
            expected.check(&on_disk(0o100_777, b"abd")),
            Some(Mismatch::Mode)
        );
        assert_eq!(expected.check(&OnDisk::Absent), Some(Mismatch::Missing));
        assert_eq!(
            expected.check(&OnDisk::Symlink("/etc/x".into())),
            Some(Mismatch::Mode)
        );
        let masked = Expected::Symlink("/dev/null".into());
        assert_eq!(masked.check(&OnDisk::Symlink("/dev/null".into())), None);
        assert_eq!(masked.check(&on_disk(0o100_644, b"")), Some(Mismatch::Mode));
        let dropin = Expected::AbsentOrEmpty;
        assert_eq!(dropin.check(&OnDisk::Absent), None);
        assert_eq!(dropin.check(&on_disk(0o100_644, b"")), None);
        assert_eq!(
            dropin.check(&on_disk(0o100_644, b"x")),
            Some(Mismatch::Content)
        );
    }

    #[test]
    fn malformed_configs_get_an_error_naming_the_entry() {
        let bad = [
            (
                json!({"storage": {"files": [{"path": "relative"}]}}),
                "a file",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "mode": "0644"}]}}),
                "/etc/a",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "mode": 70000}]}}),
                "/etc/a",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "contents": {"source": "https://x"}}]}}),
                "/etc/a",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:;base64,!!"}}]}}),
                "/etc/a",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,%zz"}}]}}),
                "/etc/a",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,x", "compression": "gzip"}}]}}),
                "/etc/a",
            ),
            (
                json!({"storage": {"files": [{"path": "/etc/a", "contents": {"source": "data:,x", "compression": "xz"}}]}}),
                "/etc/a",
            ),
            (json!({"storage": {"files": {}}}), "config"),
            (json!({"systemd": {"units": [{"name": "a/b"}]}}), "a unit"),
            (
                json!({"systemd": {"units": [{"name": "a.service", "dropins": [{}]}]}}),
                "a.service",
            ),
            (json!("not an object"), "config"),
        ];
        for (config, path) in bad {
            let error = ExpectedState::from_configs([&config]).unwrap_err();
            assert_eq!(error.path, path, "{config}: {error}");
        }
    }

    #[test]
    fn debug_output_shows_a_hash_never_the_content() {
        let secret = file(b"hunter2-password", 0o600);
        let text = format!("{secret:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains(&sha256_hex(b"hunter2-password")), "{text}");
    }
}
