//! Goal: a group rebuilt from the records its steps wrote is the group that wrote them
//! (members, ids, epochs, assignments, static members, owners), a recovered member
//! that does not come back is fenced a session timeout after recovery, and a record
//! that cannot be read is a clear error.
//! Method: groups driven by heartbeats over plain values with an explicit clock; after
//! every step the records [`Written::changes`] produces are kept as a log would keep
//! them (encoded and decoded again), and [`Recovery`] rebuilds the groups from them.

use super::super::tests::{request, topics};
use super::super::{
    ConsumerConfig, ConsumerGroupState, HeartbeatAnswer, HeartbeatRequest, MemberEpochIn,
};
use super::*;
use crate::consumer::TopicsView;

const CONFIG: ConsumerConfig = ConsumerConfig {
    session_timeout_ms: 45_000,
    heartbeat_interval_ms: 5_000,
    members_max: 16,
    regex_bytes_max: 64,
};

/// A log of encoded records, as the offsets log would hold them.
#[derive(Default)]
struct Log {
    records: Vec<(Bytes, Option<Bytes>)>,
    written: Written,
}

impl Log {
    /// Writes what a step changed in group "g".
    fn persist(&mut self, group: Option<&ConsumerGroup>, member: Option<&str>) {
        let changes = self.written.changes("g", group, member);
        self.records.extend(changes.records());
        self.written.wrote(changes);
    }

    fn recover(&self, now_ms: i64) -> BTreeMap<String, ConsumerGroup> {
        let mut recovery = Recovery::default();
        for (k, v) in &self.records {
            assert!(is_group_record(k));
            recovery.apply(GroupRecord::decode(k.clone(), v.clone()).expect("decodes"));
        }
        recovery.finish(now_ms).expect("recovers")
    }
}

/// A member as a client drives it: its id, epoch and what it owns.
struct Client {
    id: String,
    instance: Option<String>,
    epoch: i32,
    owned: Assignment,
}

impl Client {
    fn new(id: &str) -> Client {
        Client {
            id: id.into(),
            instance: None,
            epoch: 0,
            owned: Assignment::new(),
        }
    }

    fn step(&mut self, g: &mut ConsumerGroup, log: &mut Log, req: HeartbeatRequest, now: i64) {
        let view = topics(&[("a", 4), ("b", 3), ("orders-eu", 2)]);
        let answer = g.heartbeat(&req, &view, &CONFIG, now).expect("heartbeat");
        if let HeartbeatAnswer::Member {
            member_id,
            member_epoch,
            assignment,
        } = answer
        {
            self.id = member_id;
            self.epoch = member_epoch;
            if let Some(a) = assignment {
                self.owned = a;
            }
        }
        log.persist(Some(g), Some(&self.id));
    }

    fn join(&mut self, g: &mut ConsumerGroup, log: &mut Log, regex: Option<&str>, now: i64) {
        let mut req = request(&self.id, MemberEpochIn::Join);
        req.instance_id = self.instance.clone();
        req.rack_id = Some("rack-1".into());
        req.rebalance_timeout_ms = Some(30_000);
        match regex {
            Some(re) => req.subscribed_topic_regex = Some(re.into()),
            None => req.subscribed_topic_names = Some(vec!["a".into(), "b".into()]),
        }
        req.server_assignor = Some("uniform".into());
        req.owned = Some(Assignment::new());
        self.step(g, log, req, now);
    }

    fn beat(&mut self, g: &mut ConsumerGroup, log: &mut Log, now: i64) {
        let mut req = request(&self.id, MemberEpochIn::Member(self.epoch));
        req.instance_id = self.instance.clone();
        req.owned = Some(self.owned.clone());
        self.step(g, log, req, now);
    }
}

