//! `baremend gather`: a support bundle — baremend's objects, the Events about them, the
//! Machines, BareMetalHosts and Nodes they name, and the controller's logs when the API
//! server serves them — written as a directory or a `.tar.gz`.
//!
//! Expected flow: list each kind (a kind the cluster does not serve, or a list refused, is
//! recorded in `summary.txt` and the rest is gathered), work out which Machines, hosts and
//! Nodes baremend's objects name, read those, the Events whose subject is any gathered object,
//! and the logs of the controller's pods; redact; write. Guarantees: Secrets are never read
//! (no request for them is made); every value under a key that names a credential (password,
//! token, secret data, private key, authorization) is replaced, and so is every credential-like
//! word in free text (Event messages, logs, annotations); `managedFields` and
//! `last-applied-configuration` are dropped. Caveats: redaction is by key and by pattern, so a
//! credential under an innocent key in a free-text field may survive; the summary says so.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, LogParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::api::HostRef;
use crate::run::ClusterArgs;
use crate::{Error, LocalError, Result};

/// Arguments of `baremend gather`.
#[derive(Debug, Args)]
pub struct GatherArgs {
    /// Where the cluster is.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Where to write: a directory (created; must not exist or be empty), or a file ending in
    /// `.tar.gz` or `.tgz`.
    #[arg(long, short = 'o', value_name = "PATH")]
    pub out: PathBuf,
    /// The controller's namespace (its pods' logs).
    #[arg(long, default_value = "baremend")]
    pub controller_namespace: String,
    /// The controller's pods' label selector.
    #[arg(long, default_value = "app.kubernetes.io/name=baremend")]
    pub controller_selector: String,
    /// The last lines of each controller container's log.
    #[arg(long, default_value_t = 5000)]
    pub log_lines: i64,
}

/// A kind gathered, by its API coordinates.
#[derive(Debug, Clone, Copy)]
struct Kind {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
}

impl Kind {
    const fn new(
        group: &'static str,
        version: &'static str,
        kind: &'static str,
        plural: &'static str,
    ) -> Self {
        Kind {
            group,
            version,
            kind,
            plural,
        }
    }

    fn resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, self.kind),
            self.plural,
        )
    }
}

/// baremend's own kinds: every object of each is gathered.
const OURS: [Kind; 9] = [
    Kind::new(
        "baremend.io",
        "v1alpha1",
        "RemediationPolicy",
        "remediationpolicies",
    ),
    Kind::new("baremend.io", "v1alpha1", "DriftPolicy", "driftpolicies"),
    Kind::new("baremend.io", "v1alpha1", "Remediation", "remediations"),
    Kind::new(
        "baremend.io",
        "v1alpha1",
        "DriftRemediation",
        "driftremediations",
    ),
    Kind::new("baremend.io", "v1alpha1", "HostBmc", "hostbmcs"),
    Kind::new(
        "baremend.io",
        "v1alpha1",
        "MachineRemediation",
        "machineremediations",
    ),
    Kind::new(
        "baremend.io",
        "v1alpha1",
        "NodeRemediation",
        "noderemediations",
    ),
    Kind::new(
        "baremend.io",
        "v1alpha1",
        "MachineRemediationTemplate",
        "machineremediationtemplates",
    ),
    Kind::new(
        "baremend.io",
        "v1alpha1",
        "NodeRemediationTemplate",
        "noderemediationtemplates",
    ),
];

