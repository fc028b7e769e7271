//! A BMC driver that counts and times every operation into the power metrics, so that BMC
//! trouble (timeouts, refused logins, slow answers) shows per driver and operation.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use baremend_drivers::{
    CredentialUsed, PowerDriver, PowerOffMode, PowerState, ProbeReport, Result,
};

use crate::metrics::power::PowerMetrics;

/// Wraps a driver; every call goes through unchanged and is recorded.
#[derive(Debug)]
pub struct Metered {
    inner: Arc<dyn PowerDriver>,
    driver: &'static str,
    metrics: Arc<PowerMetrics>,
}

impl Metered {
    /// Meters `inner`, a driver of kind `driver` (`redfish`, `ipmi`).
    pub fn wrap(
        inner: Arc<dyn PowerDriver>,
        driver: &'static str,
        metrics: Arc<PowerMetrics>,
    ) -> Arc<dyn PowerDriver> {
        Arc::new(Metered {
            inner,
            driver,
            metrics,
        })
    }

    async fn timed<T>(
        &self,
        operation: &str,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = call.await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) => error.category().as_str(),
        };
        self.metrics
            .bmc_request(self.driver, operation, outcome, started.elapsed());
        result
    }
}

#[async_trait]
impl PowerDriver for Metered {
    fn bmc(&self) -> &str {
        self.inner.bmc()
    }

    fn credential_used(&self) -> Option<CredentialUsed> {
        self.inner.credential_used()
    }

    async fn power_state(&self) -> Result<PowerState> {
        self.timed("power_state", self.inner.power_state()).await
    }

    async fn connect(&self) -> Result<()> {
        self.timed("connect", self.inner.connect()).await
    }

    async fn ready_to_change_power(&self) -> Result<()> {
        self.timed("ready_to_change_power", self.inner.ready_to_change_power())
            .await
    }

    async fn power_off(&self, mode: PowerOffMode) -> Result<()> {
        self.timed("power_off", self.inner.power_off(mode)).await
    }

    async fn power_on(&self) -> Result<()> {
        self.timed("power_on", self.inner.power_on()).await
    }

    async fn probe(&self) -> Result<ProbeReport> {
        self.timed("probe", self.inner.probe()).await
    }

    async fn close(&self) -> Result<()> {
        self.timed("close", self.inner.close()).await
    }
}
