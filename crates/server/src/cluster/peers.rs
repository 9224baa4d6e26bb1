//! Requests this broker sends the others: for a transaction, a produce's or a
//! transactional offset commit's check to the coordinator of its transactional id
//! (AddPartitionsToTxn in the batched form Kafka's brokers send, v4+) and its markers
//! to the leaders of its partitions (WriteTxnMarkers); for a share group, the
//! share-partitions' state to and from the leaders of `__share_group_state`
//! (ReadShareGroupState, WriteShareGroupState).
//!
//! One connection per broker, on its replication endpoint, opened at first use and
//! again once it has closed; a broker that cannot be reached costs only the requests
//! sent to it (each waits on its own broker's connection).

use super::roles::fetch_address;
use headway_client::connection::Connection;
use headway_client::transport::Security;
use headway_controller::{BrokerId, Metadata};
use headway_protocol::kafka_protocol::protocol::Request;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long connecting, and each request, may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests in flight on one connection to a broker (its handlers of these requests
/// start each at once, so they overlap there).
const PEER_IN_FLIGHT_MAX: usize = 64;

type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

pub struct Peers {
    me: BrokerId,
    security: Security,
    connections: Mutex<HashMap<BrokerId, Slot>>,
}

impl Peers {
    pub fn new(me: BrokerId, security: Security) -> Peers {
        Peers {
            me,
            security,
            connections: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `request` to broker `to` (its address from `meta`) and waits for the
    /// answer; a failure is described for the log and the retry.
    pub async fn call<R: Request>(
        &self,
        meta: &Metadata,
        to: BrokerId,
        request: &R,
    ) -> Result<R::Response, String> {
        let slot = {
            let mut all = self.connections.lock().expect("peer connections lock");
            Arc::clone(all.entry(to).or_default())
        };
        let connection = {
            let mut held = slot.lock().await;
            match held.as_ref().filter(|c| !c.is_closed()) {
                Some(c) => Arc::clone(c),
                None => {
                    let address = fetch_address(meta, to)
                        .ok_or_else(|| format!("broker {to} has no plaintext endpoint"))?;
                    let client_id = format!("headway-broker-{}", self.me);
                    let opened = Connection::connect(
                        &address,
                        &client_id,
                        PEER_IN_FLIGHT_MAX,
                        PEER_TIMEOUT,
                        &self.security,
                    )
                    .await
                    .map_err(|e| format!("broker {to} at {address}: {e}"))?;
                    let opened = Arc::new(opened);
                    *held = Some(Arc::clone(&opened));
                    opened
                }
            }
        };
        let answer = tokio::time::timeout(PEER_TIMEOUT, connection.request(request)).await;
        match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(format!("broker {to}: {e}")),
            Err(_) => Err(format!(
                "broker {to}: no answer in {} s",
                PEER_TIMEOUT.as_secs()
            )),
        }
    }
}
