//! The drift coordinator: a kube `Controller` over Nodes. Each pass classifies the node,
//! opens a DriftRemediation for new drift, and drives an open one a step (see [`super::pass`]).
//! Pools, DriftRemediations, MachineConfigNodes and the policy are watched; a remediation
//! that ends wakes the nodes its pool holds.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Client, ResourceExt};
use tracing::{Instrument, info, warn};

use super::classify::{ConfigState, classify};
pub use super::context::{DriftCaches, DriftContext, DriftOptions};
pub use super::helper::HelperPods;
use super::in_play::{self, Marked};
use super::pass::Pass;
use crate::api::mco::{MachineConfigNode, MachineConfigPool};
use crate::api::{DriftPolicy, DriftRemediation};
use crate::metrics::Metrics;
use crate::runtime::clock::Clock;
use crate::runtime::informer::{informer, watch_config};
use crate::runtime::node_watch::{NodeFeed, watch_nodes};
use crate::runtime::tasks::Background;
use crate::{Error, Result};

/// Whether the API serves MachineConfigPools (an OpenShift cluster with the MCO).
pub async fn mco_served(client: &Client) -> bool {
    let pools: Api<MachineConfigPool> = Api::all(client.clone());
    pools
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .is_ok()
}

/// Runs the coordinator until `shutdown` resolves.
pub async fn run(
    client: Client,
    clock: Arc<dyn Clock>,
    options: DriftOptions,
    node_feed: Option<NodeFeed>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<()> {
    let _running = Running::shown(&options.metrics);
    let config = watch_config();
    // Alone, it watches Nodes itself; beside the machine controller, it shares its watch.
    let (node_feed, own_node_watch) = match node_feed {
        Some(feed) => (feed, None),
        None => {
            let (mut feeds, task) = watch_nodes(&client, 1)?;
            (feeds.remove(0), Some(task))
        }
    };
    let (pools, pool_stream) = informer(Api::all(client.clone()), config.clone());
    let (remediations, remediation_stream) = informer(Api::all(client.clone()), config.clone());
    let (machine_remediations, machine_stream) = informer(Api::all(client.clone()), config.clone());
    let (policies, policy_stream) = informer(Api::all(client.clone()), config.clone());
    let (mcns, mcn_task) = watch_machine_config_nodes(&client, config).await;
    let caches = DriftCaches {
        nodes: node_feed.store.clone(),
        pools,
        mcns,
        remediations: remediations.clone(),
        machine_remediations,
        policies,
    };
    // The generation of the policy the passes read, written on it (see `observed.rs`).
    let policy_changed = Arc::new(tokio::sync::Notify::new());
    let observed = Background::spawn(crate::runtime::observed::run(
        Api::<DriftPolicy>::all(client.clone()),
        caches.policies.clone(),
        policy_changed.clone(),
    ));
    let context = Arc::new(DriftContext::new(client, clock, caches, options));
    let gauges = {
        let context = context.clone();
        Background::every(Duration::from_secs(1), move || context.refresh_metrics())
    };
    let store = remediations.clone();
    let by_node = move |remediation: DriftRemediation| nodes_of_remediation(&remediation, &store);
    // A pool's budget or a machine remediation changing matters only to the Nodes in play
    // (drifted, or with a remediation or a mark to carry on or clean up): on a large cluster
    // waking every Node at each of those changes kept thousands of passes busy. A policy
    // change (rare) may change what counts, so it wakes them all.
    // The marked Nodes come from an index the Node stream keeps (`in_play.rs`), not a walk.
    let nodes = node_feed.store.clone();
    let open = remediations.clone();
    let marked = Arc::new(Marked::default());
    let index = marked.clone();
    let in_play = futures_util::stream::select(pool_stream.map(|_| ()), machine_stream.map(|_| ()))
        .flat_map(move |()| {
            futures_util::stream::iter(nodes_in_play(&index.nodes(&nodes), &open.state()))
        });
    // A policy change (rare) may change what is done for any Node drift concerns.
    let nodes = node_feed.store.clone();
    let all = remediations.clone();
    let policy_wakes = policy_stream.flat_map(move |_| {
        policy_changed.notify_one();
        let remediated = nodes_with_remediations(&all.state());
        let concerned: Vec<ObjectRef<Node>> = nodes
            .state()
            .iter()
            .filter(|node| concerns_drift(node, |name| remediated.contains(name)))
            .map(|node| ObjectRef::from_obj(node.as_ref()))
            .collect();
        futures_util::stream::iter(concerned)
    });
    // The kubelets' status updates change every Node all the time: only the changes of a Node
    // drift concerns start a pass.
    let all = remediations.clone();
    let reports = context.clone();
    let node_changes = node_feed.changes.filter(move |node| {
        // Looked up only for a Node whose annotations do not already say (the common case of a
        // status update on a healthy Node ends here).
        let has_history = |name: &str| {
            reports
                .reported
                .lock()
                .is_ok_and(|reported| reported.contains_key(name))
                || all.state().iter().any(|r| r.spec.node_name == name)
        };
        // Classified once for both: this runs on every status update of every Node.
        let state = classify(node.annotations());
        marked.saw(node, in_play::marked_as(node, &state));
        std::future::ready(concerns_drift_as(node, &state, has_history))
    });
    Controller::for_shared_stream(node_changes, node_feed.store)
        .with_config(kube::runtime::controller::Config::default().concurrency(PASSES_AT_ONCE))
        .watches_stream(remediation_stream, by_node)
        .reconcile_on(in_play)
        .reconcile_on(policy_wakes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                warn!(%error, "drift reconcile failed");
            }
        })
        .await;
    drop((observed, gauges, mcn_task, own_node_watch));
    context.refresh_metrics();
    info!("drift coordinator stopped");
    Ok(())
}

