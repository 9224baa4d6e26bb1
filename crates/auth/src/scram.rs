//! SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677), the server's side, as Kafka's
//! `SCRAM-SHA-256` and `SCRAM-SHA-512` SASL mechanisms run it.
//!
//! The broker keeps only a [`ScramCredential`] per user and mechanism: the salt, the
//! iteration count, `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`. Neither the password nor the salted
//! password is stored, so a stolen credential file does not let anyone authenticate.
//!
//! The client's side ([`ScramClient`]) serves the `headway` commands that talk to a
//! broker over SASL.
//!
//! An exchange is two steps over plain values ([`ScramServer::first`], then
//! [`ScramExchange::finish`]); the server's nonce is passed in, so tests are
//! deterministic. An unknown user gets a server-first message like any other, built from
//! a made-up credential, and fails only at the proof: the exchange does not tell which
//! user names exist.

use crate::AuthError;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Kafka's bounds on the iteration count of a SCRAM credential.
pub const ITERATIONS_MIN: u32 = 4096;
pub const ITERATIONS_MAX: u32 = 16384;

/// The two SCRAM mechanisms Kafka serves. The wire codes are those of
/// DescribeUserScramCredentials and AlterUserScramCredentials.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Mechanism {
    #[serde(rename = "SCRAM-SHA-256")]
    Sha256,
    #[serde(rename = "SCRAM-SHA-512")]
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The code of the admin APIs (1: SHA-256, 2: SHA-512).
    pub fn code(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.code() == code)
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn with<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC takes a key of any length");
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Mechanism::Sha256 => with::<Hmac<Sha256>>(key, data),
            Mechanism::Sha512 => with::<Hmac<Sha512>>(key, data),
        }
    }

    /// The length of this mechanism's hash, and so of a salted password.
    pub fn hash_bytes(self) -> usize {
        match self {
            Mechanism::Sha256 => 32,
            Mechanism::Sha512 => 64,
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with this mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            Mechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// What the broker stores for one user and mechanism.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScramCredential {
    pub mechanism: Mechanism,
    #[serde(with = "base64_bytes")]
    pub salt: Vec<u8>,
    pub iterations: u32,
    #[serde(with = "base64_bytes")]
    pub stored_key: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub server_key: Vec<u8>,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// The credential for `password`, with a fresh random salt.
    pub fn from_password(
        mechanism: Mechanism,
        password: &str,
        iterations: u32,
    ) -> Result<ScramCredential, AuthError> {
        let salt = crate::random_bytes(32)?;
        let salted = mechanism.salted_password(password.as_bytes(), &salt, iterations);
        ScramCredential::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// The credential from a salted password, as AlterUserScramCredentials carries it
    /// (the client salts the password; it never crosses the wire).
    pub fn from_salted_password(
        mechanism: Mechanism,
        salt: Vec<u8>,
        salted_password: &[u8],
        iterations: u32,
    ) -> Result<ScramCredential, AuthError> {
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) {
            return Err(AuthError::InvalidCredential(format!(
                "iterations must be between {ITERATIONS_MIN} and {ITERATIONS_MAX}, not {iterations}"
            )));
        }
        if salt.is_empty() || salted_password.is_empty() {
            return Err(AuthError::InvalidCredential(
                "salt and salted password must not be empty".into(),
            ));
        }
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Ok(ScramCredential {
            mechanism,
            salt,
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        })
    }

    /// Whether `password` is this credential's: PLAIN checks a password this way.
    pub fn matches_password(&self, password: &str) -> bool {
        let salted =
            self.mechanism
                .salted_password(password.as_bytes(), &self.salt, self.iterations);
        let client_key = self.mechanism.hmac(&salted, b"Client Key");
        bool::from(self.mechanism.hash(&client_key).ct_eq(&self.stored_key))
    }

    /// A credential nobody has the password of, for an unknown user's exchange.
    fn made_up(mechanism: Mechanism) -> Result<ScramCredential, AuthError> {
        let secret = crate::random_bytes(32)?;
        let salt = crate::random_bytes(32)?;
        ScramCredential::from_salted_password(mechanism, salt, &secret, ITERATIONS_MIN)
    }
}

/// The server's side of one SCRAM exchange.
pub struct ScramServer;

/// An exchange after the server-first message: waits for the client's final message.
#[derive(Debug)]
pub struct ScramExchange {
    mechanism: Mechanism,
    user: String,
    credential: ScramCredential,
    /// The user exists (else the credential is made up and the proof must fail).
    known: bool,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    gs2_header: String,
}

/// The outcome of a successful exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticated {
    pub user: String,
    /// The server-final message (`v=...`), sent to the client in the last
    /// SaslAuthenticate response.
    pub server_final: Vec<u8>,
}

