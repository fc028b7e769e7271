//! `POST serviceaccounts/{name}/token`: TokenRequest, the way pods and `kubectl create token`
//! get short-lived ServiceAccount tokens, and the authentication of those tokens.
//!
//! Expected flow: check the request ([`plan`], pure) → read the ServiceAccount (and the bound
//! object) → build the claims ([`claims`], pure) → sign them (ES256 JWT, the server's key) →
//! answer the TokenRequest with `status.token` and `status.expirationTimestamp`.
//!
//! Guarantees (as the real handler): `expirationSeconds` defaults to 3600 and must be at least
//! 600 (422 otherwise); audiences default to the server's; a missing ServiceAccount or bound
//! object is 404; a token authenticates requests until it expires, while its ServiceAccount
//! (same uid) and bound object exist; a legacy token (of a `service-account-token` Secret)
//! while its Secret holds it and its ServiceAccount exists. Audiences default to the API's
//! ([`super::user::API_AUDIENCE`]), as the real server's `--api-audiences`.
//!
//! Caveats: the signing key is
//! made per server start (tokens do not survive a restart); the issuer has no OIDC discovery
//! documents.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{self, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use super::user::UserInfo;
use crate::apiserver::errors::{ApiError, ApiResult};
use crate::apiserver::store::Store;

/// The issuer and default audience, as a cluster's `--service-account-issuer` usually is.
pub(crate) const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The shortest token lifetime the API server accepts, in seconds.
const MIN_EXPIRATION: i64 = 600;
/// The lifetime of a token whose request names none, in seconds.
const DEFAULT_EXPIRATION: i64 = 3600;

/// The object a token is bound to (it stops authenticating when the object is gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BoundObject {
    /// `Pod`, `Secret` or `Node`.
    pub kind: String,
    /// Its name.
    pub name: String,
}

/// A checked TokenRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenPlan {
    /// `aud` of the token.
    pub audiences: Vec<String>,
    /// Lifetime in seconds.
    pub expiration_seconds: i64,
    /// `spec.boundObjectRef`.
    pub bound: Option<BoundObject>,
}

/// Checks a TokenRequest body and fills in the defaults.
pub(crate) fn plan(request: &Value, name: &str) -> ApiResult<TokenPlan> {
    let invalid = |field: &str, message: String| {
        ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            &[(field, message)],
        )
    };
    let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    let expiration_seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION,
        Some(value) => value.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "spec.expirationSeconds: expected an integer, got {value}"
            ))
        })?,
    };
    if expiration_seconds < MIN_EXPIRATION {
        return Err(invalid(
            "spec.expirationSeconds",
            format!(
                "Invalid value: {expiration_seconds}: may not specify a duration less than 10 minutes"
            ),
        ));
    }
    if expiration_seconds > 1 << 32 {
        return Err(invalid(
            "spec.expirationSeconds",
            format!(
                "Invalid value: {expiration_seconds}: may not specify a duration larger than 2^32 seconds"
            ),
        ));
    }
    let audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .filter(|a: &Vec<String>| !a.is_empty())
        .unwrap_or_else(|| vec![super::user::API_AUDIENCE.to_owned()]);
    let bound = match spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        None => None,
        Some(reference) => {
            let kind = reference["kind"].as_str().unwrap_or_default().to_owned();
            if !matches!(kind.as_str(), "Pod" | "Secret" | "Node") {
                return Err(invalid(
                    "spec.boundObjectRef.kind",
                    format!(
                        "Unsupported value: {kind:?}: supported values: \"Pod\", \"Secret\", \"Node\""
                    ),
                ));
            }
            let name = reference["name"].as_str().unwrap_or_default().to_owned();
            Some(BoundObject { kind, name })
        }
    };
    Ok(TokenPlan {
        audiences,
        expiration_seconds,
        bound,
    })
}

