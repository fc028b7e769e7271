//! The host's power, as the strategies (`strategy`) reach it: where a host's BMC is and how to
//! connect to it, its reads, the BareMetalHost read fresh, what a remediation means to fence,
//! and the BMC proof kept for the release a moment later.

use std::sync::Arc;
use std::time::Duration;

use baremend_drivers::{
    BmcAddress, CredentialUsed, DriverConfig, DriverKind, PowerDriver, PowerState, TlsOptions,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::ResourceExt;
use kube::api::Api;

use crate::api::annotations::REBOOT_PREFIX;
use crate::api::slim;
use crate::api::{CaBundleKind, CaBundleRef, FenceStrategyName, Remediation};
use crate::metrics::power::HostSeries;
use crate::remediation::decide::bmc_trust::{Reader, Request, Transport, transport};
use crate::remediation::decide::fence::{
    BMC_READS, BareMetalHostView, ConfirmedOff, Corroboration, FenceTarget, FencedHost,
    NodeIdentity, NotFenced,
};
use crate::remediation::decide::observe::{
    self, BmcRef, CaBundle, HostRef, bare_metal_host_bmc, bare_metal_host_view,
};
use crate::remediation::decide::plan::Persisted;
use crate::remediation::evidence::bmc::BmcLocator;
use crate::remediation::evidence::capi::CapiHosts;
use crate::remediation::pass::Pass;
use crate::remediation::world::metered::Metered;
use crate::runtime::clock::since_epoch;
use crate::runtime::read::GetPresent;
use crate::{Error, Result};

/// Everything needed to connect to `bmc`, read from the cluster now: its address parsed, the
/// credentials from its Secret and the CA bundle from its ConfigMap or Secret (all in the
/// namespace of the object that named the BMC, [`BmcRef::namespace`], else in `namespace`).
/// Errors name the object and the field at fault, never a value.
///
/// Every login goes through here — fencing, corroborating an operator, the power monitor,
/// the probes — so a BMC reached over plain HTTP or unverified TLS gets no credentials unless
/// the policy allows insecure BMCs (`allow_insecure`): the Secret is not even read.
pub async fn bmc_driver_config(
    client: &kube::Client,
    namespace: &str,
    bmc: &BmcRef,
    allow_insecure: bool,
) -> std::result::Result<DriverConfig, String> {
    let address = BmcAddress::parse(&bmc.address).map_err(|e| e.to_string())?;
    if let Transport::Forgeable(why) = transport(&address, bmc.tls.insecure)
        && !allow_insecure
    {
        return Err(format!(
            "BMC {address}: {why}; the RemediationPolicy does not allow insecure BMCs (allowInsecureBmc), so no credentials are sent to it"
        ));
    }
    // The Secret is beside the object that named the BMC (a detached BareMetalHost may be in
    // another namespace than its Machine): never a Secret of the caller's choosing elsewhere.
    let namespace = bmc.namespace.as_deref().unwrap_or(namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get(&bmc.credentials_name)
        .await
        .map_err(|e| format!("Secret {}: {}", bmc.credentials_name, crate::kube_text(&e)))?;
    let credentials = observe::secret_credentials(&secret)
        .map_err(|e| format!("Secret {}: {e}", bmc.credentials_name))?;
    let ca_bundle_pem = match &bmc.tls.ca_bundle {
        None => None,
        Some(CaBundle::Inline(pem)) => Some(
            observe::pem_certificates(pem.clone().into_bytes())
                .map_err(|e| format!("caBundle {e}"))?,
        ),
        Some(CaBundle::Named(named)) => Some(read_ca_bundle(client, namespace, named).await?),
    };
    let tls = TlsOptions {
        ca_bundle_pem,
        insecure: bmc.tls.insecure,
    };
    Ok(DriverConfig::new(address, credentials, tls))
}

/// The PEM certificates a [`CaBundleRef`] names, read now.
async fn read_ca_bundle(
    client: &kube::Client,
    namespace: &str,
    named: &CaBundleRef,
) -> std::result::Result<Vec<u8>, String> {
    let unusable = |e: &dyn std::fmt::Display| {
        format!("CA bundle {} {}: {e}", named.kind.as_str(), named.name)
    };
    let client = client.clone();
    let pem = match named.kind {
        CaBundleKind::ConfigMap => Api::<ConfigMap>::namespaced(client, namespace)
            .get(&named.name)
            .await
            .map_err(|e| crate::kube_text(&e))
            .map(|config_map| observe::config_map_ca_bundle(&config_map, &named.key)),
        CaBundleKind::Secret => Api::<Secret>::namespaced(client, namespace)
            .get(&named.name)
            .await
            .map_err(|e| crate::kube_text(&e))
            .map(|secret| observe::secret_ca_bundle(&secret, &named.key)),
    };
    pem.map_err(|e| unusable(&e))?.map_err(|e| unusable(&e))
}

/// The driver kind as metrics and logs name it.
pub fn driver_kind(address: &BmcAddress) -> &'static str {
    match address.kind() {
        DriverKind::Redfish => "redfish",
        DriverKind::Ipmi => "ipmi",
    }
}

/// The power-state series of a host whose BMC is read directly. The power monitor and the
/// host's remediation name it alike, so the remediation's reads carry on the monitor's series.
pub fn bmc_series(machine: String, node: Option<String>, address: &BmcAddress) -> HostSeries {
    HostSeries {
        machine,
        node: node.unwrap_or_default(),
        bmc: address.to_string(),
        driver: driver_kind(address).into(),
    }
}

/// The power-state series of a host its BareMetal Operator manages: its reading is the
/// BareMetalHost's `status.poweredOn`, not a BMC of ours.
pub fn operator_series(machine: String, node: Option<String>, host: &HostRef) -> HostSeries {
    HostSeries {
        machine,
        node: node.unwrap_or_default(),
        bmc: format!("BareMetalHost {host}"),
        driver: "baremetalhost".into(),
    }
}

/// The power a BareMetalHost's `status.poweredOn` reports (None: not reported).
pub fn operator_power(powered_on: Option<bool>) -> Option<PowerState> {
    powered_on.map(|on| if on { PowerState::On } else { PowerState::Off })
}

/// A BareMetalHost read now, with the BMC it names.
pub(in crate::remediation) struct FreshHost {
    /// What it says.
    pub(in crate::remediation) view: BareMetalHostView,
    /// The BMC its `spec.bmc` names, or why none is usable.
    pub(in crate::remediation) bmc: std::result::Result<BmcRef, String>,
    /// Its namespace, where its BMC's Secret is.
    pub(in crate::remediation) namespace: String,
}

/// A proof's reads of a BMC and the ledger's word on them.
pub(in crate::remediation) struct BmcProofReads {
    /// What each read said, oldest first.
    pub(in crate::remediation) reads: Vec<PowerState>,
    /// Nothing against them, or why the BMC is untrustworthy.
    pub(in crate::remediation) witnessed: std::result::Result<(), String>,
}

/// Why a BMC gave no proof reads.
pub(in crate::remediation) enum BmcReadRefused {
    /// It is untrustworthy now (the mark, in words).
    Distrusted(String),
    /// A read failed.
    Failed(String),
}

/// A BMC connected for a remediation: its driver (metered, witnessed) and what the proof and
/// the metrics say of it.
pub(in crate::remediation) struct DirectBmc {
    pub(in crate::remediation) driver: Arc<dyn PowerDriver>,
    /// The address, without credentials.
    pub(in crate::remediation) address: String,
    /// The system path the address names, if any.
    pub(in crate::remediation) system: Option<String>,
    /// The host's power-state series.
    pub(in crate::remediation) series: HostSeries,
    /// The Secret holding its credentials.
    pub(in crate::remediation) credentials_name: String,
    /// Whether someone on the path could forge its answers.
    pub(in crate::remediation) transport: Transport,
    /// Whether its reads are the host's power-state series: not for the BMC of a host its
    /// operator manages, whose series is the operator's status (`monitor`).
    pub(in crate::remediation) feeds_series: bool,
}

/// How old BMC reads proving a host off may be when they authorize its Node's release.
const PROOF_REUSE: Duration = Duration::from_secs(1);

/// The pass's power reads and the host's BMC: the fencing target, the operator's and the direct
/// BMC, the recent proofs. Made by `Power::of(pass)` where needed, so that a call names the
/// file it goes to.
#[derive(Clone, Copy)]
pub(crate) struct Power<'p> {
    pass: &'p Pass,
}

