//! Who may ask for a remediation, how far a request may choose for itself, which `HostBmc` may
//! name a Machine-less Node's BMC, and whose BareMetalHost a Machine may power. Pure: facts
//! read from the objects in, a verdict out; the passes read the objects and act on the
//! verdict (docs/reference/contracts.md, "Trust").
//!
//! Guarantees: a request counts only from a namespace the policy trusts (by default the
//! namespaces of the `NodeRemediationTemplate`s an existing NodeHealthCheck references: a
//! cluster-scoped object no namespace tenant can make); a request claiming a NodeHealthCheck
//! owner counts only if that NodeHealthCheck exists with that UID and references the request's
//! template; a request's spec only narrows the policy, never widens it; two trusted `HostBmc`s
//! of one Node both count for nothing ("oldest wins" would let whoever was first decide); a
//! Cluster API Machine's BareMetalHost is in the Machine's namespace and names the Machine's
//! Metal3Machine as its consumer (a Node's Machine is the one whose `status.nodeRef` names it:
//! [`crate::api::slim::machine_of_node`]); an OpenShift Machine's BareMetalHost is in the
//! Machine's namespace or one `trust.machineHostNamespaces` lists.
//! Caveats: a refused request or mapping is told (a condition, an Event, a metric) by the
//! pass that meets it; this module only decides.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::observe::{HostRef, Unusable, machine_host};
use crate::api::{
    EventReason, FenceStrategyName, HostBmc, PolicyOverrides, RemediationPolicySpec, TrustPolicy,
    slim,
};

/// The group of baremend's own template kinds, as an `apiVersion` starts.
const OUR_API_GROUP: &str = "baremend.io/";
/// The template kind a NodeHealthCheck names for baremend.
const NODE_TEMPLATE_KIND: &str = "NodeRemediationTemplate";
/// The kind of a NodeHealthCheck, as a request's owner reference names it.
pub const HEALTH_CHECK_KIND: &str = "NodeHealthCheck";
/// The kind a Cluster API BareMetalHost's consumer must be.
const METAL3_MACHINE: &str = "Metal3Machine";

/// A NodeHealthCheck, as far as trust needs it: who it is and which of baremend's templates
/// it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Its name (NodeHealthChecks are cluster-scoped).
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// The `NodeRemediationTemplate`s it references, as (namespace, name).
    pub templates: BTreeSet<(String, String)>,
}

/// A NodeHealthCheck read as JSON: its `spec.remediationTemplate` and every
/// `spec.escalatingRemediations[].remediationTemplate` that is baremend's template kind
/// (medik8s node-healthcheck-operator `api/v1alpha1/nodehealthcheck_types.go`). None: no name
/// or UID (not an object the API server returned).
pub fn health_check(object: &Value) -> Option<HealthCheck> {
    let name = object.pointer("/metadata/name")?.as_str()?.to_string();
    let uid = object.pointer("/metadata/uid")?.as_str()?.to_string();
    let spec = &object["spec"];
    let escalations = spec["escalatingRemediations"].as_array();
    let references = std::iter::once(&spec["remediationTemplate"]).chain(
        escalations
            .into_iter()
            .flatten()
            .map(|e| &e["remediationTemplate"]),
    );
    let templates = references
        .filter(|r| {
            r["kind"] == NODE_TEMPLATE_KIND
                && r["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with(OUR_API_GROUP))
        })
        .filter_map(|r| Some((r["namespace"].as_str()?.into(), r["name"].as_str()?.into())))
        .collect();
    Some(HealthCheck {
        name,
        uid,
        templates,
    })
}

/// The namespaces whose `NodeRemediation`s count: the policy's list, else those of the
/// templates `checks` reference.
pub fn request_namespaces(trust: &TrustPolicy, checks: &[HealthCheck]) -> BTreeSet<String> {
    match &trust.request_namespaces {
        Some(listed) => listed.iter().cloned().collect(),
        None => checks
            .iter()
            .flat_map(|c| c.templates.iter().map(|(namespace, _)| namespace.clone()))
            .collect(),
    }
}

/// What a `NodeRemediation` says about where it comes from.
#[derive(Debug, Clone, Copy)]
pub struct RequestOrigin<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// The NodeHealthCheck its owner references name, as (name, UID), if any.
    pub owner: Option<(&'a str, &'a str)>,
    /// The template it says it was made from (`remediation.medik8s.io/template-name`).
    pub template: Option<&'a str>,
}

