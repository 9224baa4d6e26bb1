//! `headway topic create|list|describe|delete|alter-config|add-partitions`: topics of any
//! Kafka-compatible broker, through the admin requests of `headway_client::admin`.

use crate::output::row;
use crate::output::{self, configs_table, ids, or_dash, table, AdminArgs};
use clap::{Args, Subcommand};
use headway_client::{
    Cluster, ConfigChange, ConfigEntry, ConfigResource, NewTopic, PartitionDescription, EARLIEST,
    LATEST,
};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[derive(Args)]
pub struct TopicArgs {
    #[command(subcommand)]
    command: TopicCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Subcommand)]
enum TopicCommand {
    /// Create topics.
    Create {
        #[arg(required = true)]
        topics: Vec<String>,
        /// Partitions of each topic [default: the broker's num.partitions].
        #[arg(long, short = 'p', default_value_t = -1, allow_hyphen_values = true)]
        partitions: i32,
        /// Replicas of each partition [default: the broker's default.replication.factor].
        #[arg(long, short = 'r', default_value_t = -1, allow_hyphen_values = true)]
        replication_factor: i16,
        /// A topic setting, KEY=VALUE (repeatable), e.g. -c retention.ms=3600000.
        #[arg(long = "config", short = 'c', value_name = "KEY=VALUE", value_parser = output::key_value)]
        configs: Vec<(String, String)>,
    },
    /// Every topic with its partition count and replication factor.
    List {
        /// Include internal topics (Kafka's __consumer_offsets).
        #[arg(long, short = 'i')]
        internal: bool,
    },
    /// A topic's partitions (leader, replicas, in-sync replicas, log start and end
    /// offsets) and every setting with where its value comes from.
    Describe { topic: String },
    /// Delete topics and their data.
    Delete {
        #[arg(required = true)]
        topics: Vec<String>,
    },
    /// Change a topic's settings; the others keep their values.
    AlterConfig {
        topic: String,
        /// Set KEY to VALUE (repeatable).
        #[arg(long, value_name = "KEY=VALUE", value_parser = output::key_value)]
        set: Vec<(String, String)>,
        /// Remove KEY's value, so that the broker's default applies (repeatable).
        #[arg(long, value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Add partitions to a topic (partitions are never removed).
    AddPartitions {
        topic: String,
        /// How many partitions to add.
        #[arg(long, short = 'n')]
        num: i32,
    },
}

pub async fn run(args: TopicArgs) -> anyhow::Result<()> {
    let cluster = args.admin.connect().await?;
    let format = args.admin.format;
    match args.command {
        TopicCommand::Create {
            topics,
            partitions,
            replication_factor,
            configs,
        } => {
            let topics: Vec<NewTopic> = topics
                .into_iter()
                .map(|name| NewTopic {
                    name,
                    partitions,
                    replication_factor,
                    configs: configs.clone(),
                })
                .collect();
            create(&cluster, format, &topics).await
        }
        TopicCommand::List { internal } => list(&cluster, format, internal).await,
        TopicCommand::Describe { topic } => describe(&cluster, format, &topic).await,
        TopicCommand::Delete { topics } => delete(&cluster, format, &topics).await,
        TopicCommand::AlterConfig { topic, set, delete } => {
            let changes: Vec<ConfigChange> = set
                .into_iter()
                .map(|(name, value)| ConfigChange::Set { name, value })
                .chain(delete.into_iter().map(|name| ConfigChange::Delete { name }))
                .collect();
            alter_config(&cluster, format, &topic, &changes).await
        }
        TopicCommand::AddPartitions { topic, num } => {
            add_partitions(&cluster, format, &topic, num).await
        }
    }
}

/// Context of every error about one topic, e.g. `topic "x": TOPIC_ALREADY_EXISTS: ...`.
fn about(topic: &str) -> String {
    format!("topic {topic:?}")
}

async fn create(
    cluster: &Arc<Cluster>,
    format: output::Format,
    topics: &[NewTopic],
) -> anyhow::Result<()> {
    let results = cluster.create_topics(topics).await?;
    let (created, failure) = output::split_failures("topic", results);
    let created: Vec<_> = created.into_iter().map(|(_, t)| t).collect();
    #[derive(Serialize)]
    struct Created<'a> {
        topics: &'a [headway_client::CreatedTopic],
    }
    if !created.is_empty() || failure.is_none() {
        output::print(format, &Created { topics: &created }, |out| {
            let mut rows = vec![row!["TOPIC", "PARTITIONS", "REPLICAS"]];
            for t in &created {
                let known = |n: i64| (n >= 0).then_some(n);
                rows.push(row![
                    t.name,
                    or_dash(known(t.partitions.into())),
                    or_dash(known(t.replication_factor.into()))
                ]);
            }
            table(out, &rows)
        })?;
    }
    failure.map_or(Ok(()), Err)
}