fn malformed(what: &str) -> AuthError {
    AuthError::Malformed(format!("SCRAM: {what}"))
}

/// A SCRAM `saslname`: `=2C` is `,` and `=3D` is `=`; any other `=` is malformed.
fn decode_name(name: &str) -> Result<String, AuthError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(malformed("a user name has a bad '=' escape")),
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of attribute `key` (`key=value`) in `part`.
fn attribute(part: Option<&str>, key: char) -> Result<&str, AuthError> {
    part.and_then(|p| p.strip_prefix(key))
        .and_then(|p| p.strip_prefix('='))
        .ok_or_else(|| malformed(&format!("expected the '{key}=' attribute")))
}

impl ScramServer {
    /// Reads the client-first message and answers the server-first one.
    /// `server_nonce` must be fresh and random per exchange (printable, no comma);
    /// `lookup` finds the user's credential for `mechanism`.
    pub fn first(
        mechanism: Mechanism,
        client_first: &[u8],
        server_nonce: &str,
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<(ScramExchange, Vec<u8>), AuthError> {
        let message = std::str::from_utf8(client_first)
            .map_err(|_| malformed("the client-first message is not UTF-8"))?;
        // gs2-header: channel binding flag, authzid, then the bare message.
        let mut parts = message.splitn(3, ',');
        let binding = parts.next().unwrap_or_default();
        if binding != "n" && binding != "y" {
            // "p=..." asks for channel binding, which Kafka does not offer.
            return Err(malformed("channel binding is not supported"));
        }
        let authzid = parts.next().ok_or_else(|| malformed("no gs2 header"))?;
        let bare = parts
            .next()
            .ok_or_else(|| malformed("no client-first-bare"))?;
        let gs2_header = format!("{binding},{authzid},");
        let mut attributes = bare.split(',');
        let user = decode_name(attribute(attributes.next(), 'n')?)?;
        let client_nonce = attribute(attributes.next(), 'r')?;
        // Extensions (Kafka's `tokenauth=true` for delegation tokens) are not served.
        if attributes.any(|a| a.starts_with("tokenauth=")) {
            return Err(AuthError::Failed(
                "delegation tokens are not supported".into(),
            ));
        }
        if user.is_empty() || client_nonce.is_empty() {
            return Err(malformed("empty user name or nonce"));
        }
        if !authzid.is_empty() {
            let authzid = decode_name(
                authzid
                    .strip_prefix("a=")
                    .ok_or_else(|| malformed("bad authzid"))?,
            )?;
            if authzid != user {
                return Err(AuthError::Failed(
                    "the authorization id must be the user name".into(),
                ));
            }
        }
        let (credential, known) = match lookup(&user) {
            Some(credential) if credential.mechanism == mechanism => (credential, true),
            _ => (ScramCredential::made_up(mechanism)?, false),
        };
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        let exchange = ScramExchange {
            mechanism,
            user,
            credential,
            known,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
            gs2_header,
        };
        Ok((exchange, server_first.into_bytes()))
    }
}

impl ScramExchange {
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The user the client named.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Reads the client-final message and checks its proof. Every failure of the proof
    /// (a wrong password, an unknown user) is the same [`AuthError::Failed`].
    pub fn finish(self, client_final: &[u8]) -> Result<Authenticated, AuthError> {
        let message = std::str::from_utf8(client_final)
            .map_err(|_| malformed("the client-final message is not UTF-8"))?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or_else(|| malformed("no proof"))?;
        let mut attributes = without_proof.split(',');
        let binding = attribute(attributes.next(), 'c')?;
        let nonce = attribute(attributes.next(), 'r')?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(malformed(
                "the channel binding does not repeat the gs2 header",
            ));
        }
        // Kafka accepts any final nonce that ends with the server-first one:
        // librdkafka 2.0 sends its own nonce before it (the proof covers what was sent).
        if !nonce.ends_with(&self.nonce) {
            return Err(AuthError::Failed("the nonce does not match".into()));
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| malformed("the proof is not base64"))?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let m = self.mechanism;
        let signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != signature.len() {
            return Err(self.failed());
        }
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let matches = bool::from(m.hash(&client_key).ct_eq(&self.credential.stored_key));
        if !matches || !self.known {
            return Err(self.failed());
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(Authenticated {
            user: self.user,
            server_final: format!("v={}", BASE64.encode(server_signature)).into_bytes(),
        })
    }

