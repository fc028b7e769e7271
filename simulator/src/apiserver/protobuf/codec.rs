//! The generic conversion between the protobuf encoding of a Kubernetes message and the JSON
//! the store keeps, driven by the field table ([`super::schema`]): one walk for every kind.
//!
//! Expected flow: [`to_json`] reads a message's fields by number and names them by the table;
//! [`to_proto`] writes the fields of a JSON object in tag order. Wire primitives (keys,
//! varints, skipping unknown fields) are prost's.
//!
//! Guarantees: the types whose Go JSON form differs from their message (`Time`,
//! `MicroTime`, `Duration`, `IntOrString`, `Quantity`, raw JSON in `RawExtension`,
//! `FieldsV1` and apiextensions' `JSON`, apiextensions' `JSONSchemaProps*Or*` unions, the slice
//! messages such as `ExtraValue` and structs embedded `inline`) get their JSON form; `bytes` are base64. As Go's JSON drops `omitempty` fields, a decoded
//! `+optional` field holding "" or 0 (what Go's encoder writes for an unset non-pointer field)
//! is left out. Malformed input is an error, never a panic; nesting is bounded.
//!
//! Caveats: an `+optional` pointer field set to "" or 0 is indistinguishable on the wire from
//! an unset one and is dropped too (a `false` is kept); JSON fields the table does not know
//! are not encoded (the real server prunes them as well).

use base64::Engine;
use prost::bytes::Buf;
use prost::encoding::{
    DecodeContext, WireType, decode_key, decode_varint, encode_key, encode_varint, skip_field,
};
use serde_json::{Map, Value, json};

use super::schema::{Cardinality, Field, FieldType, Message, Schema};
use crate::apiserver::time::{format_micro_time, format_time, parse_time};

/// How deep messages may nest (a Pod's deepest is about a dozen).
const MAX_DEPTH: usize = 64;

const TIME: &str = "apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "apimachinery.pkg.apis.meta.v1.MicroTime";
const DURATION: &str = "apimachinery.pkg.apis.meta.v1.Duration";
const INT_OR_STRING: &str = "apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "apimachinery.pkg.api.resource.Quantity";
/// apiextensions' unions of a schema with a list of schemas, a boolean or a list of strings:
/// (message, the field a JSON object goes to, the field any other JSON value goes to).
const SCHEMA_UNIONS: &[(&str, &str, &str)] = &[
    (
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
        "schema",
        "jSONSchemas",
    ),
    (
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
        "schema",
        "allows",
    ),
    (
        "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
        "schema",
        "property",
    ),
];
/// Messages whose one `bytes` field 1 holds JSON, which is their JSON form.
const RAW_JSON: &[&str] = &[
    "apimachinery.pkg.runtime.RawExtension",
    "apimachinery.pkg.apis.meta.v1.FieldsV1",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON",
];

/// A value read off the wire, before the table says what it is.
enum Raw<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// The fields of a message, in wire order.
fn wire_fields(mut bytes: &[u8]) -> Result<Vec<(u32, Raw<'_>)>, String> {
    let mut out = Vec::new();
    while bytes.has_remaining() {
        let (number, wire_type) = decode_key(&mut bytes).map_err(|e| e.to_string())?;
        let value = match wire_type {
            WireType::Varint => Raw::Varint(decode_varint(&mut bytes).map_err(|e| e.to_string())?),
            WireType::SixtyFourBit if bytes.len() >= 8 => Raw::Fixed64(bytes.get_u64_le()),
            WireType::ThirtyTwoBit if bytes.len() >= 4 => Raw::Fixed32(bytes.get_u32_le()),
            WireType::LengthDelimited => {
                let length = usize::try_from(decode_varint(&mut bytes).map_err(|e| e.to_string())?)
                    .map_err(|_| "a length overflows")?;
                if length > bytes.len() {
                    return Err(format!("field {number} is truncated"));
                }
                let (value, rest) = bytes.split_at(length);
                bytes = rest;
                Raw::Bytes(value)
            }
            other => {
                skip_field(other, number, &mut bytes, DecodeContext::default())
                    .map_err(|e| e.to_string())?;
                continue;
            }
        };
        out.push((number, value));
    }
    Ok(out)
}

