//! `baremend bmc`: read or change a host's power through its BMC, the way remediation will.
//!
//! This is what an operator runs to check a BMC address and credentials before trusting
//! remediation with them: `off` and `on` return only once the new state is read back from the
//! BMC, and fail at the deadline naming the last state seen. Every request is tried again
//! within `--timeout` while the BMC is busy, failing or unreachable, after the `Retry-After` it
//! asks for; refused credentials end the command at once. During a password rotation,
//! `--previous-password-file` gives the password the BMC may still have: it is tried once
//! when the BMC refuses the current one, and the output says when it was the one that worked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::ipmi::PrivilegeLevel;
use baremend_drivers::ipmi::wire::crypto::CipherSuite;
use baremend_drivers::{
    BmcAddress, Connector, CredentialUsed, Credentials, DriverConfig, PowerDriver, PowerOffMode,
    PowerState, RetryPolicy, TlsOptions, WaitOptions, power_off_confirmed, retry_observed,
    wait_for_power_state,
};
use clap::{Args, Subcommand, ValueEnum};

use crate::duration::parse_duration;
use crate::{LocalError, Result};

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
    /// File holding the previous password of a rotation (the Secret's previousPassword): tried
    /// once when the BMC refuses the password, never more.
    #[arg(long)]
    pub previous_password_file: Option<PathBuf>,
    /// PEM file with the CA certificate(s) to trust instead of the system roots.
    #[arg(long, conflicts_with = "insecure")]
    pub ca_file: Option<PathBuf>,
    /// Do not verify the BMC's TLS certificate (explicit opt-in, for lab BMCs only).
    #[arg(long)]
    pub insecure: bool,
    /// How long each step may take: a request to the BMC, tried again while the BMC answers
    /// busy, 5xx or not at all (after its Retry-After, if it sends one), and the wait until
    /// `on`, `off` and `cycle` read the new state back. Refused credentials are never retried.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// The limit for one Redfish request to the BMC.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// IPMI: the session privilege (OPERATOR is enough for power control).
    #[arg(long, value_enum, default_value = "operator")]
    pub ipmi_privilege: IpmiPrivilege,
    /// IPMI: cipher suites allowed, in order of preference (3 and 17 are supported).
    #[arg(long, value_delimiter = ',', default_value = "17,3", value_parser = parse_suite)]
    pub ipmi_cipher_suites: Vec<CipherSuite>,
    /// IPMI: how long to wait for each reply before retrying with a new session.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub ipmi_reply_timeout: Duration,
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
        /// With --graceful: cut the power if Off is not read within this time (a hung OS
        /// ignores shutdown requests). Without it, wait up to --timeout for the OS.
        #[arg(long, requires = "graceful", value_parser = parse_duration)]
        escalate_after: Option<Duration>,
    },
    /// Forced power off, confirmed, then power on, confirmed.
    Cycle,
    /// Print what the BMC is, the systems it lists and the power operations it advertises.
    Probe,
}

/// Runs `baremend bmc`, printing to stdout.
pub async fn run(args: BmcArgs) -> Result<()> {
    let password = read_password(args.password_file.as_deref())?;
    let mut credentials = Credentials::new(args.username, password);
    if let Some(path) = args.previous_password_file.as_deref() {
        credentials =
            credentials.with_previous(read_password_file("previous password file", path)?);
    }
    let ca_bundle_pem = args
        .ca_file
        .as_deref()
        .map(|path| read_file("CA file", path))
        .transpose()?;
    let address = BmcAddress::parse(&args.address)?;
    let mut config = DriverConfig::new(
        address,
        credentials,
        TlsOptions {
            ca_bundle_pem,
            insecure: args.insecure,
        },
    );
    config.request_timeout = args.request_timeout;
    config.task_timeout = args.timeout;
    config.ipmi.privilege = args.ipmi_privilege.into();
    config.ipmi.cipher_suites = args.ipmi_cipher_suites;
    config.ipmi.reply_timeout = args.ipmi_reply_timeout;
    let driver = Connector::new().connect(config)?;
    let outcome = act(&driver, args.action, args.timeout).await;
    if driver.credential_used() == Some(CredentialUsed::Previous) {
        eprintln!(
            "warning: the BMC refused the password and accepted the previous one: set the BMC's password, then drop the previous one"
        );
    }
    // Release the BMC session whatever happened: sessions are a scarce resource on BMCs.
    let _ = driver.close().await;
    outcome
}

/// Sends one request, tried again within `timeout` while the BMC answers with a retryable
/// error (see [`baremend_drivers::retry`]); each retry is announced as a warning.
async fn retried<T, Fut>(
    driver: &dyn PowerDriver,
    timeout: Duration,
    operation: &str,
    attempt: impl FnMut() -> Fut,
) -> Result<T>
where
    Fut: Future<Output = baremend_drivers::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let policy = RetryPolicy::default();
    // Shown at the default log level, so that a long wait is never silent.
    let warn = |error: &baremend_drivers::Error, pause: Duration| {
        tracing::warn!("{error}; trying again in {:.1}s", pause.as_secs_f64());
    };
    let outcome = retry_observed(
        &policy,
        Some(deadline),
        driver.bmc(),
        operation,
        warn,
        attempt,
    );
    Ok(outcome.await?)
}

