//! The share groups' probe: how many share groups and share sessions there are and,
//! per share group (the first `limits::METRICS_SHARE_GROUPS_MAX` by id), its members,
//! the records in flight and acquired now, and the records redelivered, archived,
//! delivered, accepted, released and rejected since the broker started, summed over
//! the group's share-partitions ([`PartitionSummary`]).

use crate::{PartitionSummary, ShareCoordinator};
use headway_base::limits;
use headway_broker::probe::{as_gauge, gauge, labels, Bounded, Gauges};
use prometheus_client::registry::Registry;

/// The per-group families, in the order of the row [`register`] sets.
const FAMILIES: [(&str, &str); 9] = [
    ("share_group_members", "Members of the share group"),
    (
        "share_group_in_flight_records",
        "Records between the share-partition start and end offsets, over the group's partitions",
    ),
    (
        "share_group_acquired_records",
        "Records acquired by a member now, over the group's partitions",
    ),
    (
        "share_group_redelivered_records",
        "Deliveries beyond a record's first since the broker started",
    ),
    (
        "share_group_archived_records",
        "Records archived (rejected, or at the delivery count limit) since the broker started",
    ),
    (
        "share_group_delivered_records",
        "Records acquired by members (every delivery) since the broker started",
    ),
    (
        "share_group_acknowledged_records",
        "Records members acknowledged as accepted since the broker started",
    ),
    (
        "share_group_released_records",
        "Records members released since the broker started",
    ),
    (
        "share_group_rejected_records",
        "Records members rejected since the broker started",
    ),
];

/// Registers `headway_share_groups`, `headway_share_sessions` and the per-group
/// `headway_share_group_*` families.
pub fn register(r: &mut Registry, coordinator: &ShareCoordinator) {
    let values: Vec<Gauges> = FAMILIES.iter().map(|_| Gauges::default()).collect();
    let groups = coordinator.list();
    let mut bound = Bounded::new(limits::METRICS_SHARE_GROUPS_MAX);
    for g in groups.iter().take_while(|_| bound.admit()) {
        let labels = labels([("group", &g.group_id)]);
        let sum = |f: fn(&PartitionSummary) -> u64| as_gauge(g.partitions.iter().map(f).sum());
        let row = [
            g.member_count as i64,
            sum(|p| p.in_flight),
            sum(|p| p.acquired),
            sum(|p| p.redeliveries),
            sum(|p| p.archived),
            sum(|p| p.deliveries),
            sum(|p| p.accepted),
            sum(|p| p.released),
            sum(|p| p.rejected),
        ];
        for (family, value) in values.iter().zip(row) {
            family.get_or_create(&labels).set(value);
        }
    }
    gauge(
        r,
        "share_groups",
        "Share groups known to the share coordinator",
        groups.len() as u64,
    );
    gauge(
        r,
        "share_sessions",
        "Open share sessions",
        coordinator.sessions() as u64,
    );
    for ((name, help), family) in FAMILIES.into_iter().zip(values) {
        r.register(name, help, family);
    }
}
