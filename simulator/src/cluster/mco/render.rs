//! The configs of the simulated pools: a rendered MachineConfig per pool (files as plain,
//! base64 and gzip data URLs, a unit with a drop-in, a masked unit), the pools themselves,
//! and what each config puts on disk — which the simulated daemons validate against.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Write;

use base64::Engine;
use serde_json::{Value, json};

use super::disk::SimFile;

/// Where units live.
const UNIT_DIR: &str = "/etc/systemd/system";

/// One pool's rendered config and what it puts on disk.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The pool.
    pub pool: String,
    /// `rendered-<pool>-<32 hex>`.
    pub name: String,
    /// The MachineConfig object.
    pub object: Value,
    /// Path → the file the config writes.
    pub files: BTreeMap<String, SimFile>,
    /// Unit → enabled.
    pub units: BTreeMap<String, bool>,
}

fn percent_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for b in bytes {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(b) {
            out.push(char::from(*b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

fn hash_hex(text: &str) -> String {
    let mut first = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut first);
    let a = first.finish();
    let mut second = std::collections::hash_map::DefaultHasher::new();
    (a, text).hash(&mut second);
    format!("{a:016x}{:016x}", second.finish())
}

/// The rendered config of `pool`.
pub fn rendered(pool: &str) -> Rendered {
    let plain = format!("# {pool} tuning\nvm.swappiness = 10\nkernel.pid_max = 4194304\n");
    let key = format!("{pool}-registry-token: 9f8e7d6c5b4a\n");
    let big: String = (0..200)
        .map(|i| format!("{{\"rule\": {i}, \"allow\": \"10.{}.0.0/16\"}}\n", i % 250))
        .collect();
    let unit = "[Unit]\nDescription=Demo agent\n[Service]\nExecStart=/usr/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n";
    let dropin = "[Service]\nEnvironment=DEMO_LEVEL=2\n";
    let b64 = base64::engine::general_purpose::STANDARD;
    let config = json!({
        "ignition": {"version": "3.4.0"},
        "storage": {"files": [
            {"path": "/etc/sysctl.d/90-demo.conf", "mode": 420, "overwrite": true,
             "contents": {"source": format!("data:,{}", percent_encode(plain.as_bytes()))}},
            {"path": "/etc/demo/registry.key", "mode": 384, "overwrite": true,
             "contents": {"source": format!("data:text/plain;charset=utf-8;base64,{}", b64.encode(&key))}},
            {"path": "/etc/demo/rules.json", "mode": 420, "overwrite": true,
             "contents": {"source": format!("data:;base64,{}", b64.encode(gzip(big.as_bytes()))), "compression": "gzip"}},
            {"path": "/etc/kubernetes/kubelet-ca.crt", "mode": 420, "overwrite": true,
             "contents": {"source": "data:,ca%0A"}},
        ]},
        "systemd": {"units": [
            {"name": "demo-agent.service", "enabled": true, "contents": unit,
             "dropins": [{"name": "10-level.conf", "contents": dropin}]},
            {"name": "unwanted.service", "mask": true},
        ]},
    });
    let spec = json!({"config": config, "kernelArguments": [], "extensions": [], "fips": false, "kernelType": "default", "osImageURL": "quay.io/openshift/os@sha256:5d41402abc4b2a76b9719d911017c592"});
    let name = format!("rendered-{pool}-{}", hash_hex(&spec.to_string()));
    let files = BTreeMap::from([
        (
            "/etc/sysctl.d/90-demo.conf".to_owned(),
            SimFile::regular(plain.as_bytes(), 0o644),
        ),
        (
            "/etc/demo/registry.key".to_owned(),
            SimFile::regular(key.as_bytes(), 0o600),
        ),
        (
            "/etc/demo/rules.json".to_owned(),
            SimFile::regular(big.as_bytes(), 0o644),
        ),
        (
            "/etc/kubernetes/kubelet-ca.crt".to_owned(),
            SimFile::regular(b"ca\n", 0o644),
        ),
        (
            format!("{UNIT_DIR}/demo-agent.service"),
            SimFile::regular(unit.as_bytes(), 0o644),
        ),
        (
            format!("{UNIT_DIR}/demo-agent.service.d/10-level.conf"),
            SimFile::regular(dropin.as_bytes(), 0o644),
        ),
        (
            format!("{UNIT_DIR}/unwanted.service"),
            SimFile::symlink("/dev/null"),
        ),
    ]);
    let object = json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": name, "annotations": {
            "machineconfiguration.openshift.io/generated-by-controller-version": "sim"}},
        "spec": spec,
    });
    Rendered {
        pool: pool.to_owned(),
        name,
        object,
        files,
        units: BTreeMap::from([("demo-agent.service".to_owned(), true)]),
    }
}

impl Rendered {
    /// The same config on another OS image, as an upgrade renders it: a new name, the same
    /// files (the daemon reboots into it).
    pub fn with_os_image(&self, image: &str) -> Rendered {
        let mut spec = self.object["spec"].clone();
        spec["osImageURL"] = json!(image);
        let name = format!("rendered-{}-{}", self.pool, hash_hex(&spec.to_string()));
        let mut object = self.object.clone();
        object["metadata"]["name"] = json!(name);
        object["spec"] = spec;
        Rendered {
            name,
            object,
            ..self.clone()
        }
    }
}

/// The MachineConfigPool of `rendered`'s pool, selecting nodes by role label.
pub fn pool(rendered: &Rendered, max_unavailable: Value) -> Value {
    let pool = &rendered.pool;
    json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": pool},
        "spec": {
            "machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": pool}},
            "nodeSelector": {"matchLabels": {format!("node-role.kubernetes.io/{pool}"): ""}},
            "maxUnavailable": max_unavailable,
            "paused": false,
            "configuration": {"name": rendered.name},
        },
    })
}

/// The paths the daemon never validates (as the real one skips them).
pub const SKIPPED: [&str; 3] = [
    "/etc/kubernetes/kubelet-ca.crt",
    "/etc/kubernetes/static-pod-resources/configmaps/cloud-config/ca-bundle.pem",
    "/etc/mco/internal-registry-pull-secret.json",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_os_image_is_another_rendered_config_with_the_same_files() {
        let worker = rendered("worker");
        let next = worker.with_os_image("quay.io/openshift/os@sha256:next");
        assert_ne!(next.name, worker.name);
        assert!(next.name.starts_with("rendered-worker-"));
        assert_eq!(next.object["metadata"]["name"], json!(next.name));
        assert_eq!(next.files, worker.files);
    }

    #[test]
    fn a_rendered_name_is_stable_and_per_pool() {
        let worker = rendered("worker");
        assert_eq!(worker.name, rendered("worker").name);
        assert_ne!(worker.name, rendered("master").name);
        let hash = worker.name.trim_start_matches("rendered-worker-");
        assert_eq!(hash.len(), 32);
        assert!(hash.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn percent_encoding_keeps_what_a_data_url_may_carry() {
        assert_eq!(percent_encode(b"a b\n/c"), "a%20b%0A/c");
    }
}
