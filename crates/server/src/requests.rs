//! Requests per API: how many were handled, how long each took until its response was
//! ready to write, and the error codes the responses carried (`docs/metrics.md`).
//!
//! One [`RequestMetrics`] per server, part of its `ServerStats` (`crate::call`). Every
//! served API (the registry's, `crate::handlers::APIS`) has a slot made when the server starts, so
//! counting a request takes no lock and allocates nothing; the label sets are the served
//! APIs and Kafka's error codes, a fixed, bounded list. The connection's reader counts a
//! request and its response ([`RequestMetrics::answered`]) around `dispatch`; a reply
//! that must wait (a produce's sync, a fetch's long poll) is counted when it is ready.
//!
//! Error codes come from the typed response, before it is encoded: each response type
//! says which codes it carries ([`ErrorCodes`], implemented next to its handler), and
//! every code is counted once, the top-level one and each per-item one (partition,
//! topic, group, member, resource). A reply carries its [`Codes`] to the reader.
//!
//! A response that carries a failure of the broker's own (a storage error, an internal
//! error) or a refusal of bad input (a corrupt batch, a malformed request, and the
//! authorization codes) is also logged, one line naming the API, the code, the client's
//! id and its address, at most [`limits::FAILURE_LOG_LINES_PER_SECOND`] lines a second.

use crate::log_limit::LineLimiter;
use headway_base::limits;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::ResponseError;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Error codes counted one by one: Kafka's codes run from -1 to about 130; a code
/// outside `-1..ERROR_CODES - 1` is counted as `other`.
const ERROR_CODES: usize = 160;

/// The error codes a response carries, each with how often, in the order first seen.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Codes(Vec<(i16, u32)>);

impl Codes {
    /// The codes `response` carries.
    pub fn of<R: ErrorCodes + ?Sized>(response: &R) -> Codes {
        let mut codes = Codes::default();
        response.error_codes(&mut codes);
        codes
    }

    /// Counts one more `code`.
    pub fn add(&mut self, code: i16) {
        match self.0.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => self.0.push((code, 1)),
        }
    }

    /// Each code with how often it was added, in the order first added.
    pub fn iter(&self) -> impl Iterator<Item = (i16, u32)> + '_ {
        self.0.iter().copied()
    }
}

/// A response type's error codes, counted on `/metrics` by API. Each handler
/// implements it for the responses it answers with, next to the handler.
pub trait ErrorCodes {
    /// Adds every code the response carries to `codes`. The default adds none: the
    /// APIs that keep it have no codes counted.
    fn error_codes(&self, codes: &mut Codes) {
        let _ = codes;
    }
}

