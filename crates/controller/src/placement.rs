//! Where a new partition's replicas go.
//!
//! Replicas are placed on a ring of the available brokers (sorted by id): partition `p`
//! of a topic starting at ring position `start` has its preferred leader at
//! `start + p` and its followers on the brokers after it, so the leaders of a topic's
//! partitions spread over every broker, and a topic placed at the next start spreads its
//! first leaders differently again. The proposer picks `start` (the controller uses the
//! number of topics so far), so placement is a plain function of its inputs.

use crate::metadata::BrokerId;
use headway_base::limits;
use kafka_protocol::ResponseError;

/// Why replicas could not be placed: Kafka's error code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementError {
    pub code: i16,
    pub message: String,
}

/// The replicas of `partitions` new partitions, numbered from `first_partition`, each with
/// `replication_factor` distinct brokers out of `brokers`.
pub fn place(
    brokers: &[BrokerId],
    first_partition: i32,
    partitions: i32,
    replication_factor: i16,
    start: usize,
) -> Result<Vec<Vec<BrokerId>>, PlacementError> {
    let most = limits::PARTITIONS_PER_TOPIC_MAX;
    if partitions < 1 || partitions > most || first_partition.saturating_add(partitions) > most {
        return Err(PlacementError {
            code: ResponseError::InvalidPartitions.code(),
            message: format!(
                "a topic has 1 to {most} partitions; {partitions} more after {first_partition} is not that"
            ),
        });
    }
    let mut ring = brokers.to_vec();
    ring.sort_unstable();
    ring.dedup();
    let n = ring.len();
    let factor = usize::try_from(replication_factor).unwrap_or(0);
    if factor < 1 || factor > n {
        return Err(PlacementError {
            code: ResponseError::InvalidReplicationFactor.code(),
            message: format!(
                "replication factor {replication_factor} needs that many available brokers; {n} are available"
            ),
        });
    }
    let first = usize::try_from(first_partition).unwrap_or(0);
    Ok((0..usize::try_from(partitions).unwrap_or(0))
        .map(|p| {
            let leader = start + first + p;
            (0..factor).map(|j| ring[(leader + j) % n]).collect()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaders_spread_over_every_broker_and_replicas_are_distinct() {
        let placed = place(&[3, 1, 2], 0, 6, 3, 0).unwrap();
        assert_eq!(placed.len(), 6);
        let leaders: Vec<BrokerId> = placed.iter().map(|r| r[0]).collect();
        for broker in [1, 2, 3] {
            assert_eq!(leaders.iter().filter(|l| **l == broker).count(), 2);
        }
        for replicas in &placed {
            let mut sorted = replicas.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 3, "{replicas:?}");
        }
    }

    #[test]
    fn a_later_start_moves_the_first_leader() {
        let a = place(&[1, 2, 3], 0, 1, 1, 0).unwrap();
        let b = place(&[1, 2, 3], 0, 1, 1, 1).unwrap();
        assert_ne!(a[0][0], b[0][0]);
    }

    #[test]
    fn more_replicas_than_brokers_is_refused_with_kafkas_code() {
        let error = place(&[1, 2], 0, 1, 3, 0).unwrap_err();
        assert_eq!(error.code, ResponseError::InvalidReplicationFactor.code());
        let error = place(&[1, 2], 0, 0, 1, 0).unwrap_err();
        assert_eq!(error.code, ResponseError::InvalidPartitions.code());
        let error = place(&[1, 2], 0, i32::MAX, 1, 0).unwrap_err();
        assert_eq!(
            error.code,
            ResponseError::InvalidPartitions.code(),
            "bounded"
        );
        let error = place(&[1, 1, 1], 0, 1, 2, 0).unwrap_err();
        assert_eq!(
            error.code,
            ResponseError::InvalidReplicationFactor.code(),
            "one broker, named thrice"
        );
    }
}
