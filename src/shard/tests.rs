use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baremend_sim::apiserver::selectors::LabelSelector;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde_json::json;

use super::*;

fn claim(lease: &str, selector: Option<&str>, acquired: u64) -> Claim {
    Claim {
        lease: lease.into(),
        selector: selector.map(str::to_string),
        acquired: Duration::from_secs(acquired),
    }
}

fn conflict(mine: &Claim, other: &Claim) -> Conflict {
    Conflict {
        mine: mine.clone(),
        other: other.clone(),
        overlap: Overlap::Structural,
    }
}

/// Selectors of every form the API server takes (equality, inequality, set-based, existence),
/// some of which overlap on the label sets below and some of which do not.
const SELECTORS: &[&str] = &[
    "role=worker",
    "role==worker",
    "role!=worker",
    "zone=a",
    "zone in (a,b)",
    "zone notin (a)",
    "zone",
    "!zone",
    "role=worker,zone=b",
    "role in (master),zone",
    "baremend.io/shard=a",
];

fn label_sets() -> Vec<BTreeMap<String, String>> {
    let set = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    vec![
        set(&[]),
        set(&[("role", "worker")]),
        set(&[("role", "worker"), ("zone", "a")]),
        set(&[("role", "worker"), ("zone", "b")]),
        set(&[("role", "master"), ("zone", "c")]),
        set(&[("zone", "a"), ("baremend.io/shard", "a")]),
        set(&[("baremend.io/shard", "b")]),
    ]
}

fn matches(selector: &str, labels: &BTreeMap<String, String>) -> bool {
    let selector = LabelSelector::parse(selector).unwrap();
    selector.matches(&json!({"metadata": {"labels": labels}}))
}

/// The overlap query asks the API server for Machines matching both selectors joined by a
/// comma. Swept over every pair of selectors and every label set, with the simulated API
/// server's parser (which follows apimachinery's labels.Parse, pkg/labels/selector.go): a
/// Machine matches the conjunction exactly when it matches each, so one is found exactly
/// when the shards overlap.
#[test]
fn the_conjunction_of_two_selectors_matches_exactly_the_machines_both_match() {
    let mut overlapping = 0;
    let mut disjoint = 0;
    for mine in SELECTORS {
        for other in SELECTORS {
            let both = conjunction(Some(mine), Some(other)).expect("two selectors");
            for labels in label_sets() {
                let expected = matches(mine, &labels) && matches(other, &labels);
                assert_eq!(
                    matches(&both, &labels),
                    expected,
                    "{mine:?} and {other:?} on {labels:?}"
                );
            }
            let any = label_sets()
                .iter()
                .any(|l| matches(mine, l) && matches(other, l));
            if any { overlapping += 1 } else { disjoint += 1 }
        }
    }
    // The sweep covers both outcomes, or it would prove little.
    assert!(
        overlapping > 10 && disjoint > 10,
        "{overlapping} / {disjoint}"
    );
}

#[test]
fn a_claim_on_every_machine_overlaps_structurally() {
    assert_eq!(conjunction(None, Some("zone=a")), None);
    assert_eq!(conjunction(Some("zone=a"), None), None);
    assert_eq!(conjunction(None, None), None);
    assert_eq!(
        conjunction(Some("role=worker"), Some("zone=a")).as_deref(),
        Some("role=worker,zone=a")
    );
    assert_eq!(normalize(Some("  ")), None);
    assert_eq!(normalize(Some(" zone=a ")).as_deref(), Some("zone=a"));
    assert_eq!(normalize(None), None);
}

#[test]
fn of_overlapping_claims_the_earliest_acts_and_the_others_yield() {
    let early = claim("shard-b", Some("zone=a"), 100);
    let late = claim("shard-a", Some("role=worker"), 200);
    let tie = claim("shard-c", Some("zone"), 100);
    assert_eq!(verdict(vec![]), Verdict::Clear);
    assert!(!verdict(vec![]).overlapping());
    // The later claim yields, naming the earlier one.
    assert_eq!(
        verdict(vec![conflict(&late, &early)]),
        Verdict::Yield(conflict(&late, &early))
    );
    // The earlier keeps acting, and says it sees an overlap.
    let keep = verdict(vec![conflict(&early, &late)]);
    assert_eq!(keep, Verdict::Keep(vec![conflict(&early, &late)]));
    assert!(keep.overlapping());
    // Acquired at the same instant: the smaller Lease name acts; never both, never neither.
    assert!(early.precedes(&tie) && !tie.precedes(&early));
    assert!(matches!(
        verdict(vec![conflict(&tie, &early)]),
        Verdict::Yield(_)
    ));
    assert!(matches!(
        verdict(vec![conflict(&early, &tie)]),
        Verdict::Keep(_)
    ));
    // Among several earlier claims, it yields to the earliest.
    let first = claim("shard-z", None, 50);
    assert_eq!(
        verdict(vec![
            conflict(&late, &early),
            conflict(&late, &first),
            conflict(&late, &tie)
        ]),
        Verdict::Yield(conflict(&late, &first))
    );
}

/// Every pair of distinct claims: exactly one of the two precedes the other, so of two
/// overlapping shards exactly one acts.
#[test]
fn exactly_one_of_two_overlapping_shards_acts() {
    let claims: Vec<Claim> = ["a", "b", "c"]
        .iter()
        .flat_map(|name| [0, 1, 2].map(|t| claim(name, None, t)))
        .collect();
    for one in &claims {
        for two in &claims {
            if one == two || one.lease == two.lease {
                continue;
            }
            let acts = |mine: &Claim, other: &Claim| {
                !matches!(verdict(vec![conflict(mine, other)]), Verdict::Yield(_))
            };
            assert!(acts(one, two) != acts(two, one), "{one:?} / {two:?}");
        }
    }
}

