//! Kinds of other systems read into small types of our own: a watch deserializes straight
//! into them, so the fields the controllers never read are never held, and a malformed field
//! reads as absent instead of breaking the watch of every object.

use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer};
use serde_json::Value;

/// Reads a field that may be malformed as absent: a BareMetalHost with `poweredOn: "yes"`
/// must not break the watch of every host (the observers then report the field missing).
pub fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

/// Implements `kube::Resource` for a cached kind of our own shape:
/// `cached_kind!(Type, "group", "version", "Kind", "plural", Scope)`; with a last argument
/// `[field.metadata]`, for a type that holds the object in `field` (another kind of the same
/// shape, e.g. a Cluster API Machine held as a Machine). Exported for the controller crate's
/// own cached kinds; it names `kube_core` and `k8s_openapi` through this crate.
#[macro_export]
macro_rules! cached_kind {
    ($name:ident, $group:expr, $version:literal, $kind:literal, $plural:literal, $scope:ty) => {
        $crate::api::cached::cached_kind!(
            $name, $group, $version, $kind, $plural, $scope, [metadata]
        );
    };
    ($name:ident, $group:expr, $version:literal, $kind:literal, $plural:literal, $scope:ty, [$($meta:ident).+]) => {
        impl $crate::kube_core::Resource for $name {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($kind)
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($group)
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($version)
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed($plural)
            }
            fn meta(&self) -> &$crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.$($meta).+
            }
            fn meta_mut(
                &mut self,
            ) -> &mut $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.$($meta).+
            }
        }
    };
}
pub use crate::cached_kind;
