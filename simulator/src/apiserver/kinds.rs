//! The resource types served: the built-in kinds and every CustomResourceDefinition created.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::validation::schema::CrdSchemas;

/// A column of `kubectl get` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column name.
    pub name: String,
    /// `string`, `integer`, `date`…
    pub kind: String,
    /// JSONPath (`.spec.x`).
    pub json_path: String,
    /// Shown only with `-o wide` when non-zero.
    pub priority: i64,
}

/// Where a custom resource keeps what its `scale` subresource shows (the CRD's
/// `subresources.scale`), as field names from the object's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath` (`.spec.replicas`): written by scale updates.
    pub spec_replicas: Vec<String>,
    /// `statusReplicasPath` (`.status.replicas`).
    pub status_replicas: Vec<String>,
    /// `labelSelectorPath` (`.status.selector`), a label selector in its string form.
    pub label_selector: Option<Vec<String>>,
}

impl ScalePaths {
    /// The paths of a CRD's `subresources.scale`, validated as the API server does: JSON
    /// paths without array steps, the spec one under `.spec`, the status one under `.status`
    /// and the selector's under either.
    fn parse(scale: &Value) -> Result<Self, String> {
        let path = |field: &str, roots: &[&str]| -> Result<Option<Vec<String>>, String> {
            let Some(text) = scale.get(field).and_then(Value::as_str) else {
                return Ok(None);
            };
            let steps: Vec<String> = text
                .strip_prefix('.')
                .unwrap_or_default()
                .split('.')
                .map(str::to_owned)
                .collect();
            let valid = steps.len() >= 2
                && roots.contains(&steps[0].as_str())
                && steps
                    .iter()
                    .all(|s| !s.is_empty() && !s.contains(['[', ']']));
            if !valid {
                return Err(format!(
                    "spec.subresources.scale.{field}: Invalid value: {text:?}: should be a json path under {}",
                    roots
                        .iter()
                        .map(|r| format!(".{r}"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
            Ok(Some(steps))
        };
        let required = |field: &str, root: &str| {
            path(field, &[root])?
                .ok_or_else(|| format!("spec.subresources.scale.{field}: Required value"))
        };
        Ok(ScalePaths {
            spec_replicas: required("specReplicasPath", "spec")?,
            status_replicas: required("statusReplicasPath", "status")?,
            label_selector: path("labelSelectorPath", &["spec", "status"])?,
        })
    }
}

/// One served resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group ("" for core).
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<String>,
    /// Kind.
    pub kind: String,
    /// Plural (the URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Short names (`bmh`).
    pub short_names: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource.
    pub status_subresource: bool,
    /// Printer columns (CRDs' additionalPrinterColumns; a few built-ins).
    pub printer_columns: Vec<PrinterColumn>,
    /// Categories (`all`).
    pub categories: Vec<String>,
    /// Defined by a CRD.
    pub custom: bool,
    /// The `scale` subresource of a CRD that declares one.
    pub scale: Option<ScalePaths>,
    /// The structural schemas of a CRD's versions (None for built-in kinds).
    pub schemas: Option<Arc<CrdSchemas>>,
}

impl ResourceType {
    fn builtin(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        status: bool,
    ) -> Self {
        ResourceType {
            group: group.into(),
            versions: vec![version.into()],
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            short_names: Vec::new(),
            namespaced,
            status_subresource: status,
            printer_columns: Vec::new(),
            categories: Vec::new(),
            custom: false,
            scale: None,
            schemas: None,
        }
    }

    fn short(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// `v1` or `group/version`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// Whether clients may only read the kind (ComponentStatus: `get` and `list`).
    pub fn is_read_only(&self) -> bool {
        self.group.is_empty() && self.plural == "componentstatuses"
    }

    /// Whether the kind keeps `metadata.generation` (bumped on spec changes).
    pub fn tracks_generation(&self) -> bool {
        self.custom
            || matches!(
                self.plural.as_str(),
                "pods"
                    | "poddisruptionbudgets"
                    | "customresourcedefinitions"
                    | "deployments"
                    | "jobs"
                    | "cronjobs"
            )
    }
}

/// The served resource types.
#[derive(Debug, Clone)]
pub struct Registry {
    types: BTreeMap<(String, String), Arc<ResourceType>>,
}

impl Registry {
    /// The built-in kinds.
    pub fn new() -> Self {
        let mut pods = ResourceType::builtin("", "v1", "Pod", "pods", true, true).short(&["po"]);
        pods.categories = vec!["all".into()];
        let builtins = [
            ResourceType::builtin("", "v1", "Namespace", "namespaces", false, true).short(&["ns"]),
            ResourceType::builtin("", "v1", "Node", "nodes", false, true).short(&["no"]),
            pods,
            ResourceType::builtin("", "v1", "Secret", "secrets", true, false),
            ResourceType::builtin("", "v1", "ConfigMap", "configmaps", true, false).short(&["cm"]),
            ResourceType::builtin("", "v1", "Event", "events", true, false).short(&["ev"]),
            ResourceType::builtin("events.k8s.io", "v1", "Event", "events", true, false)
                .short(&["ev"]),
            ResourceType::builtin("coordination.k8s.io", "v1", "Lease", "leases", true, false),
            // Stored only (no controllers behind them): enough to apply deployment manifests.
            ResourceType::builtin("", "v1", "ServiceAccount", "serviceaccounts", true, false)
                .short(&["sa"]),
            ResourceType::builtin("", "v1", "Service", "services", true, true).short(&["svc"]),
            ResourceType::builtin("", "v1", "Endpoints", "endpoints", true, false).short(&["ep"]),
            ResourceType::builtin(
                "discovery.k8s.io",
                "v1",
                "EndpointSlice",
                "endpointslices",
                true,
                false,
            ),
            ResourceType::builtin("apps", "v1", "Deployment", "deployments", true, true)
                .short(&["deploy"]),
            // Stored only too: what `kubectl create job|cronjob|quota|priorityclass` makes.
            ResourceType::builtin("batch", "v1", "Job", "jobs", true, true),
            ResourceType::builtin("batch", "v1", "CronJob", "cronjobs", true, true).short(&["cj"]),
            ResourceType::builtin("", "v1", "ResourceQuota", "resourcequotas", true, true)
                .short(&["quota"]),
            ResourceType::builtin(
                "scheduling.k8s.io",
                "v1",
                "PriorityClass",
                "priorityclasses",
                false,
                false,
            )
            .short(&["pc"]),
            // Read-only: the health of the control plane's components, as `kubectl get cs`
            // shows it.
            ResourceType::builtin(
                "",
                "v1",
                "ComponentStatus",
                "componentstatuses",
                false,
                false,
            )
            .short(&["cs"]),
            ResourceType::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRole",
                "clusterroles",
                false,
                false,
            ),
            ResourceType::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding",
                "clusterrolebindings",
                false,
                false,
            ),
            ResourceType::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "Role",
                "roles",
                true,
                false,
            ),
            ResourceType::builtin(
                "rbac.authorization.k8s.io",
                "v1",
                "RoleBinding",
                "rolebindings",
                true,
                false,
            ),
            ResourceType::builtin(
                "policy",
                "v1",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
                true,
                true,
            )
            .short(&["pdb"]),
            ResourceType::builtin(
                "certificates.k8s.io",
                "v1",
                "CertificateSigningRequest",
                "certificatesigningrequests",
                false,
                true,
            )
            .short(&["csr"]),
            ResourceType::builtin(
                "apiregistration.k8s.io",
                "v1",
                "APIService",
                "apiservices",
                false,
                true,
            ),
            ResourceType::builtin(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicy",
                "validatingadmissionpolicies",
                false,
                true,
            ),
            ResourceType::builtin(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingAdmissionPolicyBinding",
                "validatingadmissionpolicybindings",
                false,
                false,
            ),
            ResourceType::builtin(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
                true,
            )
            .short(&["crd", "crds"]),
        ];
        Registry {
            types: builtins
                .into_iter()
                .map(|t| ((t.group.clone(), t.plural.clone()), Arc::new(t)))
                .collect(),
        }
    }

    /// The type served at `group`/`version`/`plural`.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&(group.to_owned(), plural.to_owned()))
            .filter(|t| t.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// Whether any type of `group` is served at `version`.
    pub fn serves(&self, group: &str, version: &str) -> bool {
        self.types
            .values()
            .any(|t| t.group == group && t.versions.iter().any(|v| v == version))
    }

    /// The type of a group and kind.
    pub fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceType>> {
        self.types
            .values()
            .find(|t| t.group == group && t.kind == kind)
            .cloned()
    }

    /// Every type.
    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Registers (or replaces) the types a CRD defines; returns an error text for a CRD that
    /// cannot be served.
    pub fn register_crd(&mut self, crd: &Value) -> Result<(), String> {
        let ty = crd_type(crd)?;
        self.types
            .insert((ty.group.clone(), ty.plural.clone()), Arc::new(ty));
        Ok(())
    }

    /// Removes the type of a deleted CRD.
    pub fn unregister(&mut self, group: &str, plural: &str) {
        self.types.remove(&(group.to_owned(), plural.to_owned()));
    }

    /// API groups other than core, with their versions, the preferred first (kube-aware
    /// order, as the API server sorts a group's versions for discovery).
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for ty in self.types.values().filter(|t| !t.group.is_empty()) {
            let versions = groups.entry(ty.group.clone()).or_default();
            for version in &ty.versions {
                if !versions.contains(version) {
                    versions.push(version.clone());
                }
            }
        }
        for versions in groups.values_mut() {
            versions.sort_by(|a, b| kube_version_order(a, b));
        }
        groups
    }
}

/// A "kube-like" version (`v2`, `v1beta1`, `v1alpha2`): stability (GA 2, beta 1, alpha 0),
/// major, minor.
fn kube_version(version: &str) -> Option<(u8, u64, u64)> {
    let rest = version.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest[..digits].parse().ok().filter(|m| *m > 0)?;
    let suffix = &rest[digits..];
    if suffix.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, minor) = if let Some(minor) = suffix.strip_prefix("beta") {
        (1, minor)
    } else {
        (0, suffix.strip_prefix("alpha")?)
    };
    Some((stability, major, minor.parse().ok()?))
}

/// The API server's order of versions, most preferred first: kube-like versions by
/// stability, then major, then minor (highest first), then the others alphabetically.
pub fn kube_version_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (kube_version(a), kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// The resource type a CRD defines (validated as the API server would, in its essentials).
pub fn crd_type(crd: &Value) -> Result<ResourceType, String> {
    let group = text(crd, "/spec/group").ok_or("spec.group is required")?;
    let plural = text(crd, "/spec/names/plural").ok_or("spec.names.plural is required")?;
    let kind = text(crd, "/spec/names/kind").ok_or("spec.names.kind is required")?;
    let name = text(crd, "/metadata/name").unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name must be spec.names.plural+\".\"+spec.group ({plural}.{group})"
        ));
    }
    let scope = text(crd, "/spec/scope").ok_or("spec.scope is required")?;
    let namespaced = match scope {
        "Namespaced" => true,
        "Cluster" => false,
        other => {
            return Err(format!(
                "spec.scope {other:?} must be Namespaced or Cluster"
            ));
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or("spec.versions must have at least one version")?;
    let served: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .collect();
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool).unwrap_or(false))
        .count();
    if storage != 1 {
        return Err("exactly one version must be the storage version".into());
    }
    let first = served.first().copied().unwrap_or(&versions[0]);
    let printer_columns = first
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|columns| {
            columns
                .iter()
                .filter_map(|c| {
                    Some(PrinterColumn {
                        name: c.get("name")?.as_str()?.to_owned(),
                        kind: c
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string")
                            .to_owned(),
                        json_path: c.get("jsonPath")?.as_str()?.to_owned(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let strings = |pointer: &str| -> Vec<String> {
        crd.pointer(pointer)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(ResourceType {
        group: group.to_owned(),
        versions: served
            .iter()
            .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
        singular: text(crd, "/spec/names/singular")
            .map(str::to_owned)
            .unwrap_or_else(|| kind.to_ascii_lowercase()),
        short_names: strings("/spec/names/shortNames"),
        namespaced,
        status_subresource: first.pointer("/subresources/status").is_some(),
        printer_columns,
        categories: strings("/spec/names/categories"),
        custom: true,
        scale: first
            .pointer("/subresources/scale")
            .map(ScalePaths::parse)
            .transpose()?,
        schemas: CrdSchemas::parse(crd).map_err(|error| error.message())?,
    })
}

/// The APIResource entries of `kubectl api-resources` for one type.
pub fn api_resources(ty: &ResourceType) -> Vec<Value> {
    let mut verbs = vec![
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    if ty.plural == "events" && ty.group.is_empty() {
        verbs.sort_unstable();
    }
    if ty.is_read_only() {
        verbs = vec!["get", "list"];
    }
    let mut resources = vec![json!({
        "name": ty.plural,
        "singularName": ty.singular,
        "namespaced": ty.namespaced,
        "kind": ty.kind,
        "verbs": verbs,
        "shortNames": ty.short_names,
        "categories": ty.categories,
    })];
    if ty.status_subresource {
        resources.push(json!({
            "name": format!("{}/status", ty.plural),
            "singularName": "",
            "namespaced": ty.namespaced,
            "kind": ty.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if ty.scale.is_some() {
        resources.push(json!({
            "name": format!("{}/scale", ty.plural),
            "singularName": "",
            "namespaced": ty.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    if ty.plural == "certificatesigningrequests" && ty.group == "certificates.k8s.io" {
        resources.push(json!({
            "name": "certificatesigningrequests/approval",
            "singularName": "",
            "namespaced": false,
            "kind": "CertificateSigningRequest",
            "verbs": ["get", "patch", "update"],
        }));
    }
    if ty.plural == "serviceaccounts" && ty.group.is_empty() {
        resources.push(json!({
            "name": "serviceaccounts/token",
            "singularName": "",
            "namespaced": true,
            "group": "authentication.k8s.io",
            "version": "v1",
            "kind": "TokenRequest",
            "verbs": ["create"],
        }));
    }
    if ty.plural == "pods" && ty.group.is_empty() {
        resources.push(json!({
            "name": "pods/eviction",
            "singularName": "",
            "namespaced": true,
            "group": "policy",
            "version": "v1",
            "kind": "Eviction",
            "verbs": ["create"],
        }));
    }
    resources
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_the_api_server_sorts_them() {
        let mut versions = vec![
            "foo1", "v1alpha1", "v2beta1", "v1", "v1beta2", "v10", "v3beta1", "foo10",
        ];
        versions.sort_by(|a, b| kube_version_order(a, b));
        assert_eq!(
            versions,
            [
                "v10", "v1", "v3beta1", "v2beta1", "v1beta2", "v1alpha1", "foo1", "foo10"
            ]
        );
    }
}
