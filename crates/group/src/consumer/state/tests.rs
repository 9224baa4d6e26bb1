//! Goal: the consumer-protocol state machine moves partitions only through revocation
//! (never two holders), balances them, fences members that go silent or do not revoke,
//! keeps static members' places, and follows regex subscriptions as topics appear.
//! Method: simulated clients over plain values and an explicit clock; each adopts the
//! assignment it is given at once and reports what it owns in its next heartbeat.

use super::*;
use crate::consumer::topics::TopicInfo;

const CONFIG: ConsumerConfig = ConsumerConfig {
    session_timeout_ms: 45_000,
    heartbeat_interval_ms: 5_000,
    members_max: 4,
    regex_bytes_max: 64,
};

pub(super) fn topics(list: &[(&str, i32)]) -> TopicsView {
    list.iter()
        .enumerate()
        .map(|(i, (n, p))| {
            let id = uuid::Uuid::from_u128(i as u128 + 1);
            (n.to_string(), TopicInfo { id, partitions: *p })
        })
        .collect()
}

pub(super) fn request(member_id: &str, epoch: MemberEpochIn) -> HeartbeatRequest {
    HeartbeatRequest {
        group_id: "g".into(),
        member_id: member_id.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: None,
        subscribed_topic_names: None,
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: None,
        client_id: "c".into(),
        client_host: "h".into(),
    }
}

/// A consumer as a client library behaves: joins, adopts assignments, acknowledges.
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

    fn join(
        &mut self,
        g: &mut ConsumerGroup,
        view: &TopicsView,
        subscription: Subscription,
        now: i64,
    ) {
        let mut req = request(&self.id, MemberEpochIn::Join);
        req.instance_id = self.instance.clone();
        req.rebalance_timeout_ms = Some(30_000);
        match subscription {
            Subscription::Names(names) => {
                req.subscribed_topic_names = Some(names.iter().map(|s| s.to_string()).collect())
            }
            Subscription::Regex(re) => req.subscribed_topic_regex = Some(re.into()),
        }
        req.server_assignor = Some("uniform".into());
        req.owned = Some(Assignment::new());
        let answer = g.heartbeat(&req, view, &CONFIG, now).expect("join");
        self.adopt(answer);
        g.assert_owners();
    }

    fn beat(&mut self, g: &mut ConsumerGroup, view: &TopicsView, now: i64) {
        let mut req = request(&self.id, MemberEpochIn::Member(self.epoch));
        req.owned = Some(self.owned.clone());
        let answer = g.heartbeat(&req, view, &CONFIG, now).expect("heartbeat");
        self.adopt(answer);
        g.assert_owners();
    }

    fn adopt(&mut self, answer: HeartbeatAnswer) {
        match answer {
            HeartbeatAnswer::Member {
                member_id,
                member_epoch,
                assignment,
            } => {
                self.id = member_id;
                self.epoch = member_epoch;
                if let Some(a) = assignment {
                    self.owned = a;
                }
            }
            HeartbeatAnswer::Left { .. } => panic!("not leaving"),
        }
    }

    fn count(&self) -> usize {
        self.owned.values().map(BTreeSet::len).sum()
    }
}

enum Subscription<'a> {
    Names(&'a [&'a str]),
    Regex(&'a str),
}

/// Heartbeats every client in turn until the group is stable.
fn settle(g: &mut ConsumerGroup, clients: &mut [Client], view: &TopicsView, now: i64) {
    for _ in 0..10 {
        for c in clients.iter_mut() {
            c.beat(g, view, now);
        }
        if g.state() == ConsumerGroupState::Stable {
            return;
        }
    }
    panic!("the group did not settle: {:?}", g.state());
}

/// No partition is owned by two clients (as the clients see it).
fn assert_disjoint(clients: &[Client]) {
    let mut seen = BTreeSet::new();
    for c in clients {
        for (t, p) in partitions(&c.owned) {
            assert!(seen.insert((t.clone(), p)), "{t}-{p} owned twice");
        }
    }
}

fn three_members(view: &TopicsView) -> (ConsumerGroup, Vec<Client>) {
    let mut g = ConsumerGroup::new("g");
    let mut clients: Vec<Client> = ["a", "b", "c"].iter().map(|id| Client::new(id)).collect();
    for c in &mut clients {
        c.join(&mut g, view, Subscription::Names(&["t"]), 0);
    }
    settle(&mut g, &mut clients, view, 0);
    (g, clients)
}

