//! The cluster's section of the broker's settings: which controller voters there are,
//! the defaults of topics created through the controller, and the size of the
//! offsets topic.
//!
//! Without `controller_quorum_voters` the broker runs alone and nothing of the cluster
//! runs; with it, `node_id` (the broker section's) must be one of the voters.

use crate::controller::{parse_voters, Voter};
use serde::{Deserialize, Serialize};

/// `controller_quorum_voters` and `default_replication_factor`, as read from the flat
/// config file, `HEADWAY_*` variables and flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterSettings {
    /// `1@HOST:PORT,2@HOST:PORT,...` (Kafka's `controller.quorum.voters`); empty: no
    /// cluster, the broker runs alone.
    pub controller_quorum_voters: String,
    /// The replication factor of topics created with -1 (Kafka's
    /// `default.replication.factor`); unset: the smaller of 3 and the registered brokers.
    pub default_replication_factor: Option<i16>,
    /// Partitions of `__consumer_offsets` when the cluster creates it (Kafka's
    /// `offsets.topic.num.partitions`); unset: [`OFFSETS_TOPIC_PARTITIONS_DEFAULT`].
    pub offsets_topic_num_partitions: Option<i32>,
    /// Partitions of `__transaction_state` when the cluster creates it (Kafka's
    /// `transaction.state.log.num.partitions`); unset: [`OFFSETS_TOPIC_PARTITIONS_DEFAULT`].
    pub transaction_state_log_num_partitions: Option<i32>,
    /// Partitions of `__share_group_state` when the cluster creates it (Kafka's
    /// `share.coordinator.state.topic.num.partitions`); unset:
    /// [`OFFSETS_TOPIC_PARTITIONS_DEFAULT`].
    pub share_coordinator_state_topic_num_partitions: Option<i32>,
}

/// The partitions of a cluster's `__consumer_offsets` and `__transaction_state`: the
/// group and transaction coordinators are spread over this many leaders. Kafka's
/// default is 50; on small clusters each partition costs a replica on every broker,
/// so fewer.
pub const OFFSETS_TOPIC_PARTITIONS_DEFAULT: i32 = 12;
/// The most partitions `offsets_topic_num_partitions` (or
/// `transaction_state_log_num_partitions`) may ask for.
pub const OFFSETS_TOPIC_PARTITIONS_MAX: i32 = 1_000;

/// The voters and this node's place among them, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    pub node_id: u64,
    pub voters: Vec<Voter>,
}

impl ClusterSettings {
    /// `None` without voters (the broker runs alone); the checked membership with them.
    /// `node_id` is the broker's `--node-id`.
    pub fn membership(&self, node_id: i32) -> Result<Option<Membership>, String> {
        if self.controller_quorum_voters.trim().is_empty() {
            if self.offsets_topic_num_partitions.is_some() {
                return Err(
                    "offsets_topic_num_partitions needs controller_quorum_voters: a broker alone keeps one offsets log"
                        .into(),
                );
            }
            if self.transaction_state_log_num_partitions.is_some() {
                return Err(
                    "transaction_state_log_num_partitions needs controller_quorum_voters: a broker alone keeps one transaction log"
                        .into(),
                );
            }
            if self.share_coordinator_state_topic_num_partitions.is_some() {
                return Err(
                    "share_coordinator_state_topic_num_partitions needs controller_quorum_voters: a broker alone keeps one share state log"
                        .into(),
                );
            }
            if self.default_replication_factor.is_some() {
                return Err(
                    "default_replication_factor needs controller_quorum_voters: a broker alone keeps one copy"
                        .into(),
                );
            }
            return Ok(None);
        }
        let voters = parse_voters(&self.controller_quorum_voters)
            .map_err(|e| format!("controller_quorum_voters: {e}"))?;
        let id = u64::try_from(node_id)
            .map_err(|_| format!("node id {node_id} is negative; a voter's id is not"))?;
        if !voters.iter().any(|v| v.id == id) {
            let ids: Vec<String> = voters.iter().map(|v| v.id.to_string()).collect();
            return Err(format!(
                "node id {node_id} is not one of the controller voters ({}): every broker of a cluster is a voter",
                ids.join(", ")
            ));
        }
        if let Some(factor) = self.default_replication_factor {
            if factor < 1 {
                return Err(format!(
                    "default_replication_factor is at least 1, not {factor}"
                ));
            }
        }
        let counts = [
            (
                "offsets_topic_num_partitions",
                self.offsets_topic_num_partitions,
            ),
            (
                "transaction_state_log_num_partitions",
                self.transaction_state_log_num_partitions,
            ),
            (
                "share_coordinator_state_topic_num_partitions",
                self.share_coordinator_state_topic_num_partitions,
            ),
        ];
        for (key, n) in counts {
            if let Some(n) = n.filter(|n| !(1..=OFFSETS_TOPIC_PARTITIONS_MAX).contains(n)) {
                return Err(format!(
                    "{key} is 1 to {OFFSETS_TOPIC_PARTITIONS_MAX}, not {n}"
                ));
            }
        }
        Ok(Some(Membership {
            node_id: id,
            voters,
        }))
    }

