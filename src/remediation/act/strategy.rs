//! The fencing strategies, one [`FenceStrategy`] implementation each: how a strategy asks for
//! the host's power off (and back on), takes its request back, makes sure of a request a
//! crash may have lost, reads the evidence that may prove the host off, probes its path
//! without disruption, and names its driver. [`strategy`] is the one table from the policy's
//! [`FenceStrategyName`] to its implementation; everything else dispatches through it, so a
//! new strategy is one new implementation and one row of the table.
//!
//! What the evidence proves is decided in `fence` (the only module that makes a
//! [`ConfirmedOff`]), from the [`PowerEvidence`] a strategy reads: a new strategy brings its
//! evidence and its rule there, where the proof's guarantees are kept in one place.

use async_trait::async_trait;
use baremend_drivers::{BmcAddress, PowerOffMode, PowerState};
use kube::api::Api;

use super::power::{BmcProofReads, BmcReadRefused, DirectBmc};
use super::probe::{ProbeSite, ProbeWith, no_bmc, probe_bmc, probe_host};
use crate::Result;
use crate::api::{FenceStrategyName, Remediation};
use crate::leader::Writes;
use crate::remediation::act::power::Power;
use crate::remediation::decide::fence::{
    ConfirmedOff, Corroboration, FenceTarget, NotFenced, PowerEvidence, confirm_powered_off,
};
use crate::remediation::decide::observe::bare_metal_host_view;
use crate::remediation::decide::plan::Persisted;
use crate::remediation::decide::plan::Phase;
use crate::remediation::decide::readiness::{Reason, Refusal, Verdict};
use crate::remediation::evidence::bmc::BmcLocator;
use crate::remediation::pass::Pass;
use crate::remediation::pass::context::host_resource;
use crate::remediation::world::execute;
use crate::runtime::clock::since_epoch;
use k8s_openapi::api::core::v1::Node;

/// Which power-off requests to withdraw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::remediation) enum Withdraw {
    /// All: reboot-API annotations removed and BMCs told to power on.
    Everything,
    /// Only the reboot-API annotations (the Node is back: its host is on, no BMC to ask).
    RebootRequestsOnly,
}

/// One way to fence a host. The pass's own readers and writers (`power`) do the I/O; an
/// implementation says which of them its strategy uses, and how.
#[async_trait]
pub(in crate::remediation) trait FenceStrategy: Send + Sync {
    /// The driver it uses, as status shows it (`bmh-reboot-api`, `redfish`, `ipmi`, or
    /// `unavailable`).
    async fn driver(&self, pass: &Pass, remediation: &Remediation) -> String;

    /// Asks for the host's power off (`off`) or takes the request back.
    async fn request_power(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        off: bool,
    ) -> Result<()>;

    /// What [`FenceStrategy::prepare`] does before it sends anything to the BMC (the BMC
    /// located, its Secret read): it may go before the gates that let a BMC be contacted have
    /// been judged, beside a start's creation. None: nothing to locate, or it failed
    /// (`prepare` then does it again).
    async fn locate(&self, _pass: &Pass, _remediation: &Remediation) -> Option<DirectBmc> {
        None
    }

    /// Gets ready to ask, asking nothing of the host (a BMC's session opened): made beside a
    /// start's fresh reads and record, so that the power-off after it has fewer round trips to
    /// make; from what [`FenceStrategy::locate`] found, if anything. What it readied goes to
    /// [`FenceStrategy::power_off_prepared`]; its failure (None) is left to the request, which
    /// meets it again and tells it.
    async fn prepare(
        &self,
        _pass: &Pass,
        _remediation: &Remediation,
        _located: Option<DirectBmc>,
    ) -> Option<DirectBmc> {
        None
    }

    /// A start's power-off, with what [`FenceStrategy::prepare`] readied for it a moment
    /// before (the BMC's Secret read once for both).
    async fn power_off_prepared(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        _prepared: Option<DirectBmc>,
    ) -> Result<()> {
        self.request_power(pass, writes, remediation, true).await
    }

    /// Takes back the power-off request this strategy may have made, when `what` covers it
    /// and there is something to ask.
    async fn withdraw(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        what: Withdraw,
    ) -> Result<()>;

    /// Makes the power request again if a crash may have lost it (`off`: the power-off one).
    async fn ensure_request(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        state: &Persisted,
        off: bool,
    ) -> Result<()>;

    /// Fresh evidence for `target`, never from a cache.
    async fn read_evidence(
        &self,
        pass: &Pass,
        remediation: &Remediation,
        target: &FenceTarget,
    ) -> std::result::Result<PowerEvidence, NotFenced>;

