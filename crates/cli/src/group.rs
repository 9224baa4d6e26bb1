//! `headway group list|describe|delete|seek|config`: consumer groups of any
//! Kafka-compatible broker. `seek` resets a group's committed offsets as
//! `kafka-consumer-groups.sh --reset-offsets` does: only while the group has no members,
//! committed from outside the group. `config` shows or changes a group's own settings
//! (Kafka 4's GROUP config resource, as `kafka-configs.sh --entity-type groups`).

use crate::output::row;
use crate::output::{self, configs_table, or_dash, table, AdminArgs, Format};
use clap::{Args, Subcommand};
use headway_client::{
    Cluster, ConfigChange, ConfigEntry, ConfigResource, ConsumerGroupDescription, GroupDescription,
    GroupListing, OffsetReset, OffsetSpec, ShareGroupDescription, SharePartitionOffset,
    SharePartitionStats, LATEST,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

#[derive(Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    command: GroupCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Subcommand)]
enum GroupCommand {
    /// Every consumer group, with its state.
    List,
    /// A group's members and assignments, and per partition the committed offset,
    /// the log end offset and the lag.
    Describe { group: String },
    /// Delete groups that have no members, with their committed offsets.
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
    },
    /// Reset a group's committed offsets (the group must have no members).
    Seek(SeekArgs),
    /// A group's own settings (e.g. share.auto.offset.reset), each with where its value
    /// comes from; with --set or --delete, change them first (the others keep theirs).
    /// The group need not exist yet.
    Config {
        group: String,
        /// Set KEY to VALUE (repeatable).
        #[arg(long, value_name = "KEY=VALUE", value_parser = output::key_value)]
        set: Vec<(String, String)>,
        /// Remove KEY's value, so that the broker's applies (repeatable).
        #[arg(long, value_name = "KEY")]
        delete: Vec<String>,
    },
}

#[derive(Args)]
struct SeekArgs {
    group: String,
    #[command(flatten)]
    to: SeekTo,
    /// TOPIC or TOPIC:P,P,... (repeatable) [default: every partition the group has
    /// committed offsets for].
    #[arg(long, short = 't', value_parser = topic_partitions)]
    topic: Vec<(String, Option<Vec<i32>>)>,
    /// Print what would be committed, commit nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Where to seek to: exactly one of these.
#[derive(Args)]
#[group(required = true, multiple = false)]
struct SeekTo {
    /// Each partition's earliest offset (its log start).
    #[arg(long)]
    to_earliest: bool,
    /// Each partition's log end offset.
    #[arg(long)]
    to_latest: bool,
    /// The first record at or after this time, ms since the epoch (the log end where
    /// there is none).
    #[arg(long, value_name = "MS")]
    to_timestamp: Option<i64>,
    /// This offset, brought within each partition's earliest and latest offsets.
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
}

impl SeekTo {
    fn spec(&self) -> OffsetSpec {
        match (self.to_timestamp, self.to_offset) {
            (Some(ms), _) => OffsetSpec::Timestamp(ms),
            (_, Some(offset)) => OffsetSpec::Offset(offset),
            _ if self.to_earliest => OffsetSpec::Earliest,
            _ => OffsetSpec::Latest,
        }
    }
}

/// `TOPIC` or `TOPIC:P,P,...`.
fn topic_partitions(s: &str) -> Result<(String, Option<Vec<i32>>), String> {
    let (topic, partitions) = match s.rsplit_once(':') {
        None => return Ok((s.to_string(), None)),
        Some(split) => split,
    };
    if topic.is_empty() {
        return Err(format!("expected TOPIC or TOPIC:P,P,..., got {s:?}"));
    }
    let partitions = partitions
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .map_err(|_| format!("{p:?} is not a partition number in {s:?}"))
        })
        .collect::<Result<Vec<i32>, String>>()?;
    Ok((topic.to_string(), Some(partitions)))
}

pub async fn run(args: GroupArgs) -> anyhow::Result<()> {
    let cluster = args.admin.connect().await?;
    let format = args.admin.format;
    match args.command {
        GroupCommand::List => list(&cluster, format).await,
        GroupCommand::Describe { group } => describe(&cluster, format, &group).await,
        GroupCommand::Delete { groups } => delete(&cluster, format, &groups).await,
        GroupCommand::Seek(seek) => self::seek(&cluster, format, seek).await,
        GroupCommand::Config { group, set, delete } => {
            let changes: Vec<ConfigChange> = set
                .into_iter()
                .map(|(name, value)| ConfigChange::Set { name, value })
                .chain(delete.into_iter().map(|name| ConfigChange::Delete { name }))
                .collect();
            config(&cluster, format, &group, &changes).await
        }
    }
}

