//! `meta.k8s.io/v1` Table answers, which kubectl asks for to print `get` output: the columns
//! of the built-in kinds baremend uses, and the printer columns of CRDs.

use std::time::Duration;

use serde_json::{Value, json};

use super::kinds::{PrinterColumn, ResourceType};
use super::time::parse_time;

/// `5m3s`, `3h`, `2d` (as kubectl's HumanDuration, in short).
pub fn human_age(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0..=119 => format!("{secs}s"),
        120..=599 => format!("{}m{}s", secs / 60, secs % 60),
        600..=10_799 => format!("{}m", secs / 60),
        10_800..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

fn age_of(object: &Value, now: Duration) -> String {
    object
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_time)
        .map(|created| human_age(now.saturating_sub(created)))
        .unwrap_or_else(|| "<unknown>".into())
}

/// Evaluates the simple JSONPath of printer columns: `.a.b`, `.a['x.y']`, `.a[0]`, and a
/// filter `.a[?(@.type=="Ready")]`, which takes the first element whose field has that value
/// (kube-apiserver prints the first match of a column's path: a printer column of
/// `.status.conditions[?(@.type=="Accepted")].status` printed `<none>` here before,
/// `tests/kubectl_install_apiserver.rs`).
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut current = object;
    let mut rest = path.trim().trim_start_matches('{').trim_end_matches('}');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (field, tail) = after.split_at(end);
            if !field.is_empty() {
                current = current.get(field)?;
            }
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let (inside, tail) = after.split_at(end);
            rest = &tail[1..];
            let key = inside.trim_matches(|c| c == '\'' || c == '"');
            current = if let Some(filter) = inside.strip_prefix("?(@.") {
                let (field, wanted) = filter.strip_suffix(')')?.split_once("==")?;
                let wanted = wanted.trim().trim_matches(|c| c == '\'' || c == '"');
                current
                    .as_array()?
                    .iter()
                    .find(|item| item.get(field.trim()).and_then(Value::as_str) == Some(wanted))?
            } else {
                match inside.parse::<usize>() {
                    Ok(index) => current.get(index)?,
                    Err(_) => current.get(key)?,
                }
            };
        } else {
            return None;
        }
    }
    Some(current)
}

fn cell(value: Option<&Value>) -> Value {
    match value {
        None | Some(Value::Null) => json!("<none>"),
        Some(Value::String(s)) => json!(s),
        Some(other) => other.clone(),
    }
}

fn column(name: &str, kind: &str, priority: i64) -> Value {
    json!({"name": name, "type": kind, "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": priority})
}

fn node_status(node: &Value) -> String {
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["status"].as_str());
    // As kubectl's node printer: anything but Ready=True is NotReady.
    let mut status = match ready {
        Some("True") => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

fn node_roles(node: &Value) -> String {
    let roles: Vec<&str> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .keys()
                .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                .collect()
        })
        .unwrap_or_default();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

fn pod_cells(pod: &Value, now: Duration) -> Vec<Value> {
    let statuses = pod
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
    let restarts: i64 = statuses.map_or(0, |s| {
        s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
    });
    let status = if pod.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating".to_owned()
    } else {
        pod.pointer("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or("Unknown")
            .to_owned()
    };
    vec![
        json!(format!("{ready}/{total}")),
        json!(status),
        json!(restarts),
        json!(age_of(pod, now)),
        cell(pod.pointer("/status/podIP")),
        cell(pod.pointer("/spec/nodeName")),
    ]
}

/// (column definitions, cells of one object) for a type.
/// `Denied`, `Approved` or `Pending`, then `,Failed` and `,Issued` when they apply.
fn csr_condition(object: &Value) -> String {
    let conditions = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let has = |kind: &str| conditions.iter().any(|c| c["type"] == kind);
    let mut text = if has("Denied") {
        "Denied".to_owned()
    } else if has("Approved") {
        "Approved".to_owned()
    } else {
        "Pending".to_owned()
    };
    if has("Failed") {
        text.push_str(",Failed");
    }
    if object
        .pointer("/status/certificate")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
    {
        text.push_str(",Issued");
    }
    text
}