    /// The partitions `__consumer_offsets` is created with.
    pub fn offsets_topic_partitions(&self) -> i32 {
        self.offsets_topic_num_partitions
            .unwrap_or(OFFSETS_TOPIC_PARTITIONS_DEFAULT)
    }

    /// The partitions `__transaction_state` is created with.
    pub fn transaction_state_partitions(&self) -> i32 {
        self.transaction_state_log_num_partitions
            .unwrap_or(OFFSETS_TOPIC_PARTITIONS_DEFAULT)
    }

    /// The partitions `__share_group_state` is created with.
    pub fn share_state_partitions(&self) -> i32 {
        self.share_coordinator_state_topic_num_partitions
            .unwrap_or(OFFSETS_TOPIC_PARTITIONS_DEFAULT)
    }

    /// The replication factor of a topic created with -1 when `registered` brokers are.
    pub fn replication_factor(&self, registered: usize) -> i16 {
        self.default_replication_factor
            .unwrap_or_else(|| i16::try_from(registered.clamp(1, 3)).unwrap_or(3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(voters: &str) -> ClusterSettings {
        ClusterSettings {
            controller_quorum_voters: voters.into(),
            ..ClusterSettings::default()
        }
    }

    #[test]
    fn no_voters_is_a_broker_alone() {
        assert_eq!(with("").membership(1), Ok(None));
        assert_eq!(with("  ").membership(7), Ok(None));
    }

    #[test]
    fn the_node_is_found_among_the_voters() {
        let m = with("1@a:9093,2@b:9093,3@c:9093")
            .membership(2)
            .unwrap()
            .unwrap();
        assert_eq!(m.node_id, 2);
        assert_eq!(m.voters.len(), 3);
        assert_eq!(m.voters[2].addr, "c:9093");
    }

    #[test]
    fn clear_errors() {
        let e = with("1@a:9093,2@b:9093").membership(3).unwrap_err();
        assert!(
            e.contains("node id 3 is not one of the controller voters (1, 2)"),
            "{e}"
        );
        let e = with("1@a:9093,2b:9093").membership(1).unwrap_err();
        assert!(e.starts_with("controller_quorum_voters: "), "{e}");
        assert!(e.contains("ID@HOST:PORT"), "{e}");
        let e = with("1@a").membership(1).unwrap_err();
        assert!(e.contains("HOST:PORT"), "{e}");
        let e = with("1@a:1,1@b:2").membership(1).unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let e = with("1@a:1").membership(-1).unwrap_err();
        assert!(e.contains("negative"), "{e}");
        let alone = ClusterSettings {
            controller_quorum_voters: String::new(),
            default_replication_factor: Some(3),
            ..ClusterSettings::default()
        };
        assert!(alone
            .membership(1)
            .unwrap_err()
            .contains("needs controller_quorum_voters"));
        let zero = ClusterSettings {
            controller_quorum_voters: "1@a:1".into(),
            default_replication_factor: Some(0),
            ..ClusterSettings::default()
        };
        assert!(zero.membership(1).unwrap_err().contains("at least 1"));
        let offsets_alone = ClusterSettings {
            offsets_topic_num_partitions: Some(12),
            ..ClusterSettings::default()
        };
        let e = offsets_alone.membership(1).unwrap_err();
        assert!(e.contains("offsets_topic_num_partitions needs"), "{e}");
        let none = ClusterSettings {
            controller_quorum_voters: "1@a:1".into(),
            offsets_topic_num_partitions: Some(0),
            ..ClusterSettings::default()
        };
        let e = none.membership(1).unwrap_err();
        assert!(e.contains("offsets_topic_num_partitions is 1 to"), "{e}");
        assert_eq!(with("1@a:1").offsets_topic_partitions(), 12);
    }

    #[test]
    fn the_default_replication_factor_is_at_most_three() {
        let s = with("1@a:1");
        assert_eq!(s.replication_factor(1), 1);
        assert_eq!(s.replication_factor(2), 2);
        assert_eq!(s.replication_factor(5), 3);
        assert_eq!(s.replication_factor(0), 1);
        let set = ClusterSettings {
            default_replication_factor: Some(2),
            ..s
        };
        assert_eq!(set.replication_factor(5), 2);
    }
}
