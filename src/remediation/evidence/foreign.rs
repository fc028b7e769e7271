//! Coexistence with other remediators: the evidence the `ForeignRemediation` gate decides on
//! (read from the API server when a start is decided, never from a cache), and the legacy
//! actuator's Node backup, adopted by our backup and restore so that no label it saved is
//! lost.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use crate::api::annotations::{LEGACY_NODE_ANNOTATIONS_BACKUP, LEGACY_NODE_LABELS_BACKUP};
use crate::api::{
    ConditionType, EventReason, HOLDS_NOTHING, HostRef, NodeBackup, Remediation, RemediationPhase,
};
use crate::leader::Writes;
use crate::remediation::decide::gates::{
    ForeignEvidence, ForeignKind, ForeignObject, Held, Target, foreign_remediation,
    reboot_key_owner,
};
use crate::remediation::decide::observe::{foreign_object, legacy_marks, reboot_keys};
use crate::remediation::decide::state::set_condition;
use crate::remediation::evidence::fresh::FreshEvidence;
use crate::remediation::pass::Pass;
use crate::remediation::pass::context::Context;
use crate::remediation::world::execute;
use crate::runtime::events::Severity;
use crate::runtime::lock;
use crate::{Error, Result};

/// The pass's evidence of other remediators: the foreign objects and the legacy backup. Made by
/// `Foreign::of(pass)` where needed, so that a call names the file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct Foreign<'p> {
    pass: &'p Pass,
}

