//! Load generation and measurement shared by every scenario.
//!
//! A *run* is one configuration measured for a bounded time. [`Run`] holds what its
//! tasks share: the counters ([`Meter`]), the publish-latency recorder, and the stop
//! signals. Producer tasks ([`produce`]) send stamped messages until the run's deadline,
//! at a fixed rate or as fast as the client accepts them; consumer tasks ([`consume`])
//! read until the run ends and, if asked, until they have drained the backlog.
//! [`Run::progress`] prints a progress line every second and samples the rates for the
//! report's time series; [`Run::report`] assembles the [`RunReport`].
//!
//! Timestamps: the first 8 bytes of every value are the send time in microseconds since
//! the epoch (big-endian). A consumer's end-to-end latency is its receive time minus
//! that stamp; producer and consumer share this machine's clock. Publish latency is the
//! time from `Producer::send` returning to the record's acknowledgement
//! (`Delivery::wait`); with acks=0 that is the time until the batch was written to the
//! socket.

use crate::latency::Recorder;
use crate::report::{join_series, Backlog, ConsumerReport, Fairness, Rate, RunReport};
use bytes::{Bytes, BytesMut};
use futures::stream::{FuturesUnordered, StreamExt};
use headway_client::{
    ClientConfig, Cluster, ConsumedRecord, Consumer, ConsumerConfig, Delivery, Producer,
    ProducerConfig, Record, StartOffset,
};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes at the start of each value that hold the send time.
pub const STAMP_BYTES: usize = 8;

/// How long consumers may keep reading after the producers stopped, to drain what is
/// in flight; past it the run ends with whatever backlog is left.
pub const DRAIN_MAX: Duration = Duration::from_secs(5);

/// How often a waiting consumer checks whether its run ended.
const STOP_POLL: Duration = Duration::from_millis(20);

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A message of `size` bytes (at least the stamp) stamped with the current time.
pub fn stamped(template: &[u8]) -> Bytes {
    let mut value = BytesMut::from(template);
    value[..STAMP_BYTES].copy_from_slice(&now_us().to_be_bytes());
    value.freeze()
}

pub fn template(size: usize) -> Vec<u8> {
    let mut v = vec![b'h'; size.max(STAMP_BYTES)];
    // Not all one byte, so that compressed runs would not be trivially small.
    for (i, b) in v.iter_mut().enumerate().skip(STAMP_BYTES) {
        *b = b'a' + (i % 23) as u8;
    }
    v
}

/// The stamp of a consumed value, if it has one.
pub fn stamp_of(value: Option<&Bytes>) -> Option<u64> {
    let v = value?;
    (v.len() >= STAMP_BYTES).then(|| u64::from_be_bytes(v[..STAMP_BYTES].try_into().unwrap()))
}

/// One consumer's counters, read by the progress line and the report.
pub struct ConsumerMeter {
    pub name: String,
    pub role: String,
    pub messages: AtomicU64,
    pub bytes: AtomicU64,
    /// Counted in the run's backlog and consume rate (the measured consumers).
    pub measured: bool,
}

pub struct Meter {
    pub published: AtomicU64,
    pub published_bytes: AtomicU64,
    pub publish_errors: AtomicU64,
    /// Microseconds from the run's start to the first send and to the latest message a
    /// measured consumer finished (for the time a spike takes to drain).
    pub first_publish_us: AtomicU64,
    pub last_consume_us: AtomicU64,
    consumers: Mutex<Vec<Arc<ConsumerMeter>>>,
}

impl Default for Meter {
    fn default() -> Self {
        Meter {
            published: AtomicU64::new(0),
            published_bytes: AtomicU64::new(0),
            publish_errors: AtomicU64::new(0),
            first_publish_us: AtomicU64::new(u64::MAX),
            last_consume_us: AtomicU64::new(0),
            consumers: Mutex::new(Vec::new()),
        }
    }
}

impl Meter {
    pub fn consumer(&self, name: &str, role: &str, measured: bool) -> Arc<ConsumerMeter> {
        let c = Arc::new(ConsumerMeter {
            name: name.to_string(),
            role: role.to_string(),
            messages: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            measured,
        });
        self.consumers
            .lock()
            .expect("meter lock")
            .push(Arc::clone(&c));
        c
    }

    /// The meter of the consumer called `name`, once its task has started.
    pub fn find(&self, name: &str) -> Option<Arc<ConsumerMeter>> {
        self.consumers
            .lock()
            .expect("meter lock")
            .iter()
            .find(|c| c.name == name)
            .cloned()
    }

