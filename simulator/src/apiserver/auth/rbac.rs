//! The RBAC decision, pure: Roles, ClusterRoles and their bindings compiled into a rule set,
//! and a request's attributes checked against the rules that apply to its user.
//!
//! Expected flow: [`RuleSet::compile`] the stored RBAC objects (once per change, at the
//! edge) → [`RuleSet::authorize`] each request's [`Attributes`] for its [`UserInfo`] →
//! an allowed or denied [`Decision`] (with the reasons the real authorizer appends, such as
//! a binding naming a missing role). [`RuleSet::rules_for`] and [`covers`] serve the
//! escalation checks and SelfSubjectRulesReview.
//!
//! Guarantees (as `plugin/pkg/auth/authorizer/rbac/rbac.go` and
//! `pkg/apis/rbac/v1/evaluation_helpers.go` of kubernetes/kubernetes): deny by default;
//! ClusterRoleBindings apply everywhere, RoleBindings only in their namespace (and never to
//! cluster-scoped resources or non-resource URLs); a RoleBinding may name a Role of its own
//! namespace or a ClusterRole; `*` matches every verb, group and resource (subresources
//! included), `*/status`-style entries match one subresource of every resource, a resource
//! grant alone gives none of its subresources; `resourceNames` restrict to named objects
//! (never a list or create without a name); `nonResourceURLs` match exactly or by a prefix
//! ending in `*`. ServiceAccount subjects without a namespace take the binding's.
//!
//! Caveats: the superuser group (`system:masters`) is decided before this module, as the
//! real server's superuser authorizer does.

use std::collections::HashMap;

use serde_json::Value;

use super::user::UserInfo;

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyRule {
    /// `verbs`.
    pub verbs: Vec<String>,
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `resources` (`pods`, `pods/eviction`, `*/status`, `*`).
    pub resources: Vec<String>,
    /// `resourceNames`.
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`.
    pub non_resource_urls: Vec<String>,
}

/// The strings of a JSON array (anything else: none), as the API objects' string lists read.
pub(crate) fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

impl PolicyRule {
    /// A rule from its JSON form.
    pub fn from_json(rule: &Value) -> Self {
        PolicyRule {
            verbs: strings(&rule["verbs"]),
            api_groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            resource_names: strings(&rule["resourceNames"]),
            non_resource_urls: strings(&rule["nonResourceURLs"]),
        }
    }

    /// The rules of a role object (`rules`).
    pub fn of_role(role: &Value) -> Vec<PolicyRule> {
        role["rules"]
            .as_array()
            .map(|rules| rules.iter().map(PolicyRule::from_json).collect())
            .unwrap_or_default()
    }

    /// The JSON form (empty lists left out, as the API server leaves them out).
    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::Map::new();
        for (field, values) in [
            ("verbs", &self.verbs),
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !values.is_empty() || field == "verbs" {
                rule.insert(field.to_owned(), Value::from(values.clone()));
            }
        }
        Value::Object(rule)
    }

    /// Whether this rule allows the request.
    pub fn allows(&self, attributes: &Attributes) -> bool {
        if !has(&self.verbs, &attributes.verb) {
            return false;
        }
        match &attributes.resource {
            None => self
                .non_resource_urls
                .iter()
                .any(|url| url_matches(url, &attributes.path)),
            Some(resource) => {
                has(&self.api_groups, &resource.group)
                    && self
                        .resources
                        .iter()
                        .any(|r| resource_matches(r, &resource.resource, &resource.subresource))
                    && (self.resource_names.is_empty()
                        || (!resource.name.is_empty()
                            && self.resource_names.contains(&resource.name)))
            }
        }
    }
}

/// `*` or the value itself.
fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == "*" || item == value)
}

fn resource_matches(rule: &str, resource: &str, subresource: &str) -> bool {
    if rule == "*" {
        return true;
    }
    if subresource.is_empty() {
        return rule == resource;
    }
    rule.strip_prefix("*/") == Some(subresource)
        || rule.split_once('/') == Some((resource, subresource))
}

/// RBAC's non-resource URL match: `*`, exact, or a prefix ending in `*`.
pub fn url_matches(rule: &str, path: &str) -> bool {
    match rule.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule == path,
    }
}

/// What a resource request touches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceAttributes {
    /// API group ("" for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural.
    pub resource: String,
    /// `status`, `eviction`… ("" for none).
    pub subresource: String,
    /// Namespace ("" for cluster scope and all-namespace requests).
    pub namespace: String,
    /// Object name ("" for collections).
    pub name: String,
}

/// The authorizer's view of a request (the real server's `authorizer.Attributes`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attributes {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`,
    /// `impersonate`, `escalate`, `bind`…; the lower-case HTTP method for non-resource paths.
    pub verb: String,
    /// Set for a resource request; None for a non-resource path.
    pub resource: Option<ResourceAttributes>,
    /// The URL path (what non-resource rules match).
    pub path: String,
}

