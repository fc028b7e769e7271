//! The fencing readiness check: for every Machine baremend would remediate, its fencing path
//! probed without disruption (see `probe`) every interval, at a jittered moment, decided by
//! `readiness`, exported as `baremend_fencing_ready`, and told by an Event on the Machine when
//! it changes. `baremend check` runs the same [`targets`] and [`check`] once.
//!
//! Requests stay few: a Machine's strategies are probed in the policy's order up to the first
//! that answers; BMC probes go through the controller's [`Connector`], whose gate keeps one
//! request in flight per BMC (shared with the power monitor and the remediations); at most
//! [`CHECKS_AT_ONCE`] checks run at once; every session is closed; no power change is ever
//! asked. Machines under remediation are skipped (their fence is in progress) and keep the
//! readiness last shown.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::Connector;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Client, Resource, ResourceExt};

use super::monitor::{offset, under_remediation};
use crate::api::slim;
use crate::api::{EventReason, FenceStrategyName, HostBmc, Remediation, RemediationPolicySpec};
use crate::metrics::fencing::FencingLabels;
use crate::remediation::act::probe::{ProbeSite, ProbeTerms, ProbeWith};
use crate::remediation::act::strategy::strategy;
use crate::remediation::decide::observe::{BmcRef, HostRef, machine_is_control_plane};
use crate::remediation::decide::readiness::{Readiness, Reason, decide};
use crate::remediation::decide::trust::{machineless_claims, trusted_machine_host};
use crate::remediation::evidence::bmc::{NoBmc, locate_bmc};
use crate::remediation::pass::context::Context;
use crate::remediation::pass::subject::{
    machine_nodes, machineless_strategies, node_is_control_plane, node_reference,
};
use crate::runtime::events::{Severity, publish_action};

/// Checks in flight at once, over all Machines.
pub const CHECKS_AT_ONCE: usize = 4;

/// How long one path's probe may take (login, reads and close).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// The Event reason when a host's fencing path stops answering (Warning).
pub const NOT_READY_EVENT: &str = EventReason::FencingNotReady.as_str();

/// The Event reason when it answers again (Normal).
pub const READY_EVENT: &str = EventReason::FencingReady.as_str();

/// One Machine (or Node without one) to check, and where its fencing paths are.
#[derive(Debug, Clone)]
pub struct Target {
    /// `namespace/name` (a Node without a Machine: the `HostBmc`'s namespace, the Node's name).
    pub key: String,
    /// The Machine's namespace (or the `HostBmc`'s).
    pub namespace: String,
    /// Its Node, if it has one (empty otherwise).
    pub node: String,
    /// The Machine (or the Node without one), for its Events.
    pub reference: ObjectReference,
    /// A Node without a Machine: fenced through its `HostBmc` only.
    pub machineless: bool,
    /// The BareMetalHost it names, or why the reference is unusable.
    pub host: Result<Option<HostRef>, String>,
    /// Its BMC for direct fencing, or why there is none.
    pub bmc: Result<BmcRef, NoBmc>,
    /// A remediation of it is under way (past its start, not ended).
    pub remediating: bool,
}

/// What the Machines' fencing paths are looked up in.
pub struct Fleet<'a> {
    /// Every Machine.
    pub machines: &'a [Arc<slim::Machine>],
    /// A BareMetalHost by reference, from a cache or a list.
    pub host: &'a (dyn Fn(&HostRef) -> Option<Arc<slim::BareMetalHost>> + Sync),
    /// Every HostBmc.
    pub host_bmcs: &'a [Arc<HostBmc>],
    /// Every Remediation.
    pub remediations: &'a [Arc<Remediation>],
    /// The policy in force.
    pub policy: &'a RemediationPolicySpec,
    /// A Node's labels, from a cache or a list (only Nodes without a Machine are asked for).
    pub node_labels: &'a (dyn Fn(&str) -> Option<BTreeMap<String, String>> + Sync),
    /// The BareMetalHost of each Machine (by `namespace/name`) when it was looked up
    /// elsewhere — a Cluster API Machine's, through its Metal3Machine; None: read from each
    /// Machine itself (OpenShift's Machine API).
    pub resolved_hosts: Option<&'a HashMap<String, Result<Option<HostRef>, String>>>,
}

