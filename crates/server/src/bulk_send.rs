//! Large answers are written to their sockets by threads of the lowest CPU priority.
//!
//! A catch-up consumer's fetch answers are a megabyte each, and writing one to a
//! socket is most of what serving it costs the CPU: the copy into the socket and, on
//! loopback and other fast links, much of the receiving side's TCP work, which runs in
//! the writer's system call. Done on a runtime worker thread, that work competes for
//! the CPU with the light clients' producers and tail consumers on equal terms, and
//! every wake-up of a light task that finds both cores busy waits for the scheduler's
//! next turn. Their end-to-end tail grows with it, even though no stage of the broker
//! takes longer.
//!
//! With `bulk_send_threads` set (it is 0 by default: measured without a gain,
//! `docs/sync.md`), plain TCP connections hand every answer of at least
//! [`headway_base::limits::BULK_SEND_BYTES_MIN`] to this pool, whose threads run in the `SCHED_IDLE` class: the kernel runs them only
//! when no normal thread wants the CPU, and a normal thread that wakes takes the CPU
//! from them at once. Catching up then uses the CPU light work leaves, as its reads
//! already use the disk time it leaves ([`headway_broker::io::bulk_budget`]).
//!
//! A thread writes with non-blocking `send` until the answer is out or the socket is
//! full; it never waits for a socket. A full socket (a slow or stuck reader) goes back
//! to the connection's writer task, which waits for room on the runtime, writes a few
//! bytes there, and hands the rest back. A connection has at most one answer here at a
//! time, since its writer waits for it, so the pool's queue never holds more jobs than
//! there are connections (`connections_max`).
//!
//! TLS connections keep writing on the runtime: their bytes are encrypted by the
//! session the writer task owns.

use bytes::Bytes;
use headway_broker::panics::{self, Component};
use headway_broker::probe::counter;
use prometheus_client::registry::Registry;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// Bytes the writer task writes itself when the socket was full, once it has room:
/// enough to learn that there is room, small enough to cost the worker little.
const ROOM_PROBE_BYTES: usize = 4 * 1024;

/// One answer's write: `frame` from `at`, to the socket `fd`.
struct Job {
    fd: Arc<OwnedFd>,
    frame: Bytes,
    at: usize,
    /// Where the write got to (the whole frame, or as far as the socket took), or the
    /// socket's error.
    done: oneshot::Sender<io::Result<usize>>,
}

/// The pool of lowest-priority writing threads.
pub struct BulkSender {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    stats: Arc<BulkSendStats>,
}

/// What the pool did, for `/metrics`.
#[derive(Default)]
pub struct BulkSendStats {
    /// Answers written (wholly or in part) by the pool.
    pub answers: AtomicU64,
    /// Bytes the pool's threads wrote to sockets.
    pub bytes: AtomicU64,
    /// Times a socket was full and its writer waited for room on the runtime.
    pub socket_full: AtomicU64,
}

impl BulkSendStats {
    /// Registers `headway_bulk_send_*`: the pool's probe.
    pub fn register(&self, r: &mut Registry) {
        counter(
            r,
            "bulk_send_answers",
            "Answers of 256 KiB and more written by the SCHED_IDLE bulk send threads (bulk_send_threads)",
            self.answers.load(Ordering::Relaxed),
        );
        counter(
            r,
            "bulk_send_bytes",
            "Bytes the bulk send threads wrote to sockets",
            self.bytes.load(Ordering::Relaxed),
        );
        counter(
            r,
            "bulk_send_socket_full",
            "Times a socket was full under a bulk send and its writer waited for room on the runtime",
            self.socket_full.load(Ordering::Relaxed),
        );
    }
}

