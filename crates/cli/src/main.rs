//! The `headway` binary.
//!
//! `headway serve` starts the broker (`serve.rs`). Settings come from, in increasing
//! precedence: built-in defaults, a TOML file (`--config`), environment variables
//! (`HEADWAY_<NAME>`), and flags. `headway produce` and `headway consume` are clients
//! for any Kafka-compatible broker, and `headway topic`, `headway group` and
//! `headway cluster` manage one (`output.rs` holds what those share), as `headway user`
//! and `headway acl` manage its security; `headway bench` runs the lab's scenarios
//! (`crates/bench`). Every failure ends the command with one `error: ...` line on
//! stderr and exit status 1.

mod acl;
mod cleaner;
mod cluster;
mod consume;
mod group;
mod output;
mod produce;
mod progress;
mod runtime;
mod security_args;
mod serve;
mod signals;
mod topic;
mod user;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "headway",
    version,
    about = "A durable, Kafka-compatible streaming broker"
)]
struct Cli {
    /// How log lines on stderr are written: `text`, or `json` (one JSON object a line,
    /// for log collectors).
    #[arg(long, global = true, value_enum, env = "HEADWAY_LOG_FORMAT", default_value_t = LogFormat::Text)]
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
    /// Start the broker (defaults: data in ./headway-data, listening on 127.0.0.1:9092).
    // Boxed: its many settings would make every command as large.
    Serve(Box<serve::ServeArgs>),
    /// Write records to a topic: stdin lines, or generated ones with --count.
    Produce(produce::ProduceArgs),
    /// Print records of a topic.
    Consume(consume::ConsumeArgs),
    /// Create, list, describe, alter and delete topics.
    Topic(topic::TopicArgs),
    /// Inspect, delete and reset consumer groups.
    Group(group::GroupArgs),
    /// The cluster's brokers and their settings.
    Cluster(cluster::ClusterArgs),
    /// What a headway broker's log cleaner did to each compacted partition (from its
    /// /metrics).
    Cleaner(cleaner::CleanerArgs),
    /// Run a benchmark scenario against headway or any Kafka-compatible broker.
    Bench(headway_bench::BenchArgs),
    /// Add, list and delete SCRAM users, through a running broker (--bootstrap) or on a
    /// stopped broker's data directory.
    User(user::UserArgs),
    /// Add, list and delete ACLs of a running broker.
    Acl(acl::AclArgs),
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // stdout closed by its reader (`headway ... | head`): the reader has what it
        // wanted, so this is a normal end.
        Err(e) if output::closed_stdout(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the chain of causes on one line, without a backtrace.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Log lines go to stderr, filtered by `HEADWAY_LOG` (`info` by default).
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HEADWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => lines.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => lines.json().flatten_event(true).init(),
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // Every panic is one ERROR line with its backtrace, and counted (`/metrics`).
    headway_broker::panics::install_hook();
    match cli.command {
        Command::Serve(args) => serve::run((*args).into_config()?),
        Command::Produce(args) => runtime::client_runtime()?.block_on(produce::run(args)),
        Command::Consume(args) => runtime::client_runtime()?.block_on(consume::run(args)),
        Command::Topic(args) => runtime::client_runtime()?.block_on(topic::run(args)),
        Command::Group(args) => runtime::client_runtime()?.block_on(group::run(args)),
        Command::Cluster(args) => runtime::client_runtime()?.block_on(cluster::run(args)),
        Command::Cleaner(args) => cleaner::run(args),
        Command::Bench(args) => headway_bench::run(args),
        Command::User(args) => user::run(args),
        Command::Acl(args) => runtime::client_runtime()?.block_on(acl::run(args)),
    }
}
