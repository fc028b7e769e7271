//! Work of a task overlapped with its other waits: a future that sends requests (the fresh
//! reads of a start, the BMC made ready for its power-off) polled while the task waits on
//! something else, so that its round trips overlap those waits instead of following them.
//!
//! Expected flow: made with [`Overlapped::new`] (nothing polled yet); optionally
//! [`Overlapped::start`]ed (polled once: its first requests are on their way); ridden beside
//! the task's waits with [`Overlapped::beside`]; its outcome taken with
//! [`Overlapped::finish`], or dropped when the task no longer needs it.
//!
//! Guarantees: the side is polled only inside these calls, so it sends nothing before the
//! caller asks it to: beside a wait that is at hand (polled first, it ends at once) the side
//! is not polled at all. Its outcome is kept once it ends and never polled again.
//!
//! Caveats: one task polls both; CPU work of the wait holds the side back (and the other
//! way round). A side dropped unfinished stops where it was: a request under way is
//! abandoned, as any cancelled request is.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// A future polled beside a task's other waits (see the module's documentation).
pub struct Overlapped<'a, T> {
    side: Pin<Box<dyn Future<Output = T> + Send + 'a>>,
    done: Option<T>,
}

impl<'a, T> Overlapped<'a, T> {
    /// `side`, not polled yet.
    pub fn new(side: impl Future<Output = T> + Send + 'a) -> Self {
        Overlapped {
            side: Box::pin(side),
            done: None,
        }
    }

    /// One that has ended already with `outcome`.
    pub fn ended(outcome: T) -> Self
    where
        T: Send + 'a,
    {
        Overlapped {
            side: Box::pin(std::future::pending()),
            done: Some(outcome),
        }
    }

    /// Polls the side once, so that what it sends first is on its way before the caller goes
    /// on; it is polled again beside the next wait.
    pub async fn start(&mut self) {
        std::future::poll_fn(|cx| {
            if self.done.is_none()
                && let Poll::Ready(outcome) = self.side.as_mut().poll(cx)
            {
                self.done = Some(outcome);
            }
            Poll::Ready(())
        })
        .await;
    }

    /// `wait`'s outcome, the side polled whenever it is woken meanwhile (`wait` first).
    pub async fn beside<W: Future>(&mut self, wait: W) -> W::Output {
        let mut wait = std::pin::pin!(wait);
        loop {
            tokio::select! {
                biased;
                out = &mut wait => return out,
                outcome = &mut self.side, if self.done.is_none() => self.done = Some(outcome),
            }
        }
    }

    /// Whether the side has ended.
    pub fn has_ended(&self) -> bool {
        self.done.is_some()
    }

    /// The side's outcome, waited for when it has not ended yet.
    pub async fn finish(self) -> T {
        match self.done {
            Some(outcome) => outcome,
            None => self.side.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::Overlapped;

    /// A side whose sending is counted: `sent` goes up when it is first polled.
    fn counted(sent: &AtomicUsize) -> Overlapped<'_, &'static str> {
        Overlapped::new(async move {
            sent.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            "read"
        })
    }

    #[tokio::test]
    async fn a_side_goes_out_only_beside_a_wait_that_is_pending_or_when_started() {
        // What the task waits for is at hand: nothing is sent, and nothing once dropped.
        let sent = AtomicUsize::new(0);
        let mut side = counted(&sent);
        assert_eq!(side.beside(std::future::ready(7)).await, 7);
        assert_eq!(side.beside(async { 8 }).await, 8);
        drop(side);
        assert_eq!(sent.load(Ordering::SeqCst), 0);
        // A wait that takes its time: the side goes out beside it and is kept finished.
        let sent = AtomicUsize::new(0);
        let mut side = counted(&sent);
        let waited = side
            .beside(async {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                "listed"
            })
            .await;
        assert_eq!(waited, "listed");
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert!(side.has_ended(), "finished beside the wait");
        assert_eq!(side.finish().await, "read");
        // Never ridden beside a wait: sent when finished.
        let sent = AtomicUsize::new(0);
        assert_eq!(counted(&sent).finish().await, "read");
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        // Started: sent at once, even beside a wait at hand, and not ended by it.
        let sent = AtomicUsize::new(0);
        let mut side = counted(&sent);
        side.start().await;
        assert_eq!(sent.load(Ordering::SeqCst), 1);
        assert_eq!(side.beside(std::future::ready(9)).await, 9);
        assert!(!side.has_ended());
        assert_eq!(side.finish().await, "read");
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "polled on, never begun again"
        );
        // Ended already: handed back as it is.
        assert_eq!(Overlapped::ended("kept").finish().await, "kept");
    }

    #[tokio::test]
    async fn a_started_side_goes_before_the_wait_and_keeps_its_order() {
        let order = Mutex::new(Vec::new());
        let note = |what: &'static str| order.lock().unwrap().push(what);
        let mut side = Overlapped::new(async {
            note("side sent");
            tokio::task::yield_now().await;
            note("side ended");
            "session"
        });
        side.start().await;
        let main = side
            .beside(async {
                note("main");
                7
            })
            .await;
        assert_eq!(main, 7);
        assert_eq!(*order.lock().unwrap(), ["side sent", "main"]);
        assert_eq!(side.finish().await, "session");
        assert_eq!(*order.lock().unwrap(), ["side sent", "main", "side ended"]);
    }
}