/// The token's claims: who (the ServiceAccount, and the bound object), for whom and until
/// when.
pub(crate) fn claims(
    plan: &TokenPlan,
    namespace: &str,
    account: &Value,
    bound_uid: Option<&str>,
    now: u64,
    id: &str,
) -> Value {
    let name = account
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let uid = account
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut kubernetes =
        json!({"namespace": namespace, "serviceaccount": {"name": name, "uid": uid}});
    if let (Some(bound), Some(bound_uid)) = (&plan.bound, bound_uid) {
        kubernetes[bound.kind.to_ascii_lowercase()] = json!({"name": bound.name, "uid": bound_uid});
    }
    let expires = now.saturating_add(plan.expiration_seconds.unsigned_abs());
    json!({
        "aud": plan.audiences,
        "exp": expires,
        "iat": now,
        "nbf": now,
        "iss": ISSUER,
        "jti": id,
        "kubernetes.io": kubernetes,
        "sub": format!("system:serviceaccount:{namespace}:{name}"),
    })
}

/// Signs and checks ServiceAccount tokens (ES256 JWTs) with a key made at server start.
pub(crate) struct TokenIssuer {
    key: EcdsaKeyPair,
    rng: SystemRandom,
    key_id: String,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("TokenIssuer")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl TokenIssuer {
    /// A new signing key.
    pub(crate) fn generate() -> Result<Self, String> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| "could not generate the service account signing key".to_owned())?;
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .map_err(|_| "could not load the service account signing key".to_owned())?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let key_id = URL_SAFE_NO_PAD.encode(digest.as_ref());
        Ok(TokenIssuer { key, rng, key_id })
    }

    /// A random token id (`jti`).
    pub(crate) fn token_id(&self) -> String {
        let mut bytes = [0u8; 16];
        let _ = self.rng.fill(&mut bytes);
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The signed JWT of `claims`.
    pub(crate) fn sign(&self, claims: &Value) -> ApiResult<String> {
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| ApiError::internal("could not sign the token"))?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(signature.as_ref())
        ))
    }

    /// The claims of a token this issuer signed that has not expired at `now`; None for any
    /// other string.
    pub(crate) fn verify(&self, token: &str, now: u64) -> Option<Value> {
        let (signing_input, signature) = token.rsplit_once('.')?;
        let (_, payload) = signing_input.split_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        )
        .verify(signing_input.as_bytes(), &signature)
        .ok()?;
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        let expires = claims.get("exp").and_then(Value::as_u64)?;
        (now < expires).then_some(claims)
    }
}

/// The TokenRequest answered.
pub(crate) fn response(
    plan: &TokenPlan,
    namespace: &str,
    name: &str,
    token: &str,
    expiration_timestamp: &str,
) -> Value {
    let bound = plan
        .bound
        .as_ref()
        .map(|b| json!({"kind": b.kind, "apiVersion": "v1", "name": b.name}));
    json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
        "spec": {"audiences": plan.audiences, "expirationSeconds": plan.expiration_seconds, "boundObjectRef": bound},
        "status": {"token": token, "expirationTimestamp": expiration_timestamp},
    })
}

/// The plural and scope of a kind a token may be bound to.
fn bound_resource(kind: &str) -> (&'static str, bool) {
    match kind {
        "Pod" => ("pods", true),
        "Secret" => ("secrets", true),
        _ => ("nodes", false),
    }
}

/// The uid of an object in the core group, or 404.
fn core_uid(store: &Store, plural: &str, namespace: &str, name: &str) -> ApiResult<String> {
    let ty = store
        .resource_type("", "v1", plural)
        .ok_or_else(|| ApiError::internal(format!("{plural} are not served")))?;
    let object = store.get(&ty, "v1", namespace, name)?;
    Ok(object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned())
}