impl<'p> Power<'p> {
    /// The Power of `pass`: its methods read and act through it.
    pub(crate) fn of(pass: &'p Pass) -> Self {
        Power { pass }
    }

    /// What the remediation means to fence with `strategy`: the host it names and the Node
    /// the proof may release (by the UID recorded at the power-off request, else the cached
    /// Node's).
    pub(in crate::remediation) fn fence_target(
        self,
        remediation: &Remediation,
        strategy: FenceStrategyName,
        node: Option<&Node>,
    ) -> FenceTarget {
        let recorded = remediation.status.as_ref().and_then(|s| s.node_uid.clone());
        let node = remediation.spec.node_name.as_ref().and_then(|name| {
            let uid = recorded
                .or_else(|| node.filter(|n| n.name_any() == *name).and_then(|n| n.uid()))?;
            Some(NodeIdentity {
                name: name.clone(),
                uid,
                cluster: self.pass.node_cluster(remediation),
            })
        });
        FenceTarget {
            strategy,
            host: self.pass.host(remediation).map(|(host_ref, _)| host_ref),
            node,
            allow_insecure: self.pass.policy.allow_insecure_bmc,
        }
    }

    /// The BareMetalHost the target names, read from the API server now, and the BMC its
    /// `spec.bmc` names (or why none is usable).
    pub(in crate::remediation) async fn fresh_host(
        self,
        target: &FenceTarget,
    ) -> std::result::Result<FreshHost, NotFenced> {
        let Some(host_ref) = &target.host else {
            return Err(NotFenced::Untrustworthy(
                match self
                    .pass
                    .subject
                    .machine()
                    .map(|machine| CapiHosts::of(self.pass).openshift_machine_host(machine))
                {
                    Some(Err(unusable)) => format!("Machine {}: {unusable}", self.pass.name),
                    Some(Ok(_)) => "the Machine names no BareMetalHost".into(),
                    None => format!(
                        "Node {} has no Machine, hence no BareMetalHost: only its HostBmc's BMC can fence it",
                        self.pass.name
                    ),
                },
            ));
        };
        let hosts: Api<slim::BareMetalHost> =
            Api::namespaced(self.pass.context.clients.kube.clone(), &host_ref.namespace);
        let host = hosts
            .get_present(&host_ref.name)
            .await
            .map_err(|e| NotFenced::NotYet(format!("cannot read BareMetalHost {host_ref}: {e}")))?
            .ok_or_else(|| {
                NotFenced::Untrustworthy(format!("BareMetalHost {host_ref} not found"))
            })?;
        let view = bare_metal_host_view(&host, &self.pass.policy.reboot_key);
        self.show_operator_power(host_ref, view.powered_on());
        Ok(FreshHost {
            view,
            bmc: bare_metal_host_bmc(&host).map_err(|e| format!("BareMetalHost {host_ref}: {e}")),
            namespace: host_ref.namespace.clone(),
        })
    }