/// Everything but timers and the compiled regex (its source is compared).
fn assert_same(a: &ConsumerGroup, b: &ConsumerGroup) {
    assert_eq!(project(a), project(b));
    assert_eq!(a.group_id, b.group_id);
    assert_eq!(a.static_members, b.static_members);
    assert_eq!(a.owners, b.owners);
    assert_eq!(a.subscribed_topics, b.subscribed_topics);
    assert_eq!(a.state(), b.state());
    for (id, m) in &a.members {
        let n = &b.members[id];
        assert_eq!(m.partition_epochs, n.partition_epochs, "{id}");
        assert_eq!(m.regex.is_some(), n.regex.is_some(), "{id}");
        assert_eq!(
            m.revocation_deadline_ms.is_some(),
            n.revocation_deadline_ms.is_some()
        );
    }
}

fn recovered_group(log: &Log, now: i64) -> ConsumerGroup {
    let mut groups = log.recover(now);
    assert_eq!(groups.len(), 1);
    groups.remove("g").expect("group g")
}

#[test]
fn every_step_recovers_to_the_group_that_wrote_it() {
    let mut g = ConsumerGroup::new("g");
    let mut log = Log::default();
    let mut clients = [Client::new("m1"), Client::new("m2"), Client::new("m3")];
    clients[1].instance = Some("i2".into());
    let mut now = 0;
    for (i, c) in clients.iter_mut().enumerate() {
        let regex = (i == 2).then_some("orders-.*");
        c.join(&mut g, &mut log, regex, now);
        assert_same(&g, &recovered_group(&log, now));
    }
    // Reconcile step by step: revocations pending, partitions unreleased, and stable.
    for _ in 0..6 {
        for c in clients.iter_mut() {
            now += 1_000;
            c.beat(&mut g, &mut log, now);
            assert_same(&g, &recovered_group(&log, now));
        }
    }
    assert_eq!(g.state(), ConsumerGroupState::Stable);
    // A static member leaves for now, then comes back under a new member id.
    let mut leave = request(&clients[1].id, MemberEpochIn::StaticLeave);
    leave.instance_id = Some("i2".into());
    g.heartbeat(&leave, &TopicsView::new(), &CONFIG, now)
        .expect("static leave");
    log.persist(Some(&g), Some(&clients[1].id));
    assert_same(&g, &recovered_group(&log, now));
    let before = g.members.len();
    clients[1].id = "m2-again".into();
    clients[1].join(&mut g, &mut log, None, now);
    assert_eq!(g.members.len(), before);
    assert_same(&g, &recovered_group(&log, now));
    // A member leaves for good: its records go.
    let leave = request(&clients[0].id, MemberEpochIn::Leave);
    g.heartbeat(&leave, &TopicsView::new(), &CONFIG, now)
        .expect("leave");
    log.persist(Some(&g), Some(&clients[0].id));
    let recovered = recovered_group(&log, now);
    assert!(!recovered.members.contains_key("m1"));
    assert_same(&g, &recovered);
    // The group goes: nothing is left of it.
    log.persist(None, None);
    assert!(log.recover(now).is_empty());
}

#[test]
fn recovered_members_keep_their_ids_and_epochs_and_continue() {
    let mut g = ConsumerGroup::new("g");
    let mut log = Log::default();
    let mut clients = [Client::new("m1"), Client::new("m2")];
    for c in clients.iter_mut() {
        c.join(&mut g, &mut log, None, 0);
    }
    for _ in 0..4 {
        for c in clients.iter_mut() {
            c.beat(&mut g, &mut log, 1_000);
        }
    }
    assert_eq!(g.state(), ConsumerGroupState::Stable);
    let mut recovered = recovered_group(&log, 100_000);
    // The clients carry on where they were: same ids and epochs, nothing moves.
    let before: Vec<(String, i32, Assignment)> = clients
        .iter()
        .map(|c| (c.id.clone(), c.epoch, c.owned.clone()))
        .collect();
    for c in clients.iter_mut() {
        c.beat(&mut recovered, &mut log, 101_000);
    }
    let after: Vec<(String, i32, Assignment)> = clients
        .iter()
        .map(|c| (c.id.clone(), c.epoch, c.owned.clone()))
        .collect();
    assert_eq!(before, after);
    assert_eq!(recovered.state(), ConsumerGroupState::Stable);
}

