//! SASL OAUTHBEARER (RFC 7628) with JSON Web Tokens checked against a JSON Web Key Set,
//! as Kafka's broker-side validator does (KIP-768).
//!
//! The client's one message carries a bearer token ([`ClientFirst::parse`]). The token
//! is accepted when its signature verifies with a key of the set (chosen by the token's
//! `kid`, or the set's only key), its algorithm is an asymmetric one the key is for,
//! it has not expired and is already valid (`exp`, `nbf`, with a clock skew), and its
//! issuer and audience match when those are configured. The principal is `User:` plus
//! the subject claim (`sub`, or the configured claim). The clock is an argument, so
//! every rule is tested without waiting.

use crate::AuthError;
use base64::Engine;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use std::path::Path;

/// The longest token accepted, bytes (a JWT with a few claims is well under 2 KiB).
pub const TOKEN_BYTES_MAX: usize = 16 * 1024;

/// Settings of the validator, named after Kafka's `sasl.oauthbearer.*` broker settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthSettings {
    /// `sasl.oauthbearer.expected.issuer`: the `iss` a token must carry, if set.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.expected.audience`: a token's `aud` must name one of these,
    /// if any is set.
    pub expected_audience: Vec<String>,
    /// `sasl.oauthbearer.sub.claim.name`: the claim that names the principal.
    pub sub_claim: String,
    /// `sasl.oauthbearer.clock.skew.seconds`: leeway for `exp` and `nbf`.
    pub clock_skew_s: u64,
}

impl Default for OAuthSettings {
    fn default() -> Self {
        OAuthSettings {
            expected_issuer: None,
            expected_audience: Vec::new(),
            sub_claim: "sub".into(),
            clock_skew_s: 30,
        }
    }
}

/// A token that passed: who it names and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidToken {
    /// `User:<subject>`.
    pub principal: String,
    /// The token's `exp`, milliseconds since the epoch: a session may not outlive it.
    pub expires_at_ms: i64,
}

/// Checks bearer tokens against a fixed key set.
pub struct OAuthValidator {
    keys: JwkSet,
    settings: OAuthSettings,
}

impl std::fmt::Debug for OAuthValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthValidator")
            .field("keys", &self.keys.keys.len())
            .field("settings", &self.settings)
            .finish()
    }
}