async fn act(driver: &Arc<dyn PowerDriver>, action: BmcAction, timeout: Duration) -> Result<()> {
    let driver = driver.as_ref();
    match action {
        BmcAction::Status => {
            let state = retried(driver, timeout, "power state read", || driver.power_state());
            println!("{}", state.await?);
        }
        BmcAction::On => {
            retried(driver, timeout, "power on", || driver.power_on()).await?;
            confirm(driver, PowerState::On, timeout).await?;
        }
        BmcAction::Off {
            graceful,
            escalate_after,
        } => {
            let graceful_for = graceful.then_some(escalate_after.unwrap_or(timeout));
            let started = Instant::now();
            let mut printer = StatePrinter::new();
            let options = WaitOptions {
                timeout,
                ..WaitOptions::default()
            };
            let outcome =
                power_off_confirmed(driver, graceful_for, &options, |s| printer.show(s)).await?;
            if outcome.escalated {
                println!("graceful shutdown did not finish in time: the power was cut");
            }
            println!(
                "Off confirmed by the BMC after {:.1}s",
                started.elapsed().as_secs_f64()
            );
        }
        BmcAction::Cycle => {
            let forced = || driver.power_off(PowerOffMode::Forced);
            retried(driver, timeout, "power off", forced).await?;
            confirm(driver, PowerState::Off, timeout).await?;
            retried(driver, timeout, "power on", || driver.power_on()).await?;
            confirm(driver, PowerState::On, timeout).await?;
        }
        BmcAction::Probe => {
            let report = retried(driver, timeout, "probe", || driver.probe()).await?;
            println!("bmc:              {}", driver.bmc());
            println!("protocol:         {}", report.protocol);
            println!("authentication:   {}", report.authentication);
            if let Some(used) = driver.credential_used() {
                println!("password used:    {used}");
            }
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

/// Prints each new state read, with the time since the printer was created.
struct StatePrinter {
    started: Instant,
    last: Option<PowerState>,
}

impl StatePrinter {
    fn new() -> Self {
        StatePrinter {
            started: Instant::now(),
            last: None,
        }
    }

    fn show(&mut self, state: &PowerState) {
        if self.last.as_ref() != Some(state) {
            println!("{:>7.1}s  {state}", self.started.elapsed().as_secs_f64());
            self.last = Some(state.clone());
        }
    }
}

/// Waits for `target`, printing every change of the state read.
pub async fn confirm(
    driver: &dyn PowerDriver,
    target: PowerState,
    timeout: Duration,
) -> Result<()> {
    let started = Instant::now();
    let mut printer = StatePrinter::new();
    let options = WaitOptions {
        timeout,
        ..WaitOptions::default()
    };
    let state = wait_for_power_state(driver, &target, &options, |s| printer.show(s)).await?;
    println!(
        "{state} confirmed by the BMC after {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// IPMI session privilege levels offered on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IpmiPrivilege {
    /// USER: reading only; power control will be refused.
    User,
    /// OPERATOR: enough for chassis power control.
    Operator,
    /// ADMINISTRATOR.
    Administrator,
}

impl From<IpmiPrivilege> for PrivilegeLevel {
    fn from(level: IpmiPrivilege) -> PrivilegeLevel {
        match level {
            IpmiPrivilege::User => PrivilegeLevel::User,
            IpmiPrivilege::Operator => PrivilegeLevel::Operator,
            IpmiPrivilege::Administrator => PrivilegeLevel::Administrator,
        }
    }
}

fn parse_suite(text: &str) -> std::result::Result<CipherSuite, String> {
    text.trim()
        .parse::<u8>()
        .ok()
        .and_then(CipherSuite::from_id)
        .ok_or_else(|| format!("unsupported cipher suite {text:?} (supported: 3, 17)"))
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>> {
    let read = std::fs::read(path).map_err(|source| LocalError::ReadFile {
        what,
        path: path.to_owned(),
        source,
    })?;
    Ok(read)
}

/// A password from a file: UTF-8, one trailing newline dropped, not empty.
fn read_password_file(what: &'static str, path: &Path) -> Result<String> {
    let bytes = read_file(what, path)?;
    let text = String::from_utf8(bytes).map_err(|_| LocalError::BadFile {
        what,
        path: path.to_owned(),
        reason: "it is not UTF-8 text".into(),
    })?;
    let text = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text)
        .to_owned();
    if text.is_empty() {
        return Err(LocalError::BadFile {
            what,
            path: path.to_owned(),
            reason: "it is empty".into(),
        }
        .into());
    }
    Ok(text)
}

/// The password from the file, else from `BMC_PASSWORD`.
fn read_password(file: Option<&Path>) -> Result<String> {
    let password = match file {
        Some(path) => read_password_file("password file", path)?,
        None => std::env::var(PASSWORD_ENV).map_err(|_| LocalError::MissingPassword)?,
    };
    if password.is_empty() {
        return Err(LocalError::MissingPassword.into());
    }
    Ok(password)
}
