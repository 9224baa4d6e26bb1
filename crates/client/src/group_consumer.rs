//! A consumer group member: subscribes to topics, takes part in rebalances (classic
//! protocol, eager, range assignment when it leads), reads its partitions through the
//! credit-window [`Consumer`], and commits what it handed to the application.
//!
//! A background task owns the membership: join (with the MEMBER_ID_REQUIRED round),
//! sync, then, until the group rebalances, a heartbeat every `heartbeat_interval` and,
//! on a timer of its own, a commit every `auto_commit`. When a heartbeat (or a commit)
//! says the group is rebalancing, the member *revokes* its partitions: it stops handing
//! out records, commits what was handed out, then rejoins (eager protocol). Each member
//! talks to the coordinator over a connection of its own (see `one_generation`).
//!
//! What is committed is exactly what the application received: a record counts as
//! consumed when [`GroupConsumer::next`] or [`GroupConsumer::try_next`] returns it (or,
//! with `explicit_acknowledge`, once [`GroupConsumer::acknowledge`] follows), and only
//! records of the current generation's consumer are ever returned. Records that
//! consumer prefetched but did not hand out are dropped with it at a revocation; the
//! next owner starts at the commit, so they are read again, never skipped. Every commit
//! is checked against this before it is sent (`within_handed_out`).

use crate::cluster::{Cluster, EARLIEST, LATEST};
use crate::connection::Connection;
use crate::consumer::{ConsumedRecord, Consumer, ConsumerConfig, StartOffset};
use crate::error::{check, ClientError};
use crate::groups::decode_assignment;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as AssignedPartitions;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId, HeartbeatRequest,
    JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    /// How often the member heartbeats (at most a third of the session timeout is used),
    /// which is also how soon it learns that the group rebalances.
    pub heartbeat_interval: Duration,
    /// How often what was consumed is committed, on its own timer.
    pub auto_commit: Duration,
    /// Where to start in a partition the group has no committed offset for.
    pub reset: StartOffset,
    /// When set, a record counts as consumed (and is committed) only once the
    /// application calls [`GroupConsumer::acknowledge`] after it was handed out (e.g.
    /// once it is written out); otherwise as soon as it is handed out.
    pub explicit_acknowledge: bool,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            session_timeout: Duration::from_secs(45),
            rebalance_timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(3),
            auto_commit: Duration::from_secs(5),
            reset: StartOffset::Latest,
            explicit_acknowledge: false,
        }
    }
}

const PROTOCOL_TYPE: &str = "consumer";
const ASSIGNOR: &str = "range";

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Next offset per partition of the current generation.
pub(crate) type Positions = HashMap<(Arc<str>, i32), i64>;

/// What the application has been handed, and what the coordinator has accepted.
#[derive(Default)]
struct Delivery {
    /// The current generation's consumer; `None` between a revocation and the next
    /// assignment, when nothing is handed out.
    consumer: Option<Arc<Consumer>>,
    /// Next offset to hand out, per assigned partition.
    positions: Positions,
    /// The positions the application acknowledged as consumed, what is committed: the
    /// same as `positions` unless acknowledgements are explicit.
    acknowledged: Positions,
    /// The positions last accepted by the coordinator (or fetched from it).
    committed: Positions,
    /// Member id and generation the positions belong to ("" and -1 before the first).
    member: (String, i32),
}

struct Shared {
    delivery: Mutex<Delivery>,
    changed: Notify,
    explicit_acknowledge: bool,
    /// Notified by [`GroupConsumer::acknowledge`].
    acknowledged: Notify,
}