/// Shows a group's settings, after changing them if `changes` has any.
async fn config(
    cluster: &Arc<Cluster>,
    format: Format,
    group: &str,
    changes: &[ConfigChange],
) -> anyhow::Result<()> {
    if !changes.is_empty() {
        cluster
            .alter_configs(ConfigResource::Group, group, changes)
            .await
            .map_err(|e| anyhow::Error::new(e).context(about(group)))?;
    }
    let configs: Vec<ConfigEntry> = cluster
        .describe_configs(ConfigResource::Group, group)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(group)))?;
    #[derive(Serialize)]
    struct GroupConfigs<'a> {
        group: &'a str,
        #[serde(skip_serializing_if = "<[ConfigChange]>::is_empty")]
        changes: &'a [ConfigChange],
        configs: &'a [ConfigEntry],
    }
    let shown = GroupConfigs {
        group,
        changes,
        configs: &configs,
    };
    output::print(format, &shown, |out| configs_table(out, &configs))
}

/// Context of every error about one group.
fn about(group: &str) -> String {
    format!("group {group:?}")
}

async fn list(cluster: &Arc<Cluster>, format: Format) -> anyhow::Result<()> {
    #[derive(Serialize)]
    struct Groups {
        groups: Vec<GroupListing>,
    }
    let groups = Groups {
        groups: cluster.list_groups().await?,
    };
    output::print(format, &groups, |out| {
        let mut rows = vec![row!["GROUP", "STATE", "PROTOCOL-TYPE", "TYPE"]];
        for g in &groups.groups {
            let group_type = or_dash(Some(g.group_type.as_str()).filter(|t| !t.is_empty()));
            let protocol_type = or_dash(Some(g.protocol_type.as_str()).filter(|t| !t.is_empty()));
            rows.push(row![g.group_id, g.state, protocol_type, group_type]);
        }
        table(out, &rows)
    })
}

#[derive(Serialize)]
struct PartitionLag {
    topic: String,
    partition: i32,
    committed_offset: Option<i64>,
    log_end_offset: Option<i64>,
    lag: Option<i64>,
    member_id: Option<String>,
}

#[derive(Serialize)]
struct GroupState {
    #[serde(flatten)]
    description: GroupDescription,
    /// Epochs and per-member assignments of a group of the consumer protocol.
    #[serde(skip_serializing_if = "Option::is_none")]
    consumer_protocol: Option<ConsumerGroupDescription>,
    offsets: Vec<PartitionLag>,
}

async fn describe(cluster: &Arc<Cluster>, format: Format, group: &str) -> anyhow::Result<()> {
    let description = cluster.describe_group(group).await?;
    let committed = cluster.committed_offsets(group).await?;
    // Kafka describes a group it does not know as Dead with no members; one that only
    // has committed offsets left is Empty.
    if description.state == "Dead" && committed.is_empty() {
        return match cluster.describe_share_group(group).await? {
            Some(share) => describe_share(cluster, format, share).await,
            None => anyhow::bail!("group {group} does not exist"),
        };
    }
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    for m in &description.members {
        for (t, ps) in &m.assignment {
            for p in ps {
                owner.insert((t.clone(), *p), m.member_id.clone());
            }
        }
    }
    let mut partitions: BTreeMap<(String, i32), Option<i64>> =
        owner.keys().map(|k| (k.clone(), None)).collect();
    for (t, p, offset) in committed {
        partitions.insert((t, p), (offset >= 0).then_some(offset));
    }
    let mut offsets = Vec::with_capacity(partitions.len());
    for ((topic, partition), committed) in partitions {
        let end = cluster.list_offset(&topic, partition, LATEST).await.ok();
        offsets.push(PartitionLag {
            member_id: owner.get(&(topic.clone(), partition)).cloned(),
            topic,
            partition,
            committed_offset: committed,
            log_end_offset: end,
            lag: committed.zip(end).map(|(c, e)| (e - c).max(0)),
        });
    }
    // A group of the consumer protocol also has epochs and target assignments, which
    // only ConsumerGroupDescribe shows.
    let consumer_protocol = match description.protocol_type == "consumer" {
        true => cluster.describe_consumer_group(group).await.ok().flatten(),
        false => None,
    };
    let state = GroupState {
        description,
        consumer_protocol,
        offsets,
    };
    output::print(format, &state, |out| describe_table(out, &state))
}

