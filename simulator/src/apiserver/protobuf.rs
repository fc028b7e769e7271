//! Decoding of the Kubernetes protobuf encoding for the request bodies kubectl's typed clients
//! send (`kubectl create namespace|configmap|secret|serviceaccount|token`, `kubectl
//! certificate approve|deny`, and the Eviction and DeleteOptions of `kubectl drain`). Answers stay JSON, which every client accepts. Other kinds in protobuf get
//! 415, as from a server that does not serve them in that encoding.

use base64::Engine;
use serde_json::{Map, Value, json};

/// The envelope magic: `k8s\0`.
const MAGIC: &[u8] = b"k8s\0";

enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Splits a message into (field number, value); errors on malformed input.
fn fields(mut bytes: &[u8]) -> Result<Vec<(u64, Field<'_>)>, String> {
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
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let key = varint(&mut bytes)?;
        let number = key >> 3;
        match key & 7 {
            0 => out.push((number, Field::Varint(varint(&mut bytes)?))),
            2 => {
                let length = usize::try_from(varint(&mut bytes)?).map_err(|_| "length overflow")?;
                if length > bytes.len() {
                    return Err("truncated field".into());
                }
                let (value, rest) = bytes.split_at(length);
                out.push((number, Field::Bytes(value)));
                bytes = rest;
            }
            1 => {
                bytes = bytes.get(8..).ok_or("truncated fixed64")?;
            }
            5 => {
                bytes = bytes.get(4..).ok_or("truncated fixed32")?;
            }
            other => return Err(format!("unsupported wire type {other}")),
        }
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".into())
}

fn map_entry(bytes: &[u8], base64_values: bool) -> Result<(String, Value), String> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) if base64_values => {
                value = json!(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (2, Field::Bytes(b)) => value = json!(text(b)?),
            _ => {}
        }
    }
    Ok((key, value))
}

fn object_meta(bytes: &[u8]) -> Result<Value, String> {
    let mut meta = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => {
                meta.insert("name".into(), json!(text(b)?));
            }
            (2, Field::Bytes(b)) => {
                meta.insert("generateName".into(), json!(text(b)?));
            }
            (3, Field::Bytes(b)) => {
                meta.insert("namespace".into(), json!(text(b)?));
            }
            (5, Field::Bytes(b)) => {
                meta.insert("uid".into(), json!(text(b)?));
            }
            (6, Field::Bytes(b)) => {
                meta.insert("resourceVersion".into(), json!(text(b)?));
            }
            (11, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, false)?;
                labels.insert(k, v);
            }
            (12, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, false)?;
                annotations.insert(k, v);
            }
            (14, Field::Bytes(b)) => finalizers.push(json!(text(b)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Ok(Value::Object(meta))
}

fn delete_options(bytes: &[u8]) -> Result<Value, String> {
    let mut options = Map::new();
    let mut dry_run = Vec::new();
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Varint(v)) => {
                options.insert("gracePeriodSeconds".into(), json!(v as i64));
            }
            (2, Field::Bytes(b)) => {
                let mut preconditions = Map::new();
                for (n, f) in fields(b)? {
                    match (n, f) {
                        (1, Field::Bytes(u)) => {
                            preconditions.insert("uid".into(), json!(text(u)?));
                        }
                        (2, Field::Bytes(r)) => {
                            preconditions.insert("resourceVersion".into(), json!(text(r)?));
                        }
                        _ => {}
                    }
                }
                options.insert("preconditions".into(), Value::Object(preconditions));
            }
            (3, Field::Varint(v)) => {
                options.insert("orphanDependents".into(), json!(v != 0));
            }
            (4, Field::Bytes(b)) => {
                options.insert("propagationPolicy".into(), json!(text(b)?));
            }
            (5, Field::Bytes(b)) => dry_run.push(json!(text(b)?)),
            _ => {}
        }
    }
    if !dry_run.is_empty() {
        options.insert("dryRun".into(), Value::Array(dry_run));
    }
    Ok(Value::Object(options))
}

/// The `name` fields (field `name_field`) of repeated references.
fn reference_name(bytes: &[u8], name_field: u64) -> Result<Value, String> {
    let mut reference = Map::new();
    for (number, field) in fields(bytes)? {
        if let (n, Field::Bytes(b)) = (number, field)
            && n == name_field
        {
            reference.insert("name".into(), json!(text(b)?));
        }
    }
    Ok(Value::Object(reference))
}