impl Attributes {
    /// A resource request.
    pub fn resource(verb: &str, resource: ResourceAttributes) -> Self {
        Attributes {
            verb: verb.to_owned(),
            resource: Some(resource),
            path: String::new(),
        }
    }

    /// A non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Attributes {
            verb: verb.to_owned(),
            resource: None,
            path: path.to_owned(),
        }
    }

    /// The namespace the request is in ("" for cluster scope).
    pub fn namespace(&self) -> &str {
        self.resource.as_ref().map_or("", |r| r.namespace.as_str())
    }
}

/// A subject of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
enum BindingSubject {
    User(String),
    Group(String),
    /// `system:serviceaccount:<ns>:<name>`, resolved against the binding's namespace.
    ServiceAccount(String),
}

impl BindingSubject {
    fn from_json(subject: &Value, binding_namespace: &str) -> Option<Self> {
        let name = subject["name"].as_str()?.to_owned();
        match subject["kind"].as_str()? {
            "User" => Some(BindingSubject::User(name)),
            "Group" => Some(BindingSubject::Group(name)),
            "ServiceAccount" => {
                let namespace = subject["namespace"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                    .unwrap_or(binding_namespace);
                Some(BindingSubject::ServiceAccount(format!(
                    "system:serviceaccount:{namespace}:{name}"
                )))
            }
            _ => None,
        }
    }

    fn applies_to(&self, user: &UserInfo) -> bool {
        match self {
            BindingSubject::User(name) | BindingSubject::ServiceAccount(name) => {
                *name == user.username
            }
            BindingSubject::Group(group) => user.groups.contains(group),
        }
    }
}

/// One binding with its role's rules resolved.
#[derive(Debug, Clone)]
struct Grant {
    subjects: Vec<BindingSubject>,
    rules: Vec<PolicyRule>,
    /// Why the rules are missing (the role it names does not exist), as the real authorizer
    /// reports it in the denial's reason.
    error: Option<String>,
}

impl Grant {
    fn applies_to(&self, user: &UserInfo) -> bool {
        self.subjects.iter().any(|s| s.applies_to(user))
    }
}

/// The decision of the authorizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A rule allows it.
    Allow,
    /// No rule does; the reason is empty or lists what went wrong while looking.
    Deny(String),
}

/// The stored RBAC objects, compiled.
#[derive(Debug, Clone, Default)]
pub struct RuleSet {
    cluster: Vec<Grant>,
    namespaced: HashMap<String, Vec<Grant>>,
}

/// Stored objects of the four RBAC kinds.
#[derive(Debug, Clone, Default)]
pub struct RbacObjects<'a> {
    /// ClusterRoles.
    pub cluster_roles: Vec<&'a Value>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<&'a Value>,
    /// Roles.
    pub roles: Vec<&'a Value>,
    /// RoleBindings.
    pub role_bindings: Vec<&'a Value>,
}

fn meta<'a>(object: &'a Value, field: &str) -> &'a str {
    object["metadata"][field].as_str().unwrap_or_default()
}

impl RuleSet {
    /// Compiles the stored objects.
    pub fn compile(objects: &RbacObjects<'_>) -> Self {
        let cluster_roles: HashMap<&str, &Value> = objects
            .cluster_roles
            .iter()
            .map(|r| (meta(r, "name"), *r))
            .collect();
        let roles: HashMap<(&str, &str), &Value> = objects
            .roles
            .iter()
            .map(|r| ((meta(r, "namespace"), meta(r, "name")), *r))
            .collect();
        let grant = |binding: &Value, namespace: &str| {
            let reference = &binding["roleRef"];
            let name = reference["name"].as_str().unwrap_or_default();
            let role = match reference["kind"].as_str() {
                Some("Role") if !namespace.is_empty() => roles.get(&(namespace, name)),
                Some("ClusterRole") => cluster_roles.get(name),
                _ => None,
            };
            let kind = reference["kind"].as_str().unwrap_or_default();
            Grant {
                subjects: binding["subjects"]
                    .as_array()
                    .map(|s| {
                        s.iter()
                            .filter_map(|s| BindingSubject::from_json(s, namespace))
                            .collect()
                    })
                    .unwrap_or_default(),
                rules: role.map(|r| PolicyRule::of_role(r)).unwrap_or_default(),
                error: role.is_none().then(|| {
                    format!(
                        "{}.rbac.authorization.k8s.io \"{name}\" not found",
                        kind.to_ascii_lowercase()
                    )
                }),
            }
        };
        let mut namespaced: HashMap<String, Vec<Grant>> = HashMap::new();
        for binding in &objects.role_bindings {
            let namespace = meta(binding, "namespace");
            namespaced
                .entry(namespace.to_owned())
                .or_default()
                .push(grant(binding, namespace));
        }
        RuleSet {
            cluster: objects
                .cluster_role_bindings
                .iter()
                .map(|b| grant(b, ""))
                .collect(),
            namespaced,
        }
    }