fn describe_table(out: &mut dyn Write, state: &GroupState) -> std::io::Result<()> {
    let d = &state.description;
    writeln!(
        out,
        "group {}: {}, protocol {}/{}, {} members",
        d.group_id,
        d.state,
        d.protocol_type,
        d.protocol,
        d.members.len()
    )?;
    let mut rows = vec![row![
        "MEMBER",
        "INSTANCE",
        "CLIENT-ID",
        "HOST",
        "ASSIGNMENT"
    ]];
    for m in &d.members {
        rows.push(row![
            m.member_id,
            or_dash(m.group_instance_id.as_deref()),
            m.client_id,
            m.client_host,
            assignment_text(&m.assignment)
        ]);
    }
    writeln!(out)?;
    table(out, &rows)?;
    if let Some(c) = &state.consumer_protocol {
        consumer_protocol_table(out, c)?;
    }
    let mut rows = vec![row![
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "LOG-END",
        "LAG",
        "MEMBER"
    ]];
    for p in &state.offsets {
        rows.push(row![
            p.topic,
            p.partition,
            or_dash(p.committed_offset),
            or_dash(p.log_end_offset),
            or_dash(p.lag),
            or_dash(p.member_id.as_deref())
        ]);
    }
    writeln!(out)?;
    table(out, &rows)
}

/// An assignment as `topic:0,1 other:2`.
fn assignment_text(a: &[(String, Vec<i32>)]) -> String {
    let parts: Vec<String> = a
        .iter()
        .map(|(t, ps)| format!("{t}:{}", output::ids(ps)))
        .collect();
    parts.join(" ")
}

/// Epochs and assignments of a consumer-protocol group: a member whose epoch is behind
/// the assignment epoch, or whose assignment differs from its target, is reconciling.
fn consumer_protocol_table(
    out: &mut dyn Write,
    c: &ConsumerGroupDescription,
) -> std::io::Result<()> {
    writeln!(
        out,
        "\nconsumer protocol: group epoch {}, assignment epoch {}, assignor {}",
        c.group_epoch, c.assignment_epoch, c.assignor
    )?;
    let mut rows = vec![row!["MEMBER", "EPOCH", "SUBSCRIBED", "ASSIGNED", "TARGET"]];
    for m in &c.members {
        let subscribed = match &m.subscribed_topic_regex {
            Some(re) => format!("{} /{re}/", m.subscribed_topics.join(",")),
            None => m.subscribed_topics.join(","),
        };
        rows.push(row![
            m.member_id,
            m.member_epoch,
            subscribed.trim(),
            assignment_text(&m.assignment),
            assignment_text(&m.target_assignment)
        ]);
    }
    writeln!(out)?;
    table(out, &rows)
}

/// A share group as `group describe` shows it: members and assignments, and per
/// share-partition its start offset, the log end, and (from a headway broker) the
/// records in flight, acquired, archived and redelivered.
#[derive(Serialize)]
struct ShareGroupState {
    #[serde(flatten)]
    description: ShareGroupDescription,
    partitions: Vec<SharePartitionRow>,
}

#[derive(Serialize)]
struct SharePartitionRow {
    #[serde(flatten)]
    offset: SharePartitionOffset,
    log_end_offset: Option<i64>,
}

async fn describe_share(
    cluster: &Arc<Cluster>,
    format: Format,
    description: ShareGroupDescription,
) -> anyhow::Result<()> {
    let offsets = cluster.share_group_offsets(&description.group_id).await?;
    let mut partitions = Vec::with_capacity(offsets.len());
    for offset in offsets {
        let end = cluster
            .list_offset(&offset.topic, offset.partition, LATEST)
            .await
            .ok();
        partitions.push(SharePartitionRow {
            offset,
            log_end_offset: end,
        });
    }
    let state = ShareGroupState {
        description,
        partitions,
    };
    output::print(format, &state, |out| share_table(out, &state))
}

