//! BMC credentials that cannot be printed by accident, and that are wiped from memory when
//! dropped.
//!
//! Caveats: the copies a request needs on its way out (reqwest's request body and header
//! buffers, the RMCP+ key schedule's intermediate MAC states) are not in our hands and are not
//! wiped; what is wiped is every copy this crate keeps: the passwords of cached drivers, the
//! Redfish session token, the IPMI user key, session integrity key and session keys.

use std::fmt;

use zeroize::Zeroizing;

/// A BMC password. It has no `Display`, its `Debug` is redacted, reading it takes an explicit
/// call to [`Password::expose`], so that it cannot end up in a log line or error by accident,
/// and its bytes are overwritten with zeros when it is dropped (every clone's too).
#[derive(Clone, PartialEq, Eq)]
pub struct Password(Zeroizing<String>);

impl Password {
    /// Wraps a password. A `String` is moved in, not copied, so no unwiped copy is left
    /// behind by the wrapping itself.
    pub fn new(password: impl Into<String>) -> Self {
        Password(Zeroizing::new(password.into()))
    }

    /// The password itself, for the one place that sends it to the BMC.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// A username and password for a BMC, with the password it replaces while a rotation is under
/// way.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The BMC account name.
    pub username: String,
    /// The account's password.
    pub password: Password,
    /// The password before the last rotation, tried once when the BMC refuses `password`
    /// (the BMC may not have been changed yet). `None` outside a rotation.
    pub previous_password: Option<Password>,
}

/// Which of a [`Credentials`]' passwords a BMC accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialUsed {
    /// The current password.
    Current,
    /// The previous password: the BMC has not been given the new one yet, so the previous one
    /// must stay in the Secret.
    Previous,
}

impl CredentialUsed {
    /// `current` or `previous`, for messages and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialUsed::Current => "current",
            CredentialUsed::Previous => "previous",
        }
    }

    /// The other password.
    pub fn other(self) -> Self {
        match self {
            CredentialUsed::Current => CredentialUsed::Previous,
            CredentialUsed::Previous => CredentialUsed::Current,
        }
    }
}

impl fmt::Display for CredentialUsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Credentials {
    /// Builds credentials without a previous password.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials {
            username: username.into(),
            password: Password::new(password),
            previous_password: None,
        }
    }

    /// The same credentials with `previous` as the password before the last rotation. A
    /// previous password equal to the current one is dropped: trying it again would only be
    /// one more refused login.
    pub fn with_previous(mut self, previous: impl Into<String>) -> Self {
        let previous = Password::new(previous);
        self.previous_password = (previous != self.password).then_some(previous);
        self
    }

    /// The password `which` names, if these credentials have it.
    pub fn password_for(&self, which: CredentialUsed) -> Option<&Password> {
        match which {
            CredentialUsed::Current => Some(&self.password),
            CredentialUsed::Previous => self.previous_password.as_ref(),
        }
    }

    /// The username with only the password `which` names, if these credentials have it.
    pub fn only(&self, which: CredentialUsed) -> Option<Credentials> {
        Some(Credentials {
            username: self.username.clone(),
            password: self.password_for(which)?.clone(),
            previous_password: None,
        })
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password)
            .field("previous_password", &self.previous_password)
            .finish()
    }
}

impl fmt::Display for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (password redacted)", self.username)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_password() {
        let credentials = Credentials::new("admin", "s3cr3t-Pa55").with_previous("0ld-Pa55w0rd");
        for shown in [
            format!("{credentials:?}"),
            format!("{credentials:#?}"),
            credentials.to_string(),
            format!("{:?}", credentials.password),
        ] {
            assert!(!shown.contains("s3cr3t-Pa55"), "{shown}");
            assert!(!shown.contains("0ld-Pa55w0rd"), "{shown}");
        }
        assert!(format!("{credentials:?}").contains("admin"));
        assert_eq!(credentials.password.expose(), "s3cr3t-Pa55");
    }

    #[test]
    fn a_password_is_held_in_a_type_that_wipes_it_on_drop() {
        // The wiping itself is zeroize's (it is `Zeroizing<String>`'s `Drop`); what is pinned
        // here is that the password's storage is that type, so that no refactoring silently
        // turns it back into a plain `String`.
        fn wipes_on_drop<T: zeroize::ZeroizeOnDrop>(_: &T) {}
        let password = Password::new("s3cr3t-Pa55");
        wipes_on_drop(&password.0);
        assert_eq!(format!("{password:?}"), "Password(<redacted>)");
    }

    #[test]
    fn each_password_is_reachable_alone_and_a_repeated_one_is_dropped() {
        let credentials = Credentials::new("admin", "new-password").with_previous("old-password");
        let previous = credentials.only(CredentialUsed::Previous).unwrap();
        assert_eq!(previous.password.expose(), "old-password");
        assert_eq!(previous.previous_password, None);
        assert_eq!(
            credentials
                .only(CredentialUsed::Current)
                .unwrap()
                .password
                .expose(),
            "new-password"
        );
        let same = Credentials::new("admin", "password").with_previous("password");
        assert_eq!(same.previous_password, None);
        assert!(same.only(CredentialUsed::Previous).is_none());
    }
}