#[test]
fn three_members_share_six_partitions_evenly() {
    let view = topics(&[("t", 6)]);
    let (g, clients) = three_members(&view);
    assert_disjoint(&clients);
    for c in &clients {
        assert_eq!(c.count(), 2, "{} has two", c.id);
        assert_eq!(c.epoch, g.assignment_epoch);
    }
    assert_eq!(g.state(), ConsumerGroupState::Stable);
}

#[test]
fn a_partition_moves_only_after_its_owner_revoked_it() {
    let view = topics(&[("t", 6)]);
    let (mut g, mut clients) = three_members(&view);
    let kept: Vec<Assignment> = clients.iter().map(|c| c.owned.clone()).collect();
    let mut d = Client::new("d");
    d.join(&mut g, &view, Subscription::Names(&["t"]), 1);
    // The newcomer's target is held by others: it waits, at the new epoch.
    assert_eq!(d.count(), 0);
    assert_eq!(g.members["d"].state, MemberState::UnreleasedPartitions);
    clients.push(d);
    let mut moved_once = false;
    for round in 0..6 {
        for i in 0..clients.len() {
            clients[i].beat(&mut g, &view, 2 + round);
            assert_disjoint(&clients);
            // A member being asked to revoke keeps the rest and its epoch.
            let m = &g.members[&clients[i].id];
            if m.state == MemberState::UnrevokedPartitions {
                assert!(m.member_epoch < g.assignment_epoch);
                moved_once = true;
            }
        }
    }
    assert!(moved_once, "some member revoked");
    assert_eq!(g.state(), ConsumerGroupState::Stable);
    let mut counts: Vec<usize> = clients.iter().map(Client::count).collect();
    counts.sort();
    assert_eq!(counts, vec![1, 1, 2, 2]);
    // The members that stayed kept what they kept: only revoked partitions moved.
    for (c, before) in clients.iter().zip(&kept) {
        for (t, p) in partitions(&c.owned) {
            assert!(contains(before, t, p), "{} gained {t}-{p}", c.id);
        }
    }
}

