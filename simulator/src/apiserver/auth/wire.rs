//! Protobuf request bodies of the RBAC and review kinds, as kubectl's typed clients send them
//! (`kubectl create role|clusterrole|rolebinding|clusterrolebinding`, `kubectl auth can-i`,
//! `kubectl auth whoami`), decoded into the JSON objects they stand for.
//!
//! Expected flow: `routes::dispatch` offers a protobuf body to [`decode`] first → the object,
//! or None for a kind of the general decoder (`super::super::protobuf`).
//!
//! Guarantees: field numbers of `k8s.io/api` `rbac/v1`, `authorization/v1` and
//! `authentication/v1` `generated.proto`; malformed input is an error, never a panic.
//!
//! Caveats: its own small reader of the wire format, so the general decoder stays untouched
//! (it can take these kinds over); `fieldSelector`/`labelSelector` of ResourceAttributes and
//! the `extra` of a SubjectAccessReview are not decoded.

use serde_json::{Map, Value, json};

/// One field's value (no field of these kinds is a number, so varints are skipped).
enum Wire<'a> {
    Varint,
    Bytes(&'a [u8]),
}

fn varint(bytes: &mut &[u8]) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or("truncated varint")?;
        *bytes = rest;
        value |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint too long".into())
}

/// Splits a message into (field number, value).
fn fields(mut bytes: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        match key & 7 {
            0 => {
                varint(&mut bytes)?;
                out.push((key >> 3, Wire::Varint));
            }
            2 => {
                let length = usize::try_from(varint(&mut bytes)?).map_err(|_| "length overflow")?;
                let value = bytes.get(..length).ok_or("truncated field")?;
                out.push((key >> 3, Wire::Bytes(value)));
                bytes = &bytes[length..];
            }
            1 => bytes = bytes.get(8..).ok_or("truncated fixed64")?,
            5 => bytes = bytes.get(4..).ok_or("truncated fixed32")?,
            other => return Err(format!("unsupported wire type {other}")),
        }
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".into())
}

/// A message of string fields (repeated ones listed in `lists`), by field number → JSON name.
fn strings(bytes: &[u8], names: &[(u64, &str)], lists: &[u64]) -> Result<Value, String> {
    let mut object = Map::new();
    for (number, field) in fields(bytes)? {
        let (Wire::Bytes(b), Some((_, name))) = (field, names.iter().find(|(n, _)| *n == number))
        else {
            continue;
        };
        let value = json!(text(b)?);
        if lists.contains(&number) {
            if let Some(list) = object
                .entry(*name)
                .or_insert_with(|| json!([]))
                .as_array_mut()
            {
                list.push(value);
            }
        } else if value != "" {
            // Go writes empty strings on the wire; JSON leaves them out (omitempty).
            object.insert((*name).to_owned(), value);
        }
    }
    Ok(Value::Object(object))
}

/// The object metadata fields a create carries: name, generateName, namespace, labels,
/// annotations.
fn metadata(bytes: &[u8]) -> Result<Value, String> {
    let mut meta = Map::new();
    for (number, field) in fields(bytes)? {
        let Wire::Bytes(b) = field else { continue };
        match number {
            1..=3 if b.is_empty() => {}
            1 => _ = meta.insert("name".into(), json!(text(b)?)),
            2 => _ = meta.insert("generateName".into(), json!(text(b)?)),
            3 => _ = meta.insert("namespace".into(), json!(text(b)?)),
            11 | 12 => {
                let entry = strings(b, &[(1, "key"), (2, "value")], &[])?;
                let key = if number == 11 {
                    "labels"
                } else {
                    "annotations"
                };
                let map = meta.entry(key).or_insert_with(|| json!({}));
                if let (Some(k), Some(v)) = (entry["key"].as_str(), entry.get("value")) {
                    map[k] = v.clone();
                }
            }
            _ => {}
        }
    }
    Ok(Value::Object(meta))
}

fn rule(bytes: &[u8]) -> Result<Value, String> {
    let names = [
        (1, "verbs"),
        (2, "apiGroups"),
        (3, "resources"),
        (4, "resourceNames"),
        (5, "nonResourceURLs"),
    ];
    strings(bytes, &names, &[1, 2, 3, 4, 5])
}

fn label_selector(bytes: &[u8]) -> Result<Value, String> {
    let mut selector = json!({});
    for (number, field) in fields(bytes)? {
        let Wire::Bytes(b) = field else { continue };
        match number {
            1 => {
                let entry = strings(b, &[(1, "key"), (2, "value")], &[])?;
                if let (Some(k), Some(v)) = (entry["key"].as_str(), entry.get("value")) {
                    selector["matchLabels"][k] = v.clone();
                }
            }
            2 => {
                let requirement = strings(b, &[(1, "key"), (2, "operator"), (3, "values")], &[3])?;
                push(&mut selector, "matchExpressions", requirement);
            }
            _ => {}
        }
    }
    Ok(selector)
}

fn push(object: &mut Value, key: &str, value: Value) {
    if !object[key].is_array() {
        object[key] = json!([]);
    }
    if let Some(list) = object[key].as_array_mut() {
        list.push(value);
    }
}

