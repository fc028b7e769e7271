//! Time, injected: the [`Clock`] every controller reads "now" from (the controller crate
//! passes the system's, tests and labs their own), and the conversions between the wall clock, the planners' durations since
//! the Unix epoch and the RFC 3339 text stored in status.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::jiff::Timestamp;

/// The source of "now", injected so that tests and the lab control time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> SystemTime;
}

/// Time since the Unix epoch (the planner's clock).
pub fn since_epoch(time: SystemTime) -> Duration {
    time.duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// RFC 3339 with milliseconds, as stored in status.
pub fn rfc3339(time: SystemTime) -> String {
    let since = since_epoch(time);
    let millis = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_millisecond(millis)
        .map(|t| format!("{t:.3}"))
        .unwrap_or_default()
}

/// Parses an RFC 3339 time into time since the epoch; unparsable times read as the epoch,
/// which makes every deadline look passed — the safe direction for waits, never for proofs.
pub fn parse_rfc3339(text: &str) -> Duration {
    text.parse::<Timestamp>()
        .ok()
        .and_then(|t| u64::try_from(t.as_millisecond()).ok())
        .map(Duration::from_millis)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_rfc3339_to_the_millisecond() {
        let t = UNIX_EPOCH + Duration::from_millis(1_790_000_000_123);
        let text = rfc3339(t);
        assert!(text.ends_with(".123Z"), "{text}");
        assert_eq!(
            parse_rfc3339(&text),
            Duration::from_millis(1_790_000_000_123)
        );
        assert_eq!(parse_rfc3339("garbage"), Duration::ZERO);
    }
}
