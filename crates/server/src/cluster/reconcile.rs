//! Keeps the broker's local topics in step with the controller's image.
//!
//! On every change of the image (and once a second, to retry what failed), for each
//! topic of the image with a partition this broker is a replica of:
//! - the topic is created locally under the image's id if missing, grown if it has
//!   fewer partitions, or replaced if the local one has another id (deleted and created
//!   again while this broker was away);
//! - each of its partitions this broker is a replica of takes its role through
//!   `roles::apply_partition_state` when its record changed (leader, or follower
//!   copying from its leader).
//!
//! Local topics the image does not hold are deleted: a cluster's data directory holds
//! the cluster's topics only.
//!
//! The registry creates whole topics, so a broker that is a replica of only some of a
//! topic's partitions still creates every partition directory (empty, with its open
//! files); only the ones it is a replica of are served.
//!
//! Nothing is done before the image holds this broker's own registration: an image
//! that old may not know of topics created since.

use super::roles::apply_partition_state;
use crate::replica_fetcher::ReplicaFetchers;
use headway_base::PartitionIndex;
use headway_broker::Broker;
use headway_controller::metadata::PartitionRecord;
use headway_controller::{BrokerId, Image, Metadata};
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// How often the reconciler looks again without a change (retries of failed creates).
const RETRY: Duration = Duration::from_secs(1);

/// The reconciler's state: the partition records it last applied.
pub struct Reconciler {
    broker: Weak<Broker>,
    node_id: BrokerId,
    incarnation: uuid::Uuid,
    image: watch::Receiver<Arc<Image>>,
    applied: HashMap<(String, i32), PartitionRecord>,
    fetchers: Arc<ReplicaFetchers>,
}

impl Reconciler {
    pub fn new(
        broker: Weak<Broker>,
        node_id: BrokerId,
        incarnation: uuid::Uuid,
        image: watch::Receiver<Arc<Image>>,
        fetchers: Arc<ReplicaFetchers>,
    ) -> Reconciler {
        Reconciler {
            broker,
            node_id,
            incarnation,
            image,
            applied: HashMap::new(),
            fetchers,
        }
    }

    /// Runs until the broker is gone.
    pub async fn run(mut self, mut registered: watch::Receiver<bool>) {
        if registered.wait_for(|r| *r).await.is_err() {
            return;
        }
        loop {
            let image = Arc::clone(&self.image.borrow_and_update());
            let current = image
                .metadata
                .brokers
                .get(&self.node_id)
                .is_some_and(|b| b.incarnation == self.incarnation);
            if current {
                let Some(broker) = self.broker.upgrade() else {
                    return;
                };
                self.reconcile(&broker, &image.metadata).await;
            }
            if let Ok(Err(_)) = tokio::time::timeout(RETRY, self.image.changed()).await {
                return;
            }
        }
    }

    async fn reconcile(&mut self, broker: &Broker, meta: &Metadata) {
        for (name, topic) in &meta.topics {
            let mine: Vec<usize> = topic
                .partitions
                .iter()
                .enumerate()
                .filter(|(_, p)| p.replicas.contains(&self.node_id))
                .map(|(i, _)| i)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
            let local = match broker.topic(name) {
                Some(local) if local.id() != topic.id => {
                    tracing::info!(topic = %name, "replacing a local topic the cluster created again");
                    if let Err(e) = broker.delete_topic(name).await {
                        tracing::warn!(topic = %name, error = %e, "deleting the old local topic");
                        continue;
                    }
                    None
                }
                other => other,
            };
            let created = match local {
                None => broker
                    .create_topic_with_id(name, Some(topic.id), Some(count), topic.configs.clone())
                    .await
                    .map(|_| ()),
                Some(local) if (local.partitions().len() as i32) < count => {
                    broker.add_partitions(name, count, false).await
                }
                Some(_) => Ok(()),
            };
            if let Err(e) = created {
                tracing::warn!(topic = %name, error = %e, "creating the cluster's topic here; retrying");
                continue;
            }
            for index in mine {
                let state = &topic.partitions[index];
                let index = i32::try_from(index).unwrap_or(i32::MAX);
                let key = (name.clone(), index);
                if self.applied.get(&key) == Some(state) {
                    continue;
                }
                if let Ok(partition) = broker.partition(name, PartitionIndex::new(index)) {
                    let (me, clock) = (self.node_id, broker.clock());
                    apply_partition_state(me, &partition, state, meta, &self.fetchers, clock).await;
                    self.applied.insert(key, state.clone());
                }
            }
        }
        let gone: Vec<String> = broker
            .topics()
            .iter()
            .filter(|t| !meta.topics.contains_key(t.name()))
            .map(|t| t.name().to_string())
            .collect();
        for name in gone {
            self.fetchers.unfollow_topic(&name);
            match broker.delete_topic(&name).await {
                Ok(()) => {
                    tracing::info!(topic = %name, "deleted here: the cluster holds no such topic")
                }
                Err(e) => {
                    tracing::warn!(topic = %name, error = %e, "deleting a topic the cluster deleted")
                }
            }
            self.applied.retain(|(topic, _), _| *topic != name);
        }
    }
}
