//! Reads that may wait for the disk run here: a fixed set of threads of their own, apart
//! from the runtime's blocking pool where the flushers' syncs run, so a burst of cold
//! reads can neither hold back acknowledgements nor grow the thread count.
//!
//! Fair share: a fetch takes one of its connection's share permits before it queues a
//! read and keeps it until the read is done (the server's `Connection::read_turn`). With one permit per connection
//! (the default), a connection has at most one read queued or running, so the queue,
//! which is first in first out, serves waiting connections in turn: a catch-up reader
//! that wants the disk for minutes gets one read at a time, like everybody else. The
//! same permit bounds the queue: it never holds more reads than there are connections
//! (`connections_max`); its depth is the `headway_read_queue` metric.
//!
//! Reads of the tail (a consumer less than `read_tail_bytes` behind the log's end) do
//! not come here when their data is in the page cache, which it nearly always is:
//! `crate::io::read_route` first tries a read that only succeeds from the cache
//! (`RWF_NOWAIT`) on the caller's thread. Reads further behind always come here, cached
//! or not.
//!
//! Background priority: the pool's threads run at a lower CPU priority
//! (`read_threads_nice`, 10 by default). A consumer catching up has one fetch in flight
//! at a time, so when the CPU is busy its reads, and with them its whole fetch loop,
//! slow down, and the tail readers and producers keep the CPU; when the CPU is idle,
//! catching up runs at full speed.
//!
//! Bulk work: catch-up reads pass the broker's bulk budget first ([`ReadPool::run_bulk`],
//! `crate::io::bulk_budget`). The server also runs produce requests larger than 64 KiB here
//! (decoding, CRC checks, the append), so that heavy writers take the CPU light
//! connections leave, like catching up does. A connection's reader waits for its large
//! produce as its writer waits for its fetch's read, so the queue holds at most two jobs
//! per connection.

use crate::io::bulk_budget::{BulkBudget, BulkWork};
use crate::io::priority::BulkPriority;
use crate::io::timings::Histogram;
use crate::panics::{self, Component, Panicked, ThreadsAlive};
use prometheus_client::metrics::histogram::exponential_buckets;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The cold-read threads and their counters.
pub struct ReadPool {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    threads: usize,
    /// The threads still running: all of them while the pool is open (a job's panic is
    /// caught and its thread goes on), for `/readyz`.
    alive: Arc<ThreadsAlive>,
    stats: Arc<ReadStats>,
    /// The rate bulk work may take ([`crate::io::bulk_budget`]), shared with large produces.
    budget: Arc<BulkBudget>,
}

/// What the read path did, for metrics and tests.
pub struct ReadStats {
    /// Reads waiting for a pool thread.
    pub queued: AtomicUsize,
    /// Reads running on a pool thread.
    pub running: AtomicUsize,
    /// Reads served from the page cache on the caller's thread.
    pub cached: AtomicU64,
    /// Fetch reads that went to the pool.
    pub pooled: AtomicU64,
    /// Of those, reads catching up that the page cache held whole: read on a pool
    /// thread without passing the bulk budget.
    pub pooled_cached: AtomicU64,
    /// How long each job waited in the queue for a thread: 10 µs to about 5 s,
    /// doubling (`headway_read_queue_wait_seconds`).
    pub queue_wait: Histogram,
}

impl Default for ReadStats {
    fn default() -> ReadStats {
        ReadStats {
            queued: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            cached: AtomicU64::new(0),
            pooled: AtomicU64::new(0),
            pooled_cached: AtomicU64::new(0),
            queue_wait: Histogram::new(exponential_buckets(1e-5, 2.0, 20)),
        }
    }
}

/// A snapshot of [`ReadStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadStatsSnapshot {
    pub threads: usize,
    pub queued: usize,
    pub running: usize,
    pub cached: u64,
    pub pooled: u64,
    pub pooled_cached: u64,
}