/// `POST serviceaccounts/{name}/token` at `now` (seconds since the epoch).
pub(crate) fn request_token(
    store: &Store,
    issuer: &TokenIssuer,
    namespace: &str,
    name: &str,
    body: &Value,
    now: u64,
) -> ApiResult<Value> {
    let plan = plan(body, name)?;
    let accounts = store
        .resource_type("", "v1", "serviceaccounts")
        .ok_or_else(|| ApiError::internal("serviceaccounts are not served"))?;
    let account = store.get(&accounts, "v1", namespace, name)?;
    let bound_uid = match &plan.bound {
        Some(bound) => {
            let (plural, namespaced) = bound_resource(&bound.kind);
            let scope = if namespaced { namespace } else { "" };
            Some(core_uid(store, plural, scope, &bound.name)?)
        }
        None => None,
    };
    let claims = claims(
        &plan,
        namespace,
        &account,
        bound_uid.as_deref(),
        now,
        &issuer.token_id(),
    );
    let token = issuer.sign(&claims)?;
    let expires = claims["exp"].as_u64().unwrap_or(now);
    let expiration = crate::apiserver::time::format_time(std::time::Duration::from_secs(expires));
    Ok(response(&plan, namespace, name, &token, &expiration))
}

/// The issuer of legacy ServiceAccount token Secrets (the token controller's).
pub(crate) const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";

/// A ServiceAccount token of this server that still authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServiceAccountToken {
    /// The ServiceAccount, with its groups, and the extra attributes of the token.
    pub user: UserInfo,
    /// The token's audiences; None for a legacy Secret token (valid for the API's own).
    pub audiences: Option<Vec<String>>,
}

/// Who `token` authenticates at `now`: a TokenRequest token (signed here, not expired, its
/// ServiceAccount (same uid) and bound object present) or a legacy token still stored in its
/// Secret; None for anything else.
pub(crate) fn identify(
    store: &Store,
    issuer: &TokenIssuer,
    token: &str,
    now: u64,
) -> Option<ServiceAccountToken> {
    let claims = issuer.verify(token, now)?;
    if claims["iss"] == LEGACY_ISSUER {
        return identify_legacy(store, token, &claims);
    }
    let identity = claims.get("kubernetes.io")?;
    let namespace = identity["namespace"].as_str().unwrap_or_default();
    let present = |plural: &str, scope: &str, reference: &Value| {
        let name = reference["name"].as_str().unwrap_or_default();
        core_uid(store, plural, scope, name).is_ok_and(|uid| reference["uid"] == uid.as_str())
    };
    let account = &identity["serviceaccount"];
    let bound_present = ["Pod", "Secret", "Node"].iter().all(|kind| {
        let reference = &identity[kind.to_ascii_lowercase()];
        let (plural, namespaced) = bound_resource(kind);
        reference.is_null() || present(plural, if namespaced { namespace } else { "" }, reference)
    });
    if !present("serviceaccounts", namespace, account) || !bound_present {
        return None;
    }
    let mut user = UserInfo::service_account(
        namespace,
        account["name"].as_str().unwrap_or_default(),
        account["uid"].as_str().unwrap_or_default(),
    );
    let mut extra = |key: &str, value: &Value| {
        if let Some(value) = value.as_str() {
            user.extra.insert(
                format!("authentication.kubernetes.io/{key}"),
                vec![value.to_owned()],
            );
        }
    };
    extra("pod-name", &identity["pod"]["name"]);
    extra("pod-uid", &identity["pod"]["uid"]);
    extra("node-name", &identity["node"]["name"]);
    extra("node-uid", &identity["node"]["uid"]);
    if let Some(id) = claims["jti"].as_str() {
        extra("credential-id", &Value::from(format!("JTI={id}")));
    }
    let audiences = match &claims["aud"] {
        Value::String(one) => vec![one.clone()],
        other => other
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
    };
    Some(ServiceAccountToken {
        user,
        audiences: Some(audiences),
    })
}

