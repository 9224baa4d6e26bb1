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
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path`: the status line and the body.
async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(DEADLINE, stream.read_to_string(&mut answer))
        .await
        .expect("answered in time")
        .unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.lines().next().unwrap_or_default().to_string();
    (status, body.to_string())
}

/// Asks `path` until the answer's status line starts with `status`; that answer.
async fn wait_status(addr: SocketAddr, path: &str, status: &str) -> (String, String) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let answer = get(addr, path).await;
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
    let broker = TestBroker::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".into())).await;
    let metrics = broker.server.metrics_addr.unwrap();
    assert_eq!(
        get(metrics, "/healthz").await,
        ("HTTP/1.1 200 OK".into(), "ok\n".into())
    );
    let (_, body) = wait_status(metrics, "/readyz", "HTTP/1.1 200").await;
    assert_eq!(body, "ready\n");
    assert!(get(metrics, "/other").await.0.starts_with("HTTP/1.1 404"));

    broker.server.handle.shutdown();
    let (_, body) = wait_status(metrics, "/readyz", "HTTP/1.1 503").await;
    assert_eq!(body, "the listener does not accept connections\n");
    assert!(get(metrics, "/healthz").await.0.starts_with("HTTP/1.1 200"));
    broker.stop().await;
}
