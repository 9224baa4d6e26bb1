//! The client's view of a cluster: bootstrap, brokers, topic metadata, and one shared
//! connection per broker (reconnected with backoff when it breaks).
//!
//! Lanes of a producer open their own connections with [`Cluster::open_connection`];
//! everything else shares the cached ones.

use crate::connection::Connection;
use crate::error::{check, ClientError};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings shared by every part of the client.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub client_id: String,
    /// How long one request may wait for its answer.
    pub request_timeout: Duration,
    /// First pause before a retry; doubles up to `retry_backoff_max`.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Attempts for an operation that fails with a retriable error.
    pub retries: u32,
    /// Requests in flight on a shared connection.
    pub in_flight_max: usize,
    /// TLS and SASL, for every connection (`crate::transport`).
    pub security: crate::transport::Security,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            client_id: "headway-client".into(),
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            retries: 10,
            in_flight_max: 64,
            security: Default::default(),
        }
    }
}

/// Earliest and latest, as ListOffsets spells them.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

#[derive(Debug, Clone)]
pub struct TopicMetadata {
    pub name: String,
    /// Leader node id of each partition, by partition index.
    pub leaders: Vec<i32>,
}

pub struct Cluster {
    config: ClientConfig,
    bootstrap: Vec<String>,
    brokers: Mutex<HashMap<i32, String>>,
    topics: Mutex<HashMap<String, TopicMetadata>>,
    connections: tokio::sync::Mutex<HashMap<String, Arc<Connection>>>,
}

