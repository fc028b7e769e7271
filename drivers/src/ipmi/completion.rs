//! What a non-zero IPMI completion code means for the caller (IPMI v2.0 table 5-2, and the
//! error checklist in the team's IPMI notes).

use ipmi_rs_core::connection::CompletionErrorCode;

/// How to react to a completion code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionClass {
    /// Try again after a pause (busy, timeout, initializing, unspecified).
    Retry,
    /// The session's privilege is too low: fix the account or the configured privilege.
    Privilege,
    /// The BMC does not support the request.
    Unsupported,
    /// The request was refused for its content or the present state: read the state again.
    Refused,
}

/// Classifies a non-zero completion code.
pub fn classify(code: u8) -> CompletionClass {
    match CompletionErrorCode::try_from(code) {
        Ok(
            CompletionErrorCode::NodeBusy
            | CompletionErrorCode::ProcessingTimeout
            | CompletionErrorCode::ResponseUnavailable { .. }
            | CompletionErrorCode::CannotExecuteDuplicateRequest
            | CompletionErrorCode::Unspecified,
        ) => CompletionClass::Retry,
        Ok(CompletionErrorCode::InsufficientPrivilege) => CompletionClass::Privilege,
        // 0x80/0x81 are command-specific; for Set Session Privilege Level they mean the level
        // is not available to this user or channel.
        Ok(CompletionErrorCode::CommandSpecific(0x80 | 0x81)) => CompletionClass::Privilege,
        Ok(
            CompletionErrorCode::InvalidCommand
            | CompletionErrorCode::InvalidCommandForLun
            | CompletionErrorCode::SubFunctionDisabled,
        ) => CompletionClass::Unsupported,
        _ => CompletionClass::Refused,
    }
}

/// A short description of a completion code.
pub fn describe(code: u8) -> String {
    match CompletionErrorCode::try_from(code) {
        Ok(known) => format!("completion code {code:#04x} ({known:?})"),
        Err(()) => format!("completion code {code:#04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_completion_code_class_is_recognised() {
        for code in [0xC0, 0xC3, 0xCE, 0xCF, 0xD0, 0xD1, 0xD2, 0xFF] {
            assert_eq!(classify(code), CompletionClass::Retry, "{code:#x}");
        }
        for code in [0xD4, 0x80, 0x81] {
            assert_eq!(classify(code), CompletionClass::Privilege, "{code:#x}");
        }
        for code in [0xC1, 0xC2, 0xD6] {
            assert_eq!(classify(code), CompletionClass::Unsupported, "{code:#x}");
        }
        for code in [0xC7, 0xC9, 0xCC, 0xD5, 0xD3, 0x01, 0xBE, 0xD7] {
            assert_eq!(classify(code), CompletionClass::Refused, "{code:#x}");
        }
        assert!(describe(0xD4).contains("InsufficientPrivilege"));
    }
}