    fn failed(&self) -> AuthError {
        AuthError::Failed(format!(
            "Authentication failed during authentication due to invalid credentials with SASL mechanism {}",
            self.mechanism.name()
        ))
    }
}

/// The client's side of one SCRAM exchange, as the `headway` commands run it against a
/// broker: [`ScramClient::first`], then [`ScramClient::last`] with the server-first
/// message, then [`ServerCheck::verify`] with the server-final one. The client nonce
/// is passed in (fresh and random per exchange, printable, no comma).
pub struct ScramClient {
    mechanism: Mechanism,
    password: String,
    client_nonce: String,
    first_bare: String,
}

/// What the server-final message must be: proof that the server knows the credential.
#[derive(Debug)]
pub struct ServerCheck {
    expected: Vec<u8>,
}

/// A user name as a SCRAM `saslname`: `,` is `=2C` and `=` is `=3D`.
fn encode_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

impl ScramClient {
    /// The exchange and its client-first message.
    pub fn first(
        mechanism: Mechanism,
        user: &str,
        password: &str,
        client_nonce: &str,
    ) -> (ScramClient, Vec<u8>) {
        let first_bare = format!("n={},r={client_nonce}", encode_name(user));
        let message = format!("n,,{first_bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            password: password.to_string(),
            client_nonce: client_nonce.to_string(),
            first_bare,
        };
        (client, message)
    }

    /// Reads the server-first message and answers the client-final one, with what the
    /// server's final message must be.
    pub fn last(self, server_first: &[u8]) -> Result<(Vec<u8>, ServerCheck), AuthError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| malformed("the server-first message is not UTF-8"))?;
        let mut attributes = text.split(',');
        let nonce = attribute(attributes.next(), 'r')?;
        let salt = BASE64
            .decode(attribute(attributes.next(), 's')?)
            .map_err(|_| malformed("the salt is not base64"))?;
        let iterations: u32 = attribute(attributes.next(), 'i')?
            .parse()
            .map_err(|_| malformed("the iteration count is not a number"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(AuthError::Failed(
                "the server's nonce does not extend the client's".into(),
            ));
        }
        if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&iterations) || salt.is_empty() {
            return Err(AuthError::Failed(format!(
                "the server asks for {iterations} iterations, outside {ITERATIONS_MIN} to {ITERATIONS_MAX}"
            )));
        }
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        // "biws" is base64 of the gs2 header "n,,": no channel binding, no authzid.
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{text},{without_proof}", self.first_bare);
        let signature = m.hmac(&m.hash(&client_key), auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = m.hmac(&salted, b"Server Key");
        let expected = format!("v={}", BASE64.encode(m.hmac(&server_key, auth.as_bytes())));
        let message = format!("{without_proof},p={}", BASE64.encode(proof));
        Ok((
            message.into_bytes(),
            ServerCheck {
                expected: expected.into_bytes(),
            },
        ))
    }
}

impl ServerCheck {
    /// Checks the server-final message.
    pub fn verify(&self, server_final: &[u8]) -> Result<(), AuthError> {
        match bool::from(server_final.ct_eq(&self.expected)) {
            true => Ok(()),
            false => Err(AuthError::Failed(
                "the server's final SCRAM message does not prove it knows the credential".into(),
            )),
        }
    }
}

