//! Goal: every budget's counts reach `/metrics`, and the ApiVersions answer a client gets
//! is the registry the broker dispatches from.
//!
//! Method: an in-process broker on an ephemeral port with `/metrics` on another. With
//! `connections_max = 1` a second client cannot be served while the first is connected:
//! the listener waits for a slot, which `/metrics` shows as an exhausted budget and, once
//! the first client leaves, as one finished wait. Conditions are polled with a deadline;
//! nothing is timed.

mod common;

use common::*;
use headway_protocol::kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use headway_server::handlers::APIS;

/// The value of an unlabelled series on `/metrics`, if present.
fn value(metrics: &str, series: &str) -> Option<f64> {
    let prefix = format!("{series} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// Scrapes until `check` holds for the values of `series`, or fails after the deadline.
async fn wait_for_metrics(broker: &TestBroker, series: &[&str], check: impl Fn(&[f64]) -> bool) {
    let addr = broker.server.metrics_addr.unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let metrics = scrape(addr).await;
        let values: Vec<f64> = series
            .iter()
            .map(|s| value(&metrics, s).unwrap_or_else(|| panic!("{s} in:\n{metrics}")))
            .collect();
        if check(&values) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out: {series:?} = {values:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_connection_limit_is_counted_and_its_wait_timed() {
    let broker = TestBroker::start_with(|c| {
        c.broker.connections_max = 1;
        c.broker.metrics_listen = Some("127.0.0.1:0".into());
    })
    .await;
    let series = [
        "headway_connection_slots_exhausted_total",
        "headway_connection_slots_wait_seconds_count",
    ];
    let mut first = broker.client().await;
    first.call(3, &ApiVersionsRequest::default()).await;
    // The first client holds the only slot: the listener waits for it.
    wait_for_metrics(&broker, &series, |v| v == [1.0, 0.0]).await;
    let mut second = broker.client().await;
    second.send(3, &ApiVersionsRequest::default()).await;
    drop(first);
    // Answered once the first client left (`recv` fails after the deadline).
    let (_, answer) = second.recv::<ApiVersionsResponse>(3).await;
    assert_eq!(answer.error_code, 0);
    // One wait ended (the second client's slot); the listener waits again.
    wait_for_metrics(&broker, &series, |v| v == [2.0, 1.0]).await;
    let metrics = scrape(broker.server.metrics_addr.unwrap()).await;
    for budget in [
        "request_budget",
        "outbound_budget",
        "connection_outbound_budget",
        "read_share",
    ] {
        for series in [
            format!("headway_{budget}_exhausted_total"),
            format!("headway_{budget}_wait_seconds_count"),
        ] {
            assert_eq!(
                value(&metrics, &series),
                Some(0.0),
                "{series} in:\n{metrics}"
            );
        }
    }
    drop(second);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_answers_with_the_dispatch_registry() {
    let broker = TestBroker::start().await;
    let mut client = broker.client().await;
    let answer = client.call(3, &ApiVersionsRequest::default()).await;
    assert_eq!(answer.error_code, 0);
    let advertised: Vec<(i16, i16, i16)> = answer
        .api_keys
        .iter()
        .map(|a| (a.api_key, a.min_version, a.max_version))
        .collect();
    let registry: Vec<(i16, i16, i16)> = APIS
        .iter()
        .map(|h| (h.key as i16, h.min_version, h.max_version))
        .collect();
    assert_eq!(advertised, registry);
    broker.stop().await;
}