impl BulkSender {
    /// A pool of `threads` threads; `None` for 0 (every answer is written on the
    /// runtime).
    pub fn start(threads: usize) -> Option<Arc<BulkSender>> {
        if threads == 0 {
            return None;
        }
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let stats = Arc::new(BulkSendStats::default());
        for i in 0..threads {
            let queue = Arc::clone(&queue);
            let stats = Arc::clone(&stats);
            let spawned = std::thread::Builder::new()
                .name(format!("headway-send-{i}"))
                .spawn(move || {
                    headway_broker::io::priority::idle_cpu_this_thread();
                    loop {
                        let job = queue.lock().expect("bulk send queue").recv();
                        let Ok(job) = job else { return };
                        // A panic fails this write alone (its connection closes, see
                        // `send`); the thread goes on.
                        let _ = panics::catch(Component::BulkSend, || run(job, &stats));
                    }
                });
            if let Err(error) = spawned {
                tracing::warn!(%error, "could not start a bulk send thread");
                if i == 0 {
                    return None;
                }
            }
        }
        Some(Arc::new(BulkSender {
            jobs: Mutex::new(Some(jobs)),
            stats,
        }))
    }

    pub fn stats(&self) -> &BulkSendStats {
        &self.stats
    }

    /// Stops the threads once the jobs queued are done; later answers are written on
    /// the runtime, as they are when the threads have died.
    #[cfg(test)]
    fn close(&self) {
        self.jobs.lock().expect("bulk send jobs").take();
    }

    /// Writes `frame` from `at` on a pool thread: where it got to (an error when the
    /// job panicked), or `None` when the pool is closed.
    async fn send(&self, fd: &Arc<OwnedFd>, frame: &Bytes, at: usize) -> Option<io::Result<usize>> {
        let (done, result) = oneshot::channel();
        let job = Job {
            fd: Arc::clone(fd),
            frame: frame.clone(),
            at,
            done,
        };
        self.jobs
            .lock()
            .expect("bulk send jobs")
            .as_ref()?
            .send(job)
            .ok()?;
        // A job that ends without a result panicked somewhere in its write: how much of
        // the frame reached the socket is unknown, so the connection must end.
        Some(result.await.unwrap_or_else(|_| {
            Err(io::Error::other(
                "the bulk send job failed; the answer's bytes on the socket are unknown",
            ))
        }))
    }
}

