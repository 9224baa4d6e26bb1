//! The follower side of replication: one fetcher task per leader broker copies the
//! partitions this broker follows from it, as Kafka's replica fetchers do
//! (`docs/cluster.md`).
//!
//! ```text
//!   ReplicaFetchers::follow(partition, leader, address)
//!     └── one Fetcher per leader broker: its own connection, one Fetch at a time
//!           round: every followed partition whose log is synced to its end
//!                  (Partition::fetch_position) -> one Fetch with this broker's
//!                  replica id, each partition at its log end with its last epoch
//!           answer: batches -> Partition::append_as_follower (a blocking thread),
//!                   diverging epoch -> Partition::truncate_diverging,
//!                   out of range -> start over at the leader's log start, or cut
//!                   to the high watermark; leader errors -> the partition rests
//!                   until the controller's metadata moves it
//! ```
//!
//! A follower fetches an offset only once everything before it is synced on its own
//! disk, so its fetch offset tells the leader its durable end: the leader's high
//! watermark, and so acks=all, counts only what the in-sync replicas synced. A round
//! waits for partitions still syncing what the last one brought, up to
//! `REPLICA_FETCH_SYNC_GRACE_MS` (their next fetch is what an acks=all produce waits
//! for); one still syncing after that is left out and joins the next round, which the
//! leader then holds only `REPLICA_FETCH_WAIT_SYNCING_MS`. Otherwise the leader holds a
//! Fetch with nothing new for up to `REPLICA_FETCH_WAIT_MS` and answers it at its next
//! append, so a caught-up follower costs one waiting request per leader, not a busy
//! loop.
//!
//! Replication has its own connections: a follower's fetches never queue behind a
//! client's requests on a shared socket, and the leader serves them on the read
//! threads when they reach cold data (catch-up is bulk work there).

use headway_base::{limits, Offset, PartitionIndex};
use headway_broker::partition::role::{FetchPosition, ReplicaId};
use headway_broker::{BrokerError, Partition};
use headway_client::connection::Connection;
use headway_client::transport::Security;
use headway_log::leader_epochs::UNDEFINED_EPOCH;
use headway_protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use headway_protocol::kafka_protocol::messages::fetch_response::PartitionData;
use headway_protocol::kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

/// A followed partition, by topic name and index.
type Key = (Arc<str>, PartitionIndex);

/// Every fetcher of this broker, by leader.
pub struct ReplicaFetchers {
    me: ReplicaId,
    security: Security,
    shutdown: watch::Receiver<bool>,
    fetchers: Mutex<HashMap<ReplicaId, Fetcher>>,
}

/// One leader's fetcher: the partitions it copies, and its task.
struct Fetcher {
    address: String,
    followed: Arc<Followed>,
    task: tokio::task::JoinHandle<()>,
}

/// The partitions a fetcher copies, changed by `follow`/`unfollow` while it runs.
#[derive(Default)]
struct Followed {
    partitions: Mutex<BTreeMap<Key, Arc<Partition>>>,
    changed: Notify,
}

impl ReplicaFetchers {
    /// Fetchers for broker `me`, connecting with `security`; they stop when
    /// `shutdown` turns true.
    pub fn new(me: ReplicaId, security: Security, shutdown: watch::Receiver<bool>) -> Self {
        ReplicaFetchers {
            me,
            security,
            shutdown,
            fetchers: Mutex::new(HashMap::new()),
        }
    }

    /// Copies `partition` from broker `leader`, reached at `address` (moving it from the
    /// fetcher of its previous leader, if any). Needs a tokio runtime.
    pub fn follow(&self, partition: Arc<Partition>, leader: ReplicaId, address: &str) {
        let key: Key = (partition.topic().into(), partition.index());
        let mut fetchers = self.fetchers.lock().expect("fetchers mutex poisoned");
        for (id, fetcher) in fetchers.iter() {
            if *id != leader {
                fetcher.followed.remove(&key);
            }
        }
        let stale = fetchers
            .get(&leader)
            .is_some_and(|f| f.address != address || f.task.is_finished());
        if stale {
            if let Some(old) = fetchers.remove(&leader) {
                old.task.abort();
            }
        }
        let fetcher = fetchers.entry(leader).or_insert_with(|| {
            let followed = Arc::new(Followed::default());
            let run = Run {
                me: self.me,
                leader,
                address: address.to_string(),
                security: self.security.clone(),
                followed: Arc::clone(&followed),
                shutdown: self.shutdown.clone(),
                resting: HashMap::new(),
            };
            Fetcher {
                address: address.to_string(),
                followed,
                task: tokio::spawn(run.run()),
            }
        });
        fetcher.followed.insert(key, partition);
    }