impl<'p> Foreign<'p> {
    /// The Foreign of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        Foreign { pass }
    }

    /// The `ForeignRemediation` gate, on evidence read now: the Machine, its BareMetalHost,
    /// and the other projects' remediation objects of the kinds the API server serves.
    /// `fresh.remediations`: every Remediation that may still hold a host, read fresh for the
    /// other gates too.
    pub(in crate::remediation) fn foreign_gate(
        self,
        remediation: &Remediation,
        fresh: &FreshEvidence,
    ) -> std::result::Result<(), Held> {
        let machine_marks = fresh
            .trigger
            .annotations
            .as_ref()
            .map(legacy_marks)
            .unwrap_or_default();
        let host = self.pass.host(remediation).map(|(host, _)| host);
        let reboot_keys = match &fresh.host {
            Some(Some(host)) => reboot_keys(host.annotations()),
            _ => Vec::new(),
        };
        let evidence = ForeignEvidence {
            machine_marks,
            reboot_keys,
            ours_requested: ours_requested(&fresh.remediations, remediation, host.as_ref()),
            objects: fresh.foreign.clone(),
        };
        let node = remediation
            .spec
            .node_name
            .clone()
            .or_else(|| self.pass.subject_node());
        let target = Target {
            namespace: &self.pass.namespace,
            machine: &self.pass.name,
            node: node.as_deref(),
            reboot_key: &self.pass.policy.reboot_key,
        };
        foreign_remediation(&target, &evidence)
    }

    /// Every object of the foreign kinds the API server serves now: discovery says which are
    /// served (a kind not served is no evidence, not an error), and each served kind is listed.
    /// The kinds served at the last start's discovery are listed beside this one's, so that
    /// where they are served (a Cluster API management cluster serves `Metal3Remediation`)
    /// the lists are not a round trip after it; a list is used only for a kind this discovery
    /// says is served at that version, and a kind served now that was not listed is listed
    /// after it. Every list is made after the start's mark, as before.
    pub(in crate::remediation) async fn foreign_objects(self) -> Result<Vec<ForeignObject>> {
        let context = &self.pass.context;
        let listed_before = lock(&context.discovered)
            .as_ref()
            .map(served_foreign_kinds)
            .unwrap_or_default();
        let early = listed_before
            .iter()
            .map(|(kind, version)| self.list_foreign(*kind, version));
        let (groups, early) = tokio::join!(
            context.clients.kube.list_api_groups(),
            futures_util::future::join_all(early)
        );
        let groups = groups.map_err(Error::kube("DiscoverApiGroups"))?;
        let served = served_foreign_kinds(&groups);
        *lock(&context.discovered) = Some(groups);
        let early = listed_before.into_iter().zip(early).collect();
        let lists = paired_with_early(served, early).into_iter().map(
            |((kind, version), listed)| async move {
                match listed {
                    Some(objects) => Ok(objects),
                    None => self.list_foreign(kind, &version).await,
                }
            },
        );
        let lists = futures_util::future::try_join_all(lists).await?;
        Ok(lists.into_iter().flatten().collect())
    }

    /// Every object of `kind` served at `version`, read now (a 404: the group is served, this
    /// kind at that version is not: none).
    async fn list_foreign(self, kind: ForeignKind, version: &str) -> Result<Vec<ForeignObject>> {
        let resource = foreign_resource(kind, version);
        let api = Api::<DynamicObject>::all_with(self.pass.context.clients.kube.clone(), &resource);
        match api.list(&ListParams::default()).await {
            Ok(list) => Ok(list
                .items
                .iter()
                .filter_map(|object| {
                    let json = serde_json::to_value(object).ok()?;
                    foreign_object(kind, &json)
                })
                .collect()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
            Err(error) => Err(Error::kube("ListForeignRemediations")(error)),
        }
    }

    /// At power-on: a reboot-API key that is not ours keeps the host off (the BareMetal
    /// Operator powers it on only once every `reboot.metal3.io/<key>` is gone), so the Node
    /// cannot come back. Named in the `PowerOnBlocked` condition and a Warning Event when
    /// found or changed, and the condition turned False once it is gone; a `NodeNeverReady`
    /// failure repeats it. Read from the cached host: it only tells, never acts.
    pub(in crate::remediation) async fn note_kept_off(
        self,
        writes: &Writes,
        remediation: &mut Remediation,
    ) -> Result<()> {
        let Some((host_ref, Some(host))) = self.pass.host(remediation) else {
            return Ok(());
        };
        let keys = reboot_keys(host.annotations());
        let host_name = format!("{}/{}", host_ref.namespace, host_ref.name);
        let kept_off = kept_off_by(&self.pass.policy.reboot_key, &keys, &host_name);
        let mut status = remediation.status.clone().unwrap_or_default();
        let told = status
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::PowerOnBlocked.as_str());
        let (truth, reason, message) = match &kept_off {
            Some(message) => (true, "RebootAnnotation", message.as_str()),
            None => (false, "NoRebootAnnotation", ""),
        };
        let unchanged = match told {
            Some(c) => c.is_true(ConditionType::PowerOnBlocked) == truth && c.message == message,
            // Never blocked: nothing to say.
            None => kept_off.is_none(),
        };
        if unchanged {
            return Ok(());
        }
        let now = self.pass.context.clock.now();
        set_condition(
            &mut status,
            ConditionType::PowerOnBlocked,
            truth,
            reason,
            message,
            now,
        );
        self.pass.persist(writes, remediation, status).await?;
        if let Some(message) = kept_off {
            self.pass
                .event(
                    remediation,
                    Severity::Warning,
                    EventReason::PowerOnBlocked,
                    message,
                )
                .await;
        }
        Ok(())
    }

    /// The legacy actuator's Node backup on this Machine, if any; a malformed one is told
    /// (Warning Event) and left in place.
    pub(in crate::remediation) async fn legacy_backup(
        self,
        remediation: &Remediation,
    ) -> Option<NodeBackup> {
        let annotations = self.pass.subject.machine_annotations()?;
        match execute::legacy_backup(annotations) {
            Ok(backup) => backup,
            Err(why) => {
                self.pass
                    .event(
                        remediation,
                        Severity::Warning,
                        EventReason::LegacyBackupUnreadable,
                        why,
                    )
                    .await;
                None
            }
        }
    }

    /// Adds the legacy actuator's backup to ours (ours, newer, wins a key both have).
    pub(in crate::remediation) async fn adopt_legacy_backup(
        self,
        remediation: &Remediation,
        backup: &mut NodeBackup,
    ) {
        if let Some(legacy) = self.legacy_backup(remediation).await {
            execute::adopt_backup(backup, legacy);
        }
    }

    /// After a restore: the legacy actuator's backup is on the Node again, so it leaves the
    /// Machine (an unreadable one stays, for an operator to read).
    pub(in crate::remediation) async fn drop_legacy_backup(self, writes: &Writes) -> Result<()> {
        let Some(annotations) = self.pass.subject.machine_annotations() else {
            return Ok(());
        };
        if !matches!(execute::legacy_backup(annotations), Ok(Some(_))) {
            return Ok(());
        }
        for key in [LEGACY_NODE_LABELS_BACKUP, LEGACY_NODE_ANNOTATIONS_BACKUP] {
            self.pass
                .annotate_machine(writes, key, None, "DropLegacyBackup")
                .await?;
        }
        Ok(())
    }

    /// Removes the legacy actuator's finalizer from the Node about to be released, telling
    /// it: the deletion would otherwise never finish.
    pub(in crate::remediation) async fn release_legacy_finalizer(
        self,
        writes: &Writes,
        remediation: &Remediation,
        node: &Node,
    ) -> Result<()> {
        let nodes = self.pass.node_api(remediation).await?;
        if execute::remove_legacy_finalizer(writes, nodes.api(), node).await? {
            let note = format!(
                "Node {}: the legacy actuator's finalizer removed (that actuator no longer does)",
                node.name_any()
            );
            self.pass
                .event(
                    remediation,
                    Severity::Normal,
                    EventReason::LegacyFinalizerRemoved,
                    note,
                )
                .await;
        }
        Ok(())
    }
}

