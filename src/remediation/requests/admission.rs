//! The I/O edge of [`crate::remediation::decide::trust`]: the NodeHealthChecks read from the API server, the
//! verdict on each request a pass meets, and the refusal told where its author looks (an
//! `Accepted=False` condition and a Warning Event on the request, a metric).
//!
//! Expected flow: a background task lists the NodeHealthChecks every few seconds (and a start
//! on a `NodeRemediation` lists them again first); every pass judges its subject's requests
//! with [`Context::node_request_verdict`] / [`Context::machine_request_verdict`]: a refused one
//! is no trigger, does not count in the storm gate and is told once; a request of unknown
//! standing (no NodeHealthCheck read yet) waits. Caveats: a refusal is told by the pass of the
//! subject the request names; a request naming a Node no Machine or trusted `HostBmc` stands
//! for is never looked at, so never told (it changes nothing either way).

use std::time::Duration;

use kube::Resource;
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

use crate::api::annotations::TEMPLATE_NAME;
use crate::api::{
    Condition, ConditionType, MachineRemediation, NodeRemediation, RemediationPolicySpec,
    RequestStatus,
};
use crate::leader::Writes;
use crate::remediation::decide::trust::{
    HEALTH_CHECK_KIND, Refusal, RequestOrigin, health_check, narrow, node_request_origin,
    request_namespaces,
};
use crate::remediation::pass::context::Context;
use crate::runtime::conditions::upsert_condition;
use crate::runtime::events::Severity;
use crate::{Error, Result};

/// How often the NodeHealthChecks are read again in the background.
pub const HEALTH_CHECK_REFRESH: Duration = Duration::from_secs(5);

/// The group of medik8s' NodeHealthCheck, as an owner reference's `apiVersion` starts.
const HEALTH_CHECK_GROUP: &str = "remediation.medik8s.io/";

/// medik8s' NodeHealthCheck resource (`remediation.medik8s.io/v1alpha1`, cluster-scoped).
fn health_check_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("remediation.medik8s.io", "v1alpha1", HEALTH_CHECK_KIND),
        "nodehealthchecks",
    )
}

/// What baremend makes of a request now.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It counts, under this policy (the policy narrowed by its spec).
    Accepted(RemediationPolicySpec),
    /// It is refused, and changes nothing.
    Refused(Refusal),
    /// Not known yet (the NodeHealthChecks were not read yet): it waits, untold.
    Unknown,
}

impl Verdict {
    /// The policy it is accepted under, if it is.
    pub fn accepted(self) -> Option<RemediationPolicySpec> {
        match self {
            Verdict::Accepted(policy) => Some(policy),
            _ => None,
        }
    }
}

impl Context {
    /// Reads the NodeHealthChecks from the API server. A cluster that does not serve them
    /// has none (404): then only the policy's `spec.trust.requestNamespaces` trust anything.
    pub async fn refresh_health_checks(&self) -> Result<()> {
        let api: Api<DynamicObject> =
            Api::all_with(self.clients.kube.clone(), &health_check_resource());
        let listed = match api.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|o| health_check(&serde_json::to_value(o).unwrap_or_default()))
                .collect(),
            Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
            // Not allowed to read them (an install without the grant): as if there were none,
            // which trusts less, never more; said in the log at each read.
            Err(kube::Error::Api(status)) if status.code == 403 => {
                tracing::warn!(message = %status.message, "cannot list NodeHealthChecks: only spec.trust.requestNamespaces are trusted");
                Vec::new()
            }
            Err(error) => return Err(Error::kube("ListNodeHealthChecks")(error)),
        };
        *self
            .health_checks
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(listed);
        Ok(())
    }

    /// The verdict on a `NodeRemediation` under `policy`.
    pub fn node_request_verdict(
        &self,
        request: &NodeRemediation,
        policy: &RemediationPolicySpec,
    ) -> Verdict {
        let checks = self.health_checks.read().unwrap_or_else(|e| e.into_inner());
        let Some(checks) = checks.as_ref() else {
            return Verdict::Unknown;
        };
        let namespace = request.namespace().unwrap_or_default();
        let owner = request
            .owner_references()
            .iter()
            .find(|o| o.kind == HEALTH_CHECK_KIND && o.api_version.starts_with(HEALTH_CHECK_GROUP));
        let origin = RequestOrigin {
            namespace: &namespace,
            owner: owner.map(|o| (o.name.as_str(), o.uid.as_str())),
            template: request.annotations().get(TEMPLATE_NAME).map(String::as_str),
        };
        let trusted = request_namespaces(&policy.trust, checks);
        match node_request_origin(origin, &trusted, checks)
            .and_then(|()| narrow(policy, &request.spec.overrides))
        {
            Ok(narrowed) => Verdict::Accepted(narrowed),
            Err(refusal) => Verdict::Refused(refusal),
        }
    }

    /// The verdict on a `MachineRemediation` (found in its Machine's namespace, by the
    /// Machine's name: only its spec can be wrong).
    pub fn machine_request_verdict(
        &self,
        request: &MachineRemediation,
        policy: &RemediationPolicySpec,
    ) -> Verdict {
        match narrow(policy, &request.spec.overrides) {
            Ok(narrowed) => Verdict::Accepted(narrowed),
            Err(refusal) => Verdict::Refused(refusal),
        }
    }
}

