//! The host's power, per fencing strategy: the evidence that proves it off, power requests
//! and their withdrawal, and the BMC of a host fenced directly.

use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{
    BmcAddress, DriverConfig, DriverKind, PowerDriver, PowerOffMode, PowerState, TlsOptions,
};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use serde_json::Value;

use super::controller::host_resource;
use super::execute;
use super::fence::{ConfirmedOff, FenceStrategy, NotFenced, PowerEvidence, confirm_powered_off};
use super::metered::Metered;
use super::observe::{self, BmcRef, HostRef, bare_metal_host_bmc, bare_metal_host_view};
use super::plan::Persisted;
use super::run::Pass;
use super::slim;
use super::state::since_epoch;
use crate::api::annotations::{BMH_DETACHED, REBOOT_PREFIX};
use crate::api::{FenceStrategyName, HostBmc, Remediation};
use crate::{Error, Result};

/// Which power-off requests to withdraw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Withdraw {
    /// All: reboot-API annotations removed and BMCs told to power on.
    Everything,
    /// Only the reboot-API annotations (the Node is back: its host is on, no BMC to ask).
    RebootRequestsOnly,
}

/// The BMC to use for direct fencing.
/// Where a Machine's BMC is for direct access, and how to check its certificate: a HostBmc
/// naming the Machine (or its Node), else a *detached* BareMetalHost's `spec.bmc`. A host its
/// BareMetal Operator manages is refused: the operator would power it back on.
pub fn locate_bmc(
    host_bmcs: &[Arc<HostBmc>],
    namespace: &str,
    machine: &str,
    node: Option<&str>,
    host: Option<(&HostRef, Option<&slim::BareMetalHost>)>,
) -> std::result::Result<(BmcRef, TlsOptions), String> {
    let mapping = host_bmcs.iter().find(|m| {
        m.namespace().as_deref() == Some(namespace)
            && (m.spec.machine_name.as_deref() == Some(machine)
                || (m.spec.node_name.is_some() && m.spec.node_name.as_deref() == node))
    });
    match (mapping, host) {
        (Some(mapping), _) => Ok((
            BmcRef {
                address: mapping.spec.address.clone(),
                credentials_name: mapping.spec.credentials_name.clone(),
            },
            TlsOptions {
                ca_bundle_pem: mapping.spec.ca_bundle.clone().map(String::into_bytes),
                insecure: mapping.spec.insecure_skip_verify,
            },
        )),
        (None, Some((host_ref, Some(host)))) => {
            let json = serde_json::to_value(host).unwrap_or(Value::Null);
            let detached = host.annotations().contains_key(BMH_DETACHED)
                || json
                    .pointer("/status/operationalStatus")
                    .and_then(Value::as_str)
                    == Some("detached");
            if !detached {
                return Err(format!(
                    "BareMetalHost {host_ref} is managed by the BareMetal Operator, which would power it back on; direct BMC fencing needs it detached or a HostBmc"
                ));
            }
            let bmc =
                bare_metal_host_bmc(&json).map_err(|e| format!("BareMetalHost {host_ref}: {e}"))?;
            let insecure = json
                .pointer("/spec/bmc/disableCertificateVerification")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Ok((
                bmc,
                TlsOptions {
                    ca_bundle_pem: None,
                    insecure,
                },
            ))
        }
        _ => Err("no HostBmc and no BareMetalHost names its BMC".into()),
    }
}

/// The driver kind as metrics and logs name it.
pub fn driver_kind(address: &BmcAddress) -> &'static str {
    match address.kind() {
        DriverKind::Redfish => "redfish",
        DriverKind::Ipmi => "ipmi",
    }
}

pub(super) struct DirectBmc {
    pub(super) driver: Arc<dyn PowerDriver>,
}

