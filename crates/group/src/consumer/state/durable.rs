//! The durable form of consumer-protocol groups: keyed records in the offsets log
//! (`<data_dir>/groups/offsets/`, `__consumer_offsets`), beside the committed offsets,
//! as Kafka keeps them. Replaying the log and keeping the last record per key gives
//! every group's epochs, members, target assignment and members' current assignments,
//! and the log cleaner compacts the log to about one record per key.
//!
//! The state machine ([`ConsumerGroup`]) knows nothing of this: [`project`] reads a
//! group's durable records out of it, [`Recovery`] rebuilds groups from replayed
//! records, and [`Written`] remembers what the log holds so that a step appends only
//! the records it changed (and tombstones for what went).
//!
//! Key, big-endian. The first byte is the record type; the offsets log's own keys
//! start with 0 (an offset) or 1 (an offset pending in a transaction), and these take
//! Kafka's record type numbers for the same records:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | record type: 3 group metadata, 4 subscribed topics, 5 member metadata, 6 target assignment metadata, 7 target assignment of a member, 8 current assignment of a member |
//! | 2 + n | group id: length u16, UTF-8 |
//! | 2 + n | member id (types 5, 7, 8 only): length u16, UTF-8 |
//!
//! Value (absent for a tombstone): a format version byte, 0, then by record type.
//! Strings are a u16 length and UTF-8; an optional string is a byte (0 absent, 1
//! present) and then the string; a list is a u32 count and its items; an assignment
//! is a list of (topic string, list of partitions i32).
//!
//! | type | value after the version |
//! |---|---|
//! | 3 | group epoch i32 |
//! | 4 | list of (topic string, partition count i32): the partition counts the group epoch last moved for |
//! | 5 | instance id opt, rack id opt, client id, client host, rebalance timeout ms i32, server assignor opt, list of subscribed topic names, subscription regex opt, list of the topics the subscription resolved to |
//! | 6 | assignment epoch i32, assignor name string |
//! | 7 | target assignment |
//! | 8 | member epoch i32, previous member epoch i32, member state u8 (0 stable, 1 unrevoked partitions, 2 unreleased partitions), left as a static member u8 (0 or 1), assigned assignment, revoking assignment, list of (topic string, list of (partition i32, epoch i32)): the epoch each held partition was given at |
//!
//! One step's records are one batch, appended whole or not at all (a torn batch at the
//! end of the log is cut by the log's recovery), so a crash leaves a group as it was
//! before or after a step, never between. A record this version cannot read (cut
//! short, an unknown value version, bytes left over) is a [`RecordError`]: the
//! coordinator refuses to start rather than guess at a group's members.
//!
//! Classic members of a consumer group (online conversion, `classic_members`) are not
//! durable: the records describe the group as if they had left (its group epoch one
//! further), and after a restart they rejoin as new members.
//!
//! Timers are not durable: recovered members' sessions (and revocation deadlines)
//! start at recovery, so a member that does not come back is fenced a session timeout
//! after start-up.

use super::{compile_regex, ConsumerGroup, ConsumerMember, MemberState};
use crate::consumer::assignor::Assignor;
use crate::consumer::topics::Assignment;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use headway_broker::internal_log::put_str;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The format version of every value.
const VALUE_VERSION: u8 = 0;

/// A record's type, the first byte of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordType {
    GroupMetadata = 3,
    SubscribedTopics = 4,
    MemberMetadata = 5,
    TargetMetadata = 6,
    TargetMember = 7,
    CurrentAssignment = 8,
}