/// The Machines baremend would remediate (a control-plane Machine only while the policy's
/// control-plane gate is enabled), each with its fencing paths.
pub fn targets(fleet: &Fleet<'_>) -> Vec<Target> {
    let remediating = under_remediation(fleet.remediations);
    let mut targets = Vec::new();
    for machine in fleet.machines {
        if machine_is_control_plane(machine.labels()) && !fleet.policy.control_plane.enabled {
            continue;
        }
        let namespace = machine.namespace().unwrap_or_default();
        let name = machine.name_any();
        let node = machine
            .status
            .as_ref()
            .and_then(|s| s.node_ref.as_ref())
            .map(|n| n.name.clone())
            .unwrap_or_default();
        let host = match fleet.resolved_hosts {
            Some(resolved) => resolved
                .get(&format!("{namespace}/{name}"))
                .cloned()
                .unwrap_or(Ok(None)),
            None => trusted_machine_host(
                machine,
                &namespace,
                &fleet.policy.trust.machine_host_namespaces,
            )
            .map_err(|e| format!("Machine {namespace}/{name}: {e}")),
        };
        let host_ref = host.as_ref().ok().cloned().flatten();
        let cached = host_ref.as_ref().and_then(|r| (fleet.host)(r));
        let bmc = locate_bmc(
            fleet.host_bmcs,
            &fleet.policy.trust.host_bmc_namespaces,
            (
                &namespace,
                &name,
                Some(node.as_str()).filter(|n| !n.is_empty()),
            ),
            host_ref.as_ref().map(|r| (r, cached.as_deref())),
        );
        targets.push(Target {
            key: format!("{namespace}/{name}"),
            remediating: remediating.contains(&(namespace.clone(), name)),
            reference: machine.object_ref(&()),
            machineless: false,
            namespace,
            node,
            host,
            bmc,
        });
    }
    targets.extend(machineless_targets(fleet, &remediating));
    targets
}

/// The Nodes without a Machine baremend would remediate, each through the `HostBmc` that is
/// its subject.
fn machineless_targets(fleet: &Fleet<'_>, remediating: &HashSet<(String, String)>) -> Vec<Target> {
    // Machines' hosts resolved elsewhere are Cluster API's (see `Fleet::resolved_hosts`),
    // whose Nodes may live in workload clusters; a Node here is known by its labels.
    let machine_api = match fleet.resolved_hosts {
        Some(_) => slim::MachineApi::ClusterApi,
        None => slim::MachineApi::OpenShift,
    };
    let machine_nodes = machine_nodes(fleet.machines, machine_api, |name| {
        (fleet.node_labels)(name).map(|_| None)
    });
    let mut targets = Vec::new();
    for (node, mapping) in machineless_claims(
        fleet.host_bmcs,
        &fleet.policy.trust.host_bmc_namespaces,
        &machine_nodes,
    )
    .subjects
    {
        let control_plane = (fleet.node_labels)(&node).is_some_and(|l| node_is_control_plane(&l));
        if control_plane && !fleet.policy.control_plane.enabled {
            continue;
        }
        let namespace = mapping.namespace().unwrap_or_default();
        targets.push(Target {
            key: format!("{namespace}/{node}"),
            remediating: remediating.contains(&(namespace.clone(), node.clone())),
            reference: node_reference(&node, None),
            machineless: true,
            bmc: locate_bmc(
                std::slice::from_ref(mapping),
                &fleet.policy.trust.host_bmc_namespaces,
                (&namespace, &node, Some(&node)),
                None,
            ),
            host: Ok(None),
            namespace,
            node,
        });
    }
    targets
}