    fn measured(&self) -> Vec<Arc<ConsumerMeter>> {
        self.consumers
            .lock()
            .expect("meter lock")
            .iter()
            .filter(|c| c.measured)
            .cloned()
            .collect()
    }

    /// Messages read by the measured consumers.
    pub fn consumed(&self) -> u64 {
        self.measured()
            .iter()
            .map(|c| c.messages.load(Ordering::Relaxed))
            .sum()
    }
}

/// How the measured consumers share the topic, which decides what backlog means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Each measured consumer reads every message: backlog is what the furthest-behind
    /// one has not read.
    Each,
    /// The measured consumers split the partitions: backlog is published minus the
    /// sum read.
    Split,
}

pub struct Run {
    pub scenario: String,
    pub name: String,
    pub origin: Instant,
    pub meter: Meter,
    pub reading: Reading,
    pub publish_latency: Mutex<Recorder>,
    pub warmup: Duration,
    /// Set when the producers' time is up.
    stopped: AtomicBool,
    /// Set when the run is over, drain included: every consumer stops.
    ended: AtomicBool,
    /// (second, publish msg/s, consume msg/s, backlog), one per second.
    rates: Mutex<Vec<(u64, f64, f64, u64)>>,
    backlog_max: AtomicU64,
    load_seconds: Mutex<f64>,
    /// The broker's process, if known, and its highest resident memory seen.
    broker_pid: Option<u32>,
    rss_max_mib: Mutex<Option<f64>>,
}

impl Run {
    /// A run starting now. Latencies of its first `warmup` stay out of its percentiles
    /// (they still show in the per-second series).
    pub fn new(
        scenario: &str,
        name: &str,
        reading: Reading,
        broker_pid: Option<u32>,
        warmup: Duration,
    ) -> Arc<Run> {
        let origin = Instant::now();
        Arc::new(Run {
            scenario: scenario.to_string(),
            name: name.to_string(),
            origin,
            meter: Meter::default(),
            reading,
            publish_latency: Mutex::new(Recorder::with_warmup(origin, warmup)),
            warmup,
            stopped: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            rates: Mutex::new(Vec::new()),
            backlog_max: AtomicU64::new(0),
            load_seconds: Mutex::new(0.0),
            broker_pid,
            rss_max_mib: Mutex::new(None),
        })
    }

    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    pub fn backlog(&self) -> u64 {
        let published = self.meter.published.load(Ordering::Relaxed);
        let measured = self.meter.measured();
        let read = match self.reading {
            Reading::Split => measured
                .iter()
                .map(|c| c.messages.load(Ordering::Relaxed))
                .sum(),
            Reading::Each => measured
                .iter()
                .map(|c| c.messages.load(Ordering::Relaxed))
                .min()
                .unwrap_or(published),
        };
        published.saturating_sub(read)
    }

    /// Prints a progress line every second and samples the rates until `deadline`
    /// (or, with `done_at`, until the measured consumers have read that many messages),
    /// then marks the producers' time as up.
    pub async fn progress(&self, deadline: Instant, done_at: Option<u64>) {
        let terminal = std::io::stderr().is_terminal();
        let mut last = (
            Instant::now(),
            self.meter.published.load(Ordering::Relaxed),
            self.meter.consumed(),
        );
        while Instant::now() < deadline && done_at.is_none_or(|n| self.meter.consumed() < n) {
            let next = (Instant::now() + Duration::from_millis(50)).min(deadline);
            tokio::time::sleep_until(next.into()).await;
            let now = Instant::now();
            if now - last.0 < Duration::from_secs(1) {
                continue;
            }
            let published = self.meter.published.load(Ordering::Relaxed);
            let consumed = self.meter.consumed();
            let seconds = (now - last.0).as_secs_f64();
            let publish_rate = published.saturating_sub(last.1) as f64 / seconds;
            let consume_rate = consumed.saturating_sub(last.2) as f64 / seconds;
            let backlog = self.backlog();
            self.backlog_max.fetch_max(backlog, Ordering::Relaxed);
            self.sample_rss();
            let t = self.origin.elapsed().as_secs();
            self.rates
                .lock()
                .expect("rates lock")
                .push((t, publish_rate, consume_rate, backlog));
            let line = format!(
                "[{}] {} {:>4.0}s  publish {:>9.0} msg/s  consume {:>9.0} msg/s  backlog {:>8}  errors {}",
                self.scenario,
                self.name,
                self.origin.elapsed().as_secs_f64(),
                publish_rate,
                consume_rate,
                backlog,
                self.meter.publish_errors.load(Ordering::Relaxed)
            );
            let mut err = std::io::stderr().lock();
            let _ = if terminal {
                write!(err, "\r{line}   ")
            } else {
                writeln!(err, "{line}")
            };
            last = (now, published, consumed);
        }
        if terminal {
            eprintln!();
        }
        self.sample_rss();
        *self.load_seconds.lock().expect("load lock") = self.origin.elapsed().as_secs_f64();
        self.stopped.store(true, Ordering::Release);
    }

