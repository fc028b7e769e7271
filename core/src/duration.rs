//! Durations on the command line (`90`, `90s`, `500ms`, `2m`, `1h`), and in the words a user
//! reads (`3m0s`: whole seconds, as Kubernetes and Go print a duration).

use std::time::Duration;

/// Parses a duration; a bare number means seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (examples: 90s, 500ms, 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use ms, s, m or h)"
            ));
        }
    };
    if !seconds.is_finite() || seconds <= 0.0 || seconds > 7.0 * 86400.0 {
        return Err(format!(
            "{text:?} is out of range (more than 0, at most 7 days)"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// As [`parse_duration`], where zero (`0`, `0s`, …) means "off".
pub fn parse_duration_or_off(text: &str) -> Result<Duration, String> {
    let number = text
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if !number.is_empty() && number.parse::<f64>().is_ok_and(|v| v == 0.0) {
        // The unit must still be one we know.
        return parse_duration(&text.trim().replacen('0', "1", 1)).map(|_| Duration::ZERO);
    }
    parse_duration(text)
}

/// A duration as a user reads it in a condition, an Event or an error: whole seconds
/// (rounded), in Go's form — `45s`, `3m0s`, `1h2m5s` — never `180.169670813s`.
pub fn spoken(duration: Duration) -> String {
    let total = duration.as_secs() + u64::from(duration.subsec_millis() >= 500);
    let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60);
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_seconds_parse() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    }

    #[test]
    fn nonsense_and_out_of_range_values_are_refused() {
        for bad in ["", "s", "-1s", "0", "10x", "1e9", "8d", "nan"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn zero_means_off_where_off_is_allowed() {
        for off in ["0", "0s", "0ms", "0m"] {
            assert_eq!(parse_duration_or_off(off).unwrap(), Duration::ZERO, "{off}");
        }
        assert_eq!(
            parse_duration_or_off("60s").unwrap(),
            Duration::from_secs(60)
        );
        for bad in ["", "0x", "-1s", "abc"] {
            assert!(parse_duration_or_off(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spoken_durations_are_whole_seconds_in_gos_form() {
        use super::spoken;
        assert_eq!(spoken(Duration::from_secs_f64(180.169_670_813)), "3m0s");
        assert_eq!(spoken(Duration::from_millis(44_500)), "45s");
        assert_eq!(spoken(Duration::from_millis(400)), "0s");
        assert_eq!(spoken(Duration::from_secs(3725)), "1h2m5s");
    }
}
