//! CONTRACT STUB: signatures are fixed, bodies to be implemented.
use crate::Offset;

/// Files to fsync so that every offset below `log_end_offset` is durable.
/// Taken under the log's lock by [`crate::Log::sync_set`]; synced without it.
#[derive(Debug)]
pub struct SyncSet {
    pub log_end_offset: Offset,
}

impl SyncSet {
    /// True when nothing was written since the previous set.
    pub fn is_empty(&self) -> bool {
        todo!()
    }

    /// fdatasync every file (fsync for directories). Blocking.
    pub fn sync(&self) -> std::io::Result<()> {
        todo!()
    }
}
