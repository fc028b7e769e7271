//! The controller of Nodes without a Machine (platform none, UPI bare metal): a kube
//! `Controller` over the `HostBmc`s that name such a Node, whose passes are the Machine
//! controller's passes over a [`Subject::Node`] — the same state machine, proof, gates,
//! Events and metrics. Its trigger is the NodeHealthCheck's `NodeRemediation` named after
//! the Node; its host is reached through the `HostBmc`'s BMC only (`DirectBmc`: without a
//! Machine there is no BareMetalHost).
//!
//! It shares the Machine controller's caches and context (one remediation budget, one set
//! of gates). A `HostBmc` is the subject, not the Node or the request: it stays while the
//! Node is deleted and registers again, and while the health check deletes its request
//! after the proof, so a pass is woken through the whole cycle.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, ReflectHandle, Store};
use tracing::Instrument;

use crate::api::{HostBmc, NodeRemediation, Remediation, RemediationPolicy};
use crate::remediation::decide::state::unblocked_by;
use crate::remediation::decide::trust::machineless_node;
use crate::remediation::decide::trust::{Refusal, machine_claims, machineless_claims};
use crate::remediation::pass::context::Context;
use crate::remediation::pass::requeue_after_failure;
use crate::remediation::pass::subject::Subject;
use crate::remediation::requests::trigger::pass_for;
use crate::runtime::runner::{self, Action, every_object, woken};
use crate::{Error, Result};

/// What wakes the controller: its share of the Machine controller's watches.
pub(in crate::remediation) struct Feeds {
    /// The `HostBmc`s, its subjects.
    pub host_bmcs: (Store<HostBmc>, ReflectHandle<HostBmc>),
    /// The `HostBmc`s' changes again: each wakes the others naming its Node.
    pub claims: Option<ReflectHandle<HostBmc>>,
    /// The NodeHealthCheck's requests, named after Nodes.
    pub requests: ReflectHandle<NodeRemediation>,
    /// The Remediations (a Node subject's own, and any that ended: a gate may open).
    pub remediations: ReflectHandle<Remediation>,
    /// The policy (a change may unblock anything).
    pub policies: ReflectHandle<RemediationPolicy>,
    /// The Nodes that changed in what a pass reads of them.
    pub nodes: futures_util::stream::BoxStream<'static, Arc<Node>>,
}

/// Passes at once: few clusters have many Machine-less Nodes failing together, and the
/// gates decide starts one at a time anyway.
const PASSES_AT_ONCE: usize = 8;

/// How soon a refused `HostBmc` is judged again.
const REFUSED_RECHECK: Duration = Duration::from_secs(5);

/// Runs the controller until `shutdown` resolves.
pub(in crate::remediation) async fn run(
    context: Arc<Context>,
    feeds: Feeds,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (mappings, mapping_changes) = feeds.host_bmcs;
    let of_node = {
        let context = context.clone();
        move |node: &str| subject_of_node(&context, node)
    };
    let of_request = {
        let of_node = of_node.clone();
        move |request: Arc<NodeRemediation>| {
            of_node(&crate::remediation::requests::node_of_request(&request))
        }
    };
    // A Node's own annotations do not say whether it has a Machine (its kubelet may write
    // them): the pass checks the Machines' `status.nodeRef` (`node_has_machine`).
    let of_changed_node = {
        let of_node = of_node.clone();
        move |node: Arc<Node>| of_node(&node.name_any())
    };
    let remediations = context.caches.remediations.clone();
    let of_remediation =
        move |r: Arc<Remediation>| subjects_of_remediation(&r, &remediations, &of_node);
    let same_node = {
        let mappings = mappings.clone();
        move |changed: Arc<HostBmc>| claims_of_node(&mappings, &changed)
    };
    let claims = feeds
        .claims
        .map(|c| c.boxed())
        .unwrap_or_else(|| futures_util::stream::empty().boxed());
    let requests = futures_util::stream::select_all([
        woken(mapping_changes, |m: Arc<HostBmc>| {
            Some(ObjectRef::from_obj(&*m))
        }),
        woken(feeds.requests, of_request),
        woken(claims, same_node),
        woken(feeds.nodes, of_changed_node),
        woken(feeds.remediations, of_remediation),
        woken(feeds.policies, every_object(mappings.clone())),
    ]);
    runner::run(
        mappings,
        requests,
        PASSES_AT_ONCE,
        reconcile,
        error_policy,
        context,
        shutdown,
    )
    .await;
}

