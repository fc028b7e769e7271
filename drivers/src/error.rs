//! The one error type of the drivers crate.

use std::time::Duration;

use crate::state::PowerState;

/// Result alias of the drivers crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while talking to a BMC.
///
/// Each variant names the BMC (its address without credentials) so that a message is useful on
/// its own in an Event or a log line. Use [`Error::is_retryable`] to decide whether to try again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The BMC address could not be parsed.
    #[error("invalid BMC address {address:?}: {reason}")]
    InvalidAddress {
        /// The address as given, with any user information removed.
        address: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The driver configuration is unusable (bad CA bundle, empty username, ...).
    #[error("invalid configuration for BMC {bmc}: {reason}")]
    Configuration {
        /// The BMC the configuration is for.
        bmc: String,
        /// What is wrong.
        reason: String,
    },
    /// The BMC or driver does not support the requested operation.
    #[error("BMC {bmc} does not support {operation}")]
    Unsupported {
        /// The BMC.
        bmc: String,
        /// The operation, e.g. `graceful power off (advertised reset types: On, ForceOff)`.
        operation: String,
    },
    /// No connection could be made (refused, reset, DNS failure, connection dropped).
    #[error("BMC {bmc} is unreachable: {detail}")]
    Unreachable {
        /// The BMC.
        bmc: String,
        /// The transport error.
        detail: String,
    },
    /// A request got no answer in time.
    #[error("BMC {bmc} did not answer {operation} within {timeout:?}")]
    Timeout {
        /// The BMC.
        bmc: String,
        /// What was asked.
        operation: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// The BMC says it is busy or overloaded (HTTP 429/503, IPMI node busy).
    #[error("BMC {bmc} is busy: {detail}")]
    Busy {
        /// The BMC.
        bmc: String,
        /// What it answered.
        detail: String,
        /// How long it asked the client to wait (`Retry-After`), if it said.
        retry_after: Option<Duration>,
    },
    /// The BMC answered with an error status that is not covered by a more specific variant.
    #[error("BMC {bmc} answered {operation} with HTTP {status}: {message}")]
    Http {
        /// The BMC.
        bmc: String,
        /// What was asked.
        operation: String,
        /// The HTTP status code.
        status: u16,
        /// The BMC's error message, shortened.
        message: String,
    },
    /// The credentials were refused, or the account lacks the privilege.
    #[error("BMC {bmc} refused the credentials: {detail}")]
    Authentication {
        /// The BMC.
        bmc: String,
        /// What the BMC answered (never the credentials).
        detail: String,
    },
    /// The TLS handshake failed, usually because the certificate could not be verified.
    #[error("TLS verification of BMC {bmc} failed: {detail}")]
    Tls {
        /// The BMC.
        bmc: String,
        /// The TLS error.
        detail: String,
    },
    /// The system named in the address (or any system) does not exist on the BMC.
    #[error("BMC {bmc} has no system {system}")]
    SystemNotFound {
        /// The BMC.
        bmc: String,
        /// The system that was looked for.
        system: String,
    },
    /// The address names no system and the BMC manages several.
    #[error(
        "BMC {bmc} manages {} systems ({}); put the system path in the address",
        members.len(),
        members.join(", ")
    )]
    AmbiguousSystem {
        /// The BMC.
        bmc: String,
        /// The systems it lists.
        members: Vec<String>,
    },
    /// The BMC answered something that is not what the protocol promises.
    #[error("BMC {bmc} sent a malformed response to {operation}: {detail}")]
    MalformedResponse {
        /// The BMC.
        bmc: String,
        /// What was asked.
        operation: String,
        /// What is wrong with the answer.
        detail: String,
    },
    /// An asynchronous BMC task ended without success.
    #[error("BMC {bmc} task for {operation} ended {state}: {detail}")]
    TaskFailed {
        /// The BMC.
        bmc: String,
        /// What was asked.
        operation: String,
        /// The final task state.
        state: String,
        /// The task's messages.
        detail: String,
    },
    /// The BMC answered an IPMI request with a non-zero completion code.
    #[error("BMC {bmc} refused {operation}: {detail}")]
    Completion {
        /// The BMC.
        bmc: String,
        /// What was asked.
        operation: String,
        /// The completion code.
        code: u8,
        /// The code, described.
        detail: String,
        /// Whether trying again can help (busy, timeout, ...): decided where the code is read,
        /// by the IPMI layer that knows what the code means.
        retryable: bool,
    },
    /// The BMC refused to open an RMCP+ session for a reason other than the credentials.
    #[error("BMC {bmc} refused the IPMI session: {detail} (RMCP+ status {status:#04x})")]
    SessionRejected {
        /// The BMC.
        bmc: String,
        /// The RMCP+ status code.
        status: u8,
        /// The status, described.
        detail: String,
    },
    /// The BMC reports that a power control action failed (IPMI power control fault).
    #[error("BMC {bmc} reports a fault after {operation}: {detail}")]
    PowerFault {
        /// The BMC.
        bmc: String,
        /// The action.
        operation: String,
        /// The fault bits.
        detail: String,
    },
    /// A power state was not read back before the deadline.
    #[error("BMC {bmc} did not reach power state {target} within {waited:?} (last seen: {})", describe_last(last_seen.as_ref(), last_error.as_deref()))]
    StateNotReached {
        /// The BMC.
        bmc: String,
        /// The state waited for.
        target: PowerState,
        /// How long the caller waited.
        waited: Duration,
        /// The last state read, if any read succeeded.
        last_seen: Option<PowerState>,
        /// The last read error, if the last read failed.
        last_error: Option<String>,
    },
}

