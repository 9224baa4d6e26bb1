//! Authentication and authorization for headway, over plain values: the SASL
//! exchanges the broker serves ([`scram`] for SCRAM-SHA-256 and SCRAM-SHA-512,
//! [`plain`] for PLAIN, [`oauth`] for OAUTHBEARER), the salted credentials and token
//! keys they check, Kafka's ACL model and
//! authorization rule ([`acl`]), and the durable store of both ([`store`]).
//! [`AuthSettings`] is their section of the broker's settings.
//!
//! Nothing here does network I/O; the server's connection code drives the exchanges
//! and asks the authorizer, so every rule is unit-tested without a socket.

pub mod acl;
pub mod oauth;
pub mod plain;
pub mod sasl;
pub mod scram;
pub mod settings;
pub mod store;

pub use settings::AuthSettings;

/// Why authentication or a security change failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The client's message does not follow the mechanism (a bad request, not a wrong
    /// password).
    #[error("malformed authentication message: {0}")]
    Malformed(String),
    /// Wrong credentials, an unknown user, or a refused identity: Kafka's
    /// SASL_AUTHENTICATION_FAILED.
    #[error("{0}")]
    Failed(String),
    /// A credential that cannot be stored (iterations out of range, empty salt).
    #[error("invalid credential: {0}")]
    InvalidCredential(String),
    /// A credential to delete that does not exist: Kafka's RESOURCE_NOT_FOUND.
    #[error("{0}")]
    NotFound(String),
    /// An ACL that cannot be stored.
    #[error("invalid ACL: {0}")]
    InvalidAcl(String),
    #[error("security state: {0}")]
    Storage(String),
}

/// `n` random bytes from the operating system.
pub fn random_bytes(n: usize) -> Result<Vec<u8>, AuthError> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| AuthError::Storage(format!("no randomness: {e}")))?;
    Ok(bytes)
}