const MACHINES: Kind = Kind::new("machine.openshift.io", "v1beta1", "Machine", "machines");
const CAPI_MACHINES: Kind = Kind::new("cluster.x-k8s.io", "v1beta1", "Machine", "machines");
const HOSTS: Kind = Kind::new("metal3.io", "v1alpha1", "BareMetalHost", "baremetalhosts");
const NODES: Kind = Kind::new("", "v1", "Node", "nodes");
const EVENTS: Kind = Kind::new("events.k8s.io", "v1", "Event", "events");
/// The health checks that hand baremend its work: every one is gathered (there are few).
const HEALTH_CHECKS: [Kind; 3] = [
    Kind::new(
        "machine.openshift.io",
        "v1beta1",
        "MachineHealthCheck",
        "machinehealthchecks",
    ),
    Kind::new(
        "cluster.x-k8s.io",
        "v1beta1",
        "MachineHealthCheck",
        "machinehealthchecks",
    ),
    Kind::new(
        "remediation.medik8s.io",
        "v1alpha1",
        "NodeHealthCheck",
        "nodehealthchecks",
    ),
];
const DEPLOYMENTS: Kind = Kind::new("apps", "v1", "Deployment", "deployments");

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
type Key = (String, String);

/// What baremend's objects name: the Machines, hosts and Nodes to gather.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Involved {
    /// Machines, by namespace and name.
    pub machines: BTreeSet<Key>,
    /// BareMetalHosts, by namespace and name.
    pub hosts: BTreeSet<Key>,
    /// Nodes, by name.
    pub nodes: BTreeSet<String>,
}

fn text<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

impl Involved {
    /// The objects `object` (one of baremend's, of `kind`) names.
    pub fn add(&mut self, kind: &str, object: &Value) {
        let namespace = text(object, "/metadata/namespace")
            .unwrap_or_default()
            .to_string();
        let name = text(object, "/metadata/name")
            .unwrap_or_default()
            .to_string();
        match kind {
            "Remediation" | "HostBmc" => {
                if let Some(machine) = text(object, "/spec/machineName") {
                    self.machines.insert((namespace.clone(), machine.into()));
                }
                if let Some(node) = text(object, "/spec/nodeName") {
                    self.nodes.insert(node.into());
                }
                let host = text(object, "/spec/host").and_then(|h| h.parse::<HostRef>().ok());
                if let Some(host) = host {
                    self.hosts.insert((host.namespace, host.name));
                }
            }
            // Requests are named after their Machine or Node (the health checks' contract).
            "MachineRemediation" => {
                self.machines.insert((namespace, name));
            }
            "NodeRemediation" => {
                self.nodes.insert(name);
            }
            "DriftRemediation" => {
                if let Some(node) = text(object, "/spec/nodeName") {
                    self.nodes.insert(node.into());
                }
            }
            _ => {}
        }
    }

    /// What a gathered Machine names: its Node and its BareMetalHost.
    pub fn add_machine(&mut self, machine: &Value) {
        if let Some(node) = text(machine, "/status/nodeRef/name") {
            self.nodes.insert(node.into());
        }
        let annotation = format!(
            "/metadata/annotations/{}",
            crate::api::annotations::MACHINE_HOST.replace('/', "~1")
        );
        if let Some((ns, host)) = text(machine, &annotation).and_then(|h| h.split_once('/')) {
            self.hosts.insert((ns.into(), host.into()));
        }
    }
}

/// Keys whose values are credentials wherever they appear (compared lower-case, without
/// `-` and `_`). A key naming a reference to one (`credentialsName`, `secretRef`) is kept.
const CREDENTIAL_KEYS: [&str; 9] = [
    "password",
    "passwd",
    "token",
    "secret",
    "privatekey",
    "authorization",
    "bearer",
    "apikey",
    "credentials",
];

/// What replaces a redacted value.
pub const REDACTED: &str = "<redacted>";

/// Whether `key` names a credential (and not a reference to one).
fn credential_key(key: &str) -> bool {
    let key: String = key
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .collect::<String>()
        .to_ascii_lowercase();
    let reference = ["name", "ref", "namespace", "kind"]
        .iter()
        .any(|suffix| key.ends_with(suffix));
    !reference && CREDENTIAL_KEYS.iter().any(|word| key.contains(word))
}

/// Words in free text that introduce a credential: the next word is replaced, after any
/// separator.
const CREDENTIAL_WORDS: [&str; 5] = ["password", "passwd", "bearer", "authorization", "apikey"];