    fn sample_rss(&self) {
        if let Some(rss) = self.broker_pid.and_then(crate::target::rss_mib) {
            let mut max = self.rss_max_mib.lock().expect("rss lock");
            *max = Some(max.map_or(rss, |m: f64| m.max(rss)));
        }
    }

    /// Seconds from the first send to the last message a measured consumer finished.
    pub fn drain_seconds(&self) -> Option<f64> {
        let first = self.meter.first_publish_us.load(Ordering::Relaxed);
        let last = self.meter.last_consume_us.load(Ordering::Relaxed);
        (first != u64::MAX && last >= first).then(|| (last - first) as f64 / 1e6)
    }

    /// Lets measured consumers drain (up to `drain_max`), then ends the run.
    pub async fn drain(&self, drain_max: Duration) {
        let until = Instant::now() + drain_max;
        while Instant::now() < until && self.backlog() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.backlog_max
            .fetch_max(self.backlog(), Ordering::Relaxed);
        self.ended.store(true, Ordering::Release);
    }

    /// Assembles the report from the meters and the consumers' recorders.
    pub fn report(
        &self,
        params: serde_json::Value,
        consumers: Vec<(Arc<ConsumerMeter>, Recorder, Option<u64>)>,
        extra: serde_json::Value,
    ) -> RunReport {
        let seconds = (*self.load_seconds.lock().expect("load lock")).max(1e-3);
        let m = &self.meter;
        let mut e2e = Recorder::new(self.origin);
        let mut reports = Vec::new();
        let mut consumed = (0, 0);
        for (meter, recorder, lag) in &consumers {
            let messages = meter.messages.load(Ordering::Relaxed);
            let bytes = meter.bytes.load(Ordering::Relaxed);
            if meter.measured {
                e2e.merge(recorder);
                consumed.0 += messages;
                consumed.1 += bytes;
            }
            reports.push(ConsumerReport {
                name: meter.name.clone(),
                role: meter.role.clone(),
                consume: Rate::new(messages, bytes, seconds),
                e2e_latency_ms: recorder.summary(),
                lag_end: *lag,
            });
        }
        let measured: Vec<&ConsumerReport> = reports
            .iter()
            .zip(&consumers)
            .filter(|(_, (m, ..))| m.measured)
            .map(|(r, _)| r)
            .collect();
        let fairness = Fairness::of(&measured);
        let publish = self.publish_latency.lock().expect("publish latency lock");
        let rates = self.rates.lock().expect("rates lock");
        RunReport {
            name: self.name.clone(),
            params,
            duration_s: seconds,
            publish: Rate::new(
                m.published.load(Ordering::Relaxed),
                m.published_bytes.load(Ordering::Relaxed),
                seconds,
            ),
            publish_errors: m.publish_errors.load(Ordering::Relaxed),
            consume: Rate::new(consumed.0, consumed.1, seconds),
            publish_latency_ms: publish.summary(),
            e2e_latency_ms: e2e.summary(),
            backlog: Backlog {
                end: self.backlog(),
                max: self.backlog_max.load(Ordering::Relaxed),
            },
            consumers: reports,
            fairness,
            series: join_series(&rates, &publish.series(), &e2e.series()),
            broker_rss_mib_max: *self.rss_max_mib.lock().expect("rss lock"),
            extra,
        }
    }
}

/// What one producer task sends.
#[derive(Debug, Clone)]
pub struct Load {
    pub topic: String,
    pub size: usize,
    /// Messages per second for this producer; `None` is as fast as the client takes them.
    pub rate: Option<f64>,
    /// Stop after this many messages (a spike), even before the run's deadline.
    pub count_max: Option<u64>,
    /// Spread messages one by one over this many partitions. `None` leaves it to the
    /// client, which keeps keyless records on one partition per batch (sticky), as
    /// Kafka's clients do.
    pub round_robin: Option<i32>,
}

/// Connects `n` producers, each with its own cluster connection and lanes, at once.
pub async fn producers(
    bootstrap: &str,
    n: usize,
    config: &ProducerConfig,
) -> anyhow::Result<Vec<Arc<Producer>>> {
    let connects = (0..n).map(|_| async {
        let cluster = Cluster::connect(bootstrap, ClientConfig::default()).await?;
        anyhow::Ok(Arc::new(Producer::new(cluster, config.clone())?))
    });
    futures::future::try_join_all(connects).await
}