/// How a read reaches the disk: the pool, and whether to try the page cache first.
/// The connection's share of the pool is taken around the read by its caller.
#[derive(Clone)]
pub struct ReadVia {
    pub pool: Arc<ReadPool>,
    /// Serve tail reads from the page cache on the caller's thread when possible.
    pub cache_first: bool,
    /// A read starting at most this many bytes before the log's end is a tail read.
    pub tail_bytes: u64,
}

/// Why a pool job has no result.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("the read pool is shut down")]
    Closed,
    /// The job panicked; its thread went on to the next job (`crate::panics`).
    #[error("the read pool's job {0}")]
    Panicked(Panicked),
}

impl ReadPool {
    /// Starts `threads` threads (at least one), each lowered to `priority` (raising a
    /// nice value or taking the idle I/O class never needs privileges); their catch-up
    /// reads pass `budget`.
    pub fn new(threads: usize, priority: BulkPriority, budget: Arc<BulkBudget>) -> Arc<ReadPool> {
        let threads = threads.max(1);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let stats = Arc::new(ReadStats::default());
        let alive = Arc::new(ThreadsAlive::default());
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let stats = Arc::clone(&stats);
            let alive = Arc::clone(&alive);
            std::thread::Builder::new()
                .name(format!("headway-read-{i}"))
                .spawn(move || {
                    let _alive = alive.enter();
                    priority.lower_this_thread();
                    serve_reads(&rx, &stats);
                })
                .expect("spawning a read thread");
        }
        Arc::new(ReadPool {
            jobs: Mutex::new(Some(tx)),
            threads,
            alive,
            stats,
            budget,
        })
    }

    /// Runs a fetch's read on a pool thread once the bulk budget admits it, charges the
    /// budget with what it read, and returns it. Counted in `pooled`.
    /// `read` is given the hook to call before each disk read
    /// ([`BulkBudget::yield_to_small_syncs`]).
    pub async fn run_bulk<E: Send + 'static>(
        &self,
        read: impl FnOnce(&dyn Fn()) -> Result<bytes::Bytes, E> + Send + 'static,
    ) -> Result<Result<bytes::Bytes, E>, PoolError> {
        self.budget.admit(BulkWork::Read).await;
        self.stats.pooled.fetch_add(1, Ordering::Relaxed);
        let budget = Arc::clone(&self.budget);
        let result = self
            .run(move || read(&|| budget.yield_to_small_syncs()))
            .await?;
        if let Ok(records) = &result {
            self.budget.charge(BulkWork::Read, records.len());
        }
        Ok(result)
    }

    /// Runs `read` (any bulk job: a read, a large produce's append) on a pool thread and
    /// waits for its result. A job that panics fails alone ([`PoolError::Panicked`]);
    /// its thread takes the next job.
    pub async fn run<T: Send + 'static>(
        &self,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, PoolError> {
        let (tx, rx) = oneshot::channel();
        let stats = Arc::clone(&self.stats);
        let queued_at = Instant::now();
        let job: Job = Box::new(move || {
            stats.queue_wait.observe(queued_at.elapsed().as_secs_f64());
            let result = panics::catch(Component::ReadPool, read);
            // Counted as done before the caller can see the result.
            stats.running.fetch_sub(1, Ordering::Relaxed);
            let _ = tx.send(result);
        });
        {
            let jobs = self.jobs.lock().expect("read queue lock");
            let sender = jobs.as_ref().ok_or(PoolError::Closed)?;
            self.stats.queued.fetch_add(1, Ordering::Relaxed);
            if sender.send(job).is_err() {
                self.stats.queued.fetch_sub(1, Ordering::Relaxed);
                return Err(PoolError::Closed);
            }
        }
        rx.await
            .map_err(|_| PoolError::Closed)?
            .map_err(PoolError::Panicked)
    }

    /// Threads started and threads still running: below strength when they differ.
    pub fn strength(&self) -> (usize, usize) {
        (self.threads, self.alive.alive())
    }

    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    pub fn snapshot(&self) -> ReadStatsSnapshot {
        ReadStatsSnapshot {
            threads: self.threads,
            queued: self.stats.queued.load(Ordering::Relaxed),
            running: self.stats.running.load(Ordering::Relaxed),
            cached: self.stats.cached.load(Ordering::Relaxed),
            pooled: self.stats.pooled.load(Ordering::Relaxed),
            pooled_cached: self.stats.pooled_cached.load(Ordering::Relaxed),
        }
    }

    /// Stops taking reads; the threads end once the queued ones are done.
    pub fn close(&self) {
        self.jobs.lock().expect("read queue lock").take();
    }
}

