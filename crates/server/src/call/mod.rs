//! The bottom of the server: what a request is handled with and what it gives back.
//!
//! - [`context`]: the broker-wide [`Ctx`], one request's [`Call`], and the shape of a
//!   [`Handler`] as the registry (`crate::handlers`) lists it;
//! - [`reply`]: the [`Reply`] a handler returns, the helpers that encode it, and the
//!   [`HandlerError`]s that close a connection instead;
//! - [`connection`]: one client connection's state and counts ([`Connection`]);
//! - [`stats`]: the broker-wide budgets and the registry of open connections
//!   ([`ServerStats`]).
//!
//! Handlers, the authorization checks, SASL, the connection tasks and the metrics
//! endpoint all build on this module; it uses none of them.

pub mod connection;
pub mod context;
pub mod reply;
pub mod stats;

pub use connection::{
    Connection, ConnectionSnapshot, ListenerInfo, LongPollHeld, SaslSession, ANONYMOUS,
};
pub use context::{shutting_down, Arrival, Call, Ctx, Handle, Handler};
pub use reply::{
    pending, pending_with, ready, ready_at, HandlerError, Outgoing, Reply, ReplyFailed, ReplyTiming,
};
pub use stats::{Registration, ServerStats, StatsSnapshot};