/// Why a request or a `HostBmc` is refused: the `Accepted=False` condition's reason
/// ([`Refusal::reason`]) and message (its Display), and the metric's label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// From a namespace the policy does not trust.
    #[error(
        "namespace {namespace} is not one the RemediationPolicy trusts for {kind}s (spec.trust; by default the namespaces of the templates a NodeHealthCheck references)"
    )]
    NamespaceNotTrusted {
        /// The object's kind.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
    },
    /// It claims a NodeHealthCheck owner that does not exist, or exists with another UID.
    #[error("its owner NodeHealthCheck {name} (UID {uid}) does not exist")]
    UnknownHealthCheck {
        /// The claimed NodeHealthCheck.
        name: String,
        /// The claimed UID.
        uid: String,
    },
    /// Its owner NodeHealthCheck does not reference the template it names (or any template of
    /// its namespace).
    #[error(
        "NodeHealthCheck {check} references no NodeRemediationTemplate {template} in namespace {namespace}"
    )]
    TemplateNotReferenced {
        /// The NodeHealthCheck.
        check: String,
        /// The template the request names (`*`: it names none).
        template: String,
        /// The request's namespace.
        namespace: String,
    },
    /// Its spec asks for more than the policy allows.
    #[error(
        "spec.{field} {asked} widens the RemediationPolicy's {allowed}: a request may only narrow it"
    )]
    WidensPolicy {
        /// The field.
        field: &'static str,
        /// What the request asks.
        asked: String,
        /// What the policy allows.
        allowed: String,
    },
    /// Another trusted `HostBmc` names the same Node: neither is used.
    #[error(
        "{count} HostBmcs name Node {node} ({names}): none is used until one is left; delete the wrong ones"
    )]
    Contested {
        /// The Node.
        node: String,
        /// How many claim it.
        count: usize,
        /// Their `namespace/name`s.
        names: String,
    },
    /// Another `HostBmc` names the same Machine: neither is used.
    #[error(
        "{count} HostBmcs name Machine {machine} ({names}): none is used until one is left; delete the wrong ones"
    )]
    ContestedMachine {
        /// The Machine, `namespace/name`.
        machine: String,
        /// How many claim it.
        count: usize,
        /// Their `namespace/name`s.
        names: String,
    },
}

impl Refusal {
    /// Every reason a refusal is told under, in the order of the variants (the metrics start
    /// a series for each; a test holds it to [`Refusal::reason`]).
    pub const REASONS: [EventReason; 6] = [
        EventReason::NamespaceNotTrusted,
        EventReason::UnknownHealthCheck,
        EventReason::TemplateNotReferenced,
        EventReason::WidensPolicy,
        EventReason::ContestedNode,
        EventReason::ContestedMachine,
    ];

    /// The reason (condition reason, Event reason, metric label).
    pub fn reason(&self) -> EventReason {
        match self {
            Refusal::NamespaceNotTrusted { .. } => EventReason::NamespaceNotTrusted,
            Refusal::UnknownHealthCheck { .. } => EventReason::UnknownHealthCheck,
            Refusal::TemplateNotReferenced { .. } => EventReason::TemplateNotReferenced,
            Refusal::WidensPolicy { .. } => EventReason::WidensPolicy,
            Refusal::Contested { .. } => EventReason::ContestedNode,
            Refusal::ContestedMachine { .. } => EventReason::ContestedMachine,
        }
    }
}

/// Whether a `NodeRemediation` from `origin` counts: from a trusted namespace, and, when it
/// claims a NodeHealthCheck owner, one of `checks` with that UID referencing its template.
pub fn node_request_origin(
    origin: RequestOrigin<'_>,
    trusted: &BTreeSet<String>,
    checks: &[HealthCheck],
) -> Result<(), Refusal> {
    if !trusted.contains(origin.namespace) {
        return Err(Refusal::NamespaceNotTrusted {
            kind: "NodeRemediation",
            namespace: origin.namespace.into(),
        });
    }
    let Some((name, uid)) = origin.owner else {
        return Ok(());
    };
    let check = checks
        .iter()
        .find(|c| c.name == name && c.uid == uid)
        .ok_or_else(|| Refusal::UnknownHealthCheck {
            name: name.into(),
            uid: uid.into(),
        })?;
    let referenced = check.templates.iter().any(|(namespace, template)| {
        namespace == origin.namespace && origin.template.is_none_or(|t| t == template)
    });
    if referenced {
        Ok(())
    } else {
        Err(Refusal::TemplateNotReferenced {
            check: check.name.clone(),
            template: origin.template.unwrap_or("*").into(),
            namespace: origin.namespace.into(),
        })
    }
}

