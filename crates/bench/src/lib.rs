//! The benchmark lab behind `headway bench`: scenarios that reproduce the seed
//! experiments against headway or any Kafka-compatible broker, with reports in the
//! shape of the OpenMessaging Benchmark's.
//!
//! - [`scenarios`]: one module per scenario (`acks`, `slow-consumer`, `stuck-consumer`,
//!   `slow-lane`, `credit`, `parallelism`, `noisy-neighbour`), each a function from its
//!   arguments to a [`Report`].
//! - [`load`]: producer and consumer tasks, stamped messages, the progress line, and
//!   the run bookkeeping every scenario shares.
//! - [`latency`]: HDR histograms, run-wide and per second.
//! - [`proxy`]: the delay proxy (also `headway bench proxy`), which rewrites Kafka
//!   Metadata answers so that a client behind it stays behind it.
//! - [`report`]: the JSON and Markdown files.
//! - [`evict`]: writes a backlog's files back and drops them from the page cache, so
//!   that a catch-up reader reads from the disk.
//! - [`target`]: the broker under test: `--bootstrap`, or a headway broker the
//!   scenario starts and stops itself.
//!
//! Every scenario is bounded in time (`--duration`, two minutes by default; `--quick`
//! for a few seconds) and every task it starts ends with it.

pub mod evict;
pub mod latency;
pub mod load;
pub mod proxy;
pub mod report;
pub mod scenarios;
pub mod target;

use clap::{Args, Subcommand};
pub use report::Report;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use target::Target;

/// `headway bench ...`
#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Throughput and latency for acks=0, 1 and all, small and 1 KiB messages, one and
    /// 128 producers (seed 004).
    Acks(scenarios::acks::AcksArgs),
    /// Fast consumers' end-to-end latency with and without a consumer behind a delay
    /// proxy and a catch-up consumer (seed 001).
    SlowConsumer(scenarios::slow_consumer::SlowConsumerArgs),
    /// Fast consumers' end-to-end latency, the producer's rate and the broker's memory
    /// with and without clients that send fetches and never read their socket.
    StuckConsumer(scenarios::stuck_consumer::StuckConsumerArgs),
    /// A producer with 12 lanes, one slowed per batch, with deflection on and off (seed 000).
    SlowLane(scenarios::slow_lane::SlowLaneArgs),
    /// Consumer throughput against the credit window's refill threshold and increment
    /// (seed 002).
    Credit(scenarios::credit::CreditArgs),
    /// A spike drained by few heavy or many light consumers (seed 003).
    Parallelism(scenarios::parallelism::ParallelismArgs),
    /// Light producer and tail consumers alone, beside a full-speed writer, and beside a
    /// cold catch-up reader, a delayed reader and a stuck one (docs/bench.md).
    NoisyNeighbour(scenarios::noisy_neighbour::NoisyNeighbourArgs),
    /// Group commit per partition or per broker: interference and scale (docs/sync.md).
    SyncScope(scenarios::sync_scope::SyncScopeArgs),
    /// Run the delay proxy on its own (used for the NATS comparison).
    Proxy(ProxyArgs),
}

/// Options every scenario takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Broker to run against, HOST:PORT; without it a headway broker is started for the
    /// run (this binary's `serve`, a temporary data directory) and stopped after.
    #[arg(long, short = 'b')]
    pub bootstrap: Option<String>,
    /// A few seconds in all, for CI smoke tests (the numbers mean little).
    #[arg(long)]
    pub quick: bool,
    /// Seconds the whole scenario may run [default: 120; with --quick a few].
    #[arg(long)]
    pub duration: Option<f64>,
    /// Directory for `<scenario>-<label>.json` and `.md`.
    #[arg(long, default_value = "bench/results/tmp")]
    pub out: PathBuf,
    /// The broker's name in the report [default: headway when started here, else broker].
    #[arg(long)]
    pub label: Option<String>,
    /// Parent directory of a started broker's data [default: the system's temp dir].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Process id of a broker given with --bootstrap, to report its resident memory.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// A line for the report's notes (repeatable), e.g. how the broker syncs.
    #[arg(long)]
    pub note: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct ProxyArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Address to forward to.
    #[arg(long)]
    pub upstream: String,
    /// Delay added to every chunk, in each direction.
    #[arg(long, default_value_t = 200)]
    pub delay_ms: u64,
    /// Bytes held per direction of a connection.
    #[arg(long, default_value_t = 256 * 1024)]
    pub buffer_bytes: usize,
    /// The upstream is a single Kafka broker: rewrite Metadata answers to the proxy.
    #[arg(long)]
    pub kafka: bool,
}

/// What a scenario is handed: its options, the broker, and the clock.
pub struct Ctx {
    pub common: Common,
    pub target: Target,
    pub label: String,
    pub started_at: String,
    pub started: Instant,
}

