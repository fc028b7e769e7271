//! Password rotation against the Redfish (sessions, and Basic only) and IPMI simulators with
//! account lock-out on: a Secret holding the current and the previous password logs in
//! whichever the BMC has, in either order of the rotation, never loops on a refusal and never
//! locks the account out.
//!
//! The simulators run the strictest lock-out: 3 failures lock the account, and a good login
//! does not clear the count (as BMCs that count failures in a time window do). The account's
//! failed-login count is read from the simulator after each step: it proves how many refused
//! logins the driver made.

use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::ipmi::IpmiOptions;
use baremend_drivers::{
    BmcAddress, Connector, CredentialUsed, Credentials, DriverConfig, Error, PowerDriver,
    PowerState, TlsOptions,
};
use baremend_sim::clock::{Clock, SystemClock};
use baremend_sim::host::{Power, SimHost};
use baremend_sim::ipmi::{IpmiSim, IpmiSimConfig, IpmiUser, privilege};
use baremend_sim::lockout::{LockoutPolicy, LockoutStatus};
use baremend_sim::redfish::{AuthSettings, RedfishSim, RedfishSimConfig};
use serde_json::json;

mod common;

use common::eventually;

const OLD: &str = "old-password-1";
const NEW: &str = "new-password-2";
const THRESHOLD: u32 = 3;

/// Which simulated BMC.
#[derive(Debug, Clone, Copy)]
enum Kind {
    RedfishSessions,
    RedfishBasic,
    Ipmi,
}

const KINDS: [Kind; 3] = [Kind::RedfishSessions, Kind::RedfishBasic, Kind::Ipmi];

/// A simulated BMC whose `admin` password is [`OLD`], with lock-out after [`THRESHOLD`]
/// failures.
enum Bmc {
    Redfish(RedfishSim),
    Ipmi(IpmiSim),
}

fn strict_lockout() -> LockoutPolicy {
    LockoutPolicy {
        success_resets_counter: false,
        ..LockoutPolicy::after(THRESHOLD)
    }
}

impl Bmc {
    async fn start(kind: Kind) -> Bmc {
        match kind {
            Kind::RedfishSessions | Kind::RedfishBasic => {
                let sim = RedfishSim::start(RedfishSimConfig {
                    password: OLD.into(),
                    power_delay: Duration::from_millis(50),
                    ..RedfishSimConfig::default()
                })
                .await
                .expect("the Redfish simulator starts");
                sim.service().set_lockout_policy(strict_lockout());
                if matches!(kind, Kind::RedfishBasic) {
                    sim.service().set_auth_settings(AuthSettings {
                        basic_auth: true,
                        sessions: false,
                    });
                }
                Bmc::Redfish(sim)
            }
            Kind::Ipmi => {
                let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
                let host = Arc::new(SimHost::new(
                    "1",
                    Power::On,
                    Duration::from_millis(50),
                    clock.clone(),
                ));
                let config = IpmiSimConfig {
                    users: vec![admin(OLD)],
                    lockout: strict_lockout(),
                    ..IpmiSimConfig::default()
                };
                let sim = IpmiSim::start(config, host, clock)
                    .await
                    .expect("the IPMI simulator starts");
                Bmc::Ipmi(sim)
            }
        }
    }

    /// Changes the BMC's password from [`OLD`] to [`NEW`]: a PATCH of the ManagerAccount, as an
    /// administrator would; the IPMI simulator's user table.
    async fn change_password(&self) {
        match self {
            Bmc::Redfish(sim) => {
                let answer = reqwest::Client::new()
                    .patch(format!(
                        "{}/redfish/v1/AccountService/Accounts/1",
                        sim.base_url()
                    ))
                    .basic_auth("admin", Some(OLD))
                    .json(&json!({"Password": NEW}))
                    .send()
                    .await
                    .expect("the PATCH is answered");
                assert!(answer.status().is_success(), "{}", answer.status());
            }
            Bmc::Ipmi(sim) => sim.set_users(vec![admin(NEW)]),
        }
    }

    fn lockout_now(&self) -> LockoutStatus {
        match self {
            Bmc::Redfish(sim) => sim.service().lockout_status("admin").unwrap(),
            Bmc::Ipmi(sim) => sim.lockout_status("admin"),
        }
    }

    /// The account's lock-out status once it counts at least `failed` refused logins: an IPMI
    /// console tells the BMC of a refused password with a RAKP 3 abort that nobody answers, so
    /// the count may land just after the driver returned.
    async fn lockout(&self, failed: u64) -> LockoutStatus {
        eventually(
            "the failed logins to be counted",
            Duration::from_secs(2),
            async || {
                let status = self.lockout_now();
                if status.failed_logins >= failed {
                    Ok(status)
                } else {
                    Err(format!("{} failed logins", status.failed_logins))
                }
            },
        )
        .await
    }

    /// Ends every Redfish session, so that the next operation logs in again (as it does after
    /// a session timeout); IPMI logs in for every operation anyway.
    fn end_sessions(&self) {
        if let Bmc::Redfish(sim) = self {
            sim.service().expire_sessions();
        }
    }

