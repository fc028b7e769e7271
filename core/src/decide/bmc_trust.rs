//! What a BMC's word is worth: whether its transport lets someone on the path forge its
//! answers, whether the readings of it that this process has seen can prove its host off,
//! and how long a BMC seen contradicting itself stays untrusted.
//!
//! # Expected flow
//! 1. Every reader of a BMC in the process — the fencing reads, the power monitor, the
//!    fencing-readiness probe — reads it through a driver that tells the [`BmcLedger`] what it
//!    read and when (`witnessed.rs`); our power requests to it are told too.
//! 2. A fencing read pair asks [`BmcLedger::check_proof`] whether any reading of that BMC, by
//!    any reader, between or around its reads contradicts them; [`judge`] decides.
//! 3. A contradiction marks the BMC untrustworthy until [`BmcLedger`]'s distrust period has
//!    passed since it was last seen contradicting itself ([`Distrust`]); meanwhile no reading
//!    of it is proof and no start rests on it.
//!
//! # Guarantees
//! - Pure: no I/O, no clock (every method takes `now`). The ledger is bounded: at most
//!   [`READINGS_KEPT`] readings per BMC, none older than [`WINDOW`], at most [`MAX_BMCS`]
//!   BMCs (the least recently read untrusting entries go first).
//! - The rule ([`judge`]): once a BMC reads Off within the window, every later reading in it
//!   must read Off too. Readings before our last power request to the BMC do not count (the
//!   host was meant to change), nor do those that already marked it untrustworthy.
//! - Only a reading after our power-off request (or around a fencing read pair) can mark a
//!   BMC: a host someone else powers on after our power-on request is not a lie.
//!
//! # Caveats
//! - A reading this process never sees (another process's, a driver's internal read before a
//!   power request) cannot be judged: a BMC that lies consistently to us defeats any reader.
//! - The ledger lives in memory: a restart forgets contradictions, and a start after it rests
//!   on the fresh reads alone.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use baremend_drivers::{BmcAddress, DriverKind, PowerState};

/// Readings kept per BMC (older ones are dropped first).
pub const READINGS_KEPT: usize = 32;

/// BMCs the ledger remembers at once.
pub const MAX_BMCS: usize = 16_384;

/// How far around a fencing read pair other readings count, and how long any reading is
/// kept: a read half a minute before the proof still tells about the BMC's word; one from
/// the monitor's previous minute does not.
pub const WINDOW: Duration = Duration::from_secs(30);

/// How long a BMC stays untrusted after it was last seen contradicting itself, unless the
/// controller is configured otherwise (`ControllerOptions::bmc_distrust`).
pub const DEFAULT_DISTRUST: Duration = Duration::from_secs(600);

/// Whether someone on the path could forge a BMC's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Redfish over verified HTTPS, or IPMI 2.0 RMCP+ ("lanplus": every message carries an
    /// integrity code keyed by the password; the driver speaks no other IPMI).
    Authenticated,
    /// Anyone on the path can answer in the BMC's name.
    Forgeable(Insecurity),
}

/// Why a transport is forgeable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insecurity {
    /// Redfish over plain HTTP (`redfish+http://`).
    PlainHttp,
    /// Redfish over HTTPS without certificate verification (`insecureSkipVerify`, or a
    /// BareMetalHost's `disableCertificateVerification`).
    SkipVerify,
}

impl fmt::Display for Insecurity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Insecurity::PlainHttp => {
                "plain HTTP: whoever is on the path can answer Off in the BMC's name"
            }
            Insecurity::SkipVerify => {
                "certificate verification is off: whoever is on the path can answer Off in the BMC's name"
            }
        })
    }
}

/// The transport of a BMC at `address`, with certificate verification off when
/// `skip_verify`.
pub fn transport(address: &BmcAddress, skip_verify: bool) -> Transport {
    match address.kind() {
        // The driver speaks RMCP+ only, with integrity-protected cipher suites (3 and 17);
        // IPMI 1.5 "lan" sessions, whose messages may carry no authentication, are never
        // opened.
        DriverKind::Ipmi => Transport::Authenticated,
        DriverKind::Redfish if !address.uses_tls() => Transport::Forgeable(Insecurity::PlainHttp),
        DriverKind::Redfish if skip_verify => Transport::Forgeable(Insecurity::SkipVerify),
        DriverKind::Redfish => Transport::Authenticated,
    }
}