impl RecordType {
    fn from_byte(b: u8) -> Option<RecordType> {
        Some(match b {
            3 => RecordType::GroupMetadata,
            4 => RecordType::SubscribedTopics,
            5 => RecordType::MemberMetadata,
            6 => RecordType::TargetMetadata,
            7 => RecordType::TargetMember,
            8 => RecordType::CurrentAssignment,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            RecordType::GroupMetadata => "group metadata",
            RecordType::SubscribedTopics => "subscribed topics",
            RecordType::MemberMetadata => "member metadata",
            RecordType::TargetMetadata => "target assignment metadata",
            RecordType::TargetMember => "target assignment of a member",
            RecordType::CurrentAssignment => "current assignment of a member",
        }
    }

    fn of_member(self) -> bool {
        matches!(
            self,
            RecordType::MemberMetadata | RecordType::TargetMember | RecordType::CurrentAssignment
        )
    }
}

/// Whether an offsets-log key is one of a consumer-protocol group's records.
pub fn is_group_record(key: &[u8]) -> bool {
    key.first()
        .is_some_and(|b| RecordType::from_byte(*b).is_some())
}

/// A record that cannot be read: which record, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("consumer group record ({record}): {problem}")]
pub struct RecordError {
    pub record: &'static str,
    pub problem: String,
}

pub(crate) fn corrupt(record: &'static str, problem: impl Into<String>) -> RecordError {
    RecordError {
        record,
        problem: problem.into(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub record_type: RecordType,
    pub group_id: String,
    /// Empty for the group's own records (types 3, 4, 6).
    pub member_id: String,
}

impl RecordKey {
    fn group(record_type: RecordType, group_id: &str) -> RecordKey {
        RecordKey {
            record_type,
            group_id: group_id.to_string(),
            member_id: String::new(),
        }
    }

    fn member(record_type: RecordType, group_id: &str, member_id: &str) -> RecordKey {
        RecordKey {
            record_type,
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(5 + self.group_id.len() + self.member_id.len());
        buf.put_u8(self.record_type as u8);
        put_str(&mut buf, &self.group_id);
        if self.record_type.of_member() {
            put_str(&mut buf, &self.member_id);
        }
        buf.freeze()
    }

    pub fn decode(key: Bytes) -> Result<RecordKey, RecordError> {
        let mut r = Reader(key);
        let byte = r.u8().map_err(|e| corrupt("key", e))?;
        let record_type = RecordType::from_byte(byte)
            .ok_or_else(|| corrupt("key", format!("unknown record type {byte}")))?;
        let name = record_type.name();
        let group_id = r.str().map_err(|e| corrupt(name, e))?;
        let member_id = match record_type.of_member() {
            true => r.str().map_err(|e| corrupt(name, e))?,
            false => String::new(),
        };
        r.end().map_err(|e| corrupt(name, format!("key: {e}")))?;
        Ok(RecordKey {
            record_type,
            group_id,
            member_id,
        })
    }
}

/// What a member is, as its member metadata record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub server_assignor: Option<String>,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub subscribed: BTreeSet<String>,
}

/// Where a member is in its reconciliation, as its current assignment record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentAssignment {
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    pub state: MemberState,
    pub left_static: bool,
    pub assigned: Assignment,
    pub revoking: Assignment,
    pub partition_epochs: BTreeMap<(String, i32), i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordValue {
    GroupMetadata {
        group_epoch: i32,
    },
    SubscribedTopics(BTreeMap<String, i32>),
    MemberMetadata(MemberMetadata),
    TargetMetadata {
        assignment_epoch: i32,
        assignor: Assignor,
    },
    TargetMember(Assignment),
    CurrentAssignment(CurrentAssignment),
}

/// One record: a key and its value, `None` for a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub key: RecordKey,
    pub value: Option<RecordValue>,
}

impl GroupRecord {
    /// Decodes an offsets-log record whose key [`is_group_record`].
    pub fn decode(key: Bytes, value: Option<Bytes>) -> Result<GroupRecord, RecordError> {
        let key = RecordKey::decode(key)?;
        let value = value
            .map(|v| RecordValue::decode(key.record_type, v))
            .transpose()?;
        Ok(GroupRecord { key, value })
    }
}

pub(crate) fn put_opt_str(buf: &mut BytesMut, s: &Option<String>) {
    match s {
        None => buf.put_u8(0),
        Some(s) => {
            buf.put_u8(1);
            put_str(buf, s);
        }
    }
}

fn put_strs<'a>(buf: &mut BytesMut, items: impl ExactSizeIterator<Item = &'a String>) {
    buf.put_u32(items.len() as u32);
    for s in items {
        put_str(buf, s);
    }
}

fn put_assignment(buf: &mut BytesMut, a: &Assignment) {
    buf.put_u32(a.len() as u32);
    for (topic, partitions) in a {
        put_str(buf, topic);
        buf.put_u32(partitions.len() as u32);
        for p in partitions {
            buf.put_i32(*p);
        }
    }
}

fn put_partition_epochs(buf: &mut BytesMut, epochs: &BTreeMap<(String, i32), i32>) {
    let mut by_topic: BTreeMap<&str, Vec<(i32, i32)>> = BTreeMap::new();
    for ((t, p), e) in epochs {
        by_topic.entry(t.as_str()).or_default().push((*p, *e));
    }
    buf.put_u32(by_topic.len() as u32);
    for (topic, list) in by_topic {
        put_str(buf, topic);
        buf.put_u32(list.len() as u32);
        for (p, e) in list {
            buf.put_i32(p);
            buf.put_i32(e);
        }
    }
}

fn state_to_disk(state: MemberState) -> u8 {
    match state {
        MemberState::Stable => 0,
        MemberState::UnrevokedPartitions => 1,
        MemberState::UnreleasedPartitions => 2,
    }
}

fn state_from_disk(b: u8) -> Result<MemberState, String> {
    Ok(match b {
        0 => MemberState::Stable,
        1 => MemberState::UnrevokedPartitions,
        2 => MemberState::UnreleasedPartitions,
        _ => return Err(format!("unknown member state {b}")),
    })
}

impl RecordValue {
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_u8(VALUE_VERSION);
        match self {
            RecordValue::GroupMetadata { group_epoch } => buf.put_i32(*group_epoch),
            RecordValue::SubscribedTopics(topics) => {
                buf.put_u32(topics.len() as u32);
                for (topic, count) in topics {
                    put_str(&mut buf, topic);
                    buf.put_i32(*count);
                }
            }
            RecordValue::MemberMetadata(m) => {
                put_opt_str(&mut buf, &m.instance_id);
                put_opt_str(&mut buf, &m.rack_id);
                put_str(&mut buf, &m.client_id);
                put_str(&mut buf, &m.client_host);
                buf.put_i32(m.rebalance_timeout_ms);
                put_opt_str(&mut buf, &m.server_assignor);
                put_strs(&mut buf, m.subscribed_topic_names.iter());
                put_opt_str(&mut buf, &m.subscribed_topic_regex);
                put_strs(&mut buf, m.subscribed.iter());
            }
            RecordValue::TargetMetadata {
                assignment_epoch,
                assignor,
            } => {
                buf.put_i32(*assignment_epoch);
                put_str(&mut buf, assignor.name());
            }
            RecordValue::TargetMember(a) => put_assignment(&mut buf, a),
            RecordValue::CurrentAssignment(c) => {
                buf.put_i32(c.member_epoch);
                buf.put_i32(c.previous_member_epoch);
                buf.put_u8(state_to_disk(c.state));
                buf.put_u8(u8::from(c.left_static));
                put_assignment(&mut buf, &c.assigned);
                put_assignment(&mut buf, &c.revoking);
                put_partition_epochs(&mut buf, &c.partition_epochs);
            }
        }
        buf.freeze()
    }