#[derive(Serialize)]
struct TopicListing {
    name: String,
    topic_id: String,
    partitions: usize,
    replication_factor: usize,
    internal: bool,
}

async fn list(
    cluster: &Arc<Cluster>,
    format: output::Format,
    internal: bool,
) -> anyhow::Result<()> {
    let metadata = cluster.metadata(None).await?;
    #[derive(Serialize)]
    struct Topics {
        topics: Vec<TopicListing>,
    }
    let topics = Topics {
        topics: metadata
            .topics
            .iter()
            .filter(|t| internal || !t.internal)
            .map(|t| TopicListing {
                name: t.name.clone(),
                topic_id: t.topic_id.clone(),
                partitions: t.partitions.len(),
                replication_factor: t.replication_factor(),
                internal: t.internal,
            })
            .collect(),
    };
    output::print(format, &topics, |out| {
        let mut rows = vec![row!["NAME", "PARTITIONS", "REPLICAS"]];
        for t in &topics.topics {
            rows.push(row![t.name, t.partitions, t.replication_factor]);
        }
        table(out, &rows)
    })
}

#[derive(Serialize)]
struct PartitionState<'a> {
    #[serde(flatten)]
    partition: &'a PartitionDescription,
    log_start_offset: Option<i64>,
    log_end_offset: Option<i64>,
}

#[derive(Serialize)]
struct TopicState<'a> {
    name: &'a str,
    topic_id: &'a str,
    internal: bool,
    replication_factor: usize,
    partitions: Vec<PartitionState<'a>>,
    configs: Vec<ConfigEntry>,
}

async fn describe(
    cluster: &Arc<Cluster>,
    format: output::Format,
    topic: &str,
) -> anyhow::Result<()> {
    let (metadata, description) = cluster
        .describe_topic(topic)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(topic)))?;
    let keys: Vec<(String, i32)> = description
        .partitions
        .iter()
        .map(|p| (topic.to_string(), p.partition))
        .collect();
    // A partition without a leader has no offsets to show; the rest still do.
    let start = cluster
        .list_offsets(&metadata, &keys, EARLIEST)
        .await
        .unwrap_or_default();
    let end = cluster
        .list_offsets(&metadata, &keys, LATEST)
        .await
        .unwrap_or_default();
    let configs = cluster
        .describe_configs(ConfigResource::Topic, topic)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(topic)))?;
    let state = TopicState {
        name: &description.name,
        topic_id: &description.topic_id,
        internal: description.internal,
        replication_factor: description.replication_factor(),
        partitions: description
            .partitions
            .iter()
            .map(|p| {
                let key = (topic.to_string(), p.partition);
                PartitionState {
                    partition: p,
                    log_start_offset: start.get(&key).copied(),
                    log_end_offset: end.get(&key).copied(),
                }
            })
            .collect(),
        configs,
    };
    output::print(format, &state, |out| {
        writeln!(
            out,
            "topic {}{}: {} partitions, replication factor {}{}",
            state.name,
            if state.topic_id.is_empty() {
                String::new()
            } else {
                format!(" (id {})", state.topic_id)
            },
            state.partitions.len(),
            state.replication_factor,
            if state.internal { ", internal" } else { "" }
        )?;
        writeln!(out)?;
        let mut rows = vec![row![
            "PARTITION",
            "LEADER",
            "REPLICAS",
            "ISR",
            "LOG-START",
            "LOG-END"
        ]];
        for p in &state.partitions {
            rows.push(row![
                p.partition.partition,
                p.partition.leader,
                ids(&p.partition.replicas),
                ids(&p.partition.isr),
                or_dash(p.log_start_offset),
                or_dash(p.log_end_offset)
            ]);
        }
        table(out, &rows)?;
        writeln!(out)?;
        configs_table(out, &state.configs)
    })
}