    /// Stops copying `topic`'s partition `index` (it leads it now, or it was deleted).
    pub fn unfollow(&self, topic: &str, index: PartitionIndex) {
        let key: Key = (topic.into(), index);
        let fetchers = self.fetchers.lock().expect("fetchers mutex poisoned");
        for fetcher in fetchers.values() {
            fetcher.followed.remove(&key);
        }
    }

    /// Stops copying every partition of `topic` (it was deleted).
    pub fn unfollow_topic(&self, topic: &str) {
        let fetchers = self.fetchers.lock().expect("fetchers mutex poisoned");
        for fetcher in fetchers.values() {
            fetcher
                .followed
                .lock()
                .retain(|(name, _), _| &**name != topic);
        }
    }

    /// How many partitions each leader's fetcher copies, for logs and tests.
    pub fn followed(&self) -> BTreeMap<ReplicaId, usize> {
        let fetchers = self.fetchers.lock().expect("fetchers mutex poisoned");
        fetchers
            .iter()
            .map(|(id, f)| (*id, f.followed.len()))
            .collect()
    }
}

impl Drop for ReplicaFetchers {
    fn drop(&mut self) {
        if let Ok(fetchers) = self.fetchers.lock() {
            for fetcher in fetchers.values() {
                fetcher.task.abort();
            }
        }
    }
}

impl Followed {
    fn insert(&self, key: Key, partition: Arc<Partition>) {
        self.lock().insert(key, partition);
        self.changed.notify_one();
    }

    fn remove(&self, key: &Key) {
        self.lock().remove(key);
    }

    fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Arc<Partition>>> {
        self.partitions.lock().expect("followed mutex poisoned")
    }

    fn snapshot(&self) -> Vec<(Key, Arc<Partition>)> {
        self.lock()
            .iter()
            .map(|(k, p)| (k.clone(), Arc::clone(p)))
            .collect()
    }
}

/// One fetcher's loop and what it keeps between rounds.
struct Run {
    me: ReplicaId,
    leader: ReplicaId,
    address: String,
    security: Security,
    followed: Arc<Followed>,
    shutdown: watch::Receiver<bool>,
    /// Partitions the leader refused (not its leader, another epoch), until when they
    /// sit out: the controller's metadata will move them.
    resting: HashMap<Key, Instant>,
}

/// A partition in one round: where it fetched from.
struct InRound {
    key: Key,
    partition: Arc<Partition>,
    position: FetchPosition,
}

impl Run {
    async fn run(mut self) {
        let backoff = Duration::from_millis(limits::REPLICA_FETCH_BACKOFF_MS);
        let mut connection: Option<Connection> = None;
        loop {
            if *self.shutdown.borrow() {
                return;
            }
            let (round, syncing) = self.ready_partitions().await;
            if round.is_empty() {
                continue;
            }
            let conn = match &connection {
                Some(conn) if !conn.is_closed() => conn,
                _ => match self.connect().await {
                    Ok(conn) => connection.insert(conn),
                    Err(e) => {
                        tracing::warn!(leader = self.leader, address = %self.address, error = %e,
                            "replica fetcher cannot reach its leader; retrying");
                        self.pause(backoff).await;
                        continue;
                    }
                },
            };
            let request = self.request(&round, syncing);
            match conn.request(&request).await {
                Ok(response) => {
                    let answers = response
                        .responses
                        .into_iter()
                        .flat_map(|t| {
                            let topic = t.topic.to_string();
                            t.partitions.into_iter().map(move |p| (topic.clone(), p))
                        })
                        .collect::<Vec<_>>();
                    self.take_answers(round, answers).await;
                }
                Err(e) => {
                    tracing::warn!(leader = self.leader, address = %self.address, error = %e,
                        "replica fetch failed; reconnecting");
                    connection = None;
                    self.pause(backoff).await;
                }
            }
        }
    }