/// How long a revocation waits for the application to acknowledge what it was handed
/// (with `explicit_acknowledge`) before it commits what was acknowledged; the group
/// waits for this member meanwhile.
const ACKNOWLEDGE_WAIT_MAX: Duration = Duration::from_secs(5);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Delivery> {
        self.delivery.lock().expect("group lock")
    }

    /// Stops handing out records and returns what must be committed (the positions,
    /// with the membership they belong to), or `None` when the last commit covers them.
    fn revoke(&self) -> Option<(Positions, String, i32)> {
        self.lock().consumer = None;
        self.changed.notify_waiters();
        self.pending()
    }

    /// Everything handed out so far is acknowledged.
    fn acknowledge(&self) {
        {
            let mut d = self.lock();
            if d.acknowledged == d.positions {
                return;
            }
            d.acknowledged = d.positions.clone();
        }
        self.acknowledged.notify_waiters();
    }

    /// What must be committed, or `None` when the last commit covers it.
    fn pending(&self) -> Option<(Positions, String, i32)> {
        let d = self.lock();
        (d.acknowledged != d.committed).then(|| {
            let (member_id, generation) = d.member.clone();
            (d.acknowledged.clone(), member_id, generation)
        })
    }

    /// Waits, at most `max`, until the application acknowledged every record it was
    /// handed; returns the partitions where it did not (empty without
    /// `explicit_acknowledge`, where handing out is acknowledging).
    async fn wait_acknowledged(&self, max: Duration) -> Positions {
        let deadline = tokio::time::Instant::now() + max;
        loop {
            let acknowledged = self.acknowledged.notified();
            let behind: Positions = {
                let d = self.lock();
                d.acknowledged
                    .iter()
                    .filter(|(key, offset)| d.positions.get(*key).is_some_and(|p| p > *offset))
                    .map(|(key, offset)| (key.clone(), *offset))
                    .collect()
            };
            if behind.is_empty()
                || tokio::time::timeout_at(deadline, acknowledged)
                    .await
                    .is_err()
            {
                return behind;
            }
        }
    }

    /// Commits `positions` as `member_id` in `generation`, once they pass
    /// [`within_handed_out`]; a commit that does not is a bug of this client: it
    /// panics in debug builds and is not sent otherwise.
    async fn commit(
        &self,
        coordinator: &Connection,
        group: &str,
        member_id: &str,
        generation: i32,
        positions: &Positions,
    ) -> Result<(), ClientError> {
        if let Err(broken) = within_handed_out(&self.lock(), member_id, generation, positions) {
            debug_assert!(false, "{broken}");
            tracing::error!(group, member_id, generation, %broken,
                "commit beyond what this member handed out: not sent");
            return Err(ClientError::Invalid(broken));
        }
        commit(coordinator, group, member_id, generation, positions).await
    }

    /// Records a commit the coordinator accepted.
    fn committed(&self, positions: Positions) {
        let mut d = self.lock();
        for (key, offset) in positions {
            d.committed.insert(key, offset);
        }
    }
}

/// The invariant of every commit: it is made by the membership the delivery state
/// belongs to (or from outside the group, after this member left), names only
/// partitions of that generation, and goes no further in any partition than the next
/// offset after the last record handed out in it (its start position when nothing
/// was). Positions only grow within a generation, so a commit taken earlier passes.
fn within_handed_out(
    d: &Delivery,
    member_id: &str,
    generation: i32,
    positions: &Positions,
) -> Result<(), String> {
    let (ours, our_generation) = (&d.member.0, d.member.1);
    let outside = member_id.is_empty() && generation < 0;
    if !outside && (member_id != ours || generation != our_generation) {
        return Err(format!(
            "a commit as member {member_id} in generation {generation}, while the positions \
             are those of member {ours} in generation {our_generation}"
        ));
    }
    for ((topic, partition), offset) in positions {
        let Some(next) = d.positions.get(&(Arc::clone(topic), *partition)) else {
            let not_ours = format!("{topic}/{partition}, not a partition of this generation");
            return Err(format!("a commit of {not_ours} ({our_generation})"));
        };
        if offset > next {
            return Err(format!(
                "a commit of {topic}/{partition} at {offset}, past {next}, the next offset \
                 to hand out in generation {our_generation}"
            ));
        }
    }
    Ok(())
}

