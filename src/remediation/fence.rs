//! What "fenced" means, in the types: only [`confirm_powered_off`] produces a [`ConfirmedOff`],
//! and releasing a Node (deleting it or tainting it out-of-service) requires one.

use std::fmt;

/// How a host is powered off.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FenceStrategy {
    /// The BareMetal Operator's reboot API: the annotation `reboot.metal3.io/<key>` holds the
    /// host off; fenced when the BareMetalHost reports `poweredOn: false` and nothing makes
    /// that report untrustworthy.
    BareMetalHostRebootApi,
    /// baremend's own drivers (Redfish or IPMI): fenced when a fresh BMC read says Off.
    DirectBmc,
}

impl fmt::Display for FenceStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FenceStrategy::BareMetalHostRebootApi => "BareMetalHostRebootApi",
            FenceStrategy::DirectBmc => "DirectBmc",
        })
    }
}

/// What the BareMetalHost says, for the reboot-API strategy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BareMetalHostView {
    /// `status.poweredOn`.
    pub powered_on: Option<bool>,
    /// `status.operationalStatus`.
    pub operational_status: Option<String>,
    /// The `baremetalhost.metal3.io/detached` annotation is set.
    pub detached: bool,
    /// The `baremetalhost.metal3.io/paused` annotation is set.
    pub paused: bool,
    /// `spec.disablePowerOff`.
    pub disable_power_off: bool,
    /// Our power-off request annotation is present.
    pub power_off_requested: bool,
}

/// Evidence that a host is off, for one strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PowerEvidence {
    /// The BareMetalHost as last read.
    BareMetalHost(BareMetalHostView),
    /// The power state the BMC reported on consecutive fresh reads (see
    /// `baremend_drivers::wait_for_power_state`); `true` when they all said Off.
    BmcReadOff(bool),
}

/// Why a host cannot be called fenced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotFenced {
    /// Not off yet (or not known to be): keep waiting.
    NotYet(String),
    /// The evidence can never become proof with this strategy: escalate.
    Untrustworthy(String),
}

impl fmt::Display for NotFenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotFenced::NotYet(why) | NotFenced::Untrustworthy(why) => f.write_str(why),
        }
    }
}

/// Proof that a host was confirmed powered off. It cannot be built outside this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmedOff {
    strategy: FenceStrategy,
}

impl ConfirmedOff {
    /// The strategy that confirmed it.
    pub fn strategy(&self) -> &FenceStrategy {
        &self.strategy
    }
}

