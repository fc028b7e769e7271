//! Content negotiation: which representation an `Accept` header asks for.
//!
//! Expected flow: the router parses the `Accept` header once ([`MediaRanges::parse`]) and asks
//! it for a discovery format (`/api`, `/apis`) or an object rendering (resources).
//!
//! Guarantees: the ranges are tried in the client's order of preference (`q`, then position),
//! as the real server's negotiation does; a range with an `as=` this server does not produce is
//! skipped, and when nothing is left the answer is 406 NotAcceptable, as a real server gives.
//! A range without `as=` is served in protobuf when it is the protobuf type (objects and lists
//! of kinds with a protobuf message), in JSON otherwise (JSON, YAML, `*/*`).
//!
//! Caveats: Tables, metadata renderings, watch streams, discovery and errors are always JSON
//! (every client accepts it); only `as=` values the simulator renders are recognised.

use serde_json::{Value, json};

use super::errors::ApiError;

/// The parameters of one media range of an `Accept` header, e.g. `application/json;as=Table;g=meta.k8s.io;v=v1`.
#[derive(Debug, Clone, PartialEq)]
struct MediaRange {
    /// `g`: the group of the kind asked for.
    group: Option<String>,
    /// `v`: the version of the kind asked for.
    version: Option<String>,
    /// `as`: the kind asked for.
    kind: Option<String>,
    /// `q`: the preference, 0 to 1.
    quality: f32,
    /// The type is `application/vnd.kubernetes.protobuf`.
    protobuf: bool,
}

/// The parsed `Accept` header, in the client's order of preference.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MediaRanges(Vec<MediaRange>);

/// The version of the aggregated discovery kind (`apidiscovery.k8s.io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiscoveryVersion {
    /// `v2`, stable since Kubernetes 1.30.
    V2,
    /// `v2beta1`, what clients of 1.26 to 1.29 ask for.
    V2Beta1,
}

impl DiscoveryVersion {
    /// `v2` or `v2beta1`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DiscoveryVersion::V2 => "v2",
            DiscoveryVersion::V2Beta1 => "v2beta1",
        }
    }
}

/// What `/api` and `/apis` answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiscoveryFormat {
    /// `APIVersions` and `APIGroupList` (the documents every client understands).
    Legacy,
    /// `APIGroupDiscoveryList`: every group, version and resource in one document.
    Aggregated(DiscoveryVersion),
}

/// The version of `meta.k8s.io` a Table or PartialObjectMetadata is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaVersion {
    /// `meta.k8s.io/v1`.
    V1,
    /// `meta.k8s.io/v1beta1`.
    V1Beta1,
}

impl MetaVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// An object as `PartialObjectMetadata`: its metadata alone, under the meta.k8s.io kind.
pub(crate) fn partial_metadata(version: MetaVersion, object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": version.api_version(),
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list as `PartialObjectMetadataList`: the list's metadata (resourceVersion, continue)
/// and each item's metadata, every item naming its kind as the real server's items do.
pub(crate) fn partial_metadata_list(version: MetaVersion, list: &Value) -> Value {
    let items: Vec<Value> = list
        .get("items")
        .and_then(Value::as_array)
        .map(|items| items.iter().map(|i| partial_metadata(version, i)).collect())
        .unwrap_or_default();
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": version.api_version(),
        "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "items": items,
    })
}

/// 406 for a metadata list asked of one object, or the other way round.
pub(crate) fn wrong_shape(asked: &str, answer: &str) -> ApiError {
    ApiError::not_acceptable(format!(
        "you requested {asked}, but the requested object is {answer}"
    ))
}

/// How a resource answer is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rendering {
    /// The object or list itself.
    Object,
    /// A `Table` (kubectl's `get` output).
    Table,
    /// `PartialObjectMetadata`: an object's metadata only.
    Metadata(MetaVersion),
    /// `PartialObjectMetadataList`: a list of objects' metadata only.
    MetadataList(MetaVersion),
}

impl MediaRanges {
    /// Parses an `Accept` header; none (or an empty one) accepts anything.
    pub(crate) fn parse(accept: Option<&str>) -> MediaRanges {
        let mut ranges: Vec<MediaRange> = accept
            .unwrap_or("")
            .split(',')
            .filter_map(parse_range)
            .collect();
        if ranges.is_empty() {
            ranges.push(MediaRange {
                group: None,
                version: None,
                kind: None,
                quality: 1.0,
                protobuf: false,
            });
        }
        // A stable sort keeps the header's order among equal preferences.
        ranges.sort_by(|a, b| b.quality.total_cmp(&a.quality));
        ranges.retain(|r| r.quality > 0.0);
        MediaRanges(ranges)
    }

