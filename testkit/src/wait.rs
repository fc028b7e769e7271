//! Waiting on a condition: the one `eventually` of the tests. The drivers' and the
//! simulator's tests include this file too (`#[path]`), so it uses only std and tokio.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How often `eventually` asks again.
const POLL: Duration = Duration::from_millis(50);

/// What a probe of [`eventually`] answers: done (with a value), or not yet (with what it saw,
/// if it says).
pub trait Answer {
    /// What `eventually` returns once the probe is done.
    type Value;
    /// The value, or the observation (if any) that it is not done yet.
    fn done(self) -> Result<Self::Value, Option<String>>;
}

/// `true` is done; `false` is not yet.
impl Answer for bool {
    type Value = ();
    fn done(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

/// `Some` is done with its value; `None` is not yet.
impl<T> Answer for Option<T> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

/// `Ok` is done with its value; `Err` is not yet, and says what was seen instead.
impl<T, E: Display> Answer for Result<T, E> {
    type Value = T;
    fn done(self) -> Result<T, Option<String>> {
        self.map_err(|seen| Some(seen.to_string()))
    }
}

/// Asks `probe` every 50 ms until it is done and returns its value. After `deadline` it fails
/// the test naming `what`, the deadline and the last thing the probe saw (when it says, with
/// an `Err`). A probe that does not answer by the deadline fails it too.
pub async fn eventually<A: Answer>(
    what: &str,
    deadline: Duration,
    mut probe: impl AsyncFnMut() -> A,
) -> A::Value {
    let started = Instant::now();
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        let seen = match tokio::time::timeout(left.max(POLL), probe()).await {
            Ok(answer) => match answer.done() {
                Ok(value) => return value,
                Err(seen) => seen,
            },
            Err(_) => Some("the probe itself had not answered".to_string()),
        };
        let waited = started.elapsed();
        if waited >= deadline {
            match seen {
                Some(seen) => {
                    panic!("timed out after {deadline:?} waiting for {what}; last seen:\n{seen}")
                }
                None => panic!("timed out after {deadline:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(POLL.min(deadline - waited)).await;
    }
}
