//! Server-side assignors of the consumer group protocol: `uniform` (the default) and
//! `range`, chosen by the member's `group.remote.assignor`.
//!
//! An assignor is a pure function from the members (their subscriptions and their
//! previous target) and the subscribed topics to a target assignment. Every partition
//! of a topic that at least one member subscribes to is given to exactly one of those
//! members; which member, and how the counts balance, is the assignor's choice.

use super::topics::{Assignment, TopicsView};
use std::collections::{BTreeMap, BTreeSet};

/// The assignors this broker serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignor {
    /// Balanced and sticky: partition counts differ by at most one between members
    /// with the same subscription, and a member keeps as much of its previous target
    /// as balance allows (Kafka's `uniform`).
    #[default]
    Uniform,
    /// Per topic, the partitions in contiguous ranges over the members subscribed to
    /// it, in member order (Kafka's `range`).
    Range,
}

/// What an assignor knows of a member.
#[derive(Debug, Clone)]
pub struct AssignorMember<'a> {
    pub member_id: &'a str,
    /// Static members are ordered by instance id, so a restarted one keeps its place.
    pub instance_id: Option<&'a str>,
    pub subscribed: &'a BTreeSet<String>,
    pub previous: &'a Assignment,
}

impl Assignor {
    /// The assignor of a `ServerAssignor` name, if served.
    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The target assignment of every member (members without partitions included).
    pub fn assign(
        self,
        members: &[AssignorMember<'_>],
        topics: &TopicsView,
    ) -> BTreeMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(members, topics),
            Assignor::Range => range(members, topics),
        }
    }
}

/// Every partition some member subscribes to, in (topic, partition) order.
fn subscribed_partitions(
    members: &[AssignorMember<'_>],
    topics: &TopicsView,
) -> Vec<(String, i32)> {
    let names: BTreeSet<&String> = members.iter().flat_map(|m| m.subscribed.iter()).collect();
    names
        .into_iter()
        .filter_map(|name| topics.get(name).map(|t| (name, t.partitions)))
        .flat_map(|(name, count)| (0..count).map(move |p| (name.clone(), p)))
        .collect()
}

fn uniform(members: &[AssignorMember<'_>], topics: &TopicsView) -> BTreeMap<String, Assignment> {
    let mut target: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    if members.is_empty() {
        return target;
    }
    let partitions = subscribed_partitions(members, topics);
    let (base, mut extra) = (
        partitions.len() / members.len(),
        partitions.len() % members.len(),
    );
    let mut count: BTreeMap<&str, usize> = members.iter().map(|m| (m.member_id, 0)).collect();
    let mut taken: BTreeSet<(String, i32)> = BTreeSet::new();
    let valid = |m: &AssignorMember<'_>, topic: &String, p: i32| {
        m.subscribed.contains(topic) && topics.get(topic).is_some_and(|t| p < t.partitions)
    };
    // Stickiness: each member keeps up to `base` partitions of its previous target,
    // then the members that had more keep one more while the remainder lasts.
    for round_cap in [base, base + 1] {
        for m in members {
            let previous = m
                .previous
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t, *p)));
            for (topic, p) in previous {
                let held = count[m.member_id];
                if held >= round_cap || (round_cap > base && extra == 0) {
                    break;
                }
                if !valid(m, topic, p) || taken.contains(&(topic.clone(), p)) {
                    continue;
                }
                taken.insert((topic.clone(), p));
                give(&mut target, m.member_id, topic, p);
                *count.get_mut(m.member_id).expect("member counted") += 1;
                if held + 1 > base {
                    extra -= 1;
                }
            }
        }
    }
    // The rest go to the least loaded member subscribed to their topic.
    for (topic, p) in partitions {
        if taken.contains(&(topic.clone(), p)) {
            continue;
        }
        let owner = members
            .iter()
            .filter(|m| m.subscribed.contains(&topic))
            .min_by_key(|m| (count[m.member_id], m.member_id))
            .expect("a subscribed partition has a subscriber");
        give(&mut target, owner.member_id, &topic, p);
        *count.get_mut(owner.member_id).expect("member counted") += 1;
    }
    target
}

