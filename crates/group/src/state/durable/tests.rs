//! A classic group's record: what it keeps, when it is written, and a coordinator's
//! groups rebuilt from it.

use super::super::tests::{delayed, join, join_new, sync};
use super::*;
use crate::requests::JoinRequest;
use crate::GroupError;
use headway_base::{Offset, PartitionIndex, TopicPartition};

/// Two members, joined and synced with an assignment each: the group Stable at its
/// first generation. Returns the member ids and the generation.
fn stable_group(groups: &mut Groups) -> (String, String, Option<GenerationId>) {
    let (a, mut ja) = join_new(groups, &["range"], 0);
    let (b, mut jb) = join_new(groups, &["range"], 10);
    groups.tick(100);
    let (ra, _) = (ja.try_recv().unwrap(), jb.try_recv().unwrap());
    let leader = ra.leader.clone();
    let follower = if leader == a { b.clone() } else { a.clone() };
    let assignments = vec![
        (a.clone(), Bytes::from_static(b"to-a")),
        (b.clone(), Bytes::from_static(b"to-b")),
    ];
    sync(groups, &follower, ra.generation_id, vec![], 100);
    sync(groups, &leader, ra.generation_id, assignments, 100);
    assert_eq!(groups.get("g").unwrap().state, GroupState::Stable);
    (a, b, ra.generation_id)
}

fn written(groups: &Groups, written: &mut ClassicWritten) -> Option<Option<ClassicSnapshot>> {
    let record = written.change(groups, "g")?;
    written.wrote("g", groups, &record);
    let (id, snapshot) = decode(record.0, record.1).expect("decodes");
    assert_eq!(id, "g");
    Some(snapshot)
}

#[test]
fn a_stable_groups_record_brings_back_its_members_and_assignments() {
    let mut groups = Groups::new(delayed());
    let (a, b, generation) = stable_group(&mut groups);
    let Durable::Snapshot(snapshot) = groups.classic_durable("g") else {
        panic!("a Stable group is written");
    };
    let (_, decoded) = decode(key("g"), Some(snapshot.encode())).expect("decodes");
    assert_eq!(decoded.as_ref(), Some(&snapshot));

    // Another coordinator, a minute later, from the record alone.
    let later = 60_000;
    let mut restored = Groups::new(delayed());
    restored.restore_classic("g", decoded.unwrap(), later);
    let g = restored.get("g").unwrap();
    assert_eq!(g.state, GroupState::Stable);
    assert_eq!(g.generation_id, generation.unwrap());
    assert_eq!(g.protocol_name.as_deref(), Some("range"));
    assert_eq!(g.members.len(), 2);
    // The members carry on: heartbeats and commits of their generation are accepted,
    // a sync gives each its assignment, and a stranger is still refused.
    for (member, assignment) in [(&a, &b"to-a"[..]), (&b, &b"to-b"[..])] {
        assert_eq!(
            restored.heartbeat("g", member, None, generation, later + 1),
            Ok(())
        );
        assert_eq!(restored.check_commit("g", member, None, generation), Ok(()));
        let mut answer = sync(&mut restored, member, generation, vec![], later + 1);
        assert_eq!(&answer.try_recv().unwrap().assignment[..], assignment);
    }
    assert_eq!(
        restored.heartbeat("g", "stranger", None, generation, later + 1),
        Err(GroupError::UnknownMemberId)
    );
    // Sessions start at the restore: a member silent for its session timeout expires.
    restored
        .heartbeat("g", &a, None, generation, later + 5_000)
        .unwrap();
    restored.tick(later + 10_002);
    assert_eq!(
        restored.get("g").unwrap().members.len(),
        1,
        "b expired, a stayed"
    );
}

