//! A simulated IPMI-over-LAN BMC (RMCP+, cipher suites 3 and 17) in front of a [`SimHost`].
//!
//! It answers ASF presence pings, Get Channel Authentication Capabilities and Get Channel
//! Cipher Suites outside a session, the RMCP+ session set-up (with a user table and roles),
//! and inside a session Set Session Privilege Level, Get Chassis Status, Chassis Control,
//! Get Device ID and Close Session. Sessions start at User privilege, are limited in number
//! and expire when idle. The host's [`crate::host::Faults`] apply: latency, dropped datagrams
//! (`drop_connections`), error completion codes (`error_status`: 503 → node busy, others →
//! unspecified), stuck or flapping power, an OS that ignores soft shutdown.

mod commands;
mod sessions;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use baremend_drivers::ipmi::wire::crypto::CipherSuite;
use baremend_drivers::ipmi::wire::rakp::{OpenSessionRequest, Rakp1, Rakp3};
use baremend_drivers::ipmi::wire::{self, Frame, MAX_DATAGRAM, payload};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use self::commands::{SideEffect, cc};
pub use self::sessions::{IpmiStats, IpmiUser, privilege};
use self::sessions::{Phase, SessionTable};
use crate::clock::Clock;
use crate::host::{RequestFault, SimHost};
use crate::lockout::{LockoutPolicy, LockoutStatus};
use crate::{Error, Result};

/// How to start a simulated IPMI BMC.
#[derive(Debug, Clone)]
pub struct IpmiSimConfig {
    /// Where to listen (UDP); port 0 picks a free one.
    pub listen: SocketAddr,
    /// The accounts.
    pub users: Vec<IpmiUser>,
    /// How many sessions may be open at once (real BMCs allow few).
    pub max_sessions: usize,
    /// Sessions idle for this long are dropped.
    pub idle_timeout: Duration,
    /// The cipher suites offered.
    pub suites: Vec<CipherSuite>,
    /// Account lock-out after failed logins (off by default, like ipmi_sim's).
    pub lockout: LockoutPolicy,
}

impl Default for IpmiSimConfig {
    fn default() -> Self {
        IpmiSimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            users: vec![IpmiUser {
                username: "admin".into(),
                password: "password".into(),
                max_privilege: privilege::ADMINISTRATOR,
            }],
            max_sessions: 16,
            idle_timeout: Duration::from_secs(60),
            suites: CipherSuite::ALL.to_vec(),
            lockout: LockoutPolicy::default(),
        }
    }
}

/// The state shared by the server task and the handle.
#[derive(Debug)]
struct Bmc {
    host: Arc<SimHost>,
    clock: Arc<dyn Clock>,
    table: Mutex<SessionTable>,
    rng: SystemRandom,
}