/// One producer for a stream at a set rate, as the latency scenarios use it:
/// acks=all and a linger of 1 ms, the client's defaults otherwise.
pub async fn stream_producer(bootstrap: &str) -> anyhow::Result<Arc<Producer>> {
    let config = ProducerConfig {
        // The lab measures lanes and deflection as they were: not idempotent.
        idempotent: false,
        acks: -1,
        linger: Duration::from_millis(1),
        ..ProducerConfig::default()
    };
    Ok(producers(bootstrap, 1, &config).await?.remove(0))
}

/// Sends until the run's producers are stopped (or `count_max`), then flushes and waits
/// for every acknowledgement. Each acknowledgement is recorded as publish latency.
pub async fn produce(producer: Arc<Producer>, load: Load, run: Arc<Run>) {
    let template = template(load.size);
    // Deliveries go to a collector that awaits them in any order. The channel is not
    // bounded by count, but by the producer itself: `send` waits once the producer's
    // buffer (`buffer_bytes_max`) is full, and every delivery holds buffered bytes.
    let (acks, pending) = tokio::sync::mpsc::unbounded_channel::<(Delivery, Instant)>();
    let collector = tokio::spawn(collect(pending, Arc::clone(&run)));
    let started = Instant::now();
    let mut sent: u64 = 0;
    while !run.stopped() && load.count_max.is_none_or(|max| sent < max) {
        if let Some(rate) = load.rate {
            let due = started + Duration::from_secs_f64(sent as f64 / rate);
            if due > Instant::now() {
                // Wakes at the due time at the latest, checking the stop flag at least
                // every 50 ms so that a slow rate still ends on time.
                let wake = due.min(Instant::now() + Duration::from_millis(50));
                tokio::time::sleep_until(wake.into()).await;
                continue;
            }
        }
        let record = Record {
            value: Some(stamped(&template)),
            partition: load.round_robin.map(|n| (sent % n as u64) as i32),
            ..Record::default()
        };
        match producer.send(&load.topic, record).await {
            Ok(delivery) => {
                let _ = acks.send((delivery, Instant::now()));
                if sent == 0 {
                    run.meter
                        .first_publish_us
                        .fetch_min(run.origin.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
                run.meter.published.fetch_add(1, Ordering::Relaxed);
                run.meter
                    .published_bytes
                    .fetch_add(load.size as u64, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(error = %e, "send failed");
                run.meter.publish_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        sent += 1;
        if load.rate.is_none() && sent.is_multiple_of(64) {
            // At full speed `send` rarely waits; yield so that consumers and the
            // progress line get their turn on a 2-core machine.
            tokio::task::yield_now().await;
        }
    }
    if let Err(e) = producer.flush().await {
        tracing::warn!(error = %e, "flush failed");
    }
    drop(acks);
    let _ = collector.await;
}

async fn collect(
    mut deliveries: tokio::sync::mpsc::UnboundedReceiver<(Delivery, Instant)>,
    run: Arc<Run>,
) {
    let mut waiting = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            next = deliveries.recv(), if open => match next {
                Some((delivery, sent)) => waiting.push(async move { (delivery.wait().await, sent) }),
                None => open = false,
            },
            Some((outcome, sent)) = waiting.next(), if !waiting.is_empty() => {
                match outcome {
                    Ok(_) => run
                        .publish_latency
                        .lock()
                        .expect("publish latency lock")
                        .record_us(sent.elapsed().as_micros() as u64),
                    Err(_) => {
                        run.meter.publish_errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            else => break,
        }
    }
}

/// What a consumer does with each message besides measuring it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Work {
    /// Time each message takes to process (I/O-bound work, spent sleeping).
    pub per_message: Duration,
}

/// Assigns every partition of `topic` to a new consumer with its own cluster connection.
pub async fn consumer(
    bootstrap: &str,
    topic: &str,
    partitions: Option<Vec<i32>>,
    start: StartOffset,
    config: ConsumerConfig,
) -> anyhow::Result<Consumer> {
    let cluster = Cluster::connect(bootstrap, ClientConfig::default()).await?;
    let partitions = match partitions {
        Some(p) => p,
        None => (0..cluster.topic(topic).await?.leaders.len() as i32).collect(),
    };
    let assignment = partitions
        .into_iter()
        .map(|p| (topic.to_string(), p, start))
        .collect();
    Ok(Consumer::assign(cluster, config, assignment).await?)
}

/// Reads until the run ends (consumers that are not measured stop as soon as the
/// producers do, and never hold the run up). Returns the end-to-end latencies.
pub async fn consume(
    consumer: Consumer,
    run: Arc<Run>,
    meter: Arc<ConsumerMeter>,
    work: Work,
) -> (Arc<ConsumerMeter>, Recorder) {
    let mut recorder = Recorder::with_warmup(run.origin, run.warmup);
    loop {
        if run.ended() || (!meter.measured && run.stopped()) {
            break;
        }
        let record = match consumer.try_next() {
            Some(r) => r,
            None => match tokio::time::timeout(STOP_POLL, consumer.next()).await {
                Ok(r) => r,
                Err(_) => continue,
            },
        };
        if !work.per_message.is_zero() {
            tokio::time::sleep(work.per_message).await;
        }
        observe(&record, &run, &meter, &mut recorder);
    }
    (meter, recorder)
}

/// Measures a message once it is processed: end-to-end latency includes the work.
fn observe(record: &ConsumedRecord, run: &Run, meter: &ConsumerMeter, recorder: &mut Recorder) {
    if let Some(stamp) = stamp_of(record.value.as_ref()) {
        recorder.record_us(now_us().saturating_sub(stamp));
    }
    if meter.measured {
        run.meter
            .last_consume_us
            .fetch_max(run.origin.elapsed().as_micros() as u64, Ordering::Relaxed);
    }
    meter.messages.fetch_add(1, Ordering::Relaxed);
    meter.bytes.fetch_add(
        record.value.as_ref().map_or(0, |v| v.len() as u64),
        Ordering::Relaxed,
    );
}

/// A unique topic name for one run of a scenario.
pub fn topic_name(scenario: &str, what: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("bench-{scenario}-{what}-{}", &id[..8])
}

/// Creates a topic and waits until its metadata shows every partition with a leader.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    create_topic_with(bootstrap, topic, partitions, &[]).await
}

/// [`create_topic`] with topic settings.
pub async fn create_topic_with(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> anyhow::Result<()> {
    let cluster = Cluster::connect(bootstrap, ClientConfig::default()).await?;
    cluster.create_topic(topic, partitions, configs).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        cluster.invalidate(topic);
        match cluster.topic(topic).await {
            Ok(meta) if meta.leaders.len() == partitions as usize => return Ok(()),
            Ok(_) | Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Ok(meta) => anyhow::bail!(
                "topic {topic} has {} partitions, not {partitions}",
                meta.leaders.len()
            ),
            Err(e) => return Err(e.into()),
        }
    }
}

/// A backlog of `count` messages for catch-up readers, written with acks=1 (none when
/// `count` is 0); returns the seconds it took.
pub async fn prefill_backlog(
    bootstrap: &str,
    topic: &str,
    count: u64,
    size: usize,
) -> anyhow::Result<f64> {
    if count == 0 {
        return Ok(0.0);
    }
    let config = ProducerConfig {
        // The lab measures lanes and deflection as they were: not idempotent.
        idempotent: false,
        acks: 1,
        ..ProducerConfig::default()
    };
    prefill(bootstrap, topic, count, size, config).await
}

/// Writes `count` messages of `size` bytes as fast as possible (a backlog to read later),
/// printing progress; returns the seconds it took.
pub async fn prefill(
    bootstrap: &str,
    topic: &str,
    count: u64,
    size: usize,
    config: ProducerConfig,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let producer = producers(bootstrap, 1, &config).await?.remove(0);
    let template = template(size);
    let mib = |messages: u64| (messages * size as u64) as f64 / (1024.0 * 1024.0);
    let mut last = (Instant::now(), 0u64);
    for i in 0..count {
        let record = Record {
            value: Some(stamped(&template)),
            ..Record::default()
        };
        producer.send(topic, record).await?;
        let since = last.0.elapsed();
        if since >= Duration::from_secs(1) {
            eprintln!(
                "[prefill] {topic}: {:.0} of {:.0} MiB ({:.0}%), {:.0} MiB/s",
                mib(i),
                mib(count),
                100.0 * i as f64 / count as f64,
                mib(i - last.1) / since.as_secs_f64()
            );
            last = (Instant::now(), i);
        }
    }
    producer.flush().await?;
    let stats = producer.stats();
    if stats.records_failed > 0 {
        anyhow::bail!("prefill: {} records failed", stats.records_failed);
    }
    let seconds = started.elapsed().as_secs_f64();
    eprintln!("[prefill] {topic}: {:.0} MiB in {seconds:.1} s", mib(count));
    Ok(seconds)
}
