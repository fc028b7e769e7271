//! Who may read `/metrics`: the caller's bearer token is reviewed by the cluster (a
//! TokenReview names its user), and the cluster decides whether that user may `get` the
//! non-resource URL `/metrics` (a SubjectAccessReview), as Kubernetes' own components and
//! controller-runtime's secure metrics do.
//!
//! Expected flow: [`Gate::check`] takes the `Authorization` header → [`bearer`] (no token:
//! 401) → the caches, keyed by the token's SHA-256 → on a miss, the token's review *flight*:
//! the first request of a token starts it, every concurrent request of the same token waits
//! for its answer → a review slot ([`ReviewLimits`]) → the two reviews through a
//! [`Reviewer`] → [`decide`] (pure) → the answer is cached and returned to every waiter.
//!
//! Guarantees: the token itself is never stored, logged or put in an error (only its hash
//! keys the caches); an allowed answer is kept for the TTL, a refused one for at most
//! [`MAX_DENY_TTL`] (a binding just created is seen soon); a failed review (API server
//! unreachable, our own RBAC lacking `create`) is answered 503/500 and never cached. Allowed
//! answers are cached apart from refusals ([`CACHE_CAPACITY`] and [`DENY_CACHE_CAPACITY`],
//! the expired and then the oldest dropped first), so a flood of unknown tokens cannot push
//! a scraper's answer out. At most one review per token is in flight, at most
//! [`ReviewLimits::max_in_flight`] in all, each within [`ReviewLimits::timeout`]; at most
//! [`ReviewLimits::max_waiting`] requests wait for a slot (each at most the timeout), more
//! are answered 503 at once ([`Access::Overloaded`]).
//!
//! Caveats: a revoked token or binding is still honoured until its cached answer expires
//! (the TTL is the bound); the reviews ask for no audience, so the API server's own
//! audiences apply (as controller-runtime does).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use axum::http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use crate::runtime::clock::Clock;

/// The path whose access is reviewed, and the verb.
pub const METRICS_PATH: &str = "/metrics";
/// At most this many answers are cached.
pub const CACHE_CAPACITY: usize = 1024;
/// At most this many refusals are cached (apart from the allowed answers).
pub const DENY_CACHE_CAPACITY: usize = 256;
/// A refusal is cached at most this long, whatever the TTL.
pub const MAX_DENY_TTL: Duration = Duration::from_secs(30);

/// The answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The caller may read the metrics.
    Allowed,
    /// No token, or one the cluster does not know: 401.
    Unauthenticated,
    /// A known user without the permission: 403.
    Forbidden,
    /// A review could not be made (API server unreachable or overloaded): 503.
    Unavailable,
    /// The API server refused our review itself (our RBAC lacks `create` on the review
    /// kinds): 500.
    Misconfigured,
    /// Too many new tokens are being reviewed at once: 503, try again.
    Overloaded,
}

impl Access {
    /// The HTTP status of the answer.
    pub fn status(self) -> StatusCode {
        match self {
            Access::Allowed => StatusCode::OK,
            Access::Unauthenticated => StatusCode::UNAUTHORIZED,
            Access::Forbidden => StatusCode::FORBIDDEN,
            Access::Unavailable | Access::Overloaded => StatusCode::SERVICE_UNAVAILABLE,
            Access::Misconfigured => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Why a review failed (never carries the token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewError {
    /// Whether trying again later may help (transport errors, 429, 5xx).
    pub retryable: bool,
    /// What happened.
    pub message: String,
}

/// The two reviews, behind a trait so the gate's decisions are tested without a cluster.
#[async_trait]
pub trait Reviewer: Send + Sync {
    /// Who holds `token`; `None` when the cluster does not know it.
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError>;
    /// Whether `user` may `get` [`METRICS_PATH`].
    async fn authorize(&self, user: &UserInfo) -> Result<bool, ReviewError>;
}

/// The reviews made with the controller's own kube client.
#[derive(Clone)]
pub struct KubeReviewer {
    client: Client,
}

impl KubeReviewer {
    /// Reviews through `client`.
    pub fn new(client: Client) -> Self {
        KubeReviewer { client }
    }
}

impl std::fmt::Debug for KubeReviewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeReviewer").finish_non_exhaustive()
    }
}

fn review_error(kind: &str) -> impl Fn(kube::Error) -> ReviewError + '_ {
    move |error| {
        let retryable = match &error {
            kube::Error::Api(status) => status.code == 429 || status.code >= 500,
            _ => true,
        };
        // kube's errors name the request's URL and status, never its body (the token).
        ReviewError {
            retryable,
            message: format!("{kind}: {error}"),
        }
    }
}

#[async_trait]
impl Reviewer for KubeReviewer {
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_owned()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(review_error("TokenReview"))?;
        Ok(answer
            .status
            .filter(|status| status.authenticated == Some(true))
            .and_then(|status| status.user))
    }

