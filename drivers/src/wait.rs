//! Waiting until a power state is read back from the BMC.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::power::{PowerDriver, PowerOffMode};
use crate::retry::{RetryPolicy, next_pause, retry_observed};
use crate::state::PowerState;

/// How to poll for a power state.
#[derive(Debug, Clone)]
pub struct WaitOptions {
    /// Give up after this long.
    pub timeout: Duration,
    /// The first pause between reads; it doubles up to `max_interval`.
    pub initial_interval: Duration,
    /// The longest pause between reads.
    pub max_interval: Duration,
    /// How many reads in a row must show the target. Two by default, so that a BMC that
    /// reports a state for one read (a flapping sensor, a glitch) does not count as proof.
    pub consecutive_reads: u32,
}

impl Default for WaitOptions {
    fn default() -> Self {
        WaitOptions {
            timeout: Duration::from_secs(120),
            initial_interval: Duration::from_millis(250),
            max_interval: Duration::from_secs(5),
            consecutive_reads: 2,
        }
    }
}

/// Polls the BMC until `target` is read `options.consecutive_reads` times in a row.
///
/// `on_read` sees every state read, for progress output and metrics.
///
/// # Guarantees
/// Success means the BMC itself reported `target` on the last reads; nothing is inferred from
/// an accepted command.
///
/// # Errors
/// Retryable read errors (timeouts, 5xx, busy) are tolerated until the deadline; a permanent
/// error (authentication, TLS, missing system) is returned at once. At the deadline the error is
/// [`Error::StateNotReached`], naming the last state seen and the last error.
pub async fn wait_for_power_state(
    driver: &dyn PowerDriver,
    target: &PowerState,
    options: &WaitOptions,
    mut on_read: impl FnMut(&PowerState) + Send,
) -> Result<PowerState> {
    let started = Instant::now();
    let deadline = started + options.timeout;
    let mut interval = options.initial_interval;
    let mut in_a_row = 0;
    let mut last_seen = None;
    let mut last_error: Option<String>;
    loop {
        let mut asked_pause = None;
        let remaining = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(remaining, driver.power_state()).await {
            Ok(Ok(state)) => {
                on_read(&state);
                last_error = None;
                if state == *target {
                    in_a_row += 1;
                    if in_a_row >= options.consecutive_reads.max(1) {
                        return Ok(state);
                    }
                } else {
                    in_a_row = 0;
                }
                last_seen = Some(state);
            }
            Ok(Err(error)) if error.is_retryable() => {
                tracing::debug!(bmc = driver.bmc(), %error, "power state read failed; will retry");
                in_a_row = 0;
                asked_pause = error.retry_after();
                last_error = Some(error.to_string());
            }
            Ok(Err(error)) => return Err(error),
            Err(_elapsed) => {
                last_error = Some("the last read did not finish before the deadline".into());
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::StateNotReached {
                bmc: driver.bmc().to_owned(),
                target: target.clone(),
                waited: now - started,
                last_seen,
                last_error,
            });
        }
        // A confirming read comes quickly; otherwise back off so a slow host is not hammered,
        // and a BMC that said when to come back (`Retry-After`) is asked again no sooner.
        let pause = if in_a_row > 0 {
            options.initial_interval
        } else {
            let pause = interval;
            interval = (interval * 2).min(options.max_interval);
            next_pause(asked_pause, pause)
        };
        tokio::time::sleep(pause.min(deadline - now)).await;
    }
}

/// How a confirmed power-off went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerOffOutcome {
    /// The graceful shutdown did not finish in time (or was not possible) and the power was
    /// cut.
    pub escalated: bool,
}

