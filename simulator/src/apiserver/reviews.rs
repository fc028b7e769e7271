//! The two review kinds a server that delegates its authentication and authorization to the
//! cluster calls: `authentication.k8s.io/v1` TokenReview (who holds this bearer token) and
//! `authorization.k8s.io/v1` SubjectAccessReview (may this user do that).
//!
//! Expected flow: a test mints a token for a user ([`ApiServer::mint_token`]) and grants a
//! user or group a non-resource URL ([`ApiServer::allow_non_resource`]); the server under
//! test posts the reviews and gets the answers the real API server would give.
//!
//! Guarantees: like the real server, both kinds are create-only and not stored; a review of
//! an unknown token answers `authenticated: false` (200, not an error); a missing token is 400;
//! a SubjectAccessReview without a user or group, or without exactly one of
//! `resourceAttributes` and `nonResourceAttributes`, is 422. The kubeconfig's token is the
//! cluster admin's (`system:masters`, which RBAC allows everything); every other decision
//! comes from the rule table, default deny.
//!
//! Caveats: no RBAC objects are read (the table stands in for ClusterRoles and their
//! bindings); resource attributes are always denied to anyone but the admin; minted tokens are
//! known to the reviews only, not accepted as credentials by the server itself.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

use super::errors::{ApiError, ApiResult};
use super::{ApiServer, ServerState};

const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
/// The audience of every token this server issues, as a real cluster's default.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc";
/// The user the kubeconfig's token belongs to.
pub const ADMIN_USER: &str = "kubernetes-admin";
/// The group RBAC allows everything.
const SUPERUSERS: &str = "system:masters";

/// Who a token belongs to, as a TokenReview reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewedUser {
    /// `status.user.username`.
    pub username: String,
    /// `status.user.uid`.
    pub uid: String,
    /// `status.user.groups` (`system:authenticated` included).
    pub groups: Vec<String>,
}

/// Whom a rule grants: one user or every member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A username.
    User(String),
    /// A group name.
    Group(String),
}

/// How many reviews the server has answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReviewCounts {
    /// TokenReviews.
    pub token_reviews: u64,
    /// SubjectAccessReviews.
    pub access_reviews: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    subject: Subject,
    verb: String,
    path: String,
}

/// The tokens and rules the reviews decide from.
#[derive(Debug, Default)]
pub(crate) struct Reviews {
    tokens: Mutex<HashMap<String, ReviewedUser>>,
    rules: Mutex<Vec<Rule>>,
    token_reviews: AtomicU64,
    access_reviews: AtomicU64,
    /// Review requests being answered now (an injected delay included), and the most ever.
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
}

/// Counts one review request in while it is answered; counted out when dropped.
pub(crate) struct ReviewInFlight<'a>(&'a Reviews);

impl Drop for ReviewInFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Reviews {
    /// The reviews of a server whose own token is `admin_token`.
    pub(crate) fn new(admin_token: &str) -> Self {
        let reviews = Reviews::default();
        reviews.tokens_mut().insert(
            admin_token.to_owned(),
            ReviewedUser {
                username: ADMIN_USER.into(),
                uid: "uid-kubernetes-admin".into(),
                groups: vec![SUPERUSERS.into(), "system:authenticated".into()],
            },
        );
        reviews
    }

    /// Counts a request in when it posts a review (`POST .../tokenreviews` or
    /// `.../subjectaccessreviews`), for [`ApiServer::reviews_max_in_flight`].
    pub(crate) fn track(&self, method: &Method, path: &str) -> Option<ReviewInFlight<'_>> {
        let review = path.ends_with("/tokenreviews") || path.ends_with("/subjectaccessreviews");
        if *method != Method::POST || !review {
            return None;
        }
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight.fetch_max(now, Ordering::AcqRel);
        Some(ReviewInFlight(self))
    }

    fn tokens_mut(&self) -> std::sync::MutexGuard<'_, HashMap<String, ReviewedUser>> {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn rules_mut(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn allows(&self, username: &str, groups: &[String], verb: &str, path: &str) -> bool {
        if groups.iter().any(|g| g == SUPERUSERS) {
            return true;
        }
        self.rules_mut().iter().any(|rule| {
            let subject = match &rule.subject {
                Subject::User(user) => user == username,
                Subject::Group(group) => groups.iter().any(|g| g == group),
            };
            subject && (rule.verb == verb || rule.verb == "*") && path_matches(&rule.path, path)
        })
    }
}

