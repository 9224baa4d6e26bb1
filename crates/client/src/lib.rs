//! A lean async Kafka client, used by the `headway` CLI and the benchmark lab. It works
//! against headway and against any Kafka broker.
//!
//! - [`Cluster`]: bootstrap, metadata, leader lookup, shared connections, retries.
//! - [`Producer`]: batches records per partition and stripes batches over *lanes*
//!   (connections with a bounded in-flight window each). With deflect-when-full, a
//!   batch whose lane is full goes to the next lane with room; the producer waits only
//!   when every lane is full. Each lane counts its full events and waits.
//! - [`Consumer`]: reads assigned partitions through a credit window: at most
//!   `window_bytes` fetched and not yet consumed, refilled when what is left falls to
//!   `refill_threshold_bytes`, by `refill_increment_bytes` at a time; each partition
//!   leader's fetcher owns an equal share of the window, so none starves another.
//! - [`admin`]: topics, configs, offsets by time, group offset resets and deletes, and
//!   the cluster's brokers, for operators' tools.
//! - [`security`]: SCRAM users and ACLs, for operators' tools.
//! - [`transport`]: TLS and SASL on the client's connections.

pub mod admin;
pub mod cluster;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod group_consumer;
pub mod groups;
pub mod partitioner;
pub mod producer;
pub mod security;
pub mod transport;

pub use admin::{
    BrokerDescription, ClusterDescription, ClusterMetadata, ConfigChange, ConfigEntry,
    ConfigResource, CreatedTopic, NewTopic, OffsetReset, OffsetSpec, PartitionDescription,
    TopicDescription,
};
pub use cluster::{ClientConfig, Cluster, EARLIEST, LATEST};
pub use consumer::{ConsumedRecord, Consumer, ConsumerConfig, StartOffset, WindowState};
pub use error::ClientError;
pub use group_consumer::{GroupConfig, GroupConsumer};
pub use groups::{
    ConsumerGroupDescription, ConsumerMemberDescription, GroupDescription, GroupListing,
    GroupMemberDescription, ShareGroupDescription, ShareMemberDescription, SharePartitionOffset,
    SharePartitionStats, SHARE_PARTITION_STATS_TAG,
};
pub use kafka_protocol::records::Compression;
pub use producer::{Delivery, LaneStats, Producer, ProducerConfig, ProducerStats, Record};
pub use security::{AclEntry, ScramAlteration, ScramCredentialInfo};
pub use transport::{Plain, SaslExchange, SaslMechanism, SaslStep, Security, Tls};