/// Powers the host off and waits until Off is read back.
///
/// With `graceful_for`, an ACPI graceful shutdown is asked first; if Off is not read within
/// that time (a hung OS ignores the request), or the BMC cannot do a graceful shutdown, the
/// power is cut. Without it, the power is cut at once. `wait.timeout` bounds the wait after
/// the forced request.
///
/// Each power-off request is retried (see [`crate::retry`]) while the BMC answers with a
/// retryable error, within the time its wait has: `graceful_for` for the graceful request,
/// `wait.timeout` for the forced one.
///
/// # Errors
/// As [`wait_for_power_state`]; a permanent error of the graceful request other than
/// "unsupported" ends the call without escalating.
pub async fn power_off_confirmed(
    driver: &dyn PowerDriver,
    graceful_for: Option<Duration>,
    wait: &WaitOptions,
    mut on_read: impl FnMut(&PowerState) + Send,
) -> Result<PowerOffOutcome> {
    let request = |mode: PowerOffMode, within: Duration| {
        let policy = RetryPolicy {
            initial_backoff: wait.initial_interval,
            max_backoff: wait.max_interval,
            max_attempts: None,
        };
        async move {
            let deadline = Instant::now() + within;
            let operation = format!("power off ({mode:?})");
            let warn = |error: &Error, pause: Duration| {
                tracing::warn!(bmc = driver.bmc(), %error, ?pause, "the power-off request did not go through; trying again");
            };
            retry_observed(
                &policy,
                Some(deadline),
                driver.bmc(),
                &operation,
                warn,
                || driver.power_off(mode),
            )
            .await
        }
    };
    if let Some(grace) = graceful_for {
        match request(PowerOffMode::Graceful, grace).await {
            Ok(()) => {
                let graceful_wait = WaitOptions {
                    timeout: grace,
                    ..wait.clone()
                };
                match wait_for_power_state(driver, &PowerState::Off, &graceful_wait, &mut on_read)
                    .await
                {
                    Ok(_) => return Ok(PowerOffOutcome { escalated: false }),
                    Err(Error::StateNotReached { .. }) => {
                        tracing::warn!(
                            bmc = driver.bmc(),
                            ?grace,
                            "graceful shutdown did not finish; cutting the power"
                        );
                    }
                    Err(other) => return Err(other),
                }
            }
            Err(Error::Unsupported { .. }) => {
                tracing::warn!(
                    bmc = driver.bmc(),
                    "no graceful shutdown available; cutting the power"
                );
            }
            Err(other) => return Err(other),
        }
        request(PowerOffMode::Forced, wait.timeout).await?;
        wait_for_power_state(driver, &PowerState::Off, wait, on_read).await?;
        return Ok(PowerOffOutcome { escalated: true });
    }
    request(PowerOffMode::Forced, wait.timeout).await?;
    wait_for_power_state(driver, &PowerState::Off, wait, on_read).await?;
    Ok(PowerOffOutcome { escalated: false })
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::power::{PowerOffMode, ProbeReport};

    /// Answers reads from a script (the last answer repeats); the first `busy_power_offs`
    /// power-off requests are answered busy, with a `Retry-After` of 2 s.
    #[derive(Debug)]
    struct Scripted {
        reads: Mutex<VecDeque<Result<PowerState>>>,
        busy_power_offs: Mutex<u32>,
        power_offs: Mutex<Vec<Instant>>,
    }

    impl Scripted {
        fn new(answers: Vec<Result<PowerState>>) -> Self {
            Scripted {
                reads: Mutex::new(answers.into()),
                busy_power_offs: Mutex::new(0),
                power_offs: Mutex::new(Vec::new()),
            }
        }
    }

    fn busy(retry_after: Duration) -> Error {
        Error::Busy {
            bmc: "test".into(),
            detail: "HTTP 503".into(),
            retry_after: Some(retry_after),
        }
    }

    fn unreachable() -> Error {
        Error::Unreachable {
            bmc: "test".into(),
            detail: "refused".into(),
        }
    }

    fn clone_answer(answer: &Result<PowerState>) -> Result<PowerState> {
        match answer {
            Ok(state) => Ok(state.clone()),
            Err(Error::Authentication { .. }) => Err(Error::Authentication {
                bmc: "test".into(),
                detail: "401".into(),
            }),
            Err(_) => Err(unreachable()),
        }
    }

    #[async_trait]
    impl PowerDriver for Scripted {
        fn bmc(&self) -> &str {
            "test"
        }
        async fn power_state(&self) -> Result<PowerState> {
            let mut answers = self.reads.lock().unwrap();
            if answers.len() > 1 {
                answers.pop_front().unwrap()
            } else {
                clone_answer(answers.front().unwrap())
            }
        }
        async fn power_off(&self, _: PowerOffMode) -> Result<()> {
            self.power_offs.lock().unwrap().push(Instant::now());
            let mut busy_left = self.busy_power_offs.lock().unwrap();
            if *busy_left > 0 {
                *busy_left -= 1;
                return Err(busy(Duration::from_secs(2)));
            }
            Ok(())
        }
        async fn power_on(&self) -> Result<()> {
            Ok(())
        }
        async fn probe(&self) -> Result<ProbeReport> {
            Ok(ProbeReport::default())
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    fn options() -> WaitOptions {
        WaitOptions {
            timeout: Duration::from_secs(10),
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_secs(1),
            consecutive_reads: 2,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn target_must_be_read_twice_in_a_row_and_transient_errors_are_tolerated() {
        let driver = Scripted::new(vec![
            Ok(PowerState::On),
            Ok(PowerState::PoweringOff),
            Err(unreachable()),
            Ok(PowerState::Off),
            Ok(PowerState::On),
            Ok(PowerState::Off),
            Ok(PowerState::Off),
        ]);
        let mut seen = Vec::new();
        let state = wait_for_power_state(&driver, &PowerState::Off, &options(), |s| {
            seen.push(s.clone())
        })
        .await
        .unwrap();
        assert_eq!(state, PowerState::Off);
        assert_eq!(seen.len(), 6, "{seen:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_state_that_flaps_is_never_confirmed_and_the_error_names_the_last_state() {
        let mut answers = Vec::new();
        for _ in 0..200 {
            answers.push(Ok(PowerState::Off));
            answers.push(Ok(PowerState::On));
        }
        let driver = Scripted::new(answers);
        let error = wait_for_power_state(&driver, &PowerState::Off, &options(), |_| {})
            .await
            .unwrap_err();
        match &error {
            Error::StateNotReached {
                last_seen, waited, ..
            } => {
                assert!(last_seen.is_some());
                assert!(*waited >= Duration::from_secs(10));
            }
            other => panic!("unexpected {other}"),
        }
        assert!(error.is_retryable());
    }

    #[tokio::test(start_paused = true)]
    async fn a_permanent_error_ends_the_wait_at_once() {
        let driver = Scripted::new(vec![Err(Error::Authentication {
            bmc: "test".into(),
            detail: "401".into(),
        })]);
        let started = Instant::now();
        let error = wait_for_power_state(&driver, &PowerState::Off, &options(), |_| {})
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Authentication { .. }));
        assert!(started.elapsed() < Duration::from_millis(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_bmc_is_read_again_no_sooner_than_its_retry_after() {
        let driver = Scripted::new(vec![
            Err(busy(Duration::from_secs(3))),
            Ok(PowerState::Off),
            Ok(PowerState::Off),
        ]);
        let started = Instant::now();
        let mut reads = Vec::new();
        wait_for_power_state(&driver, &PowerState::Off, &options(), |_| {
            reads.push(started.elapsed())
        })
        .await
        .unwrap();
        assert_eq!(
            reads,
            [Duration::from_secs(3), Duration::from_millis(3100)],
            "the 100 ms schedule gave way to the BMC's 3 s"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_power_off_answered_busy_is_sent_again_after_the_retry_after() {
        let driver = Scripted::new(vec![Ok(PowerState::Off)]);
        *driver.busy_power_offs.lock().unwrap() = 2;
        let started = Instant::now();
        let outcome = power_off_confirmed(&driver, None, &options(), |_| {})
            .await
            .unwrap();
        assert!(!outcome.escalated);
        let sent: Vec<Duration> = driver
            .power_offs
            .lock()
            .unwrap()
            .iter()
            .map(|at| *at - started)
            .collect();
        assert_eq!(
            sent,
            [
                Duration::ZERO,
                Duration::from_secs(2),
                Duration::from_secs(4)
            ]
        );

        // Busy for longer than the wait allows: the BMC's answer is the error.
        let driver = Scripted::new(vec![Ok(PowerState::Off)]);
        *driver.busy_power_offs.lock().unwrap() = 100;
        let short = WaitOptions {
            timeout: Duration::from_secs(3),
            ..options()
        };
        let error = power_off_confirmed(&driver, None, &short, |_| {})
            .await
            .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }), "{error}");
        assert_eq!(driver.power_offs.lock().unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreachable_bmc_times_out_naming_the_last_error() {
        let driver = Scripted::new(vec![Err(unreachable())]);
        let error = wait_for_power_state(&driver, &PowerState::On, &options(), |_| {})
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(text.contains("did not reach power state On"), "{text}");
        assert!(text.contains("refused"), "{text}");
    }
}
