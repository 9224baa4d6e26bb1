//! Should reads of the tail take a faster path than cold reads? Measures the round trip
//! of a fetch for data just written (the tail), on a quiet broker and while catch-up
//! readers stream cold data (evicted from the page cache) from other partitions, with
//! the broker's tail reads served from the page cache on the connection's thread
//! (`read_cache_first = true`) or sent to the read threads like every other read
//! (`false`), and with the read threads at normal or lower CPU priority
//! (`read_threads_nice`).
//!
//! ```sh
//! cargo run --release -p headway-server --example read_paths -- [--cold-mb 1024] \
//!     [--readers 16] [--seconds 8] [--out bench/results/read-paths.md]
//! ```
//!
//! The broker runs in this process on a runtime of its own (2 worker threads); the
//! clients use another. Data lives under `target/read-paths` (a disk, not tmpfs, so the
//! page cache can be emptied with `posix_fadvise(DONTNEED)`).

use bytes::Bytes;
use hdrhistogram::Histogram;
use headway_broker::BrokerConfig;
use headway_client::{ClientConfig, Cluster, Producer, ProducerConfig, Record};
use headway_log::batch::BatchIter;
use headway_protocol::kafka_protocol::messages::{
    fetch_request, BrokerId, FetchRequest, TopicName,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_server::{RunningServer, Server};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    cold_mb: u64,
    readers: usize,
    seconds: f64,
    out: PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        cold_mb: 1024,
        readers: 16,
        seconds: 8.0,
        out: PathBuf::from("bench/results/read-paths.md"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--cold-mb" => a.cold_mb = value.parse().expect("--cold-mb N"),
            "--readers" => a.readers = value.parse().expect("--readers N"),
            "--seconds" => a.seconds = value.parse().expect("--seconds S"),
            "--out" => a.out = PathBuf::from(value),
            other => panic!("unknown flag {other}"),
        }
    }
    a
}

const COLD_PARTITIONS: i32 = 8;

fn main() -> anyhow::Result<()> {
    let args = args();
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut table = String::new();
    // (reads, cache first, read threads' nice value, cold readers)
    let variants = [
        ("all on read threads, nice 0", false, 0, 0),
        ("all on read threads, nice 0", false, 0, args.readers),
        ("tail from cache, nice 0", true, 0, 0),
        ("tail from cache, nice 0", true, 0, args.readers),
        ("tail from cache, nice 10 (default)", true, 10, args.readers),
    ];
    for (name, cache_first, nice, readers) in variants {
        let data = PathBuf::from("target/read-paths");
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data)?;
        let config = BrokerConfig {
            data_dir: data.clone(),
            listen: "127.0.0.1:0".into(),
            read_cache_first: cache_first,
            read_threads_nice: nice,
            ..BrokerConfig::default()
        };
        let server_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let server = server_rt
            .block_on(Server::start(config.into()))
            .map_err(anyhow::Error::msg)?;
        let row = clients.block_on(one_run(&args, &server, &data, name, readers))?;
        server_rt.block_on(server.stop());
        server_rt.shutdown_timeout(Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&data);
        eprintln!("{row}");
        table.push_str(&row);
        table.push('\n');
    }
    let mut report = String::new();
    writeln!(
        report,
        "# Tail reads: page cache first, or every read on the read threads\n"
    )?;
    writeln!(
        report,
        "`cargo run --release -p headway-server --example read_paths -- --cold-mb {} --readers {} --seconds {}`, \
         {} cores, {}.\n",
        args.cold_mb,
        args.readers,
        args.seconds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        headway_bench_date()
    )?;
    writeln!(
        report,
        "A producer appends one 1 KiB record at a time (acks=all) to a 1-partition topic and a \
         consumer fetches it as soon as it is acknowledged; the table gives that fetch's round \
         trip. Cold readers each read one of {COLD_PARTITIONS} partitions of a {} MB topic from \
         offset 0 (1 MiB per fetch), with the topic's files dropped from the page cache first and \
         again each time a reader wraps around.\n",
        args.cold_mb
    )?;
    writeln!(
        report,
        "| reads | catch-up readers | tail fetches | p50 µs | p99 µs | p99.9 µs | max µs | catch-up MB/s | reads from cache | reads on threads |"
    )?;
    writeln!(report, "|---|---|---|---|---|---|---|---|---|---|")?;
    report.push_str(&table);
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, &report)?;
    println!("{report}");
    Ok(())
}

fn headway_bench_date() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