fn describe_last(state: Option<&PowerState>, error: Option<&str>) -> String {
    match (state, error) {
        (Some(state), None) => state.to_string(),
        (Some(state), Some(error)) => format!("{state}, then error: {error}"),
        (None, Some(error)) => format!("no state, error: {error}"),
        (None, None) => "nothing".to_owned(),
    }
}

impl Error {
    /// Whether trying the same operation again later can succeed.
    ///
    /// Transport failures, timeouts, busy answers, 5xx and "state not reached yet" are retryable.
    /// Authentication, TLS, configuration, unsupported operations, missing systems and malformed
    /// responses are permanent: retrying them only locks accounts or repeats the same answer.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Unreachable { .. }
            | Error::Timeout { .. }
            | Error::Busy { .. }
            | Error::StateNotReached { .. } => true,
            Error::Http { status, .. } => *status >= 500,
            Error::Completion { retryable, .. } => *retryable,
            Error::SessionRejected { status, .. } => matches!(status, 0x01 | 0x02 | 0x08 | 0x0B),
            Error::PowerFault { .. } => true,
            Error::InvalidAddress { .. }
            | Error::Configuration { .. }
            | Error::Unsupported { .. }
            | Error::Authentication { .. }
            | Error::Tls { .. }
            | Error::SystemNotFound { .. }
            | Error::AmbiguousSystem { .. }
            | Error::MalformedResponse { .. }
            | Error::TaskFailed { .. } => false,
        }
    }

    /// How long the BMC asked to wait before the next request (its `Retry-After`), if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Busy { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// What kind of failure this is: a bounded set, for metric labels and for the
    /// controller's classification. Every variant is named: a new one does not compile until
    /// it is classified.
    pub fn category(&self) -> DriverErrorCategory {
        use DriverErrorCategory as C;
        match self {
            Error::InvalidAddress { .. } => C::InvalidAddress,
            Error::Configuration { .. } => C::Configuration,
            Error::Unsupported { .. } => C::Unsupported,
            Error::Unreachable { .. } => C::Unreachable,
            Error::Timeout { .. } => C::Timeout,
            Error::Busy { .. } => C::Busy,
            Error::Http { .. } => C::Http,
            Error::Authentication { .. } => C::Authentication,
            Error::Tls { .. } => C::Tls,
            Error::SystemNotFound { .. } => C::SystemNotFound,
            Error::AmbiguousSystem { .. } => C::AmbiguousSystem,
            Error::MalformedResponse { .. } => C::MalformedResponse,
            Error::TaskFailed { .. } => C::TaskFailed,
            Error::StateNotReached { .. } => C::StateNotReached,
            Error::Completion { .. } => C::Completion,
            Error::SessionRejected { .. } => C::SessionRejected,
            Error::PowerFault { .. } => C::PowerFault,
        }
    }
}

/// The kinds of [`Error`], one per variant: what callers match on (a refused password is
/// not an unreachable BMC), and, by [`DriverErrorCategory::as_str`], the bounded label of
/// metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriverErrorCategory {
    /// [`Error::InvalidAddress`].
    InvalidAddress,
    /// [`Error::Configuration`].
    Configuration,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::Unreachable`].
    Unreachable,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::Busy`].
    Busy,
    /// [`Error::Http`].
    Http,
    /// [`Error::Authentication`].
    Authentication,
    /// [`Error::Tls`].
    Tls,
    /// [`Error::SystemNotFound`].
    SystemNotFound,
    /// [`Error::AmbiguousSystem`].
    AmbiguousSystem,
    /// [`Error::MalformedResponse`].
    MalformedResponse,
    /// [`Error::TaskFailed`].
    TaskFailed,
    /// [`Error::StateNotReached`].
    StateNotReached,
    /// [`Error::Completion`].
    Completion,
    /// [`Error::SessionRejected`].
    SessionRejected,
    /// [`Error::PowerFault`].
    PowerFault,
}

