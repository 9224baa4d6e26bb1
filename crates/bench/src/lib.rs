//! The benchmark lab behind `headway bench`: scenarios that reproduce the seed
//! experiments against headway or any Kafka-compatible broker, with reports in the
//! shape of the OpenMessaging Benchmark's.
//!
//! - [`command`]: `headway bench`'s arguments and the dispatch to a scenario.
//! - [`scenarios`]: one module per scenario (`acks`, `slow-consumer`, `stuck-consumer`,
//!   `slow-lane`, `credit`, `parallelism`, `noisy-neighbour`), each a function from its
//!   arguments and a [`scenarios::context::Ctx`] to a [`Report`].
//! - [`load`]: producer and consumer tasks, stamped messages, the progress line, and
//!   the run bookkeeping every scenario shares.
//! - [`latency`]: HDR histograms, run-wide and per second.
//! - [`proxy`]: the delay proxy (also `headway bench proxy`), which rewrites Kafka
//!   Metadata answers so that a client behind it stays behind it.
//! - [`report`]: the JSON and Markdown files.
//! - [`evict`]: writes a backlog's files back and drops them from the page cache, so
//!   that a catch-up reader reads from the disk.
//! - [`target`]: the broker under test: `--bootstrap`, or a headway broker the
//!   scenario starts and stops itself.
//!
//! Every scenario is bounded in time (`--duration`, two minutes by default; `--quick`
//! for a few seconds) and every task it starts ends with it.

pub mod command;
pub mod evict;
pub mod latency;
pub mod load;
pub mod proxy;
pub mod report;
pub mod scenarios;
pub mod target;

pub use command::{run, BenchArgs, BenchCommand, ProxyArgs};
pub use report::Report;
