//! A CRD version's structural `openAPIV3Schema`: parsed once, then used to prune, default
//! and validate custom resources as apiextensions-apiserver does.
//!
//! Expected flow: [`Schema::parse`] when a CRD is registered (an error refuses the CRD);
//! then on every write [`Schema::prune`], [`Schema::default_values`] and [`Schema::validate`]
//! (the order of the real server's decoder and strategy), and [`Schema::default_values`]
//! again on every read.
//!
//! Guarantees: the checks and wording follow kube-openapi's validators as
//! `apiextensions-apiserver/pkg/apiserver/validation/validation.go` turns them into field
//! errors (`spec.x in body should be …`); the root's `apiVersion`, `kind` and `metadata` and
//! those of embedded resources are never pruned; `x-kubernetes-preserve-unknown-fields`
//! keeps unknown fields; non-nullable nulls of object properties are defaulted or dropped
//! (`PruneNonNullableNullsWithoutDefaults`).
//!
//! Caveats: `allOf`/`anyOf`/`oneOf`/`not` are read as nothing (the real server checks them);
//! `format` is checked for `date-time`, `date` and `byte` only; validation ratcheting
//! (an update may keep an invalid value it does not touch) follows properties and map keys,
//! not the items of a changed list; metadata of embedded resources is kept whole, not pruned
//! to ObjectMeta; an int-or-string of another type gets one error `must be of type
//! integer,string` (the real server reports its internal `anyOf`).

use std::collections::BTreeMap;
use std::sync::Arc;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::cel::Rule;
use super::errors::{ErrorType, FieldError};

/// A structural schema type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    /// `object`.
    Object,
    /// `array`.
    Array,
    /// `string`.
    String,
    /// `integer`.
    Integer,
    /// `number`.
    Number,
    /// `boolean`.
    Boolean,
}

impl SchemaType {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "object" => SchemaType::Object,
            "array" => SchemaType::Array,
            "string" => SchemaType::String,
            "integer" => SchemaType::Integer,
            "number" => SchemaType::Number,
            "boolean" => SchemaType::Boolean,
            _ => return None,
        })
    }

    /// The name in the schema.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Object => "object",
            SchemaType::Array => "array",
            SchemaType::String => "string",
            SchemaType::Integer => "integer",
            SchemaType::Number => "number",
            SchemaType::Boolean => "boolean",
        }
    }

    fn admits(self, value: &Value) -> bool {
        match self {
            SchemaType::Object => value.is_object(),
            SchemaType::Array => value.is_array(),
            SchemaType::String => value.is_string(),
            SchemaType::Boolean => value.is_boolean(),
            SchemaType::Number => value.is_number(),
            // A JSON number with no fraction is an integer, `2.0` included (kube-openapi's
            // `swag.IsFloat64AJSONInteger`).
            SchemaType::Integer => {
                value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
        }
    }
}

/// The JSON type of a value as kube-openapi names it in a type error.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ListType {
    /// `atomic` (or absent): no uniqueness.
    #[default]
    Atomic,
    /// `set`: scalar items, each at most once.
    Set,
    /// `map`: object items, unique by `x-kubernetes-list-map-keys`.
    Map(Vec<String>),
}

