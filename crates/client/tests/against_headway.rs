//! Goal: the client produces and consumes correctly, lanes deflect and count what they
//! do, and the consumer's credit window keeps its bounds.
//!
//! Method: a headway broker runs in-process on an ephemeral port with a temporary data
//! directory; the client talks to it over real sockets. Lane slowness comes from the
//! producer's `lane_delays` hook; assertions are on the client's counters and window
//! state, never on elapsed time.

use bytes::Bytes;
use headway_broker::BrokerConfig;
use headway_client::{
    ClientConfig, Cluster, Compression, ConsumedRecord, Consumer, ConsumerConfig, GroupConfig,
    GroupConsumer, Producer, ProducerConfig, Record, StartOffset,
};
use headway_server::{Config, RunningServer, Server};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Generous: CI runs on two shared cores.
const DEADLINE: Duration = Duration::from_secs(60);

async fn start_broker() -> (RunningServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".into(),
        ..BrokerConfig::default()
    };
    (Server::start(config.into()).await.unwrap(), dir)
}

async fn cluster(server: &RunningServer) -> Arc<Cluster> {
    Cluster::connect(&server.addr.to_string(), ClientConfig::default())
        .await
        .unwrap()
}

async fn consume(
    cluster: &Arc<Cluster>,
    topic: &str,
    partitions: i32,
    count: usize,
    config: ConsumerConfig,
) -> (Vec<ConsumedRecord>, Consumer) {
    let assignment = (0..partitions)
        .map(|p| (topic.to_string(), p, StartOffset::Earliest))
        .collect();
    let consumer = Consumer::assign(Arc::clone(cluster), config, assignment)
        .await
        .unwrap();
    let mut records = Vec::with_capacity(count);
    tokio::time::timeout(DEADLINE, async {
        while records.len() < count {
            records.push(consumer.next().await);
        }
    })
    .await
    .expect("every record was consumed in time");
    (records, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_round_trips_with_keys_headers_and_order() {
    let (server, _dir) = start_broker().await;
    let cluster = cluster(&server).await;
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    for codec in codecs {
        let topic = format!("codec-{codec:?}").to_lowercase();
        assert!(cluster.create_topic(&topic, 3, &[]).await.unwrap());
        let config = ProducerConfig {
            compression: codec,
            batch_bytes_max: 16 * 1024,
            ..ProducerConfig::default()
        };
        let producer = Producer::new(Arc::clone(&cluster), config).unwrap();
        let mut deliveries = Vec::new();
        for i in 0..3000u32 {
            let record = Record {
                key: Some(Bytes::from(format!("key-{}", i % 17))),
                value: Some(Bytes::from(format!(
                    "{i:08} {}",
                    "payload ".repeat(i as usize % 9)
                ))),
                headers: vec![
                    ("seq".into(), Some(Bytes::from(i.to_string()))),
                    ("empty".into(), None),
                ],
                ..Record::default()
            };
            deliveries.push(producer.send(&topic, record).await.unwrap());
        }
        producer.flush().await.unwrap();
        for d in deliveries {
            d.wait().await.unwrap();
        }
        assert_eq!(producer.stats().records_acked, 3000);

        let (records, _consumer) =
            consume(&cluster, &topic, 3, 3000, ConsumerConfig::default()).await;
        let mut next_offset: HashMap<i32, i64> = HashMap::new();
        for r in &records {
            let value = std::str::from_utf8(r.value.as_ref().unwrap()).unwrap();
            let seq: u32 = value[..8].parse().unwrap();
            assert_eq!(
                value[9..],
                "payload ".repeat(seq as usize % 9),
                "{codec:?}: value intact"
            );
            assert_eq!(
                r.key.as_ref().unwrap(),
                &Bytes::from(format!("key-{}", seq % 17))
            );
            assert_eq!(
                r.headers[0],
                ("seq".to_string(), Some(Bytes::from(seq.to_string())))
            );
            assert_eq!(r.headers[1], ("empty".to_string(), None));
            let expected = next_offset.entry(r.partition).or_insert(0);
            assert_eq!(
                r.offset, *expected,
                "{codec:?}: offsets dense per partition"
            );
            *expected += 1;
        }
        assert_eq!(records.len(), 3000);
    }
    server.stop().await;
}

/// Produces `batches` single-record batches with one lane delayed, returning stats.
async fn run_with_slow_lane(
    cluster: &Arc<Cluster>,
    topic: &str,
    deflect: bool,
    batches: usize,
) -> headway_client::ProducerStats {
    let config = ProducerConfig {
        idempotent: false,
        lanes: 4,
        lane_in_flight_max: 1,
        deflect,
        // One record per batch, sealed at once.
        batch_bytes_max: 1,
        linger: Duration::from_millis(1),
        lane_delays: vec![Duration::ZERO, Duration::from_millis(200)],
        ..ProducerConfig::default()
    };
    let producer = Producer::new(Arc::clone(cluster), config).unwrap();
    for i in 0..batches {
        let record = Record {
            value: Some(Bytes::from(format!("batch {i}"))),
            partition: Some(0),
            ..Record::default()
        };
        producer.send(topic, record).await.unwrap();
    }
    tokio::time::timeout(DEADLINE, producer.flush())
        .await
        .unwrap()
        .unwrap();
    producer.stats()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_lane_fills_and_the_producer_deflects_or_waits() {
    let (server, _dir) = start_broker().await;
    let cluster = cluster(&server).await;
    cluster.create_topic("lanes", 1, &[]).await.unwrap();

    let on = run_with_slow_lane(&cluster, "lanes", true, 24).await;
    assert_eq!(on.records_acked, 24);
    let slow = &on.lanes[1];
    assert!(
        slow.full_events > 0,
        "the slow lane was found full: {:?}",
        on.lanes
    );
    let fast_batches: u64 = on
        .lanes
        .iter()
        .filter(|l| l.lane != 1)
        .map(|l| l.batches)
        .sum();
    assert!(
        slow.batches < fast_batches / 3,
        "batches went around the slow lane: {:?}",
        on.lanes
    );

    let off = run_with_slow_lane(&cluster, "lanes", false, 24).await;
    assert_eq!(off.records_acked, 24);
    assert!(
        off.lanes.iter().all(|l| l.batches == 6),
        "round robin without deflection: {:?}",
        off.lanes
    );
    let slow = &off.lanes[1];
    assert!(
        slow.wait_events > 0,
        "the producer blocked on the slow lane: {:?}",
        off.lanes
    );
    assert!(
        off.lanes
            .iter()
            .filter(|l| l.lane != 1)
            .all(|l| l.wait_events <= slow.wait_events),
        "waits concentrate on the slow lane: {:?}",
        off.lanes
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_window_keeps_its_bound_and_refills_at_the_threshold() {
    let (server, _dir) = start_broker().await;
    let cluster = cluster(&server).await;
    cluster.create_topic("window", 2, &[]).await.unwrap();
    let config = ProducerConfig {
        batch_bytes_max: 4 * 1024,
        ..ProducerConfig::default()
    };
    let producer = Producer::new(Arc::clone(&cluster), config).unwrap();
    for i in 0..2000u32 {
        let record = Record {
            value: Some(Bytes::from(vec![b'a' + (i % 26) as u8; 1000])),
            partition: Some((i % 2) as i32),
            ..Record::default()
        };
        producer.send("window", record).await.unwrap();
    }
    producer.flush().await.unwrap();

    let window = ConsumerConfig {
        window_bytes: 64 * 1024,
        refill_threshold_bytes: 16 * 1024,
        refill_increment_bytes: 32 * 1024,
        partition_max_bytes: 32 * 1024,
        ..ConsumerConfig::default()
    };
    let (records, consumer) = consume(&cluster, "window", 2, 2000, window).await;
    assert_eq!(records.len(), 2000);
    let state = consumer.window();
    assert_eq!(state.overshoots, 0, "no batch was larger than a refill");
    assert!(
        state.level_max_bytes <= 64 * 1024,
        "the window held: {state:?}"
    );
    assert!(
        state.level_at_refill_max_bytes <= 16 * 1024,
        "refills started at the threshold: {state:?}"
    );
    // About 2 MB through 32 KiB refills.
    assert!(
        state.refills >= 2_000_000 / (32 * 1024),
        "refilled in increments: {state:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_keyless_stream_moves_on_to_the_next_partition_per_batch() {
    let (server, _dir) = start_broker().await;
    let cluster = cluster(&server).await;
    cluster.create_topic("sticky", 3, &[]).await.unwrap();
    let producer = Producer::new(Arc::clone(&cluster), ProducerConfig::default()).unwrap();
    let mut partitions = Vec::new();
    for i in 0..6 {
        let record = Record {
            value: Some(Bytes::from(format!("slow {i}"))),
            ..Record::default()
        };
        let delivery = producer.send("sticky", record).await.unwrap();
        // Each record is alone in its batch, which is sealed by flush, not by size.
        producer.flush().await.unwrap();
        partitions.push(delivery.wait().await.unwrap().0);
    }
    assert_eq!(
        partitions,
        vec![0, 1, 2, 0, 1, 2],
        "one partition per batch, in turn"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_share_partitions_and_resume_from_commits() {
    let dir = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".into(),
        ..BrokerConfig::default()
    };
    let mut config = Config::from(config);
    config.server.group.group_initial_rebalance_delay_ms = 0;
    let server = Server::start(config).await.unwrap();
    let cluster = cluster(&server).await;
    cluster.create_topic("grouped", 4, &[]).await.unwrap();
    let group_config = || GroupConfig {
        session_timeout: Duration::from_secs(6),
        reset: StartOffset::Earliest,
        ..GroupConfig::default()
    };
    let join = || {
        GroupConsumer::subscribe(
            Arc::clone(&cluster),
            "readers",
            vec!["grouped".into()],
            ConsumerConfig::default(),
            group_config(),
        )
    };
    let a = join().await.unwrap();
    let b = join().await.unwrap();
    // Wait until both are in one generation (B's join makes A rejoin at its next heartbeat).
    tokio::time::timeout(DEADLINE, async {
        loop {
            let (ga, gb) = (a.membership().1, b.membership().1);
            if ga > 0 && ga == gb {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("both members joined one generation");

    let producer = Producer::new(Arc::clone(&cluster), ProducerConfig::default()).unwrap();
    for i in 0..2000u32 {
        let record = Record {
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(i.to_string())),
            ..Record::default()
        };
        producer.send("grouped", record).await.unwrap();
    }
    producer.flush().await.unwrap();

    let mut seen: HashMap<String, usize> = HashMap::new();
    let (mut from_a, mut from_b) = (0, 0);
    tokio::time::timeout(DEADLINE, async {
        while seen.len() < 2000 {
            let (r, from) = tokio::select! {
                r = a.next() => (r, &mut from_a),
                r = b.next() => (r, &mut from_b),
            };
            *from += 1;
            *seen
                .entry(String::from_utf8(r.value.unwrap().to_vec()).unwrap())
                .or_default() += 1;
        }
    })
    .await
    .expect("every record consumed");
    assert!(
        seen.values().all(|n| *n == 1),
        "each record once while the group is stable"
    );
    assert!(
        from_a > 0 && from_b > 0,
        "both members consumed: {from_a} / {from_b}"
    );
    let (closed_a, closed_b) = tokio::join!(a.close(), b.close());
    closed_a.unwrap();
    closed_b.unwrap();

    // A new member starts at the committed offsets: there is nothing left to read.
    let c = join().await.unwrap();
    tokio::time::timeout(DEADLINE, async {
        while !c.caught_up() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the new member caught up");
    assert!(
        c.try_next().is_none(),
        "nothing is delivered twice after the commits"
    );
    let committed: i64 = cluster
        .committed_offsets("readers")
        .await
        .unwrap()
        .iter()
        .map(|(_, _, o)| o)
        .sum();
    assert_eq!(committed, 2000);
    c.close().await.unwrap();
    server.stop().await;
}
