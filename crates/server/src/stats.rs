//! What the server's bounded queues hold right now, per connection and broker-wide: the
//! state the metrics endpoint shows and the tests assert on.

use crate::outbound::{ConnectionBudget, OutboundBudget};
use crate::request_budget::RequestBudget;
use headway_broker::read_pool::{ReadPool, ReadShare, ReadStatsSnapshot, ReadVia};
use headway_broker::{limits, BrokerConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Broker-wide budgets and the registry of open connections.
pub struct ServerStats {
    pub outbound: Arc<OutboundBudget>,
    /// Bytes of large request frames being read or handled (`request_bytes_in_flight_max`).
    pub request_bytes: RequestBudget,
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
}

/// One connection's state.
pub struct Connection {
    pub id: u64,
    pub peer: SocketAddr,
    pub outbound: ConnectionBudget,
    pub reads: ReadVia,
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSnapshot {
    pub id: u64,
    pub peer: SocketAddr,
    pub requests_read: u64,
    pub responses_written: u64,
    pub in_flight: usize,
    pub window_full_events: u64,
    pub reader_paused: bool,
    pub outbound_bytes_held: usize,
    pub outbound_bytes_max: usize,
    pub bytes_written: u64,
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
            request_bytes: RequestBudget::new(config.request_bytes_in_flight_max),
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
        })
    }

    /// Registers a new connection; it stays listed until [`ServerStats::closed`].
    pub fn opened(&self, peer: SocketAddr) -> Arc<Connection> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let share: ReadShare = Arc::new(Semaphore::new(limits::COLD_READS_PER_CONNECTION));
        let connection = Arc::new(Connection {
            id,
            peer,
            outbound: ConnectionBudget::new(
                self.connection_outbound_bytes_max,
                Arc::clone(&self.outbound),
            ),
            reads: ReadVia {
                pool: Arc::clone(&self.read_pool),
                share: Some(share),
                cache_first: self.read_cache_first,
                tail_bytes: self.read_tail_bytes,
            },
            requests_read: AtomicU64::new(0),
            responses_written: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            window_full_events: AtomicU64::new(0),
            reader_paused: AtomicBool::new(false),
            bytes_written: AtomicU64::new(0),
        });
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.connections
            .lock()
            .expect("connections lock")
            .insert(id, Arc::clone(&connection));
        connection
    }

    pub fn closed(&self, connection: &Connection) {
        self.connections
            .lock()
            .expect("connections lock")
            .remove(&connection.id);
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
            request_budget_waits: self.request_bytes.waits.load(Ordering::Relaxed),
            unsynced_holds: self.unsynced_holds.load(Ordering::Relaxed),
            reads: self.read_pool.snapshot(),
        }
    }
}

impl Connection {
    pub fn snapshot(&self) -> ConnectionSnapshot {
        ConnectionSnapshot {
            id: self.id,
            peer: self.peer,
            requests_read: self.requests_read.load(Ordering::Relaxed),
            responses_written: self.responses_written.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
            window_full_events: self.window_full_events.load(Ordering::Relaxed),
            reader_paused: self.reader_paused.load(Ordering::Relaxed),
            outbound_bytes_held: self.outbound.held(),
            outbound_bytes_max: self.outbound.max(),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
        }
    }
}
