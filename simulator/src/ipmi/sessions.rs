//! The BMC side of RMCP+ session set-up: accounts, the session table with its limit and idle
//! timeout, and RAKP. Pure state transitions; the server in `mod.rs` does the I/O.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use baremend_drivers::ipmi::wire::crypto::{CipherSuite, RakpContext, SessionCrypto, user_key};
use baremend_drivers::ipmi::wire::rakp::{
    OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp3, Rakp4, status,
};
use serde::{Deserialize, Serialize};

use crate::lockout::{LockoutCounter, LockoutPolicy, LockoutStatus};

/// IPMI privilege levels, as numbered on the wire.
pub mod privilege {
    /// User: read-only commands.
    pub const USER: u8 = 2;
    /// Operator: chassis control.
    pub const OPERATOR: u8 = 3;
    /// Administrator.
    pub const ADMINISTRATOR: u8 = 4;
}

/// An account of the simulated BMC.
#[derive(Clone, PartialEq, Eq)]
pub struct IpmiUser {
    /// Login name (at most 16 bytes).
    pub username: String,
    /// Password (at most 20 bytes).
    pub password: String,
    /// The highest privilege the account may use (see [`privilege`]).
    pub max_privilege: u8,
}

impl std::fmt::Debug for IpmiUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpmiUser")
            .field("username", &self.username)
            .field("max_privilege", &self.max_privilege)
            .finish_non_exhaustive()
    }
}

/// Counters of the simulated IPMI BMC.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpmiStats {
    /// Sessions open or being opened now.
    pub open_sessions: usize,
    /// The most sessions ever open at once.
    pub max_open_sessions: usize,
    /// Sessions that completed RAKP.
    pub sessions_activated: u64,
    /// Sessions ended by Close Session.
    pub sessions_closed: u64,
    /// Sessions ended by the idle timeout.
    pub sessions_expired: u64,
    /// Logins refused: unknown user, wrong password, privilege.
    pub authentication_failures: u64,
    /// Open Session requests refused because every slot was taken.
    pub refused_for_capacity: u64,
    /// Datagrams dropped as malformed, stale or forged.
    pub dropped_datagrams: u64,
    /// Chassis Control requests, by request data byte.
    pub chassis_controls: Vec<u8>,
}

/// Where a session stands.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Open Session answered; waiting for RAKP 1.
    Opened { requested_privilege: u8 },
    /// RAKP 2 sent; waiting for RAKP 3.
    Challenged {
        context: RakpContext,
        user_key: [u8; 20],
        max_privilege: u8,
    },
    /// RAKP 4 sent: messages flow.
    Active(ActiveSession),
}

/// An active session.
#[derive(Debug)]
pub(crate) struct ActiveSession {
    pub crypto: SessionCrypto,
    pub max_privilege: u8,
    pub privilege: u8,
    pub last_inbound_sequence: u32,
    pub next_outbound_sequence: u32,
}

#[derive(Debug)]
pub(crate) struct SimSession {
    pub console_session_id: u32,
    pub peer: SocketAddr,
    pub suite: CipherSuite,
    pub phase: Phase,
    pub last_activity: Duration,
}

/// The session table.
#[derive(Debug)]
pub(crate) struct SessionTable {
    pub users: Vec<IpmiUser>,
    pub guid: [u8; 16],
    pub max_sessions: usize,
    pub idle_timeout: Duration,
    pub suites: Vec<CipherSuite>,
    pub sessions: HashMap<u32, SimSession>,
    pub stats: IpmiStats,
    pub lockout: LockoutPolicy,
    /// Failed logins per user name (kept when the users are replaced, as a BMC keeps them
    /// across a password change).
    pub lockouts: HashMap<String, LockoutCounter>,
}

impl SessionTable {
    fn counter(&mut self, username: &[u8]) -> &mut LockoutCounter {
        self.lockouts
            .entry(String::from_utf8_lossy(username).into_owned())
            .or_default()
    }

