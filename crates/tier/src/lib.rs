//! The remote tier: the sealed segments of tiered topics (`remote.storage.enable=true`)
//! copied to an S3-compatible bucket, and the bucket's view of what is there.
//!
//! `store.rs` speaks to the bucket (object names, the commit object that makes an
//! upload count, listing, deletes); `uploader.rs` walks the tiered partitions this
//! broker leads and copies what is sealed and stable; `retention.rs` decides what a
//! tiered partition's limits let go, remote and local; `reader.rs` reads whole batches
//! back from a remote segment, and `fetch.rs` serves fetches before the local log with
//! it, `lookup.rs` ListOffsets by time there; `settings.rs` is the
//! `remote_storage_*` section of the broker's settings; `crypto.rs` gives the S3 client
//! its signing digests; `probe.rs` its `/metrics` families. `docs/tiered-storage.md`
//! tells the whole.

mod crypto;
mod fetch;
mod lookup;
pub mod probe;
mod reader;
mod retention;
mod settings;
mod store;
#[cfg(test)]
mod tests;
mod uploader;

pub use reader::IndexCache;
pub use settings::TierSettings;
pub use store::{Listing, RemoteSegment, RemoteStore, TierError};
pub use uploader::{Tier, TierStats};