/// One job on a pool thread: `send` until the frame is out, the socket is full, or it
/// fails.
fn run(job: Job, stats: &BulkSendStats) {
    let Job {
        fd,
        frame,
        mut at,
        done,
    } = job;
    let start = at;
    let result = loop {
        if at == frame.len() {
            break Ok(at);
        }
        let rest = &frame[at..];
        // SAFETY: `fd` is an open socket owned by the job for the call; the pointer and
        // length describe `rest`, which outlives the call.
        let sent = unsafe {
            libc::send(
                fd.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent >= 0 {
            at += sent as usize;
            continue;
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => break Ok(at),
            _ => break Err(error),
        }
    };
    stats.answers.fetch_add(1, Ordering::Relaxed);
    stats
        .bytes
        .fetch_add((at - start) as u64, Ordering::Relaxed);
    let _ = done.send(result);
}

/// A plain TCP connection's way to the pool: its socket, duplicated on first use so
/// that a write in progress on a pool thread never outlives the descriptor it uses.
pub struct BulkLane {
    sender: Arc<BulkSender>,
    /// The socket as the connection's writer holds it.
    raw: RawFd,
    fd: Option<Arc<OwnedFd>>,
}

impl BulkLane {
    /// A lane for the socket `raw`, which must stay open as long as the lane is used
    /// (the connection's writer holds both).
    pub fn new(sender: Arc<BulkSender>, raw: RawFd) -> BulkLane {
        BulkLane {
            sender,
            raw,
            fd: None,
        }
    }

    /// Writes all of `frame` to the socket that `writer` writes (nothing of it may be
    /// buffered there): on the pool while the socket takes it, waiting for room on
    /// the runtime when it is full.
    pub async fn write_all<W: AsyncWrite + Unpin>(
        &mut self,
        writer: &mut W,
        frame: &Bytes,
    ) -> io::Result<()> {
        let fd = match &self.fd {
            Some(fd) => Arc::clone(fd),
            None => {
                // SAFETY: the connection's writer holds the socket open while it uses
                // this lane (`BulkLane::new`).
                let borrowed = unsafe { BorrowedFd::borrow_raw(self.raw) };
                let fd = Arc::new(borrowed.try_clone_to_owned()?);
                self.fd = Some(Arc::clone(&fd));
                fd
            }
        };
        let mut at = 0;
        while at < frame.len() {
            match self.sender.send(&fd, frame, at).await {
                Some(result) => at = result?,
                None => {
                    // The pool is closed (the broker is stopping): finish here.
                    writer.write_all(&frame[at..]).await?;
                    return Ok(());
                }
            }
            if at == frame.len() {
                break;
            }
            // The socket is full: wait for room the runtime's way, which also keeps its
            // readiness right, then let the pool go on.
            self.sender
                .stats
                .socket_full
                .fetch_add(1, Ordering::Relaxed);
            let end = frame.len().min(at + ROOM_PROBE_BYTES);
            let n = writer.write(&frame[at..end]).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    fn frame(len: usize, seed: usize) -> Bytes {
        (0..len).map(|i| ((i + seed) % 251) as u8).collect()
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_socket_takes_arrives_whole_through_the_pool() {
        let sender = BulkSender::start(1).expect("pool");
        let (mut client, server) = pair().await;
        let mut lane = BulkLane::new(Arc::clone(&sender), server.as_raw_fd());
        let (_read, mut write) = server.into_split();
        // Far more than loopback's socket buffers hold: the write must wait for the
        // reader, which starts only once the pool found the socket full (a reader
        // started at once could keep up with the pool's lowest-priority thread).
        let big = frame(32 * 1024 * 1024, 7);
        let expected = big.clone();
        let writer = tokio::spawn(async move {
            lane.write_all(&mut write, &big).await.unwrap();
            lane.write_all(&mut write, &Bytes::from_static(b"next"))
                .await
                .unwrap();
        });
        let full = async {
            while sender.stats().socket_full.load(Ordering::Relaxed) == 0 {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(120), full)
            .await
            .expect("the socket fills up while nobody reads");
        let mut got = vec![0u8; expected.len() + 4];
        client.read_exact(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(
            got[..expected.len()] == expected[..],
            "the frame's bytes in order"
        );
        assert_eq!(&got[expected.len()..], b"next");
        let stats = sender.stats();
        assert!(
            stats.socket_full.load(Ordering::Relaxed) >= 1,
            "the socket filled up"
        );
        assert!(
            stats.bytes.load(Ordering::Relaxed) > 16 * 1024 * 1024,
            "the pool wrote most"
        );
    }

    #[tokio::test]
    async fn a_closed_pool_leaves_the_write_to_the_runtime() {
        let sender = BulkSender::start(1).expect("pool");
        sender.close();
        let (mut client, server) = pair().await;
        let mut lane = BulkLane::new(Arc::clone(&sender), server.as_raw_fd());
        let (_read, mut write) = server.into_split();
        let data = frame(300 * 1024, 3);
        let expected = data.clone();
        let writer = tokio::spawn(async move { lane.write_all(&mut write, &data).await });
        let mut got = vec![0u8; expected.len()];
        client.read_exact(&mut got).await.unwrap();
        writer.await.unwrap().unwrap();
        assert!(got[..] == expected[..]);
        assert_eq!(sender.stats().bytes.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_peer_that_went_away_is_an_error_not_a_hang() {
        let sender = BulkSender::start(1).expect("pool");
        let (client, server) = pair().await;
        let mut lane = BulkLane::new(Arc::clone(&sender), server.as_raw_fd());
        let (_read, mut write) = server.into_split();
        drop(client);
        let data = frame(8 * 1024 * 1024, 1);
        let error = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            // The first writes may land in the socket before the reset arrives.
            loop {
                if let Err(error) = lane.write_all(&mut write, &data).await {
                    break error;
                }
            }
        })
        .await
        .expect("ends");
        assert!(
            matches!(
                error.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{error}"
        );
    }
}