    /// While the power monitor runs, the operator's reading the remediation just fetched goes
    /// to the host's series: the monitor reads that status from its cache once an interval,
    /// and a host off for less than one would never show off while operators look at it.
    fn show_operator_power(self, host: &HostRef, powered_on: Option<bool>) {
        if !self.pass.context.settings.power_monitored || self.pass.subject.machine().is_none() {
            return;
        }
        let series = operator_series(self.machine_key(), self.pass.subject_node(), host);
        let state = operator_power(powered_on);
        self.pass
            .context
            .metrics
            .power
            .set_host_power(&series, state);
    }

    /// Our own reads of the BMC a BareMetalHost names, read-only, to hold its operator's Off
    /// to the direct rule (`fence::Corroboration`). A BMC that cannot be read from here
    /// leaves the operator's word alone, and says why.
    pub(in crate::remediation) async fn corroborate(self, fresh: &FreshHost) -> Corroboration {
        let bmc = match &fresh.bmc {
            Ok(bmc) => bmc,
            Err(why) => return Corroboration::Unavailable(why.clone()),
        };
        let key = self.operator_bmc_key();
        let direct = match self.connect_bmc(bmc, &fresh.namespace, &key, false).await {
            Ok(direct) => direct,
            Err(why) => return Corroboration::Unavailable(why.to_string()),
        };
        match self.read_bmc_proof(&direct).await {
            Ok(BmcProofReads { reads, witnessed }) => Corroboration::Read {
                address: direct.address,
                reads,
                witnessed,
            },
            Err(BmcReadRefused::Distrusted(mark)) => Corroboration::Read {
                address: direct.address,
                reads: Vec::new(),
                witnessed: Err(mark),
            },
            Err(BmcReadRefused::Failed(why)) => Corroboration::Unavailable(why),
        }
    }

