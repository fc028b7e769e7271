//! One RMCP+ session with a BMC, over a connected UDP socket.
//!
//! # Expected flow
//! 1. Get Channel Cipher Suites (outside a session) tells which suites the BMC offers; a BMC
//!    that does not implement it is tried with the configured preference order.
//! 2. Open Session Request proposes one suite; RAKP 1–4 authenticate both sides and derive
//!    the session keys. A RAKP 2 code that does not verify means a wrong password: the session
//!    is aborted with a RAKP 3 error so the BMC frees the slot at once, and the refusal is
//!    returned as [`Attempt::Refused`] (the caller may try the previous password of a rotation
//!    once). The other suites are not tried with a refused password: each would be one more
//!    failed login towards the account's lock-out.
//! 3. Set Session Privilege Level raises the session from User to the configured level.
//! 4. Requests are encrypted and authenticated; a reply is accepted only if it carries our
//!    session id, a BMC sequence number above the last one seen, valid integrity, and the
//!    request's rqSeq, network function and command. Anything else is dropped.
//! 5. Close Session ends it — also when the session is dropped early (timeout, error or
//!    cancellation): `Drop` sends the close from a spawned task.
//!
//! # Guarantees
//! A session that saw a timeout is never used again: the caller closes it and opens another.

use std::sync::Arc;
use std::time::Duration;

use ipmi_rs_core::app::auth::PrivilegeLevel;
use ipmi_rs_core::connection::{IpmiCommand, Message};
use ring::rand::{SecureRandom, SystemRandom};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use super::commands::{CloseSession, SetSessionPrivilegeLevel};
use super::completion::{CompletionClass, classify, describe};
use zeroize::Zeroizing;

use super::wire::crypto::{CipherSuite, RakpContext, SessionCrypto, user_key};
use super::wire::rakp::{
    NAME_ONLY_LOOKUP, OpenSessionRequest, OpenSessionResponse, Rakp1, Rakp2, Rakp3, Rakp4,
    describe_status, status,
};
use super::wire::{self, Frame, MAX_DATAGRAM, payload};
use crate::credentials::Credentials;
use crate::error::{Error, Result};
use crate::rotation::Attempt;

/// What a session needs to know besides the socket.
#[derive(Debug, Clone)]
pub(crate) struct SessionParams {
    pub bmc: String,
    pub privilege: PrivilegeLevel,
    pub timeout: Duration,
}

/// Random bytes from the system generator.
pub(crate) fn random<const N: usize>(rng: &SystemRandom) -> [u8; N] {
    let mut bytes = [0u8; N];
    // The system RNG does not fail on Linux; if it ever did, a zero IV or tag would weaken
    // nothing that the HMACs rely on, while a panic would take the controller down.
    let _ = rng.fill(&mut bytes);
    bytes
}

/// Sends `datagram` and waits for the first reply that `accept` takes; other datagrams
/// (stale, foreign, garbled) are dropped.
pub(crate) async fn exchange<T>(
    socket: &UdpSocket,
    params: &SessionParams,
    operation: &str,
    datagram: &[u8],
    mut accept: impl FnMut(&[u8]) -> Option<Result<T>>,
) -> Result<T> {
    socket
        .send(datagram)
        .await
        .map_err(|e| unreachable(params, operation, &e))?;
    let deadline = Instant::now() + params.timeout;
    let mut buffer = [0u8; MAX_DATAGRAM];
    loop {
        let received = match tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await {
            Err(_elapsed) => {
                return Err(Error::Timeout {
                    bmc: params.bmc.clone(),
                    operation: operation.to_owned(),
                    timeout: params.timeout,
                });
            }
            Ok(Err(e)) => return Err(unreachable(params, operation, &e)),
            Ok(Ok(received)) => received,
        };
        match accept(&buffer[..received]) {
            Some(outcome) => return outcome,
            None => tracing::debug!(bmc = %params.bmc, operation, "dropped an unexpected datagram"),
        }
    }
}

fn unreachable(params: &SessionParams, operation: &str, error: &std::io::Error) -> Error {
    Error::Unreachable {
        bmc: params.bmc.clone(),
        detail: format!("{operation}: {error}"),
    }
}

fn malformed(params: &SessionParams, operation: &str, detail: impl ToString) -> Error {
    Error::MalformedResponse {
        bmc: params.bmc.clone(),
        operation: operation.to_owned(),
        detail: detail.to_string(),
    }
}

