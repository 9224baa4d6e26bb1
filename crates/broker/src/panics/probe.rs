//! The panics probe: `headway_panics_total{component}`, the panics caught where the
//! broker runs jobs ([`super::caught`]); each failed its own job only.

use super::{caught, Component};
use crate::probe::{labels, Counters};
use prometheus_client::registry::Registry;

/// Registers `headway_panics_total`, one series per component.
pub fn register(r: &mut Registry) {
    let family = Counters::default();
    for component in Component::ALL {
        family
            .get_or_create(&labels([("component", component.label())]))
            .inc_by(caught(component));
    }
    r.register(
        "panics",
        "Panics caught per component; each failed only its own job (a request, a read, a round)",
        family,
    );
}