/// Words that introduce a credential only when an `=` or `:` follows: `token: x`,
/// `client_secret=x`, but not "the token bucket" or "Secret worker-0-bmc" (a name).
const CREDENTIAL_KEYS_IN_TEXT: [&str; 2] = ["token", "secret"];

/// Free text with every credential-like value replaced: `password=x`, `token: x`,
/// `Bearer x`, `"password":"x"` — the word after a credential word and its separator.
pub fn redact_text(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at < text.len() {
        let found = CREDENTIAL_WORDS
            .iter()
            .map(|w| (w, false))
            .chain(CREDENTIAL_KEYS_IN_TEXT.iter().map(|w| (w, true)))
            .filter_map(|(w, keyed)| lower[at..].find(w).map(|i| (at + i, w.len(), keyed)))
            .min();
        let Some((start, len, keyed)) = found else {
            break;
        };
        let mut cursor = start + len;
        // The rest of the key (`password_file`, `tokenValue`), then the separator.
        while cursor < bytes.len()
            && (bytes[cursor].is_ascii_alphanumeric() || matches!(bytes[cursor], b'_' | b'-'))
        {
            cursor += 1;
        }
        let separator_start = cursor;
        while cursor < bytes.len()
            && matches!(bytes[cursor], b' ' | b'=' | b':' | b'"' | b'\'' | b'\\')
        {
            cursor += 1;
        }
        let separator = &text[separator_start..cursor];
        let value_start = cursor;
        cursor = word_end(bytes, cursor);
        // An Authorization header's value is a scheme and a credential: two words.
        if &lower[start..start + len] == "authorization"
            && bytes.get(cursor) == Some(&b' ')
            && word_end(bytes, cursor + 1) > cursor + 1
        {
            cursor = word_end(bytes, cursor + 1);
        }
        let introduces = !separator.is_empty() && (!keyed || separator.contains(['=', ':']));
        if introduces && cursor > value_start {
            out.push_str(&text[copied..value_start]);
            out.push_str(REDACTED);
            copied = cursor;
        }
        at = cursor.max(start + len);
    }
    out.push_str(&text[copied..]);
    out
}

/// Where the word starting at `from` ends.
fn word_end(bytes: &[u8], from: usize) -> usize {
    let mut end = from;
    while end < bytes.len()
        && !matches!(
            bytes[end],
            b' ' | b'"' | b'\'' | b',' | b'}' | b'\n' | b'\r' | b'\\' | b';' | b')'
        )
    {
        end += 1;
    }
    end
}

/// An object as the bundle keeps it: no `managedFields`, no last-applied configuration,
/// credentials redacted by key and in free text.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("managedFields");
            map.remove("kubectl.kubernetes.io/last-applied-configuration");
            for (key, inner) in map.iter_mut() {
                if credential_key(key) && !inner.is_null() {
                    *inner = Value::String(REDACTED.into());
                } else {
                    redact(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        Value::String(text) => *text = redact_text(text),
        _ => {}
    }
}

/// The files of the bundle, by relative path, and what could not be gathered.
#[derive(Debug, Default)]
struct Bundle {
    files: BTreeMap<String, Vec<u8>>,
    problems: Vec<String>,
    counts: Vec<String>,
}

impl Bundle {
    /// Adds `objects` of `kind` as one YAML list, redacted.
    fn add_objects(&mut self, path: String, kind: Kind, mut objects: Vec<Value>) {
        objects.iter_mut().for_each(redact);
        self.counts
            .push(format!("{path}: {} {}", objects.len(), kind.plural));
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let text = serde_yaml::to_string(&list).unwrap_or_default();
        self.files.insert(path, text.into_bytes());
    }
}

/// Every object of `kind`, as JSON; None (and a problem recorded) when it cannot be listed.
async fn list(client: &Client, kind: Kind, bundle: &mut Bundle) -> Option<Vec<Value>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource());
    match api.list(&ListParams::default()).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .map(|mut o| {
                    o.types = Some(kube::api::TypeMeta {
                        api_version: kind.resource().api_version,
                        kind: kind.kind.into(),
                    });
                    serde_json::to_value(o).unwrap_or_default()
                })
                .collect(),
        ),
        // A kind this cluster does not serve has nothing to gather: not a problem.
        Err(kube::Error::Api(status)) if status.code == 404 => None,
        Err(error) => {
            let said = Error::kube("List")(error).to_string();
            bundle.problems.push(format!(
                "{}.{}: not gathered: {said}",
                kind.plural, kind.group
            ));
            None
        }
    }
}

