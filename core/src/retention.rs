//! Retention: which finished objects of one Machine or Node to delete. A pure decision over
//! the objects' standing and finish times; the controllers observe and delete.
//!
//! Expected flow: a controller lists the objects of one Machine (Remediations) or Node
//! (DriftRemediations) in creation order, states each one's [`Standing`] and finish time,
//! calls [`to_prune`] with `keepFinished` and a per-pass bound, and deletes what it returns
//! (UID precondition, leadership checked first), telling it once in an Event.
//!
//! Guarantees (property-tested below):
//! - an object that is not [`Standing::Finished`] is never returned: not one under way, not
//!   an unacknowledged `Failed` one, not one the caller must keep for another reason;
//! - the newest object (the last given) is never returned: a controller decides its next
//!   start from it (a Failed one blocks a restart);
//! - the `keep` newest finished objects are never returned; every other finished one is, the
//!   oldest first, at most `bound` of them.
//!
//! Caveats: "newest" is by finish time, ties broken by creation order; an unknown finish
//! time reads as the epoch (oldest), so a malformed object goes first, never a good one.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::api::annotations::{ACKNOWLEDGED, RETRIED_BY, RETRY};

/// How retention sees one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Under way, or ended but still owing work: never deleted, not counted.
    Open,
    /// Kept whatever the count (an unacknowledged `Failed` one, or one a safety rule still
    /// reads): never deleted, not counted.
    Kept,
    /// Finished and acknowledged where that matters: counted; the oldest beyond the limit go.
    Finished,
}

/// One object of a Machine or Node, as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<K> {
    /// What the caller deletes it by.
    pub key: K,
    /// Its standing.
    pub standing: Standing,
    /// When it finished, since the epoch.
    pub finished_at: Duration,
}

/// The finished objects to delete, oldest first: every [`Standing::Finished`] one but the
/// `keep` newest and the newest object of all, at most `bound`. `records` are in creation
/// order.
pub fn to_prune<K: Clone>(records: &[Record<K>], keep: usize, bound: usize) -> Vec<K> {
    let newest = records.len().saturating_sub(1);
    let mut finished: Vec<(usize, &Record<K>)> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.standing == Standing::Finished)
        .collect();
    // Newest first: by finish time, then by creation order.
    finished.sort_by(|(a_at, a), (b_at, b)| {
        b.finished_at
            .cmp(&a.finished_at)
            .then_with(|| b_at.cmp(a_at))
    });
    let mut prune: Vec<(usize, &Record<K>)> = finished
        .into_iter()
        .skip(keep)
        .filter(|(at, _)| *at != newest)
        .collect();
    prune.reverse();
    prune.truncate(bound);
    prune.into_iter().map(|(_, r)| r.key.clone()).collect()
}

/// What an operator's `baremend.io/retry` on a finished object asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryAsk {
    /// No retry annotation.
    NotAsked,
    /// `"true"`: try again.
    Retry,
    /// Any other value (told in a Warning, never guessed at).
    Malformed(String),
}

/// What the annotations ask for.
pub fn retry_ask(annotations: &BTreeMap<String, String>) -> RetryAsk {
    match annotations.get(RETRY).map(String::as_str) {
        None => RetryAsk::NotAsked,
        Some("true") => RetryAsk::Retry,
        Some(other) => RetryAsk::Malformed(other.to_string()),
    }
}

