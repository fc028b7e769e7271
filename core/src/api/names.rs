//! The names baremend stores in its objects' status — the steps of a remediation and the
//! types of its conditions — as enums, so that code matches on variants and never on a
//! string typed twice. Each serialises to the text stored today (`as_str`), so objects
//! written by an earlier version stay readable, and `parse` reads a stored name back (an
//! unknown one, from a newer version, reads as `None`).
//!
//! A status field holding such a name is a [`Stored`]: the variant when this version knows
//! the name, else the text as written (by a newer version), kept so that writing the status
//! back loses nothing and one unknown name never makes the whole object unreadable.

use std::borrow::Cow;

/// A fieldless enum stored by name (see the module doc).
pub trait StoredName: Copy + Eq + 'static {
    /// The name as stored.
    fn as_str(self) -> &'static str;
    /// The variant a stored name stands for, if this version knows it.
    fn parse(text: &str) -> Option<Self>;
}

/// A name read from (or written to) status: see the module doc.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stored<T> {
    /// A name this version knows.
    Known(T),
    /// A name this version does not know, as written.
    Unknown(String),
}

impl<T: StoredName> Stored<T> {
    /// The variant, when this version knows the name.
    pub fn known(&self) -> Option<T> {
        match self {
            Stored::Known(name) => Some(*name),
            Stored::Unknown(_) => None,
        }
    }

    /// The name as stored.
    pub fn as_str(&self) -> &str {
        match self {
            Stored::Known(name) => name.as_str(),
            Stored::Unknown(text) => text,
        }
    }
}

impl<T> From<T> for Stored<T> {
    fn from(name: T) -> Self {
        Stored::Known(name)
    }
}

/// A name read from text: the variant when this version knows it.
impl<T: StoredName> From<&str> for Stored<T> {
    fn from(text: &str) -> Self {
        match T::parse(text) {
            Some(name) => Stored::Known(name),
            None => Stored::Unknown(text.to_string()),
        }
    }
}

/// The name as text, wherever a `&str` is read (messages, labels, comparisons with text).
impl<T: StoredName> std::ops::Deref for Stored<T> {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<T: StoredName> PartialEq<T> for Stored<T> {
    fn eq(&self, other: &T) -> bool {
        self.known() == Some(*other)
    }
}

impl<T: StoredName> PartialEq<&str> for Stored<T> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<T: StoredName> std::fmt::Display for Stored<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<T: StoredName> serde::Serialize for Stored<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de, T: StoredName> serde::Deserialize<'de> for Stored<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(Stored::from(text.as_str()))
    }
}

