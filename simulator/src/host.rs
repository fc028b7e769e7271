//! One simulated host: its power state machine and the faults its BMC can show.
//!
//! The host is protocol-neutral: the Redfish service (and later the IPMI one) translate their
//! requests into [`PowerAction`]s and read [`ObservedPower`] back, so one host can be reached by
//! several protocols at once.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Clock;

/// The physical power of a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Power {
    /// Powered on.
    On,
    /// Powered off.
    Off,
}

/// What a BMC reports when asked for the power state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ObservedPower {
    /// On.
    On,
    /// Off.
    Off,
    /// Turning on.
    PoweringOn,
    /// Turning off.
    PoweringOff,
}

impl ObservedPower {
    /// The Redfish `PowerState` value.
    pub fn redfish(self) -> &'static str {
        match self {
            ObservedPower::On => "On",
            ObservedPower::Off => "Off",
            ObservedPower::PoweringOn => "PoweringOn",
            ObservedPower::PoweringOff => "PoweringOff",
        }
    }
}

/// A power request, whatever protocol carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PowerAction {
    /// Power on.
    On,
    /// Cut the power.
    ForceOff,
    /// Ask the OS to shut down (ignored by a hung OS, see [`Faults::ignore_graceful_shutdown`]).
    GracefulShutdown,
    /// Cut the power, then power on.
    ForceRestart,
    /// Press the power button: toggles.
    PushPowerButton,
}

/// Misbehaviour a host's BMC shows. All off by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Added to every request that touches this host.
    pub latency_ms: u64,
    /// Answer requests that touch this host with this HTTP status.
    pub error_status: Option<u16>,
    /// How many requests get `error_status`; unlimited when absent.
    pub error_count: Option<u32>,
    /// Redfish: the `Retry-After` (seconds) sent with an injected 429 or 503; 1 when absent.
    pub retry_after_s: Option<u64>,
    /// Close the connection without answering requests that touch this host.
    pub drop_connections: bool,
    /// Accept power requests but never change the power.
    pub stuck_power: bool,
    /// Report On and Off alternately on every read, whatever the real state.
    pub flapping: bool,
    /// Answer resets with 202 Accepted and a task monitor that completes with the transition.
    pub async_reset: bool,
    /// Advertise only `PushPowerButton` as reset type.
    pub push_button_only: bool,
    /// The OS ignores graceful shutdown requests (a hung kernel).
    pub ignore_graceful_shutdown: bool,
    /// Report this power state, whatever the real one, for the next `stale_reads` reads (every
    /// read when that is absent): a BMC whose reading lags a change made elsewhere (the front
    /// panel, another client), so a client decides on a state that is no longer true.
    pub stale_power: Option<Power>,
    /// How many reads get `stale_power`; unlimited when absent.
    pub stale_reads: Option<u32>,
}

/// One power request as the BMC received it, for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerRequest {
    /// When it arrived (clock time, milliseconds).
    pub at_ms: u128,
    /// The same, in microseconds: a benchmark's figures of a few milliseconds are read to a
    /// microsecond, not to ±1 ms.
    #[serde(default)]
    pub at_us: u128,
    /// What was asked.
    pub action: PowerAction,
}

/// One change of the physical power, for the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerChange {
    /// When the power reached its new state (clock time, milliseconds).
    pub at_ms: u128,
    /// The same, in microseconds.
    #[serde(default)]
    pub at_us: u128,
    /// The new power.
    pub power: Power,
}

/// A fault that applies to one request, decided when the request arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFault {
    /// Answer normally.
    None,
    /// Answer with this HTTP status.
    Status(u16),
    /// Drop the connection.
    Drop,
}

#[derive(Debug)]
struct Pending {
    to: Power,
    due: Duration,
}

#[derive(Debug)]
struct HostState {
    power: Power,
    pending: Option<Pending>,
    faults: Faults,
    errors_sent: u32,
    stale_sent: u32,
    flap: bool,
    /// Off answers the flapping fault gave while the host was on.
    false_offs: u64,
    version: u64,
    history: Vec<PowerChange>,
    requests: Vec<PowerRequest>,
    boot_target: String,
    boot_enabled: String,
}

