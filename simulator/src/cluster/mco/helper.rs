//! Runs a `baremend host-file` helper pod on a simulated node: the command line is read as
//! the real command reads it and applied to the node's simulated disk (the node's root is
//! the `hostPath: /` volume; `install` reads its bytes from a mounted Secret).

use base64::Engine;
use serde_json::{Value, json};

use super::disk::{NodeDisk, SimFile};
use crate::cluster::local::{Local, SECRETS};

/// The pod's final status when it is a host-file helper; None for any other pod.
pub fn run(api: &Local, pod: &Value, disk: &NodeDisk) -> Option<Value> {
    let container = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)?
        .first()?;
    let words: Vec<String> = ["command", "args"]
        .iter()
        .filter_map(|k| container.get(*k).and_then(Value::as_array))
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_owned))
        .collect();
    let at = words.iter().position(|w| w == "host-file")?;
    let outcome = apply(api, pod, disk, &words[at + 1..]);
    let (phase, code, message) = match outcome {
        Ok(message) => ("Succeeded", 0, message),
        Err(message) => ("Failed", 1, format!("error: host-file: {message}")),
    };
    Some(json!({
        "phase": phase,
        "containerStatuses": [{
            "name": container["name"], "image": container["image"], "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "message": message}},
        }],
    }))
}

fn flag<'a>(words: &'a [String], name: &str) -> Option<&'a str> {
    words
        .iter()
        .position(|w| w == name)
        .and_then(|i| words.get(i + 1))
        .map(String::as_str)
}

fn apply(api: &Local, pod: &Value, disk: &NodeDisk, words: &[String]) -> Result<String, String> {
    let root = flag(words, "--root").unwrap_or("/host");
    let mounted_root = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|v| v.pointer("/hostPath/path") == Some(&json!("/")));
    if !mounted_root || root.is_empty() {
        return Err("the node's root filesystem is not mounted".into());
    }
    // Positional words: the operation and the path, skipping flags and their values.
    let mut positional = Vec::new();
    let mut skip = false;
    for word in words {
        if skip {
            skip = false;
        } else if word.starts_with("--") {
            skip = true;
        } else {
            positional.push(word.as_str());
        }
    }
    let (Some(op), Some(path)) = (positional.first(), positional.get(1)) else {
        return Err("usage: host-file <touch|remove|install|chmod> PATH".into());
    };
    if !path.starts_with('/') || path.split('/').any(|p| p == "..") {
        return Err(format!("{path}: not a plain absolute path"));
    }
    match *op {
        "touch" => {
            if disk.get(path).is_some() {
                Ok(format!("{path} is already there"))
            } else {
                disk.put(path, SimFile::regular(b"", 0o644));
                Ok(format!("created {path}"))
            }
        }
        "remove" => Ok(if disk.remove(path) {
            format!("removed {path}")
        } else {
            format!("{path} was not there")
        }),
        "chmod" => {
            let mode = mode(flag(words, "--mode"))?;
            if disk.chmod(path, mode) {
                Ok(format!("set {path} to mode {mode:04o}"))
            } else {
                Err(format!("{path}: No such file or directory (os error 2)"))
            }
        }
        "install" => {
            let mode = mode(flag(words, "--mode"))?;
            let from = flag(words, "--from").ok_or("--from is required")?;
            let bytes = secret_file(api, pod, from)?;
            let want = flag(words, "--sha256").ok_or("--sha256 is required")?;
            if !sha256_hex(&bytes).eq_ignore_ascii_case(want) {
                return Err(format!(
                    "{path}: the content does not have the expected SHA-256"
                ));
            }
            disk.put(path, SimFile::regular(&bytes, mode));
            Ok(format!(
                "wrote {path} ({} bytes, mode {mode:04o})",
                bytes.len()
            ))
        }
        other => Err(format!("unknown operation {other:?}")),
    }
}

fn mode(text: Option<&str>) -> Result<u32, String> {
    let text = text.ok_or("--mode is required")?;
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{text:?} is not an octal permission value"))
}

/// The bytes of a file inside a mounted Secret volume.
fn secret_file(api: &Local, pod: &Value, path: &str) -> Result<Vec<u8>, String> {
    let container = pod.pointer("/spec/containers/0").ok_or("no container")?;
    let namespace = pod
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mounts = container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .ok_or("no volume mounts")?;
    for mount in mounts {
        let Some(at) = mount.get("mountPath").and_then(Value::as_str) else {
            continue;
        };
        let Some(key) = path.strip_prefix(at).and_then(|k| k.strip_prefix('/')) else {
            continue;
        };
        let volume = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .and_then(|v| v.iter().find(|v| v.get("name") == mount.get("name")))
            .ok_or("a mount names no volume")?;
        let secret = volume
            .pointer("/secret/secretName")
            .and_then(Value::as_str)
            .ok_or("the mounted volume is not a Secret")?;
        let object = api
            .get(SECRETS, namespace, secret)
            .map_err(|e| format!("secret {secret}: {}", e.message))?;
        let encoded = object
            .pointer(&format!("/data/{key}"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("secret {secret} has no key {key}"))?;
        return base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| format!("secret {secret}: {key} is not base64"));
    }
    Err(format!("{path}: No such file or directory (os error 2)"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