/// The `Accepted` condition to write on a request whose status is `status`, judged
/// `refusal` (None: accepted), if it changes anything: a refusal is written (once per reason),
/// and an acceptance only over an earlier refusal (a request never refused keeps the
/// contract's conditions alone). Pure.
pub fn accepted_status(
    status: &RequestStatus,
    refusal: Option<&Refusal>,
    now: std::time::SystemTime,
) -> Option<RequestStatus> {
    let current = status
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::Accepted.as_str());
    let (accepted, reason, message) = match refusal {
        Some(refusal) => (false, refusal.reason().as_str(), refusal.to_string()),
        None => (
            true,
            "Accepted",
            "baremend honours this request".to_string(),
        ),
    };
    let unchanged = match current {
        Some(c) => c.status == if accepted { "True" } else { "False" } && c.reason == reason,
        None => accepted,
    };
    if unchanged {
        return None;
    }
    let mut wanted = status.clone();
    upsert_condition(
        &mut wanted.conditions,
        ConditionType::Accepted,
        accepted,
        reason,
        &message,
        now,
    );
    Some(wanted)
}

/// An object that is told its standing: a namespaced kind of ours with a status.
pub(in crate::remediation) trait Standing:
    Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Standing for K where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Tells a request (whose status is `status`) `verdict`, unless it is not known yet.
pub(in crate::remediation) async fn tell_request<K>(
    writes: &Writes,
    context: &Context,
    request: &K,
    status: Option<&RequestStatus>,
    verdict: Verdict,
) -> Result<()>
where
    K: Standing,
{
    let refusal = match verdict {
        Verdict::Unknown => return Ok(()),
        Verdict::Accepted(_) => None,
        Verdict::Refused(refusal) => Some(refusal),
    };
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let told = (conditions, refusal.as_ref(), "nothing is done for it");
    tell_standing(writes, context, request, told).await
}

/// Tells `object` (a request or a `HostBmc`, whose status conditions are `conditions`) its
/// standing when it changed: `Accepted=False` with the reason, a Warning Event saying it and
/// `consequence`, and the count, for a refusal; `Accepted=True` over an earlier refusal.
pub(in crate::remediation) async fn tell_standing<K>(
    writes: &Writes,
    context: &Context,
    object: &K,
    (conditions, refusal, consequence): (&[Condition], Option<&Refusal>, &str),
) -> Result<()>
where
    K: Standing,
{
    let current = RequestStatus {
        conditions: conditions.to_vec(),
        ..RequestStatus::default()
    };
    let Some(wanted) = accepted_status(&current, refusal, context.clock.now()) else {
        return Ok(());
    };
    writes.check()?;
    let api: Api<K> = Api::namespaced(
        context.clients.kube.clone(),
        &object.namespace().unwrap_or_default(),
    );
    // The conditions only: the list is written whole, the others in it kept. On the version
    // this judgment read: two passes that both saw it untold (another Machine's, or one
    // woken at once by a policy change) must not both tell it and count it twice.
    let patch = Patch::Merge(serde_json::json!({
        "metadata": {"resourceVersion": object.resource_version()},
        "status": {"conditions": wanted.conditions},
    }));
    match api
        .patch_status(&object.name_any(), &PatchParams::default(), &patch)
        .await
    {
        Ok(_) => {}
        // Deleted meanwhile: nothing to tell.
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        // Changed since it was read (told by another pass, or changed by its owner): the
        // change wakes a pass that judges the object as it is now.
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
        Err(error) => return Err(Error::kube("ReportStanding")(error)),
    }
    let Some(refusal) = refusal else {
        return Ok(());
    };
    let kind = K::kind(&()).into_owned();
    context.metrics.refused(&kind, refusal.reason().as_str());
    let note = format!("refused: {refusal}; {consequence}");
    tracing::warn!(%kind, name = %object.name_any(), reason = refusal.reason().as_str(), "{note}");
    crate::runtime::events::publish(
        &context.clients.recorder,
        Severity::Warning,
        refusal.reason().as_str(),
        &note,
        &[(object.object_ref(&()), None)],
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepted(status: &RequestStatus) -> Option<&Condition> {
        status.conditions.iter().find(|c| c.type_ == "Accepted")
    }

    #[test]
    fn a_refusal_is_written_once_per_reason_and_an_acceptance_only_over_a_refusal() {
        let now = std::time::SystemTime::UNIX_EPOCH;
        let fresh = RequestStatus::default();
        assert_eq!(accepted_status(&fresh, None, now), None);
        let refusal = Refusal::NamespaceNotTrusted {
            kind: "NodeRemediation",
            namespace: "tenant-a".into(),
        };
        let refused = accepted_status(&fresh, Some(&refusal), now).unwrap();
        let condition = accepted(&refused).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "NamespaceNotTrusted")
        );
        assert!(condition.message.contains("tenant-a"));
        assert_eq!(accepted_status(&refused, Some(&refusal), now), None);
        let other = Refusal::WidensPolicy {
            field: "maxAttempts",
            asked: "9".into(),
            allowed: "at most 3".into(),
        };
        let changed = accepted_status(&refused, Some(&other), now).unwrap();
        assert_eq!(accepted(&changed).unwrap().reason, "WidensPolicy");
        let cleared = accepted_status(&changed, None, now).unwrap();
        assert_eq!(accepted(&cleared).unwrap().status, "True");
        assert_eq!(accepted_status(&cleared, None, now), None);
    }
}