/// What keeps the host off at power-on: the reboot-API keys on it other than ours, named with
/// who sets them, or None. Pure.
pub fn kept_off_by(ours: &str, keys: &[String], host: &str) -> Option<String> {
    let named: Vec<String> = keys
        .iter()
        .filter(|k| *k != ours)
        .map(|k| format!("reboot.metal3.io/{k} ({})", reboot_key_owner(k)))
        .collect();
    if named.is_empty() {
        return None;
    }
    Some(format!(
        "the BareMetalHost {host} carries {}: the BareMetal Operator keeps the host powered off while any reboot.metal3.io/<key> is there, so the Node cannot come back until it is removed (by its owner once done, or by hand)",
        named.join(", ")
    ))
}

/// Whether a Remediation of ours (other than `this`) on the same host asked it off and has
/// not withdrawn: one under way, or one that failed with the host left off. A pending one has
/// asked nothing yet, and the outcomes that hold nothing ([`HOLDS_NOTHING`]) withdrew it: the
/// same set a start's fresh read leaves out, so that read never lacks one that counts here.
fn ours_requested(ours: &[Arc<Remediation>], this: &Remediation, host: Option<&HostRef>) -> bool {
    let Some(host) = host else { return false };
    ours.iter().any(|r| {
        let phase = r.phase();
        (r.name_any(), r.namespace()) != (this.name_any(), this.namespace())
            && r.spec.host_ref().ok().flatten().as_ref() == Some(host)
            && phase != RemediationPhase::Pending
            && !HOLDS_NOTHING.contains(&phase)
    })
}

/// One discovery when the controller starts, noted as a start's is: the first start after a
/// controller (re)start — a failover in a storm — then reads the kinds served beside its own
/// discovery, as every later one does, instead of after it. Evidence of nothing by itself: each
/// start discovers again. A failure is only logged (the first start then discovers first).
pub(in crate::remediation) async fn discover_at_start(context: &Context) {
    match context.clients.kube.list_api_groups().await {
        Ok(groups) => *lock(&context.discovered) = Some(groups),
        Err(error) => tracing::debug!(%error, "the API groups not discovered at start"),
    }
}

/// `kind`'s resource at `version`.
pub(crate) fn foreign_resource(kind: ForeignKind, version: &str) -> ApiResource {
    ApiResource {
        group: kind.group().into(),
        api_version: format!("{}/{version}", kind.group()),
        version: version.into(),
        kind: kind.kind().into(),
        plural: kind.plural().into(),
    }
}

/// The foreign kinds `groups` serves, each at its group's preferred version.
pub(crate) fn served_foreign_kinds(
    groups: &k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList,
) -> Vec<(ForeignKind, String)> {
    ForeignKind::ALL
        .into_iter()
        .filter_map(|kind| {
            let group = groups.groups.iter().find(|g| g.name == kind.group())?;
            let version = group
                .preferred_version
                .as_ref()
                .or(group.versions.first())?
                .version
                .clone();
            Some((kind, version))
        })
        .collect()
}

