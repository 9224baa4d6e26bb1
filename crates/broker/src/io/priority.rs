//! The priority of bulk work on the CPU and the disk.
//!
//! Catching up (cold reads and large appends on the read threads), cleaning compacted
//! logs and syncing a heavy writer's large sets are bulk work: they may go slower, but
//! nothing light may wait behind them. On the CPU they run at a higher nice value; on the
//! disk their threads take the idle I/O class (`ioprio_set(2)`), so a scheduler that
//! honours classes (mq-deadline, bfq) puts a light partition's small sync ahead of the
//! reads and writes they queue. A class is a property of the thread that submits the I/O,
//! which for an fdatasync is the thread that calls it.

use std::io;

/// How bulk work's threads are lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BulkPriority {
    /// Nice value (0 leaves the process's priority).
    pub nice: i32,
    /// Submit disk I/O in the idle class.
    pub io_idle: bool,
}

impl BulkPriority {
    /// Leaves bulk threads as they are (tests).
    pub const UNCHANGED: BulkPriority = BulkPriority {
        nice: 0,
        io_idle: false,
    };

    /// Lowers the calling thread for the rest of its life. Failures are logged, never
    /// fatal: an unprivileged process may always lower itself, but a container may
    /// forbid the calls.
    pub fn lower_this_thread(self) {
        if self.nice != 0 {
            let tid = rustix::thread::gettid();
            if let Err(error) = rustix::process::setpriority_process(Some(tid), self.nice) {
                tracing::warn!(nice = self.nice, error = %io::Error::from(error),
                    "could not lower a bulk thread's CPU priority");
            }
        }
        if self.io_idle {
            if let Err(error) = set_io_class(IoClass::Idle) {
                tracing::warn!(%error, "could not put a bulk thread in the idle I/O class");
            }
        }
    }

    /// Puts the calling thread in the idle I/O class until the guard is dropped, when
    /// `io_idle` is set (for one large sync on a shared blocking thread).
    pub fn idle_io_while(self) -> Option<IdleIo> {
        if !self.io_idle {
            return None;
        }
        set_io_class(IoClass::Idle).ok().map(|()| IdleIo(()))
    }
}

/// Puts the calling thread in the `SCHED_IDLE` class for the rest of its life: it runs
/// only when no normal thread wants the CPU, and a normal thread that wakes takes the
/// CPU from it at once (`sched(7)`). For threads that hold no lock light work needs, so
/// that being starved on a busy CPU delays only their own work (the bulk send threads).
/// A failure is logged; the thread then stays at nice 19.
pub fn idle_cpu_this_thread() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        let error = io::Error::last_os_error();
        tracing::warn!(%error, "could not put a bulk thread in the SCHED_IDLE class; using nice 19");
        let tid = rustix::thread::gettid();
        let _ = rustix::process::setpriority_process(Some(tid), 19);
    }
}

/// Whether the calling thread is in the `SCHED_IDLE` class.
#[cfg(test)]
fn cpu_idle() -> bool {
    // SAFETY: pid 0 is the calling thread; the call touches no memory of ours.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
}

/// A thread's I/O scheduling class, as `ioprio_set(2)` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    /// No class of its own: derived from the CPU priority (best effort).
    Default,
    /// Served when nobody of a higher class waits (mq-deadline ages them after a while,
    /// so they always progress).
    Idle,
}

const IOPRIO_WHO_PROCESS: libc::c_int = 1;
const IOPRIO_CLASS_SHIFT: u32 = 13;
const IOPRIO_CLASS_IDLE: u32 = 3;

/// Sets the calling thread's I/O class (`who` 0 is the calling thread).
pub fn set_io_class(class: IoClass) -> io::Result<()> {
    let value = match class {
        IoClass::Default => 0,
        IoClass::Idle => IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
    };
    // SAFETY: ioprio_set takes three integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, value) };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The calling thread's I/O class.
pub fn io_class() -> io::Result<IoClass> {
    // SAFETY: ioprio_get takes two integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(match (rc as u32) >> IOPRIO_CLASS_SHIFT {
        IOPRIO_CLASS_IDLE => IoClass::Idle,
        _ => IoClass::Default,
    })
}

/// While alive, the thread that made it submits I/O in the idle class.
#[derive(Debug)]
pub struct IdleIo(());

impl Drop for IdleIo {
    fn drop(&mut self) {
        if let Err(error) = set_io_class(IoClass::Default) {
            tracing::warn!(%error, "could not restore a thread's I/O class");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_cpu_thread_is_in_sched_idle_and_others_are_not() {
        std::thread::spawn(|| {
            idle_cpu_this_thread();
            assert!(cpu_idle());
        })
        .join()
        .unwrap();
        assert!(!cpu_idle());
    }

    #[test]
    fn a_lowered_thread_is_in_the_idle_class_and_others_are_not() {
        std::thread::spawn(|| {
            BulkPriority {
                nice: 5,
                io_idle: true,
            }
            .lower_this_thread();
            assert_eq!(io_class().unwrap(), IoClass::Idle);
            let nice = rustix::process::getpriority_process(Some(rustix::thread::gettid()));
            assert_eq!(nice.unwrap(), 5);
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            BulkPriority {
                nice: 0,
                io_idle: false,
            }
            .lower_this_thread();
            assert_eq!(io_class().unwrap(), IoClass::Default);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_guard_restores_the_class_it_changed() {
        std::thread::spawn(|| {
            let on = BulkPriority {
                nice: 0,
                io_idle: true,
            };
            {
                let _idle = on.idle_io_while().expect("idle class set");
                assert_eq!(io_class().unwrap(), IoClass::Idle);
            }
            assert_eq!(io_class().unwrap(), IoClass::Default);
            assert!(BulkPriority::UNCHANGED.idle_io_while().is_none());
            assert_eq!(io_class().unwrap(), IoClass::Default);
        })
        .join()
        .unwrap();
    }
}