/// Whether a finished object's failure has been seen: `baremend.io/acknowledged: "true"`,
/// or retried (`baremend.io/retried-by`).
pub fn acknowledged(annotations: &BTreeMap<String, String>) -> bool {
    annotations.get(ACKNOWLEDGED).map(String::as_str) == Some("true")
        || annotations.contains_key(RETRIED_BY)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STANDINGS: [Standing; 3] = [Standing::Open, Standing::Kept, Standing::Finished];

    fn record(key: usize, standing: Standing, at: u64) -> Record<usize> {
        Record {
            key,
            standing,
            finished_at: Duration::from_secs(at),
        }
    }

    /// Every list of up to five objects: each standing, finish times from a small set (ties
    /// included), creation order = key.
    fn all_cases() -> Vec<Vec<Record<usize>>> {
        let mut cases = vec![Vec::new()];
        for len in 1..=5u32 {
            let choices: u32 = 3 * 3;
            for code in 0..choices.pow(len) {
                let mut rest = code;
                let records = (0..len as usize)
                    .map(|key| {
                        let choice = rest % choices;
                        rest /= choices;
                        record(key, STANDINGS[(choice % 3) as usize], u64::from(choice / 3))
                    })
                    .collect();
                cases.push(records);
            }
        }
        cases
    }

    #[test]
    fn the_properties_hold_for_every_small_case() {
        let mut pruned_some = 0;
        for records in all_cases() {
            for keep in 1..=4 {
                for bound in [1, 2, 100] {
                    let pruned = to_prune(&records, keep, bound);
                    check(&records, keep, bound, &pruned);
                    pruned_some += usize::from(!pruned.is_empty());
                }
            }
        }
        assert!(pruned_some > 1000, "the sweep must reach pruning cases");
    }

    fn check(records: &[Record<usize>], keep: usize, bound: usize, pruned: &[usize]) {
        let case = format!("{records:?} keep {keep} bound {bound} -> {pruned:?}");
        let finished: Vec<&Record<usize>> = records
            .iter()
            .filter(|r| r.standing == Standing::Finished)
            .collect();
        for key in pruned {
            assert_eq!(records[*key].standing, Standing::Finished, "{case}");
            assert_ne!(*key + 1, records.len(), "the newest was pruned: {case}");
            // Only one with at least `keep` finished ones newer than it.
            let newer = finished
                .iter()
                .filter(|r| newer_than(r, &records[*key]))
                .count();
            assert!(newer >= keep, "one of the {keep} newest pruned: {case}");
        }
        // Everything else beyond the limit goes, up to the bound, the oldest first: exactly
        // the `bound` oldest of those due, not merely as many of them in order.
        let mut due: Vec<&Record<usize>> = finished
            .iter()
            .copied()
            .filter(|r| r.key + 1 != records.len())
            .filter(|r| finished.iter().filter(|o| newer_than(o, r)).count() >= keep)
            .collect();
        due.sort_by_key(|r| (r.finished_at, r.key));
        let oldest_due: Vec<usize> = due.iter().take(bound).map(|r| r.key).collect();
        assert_eq!(pruned, oldest_due, "the oldest due: {case}");
        for pair in pruned.windows(2) {
            assert!(
                newer_than(&records[pair[1]], &records[pair[0]]),
                "oldest first: {case}"
            );
        }
    }

    fn newer_than(a: &Record<usize>, b: &Record<usize>) -> bool {
        (a.finished_at, a.key) > (b.finished_at, b.key)
    }

    #[test]
    fn the_retry_and_acknowledged_annotations_read_only_true_as_yes() {
        let of = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(retry_ask(&of(&[])), RetryAsk::NotAsked);
        assert_eq!(retry_ask(&of(&[(RETRY, "true")])), RetryAsk::Retry);
        assert_eq!(
            retry_ask(&of(&[(RETRY, "yes")])),
            RetryAsk::Malformed("yes".into())
        );
        assert!(!acknowledged(&of(&[(ACKNOWLEDGED, "True")])));
        assert!(acknowledged(&of(&[(ACKNOWLEDGED, "true")])));
        assert!(acknowledged(&of(&[(RETRIED_BY, "worker-0-2")])));
        assert!(!acknowledged(&of(&[(RETRY, "true")])));
    }

    #[test]
    fn the_oldest_finished_go_and_failed_ones_stay() {
        let records = [
            record(0, Standing::Finished, 10),
            record(1, Standing::Kept, 20),
            record(2, Standing::Finished, 30),
            record(3, Standing::Finished, 40),
            record(4, Standing::Open, 0),
        ];
        assert_eq!(to_prune(&records, 2, 10), vec![0]);
        assert_eq!(to_prune(&records, 1, 10), vec![0, 2]);
        assert_eq!(to_prune(&records, 1, 1), vec![0]);
        assert_eq!(to_prune(&records, 3, 10), Vec::<usize>::new());
    }
}