    async fn connect(&self) -> Result<Connection, headway_client::ClientError> {
        let client_id = format!("headway-replica-{}", self.me);
        let timeout = Duration::from_millis(limits::REPLICA_FETCH_REQUEST_TIMEOUT_MS);
        Connection::connect(&self.address, &client_id, 1, timeout, &self.security).await
    }

    /// Waits `how_long`, or less when the broker shuts down.
    async fn pause(&mut self, how_long: Duration) {
        let _ = tokio::time::timeout(how_long, self.shutdown.wait_for(|s| *s)).await;
    }

    /// The partitions that may fetch now, synced to their log end and not resting, and
    /// whether others are still syncing. Partitions still syncing what the last round
    /// brought are waited for, up to `REPLICA_FETCH_SYNC_GRACE_MS`, so that they fetch
    /// in this round (their fetch offset is what acks=all waits for). Waits (for a sync,
    /// a change of what is followed, or a resting partition's time) while none is ready.
    async fn ready_partitions(&mut self) -> (Vec<InRound>, bool) {
        let (ready, syncing) = self.partitions_by_sync();
        if ready.is_empty() {
            self.wait_for_any(syncing).await;
            return (Vec::new(), false);
        }
        if syncing.is_empty() {
            return (ready, false);
        }
        let grace = Duration::from_millis(limits::REPLICA_FETCH_SYNC_GRACE_MS);
        let synced = futures::future::join_all(syncing.iter().map(|p| p.wait_synced_to_end()));
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = tokio::time::timeout(grace, synced) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
        let (ready, syncing) = self.partitions_by_sync();
        (ready, !syncing.is_empty())
    }

    /// The followed partitions that are not resting: ready (synced to their log end), or
    /// still syncing.
    fn partitions_by_sync(&mut self) -> (Vec<InRound>, Vec<Arc<Partition>>) {
        let now = Instant::now();
        self.resting.retain(|_, until| *until > now);
        let mut ready = Vec::new();
        let mut syncing = Vec::new();
        for (key, partition) in self.followed.snapshot() {
            if self.resting.contains_key(&key) {
                continue;
            }
            match partition.fetch_position() {
                Ok(position) if position.synced => ready.push(InRound {
                    key,
                    partition,
                    position,
                }),
                Ok(_) => syncing.push(partition),
                Err(e) => {
                    tracing::warn!(topic = %key.0, partition = key.1.value(), error = %e,
                        "followed partition unavailable");
                    self.rest(key);
                }
            }
        }
        (ready, syncing)
    }

    /// With no partition ready: waits for one of `syncing` to be synced, a change of what
    /// is followed, a resting partition's time, or the shutdown.
    async fn wait_for_any(&mut self, syncing: Vec<Arc<Partition>>) {
        let soonest = self
            .resting
            .values()
            .min()
            .copied()
            .unwrap_or(Instant::now() + Duration::from_millis(limits::REPLICA_FETCH_WAIT_MS));
        let synced = async {
            if syncing.is_empty() {
                std::future::pending::<()>().await;
            }
            let waits = syncing.iter().map(|p| Box::pin(p.wait_synced_to_end()));
            let _ = futures::future::select_all(waits).await;
        };
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = synced => {}
            _ = self.followed.changed.notified() => {}
            _ = tokio::time::sleep_until(soonest) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    }

    fn rest(&mut self, key: Key) {
        let until = Instant::now() + Duration::from_millis(limits::REPLICA_FETCH_BACKOFF_MS);
        self.resting.insert(key, until);
    }

