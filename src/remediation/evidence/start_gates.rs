//! What a start rests on: the safety gates over the fleet's health and the remediations
//! under way, and the fresh reads (the Machine's trigger, every Remediation) that confirm a
//! start decided on the caches, which may lag behind.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use crate::api::annotations::{EXTERNAL_REMEDIATION, PLANNED_REBOOT};
use crate::api::{EventReason, FenceStrategyName, HOLDS_NOTHING, OUTCOME_LABEL, Remediation};
use crate::api::{mco, slim};
use crate::remediation::decide::bmc_trust::{BmcLedger, Transport, transport};
use crate::remediation::decide::fence::HostRef;
use crate::remediation::decide::gates::{
    Candidate, Fleet, FleetHealth, Held, Launched, ListFreshness, Listed, MachineConfigView, Quiet,
    QuietEvidence, may_start, quiet_gate, quorum_guarded, running_machines,
};
use crate::remediation::decide::observe::{machine_is_control_plane, node_is_ready, node_view};
use crate::remediation::decide::workload::{ClusterRef, machine_cluster};
use crate::remediation::evidence::bmc::BmcLocator;
use crate::remediation::evidence::capi::CapiHosts;
use crate::remediation::evidence::foreign::Foreign;
use crate::remediation::evidence::fresh::{FreshEvidence, FreshTrigger};
use crate::remediation::evidence::health::{HealthAhead, HealthCount};
use crate::remediation::pass::Pass;
use crate::remediation::pass::context::Placement;
use crate::remediation::pass::subject::{node_is_control_plane, subject_key};
use crate::remediation::requests::trigger::Triggers;
use crate::remediation::world::execute::read_node;
use crate::runtime::clock::since_epoch;
use crate::runtime::events::Severity;
use crate::runtime::lock;
use crate::runtime::overlap::Overlapped;
use crate::runtime::read::GetPresent;
use crate::{Error, Result};
use baremend_drivers::BmcAddress;

/// The ClusterVersion (OpenShift's `config.openshift.io/v1`, cluster-scoped, one object).
const CLUSTER_VERSION_NAME: &str = "version";

/// The ClusterVersion's API group.
const CLUSTER_VERSION_GROUP: &str = "config.openshift.io";

/// The label selector of the Remediations that may still hold a host:
/// `baremend.io/outcome notin (Succeeded,Cancelled)`, which also selects the unlabelled ones.
pub(in crate::remediation) fn may_hold_a_host() -> String {
    let outcomes: Vec<&str> = HOLDS_NOTHING.iter().map(|p| p.as_str()).collect();
    format!("{OUTCOME_LABEL} notin ({})", outcomes.join(","))
}

/// The pass's observer at a start: the fresh reads and the gates judged on them. Made by
/// `StartGates::of(pass)` where needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct StartGates<'p> {
    pass: &'p Pass,
}