pub struct GroupConsumer {
    shared: Arc<Shared>,
    membership: tokio::task::JoinHandle<()>,
    cluster: Arc<Cluster>,
    group: String,
}

impl GroupConsumer {
    /// Joins `group` subscribed to `topics`; partitions arrive with the first generation.
    pub async fn subscribe(
        cluster: Arc<Cluster>,
        group: &str,
        topics: Vec<String>,
        consumer_config: ConsumerConfig,
        config: GroupConfig,
    ) -> Result<GroupConsumer, ClientError> {
        for t in &topics {
            cluster.topic(t).await?;
        }
        let shared = Arc::new(Shared {
            delivery: Mutex::new(Delivery {
                member: (String::new(), -1),
                ..Delivery::default()
            }),
            changed: Notify::new(),
            explicit_acknowledge: config.explicit_acknowledge,
            acknowledged: Notify::new(),
        });
        let membership = Membership {
            cluster: Arc::clone(&cluster),
            group: group.to_string(),
            topics,
            consumer_config,
            config,
            shared: Arc::clone(&shared),
        };
        Ok(GroupConsumer {
            shared,
            membership: tokio::spawn(membership.run()),
            cluster,
            group: group.to_string(),
        })
    }

    /// The next record of the partitions this member holds now.
    pub async fn next(&self) -> ConsumedRecord {
        loop {
            let changed = self.shared.changed.notified();
            if let Some(r) = self.try_next() {
                return r;
            }
            let consumer = self.shared.lock().consumer.clone();
            match consumer {
                Some(c) => tokio::select! {
                    _ = c.readable() => {}
                    _ = changed => {}
                },
                None => changed.await,
            }
        }
    }

    /// The next buffered record, if any, without waiting.
    pub fn try_next(&self) -> Option<ConsumedRecord> {
        // Under the group lock, so that a revocation sees either the record handed out
        // and its position moved, or neither.
        let mut d = self.shared.lock();
        let r = d.consumer.as_ref()?.try_next()?;
        let position = d
            .positions
            .get_mut(&(Arc::clone(&r.topic), r.partition))
            .expect("the consumer reads only the assigned partitions");
        let back = r.offset < *position;
        *position = r.offset + 1;
        let next = *position;
        // Acknowledged follows at once, unless acknowledgements are explicit; it also
        // follows a partition that went back (restarted at its earliest offset after
        // OFFSET_OUT_OF_RANGE), so that it never passes what was handed out.
        if !self.shared.explicit_acknowledge || back {
            d.acknowledged
                .insert((Arc::clone(&r.topic), r.partition), next);
        }
        Some(r)
    }

    /// With `explicit_acknowledge`: every record handed out so far counts as consumed,
    /// to be committed. Records handed out before a revocation and acknowledged after
    /// its commit may be read again by the next owner of their partitions.
    pub fn acknowledge(&self) {
        self.shared.acknowledge();
    }

    /// True when this member holds partitions and has consumed each to the end seen
    /// in its latest fetch.
    pub fn caught_up(&self) -> bool {
        let consumer = self.shared.lock().consumer.clone();
        consumer.is_some_and(|c| c.caught_up())
    }

    /// The member id and generation of the current membership ("" and -1 before it).
    pub fn membership(&self) -> (String, i32) {
        self.shared.lock().member.clone()
    }

