//! What the consumer protocol's steps know of the broker's topics: each topic's id and
//! partition count by name ([`TopicsView`]), and partitions by topic name
//! ([`Assignment`]). Plain values, passed in by the caller at each step; the assignors,
//! the group state and the durable records all speak in them. [`TopicsSource`] reads the
//! broker's topics for the classic requests that need them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

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

/// The broker's topics now, as the assignor needs them for a classic member's join or
/// heartbeat in a consumer group (read only then).
#[derive(Clone)]
pub struct TopicsSource(Arc<dyn Fn() -> TopicsView + Send + Sync>);

impl TopicsSource {
    pub fn new(f: impl Fn() -> TopicsView + Send + Sync + 'static) -> TopicsSource {
        TopicsSource(Arc::new(f))
    }

    pub(crate) fn get(&self) -> TopicsView {
        (self.0)()
    }
}

impl Default for TopicsSource {
    fn default() -> Self {
        TopicsSource::new(TopicsView::new)
    }
}

impl std::fmt::Debug for TopicsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TopicsSource")
    }
}