impl Cluster {
    /// Connects to the first reachable bootstrap address (comma-separated list).
    pub async fn connect(
        bootstrap: &str,
        config: ClientConfig,
    ) -> Result<Arc<Cluster>, ClientError> {
        let bootstrap: Vec<String> = bootstrap
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if bootstrap.is_empty() {
            return Err(ClientError::Invalid("no bootstrap address".into()));
        }
        let cluster = Arc::new(Cluster {
            config,
            bootstrap,
            brokers: Mutex::new(HashMap::new()),
            topics: Mutex::new(HashMap::new()),
            connections: tokio::sync::Mutex::new(HashMap::new()),
        });
        cluster.refresh(&[]).await?;
        Ok(cluster)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Runs `op` until it succeeds, fails with a non-retriable error, or runs out of
    /// attempts, with exponential backoff between attempts.
    pub async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut backoff = self.config.retry_backoff;
        let mut attempt = 1;
        loop {
            match op().await {
                Err(e) if e.is_retriable() && attempt < self.config.retries => {
                    tracing::debug!(error = %e, attempt, "retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.config.retry_backoff_max);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// A shared connection to `addr`, reconnecting if the cached one broke.
    pub async fn connection(&self, addr: &str) -> Result<Arc<Connection>, ClientError> {
        let mut connections = self.connections.lock().await;
        if let Some(c) = connections.get(addr).filter(|c| !c.is_closed()) {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(
            self.open_connection(addr, self.config.in_flight_max)
                .await?,
        );
        connections.insert(addr.to_string(), Arc::clone(&c));
        Ok(c)
    }

    /// A new connection of its own (a producer lane), with its own in-flight window.
    pub async fn open_connection(
        &self,
        addr: &str,
        in_flight_max: usize,
    ) -> Result<Connection, ClientError> {
        Connection::connect(
            addr,
            &self.config.client_id,
            in_flight_max,
            self.config.request_timeout,
            &self.config.security,
        )
        .await
    }

    /// Any broker's shared connection, trying known brokers, then the bootstrap list.
    pub async fn any_broker(&self) -> Result<Arc<Connection>, ClientError> {
        self.any_connection().await
    }

    async fn any_connection(&self) -> Result<Arc<Connection>, ClientError> {
        let mut candidates = self.broker_addrs();
        candidates.extend(self.bootstrap.iter().cloned());
        let mut last = ClientError::Invalid("no broker address".into());
        for addr in candidates {
            match self.connection(&addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Every known broker's address (as the last Metadata named them), in order.
    pub fn broker_addrs(&self) -> Vec<String> {
        let mut addrs: Vec<String> = self
            .brokers
            .lock()
            .expect("brokers lock")
            .values()
            .cloned()
            .collect();
        addrs.sort();
        addrs
    }

    pub fn broker_addr(&self, node_id: i32) -> Option<String> {
        self.brokers
            .lock()
            .expect("brokers lock")
            .get(&node_id)
            .cloned()
    }

    /// Refreshes brokers and the given topics (all brokers, no topics when empty).
    pub async fn refresh(&self, topics: &[&str]) -> Result<(), ClientError> {
        self.retry(|| self.refresh_once(topics)).await
    }

    async fn refresh_once(&self, topics: &[&str]) -> Result<(), ClientError> {
        let connection = self.any_connection().await?;
        let request = MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(true);
        let response = connection.request(&request).await?;
        let brokers: HashMap<i32, String> = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        *self.brokers.lock().expect("brokers lock") = brokers;
        for topic in response.topics {
            let name = topic.name.map(|n| n.to_string()).unwrap_or_default();
            if topic.error_code != 0 {
                if topics.contains(&name.as_str()) {
                    check(topic.error_code, Some(&name))?;
                }
                continue;
            }
            let mut partitions = topic.partitions;
            partitions.sort_by_key(|p| p.partition_index);
            if let Some(p) = partitions
                .iter()
                .find(|p| p.error_code != 0 || p.leader_id.0 < 0)
            {
                let code = if p.error_code != 0 {
                    p.error_code
                } else {
                    ResponseError::LeaderNotAvailable.code()
                };
                return Err(ClientError::from_code(code, Some(name)));
            }
            let leaders = partitions.iter().map(|p| p.leader_id.0).collect();
            self.topics
                .lock()
                .expect("topics lock")
                .insert(name.clone(), TopicMetadata { name, leaders });
        }
        Ok(())
    }

    /// The topic's metadata, fetched (and auto-created where the broker allows) if unknown.
    pub async fn topic(&self, name: &str) -> Result<TopicMetadata, ClientError> {
        if let Some(t) = self.topics.lock().expect("topics lock").get(name) {
            return Ok(t.clone());
        }
        self.refresh(&[name]).await?;
        self.topics
            .lock()
            .expect("topics lock")
            .get(name)
            .cloned()
            .ok_or_else(|| ClientError::UnknownTopic(name.to_string()))
    }

    /// The shared connection to the leader of a partition.
    pub async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(i32, Arc<Connection>), ClientError> {
        let meta = self.topic(topic).await?;
        let node = *meta
            .leaders
            .get(partition as usize)
            .ok_or_else(|| ClientError::UnknownTopic(format!("{topic}/{partition}")))?;
        let addr = self.broker_addr(node).ok_or_else(|| {
            ClientError::from_code(ResponseError::LeaderNotAvailable.code(), None)
        })?;
        Ok((node, self.connection(&addr).await?))
    }

    /// Forgets a topic's metadata so the next use fetches it again (after a leader error).
    pub fn invalidate(&self, topic: &str) {
        self.topics.lock().expect("topics lock").remove(topic);
    }

    /// The offset for `timestamp` ([`EARLIEST`], [`LATEST`] or milliseconds).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<i64, ClientError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(timestamp)])]);
        let response = self
            .retry(|| async {
                let (_, connection) = self.leader(topic, partition).await?;
                let response = connection.request(&request).await?;
                let p = response
                    .topics
                    .first()
                    .and_then(|t| t.partitions.first())
                    .ok_or_else(|| ClientError::Protocol("empty ListOffsets answer".into()))?;
                if let Err(e) = check(p.error_code, None) {
                    self.invalidate(topic);
                    return Err(e);
                }
                Ok(p.offset)
            })
            .await?;
        Ok(response)
    }
}
