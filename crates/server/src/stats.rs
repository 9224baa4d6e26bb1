//! What the server's bounded queues hold right now, per connection and broker-wide: the
//! state the metrics endpoint shows and the tests assert on.
//!
//! One [`ServerStats`] per server (so per broker instance): its budgets, the counts of
//! how often each was found short ([`BudgetProbe`]), and the registry of open
//! connections. A connection is listed from [`ServerStats::opened`] until its
//! [`Registration`] is dropped, however the connection's task ends.

use crate::bulk_send::BulkSender;
use crate::listener::ListenerInfo;
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
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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

/// One connection's state.
pub struct Connection {
    pub id: u64,
    pub peer: SocketAddr,
    /// The listener the connection came in on.
    pub listener: Arc<ListenerInfo>,
    pub outbound: ConnectionBudget,
    /// How this connection's fetches read. Its share of the read threads is taken by
    /// [`Connection::read_turn`] around each read.
    pub reads: ReadVia,
    /// Reads this connection may have queued or running at once
    /// (`limits::COLD_READS_PER_CONNECTION`).
    read_share: Arc<Semaphore>,
    read_share_probe: BudgetProbe,
    /// Requests read from the socket.
    pub requests_read: AtomicU64,
    /// Responses written to the socket.
    pub responses_written: AtomicU64,
    /// Replies queued in the window (read, not yet written).
    pub in_flight: AtomicUsize,
    /// Times the reader found the window full and stopped reading the socket.
    pub window_full_events: AtomicU64,
    /// True while the reader waits for room in the window.
    pub reader_paused: AtomicBool,
    pub bytes_written: AtomicU64,
    /// The client id of the first request that carried one (the console shows it).
    client_id: OnceLock<Arc<str>>,
    /// Who the connection acts as, in Kafka's `Type:name` form: `User:ANONYMOUS` until a
    /// listener's authentication (a client certificate, SASL) names someone else.
    principal: Mutex<Arc<str>>,
    /// The SASL session of a SASL listener's connection (`crate::sasl`).
    pub sasl: Mutex<crate::sasl::Session>,
    /// When the SASL session ends, ms since the epoch; 0: it does not.
    pub sasl_session_ends_at_ms: AtomicI64,
    /// Set by a handler whose answer must be the connection's last (a refused
    /// re-authentication): the reader stops after queuing it.
    pub close_after_reply: AtomicBool,
    /// Bytes of bookkeeping held by this connection's waiting long polls
    /// ([`Connection::hold_long_poll`]).
    long_poll_bytes: AtomicUsize,
    long_poll_released: tokio::sync::Notify,
}

/// A waiting long poll's share of [`Connection`]'s long-poll bytes, given back when the
/// answer is done with (written or dropped).
pub struct LongPollHeld {
    conn: Arc<Connection>,
    bytes: usize,
}

impl Drop for LongPollHeld {
    fn drop(&mut self) {
        self.conn
            .long_poll_bytes
            .fetch_sub(self.bytes, Ordering::AcqRel);
        self.conn.long_poll_released.notify_waiters();
    }
}

impl Connection {
    /// Counts `bytes` of a long poll's bookkeeping against this connection until the
    /// returned guard is dropped (`limits::LONG_POLL_BYTES_PER_CONNECTION_MAX`).
    pub fn hold_long_poll(self: &Arc<Self>, bytes: usize) -> LongPollHeld {
        self.long_poll_bytes.fetch_add(bytes, Ordering::AcqRel);
        LongPollHeld {
            conn: Arc::clone(self),
            bytes,
        }
    }

    /// Bytes held by waiting long polls now.
    pub fn long_poll_bytes(&self) -> usize {
        self.long_poll_bytes.load(Ordering::Acquire)
    }

    /// Waits until the waiting long polls hold at most `max` bytes.
    pub async fn long_polls_within(&self, max: usize) {
        loop {
            let released = self.long_poll_released.notified();
            if self.long_poll_bytes() <= max {
                return;
            }
            released.await;
        }
    }
}

/// The principal of a connection nobody has authenticated.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSnapshot {
    pub id: u64,
    pub peer: SocketAddr,
    pub requests_read: u64,
    pub responses_written: u64,
    pub in_flight: usize,
    pub window_full_events: u64,
    pub reader_paused: bool,
    /// Bytes of bookkeeping held by the connection's waiting long polls.
    pub long_poll_bytes: usize,
    pub outbound_bytes_held: usize,
    pub outbound_bytes_max: usize,
    pub bytes_written: u64,
    pub client_id: Option<Arc<str>>,
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
    pub fn new(config: &BrokerConfig, read_pool: Arc<ReadPool>) -> Arc<ServerStats> {
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
            requests: RequestMetrics::new(),
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
        let connection = Arc::new(Connection {
            id,
            peer,
            listener,
            outbound: ConnectionBudget::new(
                self.connection_outbound_bytes_max,
                Arc::clone(&self.outbound),
            ),
            reads: ReadVia {
                pool: Arc::clone(&self.read_pool),
                cache_first: self.read_cache_first,
                tail_bytes: self.read_tail_bytes,
            },
            read_share: Arc::new(Semaphore::new(limits::COLD_READS_PER_CONNECTION)),
            read_share_probe: self.read_share_probe.clone(),
            requests_read: AtomicU64::new(0),
            responses_written: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            window_full_events: AtomicU64::new(0),
            reader_paused: AtomicBool::new(false),
            bytes_written: AtomicU64::new(0),
            client_id: OnceLock::new(),
            principal: Mutex::new(Arc::from(ANONYMOUS)),
            sasl: Mutex::new(crate::sasl::Session::default()),
            sasl_session_ends_at_ms: AtomicI64::new(0),
            close_after_reply: AtomicBool::new(false),
            long_poll_bytes: AtomicUsize::new(0),
            long_poll_released: tokio::sync::Notify::new(),
        });
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

impl Connection {
    /// This connection's turn to read from a log: one of its share permits, held
    /// until the read is done. Fetches of one connection run one at a time (its
    /// writer runs them in order), so a wait here means the share was made smaller
    /// than the reads a fetch has in flight.
    pub async fn read_turn(&self) -> OwnedSemaphorePermit {
        self.read_share_probe.acquire(&self.read_share, 1).await
    }

    pub fn snapshot(&self) -> ConnectionSnapshot {
        ConnectionSnapshot {
            id: self.id,
            peer: self.peer,
            requests_read: self.requests_read.load(Ordering::Relaxed),
            responses_written: self.responses_written.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            window_full_events: self.window_full_events.load(Ordering::Relaxed),
            reader_paused: self.reader_paused.load(Ordering::Relaxed),
            long_poll_bytes: self.long_poll_bytes(),
            outbound_bytes_held: self.outbound.held(),
            outbound_bytes_max: self.outbound.max(),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            client_id: self.client_id.get().cloned(),
        }
    }

    /// Records the connection's client id; the first one set stays.
    /// The principal the connection acts as (see [`ANONYMOUS`]).
    pub fn principal(&self) -> Arc<str> {
        Arc::clone(&self.principal.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Records who the connection acts as from now on, after an authentication.
    pub fn set_principal(&self, principal: &str) {
        *self.principal.lock().unwrap_or_else(|e| e.into_inner()) = Arc::from(principal);
    }

    pub fn set_client_id(&self, client_id: &Arc<str>) {
        if self.client_id.get().is_none() {
            let _ = self.client_id.set(Arc::clone(client_id));
        }
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
