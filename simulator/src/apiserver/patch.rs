//! The three patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the
//! strategic merge patch of built-in kinds (with the list merge keys of the fields baremend and
//! kubectl touch, and the `$patch`, `$deleteFromPrimitiveList`, `$setElementOrder` and
//! `$retainKeys` directives).

use serde_json::{Map, Value};

/// RFC 7386: objects merge recursively, `null` deletes, anything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Why a JSON patch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonPatchError {
    /// The patch document is malformed (400).
    Malformed(String),
    /// An operation cannot be applied, or a `test` failed (422).
    Unprocessable(String),
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<Vec<String>, JsonPatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| JsonPatchError::Malformed(format!("path {path:?} must start with '/'")))?;
    Ok(rest.split('/').map(unescape).collect())
}

fn parent_mut<'a>(
    root: &'a mut Value,
    tokens: &[String],
    path: &str,
) -> Result<&'a mut Value, JsonPatchError> {
    let mut current = root;
    for token in tokens {
        current = match current {
            Value::Object(map) => map.get_mut(token),
            Value::Array(items) => token.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| JsonPatchError::Unprocessable(format!("path {path:?} does not exist")))?;
    }
    Ok(current)
}

fn add(root: &mut Value, path: &str, value: Value) -> Result<(), JsonPatchError> {
    let tokens = split_pointer(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        *root = value;
        return Ok(());
    };
    match parent_mut(root, parents, path)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let index = if last == "-" {
                items.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= items.len())
                    .ok_or_else(|| {
                        JsonPatchError::Unprocessable(format!("index out of bounds at {path:?}"))
                    })?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err(JsonPatchError::Unprocessable(format!(
            "cannot add at {path:?}"
        ))),
    }
}

fn remove(root: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let tokens = split_pointer(path)?;
    let Some((last, parents)) = tokens.split_last() else {
        return Err(JsonPatchError::Unprocessable(
            "cannot remove the whole document".into(),
        ));
    };
    let missing = || JsonPatchError::Unprocessable(format!("path {path:?} does not exist"));
    match parent_mut(root, parents, path)? {
        Value::Object(map) => map.remove(last).ok_or_else(missing),
        Value::Array(items) => {
            let index = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < items.len())
                .ok_or_else(missing)?;
            Ok(items.remove(index))
        }
        _ => Err(missing()),
    }
}

fn get(root: &Value, path: &str) -> Result<Value, JsonPatchError> {
    let tokens = split_pointer(path)?;
    let pointer: String = tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect();
    root.pointer(&pointer)
        .cloned()
        .ok_or_else(|| JsonPatchError::Unprocessable(format!("path {path:?} does not exist")))
}

/// RFC 6902, all six operations. A failed `test` is `Unprocessable` (422), as in the API
/// server.
pub fn json_patch(target: &Value, operations: &Value) -> Result<Value, JsonPatchError> {
    let operations = operations.as_array().ok_or_else(|| {
        JsonPatchError::Malformed("a JSON patch is an array of operations".into())
    })?;
    let mut document = target.clone();
    for operation in operations {
        let op = operation
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed("an operation lacks \"op\"".into()))?;
        let path = operation
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| JsonPatchError::Malformed(format!("operation {op:?} lacks \"path\"")))?;
        let value = || {
            operation.get("value").cloned().ok_or_else(|| {
                JsonPatchError::Malformed(format!("operation {op:?} lacks \"value\""))
            })
        };
        let from = || {
            operation
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    JsonPatchError::Malformed(format!("operation {op:?} lacks \"from\""))
                })
        };
        match op {
            "add" => add(&mut document, path, value()?)?,
            "remove" => {
                remove(&mut document, path)?;
            }
            "replace" => {
                remove(&mut document, path)?;
                add(&mut document, path, value()?)?;
            }
            "move" => {
                let moved = remove(&mut document, from()?)?;
                add(&mut document, path, moved)?;
            }
            "copy" => {
                let copied = get(&document, from()?)?;
                add(&mut document, path, copied)?;
            }
            "test" => {
                // As the API server's JSON patch library: a missing path tests equal to null
                // (kube's finalizer helper relies on it for objects without finalizers).
                let expected = value()?;
                let actual = match get(&document, path) {
                    Ok(actual) => actual,
                    Err(_) if expected.is_null() => Value::Null,
                    Err(error) => return Err(error),
                };
                if actual != expected {
                    return Err(JsonPatchError::Unprocessable(format!(
                        "the test operation at {path:?} failed: the value differs"
                    )));
                }
            }
            other => {
                return Err(JsonPatchError::Malformed(format!(
                    "unknown operation {other:?}"
                )));
            }
        }
    }
    Ok(document)
}

