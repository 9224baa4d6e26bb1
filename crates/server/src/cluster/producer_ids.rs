//! Producer ids in a cluster: blocks handed out by the controller (`AllocateProducerIds`,
//! as Kafka's brokers ask theirs), so no two brokers give the same id to two producers.
//! A broker alone hands out ids from its own durable counter instead
//! (`headway_broker::producer_ids`).
//!
//! Two producers with one id would look like one to every partition leader: the
//! second's first batch (sequence 0) would be answered as a retry of the first's, and
//! acknowledged without being written.

use super::Cluster;
use headway_base::ProducerId;
use headway_controller::{Command, Outcome};
use headway_txn::{ProducerIdSource, TxnError};
use std::sync::{Mutex, OnceLock, Weak};
use std::time::Duration;

/// Ids asked of the controller at a time (Kafka's block size).
const BLOCK: i32 = 1_000;
/// How long one allocation waits for the controller's decision.
const DECISION_WAIT: Duration = Duration::from_secs(15);

/// The producer-id source of a broker in a cluster; attached to the cluster once it
/// has started (the transaction coordinator opens before it).
pub struct ClusterProducerIds {
    cluster: OnceLock<Weak<Cluster>>,
    runtime: tokio::runtime::Handle,
    /// The block in use: the next id and the end (exclusive).
    block: Mutex<(i64, i64)>,
}

impl ClusterProducerIds {
    /// `runtime` is the one the controller runs on.
    pub fn new(runtime: tokio::runtime::Handle) -> ClusterProducerIds {
        ClusterProducerIds {
            cluster: OnceLock::new(),
            runtime,
            block: Mutex::new((0, 0)),
        }
    }

    pub fn attach(&self, cluster: Weak<Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// A new block from the controller, for this broker's current registration.
    fn next_block(&self) -> Result<(i64, i64), TxnError> {
        let cluster = self
            .cluster
            .get()
            .and_then(Weak::upgrade)
            .ok_or(TxnError::CoordinatorNotAvailable)?;
        let image = cluster.image();
        let me = image
            .metadata
            .brokers
            .get(&cluster.node_id())
            .filter(|b| b.incarnation == cluster.incarnation)
            .ok_or(TxnError::CoordinatorNotAvailable)?;
        let command = Command::AllocateProducerIds {
            broker: cluster.node_id(),
            broker_epoch: me.epoch,
            count: BLOCK,
        };
        let decided = self
            .runtime
            .block_on(async { tokio::time::timeout(DECISION_WAIT, cluster.decide(command)).await });
        match decided {
            Ok(Ok(Outcome::ProducerIds { first, count })) => {
                tracing::info!(first, count, "producer-id block from the controller");
                Ok((first, first + i64::from(count)))
            }
            other => {
                tracing::warn!(outcome = ?other.map(|r| r.map(|o| o.to_string())),
                    "no producer-id block from the controller");
                Err(TxnError::CoordinatorNotAvailable)
            }
        }
    }
}

impl ProducerIdSource for ClusterProducerIds {
    /// Blocks while a new block is decided (the coordinator calls it on a blocking
    /// thread).
    fn allocate(&self) -> Result<ProducerId, TxnError> {
        let mut block = self.block.lock().expect("producer-id block lock");
        if block.0 >= block.1 {
            *block = self.next_block()?;
        }
        let id = block.0;
        block.0 += 1;
        Ok(ProducerId::new(id))
    }
}