    /// The failed logins and lock of `username` (expired sessions swept first).
    pub fn lockout_status(&mut self, username: &str, now: Duration) -> LockoutStatus {
        self.expire(now);
        let policy = self.lockout;
        self.counter(username.as_bytes()).status(&policy, now)
    }

    /// Drops sessions idle for longer than the timeout.
    /// A login left after RAKP 2 (the console found the BMC's code wrong and went away, as
    /// ipmitool does without a RAKP 3) counts as a failed login of its user.
    pub fn expire(&mut self, now: Duration) {
        let timeout = self.idle_timeout;
        let before = self.sessions.len();
        let mut abandoned = Vec::new();
        self.sessions.retain(|_, s| {
            let keep = now < s.last_activity + timeout;
            if let (false, Phase::Challenged { context, .. }) = (keep, &s.phase) {
                abandoned.push(context.username.clone());
            }
            keep
        });
        let policy = self.lockout;
        for username in abandoned {
            self.stats.authentication_failures += 1;
            self.counter(&username).failed(&policy, now);
        }
        self.stats.sessions_expired += (before - self.sessions.len()) as u64;
        self.stats.open_sessions = self.sessions.len();
    }

    fn note_open(&mut self) {
        self.stats.open_sessions = self.sessions.len();
        self.stats.max_open_sessions = self.stats.max_open_sessions.max(self.sessions.len());
    }

    /// Answers an Open Session Request.
    pub fn open(
        &mut self,
        request: &OpenSessionRequest,
        peer: SocketAddr,
        now: Duration,
        new_id: u32,
    ) -> OpenSessionResponse {
        let refuse = |status: u8| OpenSessionResponse {
            message_tag: request.message_tag,
            status,
            max_privilege: 0,
            console_session_id: request.console_session_id,
            bmc_session_id: 0,
            algorithms: None,
        };
        let Some(suite) = request.suite().filter(|s| self.suites.contains(s)) else {
            return refuse(status::NO_CIPHER_SUITE_MATCH);
        };
        if request.max_privilege > privilege::ADMINISTRATOR {
            return refuse(status::INVALID_ROLE);
        }
        if self.sessions.len() >= self.max_sessions {
            self.stats.refused_for_capacity += 1;
            return refuse(status::NO_RESOURCES);
        }
        let id = if new_id == 0 || self.sessions.contains_key(&new_id) {
            (1..)
                .find(|id| !self.sessions.contains_key(id))
                .unwrap_or(1)
        } else {
            new_id
        };
        let requested = match request.max_privilege {
            0 => privilege::ADMINISTRATOR,
            level => level,
        };
        self.sessions.insert(
            id,
            SimSession {
                console_session_id: request.console_session_id,
                peer,
                suite,
                phase: Phase::Opened {
                    requested_privilege: requested,
                },
                last_activity: now,
            },
        );
        self.note_open();
        OpenSessionResponse {
            message_tag: request.message_tag,
            status: status::OK,
            max_privilege: requested,
            console_session_id: request.console_session_id,
            bmc_session_id: id,
            algorithms: Some(suite.algorithms()),
        }
    }

