//! The Redfish power driver (DMTF Redfish over HTTPS, reqwest + rustls).
//!
//! # Expected flow
//! 1. `GET /redfish/v1/` (no auth) finds the session service and the systems collection.
//! 2. `POST` to `Links.Sessions` logs in; the `X-Auth-Token` authenticates what follows. A BMC
//!    without sessions gets HTTP Basic instead. A 401 later means the session expired: the
//!    driver logs in once more and repeats the request once. During a password rotation the
//!    login tries the password that worked last, then the other once after a 401 (see
//!    `rotation`); with Basic, a 401 switches to the other password for one more try.
//! 3. The system is the path in the address, or the only member of `Systems`, or of several the
//!    only one with a Reset action.
//! 4. Power commands `POST` the system's `#ComputerSystem.Reset` target with a `ResetType` the
//!    BMC advertises (see `reset.rs`); a `202 Accepted` is followed through its task monitor. A
//!    `409` or `400` refusal (iDRAC, iLO: "already in that state") is success only when a fresh
//!    read shows the host where it was asked to go.
//! 5. `close` deletes the session.
//!
//! # Guarantees
//! At most one request per BMC endpoint is in flight (the [`crate::Connector`]'s gate), every
//! request has a timeout, and the session token never leaves this module except in the
//! `X-Auth-Token` header, marked sensitive.

mod model;
mod redirect;
mod reset;
mod session;
mod transport;

use std::time::Duration;

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::sync::Mutex;
use tokio::time::Instant;

use self::model::{ActionInfo, Collection, ComputerSystem, ServiceRoot, Task};
use self::reset::{
    PowerIntent, ResetDecision, decide_reset, only_resettable, refusal_may_mean_already_there,
};
use self::session::{Auth, log_in, log_out, sessions_path};
use self::transport::{Reply, Transport};
use crate::address::BmcAddress;
use crate::credentials::{CredentialUsed, Credentials};
use crate::error::{Error, Result, shorten};
use crate::gate::EndpointGate;
use crate::power::{PowerDriver, PowerOffMode, ProbeReport};
use crate::rotation::{self, LoginMemory};
use crate::state::PowerState;
use crate::tls::TlsOptions;

/// The systems collection when the service root does not link one.
const DEFAULT_SYSTEMS_PATH: &str = "/redfish/v1/Systems";

/// What the Redfish driver needs to reach one BMC (see [`crate::DriverConfig::into_redfish`]).
#[derive(Debug, Clone)]
pub struct RedfishConfig {
    /// Where the BMC is.
    pub address: BmcAddress,
    /// The account to use.
    pub credentials: Credentials,
    /// Certificate verification.
    pub tls: TlsOptions,
    /// The limit for one request, connection set-up included.
    pub request_timeout: Duration,
    /// The limit for an asynchronous BMC task (a task monitor) to finish.
    pub task_timeout: Duration,
}

/// A Redfish BMC.
pub struct RedfishDriver {
    address: BmcAddress,
    credentials: Credentials,
    transport: Transport,
    task_timeout: Duration,
    state: Mutex<DriverState>,
    /// The password of the rotation that worked last.
    memory: LoginMemory,
}

/// What the driver learned from the BMC so far.
#[derive(Debug, Default)]
struct DriverState {
    auth: Auth,
    root: Option<ServiceRoot>,
    system_path: Option<String>,
    /// The system read ahead of a power change ([`PowerDriver::ready_to_change_power`]).
    ready: Option<ReadAhead>,
}

/// What a power change decides on, read ahead of it.
#[derive(Debug)]
struct ReadAhead {
    at: Instant,
    snapshot: SystemSnapshot,
    advertised: Option<Vec<String>>,
}

/// How long a read ahead stands for a power change: the change follows its start's record,
/// a millisecond later; a change later than this reads again.
const READ_AHEAD_FRESH: Duration = Duration::from_secs(1);