type Labels = Vec<(&'static str, String)>;
type Latencies = Family<Labels, Histogram, fn() -> Histogram>;

/// 50 µs to 6.5 s, doubling: a sync-bound produce, a long poll, a rebalance's join.
fn new_histogram() -> Histogram {
    Histogram::new(exponential_buckets(50e-6, 2.0, 18))
}

/// Codes logged when a response carries them: the broker's own failures and refusals
/// of bad input. Codes a client meets in normal work (a retriable leader change, an
/// offset out of range, a version negotiation) are counted only.
const LOGGED_CODES: [ResponseError; 9] = [
    ResponseError::UnknownServerError,
    ResponseError::CorruptMessage,
    ResponseError::TopicAuthorizationFailed,
    ResponseError::GroupAuthorizationFailed,
    ResponseError::ClusterAuthorizationFailed,
    ResponseError::InvalidRequest,
    ResponseError::TransactionalIdAuthorizationFailed,
    ResponseError::KafkaStorageError,
    ResponseError::InvalidRecord,
];

/// Who sent a request: named in log lines about its connection and its failures.
#[derive(Debug, Clone)]
pub struct Caller {
    pub peer: SocketAddr,
    /// The client id of the connection's first request.
    pub client_id: Option<Arc<str>>,
}

/// One served API's counters.
struct Slot {
    name: String,
    requests: Counter,
    latency: Histogram,
    /// Responses' error codes: index `code + 1`, the last one for any other code.
    codes: Vec<AtomicU64>,
}

/// Request and response counters and latency histograms, per served API.
pub struct RequestMetrics {
    /// Indexed by API key; `None` for keys no handler serves.
    slots: Vec<Option<Slot>>,
    requests: Family<Labels, Counter>,
    latency: Latencies,
    failure_lines: LineLimiter,
}

impl RequestMetrics {
    /// Counters for the APIs of `served`.
    pub fn new(served: impl IntoIterator<Item = ApiKey>) -> RequestMetrics {
        let requests = Family::<Labels, Counter>::default();
        let latency = Latencies::new_with_constructor(new_histogram as fn() -> Histogram);
        let served: Vec<ApiKey> = served.into_iter().collect();
        let keys = served.iter().map(|k| *k as usize + 1).max().unwrap_or(0);
        let mut slots: Vec<Option<Slot>> = (0..keys).map(|_| None).collect();
        for key in served {
            let name = format!("{key:?}");
            let labels = vec![("api", name.clone())];
            slots[key as usize] = Some(Slot {
                requests: requests.get_or_create(&labels).clone(),
                latency: latency.get_or_create(&labels).clone(),
                codes: (0..=ERROR_CODES).map(|_| AtomicU64::new(0)).collect(),
                name,
            });
        }
        RequestMetrics {
            slots,
            requests,
            latency,
            failure_lines: LineLimiter::new(limits::FAILURE_LOG_LINES_PER_SECOND),
        }
    }

    fn slot(&self, api: ApiKey) -> Option<&Slot> {
        self.slots.get(api as usize).and_then(Option::as_ref)
    }

    /// A request of `api` was read and is about to be handled.
    pub fn read(&self, api: ApiKey) {
        if let Some(slot) = self.slot(api) {
            slot.requests.inc();
        }
    }

    /// The response to a request of `api` from `caller`, handled from `started`, is
    /// ready to write; it carries `codes`.
    pub fn answered(&self, api: ApiKey, started: Instant, codes: &Codes, caller: &Caller) {
        let Some(slot) = self.slot(api) else {
            return;
        };
        slot.latency.observe(started.elapsed().as_secs_f64());
        let mut logged = None;
        for (code, n) in codes.iter() {
            let index = usize::try_from(i32::from(code) + 1)
                .ok()
                .filter(|i| *i < ERROR_CODES)
                .unwrap_or(ERROR_CODES);
            slot.codes[index].fetch_add(u64::from(n), Ordering::Relaxed);
            if logged.is_none() && LOGGED_CODES.iter().any(|e| e.code() == code) {
                logged = Some(code);
            }
        }
        if let Some(code) = logged {
            self.log_failure(&slot.name, code, caller);
        }
    }

    fn log_failure(&self, api: &str, code: i16, caller: &Caller) {
        let Some(left_out) = self.failure_lines.admit_now() else {
            return;
        };
        tracing::warn!(
            peer = %caller.peer,
            client_id = caller.client_id.as_deref().unwrap_or(""),
            api,
            code,
            error = %error_name(code),
            lines_left_out = left_out,
            "request failed"
        );
    }

    /// A request of `api` handled from `started` needs no response (a produce with
    /// acks=0): its latency is counted, no code.
    pub fn unanswered(&self, api: ApiKey, started: Instant) {
        if let Some(slot) = self.slot(api) {
            slot.latency.observe(started.elapsed().as_secs_f64());
        }
    }

    /// Adds the families to one scrape's registry.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "api_requests",
            "Requests read and handled, by API",
            self.requests.clone(),
        );
        r.register(
            "api_request_seconds",
            "Time from a request read to its response ready to write, by API",
            self.latency.clone(),
        );
        let codes = Family::<Labels, Counter>::default();
        for slot in self.slots.iter().flatten() {
            for (index, n) in slot.codes.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n == 0 {
                    continue;
                }
                let (code, error) = match index < ERROR_CODES {
                    true => {
                        let code = index as i16 - 1;
                        (code.to_string(), error_name(code))
                    }
                    false => ("other".to_string(), "Unknown".to_string()),
                };
                let labels = vec![("api", slot.name.clone()), ("code", code), ("error", error)];
                codes.get_or_create(&labels).inc_by(n);
            }
        }
        r.register(
            "api_response_codes",
            "Error codes carried by responses, top-level and per partition, topic, group or resource (code 0: none), by API",
            codes,
        );
    }
}

/// Kafka's name of `code`, as `kafka-protocol` spells it (`None` for 0).
fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "None".to_string(),
        Some(ResponseError::Unknown(_)) => "Unknown".to_string(),
        Some(error) => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller() -> Caller {
        Caller {
            peer: "127.0.0.1:5000".parse().unwrap(),
            client_id: Some(Arc::from("a-client")),
        }
    }

    fn scrape(metrics: &RequestMetrics) -> String {
        let mut r = Registry::default();
        metrics.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        text
    }

    fn codes(list: &[i16]) -> Codes {
        let mut codes = Codes::default();
        list.iter().for_each(|c| codes.add(*c));
        codes
    }

    #[test]
    fn partition_codes_and_top_level_codes_are_counted_by_api() {
        let metrics = RequestMetrics::new([ApiKey::Produce, ApiKey::Heartbeat]);
        metrics.read(ApiKey::Produce);
        metrics.answered(
            ApiKey::Produce,
            Instant::now(),
            &codes(&[0, 3, 3]),
            &caller(),
        );
        metrics.answered(ApiKey::Heartbeat, Instant::now(), &codes(&[27]), &caller());

        let text = scrape(&metrics);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        has(r#"api_requests_total{api="Produce"} 1"#);
        has(r#"api_request_seconds_count{api="Produce"} 1"#);
        has(r#"api_response_codes_total{api="Produce",code="0",error="None"} 1"#);
        has(
            r#"api_response_codes_total{api="Produce",code="3",error="UnknownTopicOrPartition"} 2"#,
        );
        has(r#"api_response_codes_total{api="Heartbeat",code="27",error="RebalanceInProgress"} 1"#);
        assert!(!text.contains(r#"api="Fetch",code"#), "no fetch answered");
    }

    #[test]
    fn codes_keep_the_order_first_seen_and_count_repeats() {
        let codes = codes(&[0, 3, 0, -1, 3, 3]);
        assert_eq!(codes.iter().collect::<Vec<_>>(), [(0, 2), (3, 3), (-1, 1)]);
    }

    #[test]
    fn a_code_outside_the_known_range_is_counted_as_other() {
        let metrics = RequestMetrics::new([ApiKey::Produce]);
        metrics.answered(ApiKey::Produce, Instant::now(), &codes(&[500]), &caller());
        assert!(scrape(&metrics)
            .contains(r#"api_response_codes_total{api="Produce",code="other",error="Unknown"} 1"#));
    }
}
