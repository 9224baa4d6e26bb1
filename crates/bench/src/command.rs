//! The `headway bench` command: its arguments, one subcommand per scenario plus the
//! delay proxy on its own, and the dispatch that opens a scenario's context and runs it
//! until it ends or a signal stops it.

use crate::proxy;
use crate::scenarios;
use crate::scenarios::context::Ctx;
use clap::{Args, Subcommand};
use std::time::Duration;

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