/// Serde of byte strings as base64 text.
mod base64_bytes {
    use super::BASE64;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        mechanism: Mechanism,
        stored: Option<ScramCredential>,
        user: &str,
        password: &'static str,
    ) -> Result<Authenticated, AuthError> {
        let (client, first) = ScramClient::first(mechanism, user, password, "clientnonce");
        let (exchange, server_first) =
            ScramServer::first(mechanism, &first, "servernonce", |_| stored)?;
        assert!(std::str::from_utf8(&server_first)
            .unwrap()
            .starts_with("r=clientnonceservernonce,s="));
        let (last, server) = client.last(&server_first).unwrap();
        let done = exchange.finish(&last)?;
        server
            .verify(&done.server_final)
            .expect("the client can verify the server");
        assert!(server.verify(b"v=AAAA").is_err(), "and tell a forged one");
        Ok(done)
    }

    #[test]
    fn the_right_password_authenticates_with_either_mechanism() {
        for m in Mechanism::ALL {
            let stored = ScramCredential::from_password(m, "alice-secret", 4096).unwrap();
            let done = run(m, Some(stored), "alice", "alice-secret").unwrap();
            assert_eq!(done.user, "alice");
        }
    }

    #[test]
    fn a_wrong_password_an_unknown_user_and_another_mechanism_fail_alike() {
        let stored = ScramCredential::from_password(Mechanism::Sha512, "right", 4096).unwrap();
        let wrong = run(Mechanism::Sha512, Some(stored.clone()), "alice", "wrong").unwrap_err();
        let unknown = run(Mechanism::Sha512, None, "mallory", "right").unwrap_err();
        let other = run(Mechanism::Sha256, Some(stored), "alice", "right").unwrap_err();
        for e in [&wrong, &unknown, &other] {
            assert!(matches!(e, AuthError::Failed(_)), "{e:?}");
        }
        assert_eq!(
            wrong.to_string(),
            unknown.to_string(),
            "nothing tells users apart"
        );
    }

    #[test]
    fn the_vector_of_rfc_7677_gives_its_server_signature() {
        // RFC 7677, section 3: user "user", password "pencil".
        let m = Mechanism::Sha256;
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = m.salted_password(b"pencil", &salt, 4096);
        let stored = ScramCredential::from_salted_password(m, salt, &salted, 4096).unwrap();
        let first = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        let (exchange, server_first) =
            ScramServer::first(m, first, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", |_| Some(stored))
                .unwrap();
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let last = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        let (client, client_first) =
            ScramClient::first(m, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(client_first, first);
        let (client_last, server) = client.last(&server_first).unwrap();
        assert_eq!(
            client_last, last,
            "the client's side gives the RFC's final message"
        );
        let done = exchange.finish(last).unwrap();
        assert_eq!(
            done.server_final,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        server.verify(&done.server_final).unwrap();
    }

    #[test]
    fn a_tampered_nonce_or_binding_and_bad_messages_are_refused() {
        let m = Mechanism::Sha256;
        let stored = ScramCredential::from_password(m, "pw", 4096).unwrap();
        let (exchange, _) =
            ScramServer::first(m, b"n,,n=bob,r=abc", "xyz", |_| Some(stored.clone())).unwrap();
        assert!(matches!(
            exchange.finish(b"c=biws,r=abcOTHER,p=AAAA"),
            Err(AuthError::Failed(_))
        ));
        let (exchange, _) =
            ScramServer::first(m, b"n,,n=bob,r=abc", "xyz", |_| Some(stored.clone())).unwrap();
        assert!(matches!(
            exchange.finish(b"c=eSws,r=abcxyz,p=AAAA"),
            Err(AuthError::Malformed(_))
        ));
        for bad in [
            &b"p=tls-unique,,n=bob,r=abc"[..],
            b"n,,r=abc",
            b"n,,n=bob",
            b"n,,n=b=x,r=abc",
            b"n,a=eve,n=bob,r=abc",
            b"\xff",
            b"",
        ] {
            assert!(ScramServer::first(m, bad, "xyz", |_| Some(stored.clone())).is_err());
        }
    }

    #[test]
    fn the_client_refuses_a_server_that_ignores_its_nonce_or_asks_for_too_few_iterations() {
        let m = Mechanism::Sha512;
        for server_first in [
            &b"r=othernonce,s=c2FsdA==,i=4096"[..],
            b"r=abc,s=c2FsdA==,i=4096",
            b"r=abcxyz,s=c2FsdA==,i=100",
            b"r=abcxyz,s=,i=4096",
            b"r=abcxyz,s=!!,i=4096",
            b"r=abcxyz,i=4096",
            b"\xff",
        ] {
            let (client, _) = ScramClient::first(m, "bob", "pw", "abc");
            assert!(client.last(server_first).is_err(), "{server_first:?}");
        }
    }

    #[test]
    fn escaped_names_are_decoded_and_credentials_round_trip_through_json() {
        assert_eq!(decode_name("a=2Cb=3Dc").unwrap(), "a,b=c");
        assert_eq!(decode_name(&encode_name("a,b=c")).unwrap(), "a,b=c");
        // A password that base64 text cannot contain (no '-'), so the check below
        // cannot be fooled by a random salt.
        let stored = ScramCredential::from_password(Mechanism::Sha512, "pass-word", 8192).unwrap();
        let json = serde_json::to_string(&stored).unwrap();
        assert!(!json.contains("pass-word"));
        let back: ScramCredential = serde_json::from_str(&json).unwrap();
        assert_eq!(back, stored);
        assert!(back.matches_password("pass-word") && !back.matches_password("pass-Word"));
        assert!(ScramCredential::from_password(Mechanism::Sha256, "pw", 100).is_err());
    }
}