    /// The round's Fetch. The leader holds it up to `REPLICA_FETCH_WAIT_MS` when it
    /// finds nothing new, or only `REPLICA_FETCH_WAIT_SYNCING_MS` when partitions left
    /// out are `syncing`: they join the next round soon.
    fn request(&self, round: &[InRound], syncing: bool) -> FetchRequest {
        let mut topics: BTreeMap<&str, Vec<FetchPartition>> = BTreeMap::new();
        for r in round {
            let partition = FetchPartition::default()
                .with_partition(r.key.1.value())
                .with_current_leader_epoch(r.position.leader_epoch)
                .with_fetch_offset(r.position.offset.value())
                .with_last_fetched_epoch(r.position.last_fetched_epoch.unwrap_or(-1))
                .with_log_start_offset(-1)
                .with_partition_max_bytes(limits::REPLICA_FETCH_PARTITION_BYTES_MAX as i32);
            topics.entry(&r.key.0).or_default().push(partition);
        }
        let topics = topics
            .into_iter()
            .map(|(name, partitions)| {
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(name.to_string())))
                    .with_partitions(partitions)
            })
            .collect();
        FetchRequest::default()
            .with_replica_id(BrokerId(self.me))
            .with_max_wait_ms(match syncing {
                true => limits::REPLICA_FETCH_WAIT_SYNCING_MS as i32,
                false => limits::REPLICA_FETCH_WAIT_MS as i32,
            })
            .with_min_bytes(1)
            .with_max_bytes(limits::REPLICA_FETCH_RESPONSE_BYTES_MAX as i32)
            .with_isolation_level(0)
            .with_topics(topics)
    }

    /// Takes the leader's answers into the followed partitions, each on a blocking
    /// thread (appends and truncations write and sync files).
    async fn take_answers(&mut self, round: Vec<InRound>, answers: Vec<(String, PartitionData)>) {
        let mut by_key: HashMap<(String, i32), PartitionData> = answers
            .into_iter()
            .map(|(topic, p)| ((topic, p.partition_index), p))
            .collect();
        let mut steps = Vec::with_capacity(round.len());
        for r in round {
            let Some(answer) = by_key.remove(&(r.key.0.to_string(), r.key.1.value())) else {
                continue;
            };
            if !self.followed.lock().contains_key(&r.key) {
                // No longer followed from this leader (the partition's own epoch check
                // refuses what a deposed leader sends in any case).
                continue;
            }
            let key = r.key.clone();
            let step = tokio::task::spawn_blocking(move || take_answer(&r, answer));
            steps.push((key, step));
        }
        for (key, step) in steps {
            match step.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::info!(leader = self.leader, topic = %key.0, partition = key.1.value(),
                        error = %e, "replica fetch answer not taken; the partition rests");
                    self.rest(key);
                }
                Err(e) => {
                    tracing::error!(topic = %key.0, partition = key.1.value(), error = %e,
                        "replica fetch answer task failed");
                    self.rest(key);
                }
            }
        }
    }
}

/// Takes one partition's answer. Blocking.
fn take_answer(round: &InRound, answer: PartitionData) -> Result<(), BrokerError> {
    let partition = &round.partition;
    let epoch = round.position.leader_epoch;
    let error = ResponseError::try_from_code(answer.error_code);
    match error {
        None => {
            if answer.diverging_epoch.epoch != UNDEFINED_EPOCH
                || answer.diverging_epoch.end_offset >= 0
            {
                partition.truncate_diverging(
                    epoch,
                    answer.diverging_epoch.epoch,
                    answer.diverging_epoch.end_offset,
                )?;
                return Ok(());
            }
            let records = answer.records.unwrap_or_default();
            let high_watermark = Offset::new(answer.high_watermark.max(0));
            partition.append_as_follower(&records, high_watermark, epoch)?;
            // The records are in: a log start not taken now is taken from a later
            // answer, and fetching goes on meanwhile.
            if let Err(error) = partition.follow_log_start(Offset::new(answer.log_start_offset)) {
                tracing::warn!(topic = partition.topic(), partition = partition.index().value(),
                    %error, "the leader's log start not taken; trying again with the next answer");
            }
            Ok(())
        }
        Some(ResponseError::OffsetOutOfRange) => {
            let leader_start = Offset::new(answer.log_start_offset.max(0));
            if round.position.offset < leader_start {
                partition.start_over_at(epoch, leader_start)
            } else {
                // Past the leader's end: what this log holds beyond the high watermark
                // is no one else's.
                partition
                    .truncate_diverging(epoch, UNDEFINED_EPOCH, -1)
                    .map(|_| ())
            }
        }
        Some(other) => Err(BrokerError::Storage(format!(
            "the leader answered {other:?} for {}/{}",
            partition.topic(),
            partition.index()
        ))),
    }
}