    fn decode(record_type: RecordType, value: Bytes) -> Result<RecordValue, RecordError> {
        let name = record_type.name();
        let mut r = Reader(value);
        let version = r.u8().map_err(|e| corrupt(name, e))?;
        if version != VALUE_VERSION {
            return Err(corrupt(
                name,
                format!("unknown value format version {version}"),
            ));
        }
        let value = Self::decode_fields(record_type, &mut r).map_err(|e| corrupt(name, e))?;
        r.end().map_err(|e| corrupt(name, e))?;
        Ok(value)
    }

    fn decode_fields(record_type: RecordType, r: &mut Reader) -> Result<RecordValue, String> {
        Ok(match record_type {
            RecordType::GroupMetadata => RecordValue::GroupMetadata {
                group_epoch: r.i32()?,
            },
            RecordType::SubscribedTopics => {
                let mut topics = BTreeMap::new();
                for _ in 0..r.u32()? {
                    let topic = r.str()?;
                    topics.insert(topic, r.i32()?);
                }
                RecordValue::SubscribedTopics(topics)
            }
            RecordType::MemberMetadata => RecordValue::MemberMetadata(MemberMetadata {
                instance_id: r.opt_str()?,
                rack_id: r.opt_str()?,
                client_id: r.str()?,
                client_host: r.str()?,
                rebalance_timeout_ms: r.i32()?,
                server_assignor: r.opt_str()?,
                subscribed_topic_names: r.strs()?,
                subscribed_topic_regex: r.opt_str()?,
                subscribed: r.strs()?.into_iter().collect(),
            }),
            RecordType::TargetMetadata => {
                let assignment_epoch = r.i32()?;
                let name = r.str()?;
                let assignor = Assignor::from_name(&name)
                    .ok_or_else(|| format!("unknown assignor {name:?}"))?;
                RecordValue::TargetMetadata {
                    assignment_epoch,
                    assignor,
                }
            }
            RecordType::TargetMember => RecordValue::TargetMember(r.assignment()?),
            RecordType::CurrentAssignment => {
                let member_epoch = r.i32()?;
                let previous_member_epoch = r.i32()?;
                let state = state_from_disk(r.u8()?)?;
                let left_static = match r.u8()? {
                    0 => false,
                    1 => true,
                    b => return Err(format!("a flag of {b}")),
                };
                let assigned = r.assignment()?;
                let revoking = r.assignment()?;
                let mut partition_epochs = BTreeMap::new();
                for _ in 0..r.u32()? {
                    let topic = r.str()?;
                    for _ in 0..r.u32()? {
                        let partition = r.i32()?;
                        partition_epochs.insert((topic.clone(), partition), r.i32()?);
                    }
                }
                RecordValue::CurrentAssignment(CurrentAssignment {
                    member_epoch,
                    previous_member_epoch,
                    state,
                    left_static,
                    assigned,
                    revoking,
                    partition_epochs,
                })
            }
        })
    }
}

