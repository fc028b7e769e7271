//! A controller's runner: every object asked for is reconciled at most once at a time, at
//! most `concurrency` objects at once, and asked for again when its pass says so.
//!
//! Why not kube-runtime's: its scheduler puts every request in a `DelayQueue`, a request for
//! now too, whose deadlines are whole milliseconds rounded up, and then waits for tokio's
//! timer to fire: 1.2–2.2 ms between a watch event and the start of its pass in the
//! benchmark, on every start's path (a start's fence latency is 8–9 ms in all). Here a request
//! for now is ready at once; only a pass's own "again in a while" waits for the timer.
//!
//! Expected flow: [`run`] polls the requests (the watches' changes, each mapped to the objects
//! it wakes), the passes under way and the next deadline; [`Queue`] (pure: its time is given)
//! says which object runs next.
//!
//! Guarantees (of [`Queue`], swept by its tests):
//! - an object is never in two passes at once: asked for during its pass, it runs once more
//!   after that pass, with the cache as it is then;
//! - an object asked for several times before its pass starts runs once;
//! - of two times asked for, the earlier wins, and a request for now beats a requeue;
//! - ready objects run in the order they were asked for, so none waits behind a busy one.
//!
//! Caveats: nothing runs until the cache holds its first list; an object no longer in the cache when its turn comes is dropped (its deletion
//! woke it, and a pass would find nothing to act on); a pass's requeue is counted from its
//! end, as kube's is.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{BoxStream, FuturesUnordered};
use futures_util::{FutureExt, Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::time::Instant;
use tracing::Instrument;

use crate::runtime::informer::is_ready;

/// What a pass asks of the runner: to run again after a while, or when a change wakes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Run the object again after `after`, whether or not anything changes.
    pub const fn requeue(after: Duration) -> Self {
        Action {
            requeue_after: Some(after),
        }
    }

    /// Run the object again only when a change wakes it.
    pub const fn await_change() -> Self {
        Action {
            requeue_after: None,
        }
    }

    /// When to run again unasked (None: only on a change).
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

impl From<Action> for kube::runtime::controller::Action {
    fn from(action: Action) -> Self {
        match action.requeue_after {
            Some(after) => kube::runtime::controller::Action::requeue(after),
            None => kube::runtime::controller::Action::await_change(),
        }
    }
}

/// Which object runs next: the ready ones in order, the later ones by time, and the ones
/// under way.
#[derive(Debug)]
pub struct Queue<T> {
    ready: VecDeque<T>,
    in_ready: HashSet<T>,
    /// Asked for later: by time, then by the order asked (the counter).
    later: BTreeMap<(Instant, u64), T>,
    when: HashMap<T, (Instant, u64)>,
    asked: u64,
    running: HashSet<T>,
    /// Asked for while under way: run again once the pass ends.
    again: HashSet<T>,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            ready: VecDeque::new(),
            in_ready: HashSet::new(),
            later: BTreeMap::new(),
            when: HashMap::new(),
            asked: 0,
            running: HashSet::new(),
            again: HashSet::new(),
        }
    }
}

impl<T: Hash + Eq + Clone> Queue<T> {
    /// `key` should run now (after its pass, if one is under way).
    pub fn ask(&mut self, key: T) {
        if self.running.contains(&key) {
            self.again.insert(key);
            return;
        }
        if let Some(at) = self.when.remove(&key) {
            self.later.remove(&at);
        }
        if self.in_ready.insert(key.clone()) {
            self.ready.push_back(key);
        }
    }

    /// `key` should run at `at`, unless it is asked for sooner.
    pub fn ask_at(&mut self, key: T, at: Instant) {
        if self.in_ready.contains(&key) {
            return;
        }
        if let Some(&(sooner, order)) = self.when.get(&key) {
            if sooner <= at {
                return;
            }
            self.later.remove(&(sooner, order));
        }
        self.asked += 1;
        self.later.insert((at, self.asked), key.clone());
        self.when.insert(key, (at, self.asked));
    }

    /// Moves what is due at `now` to the ready ones.
    pub fn due(&mut self, now: Instant) {
        while let Some(entry) = self.later.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.when.remove(&key);
            self.ask(key);
        }
    }

    /// When the next later request is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.later.keys().next().map(|(at, _)| *at)
    }

    /// The next object to run, now under way.
    pub fn take(&mut self) -> Option<T> {
        let key = self.ready.pop_front()?;
        self.in_ready.remove(&key);
        self.running.insert(key.clone());
        Some(key)
    }

    /// `key`'s pass ended; it asks to run again at `requeue` (None: on a change only).
    pub fn done(&mut self, key: &T, requeue: Option<Instant>) {
        self.running.remove(key);
        if self.again.remove(key) {
            self.ask(key.clone());
        } else if let Some(at) = requeue {
            self.ask_at(key.clone(), at);
        }
    }

    /// How many passes are under way.
    pub fn running(&self) -> usize {
        self.running.len()
    }
}