/// A simulated host.
#[derive(Debug)]
pub struct SimHost {
    id: String,
    uuid: String,
    clock: Arc<dyn Clock>,
    power_delay: Duration,
    state: Mutex<HostState>,
}

impl SimHost {
    /// A host that starts in `power`; transitions take `power_delay`.
    pub fn new(id: &str, power: Power, power_delay: Duration, clock: Arc<dyn Clock>) -> Self {
        let number = id
            .bytes()
            .fold(0u64, |h, b| h.wrapping_mul(131).wrapping_add(b as u64));
        SimHost {
            id: id.to_owned(),
            uuid: format!("8d2c1f3e-5b7a-4c1e-9f00-{:012x}", number & 0xffff_ffff_ffff),
            clock,
            power_delay,
            state: Mutex::new(HostState {
                power,
                pending: None,
                faults: Faults::default(),
                errors_sent: 0,
                stale_sent: 0,
                flap: false,
                false_offs: 0,
                version: 1,
                history: Vec::new(),
                requests: Vec::new(),
                boot_target: "None".into(),
                boot_enabled: "Disabled".into(),
            }),
        }
    }

    /// The host's identifier (the Redfish system id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A stable UUID derived from the id.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    fn lock(&self) -> MutexGuard<'_, HostState> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.now();
        if let Some(pending) = &state.pending
            && pending.due <= now
        {
            let to = pending.to;
            // Recorded when it happened, not when someone next looked.
            let change = PowerChange::at(pending.due, to);
            state.pending = None;
            state.power = to;
            state.version += 1;
            state.history.push(change);
        }
        state
    }

    /// The physical power right now (transitions that came due are applied).
    pub fn power(&self) -> Power {
        self.lock().power
    }

    /// How many times the flapping fault answered Off, to any reader, while the host was on.
    pub fn false_offs(&self) -> u64 {
        self.lock().false_offs
    }

    /// What the BMC reports: the transition in progress, or the flapping or stale lie.
    pub fn observe(&self) -> ObservedPower {
        let mut state = self.lock();
        if state.faults.flapping {
            state.flap = !state.flap;
            if state.flap && state.power != Power::Off {
                state.false_offs += 1;
            }
            return if state.flap {
                ObservedPower::Off
            } else {
                ObservedPower::On
            };
        }
        if let Some(stale) = state.faults.stale_power
            && state
                .faults
                .stale_reads
                .is_none_or(|count| state.stale_sent < count)
        {
            state.stale_sent += 1;
            return match stale {
                Power::On => ObservedPower::On,
                Power::Off => ObservedPower::Off,
            };
        }
        match (&state.pending, state.power) {
            (Some(p), _) if p.to == Power::On => ObservedPower::PoweringOn,
            (Some(_), _) => ObservedPower::PoweringOff,
            (None, Power::On) => ObservedPower::On,
            (None, Power::Off) => ObservedPower::Off,
        }
    }

    /// Whether a transition is still under way.
    pub fn transition_pending(&self) -> bool {
        self.lock().pending.is_some()
    }

    /// A version that changes whenever the host's resource changes (for ETags).
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// Applies a power request. Accepted requests never fail; faults decide whether anything
    /// happens.
    pub fn request(&self, action: PowerAction) {
        let mut state = self.lock();
        let now = self.clock.now();
        state.requests.push(PowerRequest {
            at_ms: now.as_millis(),
            at_us: now.as_micros(),
            action,
        });
        if state.faults.stuck_power {
            return;
        }
        let heading_to = state.pending.as_ref().map_or(state.power, |p| p.to);
        let target = match action {
            PowerAction::On => Power::On,
            PowerAction::ForceOff => Power::Off,
            PowerAction::GracefulShutdown if state.faults.ignore_graceful_shutdown => return,
            PowerAction::GracefulShutdown => Power::Off,
            PowerAction::PushPowerButton => match heading_to {
                Power::On => Power::Off,
                Power::Off => Power::On,
            },
            PowerAction::ForceRestart => {
                // Off now, on after the delay.
                state.power = Power::Off;
                state.history.push(PowerChange::at(now, Power::Off));
                Power::On
            }
        };
        if target == heading_to && action != PowerAction::ForceRestart {
            return;
        }
        state.version += 1;
        if self.power_delay.is_zero() {
            state.pending = None;
            state.power = target;
            state.history.push(PowerChange::at(now, target));
        } else {
            state.pending = Some(Pending {
                to: target,
                due: now + self.power_delay,
            });
        }
    }

    /// Sets the power at once, without a transition (scenario set-up).
    pub fn set_power(&self, power: Power) {
        let mut state = self.lock();
        state.pending = None;
        if state.power != power {
            state.power = power;
            state.version += 1;
            state.history.push(PowerChange::at(self.clock.now(), power));
        }
    }

    /// The current faults.
    pub fn faults(&self) -> Faults {
        self.lock().faults.clone()
    }

    /// Replaces the faults (and restarts the error count).
    pub fn set_faults(&self, faults: Faults) {
        let mut state = self.lock();
        state.faults = faults;
        state.errors_sent = 0;
        state.stale_sent = 0;
        state.version += 1;
    }

    /// Decides what happens to a request that touches this host, and counts it.
    pub fn request_fault(&self) -> (RequestFault, Duration) {
        let mut state = self.lock();
        let latency = Duration::from_millis(state.faults.latency_ms);
        if state.faults.drop_connections {
            return (RequestFault::Drop, latency);
        }
        if let Some(status) = state.faults.error_status {
            let within = state
                .faults
                .error_count
                .is_none_or(|count| state.errors_sent < count);
            if within {
                state.errors_sent += 1;
                return (RequestFault::Status(status), latency);
            }
        }
        (RequestFault::None, latency)
    }

    /// The faults that hit every datagram or connection, without counting anything:
    /// (drop it, added latency).
    pub fn transport_faults(&self) -> (bool, Duration) {
        let state = self.lock();
        (
            state.faults.drop_connections,
            Duration::from_millis(state.faults.latency_ms),
        )
    }

    /// Every physical power change so far.
    pub fn history(&self) -> Vec<PowerChange> {
        self.lock().history.clone()
    }

    /// How many times the host has gone off (a power cycle shows here even when nobody
    /// looked while it was off).
    pub fn power_offs(&self) -> usize {
        self.lock()
            .history
            .iter()
            .filter(|c| c.power == Power::Off)
            .count()
    }

    /// Every power request received, in order (stuck or not, acted on or not).
    pub fn requests(&self) -> Vec<PowerRequest> {
        self.lock().requests.clone()
    }

    /// The host's clock now, in the milliseconds its records use.
    pub fn clock_ms(&self) -> u128 {
        self.clock.now().as_millis()
    }

    /// The host's clock now, in microseconds (the records' `at_us`).
    pub fn clock_us(&self) -> u128 {
        self.clock.now().as_micros()
    }

    /// The boot override: (target, enabled).
    pub fn boot_override(&self) -> (String, String) {
        let state = self.lock();
        (state.boot_target.clone(), state.boot_enabled.clone())
    }

    /// Changes the boot override.
    pub fn set_boot_override(&self, target: Option<String>, enabled: Option<String>) {
        let mut state = self.lock();
        if let Some(target) = target {
            state.boot_target = target;
        }
        if let Some(enabled) = enabled {
            state.boot_enabled = enabled;
        }
        state.version += 1;
    }
}

