//! BMC drivers kept per Machine for the length of a remediation: one login (one Redfish
//! session) serves every read and request, instead of one session per look, which a BMC's
//! small session table would soon refuse.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use baremend_drivers::{BmcAddress, Connector, Credentials, DriverConfig, PowerDriver, TlsOptions};

use crate::Result;

struct Cached {
    address: BmcAddress,
    /// Compared with the Secret's on every use. Its passwords are `Password`s: redacted in
    /// `Debug` and wiped from memory when the entry (or the driver's own copy) is dropped.
    credentials: Credentials,
    tls: TlsOptions,
    driver: Arc<dyn PowerDriver>,
}

/// Drivers by Machine (`namespace/name`).
#[derive(Default)]
pub struct DriverCache {
    entries: Mutex<HashMap<String, Cached>>,
}

impl std::fmt::Debug for DriverCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("DriverCache")
            .field("drivers", &count)
            .finish()
    }
}

fn close_later(driver: Arc<dyn PowerDriver>) {
    // Closing talks to the BMC (a session DELETE); nobody waits for it.
    tokio::spawn(async move {
        if let Err(error) = driver.close().await {
            tracing::debug!(%error, "closing a BMC session failed");
        }
    });
}

impl DriverCache {
    /// The driver for `machine`: the cached one while address, credentials and TLS settings
    /// are unchanged, else a new one (the old one is closed).
    pub fn get_or_connect(
        &self,
        machine: &str,
        config: DriverConfig,
        connector: &Connector,
    ) -> Result<Arc<dyn PowerDriver>> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = entries.get(machine)
            && cached.address == config.address
            && cached.credentials == config.credentials
            && cached.tls == config.tls
        {
            return Ok(cached.driver.clone());
        }
        let cached = Cached {
            address: config.address.clone(),
            credentials: config.credentials.clone(),
            tls: config.tls.clone(),
            driver: connector.connect(config)?,
        };
        let driver = cached.driver.clone();
        if let Some(old) = entries.insert(machine.to_owned(), cached) {
            close_later(old.driver);
        }
        Ok(driver)
    }

    /// Forgets the driver of `machine` and closes its session.
    /// The cached driver for `machine`, if any (whatever it was made for).
    pub fn get(&self, machine: &str) -> Option<Arc<dyn PowerDriver>> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(machine)
            .map(|cached| cached.driver.clone())
    }

    pub fn release(&self, machine: &str) {
        let removed = self
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(machine);
        if let Some(cached) = removed {
            close_later(cached.driver);
        }
    }
}