impl std::fmt::Debug for RedfishDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedfishDriver")
            .field("bmc", &self.transport.bmc())
            .field("username", &self.credentials.username)
            .finish_non_exhaustive()
    }
}

/// A system resource just read, with the path it was read from.
#[derive(Debug)]
struct SystemSnapshot {
    path: String,
    system: ComputerSystem,
}

impl SystemSnapshot {
    fn power_state(&self) -> PowerState {
        PowerState::from_redfish(self.system.power_state.as_deref().unwrap_or(""))
    }
}

impl RedfishDriver {
    /// A driver with its own request gate. Prefer [`crate::Connector::connect`], which shares
    /// the gate with every other driver of the same BMC endpoint.
    pub fn new(config: RedfishConfig) -> Result<Self> {
        Self::with_gate(config, EndpointGate::default())
    }

    pub(crate) fn with_gate(config: RedfishConfig, gate: EndpointGate) -> Result<Self> {
        let bmc = config.address.to_string();
        if config.credentials.username.is_empty() {
            return Err(Error::Configuration {
                bmc,
                reason: "the username is empty".into(),
            });
        }
        let transport = Transport::new(
            bmc,
            config.address.base_url(),
            &config.tls,
            config.request_timeout,
            gate,
        )?;
        Ok(RedfishDriver {
            address: config.address,
            credentials: config.credentials,
            transport,
            task_timeout: config.task_timeout,
            state: Mutex::new(DriverState::default()),
            memory: LoginMemory::default(),
        })
    }

    /// Reads the service root once; it needs no authentication.
    async fn root(&self, state: &mut DriverState) -> Result<ServiceRoot> {
        if let Some(root) = &state.root {
            return Ok(root.clone());
        }
        const OPERATION: &str = "GET service root";
        let reply = self
            .transport
            .send(
                Method::GET,
                "/redfish/v1/",
                transport::RequestAuth::None,
                None,
                OPERATION,
            )
            .await?;
        // Some BMCs protect the root as well; that only tells us to use Basic.
        let reply = if reply.status == StatusCode::UNAUTHORIZED {
            state.auth = Auth::Basic(self.memory.first(&self.credentials));
            let reply = self
                .send_authed(state, Method::GET, "/redfish/v1/", None, OPERATION)
                .await?;
            self.basic_once_more(state, reply, Method::GET, "/redfish/v1/", None, OPERATION)
                .await?
        } else {
            reply
        };
        let reply = self.transport.check(reply, OPERATION)?;
        let root = self.transport.parse::<ServiceRoot>(&reply, OPERATION)?;
        state.root = Some(root.clone());
        Ok(root)
    }

    async fn ensure_logged_in(&self, state: &mut DriverState) -> Result<()> {
        let root = self.root(state).await?;
        if !matches!(state.auth, Auth::LoggedOut) {
            return Ok(());
        }
        let Some(path) = sessions_path(&root) else {
            state.auth = Auth::Basic(self.memory.first(&self.credentials));
            return Ok(());
        };
        let (auth, _) = rotation::log_in(self.bmc(), &self.credentials, &self.memory, |which| {
            log_in(&self.transport, &self.credentials, which, &path)
        })
        .await?;
        state.auth = auth;
        Ok(())
    }