/// A TokenRequestSpec: audiences (1), boundObjectRef (3), expirationSeconds (4).
fn token_request_spec(bytes: &[u8]) -> Result<Value, String> {
    let mut spec = Map::new();
    let mut audiences = Vec::new();
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => audiences.push(json!(text(b)?)),
            (3, Field::Bytes(b)) => {
                let mut reference = Map::new();
                for (n, f) in fields(b)? {
                    let key = match n {
                        1 => "kind",
                        2 => "apiVersion",
                        3 => "name",
                        4 => "uid",
                        _ => continue,
                    };
                    if let Field::Bytes(v) = f {
                        reference.insert(key.into(), json!(text(v)?));
                    }
                }
                spec.insert("boundObjectRef".into(), Value::Object(reference));
            }
            (4, Field::Varint(v)) => {
                spec.insert("expirationSeconds".into(), json!(v as i64));
            }
            _ => {}
        }
    }
    spec.insert("audiences".into(), Value::Array(audiences));
    Ok(Value::Object(spec))
}

/// A `metav1.Time` (seconds 1, nanos 2) as RFC 3339 seconds.
fn time(bytes: &[u8]) -> Result<Value, String> {
    let mut seconds = 0u64;
    for (number, field) in fields(bytes)? {
        if let (1, Field::Varint(v)) = (number, field) {
            seconds = v;
        }
    }
    Ok(json!(super::time::format_time(
        std::time::Duration::from_secs(seconds)
    )))
}

/// A CertificateSigningRequestSpec: request (1, bytes), username (2), uid (3), groups (4),
/// usages (5), signerName (7), expirationSeconds (8).
fn csr_spec(bytes: &[u8]) -> Result<Value, String> {
    let mut spec = Map::new();
    let mut groups = Vec::new();
    let mut usages = Vec::new();
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => {
                spec.insert(
                    "request".into(),
                    json!(base64::engine::general_purpose::STANDARD.encode(b)),
                );
            }
            (2, Field::Bytes(b)) => {
                spec.insert("username".into(), json!(text(b)?));
            }
            (3, Field::Bytes(b)) => {
                spec.insert("uid".into(), json!(text(b)?));
            }
            (4, Field::Bytes(b)) => groups.push(json!(text(b)?)),
            (5, Field::Bytes(b)) => usages.push(json!(text(b)?)),
            (7, Field::Bytes(b)) => {
                spec.insert("signerName".into(), json!(text(b)?));
            }
            (8, Field::Varint(v)) => {
                spec.insert("expirationSeconds".into(), json!(v as i64));
            }
            _ => {}
        }
    }
    spec.insert("groups".into(), Value::Array(groups));
    spec.insert("usages".into(), Value::Array(usages));
    Ok(Value::Object(spec))
}

/// A CertificateSigningRequestStatus: conditions (1: type 1, reason 2, message 3,
/// lastUpdateTime 4, lastTransitionTime 5, status 6) and certificate (2, bytes).
fn csr_status(bytes: &[u8]) -> Result<Value, String> {
    let mut status = Map::new();
    let mut conditions = Vec::new();
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => {
                let mut condition = Map::new();
                for (n, f) in fields(b)? {
                    let Field::Bytes(v) = f else { continue };
                    let (key, value) = match n {
                        1 => ("type", json!(text(v)?)),
                        2 => ("reason", json!(text(v)?)),
                        3 => ("message", json!(text(v)?)),
                        4 => ("lastUpdateTime", time(v)?),
                        5 => ("lastTransitionTime", time(v)?),
                        6 => ("status", json!(text(v)?)),
                        _ => continue,
                    };
                    condition.insert(key.into(), value);
                }
                conditions.push(Value::Object(condition));
            }
            (2, Field::Bytes(b)) => {
                status.insert(
                    "certificate".into(),
                    json!(base64::engine::general_purpose::STANDARD.encode(b)),
                );
            }
            _ => {}
        }
    }
    status.insert("conditions".into(), Value::Array(conditions));
    Ok(Value::Object(status))
}

