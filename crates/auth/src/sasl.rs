//! One connection's SASL exchange as Kafka runs it, over plain values: the mechanism
//! the client picks in SaslHandshake, then the tokens of SaslAuthenticate until the
//! mechanism succeeds or fails. The server's connection code reads and writes the
//! frames; this decides what to answer.

use crate::oauth::{ClientFirst, OAuthValidator};
use crate::scram::{Mechanism, ScramCredential, ScramExchange, ScramServer};
use crate::store::SecurityStore;
use crate::{oauth, plain, AuthError};
use headway_base::now_ms;
use std::sync::Arc;

/// A SASL mechanism the broker serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    Scram(Mechanism),
    /// RFC 7628 bearer tokens, checked by an [`OAuthValidator`].
    OAuthBearer,
}

impl SaslMechanism {
    pub const ALL: [SaslMechanism; 4] = [
        SaslMechanism::Plain,
        SaslMechanism::Scram(Mechanism::Sha256),
        SaslMechanism::Scram(Mechanism::Sha512),
        SaslMechanism::OAuthBearer,
    ];

    /// The name clients send in SaslHandshake.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        SaslMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Position in [`SaslMechanism::ALL`] (for per-mechanism counters).
    pub fn index(self) -> usize {
        match self {
            SaslMechanism::Plain => 0,
            SaslMechanism::Scram(Mechanism::Sha256) => 1,
            SaslMechanism::Scram(Mechanism::Sha512) => 2,
            SaslMechanism::OAuthBearer => 3,
        }
    }
}

/// Where an exchange stands.
#[derive(Debug)]
enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    /// The mechanism is chosen; waiting for the client's first token.
    First(SaslMechanism),
    /// SCRAM: the server-first message was sent; waiting for the client-final one.
    ScramFinal(Box<ScramExchange>),
    /// OAUTHBEARER: the token was refused and the error sent as a challenge; the
    /// client's acknowledgement (0x01) ends the exchange with this reason (RFC 7628
    /// section 3.2.2).
    OAuthRefused(AuthError),
    /// Authenticated or failed: nothing more is accepted.
    Over,
}

/// What a step of the exchange answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes and wait for the next token.
    Continue(Vec<u8>),
    /// Authenticated as `user`; send `reply` (the SCRAM server-final message, or
    /// nothing for PLAIN). `expires_at_ms`: when the credential expires (an
    /// OAUTHBEARER token's `exp`, milliseconds since the epoch), if it does.
    Done {
        user: String,
        reply: Vec<u8>,
        expires_at_ms: Option<i64>,
    },
}

/// A request that does not fit where the exchange stands (Kafka's
/// ILLEGAL_SASL_STATE).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct IllegalState(pub String);

/// One connection's exchange, from SaslHandshake to the end.
#[derive(Debug)]
pub struct Exchange {
    enabled: Vec<SaslMechanism>,
    state: State,
    /// Checks OAUTHBEARER tokens; without it OAUTHBEARER fails.
    oauth: Option<Arc<OAuthValidator>>,
}

impl Exchange {
    /// An exchange offering `enabled` (in the order SaslHandshake lists them).
    pub fn new(enabled: Vec<SaslMechanism>) -> Exchange {
        Exchange {
            enabled,
            state: State::Handshake,
            oauth: None,
        }
    }

    /// Checks OAUTHBEARER tokens with `validator`.
    pub fn with_oauth(mut self, validator: Option<Arc<OAuthValidator>>) -> Exchange {
        self.oauth = validator;
        self
    }

    pub fn enabled(&self) -> &[SaslMechanism] {
        &self.enabled
    }

    /// The mechanism chosen by the handshake, if any.
    pub fn mechanism(&self) -> Option<SaslMechanism> {
        match &self.state {
            State::First(m) => Some(*m),
            State::ScramFinal(e) => Some(SaslMechanism::Scram(e.mechanism())),
            State::OAuthRefused(_) => Some(SaslMechanism::OAuthBearer),
            State::Handshake | State::Over => None,
        }
    }

