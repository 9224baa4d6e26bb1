//! The durable form of classic groups: one record per group in the offsets log
//! (`<data_dir>/groups/offsets/`, `__consumer_offsets`), beside the committed offsets
//! and the consumer-protocol groups' records, as Kafka keeps a classic group's metadata.
//! A coordinator that takes over the log (a restart, or a new leader of the partition)
//! knows the group's generation, leader, members and their assignments, so members
//! carry on with their heartbeats and commits instead of all joining again.
//!
//! What is written is the group as of its last completed step: when it is Stable (the
//! leader's SyncGroup gave out the assignments) or Empty after a rebalance. While it
//! rebalances the log keeps the last such snapshot, as Kafka's does; a group that is
//! removed (deleted, expired, or become a consumer-protocol group) gets a tombstone.
//! A group that only ever held offsets writes nothing here.
//!
//! Key, big-endian: the record type 2 (Kafka's key version for group metadata; the
//! offsets log's other keys start with 0, 1 or 3 to 8), then the group id (length
//! u16, UTF-8).
//!
//! Value (absent for a tombstone): a format version byte, 0, then the protocol type
//! (optional string), generation i32, protocol name (optional string), leader
//! (optional string) and the members: a u32 count, then for each its member id,
//! instance id (optional string), client id, client host, rebalance timeout ms i32,
//! session timeout ms i32, protocols (a u32 count of (name string, metadata bytes)) and
//! assignment bytes. Strings and optional strings are as in the consumer-protocol
//! records ([`crate::consumer::durable`]); bytes are a u32 length and the bytes.
//!
//! Timers are not durable: a recovered member's session starts at recovery, so a
//! member that does not come back expires a session timeout after it.

use super::{Group, GroupState, Groups, Member};
use crate::consumer::durable::{corrupt, put_opt_str, Reader, RecordError};
use crate::GenerationId;
use bytes::{BufMut, Bytes, BytesMut};
use headway_broker::internal_log::put_str;
use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

/// The first byte of a classic group's key.
const RECORD_TYPE: u8 = 2;
/// The format version of every value.
const VALUE_VERSION: u8 = 0;
const NAME: &str = "classic group metadata";

/// Whether an offsets-log key is a classic group's record.
pub fn is_classic_record(key: &[u8]) -> bool {
    key.first() == Some(&RECORD_TYPE)
}

/// A classic group as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicSnapshot {
    pub protocol_type: Option<String>,
    pub generation: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub members: Vec<SnapshotMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
}

/// The key of `group_id`'s record.
pub fn key(group_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(3 + group_id.len());
    buf.put_u8(RECORD_TYPE);
    put_str(&mut buf, group_id);
    buf.freeze()
}

fn put_bytes(buf: &mut BytesMut, b: &[u8]) {
    buf.put_u32(b.len() as u32);
    buf.put_slice(b);
}

impl ClassicSnapshot {
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::new();
        buf.put_u8(VALUE_VERSION);
        put_opt_str(&mut buf, &self.protocol_type);
        buf.put_i32(self.generation);
        put_opt_str(&mut buf, &self.protocol_name);
        put_opt_str(&mut buf, &self.leader);
        buf.put_u32(self.members.len() as u32);
        for m in &self.members {
            put_str(&mut buf, &m.member_id);
            put_opt_str(&mut buf, &m.instance_id);
            put_str(&mut buf, &m.client_id);
            put_str(&mut buf, &m.client_host);
            buf.put_i32(m.rebalance_timeout_ms);
            buf.put_i32(m.session_timeout_ms);
            buf.put_u32(m.protocols.len() as u32);
            for (name, metadata) in &m.protocols {
                put_str(&mut buf, name);
                put_bytes(&mut buf, metadata);
            }
            put_bytes(&mut buf, &m.assignment);
        }
        buf.freeze()
    }

    fn decode_fields(r: &mut Reader) -> Result<ClassicSnapshot, String> {
        let version = r.u8()?;
        if version != VALUE_VERSION {
            return Err(format!("unknown value format version {version}"));
        }
        let protocol_type = r.opt_str()?;
        let generation = r.i32()?;
        let protocol_name = r.opt_str()?;
        let leader = r.opt_str()?;
        let mut members = Vec::new();
        for _ in 0..r.u32()? {
            let member_id = r.str()?;
            let instance_id = r.opt_str()?;
            let client_id = r.str()?;
            let client_host = r.str()?;
            let rebalance_timeout_ms = r.i32()?;
            let session_timeout_ms = r.i32()?;
            let mut protocols = Vec::new();
            for _ in 0..r.u32()? {
                let name = r.str()?;
                protocols.push((name, r.bytes()?));
            }
            members.push(SnapshotMember {
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocols,
                assignment: r.bytes()?,
            });
        }
        r.end()?;
        Ok(ClassicSnapshot {
            protocol_type,
            generation,
            protocol_name,
            leader,
            members,
        })
    }
}

