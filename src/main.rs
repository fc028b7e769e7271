//! The `baremend` command. Thin: parsing and dispatch; the work is in the library.

use std::process::ExitCode;

use baremend::api::CrdsArgs;
use baremend::bmc::BmcArgs;
use baremend::lab::LabArgs;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "baremend",
    version,
    about = "Fences and heals hung bare-metal nodes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Read or change a host's power through its BMC; every change is read back.
    Bmc(BmcArgs),
    /// Run the story on simulated hardware, in this process.
    Lab(LabArgs),
    /// Run the remediation controller against a cluster.
    Run(baremend::run::RunArgs),
    /// Print baremend's CustomResourceDefinitions (or write them with --out).
    Crds(CrdsArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    // One crypto provider for the whole process, installed before any TLS is used: if two
    // were compiled in, rustls could not pick one and would panic at the first connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bmc(args) => baremend::bmc::run(args).await,
        Command::Lab(args) => baremend::lab::run(args).await,
        Command::Run(args) => baremend::run::run(args).await,
        Command::Crds(args) => baremend::api::run_crds(args),
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
