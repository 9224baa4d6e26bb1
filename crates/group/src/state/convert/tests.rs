//! Online conversion over plain values: a classic group upgraded by a consumer-protocol
//! member, its classic members served by the consumer group, and the downgrade when the
//! last consumer-protocol member leaves.

use super::super::tests::{consumer_join, join, sync};
use super::super::{Groups, OffsetCommit};
use crate::consumer::classic::{decode_assignment, encode_assignment};
use crate::consumer::TopicsSource;
use crate::consumer::{
    Assignment, HeartbeatAnswer, HeartbeatRequest, MemberEpochIn, TopicInfo, TopicsView,
};
use crate::migration::MigrationPolicy;
use crate::requests::JoinRequest;
use crate::{GenerationId, GroupConfig, GroupError, GroupState};
use bytes::{BufMut, Bytes, BytesMut};
use headway_base::{Offset, PartitionIndex, TopicPartition};
use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as Owned;
use kafka_protocol::messages::{ConsumerProtocolSubscription, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};

const PARTITIONS: i32 = 6;

fn topics() -> TopicsView {
    let info = TopicInfo {
        id: uuid::Uuid::from_u128(7),
        partitions: PARTITIONS,
    };
    [("t".to_string(), info)].into()
}

fn groups(policy: MigrationPolicy) -> Groups {
    let mut groups = Groups::new(GroupConfig {
        initial_rebalance_delay_ms: 0,
        migration_policy: policy,
        ..GroupConfig::default()
    });
    groups.topics = TopicsSource::new(topics);
    groups
}

fn parts(ps: &[i32]) -> Assignment {
    match ps.is_empty() {
        true => Assignment::new(),
        false => [("t".to_string(), ps.iter().copied().collect())].into(),
    }
}

/// A consumer protocol subscription to "t" (version 1, with owned partitions).
fn subscription(owned: &[i32]) -> Bytes {
    let owned = match owned.is_empty() {
        true => Vec::new(),
        false => vec![Owned::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(owned.to_vec())],
    };
    let message = ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from_static_str("t")])
        .with_owned_partitions(owned);
    let mut buf = BytesMut::new();
    buf.put_i16(1);
    message.encode(&mut buf, 1).expect("encodes");
    buf.freeze()
}

fn join_req(member_id: &str, owned: &[i32]) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "classic".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![
            ("range".into(), subscription(owned)),
            ("cooperative-sticky".into(), subscription(owned)),
        ],
        require_known_member_id: false,
    }
}

fn consumer_req(member_id: &str, epoch: MemberEpochIn, owned: Option<&[i32]>) -> HeartbeatRequest {
    HeartbeatRequest {
        member_epoch: epoch,
        owned: owned.map(parts),
        ..consumer_join(member_id)
    }
}

/// The consumer member's heartbeat at `epoch`, owning `owned`: its epoch and the
/// assignment it is sent, if any.
fn beat(
    groups: &mut Groups,
    epoch: MemberEpochIn,
    owned: Option<&[i32]>,
    now: i64,
) -> (i32, Option<Assignment>) {
    let answer = groups
        .consumer_heartbeat(&consumer_req("c", epoch, owned), &topics(), now)
        .expect("heartbeat answered");
    let HeartbeatAnswer::Member {
        member_epoch,
        assignment,
        ..
    } = answer
    else {
        panic!("{answer:?}");
    };
    (member_epoch, assignment)
}

/// The consumer member leaves.
fn leave(groups: &mut Groups, now: i64) {
    let left = groups.consumer_heartbeat(
        &consumer_req("c", MemberEpochIn::Leave, None),
        &topics(),
        now,
    );
    assert!(matches!(left, Ok(HeartbeatAnswer::Left { .. })), "{left:?}");
}

/// A stable classic group of two members, A holding 0-2 and B 3-5; returns their ids
/// and the generation.
fn classic_group(groups: &mut Groups) -> (String, String, Option<GenerationId>) {
    let mut ja = join(groups, join_req("", &[]), 0);
    let ra = ja.try_recv().expect("answered");
    let a = ra.member_id.clone();
    let mut sa = sync(groups, &a, ra.generation_id, vec![], 0);
    sa.try_recv().expect("alone, A is stable");
    let mut jb = join(groups, join_req("", &[]), 1);
    assert_eq!(
        groups.heartbeat("g", &a, None, ra.generation_id, 2),
        Err(GroupError::RebalanceInProgress)
    );
    let mut ja = join(groups, join_req(&a, &[]), 3);
    let (ra, rb) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
    let b = rb.member_id.clone();
    let generation = ra.generation_id;
    let (leader, follower) = if ra.leader == a { (&a, &b) } else { (&b, &a) };
    let mut sf = sync(groups, follower, generation, vec![], 4);
    let mut sl = sync(
        groups,
        leader,
        generation,
        vec![
            (a.clone(), encode_assignment(&parts(&[0, 1, 2]))),
            (b.clone(), encode_assignment(&parts(&[3, 4, 5]))),
        ],
        4,
    );
    sf.try_recv().unwrap();
    sl.try_recv().unwrap();
    assert_eq!(groups.get("g").unwrap().state, GroupState::Stable);
    (a, b, generation)
}