fn lease(
    labels: &[(&str, &str)],
    selector: Option<&str>,
    holder: Option<&str>,
    renewed: u64,
) -> Lease {
    let at = |secs: u64| {
        MicroTime(k8s_openapi::jiff::Timestamp::from_second(i64::try_from(secs).unwrap()).unwrap())
    };
    Lease {
        metadata: ObjectMeta {
            name: Some("shard-a".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: selector
                .map(|s| BTreeMap::from([(MACHINE_SELECTOR_ANNOTATION.to_string(), s.into())])),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            acquire_time: Some(at(1_000)),
            renew_time: Some(at(renewed)),
            ..Default::default()
        }),
    }
}

#[test]
fn only_held_renewed_shard_leases_are_live_claims() {
    let now = UNIX_EPOCH + Duration::from_secs(2_000);
    let shard = [(SHARD_LEASE_LABEL, "true")];
    let live = live_claim(&lease(&shard, Some("zone=a"), Some("pod-1"), 1_990), now);
    assert_eq!(
        live,
        Some(claim("shard-a", Some("zone=a"), 1_000)),
        "held, renewed 10 s ago, duration 15 s"
    );
    // Within twice the duration (clock skew between nodes): still live.
    assert!(live_claim(&lease(&shard, Some("zone=a"), Some("pod-1"), 1_975), now).is_some());
    // Past it: its holder is gone.
    assert!(live_claim(&lease(&shard, Some("zone=a"), Some("pod-1"), 1_970), now).is_none());
    // Released (no holder, as the elector leaves it on shutdown).
    assert!(live_claim(&lease(&shard, Some("zone=a"), None, 1_999), now).is_none());
    assert!(live_claim(&lease(&shard, Some("zone=a"), Some(""), 1_999), now).is_none());
    // Not a shard's Lease (another controller's in the namespace).
    assert!(live_claim(&lease(&[], Some("zone=a"), Some("pod-1"), 1_999), now).is_none());
    assert!(
        live_claim(
            &lease(&[(SHARD_LEASE_LABEL, "false")], None, Some("p"), 1_999),
            now
        )
        .is_none()
    );
    // A shard Lease without a selector, or with an empty one, claims every Machine.
    for selector in [None, Some(""), Some(" ")] {
        let claim = live_claim(&lease(&shard, selector, Some("pod-1"), 1_999), now).unwrap();
        assert_eq!(claim.selector, None, "{selector:?}");
    }
}

#[test]
fn the_announcement_round_trips_through_a_lease() {
    let now = SystemTime::now();
    for selector in [None, Some("role=worker,zone in (a,b)")] {
        let (labels, annotations) = announcement(selector);
        let mut written = lease(&[], None, Some("pod-1"), since_epoch(now).as_secs());
        written.metadata.labels = Some(labels);
        written.metadata.annotations = Some(annotations);
        let claim = live_claim(&written, now).expect("a live claim");
        assert_eq!(claim.selector.as_deref(), selector);
    }
}

#[test]
fn a_shard_advances_only_its_own_remediations_and_unlabelled_ones() {
    let labelled = |shard: &str| BTreeMap::from([(SHARD_LABEL.to_string(), shard.to_string())]);
    let unlabelled = BTreeMap::from([("other".to_string(), "x".to_string())]);
    assert!(owned_by(&labelled("shard-a"), Some("shard-a")));
    assert!(!owned_by(&labelled("shard-b"), Some("shard-a")));
    // Made by an older version: the shard that watches its Machine owns it.
    assert!(owned_by(&unlabelled, Some("shard-a")));
    assert!(owned_by(&BTreeMap::new(), Some("shard-a")));
    // A replica without election runs alone (refused beside any shard).
    assert!(owned_by(&labelled("shard-b"), None));
    // What a shard writes, it owns; no other shard does.
    let written = owner_labels(Some("shard-a")).unwrap();
    assert!(owned_by(&written, Some("shard-a")));
    assert!(!owned_by(&written, Some("shard-b")));
    assert_eq!(owner_labels(None), None);
}

#[test]
fn a_shard_name_must_fit_a_label_value() {
    assert!(validate_name("baremend-a").is_ok());
    assert!(validate_name(&"a".repeat(63)).is_ok());
    let error = validate_name(&"a".repeat(64)).unwrap_err();
    assert!(
        error.contains("--lease-name") && error.contains("63"),
        "{error}"
    );
}

#[test]
fn the_refusal_names_both_shards_their_selectors_and_the_machine() {
    let mine = claim("shard-zone", Some("zone=a"), 200);
    let other = claim("shard-workers", Some("role=worker"), 100);
    let text = Conflict {
        mine,
        other,
        overlap: Overlap::Machine("openshift-machine-api/worker-0".into()),
    }
    .to_string();
    for part in [
        "shard-zone",
        "shard-workers",
        "\"zone=a\"",
        "\"role=worker\"",
        "openshift-machine-api/worker-0",
        "shard-workers took its Lease first and acts, shard-zone does not",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    let everything = Conflict {
        mine: claim("unsharded", None, 300),
        other: claim("shard-workers", Some("role=worker"), 100),
        overlap: Overlap::Structural,
    }
    .to_string();
    assert!(
        everything.contains("no --machine-selector: every Machine"),
        "{everything}"
    );
}
