//! The `baremend` command. Thin: parsing and dispatch; the work is in the library.

use std::process::ExitCode;

use baremend::api::CrdsArgs;
use baremend::bmc::BmcArgs;
#[cfg(feature = "lab")]
use baremend::lab::LabArgs;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "baremend",
    version = env!("BAREMEND_VERSION"),
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
    /// One floor of `lab --scenario scale`, as a process of its own (the benchmark starts it).
    #[cfg(feature = "lab")]
    #[command(hide = true)]
    LabFloor(baremend::lab::FloorArgs),
    /// Check every Machine's fencing path once, without disrupting it: one line per Machine,
    /// READY or NOT READY and why; the exit code is 1 when any is not ready.
    Check(baremend::check::CheckArgs),
    /// The remediations that need an admin: under way, held, or Failed and not dealt with,
    /// each with its reason and runbook section (`--all`: every one).
    Status(baremend::status::StatusArgs),
    /// Ask for a new attempt of a Failed remediation (the `baremend.io/retry` annotation).
    Retry(baremend::status::MarkArgs),
    /// Acknowledge a Failed remediation, so that retention may delete it
    /// (the `baremend.io/acknowledged` annotation).
    Ack(baremend::status::MarkArgs),
    /// Write a support bundle: baremend's objects, their Events, the Machines, hosts and
    /// Nodes they name, the controller's logs; Secrets never, credentials redacted.
    Gather(baremend::gather::GatherArgs),
    /// Run the remediation controller against a cluster.
    Run(Box<baremend::run::RunArgs>),
    /// Print baremend's CustomResourceDefinitions (or write them with --out).
    Crds(CrdsArgs),
    /// On a node (in the drift coordinator's helper pod): create or remove the MCO's
    /// forcefile, or write a file back with its expected bytes and mode.
    HostFile(baremend::hostfile::HostFileArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or PowerShell, e.g.
    /// `source <(baremend completion bash)`.
    Completion(CompletionArgs),
}

#[derive(clap::Args)]
struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// The log filter without `RUST_LOG`: for `run`, what a controller's operator reads (`info`:
/// leadership taken or lost, caches filled, each remediation's steps); for the other
/// commands warnings, except where the command's output is a verdict over many controllers
/// under injected faults (the chaos and scale labs) — their retries on purpose would drown
/// it. `RUST_LOG` shows them.
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
        Command::Run(_) => "info",
        _ => "warn",
    }
}

/// The name kubectl runs a plugin by: `kubectl baremend …` executes `kubectl-baremend` found
/// on PATH, with the arguments after the plugin's name (kubernetes.io, "Extend kubectl with
/// plugins").
const KUBECTL_PLUGIN: &str = "kubectl-baremend";

/// The command line, read as `kubectl baremend` when the binary was run under the plugin's
/// name (a copy or a symlink named `kubectl-baremend`): usage and help then say what the
/// user typed.
fn parse() -> Cli {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let plugin = std::path::Path::new(&argv0)
        .file_name()
        .is_some_and(|name| name == KUBECTL_PLUGIN);
    let mut command = Cli::command();
    if plugin {
        command = command
            .bin_name("kubectl baremend")
            .display_name("kubectl baremend");
    }
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

#[tokio::main]
async fn main() -> ExitCode {
    // One crypto provider for the whole process, installed before any TLS is used: if two
    // were compiled in, rustls could not pick one and would panic at the first connection.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_filter(&cli.command)));
    // Colour only for a person at a terminal: a log written to a file or read by a collector
    // carries no escape codes.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
        #[cfg(feature = "lab")]
        Command::LabFloor(args) => baremend::lab::serve_floor(args).await,
        Command::Check(args) => baremend::check::run(args).await,
        Command::Status(args) => baremend::status::status(args).await,
        Command::Retry(args) => baremend::status::mark(baremend::status::Mark::Retry, args).await,
        Command::Ack(args) => baremend::status::mark(baremend::status::Mark::Ack, args).await,
        Command::Gather(args) => baremend::gather::run(args).await,
        Command::Run(args) => baremend::run::run(*args).await,
        Command::Crds(args) => baremend::api::run_crds(args),
        Command::HostFile(args) => baremend::hostfile::run(&args).map(|done| println!("{done}")),
        Command::Completion(args) => {
            let mut command = Cli::command();
            clap_complete::generate(args.shell, &mut command, "baremend", &mut std::io::stdout());
            Ok(())
        }
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
