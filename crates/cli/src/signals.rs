//! SIGTERM and SIGINT: `serve` shuts down cleanly on the first one, and a client
//! command (`consume`) checks a [`StopFlag`] the first one raises between records.
//! Handlers are installed before they are needed, so a signal that arrives early is
//! handled rather than killing the process.

/// SIGTERM and SIGINT (Ctrl-C) both start a clean shutdown.
pub(crate) struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    pub(crate) async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

impl Signals {
    /// A flag raised by the first signal, for loops that check it between records.
    pub(crate) fn stop_flag(self) -> StopFlag {
        let flag = StopFlag::default();
        let raise = flag.clone();
        tokio::spawn(async move {
            self.wait().await;
            raise
                .raised
                .store(true, std::sync::atomic::Ordering::Release);
            raise.notify.notify_waiters();
        });
        flag
    }
}

#[derive(Clone, Default)]
pub(crate) struct StopFlag {
    raised: std::sync::Arc<std::sync::atomic::AtomicBool>,
    notify: std::sync::Arc<tokio::sync::Notify>,
}

impl StopFlag {
    pub(crate) fn raised(&self) -> bool {
        self.raised.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves once the flag is raised.
    pub(crate) async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.raised() {
                return;
            }
            notified.await;
        }
    }
}
