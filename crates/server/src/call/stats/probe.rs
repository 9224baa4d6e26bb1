//! The server's probe: open connections and their request windows, the bytes the
//! request and outbound budgets hold against their limits, refused and timed-out
//! requests, and how often each budget was found short ([`crate::probe::BudgetProbe`]),
//! read from one [`ServerStats::snapshot`] at each scrape.

use super::ServerStats;
use headway_broker::probe::{counter, gauge};
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;

impl ServerStats {
    /// Registers the connection, window, request and budget families.
    pub fn register(&self, r: &mut Registry) {
        let s = self.snapshot();
        let open = s.connections.len() as u64;
        gauge(r, "connections", "Open client connections", open);
        counter(
            r,
            "connections_accepted",
            "Connections accepted",
            s.connections_accepted,
        );
        gauge(
            r,
            "connections_reader_paused",
            "Connections whose request window is full, so their socket is not read",
            s.connections.iter().filter(|c| c.reader_paused).count() as u64,
        );
        counter(
            r,
            "window_full_events",
            "Times a connection's request window was full (since start)",
            s.window_full_events,
        );
        gauge(
            r,
            "requests_in_flight",
            "Requests read whose responses are not written yet, all connections",
            s.connections.iter().map(|c| c.in_flight as u64).sum(),
        );
        gauge(
            r,
            "outbound_bytes_held",
            "Bytes of fetch responses read and not yet written, all connections",
            s.outbound_bytes_held as u64,
        );
        gauge(
            r,
            "outbound_bytes_max",
            "Limit of outbound_bytes_held (outbound_bytes_max)",
            s.outbound_bytes_max as u64,
        );
        gauge(
            r,
            "connection_outbound_bytes_held_max",
            "Outbound bytes held by the connection holding the most",
            s.connections
                .iter()
                .map(|c| c.outbound_bytes_held as u64)
                .max()
                .unwrap_or(0),
        );
        gauge(
            r,
            "request_bytes_held",
            "Bytes of requests being read or handled: frames and decoded values",
            s.request_bytes_held as u64,
        );
        gauge(
            r,
            "request_bytes_max",
            "Limit of request_bytes_held (request_bytes_in_flight_max)",
            s.request_bytes_max as u64,
        );
        counter(
            r,
            "requests_refused",
            "Connections closed for a request that could not be decoded safely",
            s.requests_refused,
        );
        counter(
            r,
            "request_body_timeouts",
            "Connections closed because a request body did not arrive in request_body_timeout_ms",
            s.request_body_timeouts,
        );
        counter(
            r,
            "tls_handshake_failures",
            "Connections to SSL listeners closed because their TLS handshake failed or did not finish in time",
            self.tls_handshake_failures.load(Ordering::Relaxed),
        );
        counter(
            r,
            "request_budget_waits",
            "Times a connection waited for the request budget",
            s.request_budget_waits,
        );
        self.register_budgets(r);
        counter(
            r,
            "unsynced_holds",
            "Times a producer waited because a partition had more than partition_unsynced_bytes_max unsynced",
            s.unsynced_holds,
        );
    }

    /// Every budget: how often it was found short and how long callers waited.
    fn register_budgets(&self, r: &mut Registry) {
        let budgets = [
            (
                &self.request_bytes.probe,
                "request_budget",
                "request budget (request_bytes_in_flight_max)",
                "frames over 8 KiB",
            ),
            (
                self.outbound.probe(),
                "outbound_budget",
                "broker-wide outbound budget (outbound_bytes_max)",
                "fetches",
            ),
            (
                self.outbound.connections_probe(),
                "connection_outbound_budget",
                "outbound budget of a connection (connection_outbound_bytes_max), any connection",
                "fetches",
            ),
            (
                &self.read_share_probe,
                "read_share",
                "share of the read threads of a connection, any connection",
                "fetch reads",
            ),
            (
                &self.connection_slots_probe,
                "connection_slots",
                "connection limit (connections_max)",
                "the listener",
            ),
        ];
        for (probe, name, budget, who) in budgets {
            probe.register(r, name, budget, who);
        }
    }
}