    /// [`BMC_READS`] reads of `bmc` in a row, ended early by one that is not Off, and
    /// what every reading of it in the process from a window before the first says of them;
    /// none while the BMC is untrustworthy.
    pub(in crate::remediation) async fn read_bmc_proof(
        self,
        bmc: &DirectBmc,
    ) -> std::result::Result<BmcProofReads, BmcReadRefused> {
        let ledger = &self.pass.context.witness.ledger;
        let first_read = since_epoch(self.pass.context.clock.now());
        if let Some(mark) = ledger.distrusted(&bmc.address, first_read) {
            return Err(BmcReadRefused::Distrusted(mark.to_string()));
        }
        let mut reads = Vec::with_capacity(BMC_READS);
        while reads.len() < BMC_READS {
            let read = self
                .read_power(bmc)
                .await
                .map_err(|error| BmcReadRefused::Failed(format!("BMC read failed: {error}")))?;
            let off = read == PowerState::Off;
            reads.push(read);
            if !off {
                break;
            }
        }
        let now = since_epoch(self.pass.context.clock.now());
        let witnessed = ledger
            .check_proof(&bmc.address, first_read, now)
            .map_err(|mark| mark.to_string());
        Ok(BmcProofReads { reads, witnessed })
    }

    /// Tells the ledger that we asked the operator to power the host off (`off`) or on: its
    /// BMC's readings before that no longer count against the host's new state, and those
    /// after an Off request are judged (`bmc_trust`).
    pub(in crate::remediation) fn note_operator_request(
        self,
        remediation: &Remediation,
        off: bool,
    ) {
        let Some(address) = BmcLocator::of(self.pass).operator_bmc_address(remediation) else {
            return;
        };
        let request = if off { Request::Off } else { Request::On };
        let now = since_epoch(self.pass.context.clock.now());
        self.pass
            .context
            .witness
            .ledger
            .requested(&address.to_string(), request, now);
    }

    /// The BMC for direct fencing: from a `HostBmc` naming the Machine or Node, else from an
    /// unmanaged (detached) BareMetalHost. A managed host is refused: its operator would power
    /// it back on.
    pub(in crate::remediation) async fn direct_bmc(
        self,
        remediation: &Remediation,
    ) -> Result<DirectBmc> {
        let invalid = |reason: String| Error::Invalid {
            object: format!("Machine {}/{}", self.pass.namespace, self.pass.name),
            reason,
        };
        let bmc = BmcLocator::of(self.pass)
            .locate_direct_bmc(remediation)
            .map_err(|e| invalid(e.to_string()))?;
        self.connect_bmc(&bmc, &self.pass.namespace, &self.machine_key(), true)
            .await
    }

    /// A driver for `bmc`, its credentials read from `namespace`, cached under `key`, metered
    /// and witnessed as a fencing reader; its reads go to the host's power-state series when
    /// `feeds_series`.
    async fn connect_bmc(
        self,
        bmc: &BmcRef,
        namespace: &str,
        key: &str,
        feeds_series: bool,
    ) -> Result<DirectBmc> {
        let allow_insecure = self.pass.policy.allow_insecure_bmc;
        let config = bmc_driver_config(
            &self.pass.context.clients.kube,
            namespace,
            bmc,
            allow_insecure,
        )
        .await
        .map_err(|reason| Error::Invalid {
            object: format!("Machine {}/{}", self.pass.namespace, self.pass.name),
            reason,
        })?;
        let kind = driver_kind(&config.address);
        let shown = config.address.to_string();
        let system = config.address.system_path().map(str::to_string);
        let transport = transport(&config.address, bmc.tls.insecure);
        let machine = self
            .pass
            .subject
            .machine()
            .map(|_| format!("{}/{}", self.pass.namespace, self.pass.name));
        let series = bmc_series(
            machine.unwrap_or_default(),
            self.pass.subject_node(),
            &config.address,
        );
        let driver = self.pass.context.clients.bmc_drivers.get_or_connect(
            key,
            config,
            &self.pass.context.clients.connector,
        )?;
        let driver = Metered::wrap(driver, kind, self.pass.context.metrics.power.clone());
        let driver = self
            .pass
            .context
            .witness
            .wrap(driver, shown.clone(), Reader::Fencing);
        Ok(DirectBmc {
            driver,
            address: shown,
            system,
            series,
            credentials_name: bmc.credentials_name.clone(),
            transport,
            feeds_series,
        })
    }

