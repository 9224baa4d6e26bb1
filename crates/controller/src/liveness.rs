//! Which brokers are alive, as the controller leader sees them.
//!
//! Every broker of the cluster is a voter of the controller group, so the leader hears from
//! each of them at every Raft heartbeat: it knows when it last heard from a broker, and how
//! far that broker's copy of the metadata log reaches. [`decide`] turns that into
//! commands, with no I/O and no clock of its own:
//! - an unfenced broker not heard from for the session timeout is fenced, which moves the
//!   leadership of its partitions to the next in-sync replica;
//! - a fenced broker heard from within the session timeout whose metadata reaches its own
//!   registration is unfenced, unless it is shutting down (it stays fenced until it
//!   registers again);
//! - once nothing is fenced or unfenced, partitions whose preferred leader is back in the
//!   ISR are given back to it.
//!
//! [`run`] is the loop on every voter: it acts only while its voter leads.

use crate::consensus::state_machine::{Image, Raft};
use crate::metadata::{BrokerId, Command};
use openraft::async_runtime::WatchReceiver;
use openraft::Instant;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the leader knows of one voter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// Time since the voter last answered the leader; `None` if it never did.
    pub silent_for: Option<Duration>,
    /// The last metadata log index the voter has.
    pub matched_index: Option<u64>,
}

/// The commands the leader `me`, leading for `leading_for`, should propose, given what it
/// heard from each voter. A new leader has not heard from anyone yet: a broker it never
/// heard from counts as silent only since it leads.
pub fn decide(
    image: &Image,
    me: BrokerId,
    heard: &BTreeMap<BrokerId, Heard>,
    leading_for: Duration,
    session_timeout: Duration,
) -> Vec<Command> {
    let mut commands = Vec::new();
    for broker in image.metadata.brokers.values() {
        let silent_for = heard
            .get(&broker.id)
            .and_then(|h| h.silent_for)
            .unwrap_or(leading_for)
            .min(leading_for);
        let alive = broker.id == me || silent_for < session_timeout;
        let caught_up = broker.id == me
            || heard
                .get(&broker.id)
                .and_then(|h| h.matched_index)
                .is_some_and(|index| i64::try_from(index).unwrap_or(i64::MAX) >= broker.epoch);
        if broker.fenced && alive && caught_up && !broker.shutting_down {
            commands.push(Command::UnfenceBroker {
                id: broker.id,
                epoch: broker.epoch,
            });
        } else if !broker.fenced && !alive {
            commands.push(Command::FenceBroker {
                id: broker.id,
                epoch: broker.epoch,
            });
        }
    }
    if commands.is_empty() && preferred_leader_waits(image) {
        commands.push(Command::ElectPreferredLeaders);
    }
    commands
}

/// Whether some partition's preferred leader is unfenced and in sync but does not lead.
fn preferred_leader_waits(image: &Image) -> bool {
    let metadata = &image.metadata;
    metadata
        .topics
        .values()
        .flat_map(|t| &t.partitions)
        .any(|p| match p.replicas.first() {
            Some(&preferred) => {
                p.leader != preferred
                    && p.isr.contains(&preferred)
                    && metadata.brokers.get(&preferred).is_some_and(|b| !b.fenced)
            }
            None => false,
        })
}

/// What the leader heard from each voter, from its Raft metrics.
fn heard(raft: &Raft) -> Option<BTreeMap<BrokerId, Heard>> {
    let metrics = raft.metrics();
    let metrics = metrics.borrow_watched();
    let heartbeats = metrics.heartbeat.as_ref()?;
    let replication = metrics.replication.as_ref();
    let mut heard = BTreeMap::new();
    for (node, last) in heartbeats {
        let Ok(id) = BrokerId::try_from(*node) else {
            continue;
        };
        let matched_index = replication
            .and_then(|r| r.get(node))
            .and_then(|log_id| log_id.as_ref().map(|id| id.index()));
        heard.insert(
            id,
            Heard {
                silent_for: last.as_ref().map(|at| at.elapsed()),
                matched_index,
            },
        );
    }
    Some(heard)
}

