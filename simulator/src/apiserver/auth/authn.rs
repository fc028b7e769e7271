//! Authentication: which user a bearer token stands for (the kubeconfig's admin token,
//! tokens minted by tests, TokenRequest and legacy ServiceAccount tokens), audiences as the
//! real server checks them, and impersonation headers.
//!
//! Expected flow: [`Authenticator::authenticate`] the bearer token for the audiences asked
//! (the API's own for a request, a TokenReview's `spec.audiences`) → the user and the
//! audiences it is good for; then [`impersonation`] reads the `Impersonate-*` headers
//! (pure), each of which the caller must be allowed to `impersonate` ([`impersonation_checks`]).
//!
//! Guarantees (as `staging/src/k8s.io/apiserver/pkg/authentication` and
//! `endpoints/filters/impersonation.go` of kubernetes/kubernetes): tokens without audiences
//! of their own (admin, minted, legacy) are good for the API audiences only; a TokenRequest
//! token for the intersection of its audiences with the ones asked (none: not authenticated);
//! `Impersonate-Group`, `-Uid` or `-Extra-*` without `Impersonate-User` is a 400; an
//! impersonated ServiceAccount gets the ServiceAccount groups unless groups are named; every
//! impersonated user but `system:anonymous` gets `system:authenticated` unless
//! `system:authenticated` or `system:unauthenticated` is named.
//!
//! Caveats: no client certificates, no OIDC, no anonymous requests beyond the public health
//! and version paths.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use axum::http::HeaderMap;

use super::rbac::{Attributes, ResourceAttributes};
use super::tokens::{TokenIssuer, identify};
use super::user::{ADMIN_USER, API_AUDIENCE};
use super::user::{ANONYMOUS, AUTHENTICATED, SUPERUSERS, UNAUTHENTICATED, UserInfo};
use crate::apiserver::errors::{ApiError, ApiResult};
use crate::apiserver::store::Store;

/// The tokens the server knows besides the ServiceAccount ones it signs.
#[derive(Debug)]
pub(crate) struct Authenticator {
    admin_token: String,
    minted: Mutex<HashMap<String, UserInfo>>,
}

/// A token's user and the audiences it was accepted for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Authenticated {
    /// Who.
    pub user: UserInfo,
    /// The audiences asked for that the token is good for (never empty).
    pub audiences: Vec<String>,
}

/// The API server's own audiences.
pub(crate) fn api_audiences() -> Vec<String> {
    vec![API_AUDIENCE.to_owned()]
}

/// The kubeconfig's user.
pub(crate) fn admin() -> UserInfo {
    UserInfo {
        uid: format!("uid-{ADMIN_USER}"),
        ..UserInfo::new(ADMIN_USER, &[SUPERUSERS, AUTHENTICATED])
    }
}

/// The user of a request without credentials.
pub(crate) fn anonymous() -> UserInfo {
    UserInfo::new(ANONYMOUS, &[UNAUTHENTICATED])
}

/// `wanted` ∩ `held` (in `wanted`'s order); `wanted` empty means the API audiences.
fn intersect(wanted: &[String], held: &[String]) -> Vec<String> {
    let wanted = if wanted.is_empty() {
        api_audiences()
    } else {
        wanted.to_vec()
    };
    wanted.into_iter().filter(|a| held.contains(a)).collect()
}

/// Compares two byte strings without an early exit on the first difference.
fn constant_time_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Authenticator {
    /// The authenticator of a server whose kubeconfig holds `admin_token`.
    pub(crate) fn new(admin_token: &str) -> Self {
        Authenticator {
            admin_token: admin_token.to_owned(),
            minted: Mutex::new(HashMap::new()),
        }
    }

    /// Remembers a token minted for a test.
    pub(crate) fn remember(&self, token: String, user: UserInfo) {
        self.minted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token, user);
    }

    /// Who `token` stands for at `now`, for `audiences` (empty: the API's own).
    pub(crate) fn authenticate(
        &self,
        store: &Store,
        issuer: &TokenIssuer,
        token: &str,
        audiences: &[String],
        now: u64,
    ) -> Option<Authenticated> {
        let (user, held) = if constant_time_equal(token.as_bytes(), self.admin_token.as_bytes()) {
            (admin(), None)
        } else if let Some(user) = self
            .minted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
        {
            (user, None)
        } else {
            let account = identify(store, issuer, token, now)?;
            (account.user, account.audiences)
        };
        let audiences = intersect(audiences, &held.unwrap_or_else(api_audiences));
        (!audiences.is_empty()).then_some(Authenticated { user, audiences })
    }
}

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// What the `Impersonate-*` headers ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Impersonation {
    /// `Impersonate-User`.
    pub user: String,
    /// `Impersonate-Group` (repeatable).
    pub groups: Vec<String>,
    /// `Impersonate-Uid`.
    pub uid: Option<String>,
    /// `Impersonate-Extra-<key>` (repeatable).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The impersonation a request asks for (None: none); 400 for groups, uid or extras without
