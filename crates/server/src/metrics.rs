//! The Prometheus endpoint (`--metrics-listen HOST:PORT`, path `/metrics`): what every
//! bounded queue holds, its limit, and how often it was full, broker-wide and per
//! partition. Each scrape builds a fresh registry and hands it to every component's
//! probe in turn ([`render`]), which registers its families from its own state: the
//! server's [`ServerStats`] (`call::stats::probe`), requests, authorizer and SASL, the
//! broker's (`headway_broker::probe` lists them), the groups' and share groups', and
//! the [`process`]. The registry lives for one scrape and is encoded in
//! `prometheus-client`'s text format.
//!
//! Per-partition and per-group series are bounded (`headway_broker::probe::Bounded`):
//! the first `limits::METRICS_PARTITIONS_MAX` partitions and
//! `limits::METRICS_GROUP_PARTITIONS_MAX` group partitions (by name) have series, and a
//! gauge counts the ones left out. Every family, its labels, its bounds and the probe
//! that defines it are listed in `docs/metrics.md`.
//!
//! The HTTP side is deliberately small: one request per connection. `GET /metrics`
//! answers 200 with the text format; `GET /healthz` 200 (the endpoint starts after
//! recovery, so serving means healthy); `GET /readyz` 200 when the listener accepts
//! and every partition is online, else 503 with the reasons; anything else 404. A
//! request head larger than 8 KiB or slower than 5 s closes the connection.

use crate::call::{Ctx, ServerStats};
use crate::process;
use headway_broker::{cleaner, disk, io, open_files, panics, partition, Broker};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const REQUEST_HEAD_BYTES_MAX: usize = 8 * 1024;
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds `listen` and serves scrapes on a task until the process ends.
pub async fn start(listen: &str, ctx: Arc<Ctx>) -> std::io::Result<SocketAddr> {
    let addr = serve_http(listen, move |target| route(target, Arc::clone(&ctx))).await?;
    process::started();
    Ok(addr)
}

/// One answer of the broker's small HTTP endpoints (metrics and the console).
pub(crate) struct Reply {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: Cow<'static, [u8]>,
}

impl Reply {
    pub(crate) fn ok(content_type: &'static str, body: impl Into<Cow<'static, [u8]>>) -> Reply {
        Reply {
            status: "200 OK",
            content_type,
            body: body.into(),
        }
    }

    pub(crate) fn not_found(hint: &'static str) -> Reply {
        Reply {
            status: "404 Not Found",
            content_type: TEXT,
            body: hint.as_bytes().into(),
        }
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Binds `listen` and answers, on a task until the process ends, one `GET` per
/// connection with `route(target)` (the request target, e.g. `/metrics`). A request
/// head larger than 8 KiB or slower than 5 s closes the connection.
pub(crate) async fn serve_http<F, Fut>(listen: &str, route: F) -> std::io::Result<SocketAddr>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::io::Result<Reply>> + Send + 'static,
{
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let route = Arc::new(route);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let route = Arc::clone(&route);
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REQUEST_TIMEOUT, answer(stream, &*route)).await;
            });
        }
    });
    Ok(addr)
}

async fn answer<F, Fut>(mut stream: TcpStream, route: &F) -> std::io::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = std::io::Result<Reply>>,
{
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || head.len() + n > REQUEST_HEAD_BYTES_MAX {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let target = head
        .strip_prefix(b"GET ")
        .and_then(|rest| rest.split(|&b| b == b' ').next())
        .map(|t| String::from_utf8_lossy(t).into_owned());
    let reply = match target {
        Some(target) => route(target).await?,
        None => Reply {
            status: "405 Method Not Allowed",
            content_type: TEXT,
            body: b"only GET\n".as_slice().into(),
        },
    };
    let head = format!(
        "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&reply.body).await?;
    stream.shutdown().await
}

async fn route(target: String, ctx: Arc<Ctx>) -> std::io::Result<Reply> {
    Ok(match target.as_str() {
        "/metrics" => {
            // A scrape reads the partitions' directories for their size: off the runtime.
            let body = tokio::task::spawn_blocking(move || render(&ctx))
                .await
                .map_err(std::io::Error::other)?;
            Reply::ok(
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body.into_bytes(),
            )
        }
        "/healthz" => Reply::ok(TEXT, b"ok\n".as_slice()),
        "/readyz" => match not_ready(&ctx.stats, &ctx.broker) {
            reasons if reasons.is_empty() => Reply::ok(TEXT, b"ready\n".as_slice()),
            reasons => Reply {
                status: "503 Service Unavailable",
                content_type: TEXT,
                body: (reasons.join("\n") + "\n").into_bytes().into(),
            },
        },
        _ => Reply::not_found("try /metrics, /healthz or /readyz\n"),
    })
}

/// Why the broker is not ready, one line per reason; empty when it is: the listener
/// does not accept connections (starting or shutting down), or partitions are offline.
pub fn not_ready(stats: &ServerStats, broker: &Broker) -> Vec<String> {
    let mut reasons = Vec::new();
    if !stats.accepting.load(Ordering::Relaxed) {
        reasons.push("the listener does not accept connections".to_string());
    }
    let (threads, alive) = broker.read_pool().strength();
    if alive < threads {
        reasons.push(format!(
            "the read pool is below strength: {alive} of {threads} threads"
        ));
    }
    for topic in broker.topics() {
        for p in topic.partitions().iter().filter(|p| p.health().offline) {
            reasons.push(format!(
                "partition {}-{} is offline",
                topic.name(),
                p.index().value()
            ));
        }
    }
    reasons
}

/// The metrics text for one scrape: a fresh registry, one call per component's probe
/// (each reads its own state now), encoded. Blocking: reads the partitions'
/// directories. The order is the order of the families in the text.
pub fn render(ctx: &Ctx) -> String {
    let broker = &*ctx.broker;
    let mut r = Registry::with_prefix("headway");
    ctx.stats.requests.register(&mut r);
    ctx.authorizer.register(&mut r);
    ctx.sasl.register(&mut r);
    open_files::probe::register(&mut r, broker);
    io::probe::register_timings(&mut r, broker.timings());
    ctx.stats.register(&mut r);
    io::probe::register_read_pool(&mut r, broker.read_pool());
    panics::probe::register(&mut r);
    io::probe::register_bulk_budget(&mut r, broker.bulk_budget());
    if let Some(send) = &ctx.stats.bulk_send {
        send.stats().register(&mut r);
    }
    disk::probe::register(&mut r, broker.disk_space());
    partition::probe::register(&mut r, broker);
    headway_group::probe::register(&mut r, &ctx.groups, broker);
    headway_share::probe::register(&mut r, &ctx.shares);
    if let Some(tier) = &ctx.tier {
        headway_tier::probe::register(&mut r, tier);
    }
    process::register(&mut r);
    cleaner::probe::register(&mut r, broker.cleaner());
    let mut text = String::new();
    encode(&mut text, &r).expect("writing to a String cannot fail");
    text
}
