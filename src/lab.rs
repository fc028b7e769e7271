//! `baremend lab`: the story on simulated hardware, in one process.
//!
//! For now it starts a simulated Redfish BMC in-process, powers its host off and on through the
//! Redfish driver exactly as `baremend bmc` does, prints every state read back, and ends with a
//! timing table.

use std::time::{Duration, Instant};

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, PowerOffMode, PowerState, TlsOptions,
};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode};
use clap::Args;

use crate::Result;
use crate::bmc::confirm;
use crate::duration::parse_duration;

/// Arguments of `baremend lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// How long the simulated host takes to change power.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub power_delay: Duration,
    /// Serve the simulated BMC over HTTPS (self-signed; the driver trusts that certificate).
    #[arg(long)]
    pub tls: bool,
}

/// Runs the lab.
pub async fn run(args: LabArgs) -> Result<()> {
    let sim = RedfishSim::start(RedfishSimConfig {
        power_delay: args.power_delay,
        tls: if args.tls {
            TlsMode::SelfSigned
        } else {
            TlsMode::Plain
        },
        ..RedfishSimConfig::default()
    })
    .await?;
    let address = sim.bmc_address("1");
    println!("simulated Redfish BMC at {}", sim.base_url());
    let tls = TlsOptions {
        ca_bundle_pem: sim
            .self_signed_cert_pem()
            .map(|pem| pem.as_bytes().to_vec()),
        insecure: false,
    };
    let config = DriverConfig::new(
        BmcAddress::parse(&address)?,
        Credentials::new("admin", "password"),
        tls,
    );
    let driver = Connector::new().connect(config)?;
    let timeout = args.power_delay * 5 + Duration::from_secs(10);
    let mut steps: Vec<(&str, Duration)> = Vec::new();

    println!("host power state: {}", driver.power_state().await?);
    let started = Instant::now();
    println!("powering off ({address})");
    driver.power_off(PowerOffMode::Forced).await?;
    confirm(driver.as_ref(), PowerState::Off, timeout).await?;
    steps.push(("power off, confirmed", started.elapsed()));

    let started = Instant::now();
    println!("powering on");
    driver.power_on().await?;
    confirm(driver.as_ref(), PowerState::On, timeout).await?;
    steps.push(("power on, confirmed", started.elapsed()));
    driver.close().await?;

    let stats = sim.service().stats();
    println!();
    println!("| step | time |");
    println!("|---|---|");
    for (step, took) in &steps {
        println!("| {step} | {:.2} s |", took.as_secs_f64());
    }
    println!(
        "\nBMC requests: {}; resets sent: {}; sessions left open: {}",
        stats.requests,
        stats
            .resets
            .iter()
            .map(|r| r.reset_type.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        stats.open_sessions
    );
    Ok(())
}
