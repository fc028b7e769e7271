//! The review kinds: `authentication.k8s.io/v1` TokenReview (who holds this bearer token)
//! and SelfSubjectReview (who am I), `authorization.k8s.io/v1` SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview (may this user do that) and
//! SelfSubjectRulesReview (what may I do here) — what `kubectl auth can-i` and a server that
//! delegates its authentication and authorization to the cluster ask.
//!
//! Expected flow: a review is created → answered from the same authenticator and RBAC
//! authorizer that decide every request ([`super::auth`]) → returned with its `status`.
//!
//! Guarantees: like the real server, every kind is create-only and not stored; a review of
//! an unknown token answers `authenticated: false` (200, not an error) and a known one echoes
//! `status.audiences` (the asked audiences the token is good for, the API's when none are
//! asked); a missing token is 400; a SubjectAccessReview without a user or group, or without
//! exactly one of `resourceAttributes` and `nonResourceAttributes`, is 422; a
//! LocalSubjectAccessReview must name its own namespace.
//!
//! Caveats: an allowed review carries no RBAC reason naming the binding; SelfSubjectRulesReview
//! never reports `incomplete`.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

use super::auth::rbac::{Attributes, Decision, ResourceAttributes, strings};
use super::auth::user::{AUTHENTICATED, UserInfo};
use super::errors::{ApiError, ApiResult};
use super::{ApiServer, ServerState};

const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
/// How many reviews the server has answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReviewCounts {
    /// TokenReviews.
    pub token_reviews: u64,
    /// SubjectAccessReviews (of every kind).
    pub access_reviews: u64,
}

/// The review counters.
#[derive(Debug, Default)]
pub(crate) struct Reviews {
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
    let kinds: &[(&str, &str, bool)] = if group == AUTHENTICATION {
        &[
            ("tokenreviews", "TokenReview", false),
            ("selfsubjectreviews", "SelfSubjectReview", false),
        ]
    } else {
        &[
            (
                "localsubjectaccessreviews",
                "LocalSubjectAccessReview",
                true,
            ),
            ("selfsubjectaccessreviews", "SelfSubjectAccessReview", false),
            ("selfsubjectrulesreviews", "SelfSubjectRulesReview", false),
            ("subjectaccessreviews", "SubjectAccessReview", false),
        ]
    };
    let resources: Vec<Value> = kinds
        .iter()
        .map(|(plural, kind, namespaced)| json!({"name": plural, "singularName": kind.to_ascii_lowercase(), "namespaced": namespaced, "kind": kind, "verbs": ["create"]}))
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{group}/v1"), "resources": resources})
}

/// One review kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReviewKind {
    Token,
    SelfSubject,
    SubjectAccess,
    SelfSubjectAccess,
    LocalSubjectAccess,
    SelfSubjectRules,
}

impl ReviewKind {
    fn of(group: &str, plural: &str) -> Option<Self> {
        match (group, plural) {
            (AUTHENTICATION, "tokenreviews") => Some(ReviewKind::Token),
            (AUTHENTICATION, "selfsubjectreviews") => Some(ReviewKind::SelfSubject),
            (AUTHORIZATION, "subjectaccessreviews") => Some(ReviewKind::SubjectAccess),
            (AUTHORIZATION, "selfsubjectaccessreviews") => Some(ReviewKind::SelfSubjectAccess),
            (AUTHORIZATION, "localsubjectaccessreviews") => Some(ReviewKind::LocalSubjectAccess),
            (AUTHORIZATION, "selfsubjectrulesreviews") => Some(ReviewKind::SelfSubjectRules),
            _ => None,
        }
    }
}

