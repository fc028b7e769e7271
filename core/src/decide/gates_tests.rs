//! The gates' tests: the quiet gates (upgrades, MCO updates), the foreign-remediation gate,
//! and every gate's decision swept.

use super::*;

mod quiet_tests {
    use super::*;

    fn view(current: &str, desired: &str, state: &str) -> MachineConfigView {
        let some = |v: &str| (!v.is_empty()).then(|| v.to_string());
        MachineConfigView {
            current: some(current),
            desired: some(desired),
            state: some(state),
            ..Default::default()
        }
    }

    #[test]
    fn the_node_is_updating_by_nodehealthchecks_rule_and_the_daemons_signs() {
        // node-healthcheck-operator `internal/controller/cluster/upgrade_checker.go`,
        // `isNodeUpgrading`: desiredConfig set and different from currentConfig.
        let cases = [
            (view("rendered-a", "rendered-a", "Done"), None),
            (view("", "", ""), None),
            (view("rendered-a", "", "Done"), None),
            (
                view("rendered-a", "rendered-b", "Done"),
                Some("currentConfig rendered-a != desiredConfig rendered-b"),
            ),
            // Rebooting into it: still Working on the old config until Done after the boot.
            (
                view("rendered-a", "rendered-b", "Working"),
                Some("currentConfig rendered-a != desiredConfig rendered-b"),
            ),
            (
                view("", "rendered-b", ""),
                Some("currentConfig (none) != desiredConfig rendered-b"),
            ),
            (
                view("rendered-a", "rendered-a", "Working"),
                Some("state Working"),
            ),
            // Drift (and its re-apply's reboot) is the drift coordinator's.
            (view("rendered-a", "rendered-a", "Degraded"), None),
            (view("rendered-a", "rendered-a", "Unreconcilable"), None),
        ];
        for (view, want) in cases {
            assert_eq!(view.updating().as_deref(), want, "{view:?}");
        }
        let image = MachineConfigView {
            current_image: Some("quay.io/a".into()),
            desired_image: Some("quay.io/b".into()),
            ..view("rendered-a", "rendered-a", "Done")
        };
        assert_eq!(
            image.updating().as_deref(),
            Some("currentImage != desiredImage")
        );
    }