    /// The non-disruptive probe of this strategy's path to `site`.
    async fn probe(&self, with: &ProbeWith<'_>, site: &ProbeSite<'_>) -> Verdict;
}

/// The one table: the implementation of each strategy the policy may name (a match, so a
/// strategy without one does not compile).
pub(in crate::remediation) fn strategy(name: FenceStrategyName) -> &'static dyn FenceStrategy {
    match name {
        FenceStrategyName::BareMetalHostRebootApi => &RebootApiStrategy,
        FenceStrategyName::DirectBmc => &DirectBmcStrategy,
    }
}

/// The BareMetalHost reboot API: our annotation asks the BareMetal Operator to hold the host
/// off; its status says whether it is.
struct RebootApiStrategy;

#[async_trait]
impl FenceStrategy for RebootApiStrategy {
    async fn driver(&self, _: &Pass, _: &Remediation) -> String {
        "bmh-reboot-api".into()
    }

    async fn request_power(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        off: bool,
    ) -> Result<()> {
        let Some((host_ref, _)) = pass.host(remediation) else {
            // Nothing to ask; the evidence says why and the planner escalates.
            return Ok(());
        };
        let hosts: Api<kube::api::DynamicObject> = Api::namespaced_with(
            pass.context.clients.kube.clone(),
            &host_ref.namespace,
            &host_resource(),
        );
        writes.check()?;
        let (value, action) = if off {
            (Some(r#"{"mode":"hard"}"#), "RequestPowerOff")
        } else {
            (None, "RequestPowerOn")
        };
        let key = Power::of(pass).reboot_annotation();
        execute::set_annotation(writes, &hosts, &host_ref.name, &key, value, action).await?;
        Power::of(pass).note_operator_request(remediation, off);
        Ok(())
    }

    async fn withdraw(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        _: Withdraw,
    ) -> Result<()> {
        if pass.host(remediation).is_none() {
            return Ok(());
        }
        self.request_power(pass, writes, remediation, false).await
    }

    /// At once: the cached host shows whether our annotation is there.
    async fn ensure_request(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        state: &Persisted,
        off: bool,
    ) -> Result<()> {
        let Some((_, Some(host))) = pass.host(remediation) else {
            return Ok(());
        };
        let requested = bare_metal_host_view(&host, &pass.policy.reboot_key).power_off_requested();
        if off && !requested {
            self.request_power(pass, writes, remediation, true).await?;
        } else if !off && requested {
            Strategies::of(pass)
                .withdraw_all(writes, remediation, state, Withdraw::Everything)
                .await?;
        }
        Ok(())
    }

    /// A GET of the BareMetalHost (never the watch cache) and, when it reports the host off,
    /// our own reads of its BMC unless the policy turned them off.
    async fn read_evidence(
        &self,
        pass: &Pass,
        _: &Remediation,
        target: &FenceTarget,
    ) -> std::result::Result<PowerEvidence, NotFenced> {
        let fresh = Power::of(pass).fresh_host(target).await?;
        let corroboration = if pass.policy.corroborate_reboot_api && fresh.view.reports_off() {
            Power::of(pass).corroborate(&fresh).await
        } else {
            Corroboration::NotRead
        };
        Ok(PowerEvidence::BareMetalHost {
            view: fresh.view,
            corroboration,
        })
    }

    async fn probe(&self, with: &ProbeWith<'_>, site: &ProbeSite<'_>) -> Verdict {
        match site.host {
            Ok(Some(host)) => probe_host(with.client, host, with.reboot_key).await,
            Ok(None) => Err(Refusal::new(
                None,
                Reason::NoFencingPath,
                format!("Machine {} names no BareMetalHost", site.key),
            )),
            Err(unusable) => Err(Refusal::new(None, Reason::NoFencingPath, unusable.clone())),
        }
    }
}

/// The host's BMC, over Redfish or IPMI: we power it off ourselves and read it back.
struct DirectBmcStrategy;

#[async_trait]
impl FenceStrategy for DirectBmcStrategy {
    /// The scheme of the BMC's address (`redfish+https`, `ipmi`...), from the address alone:
    /// the credentials are read when the BMC is asked, not for a name on the status.
    async fn driver(&self, pass: &Pass, remediation: &Remediation) -> String {
        BmcLocator::of(pass)
            .locate_direct_bmc(remediation)
            .ok()
            .and_then(|bmc| BmcAddress::parse(&bmc.address).ok())
            .map(|address| address.scheme().to_owned())
            .unwrap_or_else(|| "unavailable".into())
    }

    /// The BMC's Secret read and its driver made; no request to the BMC.
    async fn locate(&self, pass: &Pass, remediation: &Remediation) -> Option<DirectBmc> {
        Power::of(pass).direct_bmc(remediation).await.ok()
    }

    /// The BMC located (unless it was), its session opened and the system read ahead of the
    /// power-off (which then sends its reset only).
    async fn prepare(
        &self,
        pass: &Pass,
        remediation: &Remediation,
        located: Option<DirectBmc>,
    ) -> Option<DirectBmc> {
        let bmc = match located {
            Some(bmc) => bmc,
            None => Power::of(pass).direct_bmc(remediation).await.ok()?,
        };
        match bmc.driver.ready_to_change_power().await {
            Ok(()) => Some(bmc),
            Err(error) => {
                tracing::debug!(bmc = %bmc.address, %error, "cannot connect ahead of the power-off");
                None
            }
        }
    }

    /// The readied BMC, else one read again: the power-off makes no second read of the
    /// Secret the session was opened with a moment before.
    async fn power_off_prepared(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        prepared: Option<DirectBmc>,
    ) -> Result<()> {
        let bmc = match prepared {
            Some(bmc) => bmc,
            None => Power::of(pass).direct_bmc(remediation).await?,
        };
        power_with(pass, writes, remediation, &bmc, true).await
    }

    async fn request_power(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        off: bool,
    ) -> Result<()> {
        let bmc = Power::of(pass).direct_bmc(remediation).await?;
        power_with(pass, writes, remediation, &bmc, off).await
    }

    /// Not when only the reboot requests go (the host is on already), nor without a BMC.
    async fn withdraw(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        what: Withdraw,
    ) -> Result<()> {
        if what == Withdraw::RebootRequestsOnly
            || Power::of(pass).direct_bmc(remediation).await.is_err()
        {
            return Ok(());
        }
        self.request_power(pass, writes, remediation, false).await
    }

    /// After a quiet period: the BMC may still be acting on the first request.
    async fn ensure_request(
        &self,
        pass: &Pass,
        writes: &Writes,
        remediation: &Remediation,
        state: &Persisted,
        off: bool,
    ) -> Result<()> {
        let quiet = (pass.context.settings.poll * 10).max(std::time::Duration::from_secs(5));
        let waited = since_epoch(pass.context.clock.now()).saturating_sub(state.phase_since);
        if waited < quiet {
            return Ok(());
        }
        let bmc = Power::of(pass).direct_bmc(remediation).await?;
        let power = Power::of(pass).read_power(&bmc).await?;
        writes.check()?;
        if off && power == PowerState::On {
            bmc.driver.power_off(PowerOffMode::Forced).await?;
        } else if !off && power == PowerState::Off {
            bmc.driver.power_on().await?;
        }
        Ok(())
    }

    /// The proof reads (`Power::read_bmc_proof`) — none while the BMC is untrustworthy — and
    /// every other reading of it in the process around those reads weighed with them.
    async fn read_evidence(
        &self,
        pass: &Pass,
        remediation: &Remediation,
        _: &FenceTarget,
    ) -> std::result::Result<PowerEvidence, NotFenced> {
        let bmc = Power::of(pass)
            .direct_bmc(remediation)
            .await
            .map_err(|e| NotFenced::Untrustworthy(e.to_string()))?;
        let BmcProofReads { reads, witnessed } = Power::of(pass)
            .read_bmc_proof(&bmc)
            .await
            .map_err(|refused| match refused {
                BmcReadRefused::Distrusted(mark) => {
                    NotFenced::Untrustworthy(format!("BMC {}: {mark}", bmc.address))
                }
                BmcReadRefused::Failed(why) => NotFenced::NotYet(why),
            })?;
        Ok(PowerEvidence::BmcReads {
            address: bmc.address,
            system: bmc.system,
            reads,
            transport: bmc.transport,
            witnessed,
        })
    }

    async fn probe(&self, with: &ProbeWith<'_>, site: &ProbeSite<'_>) -> Verdict {
        match site.bmc {
            Ok(bmc) => {
                let terms = with.terms.clone();
                let (client, connector) = (with.client, with.connector);
                probe_bmc(client, connector, site.namespace, bmc, with.timeout, terms).await
            }
            Err(why) => Err(no_bmc(why)),
        }
    }
}

/// Asks `bmc` for the host's power off (`off`) or on, with the leader's leave checked right
/// before; a password the BMC took that was the Secret's previous one is told.
async fn power_with(
    pass: &Pass,
    writes: &Writes,
    remediation: &Remediation,
    bmc: &DirectBmc,
    off: bool,
) -> Result<()> {
    writes.check()?;
    if off {
        bmc.driver.power_off(PowerOffMode::Forced).await?;
    } else {
        bmc.driver.power_on().await?;
    }
    Power::of(pass)
        .note_previous_password(remediation, bmc)
        .await;
    Ok(())
}

/// The pass's calls into its fencing strategies: the power requests, their preparation and
/// withdrawal, the proof. Made by `Strategies::of(pass)` where needed, so that a call names the
/// file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct Strategies<'p> {
    pass: &'p Pass,
}

impl<'p> Strategies<'p> {
    /// The Strategies of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        Strategies { pass }
    }

