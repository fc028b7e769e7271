//! The IPMI power driver: one RMCP+ session per operation, always closed, retried with a new
//! session on retryable failures.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use ipmi_rs_core::app::auth::PrivilegeLevel;
use ipmi_rs_core::app::{DeviceId, GetDeviceId};
use tokio::net::UdpSocket;

use super::commands::{ChassisControl, ChassisStatus, GetChassisStatus};
use super::completion::{CompletionClass, classify};
use super::session::{Session, SessionParams};
use super::suites::offered_suites;
use super::wire::crypto::CipherSuite;
use crate::address::BmcAddress;
use crate::credentials::{CredentialUsed, Credentials};
use crate::error::{Error, Result};
use crate::gate::EndpointGate;
use crate::power::{PowerDriver, PowerOffMode, ProbeReport};
use crate::retry::{RetryPolicy, retry};
use crate::rotation::{self, LoginMemory};
use crate::state::PowerState;

/// IPMI-specific settings.
#[derive(Debug, Clone, PartialEq)]
pub struct IpmiOptions {
    /// The session privilege; OPERATOR is enough for chassis control.
    pub privilege: PrivilegeLevel,
    /// Cipher suites to use, in order of preference, among those the BMC offers.
    pub cipher_suites: Vec<CipherSuite>,
    /// How long to wait for each reply.
    pub reply_timeout: Duration,
    /// How many times a retryable failure is retried, each time with a new session.
    pub retries: u32,
    /// The pause before the first retry; it doubles for each further one.
    pub retry_backoff: Duration,
}

impl Default for IpmiOptions {
    fn default() -> Self {
        IpmiOptions {
            privilege: PrivilegeLevel::Operator,
            cipher_suites: vec![CipherSuite::Suite17, CipherSuite::Suite3],
            reply_timeout: Duration::from_secs(2),
            retries: 3,
            retry_backoff: Duration::from_millis(250),
        }
    }
}

/// An IPMI BMC reached over RMCP+ (IPMI 2.0 "lanplus").
pub struct IpmiDriver {
    address: BmcAddress,
    bmc: String,
    credentials: Credentials,
    options: IpmiOptions,
    gate: EndpointGate,
    /// The suite that worked last time, so that later sessions skip the negotiation.
    negotiated: Mutex<Option<CipherSuite>>,
    /// The password of the rotation that worked last: every operation logs in, so starting
    /// with it keeps a rotation from costing one refused login per operation.
    memory: LoginMemory,
}

impl std::fmt::Debug for IpmiDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpmiDriver")
            .field("bmc", &self.bmc)
            .field("username", &self.credentials.username)
            .field("privilege", &self.options.privilege)
            .finish_non_exhaustive()
    }
}

/// What a power change must look like.
#[derive(Debug, Clone, Copy)]
enum Change {
    Off(PowerOffMode),
    On,
}

impl IpmiDriver {
    pub(crate) fn with_gate(
        address: BmcAddress,
        credentials: Credentials,
        options: IpmiOptions,
        gate: EndpointGate,
    ) -> Result<Self> {
        let bmc = address.to_string();
        if options.cipher_suites.is_empty() {
            return Err(Error::Configuration {
                bmc,
                reason: "no IPMI cipher suite is allowed".into(),
            });
        }
        if credentials.username.len() > 16 {
            return Err(Error::Configuration {
                bmc,
                reason: "an IPMI user name has at most 16 bytes".into(),
            });
        }
        let too_long = |p: &crate::credentials::Password| p.expose().len() > 20;
        if too_long(&credentials.password)
            || credentials.previous_password.as_ref().is_some_and(too_long)
        {
            return Err(Error::Configuration {
                bmc,
                reason: "an IPMI password has at most 20 bytes".into(),
            });
        }
        Ok(IpmiDriver {
            address,
            bmc,
            credentials,
            options,
            gate,
            negotiated: Mutex::new(None),
            memory: LoginMemory::default(),
        })
    }

    async fn resolve(&self) -> Result<SocketAddr> {
        let host = self
            .address
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let mut addresses = tokio::net::lookup_host((host, self.address.port()))
            .await
            .map_err(|e| Error::Unreachable {
                bmc: self.bmc.clone(),
                detail: format!("cannot resolve {host}: {e}"),
            })?;
        addresses.next().ok_or_else(|| Error::Unreachable {
            bmc: self.bmc.clone(),
            detail: format!("{host} has no address"),
        })
    }

