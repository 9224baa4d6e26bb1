//! `/healthz` and `/readyz` on the metrics endpoint.
//!
//! Goal: `/readyz` says 200 only while the listener accepts connections, and 503 with
//! the reason otherwise; `/healthz` answers 200 whenever the endpoint runs (it starts
//! after recovery).
//! Method: a broker with metrics on an ephemeral port is asked both while it serves,
//! then again once it was told to shut down (its endpoint outlives the listener).

mod common;

use common::*;
use std::net::SocketAddr;

/// Asks `path` until the answer's status line starts with `status`; that answer.
async fn wait_status(addr: SocketAddr, path: &str, status: &str) -> (String, String) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let answer = http_get(addr, path).await;
        if answer.0.starts_with(status) {
            return answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} never {status}: {answer:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn ready_while_the_listener_accepts_and_healthy_while_the_endpoint_runs() {
    let broker =
        TestBroker::start_with(|c| c.broker.metrics_listen = Some("127.0.0.1:0".into())).await;
    let metrics = broker.server.metrics_addr.unwrap();
    assert_eq!(
        http_get(metrics, "/healthz").await,
        ("HTTP/1.1 200 OK".into(), "ok\n".into())
    );
    let (_, body) = wait_status(metrics, "/readyz", "HTTP/1.1 200").await;
    assert_eq!(body, "ready\n");
    assert!(http_get(metrics, "/other")
        .await
        .0
        .starts_with("HTTP/1.1 404"));

    broker.server.handle.shutdown();
    let (_, body) = wait_status(metrics, "/readyz", "HTTP/1.1 503").await;
    assert_eq!(body, "the listener does not accept connections\n");
    assert!(http_get(metrics, "/healthz")
        .await
        .0
        .starts_with("HTTP/1.1 200"));
    broker.stop().await;
}
