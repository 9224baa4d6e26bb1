//! What every scenario is handed: the options all of them take ([`Common`]) and the
//! context opened from them ([`Ctx`]): the broker under test, the report's label, and
//! the clock the scenario's time budget counts from. A scenario owns its `Ctx` for its
//! whole run; dropping it stops a broker the bench started.

use crate::report::{command_line, utc_now, Report, REPORT_FORMAT};
use crate::target::Target;
use clap::Args;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Options every scenario takes.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Broker to run against, HOST:PORT; without it a headway broker is started for the
    /// run (this binary's `serve`, a temporary data directory) and stopped after.
    #[arg(long, short = 'b')]
    pub bootstrap: Option<String>,
    /// A few seconds in all, for CI smoke tests (the numbers mean little).
    #[arg(long)]
    pub quick: bool,
    /// Seconds the whole scenario may run [default: 120; with --quick a few].
    #[arg(long)]
    pub duration: Option<f64>,
    /// Directory for `<scenario>-<label>.json` and `.md`.
    #[arg(long, default_value = "bench/results/tmp")]
    pub out: PathBuf,
    /// The broker's name in the report [default: headway when started here, else broker].
    #[arg(long)]
    pub label: Option<String>,
    /// Parent directory of a started broker's data [default: the system's temp dir].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Process id of a broker given with --bootstrap, to report its resident memory.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// A line for the report's notes (repeatable), e.g. how the broker syncs.
    #[arg(long)]
    pub note: Vec<String>,
}

/// What a scenario is handed: its options, the broker, and the clock.
pub struct Ctx {
    pub common: Common,
    pub target: Target,
    pub label: String,
    pub started_at: String,
    pub started: Instant,
}

impl Ctx {
    pub(crate) fn open(common: Common) -> anyhow::Result<Ctx> {
        let bin = std::env::current_exe()?;
        let target = Target::open(
            common.bootstrap.as_deref(),
            &bin,
            common.data_dir.as_deref(),
        )?;
        let label = common.label.clone().unwrap_or_else(|| {
            if target.is_spawned() {
                "headway".into()
            } else {
                "broker".into()
            }
        });
        Ok(Ctx {
            common,
            target,
            label,
            started_at: utc_now(),
            started: Instant::now(),
        })
    }

    pub fn bootstrap(&self) -> &str {
        &self.target.bootstrap
    }

    /// The scenario's time budget: `--duration`, or its default for full or quick runs.
    pub fn duration(&self, full_s: f64, quick_s: f64) -> Duration {
        let s = self
            .common
            .duration
            .unwrap_or(if self.common.quick { quick_s } else { full_s });
        Duration::from_secs_f64(s.max(0.1))
    }

    /// Seconds the scenario may still run: `--duration` (or the default for full or
    /// quick runs) minus what has passed since it started.
    pub fn remaining(&self, full_s: f64, quick_s: f64) -> Duration {
        self.duration(full_s, quick_s)
            .saturating_sub(self.started.elapsed())
    }

    pub fn broker_pid(&self) -> Option<u32> {
        self.target.pid().or(self.common.broker_pid)
    }

    /// The report with everything but the runs and summary filled in.
    pub fn report(&self, scenario: &str, mut notes: Vec<String>) -> Report {
        if self.target.is_spawned() {
            notes.insert(
                0,
                "headway started by the bench with its defaults: flush=sync, so acks=1/all \
                 are answered after fdatasync (group commit)"
                    .into(),
            );
        }
        notes.extend(self.common.note.iter().cloned());
        Report {
            format: REPORT_FORMAT,
            scenario: scenario.into(),
            label: self.label.clone(),
            bootstrap: self.bootstrap().into(),
            command: command_line(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            started_at: self.started_at.clone(),
            duration_s: 0.0,
            quick: self.common.quick,
            notes,
            runs: Vec::new(),
            summary: serde_json::Value::Null,
        }
    }

    /// Stamps the duration, writes the files and prints where they are.
    pub fn finish(&self, mut report: Report) -> anyhow::Result<Report> {
        report.duration_s = self.started.elapsed().as_secs_f64();
        let (json, md) = report.write(&self.common.out)?;
        eprintln!(
            "[{}] {} done in {:.1} s: {} and {}",
            report.scenario,
            report.label,
            report.duration_s,
            json.display(),
            md.display()
        );
        Ok(report)
    }
}
