//! The `baremend` command. Thin: parsing and dispatch; the work is in the library.

use std::process::ExitCode;

use baremend::api::CrdsArgs;
use baremend::bmc::BmcArgs;
#[cfg(feature = "lab")]
use baremend::lab::LabArgs;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "baremend",
    version,
    about = "Fences and heals hung bare-metal nodes"
)]
struct Cli {
    /// How log lines are written to standard error: `text` for people, `json` (one object per
    /// line, with the span fields: machine, namespace) for log collectors. RUST_LOG filters.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "BAREMEND_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Read or change a host's power through its BMC; every change is read back.
    Bmc(BmcArgs),
    /// Run the story on simulated hardware, in this process.
    #[cfg(feature = "lab")]
    Lab(LabArgs),
    /// Check every Machine's fencing path once, without disrupting it: one line per Machine,
    /// READY or NOT READY and why; the exit code is 1 when any is not ready.
    Check(baremend::check::CheckArgs),
    /// Run the remediation controller against a cluster.
    Run(Box<baremend::run::RunArgs>),
    /// Print baremend's CustomResourceDefinitions (or write them with --out).
    Crds(CrdsArgs),
    /// On a node (in the drift coordinator's helper pod): create or remove the MCO's
    /// forcefile, or write a file back with its expected bytes and mode.
    HostFile(baremend::hostfile::HostFileArgs),
}

/// The log filter without `RUST_LOG`: warnings, except where the command's output is a verdict
/// over many controllers under injected faults (the chaos and scale labs) — their retries on
/// purpose would drown it. `RUST_LOG` shows them.
fn default_log_filter(command: &Command) -> &'static str {
    match command {
        #[cfg(feature = "lab")]
        Command::Lab(args)
            if matches!(
                args.scenario,
                baremend::lab::Scenario::Chaos | baremend::lab::Scenario::Scale
            ) =>
        {
            "off"
        }
        _ => "warn",
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    // One crypto provider for the whole process, installed before any TLS is used: if two
    // were compiled in, rustls could not pick one and would panic at the first connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_filter(&cli.command)));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
    let result = match cli.command {
        Command::Bmc(args) => baremend::bmc::run(args).await,
        #[cfg(feature = "lab")]
        Command::Lab(args) => baremend::lab::run(args).await,
        Command::Check(args) => baremend::check::run(args).await,
        Command::Run(args) => baremend::run::run(*args).await,
        Command::Crds(args) => baremend::api::run_crds(args),
        Command::HostFile(args) => baremend::hostfile::run(&args).map(|done| println!("{done}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // One line, whatever the error carries.
            let message = error.to_string().replace(['\n', '\r'], " ");
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