    /// The discovery document asked for, or 406 when no range can be served.
    pub(crate) fn discovery(&self) -> Result<DiscoveryFormat, ApiError> {
        self.0
            .iter()
            .find_map(|range| match range.kind.as_deref() {
                None if range.group.is_none() => Some(DiscoveryFormat::Legacy),
                Some("APIGroupDiscoveryList")
                    if range.group.as_deref() == Some("apidiscovery.k8s.io") =>
                {
                    match range.version.as_deref() {
                        Some("v2") => Some(DiscoveryFormat::Aggregated(DiscoveryVersion::V2)),
                        Some("v2beta1") => {
                            Some(DiscoveryFormat::Aggregated(DiscoveryVersion::V2Beta1))
                        }
                        _ => None,
                    }
                }
                _ => None,
            })
            .ok_or_else(not_acceptable)
    }

    /// Whether the client prefers objects in protobuf: its most preferred range for a plain
    /// object (no `as=`) is `application/vnd.kubernetes.protobuf`.
    pub(crate) fn prefers_protobuf(&self) -> bool {
        self.0
            .iter()
            .find(|range| range.kind.is_none() && range.group.is_none())
            .is_some_and(|range| range.protobuf)
    }

    /// The rendering of a resource answer asked for, or 406 when no range can be served.
    pub(crate) fn rendering(&self) -> Result<Rendering, ApiError> {
        self.0
            .iter()
            .find_map(|range| {
                let meta = match range.version.as_deref() {
                    Some("v1") => Some(MetaVersion::V1),
                    Some("v1beta1") => Some(MetaVersion::V1Beta1),
                    _ => None,
                }
                .filter(|_| range.group.as_deref() == Some("meta.k8s.io"));
                match (range.kind.as_deref(), meta) {
                    (None, _) if range.group.is_none() => Some(Rendering::Object),
                    (Some("Table"), Some(_)) => Some(Rendering::Table),
                    (Some("PartialObjectMetadata"), Some(v)) => Some(Rendering::Metadata(v)),
                    (Some("PartialObjectMetadataList"), Some(v)) => {
                        Some(Rendering::MetadataList(v))
                    }
                    _ => None,
                }
            })
            .ok_or_else(not_acceptable)
    }
}

fn parse_range(text: &str) -> Option<MediaRange> {
    let mut parts = text.split(';').map(str::trim);
    // Beyond protobuf the type does not matter: JSON, YAML and `*/*` are answered in JSON.
    let essence = parts.next().filter(|essence| essence.contains('/'))?;
    let mut range = MediaRange {
        group: None,
        version: None,
        kind: None,
        quality: 1.0,
        protobuf: essence.eq_ignore_ascii_case("application/vnd.kubernetes.protobuf"),
    };
    for parameter in parts {
        let Some((key, value)) = parameter.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_owned();
        match key.trim() {
            "g" => range.group = Some(value),
            "v" => range.version = Some(value),
            "as" => range.kind = Some(value),
            "q" => range.quality = value.parse().unwrap_or(0.0),
            _ => {}
        }
    }
    Some(range)
}

/// 406, with the real server's message.
fn not_acceptable() -> ApiError {
    ApiError::not_acceptable(
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECTL_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    #[test]
    fn discovery_prefers_the_first_served_range() {
        let parse = |accept| MediaRanges::parse(accept).discovery();
        assert_eq!(
            parse(Some(KUBECTL_DISCOVERY)),
            Ok(DiscoveryFormat::Aggregated(DiscoveryVersion::V2))
        );
        assert_eq!(
            parse(Some(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            )),
            Ok(DiscoveryFormat::Aggregated(DiscoveryVersion::V2Beta1))
        );
        assert_eq!(parse(None), Ok(DiscoveryFormat::Legacy));
        assert_eq!(
            parse(Some("application/json, */*")),
            Ok(DiscoveryFormat::Legacy)
        );
        // A later range with a higher preference wins.
        assert_eq!(
            parse(Some(
                "application/json;q=0.5,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            )),
            Ok(DiscoveryFormat::Aggregated(DiscoveryVersion::V2))
        );
        let refused = parse(Some(
            "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList",
        ))
        .unwrap_err();
        assert_eq!((refused.code, refused.reason), (406, "NotAcceptable"));
    }

    #[test]
    fn renderings_follow_the_as_g_v_parameters() {
        let parse = |accept| MediaRanges::parse(Some(accept)).rendering();
        assert_eq!(
            parse("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"),
            Ok(Rendering::Table)
        );
        assert_eq!(
            parse("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"),
            Ok(Rendering::Metadata(MetaVersion::V1))
        );
        assert_eq!(
            parse("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1"),
            Ok(Rendering::MetadataList(MetaVersion::V1Beta1))
        );
        assert_eq!(
            parse("application/vnd.kubernetes.protobuf, */*"),
            Ok(Rendering::Object)
        );
        assert_eq!(
            parse("application/json;as=Foo;g=meta.k8s.io;v=v1, application/json"),
            Ok(Rendering::Object)
        );
        assert!(parse("application/json;as=PartialObjectMetadata;g=example.com;v=v1").is_err());
    }
}