impl PowerChange {
    /// The power reached `power` at `at` (clock time).
    fn at(at: Duration, power: Power) -> Self {
        PowerChange {
            at_ms: at.as_millis(),
            at_us: at.as_micros(),
            power,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn host(delay_ms: u64) -> (Arc<ManualClock>, SimHost) {
        let clock = Arc::new(ManualClock::new());
        let host = SimHost::new(
            "1",
            Power::On,
            Duration::from_millis(delay_ms),
            clock.clone(),
        );
        (clock, host)
    }

    #[test]
    fn power_off_goes_through_powering_off_after_the_delay() {
        let (clock, host) = host(1000);
        host.request(PowerAction::ForceOff);
        assert_eq!(host.observe(), ObservedPower::PoweringOff);
        assert_eq!(host.power(), Power::On);
        clock.advance(Duration::from_millis(999));
        assert_eq!(host.observe(), ObservedPower::PoweringOff);
        clock.advance(Duration::from_millis(1));
        assert_eq!(host.observe(), ObservedPower::Off);
        assert_eq!(host.history().len(), 1);
        host.request(PowerAction::On);
        assert_eq!(host.observe(), ObservedPower::PoweringOn);
        clock.advance(Duration::from_secs(1));
        assert_eq!(host.observe(), ObservedPower::On);
    }

    #[test]
    fn the_records_are_read_to_the_microsecond_as_well_as_the_millisecond() {
        let (clock, host) = host(1);
        clock.advance(Duration::from_micros(2_750));
        assert_eq!((host.clock_ms(), host.clock_us()), (2, 2_750));
        host.request(PowerAction::ForceOff);
        clock.advance(Duration::from_micros(1_500));
        host.power();
        let request = &host.requests()[0];
        assert_eq!((request.at_ms, request.at_us), (2, 2_750));
        // The change is recorded when it came due (2.75 ms + the 1 ms delay), not when seen.
        let change = &host.history()[0];
        assert_eq!(
            (change.at_ms, change.at_us, change.power),
            (3, 3_750, Power::Off)
        );
    }

    #[test]
    fn a_stuck_host_accepts_requests_and_never_changes() {
        let (clock, host) = host(10);
        host.set_faults(Faults {
            stuck_power: true,
            ..Faults::default()
        });
        host.request(PowerAction::ForceOff);
        clock.advance(Duration::from_secs(60));
        assert_eq!(host.observe(), ObservedPower::On);
        assert!(host.history().is_empty());
    }

    #[test]
    fn a_flapping_host_alternates_whatever_its_power() {
        let (_clock, host) = host(0);
        host.set_faults(Faults {
            flapping: true,
            ..Faults::default()
        });
        let reads: Vec<_> = (0..4).map(|_| host.observe()).collect();
        assert_eq!(
            reads,
            [
                ObservedPower::Off,
                ObservedPower::On,
                ObservedPower::Off,
                ObservedPower::On
            ]
        );
        assert_eq!(host.power(), Power::On);
        assert_eq!(host.false_offs(), 2, "two Offs told while it was on");
        host.set_power(Power::Off);
        host.observe();
        assert_eq!(
            host.false_offs(),
            2,
            "an Off told while it is off is no lie"
        );
    }

    #[test]
    fn a_stale_reading_lasts_the_configured_number_of_reads() {
        let (_clock, host) = host(0);
        host.set_power(Power::Off);
        host.set_faults(Faults {
            stale_power: Some(Power::On),
            stale_reads: Some(2),
            ..Faults::default()
        });
        let reads: Vec<_> = (0..3).map(|_| host.observe()).collect();
        assert_eq!(
            reads,
            [ObservedPower::On, ObservedPower::On, ObservedPower::Off]
        );
        assert_eq!(host.power(), Power::Off);
    }

    #[test]
    fn the_push_button_toggles_and_a_hung_os_ignores_graceful_shutdown() {
        let (_clock, host) = host(0);
        host.request(PowerAction::PushPowerButton);
        assert_eq!(host.power(), Power::Off);
        host.request(PowerAction::PushPowerButton);
        assert_eq!(host.power(), Power::On);
        host.set_faults(Faults {
            ignore_graceful_shutdown: true,
            ..Faults::default()
        });
        host.request(PowerAction::GracefulShutdown);
        assert_eq!(host.power(), Power::On);
        host.request(PowerAction::ForceOff);
        assert_eq!(host.power(), Power::Off);
    }

    #[test]
    fn error_faults_apply_to_the_configured_number_of_requests() {
        let (_clock, host) = host(0);
        host.set_faults(Faults {
            error_status: Some(503),
            error_count: Some(2),
            ..Faults::default()
        });
        assert_eq!(host.request_fault().0, RequestFault::Status(503));
        assert_eq!(host.request_fault().0, RequestFault::Status(503));
        assert_eq!(host.request_fault().0, RequestFault::None);
    }
}
