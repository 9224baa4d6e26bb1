//! `noisy-neighbour`: do light, latency-sensitive clients wait for heavy neighbours on
//! the same broker and disk?
//!
//! A light producer sends `--rate` messages per second of `--size` bytes (acks=all,
//! linger 1 ms) to its own 1-partition topic, and `--fast` consumers read that topic from
//! its end. A backlog of `--backlog-mb` MiB is written into the light topic first (older
//! data of the same stream), then three phases of equal length run back to back:
//!
//! 1. *quiet*: the light load alone.
//! 2. *writer*: the same, plus a writer on another 1-partition topic sending
//!    `--writer-size` messages (acks=all, large batches) as fast as the broker takes
//!    them.
//! 3. *catch-up*: the same light load (no writer), plus, on the light topic, a consumer
//!    replaying the cold backlog from offset 0 at full speed, a consumer behind the delay
//!    proxy (`--delay-ms` each way) and a stuck client that sends one Fetch from offset 0
//!    and never reads its socket.
//!
//! The first tenth of each phase is warm-up, left out of the percentiles; the neighbours
//! (writer, readers) start when it ends, so that all they do is measured (a 1 GiB cold
//! replay can take less than the warm-up).
//!
//! The backlog sits in the light topic, not a topic of its own: a consumer catching up
//! is a reader of the same stream that fell behind or restarted from an old offset, so
//! it reads old segments of the very partition the tail readers and the light producer
//! use. Its files (every file under `--evict-dir`, and the data directory of a broker the
//! scenario started) are written back and dropped from the page cache after the prefill
//! and again before phase 3 ([`crate::evict`]), so the replay reads the disk and phase 3
//! does not inherit the writer's dirty pages.
//!
//! The figures that matter: the light producer's publish p99 and the fast consumers'
//! end-to-end p99 in phases 2 and 3 over phase 1 (1.0: the neighbours cost nothing), next
//! to the writer's MB/s and the catch-up replay's MB/s.
//!
//! With `--librdkafka`, the light producer and the fast consumers are
//! `bench/librdkafka_probe.py` (confluent-kafka, one process per client) run with the
//! repository's `.venv`; the disturbers stay this process's.

use super::context::{Common, Ctx};
use super::heavy_writer::HeavyWriter;
use super::stuck_consumer::{connect_stuck, spawn_stuck};
use super::{
    caught_up, disturber, evict_backlog, fast_consumers, measure, replay_seconds, with_lag,
    ConsumerSpec,
};
use crate::latency::LatencySummary;
use crate::latency::Recorder;
use crate::load::ConsumerMeter;
use crate::load::{self, Load, Reading, Run, STAMP_BYTES};
use crate::report::Report;
use crate::report::{ConsumerReport, Fairness, Rate, RunReport, SeriesPoint};
use anyhow::Context;
use clap::Args;
use headway_client::StartOffset;
use serde::Deserialize;
use serde_json::json;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

