//! What the server's bounded queues hold right now, broker-wide, and the registry of
//! open connections ([`super::connection`]): the state the metrics endpoint shows and
//! the tests assert on.
//!
//! One [`ServerStats`] per server (so per broker instance): its budgets, the counts of
//! how often each was found short ([`BudgetProbe`]), and the registry of open
//! connections. A connection is listed from [`ServerStats::opened`] until its
//! [`Registration`] is dropped, however the connection's task ends. [`probe`] shows
//! them on `/metrics`.

pub mod probe;

use crate::bulk_send::BulkSender;
use crate::call::connection::{Connection, ConnectionSnapshot, ListenerInfo};
use crate::log_limit::LineLimiter;
use crate::outbound::{ConnectionBudget, OutboundBudget};
use crate::probe::BudgetProbe;
use crate::request_budget::RequestBudget;
use crate::requests::RequestMetrics;
use headway_base::limits;
use headway_broker::io::read_pool::{ReadPool, ReadStatsSnapshot, ReadVia};
use headway_broker::BrokerConfig;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Broker-wide budgets and the registry of open connections.
pub struct ServerStats {
    pub outbound: Arc<OutboundBudget>,
    /// The threads that write large answers to plain TCP sockets
    /// (`bulk_send_threads`; `None` when there are none).
    pub bulk_send: Option<Arc<BulkSender>>,
    /// Bytes of large request frames being read or handled (`request_bytes_in_flight_max`).
    pub request_bytes: RequestBudget,
    /// Connections served at once (`connections_max`): the listener accepts the next
    /// one only with a slot free.
    connection_slots: Arc<Semaphore>,
    pub connection_slots_probe: BudgetProbe,
    /// Every connection's share of the read threads, counted together.
    pub read_share_probe: BudgetProbe,
    connection_outbound_bytes_max: usize,
    read_pool: Arc<ReadPool>,
    read_cache_first: bool,
    read_tail_bytes: u64,
    connections: Mutex<BTreeMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    accepted: AtomicU64,
    /// Times any connection's window was full (the per-connection counts go with them).
    pub window_full_events: AtomicU64,
    /// Connections closed for a request that could not be decoded safely: a length or
    /// count its bytes do not back, a body too costly to decode, a malformed header.
    pub requests_refused: AtomicU64,
    /// Connections closed because a request body did not arrive in
    /// `request_body_timeout_ms`.
    pub request_body_timeouts: AtomicU64,
    /// Times a producer's connection waited because a partition it wrote had more
    /// unsynced bytes than `partition_unsynced_bytes_max`.
    pub unsynced_holds: AtomicU64,
    /// Connections to SSL listeners closed because their TLS handshake failed or did
    /// not finish in time.
    pub tls_handshake_failures: AtomicU64,
    /// Bounds the log lines of failed handshakes.
    pub tls_failure_lines: LineLimiter,
    /// Requests, response codes and latencies per API.
    pub requests: RequestMetrics,
    /// True while the listener accepts connections: from the start of its accept loop
    /// until shutdown begins (`/readyz`).
    pub accepting: AtomicBool,
    /// `connections_max`, named by the log line when it is reached.
    connections_max: usize,
    /// Bounds the log lines of `connections_max` reached.
    connection_limit_lines: LineLimiter,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub connections: Vec<ConnectionSnapshot>,
    pub connections_accepted: u64,
    pub window_full_events: u64,
    pub outbound_bytes_held: usize,
    pub outbound_bytes_max: usize,
    pub request_bytes_held: usize,
    pub request_bytes_max: usize,
    pub requests_refused: u64,
    pub request_body_timeouts: u64,
    pub request_budget_waits: u64,
    pub unsynced_holds: u64,
    pub reads: ReadStatsSnapshot,
}

impl ServerStats {
    /// The budgets of `config`, reading through `read_pool`, counting requests in
    /// `requests`.
    pub fn new(
        config: &BrokerConfig,
        read_pool: Arc<ReadPool>,
        requests: RequestMetrics,
    ) -> Arc<ServerStats> {
        Arc::new(ServerStats {
            outbound: OutboundBudget::new(config.outbound_bytes_max),
            bulk_send: BulkSender::start(config.bulk_send_threads),
            request_bytes: RequestBudget::new(config.request_bytes_in_flight_max),
            connection_slots: Arc::new(Semaphore::new(config.connections_max)),
            connection_slots_probe: BudgetProbe::default(),
            read_share_probe: BudgetProbe::default(),
            connection_outbound_bytes_max: config.connection_outbound_bytes_max,
            read_pool,
            read_cache_first: config.read_cache_first,
            read_tail_bytes: config.read_tail_bytes,
            connections: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            accepted: AtomicU64::new(0),
            window_full_events: AtomicU64::new(0),
            requests_refused: AtomicU64::new(0),
            request_body_timeouts: AtomicU64::new(0),
            unsynced_holds: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            tls_failure_lines: LineLimiter::new(limits::FAILURE_LOG_LINES_PER_SECOND),
            requests,
            accepting: AtomicBool::new(false),
            connections_max: config.connections_max,
            connection_limit_lines: LineLimiter::new(1),
        })
    }

    /// A slot for one more connection (`connections_max`), once one is free; the
    /// connection holds it until it ends.
    pub async fn connection_slot(&self) -> OwnedSemaphorePermit {
        if self.connection_slots.available_permits() == 0 {
            if let Some(left_out) = self.connection_limit_lines.admit_now() {
                tracing::warn!(connections_max = self.connections_max, times_left_out = left_out,
                    "connections_max reached: new connections wait in the listen backlog until one closes");
            }
        }
        self.connection_slots_probe
            .acquire(&self.connection_slots, 1)
            .await
    }