fn share_table(out: &mut dyn Write, state: &ShareGroupState) -> std::io::Result<()> {
    let d = &state.description;
    writeln!(
        out,
        "share group {}: {}, group epoch {}, {} members",
        d.group_id,
        d.state,
        d.group_epoch,
        d.members.len()
    )?;
    let mut rows = vec![row!["MEMBER", "EPOCH", "CLIENT-ID", "HOST", "ASSIGNMENT"]];
    for m in &d.members {
        rows.push(row![
            m.member_id,
            m.member_epoch,
            m.client_id,
            m.client_host,
            assignment_text(&m.assignment)
        ]);
    }
    writeln!(out)?;
    table(out, &rows)?;
    let mut rows = vec![row![
        "TOPIC",
        "PARTITION",
        "START",
        "LOG-END",
        "IN-FLIGHT",
        "ACQUIRED",
        "ARCHIVED",
        "REDELIVERED"
    ]];
    for p in &state.partitions {
        let o = &p.offset;
        let stat = |f: fn(&SharePartitionStats) -> u64| o.stats.as_ref().map(f);
        rows.push(row![
            o.topic,
            o.partition,
            or_dash(o.start_offset),
            or_dash(p.log_end_offset),
            or_dash(stat(|s| s.in_flight)),
            or_dash(stat(|s| s.acquired)),
            or_dash(stat(|s| s.archived)),
            or_dash(stat(|s| s.redelivered))
        ]);
    }
    writeln!(out)?;
    table(out, &rows)
}

async fn delete(cluster: &Arc<Cluster>, format: Format, groups: &[String]) -> anyhow::Result<()> {
    let results = cluster.delete_groups(groups).await?;
    output::print_deleted(format, "group", results)
}

async fn seek(cluster: &Arc<Cluster>, format: Format, args: SeekArgs) -> anyhow::Result<()> {
    let group = args.group.as_str();
    let description = cluster
        .describe_group(group)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(group)))?;
    // As Kafka's tool: a member would overwrite the reset with its next commit, and the
    // broker refuses a commit from outside a group that has members.
    if !description.members.is_empty() {
        anyhow::bail!(
            "{}: offsets can only be reset while the group is inactive, but it has {} \
             member(s) (state {}): stop its consumers first",
            about(group),
            description.members.len(),
            description.state
        );
    }
    let partitions: Vec<(String, i32)> = if args.topic.is_empty() {
        let committed = cluster
            .committed_offsets(group)
            .await
            .map_err(|e| anyhow::Error::new(e).context(about(group)))?;
        anyhow::ensure!(
            !committed.is_empty(),
            "{}: no committed offsets to reset; name topics with --topic",
            about(group)
        );
        committed.into_iter().map(|(t, p, _)| (t, p)).collect()
    } else {
        let mut topics: BTreeMap<String, Option<Vec<i32>>> = BTreeMap::new();
        for (topic, chosen) in args.topic {
            // A topic named twice, once without partitions, means all of it.
            let entry = topics.entry(topic).or_insert_with(|| Some(Vec::new()));
            match chosen {
                Some(chosen) => {
                    if let Some(all) = entry {
                        all.extend(chosen);
                    }
                }
                None => *entry = None,
            }
        }
        for p in topics.values_mut().flatten() {
            p.sort_unstable();
            p.dedup();
        }
        crate::topic::partitions_of(cluster, &topics).await?
    };
    let plan = cluster
        .plan_offset_reset(group, &partitions, args.to.spec())
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(group)))?;
    if !args.dry_run {
        cluster
            .commit_offset_reset(group, &plan)
            .await
            .map_err(|e| anyhow::Error::new(e).context(about(group)))?;
    }
    #[derive(Serialize)]
    struct Seek<'a> {
        group: &'a str,
        dry_run: bool,
        offsets: &'a [OffsetReset],
    }
    let seek = Seek {
        group,
        dry_run: args.dry_run,
        offsets: &plan,
    };
    output::print(format, &seek, |out| {
        let mut rows = vec![row!["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]];
        for r in &plan {
            rows.push(row![
                r.topic,
                r.partition,
                or_dash(r.current_offset),
                r.new_offset
            ]);
        }
        table(out, &rows)?;
        if args.dry_run {
            writeln!(out, "dry run: nothing committed")?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_take_optional_partitions() {
        assert_eq!(topic_partitions("events"), Ok(("events".into(), None)));
        assert_eq!(
            topic_partitions("events:0, 2"),
            Ok(("events".into(), Some(vec![0, 2])))
        );
        assert!(topic_partitions("events:x").is_err());
        assert!(topic_partitions(":1").is_err());
    }
}
