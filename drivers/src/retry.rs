//! Trying again what a BMC refused for the moment: one helper for every retry of the drivers
//! and their callers.
//!
//! Only errors that [`Error::is_retryable`] calls retryable are tried again: a refused password
//! (HTTP 401, an RMCP+ authentication failure) never is, since every attempt counts towards
//! the BMC's account lock-out. The pause before the next try is the BMC's `Retry-After` when
//! it sent one ([`Error::retry_after`]; 100 ms at least), else a backoff that doubles up to a
//! ceiling. With a deadline, the pause is never cut short: a `Retry-After` that ends at or past
//! the deadline ends the retries at once with the BMC's own error, and a try still running at
//! the deadline is abandoned as [`Error::Timeout`].

use std::future::Future;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::error::{Error, Result};

/// How far apart the tries are, and how many there are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The pause before the first retry when the BMC gave no `Retry-After`; it doubles for
    /// each further one.
    pub initial_backoff: Duration,
    /// The longest backoff. Without a deadline, a `Retry-After` is cut to this too.
    pub max_backoff: Duration,
    /// How many tries in all, the first included; `None` leaves the count to the deadline.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            max_attempts: None,
        }
    }
}

/// Runs `attempt` until it succeeds, fails with an error that is not retryable, runs out of
/// tries, or reaches `deadline`.
///
/// `operation` names what is tried, for logs and for the [`Error::Timeout`] of a try that the
/// deadline cuts off.
///
/// # Errors
/// The last try's error, or [`Error::Timeout`] when the deadline ended a try.
pub async fn retry<T, F, Fut>(
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    bmc: &str,
    operation: &str,
    attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    retry_observed(policy, deadline, bmc, operation, |_, _| {}, attempt).await
}

/// [`retry`], telling `on_retry` each error that will be tried again and the pause before
/// the next try (for progress output).
pub async fn retry_observed<T, F, Fut>(
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    bmc: &str,
    operation: &str,
    mut on_retry: impl FnMut(&Error, Duration),
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let started = Instant::now();
    let mut backoff = policy.initial_backoff;
    let mut tries = 0u32;
    loop {
        tries = tries.saturating_add(1);
        let outcome = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, attempt())
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Timeout {
                        bmc: bmc.to_owned(),
                        operation: operation.to_owned(),
                        timeout: deadline.saturating_duration_since(started),
                    })
                }),
            None => attempt().await,
        };
        let error = match outcome {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let out_of_tries = policy.max_attempts.is_some_and(|max| tries >= max);
        if !error.is_retryable() || out_of_tries {
            return Err(error);
        }
        let mut pause = next_pause(error.retry_after(), backoff);
        match deadline {
            None => pause = pause.min(policy.max_backoff),
            Some(deadline) if pause >= deadline.saturating_duration_since(Instant::now()) => {
                tracing::debug!(bmc, operation, %error, ?pause, "no time left for another try");
                return Err(error);
            }
            Some(_) => {}
        }
        tracing::debug!(bmc, operation, %error, ?pause, tries, "trying again");
        on_retry(&error, pause);
        tokio::time::sleep(pause).await;
        backoff = backoff.saturating_mul(2).min(policy.max_backoff);
    }
}

/// The shortest pause between two tries, even when the BMC says `Retry-After: 0`.
const MIN_PAUSE: Duration = Duration::from_millis(100);

/// The pause before the next try: what the BMC asked for (`Retry-After`), else `backoff`.
pub(crate) fn next_pause(retry_after: Option<Duration>, backoff: Duration) -> Duration {
    retry_after.map_or(backoff, |asked| asked.max(MIN_PAUSE))
}

