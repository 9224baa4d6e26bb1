//! How a connection reaches a broker: TCP, TLS over it (rustls), and SASL on either,
//! as Kafka's `security.protocol` values PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL.
//!
//! A [`Security`] travels in the [`crate::ClientConfig`]; every connection the client
//! opens uses it. SASL mechanisms are exchanges over plain values ([`SaslMechanism`]):
//! PLAIN is here, SCRAM is the caller's (the `headway` commands plug in
//! `headway_auth::scram::ScramClient`), so this crate carries no key derivation of its
//! own. The connection runs SaslHandshake v1, then one SaslAuthenticate per token,
//! before ApiVersions.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::Path;
use std::sync::Arc;

/// One step of a SASL exchange, seen from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SaslStep {
    /// Send this token in the next SaslAuthenticate.
    Send(Vec<u8>),
    /// The exchange succeeded.
    Done,
}

/// One SASL exchange in progress.
pub trait SaslExchange: Send {
    /// The next step, given the server's last token (`None` before the first).
    fn next(&mut self, server: Option<&[u8]>) -> Result<SaslStep, String>;
}

/// A SASL mechanism with its credentials: starts one exchange per connection.
pub trait SaslMechanism: Send + Sync {
    /// The mechanism's name in SaslHandshake (`PLAIN`, `SCRAM-SHA-512`).
    fn name(&self) -> &str;
    fn start(&self) -> Result<Box<dyn SaslExchange>, String>;
}

/// SASL PLAIN (RFC 4616): one token, the user name and password. Use it over TLS only.
pub struct Plain {
    pub user: String,
    pub password: String,
}

struct PlainExchange {
    token: Option<Vec<u8>>,
}

impl SaslExchange for PlainExchange {
    fn next(&mut self, _server: Option<&[u8]>) -> Result<SaslStep, String> {
        Ok(self.token.take().map_or(SaslStep::Done, SaslStep::Send))
    }
}

impl SaslMechanism for Plain {
    fn name(&self) -> &str {
        "PLAIN"
    }

    fn start(&self) -> Result<Box<dyn SaslExchange>, String> {
        let mut token = Vec::with_capacity(self.user.len() + self.password.len() + 2);
        token.push(0);
        token.extend_from_slice(self.user.as_bytes());
        token.push(0);
        token.extend_from_slice(self.password.as_bytes());
        Ok(Box::new(PlainExchange { token: Some(token) }))
    }
}

/// TLS settings: the certificates trusted, and a client certificate if the broker asks
/// for one.
#[derive(Clone)]
pub struct Tls {
    pub(crate) config: Arc<rustls::ClientConfig>,
    /// The name the broker's certificate must carry; by default the host of the
    /// address connected to.
    pub(crate) server_name: Option<String>,
}

fn read_error(what: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("reading the {what} {}: {e}", path.display())
}

impl Tls {
    /// From PEM files: `ca` holds the certificates trusted to sign brokers'
    /// certificates; `client` is a certificate chain and its private key.
    pub fn from_pem_files(
        ca: &Path,
        client: Option<(&Path, &Path)>,
        server_name: Option<String>,
    ) -> Result<Tls, String> {
        let mut roots = rustls::RootCertStore::empty();
        let cas = CertificateDer::pem_file_iter(ca)
            .map_err(|e| read_error("CA file", ca, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| read_error("CA file", ca, e))?;
        if cas.is_empty() {
            return Err(read_error("CA file", ca, "no certificate in it"));
        }
        for cert in cas {
            roots.add(cert).map_err(|e| read_error("CA file", ca, e))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .map_err(|e| read_error("certificate", cert, e))?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| read_error("certificate", cert, e))?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| read_error("private key", key, e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate and key: {e}"))?
            }
        };
        Ok(Tls {
            config: Arc::new(config),
            server_name,
        })
    }

    /// The name to check the broker's certificate against when connecting to `addr`.
    pub(crate) fn server_name(&self, addr: &str) -> Result<ServerName<'static>, String> {
        let host = match &self.server_name {
            Some(name) => name.as_str(),
            None => host_of(addr),
        };
        ServerName::try_from(host.to_string()).map_err(|e| format!("server name {host}: {e}"))
    }
}

/// The host part of `HOST:PORT` (an IPv6 address may be in brackets).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

/// How the client's connections are secured: Kafka's PLAINTEXT by default.
#[derive(Clone, Default)]
pub struct Security {
    pub tls: Option<Tls>,
    pub sasl: Option<Arc<dyn SaslMechanism>>,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl.as_ref().map(|m| m.name().to_string()))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_sends_one_token_then_is_done() {
        let plain = Plain {
            user: "alice".into(),
            password: "secret".into(),
        };
        let mut exchange = plain.start().unwrap();
        assert_eq!(
            exchange.next(None).unwrap(),
            SaslStep::Send(b"\0alice\0secret".to_vec())
        );
        assert_eq!(exchange.next(Some(b"")).unwrap(), SaslStep::Done);
    }

    #[test]
    fn the_server_name_is_the_host_of_the_address_unless_set() {
        assert_eq!(host_of("broker-1.example:9093"), "broker-1.example");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = Tls::from_pem_files(&missing, None, None).err().unwrap();
        assert!(e.contains("CA file") && e.contains("missing.pem"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let e = Tls::from_pem_files(&empty, None, None).err().unwrap();
        assert!(e.contains("no certificate"), "{e}");
    }
}