/// Decodes an offsets-log record whose key [`is_classic_record`]: the group id and its
/// snapshot (`None` for a tombstone).
pub fn decode(
    key: Bytes,
    value: Option<Bytes>,
) -> Result<(String, Option<ClassicSnapshot>), RecordError> {
    let mut k = Reader(key);
    k.u8().map_err(|e| corrupt(NAME, format!("key: {e}")))?;
    let group_id = k.str().map_err(|e| corrupt(NAME, format!("key: {e}")))?;
    k.end().map_err(|e| corrupt(NAME, format!("key: {e}")))?;
    let snapshot = value
        .map(|v| ClassicSnapshot::decode_fields(&mut Reader(v)))
        .transpose()
        .map_err(|e| corrupt(NAME, format!("group {group_id:?}: {e}")))?;
    Ok((group_id, snapshot))
}

/// What the log should hold of one classic group now.
#[derive(Debug, PartialEq, Eq)]
pub enum Durable {
    /// The group as it is (Stable, or Empty after a rebalance).
    Snapshot(ClassicSnapshot),
    /// Whatever the log holds: the group is between two completed steps.
    Keep,
    /// Nothing: the group is gone, belongs to the consumer protocol now, or never
    /// rebalanced.
    Absent,
}

/// A cheap summary of a classic group's durable state: the ticker compares it to find
/// the groups it changed without building every group's snapshot.
pub type Mark = (GroupState, GenerationId);

fn mark_of(g: &Group) -> Mark {
    (g.state, g.generation_id)
}

impl Group {
    fn snapshot(&self) -> ClassicSnapshot {
        ClassicSnapshot {
            protocol_type: self.protocol_type.clone(),
            generation: self.generation_id.value(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            members: self
                .members
                .values()
                .map(|m| SnapshotMember {
                    member_id: m.member_id.clone(),
                    instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}

impl Groups {
    /// What the log should hold of the classic group `group_id` now.
    pub fn classic_durable(&self, group_id: &str) -> Durable {
        let Some(g) = self.groups.get(group_id) else {
            return Durable::Absent;
        };
        if self.consumer.contains_key(group_id) {
            return Durable::Absent;
        }
        match g.state {
            GroupState::Stable => Durable::Snapshot(g.snapshot()),
            GroupState::Empty if g.generation_id != GenerationId::INITIAL => {
                Durable::Snapshot(g.snapshot())
            }
            GroupState::Empty => Durable::Absent,
            GroupState::PreparingRebalance | GroupState::CompletingRebalance => Durable::Keep,
        }
    }

    /// Every classic group's [`Mark`].
    pub fn classic_marks(&self) -> impl Iterator<Item = (&String, Mark)> + '_ {
        self.groups.iter().map(|(id, g)| (id, mark_of(g)))
    }

    /// Brings back a classic group from its record after a replay (its offsets may be
    /// there already): Stable with its members, their sessions starting at `now_ms`,
    /// or Empty at its generation. A group the consumer protocol holds is left alone.
    pub fn restore_classic(&mut self, group_id: &str, snapshot: ClassicSnapshot, now_ms: i64) {
        if self.consumer.contains_key(group_id) {
            return;
        }
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, now_ms));
        group.generation_id = GenerationId::new(snapshot.generation);
        group.protocol_type = snapshot.protocol_type;
        group.protocol_name = snapshot.protocol_name;
        group.leader_id = snapshot.leader;
        group.members.clear();
        group.static_members.clear();
        for m in snapshot.members {
            if let Some(instance) = &m.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            group.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id,
                    group_instance_id: m.instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: m.protocols,
                    assignment: m.assignment,
                    last_heartbeat_ms: now_ms,
                    awaiting_join: None,
                    awaiting_sync: None,
                    epoch_before_downgrade: None,
                },
            );
        }
        group.state = match group.members.is_empty() {
            true => GroupState::Empty,
            false => GroupState::Stable,
        };
    }
}