    /// Fresh evidence for `target` from its strategy, made into a proof or the reason why not.
    pub(in crate::remediation) async fn take_proof(
        self,
        remediation: &Remediation,
        target: &FenceTarget,
    ) -> std::result::Result<ConfirmedOff, NotFenced> {
        let evidence = strategy(target.strategy)
            .read_evidence(self.pass, remediation, target)
            .await?;
        confirm_powered_off(target, &evidence)
    }

    /// Asks `name` for the host's power off (`off`) or back on.
    pub(in crate::remediation) async fn request_power(
        self,
        writes: &Writes,
        remediation: &Remediation,
        name: FenceStrategyName,
        off: bool,
    ) -> Result<()> {
        strategy(name)
            .request_power(self.pass, writes, remediation, off)
            .await
    }

    /// Locates what `name` asks for the host's power through, asking it nothing (see
    /// [`FenceStrategy::locate`]).
    pub(in crate::remediation) async fn locate_power(
        self,
        remediation: &Remediation,
        name: FenceStrategyName,
    ) -> Option<DirectBmc> {
        strategy(name).locate(self.pass, remediation).await
    }

    /// Gets `name` ready to ask for the host's power, from what
    /// [`Strategies::locate_power`] found (see [`FenceStrategy::prepare`]).
    pub(in crate::remediation) async fn prepare_power(
        self,
        remediation: &Remediation,
        name: FenceStrategyName,
        located: Option<DirectBmc>,
    ) -> Option<DirectBmc> {
        strategy(name)
            .prepare(self.pass, remediation, located)
            .await
    }