/// A string in the schema, as before the names were typed: a name a newer version writes
/// must pass an older version's CRD.
impl<T> schemars::JsonSchema for Stored<T> {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        String::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

/// Defines a fieldless enum whose variants are stored by their own names.
macro_rules! stored_names {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name as stored in status.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                }
            }

            /// The variant a stored name stands for.
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }

        impl StoredName for $name {
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }

            fn parse(text: &str) -> Option<Self> {
                $name::parse(text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

stored_names! {
    /// The steps a machine `Remediation` records in `status.steps`, in the order a
    /// remediation may take them.
    RemediationStep {
        /// A power-off was requested (the first of each power cycle).
        PowerOffRequested,
        /// The trigger went away before the proof; the requests were withdrawn.
        PowerOffWithdrawn,
        /// The host was proven off.
        Fenced,
        /// Our power-off request vanished after the proof and was made again.
        PowerOffRequestRemade,
        /// The Node's labels, annotations and taints were saved.
        NodeBackedUp,
        /// The Node is being deleted (persisted before the call).
        NodeDeleting,
        /// The Node was deleted.
        NodeDeleted,
        /// The Node is being tainted out-of-service (persisted before the call).
        NodeTainting,
        /// The Node was tainted out-of-service.
        NodeTainted,
        /// There was no Node to release.
        NodeAbsent,
        /// The power-off requests were withdrawn to power the host on.
        PowerOnRequested,
        /// The Node is back: restoring it.
        Restoring,
        /// The remediation ended well.
        Succeeded,
        /// The next fencing strategy took over.
        Escalated,
        /// Another power cycle began.
        Retry,
        /// The trigger went away before anything was done.
        Cancelled,
        /// The remediation failed.
        Failed,
        /// The Machine is being deleted (`deleteMachineOnFailure`).
        MachineDeleting,
        /// A dry run recorded what would have been done.
        DryRun,
        /// The trigger of a dry run went away: its next appearance is recorded again.
        TriggerCleared,
    }
}

stored_names! {
    /// A safety gate that can hold a start: the reason of the `Held` condition and the `gate`
    /// label of `baremend_remediations_held`. The one table of gates: the metrics register a
    /// series for each, and every variant of the gates' verdict maps to one (exhaustively).
    Gate {
        /// The policy is paused.
        Paused,
        /// `maxConcurrent` remediations are running.
        Concurrency,
        /// Too many machines are unhealthy at once.
        Storm,
        /// The policy excludes control-plane machines.
        ControlPlaneDisabled,
        /// Another control-plane machine is being remediated.
        ControlPlaneBusy,
        /// Fencing would leave fewer Ready control-plane Nodes than an etcd quorum.
        Quorum,
        /// The policy asks for the out-of-service release on a cluster without it.
        OutOfServiceUnsupported,
        /// The Node is in a planned reboot.
        PlannedReboot,
        /// The leader would fence the Node it runs on.
        SelfFence,
        /// Another remediator is at work on the Machine or its Node.
        ForeignRemediation,
        /// The cluster is upgrading.
        ClusterUpgrading,
        /// The Node's machine-config daemon is updating it.
        MachineConfigUpdating,
        /// The BareMetalHost is not the Machine's own.
        HostNotOwned,
        /// The BMC's transport can be forged and the policy does not consent.
        InsecureBmc,
        /// The BMC was seen contradicting itself.
        BmcUntrustworthy,
        /// A Cluster API Machine's Node lives in a workload cluster this controller cannot
        /// reach now (its kubeconfig Secret, or its API server).
        WorkloadCluster,
        /// The BareMetalHost exists outside this controller's `--host-selector`.
        HostNotWatched,
    }
}

stored_names! {
    /// A fencing strategy.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    FenceStrategyName {
        /// Ask the BareMetal Operator through the BareMetalHost reboot annotation.
        BareMetalHostRebootApi,
        /// Power the host off through its BMC directly (Redfish or IPMI, from the address).
        DirectBmc,
    }
}

stored_names! {
    /// What the coordinator does about drift.
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema, Default)]
    DriftAction {
        /// Create `/run/machine-config-daemon-force` on the node; the MCO cordons, drains,
        /// rewrites every file and unit, reboots and uncordons.
        #[default]
        Force,
        /// Write the expected content and mode back (from the rendered MachineConfig); the MCD's
        /// next validation heals the node without a drain or a reboot.
        Restore,
    }
}

stored_names! {
    /// The steps a `DriftRemediation` records in `status.steps`.
    DriftStep {
        /// Drift was seen; the debounce began.
        DriftDetected,
        /// The drift outlived the debounce.
        Debounced,
        /// The node healed by itself.
        SelfHealed,
        /// The forcefile was requested through a helper.
        ForceRequested,
        /// The restore of the file was requested through a helper.
        RestoreRequested,
        /// The node was cordoned for the restore's drain.
        CordonRequested,
        /// Our cordon was lifted.
        Uncordoned,
        /// A forcefile not picked up was removed.
        ForceFileRemoved,
        /// The MCD took the forcefile.
        PickedUp,
        /// The MCO's drain finished.
        Drained,
        /// The node went down for its reboot.
        Rebooting,
        /// The node booted again and is Ready.
        Rebooted,
        /// Verified done.
        Succeeded,
        /// Aborted.
        Aborted,
        /// Failed.
        Failed,
        /// Handed to the machine remediation.
        Escalated,
    }
}

