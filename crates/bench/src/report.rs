//! The report of one scenario run: a JSON file (the data; `bench/plot.py` and the
//! driver read it) and a Markdown file (a table a person reads), written side by side
//! as `<out>/<scenario>-<label>.json` and `.md`.
//!
//! The shape follows the OpenMessaging Benchmark's result files: publish and consume
//! rates, publish latency (send to acknowledgement) and end-to-end latency (send to
//! receipt by a consumer) at p50/p90/p99/p99.9/max, backlog, and per-consumer figures.
//! A scenario is a list of [`RunReport`]s (one per configuration it measures) plus a
//! free-form `summary` with the figures that scenario exists to show.

use crate::latency::{LatencyPoint, LatencySummary};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Version of the JSON shape; bumped when a field changes meaning.
pub const REPORT_FORMAT: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    pub format: u32,
    pub scenario: String,
    /// Which broker: `headway`, `kafka`, `nats`, or what `--label` said.
    pub label: String,
    pub bootstrap: String,
    /// The command line that produced this report, shell-quoted.
    pub command: String,
    pub cores: usize,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started_at: String,
    pub duration_s: f64,
    pub quick: bool,
    /// Facts a reader needs to interpret the numbers (durability, what was simulated).
    pub notes: Vec<String>,
    pub runs: Vec<RunReport>,
    pub summary: serde_json::Value,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rate {
    pub messages: u64,
    pub bytes: u64,
    pub msgs_per_s: f64,
    pub mb_per_s: f64,
}

impl Rate {
    pub fn new(messages: u64, bytes: u64, seconds: f64) -> Rate {
        let seconds = seconds.max(1e-9);
        Rate {
            messages,
            bytes,
            msgs_per_s: messages as f64 / seconds,
            mb_per_s: bytes as f64 / 1e6 / seconds,
        }
    }
}

/// Messages published and not yet consumed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Backlog {
    pub end: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConsumerReport {
    pub name: String,
    /// `fast`, `slow`, `catch-up`, `worker`...
    pub role: String,
    pub consume: Rate,
    pub e2e_latency_ms: LatencySummary,
    /// Messages this consumer had not read when the run ended, if known.
    pub lag_end: Option<u64>,
}

/// How evenly the consumers were served.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Fairness {
    /// Jain's index over the consumers' message rates: 1 is perfectly even, 1/n is
    /// one consumer getting everything.
    pub rate_jain: f64,
    /// Highest consumer p99 over lowest consumer p99 (1 is even).
    pub p99_max_over_min: f64,
}

impl Fairness {
    pub fn of(consumers: &[&ConsumerReport]) -> Fairness {
        let rates: Vec<f64> = consumers.iter().map(|c| c.consume.msgs_per_s).collect();
        let sum: f64 = rates.iter().sum();
        let squares: f64 = rates.iter().map(|r| r * r).sum();
        let rate_jain = if squares > 0.0 {
            sum * sum / (rates.len() as f64 * squares)
        } else {
            0.0
        };
        let p99s: Vec<f64> = consumers
            .iter()
            .filter(|c| c.e2e_latency_ms.count > 0)
            .map(|c| c.e2e_latency_ms.p99)
            .collect();
        let max = p99s.iter().cloned().fold(f64::NAN, f64::max);
        let min = p99s.iter().cloned().fold(f64::NAN, f64::min);
        Fairness {
            rate_jain,
            p99_max_over_min: if min > 0.0 { max / min } else { 0.0 },
        }
    }
}

/// One second of a run: rates and backlog from the progress sampler, latencies from
/// the recorders.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub t: u64,
    pub publish_msgs_per_s: f64,
    pub consume_msgs_per_s: f64,
    pub backlog: u64,
    pub publish_p50_ms: f64,
    pub publish_p99_ms: f64,
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
    pub e2e_max_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunReport {
    pub name: String,
    pub params: serde_json::Value,
    /// Seconds the load ran (the drain after it is not included).
    pub duration_s: f64,
    pub publish: Rate,
    pub publish_errors: u64,
    /// Messages consumed by the measured consumers, per second of the run.
    pub consume: Rate,
    pub publish_latency_ms: LatencySummary,
    /// End-to-end latency over every measured consumer.
    pub e2e_latency_ms: LatencySummary,
    pub backlog: Backlog,
    pub consumers: Vec<ConsumerReport>,
    pub fairness: Fairness,
    pub series: Vec<SeriesPoint>,
    /// Highest resident memory of the broker seen during the run, when its process is known.
    pub broker_rss_mib_max: Option<f64>,
    /// Scenario-specific figures (lane counters, time to drain, window state...).
    pub extra: serde_json::Value,
}