/// An open RMCP+ session.
pub(crate) struct Session {
    socket: Arc<UdpSocket>,
    params: SessionParams,
    crypto: SessionCrypto,
    bmc_session_id: u32,
    console_session_id: u32,
    next_sequence: u32,
    next_rq_seq: u8,
    last_bmc_sequence: u32,
    rng: SystemRandom,
    closed: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("bmc", &self.params.bmc)
            .field("suite", &self.crypto.suite())
            .finish_non_exhaustive()
    }
}

/// How one suite's set-up ended, when it did not fail otherwise.
enum SuiteAttempt {
    Open(Session),
    SuiteRefused(u8),
    /// The password was refused (see [`Attempt::Refused`]).
    PasswordRefused(Error),
}

impl Session {
    /// Opens a session with the first of `suites` the BMC accepts, with the password of
    /// `credentials` (not its previous one: the caller picks which to send).
    pub(crate) async fn open(
        socket: Arc<UdpSocket>,
        params: SessionParams,
        credentials: &Credentials,
        suites: &[CipherSuite],
    ) -> Result<Attempt<Self>> {
        // K_UID and the session integrity key are the password's equivalents: wiped on drop.
        let password = user_key(credentials.password.expose().as_bytes())
            .map(Zeroizing::new)
            .map_err(|_| Error::Configuration {
                bmc: params.bmc.clone(),
                reason: "an IPMI password has at most 20 bytes".into(),
            })?;
        if credentials.username.len() > 16 {
            return Err(Error::Configuration {
                bmc: params.bmc.clone(),
                reason: "an IPMI user name has at most 16 bytes".into(),
            });
        }
        let mut refused = Vec::new();
        for suite in suites {
            match Self::try_suite(&socket, &params, credentials, password.as_slice(), *suite)
                .await?
            {
                SuiteAttempt::Open(session) => return Ok(Attempt::Accepted(session)),
                SuiteAttempt::PasswordRefused(error) => return Ok(Attempt::Refused(error)),
                SuiteAttempt::SuiteRefused(code) => {
                    refused.push(format!("suite {}: {}", suite.id(), describe_status(code)))
                }
            }
        }
        Err(Error::Unsupported {
            bmc: params.bmc.clone(),
            operation: format!("any cipher suite baremend speaks ({})", refused.join("; ")),
        })
    }

