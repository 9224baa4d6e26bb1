//! A panic is a bug, never an outage: where the broker runs a job for someone (a read or
//! a large produce on a pool thread, a request on a connection, a coordinator's timer, a
//! sync), a panic fails that job only, is logged once at ERROR with its backtrace, and is
//! counted per component (`headway_panics_total{component}`).
//!
//! - [`install_hook`] replaces the process's panic hook (once): every panic, caught or
//!   not, becomes one ERROR line naming the thread, the location and the message, with the
//!   backtrace, and counts in [`total`]. The line says "panicked", as the default hook
//!   does, so test fixtures that scan a broker's output find it.
//! - [`catch`] runs a job and turns its panic into [`Panicked`], counted under the
//!   job's [`Component`]; the caller answers the job's request with an error, or closes
//!   its connection, and goes on. [`supervise`] does the same for a task's future.
//! - [`ThreadsAlive`] counts a pool's live threads, so `/readyz` can say not ready while
//!   a pool is below strength (a thread that ended although its pool is open).

pub mod probe;

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

/// Where a panic was caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Component {
    /// A job on the read pool: a catch-up read or a large produce.
    ReadPool,
    /// A write on the bulk send pool.
    BulkSend,
    /// The log cleaner.
    Cleaner,
    /// A partition's append (the partition goes offline).
    Append,
    /// A flusher's sync round or its task (the partitions go offline).
    Flusher,
    /// A request handled on its connection (the connection closes).
    Connection,
    /// A task of the group, share-group or transaction coordinator.
    Coordinator,
    /// Any other background task of the broker.
    Background,
}

impl Component {
    pub const ALL: [Component; 8] = [
        Component::ReadPool,
        Component::BulkSend,
        Component::Cleaner,
        Component::Append,
        Component::Flusher,
        Component::Connection,
        Component::Coordinator,
        Component::Background,
    ];

    /// The `component` label.
    pub fn label(self) -> &'static str {
        match self {
            Component::ReadPool => "read_pool",
            Component::BulkSend => "bulk_send",
            Component::Cleaner => "cleaner",
            Component::Append => "append",
            Component::Flusher => "flusher",
            Component::Connection => "connection",
            Component::Coordinator => "coordinator",
            Component::Background => "background",
        }
    }

    fn index(self) -> usize {
        Component::ALL
            .iter()
            .position(|c| *c == self)
            .unwrap_or_default()
    }
}

static CAUGHT: [AtomicU64; Component::ALL.len()] = [const { AtomicU64::new(0) }; 8];
static TOTAL: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

/// A job that panicked; its message, for the error answer or the log.
#[derive(Debug, Clone, thiserror::Error)]
#[error("panicked: {message}")]
pub struct Panicked {
    pub message: String,
}

/// Installs the logging, counting panic hook (idempotent). Tests that start a broker
/// in their own process call it too, so that [`total`] counts their panics.
pub fn install_hook() {
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            TOTAL.fetch_add(1, Ordering::Relaxed);
            let thread = std::thread::current();
            let thread = thread.name().unwrap_or("unnamed");
            let location = info
                .location()
                .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
                .unwrap_or_default();
            let message = payload_message(info.payload());
            let backtrace = std::backtrace::Backtrace::force_capture();
            tracing::error!(
                "thread '{thread}' panicked at {location}: {message}\nbacktrace:\n{backtrace}"
            );
            // The line also reaches stderr when no subscriber is set (a test process).
            if !tracing::dispatcher::has_been_set() {
                eprintln!("thread '{thread}' panicked at {location}: {message}\n{backtrace}");
            }
        }));
    });
}

/// Panics seen by the hook since the process started (0 without [`install_hook`]).
pub fn total() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}

/// Panics caught in `component`'s jobs since the process started.
pub fn caught(component: Component) -> u64 {
    CAUGHT[component.index()].load(Ordering::Relaxed)
}

/// Panics caught by the broker's catch sites since the process started, all components.
pub fn caught_total() -> u64 {
    Component::ALL.iter().map(|c| caught(*c)).sum()
}

/// Runs `job`; its panic is counted under `component` and returned as [`Panicked`].
/// The caller decides what becomes of the state the job touched (a partition goes
/// offline, a pool thread takes its next job).
pub fn catch<T>(component: Component, job: impl FnOnce() -> T) -> Result<T, Panicked> {
    std::panic::catch_unwind(AssertUnwindSafe(job))
        .map_err(|payload| caught_panic(component, payload.as_ref()))
}