impl Pass {
    pub(super) async fn evidence(
        &self,
        remediation: &Remediation,
        strategy: FenceStrategyName,
    ) -> std::result::Result<ConfirmedOff, NotFenced> {
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => {
                let Some((host_ref, host)) = self.host(remediation) else {
                    return Err(NotFenced::Untrustworthy(
                        match observe::machine_host(&self.machine_json()) {
                            Err(unusable) => format!("Machine {}: {unusable}", self.name),
                            Ok(_) => "the Machine names no BareMetalHost".into(),
                        },
                    ));
                };
                let Some(host) = host else {
                    return Err(NotFenced::Untrustworthy(format!(
                        "BareMetalHost {host_ref} not found"
                    )));
                };
                let json = serde_json::to_value(&*host).unwrap_or(Value::Null);
                let view = bare_metal_host_view(&json, &self.policy.reboot_key);
                confirm_powered_off(
                    &FenceStrategy::BareMetalHostRebootApi,
                    &PowerEvidence::BareMetalHost(view),
                )
            }
            FenceStrategyName::DirectBmc => {
                let bmc = self
                    .direct_bmc(remediation)
                    .await
                    .map_err(|e| NotFenced::Untrustworthy(e.to_string()))?;
                // Two consecutive fresh reads must both say Off.
                let mut off = true;
                for _ in 0..2 {
                    match bmc.driver.power_state().await {
                        Ok(PowerState::Off) => {}
                        Ok(_) => {
                            off = false;
                            break;
                        }
                        Err(error) => {
                            return Err(NotFenced::NotYet(format!("BMC read failed: {error}")));
                        }
                    }
                }
                confirm_powered_off(&FenceStrategy::DirectBmc, &PowerEvidence::BmcReadOff(off))
            }
        }
    }

    /// The BMC for direct fencing: from a `HostBmc` naming the Machine or Node, else from an
    /// unmanaged (detached) BareMetalHost. A managed host is refused: its operator would power
    /// it back on.
    pub(super) async fn direct_bmc(&self, remediation: &Remediation) -> Result<DirectBmc> {
        let invalid = |reason: String| Error::Invalid {
            object: format!("Machine {}/{}", self.namespace, self.name),
            reason,
        };
        let host = self.host(remediation);
        let (bmc, tls) = locate_bmc(
            &self.context.host_bmcs.state(),
            &self.namespace,
            &self.name,
            remediation.spec.node_name.as_deref(),
            host.as_ref().map(|(r, h)| (r, h.as_deref())),
        )
        .map_err(invalid)?;
        let address = BmcAddress::parse(&bmc.address).map_err(|e| invalid(e.to_string()))?;
        let secrets: Api<Secret> = Api::namespaced(self.context.client.clone(), &self.namespace);
        let secret = secrets
            .get(&bmc.credentials_name)
            .await
            .map_err(|e| invalid(format!("Secret {}: {e}", bmc.credentials_name)))?;
        let credentials = observe::secret_credentials(&secret)
            .map_err(|e| invalid(format!("Secret {}: {e}", bmc.credentials_name)))?;
        let kind = driver_kind(&address);
        let driver = self.context.bmc_drivers.get_or_connect(
            &self.machine_key(),
            DriverConfig::new(address, credentials, tls),
            &self.context.connector,
        )?;
        let driver = Metered::wrap(driver, kind, self.context.metrics.power.clone());
        Ok(DirectBmc { driver })
    }

    /// The key of this Machine's cached BMC driver.
    pub(super) fn machine_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub(super) fn reboot_annotation(&self) -> String {
        format!("{REBOOT_PREFIX}{}", self.policy.reboot_key)
    }

    pub(super) async fn request_power(
        &self,
        remediation: &Remediation,
        strategy: FenceStrategyName,
        off: bool,
    ) -> Result<()> {
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => {
                let Some((host_ref, _)) = self.host(remediation) else {
                    // Nothing to ask; the evidence says why and the planner escalates.
                    return Ok(());
                };
                let hosts = Api::namespaced_with(
                    self.context.client.clone(),
                    &host_ref.namespace,
                    &host_resource(),
                );
                self.context.leadership.ensure()?;
                execute::set_annotation(
                    &hosts,
                    &host_ref.name,
                    &self.reboot_annotation(),
                    off.then_some(r#"{"mode":"hard"}"#),
                    if off {
                        "RequestPowerOff"
                    } else {
                        "RequestPowerOn"
                    },
                )
                .await
            }
            FenceStrategyName::DirectBmc => {
                let bmc = self.direct_bmc(remediation).await?;
                self.context.leadership.ensure()?;
                if off {
                    bmc.driver.power_off(PowerOffMode::Forced).await?;
                } else {
                    bmc.driver.power_on().await?;
                }
                Ok(())
            }
        }
    }

    /// Withdraws every power-off request this remediation made (all strategies up to the
    /// current one), so the host comes back on.
    pub(super) async fn withdraw_all(
        &self,
        remediation: &Remediation,
        upto: usize,
        what: Withdraw,
    ) -> Result<()> {
        for index in 0..=upto.min(self.policy.strategies.len().saturating_sub(1)) {
            let strategy = self.strategy_at(index);
            match strategy {
                FenceStrategyName::BareMetalHostRebootApi if self.host(remediation).is_none() => {}
                FenceStrategyName::DirectBmc if what == Withdraw::RebootRequestsOnly => {}
                FenceStrategyName::DirectBmc if self.direct_bmc(remediation).await.is_err() => {}
                _ => self.request_power(remediation, strategy, false).await?,
            }
        }
        Ok(())
    }

    /// Re-makes a power request that a crash may have lost: at once for the reboot API (the
    /// cached host shows whether our annotation is there), after a quiet period for a BMC
    /// (which may still be acting on the first request).
    pub(super) async fn ensure_request(
        &self,
        remediation: &mut Remediation,
        state: &Persisted,
        off: bool,
    ) -> Result<()> {
        let strategy = self.strategy_at(state.strategy);
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => {
                let Some((_, Some(host))) = self.host(remediation) else {
                    return Ok(());
                };
                let json = serde_json::to_value(&*host).unwrap_or(Value::Null);
                let requested =
                    bare_metal_host_view(&json, &self.policy.reboot_key).power_off_requested;
                if off && !requested {
                    self.request_power(remediation, strategy, true).await?;
                } else if !off && requested {
                    self.withdraw_all(remediation, state.strategy, Withdraw::Everything)
                        .await?;
                }
            }
            FenceStrategyName::DirectBmc => {
                let quiet = (self.context.poll * 10).max(Duration::from_secs(5));
                let waited =
                    since_epoch(self.context.clock.now()).saturating_sub(state.phase_since);
                if waited < quiet {
                    return Ok(());
                }
                let bmc = self.direct_bmc(remediation).await?;
                let power = bmc.driver.power_state().await?;
                self.context.leadership.ensure()?;
                if off && power == PowerState::On {
                    bmc.driver.power_off(PowerOffMode::Forced).await?;
                } else if !off && power == PowerState::Off {
                    bmc.driver.power_on().await?;
                }
            }
        }
        Ok(())
    }

    pub(super) async fn driver_name(
        &self,
        remediation: &Remediation,
        strategy: FenceStrategyName,
    ) -> String {
        match strategy {
            FenceStrategyName::BareMetalHostRebootApi => "bmh-reboot-api".into(),
            FenceStrategyName::DirectBmc => match self.direct_bmc(remediation).await {
                Ok(bmc) => bmc
                    .driver
                    .bmc()
                    .split(':')
                    .next()
                    .unwrap_or("bmc")
                    .to_string(),
                Err(_) => "unavailable".into(),
            },
        }
    }
}
