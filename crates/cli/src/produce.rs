//! `headway produce TOPIC`: records from stdin lines, or generated with `--count`.

use crate::progress::Progress;
use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use headway_client::{Cluster, Compression, Producer, ProducerConfig, Record};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

#[derive(Args)]
pub struct ProduceArgs {
    /// Topic to write to (created with broker defaults if the broker auto-creates).
    topic: String,
    /// Broker to start from, HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        short = 'b',
        env = "HEADWAY_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    bootstrap: String,
    #[command(flatten)]
    security: crate::security_args::SecurityArgs,
    /// Generate this many records instead of reading stdin.
    #[arg(long)]
    count: Option<u64>,
    /// Size in bytes of each generated record's value.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Split each stdin line at the first SEP into key and value; with a second SEP,
    /// the part after it is headers, `k1=v1,k2=v2` (KEY SEP VALUE SEP HEADERS).
    #[arg(long, short = 'K', value_name = "SEP")]
    key_separator: Option<String>,
    /// Add a header to every record, KEY=VALUE (repeatable).
    #[arg(long = "header", short = 'H', value_name = "KEY=VALUE", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// Write every record to this partition (default: by key hash, or rotating).
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// all (or -1), 1 or 0.
    #[arg(long, default_value = "all", allow_hyphen_values = true)]
    acks: String,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Lanes (connections) per partition leader [default: 4].
    #[arg(long)]
    lanes: Option<usize>,
    /// Batches in flight per lane [default: 4].
    #[arg(long)]
    lane_in_flight: Option<usize>,
    /// Wait for a full lane instead of deflecting its batch to the next lane.
    #[arg(long)]
    no_deflect: bool,
    /// Keep each partition on one lane, so a partition's records stay in order.
    #[arg(long)]
    ordered: bool,
    /// How long a batch may wait for more records, in ms [default: 5].
    #[arg(long)]
    linger_ms: Option<u64>,
    /// Seal a batch at this many bytes [default: 131072].
    #[arg(long)]
    batch_bytes: Option<usize>,
    /// Without a producer id and sequence numbers: a batch retried after a lost
    /// answer may be stored twice (idempotence is on by default with --acks all).
    #[arg(long)]
    no_idempotence: bool,
    /// How long a batch may take, retries included, before it fails, in ms [default: 120000].
    #[arg(long)]
    delivery_timeout_ms: Option<u64>,
    /// No progress lines (the summary is still printed).
    #[arg(long, short = 'q')]
    quiet: bool,
}

fn parse_header(header: &str) -> Result<(String, String), String> {
    header
        .split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("a header is KEY=VALUE, not {header:?}"))
}

fn parse_acks(acks: &str) -> anyhow::Result<i16> {
    match acks {
        "all" | "-1" => Ok(-1),
        "1" => Ok(1),
        "0" => Ok(0),
        other => anyhow::bail!("--acks must be all, 1 or 0, not {other:?}"),
    }
}

fn parse_compression(name: &str) -> anyhow::Result<Compression> {
    Ok(match name {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => {
            anyhow::bail!("--compression must be none, gzip, snappy, lz4 or zstd, not {other:?}")
        }
    })
}

impl ProduceArgs {
    fn config(&self) -> anyhow::Result<ProducerConfig> {
        let defaults = ProducerConfig::default();
        Ok(ProducerConfig {
            acks: parse_acks(&self.acks)?,
            compression: parse_compression(&self.compression)?,
            lanes: self.lanes.unwrap_or(defaults.lanes),
            lane_in_flight_max: self.lane_in_flight.unwrap_or(defaults.lane_in_flight_max),
            deflect: !self.no_deflect,
            ordered: self.ordered,
            linger: self
                .linger_ms
                .map_or(defaults.linger, Duration::from_millis),
            batch_bytes_max: self.batch_bytes.unwrap_or(defaults.batch_bytes_max),
            idempotent: !self.no_idempotence,
            delivery_timeout: self
                .delivery_timeout_ms
                .map_or(defaults.delivery_timeout, Duration::from_millis),
            ..defaults
        })
    }

    fn record(&self, line: &str) -> Record {
        let mut headers = self.headers();
        let (key, value) = match self.key_separator.as_deref() {
            Some(sep) => match line.split_once(sep) {
                Some((key, rest)) => {
                    let value = match rest.split_once(sep) {
                        Some((value, extra)) => {
                            headers.extend(extra.split(',').filter(|h| !h.is_empty()).map(|h| {
                                let (k, v) = h.split_once('=').unwrap_or((h, ""));
                                (k.to_string(), Some(Bytes::copy_from_slice(v.as_bytes())))
                            }));
                            value
                        }
                        None => rest,
                    };
                    (Some(Bytes::copy_from_slice(key.as_bytes())), value)
                }
                None => (None, line),
            },
            None => (None, line),
        };
        Record {
            key,
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers,
            partition: self.partition,
            ..Record::default()
        }
    }

    /// The `-H` headers, as every record carries them.
    fn headers(&self) -> Vec<(String, Option<Bytes>)> {
        self.headers
            .iter()
            .map(|(k, v)| (k.clone(), Some(Bytes::copy_from_slice(v.as_bytes()))))
            .collect()
    }
}

pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let cluster = Cluster::connect(&args.bootstrap, args.security.client_config()?)
        .await
        .with_context(|| format!("connecting to {}", args.bootstrap))?;
    let producer = Producer::new(cluster, args.config()?)?;
    let mut progress = Progress::new("produced", !args.quiet);
    let (mut records, mut bytes) = (0u64, 0u64);
    if let Some(count) = args.count {
        let value = Bytes::from(
            (0..args.size)
                .map(|i| b'a' + (i % 26) as u8)
                .collect::<Vec<u8>>(),
        );
        for _ in 0..count {
            let record = Record {
                value: Some(value.clone()),
                headers: args.headers(),
                partition: args.partition,
                ..Record::default()
            };
            producer.send(&args.topic, record).await?;
            records += 1;
            bytes += args.size as u64;
            progress.tick(records, bytes);
        }
    } else {
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await.context("reading stdin")? {
            bytes += line.len() as u64;
            producer.send(&args.topic, args.record(&line)).await?;
            records += 1;
            progress.tick(records, bytes);
        }
    }
    producer.flush().await?;
    let stats = producer.stats();
    progress.finish(
        stats.records_acked,
        stats.bytes_acked,
        Some(stats.records_failed),
    );
    for lane in stats
        .lanes
        .iter()
        .filter(|l| l.full_events > 0 || l.wait_events > 0)
    {
        eprintln!(
            "  lane {} (broker {}): {} batches, {} full, waited {} times for {:.3} s",
            lane.lane,
            lane.node,
            lane.batches,
            lane.full_events,
            lane.wait_events,
            lane.wait.as_secs_f64()
        );
    }
    if stats.records_failed > 0 {
        anyhow::bail!("{} records were not acknowledged", stats.records_failed);
    }
    Ok(())
}
