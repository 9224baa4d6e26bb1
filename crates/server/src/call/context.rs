//! What a handler is given: the broker-wide [`Ctx`] and the one request's [`Call`], and
//! the shape of a handler ([`Handler`]) as the registry (`crate::handlers`) lists it.
//!
//! A `Ctx` lives as long as the server and is shared by every connection (all of it is
//! thread-safe); a `Call` lives for one handler's synchronous part, on the connection's
//! reader (or a bulk thread, for a large produce).

use crate::authorizer::Authorizer;
use crate::call::connection::Connection;
use crate::call::reply::{HandlerError, Reply};
use crate::call::stats::ServerStats;
use crate::cluster::Cluster;
use crate::group_configs::GroupConfigStore;
use crate::sasl_settings::Sasl;
use headway_broker::{Broker, Partition};
use headway_group::GroupShards;
use headway_protocol::kafka_protocol::messages::ApiKey;
use headway_protocol::Request;
use headway_share::ShareCoordinator;
use headway_txn::TxnShards;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// What every handler can reach: the broker, the group and transaction coordinators,
/// and how clients reach this broker.
pub struct Ctx {
    pub broker: Arc<Broker>,
    /// The group coordinators: one on a broker alone, one per led partition of
    /// `__consumer_offsets` in a cluster.
    pub groups: Arc<GroupShards>,
    /// The transaction coordinators: one on a broker alone, one per led partition of
    /// `__transaction_state` in a cluster.
    pub txns: Arc<TxnShards>,
    /// Share groups: membership, share sessions and share-partition state.
    pub shares: Arc<ShareCoordinator>,
    /// Groups' own settings (the GROUP config resource), kept durably.
    pub group_configs: Arc<GroupConfigStore>,
    /// Becomes true when the broker shuts down; long polls end early.
    pub shutdown: watch::Receiver<bool>,
    /// Budgets and the open connections' state.
    pub stats: Arc<ServerStats>,
    /// ACLs, which every request is checked against (`crate::authorize`).
    pub authorizer: Arc<Authorizer>,
    /// SCRAM credentials and ACLs (`<data_dir>/security/`).
    pub security: Arc<headway_auth::store::SecurityStore>,
    /// SASL listeners' settings and counters.
    pub sasl: Sasl,
    /// In a cluster (`controller_quorum_voters`): the controller and its metadata;
    /// `None` for a broker alone.
    pub cluster: Option<Arc<Cluster>>,
    /// The remote tier's uploader, when `remote_storage_endpoint` is set.
    pub tier: Option<Arc<headway_tier::Tier>>,
}

impl Ctx {
    pub fn stats(&self) -> Arc<ServerStats> {
        Arc::clone(&self.stats)
    }
}

/// One request's handling: where it came from and when, besides the [`Ctx`].
pub struct Call<'a> {
    pub ctx: &'a Arc<Ctx>,
    /// The connection the request arrived on.
    pub conn: &'a Arc<Connection>,
    pub arrival: Arrival,
    /// Partitions a produce left past their unsynced bound: the connection reads
    /// nothing more until their syncs caught up
    /// ([`Partition::wait_unsynced_within_bound`]).
    pub hold: &'a mut Vec<Arc<Partition>>,
    /// Every API the broker serves, as the registry lists them (ApiVersions answers
    /// with it).
    pub served: &'static [Handler],
}

/// When a request arrived: its length prefix was read at `started`, its last byte
/// `read` later.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub started: Instant,
    pub read: Duration,
}

/// Resolves once the broker starts shutting down.
pub async fn shutting_down(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; drop it here, not in the caller.
    let _ = shutdown.wait_for(|down| *down).await;
}

/// A served API: its key, the versions served, and the function that handles it.
#[derive(Debug, Clone, Copy)]
pub struct Handler {
    pub key: ApiKey,
    pub min_version: i16,
    pub max_version: i16,
    pub handle: Handle,
}

/// A handler's synchronous part: it runs on the connection's reader, in request order,
/// and returns the reply (or a future of it).
pub type Handle = fn(&mut Call<'_>, &Request) -> Result<Reply, HandlerError>;

impl Handler {
    pub fn serves(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}