/// MachineConfigNodes are optional (served from OpenShift 4.15 on): without them the store
/// stays empty and the annotations decide. The task drives the watch where they are served.
async fn watch_machine_config_nodes(
    client: &Client,
    config: watcher::Config,
) -> (Store<MachineConfigNode>, Option<Background>) {
    let api: Api<MachineConfigNode> = Api::all(client.clone());
    let served = api
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .is_ok();
    let (mcns, changes) = informer(api, config);
    let task = served.then(|| Background::spawn(changes.for_each(|_| async {})));
    (mcns, task)
}

/// The Nodes a changed DriftRemediation wakes: its own, and when it ended (which frees
/// budget) every Node with an open remediation.
fn nodes_of_remediation(
    remediation: &DriftRemediation,
    all: &Store<DriftRemediation>,
) -> Vec<ObjectRef<Node>> {
    let mut wake = vec![ObjectRef::<Node>::new(&remediation.spec.node_name)];
    if remediation
        .status
        .as_ref()
        .is_some_and(|s| s.phase.is_terminal())
    {
        wake.extend(
            all.state()
                .iter()
                .filter(|r| r.status.as_ref().is_some_and(|s| !s.phase.is_terminal()))
                .map(|r| ObjectRef::new(&r.spec.node_name)),
        );
    }
    wake
}

/// Shows the coordinator running (`baremend_drift_coordinator_running` at 1) while it
/// lives, and stopped when it ends or its future is dropped (leadership lost).
struct Running(Arc<Metrics>);