    async fn send_authed(
        &self,
        state: &DriverState,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Reply> {
        self.transport
            .send(
                method,
                path,
                state.auth.request_auth(&self.credentials),
                body,
                operation,
            )
            .await
    }

    /// Sends an authenticated request; on a 401 with a session, logs in once more and repeats
    /// the request once. With Basic, see [`RedfishDriver::basic_once_more`].
    async fn authed(
        &self,
        state: &mut DriverState,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Reply> {
        self.ensure_logged_in(state).await?;
        let reply = self
            .send_authed(state, method.clone(), path, body, operation)
            .await?;
        if reply.status == StatusCode::UNAUTHORIZED && matches!(state.auth, Auth::Session { .. }) {
            tracing::debug!(bmc = self.bmc(), "session rejected; logging in again");
            state.auth = Auth::LoggedOut;
            self.ensure_logged_in(state).await?;
            return self.send_authed(state, method, path, body, operation).await;
        }
        self.basic_once_more(state, reply, method, path, body, operation)
            .await
    }

    /// With Basic, `reply` tells whether the password was accepted: a 401 refuses it, and the
    /// other password of a rotation, if there is one, gets one try (`rotation` explains the
    /// order); both refused is an authentication error. Other replies are returned as they are.
    async fn basic_once_more(
        &self,
        state: &mut DriverState,
        reply: Reply,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        operation: &str,
    ) -> Result<Reply> {
        let Auth::Basic(used) = state.auth else {
            return Ok(reply);
        };
        if reply.status != StatusCode::UNAUTHORIZED {
            self.memory.set(used);
            return Ok(reply);
        }
        if self.credentials.previous_password.is_none() {
            return Ok(reply);
        }
        state.auth = Auth::Basic(used.other());
        let again = self
            .send_authed(state, method, path, body, operation)
            .await?;
        if again.status == StatusCode::UNAUTHORIZED {
            return Err(Error::Authentication {
                bmc: self.bmc().to_owned(),
                detail: format!(
                    "{operation}: HTTP Basic as {:?} refused with both passwords of the Secret (HTTP 401)",
                    self.credentials.username
                ),
            });
        }
        tracing::info!(
            bmc = self.bmc(),
            refused = %used,
            accepted = %used.other(),
            "the BMC accepted the other password of the rotation"
        );
        self.memory.set(used.other());
        Ok(again)
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        state: &mut DriverState,
        path: &str,
        operation: &str,
    ) -> Result<T> {
        let reply = self
            .authed(state, Method::GET, path, None, operation)
            .await?;
        let reply = self.transport.check(reply, operation)?;
        self.transport.parse(&reply, operation)
    }

    async fn list_systems(&self, state: &mut DriverState) -> Result<Vec<String>> {
        let root = self.root(state).await?;
        let path = root
            .systems
            .map(|l| l.id)
            .unwrap_or_else(|| DEFAULT_SYSTEMS_PATH.to_owned());
        let collection: Collection = self.get_json(state, &path, "GET systems").await?;
        Ok(collection.members.into_iter().map(|m| m.id).collect())
    }

    async fn system_path(&self, state: &mut DriverState) -> Result<String> {
        if let Some(path) = &state.system_path {
            return Ok(path.clone());
        }
        let path = match self.address.system_path() {
            Some(path) => path.to_owned(),
            None => {
                let mut members = self.list_systems(state).await?;
                match members.len() {
                    1 => members.remove(0),
                    0 => {
                        return Err(Error::SystemNotFound {
                            bmc: self.bmc().to_owned(),
                            system: "(the Systems collection is empty)".into(),
                        });
                    }
                    _ => match self.only_resettable(state, &members).await? {
                        Some(path) => path,
                        None => {
                            return Err(Error::AmbiguousSystem {
                                bmc: self.bmc().to_owned(),
                                members,
                            });
                        }
                    },
                }
            }
        };
        state.system_path = Some(path.clone());
        Ok(path)
    }

    /// Of several systems, the only one with a Reset action (a BMC may list a second System it
    /// cannot power, e.g. a baseboard); `None` when that is not exactly one.
    async fn only_resettable(
        &self,
        state: &mut DriverState,
        members: &[String],
    ) -> Result<Option<String>> {
        let mut candidates = Vec::with_capacity(members.len());
        for path in members {
            let system: ComputerSystem = self.get_json(state, path, "GET system").await?;
            candidates.push((path.clone(), system.has_reset_action()));
        }
        Ok(only_resettable(&candidates).map(str::to_owned))
    }

    /// Reads the system afresh.
    async fn read_system(&self, state: &mut DriverState) -> Result<SystemSnapshot> {
        const OPERATION: &str = "GET system";
        let path = self.system_path(state).await?;
        let reply = self
            .authed(state, Method::GET, &path, None, OPERATION)
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Err(Error::SystemNotFound {
                bmc: self.bmc().to_owned(),
                system: path,
            });
        }
        let reply = self.transport.check(reply, OPERATION)?;
        let system = self.transport.parse(&reply, OPERATION)?;
        Ok(SystemSnapshot { path, system })
    }

    /// The reset types the BMC advertises: the annotation, else the ActionInfo resource.
    async fn advertised_reset_types(
        &self,
        state: &mut DriverState,
        snapshot: &SystemSnapshot,
    ) -> Result<Option<Vec<String>>> {
        let Some(reset) = snapshot
            .system
            .actions
            .as_ref()
            .and_then(|a| a.reset.as_ref())
        else {
            return Ok(None);
        };
        if let Some(values) = &reset.allowable_values {
            return Ok(Some(values.clone()));
        }
        let Some(info_path) = &reset.action_info else {
            return Ok(None);
        };
        let info: ActionInfo = self
            .get_json(state, info_path, "GET reset ActionInfo")
            .await?;
        Ok(info
            .parameters
            .into_iter()
            .find(|p| p.name.as_deref() == Some("ResetType"))
            .and_then(|p| p.allowable_values))
    }

    /// The system and its advertised reset types: read ahead, when that was a moment ago
    /// and says to send a request (see [`PowerDriver::ready_to_change_power`]), else now.
    async fn before_change(
        &self,
        state: &mut DriverState,
        intent: PowerIntent,
    ) -> Result<(SystemSnapshot, Option<Vec<String>>)> {
        let ahead = state
            .ready
            .take()
            .filter(|ahead| ahead.at.elapsed() < READ_AHEAD_FRESH)
            .filter(|ahead| {
                let current = ahead.snapshot.power_state();
                matches!(
                    decide_reset(intent, &current, ahead.advertised.as_deref()),
                    ResetDecision::Send(_)
                )
            });
        match ahead {
            Some(ahead) => Ok((ahead.snapshot, ahead.advertised)),
            None => self.read_for_change(state).await,
        }
    }

    /// What a power change decides on, read now: the system and its advertised reset types.
    async fn read_for_change(
        &self,
        state: &mut DriverState,
    ) -> Result<(SystemSnapshot, Option<Vec<String>>)> {
        let snapshot = self.read_system(state).await?;
        let advertised = self.advertised_reset_types(state, &snapshot).await?;
        Ok((snapshot, advertised))
    }

    async fn change_power(&self, intent: PowerIntent) -> Result<()> {
        let mut state = self.state.lock().await;
        let state = &mut *state;
        let (snapshot, advertised) = self.before_change(state, intent).await?;
        let current = snapshot.power_state();
        let reset_type = match decide_reset(intent, &current, advertised.as_deref()) {
            ResetDecision::Send(value) => value,
            ResetDecision::AlreadyThere => {
                tracing::debug!(bmc = self.bmc(), %current, "no reset needed");
                return Ok(());
            }
            ResetDecision::NotAdvertised => {
                return Err(Error::Unsupported {
                    bmc: self.bmc().to_owned(),
                    operation: format!(
                        "{} (advertised reset types: {})",
                        intent.describe(),
                        advertised.unwrap_or_default().join(", ")
                    ),
                });
            }
            ResetDecision::ButtonUnsafeNow => {
                return Err(Error::Busy {
                    bmc: self.bmc().to_owned(),
                    retry_after: None,
                    detail: format!(
                        "only PushPowerButton is advertised and the host is {current}; \
                         pressing it now could do the opposite of {}",
                        intent.describe()
                    ),
                });
            }
        };
        let target = snapshot
            .system
            .actions
            .as_ref()
            .and_then(|a| a.reset.as_ref())
            .and_then(|r| r.target.clone())
            .unwrap_or_else(|| format!("{}/Actions/ComputerSystem.Reset", snapshot.path));
        let operation = format!("Reset {reset_type}");
        tracing::info!(bmc = self.bmc(), reset_type, %current, "sending reset");
        let body = json!({ "ResetType": reset_type });
        let reply = self
            .authed(state, Method::POST, &target, Some(&body), &operation)
            .await?;
        if refusal_may_mean_already_there(reply.status) {
            return self
                .confirm_after_refusal(state, intent, &reply, &operation)
                .await;
        }
        let reply = self.transport.check(reply, &operation)?;
        if reply.status == StatusCode::ACCEPTED
            && let Some(monitor) = reply.header("Location")
        {
            let monitor = monitor.to_owned();
            self.follow_task(state, &monitor, reply_retry_after(&reply), &operation)
                .await?;
        }
        Ok(())
    }

    /// A reset was refused with a status some BMCs use for "already in that state" (iDRAC 409,
    /// iLO 400 `InvalidOperationForSystemState`): success only when a fresh read shows the host
    /// where the intent wants it; otherwise the refusal is the error.
    async fn confirm_after_refusal(
        &self,
        state: &mut DriverState,
        intent: PowerIntent,
        reply: &Reply,
        operation: &str,
    ) -> Result<()> {
        let refusal = self.transport.status_error(reply, operation);
        let fresh = self.read_system(state).await?.power_state();
        if decide_reset(intent, &fresh, None) == ResetDecision::AlreadyThere {
            tracing::info!(
                bmc = self.bmc(),
                status = reply.status.as_u16(),
                %fresh,
                "reset refused; a fresh read shows the host already there"
            );
            return Ok(());
        }
        Err(refusal)
    }

    /// Polls a task monitor until the task is done.
    async fn follow_task(
        &self,
        state: &mut DriverState,
        monitor: &str,
        mut pause: Duration,
        operation: &str,
    ) -> Result<()> {
        let deadline = Instant::now() + self.task_timeout;
        loop {
            if Instant::now() + pause > deadline {
                return Err(Error::Timeout {
                    bmc: self.bmc().to_owned(),
                    operation: format!("{operation} (task {monitor})"),
                    timeout: self.task_timeout,
                });
            }
            tokio::time::sleep(pause).await;
            let reply = self
                .authed(state, Method::GET, monitor, None, operation)
                .await?;
            match reply.status {
                StatusCode::ACCEPTED => pause = reply_retry_after(&reply),
                // Some BMCs drop the monitor as soon as the task completes.
                StatusCode::NOT_FOUND | StatusCode::NO_CONTENT => return Ok(()),
                status if status.is_success() => {
                    let task: Task = serde_json::from_slice(&reply.body).unwrap_or_default();
                    match task.task_state.as_deref() {
                        None | Some("Completed") => return Ok(()),
                        Some(
                            final_state @ ("Exception" | "Killed" | "Cancelled" | "Interrupted"),
                        ) => {
                            let detail = task
                                .messages
                                .iter()
                                .filter_map(|m| m.message.as_deref())
                                .collect::<Vec<_>>()
                                .join("; ");
                            return Err(Error::TaskFailed {
                                bmc: self.bmc().to_owned(),
                                operation: operation.to_owned(),
                                state: final_state.to_owned(),
                                detail: shorten(&detail),
                            });
                        }
                        Some(_) => pause = reply_retry_after(&reply),
                    }
                }
                _ => {
                    self.transport.check(reply, operation)?;
                }
            }
        }
    }
}

/// The pause a task monitor's `Retry-After` asks for, between 100 ms and 5 s (1 s when
/// absent): a task is polled at least every 5 s whatever the BMC says.
fn reply_retry_after(reply: &Reply) -> Duration {
    reply
        .retry_after()
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(100), Duration::from_secs(5))
}