    /// Stops handing out records, commits what was handed out, then leaves the group.
    /// If the commit is refused (the group is completing a rebalance), it is tried
    /// again once this member is out, as a commit outside any membership, which the
    /// coordinator accepts when no member is left; otherwise the next owner of these
    /// partitions starts at the last accepted commit (at least once).
    pub async fn close(mut self) -> Result<(), ClientError> {
        // Stopped, not only told to stop: a membership task still running on another
        // thread could install a new generation after the revocation below.
        self.membership.abort();
        let _ = (&mut self.membership).await;
        let pending = self.shared.revoke();
        let (member_id, _) = self.membership();
        if member_id.is_empty() {
            return Ok(());
        }
        let coordinator = self.cluster.coordinator(&self.group).await?;
        let committed = match &pending {
            Some((positions, member_id, generation)) => {
                self.shared
                    .commit(&coordinator, &self.group, member_id, *generation, positions)
                    .await
            }
            None => Ok(()),
        };
        // v3+ names leaving members in `members` (the client speaks LeaveGroup 3-4).
        let leave = LeaveGroupRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_members(vec![
                MemberIdentity::default().with_member_id(str_bytes(&member_id))
            ]);
        let left = coordinator
            .request(&leave)
            .await
            .and_then(|r| check(r.error_code, None));
        if let (Err(e), Some((positions, ..))) = (committed, &pending) {
            let again = self
                .shared
                .commit(&coordinator, &self.group, "", -1, positions)
                .await;
            if let Err(again) = again {
                warn_not_committed(&self.group, positions, &format!("{e}; then {again}"));
            }
        }
        left
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        self.membership.abort();
    }
}

/// The one warning for offsets the coordinator did not take: it names the partitions
/// whose records after the last commit the next owner will read again.
fn warn_not_committed(group: &str, positions: &Positions, error: &str) {
    let mut partitions: Vec<String> = positions
        .iter()
        .map(|((t, p), o)| format!("{t}/{p}@{o}"))
        .collect();
    partitions.sort();
    tracing::warn!(group, error, partitions = %partitions.join(","),
        "offsets not committed: the next owner of these partitions starts at their last commit");
}

/// The warning for records handed out but not acknowledged at a revocation, with the
/// partitions (at what is committed) whose next owner reads them again.
fn warn_unacknowledged(group: &str, acknowledged: &Positions) {
    let mut partitions: Vec<String> = acknowledged
        .iter()
        .map(|((t, p), o)| format!("{t}/{p}@{o}"))
        .collect();
    partitions.sort();
    tracing::warn!(group, partitions = %partitions.join(","),
        "records handed out were not acknowledged in time: the next owner of these partitions reads them again");
}

struct Membership {
    cluster: Arc<Cluster>,
    group: String,
    topics: Vec<String>,
    consumer_config: ConsumerConfig,
    config: GroupConfig,
    shared: Arc<Shared>,
}

/// A generation's outcome: this member's id, the generation, its partitions.
struct Generation {
    member_id: String,
    generation: i32,
    assigned: Vec<(String, Vec<i32>)>,
}

/// True for the answers that mean "this generation is over: rejoin".
fn rebalancing(e: &ClientError) -> bool {
    matches!(e, ClientError::Broker { code, .. } if [
        ResponseError::RebalanceInProgress.code(),
        ResponseError::IllegalGeneration.code(),
        ResponseError::UnknownMemberId.code(),
    ].contains(code))
}