async fn delete(
    cluster: &Arc<Cluster>,
    format: output::Format,
    topics: &[String],
) -> anyhow::Result<()> {
    let results = cluster.delete_topics(topics).await?;
    output::print_deleted(format, "topic", results)
}

async fn alter_config(
    cluster: &Arc<Cluster>,
    format: output::Format,
    topic: &str,
    changes: &[ConfigChange],
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !changes.is_empty(),
        "nothing to change: give --set KEY=VALUE or --delete KEY"
    );
    cluster
        .alter_configs(ConfigResource::Topic, topic, changes)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(topic)))?;
    // Shows what the broker now holds for every key changed.
    let names: BTreeSet<&str> = changes
        .iter()
        .map(|c| match c {
            ConfigChange::Set { name, .. } | ConfigChange::Delete { name } => name.as_str(),
        })
        .collect();
    let configs: Vec<ConfigEntry> = cluster
        .describe_configs(ConfigResource::Topic, topic)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(topic)))?
        .into_iter()
        .filter(|c| names.contains(c.name.as_str()))
        .collect();
    #[derive(Serialize)]
    struct Altered<'a> {
        topic: &'a str,
        changes: &'a [ConfigChange],
        configs: &'a [ConfigEntry],
    }
    let altered = Altered {
        topic,
        changes,
        configs: &configs,
    };
    output::print(format, &altered, |out| configs_table(out, &configs))
}

async fn add_partitions(
    cluster: &Arc<Cluster>,
    format: output::Format,
    topic: &str,
    num: i32,
) -> anyhow::Result<()> {
    anyhow::ensure!(num > 0, "--num must be at least 1, got {num}");
    let (_, description) = cluster
        .describe_topic(topic)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(topic)))?;
    let before = i32::try_from(description.partitions.len())?;
    let total = before
        .checked_add(num)
        .ok_or_else(|| anyhow::anyhow!("{before} + {num} partitions is too many"))?;
    cluster
        .create_partitions(topic, total)
        .await
        .map_err(|e| anyhow::Error::new(e).context(about(topic)))?;
    #[derive(Serialize)]
    struct Grown<'a> {
        topic: &'a str,
        partitions_before: i32,
        partitions: i32,
    }
    let grown = Grown {
        topic,
        partitions_before: before,
        partitions: total,
    };
    output::print(format, &grown, |out| {
        writeln!(out, "topic {topic}: {before} -> {total} partitions")
    })
}

/// The partitions of `topics` (all of a topic's, or the chosen ones) as (topic, partition)
/// keys; one Metadata request per topic, so that an unknown one is named in the error.
pub async fn partitions_of(
    cluster: &Arc<Cluster>,
    topics: &BTreeMap<String, Option<Vec<i32>>>,
) -> anyhow::Result<Vec<(String, i32)>> {
    let names: Vec<String> = topics.keys().cloned().collect();
    let mut keys = Vec::new();
    for name in &names {
        let (_, description) = cluster
            .describe_topic(name)
            .await
            .map_err(|e| anyhow::Error::new(e).context(about(name)))?;
        match &topics[name] {
            None => keys.extend(
                description
                    .partitions
                    .iter()
                    .map(|p| (name.clone(), p.partition)),
            ),
            Some(chosen) => {
                for p in chosen {
                    anyhow::ensure!(
                        description.partitions.iter().any(|d| d.partition == *p),
                        "{}: no partition {p} (the topic has {})",
                        about(name),
                        description.partitions.len()
                    );
                    keys.push((name.clone(), *p));
                }
            }
        }
    }
    Ok(keys)
}