impl Ctx {
    fn open(common: Common) -> anyhow::Result<Ctx> {
        let bin = std::env::current_exe()?;
        let target = Target::open(
            common.bootstrap.as_deref(),
            &bin,
            common.data_dir.as_deref(),
        )?;
        let label = common.label.clone().unwrap_or_else(|| {
            if target.is_spawned() {
                "headway".into()
            } else {
                "broker".into()
            }
        });
        Ok(Ctx {
            common,
            target,
            label,
            started_at: report::utc_now(),
            started: Instant::now(),
        })
    }

    pub fn bootstrap(&self) -> &str {
        &self.target.bootstrap
    }

    /// The scenario's time budget: `--duration`, or its default for full or quick runs.
    pub fn duration(&self, full_s: f64, quick_s: f64) -> Duration {
        let s = self
            .common
            .duration
            .unwrap_or(if self.common.quick { quick_s } else { full_s });
        Duration::from_secs_f64(s.max(0.1))
    }

    /// Seconds the scenario may still run: `--duration` (or the default for full or
    /// quick runs) minus what has passed since it started.
    pub fn remaining(&self, full_s: f64, quick_s: f64) -> Duration {
        self.duration(full_s, quick_s)
            .saturating_sub(self.started.elapsed())
    }

    pub fn broker_pid(&self) -> Option<u32> {
        self.target.pid().or(self.common.broker_pid)
    }

    /// The report with everything but the runs and summary filled in.
    pub fn report(&self, scenario: &str, mut notes: Vec<String>) -> Report {
        if self.target.is_spawned() {
            notes.insert(
                0,
                "headway started by the bench with its defaults: flush=sync, so acks=1/all \
                 are answered after fdatasync (group commit)"
                    .into(),
            );
        }
        notes.extend(self.common.note.iter().cloned());
        Report {
            format: report::REPORT_FORMAT,
            scenario: scenario.into(),
            label: self.label.clone(),
            bootstrap: self.bootstrap().into(),
            command: report::command_line(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            started_at: self.started_at.clone(),
            duration_s: 0.0,
            quick: self.common.quick,
            notes,
            runs: Vec::new(),
            summary: serde_json::Value::Null,
        }
    }

    /// Stamps the duration, writes the files and prints where they are.
    pub fn finish(&self, mut report: Report) -> anyhow::Result<Report> {
        report.duration_s = self.started.elapsed().as_secs_f64();
        let (json, md) = report.write(&self.common.out)?;
        eprintln!(
            "[{}] {} done in {:.1} s: {} and {}",
            report.scenario,
            report.label,
            report.duration_s,
            json.display(),
            md.display()
        );
        Ok(report)
    }
}

/// Runs one `headway bench` command to completion, or until SIGINT or SIGTERM: then
/// the scenario is dropped, which stops the broker it started (a `Target` stops its
/// broker when dropped) and every task it spawned with the runtime.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            outcome = run_command(args) => outcome,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
            _ = term.recv() => anyhow::bail!("terminated"),
        }
    })
}

async fn run_command(args: BenchArgs) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Proxy(p) => run_proxy(p).await,
        BenchCommand::SyncScope(a) => scenarios::sync_scope::main(a).await.map(drop),
        BenchCommand::Acks(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::acks::run(&ctx, &a).await.map(drop)
        }
        BenchCommand::SlowConsumer(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::slow_consumer::run(&ctx, &a).await.map(drop)
        }
        BenchCommand::StuckConsumer(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::stuck_consumer::run(&ctx, &a).await.map(drop)
        }
        BenchCommand::SlowLane(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::slow_lane::run(&ctx, &a).await.map(drop)
        }
        BenchCommand::Credit(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::credit::run(&ctx, &a).await.map(drop)
        }
        BenchCommand::NoisyNeighbour(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::noisy_neighbour::run(&ctx, &a).await.map(drop)
        }
        BenchCommand::Parallelism(a) => {
            let ctx = Ctx::open(a.common.clone())?;
            scenarios::parallelism::run(&ctx, &a).await.map(drop)
        }
    }
}

async fn run_proxy(args: ProxyArgs) -> anyhow::Result<()> {
    let proxy = proxy::Proxy::start(proxy::ProxyConfig {
        listen: args.listen,
        upstream: args.upstream,
        delay: Duration::from_millis(args.delay_ms),
        buffer_bytes: args.buffer_bytes,
        kafka: args.kafka,
    })
    .await?;
    // Scripts wait for this line.
    println!("proxy listening on {}", proxy.addr);
    use std::io::Write;
    std::io::stdout().flush()?;
    proxy.run_forever().await;
    Ok(())
}
