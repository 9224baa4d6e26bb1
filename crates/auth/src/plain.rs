//! SASL PLAIN (RFC 4616) as Kafka serves it: `authzid NUL authcid NUL password`, where
//! the authorization id is empty or the user name. The password is checked against the
//! user's stored SCRAM credential (the broker keeps no other form of it), so PLAIN and
//! SCRAM users are the same users. Send it only over TLS: the password crosses the wire.

use crate::scram::ScramCredential;
use crate::AuthError;

/// The message's user name and password; malformed messages are refused.
pub fn parse(message: &[u8]) -> Result<(&str, &str), AuthError> {
    let malformed = |what: &str| AuthError::Malformed(format!("PLAIN: {what}"));
    let text = std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))?;
    let mut parts = text.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed(
            "expected authzid, user and password separated by NUL",
        ));
    };
    if user.is_empty() || password.is_empty() {
        return Err(malformed("empty user name or password"));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(AuthError::Failed(
            "the authorization id must be the user name".into(),
        ));
    }
    Ok((user, password))
}

/// Checks `message` against the credentials `lookup` finds for its user (any of the
/// user's mechanisms); returns the user name.
pub fn authenticate(
    message: &[u8],
    lookup: impl FnOnce(&str) -> Vec<ScramCredential>,
) -> Result<&str, AuthError> {
    let (user, password) = parse(message)?;
    let credentials = lookup(user);
    // One check is enough (every stored mechanism has the same password); the first
    // stored one is used, or none for an unknown user, which fails like a wrong password.
    match credentials.first() {
        Some(credential) if credential.matches_password(password) => Ok(user),
        _ => Err(AuthError::Failed(
            "Authentication failed: Invalid username or password".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::Mechanism;

    #[test]
    fn the_stored_password_authenticates_and_anything_else_fails() {
        let stored = ScramCredential::from_password(Mechanism::Sha256, "s3cret", 4096).unwrap();
        let lookup = |user: &str| match user {
            "alice" => vec![stored.clone()],
            _ => vec![],
        };
        assert_eq!(authenticate(b"\0alice\0s3cret", lookup).unwrap(), "alice");
        assert_eq!(
            authenticate(b"alice\0alice\0s3cret", lookup).unwrap(),
            "alice"
        );
        for failed in [
            &b"\0alice\0wrong"[..],
            b"\0bob\0s3cret",
            b"bob\0alice\0s3cret",
        ] {
            assert!(matches!(
                authenticate(failed, lookup),
                Err(AuthError::Failed(_))
            ));
        }
        for malformed in [
            &b"alice"[..],
            b"\0alice",
            b"\0\0pw",
            b"\0a\0b\0c",
            b"\0a\0\xff",
        ] {
            assert!(matches!(
                authenticate(malformed, lookup),
                Err(AuthError::Malformed(_))
            ));
        }
    }
}