fn utf8(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_owned())
}

fn base64(bytes: &[u8]) -> Value {
    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The JSON of one scalar or message value.
fn value_json(
    schema: &Schema,
    ty: &FieldType,
    raw: Raw<'_>,
    depth: usize,
) -> Result<Value, String> {
    Ok(match (ty, raw) {
        (FieldType::Bool, Raw::Varint(v)) => json!(v != 0),
        // int32 negatives travel sign-extended to 64 bits.
        (FieldType::Int32, Raw::Varint(v)) => json!(v as i64 as i32),
        (FieldType::Int64, Raw::Varint(v)) => json!(v as i64),
        (FieldType::Double, Raw::Fixed64(v)) => json!(f64::from_bits(v)),
        (FieldType::Double, Raw::Fixed32(v)) => json!(f32::from_bits(v)),
        (FieldType::String, Raw::Bytes(b)) => json!(utf8(b)?),
        (FieldType::Bytes, Raw::Bytes(b)) => base64(b),
        (FieldType::Message(name), Raw::Bytes(b)) => message_json(schema, name, b, depth + 1)?,
        (ty, _) => return Err(format!("a field of type {ty:?} has the wrong wire type")),
    })
}

/// The JSON of a message named `name` (its special form for the types that have one).
pub(crate) fn message_json(
    schema: &Schema,
    name: &str,
    bytes: &[u8],
    depth: usize,
) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("messages nest too deeply".into());
    }
    let message = schema
        .message(name)
        .ok_or_else(|| format!("no protobuf message {name} is known"))?;
    let object = fields_json(schema, message, bytes, depth)?;
    special_json(name, message, object)
}

