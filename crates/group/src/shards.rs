//! The group coordinators of a broker ([`GroupShards`]): one for every group on a broker
//! alone; in a cluster one per partition of `__consumer_offsets` this broker leads
//! (`headway_broker::coordinator_shards` has the rule). Handlers ask [`GroupShards::of`]
//! for a group's coordinator and answer `NOT_COORDINATOR` or
//! `COORDINATOR_LOAD_IN_PROGRESS` when this broker has none.
//!
//! What the broker sets for every coordinator (where classic members of consumer
//! groups read the topics, each group's own timings from its GROUP config) is kept
//! here and given to each coordinator as it is loaded.

use crate::coordinator::GroupCoordinator;
use crate::state::{ConsumerOverrides, GroupConfig};
use crate::{GroupError, GroupSummary, TopicsSource};
use headway_base::ProducerId;
use headway_broker::coordinator_shards::{Shards, ToLoad, Unserved};
use headway_broker::{BrokerError, Partition};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct GroupShards {
    shards: Shards<GroupCoordinator>,
    config: GroupConfig,
    topics: Mutex<Option<TopicsSource>>,
    overrides: Mutex<HashMap<String, ConsumerOverrides>>,
}

impl From<Unserved> for GroupError {
    fn from(u: Unserved) -> GroupError {
        match u {
            Unserved::NotCoordinator => GroupError::NotCoordinator,
            Unserved::Loading => GroupError::CoordinatorLoadInProgress,
        }
    }
}

impl GroupShards {
    /// A broker alone: `coordinator` serves every group.
    pub fn alone(coordinator: Arc<GroupCoordinator>, config: GroupConfig) -> GroupShards {
        Self::new(Shards::alone(coordinator), config)
    }

    /// A broker in a cluster: groups are served once their partitions are loaded.
    pub fn clustered(config: GroupConfig) -> GroupShards {
        Self::new(Shards::clustered(), config)
    }

    fn new(shards: Shards<GroupCoordinator>, config: GroupConfig) -> GroupShards {
        GroupShards {
            shards,
            config,
            topics: Mutex::new(None),
            overrides: Mutex::new(HashMap::new()),
        }
    }

    pub fn is_clustered(&self) -> bool {
        self.shards.is_clustered()
    }

    /// The coordinator of `group_id` on this broker.
    pub fn of(&self, group_id: &str) -> Result<Arc<GroupCoordinator>, GroupError> {
        Ok(self.shards.of(group_id)?)
    }

    /// The partition of `__consumer_offsets` that holds `group_id` (where a
    /// transaction's offsets for it are marked); `None` while a cluster has no such
    /// topic yet.
    pub fn partition_of(&self, group_id: &str) -> Option<i32> {
        self.shards.partition_of(group_id)
    }

    /// The broker's heartbeat interval for consumer-protocol groups.
    pub fn default_heartbeat_interval_ms(&self) -> i32 {
        self.config.consumer_heartbeat_interval_ms
    }

    /// Every coordinator serving here now.
    pub fn all(&self) -> Vec<Arc<GroupCoordinator>> {
        self.shards.all()
    }

    /// See [`Shards::follow`].
    pub fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        self.shards.follow(partitions, leading)
    }

    /// Replays `log`, the partition `what` names, and serves its groups from then on.
    pub async fn load(&self, what: ToLoad, log: Arc<Partition>) -> Result<bool, BrokerError> {
        let coordinator = match GroupCoordinator::serve(log, self.config.clone(), what.epoch).await
        {
            Ok(c) => c,
            Err(e) => {
                self.shards.load_failed(what);
                return Err(e);
            }
        };
        if let Some(topics) = self.topics.lock().expect("topics source lock").clone() {
            coordinator.set_topics_source(topics);
        }
        for (group_id, overrides) in self.overrides.lock().expect("overrides lock").iter() {
            coordinator.set_consumer_overrides(group_id, *overrides);
        }
        Ok(self.shards.loaded(what, coordinator))
    }

    /// A load that did not finish; asked for again at the next [`GroupShards::follow`].
    pub fn load_failed(&self, what: ToLoad) {
        self.shards.load_failed(what);
    }

    /// Retires every coordinator of a cluster (the broker stops).
    pub fn retire_all(&self) {
        self.shards.retire_all();
    }

    /// Where classic members of consumer groups read the broker's topics.
    pub fn set_topics_source(&self, source: TopicsSource) {
        *self.topics.lock().expect("topics source lock") = Some(source.clone());
        for c in self.all() {
            c.set_topics_source(source.clone());
        }
    }

    /// A group's own timings, for its coordinator now and whichever loads it later.
    /// Kept only for groups with settings of their own, so the map is as bounded as the
    /// GROUP config store it mirrors.
    pub fn set_consumer_overrides(&self, group_id: &str, overrides: ConsumerOverrides) {
        let mut kept = self.overrides.lock().expect("overrides lock");
        if overrides == ConsumerOverrides::default() {
            kept.remove(group_id);
        } else {
            kept.insert(group_id.to_string(), overrides);
        }
        drop(kept);
        if let Ok(c) = self.of(group_id) {
            c.set_consumer_overrides(group_id, overrides);
        }
    }

    /// The groups of every coordinator here, by id (ListGroups asks each broker).
    pub fn list(&self) -> Vec<GroupSummary> {
        let mut all: Vec<GroupSummary> = self.all().iter().flat_map(|c| c.list()).collect();
        all.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        all
    }

    /// Whether this broker's coordinator of `group_id` knows the group.
    pub fn group_exists(&self, group_id: &str) -> bool {
        self.of(group_id).is_ok_and(|c| c.group_exists(group_id))
    }

    /// Ends the transaction of `producer_id` for the offsets it holds in the
    /// coordinator of partition `index` of `__consumer_offsets` (the marker a
    /// transaction writes there); `NOT_COORDINATOR` when this broker does not serve it.
    pub async fn end_transaction(
        &self,
        index: i32,
        producer_id: ProducerId,
        commit: bool,
    ) -> Result<(), GroupError> {
        let coordinator = self.shards.at(index)?;
        coordinator.end_transaction(producer_id, commit).await
    }

    /// Closes a broker alone's offsets log; retires a cluster's coordinators.
    pub fn close(&self) {
        if self.is_clustered() {
            self.retire_all();
        } else {
            for c in self.all() {
                c.close();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_are_kept_only_for_groups_with_settings_of_their_own() {
        let shards = GroupShards::clustered(GroupConfig::default());
        let own = ConsumerOverrides {
            session_timeout_ms: Some(20_000),
            ..ConsumerOverrides::default()
        };
        shards.set_consumer_overrides("a", own);
        shards.set_consumer_overrides("b", own);
        assert_eq!(shards.overrides.lock().unwrap().len(), 2);
        // Settings deleted: the group's entry goes, so the map never outgrows the store.
        shards.set_consumer_overrides("a", ConsumerOverrides::default());
        let kept = shards.overrides.lock().unwrap();
        assert_eq!(kept.keys().collect::<Vec<_>>(), vec!["b"]);
    }
}