    /// SaslHandshake: `Ok` when `name` is enabled; `Err(None)` when it is not (Kafka's
    /// UNSUPPORTED_SASL_MECHANISM), `Err(Some(_))` when a handshake is not expected now.
    pub fn handshake(&mut self, name: &str) -> Result<SaslMechanism, Option<IllegalState>> {
        if !matches!(self.state, State::Handshake) {
            self.state = State::Over;
            return Err(Some(IllegalState(
                "SaslHandshake request received in the middle of an authentication".into(),
            )));
        }
        match SaslMechanism::from_name(name).filter(|m| self.enabled.contains(m)) {
            Some(mechanism) => {
                self.state = State::First(mechanism);
                Ok(mechanism)
            }
            None => {
                self.state = State::Over;
                Err(None)
            }
        }
    }

    /// A token of SaslAuthenticate. `server_nonce` is used by SCRAM's first step (fresh
    /// and random per exchange); credentials come from `store`. After an error the
    /// exchange accepts nothing more.
    pub fn token(
        &mut self,
        token: &[u8],
        server_nonce: &str,
        store: &SecurityStore,
    ) -> Result<Step, TokenError> {
        match std::mem::replace(&mut self.state, State::Over) {
            State::First(SaslMechanism::Plain) => {
                let user = plain::authenticate(token, |user| store.credentials(user))?;
                Ok(Step::Done {
                    user: user.to_string(),
                    reply: Vec::new(),
                    expires_at_ms: None,
                })
            }
            State::First(SaslMechanism::Scram(mechanism)) => {
                let (exchange, server_first) =
                    ScramServer::first(mechanism, token, server_nonce, |user| {
                        store.credential(user, mechanism)
                    })?;
                self.state = State::ScramFinal(Box::new(exchange));
                Ok(Step::Continue(server_first))
            }
            State::First(SaslMechanism::OAuthBearer) => {
                let message = ClientFirst::parse(token)?;
                let validator = self.oauth.as_ref().ok_or_else(|| {
                    AuthError::Failed("OAUTHBEARER has no key set configured".into())
                })?;
                match validator.validate(&message.token, now_ms()) {
                    Ok(valid) => Ok(Step::Done {
                        user: valid.principal.trim_start_matches("User:").to_string(),
                        reply: Vec::new(),
                        expires_at_ms: Some(valid.expires_at_ms),
                    }),
                    Err(refused) => {
                        self.state = State::OAuthRefused(refused);
                        Ok(Step::Continue(oauth::error_challenge()))
                    }
                }
            }
            State::OAuthRefused(refused) => Err(TokenError::Auth(refused)),
            State::ScramFinal(exchange) => {
                let done = exchange.finish(token)?;
                Ok(Step::Done {
                    user: done.user,
                    reply: done.server_final,
                    expires_at_ms: None,
                })
            }
            State::Handshake | State::Over => Err(TokenError::IllegalState(IllegalState(
                "SaslAuthenticate request received before a SaslHandshake or after the \
                 authentication ended"
                    .into(),
            ))),
        }
    }

    /// The user named so far (the SCRAM client-first message), for logging a failure.
    pub fn user(&self) -> Option<&str> {
        match &self.state {
            State::ScramFinal(e) => Some(e.user()),
            _ => None,
        }
    }
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error(transparent)]
    IllegalState(IllegalState),
}