/// `namespace/name` of the Service an APIService proxies to, or `Local`.
fn api_service_backend(object: &Value) -> String {
    match object.pointer("/spec/service").filter(|s| !s.is_null()) {
        Some(service) => format!(
            "{}/{}",
            service["namespace"].as_str().unwrap_or_default(),
            service["name"].as_str().unwrap_or_default()
        ),
        None => "Local".into(),
    }
}

/// `True`, `False (Reason)`, or `Unknown` without an Available condition.
fn api_service_available(object: &Value) -> String {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
        .map_or("Unknown".into(), |c| match c["status"].as_str() {
            Some("True") => "True".into(),
            status => format!(
                "{} ({})",
                status.unwrap_or("Unknown"),
                c["reason"].as_str().unwrap_or_default()
            ),
        })
}

fn columns_and_cells(ty: &ResourceType, object: &Value, now: Duration) -> (Vec<Value>, Vec<Value>) {
    let name = json!(
        object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    );
    let age = json!(age_of(object, now));
    match (ty.group.as_str(), ty.plural.as_str()) {
        ("", "nodes") => (
            vec![
                column("Name", "string", 0),
                column("Status", "string", 0),
                column("Roles", "string", 0),
                column("Age", "string", 0),
                column("Version", "string", 0),
            ],
            vec![
                name,
                json!(node_status(object)),
                json!(node_roles(object)),
                age,
                cell(object.pointer("/status/nodeInfo/kubeletVersion")),
            ],
        ),
        ("", "pods") => {
            let mut cells = vec![name];
            cells.extend(pod_cells(object, now));
            (
                vec![
                    column("Name", "string", 0),
                    column("Ready", "string", 0),
                    column("Status", "string", 0),
                    column("Restarts", "string", 0),
                    column("Age", "string", 0),
                    column("IP", "string", 1),
                    column("Node", "string", 1),
                ],
                cells,
            )
        }
        ("certificates.k8s.io", "certificatesigningrequests") => (
            vec![
                column("Name", "string", 0),
                column("Age", "string", 0),
                column("SignerName", "string", 0),
                column("Requestor", "string", 0),
                column("RequestedDuration", "string", 0),
                column("Condition", "string", 0),
            ],
            vec![
                name,
                age,
                cell(object.pointer("/spec/signerName")),
                cell(object.pointer("/spec/username")),
                json!(
                    object
                        .pointer("/spec/expirationSeconds")
                        .and_then(Value::as_u64)
                        .map_or("<none>".into(), |s| human_age(Duration::from_secs(s)))
                ),
                json!(csr_condition(object)),
            ],
        ),
        ("", "componentstatuses") => {
            // As the real printer: the Healthy condition's status, message and error.
            let healthy = object
                .pointer("/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Healthy"));
            let status = match healthy.map(|c| &c["status"]) {
                Some(s) if s == "True" => "Healthy",
                Some(_) => "Unhealthy",
                None => "Unknown",
            };
            let text =
                |field: &str| json!(healthy.and_then(|c| c[field].as_str()).unwrap_or_default());
            (
                vec![
                    column("Name", "string", 0),
                    column("Status", "string", 0),
                    column("Message", "string", 0),
                    column("Error", "string", 0),
                ],
                vec![name, json!(status), text("message"), text("error")],
            )
        }
        ("apiregistration.k8s.io", "apiservices") => (
            vec![
                column("Name", "string", 0),
                column("Service", "string", 0),
                column("Available", "string", 0),
                column("Age", "string", 0),
            ],
            vec![
                name,
                json!(api_service_backend(object)),
                json!(api_service_available(object)),
                age,
            ],
        ),
        ("policy", "poddisruptionbudgets") => (
            vec![
                column("Name", "string", 0),
                column("Min Available", "string", 0),
                column("Max Unavailable", "string", 0),
                column("Allowed Disruptions", "integer", 0),
                column("Age", "string", 0),
            ],
            vec![
                name,
                json!(
                    object
                        .pointer("/spec/minAvailable")
                        .map_or("N/A".to_owned(), |v| v
                            .to_string()
                            .trim_matches('"')
                            .to_owned())
                ),
                json!(
                    object
                        .pointer("/spec/maxUnavailable")
                        .map_or("N/A".to_owned(), |v| v
                            .to_string()
                            .trim_matches('"')
                            .to_owned())
                ),
                cell(object.pointer("/status/disruptionsAllowed")),
                age,
            ],
        ),
        ("", "events") => (
            vec![
                column("Last Seen", "string", 0),
                column("Type", "string", 0),
                column("Reason", "string", 0),
                column("Object", "string", 0),
                column("Subobject", "string", 1),
                column("Source", "string", 1),
                column("Message", "string", 0),
                column("First Seen", "string", 1),
                column("Count", "string", 1),
                column("Name", "string", 1),
            ],
            event_cells(object, now),
        ),
        ("coordination.k8s.io", "leases") => (
            vec![
                column("Name", "string", 0),
                column("Holder", "string", 0),
                column("Age", "string", 0),
            ],
            vec![name, cell(object.pointer("/spec/holderIdentity")), age],
        ),
        _ if ty.custom && !ty.printer_columns.is_empty() => {
            let mut columns = vec![column("Name", "string", 0)];
            let mut cells = vec![name];
            for PrinterColumn {
                name,
                kind,
                json_path: path,
                priority,
            } in &ty.printer_columns
            {
                columns.push(column(name, kind, *priority));
                let value = json_path(object, path);
                cells.push(if kind == "date" {
                    value
                        .and_then(Value::as_str)
                        .and_then(parse_time)
                        .map_or(json!("<none>"), |t| json!(human_age(now.saturating_sub(t))))
                } else {
                    cell(value)
                });
            }
            (columns, cells)
        }
        _ => (
            vec![column("Name", "string", 0), column("Age", "string", 0)],
            vec![name, age],
        ),
    }
}