#[derive(Args, Debug, Clone)]
pub struct NoisyNeighbourArgs {
    #[command(flatten)]
    pub common: Common,
    /// Fast consumers reading the light topic from its end.
    #[arg(long, default_value_t = 3)]
    pub fast: usize,
    /// Messages per second from the light producer.
    #[arg(long, default_value_t = 2000.0)]
    pub rate: f64,
    /// Light producer's message size in bytes.
    #[arg(long, default_value_t = 1024)]
    pub size: usize,
    /// The writer's message size in bytes (phase 2).
    #[arg(long, default_value_t = 16 * 1024)]
    pub writer_size: usize,
    /// Most the writer writes in phase 2, in MiB, so that a fast disk does not fill up:
    /// it stops early when it gets there [default: 8192; with --quick 64].
    #[arg(long)]
    pub writer_mb_max: Option<u64>,
    /// Backlog written into the light topic before the phases, replayed cold in phase 3,
    /// in MiB [default: 1024; with --quick 8].
    #[arg(long)]
    pub backlog_mb: Option<u64>,
    #[command(flatten)]
    pub readers: super::ReaderArgs,
    /// The neighbours of phase 3, comma-separated: `catch-up` (the cold replay),
    /// `slow` (the reader behind the delay proxy) and `stuck` (the client that never
    /// reads). Leaving some out shows what each one costs; `none` leaves them all out.
    #[arg(long, value_delimiter = ',', default_value = "catch-up,slow,stuck")]
    pub neighbours: Vec<Neighbour>,
    /// A shell command run beside phase 3's light load, from the end of its warm-up
    /// until it exits (killed if it outlasts the phase): work that is not the broker's,
    /// such as `bench/replay_equivalent.py` reading the backlog's files, to compare
    /// with what a neighbour costs through the broker. It gets the light topic's name
    /// in `HEADWAY_LIGHT_TOPIC` and the broker's data directory in `HEADWAY_DATA_DIR`
    /// (the one the scenario started, else the first `--evict-dir`); its exit status
    /// and seconds are in the report.
    #[arg(long, value_name = "COMMAND")]
    pub external_neighbour: Option<String>,
    /// Run the light producer and the fast consumers as librdkafka clients
    /// (`--probe` with `--python`); the report's label gets `-librdkafka`.
    #[arg(long)]
    pub librdkafka: bool,
    /// Python with confluent-kafka, for --librdkafka.
    #[arg(long, default_value = ".venv/bin/python")]
    pub python: PathBuf,
    /// The librdkafka probe, for --librdkafka.
    #[arg(long, default_value = "bench/librdkafka_probe.py")]
    pub probe: PathBuf,
    /// A topic setting of the light topic at its creation, `KEY=VALUE`; repeatable (e.g.
    /// `remote.storage.enable=true` and `local.retention.bytes=0`, for a backlog that
    /// phase 3 replays from the remote tier).
    #[arg(long, value_name = "KEY=VALUE")]
    pub light_config: Vec<String>,
    /// After the prefill, wait until the light partition's directory (under the broker's
    /// data directory: the scenario's, else the last `--evict-dir`) holds at most two
    /// segments: with a tiered light topic, the backlog then lives only in the remote
    /// tier. At most `TIERED_WAIT`, with a line on stderr every 10 s.
    #[arg(long)]
    pub wait_tiered: bool,
}

/// Longest wait for the backlog to leave the local disk (`--wait-tiered`).
const TIERED_WAIT: Duration = Duration::from_secs(900);