/// The `HostBmc` that is Machine-less Node `node`'s subject, if any (the one trusted claim).
fn subject_of_node(context: &Context, node: &str) -> Option<ObjectRef<HostBmc>> {
    let mappings = context.caches.host_bmcs.state();
    let trusted = context.policy().trust.host_bmc_namespaces;
    let claims = machineless_claims(&mappings, &trusted, &Default::default());
    claims
        .subjects
        .get(node)
        .map(|m| ObjectRef::from_obj(&***m))
}

/// The other `HostBmc`s naming the Node `changed` names: its appearance (or change) may contest
/// their claim (a deletion is not told on a shared stream: see `REFUSED_RECHECK`).
fn claims_of_node(mappings: &Store<HostBmc>, changed: &HostBmc) -> Vec<ObjectRef<HostBmc>> {
    let Some(node) = machineless_node(changed) else {
        return Vec::new();
    };
    let me = ObjectRef::from_obj(changed);
    mappings
        .state()
        .iter()
        .filter(|m| machineless_node(m) == Some(node))
        .map(|m| ObjectRef::from_obj(&**m))
        .filter(|m| *m != me)
        .collect()
}

/// The subjects a changed Remediation wakes: its own (a Node subject's), and when it ended
/// (which may open a gate) every Node subject whose start is held.
fn subjects_of_remediation(
    remediation: &Remediation,
    all: &Store<Remediation>,
    of_node: &impl Fn(&str) -> Option<ObjectRef<HostBmc>>,
) -> Vec<ObjectRef<HostBmc>> {
    let held = unblocked_by(remediation, || all.state());
    std::iter::once(remediation)
        .chain(held.iter().map(|r| &**r))
        .filter_map(|r| node_subject(r).and_then(of_node))
        .collect()
}

/// The Node of a Remediation of a Machine-less Node.
fn node_subject(remediation: &Remediation) -> Option<&str> {
    let spec = &remediation.spec;
    spec.of_machineless_node().then(|| spec.subject_name())
}