/// What a check needs besides its target.
pub struct Probes<'a> {
    /// The API client.
    pub client: &'a Client,
    /// BMC drivers, one request gate per BMC.
    pub connector: &'a Connector,
    /// The policy's strategies, in order.
    pub strategies: &'a [FenceStrategyName],
    /// The policy's reboot key.
    pub reboot_key: &'a str,
    /// How long one probe may take.
    pub timeout: Duration,
    /// How BMC probes are counted and weighed (the policy's `allowInsecureBmc`, the
    /// controller's ledger of BMC readings).
    pub terms: ProbeTerms,
}

/// Checks one Machine: its strategies probed in the policy's order up to the first that
/// answers, then decided.
pub async fn check(probes: &Probes<'_>, target: &Target) -> Readiness {
    let mut verdicts = Vec::new();
    let strategies = if target.machineless {
        machineless_strategies(probes.strategies)
    } else {
        probes.strategies.to_vec()
    };
    let with = ProbeWith {
        client: probes.client,
        connector: probes.connector,
        reboot_key: probes.reboot_key,
        timeout: probes.timeout,
        terms: probes.terms.clone(),
    };
    let site = ProbeSite {
        key: &target.key,
        namespace: &target.namespace,
        host: &target.host,
        bmc: &target.bmc,
    };
    for name in strategies {
        let verdict = strategy(name).probe(&with, &site).await;
        let answered = verdict.is_ok();
        verdicts.push(verdict);
        if answered {
            break;
        }
    }
    decide(verdicts)
}

/// The one line `baremend check` and the Events say about a Machine's readiness.
pub fn describe(readiness: &Readiness) -> String {
    match readiness {
        Readiness::Ready { path, said } => format!("{path}: READY ({said})"),
        Readiness::NotReady {
            path,
            reason,
            detail,
        } => {
            let path = path
                .as_ref()
                .map_or_else(|| "no fencing path".to_string(), ToString::to_string);
            format!("{path}: NOT READY: {}: {detail}", reason.as_str())
        }
    }
}

/// What was last shown of a Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shown {
    labels: FencingLabels,
    reason: Option<Reason>,
}

/// The Event a change of readiness deserves, if any: a Warning when a path stops answering
/// (or answers for another reason), a Normal one when it answers again; none for a first
/// check that finds it ready, and none while nothing changes.
fn change_event(before: Option<&Shown>, now: &Readiness) -> Option<(Severity, &'static str)> {
    let was = before.map(|s| s.reason);
    match (was, now.reason()) {
        (Some(Some(_)), None) => Some((Severity::Normal, READY_EVENT)),
        (_, Some(reason)) if was != Some(Some(reason)) => {
            Some((Severity::Warning, NOT_READY_EVENT))
        }
        _ => None,
    }
}

/// The check's memory between rounds.
#[derive(Default)]
struct Memory {
    shown: HashMap<String, Shown>,
}

impl Memory {
    /// Records a check's outcome: its series, the count by reason, and an Event on a change.
    async fn record(&mut self, context: &Context, target: &Target, readiness: &Readiness) {
        let labels = FencingLabels {
            // A Node without a Machine: no Machine to name (as in its power-state series).
            machine: if target.machineless {
                String::new()
            } else {
                crate::metrics::label_value(&target.key)
            },
            node: crate::metrics::label_value(&target.node),
            path: readiness.path_label().into(),
        };
        let metrics = &context.metrics.fencing;
        let before = self.shown.get(&target.key);
        if let Some(before) = before
            && before.labels != labels
        {
            metrics.forget(&before.labels);
        }
        metrics.set_ready(&labels, readiness.is_ready());
        if let Some((severity, reason)) = change_event(before, readiness) {
            let note = format!("fencing path {}", describe(readiness));
            tracing::info!(machine = %target.key, %note, "fencing readiness changed");
            // The readiness reason as the action: each reason its own Event, not a repeat.
            let action = readiness.reason().map_or("Ready", Reason::as_str);
            let regarding = [(target.reference.clone(), None)];
            publish_action(
                &context.clients.recorder,
                severity,
                (reason, action),
                &note,
                &regarding,
            )
            .await;
        }
        self.shown.insert(
            target.key.clone(),
            Shown {
                labels,
                reason: readiness.reason(),
            },
        );
        self.count(context);
    }