/// Waits until the light partition's directory under `data_dir` holds at most two
/// segments (`--wait-tiered`); answers the seconds waited.
async fn wait_tiered(data_dir: &std::path::Path, light: &str) -> anyhow::Result<f64> {
    let dir = data_dir.join("topics").join(light).join("0");
    let started = std::time::Instant::now();
    let mut said = started;
    loop {
        let segments = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .count();
        if segments <= 2 {
            return Ok(started.elapsed().as_secs_f64());
        }
        anyhow::ensure!(
            started.elapsed() < TIERED_WAIT,
            "{segments} local segments of {light} after {TIERED_WAIT:?}: is the topic tiered?"
        );
        if said.elapsed() >= Duration::from_secs(10) {
            eprintln!("noisy-neighbour: waiting for the remote tier: {segments} local segments of {light}");
            said = std::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A neighbour of phase 3.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Neighbour {
    CatchUp,
    Slow,
    Stuck,
    /// No neighbour from the broker's clients (with `--external-neighbour`, only it).
    None,
}

const PHASES: [&str; 3] = ["quiet", "writer", "catch-up"];
/// Share of each phase that is warm-up, left out of the percentiles.
const WARMUP_FRACTION: f64 = 0.1;
/// How long the probe may take to connect its clients, and after its time to report.
const PROBE_START_MAX: Duration = Duration::from_secs(60);
const PROBE_FINISH_MAX: Duration = Duration::from_secs(60);
const MIB: u64 = 1024 * 1024;

pub async fn run(ctx: &Ctx, args: &NoisyNeighbourArgs) -> anyhow::Result<Report> {
    let quick = ctx.common.quick;
    let budget = ctx.duration(180.0, 12.0);
    let size = args.size.max(STAMP_BYTES);
    let light = load::topic_name("noisy-neighbour", "light");
    let heavy = load::topic_name("noisy-neighbour", "writer");
    let light_config = args
        .light_config
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .with_context(|| format!("--light-config {kv}: not KEY=VALUE"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    load::create_topic_with(ctx.bootstrap(), &light, 1, &light_config).await?;
    load::create_topic(ctx.bootstrap(), &heavy, 1).await?;
    let backlog_mb = args.backlog_mb.unwrap_or(if quick { 8 } else { 1024 });
    let backlog_messages = backlog_mb * MIB / size as u64;
    let writer_mb_max = args.writer_mb_max.unwrap_or(if quick { 64 } else { 8192 });
    let dirs = args.readers.evict_dirs(ctx);
    let prefill_s = load::prefill_backlog(ctx.bootstrap(), &light, backlog_messages, size).await?;
    let mut eviction_notes = Vec::new();
    // The wait for the remote tier does not count against the phases' time.
    let mut tier_wait = Duration::ZERO;
    if args.wait_tiered {
        let data_dir = dirs
            .last()
            .context("--wait-tiered needs the broker's data directory (--evict-dir)")?;
        tier_wait = Duration::from_secs_f64(wait_tiered(data_dir, &light).await?);
        eviction_notes.push(format!(
            "light topic settings {:?}; the backlog left the local disk {:.1} s after the \
             prefill (not counted in the phases' time)",
            args.light_config,
            tier_wait.as_secs_f64()
        ));
    }
    if !dirs.is_empty() {
        // Writes the backlog back now, so that its write-back does not land in phase 1.
        let (_, note) = evict_backlog("noisy-neighbour", &dirs, "after the prefill").await?;
        eviction_notes.push(note);
    }
    // What is left of the budget, less two seconds for the eviction before phase 3.
    let per_phase = budget
        .saturating_sub(ctx.started.elapsed().saturating_sub(tier_wait) + Duration::from_secs(2))
        .div_f64(PHASES.len() as f64)
        .max(Duration::from_secs(2));
    let warmup = if quick {
        Duration::ZERO
    } else {
        per_phase.mul_f64(WARMUP_FRACTION)
    };
    let proxy = args.readers.proxy(ctx.bootstrap()).await?;
    let clients = if args.librdkafka {
        "librdkafka (bench/librdkafka_probe.py, one process per client)"
    } else {
        "headway's client"
    };
    let neighbours = args
        .neighbours
        .iter()
        .filter(|n| **n != Neighbour::None)
        .filter_map(clap::ValueEnum::to_possible_value)
        .map(|v| v.get_name().to_string())
        .chain(args.external_neighbour.iter().map(|c| format!("`{c}`")))
        .collect::<Vec<_>>()
        .join(", ");
    let neighbours = if neighbours.is_empty() {
        "none".to_string()
    } else {
        neighbours
    };
    let mut report = ctx.report(
        "noisy-neighbour",
        vec![format!(
            "light producer: {} msg/s of {size} B, acks=all, linger 1 ms, 1 partition; {} fast \
             consumers from the end; clients: {clients}; phases of {:.1} s (the first {:.1} s \
             of each left out of the percentiles): quiet, writer ({} B messages, acks=all, \
             max rate up to {writer_mb_max} MiB, another topic), catch-up (replay from offset 0 of a {backlog_mb} MiB \
             backlog of the light topic, {}; a consumer behind a proxy adding {} ms each way; \
             a stuck client; of these: {neighbours}); prefill {prefill_s:.1} s",
            args.rate,
            args.fast,
            per_phase.as_secs_f64(),
            warmup.as_secs_f64(),
            args.writer_size,
            if dirs.is_empty() {
                "not evicted (no --evict-dir): it may be read from the page cache"
            } else {
                "cold (dropped from the page cache before the phase)"
            },
            args.readers.delay_ms,
        )],
    );
    if args.librdkafka {
        report.label = format!("{}-librdkafka", ctx.label);
    }
    let mut in_light = backlog_messages;
    let mut evicted_before = None;
    let mut catch_up = serde_json::Value::Null;
    let mut writer = serde_json::Value::Null;
    let mut external = serde_json::Value::Null;
    for phase in PHASES {
        if phase == "catch-up" && !dirs.is_empty() {
            let (evicted, note) =
                evict_backlog("noisy-neighbour", &dirs, "before the catch-up phase").await?;
            eviction_notes.push(note);
            evicted_before = Some(evicted);
        }
        let consumers = if args.librdkafka {
            Vec::new()
        } else {
            fast_consumers(ctx.bootstrap(), &light, args.fast).await?
        };
        // The neighbours of phase 3, connected now and started when the warm-up ends.
        let mut late = Vec::new();
        let mut stuck = None;
        let with = |n: Neighbour| phase == "catch-up" && args.neighbours.contains(&n);
        if with(Neighbour::CatchUp) {
            late.push(
                disturber(
                    ctx.bootstrap(),
                    &light,
                    "catch-up",
                    "catch-up",
                    StartOffset::Earliest,
                )
                .await?,
            );
        }
        if with(Neighbour::Slow) {
            let proxied = proxy.addr.to_string();
            late.push(disturber(&proxied, &light, "slow", "slow", StartOffset::Latest).await?);
        }
        if with(Neighbour::Stuck) {
            stuck = Some(connect_stuck(ctx.bootstrap()).await?);
        }
        let mut producers = Vec::new();
        if !args.librdkafka {
            let load = Load {
                topic: light.clone(),
                size,
                rate: Some(args.rate),
                count_max: None,
                round_robin: None,
            };
            producers.push((load::stream_producer(ctx.bootstrap()).await?, load));
        }
        let heavy_writer = if phase == "writer" {
            let w = HeavyWriter::connect(ctx.bootstrap(), &heavy, args.writer_size, writer_mb_max);
            Some(w.await?)
        } else {
            None
        };
        let mut probe = if args.librdkafka {
            Some(Probe::start(args, ctx.bootstrap(), &light, per_phase, warmup).await?)
        } else {
            None
        };
        // Created once every client is connected, so that the phase's clock and rates
        // start with the load.
        let run = Run::new(
            "noisy-neighbour",
            phase,
            Reading::Each,
            ctx.broker_pid(),
            warmup,
        );
        let late: Vec<_> = late
            .into_iter()
            .map(|spec| tokio::spawn(late_reader(spec, Arc::clone(&run), warmup)))
            .collect();
        let stuck = stuck.map(|s| {
            let topic = light.clone();
            tokio::spawn(async move {
                tokio::time::sleep(warmup).await;
                spawn_stuck(s, &topic, 1, 1, "stuck".into())
            })
        });
        let heavy_task = heavy_writer.map(|w| {
            let write = w.write("noisy-neighbour", ctx.broker_pid(), warmup, per_phase);
            tokio::spawn(write)
        });
        // When the catch-up consumer has read what the light topic held as the phase
        // started: the time its cold replay took, from its start after the warm-up.
        let watcher = (phase == "catch-up")
            .then(|| tokio::spawn(caught_up(Arc::clone(&run), "catch-up", in_light)));
        let outsider = match (&args.external_neighbour, phase) {
            (Some(command), "catch-up") => {
                let data_dir = ctx
                    .target
                    .data_dir()
                    .or_else(|| args.readers.evict_dir.first().cloned());
                let outsider = Outsider {
                    command: command.clone(),
                    light_topic: light.clone(),
                    data_dir,
                };
                let (start, end) = (run.origin + warmup, run.origin + per_phase);
                Some(tokio::spawn(outsider.run(start, end)))
            }
            _ => None,
        };
        let mut results = measure(&run, producers, consumers, per_phase, None).await;
        if let Some(task) = outsider {
            external = task.await.context("external neighbour")??;
        }
        for reader in late {
            results.push(reader.await.context("catch-up phase reader")?);
        }
        let replay_s = replay_seconds(watcher)
            .await
            .map(|s| (s - warmup.as_secs_f64()).max(1e-3));
        let stuck_json = match stuck {
            Some(task) => {
                let (stats, task) = task.await.context("stuck client")?;
                task.abort();
                Some(stats.json())
            }
            None => None,
        };
        let heavy_json = match heavy_task {
            Some(task) => Some(task.await.context("writer task")?),
            None => None,
        };
        let probed = match probe.take() {
            Some(p) => Some(p.finish(per_phase).await?),
            None => None,
        };
        let published = match &probed {
            Some(p) => p.publish.messages,
            None => run.meter.published.load(Ordering::Relaxed),
        };
        let results = with_lag(results, in_light, published);
        let params = json!({
            "phase": phase, "fast": args.fast, "rate": args.rate, "size": size,
            "writer": phase == "writer", "catch_up": phase == "catch-up",
            "writer_size": args.writer_size, "delay_ms": args.readers.delay_ms,
            "librdkafka": args.librdkafka,
        });
        let extra = json!({ "writer": heavy_json, "stuck": stuck_json });
        let mut r = run.report(params, results, extra);
        if let Some(p) = probed {
            p.into_run(&mut r);
        }
        if let Some(w) = r.extra["writer"].as_object() {
            writer = serde_json::Value::Object(w.clone());
        }
        if phase == "catch-up" {
            catch_up = catch_up_json(&r, in_light, size, replay_s);
        }
        in_light += published;
        report.runs.push(r);
    }
    drop(proxy);
    let p99 = |i: usize, e2e: bool| {
        let r = &report.runs[i];
        if e2e {
            r.e2e_latency_ms.p99
        } else {
            r.publish_latency_ms.p99
        }
    };
    let over = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let phases: Vec<_> = report
        .runs
        .iter()
        .map(|r| {
            let (p, e) = (&r.publish_latency_ms, &r.e2e_latency_ms);
            json!({
                "phase": r.name,
                "publish_msgs_per_s": r.publish.msgs_per_s,
                "publish_errors": r.publish_errors,
                "publish_p50_ms": p.p50, "publish_p99_ms": p.p99,
                "publish_p999_ms": p.p999, "publish_max_ms": p.max,
                "e2e_p50_ms": e.p50, "e2e_p99_ms": e.p99,
                "e2e_p999_ms": e.p999, "e2e_max_ms": e.max,
            })
        })
        .collect();
    let evicted = evicted_before.unwrap_or_default();
    report.summary = json!({
        "clients": if args.librdkafka { "librdkafka" } else { "headway" },
        "phases": phases,
        "publish_p99_writer_over_quiet": over(p99(1, false), p99(0, false)),
        "publish_p99_catch_up_over_quiet": over(p99(2, false), p99(0, false)),
        "e2e_p99_writer_over_quiet": over(p99(1, true), p99(0, true)),
        "e2e_p99_catch_up_over_quiet": over(p99(2, true), p99(0, true)),
        "writer": writer,
        "catch_up": catch_up,
        "external_neighbour": external,
        "backlog_mb": backlog_mb,
        "backlog_messages": backlog_messages,
        "prefill_s": prefill_s,
        "evicted": !dirs.is_empty(),
        "evicted_files": evicted.files,
        "evicted_bytes": evicted.bytes,
    });
    report.notes.extend(eviction_notes);
    let s = &report.summary;
    let f = |k: &str| s[k].as_f64().unwrap_or(0.0);
    eprintln!(
        "[noisy-neighbour] publish p99 {:.2} / {:.2} / {:.2} ms (writer x{:.2}, catch-up x{:.2}); \
         e2e p99 {:.2} / {:.2} / {:.2} ms (writer x{:.2}, catch-up x{:.2}); writer {:.1} MB/s; \
         catch-up replay {}",
        p99(0, false),
        p99(1, false),
        p99(2, false),
        f("publish_p99_writer_over_quiet"),
        f("publish_p99_catch_up_over_quiet"),
        p99(0, true),
        p99(1, true),
        p99(2, true),
        f("e2e_p99_writer_over_quiet"),
        f("e2e_p99_catch_up_over_quiet"),
        s["writer"]["mb_per_s"].as_f64().unwrap_or(0.0),
        s["catch_up"]["replay_mb_per_s"]
            .as_f64()
            .map_or("did not finish".into(), |m| format!("{m:.1} MB/s")),
    );
    ctx.finish(report)
}

/// The `--external-neighbour` command and what it is told.
struct Outsider {
    command: String,
    light_topic: String,
    data_dir: Option<PathBuf>,
}

impl Outsider {
    /// Runs the command with `sh -c` from `start` until it exits or `end` comes (then
    /// it is killed), with its output passed through to the lab's, and says how it went.
    async fn run(
        self,
        start: std::time::Instant,
        end: std::time::Instant,
    ) -> anyhow::Result<serde_json::Value> {
        tokio::time::sleep_until(start.into()).await;
        let began = std::time::Instant::now();
        let command = self.command;
        let mut sh = tokio::process::Command::new("sh");
        sh.args(["-c", &command])
            .env("HEADWAY_LIGHT_TOPIC", &self.light_topic)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(dir) = &self.data_dir {
            sh.env("HEADWAY_DATA_DIR", dir);
        }
        let mut child = sh
            .spawn()
            .with_context(|| format!("starting the external neighbour `{command}`"))?;
        let status = tokio::select! {
            status = child.wait() => Some(status.context("waiting for the external neighbour")?),
            _ = tokio::time::sleep_until(end.into()) => None,
        };
        if status.is_none() {
            child
                .kill()
                .await
                .context("stopping the external neighbour")?;
            eprintln!("[noisy-neighbour] the external neighbour outlasted the phase; stopped");
        }
        Ok(json!({
            "command": command,
            "seconds": began.elapsed().as_secs_f64(),
            "finished": status.is_some(),
            "exit_code": status.and_then(|s| s.code()),
        }))
    }
}

/// A neighbour that starts reading when the phase's warm-up is over, so that all it
/// does lands in the measured part of the phase.
async fn late_reader(
    spec: ConsumerSpec,
    run: Arc<Run>,
    warmup: Duration,
) -> (Arc<ConsumerMeter>, Recorder) {
    tokio::time::sleep_until((run.origin + warmup).into()).await;
    let meter = run.meter.consumer(&spec.name, spec.role, spec.measured);
    load::consume(spec.consumer, run, meter, spec.work).await
}

/// The catch-up consumer's figures: its rate over the phase and, if it got through the
/// `replayed` messages there at the start, how long that took.
fn catch_up_json(
    r: &RunReport,
    replayed: u64,
    size: usize,
    replay_s: Option<f64>,
) -> serde_json::Value {
    let Some(c) = r.consumers.iter().find(|c| c.role == "catch-up") else {
        return serde_json::Value::Null;
    };
    let read = c.consume.messages;
    let available = read + c.lag_end.unwrap_or(0);
    json!({
        "messages": read,
        "msgs_per_s": c.consume.msgs_per_s,
        "mb_per_s": c.consume.mb_per_s,
        "read_fraction": if available > 0 { read as f64 / available as f64 } else { 0.0 },
        "replay_messages": replayed,
        "replay_s": replay_s,
        // A replay that did not finish ran the whole phase: its rate is the phase's.
        "replay_mb_per_s": match replay_s {
            Some(s) if s > 0.0 => (replayed * size as u64) as f64 / 1e6 / s,
            _ => c.consume.mb_per_s,
        },
        "replay_finished": replay_s.is_some(),
    })
}

/// The librdkafka probe of one phase: a child process that has connected its clients
/// and runs for the phase's time once it has said `ready`.
struct Probe {
    child: tokio::process::Child,
}

/// What the probe prints on its last line: the light clients' figures.
#[derive(Deserialize)]
struct ProbeReport {
    client: String,
    publish: Rate,
    publish_errors: u64,
    consume: Rate,
    publish_latency_ms: LatencySummary,
    e2e_latency_ms: LatencySummary,
    consumers: Vec<ConsumerReport>,
    series: Vec<SeriesPoint>,
}

impl Probe {
    async fn start(
        args: &NoisyNeighbourArgs,
        bootstrap: &str,
        topic: &str,
        time: Duration,
        warmup: Duration,
    ) -> anyhow::Result<Probe> {
        let mut child = tokio::process::Command::new(&args.python)
            .arg(&args.probe)
            .args(["--bootstrap", bootstrap, "--topic", topic])
            .args(["--rate", &args.rate.to_string()])
            .args(["--size", &args.size.to_string()])
            .args(["--consumers", &args.fast.to_string()])
            .args(["--duration", &time.as_secs_f64().to_string()])
            .args(["--warmup", &warmup.as_secs_f64().to_string()])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} {} (--librdkafka needs confluent-kafka: scripts/setup)",
                    args.python.display(),
                    args.probe.display()
                )
            })?;
        let stdout = child.stdout.as_mut().expect("piped stdout");
        let mut line = String::new();
        tokio::time::timeout(PROBE_START_MAX, BufReader::new(stdout).read_line(&mut line))
            .await
            .context("the librdkafka probe did not get ready")??;
        anyhow::ensure!(
            line.trim() == "ready",
            "the librdkafka probe said {line:?} instead of ready"
        );
        Ok(Probe { child })
    }

    /// Waits for the probe's report (its stdout after `ready`).
    async fn finish(mut self, time: Duration) -> anyhow::Result<ProbeReport> {
        let mut out = String::new();
        let mut stdout = self.child.stdout.take().expect("piped stdout");
        tokio::time::timeout(time + PROBE_FINISH_MAX, stdout.read_to_string(&mut out))
            .await
            .context("the librdkafka probe did not finish")??;
        let status = self.child.wait().await?;
        anyhow::ensure!(status.success(), "the librdkafka probe failed: {status}");
        let last = out.lines().last().unwrap_or_default();
        serde_json::from_str(last).with_context(|| format!("the probe's report: {last:?}"))
    }
}

impl ProbeReport {
    /// Puts the light clients' figures into the phase's run, beside the disturbers.
    fn into_run(self, r: &mut RunReport) {
        r.publish = self.publish;
        r.publish_errors = self.publish_errors;
        r.consume = self.consume;
        r.publish_latency_ms = self.publish_latency_ms;
        r.e2e_latency_ms = self.e2e_latency_ms;
        r.series = self.series;
        let mut consumers = self.consumers;
        r.fairness = Fairness::of(&consumers.iter().collect::<Vec<_>>());
        consumers.append(&mut r.consumers);
        r.consumers = consumers;
        r.extra["client"] = json!(self.client);
    }
}