    async fn authorize(&self, user: &UserInfo) -> Result<bool, ReviewError> {
        let review = SubjectAccessReview {
            spec: access_spec(user),
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(review_error("SubjectAccessReview"))?;
        Ok(answer.status.is_some_and(|status| status.allowed))
    }
}

/// The SubjectAccessReview of `user` getting [`METRICS_PATH`]: the reviewed user as the
/// TokenReview named it (user, groups, uid, extra).
pub fn access_spec(user: &UserInfo) -> SubjectAccessReviewSpec {
    SubjectAccessReviewSpec {
        user: user.username.clone(),
        groups: user.groups.clone(),
        uid: user.uid.clone(),
        extra: user.extra.clone(),
        non_resource_attributes: Some(NonResourceAttributes {
            path: Some(METRICS_PATH.into()),
            verb: Some("get".into()),
        }),
        resource_attributes: None,
    }
}

/// The bearer token of an `Authorization` header (scheme case-insensitive), if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The answer from the two reviews' results (pure): `authenticated` is the TokenReview's
/// user, `allowed` the SubjectAccessReview's answer (None: not made, or failed).
pub fn decide(
    authenticated: Result<Option<&UserInfo>, &ReviewError>,
    allowed: Option<Result<bool, &ReviewError>>,
) -> Access {
    let failed = |error: &ReviewError| {
        if error.retryable {
            Access::Unavailable
        } else {
            Access::Misconfigured
        }
    };
    match (authenticated, allowed) {
        (Err(error), _) => failed(error),
        (Ok(None), _) => Access::Unauthenticated,
        (Ok(Some(_)), Some(Ok(true))) => Access::Allowed,
        (Ok(Some(_)), Some(Ok(false))) => Access::Forbidden,
        (Ok(Some(_)), Some(Err(error))) => failed(error),
        // Authenticated but not reviewed: refuse rather than guess.
        (Ok(Some(_)), None) => Access::Unavailable,
    }
}

/// How long an answer is kept: allowed for `ttl`, refused for at most [`MAX_DENY_TTL`],
/// failed reviews not at all.
pub fn keep_for(access: Access, ttl: Duration) -> Option<Duration> {
    match access {
        Access::Allowed => Some(ttl),
        Access::Unauthenticated | Access::Forbidden => Some(ttl.min(MAX_DENY_TTL)),
        Access::Unavailable | Access::Misconfigured | Access::Overloaded => None,
    }
}

type TokenHash = [u8; 32];

fn hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// Cached answers by token hash, bounded.
#[derive(Debug)]
struct Cache {
    capacity: usize,
    entries: HashMap<TokenHash, (Access, SystemTime)>,
}

impl Cache {
    fn new(capacity: usize) -> Self {
        Cache {
            capacity,
            entries: HashMap::new(),
        }
    }

    fn get(&self, key: &TokenHash, now: SystemTime) -> Option<Access> {
        self.entries
            .get(key)
            .filter(|(_, until)| *until > now)
            .map(|(access, _)| *access)
    }

    fn put(&mut self, key: TokenHash, access: Access, until: SystemTime, now: SystemTime) {
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, until)| *until > now);
        }
        if self.entries.len() >= self.capacity
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (_, until))| *until)
                .map(|(k, _)| *k)
        {
            self.entries.remove(&oldest);
        }
        self.entries.insert(key, (access, until));
    }
}