    /// Forgets the Machines no longer checked (gone, or out of scope); those under
    /// remediation stay as last shown.
    fn retain(&mut self, context: &Context, targets: &[Target]) {
        let keys: HashSet<&str> = targets.iter().map(|t| t.key.as_str()).collect();
        self.shown.retain(|key, shown| {
            let keep = keys.contains(key.as_str());
            if !keep {
                context.metrics.fencing.forget(&shown.labels);
            }
            keep
        });
        self.count(context);
    }

    fn count(&self, context: &Context) {
        let mut counts: HashMap<&'static str, usize> = HashMap::new();
        for reason in self.shown.values().filter_map(|s| s.reason) {
            *counts.entry(reason.as_str()).or_default() += 1;
        }
        let counts: Vec<(&str, usize)> = counts.into_iter().collect();
        context.metrics.fencing.set_not_ready(&counts);
    }
}

/// Checks every Machine's fencing path every `interval` until the task is dropped; `seed`
/// spreads the checks over the interval (the jitter: fixed per Machine and seed).
pub async fn run(context: Arc<Context>, interval: Duration, seed: u64) {
    let mut memory = Memory::default();
    loop {
        let started = tokio::time::Instant::now();
        if context.caches_ready() {
            round(&context, &mut memory, interval, seed, started).await;
        }
        let rest = interval.saturating_sub(started.elapsed());
        tokio::time::sleep(rest.max(Duration::from_millis(200))).await;
    }
}