fn key_of(object: &Value) -> Key {
    (
        text(object, "/metadata/namespace")
            .unwrap_or_default()
            .into(),
        text(object, "/metadata/name").unwrap_or_default().into(),
    )
}

/// The logs of the controller's containers, each under `logs/`; a refusal is recorded.
async fn logs(client: &Client, args: &GatherArgs, bundle: &mut Bundle) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(client.clone(), &args.controller_namespace);
    let listed = match pods
        .list(&ListParams::default().labels(&args.controller_selector))
        .await
    {
        Ok(listed) => listed.items,
        Err(error) => {
            let said = Error::kube("List Pods")(error).to_string();
            bundle.problems.push(format!("logs: {said}"));
            return;
        }
    };
    if listed.is_empty() {
        bundle.problems.push(format!(
            "logs: no pod matches {} in {}",
            args.controller_selector, args.controller_namespace
        ));
    }
    for pod in listed {
        let name = pod.name_any();
        let containers: Vec<String> = pod
            .spec
            .map(|s| s.containers.into_iter().map(|c| c.name).collect())
            .unwrap_or_default();
        for container in containers {
            let params = LogParams {
                container: Some(container.clone()),
                tail_lines: Some(args.log_lines),
                ..LogParams::default()
            };
            match pods.logs(&name, &params).await {
                Ok(text) => {
                    let path = format!("logs/{name}/{container}.log");
                    bundle
                        .counts
                        .push(format!("{path}: {} lines", text.lines().count()));
                    bundle.files.insert(path, redact_text(&text).into_bytes());
                }
                Err(error) => {
                    let said = Error::kube("Get pods/log")(error).to_string();
                    bundle
                        .problems
                        .push(format!("logs of {name}/{container}: {said}"));
                }
            }
        }
    }
}

