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

use super::Assignment;
use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
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

/// A consumer protocol subscription decoded from a JoinGroup's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    pub topics: Vec<String>,
    /// The partitions it holds (version 1 and later; empty before).
    pub owned: Assignment,
}

/// Newest version of the consumer protocol messages this decoder knows; a newer one
/// is read as this one, as Kafka's clients do.
const CONSUMER_PROTOCOL_VERSION_MAX: i16 = 3;

/// Decodes a consumer protocol subscription (a classic member's metadata).
pub fn decode_subscription(metadata: &Bytes) -> Option<Subscription> {
    let mut buf = metadata.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16().min(CONSUMER_PROTOCOL_VERSION_MAX);
    if version < 0 {
        return None;
    }
    let message = ConsumerProtocolSubscription::decode(&mut buf, version).ok()?;
    let mut owned = Assignment::new();
    for tp in message.owned_partitions {
        owned
            .entry(tp.topic.to_string())
            .or_default()
            .extend(tp.partitions);
    }
    Some(Subscription {
        topics: message.topics.iter().map(|t| t.to_string()).collect(),
        owned,
    })
}

/// Decodes a consumer protocol assignment (what a classic leader gave a member).
pub fn decode_assignment(bytes: &Bytes) -> Option<Assignment> {
    if bytes.is_empty() {
        return Some(Assignment::new());
    }
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16().min(CONSUMER_PROTOCOL_VERSION_MAX);
    if version < 0 {
        return None;
    }
    let message = ConsumerProtocolAssignment::decode(&mut buf, version).ok()?;
    let mut out = Assignment::new();
    for tp in message.assigned_partitions {
        if !tp.partitions.is_empty() {
            out.entry(tp.topic.to_string())
                .or_default()
                .extend(tp.partitions);
        }
    }
    Some(out)
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