    fn params(&self) -> SessionParams {
        SessionParams {
            bmc: self.bmc.clone(),
            privilege: self.options.privilege,
            timeout: self.options.reply_timeout,
        }
    }

    /// The suites to propose, in order: the one that worked before, else what the BMC offers
    /// filtered by the configured preference, else the preference itself.
    async fn suites(&self, socket: &UdpSocket) -> Result<Vec<CipherSuite>> {
        if let Some(suite) = *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) {
            return Ok(vec![suite]);
        }
        let Some(offered) = offered_suites(socket, &self.params()).await else {
            return Ok(self.options.cipher_suites.clone());
        };
        let usable: Vec<CipherSuite> = self
            .options
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| offered.contains(&s.id()))
            .collect();
        if usable.is_empty() {
            return Err(Error::Unsupported {
                bmc: self.bmc.clone(),
                operation: format!(
                    "the cipher suites it offers ({:?}); allowed here: {:?}",
                    offered,
                    self.options
                        .cipher_suites
                        .iter()
                        .map(|s| s.id())
                        .collect::<Vec<_>>()
                ),
            });
        }
        Ok(usable)
    }

    /// Runs `work` in a fresh session, closing it afterwards whatever happened; retryable
    /// failures are retried (up to `retries` times) with a new session after a backoff that
    /// doubles each time.
    async fn with_session(&self, work: Work) -> Result<Outcome> {
        let _in_flight = self.gate.lock().await;
        let target = self.resolve().await?;
        let policy = RetryPolicy {
            initial_backoff: self.options.retry_backoff,
            max_backoff: self
                .options
                .retry_backoff
                .saturating_mul(1 << self.options.retries.min(16)),
            max_attempts: Some(self.options.retries.saturating_add(1)),
        };
        let operation = format!("{work:?}");
        retry(&policy, None, &self.bmc, &operation, || {
            self.attempt(target, work)
        })
        .await
    }

    async fn attempt(&self, target: SocketAddr, work: Work) -> Result<Outcome> {
        let local: SocketAddr = if target.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local)
            .await
            .map_err(|e| Error::Unreachable {
                bmc: self.bmc.clone(),
                detail: format!("cannot open a UDP socket: {e}"),
            })?;
        socket
            .connect(target)
            .await
            .map_err(|e| Error::Unreachable {
                bmc: self.bmc.clone(),
                detail: format!("cannot reach {target}: {e}"),
            })?;
        let socket = Arc::new(socket);
        let suites = self.suites(&socket).await?;
        let (mut session, _) =
            rotation::log_in(&self.bmc, &self.credentials, &self.memory, |which| {
                let credentials = self.credentials.only(which);
                let (socket, suites) = (socket.clone(), &suites);
                async move {
                    let Some(credentials) = credentials else {
                        return Err(self.unexpected());
                    };
                    Session::open(socket, self.params(), &credentials, suites).await
                }
            })
            .await?;
        *self.negotiated.lock().unwrap_or_else(|e| e.into_inner()) = Some(session.suite());
        let result = self.perform(&mut session, work).await;
        // A session that timed out may be out of step with the BMC: it is closed and dropped
        // here either way, and a retry opens a new one.
        session.close().await;
        result
    }

    async fn perform(&self, session: &mut Session, work: Work) -> Result<Outcome> {
        match work {
            Work::Status => Ok(Outcome::Status(chassis_status(session).await?)),
            Work::Change(change) => self
                .change(session, change)
                .await
                .map(|()| Outcome::Changed),
            Work::Probe => {
                let device = session.execute(GetDeviceId, "Get Device ID").await?;
                let status = chassis_status(session).await?;
                Ok(Outcome::Probe(session.suite(), Box::new(device), status))
            }
        }
    }

    async fn change(&self, session: &mut Session, change: Change) -> Result<()> {
        let before = chassis_status(session).await?;
        let control = match (change, before.power_on) {
            (Change::On, true) | (Change::Off(_), false) => return Ok(()),
            (Change::On, false) => ChassisControl::PowerUp,
            (Change::Off(PowerOffMode::Forced), true) => ChassisControl::PowerDown,
            (Change::Off(PowerOffMode::Graceful), true) => ChassisControl::SoftShutdown,
        };
        let operation = format!("Chassis Control {control:?}");
        tracing::info!(bmc = %self.bmc, ?control, "sending chassis control");
        match session.execute(control, &operation).await {
            Ok(()) => {}
            // "Not in the present state": perhaps it already is where we want it.
            Err(Error::Completion { code: 0xD5, .. }) => {
                let now = chassis_status(session).await?;
                if now.power_on == matches!(change, Change::On) {
                    return Ok(());
                }
                return Err(Error::Completion {
                    bmc: self.bmc.clone(),
                    operation,
                    code: 0xD5,
                    detail: "the BMC cannot do this in the present state".into(),
                    retryable: classify(0xD5) == CompletionClass::Retry,
                });
            }
            Err(Error::Completion { code, detail, .. })
                if classify(code) == CompletionClass::Privilege =>
            {
                return Err(Error::Authentication {
                    bmc: self.bmc.clone(),
                    detail: format!("{operation} needs a higher privilege: {detail}"),
                });
            }
            Err(other) => return Err(other),
        }
        let after = chassis_status(session).await?;
        if after.power_control_fault {
            return Err(Error::PowerFault {
                bmc: self.bmc.clone(),
                operation,
                detail: after.faults().join(", "),
            });
        }
        Ok(())
    }

    fn unexpected(&self) -> Error {
        Error::MalformedResponse {
            bmc: self.bmc.clone(),
            operation: "IPMI operation".into(),
            detail: "internal mismatch between request and outcome".into(),
        }
    }
}

