//! Logging in during a password rotation: the current password, then the previous one once.
//!
//! # Expected flow
//! 1. [`login_order`] (pure) decides which passwords to try: the one that worked last for this
//!    driver first, the other one second, each at most once; only the current one when the
//!    credentials have no previous password.
//! 2. [`log_in`] tries them in that order. Only a refusal of the password itself
//!    ([`Attempt::Refused`]) moves on to the other one; any other failure (unreachable, busy,
//!    timeout, a malformed answer) ends the login at once with that error, since the other
//!    password would meet the same BMC.
//! 3. The password that worked is remembered ([`LoginMemory`]) and shown by
//!    [`crate::PowerDriver::credential_used`].
//!
//! # Guarantees
//! - At most two refused logins per call, one per password; never a loop. The drivers' retry
//!   helper treats the resulting [`Error::Authentication`] as final.
//! - Starting with the password that worked last means that, during a rotation in either
//!   order, a driver used for many operations is refused at most once per switch of the BMC's
//!   password rather than once per operation: a BMC whose lock-out counts failures in a time
//!   window (and is not reset by a good login) is never pushed towards its threshold.
//! - Errors name which password was refused, never a password.
//!
//! # Caveats
//! The memory lives in the driver: a new driver (a new process, changed credentials) starts
//! with the current password again.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use crate::credentials::{CredentialUsed, Credentials};
use crate::error::{Error, Result};

/// How one login with one password ended, when it did not fail for another reason.
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    /// The BMC accepted the password.
    Accepted(T),
    /// The BMC refused the password (Redfish 401, an RMCP+ integrity check that fails): the
    /// other password may still work.
    Refused(Error),
}

/// The passwords to try, in order: the one that worked last first, each at most once.
pub(crate) fn login_order(has_previous: bool, last: Option<CredentialUsed>) -> Vec<CredentialUsed> {
    if !has_previous {
        return vec![CredentialUsed::Current];
    }
    let first = last.unwrap_or(CredentialUsed::Current);
    vec![first, first.other()]
}

/// Which password worked last for one driver.
#[derive(Debug, Default)]
pub(crate) struct LoginMemory(Mutex<Option<CredentialUsed>>);

impl LoginMemory {
    /// The password that worked last, if any login has worked.
    pub(crate) fn get(&self) -> Option<CredentialUsed> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `which` worked.
    pub(crate) fn set(&self, which: CredentialUsed) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(which);
    }

    /// The password to use when no login step tells (HTTP Basic): the one that worked last,
    /// else the current one.
    pub(crate) fn first(&self, credentials: &Credentials) -> CredentialUsed {
        login_order(credentials.previous_password.is_some(), self.get())[0]
    }
}

/// Tries the passwords of `credentials` in [`login_order`], calling `attempt` with each, and
/// remembers the one that worked.
///
/// # Errors
/// The first error that is not a refusal; the refusal itself when there is one password;
/// an [`Error::Authentication`] naming both refusals when both passwords were refused.
pub(crate) async fn log_in<T, F, Fut>(
    bmc: &str,
    credentials: &Credentials,
    memory: &LoginMemory,
    mut attempt: F,
) -> Result<(T, CredentialUsed)>
where
    F: FnMut(CredentialUsed) -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let order = login_order(credentials.previous_password.is_some(), memory.get());
    let mut refusals: Vec<(CredentialUsed, Error)> = Vec::with_capacity(order.len());
    for which in order {
        match attempt(which).await? {
            Attempt::Accepted(value) => {
                if !refusals.is_empty() {
                    tracing::info!(
                        bmc,
                        refused = %refusals[0].0,
                        accepted = %which,
                        "the BMC accepted the other password of the rotation"
                    );
                }
                memory.set(which);
                return Ok((value, which));
            }
            Attempt::Refused(error) => refusals.push((which, error)),
        }
    }
    Err(refused(bmc, refusals))
}

/// The error for logins that were all refused.
fn refused(bmc: &str, mut refusals: Vec<(CredentialUsed, Error)>) -> Error {
    if refusals.len() == 1
        && let Some((_, error)) = refusals.pop()
    {
        return error;
    }
    let detail = refusals
        .iter()
        .map(|(which, error)| format!("the {which} password: {}", detail_of(error)))
        .collect::<Vec<_>>()
        .join("; ");
    Error::Authentication {
        bmc: bmc.to_owned(),
        detail: format!("both passwords of the Secret were refused ({detail})"),
    }
}