/// The kind's own fields (all but metadata) of a message.
fn body(kind: &str, bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let mut object = Map::new();
    for (number, field) in fields(bytes)? {
        let Field::Bytes(b) = field else {
            match (kind, number, field) {
                ("ConfigMap" | "Secret", 4 | 5, Field::Varint(v)) => {
                    object.insert("immutable".into(), json!(v != 0));
                }
                ("ServiceAccount", 4, Field::Varint(v)) => {
                    object.insert("automountServiceAccountToken".into(), json!(v != 0));
                }
                _ => {}
            }
            continue;
        };
        match (kind, number) {
            (_, 1) => {
                object.insert("metadata".into(), object_meta(b)?);
            }
            ("Namespace", 2) => {
                let finalizers: Vec<Value> = fields(b)?
                    .into_iter()
                    .filter_map(|(n, f)| match (n, f) {
                        (1, Field::Bytes(v)) => text(v).ok().map(Value::String),
                        _ => None,
                    })
                    .collect();
                object.insert("spec".into(), json!({"finalizers": finalizers}));
            }
            ("ConfigMap", 2) | ("Secret", 4) => {
                let (k, v) = map_entry(b, false)?;
                let key = if kind == "Secret" {
                    "stringData"
                } else {
                    "data"
                };
                object.entry(key).or_insert_with(|| json!({}))[&k] = v;
            }
            ("ConfigMap", 3) | ("Secret", 2) => {
                let (k, v) = map_entry(b, true)?;
                let key = if kind == "Secret" {
                    "data"
                } else {
                    "binaryData"
                };
                object.entry(key).or_insert_with(|| json!({}))[&k] = v;
            }
            ("Secret", 3) => {
                object.insert("type".into(), json!(text(b)?));
            }
            ("ServiceAccount", 2 | 3) => {
                // secrets are ObjectReferences (name is field 3), imagePullSecrets
                // LocalObjectReferences (name is field 1).
                let (key, name_field) = if number == 2 {
                    ("secrets", 3)
                } else {
                    ("imagePullSecrets", 1)
                };
                let reference = reference_name(b, name_field)?;
                if let Some(list) = object
                    .entry(key)
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    list.push(reference);
                }
            }
            ("CertificateSigningRequest", 2) => {
                object.insert("spec".into(), csr_spec(b)?);
            }
            ("CertificateSigningRequest", 3) => {
                object.insert("status".into(), csr_status(b)?);
            }
            ("TokenRequest", 2) => {
                object.insert("spec".into(), token_request_spec(b)?);
            }
            ("Eviction", 2) | ("DeleteOptions", 2) if kind == "Eviction" => {
                object.insert("deleteOptions".into(), delete_options(b)?);
            }
            _ => {}
        }
    }
    Ok(object)
}

