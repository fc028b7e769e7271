//! Background tasks that end with their owner.
//!
//! A spawned tokio task outlives the future that spawned it: when a controller is dropped
//! (leadership lost, shutdown, a lab tearing a cluster down), its watches, gauge refreshers
//! and power monitor would go on talking to an API server or BMCs nobody reads any more.
//! [`Background`] aborts its task when dropped, so a task lives exactly as long as its owner.

use tokio::task::JoinHandle;

/// A spawned task, aborted when this value is dropped.
#[derive(Debug)]
pub struct Background(JoinHandle<()>);

impl Background {
    /// Spawns `task` on the current runtime.
    pub fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Background(tokio::spawn(task))
    }

    /// Spawns a task that calls `tick` every `period` (at once first), such as a gauge
    /// recount from the caches.
    pub fn every(period: std::time::Duration, tick: impl Fn() + Send + 'static) -> Self {
        Background::spawn(async move {
            loop {
                tick();
                tokio::time::sleep(period).await;
            }
        })
    }
}

impl From<JoinHandle<()>> for Background {
    fn from(handle: JoinHandle<()>) -> Self {
        Background(handle)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn a_background_task_stops_when_its_owner_is_dropped() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let counting = {
            let ticks = ticks.clone();
            Background::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        };
        while ticks.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(counting);
        // Let the abort land, then check the count no longer moves.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let stopped_at = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), stopped_at);
    }
}
