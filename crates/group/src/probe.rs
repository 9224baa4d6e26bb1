//! The consumer groups' probe: how many groups the coordinator knows and, per group
//! and partition, the committed offset and the lag behind the partition's high
//! watermark, for the first `limits::METRICS_GROUP_PARTITIONS_MAX` committed group
//! partitions (groups by id, then partitions); a gauge counts the ones left out.

use crate::GroupShards;
use headway_base::limits;
use headway_broker::probe::{gauge, labels, Bounded, Gauges};
use headway_broker::Broker;
use prometheus_client::registry::Registry;

/// Registers `headway_groups`, `headway_group_partitions_omitted`,
/// `headway_group_committed_offset` and `headway_group_lag`; `broker` gives each
/// partition's high watermark.
pub fn register(r: &mut Registry, shards: &GroupShards, broker: &Broker) {
    let (committed, lag) = (Gauges::default(), Gauges::default());
    let groups = shards.list();
    let mut bound = Bounded::new(limits::METRICS_GROUP_PARTITIONS_MAX);
    for group in &groups {
        let Ok(coordinator) = shards.of(&group.group_id) else {
            continue;
        };
        let mut offsets = coordinator.committed(&group.group_id, None);
        offsets.sort_by(|a, b| a.0.cmp(&b.0));
        for (tp, offset) in offsets {
            if !bound.admit() {
                continue;
            }
            let labels = labels([
                ("group", &group.group_id),
                ("topic", &tp.topic),
                ("partition", &tp.partition.value().to_string()),
            ]);
            let at = offset.commit.offset.value();
            committed.get_or_create(&labels).set(at);
            // A deleted topic's commits stay until they expire: no lag to show.
            if let Ok(p) = broker.partition(&tp.topic, tp.partition) {
                let behind = p.high_watermark().value().saturating_sub(at).max(0);
                lag.get_or_create(&labels).set(behind);
            }
        }
    }
    gauge(
        r,
        "groups",
        "Consumer groups known to the coordinator",
        groups.len() as u64,
    );
    gauge(
        r,
        "group_partitions_omitted",
        "Committed group partitions without series: those past limits::METRICS_GROUP_PARTITIONS_MAX",
        bound.omitted() as u64,
    );
    r.register(
        "group_committed_offset",
        "The group's committed offset for the partition",
        committed,
    );
    r.register(
        "group_lag",
        "Records between the group's committed offset and the partition's high watermark (0 when the commit is ahead)",
        lag,
    );
}