/// Reads a `Retry-After` value: delay-seconds or an HTTP date (a date in the past means now).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Absurdly long delays saturate; the deadline cuts them anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn busy(retry_after: Option<Duration>) -> Error {
        Error::Busy {
            bmc: "test".into(),
            detail: "HTTP 503".into(),
            retry_after,
        }
    }

    fn refused() -> Error {
        Error::Authentication {
            bmc: "test".into(),
            detail: "HTTP 401".into(),
        }
    }

    /// Answers tries from a script (an empty script succeeds) and notes when each try came.
    struct Script {
        answers: Mutex<Vec<Error>>,
        tries: Mutex<Vec<Duration>>,
        started: Instant,
    }

    impl Script {
        fn new(mut answers: Vec<Error>) -> Self {
            answers.reverse();
            Script {
                answers: Mutex::new(answers),
                tries: Mutex::new(Vec::new()),
                started: Instant::now(),
            }
        }

        async fn attempt(&self) -> Result<&'static str> {
            self.tries.lock().unwrap().push(self.started.elapsed());
            match self.answers.lock().unwrap().pop() {
                Some(error) => Err(error),
                None => Ok("done"),
            }
        }

        fn tries(&self) -> Vec<Duration> {
            self.tries.lock().unwrap().clone()
        }
    }

    fn secs(values: &[f64]) -> Vec<Duration> {
        values.iter().map(|v| Duration::from_secs_f64(*v)).collect()
    }

    fn within(seconds: u64) -> Option<Instant> {
        Some(Instant::now() + Duration::from_secs(seconds))
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_bmc_is_asked_again_after_its_retry_after() {
        let script = Script::new(vec![
            busy(Some(Duration::from_secs(1))),
            busy(Some(Duration::from_secs(3))),
        ]);
        let policy = RetryPolicy::default();
        let outcome = retry(&policy, within(10), "test", "read", || script.attempt()).await;
        assert_eq!(outcome.unwrap(), "done");
        assert_eq!(script.tries(), secs(&[0.0, 1.0, 4.0]));
    }

    #[tokio::test(start_paused = true)]
    async fn without_retry_after_the_backoff_doubles_up_to_its_ceiling() {
        let unreachable = || Error::Unreachable {
            bmc: "test".into(),
            detail: "refused".into(),
        };
        let script = Script::new((0..5).map(|_| unreachable()).collect());
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(1),
            max_attempts: None,
        };
        retry(&policy, within(60), "test", "read", || script.attempt())
            .await
            .unwrap();
        assert_eq!(script.tries(), secs(&[0.0, 0.25, 0.75, 1.75, 2.75, 3.75]));
    }

    #[tokio::test(start_paused = true)]
    async fn refused_credentials_are_never_tried_twice() {
        let script = Script::new(vec![refused(), refused()]);
        let error = retry(&RetryPolicy::default(), within(60), "test", "read", || {
            script.attempt()
        })
        .await
        .unwrap_err();
        assert!(matches!(error, Error::Authentication { .. }));
        assert_eq!(script.tries().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_past_the_deadline_ends_the_retries_at_once_with_the_bmc_error() {
        let script = Script::new(vec![busy(Some(Duration::from_secs(30)))]);
        let started = Instant::now();
        let error = retry(&RetryPolicy::default(), within(10), "test", "read", || {
            script.attempt()
        })
        .await
        .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "{error}");
        assert_eq!(error.retry_after(), Some(Duration::from_secs(30)));
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(script.tries().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_bmc_until_the_deadline_gets_its_error_reported_before_the_deadline() {
        let script = Script::new(
            (0..100)
                .map(|_| busy(Some(Duration::from_secs(1))))
                .collect(),
        );
        let started = Instant::now();
        let error = retry(&RetryPolicy::default(), within(5), "test", "read", || {
            script.attempt()
        })
        .await
        .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "{error}");
        assert_eq!(script.tries(), secs(&[0.0, 1.0, 2.0, 3.0, 4.0]));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_try_still_running_at_the_deadline_is_a_timeout() {
        let error = retry(
            &RetryPolicy::default(),
            within(2),
            "test",
            "power on",
            || async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(())
            },
        )
        .await
        .unwrap_err();
        match error {
            Error::Timeout {
                operation, timeout, ..
            } => {
                assert_eq!(operation, "power on");
                assert_eq!(timeout, Duration::from_secs(2));
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_deadline_the_tries_are_counted_and_hints_are_capped() {
        let script = Script::new(vec![
            busy(Some(Duration::from_secs(3600))),
            busy(Some(Duration::ZERO)),
            busy(None),
            busy(None),
        ]);
        let policy = RetryPolicy {
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
            max_attempts: Some(3),
        };
        let error = retry(&policy, None, "test", "read", || script.attempt())
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }));
        // 3600 s is cut to the 2 s ceiling; `Retry-After: 0` still waits 100 ms.
        assert_eq!(script.tries(), secs(&[0.0, 2.0, 2.1]));
    }

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let parse = |value| parse_retry_after(value, now);
        assert_eq!(parse("1"), Some(Duration::from_secs(1)));
        assert_eq!(parse(" 120 "), Some(Duration::from_secs(120)));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        assert_eq!(
            parse("Sun, 06 Nov 1994 08:50:07 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse("Sun, 06 Nov 1994 08:00:00 GMT"), Some(Duration::ZERO));
        assert_eq!(
            parse("99999999999999999999999"),
            Some(Duration::from_secs(u64::MAX))
        );
        for garbage in [
            "",
            "-1",
            "1.5",
            "soon",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "\u{1F600}",
        ] {
            assert_eq!(parse(garbage), None, "{garbage:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_absurd_retry_after_does_not_overflow_the_clock() {
        let script = Script::new(vec![busy(Some(Duration::from_secs(u64::MAX)))]);
        let error = retry(&RetryPolicy::default(), within(5), "test", "read", || {
            script.attempt()
        })
        .await
        .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }));
    }
}