/// Decides whether the evidence proves the host off.
///
/// # Guarantees
/// - Reboot API: off only when `poweredOn == false`, our request is present, the operational
///   status is neither `error` nor `detached`, neither `detached` nor `paused` is set and
///   `spec.disablePowerOff` is not set (with it, the operator reboots instead of powering off).
/// - Direct BMC: off only when the BMC itself read Off (twice in a row).
pub fn confirm_powered_off(
    strategy: &FenceStrategy,
    evidence: &PowerEvidence,
) -> Result<ConfirmedOff, NotFenced> {
    match (strategy, evidence) {
        (FenceStrategy::BareMetalHostRebootApi, PowerEvidence::BareMetalHost(host)) => {
            if host.detached || host.operational_status.as_deref() == Some("detached") {
                return Err(NotFenced::Untrustworthy(
                    "the BareMetalHost is detached: its power is not managed".into(),
                ));
            }
            if host.paused {
                return Err(NotFenced::Untrustworthy(
                    "the BareMetalHost is paused: its status is not updated".into(),
                ));
            }
            if host.disable_power_off {
                return Err(NotFenced::Untrustworthy(
                    "the BareMetalHost has spec.disablePowerOff: it is rebooted, never powered off"
                        .into(),
                ));
            }
            if host.operational_status.as_deref() == Some("error") {
                return Err(NotFenced::NotYet(
                    "the BareMetalHost reports an error".into(),
                ));
            }
            if !host.power_off_requested {
                return Err(NotFenced::NotYet(
                    "our power-off request is not on the BareMetalHost".into(),
                ));
            }
            match host.powered_on {
                Some(false) => Ok(ConfirmedOff {
                    strategy: strategy.clone(),
                }),
                Some(true) => Err(NotFenced::NotYet(
                    "the BareMetalHost still reports poweredOn: true".into(),
                )),
                None => Err(NotFenced::NotYet(
                    "the BareMetalHost reports no power state".into(),
                )),
            }
        }
        (FenceStrategy::DirectBmc, PowerEvidence::BmcReadOff(true)) => Ok(ConfirmedOff {
            strategy: strategy.clone(),
        }),
        (FenceStrategy::DirectBmc, PowerEvidence::BmcReadOff(false)) => {
            Err(NotFenced::NotYet("the BMC has not read Off".into()))
        }
        (strategy, evidence) => Err(NotFenced::Untrustworthy(format!(
            "{evidence:?} is no evidence for strategy {strategy}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fenced_host() -> BareMetalHostView {
        BareMetalHostView {
            powered_on: Some(false),
            operational_status: Some("OK".into()),
            power_off_requested: true,
            ..BareMetalHostView::default()
        }
    }

    fn check(host: BareMetalHostView) -> Result<ConfirmedOff, NotFenced> {
        confirm_powered_off(
            &FenceStrategy::BareMetalHostRebootApi,
            &PowerEvidence::BareMetalHost(host),
        )
    }

    #[test]
    fn a_bare_metal_host_is_fenced_only_when_every_condition_holds() {
        assert_eq!(
            check(fenced_host()).unwrap().strategy(),
            &FenceStrategy::BareMetalHostRebootApi
        );
        let untrustworthy = [
            BareMetalHostView {
                detached: true,
                ..fenced_host()
            },
            BareMetalHostView {
                operational_status: Some("detached".into()),
                ..fenced_host()
            },
            BareMetalHostView {
                paused: true,
                ..fenced_host()
            },
            BareMetalHostView {
                disable_power_off: true,
                ..fenced_host()
            },
        ];
        for host in untrustworthy {
            assert!(
                matches!(check(host.clone()), Err(NotFenced::Untrustworthy(_))),
                "{host:?}"
            );
        }
        let not_yet = [
            BareMetalHostView {
                powered_on: Some(true),
                ..fenced_host()
            },
            BareMetalHostView {
                powered_on: None,
                ..fenced_host()
            },
            BareMetalHostView {
                operational_status: Some("error".into()),
                ..fenced_host()
            },
            BareMetalHostView {
                power_off_requested: false,
                ..fenced_host()
            },
        ];
        for host in not_yet {
            assert!(
                matches!(check(host.clone()), Err(NotFenced::NotYet(_))),
                "{host:?}"
            );
        }
    }

    #[test]
    fn a_direct_bmc_is_fenced_only_by_its_own_off_reads_and_evidence_must_match_the_strategy() {
        assert!(
            confirm_powered_off(&FenceStrategy::DirectBmc, &PowerEvidence::BmcReadOff(true))
                .is_ok()
        );
        assert!(matches!(
            confirm_powered_off(&FenceStrategy::DirectBmc, &PowerEvidence::BmcReadOff(false)),
            Err(NotFenced::NotYet(_))
        ));
        assert!(matches!(
            confirm_powered_off(
                &FenceStrategy::DirectBmc,
                &PowerEvidence::BareMetalHost(fenced_host())
            ),
            Err(NotFenced::Untrustworthy(_))
        ));
        assert!(matches!(
            confirm_powered_off(
                &FenceStrategy::BareMetalHostRebootApi,
                &PowerEvidence::BmcReadOff(true)
            ),
            Err(NotFenced::Untrustworthy(_))
        ));
    }
}