#[async_trait]
impl PowerDriver for RedfishDriver {
    fn bmc(&self) -> &str {
        self.transport.bmc()
    }

    fn credential_used(&self) -> Option<CredentialUsed> {
        self.memory.get()
    }

    async fn power_state(&self) -> Result<PowerState> {
        let mut state = self.state.lock().await;
        Ok(self.read_system(&mut state).await?.power_state())
    }

    async fn connect(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.ensure_logged_in(&mut state).await
    }

    async fn ready_to_change_power(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        let state = &mut *state;
        self.ensure_logged_in(state).await?;
        let (snapshot, advertised) = self.read_for_change(state).await?;
        state.ready = Some(ReadAhead {
            at: Instant::now(),
            snapshot,
            advertised,
        });
        Ok(())
    }

    async fn power_off(&self, mode: PowerOffMode) -> Result<()> {
        self.change_power(PowerIntent::Off(mode)).await
    }

    async fn power_on(&self) -> Result<()> {
        self.change_power(PowerIntent::On).await
    }

    async fn probe(&self) -> Result<ProbeReport> {
        let mut state = self.state.lock().await;
        let state = &mut *state;
        self.ensure_logged_in(state).await?;
        let root = self.root(state).await?;
        let systems = self.list_systems(state).await?;
        let snapshot = self.read_system(state).await?;
        let advertised = self.advertised_reset_types(state, &snapshot).await?;
        let service = [
            root.vendor.as_deref(),
            root.product.as_deref(),
            root.name.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        Ok(ProbeReport {
            protocol: format!(
                "Redfish {}",
                root.redfish_version
                    .as_deref()
                    .unwrap_or("(version not given)")
            ),
            authentication: state.auth.describe().to_owned(),
            service,
            systems,
            selected_system: snapshot.path.clone(),
            // A forced off from On is what fencing would ask: whatever the decision would send.
            forced_off: matches!(
                decide_reset(
                    PowerIntent::Off(PowerOffMode::Forced),
                    &PowerState::On,
                    advertised.as_deref()
                ),
                ResetDecision::Send(_)
            ),
            power_operations: advertised
                .unwrap_or_else(|| vec!["(not advertised; standard values assumed)".into()]),
            power_state: Some(snapshot.power_state()),
        })
    }

    async fn close(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        let auth = std::mem::take(&mut state.auth);
        log_out(&self.transport, auth).await;
        Ok(())
    }
}

/// Runs every parser of a Redfish answer over `bytes`, as the fuzz target does: the service
/// root, collections, a system and its reset action, ActionInfo, a task and an error body,
/// then the reset decision from whatever parsed. Never panics, whatever the bytes.
#[doc(hidden)]
pub fn exercise_parsers(bytes: &[u8]) {
    let _ = serde_json::from_slice::<model::ServiceRoot>(bytes);
    let _ = serde_json::from_slice::<model::Collection>(bytes);
    let _ = serde_json::from_slice::<model::Task>(bytes);
    if let Ok(error) = serde_json::from_slice::<model::ErrorBody>(bytes) {
        let _ = error.describe();
    }
    let info = serde_json::from_slice::<model::ActionInfo>(bytes).ok();
    if let Ok(system) = serde_json::from_slice::<model::ComputerSystem>(bytes) {
        let current = crate::PowerState::from_redfish(system.power_state.as_deref().unwrap_or(""));
        let advertised = system
            .actions
            .and_then(|a| a.reset)
            .and_then(|r| r.allowable_values);
        let from_info: Option<Vec<String>> = info.map(|i| {
            i.parameters
                .into_iter()
                .flat_map(|p| p.allowable_values.unwrap_or_default())
                .collect()
        });
        for intent in [
            reset::PowerIntent::On,
            reset::PowerIntent::Off(crate::PowerOffMode::Forced),
            reset::PowerIntent::Off(crate::PowerOffMode::Graceful),
        ] {
            let _ = reset::decide_reset(intent, &current, advertised.as_deref());
            let _ = reset::decide_reset(intent, &current, from_info.as_deref());
        }
    }
}
