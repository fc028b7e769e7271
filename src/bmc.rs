//! `baremend bmc`: read or change a host's power through its BMC, the way remediation will.
//!
//! This is what an operator runs to check a BMC address and credentials before trusting
//! remediation with them: `off` and `on` return only once the new state is read back from the
//! BMC, and fail at the deadline naming the last state seen.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, PowerDriver, PowerOffMode, PowerState,
    TlsOptions, WaitOptions, wait_for_power_state,
};
use clap::{Args, Subcommand};

use crate::duration::parse_duration;
use crate::{Error, Result};

/// The environment variable a password may come from.
pub const PASSWORD_ENV: &str = "BMC_PASSWORD";

/// Arguments of `baremend bmc`.
#[derive(Debug, Args)]
pub struct BmcArgs {
    /// BMC address, as in a BareMetalHost: redfish://host/redfish/v1/Systems/1,
    /// redfish+http://…, idrac-redfish://…, ilo5-redfish://…, ipmi://host[:port].
    #[arg(long)]
    pub address: String,
    /// BMC account name.
    #[arg(long)]
    pub username: String,
    /// File holding the password (a trailing newline is ignored). Without it, the password
    /// comes from the BMC_PASSWORD environment variable. Never on the command line.
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// PEM file with the CA certificate(s) to trust instead of the system roots.
    #[arg(long, conflicts_with = "insecure")]
    pub ca_file: Option<PathBuf>,
    /// Do not verify the BMC's TLS certificate (explicit opt-in, for lab BMCs only).
    #[arg(long)]
    pub insecure: bool,
    /// How long `on`, `off` and `cycle` wait for the state to be read back.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The limit for one request to the BMC.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// What to do.
    #[command(subcommand)]
    pub action: BmcAction,
}

/// What `baremend bmc` does.
#[derive(Debug, Clone, Copy, Subcommand)]
pub enum BmcAction {
    /// Print the power state read from the BMC.
    Status,
    /// Power on and wait until On is read back.
    On,
    /// Power off (forced, or graceful with --graceful) and wait until Off is read back.
    Off {
        /// Ask the OS to shut down instead of cutting the power.
        #[arg(long)]
        graceful: bool,
    },
    /// Forced power off, confirmed, then power on, confirmed.
    Cycle,
    /// Print what the BMC is, the systems it lists and the power operations it advertises.
    Probe,
}

/// Runs `baremend bmc`, printing to stdout.
pub async fn run(args: BmcArgs) -> Result<()> {
    let password = read_password(args.password_file.as_deref())?;
    let ca_bundle_pem = args
        .ca_file
        .as_deref()
        .map(|path| read_file("CA file", path))
        .transpose()?;
    let address = BmcAddress::parse(&args.address)?;
    let mut config = DriverConfig::new(
        address,
        Credentials::new(args.username, password),
        TlsOptions {
            ca_bundle_pem,
            insecure: args.insecure,
        },
    );
    config.request_timeout = args.request_timeout;
    config.task_timeout = args.timeout;
    let driver = Connector::new().connect(config)?;
    let outcome = act(&driver, args.action, args.timeout).await;
    // Release the BMC session whatever happened: sessions are a scarce resource on BMCs.
    let _ = driver.close().await;
    outcome
}

async fn act(driver: &Arc<dyn PowerDriver>, action: BmcAction, timeout: Duration) -> Result<()> {
    match action {
        BmcAction::Status => {
            println!("{}", driver.power_state().await?);
        }
        BmcAction::On => {
            driver.power_on().await?;
            confirm(driver.as_ref(), PowerState::On, timeout).await?;
        }
        BmcAction::Off { graceful } => {
            let mode = if graceful {
                PowerOffMode::Graceful
            } else {
                PowerOffMode::Forced
            };
            driver.power_off(mode).await?;
            confirm(driver.as_ref(), PowerState::Off, timeout).await?;
        }
        BmcAction::Cycle => {
            driver.power_off(PowerOffMode::Forced).await?;
            confirm(driver.as_ref(), PowerState::Off, timeout).await?;
            driver.power_on().await?;
            confirm(driver.as_ref(), PowerState::On, timeout).await?;
        }
        BmcAction::Probe => {
            let report = driver.probe().await?;
            println!("bmc:              {}", driver.bmc());
            println!("protocol:         {}", report.protocol);
            println!("authentication:   {}", report.authentication);
            println!("service:          {}", report.service);
            println!("systems:          {}", report.systems.join(", "));
            println!("selected system:  {}", report.selected_system);
            println!("power operations: {}", report.power_operations.join(", "));
            if let Some(state) = report.power_state {
                println!("power state:      {state}");
            }
        }
    }
    Ok(())
}

/// Waits for `target`, printing every change of the state read.
pub async fn confirm(
    driver: &dyn PowerDriver,
    target: PowerState,
    timeout: Duration,
) -> Result<()> {
    let started = Instant::now();
    let mut last: Option<PowerState> = None;
    let options = WaitOptions {
        timeout,
        ..WaitOptions::default()
    };
    let state = wait_for_power_state(driver, &target, &options, |state| {
        if last.as_ref() != Some(state) {
            println!("{:>7.1}s  {state}", started.elapsed().as_secs_f64());
            last = Some(state.clone());
        }
    })
    .await?;
    println!(
        "{state} confirmed by the BMC after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::ReadFile {
        what,
        path: path.to_owned(),
        source,
    })
}

/// The password from the file, else from `BMC_PASSWORD`.
fn read_password(file: Option<&Path>) -> Result<String> {
    let password = match file {
        Some(path) => {
            let bytes = read_file("password file", path)?;
            let text = String::from_utf8(bytes).map_err(|_| Error::BadFile {
                what: "password file",
                path: path.to_owned(),
                reason: "it is not UTF-8 text".into(),
            })?;
            let text = text
                .strip_suffix('\n')
                .map(|t| t.strip_suffix('\r').unwrap_or(t))
                .unwrap_or(&text)
                .to_owned();
            if text.is_empty() {
                return Err(Error::BadFile {
                    what: "password file",
                    path: path.to_owned(),
                    reason: "it is empty".into(),
                });
            }
            text
        }
        None => std::env::var(PASSWORD_ENV).map_err(|_| Error::MissingPassword)?,
    };
    if password.is_empty() {
        return Err(Error::MissingPassword);
    }
    Ok(password)
}
