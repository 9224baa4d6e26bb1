//! The broker's SASL settings and counters (`docs/security.md`), shared by every
//! connection of its SASL listeners: the enabled mechanisms, the OAUTHBEARER key set,
//! the failed-authentication delay and the memory of recent failures per address it
//! grows with, and the counts `/metrics` shows. A connection's exchange is served by
//! `crate::sasl`; this module keeps no clock of its own (the time is passed in).

use crate::log_limit::LineLimiter;
use headway_auth::oauth::{OAuthSettings, OAuthValidator};
use headway_auth::sasl::{Exchange, SaslMechanism};
use headway_auth::AuthSettings;
use headway_base::limits;
use headway_broker::probe::{counter, labels, Counters};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Failures of one address further apart than this start its delay over.
const FAILURE_MEMORY_MS: i64 = 60_000;

/// The failure counter of connections that failed before choosing a mechanism.
const NO_MECHANISM: usize = SaslMechanism::ALL.len();

/// The broker's SASL settings and counters.
pub struct Sasl {
    enabled: Vec<SaslMechanism>,
    failure_delay_ms: u64,
    /// Checks OAUTHBEARER tokens (`sasl_oauthbearer_jwks_file`).
    oauth: Option<Arc<OAuthValidator>>,
    /// Successes by mechanism (index of [`SaslMechanism::ALL`]).
    successes: [AtomicU64; 4],
    /// Failures by mechanism; the last is for connections that failed before choosing
    /// one (a request before authentication, a timeout, an unsupported mechanism).
    failures: [AtomicU64; 5],
    failure_lines: LineLimiter,
    recent: Mutex<RecentFailures>,
    /// `connections_max_reauth_ms`; 0: sessions do not expire.
    reauth_ms: u64,
    /// Re-authentications that succeeded.
    reauthentications: AtomicU64,
    /// Connections closed because their session ended before they re-authenticated.
    expired_closed: AtomicU64,
}

impl Sasl {
    /// The SASL part of `config`; fails when the OAUTHBEARER key set cannot be read.
    pub fn new(config: &AuthSettings) -> Result<Sasl, String> {
        let oauth = match &config.sasl_oauthbearer_jwks_file {
            None => None,
            Some(path) => {
                let settings = OAuthSettings {
                    expected_issuer: config.sasl_oauthbearer_expected_issuer.clone(),
                    expected_audience: config.sasl_oauthbearer_expected_audience.clone(),
                    ..OAuthSettings::default()
                };
                let validator = OAuthValidator::from_jwks_file(path, settings)
                    .map_err(|e| format!("sasl_oauthbearer_jwks_file: {e}"))?;
                Some(Arc::new(validator))
            }
        };
        Ok(Sasl {
            oauth,
            enabled: config
                .sasl_enabled_mechanisms
                .iter()
                .filter_map(|name| SaslMechanism::from_name(name))
                .collect(),
            failure_delay_ms: config.sasl_failed_authentication_delay_ms,
            successes: Default::default(),
            failures: Default::default(),
            failure_lines: LineLimiter::new(limits::FAILURE_LOG_LINES_PER_SECOND),
            recent: Mutex::new(RecentFailures::default()),
            reauth_ms: config.connections_max_reauth_ms,
            reauthentications: AtomicU64::new(0),
            expired_closed: AtomicU64::new(0),
        })
    }

    /// A new exchange over the enabled mechanisms.
    pub fn exchange(&self) -> Exchange {
        Exchange::new(self.enabled.clone()).with_oauth(self.oauth.clone())
    }