/// The fields of a message as a JSON object, `omitempty` zeros left out.
fn fields_json(
    schema: &Schema,
    message: &Message,
    bytes: &[u8],
    depth: usize,
) -> Result<Map<String, Value>, String> {
    let mut object = Map::new();
    for (number, raw) in wire_fields(bytes)? {
        // Unknown fields are skipped, as Go's generated decoders skip them.
        let Some(field) = message.by_number(number) else {
            continue;
        };
        match field.cardinality {
            Cardinality::Single => {
                object.insert(
                    field.name.clone(),
                    value_json(schema, &field.ty, raw, depth)?,
                );
            }
            Cardinality::Inline => {
                if let Value::Object(embedded) = value_json(schema, &field.ty, raw, depth)? {
                    object.extend(embedded);
                }
            }
            Cardinality::Repeated => {
                let list = object
                    .entry(field.name.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(list) = list {
                    push_repeated(schema, field, raw, list, depth)?;
                }
            }
            Cardinality::Map => {
                let Raw::Bytes(entry) = raw else {
                    return Err(format!("map field {} is not an entry", field.name));
                };
                let (key, value) = map_entry(schema, field, entry, depth)?;
                let map = object
                    .entry(field.name.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
        }
    }
    object.retain(|name, value| {
        let optional = message
            .fields
            .iter()
            .any(|f| &f.name == name && f.optional && f.cardinality == Cardinality::Single);
        !(optional && is_go_zero(value))
    });
    Ok(object)
}

/// Appends one wire value of a repeated field to its list (several, for a packed list of
/// numbers).
fn push_repeated(
    schema: &Schema,
    field: &Field,
    raw: Raw<'_>,
    list: &mut Vec<Value>,
    depth: usize,
) -> Result<(), String> {
    let numeric = !matches!(
        field.ty,
        FieldType::String | FieldType::Bytes | FieldType::Message(_)
    );
    let Raw::Bytes(mut packed) = raw else {
        list.push(value_json(schema, &field.ty, raw, depth)?);
        return Ok(());
    };
    if !numeric {
        list.push(value_json(schema, &field.ty, Raw::Bytes(packed), depth)?);
        return Ok(());
    }
    while packed.has_remaining() {
        let raw = match field.ty {
            FieldType::Double if packed.len() >= 8 => Raw::Fixed64(packed.get_u64_le()),
            FieldType::Double => return Err("a packed double is truncated".into()),
            _ => Raw::Varint(decode_varint(&mut packed).map_err(|e| e.to_string())?),
        };
        list.push(value_json(schema, &field.ty, raw, depth)?);
    }
    Ok(())
}

/// What Go's encoder writes for an unset non-pointer string (and for a zero `Time`, which
/// Go's JSON gives as null). Zero numbers and `false` are kept: pointer fields where they
/// differ from unset are common (`gracePeriodSeconds: 0`, `automountServiceAccountToken:
/// false`), and a kept zero of a non-pointer field reads the same as an absent one.
fn is_go_zero(value: &Value) -> bool {
    match value {
        Value::String(s) => s.is_empty(),
        Value::Null => true,
        _ => false,
    }
}

fn map_entry(
    schema: &Schema,
    field: &Field,
    bytes: &[u8],
    depth: usize,
) -> Result<(String, Value), String> {
    let mut key = String::new();
    let mut value = None;
    for (number, raw) in wire_fields(bytes)? {
        match (number, raw) {
            (1, Raw::Bytes(b)) => key = utf8(b)?,
            (2, raw) => value = Some(value_json(schema, &field.ty, raw, depth)?),
            _ => {}
        }
    }
    let value = match value {
        Some(value) => value,
        // An absent value is its type's zero.
        None => match &field.ty {
            FieldType::String | FieldType::Bytes => json!(""),
            FieldType::Bool => json!(false),
            FieldType::Int32 | FieldType::Int64 | FieldType::Double => json!(0),
            FieldType::Message(name) => message_json(schema, name, &[], depth + 1)?,
        },
    };
    Ok((key, value))
}

/// The JSON form of the messages whose Go type marshals itself.
fn special_json(
    name: &str,
    message: &Message,
    mut object: Map<String, Value>,
) -> Result<Value, String> {
    let int = |object: &Map<String, Value>, field: &str| {
        object.get(field).and_then(Value::as_i64).unwrap_or(0)
    };
    Ok(match name {
        TIME | MICRO_TIME => {
            let seconds = int(&object, "seconds");
            let nanos = int(&object, "nanos");
            if seconds == 0 && nanos == 0 {
                return Ok(Value::Null);
            }
            let since = std::time::Duration::new(
                u64::try_from(seconds).map_err(|_| "a time before 1970 is not supported")?,
                u32::try_from(nanos).map_err(|_| "a time's nanoseconds are out of range")?,
            );
            json!(if name == TIME {
                format_time(since)
            } else {
                format_micro_time(since)
            })
        }
        DURATION => json!(format_duration(int(&object, "duration"))),
        INT_OR_STRING => match int(&object, "type") {
            1 => object.remove("strVal").unwrap_or_else(|| json!("")),
            _ => json!(int(&object, "intVal")),
        },
        QUANTITY => object.remove("string").unwrap_or_else(|| json!("0")),
        _ if RAW_JSON.contains(&name) => {
            let raw = object.remove("raw").or_else(|| object.remove("Raw"));
            match raw.as_ref().and_then(Value::as_str) {
                None | Some("") => Value::Null,
                Some(encoded) => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(encoded)
                        .map_err(|e| e.to_string())?;
                    serde_json::from_slice(&bytes)
                        .map_err(|e| format!("the raw object of a {name} is not JSON: {e}"))?
                }
            }
        }
        _ if message.list => object.remove("items").unwrap_or_else(|| json!([])),
        _ => match SCHEMA_UNIONS.iter().find(|(union, ..)| *union == name) {
            // A schema wins (OrBool's `allows` is true beside it); else the other form.
            Some((_, schema, other)) => match object.remove(*schema) {
                Some(schema) => schema,
                None => object.remove(*other).unwrap_or(Value::Null),
            },
            None => Value::Object(object),
        },
    })
}

/// Go's `time.Duration` text (`1h2m3s`, `1.5s`, `0s`) of nanoseconds.
fn format_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let nanos = nanos.unsigned_abs();
    let (hours, rest) = (nanos / 3_600_000_000_000, nanos % 3_600_000_000_000);
    let (minutes, rest) = (rest / 60_000_000_000, rest % 60_000_000_000);
    let seconds = rest as f64 / 1e9;
    let mut text = String::from(sign);
    if hours > 0 {
        text.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        text.push_str(&format!("{minutes}m"));
    }
    text.push_str(&format!("{seconds}s"));
    text
}

/// Go's `time.ParseDuration` for the units Kubernetes objects use (`h`, `m`, `s`, `ms`).
fn parse_duration(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let number: f64 = rest[..number_end].parse().ok()?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "h" => 3.6e12,
            "m" => 6e10,
            "s" => 1e9,
            "ms" => 1e6,
            "us" | "µs" => 1e3,
            "ns" => 1.0,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit_end..];
    }
    let nanos = total.round() as i64;
    Some(if negative { -nanos } else { nanos })
}