async fn one_run(
    args: &Args,
    server: &RunningServer,
    data: &Path,
    name: &str,
    readers: usize,
) -> anyhow::Result<String> {
    let data = data.to_path_buf();
    let bootstrap = server.addr.to_string();
    let stats = Arc::clone(&server.stats);

    let cluster = Cluster::connect(&bootstrap, ClientConfig::default()).await?;
    cluster.create_topic("tail", 1, &[]).await?;
    cluster.create_topic("cold", COLD_PARTITIONS, &[]).await?;
    if readers > 0 {
        fill(&cluster, args.cold_mb).await?;
        evict(&data);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let cold_bytes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for r in 0..readers {
        let (stop, bytes, bootstrap, data) = (
            Arc::clone(&stop),
            Arc::clone(&cold_bytes),
            bootstrap.clone(),
            data.clone(),
        );
        tasks.push(tokio::spawn(async move {
            cold_reader(&bootstrap, r as i32 % COLD_PARTITIONS, &data, &stop, &bytes).await
        }));
    }

    let producer = Producer::new(
        Arc::clone(&cluster),
        ProducerConfig {
            linger: Duration::ZERO,
            lanes: 1,
            ..ProducerConfig::default()
        },
    )?;
    let fetcher = cluster.open_connection(&bootstrap, 1).await?;
    let mut rtt = Histogram::<u64>::new(3)?;
    let value = Bytes::from(vec![b'x'; 1024]);
    let stats_before = stats.snapshot().reads;
    let started = Instant::now();
    while started.elapsed().as_secs_f64() < args.seconds {
        let record = Record {
            key: None,
            value: Some(value.clone()),
            headers: Vec::new(),
            timestamp_ms: None,
            partition: Some(0),
        };
        let (_, offset) = producer.send("tail", record).await?.wait().await?;
        let sent = Instant::now();
        let response = fetcher.request(&fetch("tail", 0, offset, 1 << 20)).await?;
        let elapsed = sent.elapsed();
        let records = response.responses[0].partitions[0].records.clone();
        anyhow::ensure!(
            records.is_some_and(|r| !r.is_empty()),
            "the tail fetch at {offset} came back empty"
        );
        rtt.record(elapsed.as_micros() as u64)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let reads = stats.snapshot().reads;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    drop(fetcher);
    drop(producer);
    Ok(format!(
        "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |",
        name,
        readers,
        rtt.len(),
        rtt.value_at_quantile(0.5),
        rtt.value_at_quantile(0.99),
        rtt.value_at_quantile(0.999),
        rtt.max(),
        cold_bytes.load(Ordering::Relaxed) as f64 / 1e6 / seconds,
        reads.cached - stats_before.cached,
        reads.pooled - stats_before.pooled,
    ))
}

fn fetch(topic: &str, partition: i32, offset: i64, max_bytes: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(max_bytes)])])
}

/// Writes `mb` MB of 16 KiB records across the cold topic's partitions.
async fn fill(cluster: &Arc<Cluster>, mb: u64) -> anyhow::Result<()> {
    let producer = Producer::new(
        Arc::clone(cluster),
        ProducerConfig {
            acks: 1,
            batch_bytes_max: 512 * 1024,
            ..ProducerConfig::default()
        },
    )?;
    let value = Bytes::from(vec![b'c'; 16 * 1024]);
    let count = mb * 1_000_000 / value.len() as u64;
    let mut pending = std::collections::VecDeque::new();
    for i in 0..count {
        let record = Record {
            key: None,
            value: Some(value.clone()),
            headers: Vec::new(),
            timestamp_ms: None,
            partition: Some((i % COLD_PARTITIONS as u64) as i32),
        };
        pending.push_back(producer.send("cold", record).await?);
        if pending.len() > 4096 {
            pending.pop_front().expect("not empty").wait().await?;
        }
    }
    for d in pending {
        d.wait().await?;
    }
    producer.flush().await?;
    Ok(())
}

/// Writes back and drops from the page cache every file under `dir`.
fn evict(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            evict(&path);
        } else if let Ok(file) = std::fs::File::open(&path) {
            let _ = file.sync_data();
            // SAFETY: advice on a descriptor that `file` keeps open.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                    0,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
    }
}

async fn cold_reader(
    bootstrap: &str,
    partition: i32,
    data: &Path,
    stop: &AtomicBool,
    bytes: &AtomicU64,
) -> anyhow::Result<()> {
    let connection = headway_client::connection::Connection::connect(
        bootstrap,
        "cold",
        1,
        Duration::from_secs(30),
        &Default::default(),
    )
    .await?;
    let mut offset = 0;
    while !stop.load(Ordering::Relaxed) {
        let response = connection
            .request(&fetch("cold", partition, offset, 1 << 20))
            .await?;
        let records = response.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        match BatchIter::new(&records).last() {
            Some((header, _)) => {
                offset = header.last_offset() + 1;
                bytes.fetch_add(records.len() as u64, Ordering::Relaxed);
            }
            None => {
                // The end: start over, cold again.
                offset = 0;
                evict(&data.join("topics").join("cold").join(partition.to_string()));
            }
        }
    }
    Ok(())
}