/// How many reviews the gate makes at once, and how long a request waits for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReviewLimits {
    /// Token reviews (each a TokenReview, then a SubjectAccessReview) in flight at once.
    pub max_in_flight: usize,
    /// Requests waiting for a review slot; more are answered [`Access::Overloaded`] at once.
    pub max_waiting: usize,
    /// The longest a request waits for a slot, and the longest one review (both calls) may
    /// take; past it the answer is [`Access::Unavailable`] (not cached).
    pub timeout: Duration,
}

/// The default number of reviews in flight.
pub const DEFAULT_MAX_REVIEWS: usize = 8;
/// Requests that may wait for a review slot, per slot.
pub const WAITING_PER_REVIEW: usize = 8;
/// The default review timeout.
pub const DEFAULT_REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

impl ReviewLimits {
    /// `max_in_flight` reviews at once, [`WAITING_PER_REVIEW`] waiting requests per slot.
    pub fn new(max_in_flight: usize, timeout: Duration) -> Self {
        let max_in_flight = max_in_flight.max(1);
        ReviewLimits {
            max_in_flight,
            max_waiting: max_in_flight * WAITING_PER_REVIEW,
            timeout,
        }
    }
}

impl Default for ReviewLimits {
    fn default() -> Self {
        ReviewLimits::new(DEFAULT_MAX_REVIEWS, DEFAULT_REVIEW_TIMEOUT)
    }
}

/// One token's review under way: every request of that token waits for the same answer.
type Flight = Arc<tokio::sync::OnceCell<Access>>;

/// The gate in front of `/metrics`.
pub struct Gate {
    reviewer: Arc<dyn Reviewer>,
    clock: Arc<dyn Clock>,
    ttl: Duration,
    limits: ReviewLimits,
    allowed: Mutex<Cache>,
    refused: Mutex<Cache>,
    flights: Mutex<HashMap<TokenHash, Flight>>,
    slots: tokio::sync::Semaphore,
    waiting: AtomicUsize,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("ttl", &self.ttl)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a request waiting for a review slot; counted out when dropped (also when the
/// request is cancelled).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's part in a flight: the last one out removes the flight.
struct Boarded<'a> {
    gate: &'a Gate,
    key: TokenHash,
    flight: Flight,
}

impl Drop for Boarded<'_> {
    fn drop(&mut self) {
        let mut flights = locked(&self.gate.flights);
        // New passengers board under this lock, so the count is exact: the map and us.
        if flights
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
            && Arc::strong_count(&self.flight) == 2
        {
            flights.remove(&self.key);
        }
    }
}

impl Gate {
    /// A gate whose allowed answers are kept for `ttl`, with the default [`ReviewLimits`].
    pub fn new(reviewer: Arc<dyn Reviewer>, clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Gate::with_limits(reviewer, clock, ttl, ReviewLimits::default())
    }

    /// A gate with these review limits.
    pub fn with_limits(
        reviewer: Arc<dyn Reviewer>,
        clock: Arc<dyn Clock>,
        ttl: Duration,
        limits: ReviewLimits,
    ) -> Self {
        Gate {
            reviewer,
            clock,
            ttl,
            limits,
            allowed: Mutex::new(Cache::new(CACHE_CAPACITY)),
            refused: Mutex::new(Cache::new(DENY_CACHE_CAPACITY)),
            flights: Mutex::new(HashMap::new()),
            slots: tokio::sync::Semaphore::new(limits.max_in_flight.max(1)),
            waiting: AtomicUsize::new(0),
        }
    }

    fn cached(&self, key: &TokenHash) -> Option<Access> {
        let now = self.clock.now();
        locked(&self.allowed)
            .get(key, now)
            .or_else(|| locked(&self.refused).get(key, now))
    }

    fn remember(&self, key: TokenHash, access: Access) {
        let Some(ttl) = keep_for(access, self.ttl) else {
            return;
        };
        let now = self.clock.now();
        let (into, other) = if access == Access::Allowed {
            (&self.allowed, &self.refused)
        } else {
            (&self.refused, &self.allowed)
        };
        locked(other).entries.remove(&key);
        locked(into).put(key, access, now + ttl, now);
    }