/// Who read a BMC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// A remediation's reads (the proof, a request made again).
    Fencing,
    /// The power monitor.
    Monitor,
    /// A fencing-readiness probe (the check or a dry run).
    Probe,
}

impl fmt::Display for Reader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reader::Fencing => "the fencing read",
            Reader::Monitor => "the power monitor",
            Reader::Probe => "the readiness probe",
        })
    }
}

/// One reading of a BMC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// When it was read (since the epoch).
    pub at: Duration,
    /// What it said.
    pub state: PowerState,
    /// Who read it.
    pub by: Reader,
}

/// A power request we sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Power off.
    Off,
    /// Power on.
    On,
}

/// A BMC that read Off, then something else, with no request of ours between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contradiction {
    /// The Off reading.
    pub off: Reading,
    /// The reading after it that was not Off.
    pub then: Reading,
}

impl fmt::Display for Contradiction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the BMC contradicted itself: {} read Off, then {} read {:?} {} ms later, with no power request between",
            self.off.by,
            self.then.by,
            self.then.state,
            self.then.at.saturating_sub(self.off.at).as_millis()
        )
    }
}

/// The first contradiction among `readings` (oldest first) at or after `since`: an Off
/// followed by any reading that is not Off.
pub fn judge(readings: &[Reading], since: Duration) -> Option<Contradiction> {
    let mut first_off: Option<&Reading> = None;
    for reading in readings.iter().filter(|r| r.at >= since) {
        match (first_off, reading.state == PowerState::Off) {
            (None, true) => first_off = Some(reading),
            (Some(off), false) => {
                return Some(Contradiction {
                    off: off.clone(),
                    then: reading.clone(),
                });
            }
            _ => {}
        }
    }
    None
}

/// A BMC marked untrustworthy, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distrust {
    /// Trusted again from this instant (since the epoch) unless it contradicts itself again.
    pub until: Duration,
    /// The contradiction that marked it last.
    pub why: Contradiction,
}

impl fmt::Display for Distrust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "untrustworthy until {} s after the epoch: {}",
            self.until.as_secs(),
            self.why
        )
    }
}

/// What the ledger knows of one BMC.
#[derive(Debug, Clone, Default)]
struct History {
    readings: VecDeque<Reading>,
    /// Our last power request to it, and when.
    request: Option<(Duration, Request)>,
    /// The last mark, if any (also after it expired: the readings before it are spent).
    distrust: Option<Distrust>,
    /// The latest reading, request or mark.
    touched: Duration,
}

impl History {
    /// Readings that may still be judged: after our last request and after the last mark.
    fn judged_from(&self, from: Duration) -> Duration {
        let after_request = self.request.map_or(Duration::ZERO, |(at, _)| at);
        // A mark spends the readings up to its contradiction: they never mark it again.
        let after_mark = self
            .distrust
            .as_ref()
            .map_or(Duration::ZERO, |d| d.why.then.at + Duration::from_nanos(1));
        from.max(after_request).max(after_mark)
    }

    fn mark(&mut self, why: Contradiction, now: Duration, distrust: Duration) -> Distrust {
        let mark = Distrust {
            until: now + distrust,
            why,
        };
        self.distrust = Some(mark.clone());
        mark
    }

    fn distrusted(&self, now: Duration) -> Option<&Distrust> {
        self.distrust.as_ref().filter(|d| now < d.until)
    }
}

/// Every reading of every BMC the process has seen lately, keyed by the BMC (its address
/// without credentials, as drivers show it); bounded (see the module's Guarantees).
#[derive(Debug)]
pub struct BmcLedger {
    bmcs: Mutex<HashMap<String, History>>,
    distrust: Duration,
}

impl Default for BmcLedger {
    fn default() -> Self {
        BmcLedger::new(DEFAULT_DISTRUST)
    }
}

impl BmcLedger {
    /// A ledger whose marks last `distrust`.
    pub fn new(distrust: Duration) -> Self {
        BmcLedger {
            bmcs: Mutex::new(HashMap::new()),
            distrust,
        }
    }

    fn with<T>(&self, bmc: &str, now: Duration, f: impl FnOnce(&mut History) -> T) -> T {
        let mut bmcs = self.bmcs.lock().unwrap_or_else(|e| e.into_inner());
        if !bmcs.contains_key(bmc) && bmcs.len() >= MAX_BMCS {
            evict(&mut bmcs, now);
        }
        let history = bmcs.entry(bmc.to_string()).or_default();
        history.touched = now;
        let horizon = now.saturating_sub(WINDOW);
        while history
            .readings
            .front()
            .is_some_and(|r| r.at < horizon || history.readings.len() >= READINGS_KEPT)
        {
            history.readings.pop_front();
        }
        f(history)
    }