/// Reconciles one `HostBmc`: a pass over the Node it makes a subject, once the caches hold a
/// full picture.
async fn reconcile(mapping: Arc<HostBmc>, context: Arc<Context>) -> Result<Action> {
    if !context.caches_ready() {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    if mapping.spec.machine_name.is_some() {
        return tell_machine_claims(&context, &mapping).await;
    }
    let Some(node) = machineless_node(&mapping).map(str::to_string) else {
        return Ok(Action::await_change());
    };
    let namespace = mapping.namespace().unwrap_or_default();
    // Every mapping of the Node is told: a second one appearing wakes this pass only, and
    // the first is refused too.
    let mut refusal = None;
    let writes = context.leadership.writes()?;
    for (other, standing) in standings_of_node(&context, &node) {
        let conditions = other.status.as_ref().map(|s| s.conditions.as_slice());
        let consequence = "this HostBmc is not used for its Node";
        let told = (
            conditions.unwrap_or_default(),
            standing.as_ref(),
            consequence,
        );
        crate::remediation::requests::admission::tell_standing(&writes, &context, &*other, told)
            .await?;
        if ObjectRef::from_obj(&*other) == ObjectRef::from_obj(&*mapping) {
            refusal = standing;
        }
    }
    let pass = pass_for(Subject::Node(mapping.clone()), context.clone());
    // A refused mapping is nobody's subject; one whose remediation is past its start when it
    // is refused (a second mapping appeared) finishes that cycle: stopping halfway is the
    // dangerous state.
    // Looked at again in a while: the deletion of the mapping that contests it frees it, and a
    // deletion wakes no other object's pass.
    if refusal.is_some() && !pass.under_way() {
        return Ok(Action::requeue(REFUSED_RECHECK));
    }
    // A Node that has a Machine is its Machine's to remediate (the HostBmc then only tells
    // where its BMC is); one already under remediation as a Node finishes as one.
    if context.node_has_machine(&node) && !pass.under_way() {
        return Ok(Action::await_change());
    }
    let span = tracing::info_span!("remediate", node = %node, namespace = %namespace);
    let action = pass.run().instrument(span).await?;
    context.backoff.succeeded(&backoff_key(&mapping));
    Ok(action)
}

/// Tells every `HostBmc` naming `mapping`'s Machine whether it is used (see
/// [`machine_claims`], the rule `locate_bmc` applies): a second one appearing wakes this pass
/// only, and the first is refused too. A refused one is looked at again in a while: the
/// deletion of the one contesting it, or the policy listing its namespace, frees it.
async fn tell_machine_claims(context: &Context, mapping: &HostBmc) -> Result<Action> {
    let mappings = context.caches.host_bmcs.state();
    let trusted = context.policy().trust.host_bmc_namespaces;
    let me = ObjectRef::from_obj(mapping);
    let mut refused = false;
    let writes = context.leadership.writes()?;
    for (other, standing) in machine_claims(&mappings, &trusted) {
        let same_machine = other.namespace() == mapping.namespace()
            && other.spec.machine_name == mapping.spec.machine_name;
        if !same_machine {
            continue;
        }
        let conditions = other.status.as_ref().map(|s| s.conditions.as_slice());
        let told = (
            conditions.unwrap_or_default(),
            standing.as_ref(),
            "this HostBmc is not used for its Machine",
        );
        crate::remediation::requests::admission::tell_standing(&writes, context, &**other, told)
            .await?;
        if ObjectRef::from_obj(&**other) == me {
            refused = standing.is_some();
        }
    }
    Ok(if refused {
        Action::requeue(REFUSED_RECHECK)
    } else {
        Action::await_change()
    })
}

/// Every `HostBmc` naming Machine-less Node `node`, with why it is refused (None: it is the
/// Node's subject) (see [`machineless_claims`]).
fn standings_of_node(context: &Context, node: &str) -> Vec<(Arc<HostBmc>, Option<Refusal>)> {
    let mappings = context.caches.host_bmcs.state();
    let trusted = context.policy().trust.host_bmc_namespaces;
    let claims = machineless_claims(&mappings, &trusted, &Default::default());
    let subject = claims.subjects.get(node).map(|m| (*m).clone());
    claims
        .refused
        .into_iter()
        .filter(|(m, _)| machineless_node(m) == Some(node))
        .map(|(m, refusal)| (m.clone(), Some(refusal)))
        .chain(subject.map(|m| (m, None)))
        .collect()
}

fn backoff_key(mapping: &HostBmc) -> String {
    format!(
        "HostBmc/{}/{}",
        mapping.namespace().unwrap_or_default(),
        mapping.name_any()
    )
}

/// What a failed pass leads to (see [`crate::runtime::requeue`]).
fn error_policy(mapping: Arc<HostBmc>, error: &Error, context: Arc<Context>) -> Action {
    // Told on the Node, where its remediation's Events go; on the HostBmc itself if it
    // names none (a pass fails only for a Node, but no failure goes untold).
    let target = match mapping.spec.node_name.as_deref() {
        Some(node) => {
            let uid = context
                .caches
                .nodes
                .get(&ObjectRef::new(node))
                .and_then(|n| n.uid());
            crate::remediation::pass::subject::node_reference(node, uid)
        }
        None => kube::Resource::object_ref(mapping.as_ref(), &()),
    };
    crate::runtime::events::report_failed_pass(&context.clients.recorder, target, error);
    let key = backoff_key(&mapping);
    requeue_after_failure(&context, &Subject::Node(mapping), &key, error)
}