fn commit(groups: &mut Groups, offset: i64) {
    let key = TopicPartition::new("t", PartitionIndex::new(0));
    let value = OffsetCommit {
        offset: Offset::new(offset),
        leader_epoch: None,
        metadata: None,
        commit_timestamp_ms: 0,
    }
    .at(Offset::new(offset));
    groups.apply_commit("g", vec![(key, value)], 0);
}

fn held(groups: &Groups, member: &str) -> Assignment {
    groups.consumer["g"].members[member].assigned.clone()
}

/// The classic member's rejoin as an eager client makes it (owning nothing), then its
/// SyncGroup; returns its new generation and assignment.
fn rejoin(
    groups: &mut Groups,
    member: &str,
    owned: &[i32],
    now: i64,
) -> (Option<GenerationId>, Assignment) {
    let answer = join(groups, join_req(member, owned), now)
        .try_recv()
        .expect("at once");
    assert_eq!(answer.error, None);
    assert_eq!(
        answer.leader, "",
        "a classic member of a consumer group never leads"
    );
    assert!(answer.members.is_empty());
    let synced = sync(groups, member, answer.generation_id, vec![], now)
        .try_recv()
        .expect("at once");
    assert_eq!(synced.error, None);
    let assigned = decode_assignment(&synced.assignment).expect("an assignment");
    (answer.generation_id, assigned)
}

#[test]
fn a_consumer_member_upgrades_a_stable_classic_group_and_the_classic_members_follow() {
    let mut groups = groups(MigrationPolicy::Bidirectional);
    let (a, b, generation) = classic_group(&mut groups);
    commit(&mut groups, 42);
    // The consumer-protocol member joins: the group converts, nothing moves yet.
    let (member_epoch, assignment) = beat(&mut groups, MemberEpochIn::Join, None, 10);
    assert_eq!(
        assignment,
        Some(Assignment::new()),
        "everything is still held"
    );
    let g = &groups.consumer["g"];
    assert_eq!(g.members.len(), 3);
    assert_eq!(held(&groups, &a), parts(&[0, 1, 2]));
    assert_eq!(held(&groups, &b), parts(&[3, 4, 5]));
    groups.consumer["g"].assert_owners();
    assert!(groups.get("g").unwrap().members.is_empty());
    assert_eq!(
        groups.get("g").unwrap().offsets.len(),
        1,
        "committed offsets stay"
    );
    // Classic members commit and heartbeat at their generation; told to rejoin.
    assert_eq!(groups.check_commit("g", &a, None, generation), Ok(()));
    assert_eq!(
        groups.check_commit("g", &a, None, generation.map(GenerationId::next)),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        groups.heartbeat("g", &a, None, generation, 11),
        Err(GroupError::RebalanceInProgress)
    );
    // A rejoins as an eager client does (owning nothing) and keeps its target's share.
    let (gen_a, got_a) = rejoin(&mut groups, &a, &[], 12);
    assert_eq!(
        gen_a.map(GenerationId::value),
        Some(groups.consumer["g"].assignment_epoch)
    );
    assert_eq!(got_a.values().map(|ps| ps.len()).sum::<usize>(), 2);
    groups.consumer["g"].assert_owners();
    assert_eq!(groups.heartbeat("g", &a, None, gen_a, 13), Ok(()));
    assert_eq!(groups.check_commit("g", &a, None, gen_a), Ok(()));
    // B rejoins as a cooperative client: it still owns 3-5, so it is told to keep
    // only its target's share and revoke the rest, then rejoin.
    let (gen_b, kept) = rejoin(&mut groups, &b, &[3, 4, 5], 14);
    assert_eq!(kept.values().map(|ps| ps.len()).sum::<usize>(), 2);
    groups.consumer["g"].assert_owners();
    assert_eq!(
        groups.heartbeat("g", &b, None, gen_b, 15),
        Err(GroupError::RebalanceInProgress)
    );
    let owned: Vec<i32> = kept["t"].iter().copied().collect();
    let (gen_b, got_b) = rejoin(&mut groups, &b, &owned, 16);
    assert_eq!(got_b, kept);
    assert_eq!(groups.heartbeat("g", &b, None, gen_b, 17), Ok(()));
    // The consumer member now gets the two freed partitions.
    let (_, assignment) = beat(
        &mut groups,
        MemberEpochIn::Member(member_epoch),
        Some(&[]),
        18,
    );
    let got_c = assignment.expect("new partitions");
    assert_eq!(got_c.values().map(|ps| ps.len()).sum::<usize>(), 2);
    groups.consumer["g"].assert_owners();
    let mut all: Vec<i32> = [&got_a, &got_b, &got_c]
        .iter()
        .flat_map(|a| a.values().flatten().copied())
        .collect();
    all.sort();
    assert_eq!(all, (0..PARTITIONS).collect::<Vec<_>>());
}