/// `policy` narrowed by a request's `overrides`: a subset of its strategies (in the request's
/// order), deadlines and attempts no larger, and the other node release only where
/// `spec.trust.requestMayChooseNodeRelease` allows it. Anything wider refuses the request.
pub fn narrow(
    policy: &RemediationPolicySpec,
    overrides: &PolicyOverrides,
) -> Result<RemediationPolicySpec, Refusal> {
    let mut narrowed = policy.clone();
    if let Some(strategies) = overrides.strategies.as_ref().filter(|s| !s.is_empty()) {
        let unique: BTreeSet<String> = strategies.iter().map(|s| format!("{s:?}")).collect();
        let outside = strategies.iter().any(|s| !policy.strategies.contains(s));
        if outside || unique.len() != strategies.len() {
            return Err(Refusal::WidensPolicy {
                field: "strategies",
                asked: names(strategies),
                allowed: names(&policy.strategies),
            });
        }
        narrowed.strategies = strategies.clone();
    }
    if let Some(release) = overrides.node_release {
        if release != policy.node_release && !policy.trust.request_may_choose_node_release {
            return Err(Refusal::WidensPolicy {
                field: "nodeRelease",
                asked: format!("{release:?}"),
                allowed: format!(
                    "{:?} (spec.trust.requestMayChooseNodeRelease is false)",
                    policy.node_release
                ),
            });
        }
        narrowed.node_release = release;
    }
    narrowed.timeouts.power_off_seconds = at_most(
        "powerOffSeconds",
        overrides.power_off_seconds,
        policy.timeouts.power_off_seconds,
    )?;
    narrowed.timeouts.node_ready_seconds = at_most(
        "nodeReadySeconds",
        overrides.node_ready_seconds,
        policy.timeouts.node_ready_seconds,
    )?;
    narrowed.max_attempts = at_most("maxAttempts", overrides.max_attempts, policy.max_attempts)?;
    Ok(narrowed)
}

/// `asked` if it is no more than `allowed` (unset: `allowed`).
fn at_most(field: &'static str, asked: Option<u32>, allowed: u32) -> Result<u32, Refusal> {
    match asked {
        Some(asked) if asked > allowed => Err(Refusal::WidensPolicy {
            field,
            asked: asked.to_string(),
            allowed: format!("at most {allowed}"),
        }),
        Some(asked) => Ok(asked),
        None => Ok(allowed),
    }
}

fn names(strategies: &[FenceStrategyName]) -> String {
    let names: Vec<String> = strategies.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", names.join(", "))
}

/// The Node a `HostBmc` makes a subject of its own: the one it names when it names no Machine.
pub fn machineless_node(mapping: &HostBmc) -> Option<&str> {
    match (&mapping.spec.machine_name, &mapping.spec.node_name) {
        (None, Some(node)) if !node.is_empty() => Some(node),
        _ => None,
    }
}

/// The `HostBmc`s that name Machine-less Nodes, judged: each Node with exactly one trusted
/// claim gets it as its subject; an untrusted claim, and every claim of a Node two trusted
/// ones name, is refused. Nodes in `machine_nodes` (a Machine's Node) are no subject at all.
#[derive(Debug, Default)]
pub struct Claims<'a> {
    /// Each Machine-less Node and the one `HostBmc` that is its subject.
    pub subjects: BTreeMap<String, &'a Arc<HostBmc>>,
    /// The refused `HostBmc`s, with why.
    pub refused: Vec<(&'a Arc<HostBmc>, Refusal)>,
}

