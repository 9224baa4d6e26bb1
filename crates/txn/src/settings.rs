//! The transaction coordinator's section of the broker's settings: the
//! `transaction_*` and `transactional_id_*` keys of the config file.
//!
//! The config file is one flat table; `headway_server::config` reads this section from
//! it by these field names, so each field's name is its key there (and its flag is
//! `--<name>`, its environment variable `HEADWAY_<NAME>`). `producer_id_expiration_ms`
//! is not here: the partitions' producer state reads it, so it is the broker's.

use crate::TxnConfig;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TxnSettings {
    /// Largest `transaction.timeout.ms` a transactional producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`); InitProducerId above it gets
    /// INVALID_TRANSACTION_TIMEOUT.
    pub transaction_max_timeout_ms: i32,
    /// A transactional id without an open transaction and without requests for this
    /// long is removed (Kafka's `transactional.id.expiration.ms`).
    pub transactional_id_expiration_ms: i64,
    /// How often open transactions are checked against their timeout (and idle ids
    /// against the expiration), ms (Kafka's
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    pub transaction_abort_timed_out_check_interval_ms: u64,
}

impl Default for TxnSettings {
    fn default() -> Self {
        TxnSettings {
            transaction_max_timeout_ms: 900_000,
            transactional_id_expiration_ms: 7 * 24 * 3600 * 1000,
            transaction_abort_timed_out_check_interval_ms: 10_000,
        }
    }
}

impl TxnSettings {
    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.transaction_max_timeout_ms <= 0
            || self.transactional_id_expiration_ms <= 0
            || self.transaction_abort_timed_out_check_interval_ms == 0
        {
            return Err(
                "transaction_max_timeout_ms, transactional_id_expiration_ms and \
                 transaction_abort_timed_out_check_interval_ms must be above 0"
                    .into(),
            );
        }
        Ok(())
    }

    /// The coordinator's configuration: these settings over its own defaults.
    pub fn txn_config(&self) -> TxnConfig {
        TxnConfig {
            transaction_max_timeout_ms: self.transaction_max_timeout_ms,
            transactional_id_expiration_ms: self.transactional_id_expiration_ms,
            ..TxnConfig::default()
        }
    }

    /// How often open transactions are checked against their timeout.
    pub fn abort_check_interval(&self) -> Duration {
        Duration::from_millis(self.transaction_abort_timed_out_check_interval_ms)
    }
}