/// The group after an upgrade, with every member reconciled: A, B classic, C consumer.
fn upgraded(groups: &mut Groups) -> (String, String, i32) {
    let (a, b, _) = classic_group(groups);
    let (member_epoch, _) = beat(groups, MemberEpochIn::Join, None, 10);
    rejoin(groups, &a, &[], 11);
    rejoin(groups, &b, &[], 12);
    let (member_epoch, _) = beat(groups, MemberEpochIn::Member(member_epoch), Some(&[]), 13);
    (a, b, member_epoch)
}

#[test]
fn the_last_consumer_member_leaving_downgrades_the_group_to_a_classic_rebalance() {
    let mut groups = groups(MigrationPolicy::Bidirectional);
    let (a, b, epoch) = upgraded(&mut groups);
    let gen_a = Some(GenerationId::new(
        groups.consumer["g"].members[&a].member_epoch,
    ));
    leave(&mut groups, 20);
    assert!(!groups.consumer.contains_key("g"), "a classic group again");
    let g = groups.get("g").unwrap();
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(g.members.len(), 2);
    // Until it rejoins, a member's epoch is its generation: it commits what it consumed
    // and is told to rejoin.
    assert_eq!(groups.check_commit("g", &a, None, gen_a), Ok(()));
    assert_eq!(
        groups.heartbeat("g", &a, None, gen_a, 21),
        Err(GroupError::RebalanceInProgress)
    );
    let mut ja = join(&mut groups, join_req(&a, &[]), 22);
    assert!(ja.try_recv().is_err(), "waits for B");
    let mut jb = join(&mut groups, join_req(&b, &[]), 23);
    let (ra, rb) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
    assert_eq!(ra.generation_id, rb.generation_id);
    assert!(
        ra.generation_id.unwrap().value() > epoch,
        "a generation past every member epoch"
    );
    assert_eq!(
        ra.members.len() + rb.members.len(),
        2,
        "a classic leader assigns again"
    );
    assert_eq!(
        groups.get("g").unwrap().state,
        GroupState::CompletingRebalance
    );
    assert_eq!(
        groups.check_commit("g", &a, None, gen_a),
        Err(GroupError::IllegalGeneration),
        "rejoined, its old epoch is no generation"
    );
}

#[test]
fn a_fenced_last_consumer_member_downgrades_the_group_too() {
    let mut groups = groups(MigrationPolicy::Bidirectional);
    let (a, b, _) = upgraded(&mut groups);
    let generation =
        |g: &Groups, m: &str| Some(GenerationId::new(g.consumer["g"].members[m].member_epoch));
    let (gen_a, gen_b) = (generation(&groups, &a), generation(&groups, &b));
    // The classic members heartbeat; the consumer member goes silent past 45 s.
    for t in (1..=47).map(|s| 13 + s * 1000) {
        let _ = groups.heartbeat("g", &a, None, gen_a, t);
        let _ = groups.heartbeat("g", &b, None, gen_b, t);
        groups.tick(t);
    }
    assert!(!groups.consumer.contains_key("g"));
    assert_eq!(groups.get("g").unwrap().members.len(), 2);
}

#[test]
fn with_the_policy_disabled_groups_change_type_only_when_empty() {
    let mut groups = groups(MigrationPolicy::Disabled);
    classic_group(&mut groups);
    assert_eq!(
        groups.consumer_heartbeat(&consumer_req("c", MemberEpochIn::Join, None), &topics(), 10),
        Err(GroupError::GroupIdNotFound)
    );
    let mut groups = self::groups(MigrationPolicy::Disabled);
    beat(&mut groups, MemberEpochIn::Join, None, 0);
    let refused = join(&mut groups, join_req("", &[]), 1).try_recv().unwrap();
    assert_eq!(refused.error, Some(GroupError::InconsistentGroupProtocol));
}