/// A running simulated IPMI BMC. Dropping it stops it.
#[derive(Debug)]
pub struct IpmiSim {
    bmc: Arc<Bmc>,
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl IpmiSim {
    /// Serves `host` over IPMI.
    pub async fn start(
        config: IpmiSimConfig,
        host: Arc<SimHost>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        for user in &config.users {
            if user.username.is_empty() || user.username.len() > 16 || user.password.len() > 20 {
                return Err(Error::Config(format!(
                    "IPMI user {:?}: names have 1 to 16 bytes, passwords at most 20",
                    user.username
                )));
            }
        }
        if config.suites.is_empty() || config.max_sessions == 0 {
            return Err(Error::Config(
                "an IPMI BMC needs a cipher suite and a session slot".into(),
            ));
        }
        let socket = UdpSocket::bind(config.listen)
            .await
            .map_err(|source| Error::Listen {
                address: config.listen.to_string(),
                source,
            })?;
        let local_addr = socket.local_addr().map_err(|source| Error::Listen {
            address: config.listen.to_string(),
            source,
        })?;
        let rng = SystemRandom::new();
        let mut guid = [0u8; 16];
        let _ = rng.fill(&mut guid);
        let bmc = Arc::new(Bmc {
            host,
            clock,
            table: Mutex::new(SessionTable {
                users: config.users,
                guid,
                max_sessions: config.max_sessions,
                idle_timeout: config.idle_timeout,
                suites: config.suites,
                sessions: HashMap::new(),
                stats: IpmiStats::default(),
                lockout: config.lockout,
                lockouts: HashMap::new(),
            }),
            rng,
        });
        let task = tokio::spawn(serve(Arc::new(socket), bmc.clone()));
        Ok(IpmiSim {
            bmc,
            local_addr,
            task,
        })
    }

    /// The UDP address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The BMC address, `ipmi://127.0.0.1:PORT`.
    pub fn bmc_address(&self) -> String {
        format!("ipmi://{}", self.local_addr)
    }

    /// The host behind the BMC.
    pub fn host(&self) -> &Arc<SimHost> {
        &self.bmc.host
    }

    /// A snapshot of the counters (expired sessions are swept first).
    pub fn stats(&self) -> IpmiStats {
        let mut table = self.bmc.lock();
        table.expire(self.bmc.clock.now());
        table.stats.clone()
    }

    /// Replaces the accounts (credential rotation); open sessions stay, and so do the
    /// accounts' failed-login counts.
    pub fn set_users(&self, users: Vec<IpmiUser>) {
        self.bmc.lock().users = users;
    }

    /// Changes the lock-out policy at runtime (as an administrator would on the BMC).
    pub fn set_lockout_policy(&self, policy: LockoutPolicy) {
        self.bmc.lock().lockout = policy;
    }

    /// The failed logins and lock-out of the account `username`.
    pub fn lockout_status(&self, username: &str) -> LockoutStatus {
        let now = self.bmc.clock.now();
        self.bmc.lock().lockout_status(username, now)
    }
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Bmc {
    fn lock(&self) -> MutexGuard<'_, SessionTable> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn random<const N: usize>(&self) -> [u8; N] {
        let mut bytes = [0u8; N];
        let _ = self.rng.fill(&mut bytes);
        bytes
    }

    /// The answer to one datagram, if any.
    fn handle(&self, datagram: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
        let now = self.clock.now();
        let mut table = self.lock();
        table.expire(now);
        let Ok(frame) = wire::decode(datagram) else {
            table.stats.dropped_datagrams += 1;
            return None;
        };
        match frame {
            Frame::AsfPing { message_tag } => Some(wire::encode_asf_pong(message_tag)),
            Frame::AsfPong { .. } => None,
            Frame::V15 { message, .. } => {
                let request = wire::decode_request(message).ok()?;
                let (code, data) = commands::sessionless(&request, &table.suites);
                Some(wire::encode_v15(&wire::encode_response(
                    &request, code, &data,
                )))
            }
            Frame::V20(frame) if frame.session_id == 0 => {
                let reply = match frame.payload_type {
                    payload::OPEN_SESSION_REQUEST => {
                        let request = OpenSessionRequest::decode(frame.payload).ok()?;
                        let id = u32::from_le_bytes(self.random::<4>());
                        (
                            payload::OPEN_SESSION_RESPONSE,
                            table.open(&request, peer, now, id).encode(),
                        )
                    }
                    payload::RAKP1 => {
                        let message = Rakp1::decode(frame.payload).ok()?;
                        let random = self.random::<16>();
                        (
                            payload::RAKP2,
                            table.rakp1(&message, peer, now, random)?.encode(),
                        )
                    }
                    payload::RAKP3 => {
                        let message = Rakp3::decode(frame.payload).ok()?;
                        (payload::RAKP4, table.rakp3(&message, peer, now)?.encode())
                    }
                    payload::IPMI if !frame.authenticated => {
                        let request = wire::decode_request(frame.payload).ok()?;
                        let (code, data) = commands::sessionless(&request, &table.suites);
                        (payload::IPMI, wire::encode_response(&request, code, &data))
                    }
                    _ => return None,
                };
                Some(wire::encode_v20_plain(reply.0, &reply.1))
            }
            Frame::V20(frame) => {
                let iv = self.random::<16>();
                let suites = table.suites.clone();
                let table = &mut *table;
                let Some(session) = table.sessions.get_mut(&frame.session_id) else {
                    table.stats.dropped_datagrams += 1;
                    return None;
                };
                let console_session_id = session.console_session_id;
                let Phase::Active(active) = &mut session.phase else {
                    table.stats.dropped_datagrams += 1;
                    return None;
                };
                let opened = (session.peer == peer && frame.payload_type == payload::IPMI)
                    .then(|| frame.open(&active.crypto).ok())
                    .flatten();
                let (Some(plain), true) = (opened, frame.sequence > active.last_inbound_sequence)
                else {
                    table.stats.dropped_datagrams += 1;
                    return None;
                };
                active.last_inbound_sequence = frame.sequence;
                session.last_activity = now;
                let request = wire::decode_request(&plain).ok()?;
                let ((code, data), effect) = match self.host.request_fault().0 {
                    RequestFault::Status(503) => ((cc::NODE_BUSY, Vec::new()), SideEffect::None),
                    RequestFault::Status(_) => ((cc::UNSPECIFIED, Vec::new()), SideEffect::None),
                    RequestFault::Drop => return None,
                    RequestFault::None => commands::in_session(
                        &request,
                        active,
                        frame.session_id,
                        &self.host,
                        &suites,
                    ),
                };
                let sequence = active.next_outbound_sequence;
                active.next_outbound_sequence = sequence.checked_add(1).unwrap_or(1);
                let response = wire::encode_response(&request, code, &data);
                let packet = wire::encode_v20_sealed(
                    &active.crypto,
                    payload::IPMI,
                    console_session_id,
                    sequence,
                    &response,
                    iv,
                );
                match effect {
                    SideEffect::None => {}
                    SideEffect::ChassisControl(code) => table.stats.chassis_controls.push(code),
                    SideEffect::CloseSession(id) => {
                        if table.sessions.remove(&id).is_some() {
                            table.stats.sessions_closed += 1;
                        }
                        table.stats.open_sessions = table.sessions.len();
                    }
                }
                Some(packet)
            }
        }
    }
}

async fn serve(socket: Arc<UdpSocket>, bmc: Arc<Bmc>) {
    let mut buffer = [0u8; MAX_DATAGRAM];
    loop {
        let (received, peer) = match socket.recv_from(&mut buffer).await {
            Ok(received) => received,
            Err(error) => {
                // ICMP errors from earlier replies surface here on some systems; keep serving.
                tracing::debug!(%error, "IPMI receive failed");
                continue;
            }
        };
        // Faults that hit the whole BMC, whatever the request: latency and silence.
        let (drop, latency) = bmc.host.transport_faults();
        if drop {
            continue;
        }
        let Some(reply) = bmc.handle(&buffer[..received], peer) else {
            continue;
        };
        if latency.is_zero() {
            let _ = socket.send_to(&reply, peer).await;
        } else {
            let socket = socket.clone();
            tokio::spawn(async move {
                tokio::time::sleep(latency).await;
                let _ = socket.send_to(&reply, peer).await;
            });
        }
    }
}
