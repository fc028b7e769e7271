//! The field table of the Kubernetes protobuf messages (`schema.txt`, written by
//! `simulator/tools/k8s_proto_schema.py` from the `generated.proto` files k8s-pb is generated
//! from, with the names of their OpenAPI definitions): what the wire does not carry and the
//! JSON the store keeps needs — each field's Go JSON name, type, cardinality (with Go's
//! `inline` embedding) and `+optional` mark.
//!
//! Expected flow: [`schema`] parses the table once; the codec asks it for a message by its
//! proto name ([`Schema::message`]) or for the message of an `apiVersion` and `kind`
//! ([`Schema::kind`]).
//!
//! Guarantees: every message of the table is present with its fields in tag order; a field's
//! message type names a message of the table (checked by the unit tests).
//!
//! Caveats: the table is as new as the k8s-pb version it was written from (Kubernetes 1.35);
//! fields newer than the simulated server's version are known too, as they are to a newer
//! client.

use std::collections::HashMap;
use std::sync::OnceLock;

/// A scalar or message type of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldType {
    /// `bool`.
    Bool,
    /// `bytes` (base64 in JSON).
    Bytes,
    /// `double`.
    Double,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `string`.
    String,
    /// A message, by its proto name (`api.core.v1.PodSpec`).
    Message(String),
}

/// How many values a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cardinality {
    /// At most one.
    Single,
    /// A list.
    Repeated,
    /// A `map<string, type>`.
    Map,
    /// A Go struct embedded `inline`: its fields are the enclosing object's.
    Inline,
}

/// One field of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    /// The field number.
    pub number: u32,
    /// The Go JSON name.
    pub name: String,
    /// How many values.
    pub cardinality: Cardinality,
    /// The (map value's) type.
    pub ty: FieldType,
    /// `+optional` (the Go field is `omitempty`).
    pub optional: bool,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Message {
    /// A Go slice in a message (`ExtraValue`, `Verbs`): its JSON is the bare `items` array.
    pub list: bool,
    /// The fields, in tag order.
    pub fields: Vec<Field>,
}

impl Message {
    /// The field with a number.
    pub(crate) fn by_number(&self, number: u32) -> Option<&Field> {
        self.fields.iter().find(|f| f.number == number)
    }
}

/// Every message of the table.
#[derive(Debug, Default)]
pub(crate) struct Schema {
    messages: HashMap<String, Message>,
}

/// The table, parsed on first use.
pub(crate) fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| Schema::parse(include_str!("schema.txt")))
}

fn field_type(text: &str) -> FieldType {
    match text {
        "bool" => FieldType::Bool,
        "bytes" => FieldType::Bytes,
        "double" | "float" => FieldType::Double,
        "int32" => FieldType::Int32,
        "int64" => FieldType::Int64,
        "string" => FieldType::String,
        other => FieldType::Message(other.to_owned()),
    }
}

impl Schema {
    /// Parses the table format (see the generator); lines it does not know are skipped.
    fn parse(text: &str) -> Schema {
        let mut messages = HashMap::new();
        let mut current: Option<(String, Message)> = None;
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["M", name, rest @ ..] => {
                    if let Some((name, message)) = current.take() {
                        messages.insert(name, message);
                    }
                    let message = Message {
                        list: rest.contains(&"list"),
                        fields: Vec::new(),
                    };
                    current = Some(((*name).to_owned(), message));
                }
                ["F", number, name, cardinality, ty, optional] => {
                    let (Some((_, message)), Ok(number)) = (current.as_mut(), number.parse())
                    else {
                        continue;
                    };
                    message.fields.push(Field {
                        number,
                        name: (*name).to_owned(),
                        cardinality: match *cardinality {
                            "r" => Cardinality::Repeated,
                            "m" => Cardinality::Map,
                            "i" => Cardinality::Inline,
                            _ => Cardinality::Single,
                        },
                        ty: field_type(ty),
                        optional: *optional == "1",
                    });
                }
                _ => {}
            }
        }
        if let Some((name, message)) = current {
            messages.insert(name, message);
        }
        for message in messages.values_mut() {
            message.fields.sort_by_key(|f| f.number);
        }
        Schema { messages }
    }

    /// A message by its proto name.
    pub(crate) fn message(&self, name: &str) -> Option<&Message> {
        self.messages.get(name)
    }

    /// The proto name of the message of an `apiVersion` (`v1`, `apps/v1`) and `kind`: the
    /// message named `kind` in a package of that version whose group part is the API group's
    /// first label (`core` for the core group), else the `meta` message of that name and
    /// version (`DeleteOptions`, `Status`, which any group's clients send and receive).
    pub(crate) fn kind(&self, api_version: &str, kind: &str) -> Option<String> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let label = match group.split('.').next().unwrap_or_default() {
            "" => "core",
            label => label,
        };
        let suffix = format!(".{version}.{kind}");
        let candidates: Vec<&String> = self
            .messages
            .keys()
            .filter(|name| name.ends_with(&suffix))
            .collect();
        let in_group = candidates.iter().find(|name| {
            let package = &name[..name.len() - suffix.len()];
            package.rsplit('.').next() == Some(label)
        });
        in_group
            .or_else(|| {
                candidates
                    .iter()
                    .find(|name| name.starts_with("apimachinery.pkg.apis.meta."))
            })
            .map(|name| (*name).clone())
    }

    /// Every message name (for tests).
    #[cfg(test)]
    pub(crate) fn names(&self) -> impl Iterator<Item = &String> {
        self.messages.keys()
    }
}