/// How often a runner whose cache is not filled yet looks again (the cache's readiness is
/// read without waiting, see `informer::is_ready`).
const FILLING: Duration = Duration::from_millis(10);

/// Runs `reconcile` over the objects of `store` that `requests` ask for, at most
/// `concurrency` at once, until `shutdown` resolves (or the requests end) and the passes under
/// way are done. A pass that fails is logged, and `error_policy` says when it runs again.
pub async fn run<K, C, E, R>(
    store: Store<K>,
    requests: impl Stream<Item = ObjectRef<K>> + Send,
    concurrency: usize,
    reconcile: impl Fn(Arc<K>, Arc<C>) -> R,
    error_policy: impl Fn(Arc<K>, &E, Arc<C>) -> Action + Clone,
    context: Arc<C>,
    shutdown: impl Future<Output = ()> + Send,
) where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Send + Sync,
    E: std::fmt::Display,
    R: Future<Output = Result<Action, E>> + Send,
{
    let pass = |object: Arc<K>| {
        let ran = reconcile(object.clone(), context.clone());
        let (error_policy, context) = (error_policy.clone(), context.clone());
        async move {
            ran.await.unwrap_or_else(|error| {
                tracing::warn!(%error, "reconcile failed");
                error_policy(object, &error, context)
            })
        }
    };
    let mut queue = Queue::default();
    let mut passes = FuturesUnordered::new();
    let mut requests = std::pin::pin!(requests.fuse());
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let mut stopping = false;
    loop {
        queue.due(Instant::now());
        // Until its first list is in, the cache holds nothing: the objects asked for wait.
        let filled = is_ready(&store);
        while filled && !stopping && queue.running() < concurrency {
            let Some(key) = queue.take() else {
                break;
            };
            match store.get(&key) {
                Some(object) => {
                    let span = tracing::info_span!("reconciling object", object.ref = %key);
                    let ran = pass(object).instrument(span);
                    passes.push(async move { (key, ran.await) });
                }
                None => queue.done(&key, None),
            }
        }
        if stopping && passes.is_empty() {
            return;
        }
        let deadline = queue.next_deadline();
        tokio::select! {
            biased;
            Some((key, action)) = passes.next(), if !passes.is_empty() => {
                let at = action
                    .requeue_after()
                    .and_then(|after| Instant::now().checked_add(after));
                queue.done(&key, at);
            }
            () = &mut shutdown, if !stopping => stopping = true,
            request = requests.next(), if !stopping => match request {
                Some(key) => queue.ask(key),
                None => stopping = true,
            },
            () = sleep_until(deadline), if deadline.is_some() => {}
            () = tokio::time::sleep(FILLING), if !filled => {}
        }
    }
}

/// The objects each item of `changes` wakes (none, one or several: `wakes` says).
pub fn woken<T, K, I>(
    changes: impl Stream<Item = T> + Send + 'static,
    wakes: impl Fn(T) -> I + Send + 'static,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource + 'static,
    K::DynamicType: Send,
    I: IntoIterator<Item = ObjectRef<K>>,
    I::IntoIter: Send + 'static,
{
    changes
        .flat_map(move |item| futures_util::stream::iter(wakes(item)))
        .boxed()
}

/// Every object of `store`: what a change that may concern any of them wakes (a policy's).
pub fn every_object<K, T>(store: Store<K>) -> impl Fn(T) -> Vec<ObjectRef<K>> + Send + 'static
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    move |_| {
        store
            .state()
            .iter()
            .map(|object| ObjectRef::from_obj(&**object))
            .collect()
    }
}