/// Reads the fields of a record. Every count is checked against the bytes present as
/// each item is read, never trusted for an allocation.
pub(crate) struct Reader(pub(crate) Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), String> {
        match self.0.remaining() >= n {
            true => Ok(()),
            false => Err("cut short".into()),
        }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        self.need(1)?;
        Ok(self.0.get_u8())
    }

    pub(crate) fn i32(&mut self) -> Result<i32, String> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        self.need(4)?;
        Ok(self.0.get_u32())
    }

    pub(crate) fn str(&mut self) -> Result<String, String> {
        self.need(2)?;
        let len = usize::from(self.0.get_u16());
        self.need(len)?;
        String::from_utf8(self.0.split_to(len).to_vec()).map_err(|_| "a string not UTF-8".into())
    }

    pub(crate) fn opt_str(&mut self) -> Result<Option<String>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => self.str().map(Some),
            b => Err(format!("an optional string marked {b}")),
        }
    }

    fn strs(&mut self) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for _ in 0..self.u32()? {
            out.push(self.str()?);
        }
        Ok(out)
    }

    fn assignment(&mut self) -> Result<Assignment, String> {
        let mut out = Assignment::new();
        for _ in 0..self.u32()? {
            let topic = self.str()?;
            let partitions = out.entry(topic).or_default();
            for _ in 0..self.u32()? {
                partitions.insert(self.i32()?);
            }
        }
        Ok(out)
    }

    /// Bytes written with a u32 length before them.
    pub(crate) fn bytes(&mut self) -> Result<Bytes, String> {
        let len = self.u32()? as usize;
        self.need(len)?;
        Ok(self.0.split_to(len))
    }

    pub(crate) fn end(&self) -> Result<(), String> {
        match self.0.remaining() {
            0 => Ok(()),
            n => Err(format!("{n} bytes left over")),
        }
    }
}

/// The group's own records (types 3, 4 and 6).
fn project_group(group: &ConsumerGroup) -> [(RecordKey, RecordValue); 3] {
    let id = &group.group_id;
    [
        (
            RecordKey::group(RecordType::GroupMetadata, id),
            RecordValue::GroupMetadata {
                // Classic members are not durable: the log holds the group as if they
                // had left, which moves the group epoch.
                group_epoch: group.group_epoch
                    + i32::from(group.members.values().any(|m| m.classic.is_some())),
            },
        ),
        (
            RecordKey::group(RecordType::SubscribedTopics, id),
            RecordValue::SubscribedTopics(group.subscribed_topics.clone()),
        ),
        (
            RecordKey::group(RecordType::TargetMetadata, id),
            RecordValue::TargetMetadata {
                assignment_epoch: group.assignment_epoch,
                assignor: group.assignor,
            },
        ),
    ]
}