    /// Counts an authentication that succeeded with `mechanism`.
    pub fn succeeded(&self, mechanism: SaslMechanism) {
        self.successes[mechanism.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a re-authentication that succeeded (also counted by [`Sasl::succeeded`]).
    pub fn reauthenticated(&self) {
        self.reauthentications.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection closed because its session ended; `Some(lines left out)`
    /// when it may be logged (`limits::FAILURE_LOG_LINES_PER_SECOND`).
    pub fn expired_session_closed(&self) -> Option<u64> {
        self.expired_closed.fetch_add(1, Ordering::Relaxed);
        self.failure_lines.admit_now()
    }

    /// Authentications that succeeded, by mechanism.
    pub fn successes(&self, mechanism: SaslMechanism) -> u64 {
        self.successes[mechanism.index()].load(Ordering::Relaxed)
    }

    /// Registers `headway_sasl_authentication_{successes,failures}_total` by mechanism.
    pub fn register(&self, r: &mut Registry) {
        let (successes, failures) = (Counters::default(), Counters::default());
        let label = |name: &str| labels([("mechanism", name)]);
        for mechanism in SaslMechanism::ALL {
            let i = mechanism.index();
            successes
                .get_or_create(&label(mechanism.name()))
                .inc_by(self.successes[i].load(Ordering::Relaxed));
            failures
                .get_or_create(&label(mechanism.name()))
                .inc_by(self.failures[i].load(Ordering::Relaxed));
        }
        failures
            .get_or_create(&label("none"))
            .inc_by(self.failures[NO_MECHANISM].load(Ordering::Relaxed));
        r.register(
            "sasl_authentication_successes",
            "SASL authentications that succeeded, by mechanism",
            successes,
        );
        r.register(
            "sasl_authentication_failures",
            "SASL authentications that failed or timed out, by mechanism (none: before one was chosen)",
            failures,
        );
        counter(
            r,
            "sasl_reauthentications",
            "SASL re-authentications that succeeded (also counted in the successes)",
            self.reauthentications.load(Ordering::Relaxed),
        );
        counter(
            r,
            "sasl_expired_sessions_closed",
            "Connections closed because their SASL session ended before they re-authenticated",
            self.expired_closed.load(Ordering::Relaxed),
        );
    }

    /// How long a session that starts now lasts, in ms (0: no end), for a credential
    /// that expires at `expires_at_ms` (ms since the epoch), if it does: the least of
    /// `connections_max_reauth_ms` and the credential's remaining life, as Kafka
    /// answers it; without the setting, sessions do not end.
    pub fn session_lifetime_ms(&self, expires_at_ms: Option<i64>, now_ms: i64) -> i64 {
        if self.reauth_ms == 0 {
            return 0;
        }
        let setting = i64::try_from(self.reauth_ms).unwrap_or(i64::MAX);
        match expires_at_ms {
            Some(at) => setting.min(at.saturating_sub(now_ms)).max(1),
            None => setting,
        }
    }

    /// Counts and logs a failure at `now_ms`; returns how long to wait before answering
    /// it.
    pub fn failed(
        &self,
        peer: SocketAddr,
        mechanism: Option<SaslMechanism>,
        user: Option<&str>,
        reason: &str,
        now_ms: i64,
    ) -> Duration {
        self.failures[mechanism.map_or(NO_MECHANISM, SaslMechanism::index)]
            .fetch_add(1, Ordering::Relaxed);
        if let Some(lines_left_out) = self.failure_lines.admit_now() {
            let principal = user.map(|u| format!("User:{u}"));
            tracing::warn!(
                %peer,
                principal = principal.as_deref().unwrap_or("unknown"),
                mechanism = mechanism.map_or("none", SaslMechanism::name),
                reason,
                lines_left_out,
                "closing connection: SASL authentication failed"
            );
        }
        let failures = self
            .recent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .failed(peer.ip(), now_ms);
        Duration::from_millis(failure_delay(self.failure_delay_ms, failures))
    }
}

/// The delay before answering a failure that is its address's `failures`th recent one:
/// `base_ms` doubled for each earlier one, at most `limits::SASL_FAILURE_DELAY_MAX_MS`.
fn failure_delay(base_ms: u64, failures: u32) -> u64 {
    let doublings = failures.saturating_sub(1).min(16);
    base_ms
        .saturating_mul(1 << doublings)
        .min(limits::SASL_FAILURE_DELAY_MAX_MS)
}

/// Recent failures per client address, bounded by `limits::SASL_FAILURE_ADDRESSES_MAX`
/// (when full, the address whose last failure is oldest is forgotten).
#[derive(Default)]
struct RecentFailures {
    /// Address: failures in a row no more than `FAILURE_MEMORY_MS` apart, the last one.
    by_address: HashMap<IpAddr, (u32, i64)>,
}

impl RecentFailures {
    /// Records a failure of `address` at `now_ms`; returns its count of recent ones.
    fn failed(&mut self, address: IpAddr, now_ms: i64) -> u32 {
        if !self.by_address.contains_key(&address)
            && self.by_address.len() >= limits::SASL_FAILURE_ADDRESSES_MAX
        {
            let oldest = self
                .by_address
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(a, _)| *a);
            if let Some(oldest) = oldest {
                self.by_address.remove(&oldest);
            }
        }
        let (count, last) = self.by_address.entry(address).or_insert((0, now_ms));
        if now_ms - *last > FAILURE_MEMORY_MS {
            *count = 0;
        }
        *count = count.saturating_add(1);
        *last = now_ms;
        *count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_of_one_address_wait_longer_each_time_up_to_the_bound() {
        let mut recent = RecentFailures::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let counts: Vec<u32> = (0..3).map(|i| recent.failed(a, 1_000 + i)).collect();
        assert_eq!(counts, [1, 2, 3]);
        assert_eq!(recent.failed(b, 1_010), 1);
        // Long after, the count starts over.
        assert_eq!(recent.failed(a, 1_010 + FAILURE_MEMORY_MS + 1), 1);
        assert_eq!(failure_delay(100, 1), 100);
        assert_eq!(failure_delay(100, 3), 400);
        assert_eq!(failure_delay(100, 1_000), limits::SASL_FAILURE_DELAY_MAX_MS);
        assert_eq!(failure_delay(0, 5), 0);
    }

    /// Goal: a session lasts `connections_max_reauth_ms`, no longer than its token, and
    /// forever without the setting, as Kafka answers `session_lifetime_ms`.
    #[test]
    fn a_session_lasts_the_setting_and_no_longer_than_its_token() {
        let now = 1_700_000_000_000;
        let mut config = AuthSettings::default();
        let off = Sasl::new(&config).unwrap();
        assert_eq!(off.session_lifetime_ms(None, now), 0);
        assert_eq!(off.session_lifetime_ms(Some(now + 1_000), now), 0);
        config.connections_max_reauth_ms = 60_000;
        let on = Sasl::new(&config).unwrap();
        assert_eq!(on.session_lifetime_ms(None, now), 60_000);
        assert_eq!(on.session_lifetime_ms(Some(now + 10_000), now), 10_000);
        assert_eq!(on.session_lifetime_ms(Some(now + 600_000), now), 60_000);
        // A token at its end (valid within the clock skew) still gets a session.
        assert_eq!(on.session_lifetime_ms(Some(now - 5_000), now), 1);
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let mut recent = RecentFailures::default();
        for i in 0..limits::SASL_FAILURE_ADDRESSES_MAX as u32 + 10 {
            recent.failed(IpAddr::from(i.to_be_bytes()), i64::from(i));
        }
        assert_eq!(recent.by_address.len(), limits::SASL_FAILURE_ADDRESSES_MAX);
        // The oldest were forgotten.
        assert!(!recent
            .by_address
            .contains_key(&IpAddr::from(0u32.to_be_bytes())));
    }
}