/// An Event's row as kube-apiserver prints it (`pkg/printers/internalversion/printers.go`,
/// `printEvent`, with the server's `Wide`): last seen (the first seen without a last, a
/// series' last observation when it has one), type, reason, `kind/name` in lower case, field
/// path, source (`component, host`, else the reporting controller and instance), message,
/// first seen (the event time without one), count (1 when unset), name.
fn event_cells(event: &Value, now: Duration) -> Vec<Value> {
    let text = |path: &str| {
        event
            .pointer(path)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let since = |path: &str| {
        event
            .pointer(path)
            .and_then(Value::as_str)
            .and_then(parse_time)
            .map(|t| human_age(now.saturating_sub(t)))
    };
    let first = since("/firstTimestamp")
        .or_else(|| since("/eventTime"))
        .unwrap_or_else(|| "<unknown>".into());
    let series = event.get("series").filter(|s| s.is_object());
    let last = match series {
        Some(_) => since("/series/lastObservedTime").unwrap_or_else(|| "<unknown>".into()),
        None => since("/lastTimestamp").unwrap_or_else(|| first.clone()),
    };
    let count = match series {
        Some(series) => series["count"].as_i64().unwrap_or_default(),
        None => event["count"].as_i64().filter(|c| *c != 0).unwrap_or(1),
    };
    let kind = text("/involvedObject/kind").to_lowercase();
    let target = match text("/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let first_non_empty = |a: &str, b: &str| if a.is_empty() { b } else { a }.to_owned();
    let component = first_non_empty(text("/source/component"), text("/reportingComponent"));
    let instance = first_non_empty(text("/source/host"), text("/reportingInstance"));
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(text("/type")),
        json!(text("/reason")),
        json!(target),
        json!(text("/involvedObject/fieldPath")),
        json!(source),
        json!(text("/message").trim()),
        json!(first),
        json!(count),
        json!(text("/metadata/name")),
    ]
}

fn partial_metadata(object: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object.get("metadata").cloned().unwrap_or_default()})
}

