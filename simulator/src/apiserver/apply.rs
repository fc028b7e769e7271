//! Server-side apply: field ownership per manager (`metadata.managedFields`, FieldsV1),
//! conflicts between managers (409 unless forced), removal of fields a manager stops applying,
//! and the ownership that ordinary updates take.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::errors::{ApiError, ApiResult};
use super::kinds::ResourceType;
use super::patch::{ListStrategy, list_strategy, strategic_merge};

/// A field path in FieldsV1 components (`f:spec`, `k:{"name":"c"}`, `v:"a"`).
pub type FieldPath = Vec<String>;

/// What an apply request asks.
#[derive(Debug)]
pub struct ApplyRequest<'a> {
    /// The field manager.
    pub manager: &'a str,
    /// Take conflicting fields over.
    pub force: bool,
}

/// Metadata fields that are owned like any other field.
const OWNED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

/// The field paths a configuration (or object) sets.
pub fn fields_of(ty: &ResourceType, object: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    let Some(map) = object.as_object() else {
        return out;
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "status" if ty.status_subresource => {}
            "metadata" => {
                for field in OWNED_METADATA {
                    if let Some(value) = value.get(*field) {
                        walk(
                            ty,
                            value,
                            &mut vec!["f:metadata".into(), format!("f:{field}")],
                            &mut vec!["metadata", field],
                            &mut out,
                        );
                    }
                }
            }
            _ => walk(
                ty,
                value,
                &mut vec![format!("f:{key}")],
                &mut vec![key.as_str()],
                &mut out,
            ),
        }
    }
    out
}