    /// Answers RAKP 1; `None` when the message names no session in the right phase.
    pub fn rakp1(
        &mut self,
        message: &Rakp1,
        peer: SocketAddr,
        now: Duration,
        bmc_random: [u8; 16],
    ) -> Option<Rakp2> {
        let session = self.sessions.get_mut(&message.bmc_session_id)?;
        if session.peer != peer {
            return None;
        }
        let Phase::Opened {
            requested_privilege,
        } = session.phase
        else {
            return None;
        };
        let console_session_id = session.console_session_id;
        let suite = session.suite;
        let refuse = |status: u8| Rakp2 {
            message_tag: message.message_tag,
            status,
            console_session_id,
            bmc_random: [0; 16],
            bmc_guid: [0; 16],
            auth_code: Vec::new(),
        };
        let role_privilege = message.role & 0x0F;
        let name = message.username.as_slice();
        let user = self
            .users
            .iter()
            .find(|u| u.username.as_bytes() == name)
            .cloned();
        let refusal = match &user {
            None => Some(status::UNAUTHORIZED_NAME),
            Some(_) if role_privilege == 0 || role_privilege > privilege::ADMINISTRATOR => {
                Some(status::INVALID_ROLE)
            }
            Some(user) if role_privilege > user.max_privilege => Some(status::UNAUTHORIZED_ROLE),
            Some(_) => None,
        };
        let policy = self.lockout;
        // A locked-out account is refused by name, before any password is checked.
        let refusal = match refusal {
            None if self.counter(name).locked(&policy, now) => {
                self.counter(name).refused_while_locked();
                Some(status::UNAUTHORIZED_NAME)
            }
            other => other,
        };
        let (Some(user), None) = (user, refusal) else {
            self.sessions.remove(&message.bmc_session_id);
            self.stats.authentication_failures += 1;
            self.stats.open_sessions = self.sessions.len();
            return Some(refuse(refusal.unwrap_or(status::UNAUTHORIZED_NAME)));
        };
        let Ok(key) = user_key(user.password.as_bytes()) else {
            self.sessions.remove(&message.bmc_session_id);
            return Some(refuse(status::ILLEGAL_PARAMETER));
        };
        let context = RakpContext {
            suite,
            console_session_id,
            bmc_session_id: message.bmc_session_id,
            console_random: message.console_random,
            bmc_random,
            bmc_guid: self.guid,
            role: message.role,
            username: message.username.clone(),
        };
        let auth_code = context.rakp2_auth_code(&key);
        let session = self.sessions.get_mut(&message.bmc_session_id)?;
        session.phase = Phase::Challenged {
            context,
            user_key: key,
            max_privilege: role_privilege
                .min(user.max_privilege)
                .min(requested_privilege),
        };
        session.last_activity = now;
        Some(Rakp2 {
            message_tag: message.message_tag,
            status: status::OK,
            console_session_id,
            bmc_random,
            bmc_guid: self.guid,
            auth_code,
        })
    }

    /// Answers RAKP 3; `None` when there is nothing to answer.
    pub fn rakp3(&mut self, message: &Rakp3, peer: SocketAddr, now: Duration) -> Option<Rakp4> {
        let session = self.sessions.get(&message.bmc_session_id)?;
        if session.peer != peer || !matches!(session.phase, Phase::Challenged { .. }) {
            return None;
        }
        let Some(SimSession {
            console_session_id,
            phase:
                Phase::Challenged {
                    context,
                    user_key,
                    max_privilege,
                },
            ..
        }) = self.sessions.remove(&message.bmc_session_id)
        else {
            return None;
        };
        self.stats.open_sessions = self.sessions.len();
        let policy = self.lockout;
        if message.status != status::OK {
            // The console aborts (e.g. our RAKP 2 did not verify: wrong password).
            self.stats.authentication_failures += 1;
            self.counter(&context.username).failed(&policy, now);
            return None;
        }
        if !context.verify_rakp3(&user_key, &message.auth_code) {
            self.stats.authentication_failures += 1;
            self.counter(&context.username).failed(&policy, now);
            return Some(Rakp4 {
                message_tag: message.message_tag,
                status: status::INVALID_INTEGRITY_VALUE,
                console_session_id,
                icv: Vec::new(),
            });
        }
        let sik = context.session_integrity_key(&user_key);
        let icv = context.rakp4_icv(&sik);
        self.sessions.insert(
            message.bmc_session_id,
            SimSession {
                console_session_id,
                peer,
                suite: context.suite,
                phase: Phase::Active(ActiveSession {
                    crypto: SessionCrypto::derive(context.suite, &sik),
                    max_privilege,
                    privilege: privilege::USER.min(max_privilege),
                    last_inbound_sequence: 0,
                    next_outbound_sequence: 1,
                }),
                last_activity: now,
            },
        );
        self.stats.sessions_activated += 1;
        self.counter(&context.username).succeeded(&policy);
        self.note_open();
        Some(Rakp4 {
            message_tag: message.message_tag,
            status: status::OK,
            console_session_id,
            icv,
        })
    }
}