#[test]
fn a_member_that_does_not_come_back_is_fenced_a_session_after_recovery() {
    let mut g = ConsumerGroup::new("g");
    let mut log = Log::default();
    let mut clients = [Client::new("m1"), Client::new("m2")];
    for c in clients.iter_mut() {
        c.join(&mut g, &mut log, None, 0);
    }
    for c in clients.iter_mut() {
        c.beat(&mut g, &mut log, 1_000);
    }
    // Recovered long after the last heartbeat: sessions start at recovery.
    let start = 1_000_000;
    let mut recovered = recovered_group(&log, start);
    assert_eq!(recovered.tick(&CONFIG, start + 1), 0);
    clients[0].beat(&mut recovered, &mut log, start + 40_000);
    assert_eq!(
        recovered.tick(&CONFIG, start + CONFIG.session_timeout_ms),
        0
    );
    assert_eq!(
        recovered.tick(&CONFIG, start + CONFIG.session_timeout_ms + 1),
        1,
        "m2 stayed away"
    );
    assert!(recovered.members.contains_key(&clients[0].id));
    assert!(!recovered.members.contains_key(&clients[1].id));
    // The fencing is written as any step: the member's records are tombstoned.
    log.persist(Some(&recovered), None);
    assert_same(&recovered, &recovered_group(&log, start));
}

#[test]
fn a_step_writes_only_what_it_changed() {
    let mut g = ConsumerGroup::new("g");
    let mut log = Log::default();
    let mut c = Client::new("m1");
    c.join(&mut g, &mut log, None, 0);
    c.beat(&mut g, &mut log, 1);
    let written = log.records.len();
    c.beat(&mut g, &mut log, 2);
    assert_eq!(
        log.records.len(),
        written,
        "a steady heartbeat writes nothing"
    );
}

#[test]
fn records_round_trip() {
    let assignment: Assignment = [("a".to_string(), BTreeSet::from([0, 3]))].into();
    let values = vec![
        (
            RecordKey::group(RecordType::GroupMetadata, "g"),
            RecordValue::GroupMetadata { group_epoch: 7 },
        ),
        (
            RecordKey::group(RecordType::SubscribedTopics, "g"),
            RecordValue::SubscribedTopics([("a".to_string(), 4)].into()),
        ),
        (
            RecordKey::member(RecordType::MemberMetadata, "g", "m"),
            RecordValue::MemberMetadata(MemberMetadata {
                instance_id: Some("i".into()),
                rack_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                server_assignor: Some("range".into()),
                subscribed_topic_names: vec!["a".into()],
                subscribed_topic_regex: Some("b.*".into()),
                subscribed: ["a".to_string(), "b1".to_string()].into(),
            }),
        ),
        (
            RecordKey::group(RecordType::TargetMetadata, "g"),
            RecordValue::TargetMetadata {
                assignment_epoch: 6,
                assignor: Assignor::Range,
            },
        ),
        (
            RecordKey::member(RecordType::TargetMember, "g", "m"),
            RecordValue::TargetMember(assignment.clone()),
        ),
        (
            RecordKey::member(RecordType::CurrentAssignment, "g", "m"),
            RecordValue::CurrentAssignment(CurrentAssignment {
                member_epoch: 6,
                previous_member_epoch: 4,
                state: MemberState::UnrevokedPartitions,
                left_static: true,
                assigned: assignment.clone(),
                revoking: [("b".to_string(), BTreeSet::from([1]))].into(),
                partition_epochs: [(("a".to_string(), 0), 4), (("b".to_string(), 1), 2)].into(),
            }),
        ),
    ];
    for (key, value) in values {
        let record = GroupRecord::decode(key.encode(), Some(value.encode())).expect("decodes");
        assert_eq!(record.key, key);
        assert_eq!(record.value, Some(value));
        let tombstone = GroupRecord::decode(key.encode(), None).expect("decodes");
        assert_eq!(tombstone.value, None);
    }
}