/// Like [`woken`] over a watch's changes: an error wakes nothing and is logged (the watch
/// tries again on its backoff).
pub fn woken_by_watch<T, K, I>(
    changes: impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    wakes: impl Fn(T) -> I + Send + 'static,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource + 'static,
    K::DynamicType: Send,
    T: Send + 'static,
    I: IntoIterator<Item = ObjectRef<K>>,
    I::IntoIter: Send + 'static,
{
    let changes = changes.filter_map(|change| {
        std::future::ready(match change {
            Ok(object) => Some(object),
            Err(error) => {
                tracing::warn!(%error, "a watch failed; it starts again on its backoff");
                None
            }
        })
    });
    woken(changes, wakes)
}

/// Sleeps until `deadline` (forever when there is none: its branch is then off).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64, origin: Instant) -> Instant {
        origin + Duration::from_millis(ms)
    }

    fn drain(queue: &mut Queue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.take()).collect()
    }

    #[test]
    fn a_request_for_now_is_ready_at_once_without_a_timer() {
        let mut queue = Queue::default();
        queue.ask("a");
        assert_eq!(queue.next_deadline(), None);
        assert_eq!(queue.take(), Some("a"));
    }

    #[test]
    fn an_object_asked_for_several_times_before_its_turn_runs_once_in_first_order() {
        let mut queue = Queue::default();
        for key in ["a", "b", "a", "c", "b"] {
            queue.ask(key);
        }
        assert_eq!(drain(&mut queue), ["a", "b", "c"]);
    }

    #[test]
    fn an_object_asked_for_during_its_pass_runs_once_more_after_it_never_twice_at_once() {
        let mut queue = Queue::default();
        queue.ask("a");
        assert_eq!(queue.take(), Some("a"));
        queue.ask("a");
        queue.ask("a");
        assert_eq!(queue.take(), None, "not while under way");
        queue.done(&"a", None);
        assert_eq!(drain(&mut queue), ["a"]);
        queue.done(&"a", None);
        assert_eq!(queue.take(), None);
    }

    #[test]
    fn the_earlier_of_two_times_wins_and_now_beats_a_requeue() {
        let origin = Instant::now();
        let mut queue = Queue::default();
        queue.ask_at("a", at(50, origin));
        queue.ask_at("a", at(20, origin));
        queue.ask_at("a", at(80, origin));
        assert_eq!(queue.next_deadline(), Some(at(20, origin)));
        queue.due(at(19, origin));
        assert_eq!(queue.take(), None);
        queue.due(at(20, origin));
        assert_eq!(drain(&mut queue), ["a"]);
        queue.done(&"a", Some(at(100, origin)));
        queue.ask("a");
        assert_eq!(queue.next_deadline(), None, "the requeue is replaced");
        assert_eq!(drain(&mut queue), ["a"]);
    }

    #[test]
    fn a_requeue_due_during_a_pass_runs_after_it() {
        let origin = Instant::now();
        let mut queue = Queue::default();
        queue.ask("a");
        assert_eq!(queue.take(), Some("a"));
        queue.ask_at("a", at(5, origin));
        queue.due(at(10, origin));
        assert_eq!(queue.take(), None);
        queue.done(&"a", Some(at(1_000, origin)));
        assert_eq!(
            drain(&mut queue),
            ["a"],
            "the due request, not the later requeue"
        );
        assert_eq!(queue.next_deadline(), None);
    }

    /// Every sequence of three operations over two objects keeps the guarantees: never two
    /// passes of one object, and an object asked for is run (now or after its pass).
    #[test]
    fn every_short_sequence_keeps_the_guarantees() {
        #[derive(Clone, Copy, Debug)]
        enum Op {
            Ask(usize),
            AskLater(usize),
            Take,
            Done(usize),
            Due,
        }
        let keys = ["a", "b"];
        let ops = [
            Op::Ask(0),
            Op::Ask(1),
            Op::AskLater(0),
            Op::AskLater(1),
            Op::Take,
            Op::Done(0),
            Op::Done(1),
            Op::Due,
        ];
        let origin = Instant::now();
        let mut sequences: Vec<Vec<Op>> = vec![vec![]];
        for _ in 0..4 {
            sequences = sequences
                .into_iter()
                .flat_map(|s| {
                    ops.iter().map(move |op| {
                        let mut s = s.clone();
                        s.push(*op);
                        s
                    })
                })
                .collect();
        }
        for sequence in &sequences {
            let mut queue = Queue::default();
            let mut under_way: HashSet<&str> = HashSet::new();
            let mut owed: HashSet<&str> = HashSet::new();
            for op in sequence {
                match *op {
                    Op::Ask(k) => {
                        queue.ask(keys[k]);
                        owed.insert(keys[k]);
                    }
                    Op::AskLater(k) => {
                        queue.ask_at(keys[k], at(10, origin));
                        owed.insert(keys[k]);
                    }
                    Op::Take => {
                        if let Some(key) = queue.take() {
                            assert!(under_way.insert(key), "{sequence:?}: {key} twice at once");
                            owed.remove(key);
                        }
                    }
                    Op::Done(k) => {
                        if under_way.remove(keys[k]) {
                            queue.done(&keys[k], None);
                        }
                    }
                    Op::Due => queue.due(at(10, origin)),
                }
            }
            // Every pass ends, every later request falls due: what was owed runs.
            for key in under_way.drain() {
                queue.done(&key, None);
            }
            queue.due(at(10, origin));
            let ran: HashSet<&str> = drain(&mut queue).into_iter().collect();
            assert!(
                owed.is_subset(&ran),
                "{sequence:?}: owed {owed:?}, ran {ran:?}"
            );
        }
    }
}
