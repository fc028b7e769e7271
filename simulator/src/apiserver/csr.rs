//! `certificates.k8s.io/v1` CertificateSigningRequests: create (stamped with the requester),
//! get, list, the status subresource, and approval through the `approval` subresource.
//!
//! Expected flow: create → [`validate`] the request (pure) and [`stamp`] the requester into
//! the spec; every later write keeps the spec ([`prepare_for_update`]); `/approval` takes the
//! conditions of the object sent ([`approval_conditions`], pure) and keeps everything else.
//!
//! Guarantees (as the real strategy and validation): `spec.request` must be a PEM
//! `CERTIFICATE REQUEST` block, `signerName` and `usages` are required and
//! `expirationSeconds` is at least 600 (422 otherwise); the requester's name, uid and groups
//! replace whatever the client sent; the spec never changes after create; Approved and Denied
//! conditions change only through `/approval` (which takes every condition sent, of any type),
//! must be `True`, exclude each other and cannot be removed; condition times are filled in.
//!
//! Caveats: the request's signature is not verified, and no signer issues certificates for
//! approved requests (`status.certificate` is only what a client writes through `/status`).

use base64::Engine;
use serde_json::{Value, json};

use super::errors::{ApiError, ApiResult};
use super::kinds::ResourceType;
use super::objects::meta_str;
use super::operations::SubresourceWrite;
use super::store::{EventType, Store};

const GROUP: &str = "certificates.k8s.io";
const KIND: &str = "CertificateSigningRequest";
/// The condition types only the approval subresource writes.
const APPROVAL: [&str; 2] = ["Approved", "Denied"];

/// Who sent a request, as the API server's authenticators tell.
pub(crate) type Requester = super::auth::user::UserInfo;

fn name_of(object: &Value) -> &str {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Create-time validation of a CertificateSigningRequest.
pub(crate) fn validate(object: &Value) -> ApiResult<()> {
    let mut causes: Vec<(&str, String)> = Vec::new();
    match object.pointer("/spec/request").and_then(Value::as_str) {
        None | Some("") => causes.push(("spec.request", "Required value".into())),
        Some(encoded) => {
            if let Err(why) = pem_request(encoded) {
                causes.push(("spec.request", format!("Invalid value: {why}")));
            }
        }
    }
    match object.pointer("/spec/signerName").and_then(Value::as_str) {
        None | Some("") => causes.push(("spec.signerName", "Required value".into())),
        Some(signer) if !signer.contains('/') => causes.push((
            "spec.signerName",
            format!("Invalid value: {signer:?}: must be a fully qualified domain and path of the form 'example.com/signer-name'"),
        )),
        Some(_) => {}
    }
    if object
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        causes.push(("spec.usages", "Required value".into()));
    }
    if let Some(seconds) = object
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        && seconds < 600
    {
        causes.push((
            "spec.expirationSeconds",
            format!("Invalid value: {seconds}: may not specify a duration less than 600 seconds (10 minutes)"),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(GROUP, KIND, name_of(object), &causes))
    }
}

/// Checks that `spec.request` (base64 of PEM) holds a `CERTIFICATE REQUEST` block whose
/// content is a DER sequence.
fn pem_request(encoded: &str) -> Result<(), String> {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| "the request is not base64".to_owned())?;
    let pem = String::from_utf8(pem).map_err(|_| "the request is not PEM".to_owned())?;
    let body = pem
        .split("-----BEGIN CERTIFICATE REQUEST-----")
        .nth(1)
        .and_then(|rest| rest.split("-----END CERTIFICATE REQUEST-----").next())
        .ok_or("PEM block type must be CERTIFICATE REQUEST")?;
    let der = base64::engine::general_purpose::STANDARD
        .decode(body.split_whitespace().collect::<String>())
        .map_err(|_| "the PEM block is not base64".to_owned())?;
    if der.first() != Some(&0x30) {
        return Err("the PEM block is not a DER sequence".into());
    }
    Ok(())
}

