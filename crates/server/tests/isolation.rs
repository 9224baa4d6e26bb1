//! Isolation mechanisms, checked on the broker's state: a client that never reads its
//! socket holds no more than its outbound budget and stops being read, however much is
//! produced; other connections keep being served; reads of cached data skip the read
//! threads and the rest go through them.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::*;
use headway_server::call::{ConnectionSnapshot, StatsSnapshot};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

const TOPIC: &str = "isolation";
const PARTITIONS: i32 = 4;
const CONNECTION_BUDGET: usize = 1 << 20;
const BROKER_BUDGET: usize = 8 << 20;
/// Records of about 16 KiB, 32 to a batch: batches of about 512 KiB.
const VALUE_BYTES: usize = 16 * 1024;

fn connection(stats: &StatsSnapshot, peer: SocketAddr) -> Option<ConnectionSnapshot> {
    stats.connections.iter().find(|c| c.peer == peer).cloned()
}

/// Produces `batches` batches to every partition with acks=all.
async fn produce(client: &mut Client, batches: usize) {
    produce_to(client, 0..PARTITIONS, batches).await;
}

/// Produces `batches` batches to each of `partitions` with acks=all.
async fn produce_to(client: &mut Client, partitions: std::ops::Range<i32>, batches: usize) {
    let value = "v".repeat(VALUE_BYTES);
    let values: Vec<&str> = (0..32).map(|_| value.as_str()).collect();
    for _ in 0..batches {
        for partition in partitions.clone() {
            let request = produce_request(TOPIC, partition, -1, batch(&values));
            let response = client.call(9, &request).await;
            assert_eq!(partition_response(&response).error_code, 0);
        }
    }
}

/// How many records a fetch of partition 0 from `offset` returns.
async fn fetched_values(client: &mut Client, offset: i64) -> usize {
    let response = client
        .call(12, &fetch_request(TOPIC, offset, 1000, 1))
        .await;
    let records = response.responses[0].partitions[0]
        .records
        .as_ref()
        .unwrap();
    values_of(records).len()
}

/// A Fetch of every partition from offset 0, asking for 50 MiB.
/// How long a stuck connection's counts stay put before it counts as stopped.
const STUCK_QUIET: Duration = Duration::from_secs(1);