/// Everything under `/apis/<group>` of the two groups, for `user`.
pub(crate) fn route(
    state: &ServerState,
    user: &UserInfo,
    method: &Method,
    group: &str,
    rest: &[&str],
    path: &str,
    body: &Bytes,
) -> ApiResult<Response> {
    let ok = |value: Value| Ok((StatusCode::OK, axum::Json(value)).into_response());
    let (namespace, plural) = match rest {
        [] => {
            return ok(groups()
                .into_iter()
                .find(|g| g["name"] == group)
                .unwrap_or_default());
        }
        ["v1"] => return ok(resource_list(group)),
        ["v1", plural] => (None, *plural),
        ["v1", "namespaces", namespace, plural] => (Some(*namespace), *plural),
        _ => return Err(ApiError::no_route(path)),
    };
    let Some(kind) = ReviewKind::of(group, plural) else {
        return Err(ApiError::no_route(path));
    };
    if (kind == ReviewKind::LocalSubjectAccess) != namespace.is_some() {
        return Err(ApiError::no_route(path));
    }
    if method != Method::POST {
        return Err(ApiError::method_not_allowed(method.as_str(), plural));
    }
    let review = parse(body)?;
    let answered = match kind {
        ReviewKind::Token => token_review(state, review)?,
        ReviewKind::SelfSubject => self_subject_review(user, review)?,
        ReviewKind::SubjectAccess => access_review(state, None, None, review)?,
        ReviewKind::SelfSubjectAccess => access_review(state, Some(user), None, review)?,
        ReviewKind::LocalSubjectAccess => access_review(state, None, namespace, review)?,
        ReviewKind::SelfSubjectRules => rules_review(state, user, review)?,
    };
    Ok((StatusCode::CREATED, axum::Json(answered)).into_response())
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

/// Answers a TokenReview: who holds `spec.token`, for `spec.audiences` (the API's own
/// when none are asked for).
fn token_review(state: &ServerState, mut review: Value) -> ApiResult<Value> {
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
    state.reviews.token_reviews.fetch_add(1, Ordering::Relaxed);
    let asked = strings(&review["spec"]["audiences"]);
    let now = state.wall.since_epoch().as_secs();
    review["status"] =
        match state
            .authenticator
            .authenticate(&state.store, &state.tokens, &token, &asked, now)
        {
            Some(found) => json!({
                "authenticated": true,
                "user": found.user.to_json(),
                "audiences": found.audiences,
            }),
            None => {
                // `authenticated: false` is omitted (omitempty) and `user` is an empty object
                // (kube-apiserver v1.36.3).
                json!({"user": {}, "error": "invalid bearer token"})
            }
        };
    Ok(review)
}

/// Answers a SelfSubjectReview: the caller.
fn self_subject_review(user: &UserInfo, mut review: Value) -> ApiResult<Value> {
    check_kind(&review, AUTHENTICATION, "SelfSubjectReview")?;
    review["status"] = json!({"userInfo": user.to_json()});
    Ok(review)
}

/// The attributes a review's spec asks about.
fn review_attributes(spec: &Value) -> Attributes {
    let text = |v: &Value, f: &str| v[f].as_str().unwrap_or_default().to_owned();
    let resource = &spec["resourceAttributes"];
    if resource.is_object() {
        return Attributes::resource(
            &text(resource, "verb"),
            ResourceAttributes {
                group: text(resource, "group"),
                version: text(resource, "version"),
                resource: text(resource, "resource"),
                subresource: text(resource, "subresource"),
                namespace: text(resource, "namespace"),
                name: text(resource, "name"),
            },
        );
    }
    let other = &spec["nonResourceAttributes"];
    Attributes::non_resource(&text(other, "verb"), &text(other, "path"))
}

/// Answers a SubjectAccessReview (the user in the spec), a SelfSubjectAccessReview (`caller`)
/// or a LocalSubjectAccessReview (in `namespace`).
fn access_review(
    state: &ServerState,
    caller: Option<&UserInfo>,
    namespace: Option<&str>,
    mut review: Value,
) -> ApiResult<Value> {
    let kind = match (caller, namespace) {
        (Some(_), _) => "SelfSubjectAccessReview",
        (None, Some(_)) => "LocalSubjectAccessReview",
        (None, None) => "SubjectAccessReview",
    };
    check_kind(&review, AUTHORIZATION, kind)?;
    let spec = &review["spec"];
    let resource = spec.get("resourceAttributes").is_some_and(|v| !v.is_null());
    let non_resource = spec
        .get("nonResourceAttributes")
        .is_some_and(|v| !v.is_null());
    let user = match caller {
        Some(caller) => caller.clone(),
        None => UserInfo {
            username: spec["user"].as_str().unwrap_or_default().to_owned(),
            uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
            groups: strings(&spec["groups"]),
            extra: serde_json::from_value(spec["extra"].clone()).unwrap_or_default(),
        },
    };
    let mut causes = Vec::new();
    if caller.is_none() && user.username.is_empty() && user.groups.is_empty() {
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
    if let Some(namespace) = namespace {
        if non_resource {
            causes.push((
                "spec.nonResourceAttributes",
                "disallowed on this kind of request".to_owned(),
            ));
        }
        if spec["resourceAttributes"]["namespace"]
            .as_str()
            .unwrap_or_default()
            != namespace
        {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {namespace}"
            )));
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(AUTHORIZATION, kind, "", &causes));
    }
    state.reviews.access_reviews.fetch_add(1, Ordering::Relaxed);
    review["status"] = match state.authorizer.decide(&user, &review_attributes(spec)) {
        Decision::Allow => json!({"allowed": true}),
        Decision::Deny(reason) if reason.is_empty() => json!({"allowed": false}),
        Decision::Deny(reason) => json!({"allowed": false, "reason": reason}),
    };
    Ok(review)
}

/// Answers a SelfSubjectRulesReview: the caller's rules in `spec.namespace`.
fn rules_review(state: &ServerState, user: &UserInfo, mut review: Value) -> ApiResult<Value> {
    check_kind(&review, AUTHORIZATION, "SelfSubjectRulesReview")?;
    let namespace = review["spec"]["namespace"].as_str().unwrap_or_default();
    let rules = state.authorizer.rules().rules_for(user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in &rules {
        if !rule.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
        if !rule.resources.is_empty() {
            let mut entry = json!({"verbs": rule.verbs, "apiGroups": rule.api_groups, "resources": rule.resources});
            if !rule.resource_names.is_empty() {
                entry["resourceNames"] = json!(rule.resource_names);
            }
            resource_rules.push(entry);
        }
    }
    review["status"] = json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false});
    Ok(review)
}

impl ApiServer {
    /// A new bearer token for `username` in `groups` (plus `system:authenticated`): a
    /// credential the server accepts from now on, and TokenReviews report.
    pub fn mint_token(&self, username: &str, groups: &[&str]) -> String {
        let mut bytes = [0u8; 24];
        let _ = SystemRandom::new().fill(&mut bytes);
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut user = UserInfo::new(username, groups);
        user.uid = format!("uid-{username}");
        user.groups.push(AUTHENTICATED.into());
        self.state.authenticator.remember(token.clone(), user);
        token
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