fn range(members: &[AssignorMember<'_>], topics: &TopicsView) -> BTreeMap<String, Assignment> {
    let mut target: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    let mut ordered: Vec<&AssignorMember<'_>> = members.iter().collect();
    ordered.sort_by_key(|m| (m.instance_id.unwrap_or(m.member_id), m.member_id));
    let names: BTreeSet<&String> = members.iter().flat_map(|m| m.subscribed.iter()).collect();
    for name in names {
        let Some(topic) = topics.get(name) else {
            continue;
        };
        let subscribers: Vec<&&AssignorMember<'_>> = ordered
            .iter()
            .filter(|m| m.subscribed.contains(name))
            .collect();
        let n = subscribers.len() as i32;
        let (base, extra) = (topic.partitions / n, topic.partitions % n);
        let mut next = 0;
        for (i, m) in subscribers.iter().enumerate() {
            let len = base + i32::from((i as i32) < extra);
            for p in next..next + len {
                give(&mut target, m.member_id, name, p);
            }
            next += len;
        }
    }
    target
}

fn give(target: &mut BTreeMap<String, Assignment>, member_id: &str, topic: &str, p: i32) {
    target
        .entry(member_id.to_string())
        .or_default()
        .entry(topic.to_string())
        .or_default()
        .insert(p);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::topics::TopicInfo;

    fn topics(list: &[(&str, i32)]) -> TopicsView {
        list.iter()
            .map(|(n, p)| {
                let info = TopicInfo {
                    id: uuid::Uuid::new_v4(),
                    partitions: *p,
                };
                (n.to_string(), info)
            })
            .collect()
    }

    fn counts(target: &BTreeMap<String, Assignment>) -> Vec<usize> {
        target
            .values()
            .map(|a| a.values().map(BTreeSet::len).sum())
            .collect()
    }

    fn all_once(target: &BTreeMap<String, Assignment>, expected: usize) {
        let mut seen = BTreeSet::new();
        for a in target.values() {
            for (t, ps) in a {
                for p in ps {
                    assert!(seen.insert((t.clone(), *p)), "{t}-{p} given twice");
                }
            }
        }
        assert_eq!(seen.len(), expected, "every partition given");
    }

    #[test]
    fn uniform_balances_and_keeps_what_it_can() {
        let view = topics(&[("a", 4), ("b", 3)]);
        let sub: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let empty = Assignment::new();
        let ids = ["m1", "m2", "m3"];
        let members: Vec<AssignorMember<'_>> = ids
            .iter()
            .map(|id| AssignorMember {
                member_id: id,
                instance_id: None,
                subscribed: &sub,
                previous: &empty,
            })
            .collect();
        let first = Assignor::Uniform.assign(&members, &view);
        all_once(&first, 7);
        let mut c = counts(&first);
        c.sort();
        assert_eq!(c, vec![2, 2, 3]);
        // A fourth member joins: the three keep all they can, the newcomer gets the
        // partitions that balance takes from them.
        let mut members2 = members.clone();
        for m in &mut members2 {
            m.previous = &first[m.member_id];
        }
        members2.push(AssignorMember {
            member_id: "m4",
            instance_id: None,
            subscribed: &sub,
            previous: &empty,
        });
        let second = Assignor::Uniform.assign(&members2, &view);
        all_once(&second, 7);
        let mut c = counts(&second);
        c.sort();
        assert_eq!(c, vec![1, 2, 2, 2]);
        for id in ids {
            for (t, ps) in &second[id] {
                for p in ps {
                    assert!(first[id][t].contains(p), "{id} kept {t}-{p} from before");
                }
            }
        }
    }

    #[test]
    fn range_assigns_contiguous_ranges_per_topic() {
        let view = topics(&[("a", 5), ("b", 2)]);
        let ab: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        let a: BTreeSet<String> = ["a".to_string()].into();
        let empty = Assignment::new();
        let members = [
            AssignorMember {
                member_id: "x",
                instance_id: None,
                subscribed: &ab,
                previous: &empty,
            },
            AssignorMember {
                member_id: "y",
                instance_id: None,
                subscribed: &a,
                previous: &empty,
            },
        ];
        let target = Assignor::Range.assign(&members, &view);
        all_once(&target, 7);
        assert_eq!(target["x"]["a"], [0, 1, 2].into());
        assert_eq!(target["y"]["a"], [3, 4].into());
        assert_eq!(target["x"]["b"], [0, 1].into());
        assert!(!target["y"].contains_key("b"), "y does not subscribe to b");
    }

    #[test]
    fn names_are_kafkas() {
        assert_eq!(Assignor::from_name("uniform"), Some(Assignor::Uniform));
        assert_eq!(Assignor::from_name("range"), Some(Assignor::Range));
        assert_eq!(Assignor::from_name("sticky"), None);
        assert_eq!(Assignor::default().name(), "uniform");
    }
}