/// One unit of work, done in one session.
#[derive(Debug, Clone, Copy)]
enum Work {
    Status,
    Change(Change),
    Probe,
}

/// What a unit of work produced.
enum Outcome {
    Status(ChassisStatus),
    Changed,
    Probe(CipherSuite, Box<DeviceId>, ChassisStatus),
}

async fn chassis_status(session: &mut Session) -> Result<ChassisStatus> {
    session
        .execute(GetChassisStatus, "Get Chassis Status")
        .await
}

fn power_state(status: &ChassisStatus) -> PowerState {
    if status.power_on {
        PowerState::On
    } else {
        PowerState::Off
    }
}

#[async_trait]
impl PowerDriver for IpmiDriver {
    fn bmc(&self) -> &str {
        &self.bmc
    }

    fn credential_used(&self) -> Option<CredentialUsed> {
        self.memory.get()
    }

    async fn power_state(&self) -> Result<PowerState> {
        let Outcome::Status(status) = self.with_session(Work::Status).await? else {
            return Err(self.unexpected());
        };
        if !status.faults().is_empty() {
            tracing::warn!(bmc = %self.bmc, faults = ?status.faults(), "the BMC reports power faults");
        }
        Ok(power_state(&status))
    }

    async fn power_off(&self, mode: PowerOffMode) -> Result<()> {
        self.with_session(Work::Change(Change::Off(mode)))
            .await
            .map(drop)
    }

    async fn power_on(&self) -> Result<()> {
        self.with_session(Work::Change(Change::On)).await.map(drop)
    }

    async fn probe(&self) -> Result<ProbeReport> {
        let Outcome::Probe(suite, device, status) = self.with_session(Work::Probe).await? else {
            return Err(self.unexpected());
        };
        let faults = status.faults();
        Ok(ProbeReport {
            protocol: format!(
                "IPMI {}.{} over RMCP+ (cipher suite {})",
                device.major_version,
                device.minor_version,
                suite.id()
            ),
            authentication: format!("RMCP+ session at privilege {:?}", self.options.privilege),
            service: format!(
                "manufacturer id {}, product id {:#06x}, firmware {}.{:02}{}",
                device.manufacturer_id,
                device.product_id,
                device.major_fw_revision,
                device.minor_fw_revision,
                if faults.is_empty() {
                    String::new()
                } else {
                    format!(", faults: {}", faults.join(", "))
                }
            ),
            systems: vec!["chassis".into()],
            selected_system: "chassis".into(),
            // The probe's chassis status answered: chassis control (power down) is mandatory.
            forced_off: true,
            power_operations: [
                "power down",
                "power up",
                "power cycle",
                "hard reset",
                "soft shutdown",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
            power_state: Some(power_state(&status)),
        })
    }

    async fn close(&self) -> Result<()> {
        // Every operation closes its own session; nothing stays open between calls.
        Ok(())
    }
}