impl OAuthValidator {
    /// A validator over the JSON Web Key Set in `path` (`{"keys": [...]}`).
    pub fn from_jwks_file(path: &Path, settings: OAuthSettings) -> Result<Self, AuthError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AuthError::Storage(format!("read the key set {}: {e}", path.display())))?;
        Self::from_jwks(&text, settings).map_err(|e| match e {
            AuthError::Storage(m) => AuthError::Storage(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// A validator over a JSON Web Key Set given as JSON text.
    pub fn from_jwks(json: &str, settings: OAuthSettings) -> Result<Self, AuthError> {
        let keys: JwkSet = serde_json::from_str(json)
            .map_err(|e| AuthError::Storage(format!("not a JSON Web Key Set: {e}")))?;
        if keys.keys.is_empty() {
            return Err(AuthError::Storage("the key set has no keys".into()));
        }
        Ok(OAuthValidator { keys, settings })
    }

    /// Checks `token` at `now_ms` (milliseconds since the epoch).
    pub fn validate(&self, token: &str, now_ms: i64) -> Result<ValidToken, AuthError> {
        let fail = |why: &str| AuthError::Failed(format!("invalid bearer token: {why}"));
        if token.len() > TOKEN_BYTES_MAX {
            return Err(fail("too long"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|e| fail(&e.to_string()))?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(fail("symmetric algorithms are not accepted"));
        }
        let jwk = match &header.kid {
            Some(kid) => self
                .keys
                .find(kid)
                .ok_or_else(|| fail("no key with its kid"))?,
            None if self.keys.keys.len() == 1 => &self.keys.keys[0],
            None => return Err(fail("no kid, and the key set has several keys")),
        };
        let key = DecodingKey::from_jwk(jwk).map_err(|e| fail(&format!("its key: {e}")))?;
        let mut validation = Validation::new(header.alg);
        // Times are checked below against the injected clock.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation)
            .map_err(|e| fail(&e.to_string()))?;
        self.check_claims(&data.claims, now_ms)
            .map_err(|why| fail(&why))
    }

    fn check_claims(&self, claims: &Value, now_ms: i64) -> Result<ValidToken, String> {
        let now_s = now_ms.div_euclid(1000);
        let skew = self.settings.clock_skew_s as i64;
        let exp = claims["exp"].as_i64().ok_or("no exp claim")?;
        if now_s > exp.saturating_add(skew) {
            return Err("expired".into());
        }
        if let Some(nbf) = claims["nbf"].as_i64() {
            if now_s < nbf.saturating_sub(skew) {
                return Err("not valid yet".into());
            }
        }
        if let Some(issuer) = &self.settings.expected_issuer {
            if claims["iss"].as_str() != Some(issuer.as_str()) {
                return Err("wrong issuer".into());
            }
        }
        if !self.settings.expected_audience.is_empty() {
            let audience: Vec<&str> = match &claims["aud"] {
                Value::String(one) => vec![one.as_str()],
                Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !audience
                .iter()
                .any(|a| self.settings.expected_audience.iter().any(|e| e == a))
            {
                return Err("wrong audience".into());
            }
        }
        let subject = claims[self.settings.sub_claim.as_str()]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("no {} claim", self.settings.sub_claim))?;
        Ok(ValidToken {
            principal: format!("User:{subject}"),
            expires_at_ms: exp.saturating_mul(1000),
        })
    }
}

/// The client's message (RFC 7628 section 3.1): a GS2 header, then key=value pairs
/// separated by 0x01, one of them `auth=Bearer <token>`, ended by 0x01 0x01.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    pub token: String,
    /// The authorization identity of the GS2 header (`a=`), if any.
    pub authzid: Option<String>,
    /// The other pairs (SASL extensions), in order.
    pub extensions: Vec<(String, String)>,
}

impl ClientFirst {
    pub fn parse(message: &[u8]) -> Result<ClientFirst, AuthError> {
        let bad = |why: &str| AuthError::Malformed(format!("OAUTHBEARER: {why}"));
        let text = std::str::from_utf8(message).map_err(|_| bad("not UTF-8"))?;
        let (gs2, rest) = text.split_once('\x01').ok_or_else(|| bad("no separator"))?;
        let authzid = match gs2.strip_prefix("n,") {
            Some(",") => None,
            Some(a) => Some(
                a.strip_prefix("a=")
                    .and_then(|a| a.strip_suffix(','))
                    .ok_or_else(|| bad("bad GS2 header"))?
                    .to_string(),
            ),
            None => return Err(bad("channel binding is not supported")),
        };
        let body = rest
            .strip_suffix("\x01\x01")
            .ok_or_else(|| bad("not ended by 0x01 0x01"))?;
        let mut token = None;
        let mut extensions = Vec::new();
        for pair in body.split('\x01') {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad("a pair without ="))?;
            match key {
                "auth" => {
                    let t = value
                        .strip_prefix("Bearer ")
                        .or_else(|| value.strip_prefix("bearer "))
                        .ok_or_else(|| bad("auth is not a bearer token"))?;
                    token = Some(t.trim().to_string());
                }
                _ => extensions.push((key.to_string(), value.to_string())),
            }
        }
        let token = token.ok_or_else(|| bad("no auth pair"))?;
        Ok(ClientFirst {
            token,
            authzid,
            extensions,
        })
    }
}

/// What the server sends after a refused token (RFC 7628 section 3.2.2); the client
/// answers with a single 0x01 and the exchange then fails.
pub fn error_challenge() -> Vec<u8> {
    br#"{"status":"invalid_token"}"#.to_vec()
}

/// The payload of a JWT (the middle part), decoded but not checked: for logging only.
pub fn unverified_subject(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: Value = serde_json::from_slice(&bytes).ok()?;
    claims["sub"].as_str().map(str::to_string)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    use serde_json::json;

    const NOW_MS: i64 = 1_800_000_000_000;
    const NOW_S: i64 = NOW_MS / 1000;

    pub(crate) struct Signer {
        key: EncodingKey,
        jwk: Value,
    }

    pub(crate) fn signer(kid: &str) -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        Signer {
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
                "x": b64(&point[1..33]), "y": b64(&point[33..65])}),
        }
    }

    pub(crate) fn token(signer: &Signer, kid: Option<&str>, claims: Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_string);
        jsonwebtoken::encode(&header, &claims, &signer.key).unwrap()
    }

    pub(crate) fn validator(signers: &[&Signer], settings: OAuthSettings) -> OAuthValidator {
        let keys: Vec<Value> = signers.iter().map(|s| s.jwk.clone()).collect();
        OAuthValidator::from_jwks(&json!({ "keys": keys }).to_string(), settings).unwrap()
    }

    #[test]
    fn a_signed_current_token_names_its_subject() {
        let a = signer("a");
        let v = validator(&[&a], OAuthSettings::default());
        let t = token(&a, Some("a"), json!({"sub": "alice", "exp": NOW_S + 60}));
        let valid = v.validate(&t, NOW_MS).unwrap();
        assert_eq!(valid.principal, "User:alice");
        assert_eq!(valid.expires_at_ms, (NOW_S + 60) * 1000);
        // Without a kid the set's only key is used.
        let t = token(&a, None, json!({"sub": "bob", "exp": NOW_S + 60}));
        assert_eq!(v.validate(&t, NOW_MS).unwrap().principal, "User:bob");
    }

    #[test]
    fn expired_early_foreign_and_tampered_tokens_are_refused() {
        let a = signer("a");
        let other = signer("a");
        let v = validator(&[&a], OAuthSettings::default());
        let refused = |t: &str| matches!(v.validate(t, NOW_MS), Err(AuthError::Failed(_)));
        // Expired beyond the 30 s skew; within it still accepted.
        assert!(refused(&token(
            &a,
            Some("a"),
            json!({"sub": "x", "exp": NOW_S - 31})
        )));
        assert!(!refused(&token(
            &a,
            Some("a"),
            json!({"sub": "x", "exp": NOW_S - 29})
        )));
        assert!(refused(&token(
            &a,
            Some("a"),
            json!({"sub": "x", "exp": NOW_S + 60, "nbf": NOW_S + 100})
        )));
        // Signed by another key with the same kid.
        assert!(refused(&token(
            &other,
            Some("a"),
            json!({"sub": "x", "exp": NOW_S + 60})
        )));
        // An unknown kid, no exp, no subject.
        assert!(refused(&token(
            &a,
            Some("b"),
            json!({"sub": "x", "exp": NOW_S + 60})
        )));
        assert!(refused(&token(&a, Some("a"), json!({"sub": "x"}))));
        assert!(refused(&token(&a, Some("a"), json!({"exp": NOW_S + 60}))));
        // A changed payload breaks the signature.
        let t = token(&a, Some("a"), json!({"sub": "alice", "exp": NOW_S + 60}));
        let parts: Vec<&str> = t.split('.').collect();
        let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(json!({"sub": "admin", "exp": NOW_S + 60}).to_string());
        assert!(refused(&format!("{}.{}.{}", parts[0], forged, parts[2])));
        // alg none and HMAC are never accepted.
        let none = format!(
            "{}.{}.",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
            parts[1]
        );
        assert!(v.validate(&none, NOW_MS).is_err());
        let hs = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "x", "exp": NOW_S + 60}),
            &EncodingKey::from_secret(b"k"),
        )
        .unwrap();
        assert!(refused(&hs));
        assert!(refused(&"x".repeat(TOKEN_BYTES_MAX + 1)));
    }

    #[test]
    fn issuer_audience_and_subject_claim_follow_the_settings() {
        let a = signer("a");
        let settings = OAuthSettings {
            expected_issuer: Some("https://idp".into()),
            expected_audience: vec!["kafka".into()],
            sub_claim: "client_id".into(),
            clock_skew_s: 0,
        };
        let v = validator(&[&a], settings);
        let ok = json!({"iss": "https://idp", "aud": ["x", "kafka"], "client_id": "svc", "exp": NOW_S + 5});
        assert_eq!(
            v.validate(&token(&a, Some("a"), ok), NOW_MS)
                .unwrap()
                .principal,
            "User:svc"
        );
        for bad in [
            json!({"iss": "https://other", "aud": "kafka", "client_id": "svc", "exp": NOW_S + 5}),
            json!({"iss": "https://idp", "aud": "web", "client_id": "svc", "exp": NOW_S + 5}),
            json!({"iss": "https://idp", "aud": "kafka", "sub": "svc", "exp": NOW_S + 5}),
            json!({"iss": "https://idp", "aud": "kafka", "client_id": "svc", "exp": NOW_S - 1}),
        ] {
            assert!(v.validate(&token(&a, Some("a"), bad), NOW_MS).is_err());
        }
    }

    #[test]
    fn a_set_of_several_keys_picks_by_kid() {
        let (a, b) = (signer("a"), signer("b"));
        let v = validator(&[&a, &b], OAuthSettings::default());
        let claims = json!({"sub": "x", "exp": NOW_S + 60});
        assert!(v
            .validate(&token(&b, Some("b"), claims.clone()), NOW_MS)
            .is_ok());
        assert!(v.validate(&token(&b, None, claims), NOW_MS).is_err());
        assert!(OAuthValidator::from_jwks(r#"{"keys": []}"#, OAuthSettings::default()).is_err());
        assert!(OAuthValidator::from_jwks("nonsense", OAuthSettings::default()).is_err());
    }

    #[test]
    fn the_client_message_is_parsed_as_rfc_7628_says() {
        let m = ClientFirst::parse(b"n,,\x01auth=Bearer abc.def.ghi\x01\x01").unwrap();
        assert_eq!(m.token, "abc.def.ghi");
        assert_eq!(m.authzid, None);
        let m = ClientFirst::parse(b"n,a=alice,\x01traceId=7\x01auth=Bearer t\x01\x01").unwrap();
        assert_eq!(m.authzid.as_deref(), Some("alice"));
        assert_eq!(m.extensions, vec![("traceId".to_string(), "7".to_string())]);
        for bad in [
            &b""[..],
            b"n,,\x01auth=Bearer t",
            b"p=tls,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01x=1\x01\x01",
            b"n,,\x01noequals\x01\x01",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(ClientFirst::parse(bad), Err(AuthError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn the_unverified_subject_is_read_for_logs() {
        let a = signer("a");
        let t = token(&a, Some("a"), json!({"sub": "carol", "exp": 1}));
        assert_eq!(unverified_subject(&t).as_deref(), Some("carol"));
        assert_eq!(unverified_subject("garbage"), None);
    }
}
