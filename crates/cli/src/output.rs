//! What the operator commands (`topic`, `group`, `cluster`) share: the broker to talk to,
//! the output format, and how tables and JSON documents are printed.
//!
//! Tables are for people: left-aligned columns under a header row. `--format json` prints
//! one JSON document per command, with field names that stay stable across releases, for
//! scripts.
//!
//! A stdout closed by its reader (`headway ... | head`) is a normal end for every
//! command: the reader has what it wanted.

use anyhow::Context;
use clap::{Args, ValueEnum};
use headway_client::Cluster;
use serde::Serialize;
use std::io::Write;
use std::sync::Arc;

#[derive(Args)]
pub struct AdminArgs {
    /// Broker to start from, HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        short = 'b',
        env = "HEADWAY_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    pub bootstrap: String,
    /// Output: aligned tables, or one JSON document.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,
    #[command(flatten)]
    pub security: crate::security_args::SecurityArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

impl AdminArgs {
    pub async fn connect(&self) -> anyhow::Result<Arc<Cluster>> {
        Cluster::connect(&self.bootstrap, self.security.client_config()?)
            .await
            .with_context(|| format!("connecting to {}", self.bootstrap))
    }
}

/// True when `e` comes from writing to a stdout whose reader went away.
pub(crate) fn closed_stdout(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Turns a write error from a closed stdout into a normal end.
pub(crate) fn ignore_closed_stdout(written: std::io::Result<()>) -> std::io::Result<()> {
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Prints `value` as JSON, or as text written by `table` for people.
pub fn print<T: Serialize>(
    format: Format,
    value: &T,
    table: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let written = match format {
        Format::Json => serde_json::to_writer_pretty(&mut out, value)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out)),
        Format::Table => table(&mut out),
    };
    ignore_closed_stdout(written.and_then(|()| out.flush()))?;
    Ok(())
}

/// Prints rows as left-aligned columns; the first row is the header.
pub fn table(out: &mut dyn Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

/// Builds a row of cells from anything printable.
macro_rules! row {
    ($($cell:expr),* $(,)?) => {
        vec![$($cell.to_string()),*]
    };
}
pub(crate) use row;

/// `-` for a missing value.
pub fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Node ids as `1,2,3`.
pub fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// A `key=value` argument.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// Prints config entries as NAME VALUE SOURCE rows.
pub fn configs_table(
    out: &mut dyn Write,
    configs: &[headway_client::ConfigEntry],
) -> std::io::Result<()> {
    let mut rows = vec![row!["NAME", "VALUE", "SOURCE"]];
    for c in configs {
        let value = if c.sensitive {
            "(sensitive)".to_string()
        } else {
            or_dash(c.value.as_deref())
        };
        rows.push(row![c.name, value, c.source]);
    }
    table(out, &rows)
}

/// Splits a batched request's results into the items that succeeded and an error naming
/// the first that failed (and how many more did), so the caller can report the first
/// and then fail.
pub fn split_failures<T>(
    what: &str,
    results: Vec<(String, Result<T, headway_client::ClientError>)>,
) -> (Vec<(String, T)>, Option<anyhow::Error>) {
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for (name, result) in results {
        match result {
            Ok(v) => done.push((name, v)),
            Err(e) => failed.push((name, e)),
        }
    }
    let more = failed.len().saturating_sub(1);
    let error = failed.into_iter().next().map(|(name, e)| {
        let context = if more == 0 {
            format!("{what} {name:?}")
        } else {
            format!("{what} {name:?} (and {more} more)")
        };
        anyhow::Error::new(e).context(context)
    });
    (done, error)
}

/// Reports a batched delete: what was deleted (a line each, or `{"deleted": [...]}`),
/// then the first failure as the command's error.
pub fn print_deleted(
    format: Format,
    what: &str,
    results: Vec<(String, Result<(), headway_client::ClientError>)>,
) -> anyhow::Result<()> {
    let (deleted, failure) = split_failures(what, results);
    #[derive(Serialize)]
    struct Deleted {
        deleted: Vec<String>,
    }
    let deleted = Deleted {
        deleted: deleted.into_iter().map(|(name, ())| name).collect(),
    };
    if !deleted.deleted.is_empty() || failure.is_none() {
        print(format, &deleted, |out| {
            for name in &deleted.deleted {
                writeln!(out, "deleted {what} {name}")?;
            }
            Ok(())
        })?;
    }
    failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let mut out = Vec::new();
        table(
            &mut out,
            &[
                row!["NAME", "PARTITIONS"],
                row!["a-long-name", 3],
                row!["b", 12],
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "NAME         PARTITIONS\na-long-name  3\nb            12\n"
        );
    }

    #[test]
    fn key_values_need_a_key() {
        assert_eq!(key_value("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert_eq!(key_value("a="), Ok(("a".into(), String::new())));
        assert!(key_value("=b").is_err());
        assert!(key_value("ab").is_err());
    }
}
