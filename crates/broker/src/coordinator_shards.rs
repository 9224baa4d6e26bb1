//! Which coordinator serves a key (a group id, later a transactional id): the
//! coordinators of a broker, one per partition of their internal topic that the broker
//! leads.
//!
//! A broker alone has one coordinator for every key, on its own internal log. In a
//! cluster the internal topic (`__consumer_offsets`) is a replicated topic of several
//! partitions: a key belongs to partition `abs(java_hash(key)) % partitions` (Kafka's
//! rule, so tools that read the topic find a group where Kafka would put it), and the
//! broker that leads that partition coordinates it, on a state rebuilt from the
//! partition's log.
//!
//! [`Shards`] is plain bookkeeping: who drives it (the server, from the cluster's
//! metadata) tells it which partitions this broker leads at which leader epoch
//! ([`Shards::follow`]), loads the ones it is asked to, and hands each loaded
//! coordinator back ([`Shards::loaded`]). A coordinator whose partition is led elsewhere
//! now, or at another epoch, is retired ([`Shard::retire`]): it answers nothing more,
//! and the requests it held are answered with an error that sends clients to look for
//! the coordinator again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The epoch of a coordinator on a broker alone, whose internal log has no leader
/// epochs.
pub const NO_EPOCH: i32 = -1;

/// A coordinator that serves one partition of its internal topic.
pub trait Shard: Send + Sync + 'static {
    /// Stops serving: the partition is led elsewhere now (or at another epoch). Ends
    /// its timers and fails what it held; must leave the log open (the broker owns it).
    fn retire(&self);
}

/// Why a key has no coordinator here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unserved {
    /// Another broker leads the key's partition, or none does, or the internal topic
    /// does not exist yet (`NOT_COORDINATOR`).
    NotCoordinator,
    /// This broker leads the key's partition and is still replaying its log
    /// (`COORDINATOR_LOAD_IN_PROGRESS`).
    Loading,
}

/// The partition of an internal topic that holds `key`: Kafka's rule,
/// `abs(hashCode(key)) % partitions`, with Java's `String.hashCode` over UTF-16 code
/// units and an absolute value that takes `i32::MIN` to 0.
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let hash = key.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

/// A partition this broker leads and is asked to load: its index and leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToLoad {
    pub index: i32,
    pub epoch: i32,
}

enum Slot<C> {
    Loading { epoch: i32 },
    Serving { epoch: i32, shard: Arc<C> },
}

impl<C> Slot<C> {
    fn epoch(&self) -> i32 {
        match self {
            Slot::Loading { epoch } | Slot::Serving { epoch, .. } => *epoch,
        }
    }
}

struct Led<C> {
    /// The internal topic's partitions (0 until it exists).
    partitions: i32,
    slots: HashMap<i32, Slot<C>>,
}

enum Mode<C> {
    /// A broker alone: one coordinator for every key.
    Alone(Arc<C>),
    Cluster(Mutex<Led<C>>),
}

/// The coordinators of one kind this broker runs.
pub struct Shards<C> {
    mode: Mode<C>,
}

impl<C: Shard> Shards<C> {
    /// A broker alone: `coordinator` serves every key.
    pub fn alone(coordinator: Arc<C>) -> Shards<C> {
        Shards {
            mode: Mode::Alone(coordinator),
        }
    }

    /// A broker in a cluster: nothing served until [`Shards::follow`] and
    /// [`Shards::loaded`] say so.
    pub fn clustered() -> Shards<C> {
        Shards {
            mode: Mode::Cluster(Mutex::new(Led {
                partitions: 0,
                slots: HashMap::new(),
            })),
        }
    }

    pub fn is_clustered(&self) -> bool {
        matches!(self.mode, Mode::Cluster(_))
    }