/// Judges `mappings` (see [`Claims`]). `trusted`: `spec.trust.hostBmcNamespaces`.
pub fn machineless_claims<'a>(
    mappings: &'a [Arc<HostBmc>],
    trusted: &[String],
    machine_nodes: &std::collections::HashSet<String>,
) -> Claims<'a> {
    let mut claims = Claims::default();
    let mut by_node: BTreeMap<String, Vec<&'a Arc<HostBmc>>> = BTreeMap::new();
    for mapping in mappings {
        let Some(node) = machineless_node(mapping).filter(|n| !machine_nodes.contains(*n)) else {
            continue;
        };
        let namespace = mapping.metadata.namespace.clone().unwrap_or_default();
        if trusted.contains(&namespace) {
            by_node.entry(node.to_string()).or_default().push(mapping);
        } else {
            claims.refused.push((
                mapping,
                Refusal::NamespaceNotTrusted {
                    kind: "HostBmc",
                    namespace,
                },
            ));
        }
    }
    for (node, mut mappings) in by_node {
        if let [only] = mappings[..] {
            claims.subjects.insert(node, only);
            continue;
        }
        mappings.sort_by_key(|m| qualified(m));
        let names: Vec<String> = mappings.iter().map(|m| qualified(m)).collect();
        for mapping in &mappings {
            claims.refused.push((
                mapping,
                Refusal::Contested {
                    node: node.clone(),
                    count: mappings.len(),
                    names: names.join(", "),
                },
            ));
        }
    }
    claims
}

/// The standing of each `HostBmc` that names a Machine, by the rule the fencing's `locate_bmc`
/// applies when it uses them: one from a namespace outside `trusted`
/// (`spec.trust.hostBmcNamespaces`) is refused, and every one of two or more naming one Machine
/// (in the Machine's namespace, the only place one counts) is refused; the others are
/// accepted (None). In `mappings`' order.
pub fn machine_claims<'a>(
    mappings: &'a [Arc<HostBmc>],
    trusted: &[String],
) -> Vec<(&'a Arc<HostBmc>, Option<Refusal>)> {
    let mut by_machine: BTreeMap<(String, &str), Vec<&'a Arc<HostBmc>>> = BTreeMap::new();
    for mapping in mappings {
        if let Some(machine) = mapping.spec.machine_name.as_deref() {
            let namespace = mapping.metadata.namespace.clone().unwrap_or_default();
            by_machine
                .entry((namespace, machine))
                .or_default()
                .push(mapping);
        }
    }
    let mut standings = Vec::new();
    for mapping in mappings {
        let Some(machine) = mapping.spec.machine_name.as_deref() else {
            continue;
        };
        let namespace = mapping.metadata.namespace.clone().unwrap_or_default();
        let refusal = if !trusted.contains(&namespace) {
            Some(Refusal::NamespaceNotTrusted {
                kind: "HostBmc",
                namespace: namespace.clone(),
            })
        } else {
            let mut claimants = by_machine[&(namespace.clone(), machine)].clone();
            (claimants.len() > 1).then(|| {
                claimants.sort_by_key(|m| qualified(m));
                let names: Vec<String> = claimants.iter().map(|m| qualified(m)).collect();
                Refusal::ContestedMachine {
                    machine: format!("{namespace}/{machine}"),
                    count: claimants.len(),
                    names: names.join(", "),
                }
            })
        };
        standings.push((mapping, refusal));
    }
    standings
}

fn qualified(mapping: &HostBmc) -> String {
    format!(
        "{}/{}",
        mapping.metadata.namespace.clone().unwrap_or_default(),
        mapping.metadata.name.clone().unwrap_or_default()
    )
}

/// Whether a Cluster API Machine in `machine_namespace`, whose Metal3Machine is
/// `metal3_machine`, may power the BareMetalHost `host_namespace/host`, whose
/// `spec.consumerRef` is `consumer`: the host lives in the Machine's namespace and its
/// consumer is that Metal3Machine (kind, name and namespace). Err: why not, for the `Held`
/// condition (cluster-api-provider-metal3 enforces the same-namespace lookup, and a host
/// consumed by another Metal3Machine is that one's).
pub fn host_consumed_by(
    machine_namespace: &str,
    metal3_machine: &str,
    (host_namespace, host): (&str, &str),
    consumer: Option<&slim::Named>,
) -> Result<(), String> {
    if host_namespace != machine_namespace {
        return Err(format!(
            "BareMetalHost {host_namespace}/{host} is not in the Machine's namespace {machine_namespace}"
        ));
    }
    let Some(consumer) = consumer else {
        return Err(format!(
            "BareMetalHost {host_namespace}/{host} has no spec.consumerRef: it is nobody's to power"
        ));
    };
    let namespace = consumer.namespace.as_deref().unwrap_or(host_namespace);
    let ours = consumer.kind.as_deref() == Some(METAL3_MACHINE)
        && consumer.name == metal3_machine
        && namespace == machine_namespace;
    if ours {
        Ok(())
    } else {
        Err(format!(
            "BareMetalHost {host_namespace}/{host} is consumed by {} {namespace}/{}, not by Metal3Machine {machine_namespace}/{metal3_machine}",
            consumer.kind.as_deref().unwrap_or("(no kind)"),
            consumer.name
        ))
    }
}