    async fn try_suite(
        socket: &Arc<UdpSocket>,
        params: &SessionParams,
        credentials: &Credentials,
        password: &[u8],
        suite: CipherSuite,
    ) -> Result<SuiteAttempt> {
        let rng = SystemRandom::new();
        let [tag] = random::<1>(&rng);
        // Session id 0 is reserved.
        let console_session_id = u32::from_le_bytes(random::<4>(&rng)).max(1);
        let privilege = u8::from(params.privilege);
        let request = OpenSessionRequest {
            message_tag: tag,
            max_privilege: privilege,
            console_session_id,
            algorithms: suite.algorithms(),
        };
        let datagram = wire::encode_v20_plain(payload::OPEN_SESSION_REQUEST, &request.encode());
        const OPEN: &str = "Open Session";
        let response = exchange(socket, params, OPEN, &datagram, |bytes| {
            let frame = set_up_payload(bytes, payload::OPEN_SESSION_RESPONSE)?;
            let response = OpenSessionResponse::decode(frame).ok()?;
            (response.message_tag == tag && response.console_session_id == console_session_id)
                .then_some(Ok(response))
        })
        .await?;
        match response.status {
            status::OK => {}
            status::NO_CIPHER_SUITE_MATCH
            | status::INVALID_AUTH_ALGORITHM
            | status::INVALID_INTEGRITY_ALGORITHM
            | status::INVALID_CONFIDENTIALITY_ALGORITHM => {
                return Ok(SuiteAttempt::SuiteRefused(response.status));
            }
            code => return Err(session_error(params, code)),
        }
        if response.algorithms != Some(suite.algorithms()) || response.bmc_session_id == 0 {
            return Err(malformed(
                params,
                OPEN,
                "the BMC accepted other algorithms than proposed",
            ));
        }
        let bmc_session_id = response.bmc_session_id;

        let rakp1 = Rakp1 {
            message_tag: tag.wrapping_add(1),
            bmc_session_id,
            console_random: random::<16>(&rng),
            role: privilege | NAME_ONLY_LOOKUP,
            username: credentials.username.as_bytes().to_vec(),
        };
        let datagram = wire::encode_v20_plain(payload::RAKP1, &rakp1.encode());
        const RAKP: &str = "RAKP";
        let rakp2 = exchange(socket, params, RAKP, &datagram, |bytes| {
            let frame = set_up_payload(bytes, payload::RAKP2)?;
            let message = Rakp2::decode(frame).ok()?;
            (message.message_tag == rakp1.message_tag
                && message.console_session_id == console_session_id)
                .then_some(Ok(message))
        })
        .await?;
        if rakp2.status != status::OK {
            return Err(session_error(params, rakp2.status));
        }
        let context = RakpContext {
            suite,
            console_session_id,
            bmc_session_id,
            console_random: rakp1.console_random,
            bmc_random: rakp2.bmc_random,
            bmc_guid: rakp2.bmc_guid,
            role: rakp1.role,
            username: rakp1.username.clone(),
        };
        let rakp3_tag = rakp1.message_tag.wrapping_add(1);
        if !context.verify_rakp2(password, &rakp2.auth_code) {
            // Tell the BMC, so it frees the half-open session now rather than at its timeout.
            let abort = Rakp3 {
                message_tag: rakp3_tag,
                status: status::INVALID_INTEGRITY_VALUE,
                bmc_session_id,
                auth_code: Vec::new(),
            };
            let _ = socket
                .send(&wire::encode_v20_plain(payload::RAKP3, &abort.encode()))
                .await;
            return Ok(SuiteAttempt::PasswordRefused(Error::Authentication {
                bmc: params.bmc.clone(),
                detail: format!(
                    "the password for user {:?} is wrong (the BMC's RAKP 2 code does not verify)",
                    credentials.username
                ),
            }));
        }
        let rakp3 = Rakp3 {
            message_tag: rakp3_tag,
            status: status::OK,
            bmc_session_id,
            auth_code: context.rakp3_auth_code(password),
        };
        let datagram = wire::encode_v20_plain(payload::RAKP3, &rakp3.encode());
        let rakp4 = exchange(socket, params, RAKP, &datagram, |bytes| {
            let frame = set_up_payload(bytes, payload::RAKP4)?;
            let message = Rakp4::decode(frame).ok()?;
            (message.message_tag == rakp3_tag && message.console_session_id == console_session_id)
                .then_some(Ok(message))
        })
        .await?;
        // The BMC found our RAKP 3 code wrong, or we its RAKP 4 value: the keys differ, so
        // the password does.
        if rakp4.status == status::INVALID_INTEGRITY_VALUE {
            return Ok(SuiteAttempt::PasswordRefused(session_error(
                params,
                rakp4.status,
            )));
        }
        if rakp4.status != status::OK {
            return Err(session_error(params, rakp4.status));
        }
        let sik = Zeroizing::new(context.session_integrity_key(password));
        if !context.verify_rakp4(&sik, &rakp4.icv) {
            return Ok(SuiteAttempt::PasswordRefused(Error::Authentication {
                bmc: params.bmc.clone(),
                detail: "the BMC's RAKP 4 integrity check value does not verify".into(),
            }));
        }
        let mut session = Session {
            socket: socket.clone(),
            params: params.clone(),
            crypto: SessionCrypto::derive(suite, &sik),
            bmc_session_id,
            console_session_id,
            next_sequence: 1,
            next_rq_seq: 1,
            last_bmc_sequence: 0,
            rng,
            closed: false,
        };
        if let Err(error) = session.raise_privilege().await {
            session.close().await;
            return Err(error);
        }
        Ok(SuiteAttempt::Open(session))
    }

    /// The suite in use.
    pub(crate) fn suite(&self) -> CipherSuite {
        self.crypto.suite()
    }

    async fn raise_privilege(&mut self) -> Result<()> {
        let wanted = self.params.privilege;
        match self
            .execute(
                SetSessionPrivilegeLevel(wanted),
                "Set Session Privilege Level",
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(Error::Completion { code, .. }) if classify(code) == CompletionClass::Privilege => {
                Err(Error::Authentication {
                    bmc: self.params.bmc.clone(),
                    detail: format!(
                        "the account may not use privilege {wanted:?} ({})",
                        describe(code)
                    ),
                })
            }
            Err(error) => Err(error),
        }
    }

    /// Sends a command and parses its success response.
    pub(crate) async fn execute<C>(&mut self, command: C, operation: &str) -> Result<C::Output>
    where
        C: IpmiCommand,
    {
        let data = self.request(command.into(), operation).await?;
        C::parse_success_response(&data)
            .map_err(|_| malformed(&self.params, operation, "the response data is too short"))
    }

