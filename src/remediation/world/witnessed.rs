//! A BMC driver that tells the process's [`BmcLedger`] every power state it reads and every
//! power request it sends, so that one reader's reading is evidence for all (see
//! `bmc_trust`).

use std::sync::Arc;

use async_trait::async_trait;
use baremend_drivers::{
    CredentialUsed, PowerDriver, PowerOffMode, PowerState, ProbeReport, Result,
};

use crate::remediation::decide::bmc_trust::{BmcLedger, Reader, Reading, Request};
use crate::runtime::clock::{Clock, since_epoch};

/// The ledger and the clock readings are stamped with.
#[derive(Clone)]
pub struct Witness {
    /// The process's ledger.
    pub ledger: Arc<BmcLedger>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Witness")
    }
}

impl Witness {
    /// Wraps `inner`, the driver of the BMC shown as `bmc` (its address, no credentials),
    /// read by `reader`.
    pub fn wrap(
        &self,
        inner: Arc<dyn PowerDriver>,
        bmc: String,
        reader: Reader,
    ) -> Arc<dyn PowerDriver> {
        Arc::new(Witnessed {
            inner,
            bmc,
            reader,
            witness: self.clone(),
        })
    }

    fn now(&self) -> std::time::Duration {
        since_epoch(self.clock.now())
    }

    fn saw(&self, bmc: &str, state: &PowerState, reader: Reader) {
        let now = self.now();
        let reading = Reading {
            at: now,
            state: state.clone(),
            by: reader,
        };
        if let Some(mark) = self.ledger.record(bmc, reading, now) {
            tracing::warn!(%bmc, %mark, "a BMC contradicted itself: its readings prove nothing until the mark expires");
        }
    }
}

/// Wraps a driver; every call goes through unchanged and is told to the ledger.
#[derive(Debug)]
struct Witnessed {
    inner: Arc<dyn PowerDriver>,
    bmc: String,
    reader: Reader,
    witness: Witness,
}

#[async_trait]
impl PowerDriver for Witnessed {
    fn bmc(&self) -> &str {
        self.inner.bmc()
    }

    fn credential_used(&self) -> Option<CredentialUsed> {
        self.inner.credential_used()
    }

    async fn power_state(&self) -> Result<PowerState> {
        let state = self.inner.power_state().await?;
        self.witness.saw(&self.bmc, &state, self.reader);
        Ok(state)
    }

    /// Nothing to witness: it reads no power state and asks for none.
    async fn connect(&self) -> Result<()> {
        self.inner.connect().await
    }

    /// Nothing to witness: what it reads only decides whether a request is sent, and every
    /// reading a proof or a verdict rests on is a [`PowerDriver::power_state`] of its own.
    async fn ready_to_change_power(&self) -> Result<()> {
        self.inner.ready_to_change_power().await
    }

    async fn power_off(&self, mode: PowerOffMode) -> Result<()> {
        // Told before it is sent, whatever comes of it: the host may change from now on.
        let at = self.witness.now();
        self.witness.ledger.requested(&self.bmc, Request::Off, at);
        self.inner.power_off(mode).await
    }

    async fn power_on(&self) -> Result<()> {
        let at = self.witness.now();
        self.witness.ledger.requested(&self.bmc, Request::On, at);
        self.inner.power_on().await
    }

    async fn probe(&self) -> Result<ProbeReport> {
        let report = self.inner.probe().await?;
        if let Some(state) = &report.power_state {
            self.witness.saw(&self.bmc, state, self.reader);
        }
        Ok(report)
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::runtime::clock::Clock;

    #[derive(Debug)]
    struct Flapping(Mutex<bool>);

    #[async_trait]
    impl PowerDriver for Flapping {
        fn bmc(&self) -> &str {
            "redfish://liar"
        }
        async fn power_state(&self) -> Result<PowerState> {
            let mut off = self.0.lock().unwrap();
            *off = !*off;
            Ok(if *off {
                PowerState::Off
            } else {
                PowerState::On
            })
        }
        async fn power_off(&self, _: PowerOffMode) -> Result<()> {
            Ok(())
        }
        async fn power_on(&self) -> Result<()> {
            Ok(())
        }
        async fn probe(&self) -> Result<ProbeReport> {
            unreachable!("not probed here")
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }

    struct Fixed(SystemTime);

    impl Clock for Fixed {
        fn now(&self) -> SystemTime {
            self.0
        }
    }

    #[tokio::test]
    async fn two_readers_of_one_bmc_share_what_they_read() {
        let witness = Witness {
            ledger: Arc::new(BmcLedger::new(Duration::from_secs(60))),
            clock: Arc::new(Fixed(SystemTime::UNIX_EPOCH + Duration::from_secs(100))),
        };
        let bmc = Arc::new(Flapping(Mutex::new(false)));
        let fencing = witness.wrap(bmc.clone(), "redfish://liar".into(), Reader::Fencing);
        let monitor = witness.wrap(bmc, "redfish://liar".into(), Reader::Monitor);
        fencing.power_off(PowerOffMode::Forced).await.unwrap();
        assert_eq!(fencing.power_state().await.unwrap(), PowerState::Off);
        assert_eq!(monitor.power_state().await.unwrap(), PowerState::On);
        assert_eq!(fencing.power_state().await.unwrap(), PowerState::Off);
        let now = Duration::from_secs(100);
        let mark = witness
            .ledger
            .distrusted("redfish://liar", now)
            .expect("marked by the monitor's On");
        assert_eq!(mark.why.then.by, Reader::Monitor);
        assert!(
            witness
                .ledger
                .check_proof("redfish://liar", now, now)
                .is_err()
        );
    }
}
