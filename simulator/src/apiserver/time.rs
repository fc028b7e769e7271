//! Kubernetes timestamps (RFC 3339, UTC) without a date library: the civil-from-days
//! algorithm is short and exact for every date the simulator will see.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Wall-clock time, injectable so that tests and scaled labs control it.
pub trait WallClock: Send + Sync + std::fmt::Debug {
    /// Time since the Unix epoch.
    fn since_epoch(&self) -> Duration;
}

/// The system's wall clock.
#[derive(Debug, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn since_epoch(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let month = i64::from(month);
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-21T18:12:00Z` (metav1.Time: whole seconds).
pub fn format_time(since_epoch: Duration) -> String {
    let secs = since_epoch.as_secs() as i64;
    let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
    let rest = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// `2026-11-21T18:12:00.123456Z` (metav1.MicroTime).
pub fn format_micro_time(since_epoch: Duration) -> String {
    let base = format_time(since_epoch);
    format!(
        "{}.{:06}Z",
        base.trim_end_matches('Z'),
        since_epoch.subsec_micros()
    )
}

/// Parses RFC 3339 (`Z` or a numeric offset, optional fraction) into time since the epoch.
pub fn parse_time(text: &str) -> Option<Duration> {
    let bytes = text.as_bytes();
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't' | b' ')
    {
        return None;
    }
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanos = 0u32;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<9}", &fraction[..digits.min(9)]);
        nanos = padded.parse().ok()?;
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hours: i64 = rest.get(1..3)?.parse().ok()?;
            let minutes: i64 = rest.get(4..6)?.parse().ok()?;
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    u64::try_from(secs).ok().map(|s| Duration::new(s, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_format_and_parse_back() {
        assert_eq!(format_time(Duration::ZERO), "1970-01-01T00:00:00Z");
        assert_eq!(
            format_time(Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        let t = Duration::new(1_795_284_720, 123_456_789);
        assert_eq!(format_time(t), "2026-11-21T18:12:00Z");
        assert_eq!(format_micro_time(t), "2026-11-21T18:12:00.123456Z");
        assert_eq!(
            parse_time("2026-11-21T18:12:00Z"),
            Some(Duration::from_secs(1_795_284_720))
        );
        assert_eq!(
            parse_time("2026-11-21T18:12:00.123456Z"),
            Some(Duration::new(1_795_284_720, 123_456_000))
        );
        assert_eq!(
            parse_time("2026-11-21T19:12:00+01:00"),
            Some(Duration::from_secs(1_795_284_720))
        );
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-11-21 18:12Z",
            "2026-11-21T18:12:00",
            "2026-11-21T18:12:00.Z",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
