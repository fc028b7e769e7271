//! BMC credentials that cannot be printed by accident.

use std::fmt;

/// A BMC password. It has no `Display`, its `Debug` is redacted, and reading it takes an explicit
/// call to [`Password::expose`], so that it cannot end up in a log line or error by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Self {
        Password(password.into())
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

/// A username and password for a BMC.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The BMC account name.
    pub username: String,
    /// The account's password.
    pub password: Password,
}

impl Credentials {
    /// Builds credentials.
    pub fn new(username: impl Into<String>, password: impl Into<String>) -> Self {
        Credentials {
            username: username.into(),
            password: Password::new(password),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password)
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
        let credentials = Credentials::new("admin", "s3cr3t-Pa55");
        for shown in [
            format!("{credentials:?}"),
            format!("{credentials:#?}"),
            credentials.to_string(),
            format!("{:?}", credentials.password),
        ] {
            assert!(!shown.contains("s3cr3t-Pa55"), "{shown}");
        }
        assert!(format!("{credentials:?}").contains("admin"));
        assert_eq!(credentials.password.expose(), "s3cr3t-Pa55");
    }
}