fn walk<'a>(
    ty: &ResourceType,
    value: &'a Value,
    path: &mut FieldPath,
    names: &mut Vec<&'a str>,
    out: &mut BTreeSet<FieldPath>,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                path.push(format!("f:{key}"));
                names.push(key);
                walk(ty, child, path, names, out);
                names.pop();
                path.pop();
            }
        }
        Value::Array(items) => match list_strategy(&ty.plural, names) {
            ListStrategy::Atomic => {
                out.insert(path.clone());
            }
            ListStrategy::PrimitiveSet => {
                for item in items {
                    let mut item_path = path.clone();
                    item_path.push(format!("v:{item}"));
                    out.insert(item_path);
                }
            }
            ListStrategy::MergeBy(key) => {
                for item in items {
                    let Some(id) = item.get(key) else {
                        continue;
                    };
                    path.push(format!("k:{}", json!({key: id})));
                    match item.as_object() {
                        Some(fields) => {
                            for (field, child) in fields {
                                path.push(format!("f:{field}"));
                                walk(ty, child, path, &mut names.clone(), out);
                                path.pop();
                            }
                        }
                        None => {
                            out.insert(path.clone());
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// The value at a field path.
fn get_at<'a>(object: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut current = object;
    for component in path {
        current = if let Some(field) = component.strip_prefix("f:") {
            current.get(field)?
        } else if let Some(key) = component.strip_prefix("k:") {
            let wanted: Map<String, Value> = serde_json::from_str(key).ok()?;
            current
                .as_array()?
                .iter()
                .find(|item| wanted.iter().all(|(k, v)| item.get(k) == Some(v)))?
        } else if let Some(literal) = component.strip_prefix("v:") {
            let wanted: Value = serde_json::from_str(literal).ok()?;
            current.as_array()?.iter().find(|item| **item == wanted)?
        } else {
            return None;
        };
    }
    Some(current)
}

/// Removes the field at a path (and list items by key or value).
fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = object;
    for component in parents {
        let next = if let Some(field) = component.strip_prefix("f:") {
            current.get_mut(field)
        } else if let Some(key) = component.strip_prefix("k:") {
            let Ok(wanted) = serde_json::from_str::<Map<String, Value>>(key) else {
                return;
            };
            current.as_array_mut().and_then(|items| {
                items
                    .iter_mut()
                    .find(|item| wanted.iter().all(|(k, v)| item.get(k) == Some(v)))
            })
        } else {
            None
        };
        let Some(next) = next else {
            return;
        };
        current = next;
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(map) = current.as_object_mut() {
            map.remove(field);
        }
    } else if let Some(key) = last.strip_prefix("k:") {
        if let (Ok(wanted), Some(items)) = (
            serde_json::from_str::<Map<String, Value>>(key),
            current.as_array_mut(),
        ) {
            items.retain(|item| !wanted.iter().all(|(k, v)| item.get(k) == Some(v)));
        }
    } else if let Some(literal) = last.strip_prefix("v:")
        && let (Ok(wanted), Some(items)) = (
            serde_json::from_str::<Value>(literal),
            current.as_array_mut(),
        )
    {
        items.retain(|item| *item != wanted);
    }
}

/// `.spec.containers[name="c"].image`, for conflict messages.
fn render(path: &[String]) -> String {
    let mut out = String::new();
    for component in path {
        if let Some(field) = component.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = component.strip_prefix("k:") {
            let rendered = serde_json::from_str::<Map<String, Value>>(key)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            out.push_str(&format!("[{rendered}]"));
        } else if let Some(value) = component.strip_prefix("v:") {
            out.push_str(&format!("[={value}]"));
        }
    }
    out
}

fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for component in path {
            node = node
                .entry(component.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("inserted as an object");
        }
    }
    Value::Object(root)
}

fn from_fields_v1(value: &Value) -> BTreeSet<FieldPath> {
    fn collect(node: &Map<String, Value>, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        let children: Vec<(&String, &Value)> =
            node.iter().filter(|(k, _)| k.as_str() != ".").collect();
        if (children.is_empty() || node.contains_key(".")) && !path.is_empty() {
            out.insert(path.clone());
        }
        for (key, child) in children {
            path.push(key.clone());
            match child.as_object() {
                Some(map) => collect(map, path, out),
                None => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    if let Some(map) = value.as_object() {
        collect(map, &mut Vec::new(), &mut out);
    }
    out
}

/// One managedFields entry.
#[derive(Debug, Clone)]
struct Managed {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<Value>,
    fields: BTreeSet<FieldPath>,
}

fn managed_of(object: &Value) -> Vec<Managed> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.get("subresource").is_none())
                .map(|e| Managed {
                    manager: e
                        .get("manager")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    operation: e
                        .get("operation")
                        .and_then(Value::as_str)
                        .unwrap_or("Update")
                        .to_owned(),
                    api_version: e
                        .get("apiVersion")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    time: e.get("time").cloned(),
                    fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write_managed(object: &mut Value, managed: &[Managed]) {
    let entries: Vec<Value> = managed
        .iter()
        .filter(|m| !m.fields.is_empty())
        .map(|m| {
            let mut entry = json!({
                "manager": m.manager,
                "operation": m.operation,
                "apiVersion": m.api_version,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&m.fields),
            });
            if let Some(time) = &m.time {
                entry["time"] = time.clone();
            }
            entry
        })
        .collect();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            metadata.remove("managedFields");
        } else {
            metadata.insert("managedFields".into(), Value::Array(entries));
        }
    }
}

/// Records `fields` as applied by `manager` on a new object.
pub fn record_apply(
    object: &mut Value,
    manager: &str,
    api_version: &str,
    fields: &BTreeSet<FieldPath>,
    time: Option<Value>,
) {
    let entry = Managed {
        manager: manager.to_owned(),
        operation: "Apply".into(),
        api_version: api_version.to_owned(),
        time,
        fields: fields.clone(),
    };
    if object.get("metadata").is_none() {
        object["metadata"] = json!({});
    }
    write_managed(object, &[entry]);
}

/// Server-side apply of `config` by a manager onto `current`.
pub fn apply(
    ty: &ResourceType,
    version: &str,
    current: &Value,
    config: &Value,
    request: &ApplyRequest<'_>,
) -> ApiResult<Value> {
    if request.manager.is_empty() {
        return Err(ApiError::bad_request(
            "PATCH requests with the apply patch type must set the fieldManager parameter",
        ));
    }
    let applied = fields_of(ty, config);
    let mut managed = managed_of(current);
    let mut conflicts = Vec::new();
    for other in managed
        .iter()
        .filter(|m| !(m.manager == request.manager && m.operation == "Apply"))
    {
        for path in applied.intersection(&other.fields) {
            if get_at(current, path) != get_at(config, path) {
                conflicts.push((
                    other.manager.clone(),
                    other.api_version.clone(),
                    path.clone(),
                ));
            }
        }
    }
    if !conflicts.is_empty() && !request.force {
        let name = current
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut error = ApiError::conflict(&ty.group, &ty.plural, name, "");
        // A conflict names the other manager's version only when it differs from this
        // request's (structured-merge-diff `Conflict.Error`, as kube-apiserver v1.36.3 says it).
        let asked = ty.api_version(version);
        let with = |m: &str, v: &str| {
            if v == asked {
                format!("conflict with \"{m}\"")
            } else {
                format!("conflict with \"{m}\" using {v}")
            }
        };
        let text: Vec<String> = conflicts
            .iter()
            .map(|(m, v, p)| format!("{}: {}", with(m, v), render(p)))
            .collect();
        error.message = format!(
            "Apply failed with {} conflict{}: {}",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" },
            text.join("; ")
        );
        // Only the causes: the conflict error carries no name, group or kind.
        error.details = Some(json!({
            "causes": conflicts.iter().map(|(m, v, p)| json!({"reason": "FieldManagerConflict", "message": with(m, v), "field": render(p)})).collect::<Vec<_>>(),
        }));
        return Err(error);
    }
    for (manager, _, path) in &conflicts {
        if let Some(entry) = managed.iter_mut().find(|m| &m.manager == manager) {
            entry.fields.remove(path);
        }
    }
    let previous = managed
        .iter()
        .find(|m| m.manager == request.manager && m.operation == "Apply")
        .map(|m| m.fields.clone())
        .unwrap_or_default();
    let mut next = current.clone();
    for path in previous.difference(&applied) {
        let owned_elsewhere = managed
            .iter()
            .any(|m| m.manager != request.manager && m.fields.contains(path));
        if !owned_elsewhere {
            remove_at(&mut next, path);
        }
    }
    let mut patch = config.clone();
    if let Some(map) = patch.as_object_mut() {
        map.remove("apiVersion");
        map.remove("kind");
        if ty.status_subresource {
            map.remove("status");
        }
        if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.retain(|k, _| OWNED_METADATA.contains(&k.as_str()));
        }
    }
    strategic_merge(&mut next, &patch, &ty.plural).map_err(ApiError::bad_request)?;
    managed.retain(|m| !(m.manager == request.manager && m.operation == "Apply"));
    managed.push(Managed {
        manager: request.manager.to_owned(),
        operation: "Apply".into(),
        api_version: ty.api_version(version),
        time: None,
        fields: applied,
    });
    write_managed(&mut next, &managed);
    Ok(next)
}

/// Gives the fields an ordinary update changed to its manager.
pub fn record_update(
    ty: &ResourceType,
    version: &str,
    before: &Value,
    after: &mut Value,
    manager: &str,
) {
    let all: BTreeSet<FieldPath> = fields_of(ty, before)
        .union(&fields_of(ty, after))
        .cloned()
        .collect();
    let changed: BTreeSet<FieldPath> = all
        .into_iter()
        .filter(|p| get_at(before, p) != get_at(after, p))
        .collect();
    let mut managed = managed_of(before);
    if changed.is_empty() {
        write_managed(after, &managed);
        return;
    }
    for entry in &mut managed {
        entry.fields.retain(|p| !changed.contains(p));
    }
    let present: BTreeSet<FieldPath> = changed
        .into_iter()
        .filter(|p| get_at(after, p).is_some())
        .collect();
    match managed
        .iter_mut()
        .find(|m| m.manager == manager && m.operation == "Update")
    {
        Some(entry) => entry.fields.extend(present),
        None => managed.push(Managed {
            manager: manager.to_owned(),
            operation: "Update".into(),
            api_version: ty.api_version(version),
            time: None,
            fields: present,
        }),
    }
    write_managed(after, &managed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::kinds::Registry;

    fn configmaps() -> std::sync::Arc<ResourceType> {
        Registry::new().get("", "v1", "configmaps").unwrap()
    }

    #[test]
    fn fields_v1_round_trips() {
        let ty = configmaps();
        let fields = fields_of(
            &ty,
            &json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x"]}, "data": {"k": "v"}}),
        );
        assert_eq!(from_fields_v1(&to_fields_v1(&fields)), fields);
        assert!(fields.contains(&vec![
            "f:metadata".to_owned(),
            "f:finalizers".into(),
            "v:\"x\"".into()
        ]));
    }

    #[test]
    fn applies_by_two_managers_conflict_unless_forced_and_dropped_fields_go() {
        let ty = configmaps();
        let empty = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let first = apply(
            &ty,
            "v1",
            &empty,
            &json!({"data": {"a": "1", "b": "2"}}),
            &ApplyRequest {
                manager: "one",
                force: false,
            },
        )
        .unwrap();
        let conflict = apply(
            &ty,
            "v1",
            &first,
            &json!({"data": {"a": "9"}}),
            &ApplyRequest {
                manager: "two",
                force: false,
            },
        )
        .unwrap_err();
        assert_eq!(conflict.code, 409);
        assert!(
            conflict.message.contains("conflict with \"one\""),
            "{}",
            conflict.message
        );
        assert!(conflict.message.contains(".data.a"), "{}", conflict.message);
        // Same value: shared ownership, no conflict.
        let shared = apply(
            &ty,
            "v1",
            &first,
            &json!({"data": {"a": "1"}}),
            &ApplyRequest {
                manager: "two",
                force: false,
            },
        )
        .unwrap();
        let forced = apply(
            &ty,
            "v1",
            &shared,
            &json!({"data": {"a": "9"}}),
            &ApplyRequest {
                manager: "two",
                force: true,
            },
        )
        .unwrap();
        assert_eq!(forced["data"], json!({"a": "9", "b": "2"}));
        // "one" stops applying b: b goes; a stays (owned by "two").
        let dropped = apply(
            &ty,
            "v1",
            &forced,
            &json!({"data": {}}),
            &ApplyRequest {
                manager: "one",
                force: false,
            },
        )
        .unwrap();
        assert_eq!(dropped["data"], json!({"a": "9"}));
    }

    #[test]
    fn an_update_takes_the_fields_it_changes_from_an_applier() {
        let ty = configmaps();
        let empty = json!({"metadata": {"name": "c"}});
        let applied = apply(
            &ty,
            "v1",
            &empty,
            &json!({"data": {"a": "1"}}),
            &ApplyRequest {
                manager: "one",
                force: false,
            },
        )
        .unwrap();
        let mut updated = applied.clone();
        updated["data"]["a"] = json!("2");
        record_update(&ty, "v1", &applied, &mut updated, "editor");
        let again = apply(
            &ty,
            "v1",
            &updated,
            &json!({"data": {"a": "3"}}),
            &ApplyRequest {
                manager: "one",
                force: false,
            },
        )
        .unwrap_err();
        assert!(
            again.message.contains("conflict with \"editor\""),
            "{}",
            again.message
        );
    }
}
