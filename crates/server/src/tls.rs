//! TLS for SSL listeners (`rustls`, TLS 1.2 and 1.3): the server's certificate chain
//! and key from PEM files, and, when `ssl_client_ca_file` is set, client certificates
//! required and checked against those CAs (Kafka's `ssl.client.auth=required`).
//!
//! SIGHUP reloads the files ([`ReloadableTls::reload`]): connections accepted after it
//! use the new certificate, key and client CAs; established ones keep their session. A
//! reload that fails (a missing file, a key that does not match) keeps the old ones.
//!
//! A handshake runs on the connection's own task, bounded by
//! `limits::TLS_HANDSHAKE_TIMEOUT_MS`, so a client that stalls in it holds only its
//! connection slot. A failed handshake is counted and logged with the client's address.

use crate::call::ServerStats;
use headway_base::limits;
use headway_broker::BrokerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{what} {}: no certificate in it", path.display()));
    }
    Ok(certs)
}

/// The acceptor of the broker's SSL listeners, from the files `config` names.
pub fn acceptor(config: &BrokerConfig) -> Result<TlsAcceptor, String> {
    let (Some(cert_file), Some(key_file)) = (&config.ssl_certificate_file, &config.ssl_key_file)
    else {
        return Err("an SSL listener needs ssl_certificate_file and ssl_key_file".to_string());
    };
    let chain = certificates(cert_file, "ssl_certificate_file")?;
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| format!("ssl_key_file {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS versions: {e}"))?;
    let builder = match &config.ssl_client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(ca_file, "ssl_client_ca_file")? {
                roots
                    .add(ca)
                    .map_err(|e| format!("ssl_client_ca_file {}: {e}", ca_file.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("ssl_client_ca_file {}: {e}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let server = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("ssl_certificate_file and ssl_key_file: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// The acceptor of the SSL listeners, replaced whole by a reload.
pub struct ReloadableTls {
    config: BrokerConfig,
    current: RwLock<TlsAcceptor>,
}

impl ReloadableTls {
    /// Loads the files `config` names.
    pub fn load(config: &BrokerConfig) -> Result<Arc<ReloadableTls>, String> {
        Ok(Arc::new(ReloadableTls {
            current: RwLock::new(acceptor(config)?),
            config: config.clone(),
        }))
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the files again; on success new connections use them, on failure the
    /// current ones stay and the error says why.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = acceptor(&self.config)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        Ok(())
    }
}

/// Runs the TLS handshake of a new connection; `None` when it fails or does not
/// finish in time: counted, and logged within the bound of `stats.tls_failure_lines`.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    stats: &ServerStats,
) -> Option<TlsStream<TcpStream>> {
    let _ = stream.set_nodelay(true);
    let deadline = Duration::from_millis(limits::TLS_HANDSHAKE_TIMEOUT_MS);
    let error = match tokio::time::timeout(deadline, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => return Some(tls),
        Ok(Err(error)) => error.to_string(),
        Err(_) => format!(
            "did not finish within {} ms",
            limits::TLS_HANDSHAKE_TIMEOUT_MS
        ),
    };
    stats.tls_handshake_failures.fetch_add(1, Ordering::Relaxed);
    if let Some(lines_left_out) = stats.tls_failure_lines.admit_now() {
        tracing::warn!(%peer, %error, lines_left_out, "closing connection: TLS handshake failed");
    }
    None
}

/// The principal of a connection whose client presented a certificate: `User:` and
/// the certificate's subject as an RFC 2253 distinguished name (most specific part
/// first, e.g. `User:CN=alice,OU=eng,O=example`), as Kafka's default principal
/// builder makes it. `None` without a certificate, or one that does not parse.
pub fn client_principal(tls: &TlsStream<TcpStream>) -> Option<String> {
    let certificate = tls.get_ref().1.peer_certificates()?.first()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate.as_ref()).ok()?;
    Some(format!("User:{}", rfc2253(parsed.subject())))
}

/// `name` as RFC 2253 writes it: its parts in reverse order, `,` between parts and `+`
/// between the attributes of one part, Java's keywords for the usual attributes and
/// the dotted OID with the value's hex for others.
fn rfc2253(name: &x509_parser::x509::X509Name<'_>) -> String {
    let parts: Vec<String> = name
        .iter_rdn()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .map(|rdn| {
            let attributes: Vec<String> = rdn
                .iter()
                .map(|attribute| {
                    let oid = attribute.attr_type().to_id_string();
                    let value = match attribute.as_str() {
                        Ok(text) => escape_rfc2253(text),
                        Err(_) => format!("#{}", hex(attribute.as_slice())),
                    };
                    format!("{}={value}", keyword(&oid).unwrap_or(&oid))
                })
                .collect();
            attributes.join("+")
        })
        .collect();
    parts.join(",")
}

/// RFC 2253's keyword for an attribute type, as Java's `X500Principal` uses them.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == ' ' || c == '#'))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_characters_of_a_name_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape_rfc2253("alice"), "alice");
        assert_eq!(escape_rfc2253("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape_rfc2253(" #x "), "\\ #x\\ ");
        assert_eq!(escape_rfc2253("#"), "\\#");
        assert_eq!(keyword("2.5.4.3"), Some("CN"));
        assert_eq!(keyword("1.2.3"), None);
        assert_eq!(hex(&[0x0a, 0xff]), "0aff");
    }
}
