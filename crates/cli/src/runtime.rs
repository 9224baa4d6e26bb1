//! The tokio runtime client commands (`produce`, `consume`, `topic`, `group`,
//! `cluster`, `acl`, a remote `user`) run on: multi-threaded, with I/O and timers.
//! `serve` builds its own, with the broker's bound on blocking threads.

pub(crate) fn client_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}