    /// Reads the host's power through its BMC. While the power monitor runs, the reading
    /// (or `unknown` when it failed) goes to the host's power-state series (unless the BMC
    /// only corroborates its operator, whose status is the series): the monitor
    /// leaves a host under remediation to these reads, so its series stays current while
    /// operators look at it most.
    pub(in crate::remediation) async fn read_power(
        self,
        bmc: &DirectBmc,
    ) -> baremend_drivers::Result<PowerState> {
        let read = bmc.driver.power_state().await;
        if self.pass.context.settings.power_monitored && bmc.feeds_series {
            let metrics = &self.pass.context.metrics.power;
            metrics.set_host_power(&bmc.series, read.as_ref().ok().cloned());
            metrics.set_credential_used(&bmc.series, bmc.driver.credential_used());
        }
        read
    }

    /// A Warning when the BMC accepted only the previous password of its Secret: the rotation
    /// is half done, and the previous password must stay until the BMC has the new one.
    pub(in crate::remediation) async fn note_previous_password(
        self,
        remediation: &Remediation,
        bmc: &DirectBmc,
    ) {
        if bmc.driver.credential_used() != Some(CredentialUsed::Previous) {
            return;
        }
        let note = format!(
            "BMC {} refused the password of Secret {}/{} and accepted its {}: set the BMC's password to the Secret's password, then remove {}",
            bmc.address,
            self.pass.namespace,
            bmc.credentials_name,
            observe::PREVIOUS_PASSWORD_KEY,
            observe::PREVIOUS_PASSWORD_KEY,
        );
        self.pass
            .event(
                remediation,
                crate::runtime::events::Severity::Warning,
                crate::api::EventReason::BmcPreviousPasswordUsed,
                note,
            )
            .await;
    }

    /// The key of this Machine's cached BMC driver.
    pub(in crate::remediation) fn machine_key(self) -> String {
        format!("{}/{}", self.pass.namespace, self.pass.name)
    }

    /// The key of the cached driver that corroborates its operator's readings.
    pub(in crate::remediation) fn operator_bmc_key(self) -> String {
        format!("{}/{}#operator-bmc", self.pass.namespace, self.pass.name)
    }

    pub(in crate::remediation) fn reboot_annotation(self) -> String {
        format!("{REBOOT_PREFIX}{}", self.pass.policy.reboot_key)
    }

    /// The strategies this remediation may have asked: the policy's up to the one in use (all
    /// of them when the policy no longer names it), and the one in use.
    pub(in crate::remediation) fn strategies_asked(
        self,
        remediation: &Remediation,
        state: &Persisted,
    ) -> Vec<FenceStrategyName> {
        let upto = state
            .strategy
            .map_or(self.pass.policy.strategies.len(), |index| index + 1);
        let mut asked: Vec<FenceStrategyName> = self
            .pass
            .policy
            .strategies
            .iter()
            .take(upto)
            .copied()
            .collect();
        let in_use = self.pass.strategy_in_use(remediation);
        if !asked.contains(&in_use) {
            asked.push(in_use);
        }
        asked
    }

    /// Keeps a BMC proof this pass took and did not spend, for the release a moment later.
    pub(in crate::remediation) fn remember_bmc_proof(self, confirmed: ConfirmedOff) {
        // Only BMC reads are kept: a BareMetalHost is read again for the release.
        if !matches!(confirmed.host(), FencedHost::Bmc { .. }) {
            return;
        }
        let now = since_epoch(self.pass.context.clock.now());
        *self
            .pass
            .recent_proof
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((confirmed, now));
    }

    /// The BMC proof this pass took, if it is at most [`PROOF_REUSE`] old, for the same
    /// strategy and Node as `target`, and no reading of its BMC since contradicts it (another
    /// reader may have read it in the meantime). Reading the BMC twice more for the release,
    /// milliseconds after two reads proved it off, would only load a fragile BMC; anything
    /// older (a later pass, a restart) is read again. The proof is taken out: it is spent once.
    pub(in crate::remediation) fn recent_bmc_proof(
        self,
        target: &FenceTarget,
    ) -> Option<ConfirmedOff> {
        let now = since_epoch(self.pass.context.clock.now());
        let (confirmed, at) = self
            .pass
            .recent_proof
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        let fits = now.saturating_sub(at) <= PROOF_REUSE
            && confirmed.strategy() == target.strategy
            && confirmed.node() == target.node.as_ref();
        let uncontradicted = match confirmed.host() {
            FencedHost::Bmc { address, .. } => self
                .pass
                .context
                .witness
                .ledger
                .check_proof(address, at, now)
                .is_ok(),
            FencedHost::BareMetalHost { .. } => false,
        };
        (fits && uncontradicted).then_some(confirmed)
    }
}
