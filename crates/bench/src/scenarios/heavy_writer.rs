//! The heavy writer beside light clients: one producer sending large messages as fast as
//! the broker takes them (acks=all, large batches, as a bulk loader does), measured in
//! a run of its own so that its acknowledgements stay out of the light clients' figures.
//! `noisy-neighbour` runs it in its writer phase and `acks` beside its paced runs.

use crate::load::{self, Load, Reading, Run, STAMP_BYTES};
use headway_client::{Producer, ProducerConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The writer's batches: large, as a bulk loader's are (under Kafka's 1 MiB default
/// message.max.bytes).
const WRITER_BATCH_BYTES: usize = 512 * 1024;
/// How long the writer may take, after its time, for its last acknowledgements.
const WRITER_FINISH_MAX: Duration = Duration::from_secs(30);
const MIB: u64 = 1024 * 1024;

/// A connected heavy writer and what it is to write.
pub struct HeavyWriter {
    producer: Arc<Producer>,
    load: Load,
}

impl HeavyWriter {
    /// Connects the writer: acks=all, large batches, not idempotent (as the lab's other
    /// producers). It will write `size`-byte messages to `topic`, at most `mb_max` MiB.
    pub async fn connect(
        bootstrap: &str,
        topic: &str,
        size: usize,
        mb_max: u64,
    ) -> anyhow::Result<HeavyWriter> {
        let config = ProducerConfig {
            idempotent: false,
            acks: -1,
            batch_bytes_max: WRITER_BATCH_BYTES,
            ..ProducerConfig::default()
        };
        let producer = load::producers(bootstrap, 1, &config).await?.remove(0);
        let size = size.max(STAMP_BYTES);
        let load = Load {
            topic: topic.to_string(),
            size,
            rate: None,
            count_max: Some(mb_max * MIB / size as u64),
            round_robin: None,
        };
        Ok(HeavyWriter { producer, load })
    }

    /// Writes from the end of `warmup` to the end of `time` (both from now) and returns
    /// the writer's figures.
    pub async fn write(
        self,
        scenario: &'static str,
        pid: Option<u32>,
        warmup: Duration,
        time: Duration,
    ) -> serde_json::Value {
        let (size, count_max) = (self.load.size, self.load.count_max);
        tokio::time::sleep(warmup).await;
        let run = Run::new(scenario, "writer", Reading::Each, pid, Duration::ZERO);
        let task = tokio::spawn(load::produce(self.producer, self.load, Arc::clone(&run)));
        run.progress(Instant::now() + time.saturating_sub(warmup), None)
            .await;
        let abort = task.abort_handle();
        if tokio::time::timeout(WRITER_FINISH_MAX, task).await.is_err() {
            tracing::warn!("the writer was still waiting for acknowledgements; stopped it");
            abort.abort();
        }
        let r = run.report(json!({}), Vec::new(), json!({}));
        json!({
            "size": size,
            "messages": r.publish.messages,
            "msgs_per_s": r.publish.msgs_per_s,
            "mb_per_s": r.publish.mb_per_s,
            "errors": r.publish_errors,
            // It stopped at its MiB bound before its time's end: its MB/s, over the
            // whole time, is then below what it could write.
            "limit_reached": count_max.is_some_and(|max| r.publish.messages >= max),
            "publish_p50_ms": r.publish_latency_ms.p50,
            "publish_p99_ms": r.publish_latency_ms.p99,
            "series_mb_per_s": r
                .series
                .iter()
                .map(|p| p.publish_msgs_per_s * size as f64 / 1e6)
                .collect::<Vec<_>>(),
        })
    }
}