    /// Sends one request and returns the response data of a zero completion code.
    pub(crate) async fn request(&mut self, message: Message, operation: &str) -> Result<Vec<u8>> {
        let rq_seq = self.next_rq_seq;
        self.next_rq_seq = (self.next_rq_seq + 1) & 0x3F;
        let sequence = self.next_sequence;
        self.next_sequence = self.next_sequence.checked_add(1).unwrap_or(1);
        let request =
            wire::encode_request(message.netfn_raw(), message.cmd(), rq_seq, message.data());
        let iv = random::<16>(&self.rng);
        let datagram = wire::encode_v20_sealed(
            &self.crypto,
            payload::IPMI,
            self.bmc_session_id,
            sequence,
            &request,
            iv,
        );
        let (console_id, crypto) = (self.console_session_id, self.crypto.clone());
        let mut last_sequence = self.last_bmc_sequence;
        let expected_netfn = message.netfn_raw() | 1;
        let command = message.cmd();
        let result = exchange(&self.socket, &self.params, operation, &datagram, |bytes| {
            let Ok(Frame::V20(frame)) = wire::decode(bytes) else {
                return None;
            };
            if frame.payload_type != payload::IPMI
                || frame.session_id != console_id
                || frame.sequence <= last_sequence
            {
                return None;
            }
            let plain = frame.open(&crypto).ok()?;
            let response = wire::decode_response(&plain).ok()?;
            if response.rq_seq != rq_seq
                || response.netfn != expected_netfn
                || response.cmd != command
            {
                return None;
            }
            last_sequence = frame.sequence;
            Some(Ok(response))
        })
        .await;
        self.last_bmc_sequence = last_sequence;
        let response = result?;
        if response.completion_code != 0 {
            return Err(Error::Completion {
                bmc: self.params.bmc.clone(),
                operation: operation.to_owned(),
                code: response.completion_code,
                detail: describe(response.completion_code),
                retryable: classify(response.completion_code) == CompletionClass::Retry,
            });
        }
        Ok(response.data)
    }

    /// Ends the session and waits (briefly) for the BMC to confirm; a busy or lost answer
    /// gets one more try, since an unclosed session holds one of the BMC's few slots.
    pub(crate) async fn close(mut self) {
        self.closed = true;
        for _ in 0..2 {
            match self
                .execute(CloseSession(self.bmc_session_id), "Close Session")
                .await
            {
                Ok(()) => return,
                Err(error) if error.is_retryable() => {
                    tracing::debug!(bmc = %self.params.bmc, %error, "Close Session failed; trying again");
                }
                Err(error) => {
                    tracing::debug!(bmc = %self.params.bmc, %error, "Close Session refused");
                    return;
                }
            }
        }
    }

    /// The close datagram for a session abandoned without [`Session::close`].
    fn abandoned_close(&mut self) -> Vec<u8> {
        let message: Message = CloseSession(self.bmc_session_id).into();
        let request = wire::encode_request(
            message.netfn_raw(),
            message.cmd(),
            self.next_rq_seq,
            message.data(),
        );
        wire::encode_v20_sealed(
            &self.crypto,
            payload::IPMI,
            self.bmc_session_id,
            self.next_sequence,
            &request,
            random::<16>(&self.rng),
        )
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // Dropped early: a timeout, an error or a cancelled caller. Close it anyway, from a
        // task of its own, so that no session slot stays taken on the BMC.
        let datagram = self.abandoned_close();
        let socket = self.socket.clone();
        let bmc = self.params.bmc.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = socket.send(&datagram).await {
                        tracing::debug!(%bmc, %error, "could not send Close Session");
                    }
                });
            }
            Err(_) => {
                let _ = socket.try_send(&datagram);
            }
        }
    }
}

/// The payload of a session set-up message of type `expected`, if the datagram is one.
fn set_up_payload(bytes: &[u8], expected: u8) -> Option<&[u8]> {
    match wire::decode(bytes) {
        Ok(Frame::V20(frame)) if frame.payload_type == expected && frame.session_id == 0 => {
            Some(frame.payload)
        }
        _ => None,
    }
}

/// The error for a failed session set-up status.
fn session_error(params: &SessionParams, code: u8) -> Error {
    match code {
        status::UNAUTHORIZED_NAME | status::INVALID_NAME_LENGTH => Error::Authentication {
            bmc: params.bmc.clone(),
            detail: format!("{} (RMCP+ status {code:#04x})", describe_status(code)),
        },
        status::INVALID_ROLE | status::UNAUTHORIZED_ROLE => Error::Authentication {
            bmc: params.bmc.clone(),
            detail: format!(
                "privilege {:?} is not allowed for this account: {} (RMCP+ status {code:#04x})",
                params.privilege,
                describe_status(code)
            ),
        },
        status::INVALID_INTEGRITY_VALUE => Error::Authentication {
            bmc: params.bmc.clone(),
            detail: format!("{} (RMCP+ status {code:#04x})", describe_status(code)),
        },
        _ => Error::SessionRejected {
            bmc: params.bmc.clone(),
            status: code,
            detail: describe_status(code).to_owned(),
        },
    }
}