impl Membership {
    async fn run(self) {
        let mut member_id = String::new();
        let mut backoff = self.cluster.config().retry_backoff;
        loop {
            let outcome = self.one_generation(&mut member_id).await;
            // Whatever ended the generation, nothing more is handed out from it, and
            // what was handed out is committed before this member rejoins.
            self.revoke_and_commit().await;
            match outcome {
                Ok(()) => backoff = self.cluster.config().retry_backoff,
                Err(e) => {
                    tracing::warn!(group = %self.group, error = %e, "group membership failed; joining again");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.cluster.config().retry_backoff_max);
                }
            }
        }
    }

    async fn revoke_and_commit(&self) {
        // Nothing more is handed out; what was is committed once the application has
        // acknowledged it (it flushes what it printed when nothing comes), or, after a
        // while, as far as it has: the next owner reads the rest again.
        let _ = self.shared.revoke();
        let behind = self.shared.wait_acknowledged(ACKNOWLEDGE_WAIT_MAX).await;
        if !behind.is_empty() {
            warn_unacknowledged(&self.group, &behind);
        }
        let Some((positions, member_id, generation)) = self.shared.pending() else {
            return;
        };
        let outcome = async {
            let coordinator = self.cluster.coordinator(&self.group).await?;
            self.shared
                .commit(
                    &coordinator,
                    &self.group,
                    &member_id,
                    generation,
                    &positions,
                )
                .await
        }
        .await;
        match outcome {
            Ok(()) => {
                tracing::debug!(group = %self.group, generation, "committed before rejoining");
                self.shared.committed(positions);
            }
            Err(e) => warn_not_committed(&self.group, &positions, &e.to_string()),
        }
    }

    /// Joins, consumes until the group rebalances. `member_id` is kept across
    /// generations and cleared when the coordinator no longer knows it.
    async fn one_generation(&self, member_id: &mut String) -> Result<(), ClientError> {
        // A connection of this member's own: a JoinGroup waits at the coordinator until
        // the rebalance completes, and on a shared connection it would hold back other
        // members' heartbeats queued behind it, so they would never learn to rejoin.
        let addr = self.cluster.coordinator_addr(&self.group).await?;
        let coordinator = self.cluster.open_connection(&addr, 4).await?;
        let joined = match self.join(&coordinator, member_id).await {
            Err(ClientError::Broker { code, .. })
                if code == ResponseError::UnknownMemberId.code() =>
            {
                member_id.clear();
                return Ok(());
            }
            other => other?,
        };
        let (positions, committed) = self.start_positions(&coordinator, &joined.assigned).await?;
        let assignment = positions
            .iter()
            .map(|((t, p), offset)| (t.to_string(), *p, StartOffset::At(*offset)))
            .collect();
        let consumer = Arc::new(
            Consumer::assign(
                Arc::clone(&self.cluster),
                self.consumer_config.clone(),
                assignment,
            )
            .await?,
        );
        {
            let mut d = self.shared.lock();
            d.member = (joined.member_id.clone(), joined.generation);
            d.acknowledged = positions.clone();
            d.positions = positions;
            // Partitions started from the reset policy differ from `committed`, so
            // the first commit records where they started: a later owner starts there
            // too, not at a newer "latest".
            d.committed = committed;
            d.consumer = Some(consumer);
        }
        self.shared.changed.notify_waiters();
        self.heartbeat_and_commit(&coordinator, &joined).await
    }

    /// Heartbeats and commits, each on its own timer, until the group rebalances.
    async fn heartbeat_and_commit(
        &self,
        coordinator: &Connection,
        joined: &Generation,
    ) -> Result<(), ClientError> {
        let start = tokio::time::Instant::now();
        let period = self
            .config
            .heartbeat_interval
            .min(self.config.session_timeout / 3);
        let mut heartbeats = tokio::time::interval_at(start + period, period);
        let mut commits =
            tokio::time::interval_at(start + self.config.auto_commit, self.config.auto_commit);
        for timer in [&mut heartbeats, &mut commits] {
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        loop {
            let outcome = tokio::select! {
                _ = heartbeats.tick() => self.heartbeat(coordinator, joined).await,
                _ = commits.tick() => self.commit_consumed(coordinator, joined).await,
            };
            match outcome {
                Err(e) if rebalancing(&e) => return Ok(()),
                other => other?,
            }
        }
    }

    async fn heartbeat(
        &self,
        coordinator: &Connection,
        joined: &Generation,
    ) -> Result<(), ClientError> {
        let heartbeat = HeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_generation_id(joined.generation)
            .with_member_id(str_bytes(&joined.member_id));
        check(coordinator.request(&heartbeat).await?.error_code, None)
    }

    /// Commits the positions handed out since the last commit, if any.
    async fn commit_consumed(
        &self,
        coordinator: &Connection,
        joined: &Generation,
    ) -> Result<(), ClientError> {
        let positions = {
            let d = self.shared.lock();
            if d.acknowledged == d.committed {
                return Ok(());
            }
            d.acknowledged.clone()
        };
        self.shared
            .commit(
                coordinator,
                &self.group,
                &joined.member_id,
                joined.generation,
                &positions,
            )
            .await?;
        self.shared.committed(positions);
        Ok(())
    }

    async fn join(
        &self,
        coordinator: &Connection,
        member_id: &mut String,
    ) -> Result<Generation, ClientError> {
        let subscription = versioned(
            0,
            &ConsumerProtocolSubscription::default()
                .with_topics(self.topics.iter().map(|t| str_bytes(t)).collect()),
        )?;
        loop {
            let request = JoinGroupRequest::default()
                .with_group_id(GroupId(str_bytes(&self.group)))
                .with_session_timeout_ms(self.config.session_timeout.as_millis() as i32)
                .with_rebalance_timeout_ms(self.config.rebalance_timeout.as_millis() as i32)
                .with_member_id(str_bytes(member_id))
                .with_protocol_type(str_bytes(PROTOCOL_TYPE))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(str_bytes(ASSIGNOR))
                    .with_metadata(subscription.clone())]);
            let response = coordinator.request(&request).await?;
            if response.error_code == ResponseError::MemberIdRequired.code() {
                *member_id = response.member_id.to_string();
                continue;
            }
            check(response.error_code, None)?;
            *member_id = response.member_id.to_string();
            let assignments = if response.leader == response.member_id {
                self.assign(&response.members).await?
            } else {
                Vec::new()
            };
            let sync = SyncGroupRequest::default()
                .with_group_id(GroupId(str_bytes(&self.group)))
                .with_generation_id(response.generation_id)
                .with_member_id(str_bytes(member_id))
                .with_protocol_type(Some(str_bytes(PROTOCOL_TYPE)))
                .with_protocol_name(Some(str_bytes(ASSIGNOR)))
                .with_assignments(assignments);
            let synced = coordinator.request(&sync).await?;
            check(synced.error_code, None)?;
            return Ok(Generation {
                member_id: member_id.clone(),
                generation: response.generation_id,
                assigned: decode_assignment(synced.assignment),
            });
        }
    }

    /// The leader's range assignment: per topic, members subscribed to it in member
    /// id order get consecutive ranges of partitions, the first ones one more.
    async fn assign(
        &self,
        members: &[kafka_protocol::messages::join_group_response::JoinGroupResponseMember],
    ) -> Result<Vec<SyncGroupRequestAssignment>, ClientError> {
        let mut subscribers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for m in members {
            for topic in decode_subscription(m.metadata.clone()) {
                subscribers
                    .entry(topic)
                    .or_default()
                    .push(m.member_id.to_string());
            }
        }
        let mut plan: BTreeMap<String, BTreeMap<String, Vec<i32>>> = members
            .iter()
            .map(|m| (m.member_id.to_string(), BTreeMap::new()))
            .collect();
        for (topic, mut ids) in subscribers {
            ids.sort();
            let partitions = self.cluster.topic(&topic).await?.leaders.len() as i32;
            for (member, range) in ids.iter().zip(ranges(partitions, ids.len() as i32)) {
                plan.entry(member.clone())
                    .or_default()
                    .insert(topic.clone(), range.collect());
            }
        }
        plan.into_iter()
            .map(|(member, topics)| {
                let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
                    topics
                        .into_iter()
                        .map(|(t, ps)| {
                            AssignedPartitions::default()
                                .with_topic(TopicName(str_bytes(&t)))
                                .with_partitions(ps)
                        })
                        .collect(),
                );
                Ok(SyncGroupRequestAssignment::default()
                    .with_member_id(str_bytes(&member))
                    .with_assignment(versioned(0, &assignment)?))
            })
            .collect()
    }

    /// Where each assigned partition starts (its committed offset, or the reset
    /// position), and the committed offsets among them.
    async fn start_positions(
        &self,
        coordinator: &Connection,
        assigned: &[(String, Vec<i32>)],
    ) -> Result<(Positions, Positions), ClientError> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(str_bytes(&self.group)))
            .with_topics(Some(
                assigned
                    .iter()
                    .map(|(t, ps)| {
                        OffsetFetchRequestTopic::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partition_indexes(ps.clone())
                    })
                    .collect(),
            ));
        let response = coordinator.request(&request).await?;
        check(response.error_code, None)?;
        // Per partition, the committed offset or -1 for none. A partition answered
        // with an error, or left out of the answer, has an unknown commit, which is not
        // "no commit": the reset policy (`latest`) would skip what was produced since
        // the commit, and this member's first commit would make that final.
        let mut committed: HashMap<(String, i32), i64> = HashMap::new();
        for t in &response.topics {
            for p in &t.partitions {
                check(p.error_code, None)?;
                committed.insert((t.name.to_string(), p.partition_index), p.committed_offset);
            }
        }
        let mut positions = HashMap::new();
        let mut fetched = HashMap::new();
        for (topic, partitions) in assigned {
            for p in partitions {
                let key = (Arc::from(topic.as_str()), *p);
                let Some(&answered) = committed.get(&(topic.clone(), *p)) else {
                    return Err(ClientError::Protocol(format!(
                        "the committed offsets fetched leave out {topic}/{p}"
                    )));
                };
                let offset = match Some(answered).filter(|o| *o >= 0) {
                    Some(offset) => {
                        fetched.insert(key.clone(), offset);
                        offset
                    }
                    None => match self.config.reset {
                        StartOffset::Earliest => {
                            self.cluster.list_offset(topic, *p, EARLIEST).await?
                        }
                        StartOffset::Latest => self.cluster.list_offset(topic, *p, LATEST).await?,
                        StartOffset::At(offset) => offset,
                    },
                };
                positions.insert(key, offset);
            }
        }
        Ok((positions, fetched))
    }
}

