//! Making a backlog cold: every regular file under the given directories is written back
//! (`fdatasync`) and then dropped from the page cache (`posix_fadvise(DONTNEED)`), so that
//! a reader starting at offset 0 reads from the disk, as a consumer catching up on old
//! data does in production, rather than from memory the writes left behind.
//!
//! The broker keeps running meanwhile: its files are only opened read-only, synced and
//! advised. Pages a process has mapped (Kafka's index files) stay resident; the kernel
//! skips them. Files that vanish during the walk (a segment deleted or renamed) are
//! counted as failed and skipped.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// What one pass over the directories did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Evicted {
    pub files: u64,
    pub bytes: u64,
    /// Files that could not be opened, synced or advised.
    pub failed: u64,
    /// Files on a tmpfs, whose pages live in memory and cannot be dropped: counted in
    /// `files` and `bytes`, but not cold.
    pub in_memory_files: u64,
    pub seconds: f64,
}

impl Evicted {
    /// A line for the report's notes.
    pub fn describe(&self, when: &str) -> String {
        format!(
            "{when}: {} files, {:.1} MiB written back and dropped from the page cache in {:.1} s{}",
            self.files,
            self.bytes as f64 / (1024.0 * 1024.0),
            self.seconds,
            if self.failed > 0 {
                format!(" ({} files skipped)", self.failed)
            } else {
                String::new()
            }
        ) + &if self.in_memory_files > 0 {
            format!(
                "; {} of them on a tmpfs, which keeps them in memory: not cold",
                self.in_memory_files
            )
        } else {
            String::new()
        }
    }
}

/// Walks `dirs` recursively and evicts every regular file (symbolic links are not
/// followed). Blocking: call it from `spawn_blocking`.
pub fn evict_dirs(dirs: &[PathBuf]) -> Evicted {
    let started = Instant::now();
    let mut out = Evicted::default();
    for dir in dirs {
        walk(dir, &mut out);
    }
    out.seconds = started.elapsed().as_secs_f64();
    out
}

/// [`evict_dirs`] on the blocking pool.
pub async fn evict_dirs_async(dirs: Vec<PathBuf>) -> anyhow::Result<Evicted> {
    Ok(tokio::task::spawn_blocking(move || evict_dirs(&dirs)).await?)
}

fn walk(dir: &Path, out: &mut Evicted) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        out.failed += 1;
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, out),
            Ok(t) if t.is_file() => match evict_file(&path) {
                Ok((bytes, in_memory)) => {
                    out.files += 1;
                    out.bytes += bytes;
                    out.in_memory_files += u64::from(in_memory);
                }
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "not evicted");
                    out.failed += 1;
                }
            },
            _ => {}
        }
    }
}

/// Writes back and drops one file's cached pages; returns its size and whether it is on
/// a tmpfs (where that changes nothing).
fn evict_file(path: &Path) -> std::io::Result<(u64, bool)> {
    let file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    // fdatasync: dirty pages cannot be dropped, so they are written first.
    file.sync_data()?;
    drop_cached(&file)?;
    Ok((size, on_tmpfs(&file)))
}

#[cfg(target_os = "linux")]
fn on_tmpfs(file: &std::fs::File) -> bool {
    const TMPFS_MAGIC: rustix::fs::FsWord = 0x0102_1994;
    rustix::fs::fstatfs(file).is_ok_and(|stat| stat.f_type == TMPFS_MAGIC)
}

#[cfg(not(target_os = "linux"))]
fn on_tmpfs(_file: &std::fs::File) -> bool {
    false
}

#[cfg(target_os = "linux")]
fn drop_cached(file: &std::fs::File) -> std::io::Result<()> {
    Ok(rustix::fs::fadvise(
        file,
        0,
        None,
        rustix::fs::Advice::DontNeed,
    )?)
}

#[cfg(not(target_os = "linux"))]
fn drop_cached(_file: &std::fs::File) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "dropping cached pages needs Linux",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_files_in_nested_directories() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("top"), vec![1u8; 1000]).unwrap();
        std::fs::write(dir.path().join("a/b/deep"), vec![2u8; 24]).unwrap();
        let out = evict_dirs(&[dir.path().to_path_buf()]);
        assert_eq!(out.files, 2, "{out:?}");
        assert_eq!(out.bytes, 1024);
        assert_eq!(out.failed, 0);
    }

    #[test]
    fn a_missing_directory_is_counted_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let out = evict_dirs(&[dir.path().join("absent")]);
        assert_eq!((out.files, out.failed), (0, 1));
    }
}