/// Sets the requester into the spec and drops any status, as the create strategy does.
pub(crate) fn stamp(object: &mut Value, requester: &Requester) {
    // A body that is not an object is refused by the create itself.
    if !object.is_object() {
        return;
    }
    if !object.get("spec").is_some_and(Value::is_object) {
        object["spec"] = json!({});
    }
    object["spec"]["username"] = json!(requester.username);
    object["spec"]["groups"] = json!(requester.groups);
    if requester.uid.is_empty() {
        if let Some(spec) = object["spec"].as_object_mut() {
            spec.remove("uid");
        }
    } else {
        object["spec"]["uid"] = json!(requester.uid);
    }
    if requester.extra.is_empty() {
        if let Some(spec) = object["spec"].as_object_mut() {
            spec.remove("extra");
        }
    } else {
        object["spec"]["extra"] = json!(requester.extra);
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
}

fn conditions(object: &Value) -> Vec<Value> {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn is_approval(condition: &Value) -> bool {
    condition["type"]
        .as_str()
        .is_some_and(|t| APPROVAL.contains(&t))
}

/// Fills a condition's missing times with `now`.
fn stamped(mut condition: Value, now: &str) -> Value {
    for field in ["lastUpdateTime", "lastTransitionTime"] {
        if condition.get(field).is_none_or(Value::is_null) {
            condition[field] = json!(now);
        }
    }
    condition
}

/// Keeps the spec on every update, and the approval conditions on status updates (they
/// change only through `/approval`).
pub(crate) fn prepare_for_update(current: &Value, next: &mut Value, status: bool) {
    if let Some(spec) = current.get("spec") {
        next["spec"] = spec.clone();
    }
    if status {
        let mut kept: Vec<Value> = conditions(current)
            .into_iter()
            .filter(is_approval)
            .collect();
        kept.extend(conditions(next).into_iter().filter(|c| !is_approval(c)));
        if !next.get("status").is_some_and(Value::is_object) {
            next["status"] = json!({});
        }
        next["status"]["conditions"] = json!(kept);
    }
}

/// The conditions after an approval update: those of `proposed` (times filled in), refused
/// as the API server refuses them (kubernetes `pkg/registry/certificates/certificates/
/// strategy.go`, `csrApprovalStrategy.PrepareForUpdate`).
pub(crate) fn approval_conditions(
    current: &Value,
    proposed: &Value,
    now: &str,
) -> ApiResult<Vec<Value>> {
    let name = name_of(current);
    let invalid =
        |message: String| ApiError::invalid(GROUP, KIND, name, &[("status.conditions", message)]);
    let wanted: Vec<Value> = conditions(proposed)
        .into_iter()
        .filter(is_approval)
        .collect();
    for kind in APPROVAL {
        let of_kind: Vec<&Value> = wanted.iter().filter(|c| c["type"] == kind).collect();
        if of_kind.len() > 1 {
            return Err(invalid(format!("Duplicate value: {kind:?}")));
        }
        if let Some(condition) = of_kind.first()
            && condition["status"] != "True"
        {
            return Err(invalid(format!(
                "Unsupported value: {}: supported values: \"True\"",
                condition["status"]
            )));
        }
        let had = conditions(current).iter().any(|c| c["type"] == kind);
        if had && of_kind.is_empty() {
            return Err(invalid(format!(
                "Forbidden: updates may not remove a condition of type {kind:?}"
            )));
        }
    }
    if APPROVAL
        .iter()
        .all(|kind| wanted.iter().any(|c| c["type"] == *kind))
    {
        return Err(invalid(
            "Invalid value: Approved and Denied conditions are mutually exclusive".into(),
        ));
    }
    // Every condition the client sent is taken, as the real approval strategy takes them (a
    // client may record its own types beside Approved and Denied).
    Ok(conditions(proposed)
        .into_iter()
        .map(|c| stamped(c, now))
        .collect())
}

/// `PUT` or `PATCH …/approval`: writes the Approved and Denied conditions of the object the
/// client sends (a resourceVersion in it is a precondition) and answers the request.
pub(crate) fn update_approval(
    store: &Store,
    ty: &ResourceType,
    name: &str,
    write: &SubresourceWrite,
    dry_run: bool,
) -> ApiResult<Value> {
    let mut inner = store.lock();
    let key = Store::key(ty, "", name);
    let stored = inner
        .objects
        .get(&key)
        .map(|v| Value::clone(v))
        .ok_or_else(|| ApiError::not_found(&ty.group, &ty.plural, name))?;
    let current = Store::present(ty, "v1", &stored);
    let proposed = write.proposed(&current)?;
    if let Some(expected) = meta_str(&proposed, "resourceVersion").filter(|rv| !rv.is_empty())
        && Some(expected) != meta_str(&stored, "resourceVersion")
    {
        return Err(ApiError::stale(&ty.group, &ty.plural, name));
    }
    let now = super::time::format_time(store.wall_time());
    let conditions = approval_conditions(&current, &proposed, &now)?;
    let mut next = stored.clone();
    if !next.get("status").is_some_and(Value::is_object) {
        next["status"] = json!({});
    }
    next["status"]["conditions"] = json!(conditions);
    if dry_run || next == stored {
        return Ok(Store::present(ty, "v1", &next));
    }
    let committed = store.commit(&mut inner, key, Some(next), EventType::Modified);
    Ok(Store::present(ty, "v1", &committed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> String {
        let pem = "-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n";
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn csr(conditions: Value) -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"request": request(), "signerName": "example.com/s", "usages": ["client auth"]}, "status": {"conditions": conditions}})
    }

    #[test]
    fn requests_need_a_pem_csr_a_signer_and_usages() {
        assert!(validate(&csr(json!([]))).is_ok());
        let mut bad = csr(json!([]));
        bad["spec"]["request"] = json!(
            base64::engine::general_purpose::STANDARD
                .encode("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----\n")
        );
        bad["spec"]["signerName"] = json!("nodomain");
        bad["spec"]["usages"] = json!([]);
        bad["spec"]["expirationSeconds"] = json!(60);
        let error = validate(&bad).unwrap_err();
        assert_eq!(
            error.details.unwrap()["causes"].as_array().unwrap().len(),
            4
        );
    }

    #[test]
    fn the_requester_replaces_the_bodys_and_odd_bodies_are_left_to_the_create() {
        let requester = Requester::new("u", &["g"]);
        let mut object = json!({"spec": {"username": "mallory", "uid": "x"}, "status": {}});
        stamp(&mut object, &requester);
        assert_eq!(object, json!({"spec": {"username": "u", "groups": ["g"]}}));
        let mut array = json!([1]);
        stamp(&mut array, &requester);
        assert_eq!(array, json!([1]));
    }

    #[test]
    fn approval_adds_keeps_and_refuses_as_the_api_server() {
        let approved = json!([{"type": "Approved", "status": "True", "reason": "R"}]);
        let next = approval_conditions(&csr(json!([])), &csr(approved.clone()), "T").unwrap();
        assert_eq!(next[0]["lastUpdateTime"], "T");
        let both =
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]);
        assert!(approval_conditions(&csr(json!([])), &csr(both), "T").is_err());
        let removed = approval_conditions(&csr(approved.clone()), &csr(json!([])), "T");
        assert_eq!(removed.map_err(|e| e.code), Err(422));
        // Other types are the client's own, taken as sent (kube-client's `csr_can_be_approved`
        // approves with `ApprovedFake`).
        let own = json!([{"type": "ApprovedFake", "status": "True", "reason": "kube-rsClient"}]);
        let next = approval_conditions(&csr(json!([])), &csr(own), "T").unwrap();
        assert_eq!((next.len(), &next[0]["type"]), (1, &json!("ApprovedFake")));
        let not_true = json!([{"type": "Denied", "status": "False"}]);
        assert!(approval_conditions(&csr(json!([])), &csr(not_true), "T").is_err());
        // A status update cannot approve.
        let mut next = csr(approved);
        prepare_for_update(&csr(json!([])), &mut next, true);
        assert_eq!(next["status"]["conditions"], json!([]));
    }
}