    /// The answer to a request with these headers.
    pub async fn check(&self, headers: &HeaderMap) -> Access {
        let Some(token) = bearer(headers) else {
            return Access::Unauthenticated;
        };
        let key = hash(token);
        if let Some(access) = self.cached(&key) {
            return access;
        }
        let flight = locked(&self.flights).entry(key).or_default().clone();
        let boarded = Boarded {
            gate: self,
            key,
            flight,
        };
        // The first request runs the review; the others wait for its answer. If the first
        // is cancelled (its client went away), a waiting one runs it instead.
        *boarded
            .flight
            .get_or_init(|| async {
                let access = self.review_in_slot(token).await;
                self.remember(key, access);
                access
            })
            .await
    }

    /// Reviews `token` once a slot is free, within the limits.
    async fn review_in_slot(&self, token: &str) -> Access {
        let waiting = self.waiting.fetch_add(1, Ordering::AcqRel);
        let counted = Waiting(&self.waiting);
        if waiting >= self.limits.max_waiting {
            return Access::Overloaded;
        }
        let slot = tokio::time::timeout(self.limits.timeout, self.slots.acquire()).await;
        drop(counted);
        let Ok(Ok(_slot)) = slot else {
            tracing::warn!("a /metrics caller waited too long for a review slot");
            return Access::Overloaded;
        };
        match tokio::time::timeout(self.limits.timeout, self.review(token)).await {
            Ok(access) => access,
            Err(_) => {
                tracing::warn!(timeout = ?self.limits.timeout, "a /metrics caller's review timed out");
                Access::Unavailable
            }
        }
    }

