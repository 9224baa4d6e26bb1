//! The read-only web console (`--console-listen HOST:PORT`, `docs/console.md`): a small
//! page embedded in the binary (`crates/server/console/`) that polls `/api/state` once a
//! second and draws topics, groups, connections and traffic from it.
//!
//! It is served by the same small HTTP code as `/metrics` ([`metrics::serve_http`]).
//! `/api/state` reads the broker's state once per request: partitions (offsets, size on
//! disk, traffic counters), groups (members, decoded assignments, committed offsets and
//! lag) and connections (window, reader paused, outbound bytes held). Rates and the lag
//! history are computed in the page from successive polls: the broker keeps nothing
//! for the console. Every list is bounded (`limits::CONSOLE_*`) and counts what it left
//! out.

use crate::call::Ctx;
use crate::metrics::{self, Reply};
use bytes::Bytes;
use headway_base::limits;
use headway_broker::partition::probe::dir_bytes;
use headway_broker::TrafficCounts;
use headway_group::MemberSummary;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("../console/index.html");
const CONSOLE_JS: &str = include_str!("../console/console.js");
const CONSOLE_CSS: &str = include_str!("../console/console.css");

/// Binds `listen` and serves the console on a task until the process ends.
pub async fn start(listen: &str, ctx: Arc<Ctx>) -> std::io::Result<SocketAddr> {
    metrics::serve_http(listen, move |target| route(target, Arc::clone(&ctx))).await
}

async fn route(target: String, ctx: Arc<Ctx>) -> std::io::Result<Reply> {
    let path = target.split('?').next().unwrap_or_default();
    Ok(match path {
        "/" | "/index.html" => Reply::ok("text/html; charset=utf-8", INDEX_HTML.as_bytes()),
        "/console.js" => Reply::ok("text/javascript; charset=utf-8", CONSOLE_JS.as_bytes()),
        "/console.css" => Reply::ok("text/css; charset=utf-8", CONSOLE_CSS.as_bytes()),
        "/api/state" => {
            // Sizes on disk come from reading the partitions' directories: off the runtime.
            let body = tokio::task::spawn_blocking(move || {
                serde_json::to_vec(&state(&ctx)).map_err(std::io::Error::other)
            })
            .await
            .map_err(std::io::Error::other)??;
            Reply::ok("application/json", body)
        }
        _ => Reply::not_found("try / or /api/state\n"),
    })
}

/// The answer of `/api/state`.
#[derive(Debug, Serialize)]
pub struct State {
    /// The broker's clock when the state was read, ms since the epoch.
    pub now_ms: i64,
    pub node_id: i32,
    /// Traffic of every partition (listed or not): the page's rates come from it.
    pub totals: Traffic,
    pub topics: Vec<TopicState>,
    pub topics_total: usize,
    pub partitions_total: usize,
    /// Partitions left out of `topics` (past `CONSOLE_PARTITIONS_MAX`).
    pub partitions_omitted: usize,
    pub groups: Vec<GroupState>,
    pub groups_total: usize,
    /// Groups left out (past `CONSOLE_GROUPS_MAX`).
    pub groups_omitted: usize,
    /// The connections holding the most outbound bytes first.
    pub connections: Vec<ConnectionState>,
    pub connections_total: usize,
    /// Connections left out (past `CONSOLE_CONNECTIONS_MAX`).
    pub connections_omitted: usize,
    /// Outbound bytes held by all connections, and the broker-wide limit.
    pub outbound_bytes_held: usize,
    pub outbound_bytes_max: usize,
    /// True when any list above left entries out.
    pub truncated: bool,
}

#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct Traffic {
    pub bytes_in: u64,
    pub records_in: u64,
    pub bytes_out: u64,
    pub records_out: u64,
}