    #[test]
    fn every_combination_holds_within_the_bound_and_proceeds_after_it() {
        let updating = Some(("worker-0".to_string(), view("a", "b", "Working")));
        let done = Some(("worker-0".to_string(), view("a", "a", "Done")));
        let progressing = Some("Working towards 4.17.3: 512 of 890 done".to_string());
        let bound = 600;
        for node in [None, done.clone(), updating.clone()] {
            for cluster in [None, progressing.clone()] {
                for waited in [0, 599, 600, 601] {
                    for bound in [0, bound] {
                        let evidence = QuietEvidence {
                            cluster_progressing: cluster.clone(),
                            node: node.clone(),
                        };
                        let verdict = quiet_gate(&evidence, Duration::from_secs(waited), bound);
                        let node_updating = node == updating;
                        let gate = match &verdict {
                            Quiet::Open => None,
                            Quiet::Hold(held) | Quiet::BoundReached(held) => Some(held.gate()),
                        };
                        let expected_gate = match (bound, node_updating, cluster.is_some()) {
                            (0, _, _) => None,
                            (_, true, _) => Some("MachineConfigUpdating"),
                            (_, false, true) => Some("ClusterUpgrading"),
                            (_, false, false) => None,
                        };
                        let case = format!("{evidence:?} waited {waited} bound {bound}");
                        assert_eq!(gate, expected_gate, "{case}");
                        if gate.is_some() {
                            assert_eq!(
                                matches!(verdict, Quiet::BoundReached(_)),
                                waited >= u64::from(bound),
                                "{case}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_held_message_names_what_holds_and_the_bound() {
        let evidence = QuietEvidence {
            cluster_progressing: Some("Working towards 4.17.3".into()),
            node: Some(("worker-0".into(), view("a", "b", "Done"))),
        };
        let Quiet::Hold(held) = quiet_gate(&evidence, Duration::ZERO, 1800) else {
            panic!("not held")
        };
        assert_eq!(
            held.to_string(),
            "the machine-config daemon is updating Node worker-0 (currentConfig a != desiredConfig b); \
             the start waits up to 1800 s after the request (policy upgradeHold.maxSeconds)"
        );
        let cluster = QuietEvidence {
            node: None,
            ..evidence
        };
        let Quiet::Hold(held) = quiet_gate(&cluster, Duration::ZERO, 1800) else {
            panic!("not held")
        };
        assert!(
            held.to_string().contains("Working towards 4.17.3"),
            "{held}"
        );
    }

    #[test]
    fn every_gate_is_in_the_metrics_gate_table() {
        // Exhaustive: a new verdict stops the build here (and in `Held::kind`), to be given a
        // `Gate` (whose series start at zero) and a row in docs/reference/metrics.md.
        let all = [
            Held::Paused,
            Held::Concurrency { running: 0, max: 0 },
            Held::Storm {
                unhealthy: 0,
                machines: 0,
                max_percent: 0,
            },
            Held::ControlPlaneDisabled,
            Held::ControlPlaneBusy,
            Held::Quorum {
                ready_after: 0,
                members: 0,
                quorum: 0,
            },
            Held::OutOfServiceUnsupported,
            Held::PlannedReboot { by: String::new() },
            Held::SelfFence {
                node: String::new(),
            },
            Held::ForeignRemediation {
                who: Foreign::RebootKey { key: String::new() },
            },
            Held::ClusterUpgrading {
                message: String::new(),
                bound_seconds: 0,
            },
            Held::MachineConfigUpdating {
                node: String::new(),
                why: String::new(),
                bound_seconds: 0,
            },
            Held::HostNotOwned { why: String::new() },
            Held::InsecureBmc {
                bmc: String::new(),
                why: String::new(),
            },
            Held::BmcUntrustworthy {
                bmc: String::new(),
                why: String::new(),
            },
            Held::WorkloadCluster {
                cluster: String::new(),
                node: String::new(),
                why: String::new(),
            },
            Held::HostNotWatched {
                host: String::new(),
                selector: String::new(),
            },
        ];
        for held in &all {
            match held {
                Held::Paused
                | Held::Concurrency { .. }
                | Held::Storm { .. }
                | Held::ControlPlaneDisabled
                | Held::ControlPlaneBusy
                | Held::Quorum { .. }
                | Held::OutOfServiceUnsupported
                | Held::PlannedReboot { .. }
                | Held::SelfFence { .. }
                | Held::ForeignRemediation { .. }
                | Held::ClusterUpgrading { .. }
                | Held::MachineConfigUpdating { .. }
                | Held::HostNotOwned { .. }
                | Held::InsecureBmc { .. }
                | Held::BmcUntrustworthy { .. }
                | Held::WorkloadCluster { .. }
                | Held::HostNotWatched { .. } => {}
            }
        }
        assert_eq!(all.each_ref().map(Held::kind).as_slice(), Gate::ALL);
    }
}

mod foreign_tests {
    use super::*;

    const TARGET: Target<'static> = Target {
        namespace: "openshift-machine-api",
        machine: "worker-0",
        node: Some("worker-0.example"),
        reboot_key: "capbm-requested-power-off",
    };

    fn object(kind: ForeignKind, namespace: &str, name: &str) -> ForeignObject {
        ForeignObject {
            kind,
            namespace: namespace.into(),
            name: name.into(),
            node_annotation: None,
            owner_machines: Vec::new(),
        }
    }

    fn held_by(evidence: &ForeignEvidence) -> Option<Foreign> {
        match foreign_remediation(&TARGET, evidence) {
            Ok(()) => None,
            Err(Held::ForeignRemediation { who }) => Some(who),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn nothing_foreign_lets_the_start_go() {
        assert_eq!(held_by(&ForeignEvidence::default()), None);
    }

    #[test]
    fn our_key_is_foreign_only_when_no_remediation_of_ours_asked_for_it() {
        let mut evidence = ForeignEvidence {
            reboot_keys: vec!["capbm-requested-power-off".into()],
            ..Default::default()
        };
        let who = held_by(&evidence).unwrap();
        assert_eq!(
            who,
            Foreign::RebootRequestByOthers {
                key: "capbm-requested-power-off".into()
            }
        );
        let held = foreign_remediation(&TARGET, &evidence).unwrap_err();
        assert_eq!(held.gate(), "ForeignRemediation");
        assert!(
            held.to_string()
                .contains("reboot.metal3.io/capbm-requested-power-off")
        );
        evidence.ours_requested = true;
        assert_eq!(held_by(&evidence), None);
    }

    #[test]
    fn any_other_reboot_key_holds_the_start_and_is_named() {
        // The BareMetal Operator keeps the host off while any `reboot.metal3.io/<key>` is
        // there (baremetal-operator `internal/controller/metal3.io/baremetalhost_controller.go`,
        // `hasRebootAnnotation`): our power-on could never bring it back.
        for (key, owner) in [
            (
                "metal3-remediation-6f1c0d3e-uid",
                "Cluster API Provider Metal3's remediation",
            ),
            ("admin-maintenance", "not baremend's"),
        ] {
            let evidence = ForeignEvidence {
                reboot_keys: vec![key.into()],
                ..Default::default()
            };
            let who = held_by(&evidence).unwrap();
            assert_eq!(who, Foreign::RebootKey { key: key.into() });
            let said = foreign_remediation(&TARGET, &evidence)
                .unwrap_err()
                .to_string();
            assert!(said.contains(&format!("reboot.metal3.io/{key}")), "{said}");
            assert!(said.contains(owner), "{said}");
            assert!(said.contains("keeps it powered off"), "{said}");
            // Ours beside it, asked by us, excuses only ours.
            let beside_ours = ForeignEvidence {
                reboot_keys: vec![TARGET.reboot_key.into(), key.into()],
                ours_requested: true,
                ..Default::default()
            };
            assert_eq!(held_by(&beside_ours), Some(who.clone()));
            // Named before another project's object: the key is what keeps the host off.
            let with_object = ForeignEvidence {
                objects: vec![object(
                    ForeignKind::Metal3Remediation,
                    TARGET.namespace,
                    TARGET.machine,
                )],
                ..evidence
            };
            assert_eq!(held_by(&with_object), Some(who));
        }
        // Our own key alone, asked by us: nothing foreign.
        let ours = ForeignEvidence {
            reboot_keys: vec![TARGET.reboot_key.into()],
            ours_requested: true,
            ..Default::default()
        };
        assert_eq!(held_by(&ours), None);
        assert_eq!(
            other_reboot_keys("baremend", &["baremend".into(), "x".into()]).collect::<Vec<_>>(),
            ["x"]
        );
    }

    #[test]
    fn the_legacy_actuator_in_flight_holds_but_its_backup_alone_does_not() {
        let timeout = ForeignEvidence {
            machine_marks: vec![crate::api::annotations::LEGACY_POWER_ON_TIMEOUT.into()],
            ..Default::default()
        };
        assert!(matches!(
            held_by(&timeout),
            Some(Foreign::LegacyActuator { .. })
        ));
        let backup = ForeignEvidence {
            machine_marks: vec![crate::api::annotations::LEGACY_NODE_LABELS_BACKUP.into()],
            ..Default::default()
        };
        assert_eq!(held_by(&backup), None, "adopted by the restore instead");
        // Saved and holding the host off: its remediation is under way.
        let saved_and_off = ForeignEvidence {
            reboot_keys: vec![crate::api::annotations::LEGACY_REBOOT_KEY.into()],
            ..backup
        };
        let Some(Foreign::LegacyActuator { evidence }) = held_by(&saved_and_off) else {
            panic!("not the legacy actuator")
        };
        assert_eq!(evidence.len(), 2, "{evidence:?}");
    }

    #[test]
    fn the_legacy_key_is_recognised_when_ours_differs() {
        let target = Target {
            reboot_key: "baremend",
            ..TARGET
        };
        // Its power-off request alone (before it saved the Node).
        let evidence = ForeignEvidence {
            reboot_keys: vec![crate::api::annotations::LEGACY_REBOOT_KEY.into()],
            ..Default::default()
        };
        assert!(matches!(
            foreign_remediation(&target, &evidence),
            Err(Held::ForeignRemediation {
                who: Foreign::LegacyActuator { .. }
            })
        ));
        // Our own key on the host is ours to judge: not foreign while we asked for it.
        let ours = ForeignEvidence {
            reboot_keys: vec!["baremend".into()],
            ours_requested: true,
            ..Default::default()
        };
        assert_eq!(foreign_remediation(&target, &ours), Ok(()));
        // ...and excuses only our key, never the legacy one beside it.
        let both = ForeignEvidence {
            reboot_keys: vec![
                "baremend".into(),
                crate::api::annotations::LEGACY_REBOOT_KEY.into(),
            ],
            ..ours
        };
        assert!(matches!(
            foreign_remediation(&target, &both),
            Err(Held::ForeignRemediation {
                who: Foreign::LegacyActuator { .. }
            })
        ));
    }

    #[test]
    fn objects_are_matched_by_machine_or_node_as_their_projects_name_them() {
        let node = "worker-0.example";
        let ns = "openshift-machine-api";
        let cases = [
            (object(ForeignKind::Metal3Remediation, ns, "worker-0"), true),
            (
                object(ForeignKind::Metal3Remediation, "other", "worker-0"),
                false,
            ),
            (object(ForeignKind::Metal3Remediation, ns, node), true),
            (
                object(ForeignKind::SelfNodeRemediation, "medik8s", node),
                true,
            ),
            (
                object(ForeignKind::SelfNodeRemediation, "medik8s", "worker-0"),
                false,
            ),
            (
                object(ForeignKind::FenceAgentsRemediation, "medik8s", node),
                true,
            ),
            (
                object(ForeignKind::MachineDeletionRemediation, "medik8s", node),
                true,
            ),
            (
                object(
                    ForeignKind::MachineDeletionRemediation,
                    "medik8s",
                    "worker-1",
                ),
                false,
            ),
        ];
        for (object, held) in cases {
            let evidence = ForeignEvidence {
                objects: vec![object.clone()],
                ..Default::default()
            };
            let who = held_by(&evidence);
            assert_eq!(who.is_some(), held, "{object:?}");
            if let Some(who) = who {
                assert_eq!(
                    who.to_string(),
                    format!(
                        "{} {}/{}",
                        object.kind.kind(),
                        object.namespace,
                        object.name
                    )
                );
            }
        }
        let mut annotated = object(ForeignKind::FenceAgentsRemediation, "medik8s", "far-1");
        annotated.node_annotation = Some(node.into());
        let mut owned = object(ForeignKind::Metal3Remediation, ns, "m3r-1");
        owned.owner_machines = vec!["worker-0".into()];
        for object in [annotated, owned] {
            let evidence = ForeignEvidence {
                objects: vec![object],
                ..Default::default()
            };
            assert!(held_by(&evidence).is_some(), "{evidence:?}");
        }
    }
}

mod gate_tests {
    use super::*;

    fn listed(name: &str, machine: &str, phase: RemediationPhase) -> Listed {
        Listed {
            namespace: "m".into(),
            name: name.into(),
            machine: machine.into(),
            phase,
        }
    }

    /// A list read after every start so far (all of them tests make before reading).
    const FRESH: ListFreshness = ListFreshness::ReadAfter(u64::MAX);
    const CACHED: ListFreshness = ListFreshness::Cached;

    fn launched(entries: &[(&str, &str)]) -> Launched {
        let mut launched = Launched::new();
        for (name, machine) in entries {
            launched.insert(("m".to_string(), name.to_string()), machine.to_string());
        }
        launched
    }

    #[test]
    fn running_counts_listed_remediations_under_way_but_not_pending_ended_or_this_one() {
        let list = [
            listed("a-1", "a", RemediationPhase::PoweringOff),
            listed("b-1", "b", RemediationPhase::Pending),
            listed("c-1", "c", RemediationPhase::Succeeded),
            listed("d-1", "d", RemediationPhase::Fenced),
        ];
        let mut none = Launched::new();
        assert_eq!(running_machines(&list, &mut none, "d-1", FRESH), ["a"]);
        assert_eq!(
            running_machines(&list, &mut none, "x-1", CACHED),
            ["a", "d"]
        );
    }

    #[test]
    fn a_start_a_lagging_cache_does_not_show_still_counts_until_a_fresh_list_settles_it() {
        // The chaos case (seed 1708): this process started e-1; the cache, behind a broken
        // watch, shows nothing of it.
        let cache = [listed("a-1", "a", RemediationPhase::Succeeded)];
        let mut starts = launched(&[("e-1", "e")]);
        assert_eq!(running_machines(&cache, &mut starts, "f-1", CACHED), ["e"]);
        assert_eq!(starts.len(), 1, "a cache that lacks it may only lag");
        // A fresh list that shows it Pending still counts it through the reminder...
        let fresh = [listed("e-1", "e", RemediationPhase::Pending)];
        assert_eq!(running_machines(&fresh, &mut starts, "f-1", FRESH), ["e"]);
        // ...one that shows it under way counts it through the list and forgets the reminder...
        let fresh = [listed("e-1", "e", RemediationPhase::PoweringOff)];
        assert_eq!(running_machines(&fresh, &mut starts, "f-1", FRESH), ["e"]);
        assert!(starts.is_empty());
        // ...and a fresh list that lacks it means it was deleted.
        let mut starts = launched(&[("e-1", "e")]);
        assert!(running_machines(&[], &mut starts, "f-1", FRESH).is_empty());
        assert!(starts.is_empty());
    }

    #[test]
    fn a_fresh_list_read_before_a_start_does_not_forget_it() {
        // Two starts decided at once: f's fresh list was read before e's start was made (the
        // reads run outside the lock), so it lacks e-1 without proving it deleted.
        let mut starts = Launched::new();
        let mark = starts.mark();
        starts.insert(("m".into(), "e-1".into()), "e".into());
        let read_before = ListFreshness::ReadAfter(mark);
        assert_eq!(
            running_machines(&[], &mut starts, "f-1", read_before),
            ["e"]
        );
        assert_eq!(starts.len(), 1);
        // A list read after the start that still lacks it: deleted.
        let read_after = ListFreshness::ReadAfter(starts.mark());
        assert!(running_machines(&[], &mut starts, "f-1", read_after).is_empty());
        assert!(starts.is_empty());
    }

    #[test]
    fn a_remediation_never_counts_against_itself() {
        let mut starts = launched(&[("e-1", "e")]);
        assert!(running_machines(&[], &mut starts, "e-1", CACHED).is_empty());
        let list = [listed("e-1", "e", RemediationPhase::PoweringOff)];
        assert!(running_machines(&list, &mut Launched::new(), "e-1", FRESH).is_empty());
    }

    const WORKER: Candidate = Candidate {
        control_plane: false,
        node_ready: false,
    };
    const HUNG_MASTER: Candidate = Candidate {
        control_plane: true,
        node_ready: false,
    };

    fn fleet() -> Fleet {
        Fleet {
            machines: 6,
            unhealthy: 1,
            running: 0,
            running_total: 0,
            running_control_plane: 0,
            control_plane: 3,
            control_plane_ready: 3,
            out_of_service_taint: true,
        }
    }

    #[test]
    fn one_hung_worker_in_a_healthy_fleet_may_start() {
        assert_eq!(
            may_start(WORKER, fleet(), &RemediationPolicySpec::default()),
            Ok(())
        );
    }

    #[test]
    fn the_concurrency_limit_holds_further_starts() {
        let policy = RemediationPolicySpec::default();
        let busy = Fleet {
            running: 1,
            unhealthy: 2,
            ..fleet()
        };
        assert!(matches!(
            may_start(WORKER, busy, &policy),
            Err(Held::Concurrency { .. })
        ));
        let wider = RemediationPolicySpec {
            max_concurrent: 2,
            ..policy
        };
        assert_eq!(may_start(WORKER, busy, &wider), Ok(()));
    }

    #[test]
    fn the_shards_ceiling_holds_a_start_its_cluster_would_allow() {
        // Its own Cluster runs nothing; the shard runs 3 in other Clusters.
        let elsewhere = Fleet {
            running: 0,
            running_total: 3,
            ..fleet()
        };
        let policy = RemediationPolicySpec::default();
        assert_eq!(may_start(WORKER, elsewhere, &policy), Ok(()));
        let ceiling = RemediationPolicySpec {
            max_concurrent_per_shard: Some(3),
            ..policy.clone()
        };
        assert_eq!(
            may_start(WORKER, elsewhere, &ceiling),
            Err(Held::Concurrency { running: 3, max: 3 })
        );
        let room = RemediationPolicySpec {
            max_concurrent_per_shard: Some(4),
            ..policy
        };
        assert_eq!(may_start(WORKER, elsewhere, &room), Ok(()));
    }

    #[test]
    fn the_storm_gate_holds_above_the_share_and_not_at_it() {
        let mut policy = RemediationPolicySpec {
            max_concurrent: 10,
            ..Default::default()
        };
        policy.storm.max_unhealthy_percent = 40;
        // 2 of 5 is exactly 40 %: allowed. 3 of 5 is 60 %: held.
        let at = Fleet {
            machines: 5,
            unhealthy: 2,
            ..fleet()
        };
        assert_eq!(may_start(WORKER, at, &policy), Ok(()));
        let above = Fleet {
            machines: 5,
            unhealthy: 3,
            ..fleet()
        };
        let held = may_start(WORKER, above, &policy).unwrap_err();
        assert_eq!(
            held.to_string(),
            "storm: 3 of 5 machines are unhealthy, more than the policy's 40%"
        );
    }

    #[test]
    fn control_plane_machines_go_one_at_a_time_and_never_below_quorum() {
        let policy = RemediationPolicySpec {
            max_concurrent: 5,
            ..Default::default()
        };
        // One hung master of three: two Ready remain, the quorum of three.
        let one_hung = Fleet {
            control_plane_ready: 2,
            ..fleet()
        };
        assert_eq!(may_start(HUNG_MASTER, one_hung, &policy), Ok(()));
        // A second master while one is being remediated: held.
        let busy = Fleet {
            running: 1,
            running_control_plane: 1,
            ..one_hung
        };
        assert_eq!(
            may_start(HUNG_MASTER, busy, &policy),
            Err(Held::ControlPlaneBusy)
        );
        // Two of three hung: one Ready remains, below quorum.
        let two_hung = Fleet {
            control_plane_ready: 1,
            unhealthy: 2,
            ..fleet()
        };
        assert!(matches!(
            may_start(HUNG_MASTER, two_hung, &policy),
            Err(Held::Quorum {
                ready_after: 1,
                members: 3,
                quorum: 2
            })
        ));
        // A Ready master whose fencing would break quorum: held.
        let ready_master = Candidate {
            control_plane: true,
            node_ready: true,
        };
        assert!(matches!(
            may_start(ready_master, one_hung, &policy),
            Err(Held::Quorum { ready_after: 1, .. })
        ));
        // Workers are not subject to the quorum guard.
        assert_eq!(may_start(WORKER, two_hung, &policy), Ok(()));
    }

    /// The count is the caches'; a control-plane start's Nodes read now replace its readiness,
    /// the candidate's own included, whatever the cache said (a watch that lags behind the
    /// request naming another member).
    #[test]
    fn the_control_planes_readiness_read_now_replaces_the_caches() {
        let cached = FleetHealth {
            machines: 3,
            control_plane: ["m0", "m1", "m2"].map(String::from).into(),
            control_plane_ready: 3,
            control_plane_nodes: vec!["n0".into(), "n1".into(), "n2".into()],
            ..FleetHealth::default()
        };
        // n1 went NotReady, n2 is gone: only the candidate's own Node is Ready now.
        let read: HashMap<String, bool> = [("n0".into(), true), ("n1".into(), false)]
            .into_iter()
            .collect();
        let fresh = cached.clone().with_fresh_control_plane(&read, Some("n0"));
        assert_eq!(fresh.control_plane_ready, 1);
        assert_eq!(fresh.candidate_ready, Some(true));
        assert_eq!(fresh.control_plane, cached.control_plane);
        // Every Node Ready: all three, and a candidate whose Node was not read is not Ready.
        let all: HashMap<String, bool> = ["n0", "n1", "n2"]
            .into_iter()
            .map(|n| (n.to_string(), true))
            .collect();
        let fresh = cached.with_fresh_control_plane(&all, Some("elsewhere"));
        assert_eq!(fresh.control_plane_ready, 3);
        assert_eq!(fresh.candidate_ready, Some(false));
    }

    #[test]
    fn only_a_control_plane_start_under_the_guard_reads_its_control_plane_again() {
        let mut policy = RemediationPolicySpec::default();
        assert!(quorum_guarded(true, &policy));
        assert!(!quorum_guarded(false, &policy));
        policy.control_plane.quorum_guard = false;
        assert!(!quorum_guarded(true, &policy));
        policy.control_plane.quorum_guard = true;
        policy.control_plane.enabled = false;
        assert!(!quorum_guarded(true, &policy));
    }

    #[test]
    fn the_policy_can_disable_the_guard_or_control_plane_remediation() {
        let mut policy = RemediationPolicySpec {
            max_concurrent: 5,
            ..Default::default()
        };
        let two_hung = Fleet {
            control_plane_ready: 1,
            unhealthy: 2,
            ..fleet()
        };
        policy.control_plane.quorum_guard = false;
        assert_eq!(may_start(HUNG_MASTER, two_hung, &policy), Ok(()));
        policy.control_plane.enabled = false;
        assert_eq!(
            may_start(HUNG_MASTER, fleet(), &policy),
            Err(Held::ControlPlaneDisabled)
        );
    }

    #[test]
    fn a_paused_policy_holds_every_start_first() {
        let paused = RemediationPolicySpec {
            paused: true,
            ..Default::default()
        };
        assert_eq!(may_start(WORKER, fleet(), &paused), Err(Held::Paused));
        let busy = Fleet {
            running: 1,
            ..fleet()
        };
        assert_eq!(may_start(WORKER, busy, &paused), Err(Held::Paused));
        assert_eq!(Held::Paused.gate(), "Paused");
        assert_eq!(Held::Paused.kind(), Gate::Paused);
    }

    #[test]
    fn out_of_service_mode_is_held_on_an_api_server_older_than_1_28() {
        let policy = RemediationPolicySpec {
            node_release: NodeReleaseMode::OutOfService,
            ..Default::default()
        };
        assert_eq!(may_start(WORKER, fleet(), &policy), Ok(()));
        let old = Fleet {
            out_of_service_taint: false,
            ..fleet()
        };
        let held = may_start(WORKER, old, &policy).unwrap_err();
        assert_eq!(held, Held::OutOfServiceUnsupported);
        assert_eq!(held.gate(), "OutOfServiceUnsupported");
        // Deleting Nodes works on any version.
        assert_eq!(
            may_start(WORKER, old, &RemediationPolicySpec::default()),
            Ok(())
        );
    }
}
