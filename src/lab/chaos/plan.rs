//! What one chaos seed does: a policy, which hosts are fenced directly, and a timed list of
//! faults — all drawn from the seed, so a seed replays the same plan.

use std::time::Duration;

use serde_json::{Value, json};

/// A small, seeded generator (xorshift64*): the plan depends on the seed alone.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (0 is mapped away from xorshift's fixed point).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A duration in `0..max_ms` milliseconds.
    pub fn within(&mut self, max_ms: u64) -> Duration {
        Duration::from_millis(self.below(max_ms))
    }
}

/// One thing the harness does to the cluster or the controller.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The host's kernel hangs (heartbeats stop until a power cycle).
    Hang(String),
    /// Every request to the host's BMC is slowed down.
    BmcLatency { host: String, ms: u64 },
    /// The host's BMC answers the next `count` requests with `status`.
    BmcErrors {
        host: String,
        status: u16,
        count: u32,
    },
    /// The host's BMC drops connections for a while.
    BmcDrops { host: String, for_ms: u64 },
    /// The host's power does not change for a while, whatever is asked.
    StuckPower { host: String, for_ms: u64 },
    /// The host's BMC reports On and Off alternately for a while.
    Flapping { host: String, for_ms: u64 },
    /// The host's BMC Secret holds a wrong password for a while.
    WrongCredentials { host: String, for_ms: u64 },
    /// The API server answers the next `count` matching requests with `status`.
    Api {
        method: String,
        path: String,
        status: u16,
        count: u32,
    },
    /// Every watch stream ends at once.
    DropWatches,
    /// Every watch stream ends, and the next cluster-wide list or watch whose path contains
    /// `path` is answered `ms` late: the controller's cache of that kind lags behind the
    /// others for a while.
    SlowWatch { path: String, ms: u64 },
    /// The watch history is forgotten: re-watches get 410 Gone.
    Compact,
    /// A controller replica dies (no release) and a new one starts after `restart_ms`.
    Crash { restart_ms: u64 },
    /// The trigger is removed from a Machine (an operator, or a recovered health check).
    RemoveTrigger(String),
    /// A trigger is set on a Machine whose host is healthy (a health check's false alarm).
    FalseAlarm(String),
    /// Someone else (an admin, the legacy actuator, a restore) removes every
    /// `reboot.metal3.io/…` request from the host's BareMetalHost: its operator powers it back
    /// on, maybe between our proof and our release.
    RemoveRebootRequest(String),
    /// The controller's BareMetalHost cache freezes for `ms` (its watch answers late) while
    /// our reboot request is removed from the host: the cache still shows the host off and
    /// requested while its operator powers it on.
    LaggingHostCache {
        /// The host.
        host: String,
        /// How late the watch answers.
        ms: u64,
    },
}

/// A seed's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The seed.
    pub seed: u64,
    /// The policy's spec.
    pub policy: Value,
    /// `maxConcurrent` of that policy.
    pub max_concurrent: usize,
    /// Hosts detached from the BareMetal Operator (fenced directly over their BMC).
    pub detached: Vec<String>,
    /// Controller replicas electing a leader.
    pub replicas: usize,
    /// Faults, at their time from the start.
    pub events: Vec<(Duration, Fault)>,
}

/// Workers of the chaos cluster (three control-plane hosts come with them).
pub const WORKERS: usize = 4;