/// One node of a structural schema.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// `type`; None for int-or-string and preserve-unknown nodes without one.
    pub ty: Option<SchemaType>,
    /// `nullable`.
    pub nullable: bool,
    /// `x-kubernetes-int-or-string`.
    pub int_or_string: bool,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub preserve_unknown: bool,
    /// `x-kubernetes-embedded-resource`.
    pub embedded: bool,
    /// `properties`.
    pub properties: BTreeMap<String, Schema>,
    /// `additionalProperties` as a schema (a map's values).
    pub additional: Option<Box<Schema>>,
    /// `items`.
    pub items: Option<Box<Schema>>,
    /// `required`.
    pub required: Vec<String>,
    /// `enum`.
    pub enumeration: Vec<Value>,
    /// `minimum`, `exclusiveMinimum`.
    pub minimum: Option<(f64, bool)>,
    /// `maximum`, `exclusiveMaximum`.
    pub maximum: Option<(f64, bool)>,
    /// `minLength`.
    pub min_length: Option<u64>,
    /// `maxLength`.
    pub max_length: Option<u64>,
    /// `minItems`.
    pub min_items: Option<u64>,
    /// `maxItems`.
    pub max_items: Option<u64>,
    /// `minProperties`.
    pub min_properties: Option<u64>,
    /// `maxProperties`.
    pub max_properties: Option<u64>,
    /// `pattern`, compiled.
    pub pattern: Option<(String, Regex)>,
    /// `format`.
    pub format: Option<String>,
    /// `default`.
    pub default: Option<Value>,
    /// `x-kubernetes-list-type` (with its map keys).
    pub list_type: ListType,
    /// `x-kubernetes-validations`, compiled.
    pub compiled: Vec<Arc<Rule>>,
    /// Whether this node or one below it has rules (so CEL skips rule-free subtrees).
    pub has_rules: bool,
}

/// Where a node sits, for error messages: `openAPIV3Schema.properties[spec]…`.
fn child_path(path: &str, segment: &str) -> String {
    format!("{path}.{segment}")
}

