//! One client connection's state: who it is (its peer, its listener, the principal it
//! acts as, its SASL session), what it holds of the broker's budgets, and the counts the
//! metrics endpoint and the console show.
//!
//! A [`Connection`] is made when the listener accepts a client
//! ([`super::ServerStats::opened`]) and shared by the connection's reader and writer
//! tasks and the replies they have in flight; everything in it is thread-safe.

use crate::outbound::ConnectionBudget;
use crate::probe::BudgetProbe;
use headway_auth::sasl::{Exchange, SaslMechanism};
use headway_base::limits;
use headway_broker::io::read_pool::ReadVia;
use headway_broker::listeners::SecurityProtocol;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A listener as its connections see it: Metadata and FindCoordinator answer with its
/// advertised address, so each client is sent back to the listener it came in on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerInfo {
    pub name: String,
    pub protocol: SecurityProtocol,
    pub advertised_host: String,
    pub advertised_port: i32,
}

impl ListenerInfo {
    /// A plaintext listener on 127.0.0.1:9092, for tests of per-connection state.
    pub fn local() -> Arc<ListenerInfo> {
        Arc::new(ListenerInfo {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            advertised_host: "127.0.0.1".into(),
            advertised_port: 9092,
        })
    }
}

/// A connection's SASL session (`Connection::sasl`): how it authenticated, and an
/// authentication under way (`crate::sasl`).
#[derive(Debug, Default)]
pub struct SaslSession {
    /// The mechanism of the authentication; `None` until one succeeded.
    pub mechanism: Option<SaslMechanism>,
    /// The exchange under way: the first authentication's from the connection's start,
    /// a re-authentication's from its SaslHandshake; `None` once it ended.
    pub exchange: Option<Exchange>,
    /// The first authentication's tokens come as bare frames (after SaslHandshake v0).
    pub bare_tokens: bool,
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
    /// The SASL session of a SASL listener's connection.
    pub sasl: Mutex<SaslSession>,
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

impl Connection {
    /// A new connection's state: nothing read, nothing written, acting as
    /// [`ANONYMOUS`].
    pub fn new(
        id: u64,
        peer: SocketAddr,
        listener: Arc<ListenerInfo>,
        outbound: ConnectionBudget,
        reads: ReadVia,
        read_share_probe: BudgetProbe,
    ) -> Connection {
        Connection {
            id,
            peer,
            listener,
            outbound,
            reads,
            read_share: Arc::new(Semaphore::new(limits::COLD_READS_PER_CONNECTION)),
            read_share_probe,
            requests_read: AtomicU64::new(0),
            responses_written: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            window_full_events: AtomicU64::new(0),
            reader_paused: AtomicBool::new(false),
            bytes_written: AtomicU64::new(0),
            client_id: OnceLock::new(),
            principal: Mutex::new(Arc::from(ANONYMOUS)),
            sasl: Mutex::new(SaslSession::default()),
            sasl_session_ends_at_ms: AtomicI64::new(0),
            close_after_reply: AtomicBool::new(false),
            long_poll_bytes: AtomicUsize::new(0),
            long_poll_released: tokio::sync::Notify::new(),
        }
    }
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