/// Each kind `served` now, with its list made beside the discovery when one was made at that
/// version and answered; a list of a kind no longer served, or at another version, is dropped
/// (it is no evidence: the kind is listed again after the discovery, or not at all).
fn paired_with_early<T>(
    served: Vec<(ForeignKind, String)>,
    mut early: Vec<((ForeignKind, String), Result<T>)>,
) -> Vec<((ForeignKind, String), Option<T>)> {
    served
        .into_iter()
        .map(|kind| {
            let listed = early
                .iter()
                .position(|(was, list)| *was == kind && list.is_ok())
                .and_then(|at| early.swap_remove(at).1.ok());
            (kind, listed)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_made_beside_the_discovery_counts_only_for_a_kind_served_now_at_its_version() {
        use ForeignKind::*;
        let at = |kind: ForeignKind, version: &str| (kind, version.to_string());
        let failed = || {
            Err(Error::Invalid {
                object: "a list".into(),
                reason: "refused".into(),
            })
        };
        let served = vec![
            at(Metal3Remediation, "v1beta1"),
            at(SelfNodeRemediation, "v1alpha2"),
            at(FenceAgentsRemediation, "v1alpha1"),
            at(MachineDeletionRemediation, "v1alpha1"),
        ];
        let early = vec![
            (at(Metal3Remediation, "v1beta1"), Ok("metal3")),
            // Served at another version now: listed again.
            (
                at(SelfNodeRemediation, "v1alpha1"),
                Ok("self-node, old version"),
            ),
            // Failed beside the discovery: listed again.
            (at(FenceAgentsRemediation, "v1alpha1"), failed()),
        ];
        let paired = paired_with_early(served, early);
        let listed: Vec<_> = paired.iter().map(|(kind, list)| (kind.0, *list)).collect();
        assert_eq!(
            listed,
            [
                (Metal3Remediation, Some("metal3")),
                (SelfNodeRemediation, None),
                (FenceAgentsRemediation, None),
                (MachineDeletionRemediation, None),
            ]
        );
        // A kind listed before and no longer served is no evidence at all.
        let gone = paired_with_early(
            Vec::new(),
            vec![(at(Metal3Remediation, "v1beta1"), Ok("m"))],
        );
        assert!(gone.is_empty());
    }

    #[test]
    fn at_power_on_every_key_but_ours_is_named_with_its_owner() {
        let host = "openshift-machine-api/worker-0";
        assert_eq!(kept_off_by("baremend", &[], host), None);
        assert_eq!(kept_off_by("baremend", &["baremend".into()], host), None);
        let keys = [
            "baremend".to_string(),
            "metal3-remediation-4c1d".to_string(),
            "capbm-requested-power-off".to_string(),
        ];
        let said = kept_off_by("baremend", &keys, host).unwrap();
        assert!(
            said.starts_with(
                "the BareMetalHost openshift-machine-api/worker-0 carries \
                 reboot.metal3.io/metal3-remediation-4c1d (Cluster API Provider Metal3's remediation), \
                 reboot.metal3.io/capbm-requested-power-off (not baremend's"
            ),
            "{said}"
        );
        assert!(said.contains("keeps the host powered off"), "{said}");
        assert!(!said.contains("reboot.metal3.io/baremend "), "{said}");
    }

    /// A start's fresh read leaves out the Remediations whose outcome holds nothing: none of
    /// them may be one whose request keeps a host off, or the foreign gate would take our own
    /// request for another remediator's.
    #[test]
    fn an_outcome_left_out_of_the_fresh_read_is_never_ours_holding_the_host() {
        use crate::api::{RemediationSpec, RemediationStatus};
        let host = HostRef {
            namespace: "openshift-machine-api".into(),
            name: "worker-0".into(),
        };
        let remediation = |name: &str, phase| {
            let spec = RemediationSpec {
                host: Some("openshift-machine-api/worker-0".into()),
                ..RemediationSpec::of_machine("worker-0")
            };
            let mut object = Remediation::new(name, spec);
            object.metadata.namespace = Some("openshift-machine-api".into());
            object.status = Some(RemediationStatus {
                phase,
                ..RemediationStatus::default()
            });
            Arc::new(object)
        };
        let this = remediation("worker-0-2", RemediationPhase::Pending);
        for phase in HOLDS_NOTHING {
            let old = remediation("worker-0-1", phase);
            assert!(!ours_requested(&[old], &this, Some(&host)), "{phase:?}");
        }
        // The kept ones do count: a Failed one's request keeps the host off.
        let failed = remediation("worker-0-1", RemediationPhase::Failed);
        assert!(ours_requested(&[failed], &this, Some(&host)));
    }
}
