//! The security section of the broker's settings: the authorizer's keys of the config
//! file (`authorizer`, `super_users`, `allow_everyone_if_no_acl_found`) and SASL's
//! (`sasl_*`, `connections_max_reauth_ms`), `docs/security.md`.
//!
//! The config file is one flat table; `headway_server::config` reads this section from
//! it by these field names, so each field's name is its key there (and its flag is
//! `--<name>`, its environment variable `HEADWAY_<NAME>`). The server's authorizer and
//! SASL settings are built from it; [`AuthSettings::validate`] checks what serde cannot.
//! Whether a SASL listener has a mechanism to offer depends on the listeners too, so
//! `headway_server::config` checks that.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The SASL mechanisms the broker can serve.
pub const SASL_MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// The mechanisms SASL listeners offer unless configured: OAUTHBEARER needs a key set.
pub const SASL_MECHANISMS_DEFAULT: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AuthSettings {
    /// Kafka's `authorizer.class.name`: `acl` checks every request against the ACLs
    /// (`docs/security.md`); unset (the default) allows everything.
    pub authorizer: Option<String>,
    /// Kafka's `super.users`: principals allowed everything, e.g. `User:admin`.
    pub super_users: Vec<String>,
    /// Kafka's `allow.everyone.if.no.acl.found`: with the authorizer on, a resource
    /// without any ACL is open to everyone rather than closed.
    pub allow_everyone_if_no_acl_found: bool,
    /// SASL mechanisms SASL listeners offer (Kafka's `sasl.enabled.mechanisms`):
    /// `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`.
    pub sasl_enabled_mechanisms: Vec<String>,
    /// How long a failed SASL authentication waits before its answer, and twice that
    /// for each further recent failure from the same address up to
    /// `limits::SASL_FAILURE_DELAY_MAX_MS` (Kafka's
    /// `connection.failed.authentication.delay.ms`).
    pub sasl_failed_authentication_delay_ms: u64,
    /// The longest a SASL session lasts before the client must re-authenticate on its
    /// connection (KIP-368, Kafka's `connections.max.reauth.ms`); 0: sessions do not
    /// expire. An OAUTHBEARER session also ends when its token expires.
    pub connections_max_reauth_ms: u64,
    /// The JSON Web Key Set OAUTHBEARER tokens are checked against (Kafka's
    /// `sasl.oauthbearer.jwks.endpoint.url` with a `file:` URL); needed to enable
    /// OAUTHBEARER.
    pub sasl_oauthbearer_jwks_file: Option<PathBuf>,
    /// `sasl.oauthbearer.expected.issuer`: the `iss` tokens must carry, if set.
    pub sasl_oauthbearer_expected_issuer: Option<String>,
    /// `sasl.oauthbearer.expected.audience`: a token's `aud` must name one of these.
    pub sasl_oauthbearer_expected_audience: Vec<String>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            authorizer: None,
            super_users: Vec::new(),
            allow_everyone_if_no_acl_found: false,
            sasl_enabled_mechanisms: SASL_MECHANISMS_DEFAULT
                .iter()
                .map(|m| m.to_string())
                .collect(),
            sasl_failed_authentication_delay_ms: 100,
            connections_max_reauth_ms: 0,
            sasl_oauthbearer_jwks_file: None,
            sasl_oauthbearer_expected_issuer: None,
            sasl_oauthbearer_expected_audience: Vec::new(),
        }
    }
}

impl AuthSettings {
    /// Checks what serde cannot.
    pub fn validate(&self) -> Result<(), String> {
        match self.authorizer.as_deref() {
            None | Some("acl") => {}
            Some(other) => return Err(format!("authorizer must be acl or unset, not {other:?}")),
        }
        if let Some(bad) = self.super_users.iter().find(|u| !u.contains(':')) {
            return Err(format!(
                "super user {bad:?} is not Type:name, e.g. User:admin"
            ));
        }
        if let Some(unknown) = self
            .sasl_enabled_mechanisms
            .iter()
            .find(|m| !SASL_MECHANISMS.contains(&m.as_str()))
        {
            return Err(format!(
                "sasl_enabled_mechanisms: {unknown:?} is not one of {}",
                SASL_MECHANISMS.join(", ")
            ));
        }
        if self
            .sasl_enabled_mechanisms
            .iter()
            .any(|m| m == "OAUTHBEARER")
            && self.sasl_oauthbearer_jwks_file.is_none()
        {
            return Err("OAUTHBEARER needs sasl_oauthbearer_jwks_file".to_string());
        }
        Ok(())
    }
}