#[test]
fn a_silent_member_is_fenced_after_the_session_timeout() {
    let view = topics(&[("t", 6)]);
    let (mut g, mut clients) = three_members(&view);
    let epoch = g.group_epoch;
    let silent = clients.pop().expect("three");
    assert_eq!(g.tick(&CONFIG, 40_000), 0, "within the session");
    for c in &mut clients {
        c.beat(&mut g, &view, 40_000);
    }
    assert_eq!(g.tick(&CONFIG, 46_000), 1, "the silent one is fenced");
    assert!(!g.members.contains_key(&silent.id));
    assert!(g.group_epoch > epoch);
    settle(&mut g, &mut clients, &view, 46_000);
    assert_eq!(clients.iter().map(Client::count).sum::<usize>(), 6);
    // Its heartbeat is refused: it must rejoin.
    let mut late = request(&silent.id, MemberEpochIn::Member(silent.epoch));
    late.owned = Some(silent.owned.clone());
    assert_eq!(
        g.heartbeat(&late, &view, &CONFIG, 47_000),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_fenced() {
    let view = topics(&[("t", 6)]);
    let (mut g, mut clients) = three_members(&view);
    let mut d = Client::new("d");
    d.join(&mut g, &view, Subscription::Names(&["t"]), 1_000);
    // Each is told its target; the one asked to revoke never acknowledges (its
    // heartbeats still own all it had).
    let stubborn: Vec<HeartbeatRequest> = clients
        .iter()
        .map(|c| {
            let mut req = request(&c.id, MemberEpochIn::Member(c.epoch));
            req.owned = Some(c.owned.clone());
            req
        })
        .collect();
    for req in &stubborn {
        g.heartbeat(req, &view, &CONFIG, 1_000).expect("heartbeat");
    }
    let at = stubborn
        .iter()
        .position(|r| g.members[&r.member_id].state == MemberState::UnrevokedPartitions)
        .expect("a member must revoke for the newcomer");
    let id = stubborn[at].member_id.clone();
    for now in [10_000, 20_000, 30_000] {
        g.heartbeat(&stubborn[at], &view, &CONFIG, now)
            .expect("heartbeat");
        for (i, c) in clients.iter_mut().enumerate() {
            if i != at {
                c.beat(&mut g, &view, now);
            }
        }
        d.beat(&mut g, &view, now);
        g.tick(&CONFIG, now);
        assert!(g.members.contains_key(&id), "within its rebalance timeout");
        assert_eq!(g.members[&id].state, MemberState::UnrevokedPartitions);
    }
    assert_eq!(g.tick(&CONFIG, 31_001), 1);
    assert!(!g.members.contains_key(&id));
    clients.remove(at);
    clients.push(d);
    settle(&mut g, &mut clients, &view, 31_001);
    assert_eq!(clients.iter().map(Client::count).sum::<usize>(), 6);
}

#[test]
fn a_static_member_restarting_keeps_its_partitions() {
    let view = topics(&[("t", 4)]);
    let mut g = ConsumerGroup::new("g");
    let mut clients: Vec<Client> = ["a", "b"].iter().map(|id| Client::new(id)).collect();
    clients[0].instance = Some("i-a".into());
    for c in &mut clients {
        c.join(&mut g, &view, Subscription::Names(&["t"]), 0);
    }
    settle(&mut g, &mut clients, &view, 0);
    let (owned, epoch, group_epoch) = (clients[0].owned.clone(), clients[0].epoch, g.group_epoch);
    // Restarting under a new member id while the old one is active: refused.
    let mut restarted = Client::new("a2");
    restarted.instance = Some("i-a".into());
    let mut req = request("a2", MemberEpochIn::Join);
    req.instance_id = Some("i-a".into());
    req.rebalance_timeout_ms = Some(30_000);
    req.subscribed_topic_names = Some(vec!["t".into()]);
    assert_eq!(
        g.heartbeat(&req, &view, &CONFIG, 1),
        Err(GroupError::UnreleasedInstanceId)
    );
    // Leaving with -2 keeps its place; the new process takes it over, nothing moves.
    let mut leave = request("a", MemberEpochIn::StaticLeave);
    leave.instance_id = Some("i-a".into());
    assert!(matches!(
        g.heartbeat(&leave, &view, &CONFIG, 2),
        Ok(HeartbeatAnswer::Left {
            static_leave: true,
            ..
        })
    ));
    restarted.join(&mut g, &view, Subscription::Names(&["t"]), 3);
    assert_eq!(restarted.owned, owned);
    assert_eq!(restarted.epoch, epoch);
    assert_eq!(g.group_epoch, group_epoch, "no rebalance");
    assert!(!g.members.contains_key("a"));
    // A static member gone for longer than its session is removed.
    let mut leave = request("a2", MemberEpochIn::StaticLeave);
    leave.instance_id = Some("i-a".into());
    g.heartbeat(&leave, &view, &CONFIG, 4).expect("leave");
    clients[1].beat(&mut g, &view, 40_000);
    assert_eq!(g.tick(&CONFIG, 45_005), 1);
    assert!(g.group_epoch > group_epoch);
}

#[test]
fn a_regex_subscription_follows_topics_as_they_are_created() {
    let mut view = topics(&[("orders-1", 2), ("other", 2)]);
    let mut g = ConsumerGroup::new("g");
    let mut c = Client::new("a");
    c.join(&mut g, &view, Subscription::Regex("orders-.*"), 0);
    settle(&mut g, std::slice::from_mut(&mut c), &view, 0);
    assert_eq!(c.owned.keys().collect::<Vec<_>>(), vec!["orders-1"]);
    let epoch = g.group_epoch;
    view.insert(
        "orders-2".into(),
        TopicInfo {
            id: uuid::Uuid::from_u128(99),
            partitions: 3,
        },
    );
    settle(&mut g, std::slice::from_mut(&mut c), &view, 1);
    assert!(g.group_epoch > epoch);
    assert_eq!(c.count(), 5, "orders-1 and orders-2, not other");
    view.remove("orders-1");
    settle(&mut g, std::slice::from_mut(&mut c), &view, 2);
    assert_eq!(c.owned.keys().collect::<Vec<_>>(), vec!["orders-2"]);
}

#[test]
fn errors_are_kafkas() {
    let view = topics(&[("t", 6)]);
    let (mut g, clients) = three_members(&view);
    let a = &clients[0];
    let mut ahead = request(&a.id, MemberEpochIn::Member(a.epoch + 1));
    ahead.owned = Some(a.owned.clone());
    assert_eq!(
        g.heartbeat(&ahead, &view, &CONFIG, 1),
        Err(GroupError::FencedMemberEpoch)
    );
    let mut bad = request("x", MemberEpochIn::Join);
    bad.rebalance_timeout_ms = Some(1);
    bad.subscribed_topic_regex = Some("(".into());
    assert_eq!(
        g.heartbeat(&bad, &view, &CONFIG, 1),
        Err(GroupError::InvalidRegularExpression)
    );
    bad.subscribed_topic_regex = None;
    assert_eq!(
        g.heartbeat(&bad, &view, &CONFIG, 1),
        Err(GroupError::InvalidRequest),
        "a join names a subscription"
    );
    bad.subscribed_topic_names = Some(vec!["t".into()]);
    bad.server_assignor = Some("cooperative-sticky".into());
    assert_eq!(
        g.heartbeat(&bad, &view, &CONFIG, 1),
        Err(GroupError::UnsupportedAssignor)
    );
    bad.server_assignor = None;
    let mut d = Client::new("d");
    d.join(&mut g, &view, Subscription::Names(&["t"]), 1);
    assert_eq!(
        g.heartbeat(&bad, &view, &CONFIG, 1),
        Err(GroupError::GroupMaxSizeReached),
        "four members at most here"
    );
    // Commits: at the member's epoch only; an outsider only while it is empty.
    assert_eq!(g.check_member_epoch(&a.id, Some(a.epoch)), Ok(()));
    assert_eq!(
        g.check_member_epoch(&a.id, Some(a.epoch + 1)),
        Err(GroupError::FencedMemberEpoch)
    );
    assert_eq!(
        g.check_member_epoch(&a.id, Some(a.epoch - 1)),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        g.check_member_epoch("", None),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        g.heartbeat(&request(&a.id, MemberEpochIn::Leave), &view, &CONFIG, 2),
        Ok(HeartbeatAnswer::Left {
            member_id: a.id.clone(),
            static_leave: false
        })
    );
}

#[test]
fn the_members_choose_the_range_assignor() {
    let view = topics(&[("t", 4)]);
    let mut g = ConsumerGroup::new("g");
    for id in ["a", "b"] {
        let mut req = request(id, MemberEpochIn::Join);
        req.rebalance_timeout_ms = Some(1000);
        req.subscribed_topic_names = Some(vec!["t".into()]);
        req.server_assignor = Some("range".into());
        g.heartbeat(&req, &view, &CONFIG, 0).expect("join");
    }
    assert_eq!(g.assignor, Assignor::Range);
    assert_eq!(g.target["a"]["t"], [0, 1].into());
    assert_eq!(g.target["b"]["t"], [2, 3].into());
}

#[test]
fn a_commit_at_an_older_epoch_is_accepted_for_partitions_held_since() {
    let view = topics(&[("t", 6)]);
    let (mut g, mut clients) = three_members(&view);
    let (a_id, old_epoch) = (clients[0].id.clone(), clients[0].epoch);
    let held: Vec<(String, i32)> = partitions(&clients[0].owned)
        .map(|(t, p)| (t.clone(), p))
        .collect();
    // A member leaves: "a" moves to a newer epoch and gains a partition.
    let gone = clients.pop().expect("three");
    g.heartbeat(&request(&gone.id, MemberEpochIn::Leave), &view, &CONFIG, 1)
        .expect("leave");
    settle(&mut g, &mut clients, &view, 1);
    assert!(clients[0].epoch > old_epoch);
    // A commit sent before it learned of the new epoch, of what it held then: accepted.
    assert_eq!(g.check_commit(&a_id, Some(old_epoch), &held), Ok(()));
    // At the old epoch, a partition it got only at the new one: stale.
    let all: Vec<(String, i32)> = partitions(&clients[0].owned)
        .map(|(t, p)| (t.clone(), p))
        .collect();
    assert!(all.len() > held.len());
    assert_eq!(
        g.check_commit(&a_id, Some(old_epoch), &all),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(g.check_commit(&a_id, Some(clients[0].epoch), &all), Ok(()));
}