/// The host's namespace and the name its `spec.consumerRef` gives: [`host_consuming`] judges
/// only the hosts whose pair is the Metal3Machine's, so an index of the cached hosts by this
/// pair finds every host it would judge.
pub fn host_consumer(host: &slim::BareMetalHost) -> Option<(String, String)> {
    let (namespace, name) = host_consumer_ref(host)?;
    Some((namespace.to_owned(), name.to_owned()))
}

fn host_consumer_ref(host: &slim::BareMetalHost) -> Option<(&str, &str)> {
    let consumer = host.spec.as_ref()?.consumer_ref.as_ref()?;
    Some((host.metadata.namespace.as_deref()?, consumer.name.as_str()))
}

/// The one BareMetalHost of `hosts` (a watch cache) that [`host_consumed_by`] accepts for
/// Metal3Machine `metal3_machine` of `machine_namespace`: the host whose `spec.consumerRef`
/// names it, in the Machine's namespace. It is the host a Cluster API Machine's remediation
/// records, found without reading the Metal3Machine (a round trip before the creation). The
/// fresh read of the host before any power request judges the same claim again
/// ([`host_consumed_by`]). None when no host claims it or more than one does: the
/// Metal3Machine is then read, and its `metal3.io/BareMetalHost` decides or says why none.
pub fn host_consuming<'h>(
    hosts: impl IntoIterator<Item = &'h slim::BareMetalHost>,
    machine_namespace: &str,
    metal3_machine: &str,
) -> Option<HostRef> {
    let mut claiming = hosts.into_iter().filter_map(|host| {
        // The names first ([`host_consumer`]): the full judgment words a refusal for each host
        // it refuses.
        let (namespace, consumer_name) = host_consumer_ref(host)?;
        if consumer_name != metal3_machine || namespace != machine_namespace {
            return None;
        }
        let consumer = host.spec.as_ref()?.consumer_ref.as_ref()?;
        let name = host.metadata.name.as_deref()?;
        host_consumed_by(
            machine_namespace,
            metal3_machine,
            (namespace, name),
            Some(consumer),
        )
        .ok()
        .map(|()| HostRef {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    });
    let first = claiming.next()?;
    claiming.next().is_none().then_some(first)
}

#[cfg(test)]
#[path = "trust_tests.rs"]
mod tests;

/// The BareMetalHost an OpenShift Machine names (its `spec.providerID`, else its
/// `metal3.io/BareMetalHost` annotation: [`machine_host`]), honoured only in the Machine's
/// own namespace (`machine_namespace`) or one `trusted` lists (`trust.machineHostNamespaces`):
/// whoever writes a Machine names its host, and would otherwise choose any host of the
/// cluster to power off. `Ok(None)`: it names none.
pub fn trusted_machine_host(
    machine: &slim::Machine,
    machine_namespace: &str,
    trusted: &[String],
) -> Result<Option<HostRef>, Unusable> {
    let Some(host) = machine_host(machine)? else {
        return Ok(None);
    };
    if host.namespace == machine_namespace || trusted.contains(&host.namespace) {
        return Ok(Some(host));
    }
    Err(Unusable {
        field: "its BareMetalHost".into(),
        reason: format!(
            "{host} is outside the Machine's namespace {machine_namespace}, and the policy's \
             trust.machineHostNamespaces does not list {} (whoever writes a Machine would \
             choose which host is powered off; list the namespace if only administrators write \
             Machines that name hosts there)",
            host.namespace
        ),
    })
}