fn put_bytes(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, number: u32, value: u64) {
    encode_key(number, WireType::Varint, out);
    encode_varint(value, out);
}

/// The wire form of one JSON value of a field's type, appended to `out` as field `number`.
fn put_value(
    schema: &Schema,
    out: &mut Vec<u8>,
    number: u32,
    ty: &FieldType,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<(), String> {
    let wrong = || format!("{path}: {value} is not a {ty:?}");
    match ty {
        FieldType::Bool => put_varint(out, number, u64::from(value.as_bool().ok_or_else(wrong)?)),
        FieldType::Int32 | FieldType::Int64 => {
            let n = value.as_i64().ok_or_else(wrong)?;
            if *ty == FieldType::Int32 && i32::try_from(n).is_err() {
                return Err(format!("{path}: {n} does not fit in 32 bits"));
            }
            put_varint(out, number, n as u64);
        }
        FieldType::Double => {
            encode_key(number, WireType::SixtyFourBit, out);
            out.extend_from_slice(&value.as_f64().ok_or_else(wrong)?.to_bits().to_le_bytes());
        }
        FieldType::String => put_bytes(out, number, value.as_str().ok_or_else(wrong)?.as_bytes()),
        FieldType::Bytes => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(value.as_str().ok_or_else(wrong)?)
                .map_err(|e| format!("{path}: not base64: {e}"))?;
            put_bytes(out, number, &bytes);
        }
        FieldType::Message(name) => {
            let mut inner = Vec::new();
            message_proto(schema, name, value, path, depth + 1, &mut inner)?;
            put_bytes(out, number, &inner);
        }
    }
    Ok(())
}

/// The message form of a JSON value of the message type `name`, appended to `out`.
pub(crate) fn message_proto(
    schema: &Schema,
    name: &str,
    value: &Value,
    path: &str,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("objects nest too deeply".into());
    }
    let message = schema
        .message(name)
        .ok_or_else(|| format!("no protobuf message {name} is known"))?;
    let object = match special_proto(name, message, value, path)? {
        Some(object) => object,
        None => value
            .as_object()
            .cloned()
            .ok_or_else(|| format!("{path}: {value} is not an object"))?,
    };
    for field in &message.fields {
        put_field(schema, out, field, &object, path, depth)?;
    }
    Ok(())
}

