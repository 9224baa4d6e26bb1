//! The workspace's ids, each its own type: a partition's index, a topic partition, an
//! idempotent producer's id and epoch ([`crate::Offset`] has a module of its own). Their integers are private: the request
//! handlers and the side-file codecs build them from wire or disk integers with
//! `new` and read them back with `value`; everything in between passes the types.
//! Where the wire says "none" with -1, the broker holds an `Option` and the encoder
//! writes the -1.

use std::fmt;

/// Declares an id type: a private integer, `new` from a wire or disk integer, `value`
/// back, shown as the integer. With `none = -1`, also `from_wire` (a negative integer
/// is `None`) and `to_wire` (`None` is -1), for the ids the wire may leave out.
#[macro_export]
macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name($int);

        impl $name {
            /// The id a wire or disk integer names.
            pub const fn new(value: $int) -> $name {
                $name(value)
            }

            /// The integer, for the wire and the disk.
            pub const fn value(self) -> $int {
                self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0, f)
            }
        }
    };
    ($(#[$doc:meta])* $name:ident($int:ty), none = -1) => {
        $crate::id_type!($(#[$doc])* $name($int));

        impl $name {
            /// The id a request carries: `None` for a negative integer, the wire's "none".
            pub const fn from_wire(value: $int) -> Option<$name> {
                if value >= 0 {
                    Some($name(value))
                } else {
                    None
                }
            }

            /// The wire's form of an optional id: -1 for none.
            pub fn to_wire(id: Option<$name>) -> $int {
                id.map_or(-1, $name::value)
            }
        }
    };
}

id_type!(
    /// A partition's number within its topic. Built from the wire as it came: a
    /// negative index names no partition, and a lookup of it fails like any unknown one.
    PartitionIndex(i32)
);

id_type!(
    /// An idempotent producer's id, handed out by `headway_broker::producer_ids`. The wire's
    /// "no producer" (-1) never becomes one: [`ProducerId::from_wire`] says `None`.
    ProducerId(i64),
    none = -1
);

id_type!(
    /// The epoch of a producer id: a producer that re-initialises gets a higher one,
    /// and batches of an older epoch are fenced.
    ProducerEpoch(i16),
    none = -1
);

impl ProducerEpoch {
    /// The epoch every new producer id starts at.
    pub const FIRST: ProducerEpoch = ProducerEpoch(0);
}

/// One partition of one topic, by name: what Kafka calls a `TopicPartition`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: PartitionIndex,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: PartitionIndex) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_none_is_minus_one_only_at_the_edge() {
        assert_eq!(ProducerId::from_wire(-1), None);
        assert_eq!(ProducerId::from_wire(7), Some(ProducerId::new(7)));
        assert_eq!(ProducerId::to_wire(None), -1);
        assert_eq!(ProducerId::to_wire(Some(ProducerId::new(7))), 7);
        assert_eq!(ProducerEpoch::to_wire(None), -1);
        assert_eq!(ProducerEpoch::to_wire(Some(ProducerEpoch::FIRST)), 0);
    }

    #[test]
    fn topic_partitions_order_by_topic_then_index() {
        let a1 = TopicPartition::new("a", PartitionIndex::new(1));
        let b0 = TopicPartition::new("b", PartitionIndex::new(0));
        assert!(a1 < b0);
        assert_eq!(a1.to_string(), "a/1");
    }
}