/// Partition ranges for `members` consumers of `partitions` partitions.
fn ranges(partitions: i32, members: i32) -> Vec<std::ops::Range<i32>> {
    let (per, extra) = (partitions / members.max(1), partitions % members.max(1));
    (0..members)
        .map(|i| {
            let start = i * per + i.min(extra);
            start..start + per + i32::from(i < extra)
        })
        .collect()
}

/// Commits `positions`; generation -1 and an empty member id commit from outside the
/// group (an offset reset).
pub(crate) async fn commit(
    coordinator: &Connection,
    group: &str,
    member_id: &str,
    generation: i32,
    positions: &Positions,
) -> Result<(), ClientError> {
    if positions.is_empty() {
        return Ok(());
    }
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in positions {
        by_topic.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(str_bytes(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(str_bytes(member_id))
        .with_retention_time_ms(-1)
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(str_bytes(t)))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let response = coordinator.request(&request).await?;
    for t in response.topics {
        for p in t.partitions {
            check(p.error_code, None)?;
        }
    }
    Ok(())
}

/// A consumer-protocol message: its version, then its body at that version.
fn versioned<T: Encodable>(version: i16, message: &T) -> Result<Bytes, ClientError> {
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    message
        .encode(&mut buf, version)
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    Ok(buf.freeze())
}

fn decode_subscription(mut bytes: Bytes) -> Vec<String> {
    if bytes.len() < 2 {
        return Vec::new();
    }
    let version = bytes.get_i16().clamp(0, 3);
    ConsumerProtocolSubscription::decode(&mut bytes, version)
        .map(|s| s.topics.into_iter().map(|t| t.to_string()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(p: i32) -> (Arc<str>, i32) {
        (Arc::from("t"), p)
    }

    fn positions(of: &[(i32, i64)]) -> Positions {
        of.iter().map(|(p, o)| (key(*p), *o)).collect()
    }

    /// Member "m" in generation 4, started at 10 in partitions 0 and 1, that has
    /// handed out up to offset 14 in partition 0 and nothing in partition 1.
    fn delivery() -> Delivery {
        Delivery {
            consumer: None,
            positions: positions(&[(0, 15), (1, 10)]),
            acknowledged: positions(&[(0, 15), (1, 10)]),
            committed: positions(&[(0, 10), (1, 10)]),
            member: ("m".to_string(), 4),
        }
    }

    #[test]
    fn a_commit_goes_no_further_than_what_was_handed_out() {
        let d = delivery();
        // What was handed out, or less (a commit taken before more was handed out).
        assert!(within_handed_out(&d, "m", 4, &positions(&[(0, 15), (1, 10)])).is_ok());
        assert!(within_handed_out(&d, "m", 4, &positions(&[(0, 12)])).is_ok());
        // After leaving, from outside the group, the same offsets.
        assert!(within_handed_out(&d, "", -1, &positions(&[(0, 15), (1, 10)])).is_ok());
        // Past the last record handed out, or past the start where none was.
        let past = within_handed_out(&d, "m", 4, &positions(&[(0, 16)])).unwrap_err();
        assert!(past.contains("t/0 at 16, past 15"), "{past}");
        assert!(within_handed_out(&d, "m", 4, &positions(&[(1, 11)])).is_err());
        assert!(within_handed_out(&d, "", -1, &positions(&[(1, 11)])).is_err());
        // A partition of another generation, or another generation's membership.
        assert!(within_handed_out(&d, "m", 4, &positions(&[(2, 0)])).is_err());
        assert!(within_handed_out(&d, "m", 3, &positions(&[(0, 12)])).is_err());
        assert!(within_handed_out(&d, "other", 4, &positions(&[(0, 12)])).is_err());
    }

    #[tokio::test]
    async fn a_revocation_waits_for_what_was_handed_out_to_be_acknowledged() {
        let shared = Arc::new(Shared {
            delivery: Mutex::new(Delivery {
                acknowledged: positions(&[(0, 12), (1, 10)]),
                ..delivery()
            }),
            changed: Notify::new(),
            explicit_acknowledge: true,
            acknowledged: Notify::new(),
        });
        // Not acknowledged in time: partition 0 is named, at what will be committed.
        let behind = shared.wait_acknowledged(Duration::from_millis(50)).await;
        assert_eq!(behind, positions(&[(0, 12)]));
        assert_eq!(
            shared.pending(),
            Some((positions(&[(0, 12), (1, 10)]), "m".to_string(), 4))
        );
        // Acknowledged while the revocation waits: everything handed out is committed.
        let waiting = tokio::spawn({
            let shared = Arc::clone(&shared);
            async move { shared.wait_acknowledged(Duration::from_secs(60)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        shared.acknowledge();
        assert_eq!(waiting.await.unwrap(), Positions::new());
        assert_eq!(
            shared.pending().map(|(p, ..)| p),
            Some(positions(&[(0, 15), (1, 10)]))
        );
    }

    #[test]
    fn ranges_cover_every_partition_once() {
        assert_eq!(ranges(6, 3), vec![0..2, 2..4, 4..6]);
        assert_eq!(ranges(7, 3), vec![0..3, 3..5, 5..7]);
        assert_eq!(ranges(2, 3), vec![0..1, 1..2, 2..2]);
    }

    #[test]
    fn subscriptions_and_assignments_round_trip() {
        let s = versioned(
            0,
            &ConsumerProtocolSubscription::default()
                .with_topics(vec![str_bytes("a"), str_bytes("b")]),
        )
        .unwrap();
        assert_eq!(decode_subscription(s), vec!["a", "b"]);
        let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            AssignedPartitions::default()
                .with_topic(TopicName(str_bytes("a")))
                .with_partitions(vec![0, 2]),
        ]);
        assert_eq!(
            decode_assignment(versioned(0, &a).unwrap()),
            vec![("a".to_string(), vec![0, 2])]
        );
    }
}