/// The wire form of one field of `object` (nothing when it is absent or null).
fn put_field(
    schema: &Schema,
    out: &mut Vec<u8>,
    field: &Field,
    object: &Map<String, Value>,
    path: &str,
    depth: usize,
) -> Result<(), String> {
    if let (Cardinality::Inline, FieldType::Message(inner)) = (field.cardinality, &field.ty) {
        // The embedded struct takes its fields from the enclosing object.
        let mut embedded = Vec::new();
        let whole = Value::Object(object.clone());
        message_proto(schema, inner, &whole, path, depth + 1, &mut embedded)?;
        if !embedded.is_empty() {
            put_bytes(out, field.number, &embedded);
        }
        return Ok(());
    }
    let Some(value) = object.get(&field.name).filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let path = if path.is_empty() {
        field.name.clone()
    } else {
        format!("{path}.{}", field.name)
    };
    match field.cardinality {
        Cardinality::Single | Cardinality::Inline => {
            put_value(schema, out, field.number, &field.ty, value, &path, depth)?
        }
        Cardinality::Repeated => {
            let items = value
                .as_array()
                .ok_or_else(|| format!("{path}: {value} is not a list"))?;
            for item in items {
                put_value(schema, out, field.number, &field.ty, item, &path, depth)?;
            }
        }
        Cardinality::Map => {
            let entries = value
                .as_object()
                .ok_or_else(|| format!("{path}: {value} is not a map"))?;
            for (key, item) in entries {
                let mut entry = Vec::new();
                put_bytes(&mut entry, 1, key.as_bytes());
                if !item.is_null() {
                    put_value(schema, &mut entry, 2, &field.ty, item, &path, depth)?;
                }
                put_bytes(out, field.number, &entry);
            }
        }
    }
    Ok(())
}

/// The message fields (by JSON name) of a value whose Go type marshals itself; None for the
/// others.
fn special_proto(
    name: &str,
    message: &Message,
    value: &Value,
    path: &str,
) -> Result<Option<Map<String, Value>>, String> {
    let text = |what: &str| {
        value
            .as_str()
            .ok_or_else(|| format!("{path}: {value} is not a {what}"))
    };
    let fields = match name {
        TIME | MICRO_TIME => {
            let text = text("time")?;
            let since = parse_time(text)
                .ok_or_else(|| format!("{path}: {text:?} is not an RFC 3339 time"))?;
            let nanos = if name == MICRO_TIME {
                since.subsec_micros() * 1000
            } else {
                0
            };
            json!({"seconds": since.as_secs(), "nanos": nanos})
        }
        DURATION => {
            let text = text("duration")?;
            let nanos = parse_duration(text)
                .ok_or_else(|| format!("{path}: {text:?} is not a duration"))?;
            json!({"duration": nanos})
        }
        INT_OR_STRING => match value {
            Value::Number(n) => match n.as_i64() {
                Some(n) => json!({"type": 0, "intVal": n}),
                None => return Err(format!("{path}: {n} is not an integer")),
            },
            Value::String(s) => json!({"type": 1, "strVal": s}),
            other => {
                return Err(format!(
                    "{path}: {other} is neither an integer nor a string"
                ));
            }
        },
        QUANTITY => match value {
            Value::String(s) => json!({"string": s}),
            Value::Number(n) => json!({"string": n.to_string()}),
            other => return Err(format!("{path}: {other} is not a quantity")),
        },
        _ if RAW_JSON.contains(&name) => {
            let field = message.by_number(1).map_or("raw", |f| f.name.as_str());
            let raw = base64::engine::general_purpose::STANDARD.encode(value.to_string());
            json!({field: raw})
        }
        _ if message.list => json!({"items": value}),
        _ => match SCHEMA_UNIONS.iter().find(|(union, ..)| *union == name) {
            // OrBool's `allows` is true beside a schema.
            Some((_, schema, "allows")) if value.is_object() => {
                json!({*schema: value, "allows": true})
            }
            Some((_, schema, _)) if value.is_object() => json!({*schema: value}),
            Some((_, _, other)) => json!({*other: value}),
            None => return Ok(None),
        },
    };
    // A zero `nanos` is not written, as Go's encoder writes none for an exact second.
    let Value::Object(mut fields) = fields else {
        return Ok(None);
    };
    fields.retain(|key, v| !(key == "nanos" && v == &json!(0)));
    Ok(Some(fields))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_and_write_as_go_writes_them() {
        for (text, nanos) in [
            ("0s", 0),
            ("1.5s", 1_500_000_000),
            ("1h0m0s", 3_600_000_000_000),
            ("2m30s", 150_000_000_000),
            ("-1s", -1_000_000_000),
        ] {
            assert_eq!(parse_duration(text), Some(nanos), "{text}");
            assert_eq!(format_duration(nanos), text);
        }
        assert_eq!(parse_duration("1x"), None);
        assert_eq!(parse_duration("s"), None);
    }
}
