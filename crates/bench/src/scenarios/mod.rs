//! The scenarios, one module each, the [`context`] every one is handed, and
//! [`measure`], the run loop most of them share: start the consumers, then the
//! producers, print progress until the deadline, let the measured consumers drain, and
//! hand back every consumer's recorder.

pub mod acks;
pub mod context;
pub mod credit;
pub mod heavy_writer;
pub mod noisy_neighbour;
pub mod parallelism;
pub mod slow_consumer;
pub mod slow_lane;
pub mod stuck_consumer;
pub mod sync_scope;

use crate::evict::Evicted;
use crate::latency::Recorder;
use crate::load::{consume, produce, ConsumerMeter, Load, Run, Work, DRAIN_MAX};
use crate::proxy::{Proxy, ProxyConfig};
use context::Ctx;
use headway_client::{Consumer, ConsumerConfig, Producer, StartOffset};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long producers may take, after the load time, to have their last batches
/// acknowledged.
const PRODUCER_FINISH_MAX: Duration = Duration::from_secs(30);

pub struct ConsumerSpec {
    pub name: String,
    pub role: &'static str,
    /// Counted in the run's consume rate, backlog and end-to-end latency.
    pub measured: bool,
    pub consumer: Consumer,
    pub work: Work,
}

/// `count` measured consumers, role `fast`, reading `topic` from its end.
pub async fn fast_consumers(
    bootstrap: &str,
    topic: &str,
    count: usize,
) -> anyhow::Result<Vec<ConsumerSpec>> {
    let mut consumers = Vec::with_capacity(count);
    for i in 0..count {
        consumers.push(ConsumerSpec {
            name: format!("fast-{i}"),
            role: "fast",
            measured: true,
            consumer: crate::load::consumer(
                bootstrap,
                topic,
                None,
                headway_client::StartOffset::Latest,
                headway_client::ConsumerConfig::default(),
            )
            .await?,
            work: Work::default(),
        });
    }
    Ok(consumers)
}

/// An unmeasured consumer of `topic` with its own connection, `name` and `role`, from
/// `start`: the catch-up reader (from offset 0, at full speed) and the slow reader (from
/// the end, through the delay proxy at `bootstrap`) of the scenarios with disturbers.
pub async fn disturber(
    bootstrap: &str,
    topic: &str,
    name: &str,
    role: &'static str,
    start: StartOffset,
) -> anyhow::Result<ConsumerSpec> {
    Ok(ConsumerSpec {
        name: name.into(),
        role,
        measured: false,
        consumer: crate::load::consumer(bootstrap, topic, None, start, ConsumerConfig::default())
            .await?,
        work: Work::default(),
    })
}

/// Options of the scenarios with a reader behind the delay proxy and a catch-up reader
/// on a cold backlog.
#[derive(clap::Args, Debug, Clone)]
pub struct ReaderArgs {
    /// Delay the proxy adds to each chunk in each direction, in ms.
    #[arg(long, default_value_t = 200)]
    pub delay_ms: u64,
    /// Bytes the proxy holds per direction.
    #[arg(long, default_value_t = 256 * 1024)]
    pub proxy_buffer_bytes: usize,
    /// Directory holding the broker's data (repeatable): after the prefill and before
    /// the catch-up consumer starts, its files are written back and dropped from the page
    /// cache, so that the catch-up consumer reads cold data. A broker started by the
    /// scenario has its data directory added without asking.
    #[arg(long)]
    pub evict_dir: Vec<PathBuf>,
}

impl ReaderArgs {
    /// The delay proxy in front of the broker, for the slow reader.
    pub async fn proxy(&self, bootstrap: &str) -> anyhow::Result<Proxy> {
        Proxy::start(ProxyConfig {
            upstream: bootstrap.to_string(),
            delay: std::time::Duration::from_millis(self.delay_ms),
            buffer_bytes: self.proxy_buffer_bytes,
            kafka: true,
            ..ProxyConfig::default()
        })
        .await
    }

    /// The directories to drop from the page cache for a cold backlog: `--evict-dir`,
    /// plus the data directory of a broker the scenario started.
    pub fn evict_dirs(&self, ctx: &Ctx) -> Vec<PathBuf> {
        let mut dirs = self.evict_dir.clone();
        dirs.extend(ctx.target.data_dir());
        dirs
    }
}