#[test]
fn a_record_that_cannot_be_read_is_a_clear_error() {
    let key = RecordKey::member(RecordType::CurrentAssignment, "g", "m").encode();
    let value = RecordValue::CurrentAssignment(CurrentAssignment {
        member_epoch: 1,
        previous_member_epoch: 0,
        state: MemberState::Stable,
        left_static: false,
        assigned: [("a".to_string(), BTreeSet::from([0]))].into(),
        revoking: Assignment::new(),
        partition_epochs: BTreeMap::new(),
    })
    .encode();
    // Cut short anywhere.
    for cut in 0..value.len() {
        let err = GroupRecord::decode(key.clone(), Some(value.slice(..cut))).unwrap_err();
        assert_eq!(err.record, "current assignment of a member", "cut at {cut}");
    }
    // A count far beyond the bytes present is not trusted.
    let mut huge = BytesMut::from(&value[..]);
    huge[11..15].copy_from_slice(&u32::MAX.to_be_bytes());
    let err = GroupRecord::decode(key.clone(), Some(huge.freeze())).unwrap_err();
    assert_eq!(err.problem, "cut short");
    // Bytes left over, an unknown version, an unknown member state.
    let mut longer = BytesMut::from(&value[..]);
    longer.put_u8(0);
    let err = GroupRecord::decode(key.clone(), Some(longer.freeze())).unwrap_err();
    assert_eq!(err.problem, "1 bytes left over");
    let mut newer = BytesMut::from(&value[..]);
    newer[0] = 9;
    let err = GroupRecord::decode(key.clone(), Some(newer.freeze())).unwrap_err();
    assert_eq!(err.problem, "unknown value format version 9");
    let mut state = BytesMut::from(&value[..]);
    state[9] = 7;
    let err = GroupRecord::decode(key.clone(), Some(state.freeze())).unwrap_err();
    assert!(err.to_string().contains("unknown member state 7"), "{err}");
    // A key cut inside its member id.
    let err = GroupRecord::decode(key.slice(..key.len() - 1), None).unwrap_err();
    assert_eq!(err.problem, "cut short");
    // Offsets' keys are not group records.
    assert!(!is_group_record(&[0, 0, 1, b'g']));
    assert!(!is_group_record(&[1]));
    assert!(!is_group_record(&[]));
}

#[test]
fn a_partition_recovered_with_two_holders_is_an_error() {
    let mut log = Log::default();
    let mut g = ConsumerGroup::new("g");
    let mut c = Client::new("m1");
    c.join(&mut g, &mut log, None, 0);
    let mut d = Client::new("m2");
    d.join(&mut g, &mut log, None, 0);
    // A forged record gives m2 what m1 holds.
    let current = RecordValue::CurrentAssignment(CurrentAssignment {
        member_epoch: 1,
        previous_member_epoch: 0,
        state: MemberState::Stable,
        left_static: false,
        assigned: g.members["m1"].assigned.clone(),
        revoking: Assignment::new(),
        partition_epochs: BTreeMap::new(),
    });
    let key = RecordKey::member(RecordType::CurrentAssignment, "g", "m2");
    let mut recovery = Recovery::default();
    for (k, v) in &log.records {
        recovery.apply(GroupRecord::decode(k.clone(), v.clone()).expect("decodes"));
    }
    recovery.apply(GroupRecord {
        key,
        value: Some(current),
    });
    let err = recovery.finish(0).unwrap_err();
    assert!(err.problem.contains("held by members"), "{err}");
}