stored_names! {
    /// The types of the conditions on baremend's objects.
    ConditionType {
        /// A start waits for a gate (reason: the gate).
        Held,
        /// The host is proven off (or the proof was lost).
        Fenced,
        /// The remediation's outcome.
        Succeeded,
        /// A drift remediation failed (reason: why).
        Failed,
        /// The policy still names the strategy in use.
        StrategyInPolicy,
        /// The last step could not be carried out (reason: the error's category, e.g.
        /// `Forbidden`; message: the error); False again once a step goes through.
        StepFailed,
        /// What a dry run would have done (reason: `WouldFence`, `WouldHold`, `ProbeFailed`).
        DryRun,
        /// On a NodeHealthCheck's request (the medik8s contract): the remediation is under
        /// way.
        Processing,
        /// On a NodeHealthCheck's request (the medik8s contract): the Node is deleted on the
        /// way, so the health check keeps the request while the Node is gone.
        PermanentNodeDeletionExpected,
        /// On a NodeRemediationTemplate: a NodeHealthCheck naming it is Disabled and asks for
        /// no remediation (reason: the NodeHealthCheck's; message: which, and why).
        NodeHealthCheckDisabled,
        /// On a request or a `HostBmc`: False when baremend refuses it (reason: why, see
        /// docs/reference/contracts.md "Trust"); it then changes nothing.
        Accepted,
        /// At power-on, a reboot-API key that is not ours keeps the host off (message: the
        /// key and who sets it).
        PowerOnBlocked,
        /// The power cycle under way left a fencing strategy for the next (reason: the
        /// strategy taken over; message: why the one before could not prove the host off).
        /// A failure that follows names it: the first cause is the one to fix.
        Escalated,
        /// While powering on: the new Node is Ready and must stay Ready for the policy's
        /// `readyGraceSeconds` before it is restored (True while it waits; message: until
        /// when); False once it has, or when it is not Ready any more.
        ReadyGrace,
    }
}

stored_names! {
    /// The reasons of the Events a machine remediation publishes (on the Machine, or the
    /// Node, and its Remediation). Operators, alerts and tests match on them: each is
    /// published as its variant's name.
    EventReason {
        /// A start waits for a gate (the action names the gate).
        Held,
        /// A gate that held a start let go of it.
        HoldEnded,
        /// The trigger went away before the host was fenced.
        Cancelled,
        /// A dry run recorded what it would have done.
        DryRun,
        /// No fencing path answered a dry run's probe.
        DryRunProbeFailed,
        /// No RemediationPolicy named `default` exists.
        PolicyMissing,
        /// The Machine names its host unusably.
        InvalidMachine,
        /// A power-off was requested.
        PowerOffRequested,
        /// Our power-off request was removed after the host was fenced, and made again.
        PowerOffRequestRemoved,
        /// The BMC accepted only the previous password of its Secret.
        BmcPreviousPasswordUsed,
        /// The host is proven off.
        Fenced,
        /// The next fencing strategy took over.
        Escalated,
        /// Another power cycle began.
        Retry,
        /// The Node's labels, annotations and taints were saved.
        NodeBackedUp,
        /// The Node was deleted.
        NodeDeleted,
        /// The Node was tainted out-of-service.
        NodeTainted,
        /// There was no Node to release.
        NodeAbsent,
        /// The host is being powered on.
        PowerOnRequested,
        /// A reboot-API key that is not ours keeps the host off.
        PowerOnBlocked,
        /// The Node is back: restoring it.
        Restoring,
        /// The Node's saved labels and taints were put back.
        NodeRestored,
        /// The remediation ended well.
        Succeeded,
        /// The remediation failed.
        Failed,
        /// `deleteMachineOnFailure`: the Machine is being deleted.
        MachineDeleted,
        /// `deleteMachineOnFailure`: the Machine is kept (not safe to replace).
        MachineKept,
        /// The policy no longer names the strategy in use.
        StrategyNotInPolicy,
        /// A retry was asked of a remediation that may not be retried.
        RetryIgnored,
        /// A retry waits for its trigger to be confirmed.
        RetryWaiting,
        /// A failed remediation was retried by a new one.
        Retried,
        /// The legacy actuator's Node backup could not be read.
        LegacyBackupUnreadable,
        /// The legacy actuator's finalizer was removed from the Node.
        LegacyFinalizerRemoved,
        /// A step failed on a BMC (an [`crate::ErrorCategory`]'s reason, as the rest below).
        BmcError,
        /// A BMC refused its credentials.
        BmcCredentialsRefused,
        /// The API server refused us a right.
        Forbidden,
        /// The API server failed a request.
        ApiError,
        /// An object we read is unusable.
        InvalidObject,
        /// The world changed under a step.
        StateChanged,
        /// This replica is not the leader.
        NotLeader,
        /// A test's hook abandoned the pass.
        Abandoned,
        /// A local failure (a file, a render).
        LocalError,
        /// A Cluster API workload cluster, where the Node lives, cannot be reached.
        WorkloadClusterUnreachable,
        /// A fencing path stopped answering its check (the readiness check).
        FencingNotReady,
        /// A fencing path answers its check again.
        FencingReady,
        /// Retention deleted finished Remediations.
        Pruned,
        /// A NodeHealthCheck naming our template reports `Disabled=True`.
        NodeHealthCheckDisabled,
        /// That NodeHealthCheck is enabled again.
        NodeHealthCheckEnabled,
        /// A request or HostBmc from a namespace the policy does not trust.
        NamespaceNotTrusted,
        /// A request claims a NodeHealthCheck that does not exist with that UID.
        UnknownHealthCheck,
        /// A request's NodeHealthCheck does not reference its template.
        TemplateNotReferenced,
        /// A request's spec would widen the policy.
        WidensPolicy,
        /// More than one HostBmc names one Node.
        ContestedNode,
        /// More than one HostBmc names one Machine.
        ContestedMachine,
    }
}