/// Writes back and drops `dirs` from the page cache, says so on stderr, and returns
/// what it did with a line for the report's notes (`backlog eviction <when>: ...`).
pub async fn evict_backlog(
    scenario: &str,
    dirs: &[PathBuf],
    when: &str,
) -> anyhow::Result<(Evicted, String)> {
    let evicted = crate::evict::evict_dirs_async(dirs.to_vec()).await?;
    eprintln!(
        "[{scenario}] {}",
        evicted.describe(&format!("evicted {when}"))
    );
    let note = format!("backlog eviction {}", evicted.describe(when));
    Ok((evicted, note))
}

/// Seconds from the run's start until consumer `name` has read `messages`; `None` if the
/// run stops first.
pub async fn caught_up(run: Arc<Run>, name: &'static str, messages: u64) -> Option<f64> {
    loop {
        if let Some(meter) = run.meter.find(name) {
            if meter.messages.load(Ordering::Relaxed) >= messages {
                return Some(run.origin.elapsed().as_secs_f64());
            }
        }
        if run.stopped() {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Each consumer's meter and recorder after a run, in the order they were given.
pub type Measured = Vec<(Arc<ConsumerMeter>, Recorder)>;

/// Runs the load until `deadline` (or until the measured consumers have read `done_at`
/// messages), drains, and returns each consumer's meter and recorder, in order.
pub async fn measure(
    run: &Arc<Run>,
    producers: Vec<(Arc<Producer>, Load)>,
    consumers: Vec<ConsumerSpec>,
    load_time: Duration,
    done_at: Option<u64>,
) -> Measured {
    let consumer_tasks: Vec<_> = consumers
        .into_iter()
        .map(|spec| {
            let meter = run.meter.consumer(&spec.name, spec.role, spec.measured);
            tokio::spawn(consume(spec.consumer, Arc::clone(run), meter, spec.work))
        })
        .collect();
    let producer_tasks: Vec<_> = producers
        .into_iter()
        .map(|(p, load)| tokio::spawn(produce(p, load, Arc::clone(run))))
        .collect();
    run.progress(Instant::now() + load_time, done_at).await;
    // Producers flush and wait for their last acknowledgements; a broker that stopped
    // answering must not hold the scenario beyond its bound.
    let finish_by = Instant::now() + PRODUCER_FINISH_MAX;
    for task in producer_tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(finish_by.into(), task)
            .await
            .is_err()
        {
            tracing::warn!("a producer was still waiting for acknowledgements; stopped it");
            abort.abort();
        }
    }
    run.drain(if done_at.is_some() {
        Duration::ZERO
    } else {
        DRAIN_MAX
    })
    .await;
    let mut out = Vec::new();
    for task in consumer_tasks {
        out.push(task.await.expect("consumer task"));
    }
    out
}

/// Consumers' results as `Run::report` takes them (no lag known).
pub fn without_lag(
    results: Vec<(Arc<ConsumerMeter>, Recorder)>,
) -> Vec<(Arc<ConsumerMeter>, Recorder, Option<u64>)> {
    results.into_iter().map(|(m, r)| (m, r, None)).collect()
}

/// Consumers' results as `Run::report` takes them, with what each had not read at the
/// end: of the `published` messages of the run, and for the catch-up consumer also the
/// `before` that were there when the run started.
pub fn with_lag(
    results: Vec<(Arc<ConsumerMeter>, Recorder)>,
    before: u64,
    published: u64,
) -> Vec<(Arc<ConsumerMeter>, Recorder, Option<u64>)> {
    results
        .into_iter()
        .map(|(meter, recorder)| {
            let read = meter.messages.load(Ordering::Relaxed);
            let available = match meter.role.as_str() {
                "catch-up" => before + published,
                _ => published,
            };
            (meter, recorder, Some(available.saturating_sub(read)))
        })
        .collect()
}

/// What a [`caught_up`] watcher found, once the run is over.
pub async fn replay_seconds(watcher: Option<tokio::task::JoinHandle<Option<f64>>>) -> Option<f64> {
    tokio::time::timeout(std::time::Duration::from_secs(1), watcher?)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}
