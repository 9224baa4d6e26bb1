//! Share groups (queues for Kafka): consumers share partitions, each record is
//! acquired under a time-limited lock and acknowledged on its own.
//!
//! - [`partition`]: one share-partition's in-flight records, plain values over an
//!   injected clock.

pub mod partition;