    /// Registers a new connection; it stays listed until the [`Registration`] is
    /// dropped.
    pub fn opened(self: &Arc<Self>, peer: SocketAddr, listener: Arc<ListenerInfo>) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let connection = Arc::new(Connection::new(
            id,
            peer,
            listener,
            ConnectionBudget::new(
                self.connection_outbound_bytes_max,
                Arc::clone(&self.outbound),
            ),
            ReadVia {
                pool: Arc::clone(&self.read_pool),
                cache_first: self.read_cache_first,
                tail_bytes: self.read_tail_bytes,
            },
            self.read_share_probe.clone(),
        ));
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.connections
            .lock()
            .expect("connections lock")
            .insert(id, Arc::clone(&connection));
        Registration {
            stats: Arc::clone(self),
            connection,
        }
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let connections = self
            .connections
            .lock()
            .expect("connections lock")
            .values()
            .map(|c| c.snapshot())
            .collect();
        StatsSnapshot {
            connections,
            connections_accepted: self.accepted.load(Ordering::Relaxed),
            window_full_events: self.window_full_events.load(Ordering::Relaxed),
            outbound_bytes_held: self.outbound.held(),
            outbound_bytes_max: self.outbound.max(),
            request_bytes_held: self.request_bytes.held(),
            request_bytes_max: self.request_bytes.max(),
            requests_refused: self.requests_refused.load(Ordering::Relaxed),
            request_body_timeouts: self.request_body_timeouts.load(Ordering::Relaxed),
            request_budget_waits: self.request_bytes.probe.exhausted(),
            unsynced_holds: self.unsynced_holds.load(Ordering::Relaxed),
            reads: self.read_pool.snapshot(),
        }
    }
}

/// An open connection's entry in [`ServerStats`]: dropping it unregisters the
/// connection, on every path out of its task (an error, a panic, shutdown).
pub struct Registration {
    stats: Arc<ServerStats>,
    connection: Arc<Connection>,
}

impl Registration {
    pub fn connection(&self) -> &Arc<Connection> {
        &self.connection
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // A panic elsewhere must not leave the connection listed.
        let mut connections = match self.stats.connections.lock() {
            Ok(connections) => connections,
            Err(poisoned) => poisoned.into_inner(),
        };
        connections.remove(&self.connection.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_broker::io::bulk_budget::BulkBudget;
    use headway_broker::io::timings::Timings;

    fn stats(adjust: impl FnOnce(&mut BrokerConfig)) -> Arc<ServerStats> {
        let mut config = BrokerConfig::default();
        adjust(&mut config);
        let bulk = Arc::new(BulkBudget::new(
            config.bulk_budget(),
            Arc::new(Timings::new()),
        ));
        ServerStats::new(
            &config,
            ReadPool::new(
                1,
                headway_broker::io::priority::BulkPriority::UNCHANGED,
                bulk,
            ),
            RequestMetrics::new([]),
        )
    }

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[tokio::test]
    async fn dropping_the_registration_unregisters_the_connection() {
        let stats = stats(|_| {});
        let first = stats.opened(peer(1), ListenerInfo::local());
        let second = stats.opened(peer(2), ListenerInfo::local());
        let listed = |stats: &ServerStats| -> Vec<SocketAddr> {
            stats
                .snapshot()
                .connections
                .iter()
                .map(|c| c.peer)
                .collect()
        };
        assert_eq!(listed(&stats), [peer(1), peer(2)]);
        // A connection task that panics drops its registration while unwinding.
        let task = tokio::spawn(async move {
            let _registered = first;
            panic!("a connection task fails");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(listed(&stats), [peer(2)]);
        drop(second);
        assert!(listed(&stats).is_empty());
        assert_eq!(stats.snapshot().connections_accepted, 2);
    }

    #[tokio::test]
    async fn a_full_connection_limit_and_a_full_read_share_are_counted() {
        let stats = stats(|c| c.connections_max = 1);
        let slot = stats.connection_slot().await;
        assert_eq!(stats.connection_slots_probe.exhausted(), 0);
        let mut next = std::pin::pin!(stats.connection_slot());
        assert!(futures::poll!(next.as_mut()).is_pending(), "no slot free");
        assert_eq!(stats.connection_slots_probe.exhausted(), 1);
        drop(slot);
        assert_eq!(next.await.num_permits(), 1, "the slot given back");
        assert_eq!(stats.connection_slots_probe.waits(), 1);

        let registered = stats.opened(peer(1), ListenerInfo::local());
        let conn = registered.connection();
        let turns: Vec<_> = futures::future::join_all(
            (0..limits::COLD_READS_PER_CONNECTION).map(|_| conn.read_turn()),
        )
        .await;
        assert_eq!(stats.read_share_probe.exhausted(), 0, "within the share");
        let mut next = std::pin::pin!(conn.read_turn());
        assert!(
            futures::poll!(next.as_mut()).is_pending(),
            "the share is taken"
        );
        assert_eq!(stats.read_share_probe.exhausted(), 1);
        drop(turns);
        assert_eq!(next.await.num_permits(), 1, "the turn given back");
        assert_eq!(stats.read_share_probe.waits(), 1);
    }
}
