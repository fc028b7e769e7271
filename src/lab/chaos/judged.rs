//! How many times each invariant of the chaos checker (`check.rs`) actually judged
//! something: a Node released, a remediation started or ended, a host found off at the end, a
//! power-off on a Node the MCO could be busy with, a forcefile step, a NodeHealthCheck
//! timeout, a tenant's request or `HostBmc`, a shard's Remediation or Event, a Node step
//! during a workload cluster's outage, a hostile workload API server asked. A run whose invariants pass without judging anything proves nothing; the chaos
//! test asserts every count is above zero over the CI seeds.
//!
//! Expected flow: the checker calls [`Judged::add`] where an invariant could have been
//! broken; the run sums the seeds' counts with [`Judged::merge`] and prints them.
//! Guarantees: the invariants are numbered 1 to [`INVARIANTS`], as in the checker's doc.
//! Caveats: a count says the case came up, not that it came up in every shape.

use std::fmt;

/// The number of invariants the checker judges.
pub const INVARIANTS: usize = 13;

/// Per invariant (1 to [`INVARIANTS`]), how many cases it judged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Judged([usize; INVARIANTS]);

impl Judged {
    /// One more case judged by `invariant` (1 to [`INVARIANTS`]; another number is a bug of
    /// the checker, and panics in its tests).
    pub fn add(&mut self, invariant: usize) {
        debug_assert!((1..=INVARIANTS).contains(&invariant), "{invariant}");
        if let Some(count) = invariant
            .checked_sub(1)
            .and_then(|index| self.0.get_mut(index))
        {
            *count += 1;
        }
    }

    /// How many cases `invariant` judged.
    pub fn of(&self, invariant: usize) -> usize {
        invariant
            .checked_sub(1)
            .and_then(|index| self.0.get(index))
            .copied()
            .unwrap_or(0)
    }

    /// Adds another seed's counts.
    pub fn merge(&mut self, other: &Judged) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// The invariants that judged nothing.
    pub fn idle(&self) -> Vec<usize> {
        (1..=INVARIANTS).filter(|i| self.of(*i) == 0).collect()
    }
}

/// `1: 812, 2: 640, …`, the form the chaos verdict prints and its test reads.
impl fmt::Display for Judged {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts: Vec<String> = (1..=INVARIANTS)
            .map(|i| format!("{i}: {}", self.of(i)))
            .collect();
        write!(f, "{}", counts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_invariant_and_print_in_order() {
        let mut one = Judged::default();
        one.add(1);
        one.add(1);
        one.add(9);
        let mut two = Judged::default();
        two.add(1);
        two.add(4);
        one.merge(&two);
        assert_eq!(one.of(1), 3);
        assert_eq!(one.of(4), 1);
        assert_eq!(one.of(9), 1);
        assert_eq!(one.of(0), 0);
        assert_eq!(one.of(10), 0);
        assert_eq!(one.of(11), 0);
        assert_eq!(one.idle(), vec![2, 3, 5, 6, 7, 8, 10, 11, 12, 13]);
        assert_eq!(
            one.to_string(),
            "1: 3, 2: 0, 3: 0, 4: 1, 5: 0, 6: 0, 7: 0, 8: 0, 9: 1, 10: 0, 11: 0, 12: 0, 13: 0"
        );
    }
}