/// Gathers the bundle and writes it.
pub async fn run(args: GatherArgs) -> Result<()> {
    let client = args.cluster.client().await?;
    let mut bundle = Bundle::default();
    let mut involved = Involved::default();
    let mut gathered: BTreeSet<(String, String, String)> = BTreeSet::new();
    for kind in OURS {
        let Some(objects) = list(&client, kind, &mut bundle).await else {
            continue;
        };
        for object in &objects {
            involved.add(kind.kind, object);
            let (namespace, name) = key_of(object);
            gathered.insert((kind.kind.into(), namespace, name));
        }
        bundle.add_objects(format!("baremend/{}.yaml", kind.plural), kind, objects);
    }
    for checks in HEALTH_CHECKS {
        if let Some(all) = list(&client, checks, &mut bundle).await {
            let path = format!("cluster/{}.{}.yaml", checks.plural, checks.group);
            bundle.add_objects(path, checks, all);
        }
    }
    // The controller's Deployment, beside its pods' logs.
    if let Some(all) = list(&client, DEPLOYMENTS, &mut bundle).await {
        let namespace = args.controller_namespace.as_str();
        let mine: Vec<Value> = all
            .into_iter()
            .filter(|d| text(d, "/metadata/namespace") == Some(namespace))
            .collect();
        bundle.add_objects("baremend/deployments.yaml".into(), DEPLOYMENTS, mine);
    }
    for machines in [MACHINES, CAPI_MACHINES] {
        let Some(all) = list(&client, machines, &mut bundle).await else {
            continue;
        };
        let mine: Vec<Value> = all
            .into_iter()
            .filter(|m| involved.machines.contains(&key_of(m)))
            .collect();
        for machine in &mine {
            involved.add_machine(machine);
        }
        bundle.add_objects(
            format!("cluster/machines.{}.yaml", machines.group),
            machines,
            mine,
        );
    }
    for (kind, wanted) in [
        (HOSTS, &involved.hosts),
        (
            NODES,
            &involved
                .nodes
                .iter()
                .map(|n| (String::new(), n.clone()))
                .collect(),
        ),
    ] {
        let Some(all) = list(&client, kind, &mut bundle).await else {
            continue;
        };
        let mine: Vec<Value> = all
            .into_iter()
            .filter(|o| wanted.contains(&key_of(o)))
            .collect();
        for object in &mine {
            let (namespace, name) = key_of(object);
            gathered.insert((kind.kind.into(), namespace, name));
        }
        bundle.add_objects(format!("cluster/{}.yaml", kind.plural), kind, mine);
    }
    for (namespace, name) in &involved.machines {
        gathered.insert(("Machine".into(), namespace.clone(), name.clone()));
    }
    if let Some(events) = list(&client, EVENTS, &mut bundle).await {
        let about: Vec<Value> = events
            .into_iter()
            .filter(|e| {
                let kind = text(e, "/regarding/kind").unwrap_or_default();
                let namespace = text(e, "/regarding/namespace").unwrap_or_default();
                let name = text(e, "/regarding/name").unwrap_or_default();
                gathered.contains(&(kind.into(), namespace.into(), name.into()))
            })
            .collect();
        bundle.add_objects("events.yaml".into(), EVENTS, about);
    }
    logs(&client, &args, &mut bundle).await;
    let summary = summary(&bundle);
    bundle
        .files
        .insert("summary.txt".into(), summary.into_bytes());
    write(&args.out, &bundle.files)?;
    println!("{}: {} files", args.out.display(), bundle.files.len());
    for problem in &bundle.problems {
        println!("not gathered: {problem}");
    }
    Ok(())
}

fn summary(bundle: &Bundle) -> String {
    let mut text = format!(
        "baremend gather {}\nSecrets are never read; values under credential keys and credential-like words in free text are replaced by {REDACTED}. Read the bundle before you share it: a credential under an innocent key in free text can survive.\n\ngathered:\n",
        env!("BAREMEND_VERSION")
    );
    for count in &bundle.counts {
        text.push_str(&format!("  {count}\n"));
    }
    text.push_str("\nnot gathered:\n");
    for problem in &bundle.problems {
        text.push_str(&format!("  {problem}\n"));
    }
    if bundle.problems.is_empty() {
        text.push_str("  nothing\n");
    }
    text
}

/// Whether `out` names an archive rather than a directory.
fn is_archive(out: &Path) -> bool {
    let name = out.to_string_lossy();
    name.ends_with(".tar.gz") || name.ends_with(".tgz")
}

fn write(out: &Path, files: &BTreeMap<String, Vec<u8>>) -> Result<()> {
    let failed = |source| LocalError::WriteFile {
        what: "the support bundle",
        path: out.to_path_buf(),
        source,
    };
    if is_archive(out) {
        let file = std::fs::File::create(out).map_err(failed)?;
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let root = out
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .trim_end_matches(".tar.gz")
                    .trim_end_matches(".tgz")
                    .to_string()
            })
            .unwrap_or_else(|| "baremend-gather".into());
        for (path, content) in files {
            tar_entry(&mut gz, &format!("{root}/{path}"), content).map_err(failed)?;
        }
        // Two zero blocks end a tar archive.
        gz.write_all(&[0u8; 1024]).map_err(failed)?;
        gz.finish().map_err(failed)?;
        return Ok(());
    }
    if out.exists()
        && std::fs::read_dir(out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(Error::Invalid {
            object: out.display().to_string(),
            reason: "exists and is not an empty directory: name a new one".into(),
        });
    }
    for (path, content) in files {
        let target = out.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(failed)?;
        }
        std::fs::write(&target, content).map_err(failed)?;
    }
    Ok(())
}

