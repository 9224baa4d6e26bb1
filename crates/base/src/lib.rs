//! The foundation every headway crate stands on, depending on no other of them.
//!
//! - `ids`: [`PartitionIndex`], [`TopicPartition`], [`ProducerId`] and [`ProducerEpoch`],
//!   with their wire integers behind named conversions; `offset`: [`Offset`], whose
//!   integer is reached only through named conversions.
//! - `clock`: [`now_ms`], the one reading of the wall clock, and [`Clock`], the time a
//!   test can drive.
//! - [`durable_file`]: the one way to replace a file durably (temporary file, fsync,
//!   rename, fsync of the directory) and the one directory sync.
//! - [`limits`]: every hard bound shared by the crates, each with why it holds.
//!
//! Everything here is plain values and blocking helpers; all of it is thread-safe.

mod clock;
pub mod durable_file;
mod ids;
pub mod limits;
mod offset;

pub use clock::{now_ms, Clock};
pub use ids::{PartitionIndex, ProducerEpoch, ProducerId, TopicPartition};
pub use offset::Offset;