/// A legacy token authenticates while its Secret holds it and its ServiceAccount (same uid)
/// exists.
fn identify_legacy(store: &Store, token: &str, claims: &Value) -> Option<ServiceAccountToken> {
    let claim = |key: &str| {
        claims[format!("kubernetes.io/serviceaccount/{key}")]
            .as_str()
            .unwrap_or_default()
    };
    let namespace = claim("namespace");
    let secrets = store.resource_type("", "v1", "secrets")?;
    let secret = store
        .get(&secrets, "v1", namespace, claim("secret.name"))
        .ok()?;
    let stored = secret["data"]["token"].as_str().unwrap_or_default();
    if base64::engine::general_purpose::STANDARD
        .decode(stored)
        .ok()?
        != token.as_bytes()
    {
        return None;
    }
    let uid = core_uid(
        store,
        "serviceaccounts",
        namespace,
        claim("service-account.name"),
    )
    .ok()?;
    if uid != claim("service-account.uid") {
        return None;
    }
    let mut user = UserInfo::service_account(namespace, claim("service-account.name"), &uid);
    user.extra.insert(
        "authentication.kubernetes.io/credential-id".into(),
        vec![format!("Secret={}", claim("secret.name"))],
    );
    Some(ServiceAccountToken {
        user,
        audiences: None,
    })
}

/// The claims of a legacy token for the Secret `secret` of ServiceAccount `account`.
pub(crate) fn legacy_claims(namespace: &str, account: &str, uid: &str, secret: &str) -> Value {
    json!({
        "iss": LEGACY_ISSUER,
        "kubernetes.io/serviceaccount/namespace": namespace,
        "kubernetes.io/serviceaccount/secret.name": secret,
        "kubernetes.io/serviceaccount/service-account.name": account,
        "kubernetes.io/serviceaccount/service-account.uid": uid,
        "sub": format!("system:serviceaccount:{namespace}:{account}"),
        // Legacy tokens never expire; the verifier wants an expiry, so the far future.
        "exp": u64::from(u32::MAX) * 16,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_default_and_refuse_short_lifetimes_and_unknown_bindings() {
        let plan = plan(&json!({"spec": {}}), "sa").unwrap();
        assert_eq!(plan.expiration_seconds, 3600);
        assert_eq!(
            plan.audiences,
            vec![super::super::user::API_AUDIENCE.to_owned()]
        );
        let short = super::plan(&json!({"spec": {"expirationSeconds": 599}}), "sa").unwrap_err();
        assert_eq!((short.code, short.reason), (422, "Invalid"));
        let bound = super::plan(
            &json!({"spec": {"boundObjectRef": {"kind": "ConfigMap", "name": "x"}}}),
            "sa",
        );
        assert_eq!(bound.map_err(|e| e.code), Err(422));
    }

    #[test]
    fn a_signed_token_verifies_until_it_expires_and_a_forged_one_never() {
        let issuer = TokenIssuer::generate().unwrap();
        let plan = plan(&json!({"spec": {"expirationSeconds": 600}}), "sa").unwrap();
        let account = json!({"metadata": {"name": "sa", "uid": "u1"}});
        let claims = claims(&plan, "ns", &account, None, 1000, "id");
        assert_eq!(claims["sub"], "system:serviceaccount:ns:sa");
        let token = issuer.sign(&claims).unwrap();
        assert_eq!(
            issuer.verify(&token, 1599).map(|c| c["exp"].clone()),
            Some(json!(1600))
        );
        assert!(issuer.verify(&token, 1600).is_none(), "expired");
        let other = TokenIssuer::generate().unwrap();
        assert!(other.verify(&token, 1000).is_none(), "another key");
        let (head, _) = token.rsplit_once('.').unwrap();
        assert!(issuer.verify(&format!("{head}.AAAA"), 1000).is_none());
        assert!(issuer.verify("not-a-token", 1000).is_none());
        assert!(!format!("{issuer:?}").contains("key:"));
    }
}