impl<'p> StartGates<'p> {
    /// The StartGates of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        StartGates { pass }
    }

    /// The gates for a start, decided on the caches and confirmed on fresh reads (the cache
    /// may lag behind a watch broken for seconds, and a start must never rest on it; nor may
    /// the power-off rest on a cached trigger, see `run`). Returns the verdict, whether the
    /// trigger is (still) there, and — when the cached gates let it start — what the last
    /// judgment under the start lock rests on, with `ahead`. No lock is held across these
    /// reads: a slow API server or BMC delays this start only.
    ///
    /// `health`: the fleet's health counted ahead (a start just created, see
    /// [`StartGates::fleet_health_ahead`]); None: counted here. The fresh reads ride beside
    /// the count while it is under way, as beside any wait of a start (see
    /// [`StartReads::fresh`]).
    ///
    /// `ahead`: what the power-off will need (its BMC made ready), started once the cached
    /// gates let a triggered start go, so that its round trips ride beside the fresh reads and
    /// the record rather than after them; a start the cached gates hold never polls it, so
    /// never contacts its BMC (what went before them, beside a new start's creation, sent
    /// nothing to the BMC: see `Pass::locate_ahead`).
    pub(in crate::remediation) async fn judge_start<R: Send + 'p>(
        self,
        remediation: &Remediation,
        node: Option<&Node>,
        reads: StartReads<'p>,
        (health, ahead): (Option<HealthAhead>, Overlapped<'p, R>),
    ) -> Result<Judged<'p, R>> {
        let triggered = Triggers::of(self.pass).triggered();
        let cached = self.pass.context.caches.remediations.state();
        let StartReads {
            mut launched,
            mark,
            mut fresh,
        } = reads;
        let health = match health {
            Some(counted) => {
                let again = self.fleet_health(remediation);
                fresh.beside(counted.finish(again)).await
            }
            None => fresh.beside(self.fleet_health(remediation)).await,
        };
        let held = self.gates(
            remediation,
            node,
            &mut launched,
            &cached,
            ListFreshness::Cached,
            &health,
        );
        if let Err(held) = held {
            return Ok((Err(held), triggered, None));
        }
        // The fresh reads on their way first: they are the start's next round trip, where the
        // BMC's readying only has to be done by the power-off, after the record.
        fresh.start().await;
        // Only a start with a trigger gets its BMC ready (an untriggered one is withdrawn).
        let mut ahead = triggered.then_some(ahead);
        if let Some(ahead) = &mut ahead {
            ahead.start().await;
        }
        // Every fresh read at once; the gates after them only judge.
        let judged = async {
            let fresh = fresh.finish().await?;
            let mut fleet_gates = |health: &FleetHealth| {
                let freshness = ListFreshness::ReadAfter(mark);
                self.gates(
                    remediation,
                    node,
                    &mut launched,
                    &fresh.remediations,
                    freshness,
                    health,
                )
            };
            let may = fleet_gates(&health);
            let may = self.judge_fresh(remediation, node, &fresh, may).await?;
            // The quorum guard judges again on the control plane's Nodes read now.
            let (may, health) = match may {
                Ok(()) if self.quorum_guarded(node) => {
                    let health = self.control_plane_read_now(remediation, health).await?;
                    (fleet_gates(&health), health)
                }
                may => (may, health),
            };
            Ok::<_, Error>((may, fresh, health))
        };
        let (may, fresh, health) = match &mut ahead {
            Some(ahead) => ahead.beside(judged).await?,
            None => judged.await?,
        };
        let basis = StartBasis {
            fresh: fresh.remediations,
            mark,
            health,
        };
        Ok((
            may,
            triggered && fresh.trigger.confirmed,
            Some((basis, ahead)),
        ))
    }

    /// The gates a start's fresh reads decide, after the fleet's (`may`): the upgrade's
    /// quiet, another remediator, the self-fence, the host's owner and watch, the workload
    /// cluster and the BMC. A hold that ends on its bound lets the start go, told.
    async fn judge_fresh(
        self,
        remediation: &Remediation,
        node: Option<&Node>,
        fresh: &FreshEvidence,
        may: std::result::Result<(), Held>,
    ) -> Result<std::result::Result<(), Held>> {
        let mut bound_reached = None;
        let may = match may {
            Ok(()) => match self.quiet_gate(remediation, node, fresh) {
                Quiet::Open => Ok(()),
                Quiet::Hold(held) => Err(held),
                Quiet::BoundReached(held) => {
                    bound_reached = Some(held);
                    Ok(())
                }
            },
            held => held,
        };
        let may = may.and_then(|()| Foreign::of(self.pass).foreign_gate(remediation, fresh));
        let may = match may {
            Ok(()) => self.self_fence_gate(remediation).await?,
            held => held,
        };
        let may =
            may.and_then(|()| CapiHosts::of(self.pass).host_owner_gate(remediation, &fresh.host));
        let may = may.and_then(|()| self.host_watched_gate(remediation, &fresh.host));
        let may = match may {
            Ok(()) => {
                CapiHosts::of(self.pass)
                    .workload_cluster_gate(remediation)
                    .await
            }
            held => held,
        };
        let may = may.and_then(|()| self.bmc_gate(remediation));
        let remediate = self.pass.policy.mode == crate::api::RemediationMode::Remediate;
        if let (Ok(()), Some(held), true) = (&may, bound_reached, remediate) {
            // Told when the start goes ahead (it leaves `Pending` in this pass), so once.
            let note = format!(
                "the hold ended: the policy's upgradeHold.maxSeconds ({} s) has passed since the request, and the start goes ahead although {held}",
                self.pass.policy.upgrade_hold.max_seconds
            );
            self.pass
                .event_action(
                    remediation,
                    Severity::Warning,
                    (
                        EventReason::HoldEnded,
                        &format!("HoldEndedBy{}", held.gate()),
                    ),
                    note,
                )
                .await;
        }
        Ok(may)
    }

    /// The start lock's mark, and the reads a start's last gates judge on, ready to go out
    /// (after the mark) beside the waits before those gates: see [`StartReads::fresh`].
    pub(in crate::remediation) async fn start_reads(
        self,
        remediation: &Remediation,
    ) -> StartReads<'p> {
        let (launched, mark) = {
            let launched = self.pass.context.starts.lock().await;
            (launched.clone(), launched.mark())
        };
        let host = self.pass.host(remediation).map(|(host, _)| host);
        StartReads {
            launched,
            mark,
            fresh: Overlapped::new(self.read_fresh(host)),
        }
    }

    /// The reads a start's last gates judge on, made at once. The ClusterVersion is read
    /// beside them where the last start's discovery found its group served; where it did not
    /// (a cluster that is not OpenShift: the read would only answer 404), only once this
    /// start's discovery (`Foreign::foreign_objects`) has found it served.
    async fn read_fresh(self, host: Option<HostRef>) -> Result<FreshEvidence> {
        let version_served = || self.cluster_version_served();
        let early = version_served();
        let (remediations, trigger, progressing, host, foreign) = tokio::try_join!(
            self.fresh_remediations(),
            self.fresh_trigger(),
            async {
                if early {
                    self.cluster_progressing().await.map(Some)
                } else {
                    Ok(None)
                }
            },
            self.recorded_host_now(host),
            Foreign::of(self.pass).foreign_objects(),
        )?;
        let cluster_progressing = match progressing {
            Some(read) => read,
            None if version_served() => self.cluster_progressing().await?,
            None => None,
        };
        Ok(FreshEvidence {
            remediations,
            trigger,
            cluster_progressing,
            host,
            foreign,
        })
    }

    /// The host recorded for the remediation, read now: None when none is recorded,
    /// `Some(None)` when it is not found.
    async fn recorded_host_now(
        self,
        host: Option<HostRef>,
    ) -> Result<Option<Option<slim::BareMetalHost>>> {
        let Some(host) = host else {
            return Ok(None);
        };
        let hosts: Api<slim::BareMetalHost> =
            Api::namespaced(self.pass.context.clients.kube.clone(), &host.namespace);
        let fresh = hosts
            .get_present(&host.name)
            .await
            .map_err(Error::kube("GetBareMetalHost"))?;
        Ok(Some(fresh))
    }

    /// Whether the Machine carries a trigger (the annotation, or a Cluster API request named
    /// after it), read from the API server now (not from the cache). A Machine that is gone
    /// carries none.
    pub(in crate::remediation) async fn trigger_confirmed(self) -> Result<bool> {
        Ok(self.fresh_trigger().await?.confirmed)
    }

    /// The Machine's annotations and its trigger, read from the API server now. A request
    /// the cache shows is read beside the Machine (one round trip on a start's path, not
    /// two); otherwise only when the Machine no longer carries the annotation.
    pub(in crate::remediation) async fn fresh_trigger(self) -> Result<FreshTrigger> {
        if self.pass.subject.machine().is_none() {
            // A Node without a Machine is asked for by its NodeHealthCheck's request only.
            let confirmed = Triggers::of(self.pass).request_confirmed().await?;
            return Ok(FreshTrigger {
                annotations: None,
                confirmed,
            });
        }
        let (annotations, request) = if Triggers::of(self.pass).cached_request().is_some() {
            let (annotations, request) = tokio::join!(
                self.pass.fresh_machine_annotations(),
                Triggers::of(self.pass).request_confirmed()
            );
            (annotations?, Some(request))
        } else {
            (self.pass.fresh_machine_annotations().await?, None)
        };
        let confirmed = match &annotations {
            // A request counts only for a Machine that exists.
            None => false,
            Some(annotations) if annotations.contains_key(EXTERNAL_REMEDIATION) => true,
            Some(_) => match request {
                Some(request) => request?,
                None => Triggers::of(self.pass).request_confirmed().await?,
            },
        };
        Ok(FreshTrigger {
            annotations,
            confirmed,
        })
    }

    /// Every Remediation that may still hold a host, read from the API server now (not from
    /// the cache): the ones whose [`OUTCOME_LABEL`] is not one of [`HOLDS_NOTHING`] — under
    /// way, `Failed` (our request keeps its host off, which the foreign gate must know) and
    /// dry runs. The ones that hold nothing are left out on the server: the history retention
    /// keeps would otherwise make every start's read grow.
    pub(in crate::remediation) async fn fresh_remediations(self) -> Result<Vec<Arc<Remediation>>> {
        let api: Api<Remediation> = Api::all(self.pass.context.clients.kube.clone());
        let list = api
            .list(&ListParams::default().labels(&may_hold_a_host()))
            .await
            .map_err(Error::kube("ListRemediations"))?;
        Ok(list.items.into_iter().map(Arc::new).collect())
    }

    /// The Machines' health, for the gates: taken once per step and used for both the cached
    /// and the fresh look at the Remediations. See [`HealthCount`].
    pub(in crate::remediation) async fn fleet_health(
        self,
        remediation: &Remediation,
    ) -> FleetHealth {
        self.health_count(self.pass.node_cluster(remediation))
            .await
            .tally()
    }

    /// The fleet's health of a start about to be created, counted off the pass's task (on a
    /// thread of its own) while the pass creates the Remediation: the count's CPU rides beside
    /// the creation's round trip instead of following it. What it counts is the caches' view,
    /// as [`StartGates::fleet_health`]'s a moment later is.
    pub(in crate::remediation) fn fleet_health_ahead(self) -> HealthAhead {
        HealthAhead::begin(self.health_count(self.pass.machine_node_cluster()))
    }

    /// What [`HealthCount`] counts for this pass's subject in `cluster` (its Node's), taken
    /// when awaited: it borrows nothing of the pass, so it may be taken on a task of its own.
    fn health_count(
        self,
        cluster: Option<ClusterRef>,
    ) -> impl Future<Output = HealthCount> + Send + 'static {
        HealthCount::take(
            self.pass.context.clone(),
            self.pass.policy.trust.host_bmc_namespaces.clone(),
            self.health_domain(),
            cluster,
        )
    }

    /// A Cluster API Machine's failure domain: its Cluster.
    fn health_domain(self) -> Option<ClusterRef> {
        self.pass
            .subject
            .machine()
            .filter(|_| self.pass.context.settings.machine_api == slim::MachineApi::ClusterApi)
            .and_then(machine_cluster)
    }

    /// The safety gates for a start, over `remediations` (`fresh`: read from the API server
    /// just now; otherwise the cache, which may lag).
    pub(in crate::remediation) fn gates(
        self,
        remediation: &Remediation,
        node: Option<&Node>,
        launched: &mut Launched,
        remediations: &[Arc<Remediation>],
        freshness: ListFreshness,
        health: &FleetHealth,
    ) -> std::result::Result<(), Held> {
        if let Some(by) = node.and_then(|n| n.annotations().get(PLANNED_REBOOT)) {
            return Err(Held::PlannedReboot { by: by.clone() });
        }
        let listed: Vec<Listed> = remediations
            .iter()
            .map(|r| Listed {
                namespace: r.namespace().unwrap_or_default(),
                name: r.name_any(),
                machine: subject_key(&r.spec),
                phase: r.phase(),
            })
            .collect();
        let mut running = running_machines(&listed, launched, &remediation.name_any(), freshness);
        let running_total = running.len();
        if let Some(members) = &health.members {
            running.retain(|machine| members.contains(machine));
        }
        let fleet = Fleet {
            machines: health.machines,
            unhealthy: health.unhealthy,
            running: running.len(),
            running_total,
            running_control_plane: running
                .iter()
                .filter(|machine| health.control_plane.contains(*machine))
                .count(),
            control_plane: health.control_plane.len(),
            control_plane_ready: health.control_plane_ready,
            out_of_service_taint: self.pass.context.settings.out_of_service_taint,
        };
        let candidate = Candidate {
            control_plane: self.candidate_is_control_plane(node),
            // Read now for a control-plane start (`control_plane_read_now`).
            node_ready: health
                .candidate_ready
                .unwrap_or_else(|| node_view(node).is_ready()),
        };
        may_start(candidate, fleet, &self.pass.policy)
    }

    /// Whether the candidate is a control-plane member whose start the quorum guard judges.
    fn quorum_guarded(self, node: Option<&Node>) -> bool {
        quorum_guarded(self.candidate_is_control_plane(node), &self.pass.policy)
    }

    /// Whether the candidate (the Machine, else its Node) is a control-plane member.
    fn candidate_is_control_plane(self, node: Option<&Node>) -> bool {
        match self.pass.subject.machine() {
            Some(machine) => machine_is_control_plane(machine.labels()),
            None => node.is_some_and(|n| node_is_control_plane(n.labels())),
        }
    }

    /// `health` with the Nodes of the control plane and the candidate's own read from the API
    /// server now, in the cluster they are in: the count is the caches', and a Node's watch
    /// may lag behind the request that names another member (see
    /// [`FleetHealth::with_fresh_control_plane`]). One round trip, for control-plane starts
    /// only; the reads go out at once.
    async fn control_plane_read_now(
        self,
        remediation: &Remediation,
        health: FleetHealth,
    ) -> Result<FleetHealth> {
        let candidate = remediation.spec.node_name.as_deref();
        let mut names: Vec<&str> = health
            .control_plane_nodes
            .iter()
            .map(String::as_str)
            .collect();
        names.extend(candidate);
        names.sort_unstable();
        names.dedup();
        let nodes = self.pass.node_api(remediation).await?;
        // Each a list by name, as every fresh read of a Node (no `get` on Nodes is granted).
        let reads = names.iter().map(|name| async {
            let node = read_node(&nodes, name).await?;
            Ok::<_, Error>(node.map(|n| (name.to_string(), node_is_ready(&n))))
        });
        let ready = futures_util::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
            .collect();
        Ok(health.with_fresh_control_plane(&ready, candidate))
    }

    /// The quiet gates (`ClusterUpgrading`, `MachineConfigUpdating`): the ClusterVersion read
    /// now, the Node's machine-config annotations as cached (the daemon writes them well
    /// before it drains or reboots), the bound counted from the Remediation's creation.
    pub(in crate::remediation) fn quiet_gate(
        self,
        remediation: &Remediation,
        node: Option<&Node>,
        fresh: &FreshEvidence,
    ) -> Quiet {
        let evidence = QuietEvidence {
            cluster_progressing: fresh.cluster_progressing.clone(),
            node: node.map(|n| (n.name_any(), machine_config_view(n.annotations()))),
        };
        let now = since_epoch(self.pass.context.clock.now());
        let created = crate::remediation::decide::state::created_at(remediation).unwrap_or(now);
        let bound = self.pass.policy.upgrade_hold.max_seconds;
        quiet_gate(&evidence, now.saturating_sub(created), bound)
    }

    /// Whether the last start's discovery found the ClusterVersion's group served (or none
    /// has looked yet).
    fn cluster_version_served(self) -> bool {
        lock(&self.pass.context.discovered)
            .as_ref()
            .is_none_or(|list| list.groups.iter().any(|g| g.name == CLUSTER_VERSION_GROUP))
    }

    /// The message of the ClusterVersion's `Progressing` condition when it is True; None
    /// when it is not, or where no ClusterVersion is served (not OpenShift).
    async fn cluster_progressing(self) -> Result<Option<String>> {
        let resource = ApiResource {
            group: CLUSTER_VERSION_GROUP.into(),
            version: "v1".into(),
            api_version: "config.openshift.io/v1".into(),
            kind: "ClusterVersion".into(),
            plural: "clusterversions".into(),
        };
        let api: Api<DynamicObject> =
            Api::all_with(self.pass.context.clients.kube.clone(), &resource);
        // A kind not served answers 404 too: no ClusterVersion, no upgrade.
        let version = api
            .get_present(CLUSTER_VERSION_NAME)
            .await
            .map_err(Error::kube("GetClusterVersion"))?;
        Ok(version.and_then(|v| progressing(&v.data)))
    }

    /// The self-fence gate: the leader does not fence the Node it runs on unless another
    /// replica is Ready on another Node to finish the remediation once this one is off.
    pub(in crate::remediation) async fn self_fence_gate(
        self,
        remediation: &Remediation,
    ) -> Result<std::result::Result<(), Held>> {
        let Some(placement) = &self.pass.context.settings.placement else {
            return Ok(Ok(()));
        };
        if remediation.spec.node_name.as_deref() != Some(placement.node.as_str()) {
            return Ok(Ok(()));
        }
        let pods: Api<Pod> =
            Api::namespaced(self.pass.context.clients.kube.clone(), &placement.namespace);
        let peers = pods
            .list(&ListParams::default().labels(&placement.peers))
            .await
            .map_err(Error::kube("ListPeerPods"))?;
        if peer_ready_elsewhere(&peers.items, placement) {
            Ok(Ok(()))
        } else {
            Ok(Err(Held::SelfFence {
                node: placement.node.clone(),
            }))
        }
    }

    /// The `HostNotWatched` gate: with `--host-selector`, a recorded host absent from the
    /// cache is read from the API server. Found, it is outside the selector: its reboot
    /// request could be neither re-asked nor followed, nor its BMC found, so the start is held
    /// and says how to mend it. Not found, the start goes on as for any missing host (the
    /// strategies say why nothing can be powered).
    pub(in crate::remediation) fn host_watched_gate(
        self,
        remediation: &Remediation,
        fresh_host: &Option<Option<slim::BareMetalHost>>,
    ) -> std::result::Result<(), Held> {
        let Some(selector) = &self.pass.context.settings.host_selector else {
            return Ok(());
        };
        let Some((host, None)) = self.pass.host(remediation) else {
            return Ok(());
        };
        match fresh_host {
            Some(Some(_)) => Err(Held::HostNotWatched {
                host: host.to_string(),
                selector: selector.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// The BMC gate: a host whose only path is its BMC (the policy names `DirectBmc`, and
    /// the BMC is found: its BareMetalHost, if any, is detached, so the reboot API cannot act
    /// on it) does not start while that BMC's Off would prove nothing — its transport is
    /// forgeable and the policy does not allow it, or it was seen contradicting itself
    /// lately. Held, not started and failed: a start would power the host off with no way
    /// to prove it, and leave the workloads stuck on a Node that cannot be released.
    ///
    /// A host fenced through its BareMetal Operator, whose Off our own reads of its BMC must
    /// corroborate (`corroborateRebootApi`), is held the same way while that BMC is
    /// untrustworthy: its reads would void any proof.
    pub(in crate::remediation) fn bmc_gate(
        self,
        remediation: &Remediation,
    ) -> std::result::Result<(), Held> {
        let strategies = &self.pass.policy.strategies;
        let ledger = &self.pass.context.witness.ledger;
        let now = since_epoch(self.pass.context.clock.now());
        if strategies.contains(&FenceStrategyName::DirectBmc)
            && let Ok(bmc) = BmcLocator::of(self.pass).locate_direct_bmc(remediation)
        {
            // An unusable address fails the proof with its own reason.
            let Ok(address) = BmcAddress::parse(&bmc.address) else {
                return Ok(());
            };
            let insecure = bmc.tls.insecure;
            return bmc_verdict(
                &address,
                insecure,
                self.pass.policy.allow_insecure_bmc,
                ledger,
                now,
            );
        }
        if !strategies.contains(&FenceStrategyName::BareMetalHostRebootApi)
            || !self.pass.policy.corroborate_reboot_api
        {
            return Ok(());
        }
        match BmcLocator::of(self.pass).operator_bmc_address(remediation) {
            Some(address) => distrust_verdict(&address, ledger, now),
            None => Ok(()),
        }
    }
}

/// What a start's gates begin with: the start lock's mark, the starts launched up to it, and
/// the fresh reads made after it.
pub(in crate::remediation) struct StartReads<'a> {
    /// The starts launched up to `mark`.
    pub(in crate::remediation) launched: Launched,
    /// [`Launched::mark`] before the fresh reads.
    pub(in crate::remediation) mark: u64,
    /// The fresh reads, sent beside the start's waits rather than after them (one after the
    /// other, the wait for a workload cluster's first list of Nodes and the fresh reads were
    /// most of a start's time). Never started: beside a wait that is at hand, as it is for a
    /// held start looked at again, no read goes out before the cached gates have judged, and
    /// a start they hold sends none.
    pub(in crate::remediation) fresh: Overlapped<'a, Result<FreshEvidence>>,
}

/// A start's verdict, whether its trigger is (still) there, and — when the cached gates let
/// it start — what its last judgment rests on and what was made ready beside it (None:
/// nothing, the cache showing no trigger; see [`StartGates::judge_start`]).
pub(in crate::remediation) type Judged<'a, R> = (
    std::result::Result<(), Held>,
    bool,
    Option<(StartBasis, Option<Overlapped<'a, R>>)>,
);

/// What the last judgment of a start rests on: the fresh reads its gates were confirmed on.
pub(in crate::remediation) struct StartBasis {
    /// Every Remediation, read from the API server after `mark`.
    pub(in crate::remediation) fresh: Vec<Arc<Remediation>>,
    /// [`crate::remediation::decide::gates::Launched::mark`] before the list was read.
    pub(in crate::remediation) mark: u64,
    /// The fleet's health the gates counted.
    pub(in crate::remediation) health: FleetHealth,
}

/// Whether a BMC's Off could prove its host off now (see [`StartGates::bmc_gate`]).
pub fn bmc_verdict(
    address: &BmcAddress,
    skip_verify: bool,
    allow_insecure: bool,
    ledger: &BmcLedger,
    now: std::time::Duration,
) -> std::result::Result<(), Held> {
    if let Transport::Forgeable(why) = transport(address, skip_verify)
        && !allow_insecure
    {
        return Err(Held::InsecureBmc {
            bmc: address.to_string(),
            why: why.to_string(),
        });
    }
    distrust_verdict(address, ledger, now)
}

/// Whether the BMC at `address` is trusted now: held (`BmcUntrustworthy`) while the ledger
/// marks it, whatever reads it — the direct proof or the corroboration of its operator.
fn distrust_verdict(
    address: &BmcAddress,
    ledger: &BmcLedger,
    now: std::time::Duration,
) -> std::result::Result<(), Held> {
    match ledger.distrusted(&address.to_string(), now) {
        Some(mark) => Err(Held::BmcUntrustworthy {
            bmc: address.to_string(),
            why: mark.to_string(),
        }),
        None => Ok(()),
    }
}

/// Whether a pod other than this one, on another Node, is Ready and not being deleted.
pub fn peer_ready_elsewhere(pods: &[Pod], me: &Placement) -> bool {
    pods.iter().any(|pod| {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        ready
            && pod.metadata.deletion_timestamp.is_none()
            && pod.metadata.name.as_deref() != Some(me.pod.as_str())
            && node.is_some_and(|n| n != me.node)
    })
}

/// The ClusterVersion's `Progressing` condition, when True: its message (or a placeholder).
fn progressing(data: &serde_json::Value) -> Option<String> {
    let conditions = data.pointer("/status/conditions")?.as_array()?;
    let condition = conditions
        .iter()
        .find(|c| c["type"] == "Progressing" && c["status"] == "True")?;
    let message = condition["message"].as_str().unwrap_or_default();
    Some(if message.is_empty() {
        "no message".to_string()
    } else {
        message.chars().take(256).collect()
    })
}

/// A Node's machine-config annotations.
fn machine_config_view(
    annotations: &std::collections::BTreeMap<String, String>,
) -> MachineConfigView {
    let get = |key: &str| annotations.get(key).cloned();
    MachineConfigView {
        current: get(mco::CURRENT_CONFIG),
        desired: get(mco::DESIRED_CONFIG),
        current_image: get(mco::CURRENT_IMAGE),
        desired_image: get(mco::DESIRED_IMAGE),
        state: get(mco::STATE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Placement {
        Placement {
            node: "worker-0".into(),
            namespace: "baremend".into(),
            pod: "baremend-a".into(),
            peers: "app.kubernetes.io/name=baremend".into(),
        }
    }

    fn pod(name: &str, node: &str, ready: bool, deleting: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "deletionTimestamp": deleting.then_some("2026-01-01T00:00:00Z"),
            },
            "spec": {"nodeName": node, "containers": []},
            "status": {"conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]},
        }))
        .unwrap()
    }

    #[test]
    fn a_cluster_version_is_progressing_only_with_its_condition_true() {
        let version = |conditions: serde_json::Value| serde_json::json!({"status": {"conditions": conditions}});
        assert_eq!(progressing(&serde_json::json!({})), None);
        assert_eq!(progressing(&version(serde_json::json!([]))), None);
        let done = version(serde_json::json!([
            {"type": "Available", "status": "True", "message": "Done applying 4.17.2"},
            {"type": "Progressing", "status": "False", "message": "Cluster version is 4.17.2"},
        ]));
        assert_eq!(progressing(&done), None);
        let upgrading = version(serde_json::json!([
            {"type": "Progressing", "status": "True", "message": "Working towards 4.17.3: 106 of 890 done (11% complete)"},
        ]));
        assert_eq!(
            progressing(&upgrading).as_deref(),
            Some("Working towards 4.17.3: 106 of 890 done (11% complete)")
        );
        let silent = version(serde_json::json!([{"type": "Progressing", "status": "True"}]));
        assert_eq!(progressing(&silent).as_deref(), Some("no message"));
    }

    #[test]
    fn the_machine_config_annotations_are_read_by_their_keys() {
        let annotations = [
            (mco::CURRENT_CONFIG, "rendered-worker-a"),
            (mco::DESIRED_CONFIG, "rendered-worker-b"),
            (mco::STATE, "Working"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let view = machine_config_view(&annotations);
        assert_eq!(view.current.as_deref(), Some("rendered-worker-a"));
        assert_eq!(view.desired.as_deref(), Some("rendered-worker-b"));
        assert_eq!(view.state.as_deref(), Some("Working"));
        assert_eq!(view.current_image, None);
        assert!(view.updating().is_some());
    }

    #[test]
    fn only_a_ready_peer_on_another_node_lets_the_leader_fence_its_own_node() {
        assert!(!peer_ready_elsewhere(&[], &me()));
        let alone = [pod("baremend-a", "worker-0", true, false)];
        assert!(!peer_ready_elsewhere(&alone, &me()), "this pod is no peer");
        let same_node = [pod("baremend-b", "worker-0", true, false)];
        assert!(!peer_ready_elsewhere(&same_node, &me()), "it dies too");
        let not_ready = [pod("baremend-b", "worker-1", false, false)];
        assert!(!peer_ready_elsewhere(&not_ready, &me()));
        let leaving = [pod("baremend-b", "worker-1", true, true)];
        assert!(!peer_ready_elsewhere(&leaving, &me()));
        let peer = [
            pod("baremend-a", "worker-0", true, false),
            pod("baremend-b", "worker-1", true, false),
        ];
        assert!(peer_ready_elsewhere(&peer, &me()));
    }

    #[test]
    fn a_bmc_start_waits_for_a_secure_transport_or_consent_and_for_trust() {
        use crate::remediation::decide::bmc_trust::{Reader, Reading, Request};
        use baremend_drivers::PowerState;
        use std::time::Duration;
        let ledger = BmcLedger::new(Duration::from_secs(60));
        let now = Duration::from_secs(1000);
        let parse = |a: &str| BmcAddress::parse(a).unwrap();
        let verified = parse("redfish://bmc-0/redfish/v1/Systems/1");
        assert_eq!(bmc_verdict(&verified, false, false, &ledger, now), Ok(()));
        let plain = parse("redfish+http://bmc-0");
        let held = bmc_verdict(&plain, false, false, &ledger, now).unwrap_err();
        assert_eq!(held.gate(), "InsecureBmc");
        assert!(held.to_string().contains("plain HTTP"), "{held}");
        assert_eq!(bmc_verdict(&plain, false, true, &ledger, now), Ok(()));
        let held = bmc_verdict(&verified, true, false, &ledger, now).unwrap_err();
        assert!(held.to_string().contains("verification is off"), "{held}");
        assert_eq!(bmc_verdict(&verified, true, true, &ledger, now), Ok(()));
        assert_eq!(
            bmc_verdict(&parse("ipmi://bmc-0"), false, false, &ledger, now),
            Ok(())
        );
        // Seen contradicting itself: held until the mark expires, consent or not.
        let bmc = verified.to_string();
        ledger.requested(&bmc, Request::Off, now);
        for (ms, state) in [(1, PowerState::Off), (2, PowerState::On)] {
            let at = now + Duration::from_millis(ms);
            let by = Reader::Fencing;
            ledger.record(&bmc, Reading { at, state, by }, at);
        }
        let held = bmc_verdict(
            &verified,
            false,
            true,
            &ledger,
            now + Duration::from_secs(1),
        );
        assert_eq!(held.unwrap_err().gate(), "BmcUntrustworthy");
        let later = now + Duration::from_secs(61);
        assert_eq!(bmc_verdict(&verified, false, false, &ledger, later), Ok(()));
    }
}
