//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) of every built-in
//! kind: the `k8s\0` magic and `runtime.Unknown` envelope (k8s-pb's message), and inside it
//! the kind's message, converted to and from the JSON the store keeps by one generic walk over
//! the field table of the Kubernetes protos ([`schema`], [`codec`]).
//!
//! Expected flow: a request body in protobuf is [`decode`]d into the JSON object a JSON
//! client would have sent; an answer a client asked in protobuf is [`encode`]d from the JSON
//! object or list the server built.
//!
//! Guarantees: any kind (and list kind) of the Kubernetes API whose message the table holds
//! converts, with the JSON forms of Go's self-marshalling types; malformed bytes, an unknown
//! kind or a JSON value of the wrong type are errors (the caller answers 415 or falls back
//! to JSON), never panics.
//!
//! Caveats: see [`codec`] for what the wire cannot tell (`omitempty` zeros of pointer
//! fields); custom resources have no protobuf encoding, as on a real server.

mod codec;
mod schema;

use prost::Message as _;
use serde_json::{Value, json};

use self::schema::schema;

/// The envelope magic: `k8s\0`.
const MAGIC: &[u8] = b"k8s\0";

/// The JSON object of a protobuf body (`apiVersion` and `kind` from its envelope).
pub fn decode(bytes: &[u8]) -> Result<Value, String> {
    let envelope = bytes
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the protobuf magic k8s\\0")?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope)
        .map_err(|e| format!("the protobuf envelope is malformed: {e}"))?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err("compressed protobuf bodies are not supported".into());
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let table = schema();
    let message = table.kind(&api_version, &kind).ok_or_else(|| {
        format!("no protobuf message is known for kind {kind:?} of {api_version:?}")
    })?;
    let raw = unknown.raw.unwrap_or_default();
    let mut object = codec::message_json(table, &message, &raw, 0)?;
    let Value::Object(map) = &mut object else {
        return Err(format!("a {kind} is not an object"));
    };
    map.insert("apiVersion".into(), json!(api_version));
    map.insert("kind".into(), json!(kind));
    Ok(object)
}

/// The protobuf body (magic and envelope) of a JSON object or list with `apiVersion` and
/// `kind`.
pub fn encode(object: &Value) -> Result<Vec<u8>, String> {
    let field = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let table = schema();
    let message = table.kind(api_version, kind).ok_or_else(|| {
        format!("no protobuf message is known for kind {kind:?} of {api_version:?}")
    })?;
    let mut raw = Vec::new();
    codec::message_proto(table, &message, object, "", 0, &mut raw)?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    unknown
        .encode(&mut out)
        .map_err(|e| format!("the envelope does not encode: {e}"))?;
    Ok(out)
}

/// The OpenAPI v2 document in the protobuf encoding kubectl asks for
/// (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, gnostic's `Document`):
/// `swagger` (1), `info` (2: `title` 1, `version` 2) and empty `paths` (8). It publishes no
/// definitions, so kubectl's client-side schema validation finds no schema for any kind and
/// skips it, as it does for a kind the real server does not know.
pub fn openapi_v2_document(version: &str) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
        prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, out);
        prost::encoding::encode_varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }
    let mut info = Vec::new();
    field(&mut info, 1, b"Kubernetes");
    field(&mut info, 2, version.as_bytes());
    let mut out = Vec::new();
    field(&mut out, 1, b"2.0");
    field(&mut out, 2, &info);
    field(&mut out, 8, &[]);
    out
}

#[cfg(test)]
mod tests;