/// A member's records (types 5, 7 and 8); none for a member the group does not hold,
/// or for a classic member.
fn project_member(group: &ConsumerGroup, member_id: &str) -> Vec<(RecordKey, RecordValue)> {
    let Some(m) = group.members.get(member_id).filter(|m| m.classic.is_none()) else {
        return Vec::new();
    };
    let id = &group.group_id;
    let metadata = MemberMetadata {
        instance_id: m.instance_id.clone(),
        rack_id: m.rack_id.clone(),
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        server_assignor: m.server_assignor.clone(),
        subscribed_topic_names: m.subscribed_topic_names.clone(),
        subscribed_topic_regex: m.subscribed_topic_regex.clone(),
        subscribed: m.subscribed.clone(),
    };
    let current = CurrentAssignment {
        member_epoch: m.member_epoch,
        previous_member_epoch: m.previous_member_epoch,
        state: m.state,
        left_static: m.left_static,
        assigned: m.assigned.clone(),
        revoking: m.revoking.clone(),
        partition_epochs: m
            .partition_epochs
            .iter()
            .map(|(k, e)| (k.clone(), *e))
            .collect(),
    };
    let mut out = vec![
        (
            RecordKey::member(RecordType::MemberMetadata, id, member_id),
            RecordValue::MemberMetadata(metadata),
        ),
        (
            RecordKey::member(RecordType::CurrentAssignment, id, member_id),
            RecordValue::CurrentAssignment(current),
        ),
    ];
    if let Some(target) = group.target.get(member_id) {
        out.push((
            RecordKey::member(RecordType::TargetMember, id, member_id),
            RecordValue::TargetMember(target.clone()),
        ));
    }
    out
}

/// Every durable record of a group: the state [`Recovery`] rebuilds it from.
pub fn project(group: &ConsumerGroup) -> BTreeMap<RecordKey, RecordValue> {
    let mut out: BTreeMap<RecordKey, RecordValue> = project_group(group).into_iter().collect();
    for member_id in group.members.keys() {
        out.extend(project_member(group, member_id));
    }
    out
}

/// Rebuilds groups from the records of a replayed log, fed in log order.
#[derive(Debug, Default)]
pub struct Recovery {
    records: BTreeMap<RecordKey, RecordValue>,
}

impl Recovery {
    /// Applies the next record: the last value of a key wins, a tombstone removes it.
    pub fn apply(&mut self, record: GroupRecord) {
        match record.value {
            Some(v) => self.records.insert(record.key, v),
            None => self.records.remove(&record.key),
        };
    }

    /// The groups the records describe, as of `now_ms`: sessions (and revocation
    /// deadlines) start now. A member's or target's record without its group's
    /// metadata record is left out (the batch that removed the group removed them
    /// all, so it is a leftover the cleaner has not yet reached).
    pub fn finish(self, now_ms: i64) -> Result<BTreeMap<String, ConsumerGroup>, RecordError> {
        let mut groups: BTreeMap<String, ConsumerGroup> = BTreeMap::new();
        let mut currents: Vec<(RecordKey, CurrentAssignment)> = Vec::new();
        let mut targets: Vec<(RecordKey, Assignment)> = Vec::new();
        // Records sort by type first: group metadata (3) comes before everything else.
        for (key, value) in self.records {
            if key.record_type == RecordType::GroupMetadata {
                groups.insert(key.group_id.clone(), ConsumerGroup::new(&key.group_id));
            }
            let Some(group) = groups.get_mut(&key.group_id) else {
                continue;
            };
            match value {
                RecordValue::GroupMetadata { group_epoch } => group.group_epoch = group_epoch,
                RecordValue::SubscribedTopics(topics) => group.subscribed_topics = topics,
                RecordValue::MemberMetadata(m) => {
                    let member = recovered_member(&key.member_id, m, now_ms)?;
                    group.members.insert(key.member_id, member);
                }
                RecordValue::TargetMetadata {
                    assignment_epoch,
                    assignor,
                } => {
                    group.assignment_epoch = assignment_epoch;
                    group.assignor = assignor;
                }
                RecordValue::TargetMember(a) => targets.push((key, a)),
                RecordValue::CurrentAssignment(c) => currents.push((key, c)),
            }
        }
        for (key, target) in targets {
            if let Some(g) = groups.get_mut(&key.group_id) {
                if g.members.contains_key(&key.member_id) {
                    g.target.insert(key.member_id, target);
                }
            }
        }
        for (key, current) in currents {
            if let Some(g) = groups.get_mut(&key.group_id) {
                if let Some(m) = g.members.get_mut(&key.member_id) {
                    restore_current(m, current, now_ms);
                }
            }
        }
        for g in groups.values_mut() {
            index(g)?;
        }
        Ok(groups)
    }
}