/// A Table of `objects`; `include_object` puts the whole object in each row instead of its
/// metadata.
pub fn table(
    ty: &ResourceType,
    objects: &[Value],
    resource_version: &str,
    continue_token: Option<&str>,
    now: Duration,
    include_object: bool,
) -> Value {
    let (columns, _) = columns_and_cells(ty, &json!({}), now);
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let (_, cells) = columns_and_cells(ty, object, now);
            json!({"cells": cells, "object": if include_object { object.clone() } else { partial_metadata(object) }})
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-apiserver 1.36's Event row (`printers.go`, `printEvent`): `kubectl get events`
    /// printed only a name and an age here before (found by docs/guides/try-it.md).
    #[test]
    fn an_event_row_is_the_one_kube_apiserver_prints() {
        let kinds = super::super::kinds::Registry::new();
        let ty = kinds.get("", "v1", "events").unwrap();
        let event = json!({
            "metadata": {"name": "worker-1-1.18eca2", "namespace": "openshift-machine-api"},
            "involvedObject": {"kind": "Remediation", "name": "worker-1-1"},
            "reason": "Fenced", "message": "proven off \n", "type": "Normal",
            "firstTimestamp": "2026-11-29T10:00:00Z", "lastTimestamp": "2026-11-29T10:00:30Z",
            "count": 3, "source": {"component": "baremend", "host": "pod-a"},
        });
        let now = parse_time("2026-11-29T10:01:00Z").unwrap();
        let (columns, cells) = columns_and_cells(&ty, &event, now);
        let names: Vec<&str> = columns
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
        assert_eq!(
            cells,
            [
                json!("30s"),
                json!("Normal"),
                json!("Fenced"),
                json!("remediation/worker-1-1"),
                json!(""),
                json!("baremend, pod-a"),
                json!("proven off"),
                json!("60s"),
                json!(3),
                json!("worker-1-1.18eca2"),
            ]
        );
        // The new API's singleton: no count, no timestamps but the event time, the reporting
        // controller as the source.
        let singleton = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Node"},
            "eventTime": "2026-11-29T10:00:50.000000Z", "reportingComponent": "kubelet"});
        let (_, cells) = columns_and_cells(&ty, &singleton, now);
        assert_eq!(cells[0], json!("10s"));
        assert_eq!(cells[3], json!("node"));
        assert_eq!(cells[5], json!("kubelet"));
        assert_eq!(cells[8], json!(1));
    }

    #[test]
    fn a_filter_takes_the_first_element_with_that_value() {
        let object = json!({"status": {"conditions": [
            {"type": "Held", "status": "False"},
            {"type": "Accepted", "status": "False", "reason": "NamespaceNotTrusted"},
        ]}});
        let path = r#".status.conditions[?(@.type=="Accepted")].reason"#;
        assert_eq!(
            json_path(&object, path),
            Some(&json!("NamespaceNotTrusted"))
        );
        let missing = r#".status.conditions[?(@.type=='Ready')].status"#;
        assert_eq!(json_path(&object, missing), None);
    }

    #[test]
    fn printer_json_paths_and_ages_evaluate() {
        let object = json!({"metadata": {"labels": {"a.b/c": "x"}}, "status": {"list": [{"n": 1}], "phase": "Running"}});
        assert_eq!(json_path(&object, ".status.phase"), Some(&json!("Running")));
        assert_eq!(
            json_path(&object, ".metadata.labels['a.b/c']"),
            Some(&json!("x"))
        );
        assert_eq!(json_path(&object, ".status.list[0].n"), Some(&json!(1)));
        assert_eq!(json_path(&object, ".status.nope"), None);
        assert_eq!(human_age(Duration::from_secs(59)), "59s");
        assert_eq!(human_age(Duration::from_secs(185)), "3m5s");
        assert_eq!(human_age(Duration::from_secs(7200)), "120m");
        assert_eq!(human_age(Duration::from_secs(90_000)), "25h");
    }
}
