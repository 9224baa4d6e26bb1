//! The disk space probe: the data directory's free space, the floor below which
//! produces are refused, and the refusals ([`super::DiskSpace`]).

use super::DiskSpace;
use crate::probe::{counter, gauge};
use prometheus_client::registry::Registry;

/// Registers `headway_disk_free_bytes*` and `headway_produces_refused_disk_free`.
pub fn register(r: &mut Registry, disk: &DiskSpace) {
    let disk = disk.snapshot();
    gauge(
        r,
        "disk_free_bytes",
        "Free bytes of the data directory's filesystem (last measurement minus what was produced since)",
        disk.free_bytes,
    );
    gauge(
        r,
        "disk_free_bytes_min",
        "Produces are refused below this many free bytes (disk_free_bytes_min; 0: off)",
        disk.min_bytes,
    );
    counter(
        r,
        "produces_refused_disk_free",
        "Produces refused because free space was below disk_free_bytes_min",
        disk.produces_refused,
    );
}