    /// The grants that apply in `namespace` ("" for cluster scope only).
    fn grants<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a Grant> + 'a {
        let local = match namespace {
            "" => None,
            namespace => self.namespaced.get(namespace),
        };
        self.cluster.iter().chain(local.into_iter().flatten())
    }

    /// Whether a rule bound to `user` allows the request.
    pub fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        let mut errors = Vec::new();
        for grant in self
            .grants(attributes.namespace())
            .filter(|g| g.applies_to(user))
        {
            if grant.rules.iter().any(|rule| rule.allows(attributes)) {
                return Decision::Allow;
            }
            errors.extend(grant.error.clone());
        }
        let reason = match errors.as_slice() {
            [] => String::new(),
            [one] => format!("RBAC: {one}"),
            many => format!("RBAC: [{}]", many.join(", ")),
        };
        Decision::Deny(reason)
    }

    /// Every rule bound to `user` that applies in `namespace` ("" for cluster-wide ones).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<PolicyRule> {
        self.grants(namespace)
            .filter(|g| g.applies_to(user))
            .flat_map(|g| g.rules.iter().cloned())
            .collect()
    }
}

/// Whether `owned` rules grant everything `requested` rules do (the escalation check:
/// nobody may grant what they do not hold). Each requested rule is broken into single
/// verb/group/resource/name (or verb/URL) cells, each of which some owned rule must allow.
pub fn covers(owned: &[PolicyRule], requested: &[PolicyRule]) -> bool {
    requested.iter().all(|rule| {
        cells(rule)
            .iter()
            .all(|cell| owned.iter().any(|o| o.allows(cell) && covers_cell(o, rule)))
    })
}

/// A wildcard or a name list in the requested rule must be held as such, not only for the
/// single value standing for it in the cell.
fn covers_cell(owned: &PolicyRule, requested: &PolicyRule) -> bool {
    let wild = |list: &[String]| list.iter().any(|v| v == "*");
    (!wild(&requested.verbs) || wild(&owned.verbs))
        && (!wild(&requested.api_groups) || wild(&owned.api_groups))
        && (!wild(&requested.resources) || wild(&owned.resources))
        && (!requested.resource_names.is_empty() || owned.resource_names.is_empty())
}