    /// Records a reading; returns the mark it caused, if it showed the BMC contradicting
    /// itself while we fence it (after our power-off request).
    pub fn record(&self, bmc: &str, reading: Reading, now: Duration) -> Option<Distrust> {
        let distrust = self.distrust;
        self.with(bmc, now, |history| {
            history.readings.push_back(reading);
            if !matches!(history.request, Some((_, Request::Off))) {
                return None;
            }
            let from = history.judged_from(now.saturating_sub(WINDOW));
            let readings: Vec<Reading> = history.readings.iter().cloned().collect();
            let found = judge(&readings, from)?;
            Some(history.mark(found, now, distrust))
        })
    }

    /// Records that we asked the BMC for a power change at `at`: readings before it no
    /// longer count against the host's new state.
    pub fn requested(&self, bmc: &str, request: Request, at: Duration) {
        self.with(bmc, at, |history| history.request = Some((at, request)));
    }

    /// Whether the BMC is untrustworthy now.
    pub fn distrusted(&self, bmc: &str, now: Duration) -> Option<Distrust> {
        let bmcs = self.bmcs.lock().unwrap_or_else(|e| e.into_inner());
        bmcs.get(bmc)?.distrusted(now).cloned()
    }

    /// Whether the readings of the BMC from `WINDOW` before `first_read` (the first read of a
    /// proof) up to now let that proof stand: not while the BMC is untrustworthy, and not when
    /// any reader saw it read something else after an Off (which marks it).
    pub fn check_proof(
        &self,
        bmc: &str,
        first_read: Duration,
        now: Duration,
    ) -> Result<(), Distrust> {
        let distrust = self.distrust;
        self.with(bmc, now, |history| {
            if let Some(mark) = history.distrusted(now) {
                return Err(mark.clone());
            }
            let from = history.judged_from(first_read.saturating_sub(WINDOW));
            let readings: Vec<Reading> = history.readings.iter().cloned().collect();
            match judge(&readings, from) {
                Some(found) => Err(history.mark(found, now, distrust)),
                None => Ok(()),
            }
        })
    }

    /// The BMCs untrustworthy now, sorted.
    pub fn untrustworthy(&self, now: Duration) -> Vec<String> {
        let bmcs = self.bmcs.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<String> = bmcs
            .iter()
            .filter(|(_, h)| h.distrusted(now).is_some())
            .map(|(bmc, _)| bmc.clone())
            .collect();
        list.sort();
        list
    }