impl From<TrafficCounts> for Traffic {
    fn from(t: TrafficCounts) -> Traffic {
        Traffic {
            bytes_in: t.bytes_in,
            records_in: t.records_in,
            bytes_out: t.bytes_out,
            records_out: t.records_out,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TopicState {
    pub name: String,
    pub partitions: Vec<PartitionState>,
}

#[derive(Debug, Serialize)]
pub struct PartitionState {
    pub partition: i32,
    pub size_bytes: u64,
    pub log_start: i64,
    /// `None` while the log cannot say (offline).
    pub log_end: Option<i64>,
    pub high_watermark: i64,
    pub offline: bool,
    pub traffic: Traffic,
}

#[derive(Debug, Serialize)]
pub struct GroupState {
    pub group_id: String,
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberState>,
    pub members_omitted: usize,
    pub offsets: Vec<GroupOffset>,
    pub offsets_omitted: usize,
    /// Sum of `lag` over the listed partitions.
    pub lag: i64,
}

#[derive(Debug, Serialize)]
pub struct MemberState {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Decoded from the consumer protocol; empty for other protocols.
    pub assignment: Vec<AssignedTopic>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct AssignedTopic {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Debug, Serialize)]
pub struct GroupOffset {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    /// `None` when the topic is gone (its commits stay until they expire).
    pub high_watermark: Option<i64>,
    /// Records between the commit and the high watermark (0 when the commit is ahead).
    pub lag: Option<i64>,
}

#[derive(Debug, Serialize)]
pub struct ConnectionState {
    pub id: u64,
    pub peer: String,
    pub client_id: Option<String>,
    pub requests_read: u64,
    pub responses_written: u64,
    /// Replies read and not yet written (the request window).
    pub in_flight: usize,
    pub in_flight_max: usize,
    /// True while the window is full and the socket is not read.
    pub reader_paused: bool,
    pub window_full_events: u64,
    /// Bytes of fetch responses held for this connection, and its limit.
    pub outbound_bytes_held: usize,
    pub outbound_bytes_max: usize,
    pub bytes_written: u64,
}

/// Reads the state once. Blocking: reads the partitions' directories.
pub fn state(ctx: &Ctx) -> State {
    let broker = &ctx.broker;
    let mut totals = TrafficCounts::default();
    let mut topics = Vec::new();
    let (mut partitions_total, mut listed) = (0usize, 0usize);
    let all_topics = broker.topics();
    let topics_dir = broker.config().data_dir.join("topics");
    for topic in &all_topics {
        let mut partitions = Vec::new();
        for p in topic.partitions() {
            let traffic = p.traffic();
            totals += traffic;
            partitions_total += 1;
            if listed >= limits::CONSOLE_PARTITIONS_MAX {
                continue;
            }
            listed += 1;
            let index = p.index().value();
            partitions.push(PartitionState {
                partition: index,
                size_bytes: dir_bytes(&topics_dir.join(topic.name()).join(index.to_string())),
                log_start: p.log_start_offset().value(),
                log_end: p.log_end_offset().ok().map(|o| o.value()),
                high_watermark: p.high_watermark().value(),
                offline: p.health().offline,
                traffic: traffic.into(),
            });
        }
        if !partitions.is_empty() {
            topics.push(TopicState {
                name: topic.name().to_string(),
                partitions,
            });
        }
    }
    let partitions_omitted = partitions_total - listed;

    let mut ids: Vec<String> = ctx.groups.list().into_iter().map(|g| g.group_id).collect();
    ids.sort();
    let groups: Vec<GroupState> = ids
        .iter()
        .take(limits::CONSOLE_GROUPS_MAX)
        .filter_map(|id| group_state(ctx, id))
        .collect();
    let groups_omitted = ids.len().saturating_sub(limits::CONSOLE_GROUPS_MAX);

    let stats = ctx.stats.snapshot();
    let mut conns = stats.connections;
    // The slow one on top: most bytes held, then a paused reader, then the fullest window.
    conns.sort_by(|a, b| {
        (b.outbound_bytes_held, b.reader_paused, b.in_flight, a.id).cmp(&(
            a.outbound_bytes_held,
            a.reader_paused,
            a.in_flight,
            b.id,
        ))
    });
    let connections_total = conns.len();
    let connections: Vec<ConnectionState> = conns
        .into_iter()
        .take(limits::CONSOLE_CONNECTIONS_MAX)
        .map(|c| ConnectionState {
            id: c.id,
            peer: c.peer.to_string(),
            client_id: c.client_id.map(|id| id.to_string()),
            requests_read: c.requests_read,
            responses_written: c.responses_written,
            in_flight: c.in_flight,
            in_flight_max: limits::REQUESTS_IN_FLIGHT_PER_CONNECTION_MAX,
            reader_paused: c.reader_paused,
            window_full_events: c.window_full_events,
            outbound_bytes_held: c.outbound_bytes_held,
            outbound_bytes_max: c.outbound_bytes_max,
            bytes_written: c.bytes_written,
        })
        .collect();
    let connections_omitted = connections_total - connections.len();
    let truncated = partitions_omitted > 0
        || groups_omitted > 0
        || connections_omitted > 0
        || groups
            .iter()
            .any(|g| g.members_omitted > 0 || g.offsets_omitted > 0);
    State {
        now_ms: headway_base::now_ms(),
        node_id: broker.config().node_id,
        totals: totals.into(),
        topics,
        topics_total: all_topics.len(),
        partitions_total,
        partitions_omitted,
        groups,
        groups_total: ids.len(),
        groups_omitted,
        connections,
        connections_total,
        connections_omitted,
        outbound_bytes_held: stats.outbound_bytes_held,
        outbound_bytes_max: stats.outbound_bytes_max,
        truncated,
    }
}

/// One group, bounded; `None` if it went away since it was listed.
fn group_state(ctx: &Ctx, group_id: &str) -> Option<GroupState> {
    let coordinator = ctx.groups.of(group_id).ok()?;
    let group = coordinator.describe(group_id)?;
    let max = limits::CONSOLE_GROUP_ENTRIES_MAX;
    let members_omitted = group.members.len().saturating_sub(max);
    let consumer = group.protocol_type == "consumer" || group.protocol_type.is_empty();
    let members = group
        .members
        .into_iter()
        .take(max)
        .map(|m| member_state(m, consumer))
        .collect();
    let mut committed = coordinator.committed(group_id, None);
    committed.sort_by(|a, b| a.0.cmp(&b.0));
    let offsets_omitted = committed.len().saturating_sub(max);
    let offsets: Vec<GroupOffset> = committed
        .into_iter()
        .take(max)
        .map(|(tp, c)| {
            let at = c.commit.offset.value();
            let high_watermark = ctx
                .broker
                .partition(&tp.topic, tp.partition)
                .ok()
                .map(|p| p.high_watermark().value());
            GroupOffset {
                partition: tp.partition.value(),
                topic: tp.topic,
                committed: at,
                high_watermark,
                lag: high_watermark.map(|hw| hw.saturating_sub(at).max(0)),
            }
        })
        .collect();
    Some(GroupState {
        lag: offsets.iter().filter_map(|o| o.lag).sum(),
        group_id: group.group_id,
        state: group.state,
        protocol_type: group.protocol_type,
        protocol: group.protocol_name,
        members,
        members_omitted,
        offsets,
        offsets_omitted,
    })
}

fn member_state(m: MemberSummary, consumer: bool) -> MemberState {
    MemberState {
        assignment: if consumer {
            assigned(m.assignment)
        } else {
            Vec::new()
        },
        member_id: m.member_id,
        group_instance_id: m.group_instance_id,
        client_id: m.client_id,
        client_host: m.client_host,
    }
}

/// The partitions a consumer-protocol assignment names (a version prefix, then the
/// topics); empty when the bytes are not one. The bytes are a client's (a classic
/// leader's SyncGroup), so they are read by the group crate's decoder, which checks
/// every count against the bytes left before it allocates anything.
fn assigned(bytes: Bytes) -> Vec<AssignedTopic> {
    let Some(decoded) = headway_group::consumer::classic::decode_assignment(&bytes) else {
        return Vec::new();
    };
    decoded
        .into_iter()
        .map(|(topic, partitions)| AssignedTopic {
            topic,
            partitions: partitions.into_iter().collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    #[test]
    fn a_consumer_assignment_is_decoded_and_garbage_is_empty() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![0, 2]),
        ]);
        let mut bytes = bytes::BytesMut::new();
        bytes.put_i16(1);
        assignment.encode(&mut bytes, 1).unwrap();
        assert_eq!(
            assigned(bytes.freeze()),
            [AssignedTopic {
                topic: "orders".into(),
                partitions: vec![0, 2]
            }]
        );
        assert!(assigned(Bytes::from_static(b"\x00")).is_empty());
        assert!(assigned(Bytes::from_static(b"\x00\x01\xff\xff\xff")).is_empty());
        assert!(assigned(Bytes::from_static(b"\x7f\x00")).is_empty());
        // A count of 2^31 - 1 topics in a few bytes is refused, not allocated for.
        assert!(assigned(Bytes::from_static(b"\x00\x01\x7f\xff\xff\xff\x00\x01a")).is_empty());
    }
}
