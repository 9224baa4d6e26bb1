//! `headway cluster info|config`: the brokers of any Kafka-compatible cluster and a
//! broker's settings.

use crate::output::row;
use crate::output::{self, configs_table, or_dash, table, AdminArgs, Format};
use clap::{Args, Subcommand};
use headway_client::{Cluster, ConfigEntry, ConfigResource};
use serde::Serialize;
use std::sync::Arc;

#[derive(Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// The cluster id, the controller and every broker.
    Info,
    /// A broker's settings, with where each value comes from.
    Config {
        /// The broker's node id [default: the lowest].
        #[arg(long)]
        broker: Option<i32>,
    },
}

pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let cluster = args.admin.connect().await?;
    let format = args.admin.format;
    match args.command {
        ClusterCommand::Info => info(&cluster, format).await,
        ClusterCommand::Config { broker } => config(&cluster, format, broker).await,
    }
}

async fn info(cluster: &Arc<Cluster>, format: Format) -> anyhow::Result<()> {
    let description = cluster.describe_cluster().await?;
    output::print(format, &description, |out| {
        writeln!(
            out,
            "cluster {}, controller {}",
            or_dash(description.cluster_id.as_deref()),
            description.controller_id
        )?;
        writeln!(out)?;
        let mut rows = vec![row!["ID", "HOST", "PORT", "RACK"]];
        for b in &description.brokers {
            rows.push(row![b.node_id, b.host, b.port, or_dash(b.rack.as_deref())]);
        }
        table(out, &rows)
    })
}

async fn config(cluster: &Arc<Cluster>, format: Format, broker: Option<i32>) -> anyhow::Result<()> {
    let broker_id = match broker {
        Some(id) => id,
        None => cluster
            .describe_cluster()
            .await?
            .brokers
            .first()
            .map(|b| b.node_id)
            .ok_or_else(|| anyhow::anyhow!("the cluster lists no broker"))?,
    };
    let configs = cluster
        .describe_configs(ConfigResource::Broker, &broker_id.to_string())
        .await
        .map_err(|e| anyhow::Error::new(e).context(format!("broker {broker_id}")))?;
    #[derive(Serialize)]
    struct BrokerConfigs<'a> {
        broker_id: i32,
        configs: &'a [ConfigEntry],
    }
    let value = BrokerConfigs {
        broker_id,
        configs: &configs,
    };
    output::print(format, &value, |out| configs_table(out, &configs))
}