    /// A start's power-off asked of `name`, with what [`Strategies::prepare_power`] readied.
    pub(in crate::remediation) async fn power_off_prepared(
        self,
        writes: &Writes,
        remediation: &Remediation,
        name: FenceStrategyName,
        prepared: Option<DirectBmc>,
    ) -> Result<()> {
        strategy(name)
            .power_off_prepared(self.pass, writes, remediation, prepared)
            .await
    }

    /// Withdraws every power-off request this remediation made, so the host comes back on.
    pub(in crate::remediation) async fn withdraw_all(
        self,
        writes: &Writes,
        remediation: &Remediation,
        state: &Persisted,
        what: Withdraw,
    ) -> Result<()> {
        for name in Power::of(self.pass).strategies_asked(remediation, state) {
            strategy(name)
                .withdraw(self.pass, writes, remediation, what)
                .await?;
        }
        Ok(())
    }

    /// Re-makes a power request of the strategy in use that a crash may have lost.
    pub(in crate::remediation) async fn ensure_request(
        self,
        writes: &Writes,
        remediation: &mut Remediation,
        state: &Persisted,
        off: bool,
    ) -> Result<()> {
        strategy(self.pass.strategy_in_use(remediation))
            .ensure_request(self.pass, writes, remediation, state, off)
            .await
    }

    /// The driver `name` uses for this remediation, as status shows it.
    pub(in crate::remediation) async fn driver_name(
        self,
        remediation: &Remediation,
        name: FenceStrategyName,
    ) -> String {
        strategy(name).driver(self.pass, remediation).await
    }

    /// The proof, or why not, from fresh evidence: taken while fencing and before the release,
    /// not in the phases between or after.
    pub(in crate::remediation) async fn proof_for(
        self,
        remediation: &Remediation,
        phase: Phase,
        node: Option<&Node>,
    ) -> std::result::Result<ConfirmedOff, NotFenced> {
        if !matches!(phase, Phase::PoweringOff | Phase::Fenced) {
            return Err(NotFenced::NotYet("not checked in this phase".into()));
        }
        let power = Power::of(self.pass);
        let target = power.fence_target(remediation, self.pass.strategy_in_use(remediation), node);
        match power.recent_bmc_proof(&target) {
            Some(confirmed) => Ok(confirmed),
            None => self.take_proof(remediation, &target).await,
        }
    }
}
