//! The network side of the broker: a listener, one task pair per connection, and one
//! handler per Kafka API.
//!
//! A tour, following a request:
//!
//! 1. [`listener`] accepts a TCP connection (bounded by `connections_max`) and starts
//!    a [`connection`].
//! 2. The connection's reader task reads a frame (size checked first, body memory
//!    reserved from a broker-wide budget), decodes the header and calls
//!    [`handlers::dispatch`], which finds the API's handler in the one registry,
//!    [`handlers::APIS`]. The handler's synchronous part runs right there, in
//!    request order: a produce is validated and appended (offsets assigned) before the
//!    next request is read.
//! 3. The handler returns a [`call::Reply`]: bytes ready now, or a future (a
//!    produce waiting for its fsync, a fetch waiting for data). The reply goes into the
//!    connection's bounded in-flight window.
//! 4. The writer task takes replies in order, awaits each, and writes it. While a
//!    produce waits for its sync, the reader keeps reading and appending the next
//!    pipelined requests, which then share the same group commit.
//!
//! 5. A fetch reserves outbound bytes ([`outbound`]) before it reads, and reads through
//!    the page cache or the cold-read pool; the reservation is released when the writer
//!    has written the response. [`call::stats`] shows what every bounded queue holds,
//!    [`probe`] how often each budget was found short and how long callers waited, and
//!    [`requests`] the requests, response codes and latencies per API; [`metrics`]
//!    serves them, with every other component's probe and the [`process`]'s, with
//!    `/healthz` and `/readyz`, and [`console`] shows them, with
//!    groups and topics, in a read-only web page.
//!
//! Kafka error codes are chosen in one place, [`errors`]. [`config`] assembles every
//! component's section of the settings from one flat file.
//!
//! The modules build on each other top-down: [`listener`] on [`connection`] and
//! [`sasl`], those on the registry [`handlers`], the handlers on [`authorize`] and
//! [`errors`], and all of them on [`call`]: the context a request is handled with
//! ([`call::Ctx`], [`call::Call`]), the connection's state and what a handler gives
//! back. Below `call` are the services it bundles ([`authorizer`], [`sasl_settings`],
//! [`group_configs`], [`requests`]) and the budgets ([`outbound`], [`request_budget`]).

pub mod authentication;
pub mod authorize;
pub mod authorizer;
pub mod bulk_send;
pub mod call;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod console;
pub mod errors;
pub mod group_configs;
pub mod handlers;
pub mod listener;
pub mod log_limit;
pub mod metrics;
pub mod outbound;
pub mod probe;
pub mod process;
pub mod replica_fetcher;
pub mod request_budget;
pub mod requests;
pub mod sasl;
pub mod sasl_settings;
pub mod tls;
pub mod txn_checks;
pub mod txn_markers;

pub use config::{Config, ServerConfig};
pub use listener::{RunningServer, Server, ServerHandle};
