//! What the consumer protocol's steps know of the broker's topics: each topic's id and
//! partition count by name ([`TopicsView`]), and partitions by topic name
//! ([`Assignment`]). Plain values, passed in by the caller at each step; the assignors,
//! the group state and the durable records all speak in them.

use std::collections::{BTreeMap, BTreeSet};

/// What the broker knows of a topic, as the assignors need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicInfo {
    pub id: uuid::Uuid,
    pub partitions: i32,
}

/// The broker's topics by name, as given to a heartbeat.
pub type TopicsView = BTreeMap<String, TopicInfo>;

/// Partitions by topic name.
pub type Assignment = BTreeMap<String, BTreeSet<i32>>;
