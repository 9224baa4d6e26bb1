//! A segment as a crash or a damaged disk could leave it: the input's first byte says
//! how to split the rest into the segment's log file and its offset index. Opening the
//! log recovers it; nothing may panic, and the recovered log must be readable from its
//! start to its end.
#![no_main]

use headway_log::{Log, LogConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let split = (usize::from(split) * 16).min(rest.len());
    let (index, log) = rest.split_at(split);
    // A RAM-backed directory when there is one: recovery reads and writes files.
    let dir = tempfile::Builder::new()
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" })
        .unwrap();
    let name = format!("{:020}", 0);
    std::fs::write(dir.path().join(format!("{name}.log")), log).unwrap();
    if !index.is_empty() {
        std::fs::write(dir.path().join(format!("{name}.index")), index).unwrap();
    }
    let Ok((log, _report)) = Log::open(dir.path(), LogConfig::default(), 0) else {
        return;
    };
    let start = log.log_start_offset();
    if start < log.log_end_offset() {
        let slice = log.locate(start).expect("the recovered log's start can be located");
        slice
            .read(1 << 20, log.log_end_offset())
            .expect("the recovered log reads");
    }
});