/// The plan of `seed`.
pub fn plan(seed: u64) -> Plan {
    let mut rng = Rng::new(seed);
    let workers: Vec<String> = (0..WORKERS).map(|i| format!("worker-{i}")).collect();
    let masters: Vec<String> = (0..3).map(|i| format!("master-{i}")).collect();
    let strategies = rng
        .pick(&[
            json!(["BareMetalHostRebootApi"]),
            json!(["BareMetalHostRebootApi", "DirectBmc"]),
            json!(["DirectBmc"]),
            json!(["DirectBmc", "BareMetalHostRebootApi"]),
        ])
        .clone();
    let uses_bmc = strategies
        .as_array()
        .is_some_and(|s| s.iter().any(|x| x == "DirectBmc"));
    let detached: Vec<String> = if uses_bmc {
        workers
            .iter()
            .chain(masters.iter())
            .filter(|_| rng.chance(70))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let max_concurrent = 1 + rng.below(2) as usize;
    let release = rng.pick(&["Delete", "OutOfService"]).to_string();
    let policy = json!({
        "strategies": strategies,
        "nodeRelease": release,
        "maxConcurrent": max_concurrent,
        "maxAttempts": 2,
        "storm": {"maxUnhealthyPercent": 60},
        "timeouts": {"powerOffSeconds": 2, "nodeReadySeconds": 4, "readyGraceSeconds": 0},
    });
    let mut events = Vec::new();
    let hung = 1 + rng.below(2);
    for _ in 0..hung {
        let host = rng.pick(&workers).clone();
        events.push((rng.within(800), Fault::Hang(host)));
    }
    let all_hosts: Vec<String> = workers.iter().chain(masters.iter()).cloned().collect();
    let faults = rng.below(5);
    for _ in 0..faults {
        let at = rng.within(2500);
        let host = rng.pick(&all_hosts).clone();
        let fault = match rng.below(13) {
            0 => Fault::BmcLatency {
                host,
                ms: 20 + rng.below(200),
            },
            1 => Fault::BmcErrors {
                host,
                status: *rng.pick(&[500, 503]),
                count: 1 + rng.below(3) as u32,
            },
            2 => Fault::BmcDrops {
                host,
                for_ms: 100 + rng.below(800),
            },
            3 => Fault::StuckPower {
                host,
                for_ms: 200 + rng.below(1500),
            },
            4 => Fault::Flapping {
                host,
                for_ms: 200 + rng.below(1000),
            },
            5 => Fault::WrongCredentials {
                host,
                for_ms: 200 + rng.below(1500),
            },
            6 | 7 => Fault::Api {
                method: rng
                    .pick(&["PUT", "PATCH", "POST", "DELETE", "GET"])
                    .to_string(),
                path: rng
                    .pick(&[
                        "/remediations",
                        "/nodes",
                        "/baremetalhosts",
                        "/machines",
                        "/secrets",
                        "/leases",
                        "/events",
                    ])
                    .to_string(),
                status: *rng.pick(&[409, 429, 500, 503]),
                count: 1 + rng.below(3) as u32,
            },
            // No draw of its own (the plans of earlier seeds stay as they were): half the
            // dropped watches come back late, the time picks the kind and the delay.
            8 if at.as_millis().is_multiple_of(2) => Fault::DropWatches,
            8 => {
                let at_ms = at.as_millis() as u64;
                let kinds = [
                    "v1beta1/machines",
                    "v1alpha1/remediations",
                    "/api/v1/nodes",
                    "v1alpha1/baremetalhosts",
                ];
                Fault::SlowWatch {
                    path: kinds[(at_ms / 2 % 4) as usize].to_string(),
                    ms: 500 + at_ms * 7 % 2500,
                }
            }
            9 => Fault::Compact,
            10 => Fault::Crash {
                restart_ms: rng.below(400),
            },
            11 => Fault::RemoveTrigger(rng.pick(&workers).clone()),
            _ => Fault::FalseAlarm(rng.pick(&all_hosts).clone()),
        };
        events.push((at, fault));
    }
    let replicas = 1 + rng.below(2) as usize;
    // Drawn after everything else, so that earlier seeds keep the faults they had.
    for _ in 0..rng.below(3) {
        let at = rng.within(2500);
        let host = rng.pick(&workers).clone();
        let fault = match rng.below(2) {
            0 => Fault::RemoveRebootRequest(host),
            _ => Fault::LaggingHostCache {
                host,
                ms: 500 + rng.below(2500),
            },
        };
        events.push((at, fault));
    }
    events.sort_by_key(|(at, _)| *at);
    Plan {
        seed,
        policy,
        max_concurrent,
        detached,
        replicas,
        events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_makes_the_same_plan_and_seeds_differ() {
        let a = plan(42);
        let b = plan(42);
        assert_eq!(a.events, b.events);
        assert_eq!(a.policy, b.policy);
        assert_eq!(a.detached, b.detached);
        let distinct: std::collections::HashSet<String> =
            (0..50).map(|s| format!("{:?}", plan(s).events)).collect();
        assert!(distinct.len() > 40, "{}", distinct.len());
    }

    #[test]
    fn every_plan_hangs_a_worker_and_keeps_to_its_window() {
        for seed in 0..200 {
            let p = plan(seed);
            assert!(p.events.iter().any(|(_, f)| matches!(f, Fault::Hang(_))));
            assert!(
                p.events
                    .iter()
                    .all(|(at, _)| *at < Duration::from_millis(2500))
            );
            assert!(p.events.windows(2).all(|w| w[0].0 <= w[1].0));
        }
    }
}