impl DriverErrorCategory {
    /// Every category, in declaration order.
    pub const ALL: [DriverErrorCategory; 17] = [
        DriverErrorCategory::InvalidAddress,
        DriverErrorCategory::Configuration,
        DriverErrorCategory::Unsupported,
        DriverErrorCategory::Unreachable,
        DriverErrorCategory::Timeout,
        DriverErrorCategory::Busy,
        DriverErrorCategory::Http,
        DriverErrorCategory::Authentication,
        DriverErrorCategory::Tls,
        DriverErrorCategory::SystemNotFound,
        DriverErrorCategory::AmbiguousSystem,
        DriverErrorCategory::MalformedResponse,
        DriverErrorCategory::TaskFailed,
        DriverErrorCategory::StateNotReached,
        DriverErrorCategory::Completion,
        DriverErrorCategory::SessionRejected,
        DriverErrorCategory::PowerFault,
    ];

    /// The label in metrics (`outcome` of `baremend_bmc_requests_total`): snake case, as
    /// dashboards and alerts already match it.
    pub fn as_str(self) -> &'static str {
        match self {
            DriverErrorCategory::InvalidAddress => "invalid_address",
            DriverErrorCategory::Configuration => "configuration",
            DriverErrorCategory::Unsupported => "unsupported",
            DriverErrorCategory::Unreachable => "unreachable",
            DriverErrorCategory::Timeout => "timeout",
            DriverErrorCategory::Busy => "busy",
            DriverErrorCategory::Http => "http_error",
            DriverErrorCategory::Authentication => "authentication",
            DriverErrorCategory::Tls => "tls",
            DriverErrorCategory::SystemNotFound => "system_not_found",
            DriverErrorCategory::AmbiguousSystem => "ambiguous_system",
            DriverErrorCategory::MalformedResponse => "malformed_response",
            DriverErrorCategory::TaskFailed => "task_failed",
            DriverErrorCategory::StateNotReached => "state_not_reached",
            DriverErrorCategory::Completion => "completion_code",
            DriverErrorCategory::SessionRejected => "session_rejected",
            DriverErrorCategory::PowerFault => "power_fault",
        }
    }
}

impl std::fmt::Display for DriverErrorCategory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Cuts a BMC-supplied message to a length that is safe to put into an Event or a log line.
#[cfg(feature = "io")]
pub(crate) fn shorten(message: &str) -> String {
    const MAX: usize = 300;
    let message = message.trim();
    if message.len() <= MAX {
        return message.to_owned();
    }
    let mut end = MAX;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_and_server_side_failures_are_retryable() {
        let bmc = "redfish://bmc".to_owned();
        let http = |status| Error::Http {
            bmc: bmc.clone(),
            operation: "GET".into(),
            status,
            message: String::new(),
        };
        assert!(http(500).is_retryable());
        assert!(http(503).is_retryable());
        assert!(!http(400).is_retryable());
        assert!(
            Error::Unreachable {
                bmc: bmc.clone(),
                detail: "refused".into()
            }
            .is_retryable()
        );
        assert!(
            !Error::Authentication {
                bmc: bmc.clone(),
                detail: "401".into()
            }
            .is_retryable()
        );
        assert!(
            !Error::Tls {
                bmc,
                detail: "unknown issuer".into()
            }
            .is_retryable()
        );
    }

    #[test]
    fn every_category_has_its_own_label_and_the_labels_stay_as_dashboards_read_them() {
        let labels: Vec<&str> = DriverErrorCategory::ALL
            .iter()
            .map(|c| c.as_str())
            .collect();
        let mut distinct = labels.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), labels.len(), "{labels:?}");
        // The labels metrics carried when the category was a string: a rename breaks every
        // query that counts them.
        assert_eq!(
            labels,
            [
                "invalid_address",
                "configuration",
                "unsupported",
                "unreachable",
                "timeout",
                "busy",
                "http_error",
                "authentication",
                "tls",
                "system_not_found",
                "ambiguous_system",
                "malformed_response",
                "task_failed",
                "state_not_reached",
                "completion_code",
                "session_rejected",
                "power_fault",
            ]
        );
        let refused = Error::Authentication {
            bmc: "redfish://bmc".into(),
            detail: "401".into(),
        };
        assert_eq!(refused.category(), DriverErrorCategory::Authentication);
        assert_eq!(refused.category().to_string(), "authentication");
    }

    #[test]
    fn long_bmc_messages_are_shortened_on_a_char_boundary() {
        let message = "é".repeat(400);
        let short = shorten(&message);
        assert!(short.len() <= 304);
        assert!(short.ends_with('…'));
    }

    #[test]
    fn state_not_reached_names_the_last_state_seen() {
        let error = Error::StateNotReached {
            bmc: "redfish://bmc".into(),
            target: PowerState::Off,
            waited: Duration::from_secs(3),
            last_seen: Some(PowerState::On),
            last_error: None,
        };
        assert!(error.to_string().contains("last seen: On"), "{error}");
    }
}
