//! A panic in one job never takes anything else with it.
//!
//! Goal: a job that panics on a read thread fails alone: the pool keeps all its threads
//! (`/readyz` stays ready), `headway_panics_total{component="read_pool"}` counts it, and
//! other clients' produces (small ones on their connections, large ones on the read
//! threads) and fetches go on. A handler that panics on a connection closes that
//! connection only.
//! Method: an in-process broker with metrics on an ephemeral port; panics are provoked
//! on purpose through the broker's own pool (a job that panics) and the panic hook's
//! count is checked against what was provoked. This file is its own test process, so
//! the deliberate panics cannot fail other tests' panic checks.

mod common;

use common::*;
use headway_broker::io::read_pool::PoolError;
use headway_broker::panics::{self, Component};

/// The value of `headway_panics_total{component="..."}` in a scrape.
fn panics_of(scrape: &str, component: &str) -> u64 {
    let prefix = format!("headway_panics_total{{component=\"{component}\"}} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in the scrape"))
        .trim()
        .parse()
        .unwrap()
}

async fn produce_ok(client: &mut Client, topic: &str, values: &[&str]) -> i64 {
    let request = produce_request(topic, 0, -1, batch(values));
    let response = client.call(9, &request).await;
    let p = &response.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce to {topic}");
    p.base_offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_thread_job_that_panics_fails_alone() {
    let broker = TestBroker::start_with(|c| {
        c.broker.metrics_listen = Some("127.0.0.1:0".into());
        c.broker.read_threads = 2;
    })
    .await;
    let metrics = broker.server.metrics_addr.unwrap();
    let pool = {
        let b = broker.server.broker.upgrade().expect("the broker runs");
        std::sync::Arc::clone(b.read_pool())
    };
    let mut client = broker.client().await;
    create_topic(&mut client, "steady", 1).await;
    produce_ok(&mut client, "steady", &["before"]).await;
    assert_eq!(panics_of(&scrape(metrics).await, "read_pool"), 0);

    // Three panicking jobs, more than the pool has threads: each fails alone.
    for i in 0..3 {
        let failed = pool
            .run(move || -> u32 { panic!("provoked panic {i}") })
            .await;
        assert!(
            matches!(&failed, Err(PoolError::Panicked(p)) if p.message == format!("provoked panic {i}")),
            "{failed:?}"
        );
    }
    assert_eq!(pool.strength(), (2, 2), "every read thread survived");
    assert_eq!(panics::caught(Component::ReadPool), 3);
    assert_eq!(
        panics::total(),
        3,
        "the hook saw the three, and nothing else"
    );
    let text = scrape(metrics).await;
    assert_eq!(panics_of(&text, "read_pool"), 3);
    assert!(text.contains("headway_read_threads_alive 2"), "{text}");
    let (status, body) = http_get(metrics, "/readyz").await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status} {body}");

    // The connection that was open all along goes on: a small produce, a large one
    // (handled on a read thread), and a fetch of everything.
    produce_ok(&mut client, "steady", &["after"]).await;
    let large = "x".repeat(1024);
    let many: Vec<&str> = std::iter::repeat_n(large.as_str(), 200).collect();
    let base = produce_ok(&mut client, "steady", &many).await;
    assert_eq!(base, 2);
    let fetched = client.call(12, &fetch_request("steady", 0, 100, 1)).await;
    let records = fetched.responses[0].partitions[0].records.clone().unwrap();
    let values = values_of(&records);
    assert_eq!(values.len(), 202);
    assert_eq!(values[0], (0, "before".to_string()));
    assert_eq!(values[1], (1, "after".to_string()));

    assert_eq!(panics::total(), 3, "no panic beyond the provoked ones");
    tokio::time::timeout(DEADLINE, broker.server.stop())
        .await
        .unwrap();
}
