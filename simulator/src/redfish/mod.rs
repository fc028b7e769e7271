//! A simulated Redfish BMC service.
//!
//! It serves the resource set that the DMTF Redfish Service Validator, sushy (Ironic's client)
//! and our driver need: service root, OData documents, systems with `#ComputerSystem.Reset`
//! and its ActionInfo, session and account services with the three predefined roles, and task
//! monitors for asynchronous resets. Each system is a [`SimHost`]; its [`crate::host::Faults`]
//! make the service misbehave for requests that touch that system.

mod accounts;
mod auth;
mod control;
mod layer;
mod metadata;
mod respond;
mod routes;
mod service;
mod vendor;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use self::service::{
    Account, AuthSettings, Principal, RedfishService, Redirect, ResetRecord, Role, Stats,
};
pub use self::vendor::{Vendor, VendorPayloads};
use crate::clock::{Clock, SystemClock};
use crate::host::{Power, SimHost};
use crate::tls::{self, TlsIdentity};
use crate::{Error, Result};

/// Whether and how the service speaks TLS.
#[derive(Debug, Clone, Default)]
pub enum TlsMode {
    /// Plain HTTP.
    #[default]
    Plain,
    /// HTTPS with a certificate generated at start (for localhost and loopback addresses).
    SelfSigned,
    /// HTTPS with this certificate and key.
    Identity(TlsIdentity),
}

/// How to start a simulated Redfish BMC.
#[derive(Debug, Clone)]
pub struct RedfishSimConfig {
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// How many systems (ids `1`..=`systems`); ignored when hosts are given to
    /// [`RedfishSim::start_with_hosts`].
    pub systems: usize,
    /// The Administrator account.
    pub username: String,
    /// Its password.
    pub password: String,
    /// How long a power transition takes.
    pub power_delay: Duration,
    /// The power systems start in.
    pub initial_power: Power,
    /// TLS.
    pub tls: TlsMode,
}

impl Default for RedfishSimConfig {
    fn default() -> Self {
        RedfishSimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            systems: 1,
            username: "admin".into(),
            password: "password".into(),
            power_delay: Duration::from_millis(500),
            initial_power: Power::On,
            tls: TlsMode::Plain,
        }
    }
}

/// A running simulated Redfish BMC. Dropping it stops it.
#[derive(Debug)]
pub struct RedfishSim {
    service: Arc<RedfishService>,
    local_addr: SocketAddr,
    base_url: String,
    ca_pem: Option<String>,
    task: JoinHandle<()>,
}

/// The Redfish tree plus the control API, ready to serve (also usable without a socket, with
/// `tower::ServiceExt::oneshot`).
pub fn app(service: Arc<RedfishService>) -> Router {
    with_layers(
        service.clone(),
        routes::router(service).fallback(layer::not_found),
    )
}

/// A vendor's Redfish tree (see [`Vendor`]): the session and account services of [`app`], every
/// other path from the vendor's payloads.
fn vendor_app(service: Arc<RedfishService>, profile: vendor::Profile) -> Router {
    let tree = accounts::router()
        .with_state(service.clone())
        .fallback_service(vendor::router(service.clone(), profile));
    with_layers(service, tree)
}

/// The protocol layer around a Redfish tree, and the control API beside it.
fn with_layers(service: Arc<RedfishService>, tree: Router) -> Router {
    tree.layer(axum::middleware::from_fn_with_state(
        service.clone(),
        layer::redfish_layer,
    ))
    .merge(control::router(service))
}

impl RedfishSim {
    /// Starts a service with `config.systems` new hosts on the real clock.
    pub async fn start(config: RedfishSimConfig) -> Result<Self> {
        if config.systems == 0 {
            return Err(Error::Config("at least one system is needed".into()));
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let hosts = (1..=config.systems)
            .map(|n| {
                Arc::new(SimHost::new(
                    &n.to_string(),
                    config.initial_power,
                    config.power_delay,
                    clock.clone(),
                ))
            })
            .collect();
        Self::start_with_hosts(config, hosts, clock).await
    }

    /// Starts a service that plays `vendor` (one system, the vendor's own) from the payloads
    /// the test install step fetched ([`VendorPayloads::locate`]); [`Vendor::Generic`] is
    /// [`RedfishSim::start`].
    pub async fn start_vendor(config: RedfishSimConfig, vendor: Vendor) -> Result<Self> {
        if vendor == Vendor::Generic {
            return Self::start(config).await;
        }
        let profile = vendor::Profile::load(vendor, &VendorPayloads::locate()?)?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let host = Arc::new(SimHost::new(
            &profile.system_id,
            config.initial_power,
            config.power_delay,
            clock.clone(),
        ));
        let service = Self::new_service(&config, vec![host], clock)?;
        Self::serve(&config, service.clone(), vendor_app(service, profile)).await
    }

    /// Starts a service in front of existing hosts (shared with other simulated protocols).
    pub async fn start_with_hosts(
        config: RedfishSimConfig,
        hosts: Vec<Arc<SimHost>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let service = Self::new_service(&config, hosts, clock)?;
        Self::serve(&config, service.clone(), app(service)).await
    }

    fn new_service(
        config: &RedfishSimConfig,
        hosts: Vec<Arc<SimHost>>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<RedfishService>> {
        if config.username.is_empty() || config.username.contains(':') {
            return Err(Error::Config(
                "the username must be non-empty and contain no ':'".into(),
            ));
        }
        let admin = Account {
            username: config.username.clone(),
            password: config.password.clone(),
            role: Role::Administrator,
        };
        Ok(Arc::new(RedfishService::new(hosts, admin, clock)))
    }

    async fn serve(
        config: &RedfishSimConfig,
        service: Arc<RedfishService>,
        app: Router,
    ) -> Result<Self> {
        let (acceptor, ca_pem) = match &config.tls {
            TlsMode::Plain => (None, None),
            TlsMode::SelfSigned => {
                let identity = tls::self_signed(tls::LOCAL_NAMES)?;
                (Some(tls::acceptor(&identity)?), Some(identity.cert_pem))
            }
            TlsMode::Identity(identity) => (Some(tls::acceptor(identity)?), None),
        };
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Listen {
                address: config.listen.to_string(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| Error::Listen {
            address: config.listen.to_string(),
            source,
        })?;
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let base_url = format!("{scheme}://{local_addr}");
        let task = crate::server::spawn(listener, acceptor, app);
        Ok(RedfishSim {
            service,
            local_addr,
            base_url,
            ca_pem,
            task,
        })
    }

    /// `http(s)://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The socket address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The metal3-style BMC address of a system, e.g.
    /// `redfish+http://127.0.0.1:PORT/redfish/v1/Systems/1`.
    pub fn bmc_address(&self, system_id: &str) -> String {
        let scheme = if self.base_url.starts_with("https") {
            "redfish+https"
        } else {
            "redfish+http"
        };
        format!(
            "{scheme}://{}/redfish/v1/Systems/{system_id}",
            self.local_addr
        )
    }

    /// The generated certificate when started with [`TlsMode::SelfSigned`].
    pub fn self_signed_cert_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The service, to change accounts, auth switches and read statistics.
    pub fn service(&self) -> &Arc<RedfishService> {
        &self.service
    }

    /// The host behind a system id.
    pub fn host(&self, system_id: &str) -> Option<&Arc<SimHost>> {
        self.service.host(system_id)
    }

    /// Stops serving and closes every connection.
    pub fn shutdown(self) {}
}

impl Drop for RedfishSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}