/// Fences and unfences brokers while this voter leads, every `interval`, until aborted.
pub async fn run(
    raft: Raft,
    me: BrokerId,
    image: watch::Receiver<Arc<Image>>,
    interval: Duration,
    session_timeout: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading_since: Option<(u64, tokio::time::Instant)> = None;
    loop {
        tick.tick().await;
        let Some(heard) = heard(&raft) else {
            leading_since = None;
            continue;
        };
        let term = raft.metrics().borrow_watched().current_term;
        let since = match leading_since {
            Some((leading_term, since)) if leading_term == term => since,
            _ => {
                let now = tokio::time::Instant::now();
                leading_since = Some((term, now));
                now
            }
        };
        let current = Arc::clone(&image.borrow());
        for command in decide(&current, me, &heard, since.elapsed(), session_timeout) {
            let what = command.to_string();
            match crate::consensus::network::propose_here(&raft, command, session_timeout).await {
                Ok(decision) => tracing::info!(
                    command = %what,
                    outcome = %decision.outcome,
                    "controller liveness"
                ),
                Err(refusal) => {
                    tracing::debug!(command = %what, ?refusal, "controller liveness: not decided");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::{Metadata, Outcome};
    use uuid::Uuid;

    fn image_with(brokers: &[BrokerId], unfenced: &[BrokerId]) -> Image {
        let mut metadata = Metadata::default();
        let mut index = 0;
        for id in brokers {
            index += 1;
            let Outcome::Registered { epoch } = metadata.apply(
                index,
                &Command::RegisterBroker {
                    id: *id,
                    incarnation: Uuid::new_v4(),
                    endpoints: Vec::new(),
                },
            ) else {
                panic!()
            };
            if unfenced.contains(id) {
                index += 1;
                metadata.apply(index, &Command::UnfenceBroker { id: *id, epoch });
            }
        }
        Image {
            metadata,
            applied_index: index,
        }
    }

    const TIMEOUT: Duration = Duration::from_secs(3);
    /// A leader for longer than the session timeout.
    const LONG: Duration = Duration::from_secs(60);

    fn heard(silent_ms: u64, matched: u64) -> Heard {
        Heard {
            silent_for: Some(Duration::from_millis(silent_ms)),
            matched_index: Some(matched),
        }
    }

    #[test]
    fn a_silent_broker_is_fenced_and_a_live_one_left_alone() {
        let image = image_with(&[1, 2, 3], &[1, 2, 3]);
        let heard = BTreeMap::from([(2, heard(100, 10)), (3, heard(3_500, 10))]);
        let commands = decide(&image, 1, &heard, LONG, TIMEOUT);
        assert_eq!(commands.len(), 1);
        assert!(matches!(commands[0], Command::FenceBroker { id: 3, .. }));
    }

    #[test]
    fn a_fenced_broker_is_unfenced_once_heard_and_caught_up_with_its_registration() {
        let image = image_with(&[1, 2], &[1]);
        let epoch = image.metadata.brokers[&2].epoch as u64;
        let behind = BTreeMap::from([(2, heard(10, epoch - 1))]);
        assert!(decide(&image, 1, &behind, LONG, TIMEOUT).is_empty());
        let never = BTreeMap::from([(
            2,
            Heard {
                silent_for: None,
                matched_index: Some(epoch),
            },
        )]);
        assert!(decide(&image, 1, &never, LONG, TIMEOUT).is_empty());
        let caught_up = BTreeMap::from([(2, heard(10, epoch))]);
        let commands = decide(&image, 1, &caught_up, LONG, TIMEOUT);
        assert!(matches!(
            commands[..],
            [Command::UnfenceBroker { id: 2, .. }]
        ));
    }

    #[test]
    fn a_broker_shutting_down_stays_fenced_while_it_is_heard() {
        let mut image = image_with(&[1, 2], &[1, 2]);
        let epoch = image.metadata.brokers[&2].epoch;
        let index = image.applied_index;
        image
            .metadata
            .apply(index + 1, &Command::ShutdownBroker { id: 2, epoch });
        let caught_up = BTreeMap::from([(2, heard(10, epoch as u64 + 1))]);
        assert!(decide(&image, 1, &caught_up, LONG, TIMEOUT).is_empty());
        image.metadata.apply(
            index + 2,
            &Command::ShutdownBroker {
                id: 1,
                epoch: image.metadata.brokers[&1].epoch,
            },
        );
        assert!(
            decide(&image, 1, &caught_up, LONG, TIMEOUT).is_empty(),
            "the leader does not unfence itself while it shuts down"
        );
    }

    #[test]
    fn a_new_leader_fences_no_one_before_a_session_timeout() {
        let image = image_with(&[1, 2, 3], &[1, 2, 3]);
        let never: BTreeMap<BrokerId, Heard> = BTreeMap::new();
        let just_elected = Duration::from_millis(200);
        assert!(decide(&image, 1, &never, just_elected, TIMEOUT).is_empty());
        let commands = decide(&image, 1, &never, TIMEOUT, TIMEOUT);
        assert_eq!(commands.len(), 2, "{commands:?}");
    }

    #[test]
    fn the_leader_counts_itself_alive() {
        let image = image_with(&[1], &[]);
        let commands = decide(&image, 1, &BTreeMap::new(), LONG, TIMEOUT);
        assert!(matches!(
            commands[..],
            [Command::UnfenceBroker { id: 1, .. }]
        ));
    }

    #[test]
    fn preferred_leaders_are_restored_only_when_nothing_else_is_pending() {
        let mut image = image_with(&[1, 2], &[1, 2]);
        let index = image.applied_index;
        image.metadata.apply(
            index + 1,
            &Command::CreateTopic {
                name: "t".into(),
                id: Uuid::new_v4(),
                assignment: vec![vec![1, 2]],
                configs: Default::default(),
            },
        );
        let partition = &mut image.metadata.topics.get_mut("t").unwrap().partitions[0];
        partition.leader = 2;
        let all_heard = BTreeMap::from([(2, heard(10, 100))]);
        let commands = decide(&image, 1, &all_heard, LONG, TIMEOUT);
        assert!(matches!(commands[..], [Command::ElectPreferredLeaders]));
        let two_silent = BTreeMap::from([(2, heard(5_000, 100))]);
        let commands = decide(&image, 1, &two_silent, LONG, TIMEOUT);
        assert!(matches!(commands[..], [Command::FenceBroker { id: 2, .. }]));
    }
}