#[test]
fn upgrade_only_keeps_the_classic_members_in_the_consumer_group() {
    let mut groups = groups(MigrationPolicy::Upgrade);
    upgraded(&mut groups);
    leave(&mut groups, 20);
    assert_eq!(groups.consumer["g"].members.len(), 2, "no downgrade");
    // A downgrade-only broker does not upgrade.
    let mut groups = self::groups(MigrationPolicy::Downgrade);
    classic_group(&mut groups);
    assert_eq!(
        groups.consumer_heartbeat(&consumer_req("c", MemberEpochIn::Join, None), &topics(), 10),
        Err(GroupError::GroupIdNotFound)
    );
}

#[test]
fn a_rebalancing_classic_group_is_upgraded_once_stable_and_other_protocols_never() {
    let mut groups = groups(MigrationPolicy::Bidirectional);
    let (a, _b, generation) = classic_group(&mut groups);
    let _ = groups.leave("g", &[(a, None)], 5);
    assert_eq!(
        groups.get("g").unwrap().state,
        GroupState::PreparingRebalance
    );
    assert_eq!(
        groups.consumer_heartbeat(&consumer_req("c", MemberEpochIn::Join, None), &topics(), 6),
        Err(GroupError::CoordinatorNotAvailable),
        "retried once the rebalance is over"
    );
    assert!(generation.is_some());
    // A classic group of another protocol type is not a consumer group.
    let mut groups = self::groups(MigrationPolicy::Bidirectional);
    let mut req = join_req("", &[]);
    req.protocol_type = "connect".into();
    let answer = join(&mut groups, req, 0).try_recv().unwrap();
    sync(
        &mut groups,
        &answer.member_id,
        answer.generation_id,
        vec![],
        0,
    );
    assert_eq!(
        groups.consumer_heartbeat(&consumer_req("c", MemberEpochIn::Join, None), &topics(), 1),
        Err(GroupError::GroupIdNotFound)
    );
}

#[test]
fn a_new_classic_member_joins_a_consumer_group_and_is_refused_bad_metadata() {
    let mut groups = groups(MigrationPolicy::Bidirectional);
    beat(&mut groups, MemberEpochIn::Join, None, 0);
    let mut req = join_req("", &[]);
    req.require_known_member_id = true;
    let first = join(&mut groups, req, 1).try_recv().unwrap();
    assert_eq!(first.error, Some(GroupError::MemberIdRequired));
    let (_, got) = rejoin(&mut groups, &first.member_id, &[], 2);
    // Everything is the consumer member's: the newcomer waits for what it releases.
    assert!(got.is_empty());
    groups.consumer["g"].assert_owners();
    let mut bad = join_req("", &[]);
    bad.protocols = vec![("range".into(), Bytes::from_static(b"\x00"))];
    let answer = join(&mut groups, bad, 3).try_recv().unwrap();
    assert_eq!(answer.error, Some(GroupError::InconsistentGroupProtocol));
    // It leaves with LeaveGroup; an unknown member is told so.
    let left = groups
        .leave(
            "g",
            &[(first.member_id.clone(), None), ("ghost".into(), None)],
            4,
        )
        .unwrap();
    assert_eq!(left, vec![Ok(()), Err(GroupError::UnknownMemberId)]);
    assert_eq!(groups.consumer["g"].members.len(), 1);
}

#[test]
fn classic_members_are_not_durable_and_the_recovered_group_reassigns_their_partitions() {
    use crate::consumer::durable::{project, GroupRecord, Recovery};
    let mut groups = groups(MigrationPolicy::Bidirectional);
    let (a, b, _) = upgraded(&mut groups);
    let group = &groups.consumer["g"];
    let records = project(group);
    assert!(records.keys().all(|k| k.member_id != a && k.member_id != b));
    let mut recovery = Recovery::default();
    for (key, value) in records {
        recovery.apply(GroupRecord {
            key,
            value: Some(value),
        });
    }
    let recovered = recovery.finish(100).expect("recovers");
    let g = &recovered["g"];
    assert_eq!(g.members.keys().collect::<Vec<_>>(), vec!["c"]);
    assert!(
        g.group_epoch > g.assignment_epoch,
        "the next heartbeat assigns what the classic members held"
    );
    g.assert_owners();
}