/// One file of a ustar archive: a 512-byte header, the content, padding to 512.
fn tar_entry(out: &mut impl Write, path: &str, content: &[u8]) -> std::io::Result<()> {
    let mut header = [0u8; 512];
    let (prefix, name) = match path.len() {
        0..=100 => ("", path),
        _ => path.rsplit_once('/').unwrap_or(("", path)),
    };
    if name.len() > 100 || prefix.len() > 155 {
        return Err(std::io::Error::other(format!(
            "path too long for tar: {path}"
        )));
    }
    header[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |field: &mut [u8], value: u64| {
        let text = format!("{value:0width$o}", width = field.len() - 1);
        field[..text.len()].copy_from_slice(text.as_bytes());
    };
    octal(&mut header[100..108], 0o644);
    octal(&mut header[108..116], 0);
    octal(&mut header[116..124], 0);
    octal(&mut header[124..136], content.len() as u64);
    octal(&mut header[136..148], 0);
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    // The checksum is computed with its own field as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u64 = header.iter().map(|b| u64::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());
    out.write_all(&header)?;
    out.write_all(content)?;
    let padding = (512 - content.len() % 512) % 512;
    out.write_all(&vec![0u8; padding])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn credentials_are_redacted_by_key_and_in_free_text_and_references_are_kept() {
        let mut object = json!({
            "metadata": {
                "name": "w0",
                "annotations": {
                    "example.com/api-token": "tok-123",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"password\":\"p\"}",
                    "note": "login with password=hunter2 then"
                },
                "managedFields": [{"manager": "x"}]
            },
            "spec": {"credentialsName": "w0-bmc-secret", "bmc": {"password": "pw", "address": "redfish://h"}},
            "message": "Authorization: Bearer abc.def and token: xyz"
        });
        redact(&mut object);
        let text = object.to_string();
        for secret in [
            "tok-123",
            "hunter2",
            "\"pw\"",
            "abc.def",
            "xyz",
            "managedFields",
            "last-applied",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(object["spec"]["credentialsName"], "w0-bmc-secret");
        assert_eq!(object["spec"]["bmc"]["address"], "redfish://h");
        assert_eq!(
            object["metadata"]["annotations"]["note"],
            "login with password=<redacted> then"
        );
    }

    #[test]
    fn free_text_without_credentials_is_unchanged() {
        for line in [
            "no credential here: power off",
            "the token bucket is full",
            "Machine m/w0: Secret w0-bmc-secret not found",
        ] {
            assert_eq!(redact_text(line), line);
        }
        assert_eq!(
            redact_text("client_secret=abc token:def Bearer ghi"),
            "client_secret=<redacted> token:<redacted> Bearer <redacted>"
        );
    }

    #[test]
    fn involved_objects_come_from_remediations_requests_and_machines() {
        let mut involved = Involved::default();
        involved.add(
            "Remediation",
            &json!({"metadata": {"namespace": "m", "name": "w0-1"}, "spec": {"machineName": "w0", "nodeName": "w0", "host": "m/w0"}}),
        );
        involved.add(
            "NodeRemediation",
            &json!({"metadata": {"namespace": "x", "name": "n5"}}),
        );
        involved.add_machine(&json!({"metadata": {"annotations": {"metal3.io/BareMetalHost": "m/h1"}}, "status": {"nodeRef": {"name": "w1"}}}));
        assert_eq!(
            involved.machines,
            BTreeSet::from([("m".to_string(), "w0".to_string())])
        );
        assert_eq!(
            involved.hosts,
            BTreeSet::from([("m".into(), "w0".into()), ("m".into(), "h1".into())])
        );
        assert_eq!(
            involved.nodes,
            BTreeSet::from(["w0".into(), "n5".into(), "w1".into()])
        );
    }
}
