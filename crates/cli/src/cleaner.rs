//! `headway cleaner --metrics HOST:PORT`: what a headway broker's log cleaner has done
//! to each compacted partition, read from the broker's `/metrics` (the cleaner is
//! headway's own, so the Kafka protocol does not carry it).

use crate::output::row;
use crate::output::{self, or_dash, table, Format};
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The longest the metrics endpoint may take to answer.
const METRICS_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of an answer read (the cleaner's lines are a small part of it).
const METRICS_BYTES_MAX: u64 = 64 * 1024 * 1024;

#[derive(Args)]
pub struct CleanerArgs {
    /// The broker's metrics address (`metrics_listen`), HOST:PORT.
    #[arg(long, env = "HEADWAY_METRICS")]
    metrics: String,
    /// Only this topic's partitions.
    #[arg(long, short = 't')]
    topic: Option<String>,
    /// Output: an aligned table, or one JSON document.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// One compacted partition as the cleaner saw it.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Cleaning {
    pub topic: String,
    pub partition: i32,
    pub dirty_ratio: Option<f64>,
    pub passes: Option<u64>,
    pub bytes_read: Option<u64>,
    pub bytes_written: Option<u64>,
    pub records_removed: Option<u64>,
    /// Seconds since the epoch.
    pub last_pass: Option<f64>,
}

pub fn run(args: CleanerArgs) -> anyhow::Result<()> {
    let text = scrape(&args.metrics)
        .with_context(|| format!("reading http://{}/metrics", args.metrics))?;
    let mut partitions = parse(&text);
    if let Some(topic) = &args.topic {
        partitions.retain(|p| &p.topic == topic);
    }
    output::print(args.format, &partitions, |out| {
        let mut rows = vec![row![
            "TOPIC",
            "PARTITION",
            "DIRTY-RATIO",
            "PASSES",
            "BYTES-READ",
            "BYTES-WRITTEN",
            "RECORDS-REMOVED",
            "LAST-PASS"
        ]];
        for p in &partitions {
            rows.push(row![
                p.topic,
                p.partition,
                or_dash(p.dirty_ratio.map(|r| format!("{r:.3}"))),
                or_dash(p.passes),
                or_dash(p.bytes_read),
                or_dash(p.bytes_written),
                or_dash(p.records_removed),
                or_dash(p.last_pass.map(|s| format!("{s:.0}")))
            ]);
        }
        table(out, &rows)
    })
}

/// The text of `http://address/metrics` (HTTP/1.0, so the answer ends with the
/// connection).
fn scrape(address: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(METRICS_TIMEOUT))?;
    stream.set_write_timeout(Some(METRICS_TIMEOUT))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut answer = String::new();
    stream.take(METRICS_BYTES_MAX).read_to_string(&mut answer)?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .context("the answer has no body")?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(status.split_whitespace().nth(1) == Some("200"), "{status}");
    Ok(body.to_string())
}

/// The cleaner's families (`headway_cleaner_*{topic,partition}`) of a metrics text, one
/// entry per partition, sorted by topic and partition.
pub fn parse(text: &str) -> Vec<Cleaning> {
    let mut found: BTreeMap<(String, i32), Cleaning> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("headway_cleaner_") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let (Some(topic), Some(partition)) = (label(labels, "topic"), label(labels, "partition"))
        else {
            continue;
        };
        let (Ok(partition), Ok(value)) = (partition.parse::<i32>(), value.trim().parse::<f64>())
        else {
            continue;
        };
        let entry = found
            .entry((topic.clone(), partition))
            .or_insert_with(|| Cleaning {
                topic,
                partition,
                ..Cleaning::default()
            });
        let count = Some(value as u64);
        match name {
            "dirty_ratio" => entry.dirty_ratio = Some(value),
            "passes" => entry.passes = count,
            "bytes_read" => entry.bytes_read = count,
            "bytes_written" => entry.bytes_written = count,
            "records_removed" => entry.records_removed = count,
            "last_pass_timestamp_seconds" => entry.last_pass = Some(value),
            _ => {}
        }
    }
    found.into_values().collect()
}

/// The value of `name="..."` in a label set (the cleaner's labels hold topic names and
/// numbers, which need no unescaping beyond `\"` and `\\`).
fn label(labels: &str, name: &str) -> Option<String> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let mut value = String::new();
    let mut chars = labels[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(value),
            '\\' => value.push(chars.next()?),
            c => value.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleaners_lines_become_one_row_per_partition() {
        let text = "# HELP headway_cleaner_passes Cleaning passes\n\
            headway_cleaner_dirty_ratio{topic=\"t\",partition=\"1\"} 0.25\n\
            headway_cleaner_passes{topic=\"t\",partition=\"1\"} 3\n\
            headway_cleaner_passes{topic=\"a\",partition=\"0\"} 1\n\
            headway_cleaner_last_pass_timestamp_seconds{topic=\"t\",partition=\"1\"} 1795504599.5\n\
            headway_cleaner_bytes_read{topic=\"t\",partition=\"1\"} 1024\n\
            headway_partition_high_watermark{topic=\"t\",partition=\"1\"} 9\n";
        let parsed = parse(text);
        assert_eq!(parsed.len(), 2);
        assert_eq!((parsed[0].topic.as_str(), parsed[0].passes), ("a", Some(1)));
        let t = &parsed[1];
        assert_eq!((t.topic.as_str(), t.partition), ("t", 1));
        assert_eq!(t.dirty_ratio, Some(0.25));
        assert_eq!(t.passes, Some(3));
        assert_eq!(t.bytes_read, Some(1024));
        assert_eq!(t.last_pass, Some(1795504599.5));
        assert_eq!(t.records_removed, None);
        assert_eq!(
            label("topic=\"a\\\"b\",x=\"1\"", "topic").as_deref(),
            Some("a\"b")
        );
    }
}