/// RBAC's non-resource URL match: exact, or a prefix ending in `*`.
fn path_matches(rule: &str, path: &str) -> bool {
    match rule.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule == path,
    }
}

/// The two groups this module serves, each at [`VERSION`] only.
pub(crate) const GROUPS: [&str; 2] = [AUTHENTICATION, AUTHORIZATION];

/// The one version of both groups.
pub(crate) const VERSION: &str = "v1";

/// Whether this module serves `group`.
pub(crate) fn owns(group: &str) -> bool {
    group == AUTHENTICATION || group == AUTHORIZATION
}

/// The two groups, for `/apis`.
pub(crate) fn groups() -> Vec<Value> {
    [AUTHENTICATION, AUTHORIZATION]
        .iter()
        .map(|group| {
            let version = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
            json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [version.clone()], "preferredVersion": version})
        })
        .collect()
}

/// The resource list of one of the two groups (`/apis/<group>/v1`).
pub(crate) fn resource_list(group: &str) -> Value {
    let (plural, kind) = if group == AUTHENTICATION {
        ("tokenreviews", "TokenReview")
    } else {
        ("subjectaccessreviews", "SubjectAccessReview")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/v1"), "resources": [
        {"name": plural, "singularName": kind.to_ascii_lowercase(), "namespaced": false, "kind": kind, "verbs": ["create"]}
    ]})
}

/// Everything under `/apis/<group>` of the two groups.
pub(crate) fn route(
    state: &ServerState,
    method: &Method,
    group: &str,
    rest: &[&str],
    path: &str,
    body: &Bytes,
) -> ApiResult<Response> {
    let ok = |value: Value| Ok((StatusCode::OK, axum::Json(value)).into_response());
    match rest {
        [] => ok(groups()
            .into_iter()
            .find(|g| g["name"] == group)
            .unwrap_or_default()),
        ["v1"] => ok(resource_list(group)),
        ["v1", plural] => {
            let created =
                |value: Value| Ok((StatusCode::CREATED, axum::Json(value)).into_response());
            match (group, *plural) {
                (AUTHENTICATION, "tokenreviews") if method == Method::POST => {
                    created(token_review(&state.reviews, parse(body)?)?)
                }
                (AUTHORIZATION, "subjectaccessreviews") if method == Method::POST => {
                    created(access_review(&state.reviews, parse(body)?)?)
                }
                (AUTHENTICATION, "tokenreviews") | (AUTHORIZATION, "subjectaccessreviews") => {
                    Err(ApiError::method_not_allowed(method.as_str(), plural))
                }
                _ => Err(ApiError::no_route(path)),
            }
        }
        _ => Err(ApiError::no_route(path)),
    }
}

fn parse(body: &Bytes) -> ApiResult<Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))
}