stored_names! {
    /// The reasons of the Events the drift coordinator publishes (on the Node, and on its
    /// pool and the DriftRemediation). A hold's and a failure's reason is also the reason of
    /// its condition and the label of its metric. Operators, alerts and tests match on them:
    /// each is published as its variant's name. A failed pass is told under an
    /// [`crate::ErrorCategory`]'s [`EventReason`], as in the machine remediation.
    DriftEventReason {
        /// A Degraded node whose cause is not drift, left to its owner.
        NotDrift,
        /// Drift was seen; the debounce began.
        DriftDetected,
        /// The node healed by itself before anything was done.
        SelfHealed,
        /// Held: the policy's mode is `Observe`.
        ObserveOnly,
        /// Held: the `baremend.io/drift-remediation` annotation disables it.
        DriftRemediationDisabled,
        /// Held: the pool rolls out a config.
        PoolRollingOut,
        /// Held: a paused pool needs the admin's approval.
        PausedPoolNeedsApproval,
        /// Held: a single-node pool or cluster needs the admin's approval.
        SingleNodeNeedsApproval,
        /// Held: another control-plane node is disrupted.
        ControlPlaneBusy,
        /// Held: the pool's `maxUnavailable` is used up.
        PoolBudget,
        /// Held: a PodDisruptionBudget would refuse the drain.
        BlockedByPodDisruptionBudget,
        /// The forcefile was requested through a helper.
        ForceRequested,
        /// The restore of the file was requested through a helper.
        RestoreRequested,
        /// The node was cordoned for the restore's drain.
        Cordoned,
        /// An eviction of the restore's drain was refused (a budget).
        EvictionRefused,
        /// A helper pod failed.
        HelperFailed,
        /// The MCD took the forcefile.
        PickedUp,
        /// The MCO's drain finished.
        Drained,
        /// The node went down for its reboot.
        Rebooting,
        /// The node booted again and is Ready.
        Rebooted,
        /// A forcefile not picked up was removed.
        ForceFileRemoved,
        /// Verified done.
        Succeeded,
        /// Aborted (by request, or the drift changed).
        Aborted,
        /// Handed to the machine remediation.
        Escalated,
        /// Failed: drift came back too often.
        DriftRecurring,
        /// Failed: the MCD did not take the forcefile in time.
        PickupTimeout,
        /// Failed: the drain stayed pending.
        DrainTimeout,
        /// Failed: the node stayed NotReady and escalation is off.
        NodeNotReady,
        /// Failed: the restored files did not heal the node.
        RestoreTimeout,
        /// Failed: the node came back still drifted.
        DriftPersists,
        /// Failed: the Node is gone.
        NodeGone,
        /// Failed: the re-apply did not finish in time.
        ApplyTimeout,
        /// Failed: the restore action cannot fix this kind of drift.
        RestoreUnsupported,
        /// Failed: the helper image is not pinned by digest.
        HelperImageNotPinned,
        /// A health check's trigger left during the planned reboot was cleared.
        TriggerCleared,
        /// The planned-reboot mark was lifted.
        PlannedRebootLifted,
        /// Retention deleted finished DriftRemediations.
        Pruned,
        /// A retry annotation whose value is not `"true"`.
        RetryIgnored,
        /// A failed DriftRemediation was retried by a new one.
        Retried,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_itself_and_unknown_names_as_none() {
        for step in RemediationStep::ALL {
            assert_eq!(RemediationStep::parse(step.as_str()), Some(*step));
        }
        for step in DriftStep::ALL {
            assert_eq!(DriftStep::parse(step.as_str()), Some(*step));
        }
        for condition in ConditionType::ALL {
            assert_eq!(
                ConditionType::parse(&condition.to_string()),
                Some(*condition)
            );
        }
        assert_eq!(
            RemediationStep::parse("PowerOffRequested"),
            Some(RemediationStep::PowerOffRequested)
        );
        assert_eq!(RemediationStep::parse("NotAStep"), None);
        assert_eq!(DriftStep::parse(""), None);
        for reason in EventReason::ALL {
            assert_eq!(EventReason::parse(reason.as_str()), Some(*reason));
        }
        for reason in DriftEventReason::ALL {
            assert_eq!(DriftEventReason::parse(reason.as_str()), Some(*reason));
        }
    }

    #[test]
    fn every_drift_action_is_labelled_by_its_stored_name() {
        for action in DriftAction::ALL {
            let json = serde_json::to_value(action).unwrap();
            assert_eq!(
                json,
                action.as_str(),
                "the label is the name the spec holds"
            );
        }
    }

    /// The names of `names` that `doc`'s section `heading` does not show in backticks.
    fn undocumented(doc: &str, heading: &str, names: &[&'static str]) -> Vec<&'static str> {
        let section = doc
            .split(heading)
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_else(|| panic!("no section {heading:?}"));
        names
            .iter()
            .copied()
            .filter(|r| !section.contains(&format!("`{r}`")))
            .collect()
    }

    #[test]
    fn every_drift_event_reason_is_in_the_list_operators_read() {
        // docs/guides/drift.md "Events" is where an operator looks a drift Event's reason up.
        let names: Vec<&str> = DriftEventReason::ALL.iter().map(|r| r.as_str()).collect();
        let doc = include_str!("../../../docs/guides/drift.md");
        let missing = undocumented(doc, "\n## Events\n", &names);
        assert!(
            missing.is_empty(),
            "not in docs/guides/drift.md: {missing:?}"
        );
    }

    #[test]
    fn every_event_reason_is_in_the_list_operators_read() {
        // docs/engineering/safety.md "Events and logs" is where an operator (and an alert's
        // author) looks a reason up: a reason added here without a line there fails.
        let names: Vec<&str> = EventReason::ALL.iter().map(|r| r.as_str()).collect();
        let doc = include_str!("../../../docs/engineering/safety.md");
        let missing = undocumented(doc, "## Events and logs", &names);
        assert!(
            missing.is_empty(),
            "not in docs/engineering/safety.md: {missing:?}"
        );
    }
}