fn recovered_member(
    member_id: &str,
    m: MemberMetadata,
    now_ms: i64,
) -> Result<ConsumerMember, RecordError> {
    let name = RecordType::MemberMetadata.name();
    // It compiled when the member subscribed; a broker since configured with a lower
    // bound keeps it.
    let regex = m
        .subscribed_topic_regex
        .as_deref()
        .map(|re| compile_regex(re, usize::MAX))
        .transpose()
        .map_err(|_| corrupt(name, "a subscription regex that does not compile"))?;
    Ok(ConsumerMember {
        member_id: member_id.to_string(),
        instance_id: m.instance_id,
        rack_id: m.rack_id,
        client_id: m.client_id,
        client_host: m.client_host,
        member_epoch: 0,
        previous_member_epoch: 0,
        state: MemberState::Stable,
        rebalance_timeout_ms: m.rebalance_timeout_ms,
        server_assignor: m.server_assignor,
        subscribed_topic_names: m.subscribed_topic_names,
        subscribed_topic_regex: m.subscribed_topic_regex,
        regex,
        subscribed: m.subscribed,
        assigned: Assignment::new(),
        revoking: Assignment::new(),
        partition_epochs: HashMap::new(),
        last_heartbeat_ms: now_ms,
        revocation_deadline_ms: None,
        left_static: false,
        classic: None,
    })
}

fn restore_current(m: &mut ConsumerMember, c: CurrentAssignment, now_ms: i64) {
    m.member_epoch = c.member_epoch;
    m.previous_member_epoch = c.previous_member_epoch;
    m.state = c.state;
    m.left_static = c.left_static;
    m.assigned = c.assigned;
    m.revoking = c.revoking;
    m.partition_epochs = c.partition_epochs.into_iter().collect();
    let revoking = m.revoking.values().any(|ps| !ps.is_empty());
    m.revocation_deadline_ms = revoking.then(|| now_ms + i64::from(m.rebalance_timeout_ms));
}