/// Decodes a protobuf request body into the JSON object it stands for.
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let envelope = bytes
        .strip_prefix(MAGIC)
        .ok_or("the body lacks the k8s protobuf magic")?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (number, field) in fields(envelope)? {
        match (number, field) {
            (1, Field::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta)? {
                    match (n, f) {
                        (1, Field::Bytes(v)) => api_version = text(v)?,
                        (2, Field::Bytes(k)) => kind = text(k)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let mut object = match kind.as_str() {
        "Namespace"
        | "ConfigMap"
        | "Secret"
        | "Eviction"
        | "ServiceAccount"
        | "TokenRequest"
        | "CertificateSigningRequest" => body(&kind, raw)?,
        "DeleteOptions" => match delete_options(raw)? {
            Value::Object(map) => map,
            _ => Map::new(),
        },
        other => {
            return Err(format!(
                "protobuf bodies of kind {other:?} are not supported by this simulator; send JSON"
            ));
        }
    };
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    Ok(Value::Object(object))
}

/// One length-delimited protobuf field.
fn length_delimited(number: u64, bytes: &[u8]) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut value: u64) {
        while value >= 0x80 {
            out.push((value as u8 & 0x7F) | 0x80);
            value >>= 7;
        }
        out.push(value as u8);
    }
    let mut out = Vec::with_capacity(bytes.len() + 4);
    varint(&mut out, (number << 3) | 2);
    varint(&mut out, bytes.len() as u64);
    out.extend_from_slice(bytes);
    out
}

/// The OpenAPI v2 document in the protobuf encoding kubectl asks for
/// (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, gnostic's `Document`):
/// `swagger` (1), `info` (2: `title` 1, `version` 2) and empty `paths` (8). It publishes no
/// definitions, so kubectl's client-side schema validation finds no schema for any kind and
/// skips it, as it does for a kind the real server does not know.
pub fn openapi_v2_document(version: &str) -> Vec<u8> {
    let info = [
        length_delimited(1, b"Kubernetes"),
        length_delimited(2, version.as_bytes()),
    ]
    .concat();
    [
        length_delimited(1, b"2.0"),
        length_delimited(2, &info),
        length_delimited(8, &[]),
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_bytes(number: u64, value: &[u8]) -> Vec<u8> {
        let mut out = vec![((number << 3) | 2) as u8, value.len() as u8];
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn a_namespace_and_an_eviction_decode_and_garbage_is_an_error() {
        let meta = [
            field_bytes(1, b"demo"),
            field_bytes(11, &[field_bytes(1, b"a"), field_bytes(2, b"b")].concat()),
        ]
        .concat();
        let namespace = field_bytes(1, &meta);
        let type_meta = [field_bytes(1, b"v1"), field_bytes(2, b"Namespace")].concat();
        let envelope = [
            MAGIC.to_vec(),
            field_bytes(1, &type_meta),
            field_bytes(2, &namespace),
        ]
        .concat();
        assert_eq!(
            decode(&envelope).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo", "labels": {"a": "b"}}})
        );
        let options = [vec![0x08, 0x00], field_bytes(5, b"All")].concat();
        let eviction = [
            field_bytes(1, &field_bytes(1, b"p")),
            field_bytes(2, &options),
        ]
        .concat();
        let type_meta = [field_bytes(1, b"policy/v1"), field_bytes(2, b"Eviction")].concat();
        let envelope = [
            MAGIC.to_vec(),
            field_bytes(1, &type_meta),
            field_bytes(2, &eviction),
        ]
        .concat();
        let decoded = decode(&envelope).unwrap();
        assert_eq!(
            decoded["deleteOptions"],
            json!({"gracePeriodSeconds": 0, "dryRun": ["All"]})
        );
        assert!(decode(b"k8s\0\x0a\xff").is_err());
        assert!(decode(b"{}").is_err());
    }

    fn envelope(api_version: &[u8], kind: &[u8], raw: &[u8]) -> Vec<u8> {
        let type_meta = [field_bytes(1, api_version), field_bytes(2, kind)].concat();
        [
            MAGIC.to_vec(),
            field_bytes(1, &type_meta),
            field_bytes(2, raw),
        ]
        .concat()
    }

    #[test]
    fn service_accounts_token_requests_and_signing_requests_decode() {
        let account = [
            field_bytes(1, &field_bytes(1, b"robot")),
            field_bytes(3, &field_bytes(1, b"pull")),
            vec![0x20, 0x00],
        ]
        .concat();
        assert_eq!(
            decode(&envelope(b"v1", b"ServiceAccount", &account)).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}, "imagePullSecrets": [{"name": "pull"}], "automountServiceAccountToken": false})
        );
        // audiences (1), boundObjectRef (3) and expirationSeconds (4, 900 as a varint).
        let spec = [
            field_bytes(1, b"api"),
            field_bytes(3, &[field_bytes(1, b"Pod"), field_bytes(3, b"p")].concat()),
            vec![0x20, 0x84, 0x07],
        ]
        .concat();
        let request = field_bytes(2, &spec);
        let decoded = decode(&envelope(
            b"authentication.k8s.io/v1",
            b"TokenRequest",
            &request,
        ))
        .unwrap();
        assert_eq!(
            decoded["spec"],
            json!({"audiences": ["api"], "boundObjectRef": {"kind": "Pod", "name": "p"}, "expirationSeconds": 900})
        );
        // A CertificateSigningRequest as kubectl certificate approve sends it.
        let condition = [
            field_bytes(1, b"Approved"),
            field_bytes(2, b"KubectlApprove"),
            field_bytes(4, &[0x08, 0x00]),
            field_bytes(6, b"True"),
        ]
        .concat();
        let spec = [
            field_bytes(1, b"\x30\x00"),
            field_bytes(5, b"client auth"),
            field_bytes(7, b"example.com/s"),
        ]
        .concat();
        let csr = [
            field_bytes(1, &field_bytes(1, b"alice")),
            field_bytes(2, &spec),
            field_bytes(3, &field_bytes(1, &condition)),
        ]
        .concat();
        let decoded = decode(&envelope(
            b"certificates.k8s.io/v1",
            b"CertificateSigningRequest",
            &csr,
        ))
        .unwrap();
        assert_eq!(
            decoded["status"]["conditions"],
            json!([{"type": "Approved", "reason": "KubectlApprove", "lastUpdateTime": "1970-01-01T00:00:00Z", "status": "True"}])
        );
        assert_eq!(decoded["spec"]["request"], "MAA=");
        assert_eq!(decoded["spec"]["signerName"], "example.com/s");
        let truncated = field_bytes(2, &[0x1a, 0x05, b'x']);
        assert!(
            decode(&envelope(
                b"authentication.k8s.io/v1",
                b"TokenRequest",
                &truncated
            ))
            .is_err()
        );
    }
}