/// Runs `task` to its end; a panic in it is counted under `component` and returned as
/// [`Panicked`] (the task ends; what it held is dropped).
pub async fn supervise<T>(
    component: Component,
    task: impl Future<Output = T>,
) -> Result<T, Panicked> {
    use futures::FutureExt;
    AssertUnwindSafe(task)
        .catch_unwind()
        .await
        .map_err(|payload| caught_panic(component, payload.as_ref()))
}

/// How long a restarted task waits after its panic, so a bug that panics at once does
/// not spin.
const RESTART_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Spawns the long-running task `make()` makes (a timer loop), and makes and runs it
/// again after a panic: the task's work goes on, each panic counted under
/// `component`. Needs a tokio runtime.
pub fn spawn_restarting<F, Fut>(
    component: Component,
    name: &'static str,
    make: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while supervise(component, make()).await.is_err() {
            tracing::error!(task = name, "restarting a task after its panic");
            tokio::time::sleep(RESTART_PAUSE).await;
        }
    })
}

/// Spawns `task` once; its panic is counted under `component` and logged.
pub fn spawn_supervised(
    component: Component,
    task: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let _ = supervise(component, task).await;
    })
}

/// Counts a panic caught under `component` that was seen as a `tokio` join error.
pub fn count_joined(component: Component, error: &tokio::task::JoinError) {
    if error.is_panic() {
        CAUGHT[component.index()].fetch_add(1, Ordering::Relaxed);
    }
}

fn caught_panic(component: Component, payload: &(dyn Any + Send)) -> Panicked {
    CAUGHT[component.index()].fetch_add(1, Ordering::Relaxed);
    let message = payload_message(payload);
    tracing::error!(component = component.label(), %message,
        "a job panicked; it failed alone and its thread goes on");
    Panicked { message }
}

fn payload_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_string()
    }
}

/// The live threads of a pool, against the number it started with.
#[derive(Debug, Default)]
pub struct ThreadsAlive {
    started: AtomicUsize,
    alive: AtomicUsize,
}

impl ThreadsAlive {
    /// A guard for one thread: counted alive until it is dropped (the thread ends,
    /// normally or by unwinding).
    pub fn enter(self: &Arc<Self>) -> ThreadGuard {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.alive.fetch_add(1, Ordering::Relaxed);
        ThreadGuard(Arc::clone(self))
    }

    /// Threads alive now.
    pub fn alive(&self) -> usize {
        self.alive.load(Ordering::Relaxed)
    }

    /// Threads started.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }
}

/// See [`ThreadsAlive::enter`].
pub struct ThreadGuard(Arc<ThreadsAlive>);

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_panic_is_counted_under_its_component_and_returns_its_message() {
        install_hook();
        let (before, total_before) = (caught(Component::Background), total());
        let outcome = catch(Component::Background, || -> u32 { panic!("on purpose") });
        assert_eq!(outcome.unwrap_err().message, "on purpose");
        assert_eq!(caught(Component::Background), before + 1);
        assert!(total() > total_before, "the hook saw it");
        assert_eq!(catch(Component::Background, || 7).unwrap(), 7);
        assert_eq!(caught(Component::Background), before + 1);
    }

    #[tokio::test]
    async fn a_supervised_task_that_panics_ends_with_panicked() {
        let before = caught(Component::Coordinator);
        let outcome = supervise(Component::Coordinator, async {
            tokio::task::yield_now().await;
            panic!("{}", String::from("formatted"));
        })
        .await;
        let outcome: Result<(), Panicked> = outcome;
        assert_eq!(outcome.unwrap_err().message, "formatted");
        assert_eq!(caught(Component::Coordinator), before + 1);
    }

    #[test]
    fn threads_alive_follows_the_guards() {
        let alive = Arc::new(ThreadsAlive::default());
        let a = alive.enter();
        let handle = {
            let alive = Arc::clone(&alive);
            std::thread::spawn(move || {
                let _guard = alive.enter();
                panic!("the thread ends by unwinding");
            })
        };
        assert!(handle.join().is_err());
        assert_eq!((alive.started(), alive.alive()), (2, 1));
        drop(a);
        assert_eq!(alive.alive(), 0);
    }
}
