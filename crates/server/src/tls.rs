//! TLS for SSL listeners (`rustls`, TLS 1.2 and 1.3): the server's certificate chain
//! and key from PEM files, and, when `ssl_client_ca_file` is set, client certificates
//! required and checked against those CAs (Kafka's `ssl.client.auth=required`).
//!
//! A handshake runs on the connection's own task, bounded by
//! `limits::TLS_HANDSHAKE_TIMEOUT_MS`, so a client that stalls in it holds only its
//! connection slot. A failed handshake is counted and logged with the client's address.

use crate::stats::ServerStats;
use headway_broker::{limits, BrokerConfig};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
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