    fn led(&self) -> Option<std::sync::MutexGuard<'_, Led<C>>> {
        match &self.mode {
            Mode::Alone(_) => None,
            Mode::Cluster(led) => Some(led.lock().expect("coordinator shards lock")),
        }
    }

    /// The coordinator of `key`, if this broker serves it now.
    pub fn of(&self, key: &str) -> Result<Arc<C>, Unserved> {
        let Some(led) = self.led() else {
            let Mode::Alone(one) = &self.mode else {
                unreachable!("a broker alone has its coordinator")
            };
            return Ok(Arc::clone(one));
        };
        if led.partitions == 0 {
            return Err(Unserved::NotCoordinator);
        }
        let index = partition_for(key, led.partitions);
        drop(led);
        self.at(index)
    }

    /// The coordinator of partition `index` of the internal topic, if this broker
    /// serves it now (a broker alone: its one coordinator).
    pub fn at(&self, index: i32) -> Result<Arc<C>, Unserved> {
        let Some(led) = self.led() else {
            let Mode::Alone(one) = &self.mode else {
                unreachable!("a broker alone has its coordinator")
            };
            return Ok(Arc::clone(one));
        };
        match led.slots.get(&index) {
            Some(Slot::Serving { shard, .. }) => Ok(Arc::clone(shard)),
            Some(Slot::Loading { .. }) => Err(Unserved::Loading),
            None => Err(Unserved::NotCoordinator),
        }
    }

    /// The partition of the internal topic that holds `key`: 0 on a broker alone (one
    /// log), `None` while a cluster's topic does not exist yet.
    pub fn partition_of(&self, key: &str) -> Option<i32> {
        match self.led() {
            None => Some(0),
            Some(led) if led.partitions == 0 => None,
            Some(led) => Some(partition_for(key, led.partitions)),
        }
    }

    /// Every coordinator serving now (for ListGroups, metrics, the console).
    pub fn all(&self) -> Vec<Arc<C>> {
        let Some(led) = self.led() else {
            let Mode::Alone(one) = &self.mode else {
                unreachable!("a broker alone has its coordinator")
            };
            return vec![Arc::clone(one)];
        };
        let mut serving: Vec<(i32, Arc<C>)> = led
            .slots
            .iter()
            .filter_map(|(i, slot)| match slot {
                Slot::Serving { shard, .. } => Some((*i, Arc::clone(shard))),
                Slot::Loading { .. } => None,
            })
            .collect();
        serving.sort_by_key(|(i, _)| *i);
        serving.into_iter().map(|(_, shard)| shard).collect()
    }

    /// Takes what this broker leads of the internal topic now: its partition count and
    /// `(index, leader epoch)` of each partition led here. Retires coordinators of
    /// partitions no longer led at their epoch and returns the partitions to load (each
    /// once, until [`Shards::loaded`] or [`Shards::load_failed`] for it).
    pub fn follow(&self, partitions: i32, leading: &[(i32, i32)]) -> Vec<ToLoad> {
        let Some(mut led) = self.led() else {
            return Vec::new();
        };
        led.partitions = partitions;
        let wanted: HashMap<i32, i32> = leading.iter().copied().collect();
        let stale: Vec<i32> = led
            .slots
            .iter()
            .filter(|(i, slot)| wanted.get(i) != Some(&slot.epoch()))
            .map(|(i, _)| *i)
            .collect();
        for index in stale {
            if let Some(Slot::Serving { shard, .. }) = led.slots.remove(&index) {
                shard.retire();
            }
        }
        let mut load = Vec::new();
        for (&index, &epoch) in &wanted {
            if let std::collections::hash_map::Entry::Vacant(slot) = led.slots.entry(index) {
                slot.insert(Slot::Loading { epoch });
                load.push(ToLoad { index, epoch });
            }
        }
        load.sort_by_key(|l| l.index);
        load
    }

    /// A coordinator loaded for `what`: serves from now on, unless the partition moved
    /// meanwhile (then it is retired at once). Returns whether it serves.
    pub fn loaded(&self, what: ToLoad, shard: Arc<C>) -> bool {
        let Some(mut led) = self.led() else {
            return false;
        };
        match led.slots.get(&what.index) {
            Some(Slot::Loading { epoch }) if *epoch == what.epoch => {
                led.slots.insert(
                    what.index,
                    Slot::Serving {
                        epoch: what.epoch,
                        shard,
                    },
                );
                true
            }
            _ => {
                drop(led);
                shard.retire();
                false
            }
        }
    }

    /// A load that did not finish: the next [`Shards::follow`] asks for it again.
    pub fn load_failed(&self, what: ToLoad) {
        let Some(mut led) = self.led() else {
            return;
        };
        if matches!(led.slots.get(&what.index), Some(Slot::Loading { epoch }) if *epoch == what.epoch)
        {
            led.slots.remove(&what.index);
        }
    }

    /// Retires every coordinator (the broker stops).
    pub fn retire_all(&self) {
        let Some(mut led) = self.led() else {
            return;
        };
        for (_, slot) in led.slots.drain() {
            if let Slot::Serving { shard, .. } = slot {
                shard.retire();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Default)]
    struct Fake {
        retired: AtomicBool,
    }

    impl Shard for Fake {
        fn retire(&self) {
            self.retired.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn keys_map_to_partitions_as_java_string_hash_code_does() {
        // "a".hashCode() = 97; "group".hashCode() = 98629247.
        assert_eq!(partition_for("a", 50), 97 % 50);
        assert_eq!(partition_for("group", 50), 98_629_247 % 50);
        // "polygenelubricants".hashCode() is Integer.MIN_VALUE: abs takes it to 0.
        assert_eq!(partition_for("polygenelubricants", 7), 0);
        // A negative hash: "my-group".hashCode() = -1906497762.
        assert_eq!(partition_for("my-group", 12), 1_906_497_762 % 12);
        assert_eq!(partition_for("", 12), 0);
    }

    #[test]
    fn a_broker_alone_serves_every_key() {
        let shards = Shards::alone(Arc::new(Fake::default()));
        assert!(shards.of("any").is_ok());
        assert_eq!(shards.all().len(), 1);
        assert!(shards.follow(12, &[]).is_empty());
    }

    #[test]
    fn a_partition_loads_once_then_serves_its_keys_until_led_elsewhere() {
        let shards: Shards<Fake> = Shards::clustered();
        assert_eq!(shards.of("g").err(), Some(Unserved::NotCoordinator));
        let index = partition_for("g", 4);
        let load = shards.follow(4, &[(index, 3)]);
        assert_eq!(load, vec![ToLoad { index, epoch: 3 }]);
        assert!(shards.follow(4, &[(index, 3)]).is_empty(), "asked once");
        assert_eq!(shards.of("g").err(), Some(Unserved::Loading));
        let shard = Arc::new(Fake::default());
        assert!(shards.loaded(load[0], Arc::clone(&shard)));
        assert!(shards.of("g").is_ok());
        assert_eq!(shards.all().len(), 1);
        // Led at a new epoch: the old coordinator retires, a new load is asked for.
        let again = shards.follow(4, &[(index, 4)]);
        assert!(shard.retired.load(Ordering::SeqCst));
        assert_eq!(again, vec![ToLoad { index, epoch: 4 }]);
        // Led elsewhere before that load ends: the loaded coordinator retires at once.
        assert!(shards.follow(4, &[]).is_empty());
        let late = Arc::new(Fake::default());
        assert!(!shards.loaded(again[0], Arc::clone(&late)));
        assert!(late.retired.load(Ordering::SeqCst));
        assert_eq!(shards.of("g").err(), Some(Unserved::NotCoordinator));
    }

    #[test]
    fn a_failed_load_is_asked_for_again() {
        let shards: Shards<Fake> = Shards::clustered();
        let load = shards.follow(2, &[(1, 0)]);
        shards.load_failed(load[0]);
        assert_eq!(shards.follow(2, &[(1, 0)]), load);
    }
}
