//! The scenarios, one module each, and [`measure`], the run loop most of them share:
//! start the consumers, then the producers, print progress until the deadline, let the
//! measured consumers drain, and hand back every consumer's recorder.

pub mod acks;
pub mod credit;
pub mod parallelism;
pub mod slow_consumer;
pub mod slow_lane;
pub mod stuck_consumer;
pub mod sync_scope;

use crate::latency::Recorder;
use crate::load::{consume, produce, ConsumerMeter, Load, Run, Work, DRAIN_MAX};
use headway_client::{Consumer, Producer};
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

/// Runs the load until `deadline` (or until the measured consumers have read `done_at`
/// messages), drains, and returns each consumer's meter and recorder, in order.
pub async fn measure(
    run: &Arc<Run>,
    producers: Vec<(Arc<Producer>, Load)>,
    consumers: Vec<ConsumerSpec>,
    load_time: Duration,
    done_at: Option<u64>,
) -> Vec<(Arc<ConsumerMeter>, Recorder)> {
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