/// How a list field merges in a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    /// Replace the whole list.
    Atomic,
    /// A set of primitives: union.
    PrimitiveSet,
    /// Objects identified by this key.
    MergeBy(&'static str),
}

/// The list strategies of the built-in kinds, by field path (list indices left out).
pub(crate) fn list_strategy(plural: &str, path: &[&str]) -> ListStrategy {
    match (plural, path) {
        (_, ["metadata", "finalizers"]) => ListStrategy::PrimitiveSet,
        (_, ["metadata", "ownerReferences"]) => ListStrategy::MergeBy("uid"),
        (
            "pods",
            [
                "spec",
                "containers" | "initContainers" | "ephemeralContainers",
            ],
        ) => ListStrategy::MergeBy("name"),
        ("pods", ["spec", "volumes"]) => ListStrategy::MergeBy("name"),
        ("pods", ["spec", "containers" | "initContainers", "env"]) => ListStrategy::MergeBy("name"),
        ("pods", ["spec", "containers" | "initContainers", "ports"]) => {
            ListStrategy::MergeBy("containerPort")
        }
        ("pods", ["spec", "containers" | "initContainers", "volumeMounts"]) => {
            ListStrategy::MergeBy("mountPath")
        }
        ("pods", ["status", "conditions"]) => ListStrategy::MergeBy("type"),
        ("nodes", ["status", "conditions" | "addresses"]) => ListStrategy::MergeBy("type"),
        ("poddisruptionbudgets", ["status", "conditions"]) => ListStrategy::MergeBy("type"),
        // k8s.io/api admissionregistration/v1 `ValidatingAdmissionPolicySpec`: `variables` and
        // `matchConditions` are `+listType=map +listMapKey=name` with `patchStrategy:"merge"
        // patchMergeKey:"name"` (`validations` stays atomic), so kubectl apply sends only the
        // entries that changed.
        ("validatingadmissionpolicies", ["spec", "variables" | "matchConditions"]) => {
            ListStrategy::MergeBy("name")
        }
        _ => ListStrategy::Atomic,
    }
}

/// Applies a strategic merge patch of a built-in kind.
pub fn strategic_merge(target: &mut Value, patch: &Value, plural: &str) -> Result<(), String> {
    let mut path = Vec::new();
    merge_map(target, patch, plural, &mut path)
}

fn merge_map(
    target: &mut Value,
    patch: &Value,
    plural: &str,
    path: &mut Vec<String>,
) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replacement = patch.clone();
        replacement.remove("$patch");
        *target = Value::Object(replacement);
        return Ok(());
    }
    if patch.get("$patch").and_then(Value::as_str) == Some("delete") {
        *target = Value::Null;
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return Ok(());
    };
    if let Some(retain) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        map.retain(|key, _| keep.contains(&key.as_str()));
    }
    for (key, value) in patch {
        if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let remove: Vec<&Value> = value
                .as_array()
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            if let Some(Value::Array(items)) = map.get_mut(field) {
                items.retain(|item| !remove.contains(&item));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(format!("unknown patch directive {key:?}"));
        }
        if value.is_null() {
            map.remove(key);
            continue;
        }
        path.push(key.clone());
        let slot = map.entry(key.clone()).or_insert(Value::Null);
        match value {
            Value::Object(_) => merge_map(slot, value, plural, path)?,
            Value::Array(items) => {
                let fields: Vec<&str> = path.iter().map(String::as_str).collect();
                merge_list(slot, items, list_strategy(plural, &fields), plural, path)?;
            }
            other => *slot = other.clone(),
        }
        path.pop();
    }
    Ok(())
}