fn greedy_fetch() -> FetchRequest {
    fetch_every_partition(TOPIC, PARTITIONS, 500, 1, 50 << 20, 50 << 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_holds_at_most_its_outbound_budget() {
    let broker = TestBroker::start_with(|c| {
        c.broker.connection_outbound_bytes_max = CONNECTION_BUDGET;
        c.broker.outbound_bytes_max = BROKER_BUDGET;
        c.broker.metrics_listen = Some("127.0.0.1:0".into());
    })
    .await;
    let mut producer = broker.client().await;
    create_topic(&mut producer, TOPIC, PARTITIONS).await;
    produce(&mut producer, 8).await; // 16 MiB

    // The stuck client: a tiny receive buffer, fetches pipelined without end, never a read.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stuck = socket.connect(broker.addr).await.unwrap();
    let stuck_peer = stuck.local_addr().unwrap();
    let (mut stuck_read, mut stuck_write) = stuck.into_split();
    let sender = tokio::spawn(async move {
        for id in 1..=100_000 {
            if stuck_write
                .write_all(&request_frame(11, id, &greedy_fetch()))
                .await
                .is_err()
            {
                return;
            }
        }
    });

    let window = headway_base::limits::REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX;
    // Stopped: the window full (plus the reply in the writer and the one waiting for
    // room), and its counts unchanged for a second. Until the kernel's socket buffers
    // are full, each reply written makes room for one more request.
    let unchanged_since: std::sync::Mutex<Option<((u64, u64), Instant)>> =
        std::sync::Mutex::new(None);
    wait_for(&broker, "the stuck connection's reader to stop", |s| {
        let Some(c) = connection(s, stuck_peer) else {
            return false;
        };
        let counts = (c.requests_read, c.responses_written);
        let mut seen = unchanged_since.lock().unwrap();
        let since = match *seen {
            Some((before, at)) if before == counts => at,
            _ => seen.insert((counts, Instant::now())).1,
        };
        c.reader_paused && c.in_flight >= window && since.elapsed() >= STUCK_QUIET
    })
    .await;
    let before = connection(&broker.server.stats.snapshot(), stuck_peer).unwrap();
    assert!(before.window_full_events >= 1);
    // The one response in the writer holds the budget at most (plus one batch, since a
    // response's first batch is always whole).
    let batch_bytes = 32 * (VALUE_BYTES + 64);
    assert!(
        before.outbound_bytes_held > 0
            && before.outbound_bytes_held <= CONNECTION_BUDGET + batch_bytes,
        "{before:?}"
    );
    assert_eq!(before.outbound_bytes_max, CONNECTION_BUDGET);

    // Twice as much again is produced; another consumer reads the newest data.
    produce(&mut producer, 16).await;
    let mut consumer = broker.client().await;
    let response = consumer
        .call(12, &fetch_request(TOPIC, 16 * 32, 1000, 1))
        .await;
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    assert!(
        !values_of(partition.records.as_ref().unwrap()).is_empty(),
        "the other consumer is served"
    );

    let after = broker.server.stats.snapshot();
    let stuck_after = connection(&after, stuck_peer).unwrap();
    assert_eq!(
        stuck_after.requests_read, before.requests_read,
        "nothing more is read from the stuck client"
    );
    assert_eq!(stuck_after.responses_written, before.responses_written);
    assert!(stuck_after.outbound_bytes_held <= CONNECTION_BUDGET + batch_bytes);
    assert!(
        after.outbound_bytes_held <= CONNECTION_BUDGET + batch_bytes,
        "broker-wide, only the stuck response is held: {after:?}"
    );
    assert_eq!(after.request_bytes_held, 0, "no request is held half-read");

    // The same state, as Prometheus sees it.
    let metrics = scrape(broker.server.metrics_addr.unwrap()).await;
    for line in [
        "headway_connections_reader_paused 1".to_string(),
        format!("headway_outbound_bytes_max {BROKER_BUDGET}"),
        format!(
            "headway_connection_outbound_bytes_held_max {}",
            stuck_after.outbound_bytes_held
        ),
        format!(
            "headway_partition_high_watermark{{topic=\"{TOPIC}\",partition=\"3\"}} {}",
            24 * 32
        ),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line:?} in:\n{metrics}"
        );
    }

    // The responses the stuck client was sent are no larger than its budget, although
    // it asked for 50 MiB and 16 MiB were there to read.
    sender.abort();
    let size = tokio::time::timeout(DEADLINE, stuck_read.read_i32())
        .await
        .expect("the first response arrives once the client reads")
        .unwrap();
    assert!(
        size > 0 && size as usize <= CONNECTION_BUDGET + batch_bytes + 4096,
        "{size}"
    );
    drop(stuck_read);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_reads_come_from_the_cache_and_catching_up_from_the_read_threads() {
    for cache_first in [true, false] {
        // Tail: reads starting less than 2 MiB before the end. Four batches of about
        // 512 KiB are written, so a read from offset 0 is catching up.
        let broker = TestBroker::start_with(|c| {
            c.broker.read_cache_first = cache_first;
            c.broker.read_tail_bytes = 2 << 20;
        })
        .await;
        let mut client = broker.client().await;
        create_topic(&mut client, TOPIC, PARTITIONS).await;
        produce(&mut client, 4).await;
        let reads = || broker.server.stats.snapshot().reads;

        assert_eq!(
            fetched_values(&mut client, 0).await,
            32,
            "one batch fits 1 MiB"
        );
        let after_catch_up = reads();
        assert_eq!(
            (after_catch_up.cached, after_catch_up.pooled),
            (0, 1),
            "a read 2 MiB behind is catching up: read threads, cached or not"
        );
        if !cache_first {
            assert_eq!(
                after_catch_up.pooled_cached, 0,
                "never tried from the cache"
            );
        }

        assert_eq!(fetched_values(&mut client, 3 * 32).await, 32);
        let after_tail = reads();
        if cache_first {
            // Just written, so cached; unless the file system cannot say (no
            // RWF_NOWAIT), in which case the read threads serve it.
            assert_eq!(after_tail.cached + after_tail.pooled, 2, "{after_tail:?}");
        } else {
            assert_eq!((after_tail.cached, after_tail.pooled), (0, 2));
        }
        assert_eq!((after_tail.queued, after_tail.running), (0, 0));
        broker.stop().await;
    }
}

/// The value of a series on `/metrics` (a counter, a histogram's count), 0 when it is
/// absent.
fn series_value(metrics: &str, series: &str) -> u64 {
    let prefix = format!("{series} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_and_fetches_are_timed_by_stage_on_metrics() {
    let broker =
        TestBroker::start_with(|c| c.broker.metrics_listen = Some("127.0.0.1:0".into())).await;
    let mut client = broker.client().await;
    create_topic(&mut client, "timed", 1).await;
    let response = client
        .call(9, &produce_request("timed", 0, -1, batch(&["a", "b"])))
        .await;
    assert_eq!(partition_response(&response).error_code, 0);
    let fetched = client.call(12, &fetch_request("timed", 0, 0, 1)).await;
    assert_eq!(fetched.responses[0].partitions[0].high_watermark, 2);
    // The fetch's timing completes once its answer is flushed: scrape until it shows.
    let metrics_addr = broker.server.metrics_addr.unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let metrics = loop {
        let metrics = scrape(metrics_addr).await;
        let fetch_total = "headway_fetch_stage_seconds_count{stage=\"total\",kind=\"tail\"}";
        if series_value(&metrics, fetch_total) >= 1 {
            break metrics;
        }
        assert!(tokio::time::Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // One produce, timed at every stage.
    for stage in ["read", "append", "durable", "reply", "total"] {
        let series =
            format!("headway_produce_stage_seconds_count{{stage=\"{stage}\",size=\"small\"}}");
        assert_eq!(
            series_value(&metrics, &series),
            1,
            "{series} in:\n{metrics}"
        );
    }
    let syncs = "headway_sync_seconds_count{size=\"small\"}";
    assert!(series_value(&metrics, syncs) >= 1, "{metrics}");
    for line in [
        "headway_bulk_rate_bytes{work=\"read\"} ",
        "headway_bulk_rate_bytes{work=\"write\"} ",
        "headway_unsynced_holds_total ",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(line)),
            "{line} in:\n{metrics}"
        );
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catching_up_on_cached_data_does_not_pass_the_disk_budget() {
    // A read rate of 1 MiB/s, whose bucket holds 0.1 MiB: the first of the three
    // 512 KiB reads below would leave 0.4 MiB of debt, so the next ones would wait and
    // be counted if they passed it (unless 0.4 s went by between them).
    // Reads more than 256 KiB behind are catching up: all three below.
    let broker = TestBroker::start_with(|c| {
        c.broker.read_tail_bytes = 256 << 10;
        c.broker.bulk_bytes_per_sec_min = 1 << 20;
        c.broker.bulk_bytes_per_sec_max = 1 << 20;
        c.broker.bulk_read_bytes_per_sec_max = 1 << 20;
        c.broker.metrics_listen = Some("127.0.0.1:0".into());
    })
    .await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, PARTITIONS).await;
    // 2 MiB, to partition 0 only: the produces pass the write rate, also 1 MiB/s.
    produce_to(&mut client, 0..1, 4).await;
    let metrics_addr = broker.server.metrics_addr.unwrap();
    let waits_before = series_value(&scrape(metrics_addr).await, "headway_bulk_waits_total");
    for offset in [0, 32, 64] {
        assert_eq!(fetched_values(&mut client, offset).await, 32);
    }
    let reads = broker.server.stats.snapshot().reads;
    assert_eq!(
        reads.pooled, 3,
        "reads 1-2 MiB behind are catching up: {reads:?}"
    );
    if reads.pooled_cached == 0 {
        // The file system cannot tell what is cached (no RWF_NOWAIT): every read is
        // taken to need the disk.
        broker.stop().await;
        return;
    }
    assert_eq!(reads.pooled_cached, 3, "just written, so cached: {reads:?}");
    let waits_after = series_value(&scrape(metrics_addr).await, "headway_bulk_waits_total");
    assert_eq!(
        waits_after, waits_before,
        "no cached read waited for the budget"
    );
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_go_out_whole_through_the_bulk_send_threads() {
    let broker = TestBroker::start_with(|c| c.broker.bulk_send_threads = 2).await;
    let mut client = broker.client().await;
    create_topic(&mut client, TOPIC, PARTITIONS).await;
    produce(&mut client, 2).await;
    // Small answers first, then one of about 4 MiB, then small ones again, on one
    // connection: they must arrive whole and in order.
    let small = client.call(12, &fetch_request(TOPIC, 0, 1000, 1)).await;
    assert_eq!(small.responses[0].partitions[0].high_watermark, 64);
    let greedy = client.call(12, &greedy_fetch()).await;
    let values: usize = greedy.responses[0]
        .partitions
        .iter()
        .map(|p| values_of(p.records.as_ref().unwrap()).len())
        .sum();
    assert_eq!(
        values,
        64 * PARTITIONS as usize,
        "every record of every partition"
    );
    assert_eq!(fetched_values(&mut client, 32).await, 32);
    let send = broker
        .server
        .stats
        .bulk_send
        .as_ref()
        .expect("bulk send threads");
    let stats = send.stats();
    assert!(
        stats.answers.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "the large answer went through the pool"
    );
    assert!(stats.bytes.load(std::sync::atomic::Ordering::Relaxed) >= 4 << 20);
    broker.stop().await;
}