    /// How many BMCs the ledger holds.
    pub fn len(&self) -> usize {
        self.bmcs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Makes room for one more BMC: every entry untouched for a window and not untrustworthy
/// goes; if none does, the least recently touched one that is not untrustworthy (or, with
/// every entry untrustworthy, the least recently touched).
fn evict(bmcs: &mut HashMap<String, History>, now: Duration) {
    let horizon = now.saturating_sub(WINDOW);
    bmcs.retain(|_, h| h.touched >= horizon || h.distrusted(now).is_some());
    if bmcs.len() < MAX_BMCS {
        return;
    }
    let oldest = bmcs
        .iter()
        .min_by_key(|(_, h)| (h.distrusted(now).is_some(), h.touched))
        .map(|(bmc, _)| bmc.clone());
    if let Some(bmc) = oldest {
        bmcs.remove(&bmc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn at(ms: u64, state: PowerState, by: Reader) -> Reading {
        Reading {
            at: Duration::from_millis(ms),
            state,
            by,
        }
    }

    /// Every reading a BMC can give, as the judge sees it.
    fn states() -> [PowerState; 5] {
        [
            PowerState::Off,
            PowerState::On,
            PowerState::PoweringOff,
            PowerState::PoweringOn,
            PowerState::Unknown("Paused".into()),
        ]
    }

    /// Every sequence of up to `len` readings, each state from `states()`.
    fn sequences(len: usize) -> Vec<Vec<PowerState>> {
        let mut all = vec![vec![]];
        let mut frontier = vec![vec![]];
        for _ in 0..len {
            let mut next = Vec::new();
            for seq in &frontier {
                for state in states() {
                    let mut longer: Vec<PowerState> = seq.clone();
                    longer.push(state);
                    next.push(longer);
                }
            }
            all.extend(next.iter().cloned());
            frontier = next;
        }
        all
    }

    #[test]
    fn a_sequence_is_contradicted_exactly_when_something_other_than_off_follows_an_off() {
        // Exhaustive over every sequence of up to five readings (3,906 sequences), by every
        // reader: the judge agrees with the rule stated plainly.
        for seq in sequences(5) {
            for by in [Reader::Fencing, Reader::Monitor, Reader::Probe] {
                let readings: Vec<Reading> = seq
                    .iter()
                    .enumerate()
                    .map(|(i, s)| at(1000 + 10 * i as u64, s.clone(), by))
                    .collect();
                let first_off = seq.iter().position(|s| *s == PowerState::Off);
                let expected = first_off.and_then(|i| {
                    let j = i + 1 + seq[i + 1..].iter().position(|s| *s != PowerState::Off)?;
                    Some((i, j))
                });
                let got = judge(&readings, Duration::ZERO);
                match expected {
                    None => assert_eq!(got, None, "{seq:?}"),
                    Some((i, j)) => {
                        let found = got.unwrap_or_else(|| panic!("{seq:?}"));
                        assert_eq!(found.off, readings[i], "{seq:?}");
                        assert_eq!(found.then, readings[j], "{seq:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn readings_before_the_window_start_are_not_judged() {
        use PowerState::{Off, On};
        let readings = [
            at(100, Off, Reader::Monitor),
            at(200, On, Reader::Monitor),
            at(300, Off, Reader::Fencing),
            at(400, Off, Reader::Fencing),
        ];
        assert!(judge(&readings, Duration::ZERO).is_some());
        assert!(judge(&readings, Duration::from_millis(150)).is_none());
        assert!(judge(&readings, Duration::from_millis(300)).is_none());
    }

    fn read(at: Duration, state: PowerState, by: Reader) -> Reading {
        Reading { at, state, by }
    }

    #[test]
    fn a_monitor_on_between_two_fencing_offs_voids_the_proof_and_marks_the_bmc() {
        use PowerState::{Off, On};
        let ledger = BmcLedger::new(10 * S);
        let bmc = "redfish://bmc-0/redfish/v1/Systems/1";
        ledger.requested(bmc, Request::Off, 10 * S);
        let ms = |n: u64| 10 * S + Duration::from_millis(n);
        let first = read(ms(100), Off, Reader::Fencing);
        assert!(ledger.record(bmc, first, ms(100)).is_none());
        // The flapping BMC answers the monitor On: marked at once.
        let mark = ledger
            .record(bmc, read(ms(110), On, Reader::Monitor), ms(110))
            .expect("marked");
        assert_eq!(mark.until, ms(110) + 10 * S);
        assert_eq!(mark.why.then.by, Reader::Monitor);
        let shown = mark.to_string();
        assert!(shown.contains("the power monitor read On"), "{shown}");
        // The fencing's second Off does not make a proof of it.
        ledger.record(bmc, read(ms(120), Off, Reader::Fencing), ms(120));
        assert_eq!(ledger.check_proof(bmc, ms(100), ms(120)), Err(mark.clone()));
        assert_eq!(ledger.untrustworthy(ms(130)), vec![bmc.to_string()]);
        // Trusted again once the period has passed; the old contradiction is spent.
        let later = ms(110) + 10 * S;
        assert_eq!(ledger.distrusted(bmc, later), None);
        assert!(ledger.untrustworthy(later).is_empty());
        ledger.record(bmc, read(later + S, Off, Reader::Fencing), later + S);
        ledger.record(
            bmc,
            read(later + 2 * S, Off, Reader::Fencing),
            later + 2 * S,
        );
        assert_eq!(ledger.check_proof(bmc, later + S, later + 2 * S), Ok(()));
    }

    #[test]
    fn a_contradiction_seen_only_at_the_proof_marks_the_bmc_too() {
        use PowerState::{Off, On};
        let ledger = BmcLedger::new(10 * S);
        let bmc = "ipmi://bmc-1:623";
        // No request of ours is known (a restart): readings around the proof still count.
        for (ms, state, by) in [
            (100, Off, Reader::Probe),
            (200, On, Reader::Monitor),
            (300, Off, Reader::Fencing),
            (310, Off, Reader::Fencing),
        ] {
            let now = Duration::from_millis(ms);
            assert!(ledger.record(bmc, at(ms, state, by), now).is_none());
        }
        let now = Duration::from_millis(320);
        let mark = ledger
            .check_proof(bmc, Duration::from_millis(300), now)
            .unwrap_err();
        assert_eq!(mark.why.off.by, Reader::Probe);
        assert_eq!(ledger.distrusted(bmc, now), Some(mark));
    }

    #[test]
    fn a_host_powered_off_then_on_at_our_request_is_no_contradiction() {
        use PowerState::{Off, On, PoweringOff, PoweringOn};
        let ledger = BmcLedger::new(10 * S);
        let bmc = "redfish://bmc-2";
        let ms = Duration::from_millis;
        ledger.requested(bmc, Request::Off, ms(0));
        for (t, state) in [(10, On), (20, PoweringOff), (30, Off), (40, Off)] {
            assert!(
                ledger
                    .record(bmc, at(t, state, Reader::Fencing), ms(t))
                    .is_none()
            );
        }
        assert_eq!(ledger.check_proof(bmc, ms(30), ms(40)), Ok(()));
        ledger.requested(bmc, Request::On, ms(50));
        for (t, state) in [(60, Off), (70, PoweringOn), (80, On)] {
            assert!(
                ledger
                    .record(bmc, at(t, state, Reader::Monitor), ms(t))
                    .is_none()
            );
        }
        // Someone else powering a host on while nobody fences it marks nothing.
        let other = "redfish://bmc-3";
        ledger.record(other, at(10, Off, Reader::Monitor), ms(10));
        assert!(
            ledger
                .record(other, at(20, On, Reader::Monitor), ms(20))
                .is_none()
        );
        assert!(ledger.untrustworthy(ms(30)).is_empty());
    }

    #[test]
    fn old_readings_age_out_of_the_window() {
        use PowerState::{Off, On};
        let ledger = BmcLedger::new(10 * S);
        let bmc = "redfish://bmc-4";
        ledger.record(bmc, at(0, Off, Reader::Monitor), Duration::ZERO);
        ledger.record(bmc, at(1000, On, Reader::Monitor), S);
        let late = WINDOW + 5 * S;
        ledger.record(
            bmc,
            Reading {
                at: late,
                state: Off,
                by: Reader::Fencing,
            },
            late,
        );
        assert_eq!(ledger.check_proof(bmc, late, late), Ok(()));
    }

    #[test]
    fn the_ledger_is_bounded_per_bmc_and_in_bmcs() {
        let ledger = BmcLedger::new(10 * S);
        for i in 0..(READINGS_KEPT as u64 * 3) {
            let now = Duration::from_millis(i);
            ledger.record("redfish://one", at(i, PowerState::On, Reader::Monitor), now);
        }
        {
            let bmcs = ledger.bmcs.lock().unwrap();
            assert_eq!(bmcs["redfish://one"].readings.len(), READINGS_KEPT);
        }
        // One untrustworthy BMC survives a flood of others.
        let liar = "redfish://liar";
        ledger.requested(liar, Request::Off, Duration::ZERO);
        ledger.record(liar, at(1, PowerState::Off, Reader::Fencing), S);
        assert!(
            ledger
                .record(liar, at(2, PowerState::On, Reader::Monitor), S)
                .is_some()
        );
        for i in 0..(MAX_BMCS as u64 + 100) {
            let now = S + Duration::from_micros(i);
            let reading = Reading {
                at: now,
                state: PowerState::On,
                by: Reader::Monitor,
            };
            ledger.record(&format!("redfish://bmc-{i}"), reading, now);
        }
        assert!(ledger.len() <= MAX_BMCS);
        assert!(ledger.distrusted(liar, 2 * S).is_some());
    }

    #[test]
    fn only_verified_https_and_ipmi_lanplus_are_authenticated() {
        let parse = |a: &str| BmcAddress::parse(a).unwrap();
        let cases = [
            (
                "redfish://bmc/redfish/v1/Systems/1",
                false,
                Transport::Authenticated,
            ),
            ("redfish+https://bmc", false, Transport::Authenticated),
            (
                "redfish://bmc",
                true,
                Transport::Forgeable(Insecurity::SkipVerify),
            ),
            (
                "redfish+http://bmc",
                false,
                Transport::Forgeable(Insecurity::PlainHttp),
            ),
            (
                "idrac-redfish+http://bmc",
                true,
                Transport::Forgeable(Insecurity::PlainHttp),
            ),
            ("ipmi://bmc", false, Transport::Authenticated),
            ("bmc:623", false, Transport::Authenticated),
        ];
        for (address, skip, want) in cases {
            assert_eq!(transport(&parse(address), skip), want, "{address} {skip}");
        }
    }
}