#[test]
fn a_record_is_written_when_a_step_completes_and_a_tombstone_when_the_group_goes() {
    let mut groups = Groups::new(delayed());
    let mut log = ClassicWritten::default();
    // Joining (PreparingRebalance) and completing the join: nothing yet.
    let (a, _ja) = join_new(&mut groups, &["range"], 0);
    assert_eq!(written(&groups, &mut log), None);
    assert!(log.moved(&groups).is_empty());
    groups.tick(100);
    assert_eq!(
        groups.get("g").unwrap().state,
        GroupState::CompletingRebalance
    );
    assert_eq!(written(&groups, &mut log), None);
    // The leader's sync: the group with its assignment.
    let generation = Some(groups.get("g").unwrap().generation_id);
    sync(
        &mut groups,
        &a,
        generation,
        vec![(a.clone(), Bytes::from_static(b"x"))],
        100,
    );
    let first = written(&groups, &mut log)
        .expect("a record")
        .expect("not a tombstone");
    assert_eq!(first.members.len(), 1);
    assert_eq!(&first.members[0].assignment[..], b"x");
    // Nothing changed, nothing written; heartbeats write nothing.
    groups.heartbeat("g", &a, None, generation, 200).unwrap();
    assert_eq!(written(&groups, &mut log), None);
    assert!(log.moved(&groups).is_empty());
    // The last member's session expires: the ticker finds the group Empty at the next
    // generation, which is written.
    groups.tick(100_000);
    assert_eq!(groups.get("g").unwrap().state, GroupState::Empty);
    assert_eq!(log.moved(&groups), vec!["g".to_string()]);
    let empty = written(&groups, &mut log)
        .expect("a record")
        .expect("not a tombstone");
    assert!(empty.members.is_empty());
    assert_eq!(empty.generation, first.generation + 1);
    // Deleted: a tombstone, once.
    groups.delete("g").unwrap();
    assert_eq!(log.moved(&groups), vec!["g".to_string()]);
    assert_eq!(written(&groups, &mut log), Some(None));
    assert_eq!(written(&groups, &mut log), None);
}

#[test]
fn a_group_that_only_holds_offsets_writes_nothing() {
    let mut groups = Groups::new(delayed());
    let log = ClassicWritten::default();
    let offset = crate::OffsetCommit {
        offset: Offset::ZERO,
        leader_epoch: None,
        metadata: None,
        commit_timestamp_ms: 0,
    }
    .at(Offset::ZERO);
    let key = TopicPartition::new("t", PartitionIndex::new(0));
    groups.apply_commit("g", vec![(key, offset)], 0);
    assert_eq!(groups.get("g").unwrap().state, GroupState::Empty);
    assert_eq!(groups.classic_durable("g"), Durable::Absent);
    assert!(log.moved(&groups).is_empty());
    // A member joining: the group rebalances, the log keeps what it had (nothing).
    let _joining = join(&mut groups, join_request(), 0);
    let (id, _) = join_new(&mut groups, &["range"], 0);
    assert!(!id.is_empty());
    assert_eq!(groups.classic_durable("g"), Durable::Keep);
    assert!(log.moved(&groups).is_empty());
}

fn join_request() -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        require_known_member_id: true,
    }
}

#[test]
fn a_record_that_cannot_be_read_is_an_error_not_a_guess() {
    let mut groups = Groups::new(delayed());
    stable_group(&mut groups);
    let Durable::Snapshot(snapshot) = groups.classic_durable("g") else {
        panic!("a Stable group is written");
    };
    let value = snapshot.encode();
    for cut in [1, value.len() / 2, value.len() - 1] {
        let err = decode(key("g"), Some(value.slice(..cut))).unwrap_err();
        assert!(err.to_string().contains("cut short"), "{err}");
    }
    let mut longer = value.to_vec();
    longer.push(0);
    let err = decode(key("g"), Some(Bytes::from(longer))).unwrap_err();
    assert!(err.to_string().contains("left over"), "{err}");
    let mut newer = value.to_vec();
    newer[0] = 9;
    let err = decode(key("g"), Some(Bytes::from(newer))).unwrap_err();
    assert!(err.to_string().contains("version 9"), "{err}");
    let err = decode(key("g").slice(..2), None).unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");
}