/// A fresh SCRAM server nonce: 24 random bytes in hex. Letters and digits only, as
/// Kafka's are: librdkafka 2.0 fails the exchange when the nonce holds `/` or `+`.
pub fn server_nonce() -> Result<String, AuthError> {
    Ok(crate::random_bytes(24)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The credential a password gives `mechanism`, at Kafka's default iteration count.
pub fn credential(mechanism: Mechanism, password: &str) -> Result<ScramCredential, AuthError> {
    ScramCredential::from_password(mechanism, password, crate::scram::ITERATIONS_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreLimits;

    fn store() -> (tempfile::TempDir, SecurityStore) {
        let dir = tempfile::tempdir().unwrap();
        let limits = StoreLimits {
            users_max: 10,
            acls_max: 10,
        };
        let store = SecurityStore::open(dir.path(), limits).unwrap();
        store
            .upsert_credential("alice", credential(Mechanism::Sha512, "pw").unwrap())
            .unwrap();
        (dir, store)
    }

    #[test]
    fn plain_authenticates_in_one_token_and_nothing_is_accepted_after() {
        let (_dir, store) = store();
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec());
        assert_eq!(exchange.handshake("PLAIN"), Ok(SaslMechanism::Plain));
        assert_eq!(
            exchange.token(b"\0alice\0pw", "n", &store).unwrap(),
            Step::Done {
                user: "alice".into(),
                reply: vec![],
                expires_at_ms: None,
            }
        );
        assert!(matches!(
            exchange.token(b"\0alice\0pw", "n", &store),
            Err(TokenError::IllegalState(_))
        ));
    }

    #[test]
    fn a_wrong_password_fails_and_a_disabled_mechanism_is_refused() {
        let (_dir, store) = store();
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec());
        exchange.handshake("PLAIN").unwrap();
        assert!(matches!(
            exchange.token(b"\0alice\0nope", "n", &store),
            Err(TokenError::Auth(AuthError::Failed(_)))
        ));
        let mut exchange = Exchange::new(vec![SaslMechanism::Scram(Mechanism::Sha512)]);
        assert_eq!(exchange.handshake("PLAIN"), Err(None));
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec());
        assert!(matches!(
            exchange.token(b"x", "n", &store),
            Err(TokenError::IllegalState(_))
        ));
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec());
        exchange.handshake("SCRAM-SHA-256").unwrap();
        assert!(matches!(exchange.handshake("PLAIN"), Err(Some(_))));
    }

    #[test]
    fn scram_runs_two_tokens_and_names_the_user() {
        let (_dir, store) = store();
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec());
        exchange.handshake("SCRAM-SHA-512").unwrap();
        let Step::Continue(first) = exchange.token(b"n,,n=alice,r=abc", "xyz", &store).unwrap()
        else {
            panic!("SCRAM continues after the client-first message");
        };
        assert!(String::from_utf8(first).unwrap().starts_with("r=abcxyz,s="));
        assert_eq!(exchange.user(), Some("alice"));
        assert_eq!(
            exchange.mechanism(),
            Some(SaslMechanism::Scram(Mechanism::Sha512))
        );
        // A made-up proof fails like a wrong password.
        assert!(matches!(
            exchange.token(b"c=biws,r=abcxyz,p=AAAA", "xyz", &store),
            Err(TokenError::Auth(_))
        ));
    }

    #[test]
    fn oauthbearer_accepts_a_valid_token_and_refuses_others_after_the_error_challenge() {
        use crate::oauth::tests::{signer, token, validator};
        use crate::oauth::OAuthSettings;
        let (_dir, store) = store();
        let key = signer("k");
        let oauth = Some(Arc::new(validator(&[&key], OAuthSettings::default())));
        let now_s = now_ms() / 1000;
        let message = |t: &str| format!("n,,\x01auth=Bearer {t}\x01\x01").into_bytes();

        let good = token(
            &key,
            Some("k"),
            serde_json::json!({"sub": "carol", "exp": now_s + 60}),
        );
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec()).with_oauth(oauth.clone());
        assert_eq!(
            exchange.handshake("OAUTHBEARER"),
            Ok(SaslMechanism::OAuthBearer)
        );
        assert_eq!(
            exchange.token(&message(&good), "n", &store).unwrap(),
            Step::Done {
                user: "carol".into(),
                reply: vec![],
                expires_at_ms: Some((now_s + 60) * 1000),
            }
        );

        let expired = token(
            &key,
            Some("k"),
            serde_json::json!({"sub": "carol", "exp": now_s - 3600}),
        );
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec()).with_oauth(oauth);
        exchange.handshake("OAUTHBEARER").unwrap();
        assert_eq!(
            exchange.token(&message(&expired), "n", &store).unwrap(),
            Step::Continue(crate::oauth::error_challenge())
        );
        assert!(matches!(
            exchange.token(b"\x01", "n", &store),
            Err(TokenError::Auth(AuthError::Failed(_)))
        ));

        // Without a key set nothing is accepted.
        let mut exchange = Exchange::new(SaslMechanism::ALL.to_vec());
        exchange.handshake("OAUTHBEARER").unwrap();
        assert!(exchange.token(&message(&good), "n", &store).is_err());
    }
}