/// `resourceAttributes` / `nonResourceAttributes` of an access review's spec.
fn access_spec(bytes: &[u8]) -> Result<Value, String> {
    let mut spec = json!({});
    for (number, field) in fields(bytes)? {
        let Wire::Bytes(b) = field else { continue };
        match number {
            1 => {
                let names = [
                    (1, "namespace"),
                    (2, "verb"),
                    (3, "group"),
                    (4, "version"),
                    (5, "resource"),
                    (6, "subresource"),
                    (7, "name"),
                ];
                spec["resourceAttributes"] = strings(b, &names, &[])?;
            }
            2 => spec["nonResourceAttributes"] = strings(b, &[(1, "path"), (2, "verb")], &[])?,
            3 if b.is_empty() => {}
            3 => spec["user"] = json!(text(b)?),
            4 => push(&mut spec, "groups", json!(text(b)?)),
            6 if !b.is_empty() => spec["uid"] = json!(text(b)?),
            _ => {}
        }
    }
    Ok(spec)
}

/// The kind's fields of a message (metadata is field 1 in all of them).
fn body(kind: &str, bytes: &[u8]) -> Result<Value, String> {
    let mut object = json!({});
    for (number, field) in fields(bytes)? {
        let Wire::Bytes(b) = field else { continue };
        match (kind, number) {
            (_, 1) => object["metadata"] = metadata(b)?,
            ("Role" | "ClusterRole", 2) => push(&mut object, "rules", rule(b)?),
            ("ClusterRole", 3) => {
                let mut aggregation = json!({"clusterRoleSelectors": []});
                for (n, f) in fields(b)? {
                    if let (1, Wire::Bytes(s)) = (n, f) {
                        push(&mut aggregation, "clusterRoleSelectors", label_selector(s)?);
                    }
                }
                object["aggregationRule"] = aggregation;
            }
            ("RoleBinding" | "ClusterRoleBinding", 2) => {
                let names = [(1, "kind"), (2, "apiGroup"), (3, "name"), (4, "namespace")];
                push(&mut object, "subjects", strings(b, &names, &[])?);
            }
            ("RoleBinding" | "ClusterRoleBinding", 3) => {
                object["roleRef"] = strings(b, &[(1, "apiGroup"), (2, "kind"), (3, "name")], &[])?;
            }
            ("SubjectAccessReview" | "LocalSubjectAccessReview" | "SelfSubjectAccessReview", 2) => {
                object["spec"] = access_spec(b)?;
            }
            ("SelfSubjectRulesReview", 2) => object["spec"] = strings(b, &[(1, "namespace")], &[])?,
            ("TokenReview", 2) => {
                object["spec"] = strings(b, &[(1, "token"), (2, "audiences")], &[2])?;
            }
            _ => {}
        }
    }
    Ok(object)
}

/// The kinds this module decodes.
const KINDS: &[&str] = &[
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "SubjectAccessReview",
    "LocalSubjectAccessReview",
    "SelfSubjectAccessReview",
    "SelfSubjectRulesReview",
    "SelfSubjectReview",
    "TokenReview",
];

/// The object a protobuf body of one of the RBAC or review kinds stands for; None for any
/// other body (not an envelope, or another kind).
pub(crate) fn decode(bytes: &[u8]) -> Option<Result<Value, String>> {
    let envelope = bytes.strip_prefix(b"k8s\0")?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (number, field) in fields(envelope).ok()? {
        match (number, field) {
            (1, Wire::Bytes(type_meta)) => {
                let type_meta = strings(type_meta, &[(1, "apiVersion"), (2, "kind")], &[]).ok()?;
                api_version = type_meta["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                kind = type_meta["kind"].as_str().unwrap_or_default().to_owned();
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    if !KINDS.contains(&kind.as_str()) {
        return None;
    }
    Some(body(&kind, raw).map(|mut object| {
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(kind);
        object
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(number: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![
            u8::try_from(number << 3 | 2).unwrap(),
            u8::try_from(value.len()).unwrap(),
        ];
        out.extend_from_slice(value);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
        [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat()
    }

    #[test]
    fn a_role_binding_and_an_access_review_decode_and_other_kinds_are_left_alone() {
        let meta = field(1, b"read");
        let rule = [
            field(1, b"get"),
            field(1, b"list"),
            field(2, b""),
            field(3, b"pods"),
        ]
        .concat();
        let role = [field(1, &meta), field(2, &rule)].concat();
        assert_eq!(
            decode(&envelope("rbac.authorization.k8s.io/v1", "Role", &role))
                .unwrap()
                .unwrap(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "read"},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]})
        );
        let subject = [
            field(1, b"ServiceAccount"),
            field(2, b""),
            field(3, b"sa"),
            field(4, b"a"),
        ]
        .concat();
        let reference = [
            field(1, b"rbac.authorization.k8s.io"),
            field(2, b"Role"),
            field(3, b"read"),
        ]
        .concat();
        let binding = [field(1, &meta), field(2, &subject), field(3, &reference)].concat();
        let decoded = decode(&envelope(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            &binding,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            decoded["subjects"],
            json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "a"}])
        );
        assert_eq!(decoded["roleRef"]["kind"], "Role");
        let attributes = [
            field(1, b"default"),
            field(2, b"list"),
            field(5, b"secrets"),
        ]
        .concat();
        let review = field(2, &field(1, &attributes));
        let decoded = decode(&envelope(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            &review,
        ))
        .unwrap()
        .unwrap();
        assert_eq!(
            decoded["spec"]["resourceAttributes"],
            json!({"namespace": "default", "verb": "list", "resource": "secrets"})
        );
        assert!(decode(&envelope("v1", "ConfigMap", &meta)).is_none());
        assert!(decode(b"{}").is_none());
        let truncated = envelope("rbac.authorization.k8s.io/v1", "Role", &[0x12, 0x40]);
        assert!(decode(&truncated).unwrap().is_err());
    }
}