    fn driver(&self, credentials: Credentials) -> Arc<dyn PowerDriver> {
        let address = match self {
            Bmc::Redfish(sim) => sim.bmc_address("1"),
            Bmc::Ipmi(sim) => sim.bmc_address(),
        };
        let mut config = DriverConfig::new(
            BmcAddress::parse(&address).unwrap(),
            credentials,
            TlsOptions::default(),
        );
        config.request_timeout = Duration::from_secs(2);
        config.ipmi = IpmiOptions {
            reply_timeout: Duration::from_millis(500),
            retries: 2,
            retry_backoff: Duration::from_millis(50),
            ..IpmiOptions::default()
        };
        Connector::new().connect(config).unwrap()
    }
}

fn admin(password: &str) -> IpmiUser {
    IpmiUser {
        username: "admin".into(),
        password: password.into(),
        max_privilege: privilege::ADMINISTRATOR,
    }
}

fn rotating() -> Credentials {
    Credentials::new("admin", NEW).with_previous(OLD)
}

/// Reads the power `times` times, each as a fresh login; every read must work.
async fn operations(bmc: &Bmc, driver: &dyn PowerDriver, times: usize, kind: Kind) {
    for round in 0..times {
        bmc.end_sessions();
        let state = driver.power_state().await;
        assert_eq!(state.ok(), Some(PowerState::On), "{kind:?}, round {round}");
    }
}

#[tokio::test]
async fn secret_first_then_bmc_works_throughout_with_at_most_one_refusal_per_switch() {
    for kind in KINDS {
        let bmc = Bmc::start(kind).await;
        let driver = bmc.driver(rotating());
        // The Secret has the new password, the BMC still the old one.
        operations(&bmc, driver.as_ref(), 10, kind).await;
        assert_eq!(
            driver.credential_used(),
            Some(CredentialUsed::Previous),
            "{kind:?}"
        );
        let status = bmc.lockout(1).await;
        assert_eq!(
            status.failed_logins, 1,
            "{kind:?}: one refusal, then the previous first"
        );
        assert!(!status.locked, "{kind:?}");
        // The BMC gets the new password: one refusal of the old, then the new sticks.
        bmc.change_password().await;
        operations(&bmc, driver.as_ref(), 10, kind).await;
        assert_eq!(
            driver.credential_used(),
            Some(CredentialUsed::Current),
            "{kind:?}"
        );
        let status = bmc.lockout(2).await;
        assert_eq!(status.failed_logins, 2, "{kind:?}");
        assert!(!status.locked && status.lockouts == 0, "{kind:?}");
    }
}

#[tokio::test]
async fn bmc_first_fails_once_per_operation_until_the_secret_names_the_new_password() {
    for kind in KINDS {
        let bmc = Bmc::start(kind).await;
        bmc.change_password().await;
        // The Secret still has only the old password.
        let stale = bmc.driver(Credentials::new("admin", OLD));
        for round in 1..THRESHOLD {
            bmc.end_sessions();
            let error = stale.power_state().await.unwrap_err();
            assert!(
                matches!(error, Error::Authentication { .. }),
                "{kind:?}: {error}"
            );
            assert!(!error.is_retryable());
            assert!(!error.to_string().contains(OLD), "{error}");
            assert_eq!(
                bmc.lockout(u64::from(round)).await.failed_logins,
                u64::from(round),
                "{kind:?}: exactly one refused login per operation"
            );
        }
        assert_eq!(stale.credential_used(), None);
        // The Secret is updated: the new password as current, the old one as previous.
        let updated = bmc.driver(rotating());
        operations(&bmc, updated.as_ref(), 10, kind).await;
        assert_eq!(updated.credential_used(), Some(CredentialUsed::Current));
        let status = bmc.lockout(u64::from(THRESHOLD - 1)).await;
        assert_eq!(
            status.failed_logins,
            u64::from(THRESHOLD - 1),
            "{kind:?}: the current password is tried first and works"
        );
        assert!(!status.locked, "{kind:?}");
    }
}

#[tokio::test]
async fn two_wrong_passwords_are_refused_clearly_with_at_most_two_logins_and_no_lockout() {
    for kind in KINDS {
        let bmc = Bmc::start(kind).await;
        let wrong =
            bmc.driver(Credentials::new("admin", "wrong-current").with_previous("wrong-old"));
        let error = wrong.power_state().await.unwrap_err();
        assert!(
            matches!(error, Error::Authentication { .. }),
            "{kind:?}: {error}"
        );
        assert!(!error.is_retryable());
        let text = error.to_string();
        assert!(text.contains("both passwords"), "{kind:?}: {text}");
        assert!(
            !text.contains("wrong-current") && !text.contains("wrong-old"),
            "{text}"
        );
        let status = bmc.lockout(2).await;
        assert_eq!(status.failed_logins, 2, "{kind:?}");
        assert!(
            !status.locked,
            "{kind:?}: one operation does not lock the account"
        );
        assert_eq!(wrong.credential_used(), None);
        // The right password still works afterwards.
        let right = bmc.driver(Credentials::new("admin", OLD));
        assert_eq!(right.power_state().await.unwrap(), PowerState::On);
    }
}