/// The single requests a rule stands for.
fn cells(rule: &PolicyRule) -> Vec<Attributes> {
    let mut cells = Vec::new();
    for verb in &rule.verbs {
        for url in &rule.non_resource_urls {
            cells.push(Attributes::non_resource(verb, url));
        }
        for group in &rule.api_groups {
            for resource in &rule.resources {
                let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
                let names: Vec<&str> = if rule.resource_names.is_empty() {
                    vec!["*"]
                } else {
                    rule.resource_names.iter().map(String::as_str).collect()
                };
                for name in names {
                    cells.push(Attributes::resource(
                        verb,
                        ResourceAttributes {
                            group: group.clone(),
                            resource: resource.to_owned(),
                            subresource: subresource.to_owned(),
                            name: if rule.resource_names.is_empty() {
                                String::new()
                            } else {
                                name.to_owned()
                            },
                            ..ResourceAttributes::default()
                        },
                    ));
                }
            }
        }
    }
    cells
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            username: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..UserInfo::default()
        }
    }

    fn rule(value: Value) -> PolicyRule {
        PolicyRule::from_json(&value)
    }

    /// A resource request's attributes (`v1`), for the authorizers' tests.
    pub(crate) fn request(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes::resource(
            verb,
            ResourceAttributes {
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: sub.into(),
                namespace: ns.into(),
                name: name.into(),
            },
        )
    }

    #[test]
    fn resources_subresources_and_wildcards_match_as_rbac_does() {
        let pods =
            rule(json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(pods.allows(&request("get", "", "pods", "", "a", "p")));
        assert!(!pods.allows(&request("create", "", "pods", "eviction", "a", "p")));
        assert!(!pods.allows(&request("get", "", "pods", "status", "a", "p")));
        assert!(!pods.allows(&request("get", "apps", "pods", "", "a", "p")));
        let eviction =
            rule(json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods/eviction"]}));
        assert!(eviction.allows(&request("create", "", "pods", "eviction", "a", "p")));
        assert!(!eviction.allows(&request("create", "", "pods", "", "a", "p")));
        let status =
            rule(json!({"verbs": ["update"], "apiGroups": ["*"], "resources": ["*/status"]}));
        assert!(status.allows(&request("update", "x.io", "widgets", "status", "", "w")));
        assert!(!status.allows(&request("update", "x.io", "widgets", "", "", "w")));
        let all = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}));
        assert!(all.allows(&request(
            "deletecollection",
            "x.io",
            "widgets",
            "scale",
            "",
            ""
        )));
        assert!(!all.allows(&Attributes::non_resource("get", "/metrics")));
    }

    #[test]
    fn resource_names_restrict_to_named_objects_and_never_a_list() {
        let named = rule(
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["one"]}),
        );
        assert!(named.allows(&request("get", "", "secrets", "", "a", "one")));
        assert!(!named.allows(&request("get", "", "secrets", "", "a", "two")));
        assert!(!named.allows(&request("list", "", "secrets", "", "a", "")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_star_prefix() {
        assert!(url_matches("/metrics", "/metrics"));
        assert!(!url_matches("/metrics", "/metrics/extra"));
        assert!(url_matches("/metrics*", "/metrics/extra"));
        assert!(url_matches("*", "/anything"));
        let metrics = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]}));
        assert!(metrics.allows(&Attributes::non_resource("get", "/metrics")));
        assert!(!metrics.allows(&Attributes::non_resource("post", "/metrics")));
        assert!(!metrics.allows(&request("get", "", "metrics", "", "", "")));
    }

    fn set(roles: &[Value], bindings: &[Value]) -> RuleSet {
        let kind = |v: &Value, k: &str| v["kind"] == k;
        let pick = |list: &[Value], k: &str| -> Vec<Value> {
            list.iter().filter(|v| kind(v, k)).cloned().collect()
        };
        let (cr, r) = (pick(roles, "ClusterRole"), pick(roles, "Role"));
        let (crb, rb) = (
            pick(bindings, "ClusterRoleBinding"),
            pick(bindings, "RoleBinding"),
        );
        RuleSet::compile(&RbacObjects {
            cluster_roles: cr.iter().collect(),
            cluster_role_bindings: crb.iter().collect(),
            roles: r.iter().collect(),
            role_bindings: rb.iter().collect(),
        })
    }

    #[test]
    fn a_role_binding_grants_only_in_its_namespace_and_a_cluster_binding_everywhere() {
        let reader = json!({"kind": "ClusterRole", "metadata": {"name": "reader"},
            "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["secrets"]}]});
        let local = json!({"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "a"},
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}]});
        let rules = set(std::slice::from_ref(&reader), &[local]);
        let sa = user("system:serviceaccount:a:sa", &["system:serviceaccounts"]);
        assert_eq!(
            rules.authorize(&sa, &request("list", "", "secrets", "", "a", "")),
            Decision::Allow
        );
        assert!(matches!(
            rules.authorize(&sa, &request("list", "", "secrets", "", "b", "")),
            Decision::Deny(_)
        ));
        assert!(matches!(
            rules.authorize(&sa, &request("list", "", "secrets", "", "", "")),
            Decision::Deny(_)
        ));
        let global = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "g"},
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "Group", "name": "team"}]});
        let rules = set(&[reader], &[global]);
        let member = user("alice", &["team"]);
        assert_eq!(
            rules.authorize(&member, &request("list", "", "secrets", "", "", "")),
            Decision::Allow
        );
        assert!(matches!(
            rules.authorize(
                &user("bob", &[]),
                &request("list", "", "secrets", "", "", "")
            ),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn a_binding_to_a_missing_role_is_named_in_the_reason() {
        let binding = json!({"kind": "ClusterRoleBinding", "metadata": {"name": "g"},
            "roleRef": {"kind": "ClusterRole", "name": "gone"},
            "subjects": [{"kind": "User", "name": "alice"}]});
        let rules = set(&[], &[binding]);
        assert_eq!(
            rules.authorize(&user("alice", &[]), &Attributes::non_resource("get", "/x")),
            Decision::Deny("RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found".into())
        );
    }

    #[test]
    fn covering_needs_every_cell_and_wildcards_held_as_wildcards() {
        let owned = [rule(
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "secrets"]}),
        )];
        let fewer = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}),
        )];
        assert!(covers(&owned, &fewer));
        let more = [rule(
            json!({"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}),
        )];
        assert!(!covers(&owned, &more));
        let star = [rule(
            json!({"verbs": ["*"], "apiGroups": [""], "resources": ["pods"]}),
        )];
        assert!(!covers(&owned, &star));
        let named = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["x"]}),
        )];
        assert!(covers(&owned, &named));
        let only_named = [rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["x"]}),
        )];
        assert!(!covers(&only_named, &fewer));
        let admin = [rule(
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
        )];
        assert!(covers(&admin, &star) && covers(&admin, &more));
        assert!(!covers(
            &admin,
            &[rule(
                json!({"verbs": ["get"], "nonResourceURLs": ["/metrics"]})
            )]
        ));
    }
}