impl Schema {
    /// Parses a schema node; `path` names it in errors (`spec.versions[0].schema.openAPIV3Schema`).
    pub fn parse(node: &Value, path: &str) -> Result<Schema, FieldError> {
        let bad = |field: &str, why: &str| {
            FieldError::new(
                ErrorType::Invalid,
                &child_path(path, field),
                node.get(field).cloned().unwrap_or(Value::Null),
                why,
            )
        };
        let number = |field: &str| node.get(field).and_then(Value::as_f64);
        let count = |field: &str| node.get(field).and_then(Value::as_u64);
        let flag = |field: &str| node.get(field).and_then(Value::as_bool).unwrap_or(false);
        let ty = match node.get("type").and_then(Value::as_str) {
            None | Some("") => None,
            Some(name) => Some(SchemaType::parse(name).ok_or_else(|| {
                bad(
                    "type",
                    "must be one of \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\"",
                )
            })?),
        };
        let mut properties = BTreeMap::new();
        if let Some(map) = node.get("properties").and_then(Value::as_object) {
            for (name, child) in map {
                let at = format!("{path}.properties[{name}]");
                properties.insert(name.clone(), Schema::parse(child, &at)?);
            }
        }
        let additional = match node.get("additionalProperties") {
            Some(child) if child.is_object() => Some(Box::new(Schema::parse(
                child,
                &child_path(path, "additionalProperties"),
            )?)),
            _ => None,
        };
        let items = match node.get("items") {
            Some(child) if child.is_object() => {
                Some(Box::new(Schema::parse(child, &child_path(path, "items"))?))
            }
            _ => None,
        };
        let pattern = match node.get("pattern").and_then(Value::as_str) {
            Some(text) => Some((
                text.to_owned(),
                Regex::new(text).map_err(|e| {
                    bad(
                        "pattern",
                        &format!("must be a valid regular expression, but isn't: {e}"),
                    )
                })?,
            )),
            None => None,
        };
        let list_type = match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(
                node.get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|keys| {
                        keys.iter()
                            .filter_map(|k| k.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Some("atomic") | None => ListType::Atomic,
            Some(_) => {
                return Err(bad(
                    "x-kubernetes-list-type",
                    "must be one of \"atomic\", \"map\", \"set\"",
                ));
            }
        };
        let mut compiled = Vec::new();
        if let Some(rules) = node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        {
            for (i, entry) in rules.iter().enumerate() {
                let at = format!("{path}.x-kubernetes-validations[{i}]");
                compiled.push(Arc::new(Rule::compile(entry, &at)?));
            }
        }
        let has_rules = !compiled.is_empty()
            || properties.values().any(|p| p.has_rules)
            || additional.as_ref().is_some_and(|a| a.has_rules)
            || items.as_ref().is_some_and(|i| i.has_rules);
        Ok(Schema {
            ty,
            nullable: flag("nullable"),
            int_or_string: flag("x-kubernetes-int-or-string"),
            preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
            embedded: flag("x-kubernetes-embedded-resource"),
            properties,
            additional,
            items,
            required: node
                .get("required")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            enumeration: node
                .get("enum")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            minimum: number("minimum").map(|m| (m, flag("exclusiveMinimum"))),
            maximum: number("maximum").map(|m| (m, flag("exclusiveMaximum"))),
            min_length: count("minLength"),
            max_length: count("maxLength"),
            min_items: count("minItems"),
            max_items: count("maxItems"),
            min_properties: count("minProperties"),
            max_properties: count("maxProperties"),
            pattern,
            format: node
                .get("format")
                .and_then(Value::as_str)
                .map(str::to_owned),
            default: node.get("default").cloned(),
            list_type,
            compiled,
            has_rules,
        })
    }

    /// The schema of a property or a map value, if the node declares it.
    pub fn child(&self, key: &str) -> Option<&Schema> {
        self.properties.get(key).or(self.additional.as_deref())
    }

    /// Drops the fields the schema does not declare. `root` keeps `apiVersion`, `kind` and
    /// `metadata`, as an embedded resource does.
    pub fn prune(&self, value: &mut Value, root: bool) {
        match value {
            Value::Object(map) => {
                let keep_meta = root || self.embedded;
                let unknown_kept = self.preserve_unknown || self.additional.is_some();
                map.retain(|key, _| {
                    unknown_kept
                        || self.properties.contains_key(key)
                        || (keep_meta && matches!(key.as_str(), "apiVersion" | "kind" | "metadata"))
                });
                for (key, child) in map.iter_mut() {
                    if keep_meta && key == "metadata" && !self.properties.contains_key(key) {
                        continue;
                    }
                    if let Some(schema) = self.child(key) {
                        schema.prune(child, false);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for item in items {
                        schema.prune(item, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// The fields [`Schema::prune`] would drop, as dotted paths (`spec.mdoe`), in the order
    /// met: what strict field validation refuses.
    pub fn unknown_fields(&self, value: &Value, root: bool, at: &str, found: &mut Vec<String>) {
        let path = |key: &str| {
            if at.is_empty() {
                key.to_owned()
            } else {
                format!("{at}.{key}")
            }
        };
        match value {
            Value::Object(map) => {
                let keep_meta = root || self.embedded;
                let unknown_kept = self.preserve_unknown || self.additional.is_some();
                for (key, child) in map {
                    let meta =
                        keep_meta && matches!(key.as_str(), "apiVersion" | "kind" | "metadata");
                    if !unknown_kept && !self.properties.contains_key(key) && !meta {
                        found.push(path(key));
                        continue;
                    }
                    if meta && !self.properties.contains_key(key) {
                        continue;
                    }
                    if let Some(schema) = self.child(key) {
                        schema.unknown_fields(child, false, &path(key), found);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for (index, item) in items.iter().enumerate() {
                        schema.unknown_fields(item, false, &format!("{at}[{index}]"), found);
                    }
                }
            }
            _ => {}
        }
    }

    /// Fills in `default`s of absent properties, replaces the nulls of non-nullable
    /// properties by their default or drops them, and descends.
    pub fn default_values(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, schema) in &self.properties {
                    match map.get(key) {
                        Some(Value::Null) if !schema.nullable => match &schema.default {
                            Some(default) => {
                                map.insert(key.clone(), default.clone());
                            }
                            None => {
                                map.remove(key);
                            }
                        },
                        None => {
                            if let Some(default) = &schema.default {
                                map.insert(key.clone(), default.clone());
                            }
                        }
                        Some(_) => {}
                    }
                }
                for (key, child) in map.iter_mut() {
                    if let Some(schema) = self.child(key) {
                        schema.default_values(child);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for item in items {
                        schema.default_values(item);
                    }
                }
            }
            _ => {}
        }
    }

    /// Checks a value against this node; `path` is its field path (empty at the root).
    pub fn validate(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        self.validate_update(value, None, path, errors);
    }

    /// Checks a value against this node, `old` being the stored value at the same place on
    /// update: a value left as it was is not checked again (validation ratcheting, on by
    /// default since Kubernetes 1.30), so a tightened CRD does not block unrelated updates.
    pub fn validate_update(
        &self,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        if old == Some(value) {
            return;
        }
        if value.is_null() {
            if !self.nullable && (self.ty.is_some() || self.int_or_string) {
                let want = self.ty.map_or("integer,string", SchemaType::name);
                errors.push(type_error(path, want, value));
            }
            return;
        }
        if self.int_or_string {
            if !(value.is_string() || SchemaType::Integer.admits(value)) {
                errors.push(type_error(path, "integer,string", value));
                return;
            }
        } else if let Some(ty) = self.ty
            && !ty.admits(value)
        {
            errors.push(type_error(path, ty.name(), value));
            return;
        }
        if !self.enumeration.is_empty() && !self.enumeration.iter().any(|e| same(e, value)) {
            let supported: Vec<String> = self
                .enumeration
                .iter()
                .map(|e| match e {
                    Value::String(s) => super::errors::go_quote(s),
                    other => super::errors::go_quote(&other.to_string()),
                })
                .collect();
            errors.push(FieldError::new(
                ErrorType::NotSupported,
                path,
                value.clone(),
                format!("supported values: {}", supported.join(", ")),
            ));
        }
        match value {
            Value::String(text) => self.validate_string(text, value, path, errors),
            Value::Number(_) => self.validate_number(value, path, errors),
            Value::Array(items) => self.validate_array(items, value, path, errors),
            Value::Object(map) => self.validate_object(map, value, path, old, errors),
            _ => {}
        }
    }

    fn validate_string(&self, text: &str, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let length = text.chars().count() as u64;
        if let Some(max) = self.max_length
            && length > max
        {
            errors.push(FieldError::new(
                ErrorType::TooLong,
                path,
                value.clone(),
                format!("may not be more than {max} bytes"),
            ));
        }
        if let Some(min) = self.min_length
            && length < min
        {
            errors.push(in_body(
                path,
                value,
                &format!("should be at least {min} chars long"),
            ));
        }
        if let Some((source, regex)) = &self.pattern
            && !regex.is_match(text)
        {
            errors.push(in_body(path, value, &format!("should match '{source}'")));
        }
        if let Some(format) = &self.format
            && !format_holds(format, text)
        {
            // kube-openapi reports a format as a type (`InvalidType`), hence TypeInvalid.
            errors.push(FieldError {
                kind: ErrorType::TypeInvalid,
                ..in_body(
                    path,
                    value,
                    &format!(
                        "must be of type {format}: {}",
                        super::errors::go_quote(text)
                    ),
                )
            });
        }
    }

    fn validate_number(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let Some(n) = value.as_f64() else { return };
        if let Some((min, exclusive)) = self.minimum {
            let fails = if exclusive { n <= min } else { n < min };
            if fails {
                let words = if exclusive {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                errors.push(in_body(
                    path,
                    value,
                    &format!("should be {words} {}", number(min)),
                ));
            }
        }
        if let Some((max, exclusive)) = self.maximum {
            let fails = if exclusive { n >= max } else { n > max };
            if fails {
                let words = if exclusive {
                    "less than"
                } else {
                    "less than or equal to"
                };
                errors.push(in_body(
                    path,
                    value,
                    &format!("should be {words} {}", number(max)),
                ));
            }
        }
    }

    fn validate_array(
        &self,
        items: &[Value],
        value: &Value,
        path: &str,
        errors: &mut Vec<FieldError>,
    ) {
        let count = items.len() as u64;
        if let Some(max) = self.max_items
            && count > max
        {
            errors.push(FieldError::new(
                ErrorType::TooMany,
                path,
                json!(count),
                format!("must have at most {max} items"),
            ));
        }
        if let Some(min) = self.min_items
            && count < min
        {
            errors.push(in_body(
                path,
                value,
                &format!("should have at least {min} items"),
            ));
        }
        self.validate_list_type(items, path, errors);
        if let Some(schema) = &self.items {
            for (i, item) in items.iter().enumerate() {
                schema.validate(item, &format!("{path}[{i}]"), errors);
            }
        }
    }

    /// `set` and `map` lists: every item (or map key tuple) at most once
    /// (`apiextensions-apiserver/pkg/apiserver/schema/listtype/validation.go`).
    fn validate_list_type(&self, items: &[Value], path: &str, errors: &mut Vec<FieldError>) {
        let key_of = |item: &Value| -> Value {
            match &self.list_type {
                ListType::Map(keys) => Value::Object(
                    keys.iter()
                        .filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone())))
                        .collect::<Map<_, _>>(),
                ),
                _ => item.clone(),
            }
        };
        if self.list_type == ListType::Atomic {
            return;
        }
        let mut seen: Vec<Value> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let key = key_of(item);
            if seen.contains(&key) {
                errors.push(FieldError::new(
                    ErrorType::Duplicate,
                    &format!("{path}[{i}]"),
                    key,
                    "",
                ));
            } else {
                seen.push(key);
            }
        }
    }

    fn validate_object(
        &self,
        map: &Map<String, Value>,
        value: &Value,
        path: &str,
        old: Option<&Value>,
        errors: &mut Vec<FieldError>,
    ) {
        let count = map.len() as u64;
        if let Some(max) = self.max_properties
            && count > max
        {
            errors.push(FieldError::new(
                ErrorType::TooMany,
                path,
                json!(count),
                format!("must have at most {max} items"),
            ));
        }
        if let Some(min) = self.min_properties
            && count < min
        {
            errors.push(in_body(
                path,
                value,
                &format!("should have at least {min} properties"),
            ));
        }
        for name in &self.required {
            if !map.contains_key(name) {
                errors.push(FieldError::new(
                    ErrorType::Required,
                    &join(path, name),
                    Value::Null,
                    "",
                ));
            }
        }
        if self.embedded {
            // An embedded resource names its kind (apiextensions-apiserver
            // `schema/objectmeta` validation of `x-kubernetes-embedded-resource`).
            for field in ["apiVersion", "kind"] {
                if map
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    errors.push(FieldError::new(
                        ErrorType::Required,
                        &join(path, field),
                        Value::Null,
                        "must not be empty",
                    ));
                }
            }
        }
        let root = path.is_empty();
        for (key, child) in map {
            // The root's metadata is ObjectMeta, checked by the store, not by the schema.
            if (root || self.embedded) && key == "metadata" {
                continue;
            }
            if let Some(schema) = self.properties.get(key) {
                schema.validate_update(
                    child,
                    old.and_then(|o| o.get(key)),
                    &join(path, key),
                    errors,
                );
            } else if let Some(schema) = &self.additional {
                schema.validate(
                    child,
                    &format!("{}[{key}]", if path.is_empty() { "<nil>" } else { path }),
                    errors,
                );
            }
        }
    }
}

/// The structural schemas of a CRD's versions.
#[derive(Debug)]
pub struct CrdSchemas {
    versions: BTreeMap<String, Schema>,
    /// The `spec.versions` they were parsed from (what equality compares).
    source: Value,
}

impl PartialEq for CrdSchemas {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for CrdSchemas {}

impl CrdSchemas {
    /// Parses (and compiles the rules of) every version's `schema.openAPIV3Schema`; None
    /// when no version has one.
    pub fn parse(crd: &Value) -> Result<Option<Arc<CrdSchemas>>, FieldError> {
        let Some(versions) = crd.pointer("/spec/versions").and_then(Value::as_array) else {
            return Ok(None);
        };
        let mut parsed = BTreeMap::new();
        for (i, version) in versions.iter().enumerate() {
            let (Some(name), Some(node)) = (
                version.get("name").and_then(Value::as_str),
                version.pointer("/schema/openAPIV3Schema"),
            ) else {
                continue;
            };
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            parsed.insert(name.to_owned(), Schema::parse(node, &path)?);
        }
        Ok((!parsed.is_empty()).then(|| {
            Arc::new(CrdSchemas {
                versions: parsed,
                source: Value::Array(versions.clone()),
            })
        }))
    }

    /// The schema of one version.
    pub fn version(&self, version: &str) -> Option<&Schema> {
        self.versions.get(version)
    }
}

/// `a.b`, or `b` at the root.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// JSON equality that takes `1` and `1.0` for the same number, as Go's `reflect.DeepEqual`
/// on decoded `int64`/`float64` would not, but kube-openapi's enum check does.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A bound printed as Go prints a float64 with `%v` (no trailing `.0`).
fn number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// `Invalid value: <value>: <path> in body <why>` (kube-openapi's error text).
fn in_body(path: &str, value: &Value, why: &str) -> FieldError {
    FieldError::new(
        ErrorType::Invalid,
        path,
        value.clone(),
        format!("{path} in body {why}"),
    )
}

/// `Invalid value: "string": spec.n in body must be of type integer: "string"`.
fn type_error(path: &str, want: &str, value: &Value) -> FieldError {
    let got = json_type(value);
    FieldError::new(
        ErrorType::TypeInvalid,
        path,
        json!(got),
        format!(
            "{path} in body must be of type {want}: {}",
            super::errors::go_quote(got)
        ),
    )
}

/// Whether a string has the `format` (only the formats the real server checks and our CRDs
/// use; any other passes).
fn format_holds(format: &str, text: &str) -> bool {
    match format {
        "date-time" => crate::apiserver::time::parse_time(text).is_some(),
        "date" => {
            let parts: Vec<&str> = text.split('-').collect();
            parts.len() == 3
                && parts[0].len() == 4
                && parts[1].len() == 2
                && parts[2].len() == 2
                && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()))
        }
        "byte" => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_ok()
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(node: Value) -> Schema {
        Schema::parse(&node, "openAPIV3Schema").unwrap()
    }

    fn check(schema: &Schema, value: Value) -> Vec<String> {
        let mut errors = Vec::new();
        schema.validate(&value, "", &mut errors);
        errors.iter().map(FieldError::message).collect()
    }

    #[test]
    fn types_enums_and_bounds_are_worded_as_kube_openapi_does() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "required": ["address"],
            "properties": {
                "mode": {"type": "string", "enum": ["Remediate", "DryRun"]},
                "n": {"type": "integer", "minimum": 1, "maximum": 10},
                "name": {"type": "string", "maxLength": 3, "minLength": 1, "pattern": "^[a-z]+$"},
                "address": {"type": "string"}
            }}}}),
        );
        assert_eq!(
            check(&s, json!({"spec": {"address": "a", "mode": "Bogus"}})),
            [
                "spec.mode: Unsupported value: \"Bogus\": supported values: \"Remediate\", \"DryRun\""
            ]
        );
        assert_eq!(
            check(&s, json!({"spec": {"address": "a", "n": "two"}})),
            [
                "spec.n: Invalid value: \"string\": spec.n in body must be of type integer: \"string\""
            ]
        );
        assert_eq!(
            check(&s, json!({"spec": {"address": "a", "n": 11}})),
            ["spec.n: Invalid value: 11: spec.n in body should be less than or equal to 10"]
        );
        assert_eq!(
            check(&s, json!({"spec": {"address": "a", "name": "ABCD"}})),
            [
                "spec.name: Too long: may not be more than 3 bytes",
                "spec.name: Invalid value: \"ABCD\": spec.name in body should match '^[a-z]+$'"
            ]
        );
        assert_eq!(
            check(&s, json!({"spec": {}})),
            ["spec.address: Required value"]
        );
        assert!(check(&s, json!({"spec": {"address": "a", "n": 2.0}})).is_empty());
    }

    #[test]
    fn pruning_keeps_root_metadata_and_preserved_fields() {
        let s = schema(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}}
        }}));
        let mut value = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "odd": 1},
            "spec": {"a": "x", "b": "y"}, "extra": {"anything": 1}, "labels": {"k": "v"}, "stray": true});
        s.prune(&mut value, true);
        assert_eq!(
            value,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "odd": 1},
            "spec": {"a": "x"}, "extra": {"anything": 1}, "labels": {"k": "v"}})
        );
    }

    #[test]
    fn defaults_fill_absent_and_non_nullable_null_fields() {
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "default": {}, "properties": {
                "mode": {"type": "string", "default": "Remediate"},
                "gone": {"type": "string"},
                "kept": {"type": "string", "nullable": true, "default": "x"}
            }}}}),
        );
        let mut value = json!({"metadata": {}});
        s.default_values(&mut value);
        assert_eq!(value["spec"], json!({"mode": "Remediate", "kept": "x"}));
        let mut value = json!({"spec": {"mode": null, "gone": null, "kept": null}});
        s.default_values(&mut value);
        assert_eq!(value["spec"], json!({"mode": "Remediate", "kept": null}));
    }

    #[test]
    fn int_or_string_nullable_and_list_types() {
        let s = schema(json!({"type": "object", "properties": {
            "port": {"x-kubernetes-int-or-string": true},
            "maybe": {"type": "string", "nullable": true},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}},
            "when": {"type": "string", "format": "date-time"}
        }}));
        assert!(check(&s, json!({"port": 8080, "maybe": null})).is_empty());
        assert!(check(&s, json!({"port": "http"})).is_empty());
        assert_eq!(
            check(&s, json!({"port": true})),
            [
                "port: Invalid value: \"boolean\": port in body must be of type integer,string: \"boolean\""
            ]
        );
        assert_eq!(
            check(&s, json!({"tags": ["a", "b", "a"]})),
            ["tags[2]: Duplicate value: \"a\""]
        );
        assert_eq!(
            check(
                &s,
                json!({"ports": [{"name": "a", "n": 1}, {"name": "a", "n": 2}]})
            ),
            ["ports[1]: Duplicate value: {\"name\":\"a\"}"]
        );
        assert_eq!(
            check(&s, json!({"when": "yesterday"})),
            [
                "when: Invalid value: \"yesterday\": when in body must be of type date-time: \"yesterday\""
            ]
        );
        assert!(check(&s, json!({"when": "2026-11-26T10:00:00Z"})).is_empty());
    }

    #[test]
    fn an_embedded_resource_keeps_its_metadata_and_names_its_kind() {
        let s = schema(
            json!({"type": "object", "properties": {"template": {"type": "object",
            "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer"}}}}}}}),
        );
        let mut value = json!({"template": {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": {"n": 1, "x": 2}, "stray": 3}});
        s.prune(&mut value, true);
        assert_eq!(
            value["template"],
            json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"}, "spec": {"n": 1}})
        );
        assert!(check(&s, value).is_empty());
        assert_eq!(
            check(&s, json!({"template": {"kind": "Pod"}})),
            ["template.apiVersion: Required value: must not be empty"]
        );
    }

    #[test]
    fn an_unchanged_invalid_value_ratchets_on_update() {
        // apiextensions-apiserver validation ratcheting (CRDValidationRatcheting).
        let s = schema(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "integer", "maximum": 1}, "b": {"type": "string"}}}}}),
        );
        let old = json!({"spec": {"a": 5, "b": "x"}});
        let mut errors = Vec::new();
        s.validate_update(
            &json!({"spec": {"a": 5, "b": "y"}}),
            Some(&old),
            "",
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        s.validate_update(
            &json!({"spec": {"a": 6, "b": "y"}}),
            Some(&old),
            "",
            &mut errors,
        );
        assert_eq!(errors.len(), 1);
    }

    #[test]
    fn a_bad_type_or_pattern_refuses_the_schema() {
        assert!(Schema::parse(&json!({"type": "float"}), "s").is_err());
        assert!(Schema::parse(&json!({"type": "string", "pattern": "(["}), "s").is_err());
    }
}