fn serve_reads(jobs: &Mutex<mpsc::Receiver<Job>>, stats: &ReadStats) {
    loop {
        let job = match jobs.lock().expect("read queue lock").recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        stats.queued.fetch_sub(1, Ordering::Relaxed);
        stats.running.fetch_add(1, Ordering::Relaxed);
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn test_budget() -> Arc<BulkBudget> {
        let config = crate::BrokerConfig::default().bulk_budget();
        Arc::new(BulkBudget::new(config, Arc::default()))
    }

    #[tokio::test]
    async fn reads_run_on_the_pool_threads_and_return_their_results() {
        let pool = ReadPool::new(2, BulkPriority::UNCHANGED, test_budget());
        let name = pool
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("headway-read-"));
        assert_eq!(pool.snapshot().pooled, 0, "a plain job is not a fetch read");
        let read = pool
            .run_bulk(|_| Ok::<_, ()>(bytes::Bytes::from_static(b"records")))
            .await
            .unwrap();
        assert_eq!(read.unwrap(), "records");
        assert_eq!(pool.snapshot().pooled, 1);
        pool.close();
        assert!(pool.run(|| ()).await.is_err());
    }

    #[tokio::test]
    async fn a_job_that_panics_fails_alone_and_its_thread_takes_the_next_job() {
        let pool = ReadPool::new(1, BulkPriority::UNCHANGED, test_budget());
        let before = panics::caught(Component::ReadPool);
        let failed = pool.run(|| -> u32 { panic!("a job's bug") }).await;
        assert!(
            matches!(&failed, Err(PoolError::Panicked(p)) if p.message == "a job's bug"),
            "{failed:?}"
        );
        assert_eq!(panics::caught(Component::ReadPool), before + 1);
        // The only thread survived it: the next job runs, and the pool is at strength.
        assert_eq!(pool.run(|| 42).await.unwrap(), 42);
        assert_eq!(pool.strength(), (1, 1));
        let snapshot = pool.snapshot();
        assert_eq!((snapshot.queued, snapshot.running), (0, 0));
    }

    #[tokio::test]
    async fn a_full_pool_queues_in_arrival_order() {
        let pool = ReadPool::new(1, BulkPriority::UNCHANGED, test_budget());
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let order = Arc::new(Mutex::new(Vec::new()));
        let blocker = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                pool.run(move || {
                    let _ = gate.recv_timeout(Duration::from_secs(30));
                })
                .await
            })
        };
        // Wait until the only thread is busy, then queue three reads.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while pool.snapshot().running == 0 {
            assert!(std::time::Instant::now() < deadline);
            tokio::task::yield_now().await;
        }
        let mut waiting = Vec::new();
        for i in 0..3 {
            let (p, o) = (Arc::clone(&pool), Arc::clone(&order));
            waiting.push(tokio::spawn(async move {
                p.run(move || o.lock().unwrap().push(i)).await
            }));
            while pool.snapshot().queued < i + 1 {
                assert!(std::time::Instant::now() < deadline);
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(pool.snapshot().queued, 3);
        release.send(()).unwrap();
        blocker.await.unwrap().unwrap();
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        // Every job's wait in the queue was measured: the blocker and the three.
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("wait", "", pool.stats().queue_wait.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("wait_count 4"), "{text}");
    }
}
