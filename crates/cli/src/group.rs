//! `headway group list` and `headway group describe NAME`.

use anyhow::Context;
use clap::{Args, Subcommand};
use headway_broker::{PartitionIndex, TopicPartition};
use headway_client::{ClientConfig, Cluster, LATEST};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

#[derive(Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
    /// Broker to start from, HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        short = 'b',
        env = "HEADWAY_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    bootstrap: String,
}

#[derive(Subcommand)]
enum GroupCommand {
    /// Every consumer group, with its state.
    List,
    /// A group's members and assignments, and per partition the committed offset,
    /// the log end offset and the lag.
    Describe { group: String },
}

pub async fn run(args: GroupArgs) -> anyhow::Result<()> {
    let cluster = Cluster::connect(&args.bootstrap, ClientConfig::default())
        .await
        .with_context(|| format!("connecting to {}", args.bootstrap))?;
    match args.command {
        GroupCommand::List => list(&cluster).await,
        GroupCommand::Describe { group } => describe(&cluster, &group).await,
    }
}

async fn list(cluster: &Arc<Cluster>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let groups = cluster.list_groups().await?;
    let width = groups
        .iter()
        .map(|g| g.group_id.len())
        .max()
        .unwrap_or(5)
        .max(5);
    writeln!(out, "{:width$}  {:20}  PROTOCOL-TYPE", "GROUP", "STATE")?;
    for g in groups {
        writeln!(
            out,
            "{:width$}  {:20}  {}",
            g.group_id, g.state, g.protocol_type
        )?;
    }
    Ok(())
}

/// Prints rows as left-aligned columns.
fn table(out: &mut impl Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
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

async fn describe(cluster: &Arc<Cluster>, group: &str) -> anyhow::Result<()> {
    let description = cluster.describe_group(group).await?;
    let committed = cluster.committed_offsets(group).await?;
    // Kafka describes a group it does not know as Dead with no members; one that only
    // has committed offsets left is Empty.
    if description.state == "Dead" && committed.is_empty() {
        anyhow::bail!("group {group} does not exist");
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "group {}: {}, protocol {}/{}, {} members",
        description.group_id,
        description.state,
        description.protocol_type,
        description.protocol,
        description.members.len()
    )?;
    let mut owner: BTreeMap<TopicPartition, String> = BTreeMap::new();
    let mut rows = vec![vec![
        "MEMBER".into(),
        "INSTANCE".into(),
        "CLIENT-ID".into(),
        "HOST".into(),
        "ASSIGNMENT".into(),
    ]];
    for m in &description.members {
        let assignment: Vec<String> = m
            .assignment
            .iter()
            .map(|(t, ps)| {
                format!(
                    "{t}:{}",
                    ps.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
                )
            })
            .collect();
        for (t, ps) in &m.assignment {
            for p in ps {
                let key = TopicPartition::new(t.clone(), PartitionIndex::new(*p));
                owner.insert(key, m.member_id.clone());
            }
        }
        rows.push(vec![
            m.member_id.clone(),
            m.group_instance_id.clone().unwrap_or_else(|| "-".into()),
            m.client_id.clone(),
            m.client_host.clone(),
            assignment.join(" "),
        ]);
    }
    writeln!(out)?;
    table(&mut out, &rows)?;
    let mut partitions: BTreeMap<TopicPartition, Option<i64>> =
        owner.keys().map(|k| (k.clone(), None)).collect();
    for (t, p, offset) in committed {
        let key = TopicPartition::new(t, PartitionIndex::new(p));
        partitions.insert(key, (offset >= 0).then_some(offset));
    }
    let mut rows = vec![vec![
        "TOPIC".into(),
        "PARTITION".into(),
        "COMMITTED".into(),
        "LOG-END".into(),
        "LAG".into(),
        "MEMBER".into(),
    ]];
    for (key, committed) in partitions {
        let (topic, partition) = (&key.topic, key.partition.value());
        let end = cluster.list_offset(topic, partition, LATEST).await.ok();
        let show = |v: Option<i64>| v.map_or("-".to_string(), |v| v.to_string());
        let lag = committed.zip(end).map(|(c, e)| (e - c).max(0));
        rows.push(vec![
            topic.clone(),
            partition.to_string(),
            show(committed),
            show(end),
            show(lag),
            owner.get(&key).cloned().unwrap_or_else(|| "-".into()),
        ]);
    }
    writeln!(out)?;
    table(&mut out, &rows)?;
    Ok(())
}