    async fn review(&self, token: &str) -> Access {
        let authenticated = self.reviewer.authenticate(token).await;
        let allowed = match &authenticated {
            Ok(Some(user)) => Some(self.reviewer.authorize(user).await),
            _ => None,
        };
        for error in [
            authenticated.as_ref().err(),
            allowed.as_ref().and_then(|a| a.as_ref().err()),
        ]
        .into_iter()
        .flatten()
        {
            tracing::warn!(error = %error.message, retryable = error.retryable, "a /metrics caller could not be reviewed");
        }
        decide(
            authenticated.as_ref().map(Option::as_ref),
            allowed.as_ref().map(|a| a.as_ref().copied()),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    use axum::http::HeaderValue;

    use super::*;

    struct Script {
        user: Option<UserInfo>,
        allowed: bool,
        fail: Option<ReviewError>,
        calls: AtomicU32,
    }

    #[async_trait]
    impl Reviewer for Script {
        async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            match &self.fail {
                Some(error) => Err(error.clone()),
                None => Ok(self.user.clone().filter(|_| token == "good")),
            }
        }
        async fn authorize(&self, _user: &UserInfo) -> Result<bool, ReviewError> {
            Ok(self.allowed)
        }
    }

    struct Manual(AtomicU64);
    impl Clock for Manual {
        fn now(&self) -> SystemTime {
            SystemTime::UNIX_EPOCH + Duration::from_secs(self.0.load(Ordering::Relaxed))
        }
    }

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn script(allowed: bool, fail: Option<ReviewError>) -> Arc<Script> {
        Arc::new(Script {
            user: Some(UserInfo {
                username: Some("prometheus".into()),
                ..UserInfo::default()
            }),
            allowed,
            fail,
            calls: AtomicU32::new(0),
        })
    }

    #[test]
    fn only_a_non_empty_bearer_token_counts() {
        assert_eq!(bearer(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn the_decision_covers_every_review_outcome() {
        let user = UserInfo::default();
        let down = ReviewError {
            retryable: true,
            message: "down".into(),
        };
        let refused = ReviewError {
            retryable: false,
            message: "403".into(),
        };
        assert_eq!(decide(Ok(Some(&user)), Some(Ok(true))), Access::Allowed);
        assert_eq!(decide(Ok(Some(&user)), Some(Ok(false))), Access::Forbidden);
        assert_eq!(decide(Ok(None), None), Access::Unauthenticated);
        assert_eq!(decide(Err(&down), None), Access::Unavailable);
        assert_eq!(decide(Err(&refused), None), Access::Misconfigured);
        assert_eq!(
            decide(Ok(Some(&user)), Some(Err(&down))),
            Access::Unavailable
        );
        assert_eq!(keep_for(Access::Unavailable, Duration::from_secs(60)), None);
        assert_eq!(
            keep_for(Access::Forbidden, Duration::from_secs(300)),
            Some(MAX_DENY_TTL)
        );
    }

    #[tokio::test]
    async fn answers_are_cached_for_the_ttl_and_failures_not_at_all() {
        let clock = Arc::new(Manual(AtomicU64::new(0)));
        let reviewer = script(true, None);
        let gate = Gate::new(reviewer.clone(), clock.clone(), Duration::from_secs(60));
        assert_eq!(gate.check(&headers("Bearer good")).await, Access::Allowed);
        assert_eq!(gate.check(&headers("Bearer good")).await, Access::Allowed);
        assert_eq!(reviewer.calls.load(Ordering::Relaxed), 1);
        assert_eq!(
            gate.check(&headers("Bearer bad")).await,
            Access::Unauthenticated
        );
        assert_eq!(gate.check(&HeaderMap::new()).await, Access::Unauthenticated);
        assert_eq!(reviewer.calls.load(Ordering::Relaxed), 2);
        clock.0.store(61, Ordering::Relaxed);
        gate.check(&headers("Bearer good")).await;
        assert_eq!(
            reviewer.calls.load(Ordering::Relaxed),
            3,
            "expired after the TTL"
        );

        let down = ReviewError {
            retryable: true,
            message: "down".into(),
        };
        let failing = script(true, Some(down));
        let gate = Gate::new(failing.clone(), clock, Duration::from_secs(60));
        for _ in 0..2 {
            assert_eq!(
                gate.check(&headers("Bearer good")).await,
                Access::Unavailable
            );
        }
        assert_eq!(
            failing.calls.load(Ordering::Relaxed),
            2,
            "a failure is not cached"
        );
    }

    /// Answers every token "unknown" after `delay`, counting calls and overlaps.
    struct Slow {
        delay: Duration,
        calls: AtomicU32,
        in_flight: AtomicU32,
        max_in_flight: AtomicU32,
    }

    impl Slow {
        fn new(delay: Duration) -> Arc<Self> {
            Arc::new(Slow {
                delay,
                calls: AtomicU32::new(0),
                in_flight: AtomicU32::new(0),
                max_in_flight: AtomicU32::new(0),
            })
        }
    }

    #[async_trait]
    impl Reviewer for Slow {
        async fn authenticate(&self, _token: &str) -> Result<Option<UserInfo>, ReviewError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok(None)
        }
        async fn authorize(&self, _user: &UserInfo) -> Result<bool, ReviewError> {
            Ok(false)
        }
    }

    fn slow_gate(reviewer: Arc<Slow>, limits: ReviewLimits) -> Gate {
        let clock = Arc::new(Manual(AtomicU64::new(0)));
        Gate::with_limits(reviewer, clock, Duration::from_secs(60), limits)
    }

    async fn check_all(gate: &Gate, tokens: impl Iterator<Item = String>) -> Vec<Access> {
        let headers: Vec<HeaderMap> = tokens.map(|t| headers(&format!("Bearer {t}"))).collect();
        futures_util::future::join_all(headers.iter().map(|h| gate.check(h))).await
    }

    #[tokio::test]
    async fn concurrent_requests_with_one_new_token_share_one_review() {
        let reviewer = Slow::new(Duration::from_millis(50));
        let gate = slow_gate(reviewer.clone(), ReviewLimits::default());
        let answers = check_all(&gate, (0..50).map(|_| "same".to_owned())).await;
        assert!(answers.iter().all(|a| *a == Access::Unauthenticated));
        assert_eq!(reviewer.calls.load(Ordering::SeqCst), 1);
        assert!(locked(&gate.flights).is_empty(), "the flight is gone");
    }

    #[tokio::test]
    async fn reviews_in_flight_never_exceed_the_bound() {
        let reviewer = Slow::new(Duration::from_millis(20));
        let limits = ReviewLimits {
            max_in_flight: 4,
            max_waiting: 1000,
            timeout: Duration::from_secs(30),
        };
        let gate = slow_gate(reviewer.clone(), limits);
        let answers = check_all(&gate, (0..100).map(|i| format!("token-{i}"))).await;
        assert!(answers.iter().all(|a| *a == Access::Unauthenticated));
        assert_eq!(reviewer.calls.load(Ordering::SeqCst), 100);
        assert_eq!(reviewer.max_in_flight.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn past_the_waiting_bound_new_tokens_are_answered_overloaded_at_once() {
        let reviewer = Slow::new(Duration::from_millis(20));
        let limits = ReviewLimits {
            max_in_flight: 1,
            max_waiting: 2,
            timeout: Duration::from_secs(30),
        };
        let gate = slow_gate(reviewer.clone(), limits);
        let answers = check_all(&gate, (0..10).map(|i| format!("token-{i}"))).await;
        let overloaded = answers.iter().filter(|a| **a == Access::Overloaded).count();
        // One in its slot, two waiting; the other seven shed, and not cached.
        assert_eq!((overloaded, reviewer.calls.load(Ordering::SeqCst)), (7, 3));
        assert_eq!(Access::Overloaded.status(), StatusCode::SERVICE_UNAVAILABLE);
        check_all(&gate, std::iter::once("token-9".to_owned())).await;
        assert_eq!(reviewer.calls.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn a_review_that_takes_too_long_is_unavailable_and_frees_its_slot() {
        let reviewer = Slow::new(Duration::from_secs(5));
        let limits = ReviewLimits {
            max_in_flight: 1,
            max_waiting: 8,
            timeout: Duration::from_millis(50),
        };
        let gate = slow_gate(reviewer.clone(), limits);
        let started = std::time::Instant::now();
        assert_eq!(gate.check(&headers("Bearer a")).await, Access::Unavailable);
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "cut at the timeout"
        );
        assert_eq!(gate.slots.available_permits(), 1, "the slot is free again");
        // Waiting for a slot is bounded the same way.
        let held = gate.slots.acquire().await.unwrap();
        assert_eq!(gate.check(&headers("Bearer b")).await, Access::Overloaded);
        drop(held);
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_flood_of_refused_tokens_never_pushes_out_an_allowed_answer() {
        let clock = Arc::new(Manual(AtomicU64::new(0)));
        let reviewer = script(true, None);
        let gate = Gate::new(reviewer.clone(), clock, Duration::from_secs(60));
        assert_eq!(gate.check(&headers("Bearer good")).await, Access::Allowed);
        for i in 0..CACHE_CAPACITY + DENY_CACHE_CAPACITY {
            let answer = gate.check(&headers(&format!("Bearer bad-{i}"))).await;
            assert_eq!(answer, Access::Unauthenticated);
        }
        let calls = reviewer.calls.load(Ordering::Relaxed);
        assert_eq!(gate.check(&headers("Bearer good")).await, Access::Allowed);
        assert_eq!(
            reviewer.calls.load(Ordering::Relaxed),
            calls,
            "still cached"
        );
        assert_eq!(locked(&gate.refused).entries.len(), DENY_CACHE_CAPACITY);
    }

    #[test]
    fn the_cache_stays_bounded_and_keeps_the_newest() {
        let mut cache = Cache::new(CACHE_CAPACITY);
        let now = SystemTime::UNIX_EPOCH;
        for i in 0..CACHE_CAPACITY + 10 {
            let until = now + Duration::from_secs(100 + i as u64);
            cache.put(hash(&i.to_string()), Access::Allowed, until, now);
        }
        assert_eq!(cache.entries.len(), CACHE_CAPACITY);
        assert_eq!(cache.get(&hash("0"), now), None, "the oldest went first");
        let newest = (CACHE_CAPACITY + 9).to_string();
        assert_eq!(cache.get(&hash(&newest), now), Some(Access::Allowed));
    }
}
