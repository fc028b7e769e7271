//! The non-disruptive probes of a fencing path, shared by the dry run and the fencing
//! readiness check (the controller's and `baremend check`'s): the reboot API's is a read of
//! the BareMetalHost and of its credentials Secret's version; a BMC's is a login, a read of
//! the system and its advertised reset types, then the session closed. Neither ever asks for
//! a power change. The verdicts are decided in [`crate::remediation::decide::readiness`].

use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{BmcAddress, Connector, Error as DriverError, PowerDriver};
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::power::{bmc_driver_config, driver_kind};
use crate::api::slim;
use crate::metrics::power::PowerMetrics;
use crate::remediation::decide::bmc_trust::{Reader, Transport, transport};
use crate::remediation::decide::observe::{BmcRef, HostRef, bare_metal_host_view};
use crate::remediation::decide::readiness::{
    FencingPath, GoodCredentials, HostFacts, Reason, Refusal, Verdict, bmc_answer, host_answer,
};
use crate::remediation::evidence::bmc::NoBmc;
use crate::remediation::pass::context::host_resource;
use crate::remediation::world::metered::Metered;
use crate::remediation::world::witnessed::Witness;
use crate::runtime::clock::since_epoch;
use crate::runtime::read::GetPresent;

/// The reboot API's probe of `host`: the BareMetalHost and its credentials Secret read now.
pub async fn probe_host(client: &Client, host: &HostRef, reboot_key: &str) -> Verdict {
    let path = || Some(FencingPath::RebootApi(host.clone()));
    let hosts: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &host.namespace, &host_resource());
    let object = match hosts.get_present(&host.name).await {
        Ok(Some(object)) => object,
        Ok(None) => {
            let detail = format!("BareMetalHost {host} not found");
            return Err(Refusal::new(path(), Reason::HostNotFound, detail));
        }
        Err(error) => {
            let detail = format!("cannot read BareMetalHost {host}: {error}");
            return Err(Refusal::new(path(), Reason::CheckFailed, detail));
        }
    };
    let json = serde_json::to_value(&object).unwrap_or(Value::Null);
    let mut facts = host_facts(host, &json, reboot_key);
    if let Some(name) = &facts.credentials_name {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &host.namespace);
        facts.secret_version = match secrets.get_present(name).await {
            Ok(secret) => secret.and_then(|s| s.metadata.resource_version),
            Err(error) => {
                let detail = format!("cannot read Secret {}/{name}: {error}", host.namespace);
                return Err(Refusal::new(path(), Reason::CheckFailed, detail));
            }
        };
    }
    host_answer(&facts)
}

/// What a BareMetalHost (as JSON) says about its readiness; the Secret's version is read apart.
/// The fields the fencing path reads come through the same typed view as a remediation's
/// ([`slim::BareMetalHost`]); `status.goodCredentials`, which only this probe reads and the
/// cache does not keep, is read from the JSON.
pub fn host_facts(host: &HostRef, json: &Value, reboot_key: &str) -> HostFacts {
    let typed: slim::BareMetalHost = serde_json::from_value(json.clone()).unwrap_or_default();
    let text = |pointer: &str| {
        json.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let good_credentials = json
        .pointer("/status/goodCredentials")
        .filter(|g| g.is_object())
        .map(|_| GoodCredentials {
            name: text("/status/goodCredentials/credentials/name"),
            version: text("/status/goodCredentials/credentialsVersion"),
        });
    HostFacts {
        host: host.clone(),
        view: bare_metal_host_view(&typed, reboot_key),
        credentials_name: typed
            .spec
            .and_then(|spec| spec.bmc)
            .and_then(|bmc| bmc.credentials_name),
        secret_version: None,
        good_credentials,
    }
}

/// A refusal for a Machine with no BMC to fence directly.
pub fn no_bmc(why: &NoBmc) -> Refusal {
    let reason = match why {
        NoBmc::Managed(_) => Reason::HostManaged,
        NoBmc::Unusable(_) => Reason::BmcMisconfigured,
        NoBmc::NotNamed => Reason::NoFencingPath,
    };
    Refusal::new(None, reason, why.to_string())
}

/// What a probe is made with.
pub struct ProbeWith<'a> {
    /// The API client.
    pub client: &'a Client,
    /// BMC drivers, one request gate per BMC.
    pub connector: &'a Connector,
    /// The policy's reboot key.
    pub reboot_key: &'a str,
    /// How long one BMC probe may take, login and close included.
    pub timeout: Duration,
    /// How BMC probes are counted and weighed.
    pub terms: ProbeTerms,
}

/// Where a Machine's (or a Machine-less Node's) fencing paths lead.
pub struct ProbeSite<'a> {
    /// `namespace/name`, as messages name it.
    pub key: &'a str,
    /// The namespace of the Machine (or of the `HostBmc`).
    pub namespace: &'a str,
    /// The BareMetalHost it names, or why the reference is unusable.
    pub host: &'a Result<Option<HostRef>, String>,
    /// Its BMC for direct fencing, or why there is none.
    pub bmc: &'a Result<BmcRef, NoBmc>,
}