/// What an error says beyond the BMC's name.
fn detail_of(error: &Error) -> String {
    match error {
        Error::Authentication { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    use CredentialUsed::{Current, Previous};

    #[test]
    fn the_order_starts_with_what_worked_last_and_tries_each_password_once() {
        assert_eq!(login_order(false, None), vec![Current]);
        assert_eq!(login_order(false, Some(Previous)), vec![Current]);
        assert_eq!(login_order(true, None), vec![Current, Previous]);
        assert_eq!(login_order(true, Some(Current)), vec![Current, Previous]);
        assert_eq!(login_order(true, Some(Previous)), vec![Previous, Current]);
    }

    fn rotating() -> Credentials {
        Credentials::new("admin", "new-password").with_previous("old-password")
    }

    fn refusal(which: CredentialUsed) -> Error {
        Error::Authentication {
            bmc: "bmc".into(),
            detail: format!("HTTP 401 for {which}"),
        }
    }

    /// A BMC that accepts one password (or none) and notes every try.
    async fn bmc_accepting(
        accepts: Option<CredentialUsed>,
        credentials: &Credentials,
        memory: &LoginMemory,
        tries: &Mutex<Vec<CredentialUsed>>,
    ) -> Result<(&'static str, CredentialUsed)> {
        log_in("bmc", credentials, memory, |which| {
            tries.lock().unwrap().push(which);
            async move {
                Ok(if Some(which) == accepts {
                    Attempt::Accepted("session")
                } else {
                    Attempt::Refused(refusal(which))
                })
            }
        })
        .await
    }

    #[tokio::test]
    async fn the_previous_password_is_tried_once_and_then_first() {
        let memory = LoginMemory::default();
        let tries = Mutex::new(Vec::new());
        let credentials = rotating();
        let (_, used) = bmc_accepting(Some(Previous), &credentials, &memory, &tries)
            .await
            .unwrap();
        assert_eq!(used, Previous);
        assert_eq!(*tries.lock().unwrap(), vec![Current, Previous]);
        tries.lock().unwrap().clear();
        bmc_accepting(Some(Previous), &credentials, &memory, &tries)
            .await
            .unwrap();
        assert_eq!(
            *tries.lock().unwrap(),
            vec![Previous],
            "no refusal the second time"
        );
        // The BMC gets the new password: one refusal, then the current one sticks.
        tries.lock().unwrap().clear();
        let (_, used) = bmc_accepting(Some(Current), &credentials, &memory, &tries)
            .await
            .unwrap();
        assert_eq!(used, Current);
        assert_eq!(*tries.lock().unwrap(), vec![Previous, Current]);
        assert_eq!(memory.get(), Some(Current));
    }

    #[tokio::test]
    async fn two_refusals_end_the_login_naming_both_passwords_and_neither_value() {
        let memory = LoginMemory::default();
        let tries = Mutex::new(Vec::new());
        let error = bmc_accepting(None, &rotating(), &memory, &tries)
            .await
            .unwrap_err();
        assert_eq!(*tries.lock().unwrap(), vec![Current, Previous]);
        assert!(matches!(error, Error::Authentication { .. }), "{error}");
        let text = error.to_string();
        assert!(text.contains("current password") && text.contains("previous password"));
        assert!(!text.contains("new-password") && !text.contains("old-password"));
        assert_eq!(memory.get(), None);
    }

    #[tokio::test]
    async fn one_password_is_tried_once_and_its_refusal_returned_as_is() {
        let memory = LoginMemory::default();
        let tries = Mutex::new(Vec::new());
        let credentials = Credentials::new("admin", "password");
        let error = bmc_accepting(None, &credentials, &memory, &tries)
            .await
            .unwrap_err();
        assert_eq!(*tries.lock().unwrap(), vec![Current]);
        assert_eq!(error.to_string(), refusal(Current).to_string());
    }

    #[tokio::test]
    async fn a_failure_that_is_not_a_refusal_ends_the_login_without_the_other_password() {
        let memory = LoginMemory::default();
        let tries = Mutex::new(Vec::new());
        let error = log_in("bmc", &rotating(), &memory, |which| {
            tries.lock().unwrap().push(which);
            async {
                Err::<Attempt<()>, _>(Error::Busy {
                    bmc: "bmc".into(),
                    detail: "HTTP 503".into(),
                    retry_after: None,
                })
            }
        })
        .await
        .unwrap_err();
        assert!(matches!(error, Error::Busy { .. }));
        assert_eq!(*tries.lock().unwrap(), vec![Current]);
    }
}