/// What the log holds of classic groups: for each group written, its [`Mark`] and a
/// hash of its record's value, so a step appends a record only when the group changed.
#[derive(Debug, Default)]
pub struct ClassicWritten {
    groups: HashMap<String, (Mark, u64)>,
}

fn hash_of(value: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

impl ClassicWritten {
    /// What the log holds after a replay: the last record of each group in `logged`
    /// (the groups restored from them are as their records say; a group the replay
    /// left out, taken by the consumer protocol, gets its tombstone at the next tick).
    pub fn recovered(
        groups: &Groups,
        logged: &BTreeMap<String, ClassicSnapshot>,
    ) -> ClassicWritten {
        let gone = (GroupState::Empty, GenerationId::INITIAL);
        let groups_written = logged
            .iter()
            .map(|(id, s)| {
                let mark = groups.get(id).map_or(gone, mark_of);
                (id.clone(), (mark, hash_of(&s.encode())))
            })
            .collect();
        ClassicWritten {
            groups: groups_written,
        }
    }

    /// The record that brings the log to `group_id` as `groups` holds it (its value,
    /// `None` for a tombstone), or nothing when the log holds it already.
    pub fn change(&self, groups: &Groups, group_id: &str) -> Option<(Bytes, Option<Bytes>)> {
        let held = self.groups.get(group_id);
        match groups.classic_durable(group_id) {
            Durable::Keep => None,
            Durable::Absent => held.map(|_| (key(group_id), None)),
            Durable::Snapshot(s) => {
                let value = s.encode();
                let unchanged = held.is_some_and(|(_, h)| *h == hash_of(&value));
                (!unchanged).then(|| (key(group_id), Some(value)))
            }
        }
    }

    /// Records that `record` (from [`ClassicWritten::change`]) is in the log.
    pub fn wrote(&mut self, group_id: &str, groups: &Groups, record: &(Bytes, Option<Bytes>)) {
        match (&record.1, groups.get(group_id)) {
            (Some(value), Some(g)) => {
                self.groups
                    .insert(group_id.to_string(), (mark_of(g), hash_of(value)));
            }
            _ => {
                self.groups.remove(group_id);
            }
        }
    }

    /// The groups the ticker may have changed: those whose mark moved since their
    /// record, those gone or taken by the consumer protocol, and those that became
    /// Empty after a rebalance without a record yet. Cheap: no snapshot is built.
    pub fn moved(&self, groups: &Groups) -> Vec<String> {
        let mut out: Vec<String> = self
            .groups
            .keys()
            .filter(|id| groups.get(id).is_none() || groups.consumer.contains_key(*id))
            .cloned()
            .collect();
        out.extend(groups.classic_marks().filter_map(|(id, mark)| {
            let durable_state = matches!(mark.0, GroupState::Stable | GroupState::Empty);
            let moved = match self.groups.get(id) {
                Some((written, _)) => *written != mark,
                None => mark.0 == GroupState::Stable || mark.1 != GenerationId::INITIAL,
            };
            (durable_state && moved).then(|| id.clone())
        }));
        out
    }
}

#[cfg(test)]
mod tests;
