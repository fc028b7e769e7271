//! `baremend lab --scenario power-demo`: the drivers alone.
//!
//! Starts a simulated BMC in-process (Redfish, or IPMI with `--ipmi`; both in front of
//! the same simulated host), powers the host off and on through the driver exactly as
//! `baremend bmc` does, prints every state read back, and ends with a timing table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use baremend_drivers::{
    BmcAddress, Connector, Credentials, DriverConfig, PowerOffMode, PowerState, TlsOptions,
};
use baremend_sim::clock::{Clock, SystemClock};
use baremend_sim::ipmi::{IpmiSim, IpmiSimConfig};
use baremend_sim::redfish::{RedfishSim, RedfishSimConfig, TlsMode};

use super::LabArgs;
use crate::Result;
use crate::bmc::confirm;

/// Runs the power demo.
pub async fn run(args: &LabArgs) -> Result<()> {
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
    let ipmi = match (args.ipmi, sim.host("1")) {
        (true, Some(host)) => {
            let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
            Some(IpmiSim::start(IpmiSimConfig::default(), host.clone(), clock).await?)
        }
        _ => None,
    };
    let address = match &ipmi {
        Some(ipmi) => {
            println!("simulated IPMI BMC at {}", ipmi.bmc_address());
            ipmi.bmc_address()
        }
        None => {
            println!("simulated Redfish BMC at {}", sim.base_url());
            sim.bmc_address("1")
        }
    };
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

    println!();
    println!("| step | time |");
    println!("|---|---|");
    for (step, took) in &steps {
        println!("| {step} | {:.2} s |", took.as_secs_f64());
    }
    match &ipmi {
        Some(ipmi) => {
            let stats = ipmi.stats();
            println!(
                "\nIPMI sessions opened: {}; chassis controls sent: {:?}; sessions left open: {}",
                stats.sessions_activated, stats.chassis_controls, stats.open_sessions
            );
        }
        None => {
            let stats = sim.service().stats();
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
        }
    }
    Ok(())
}