fn merge_list(
    target: &mut Value,
    patch: &[Value],
    strategy: ListStrategy,
    plural: &str,
    path: &mut Vec<String>,
) -> Result<(), String> {
    match strategy {
        ListStrategy::Atomic => {
            *target = Value::Array(patch.to_vec());
        }
        ListStrategy::PrimitiveSet => {
            let mut items = target.as_array().cloned().unwrap_or_default();
            for item in patch {
                if !items.contains(item) {
                    items.push(item.clone());
                }
            }
            *target = Value::Array(items);
        }
        ListStrategy::MergeBy(key) => {
            let mut items = target.as_array().cloned().unwrap_or_default();
            for item in patch {
                let id = item
                    .get(key)
                    .cloned()
                    .ok_or_else(|| format!("list item lacks its merge key {key:?}"))?;
                let position = items
                    .iter()
                    .position(|existing| existing.get(key) == Some(&id));
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(index), true) => {
                        items.remove(index);
                    }
                    (None, true) => {}
                    (Some(index), false) => merge_map(&mut items[index], item, plural, path)?,
                    (None, false) => {
                        let mut fresh = Value::Null;
                        merge_map(&mut fresh, item, plural, path)?;
                        items.push(fresh);
                    }
                }
            }
            *target = Value::Array(items);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_merges_objects_deletes_nulls_and_replaces_lists() {
        let mut target = json!({"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1});
        merge_patch(
            &mut target,
            &json!({"a": {"b": null, "d": 4}, "l": [3], "x": null}),
        );
        assert_eq!(target, json!({"a": {"c": 2, "d": 4}, "l": [3]}));
    }

    #[test]
    fn json_patch_applies_all_operations_and_a_failed_test_is_unprocessable() {
        let target = json!({"metadata": {"finalizers": ["a", "b"], "labels": {"x/y": "1"}}});
        let patched = json_patch(
            &target,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a", "b"]},
                {"op": "remove", "path": "/metadata/finalizers/0"},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
                {"op": "replace", "path": "/metadata/labels/x~1y", "value": "2"},
                {"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"},
                {"op": "move", "from": "/metadata/annotations/x~1y", "path": "/metadata/annotations/z"},
            ]),
        )
        .unwrap();
        assert_eq!(
            patched,
            json!({"metadata": {"finalizers": ["b", "c"], "labels": {"x/y": "2"}, "annotations": {"z": "2"}}})
        );
        let failed = json_patch(
            &target,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": []}]),
        );
        assert!(matches!(failed, Err(JsonPatchError::Unprocessable(_))));
        assert!(matches!(
            json_patch(&target, &json!({"op": "add"})),
            Err(JsonPatchError::Malformed(_))
        ));
        assert!(matches!(
            json_patch(&target, &json!([{"op": "remove", "path": "/nope"}])),
            Err(JsonPatchError::Unprocessable(_))
        ));
    }

    #[test]
    fn an_admission_policys_variables_merge_by_name_and_its_validations_are_replaced() {
        // kubectl apply of a policy whose one variable changed sends that variable alone
        // (k8s.io/api admissionregistration/v1 types.go: Variables and MatchConditions merge
        // by name; Validations is atomic).
        let mut policy = json!({"spec": {
            "variables": [{"name": "a", "expression": "'x'"}, {"name": "b", "expression": "variables.a"}],
            "matchConditions": [{"name": "m", "expression": "true"}],
            "validations": [{"expression": "true"}, {"expression": "1 == 1"}]}});
        let patch = json!({"spec": {
            "variables": [{"name": "a", "expression": "'y'"}],
            "validations": [{"expression": "false"}]}});
        strategic_merge(&mut policy, &patch, "validatingadmissionpolicies").unwrap();
        assert_eq!(
            policy["spec"]["variables"],
            json!([{"name": "a", "expression": "'y'"}, {"name": "b", "expression": "variables.a"}])
        );
        assert_eq!(
            policy["spec"]["matchConditions"].as_array().unwrap().len(),
            1
        );
        assert_eq!(
            policy["spec"]["validations"],
            json!([{"expression": "false"}])
        );
    }

    #[test]
    fn strategic_merge_unions_finalizers_and_merges_conditions_by_type() {
        let mut node = json!({
            "metadata": {"finalizers": ["a"], "labels": {"k": "v"}},
            "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]},
        });
        strategic_merge(
            &mut node,
            &json!({
                "metadata": {"finalizers": ["b"], "labels": {"k": null, "n": "1"}, "$setElementOrder/finalizers": ["a", "b"]},
                "spec": {"taints": [{"key": "t2", "effect": "NoExecute"}]},
                "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
            }),
            "nodes",
        )
        .unwrap();
        assert_eq!(node["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(node["metadata"]["labels"], json!({"n": "1"}));
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "t2", "effect": "NoExecute"}]),
            "taints are atomic"
        );
        assert_eq!(
            node["status"]["conditions"][0],
            json!({"type": "Ready", "status": "Unknown"})
        );
        assert_eq!(node["status"]["conditions"][1]["type"], "DiskPressure");
        strategic_merge(
            &mut node,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            "nodes",
        )
        .unwrap();
        assert_eq!(node["metadata"]["finalizers"], json!(["b"]));
        strategic_merge(
            &mut node,
            &json!({"status": {"conditions": [{"type": "DiskPressure", "$patch": "delete"}]}}),
            "nodes",
        )
        .unwrap();
        assert_eq!(node["status"]["conditions"].as_array().unwrap().len(), 1);
    }
}
