//! Classic members of a consumer group: online conversion between the protocols.
//!
//! A consumer group converted from a classic one (or joined by a classic consumer
//! during a rolling downgrade) holds members of both kinds. A classic member speaks
//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the group serves it with the
//! consumer protocol's state underneath, as Kafka does:
//!
//! - its subscription and the partitions it owns come from the consumer protocol
//!   subscription in its JoinGroup metadata;
//! - the broker's assignor computes its target with everyone else's; a JoinGroup
//!   reconciles it (revoke first, then take what is free, as for any member) and is
//!   answered at once with its member epoch as the generation, never as the leader;
//! - SyncGroup hands it what it holds, in the consumer protocol's assignment format;
//! - Heartbeat answers REBALANCE_IN_PROGRESS while it holds something other than its
//!   target, so it rejoins; a cooperative client that must give partitions up gets
//!   them left out of its SyncGroup answer, revokes them and rejoins, and only then
//!   are they handed on, so a partition never has two owners across both kinds.
//!
//! Its session is its own `session.timeout.ms`; commits are checked against its member
//! epoch exactly (ILLEGAL_GENERATION otherwise), as a classic generation is.

use super::topics::Assignment;
use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::collections::BTreeSet;

/// What a classic member brings beyond a consumer-protocol member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicMember {
    /// (name, metadata) as its last JoinGroup listed them, in its order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// The protocol (client-side assignor name) it was told to use.
    pub protocol: String,
    pub session_timeout_ms: i32,
}

/// A classic member as the conversion of a classic group brings it in.
pub struct Converted {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub classic: ClassicMember,
    pub topics: Vec<String>,
    pub assigned: Assignment,
}

/// A consumer protocol subscription decoded from a JoinGroup's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// The partitions it holds (version 1 and later; empty before).
    pub owned: Assignment,
}

/// Decodes a consumer protocol subscription (a classic member's metadata): topics,
/// user data, and from version 1 the owned partitions; later fields are not needed.
/// A newer version is read as these fields, as Kafka's clients do.
pub fn decode_subscription(metadata: &Bytes) -> Option<Subscription> {
    let mut r = Reader(metadata.clone());
    let version = r.i16()?;
    if version < 0 {
        return None;
    }
    let count = r.count(2)?;
    let topics = (0..count).map(|_| r.string()).collect::<Option<Vec<_>>>()?;
    r.nullable_bytes()?;
    let owned = match version {
        0 => Assignment::new(),
        _ => r.partitions()?,
    };
    Some(Subscription { topics, owned })
}

/// Decodes a consumer protocol assignment (what a classic leader gave a member).
pub fn decode_assignment(bytes: &Bytes) -> Option<Assignment> {
    if bytes.is_empty() {
        return Some(Assignment::new());
    }
    let mut r = Reader(bytes.clone());
    if r.i16()? < 0 {
        return None;
    }
    r.partitions()
}

/// Reads the consumer protocol's (non-flexible) fields, checking every count and length
/// against the bytes left before anything is allocated: the bytes come from clients.
struct Reader(Bytes);

impl Reader {
    fn i16(&mut self) -> Option<i16> {
        (self.0.remaining() >= 2).then(|| self.0.get_i16())
    }

    fn i32(&mut self) -> Option<i32> {
        (self.0.remaining() >= 4).then(|| self.0.get_i32())
    }

    /// An array count (-1, null, is empty), each element at least `min_size` bytes.
    fn count(&mut self, min_size: usize) -> Option<usize> {
        match self.i32()? {
            -1 => Some(0),
            n if n < 0 => None,
            n => {
                let n = n as usize;
                (n.checked_mul(min_size)? <= self.0.remaining()).then_some(n)
            }
        }
    }

    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        if n > self.0.remaining() {
            return None;
        }
        String::from_utf8(self.0.split_to(n).to_vec()).ok()
    }

    fn nullable_bytes(&mut self) -> Option<()> {
        match self.i32()? {
            -1 => Some(()),
            n => {
                let n = usize::try_from(n).ok()?;
                (n <= self.0.remaining()).then(|| self.0.advance(n))
            }
        }
    }

    /// An array of (topic, partitions), topics without partitions left out.
    fn partitions(&mut self) -> Option<Assignment> {
        let mut out = Assignment::new();
        for _ in 0..self.count(6)? {
            let topic = self.string()?;
            let count = self.count(4)?;
            let partitions = (0..count).map(|_| self.i32()).collect::<Option<Vec<_>>>()?;
            if !partitions.is_empty() {
                out.entry(topic).or_default().extend(partitions);
            }
        }
        Some(out)
    }
}

/// A subscription in the consumer protocol's format (version 0).
pub fn encode_subscription(topics: &BTreeSet<String>) -> Bytes {
    let names = topics.iter().map(|t| StrBytes::from_string(t.clone()));
    let message = ConsumerProtocolSubscription::default().with_topics(names.collect());
    versioned(&message, 0)
}

/// An assignment in the consumer protocol's format (version 0).
pub fn encode_assignment(assignment: &Assignment) -> Bytes {
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition as Assigned;
    use kafka_protocol::messages::TopicName;
    let partitions = assignment.iter().map(|(t, ps)| {
        Assigned::default()
            .with_topic(TopicName(StrBytes::from_string(t.clone())))
            .with_partitions(ps.iter().copied().collect())
    });
    let message =
        ConsumerProtocolAssignment::default().with_assigned_partitions(partitions.collect());
    versioned(&message, 0)
}

fn versioned<M: Encodable>(message: &M, version: i16) -> Bytes {
    use bytes::BufMut;
    let mut buf = bytes::BytesMut::new();
    buf.put_i16(version);
    // Encoding a message built here from valid strings cannot fail.
    message
        .encode(&mut buf, version)
        .expect("a consumer protocol message encodes");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_and_assignments_round_trip_and_bad_bytes_are_refused() {
        let topics: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let decoded = decode_subscription(&encode_subscription(&topics)).expect("decodes");
        assert_eq!(decoded.topics, vec!["a", "b"]);
        let assignment: Assignment = [("a".to_string(), [0, 3].into())].into();
        assert_eq!(
            decode_assignment(&encode_assignment(&assignment)),
            Some(assignment)
        );
        // Two billion topics in a few bytes: refused before anything is allocated.
        let huge = Bytes::from_static(b"\x00\x00\x7f\xff\xff\xff\x00\x01a");
        assert_eq!(decode_subscription(&huge), None);
        assert_eq!(decode_assignment(&huge), None);
        for cut in 1..6 {
            let bytes = encode_assignment(&[("a".to_string(), [1].into())].into());
            assert_eq!(decode_assignment(&bytes.slice(..cut)), None, "cut at {cut}");
        }
        assert_eq!(decode_assignment(&Bytes::new()), Some(Assignment::new()));
        assert_eq!(decode_subscription(&Bytes::from_static(b"\xff\xff")), None);
    }
}