/// One round: every target checked once, at its offset in the interval.
async fn round(
    context: &Context,
    memory: &mut Memory,
    interval: Duration,
    seed: u64,
    started: tokio::time::Instant,
) {
    let policy = context.policy();
    let machines = context.caches.machines.state();
    // A Cluster API Machine names its host through its Metal3Machine, read fresh each round.
    let resolved = match context.settings.machine_api {
        slim::MachineApi::OpenShift => None,
        slim::MachineApi::ClusterApi => {
            match crate::remediation::evidence::capi::hosts_of_machines(
                &context.clients.kube,
                &machines,
            )
            .await
            {
                Ok(resolved) => Some(resolved),
                Err(error) => {
                    // Nothing is known this round; the readiness shown stays as it was.
                    tracing::warn!(%error, "fencing readiness: Metal3Machines unreadable");
                    return;
                }
            }
        }
    };
    let mut targets = {
        let lookup = |r: &HostRef| {
            let key = kube::runtime::reflector::ObjectRef::new(&r.name).within(&r.namespace);
            context.caches.hosts.get(&key)
        };
        targets(&Fleet {
            machines: &machines,
            host: &lookup,
            host_bmcs: &context.caches.host_bmcs.state(),
            remediations: &context.caches.remediations.state(),
            policy: &policy,
            node_labels: &|name: &str| {
                let key = kube::runtime::reflector::ObjectRef::new(name);
                context.caches.nodes.get(&key).map(|n| n.labels().clone())
            },
            resolved_hosts: resolved.as_ref(),
        })
    };
    memory.retain(context, &targets);
    targets.retain(|t| !t.remediating);
    // Earliest first: a slot of the bounded stream is never held by a check that waits.
    targets.sort_by_key(|t| offset(seed, &t.key, interval));
    let probes = Probes {
        client: &context.clients.kube,
        connector: &context.clients.connector,
        strategies: &policy.strategies,
        reboot_key: &policy.reboot_key,
        timeout: PROBE_TIMEOUT.min(interval.max(Duration::from_secs(1))),
        terms: ProbeTerms {
            metrics: Some(context.metrics.power.clone()),
            witness: Some(context.witness.clone()),
            allow_insecure: policy.allow_insecure_bmc,
        },
    };
    let mut outcomes = futures_util::stream::iter(targets)
        .map(|target| {
            let probes = &probes;
            async move {
                let wait = offset(seed, &target.key, interval).saturating_sub(started.elapsed());
                tokio::time::sleep(wait).await;
                let readiness = check(probes, &target).await;
                (target, readiness)
            }
        })
        .buffer_unordered(CHECKS_AT_ONCE);
    while let Some((target, readiness)) = outcomes.next().await {
        memory.record(context, &target, &readiness).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remediation::decide::readiness::FencingPath;

    fn ready() -> Readiness {
        Readiness::Ready {
            path: FencingPath::Bmc {
                address: "redfish://bmc".into(),
                driver: "redfish",
            },
            said: "logged in".into(),
        }
    }

    fn not_ready(reason: Reason) -> Readiness {
        Readiness::NotReady {
            path: None,
            reason,
            detail: "why".into(),
        }
    }

    fn shown(reason: Option<Reason>) -> Shown {
        Shown {
            labels: FencingLabels {
                machine: "m/w0".into(),
                node: "w0".into(),
                path: "redfish".into(),
            },
            reason,
        }
    }

    #[test]
    fn an_event_is_told_only_when_readiness_changes() {
        let refused = Reason::CredentialsRefused;
        let cases = [
            (None, ready(), None),
            (
                None,
                not_ready(refused),
                Some((Severity::Warning, NOT_READY_EVENT)),
            ),
            (Some(shown(None)), ready(), None),
            (
                Some(shown(None)),
                not_ready(refused),
                Some((Severity::Warning, NOT_READY_EVENT)),
            ),
            (Some(shown(Some(refused))), not_ready(refused), None),
            (
                Some(shown(Some(refused))),
                not_ready(Reason::Unreachable),
                Some((Severity::Warning, NOT_READY_EVENT)),
            ),
            (
                Some(shown(Some(refused))),
                ready(),
                Some((Severity::Normal, READY_EVENT)),
            ),
        ];
        for (before, now, event) in cases {
            assert_eq!(
                change_event(before.as_ref(), &now),
                event,
                "{before:?} -> {now:?}"
            );
        }
    }

    #[test]
    fn a_line_names_the_path_and_the_reason() {
        assert_eq!(describe(&ready()), "BMC redfish://bmc: READY (logged in)");
        assert_eq!(
            describe(&not_ready(Reason::Unreachable)),
            "no fencing path: NOT READY: Unreachable: why"
        );
    }

    fn machine(name: &str, role: &str) -> Arc<slim::Machine> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "machine.openshift.io/v1beta1",
                "kind": "Machine",
                "metadata": {"name": name, "namespace": "m",
                    "labels": {crate::api::annotations::MACHINE_ROLE: role},
                    "annotations": {"metal3.io/BareMetalHost": format!("m/{name}")}},
                "status": {"nodeRef": {"name": name}},
            }))
            .unwrap(),
        )
    }

    fn remediation(machine: &str, phase: &str) -> Arc<Remediation> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "baremend.io/v1alpha1",
                "kind": "Remediation",
                "metadata": {"name": format!("{machine}-1"), "namespace": "m"},
                "spec": {"machineName": machine},
                "status": {"phase": phase},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn only_machines_baremend_would_remediate_are_checked_and_those_under_way_are_marked() {
        let machines = [
            machine("master-0", "master"),
            machine("worker-0", "worker"),
            machine("worker-1", "worker"),
            machine("worker-2", "worker"),
        ];
        let remediations = [
            remediation("worker-0", "PoweringOff"),
            remediation("worker-1", "Pending"),
            remediation("worker-2", "Succeeded"),
        ];
        let mut policy = RemediationPolicySpec::default();
        let none = |_: &HostRef| None;
        let listed = |policy: &RemediationPolicySpec| {
            targets(&Fleet {
                machines: &machines,
                host: &none,
                host_bmcs: &[],
                remediations: &remediations,
                policy,
                node_labels: &|_: &str| None,
                resolved_hosts: None,
            })
        };
        let all = listed(&policy);
        let keys: Vec<(&str, bool)> = all
            .iter()
            .map(|t| (t.key.as_str(), t.remediating))
            .collect();
        assert_eq!(
            keys,
            [
                ("m/master-0", false),
                ("m/worker-0", true),
                ("m/worker-1", false),
                ("m/worker-2", false),
            ]
        );
        let worker = &all[2];
        assert_eq!(worker.node, "worker-1");
        assert_eq!(
            worker.host,
            Ok(Some(HostRef {
                namespace: "m".into(),
                name: "worker-1".into(),
            }))
        );
        assert_eq!(
            worker.bmc,
            Err(NoBmc::NotNamed),
            "no cached host, no HostBmc"
        );
        assert_eq!(worker.reference.name.as_deref(), Some("worker-1"));

        policy.control_plane.enabled = false;
        let keys: Vec<String> = listed(&policy).into_iter().map(|t| t.key).collect();
        assert_eq!(keys, ["m/worker-0", "m/worker-1", "m/worker-2"]);
    }

    fn mapping(name: &str, machine: Option<&str>, node: &str) -> Arc<HostBmc> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "baremend.io/v1alpha1",
                "kind": "HostBmc",
                "metadata": {"name": name, "namespace": "hosts"},
                "spec": {"machineName": machine, "nodeName": node,
                    "address": format!("redfish://{name}.bmc"), "credentialsName": "s"},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn nodes_without_machines_are_checked_through_their_host_bmc_alone() {
        let machines = [machine("worker-0", "worker")];
        // One per Node without a Machine; one naming a Node that has a Machine (not a subject
        // of its own); a control-plane Node without a Machine.
        let host_bmcs = [
            mapping("upi-0", None, "upi-0"),
            mapping("w0", None, "worker-0"),
            mapping("upi-cp", None, "upi-cp"),
        ];
        let remediations: Vec<Arc<Remediation>> = vec![Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "baremend.io/v1alpha1",
                "kind": "Remediation",
                "metadata": {"name": "upi-0-1", "namespace": "hosts"},
                "spec": {"nodeName": "upi-0", "hostBmc": "upi-0"},
                "status": {"phase": "PoweringOff"},
            }))
            .unwrap(),
        )];
        let mut policy = RemediationPolicySpec::default();
        let none = |_: &HostRef| None;
        let labels = |node: &str| {
            (node == "upi-cp").then(|| {
                BTreeMap::from([(
                    "node-role.kubernetes.io/control-plane".to_string(),
                    String::new(),
                )])
            })
        };
        let listed = |policy: &RemediationPolicySpec| {
            targets(&Fleet {
                machines: &machines,
                host: &none,
                host_bmcs: &host_bmcs,
                remediations: &remediations,
                policy,
                node_labels: &labels,
                resolved_hosts: None,
            })
        };
        // The mappings' namespace is not one the policy trusts by default: none is checked.
        assert!(listed(&policy).iter().all(|t| !t.machineless));
        policy.trust.host_bmc_namespaces = vec!["hosts".into()];
        let all = listed(&policy);
        let keys: Vec<(&str, bool, bool)> = all
            .iter()
            .map(|t| (t.key.as_str(), t.machineless, t.remediating))
            .collect();
        assert_eq!(
            keys,
            [
                ("m/worker-0", false, false),
                ("hosts/upi-0", true, true),
                ("hosts/upi-cp", true, false),
            ]
        );
        let upi = &all[1];
        assert_eq!(upi.reference.kind.as_deref(), Some("Node"));
        assert_eq!(upi.host, Ok(None));
        assert_eq!(
            upi.bmc.as_ref().map(|b| b.address.as_str()),
            Ok("redfish://upi-0.bmc")
        );
        policy.control_plane.enabled = false;
        let keys: Vec<String> = listed(&policy).into_iter().map(|t| t.key).collect();
        assert_eq!(keys, ["m/worker-0", "hosts/upi-0"]);
    }

    #[test]
    fn the_metric_names_every_reason() {
        let names: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, crate::metrics::fencing::FENCING_REASONS);
    }
}
