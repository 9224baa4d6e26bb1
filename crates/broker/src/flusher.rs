//! Group commit shared by every partition of the broker (`sync_scope = broker` or
//! `syncfs`), behind the contract of `crate::durability`.
//!
//! With `sync_scope = partition` (the default) each partition runs its own flusher
//! (`durability::OwnFlusher`). With a broker scope, an append marks its partition dirty
//! here instead. One task runs rounds: it takes the queue of dirty partitions, takes
//! each one's [`headway_log::SyncSet`] under that partition's mutex, and on one blocking
//! thread syncs them one after another (`broker`) or calls `syncfs(2)` once on the data
//! directory's filesystem (`syncfs`). Then it publishes every partition's new high
//! watermark. Appends that arrive during a round mark their partition again and share
//! the next round.
//!
//! Failures keep the per-partition rule: a failed fdatasync poisons that partition
//! (no retry) and the round goes on with the others. A failed `syncfs` cannot be
//! attributed to one file, so it poisons every partition of the round.
//!
//! `docs/sync.md` compares the scopes with measurements.

use crate::durability::{SyncMeters, SyncTarget};
use crate::SyncScope;
use headway_base::Offset;
use headway_log::SyncSet;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

enum Mode {
    /// fdatasync every file of every set, one after another.
    EachFile,
    /// One syncfs on this file's filesystem (the data directory).
    Filesystem(File),
}

pub(crate) struct SharedFlusher {
    mode: Mode,
    /// Partitions written since their last round; each is queued at most once (the
    /// partition keeps a flag, cleared when its set is taken).
    queue: Mutex<Vec<Arc<dyn SyncTarget>>>,
    /// The broker's sync counters and histograms.
    meters: SyncMeters,
    /// Wakes the round task; `Notify` keeps one permit, so no wake-up is lost.
    wake: Notify,
    stopped: AtomicBool,
    /// Topics whose syncs fail, to test failure handling without a failing disk.
    #[cfg(test)]
    fail_topics: Mutex<Vec<String>>,
}

/// One partition's share of a round: what to sync and up to which offset.
type Work = (Arc<dyn SyncTarget>, SyncSet);

/// One partition's result of a round: the offset its set covered and whether it is
/// durable.
type Outcome = (Arc<dyn SyncTarget>, Offset, Result<(), String>);

impl SharedFlusher {
    /// The flusher for `scope` (`Broker` or `Syncfs`); `data_dir` names the filesystem
    /// that `syncfs` flushes. Blocking (opens the directory).
    pub(crate) fn new(
        scope: SyncScope,
        data_dir: &Path,
        meters: SyncMeters,
    ) -> std::io::Result<Arc<SharedFlusher>> {
        let mode = match scope {
            SyncScope::Syncfs => Mode::Filesystem(File::open(data_dir)?),
            SyncScope::Broker | SyncScope::Partition => Mode::EachFile,
        };
        Ok(Arc::new(SharedFlusher {
            mode,
            queue: Mutex::new(Vec::new()),
            meters,
            wake: Notify::new(),
            stopped: AtomicBool::new(false),
            #[cfg(test)]
            fail_topics: Mutex::new(Vec::new()),
        }))
    }

    /// Starts the round task. Needs a tokio runtime.
    pub(crate) fn start(self: &Arc<Self>) {
        let me = Arc::clone(self);
        crate::panics::spawn_restarting(crate::panics::Component::Flusher, "flusher", move || {
            Arc::clone(&me).run()
        });
    }

    /// Ends the round task after the round in progress, if any.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Queues a partition with unsynced appends for the next round.
    pub(crate) fn enqueue(&self, partition: Arc<dyn SyncTarget>) {
        self.queue
            .lock()
            .expect("flusher queue lock")
            .push(partition);
        self.wake.notify_one();
    }

    async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            let queued = std::mem::take(&mut *self.queue.lock().expect("flusher queue lock"));
            let work: Vec<Work> = queued
                .into_iter()
                .filter_map(|p| Some((Arc::clone(&p), p.take_sync_set().into_set()?)))
                .collect();
            if work.is_empty() {
                continue;
            }
            let partitions: Vec<Arc<dyn SyncTarget>> =
                work.iter().map(|(p, _)| Arc::clone(p)).collect();
            let me = Arc::clone(&self);
            match tokio::task::spawn_blocking(move || me.sync_round(work)).await {
                Ok(outcomes) => {
                    for (partition, synced, outcome) in outcomes {
                        match outcome {
                            Ok(()) => partition.publish(synced),
                            Err(e) => partition.fail(&e),
                        }
                    }
                }
                Err(e) => {
                    // The round's thread panicked: what it synced is unknown.
                    crate::panics::count_joined(crate::panics::Component::Flusher, &e);
                    for partition in partitions {
                        partition.fail(&format!("sync round failed: {e}"));
                    }
                }
            }
        }
    }

    /// Syncs every set of the round. Blocking. Returns, per partition, the offset its
    /// set covers and whether it is durable.
    fn sync_round(&self, work: Vec<Work>) -> Vec<Outcome> {
        match &self.mode {
            Mode::EachFile => {
                let syncs = work.iter().map(|(_, set)| set.file_count()).sum();
                let outcomes = work
                    .into_iter()
                    .map(|(p, set)| {
                        let outcome = self.sync_one(p.as_ref(), &set);
                        (p, set.log_end_offset, outcome)
                    })
                    .collect();
                self.meters.count_round(syncs);
                outcomes
            }
            Mode::Filesystem(dir) => {
                let outcome = self.syncfs(dir, &work).map_err(|e| format!("syncfs: {e}"));
                self.meters.count_round(1);
                work.into_iter()
                    .map(|(p, set)| {
                        if outcome.is_ok() {
                            set.synced_by_filesystem();
                        }
                        (p, set.log_end_offset, outcome.clone())
                    })
                    .collect()
            }
        }
    }

    fn sync_one(&self, _partition: &dyn SyncTarget, set: &SyncSet) -> Result<(), String> {
        #[cfg(test)]
        self.injected_failure(_partition)
            .map_err(|e| e.to_string())?;
        self.meters.sync(set)
    }

    fn syncfs(&self, dir: &File, _work: &[Work]) -> std::io::Result<()> {
        #[cfg(test)]
        for (p, _) in _work {
            self.injected_failure(p.as_ref())?;
        }
        rustix::fs::syncfs(dir).map_err(std::io::Error::from)
    }

    #[cfg(test)]
    fn injected_failure(&self, partition: &dyn SyncTarget) -> std::io::Result<()> {
        let fail = self.fail_topics.lock().unwrap();
        if fail.iter().any(|t| t == partition.topic()) {
            return Err(std::io::Error::other("injected fdatasync failure"));
        }
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn fail_syncs_of(&self, topic: &str) {
        self.fail_topics.lock().unwrap().push(topic.to_string());
    }
}

#[cfg(test)]
mod tests;