impl Running {
    fn shown(metrics: &Arc<Metrics>) -> Self {
        metrics.drift.set_running(true);
        Running(metrics.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.drift.set_running(false);
    }
}

/// At most this many drift passes at once (a policy change wakes every Node drift concerns).
const PASSES_AT_ONCE: u16 = 16;

/// The names of the Nodes with a DriftRemediation, open or ended.
fn nodes_with_remediations(
    remediations: &[Arc<DriftRemediation>],
) -> std::collections::HashSet<String> {
    remediations
        .iter()
        .map(|r| r.spec.node_name.clone())
        .collect()
}

/// Whether a Node's change may concern the drift coordinator: the MCO reports it degraded
/// (drift to remediate, or another cause to report), it carries our planned-reboot mark, or it
/// has a history with us (`has_history`, asked of the Node's name only when the annotations do
/// not decide): a not-drift degradation reported (the pass that sees it recover forgets the
/// report) or a DriftRemediation (an open one to drive; an ended one may still owe a cleanup,
/// and the planned-reboot guard reads the last one's persisted state). On any other Node a pass
/// has nothing to do.
fn concerns_drift(node: &Node, has_history: impl Fn(&str) -> bool) -> bool {
    concerns_drift_as(node, &classify(node.annotations()), has_history)
}

/// [`concerns_drift`], for a Node whose annotations were classified already (`state`).
fn concerns_drift_as(node: &Node, state: &ConfigState, has_history: impl Fn(&str) -> bool) -> bool {
    in_play::marked_as(node, state)
        || matches!(state, ConfigState::Degraded(_))
        || has_history(&node.name_any())
}

/// The Nodes a pool or machine-remediation change may concern: drifted ones and ones
/// carrying our planned-reboot mark (of `nodes`: the caller may pass only those, see
/// [`Marked`]), and ones with an open remediation or with a terminal one that still owes a
/// cleanup.
fn nodes_in_play(
    nodes: &[Arc<Node>],
    remediations: &[Arc<DriftRemediation>],
) -> Vec<ObjectRef<Node>> {
    let mut names: std::collections::BTreeSet<String> = remediations
        .iter()
        .filter(|r| {
            r.status
                .as_ref()
                .is_none_or(|s| !s.phase.is_terminal() || s.force_file_written || s.cordoned_by_us)
        })
        .map(|r| r.spec.node_name.clone())
        .collect();
    names.extend(
        nodes
            .iter()
            .filter(|n| in_play::marked(n))
            .map(|n| n.name_any()),
    );
    names.iter().map(|name| ObjectRef::new(name)).collect()
}

async fn reconcile(node: Arc<Node>, context: Arc<DriftContext>) -> Result<Action> {
    let name = node.name_any();
    let span = tracing::info_span!("drift", node = %name);
    if !context.caches_ready() {
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let action = Pass::new(node, context.clone())
        .run()
        .instrument(span)
        .await?;
    context.backoff.succeeded(&name);
    Ok(action)
}

/// A backoff for a transient failure, a wait for a change for a terminal one (see
/// [`crate::runtime::requeue`]).
fn error_policy(node: Arc<Node>, error: &Error, context: Arc<DriftContext>) -> Action {
    let target = kube::Resource::object_ref(node.as_ref(), &());
    crate::runtime::events::report_failed_pass(&context.recorder, target, error);
    let base = context.poll.max(Duration::from_secs(1));
    context.backoff.failed(&node.name_any(), error, base).into()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::annotations::PLANNED_REBOOT;

    fn node(name: &str, annotations: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "annotations": annotations}}))
                .unwrap(),
        )
    }

    fn remediation(node: &str, status: serde_json::Value) -> Arc<DriftRemediation> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "baremend.io/v1alpha1", "kind": "DriftRemediation",
                "metadata": {"name": format!("{node}-1")},
                "spec": {"nodeName": node, "kind": "Content", "target": "/etc/x", "action": "Force"},
                "status": status,
            }))
            .unwrap(),
        )
    }

    fn mco(state: &str, reason: &str) -> serde_json::Value {
        let rendered = "rendered-worker-1";
        json!({
            crate::api::mco::STATE: state,
            crate::api::mco::CURRENT_CONFIG: rendered,
            crate::api::mco::DESIRED_CONFIG: rendered,
            crate::api::mco::REASON: reason,
        })
    }

    #[test]
    fn a_node_change_concerns_drift_only_when_degraded_reported_marked_or_ever_remediated() {
        let remediations = [
            remediation("open", json!({"phase": "Debouncing"})),
            remediation("ended", json!({"phase": "Succeeded"})),
        ];
        let remediated = nodes_with_remediations(&remediations);
        let cases = [
            (node("in-sync", mco("Done", "")), false),
            (node("unmanaged", json!({})), false),
            (node("working", mco("Working", "")), false),
            (
                node(
                    "degraded-otherwise",
                    mco("Degraded", "failed to drain node"),
                ),
                true,
            ),
            (
                node(
                    "drifted",
                    mco("Degraded", r#"content mismatch for file "/etc/x""#),
                ),
                true,
            ),
            (node("marked", json!({PLANNED_REBOOT: "marked-1"})), true),
            // A remediation, open or ended, keeps every change of its Node in view: an
            // ended one may still owe a cleanup or guard a late MCO reboot.
            (node("open", mco("Done", "")), true),
            (node("ended", mco("Working", "")), true),
        ];
        for (node, expected) in cases {
            assert_eq!(
                concerns_drift(&node, |name| remediated.contains(name)),
                expected,
                "{}",
                node.name_any()
            );
        }
        // A not-drift degradation reported before: its recovery must reach a pass.
        let reported = |name: &str| name == "recovered";
        assert!(concerns_drift(
            &node("recovered", mco("Done", "")),
            reported
        ));
    }

    #[test]
    fn only_drifted_marked_or_remediated_nodes_are_in_play() {
        let nodes = [
            node("in-sync", mco("Done", "")),
            node(
                "drifted",
                mco("Degraded", r#"content mismatch for file "/etc/x""#),
            ),
            node(
                "degraded-otherwise",
                mco("Degraded", "failed to drain node"),
            ),
            node("marked", json!({PLANNED_REBOOT: "marked-1"})),
            node("unmanaged", json!({})),
            node("open", mco("Done", "")),
            node("owes-cleanup", mco("Done", "")),
            node("ended", mco("Done", "")),
        ];
        let remediations = [
            remediation("open", json!({"phase": "Debouncing"})),
            remediation(
                "owes-cleanup",
                json!({"phase": "Succeeded", "forceFileWritten": true}),
            ),
            remediation("ended", json!({"phase": "Succeeded"})),
        ];
        let mut woken: Vec<String> = nodes_in_play(&nodes, &remediations)
            .into_iter()
            .map(|r| r.name)
            .collect();
        woken.sort();
        assert_eq!(woken, ["drifted", "marked", "open", "owes-cleanup"]);
    }
}