/// How a BMC probe is counted and weighed.
#[derive(Debug, Clone, Default)]
pub struct ProbeTerms {
    /// Where the requests are counted, if anywhere.
    pub metrics: Option<Arc<PowerMetrics>>,
    /// Where the reading goes and untrustworthy BMCs are known (the controller's ledger).
    pub witness: Option<Witness>,
    /// The policy lets a forgeable transport fence (`allowInsecureBmc`).
    pub allow_insecure: bool,
}

/// A BMC's probe: a new driver through `connector` (whose gate keeps one request in flight
/// per BMC, shared with every other user of the connector), the driver's `probe` within
/// `timeout`, then its session closed. A BMC whose answers could be forged (without the
/// policy's consent) is refused before any credential is sent; one the `terms`' ledger
/// knows untrustworthy is refused without a request.
pub async fn probe_bmc(
    client: &Client,
    connector: &Connector,
    namespace: &str,
    bmc: &BmcRef,
    timeout: Duration,
    terms: ProbeTerms,
) -> Verdict {
    let parsed = BmcAddress::parse(&bmc.address).ok();
    let path = parsed.as_ref().map(|address| FencingPath::Bmc {
        address: address.to_string(),
        driver: driver_kind(address),
    });
    if let Some(address) = &parsed {
        if let Transport::Forgeable(why) = transport(address, bmc.tls.insecure)
            && !terms.allow_insecure
        {
            let detail = format!(
                "BMC {address}: {why}; the RemediationPolicy does not allow insecure BMCs (allowInsecureBmc)"
            );
            return Err(Refusal::new(path, Reason::InsecureTransport, detail));
        }
        if let Some(witness) = &terms.witness {
            let now = since_epoch(witness.clock.now());
            if let Some(mark) = witness.ledger.distrusted(&address.to_string(), now) {
                let detail = format!("BMC {address}: {mark}");
                return Err(Refusal::new(path, Reason::BmcUntrustworthy, detail));
            }
        }
    }
    let misconfigured =
        |detail: String| Refusal::new(path.clone(), Reason::BmcMisconfigured, detail);
    let config = bmc_driver_config(client, namespace, bmc, terms.allow_insecure)
        .await
        .map_err(misconfigured)?;
    let kind = driver_kind(&config.address);
    let shown = config.address.to_string();
    let driver = connector
        .connect(config)
        .map_err(|e| misconfigured(e.to_string()))?;
    let driver: Arc<dyn PowerDriver> = match terms.metrics {
        Some(metrics) => Metered::wrap(driver, kind, metrics),
        None => driver,
    };
    let driver = match &terms.witness {
        Some(witness) => witness.wrap(driver, shown.clone(), Reader::Probe),
        None => driver,
    };
    let probed = match tokio::time::timeout(timeout, driver.probe()).await {
        Ok(result) => result,
        Err(_) => Err(DriverError::Timeout {
            bmc: shown.clone(),
            operation: "probe".into(),
            timeout,
        }),
    };
    // A session left open holds one of the BMC's few slots until it expires.
    if let Ok(Err(error)) = tokio::time::timeout(timeout, driver.close()).await {
        tracing::debug!(bmc = %shown, %error, "closing the probe's session failed");
    }
    bmc_answer(&shown, kind, &probed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn host_facts_read_the_status_the_operator_reports() {
        let host = HostRef {
            namespace: "m".into(),
            name: "h0".into(),
        };
        let json = json!({
            "metadata": {"name": "h0", "namespace": "m",
                "annotations": {"baremetalhost.metal3.io/paused": ""}},
            "spec": {"bmc": {"address": "redfish://bmc", "credentialsName": "bmc-h0"}},
            "status": {
                "poweredOn": true,
                "operationalStatus": "error",
                "errorType": "registration error",
                "errorMessage": "401",
                "goodCredentials": {"credentials": {"name": "bmc-h0", "namespace": "m"},
                    "credentialsVersion": "7"},
            },
        });
        let facts = host_facts(&host, &json, "baremend");
        assert!(facts.view.paused);
        assert_eq!(
            facts.view.error,
            Some(("registration error".into(), "401".into()))
        );
        assert_eq!(facts.credentials_name.as_deref(), Some("bmc-h0"));
        assert_eq!(
            facts.good_credentials,
            Some(GoodCredentials {
                name: Some("bmc-h0".into()),
                version: Some("7".into()),
            })
        );
        let bare = host_facts(&host, &json!({"status": {"goodCredentials": null}}), "b");
        assert_eq!(bare.good_credentials, None);
        assert_eq!(bare.credentials_name, None);
    }

    #[test]
    fn a_machine_without_a_bmc_says_why_with_its_reason() {
        assert_eq!(
            no_bmc(&NoBmc::Managed("m".into())).reason,
            Reason::HostManaged
        );
        assert_eq!(
            no_bmc(&NoBmc::Unusable("u".into())).reason,
            Reason::BmcMisconfigured
        );
        let none = no_bmc(&NoBmc::NotNamed);
        assert_eq!(none.reason, Reason::NoFencingPath);
        assert_eq!(none.path, None);
        assert!(none.detail.contains("no HostBmc"), "{}", none.detail);
    }
}
