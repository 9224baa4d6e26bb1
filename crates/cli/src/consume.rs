//! `headway consume TOPIC`: print records, kcat-style.

use crate::progress::Progress;
use anyhow::Context;
use clap::Args;
use headway_client::{
    Cluster, ConsumedRecord, Consumer, ConsumerConfig, GroupConfig, GroupConsumer, StartOffset,
};
use std::io::Write;
use std::time::Duration;

#[derive(Args)]
pub struct ConsumeArgs {
    /// Topic to read.
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
    /// Start at the earliest offset (default: only new records).
    #[arg(long)]
    from_beginning: bool,
    /// Read only these partitions (repeatable; default: all).
    #[arg(long, short = 'p')]
    partition: Vec<i32>,
    /// Stop after this many records.
    #[arg(long, short = 'c')]
    count: Option<u64>,
    /// Stop when every partition has been read to its end.
    #[arg(long, short = 'e')]
    exit_at_end: bool,
    /// Output per record, with {key} {value} {partition} {offset} {timestamp} {headers}.
    #[arg(long, short = 'f', default_value = "{value}")]
    format: String,
    /// Consume as a member of this consumer group (partitions assigned by the group,
    /// starting at its committed offsets; what was read is committed at the end).
    #[arg(long, short = 'g')]
    group: Option<String>,
    /// No progress lines (the summary is still printed).
    #[arg(long, short = 'q')]
    quiet: bool,
}

/// A `--format` string, split once into literal text and fields.
enum Piece {
    Text(String),
    Key,
    Value,
    Partition,
    Offset,
    Timestamp,
    Headers,
}

fn parse_format(format: &str) -> anyhow::Result<Vec<Piece>> {
    let mut pieces = Vec::new();
    let mut rest = format;
    while let Some(open) = rest.find('{') {
        pieces.push(Piece::Text(rest[..open].to_string()));
        let close = rest[open..]
            .find('}')
            .context("--format has an unclosed '{'")?
            + open;
        pieces.push(match &rest[open + 1..close] {
            "key" => Piece::Key,
            "value" => Piece::Value,
            "partition" => Piece::Partition,
            "offset" => Piece::Offset,
            "timestamp" => Piece::Timestamp,
            "headers" => Piece::Headers,
            other => anyhow::bail!("--format field {{{other}}} is not one of key, value, partition, offset, timestamp, headers"),
        });
        rest = &rest[close + 1..];
    }
    pieces.push(Piece::Text(rest.to_string()));
    Ok(pieces)
}

fn render(out: &mut impl Write, pieces: &[Piece], r: &ConsumedRecord) -> std::io::Result<()> {
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.write_all(t.as_bytes())?,
            Piece::Key => out.write_all(r.key.as_deref().unwrap_or_default())?,
            Piece::Value => out.write_all(r.value.as_deref().unwrap_or_default())?,
            Piece::Partition => write!(out, "{}", r.partition)?,
            Piece::Offset => write!(out, "{}", r.offset)?,
            Piece::Timestamp => write!(out, "{}", r.timestamp_ms)?,
            Piece::Headers => {
                for (i, (k, v)) in r.headers.iter().enumerate() {
                    let value = v
                        .as_deref()
                        .map(String::from_utf8_lossy)
                        .unwrap_or_default();
                    write!(out, "{}{k}={value}", if i > 0 { "," } else { "" })?;
                }
            }
        }
    }
    out.write_all(b"\n")
}

/// Where records come from: assigned partitions, or a group membership.
enum Source {
    Partitions(Consumer),
    Group(GroupConsumer),
}

impl Source {
    fn try_next(&self) -> Option<ConsumedRecord> {
        match self {
            Source::Partitions(c) => c.try_next(),
            Source::Group(g) => g.try_next(),
        }
    }

    async fn next(&self) -> ConsumedRecord {
        match self {
            Source::Partitions(c) => c.next().await,
            Source::Group(g) => g.next().await,
        }
    }

    fn caught_up(&self) -> bool {
        match self {
            Source::Partitions(c) => c.caught_up(),
            Source::Group(g) => g.caught_up(),
        }
    }

    /// Everything printed so far is out (flushed): a group may commit it.
    fn printed(&self) {
        if let Source::Group(g) = self {
            g.acknowledge();
        }
    }
}

/// Most time output may wait in the buffer while records keep coming: what a group
/// commits is what was flushed.
const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    // First, so that a signal sent while the consumer starts ends it cleanly too.
    let stop = crate::signals::Signals::install()?.stop_flag();
    let pieces = parse_format(&args.format)?;
    let cluster = Cluster::connect(&args.bootstrap, args.security.client_config()?)
        .await
        .with_context(|| format!("connecting to {}", args.bootstrap))?;
    let start = if args.from_beginning {
        StartOffset::Earliest
    } else {
        StartOffset::Latest
    };
    let source = match &args.group {
        Some(group) => {
            // A record counts as consumed once it is written out (flushed), not when
            // it is taken into the output buffer: a closed stdout, or an end before
            // the flush, leaves it to the next owner.
            let config = GroupConfig {
                reset: start,
                explicit_acknowledge: true,
                ..GroupConfig::default()
            };
            Source::Group(
                GroupConsumer::subscribe(
                    cluster,
                    group,
                    vec![args.topic.clone()],
                    ConsumerConfig::default(),
                    config,
                )
                .await?,
            )
        }
        None => {
            let partitions: Vec<i32> = if args.partition.is_empty() {
                (0..cluster.topic(&args.topic).await?.leaders.len() as i32).collect()
            } else {
                args.partition.clone()
            };
            let assignment = partitions
                .iter()
                .map(|p| (args.topic.clone(), *p, start))
                .collect();
            Source::Partitions(
                Consumer::assign(cluster, ConsumerConfig::default(), assignment).await?,
            )
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut progress = Progress::new("consumed", !args.quiet);
    let (mut records, mut bytes) = (0u64, 0u64);
    // Ends at the count, at the end (-e), on SIGINT or SIGTERM, or when stdout closes
    // (a reader such as `head` exits): each is a normal end, with a final commit.
    let ended = async {
        let mut flushed = tokio::time::Instant::now();
        while args.count.is_none_or(|c| records < c) && !stop.raised() {
            if flushed.elapsed() >= FLUSH_INTERVAL {
                out.flush()?;
                source.printed();
                flushed = tokio::time::Instant::now();
            }
            let record = match source.try_next() {
                Some(r) => r,
                None => {
                    out.flush()?;
                    source.printed();
                    flushed = tokio::time::Instant::now();
                    if args.exit_at_end && source.caught_up() {
                        break;
                    }
                    tokio::select! {
                        r = source.next() => r,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                        _ = stop.wait() => break,
                    }
                }
            };
            records += 1;
            bytes += record.value.as_ref().map_or(0, |v| v.len() as u64);
            render(&mut out, &pieces, &record)?;
            progress.tick(records, bytes);
        }
        out.flush()?;
        source.printed();
        Ok(())
    }
    .await;
    crate::output::ignore_closed_stdout(ended)?;
    if let Source::Group(group) = source {
        group
            .close()
            .await
            .context("committing and leaving the group")?;
    }
    progress.finish(records, bytes, None);
    Ok(())
}