/// Merges per-second latency series into the rate samples, by second of the run.
pub fn join_series(
    rates: &[(u64, f64, f64, u64)],
    publish: &[LatencyPoint],
    e2e: &[LatencyPoint],
) -> Vec<SeriesPoint> {
    let last_rate = rates.iter().map(|r| r.0 + 1).max().unwrap_or(0) as usize;
    let seconds = last_rate.max(publish.len()).max(e2e.len());
    (0..seconds)
        .map(|t| {
            // A sample taken at second t+1 covers the second before it.
            let (publish_rate, consume_rate, backlog) = rates
                .iter()
                .find(|r| r.0 as usize == t + 1)
                .map(|r| (r.1, r.2, r.3))
                .unwrap_or_default();
            let p = publish.get(t).cloned().unwrap_or_default();
            let e = e2e.get(t).cloned().unwrap_or_default();
            SeriesPoint {
                t: t as u64,
                publish_msgs_per_s: publish_rate,
                consume_msgs_per_s: consume_rate,
                backlog,
                publish_p50_ms: p.p50,
                publish_p99_ms: p.p99,
                e2e_p50_ms: e.p50,
                e2e_p99_ms: e.p99,
                e2e_max_ms: e.max,
            }
        })
        .collect()
}

impl Report {
    /// Writes `<scenario>-<label>.json` and `.md` into `dir`; returns both paths.
    pub fn write(&self, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let stem = format!("{}-{}", self.scenario, self.label);
        let json = dir.join(format!("{stem}.json"));
        let md = dir.join(format!("{stem}.md"));
        std::fs::write(&json, serde_json::to_string_pretty(self)? + "\n")?;
        std::fs::write(&md, self.markdown())?;
        Ok((json, md))
    }

    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# `{}` against {}\n", self.scenario, self.label);
        let _ = writeln!(
            s,
            "{} UTC, {} cores, {:.0} s{}. Command: `{}`\n",
            self.started_at,
            self.cores,
            self.duration_s,
            if self.quick { " (--quick)" } else { "" },
            self.command
        );
        for note in &self.notes {
            let _ = writeln!(s, "- {note}");
        }
        if !self.notes.is_empty() {
            s.push('\n');
        }
        s.push_str(
            "| run | publish msg/s | MB/s | consume msg/s | publish p50 / p99 / p99.9 / max ms \
             | e2e p50 / p90 / p99 / p99.9 / max ms | backlog end / max | rate fairness |\n\
             |---|---:|---:|---:|---|---|---|---:|\n",
        );
        for run in &self.runs {
            let p = &run.publish_latency_ms;
            let e = &run.e2e_latency_ms;
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.1} | {:.0} | {:.2} / {:.2} / {:.2} / {:.1} | {:.2} / {:.2} / {:.2} / {:.2} / {:.1} | {} / {} | {:.3} |",
                run.name,
                run.publish.msgs_per_s,
                run.publish.mb_per_s,
                run.consume.msgs_per_s,
                p.p50,
                p.p99,
                p.p999,
                p.max,
                e.p50,
                e.p90,
                e.p99,
                e.p999,
                e.max,
                run.backlog.end,
                run.backlog.max,
                run.fairness.rate_jain,
            );
        }
        let consumers: Vec<_> = self
            .runs
            .iter()
            .flat_map(|r| r.consumers.iter().map(move |c| (r, c)))
            .collect();
        if consumers.len() > self.runs.len() {
            s.push_str(
                "\n| run | consumer | role | msg/s | e2e p50 / p99 / max ms | lag at end |\n\
                 |---|---|---|---:|---|---:|\n",
            );
            for (run, c) in consumers {
                let e = &c.e2e_latency_ms;
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:.0} | {:.2} / {:.2} / {:.1} | {} |",
                    run.name,
                    c.name,
                    c.role,
                    c.consume.msgs_per_s,
                    e.p50,
                    e.p99,
                    e.max,
                    c.lag_end.map_or("-".into(), |l| l.to_string())
                );
            }
        }
        if !self.summary.is_null() {
            let _ = writeln!(
                s,
                "\nSummary:\n\n```json\n{}\n```",
                serde_json::to_string_pretty(&self.summary).unwrap_or_default()
            );
        }
        s
    }
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`, without a date crate: days since the epoch to a
/// civil date (Howard Hinnant's algorithm).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The process's command line as anyone can rerun it from the repository, quoted so that it
/// can be pasted into a shell. It names no path of the machine it ran on: see
/// [`portable_command_line`].
pub fn command_line() -> String {
    let cwd = std::env::current_dir().ok();
    portable_command_line(std::env::args(), cwd.as_deref())
}

/// `args` (the program first) written without the paths of one machine: the program as
/// `target/<profile>/<name>` when it sits in a Cargo profile directory (wherever the target
/// directory is), an absolute path under `cwd` relative to it, and any other absolute path
/// (a temporary data directory, say) as a placeholder named after its option, `<data-dir>`
/// for `--data-dir /scratch/x` (`<path>` when no option names it). The rest is shell-quoted.
pub fn portable_command_line(args: impl IntoIterator<Item = String>, cwd: Option<&Path>) -> String {
    let mut out = Vec::new();
    let mut previous: Option<String> = None;
    for (i, arg) in args.into_iter().enumerate() {
        let word = if i == 0 {
            quote(&portable_program(&arg))
        } else if let Some((option, value)) =
            arg.split_once('=').filter(|(o, _)| o.starts_with("--"))
        {
            match portable_path(value, cwd) {
                Some(Ok(relative)) => quote(&format!("{option}={relative}")),
                Some(Err(())) => format!("{}=<{}>", quote(option), option.trim_start_matches('-')),
                None => quote(&arg),
            }
        } else {
            match portable_path(&arg, cwd) {
                Some(Ok(relative)) => quote(&relative),
                Some(Err(())) => match previous
                    .as_deref()
                    .filter(|p| p.starts_with('-') && !p.contains('='))
                {
                    Some(option) => format!("<{}>", option.trim_start_matches('-')),
                    None => "<path>".to_string(),
                },
                None => quote(&arg),
            }
        };
        out.push(word);
        previous = Some(arg);
    }
    out.join(" ")
}

/// `target/release/headway` for `/any/target-dir/release/headway`; a relative program as it
/// was given, without a leading `./`; otherwise the program's file name.
fn portable_program(program: &str) -> String {
    let path = Path::new(program);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let profile = path
        .parent()
        .and_then(Path::file_name)
        .map(|p| p.to_string_lossy().into_owned());
    match (name, profile) {
        (Some(name), Some(profile)) if profile == "release" || profile == "debug" => {
            format!("target/{profile}/{name}")
        }
        _ if path.is_relative() => program.trim_start_matches("./").to_string(),
        (Some(name), _) => name,
        (None, _) => program.to_string(),
    }
}

/// `None` for anything but an absolute path; `Ok(relative)` for one under `cwd`; `Err` for
/// one elsewhere on the machine.
fn portable_path(value: &str, cwd: Option<&Path>) -> Option<Result<String, ()>> {
    let path = Path::new(value);
    if !path.is_absolute() {
        return None;
    }
    Some(
        cwd.and_then(|cwd| path.strip_prefix(cwd).ok())
            .map(|rest| match rest.to_string_lossy() {
                r if r.is_empty() => ".".to_string(),
                r => r.into_owned(),
            })
            .ok_or(()),
    )
}

fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fairness_bounds() {
        let c = |rate: f64, p99: f64| ConsumerReport {
            consume: Rate {
                msgs_per_s: rate,
                ..Rate::default()
            },
            e2e_latency_ms: LatencySummary {
                count: 1,
                p99,
                ..LatencySummary::default()
            },
            ..ConsumerReport::default()
        };
        let even = [c(10.0, 2.0), c(10.0, 2.0)];
        let f = Fairness::of(&even.iter().collect::<Vec<_>>());
        assert!((f.rate_jain - 1.0).abs() < 1e-9);
        assert!((f.p99_max_over_min - 1.0).abs() < 1e-9);
        let skewed = [c(10.0, 1.0), c(0.0, 4.0)];
        let f = Fairness::of(&skewed.iter().collect::<Vec<_>>());
        assert!((f.rate_jain - 0.5).abs() < 1e-9);
        assert!((f.p99_max_over_min - 4.0).abs() < 1e-9);
    }

    #[test]
    fn utc_date_shape() {
        let now = utc_now();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.starts_with("20") && now.ends_with('Z'));
    }

    #[test]
    fn command_line_names_no_machine_path() {
        let line = |args: &[&str]| {
            portable_command_line(
                args.iter().map(|a| a.to_string()),
                Some(Path::new("/srv/repo")),
            )
        };
        assert_eq!(
            line(&[
                "/srv/repo/target/release/headway",
                "bench",
                "acks",
                "--out",
                "/srv/repo/bench/results/x",
                "--data-dir",
                "/scratch/headway-lab.Ssao1B",
                "--note",
                "it's fsync",
            ]),
            "target/release/headway bench acks --out bench/results/x --data-dir <data-dir> \
             --note 'it'\\''s fsync'"
        );
        assert_eq!(
            line(&[
                "/elsewhere/release/headway",
                "--evict-dir=/scratch/k/logs",
                "/srv/x"
            ]),
            "target/release/headway --evict-dir=<evict-dir> <path>"
        );
        assert_eq!(
            line(&["./target/debug/headway", "--out", "bench/results/tmp"]),
            "target/debug/headway --out bench/results/tmp"
        );
        assert_eq!(
            line(&["headway", "bench", "credit"]),
            "headway bench credit"
        );
        assert_eq!(
            line(&["/usr/local/bin/headway", "--out=/srv/repo"]),
            "headway --out=."
        );
    }
}