fn check_kind(review: &Value, group: &str, kind: &str) -> ApiResult<()> {
    let api_version = review["apiVersion"].as_str().unwrap_or_default();
    let found = review["kind"].as_str().unwrap_or_default();
    if api_version == format!("{group}/v1") && found == kind {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {kind}): {api_version}, Kind={found}"
        )))
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Answers a TokenReview: who holds `spec.token`, for `spec.audiences` (the server's own
/// audience when none are asked for).
fn token_review(reviews: &Reviews, mut review: Value) -> ApiResult<Value> {
    check_kind(&review, AUTHENTICATION, "TokenReview")?;
    let token = review["spec"]["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    reviews.token_reviews.fetch_add(1, Ordering::Relaxed);
    let asked = strings(&review["spec"]["audiences"]);
    let audiences_ok = asked.is_empty() || asked.iter().any(|a| a == API_AUDIENCE);
    let user = reviews.tokens_mut().get(&token).cloned();
    review["status"] = match user {
        Some(user) if audiences_ok => json!({
            "authenticated": true,
            "user": {"username": user.username, "uid": user.uid, "groups": user.groups},
            "audiences": [API_AUDIENCE],
        }),
        Some(_) => {
            json!({"authenticated": false, "error": "token audiences are invalid for the target audiences"})
        }
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    Ok(review)
}

/// Answers a SubjectAccessReview from the rule table.
fn access_review(reviews: &Reviews, mut review: Value) -> ApiResult<Value> {
    check_kind(&review, AUTHORIZATION, "SubjectAccessReview")?;
    let spec = &review["spec"];
    let user = spec["user"].as_str().unwrap_or_default().to_owned();
    let groups = strings(&spec["groups"]);
    let resource = spec.get("resourceAttributes").is_some_and(|v| !v.is_null());
    let non_resource = spec
        .get("nonResourceAttributes")
        .is_some_and(|v| !v.is_null());
    let mut causes = Vec::new();
    if user.is_empty() && groups.is_empty() {
        causes.push((
            "spec.user",
            "at least one of user or group must be specified".to_owned(),
        ));
    }
    if resource == non_resource {
        causes.push((
            "spec",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified"
                .to_owned(),
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            AUTHORIZATION,
            "SubjectAccessReview",
            "",
            &causes,
        ));
    }
    reviews.access_reviews.fetch_add(1, Ordering::Relaxed);
    let verb = spec["nonResourceAttributes"]["verb"]
        .as_str()
        .unwrap_or_default();
    let path = spec["nonResourceAttributes"]["path"]
        .as_str()
        .unwrap_or_default();
    let allowed = if non_resource {
        reviews.allows(&user, &groups, verb, path)
    } else {
        groups.iter().any(|g| g == SUPERUSERS)
    };
    review["status"] = if allowed {
        json!({"allowed": true, "reason": "allowed by the simulated RBAC"})
    } else {
        json!({"allowed": false})
    };
    Ok(review)
}

impl ApiServer {
    /// A new bearer token for `username` in `groups` (plus `system:authenticated`), known
    /// to TokenReviews from now on.
    pub fn mint_token(&self, username: &str, groups: &[&str]) -> String {
        let mut bytes = [0u8; 24];
        let _ = SystemRandom::new().fill(&mut bytes);
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut all: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        all.push("system:authenticated".into());
        let user = ReviewedUser {
            username: username.into(),
            uid: format!("uid-{username}"),
            groups: all,
        };
        self.state.reviews.tokens_mut().insert(token.clone(), user);
        token
    }

    /// Lets `subject` use `verb` on the non-resource URL `path` (a trailing `*` matches a
    /// prefix), as a ClusterRole with `nonResourceURLs` bound to it would.
    pub fn allow_non_resource(&self, subject: Subject, verb: &str, path: &str) {
        self.state.reviews.rules_mut().push(Rule {
            subject,
            verb: verb.into(),
            path: path.into(),
        });
    }

    /// Takes back every rule of `subject`, as deleting its binding would.
    pub fn revoke_non_resource(&self, subject: &Subject) {
        self.state
            .reviews
            .rules_mut()
            .retain(|rule| &rule.subject != subject);
    }

    /// The most review requests (TokenReviews and SubjectAccessReviews) ever answered at the
    /// same time, an injected delay included: how many reviews a client had in flight.
    pub fn reviews_max_in_flight(&self) -> u64 {
        self.state.reviews.max_in_flight.load(Ordering::Acquire)
    }

    /// How many TokenReviews and SubjectAccessReviews were answered so far.
    pub fn review_counts(&self) -> ReviewCounts {
        ReviewCounts {
            token_reviews: self.state.reviews.token_reviews.load(Ordering::Relaxed),
            access_reviews: self.state.reviews.access_reviews.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_matches_exact_paths_and_star_prefixes_only() {
        assert!(path_matches("/metrics", "/metrics"));
        assert!(!path_matches("/metrics", "/metrics/extra"));
        assert!(path_matches("/metrics*", "/metrics/extra"));
        assert!(!path_matches("/healthz", "/metrics"));
    }
}
