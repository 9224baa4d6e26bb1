//! The broker a scenario runs against: one given with `--bootstrap`, or a headway broker
//! the scenario starts itself (the same binary, `serve` on port 0 with a temporary data
//! directory) and stops when the [`Target`] is dropped.

use anyhow::Context;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Target {
    pub bootstrap: String,
    /// Set when this process started the broker.
    broker: Option<Spawned>,
}

struct Spawned {
    child: Child,
    dir: tempfile::TempDir,
}

/// How long a started broker may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl Target {
    /// Uses `bootstrap` if given, otherwise starts `headway serve` from `bin` with its
    /// data under `data_parent` (the system's temporary directory when `None`).
    pub fn open(
        bootstrap: Option<&str>,
        bin: &Path,
        data_parent: Option<&Path>,
    ) -> anyhow::Result<Target> {
        Target::open_with(bootstrap, bin, data_parent, &[])
    }

    /// [`Target::open`], giving a started broker `serve_args` after its defaults
    /// (e.g. `--sync-scope broker`).
    pub fn open_with(
        bootstrap: Option<&str>,
        bin: &Path,
        data_parent: Option<&Path>,
        serve_args: &[String],
    ) -> anyhow::Result<Target> {
        if let Some(bootstrap) = bootstrap {
            return Ok(Target {
                bootstrap: bootstrap.to_string(),
                broker: None,
            });
        }
        let dir = match data_parent {
            Some(parent) => {
                std::fs::create_dir_all(parent)?;
                tempfile::Builder::new()
                    .prefix("headway-bench-")
                    .tempdir_in(parent)?
            }
            None => tempfile::Builder::new()
                .prefix("headway-bench-")
                .tempdir()?,
        };
        let log = std::fs::File::create(dir.path().join("broker.log"))?;
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(serve_args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {} serve", bin.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(START_TIMEOUT).unwrap_or_default();
        let mut spawned = Spawned { child, dir };
        let Some(addr) = line.trim().strip_prefix("headway listening on ") else {
            let log =
                std::fs::read_to_string(spawned.dir.path().join("broker.log")).unwrap_or_default();
            stop(&mut spawned.child);
            anyhow::bail!("the broker did not start: {:?}\n{log}", line.trim());
        };
        Ok(Target {
            bootstrap: addr.to_string(),
            broker: Some(spawned),
        })
    }

    /// True when this process started the broker (so it is headway, with its defaults).
    pub fn is_spawned(&self) -> bool {
        self.broker.is_some()
    }

    pub fn data_dir(&self) -> Option<PathBuf> {
        self.broker.as_ref().map(|b| b.dir.path().join("data"))
    }

    /// Stops a started broker cleanly and returns what it logged (stderr), which ends
    /// with its shutdown lines. `None` for a broker given with `--bootstrap`.
    pub fn stop(mut self) -> Option<String> {
        let mut broker = self.broker.take()?;
        stop(&mut broker.child);
        std::fs::read_to_string(broker.dir.path().join("broker.log")).ok()
    }

    /// The started broker's process id, for resident-memory readings.
    pub fn pid(&self) -> Option<u32> {
        self.broker.as_ref().map(|b| b.child.id())
    }
}

/// SIGTERM (a clean shutdown syncs and closes the logs), then SIGKILL after a grace period.
fn stop(child: &mut Child) {
    let pid = child.id() as i32;
    // `Child::kill` sends SIGKILL only, so SIGTERM goes through the `kill` command.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    for _ in 0..100 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(broker) = self.broker.as_mut() {
            stop(&mut broker.child);
        }
    }
}

/// Resident memory of a process in MiB, from /proc (Linux only; `None` elsewhere).
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}