/// Rebuilds what the group derives from its members: static members by instance id
/// and the one owner of each held partition.
fn index(g: &mut ConsumerGroup) -> Result<(), RecordError> {
    let name = RecordType::CurrentAssignment.name();
    for m in g.members.values() {
        if let Some(instance) = &m.instance_id {
            g.static_members
                .insert(instance.clone(), m.member_id.clone());
        }
        let held = m.assigned.iter().chain(m.revoking.iter());
        for (t, p) in held.flat_map(|(t, ps)| ps.iter().map(move |p| (t, *p))) {
            if let Some(other) = g.owners.insert((t.clone(), p), m.member_id.clone()) {
                return Err(corrupt(
                    name,
                    format!(
                        "group {}: {t}-{p} held by members {other} and {}",
                        g.group_id, m.member_id
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What the log holds of one group: its records' encoded values and the epochs they
/// were written at.
#[derive(Debug, Default)]
struct WrittenGroup {
    group_epoch: i32,
    assignment_epoch: i32,
    values: BTreeMap<RecordKey, Bytes>,
}

/// What the log holds of every group, so a step writes only what it changed.
#[derive(Debug, Default)]
pub struct Written {
    groups: HashMap<String, WrittenGroup>,
}

/// The records a step changed, to append as one batch; [`Written::wrote`] once they
/// are appended.
#[derive(Debug)]
pub struct Changes {
    group_id: String,
    epochs: Option<(i32, i32)>,
    records: Vec<(RecordKey, Option<Bytes>)>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records as (key, value) pairs, a tombstone without a value.
    pub fn records(&self) -> impl Iterator<Item = (Bytes, Option<Bytes>)> + '_ {
        self.records.iter().map(|(k, v)| (k.encode(), v.clone()))
    }
}

impl Written {
    /// What the log holds after replay: every recovered group's records.
    pub fn recovered(groups: &BTreeMap<String, ConsumerGroup>) -> Written {
        let mut written = Written::default();
        for g in groups.values() {
            let changes = written.changes(g.group_id.as_str(), Some(g), None);
            written.wrote(changes);
        }
        written
    }

    /// The records that bring the log to `group` (`None`: the group is gone, so every
    /// record it has is tombstoned). `member` names the member a heartbeat moved: when
    /// neither epoch moved and the log already holds that member, only the group's own
    /// records and the member's can have changed, and only they are compared.
    pub fn changes(
        &self,
        group_id: &str,
        group: Option<&ConsumerGroup>,
        member: Option<&str>,
    ) -> Changes {
        let written = self.groups.get(group_id);
        let Some(group) = group else {
            let records = written
                .map(|w| w.values.keys().map(|k| (k.clone(), None)).collect())
                .unwrap_or_default();
            return Changes {
                group_id: group_id.to_string(),
                epochs: None,
                records,
            };
        };
        let epochs = (group.group_epoch, group.assignment_epoch);
        let empty = WrittenGroup::default();
        let w = written.unwrap_or(&empty);
        let only_member = member.filter(|m| {
            written.is_some()
                && (w.group_epoch, w.assignment_epoch) == epochs
                && w.values.contains_key(&RecordKey::member(
                    RecordType::MemberMetadata,
                    group_id,
                    m,
                ))
        });
        let mut records = Vec::new();
        let mut now: BTreeMap<RecordKey, RecordValue> = project_group(group).into_iter().collect();
        match only_member {
            Some(m) => now.extend(project_member(group, m)),
            None => now.extend(project(group)),
        }
        // A member's target can go while the member stays (an empty target).
        let compared: Vec<&RecordKey> = match only_member {
            Some(m) => [
                RecordType::MemberMetadata,
                RecordType::TargetMember,
                RecordType::CurrentAssignment,
            ]
            .iter()
            .filter_map(|t| w.values.get_key_value(&RecordKey::member(*t, group_id, m)))
            .map(|(k, _)| k)
            .collect(),
            None => w.values.keys().collect(),
        };
        for key in compared {
            if !now.contains_key(key) {
                records.push((key.clone(), None));
            }
        }
        for (key, value) in now {
            let bytes = value.encode();
            if w.values.get(&key) != Some(&bytes) {
                records.push((key, Some(bytes)));
            }
        }
        Changes {
            group_id: group_id.to_string(),
            epochs: Some(epochs),
            records,
        }
    }

    /// Records that `changes` are in the log.
    pub fn wrote(&mut self, changes: Changes) {
        let Some((group_epoch, assignment_epoch)) = changes.epochs else {
            self.groups.remove(&changes.group_id);
            return;
        };
        let w = self.groups.entry(changes.group_id).or_default();
        w.group_epoch = group_epoch;
        w.assignment_epoch = assignment_epoch;
        for (key, value) in changes.records {
            match value {
                Some(v) => w.values.insert(key, v),
                None => w.values.remove(&key),
            };
        }
    }

    /// The groups the log holds, for finding the ones a step removed.
    pub fn group_ids(&self) -> impl Iterator<Item = &String> {
        self.groups.keys()
    }

    /// The epochs the log holds a group at, if it holds the group.
    pub fn epochs(&self, group_id: &str) -> Option<(i32, i32)> {
        self.groups
            .get(group_id)
            .map(|w| (w.group_epoch, w.assignment_epoch))
    }
}

#[cfg(test)]
mod tests;