/// a user.
pub(crate) fn impersonation(headers: &HeaderMap) -> ApiResult<Option<Impersonation>> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    };
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let (Some(key), Ok(value)) = (
            name.as_str().strip_prefix("impersonate-extra-"),
            value.to_str(),
        ) {
            extra
                .entry(percent_decode(key))
                .or_default()
                .push(value.to_owned());
        }
    }
    let groups = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next();
    let Some(user) = values("impersonate-user").into_iter().next() else {
        if !groups.is_empty() || uid.is_some() || !extra.is_empty() {
            return Err(ApiError::bad_request(
                "requested impersonation of groups, uid or extras without impersonating a user",
            ));
        }
        return Ok(None);
    };
    Ok(Some(Impersonation {
        user,
        groups,
        uid,
        extra,
    }))
}

/// `%xx` escapes of an extra's key (the header name carries it escaped).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let hex = |i: usize| bytes.get(i).and_then(|b| (*b as char).to_digit(16));
        match (bytes[index], hex(index + 1), hex(index + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                index += 3;
            }
            (other, _, _) => {
                out.push(other);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `impersonate` checks one impersonation needs: the user (or ServiceAccount), each
/// group, the uid and each extra value.
pub(crate) fn impersonation_checks(request: &Impersonation) -> Vec<Attributes> {
    let check = |group: &str, resource: &str, sub: &str, namespace: &str, name: &str| {
        Attributes::resource(
            "impersonate",
            ResourceAttributes {
                group: group.into(),
                version: "v1".into(),
                resource: resource.into(),
                subresource: sub.into(),
                namespace: namespace.into(),
                name: name.into(),
            },
        )
    };
    let mut checks = vec![match service_account(&request.user) {
        Some((namespace, name)) => check("", "serviceaccounts", "", namespace, name),
        None => check("", "users", "", "", &request.user),
    }];
    checks.extend(
        request
            .groups
            .iter()
            .map(|group| check("", "groups", "", "", group)),
    );
    if let Some(uid) = &request.uid {
        checks.push(check("authentication.k8s.io", "uids", "", "", uid));
    }
    for (key, values) in &request.extra {
        for value in values {
            checks.push(check("authentication.k8s.io", "userextras", key, "", value));
        }
    }
    checks
}

/// (namespace, name) of a ServiceAccount username.
fn service_account(username: &str) -> Option<(&str, &str)> {
    username
        .strip_prefix("system:serviceaccount:")?
        .split_once(':')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
}

/// The user an allowed impersonation makes the request's.
pub(crate) fn impersonated(request: Impersonation) -> UserInfo {
    let mut groups = request.groups;
    if groups.is_empty()
        && let Some((namespace, _)) = service_account(&request.user)
    {
        groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{namespace}"),
        ];
    }
    if request.user != ANONYMOUS
        && !groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
    {
        groups.push(AUTHENTICATED.into());
    }
    UserInfo {
        username: request.user,
        uid: request.uid.unwrap_or_default(),
        groups,
        extra: request.extra,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn impersonating_a_service_account_gives_its_groups_unless_groups_are_named() {
        let asked = impersonation(&headers(&[(
            "Impersonate-User",
            "system:serviceaccount:a:sa",
        )]))
        .unwrap()
        .unwrap();
        let checks = impersonation_checks(&asked);
        let first = checks[0].resource.clone().unwrap();
        assert_eq!(
            (
                first.resource.as_str(),
                first.namespace.as_str(),
                first.name.as_str()
            ),
            ("serviceaccounts", "a", "sa")
        );
        let user = impersonated(asked);
        assert_eq!(
            user.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:a",
                "system:authenticated"
            ]
        );
        let asked = impersonation(&headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "team"),
            ("Impersonate-Group", "system:unauthenticated"),
            ("Impersonate-Extra-Scopes%2Fx", "s1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(impersonation_checks(&asked).len(), 4);
        let user = impersonated(asked);
        assert_eq!(user.groups, ["team", "system:unauthenticated"]);
        assert_eq!(user.extra["scopes/x"], ["s1"]);
    }

    #[test]
    fn groups_without_a_user_are_a_bad_request_and_no_headers_no_impersonation() {
        let error = impersonation(&headers(&[("Impersonate-Group", "team")])).unwrap_err();
        assert_eq!(error.code, 400);
        assert_eq!(impersonation(&headers(&[])).unwrap(), None);
    }

    #[test]
    fn audience_agnostic_tokens_are_good_for_the_api_audiences_only() {
        let api = api_audiences();
        assert_eq!(intersect(&[], &api), api);
        assert!(intersect(&["https://elsewhere".into()], &api).is_empty());
        let held = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(intersect(&["b".into(), "c".into()], &held), ["b"]);
    }
}
