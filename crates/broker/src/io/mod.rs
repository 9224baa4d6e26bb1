//! The scheduling of the broker's I/O: where a read runs and which work waits.
//!
//! - [`read_pool`]: the read threads, where reads that may wait for the disk run, one
//!   per connection at a time; `read_route` decides whether a fetch's read goes there
//!   or to the page cache on the caller's thread.
//! - [`bulk_budget`]: the rate that bulk work (catch-up reads, large produces, the log
//!   cleaner) may take, adapted to the latency of the light work beside it.
//! - [`priority`]: the CPU and disk priority of the threads that do bulk work.
//! - [`timings`]: where acknowledgements, fetches and syncs spend their time, the
//!   measurements the bulk budget steers by.
//! - [`probe`]: their `/metrics` families.
//!
//! Thread-safe throughout: the broker shares each as an `Arc`.

pub mod bulk_budget;
pub mod priority;
pub mod probe;
pub mod read_pool;
pub(crate) mod read_route;
pub mod timings;
