//! How the client commands (`produce`, `consume`, `topic`, `group`, `cluster`, `acl`,
//! `user -b`) secure their connections: Kafka's `security.protocol`, a SASL mechanism
//! with its user and password, and TLS files. The password is best given in
//! `HEADWAY_SASL_PASSWORD`, which does not show in the process list.

use clap::{Args, ValueEnum};
use headway_auth::scram::{Mechanism, ScramClient, ServerCheck};
use headway_client::{ClientConfig, Plain, SaslExchange, SaslMechanism, SaslStep, Security, Tls};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SecurityProtocol {
    #[value(name = "PLAINTEXT")]
    Plaintext,
    #[value(name = "SSL")]
    Ssl,
    #[value(name = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[value(name = "SASL_SSL")]
    SaslSsl,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanismName {
    #[value(name = "PLAIN")]
    Plain,
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
}

#[derive(Args, Clone)]
pub struct SecurityArgs {
    /// How to reach the broker, as Kafka's security.protocol.
    #[arg(
        long,
        value_enum,
        env = "HEADWAY_SECURITY_PROTOCOL",
        default_value = "PLAINTEXT",
        global = true
    )]
    pub security_protocol: SecurityProtocol,
    /// SASL mechanism, with SASL_PLAINTEXT and SASL_SSL.
    #[arg(long, value_enum, env = "HEADWAY_SASL_MECHANISM", global = true)]
    pub sasl_mechanism: Option<SaslMechanismName>,
    /// SASL user name.
    #[arg(long, env = "HEADWAY_SASL_USERNAME", global = true)]
    pub sasl_username: Option<String>,
    /// SASL password (prefer the environment variable).
    #[arg(
        long,
        env = "HEADWAY_SASL_PASSWORD",
        hide_env_values = true,
        global = true
    )]
    pub sasl_password: Option<String>,
    /// PEM file of the certificates that sign the brokers' certificates, with SSL and
    /// SASL_SSL.
    #[arg(long, env = "HEADWAY_SSL_CA_LOCATION", global = true)]
    pub ssl_ca_location: Option<PathBuf>,
    /// PEM file of this client's certificate chain, for brokers that ask for one.
    #[arg(
        long,
        env = "HEADWAY_SSL_CERTIFICATE_LOCATION",
        requires = "ssl_key_location",
        global = true
    )]
    pub ssl_certificate_location: Option<PathBuf>,
    /// PEM file of this client's private key.
    #[arg(
        long,
        env = "HEADWAY_SSL_KEY_LOCATION",
        requires = "ssl_certificate_location",
        global = true
    )]
    pub ssl_key_location: Option<PathBuf>,
    /// The name the broker's certificate must carry (default: the host connected to).
    #[arg(long, env = "HEADWAY_SSL_SERVER_NAME", global = true)]
    pub ssl_server_name: Option<String>,
}

impl SecurityArgs {
    /// The client's settings with these.
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        Ok(ClientConfig {
            security: self.security()?,
            ..ClientConfig::default()
        })
    }

    fn security(&self) -> anyhow::Result<Security> {
        use SecurityProtocol::*;
        let (tls, sasl) = match self.security_protocol {
            Plaintext => (false, false),
            Ssl => (true, false),
            SaslPlaintext => (false, true),
            SaslSsl => (true, true),
        };
        if !tls && (self.ssl_ca_location.is_some() || self.ssl_certificate_location.is_some()) {
            anyhow::bail!("--ssl-* files need --security-protocol SSL or SASL_SSL");
        }
        if !sasl && (self.sasl_mechanism.is_some() || self.sasl_username.is_some()) {
            anyhow::bail!("--sasl-* settings need --security-protocol SASL_PLAINTEXT or SASL_SSL");
        }
        let tls = match tls {
            false => None,
            true => {
                let ca = self.ssl_ca_location.as_deref().ok_or_else(|| {
                    anyhow::anyhow!("--ssl-ca-location is needed with {}", self.protocol_name())
                })?;
                let client = self
                    .ssl_certificate_location
                    .as_deref()
                    .zip(self.ssl_key_location.as_deref());
                Some(
                    Tls::from_pem_files(ca, client, self.ssl_server_name.clone())
                        .map_err(anyhow::Error::msg)?,
                )
            }
        };
        let sasl = match sasl {
            false => None,
            true => Some(self.sasl()?),
        };
        Ok(Security { tls, sasl })
    }

    fn protocol_name(&self) -> &'static str {
        match self.security_protocol {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    fn sasl(&self) -> anyhow::Result<Arc<dyn SaslMechanism>> {
        let protocol = self.protocol_name();
        let mechanism = self
            .sasl_mechanism
            .ok_or_else(|| anyhow::anyhow!("--sasl-mechanism is needed with {protocol}"))?;
        let user = self
            .sasl_username
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--sasl-username is needed with {protocol}"))?;
        let password = self.sasl_password.clone().ok_or_else(|| {
            anyhow::anyhow!("a password is needed with {protocol}: set HEADWAY_SASL_PASSWORD")
        })?;
        Ok(match mechanism {
            SaslMechanismName::Plain => Arc::new(Plain { user, password }),
            SaslMechanismName::ScramSha256 => Arc::new(Scram {
                mechanism: Mechanism::Sha256,
                user,
                password,
            }),
            SaslMechanismName::ScramSha512 => Arc::new(Scram {
                mechanism: Mechanism::Sha512,
                user,
                password,
            }),
        })
    }
}

/// SCRAM-SHA-256 or -512, run by `headway_auth`'s client side.
struct Scram {
    mechanism: Mechanism,
    user: String,
    password: String,
}

enum ScramState {
    Start(ScramClient, Vec<u8>),
    Sent(ScramClient),
    Finished(ServerCheck),
    Verified,
}

struct ScramExchange(Option<ScramState>);

impl SaslMechanism for Scram {
    fn name(&self) -> &str {
        self.mechanism.name()
    }

    fn start(&self) -> Result<Box<dyn SaslExchange>, String> {
        // 24 random bytes, as hex: printable and without commas.
        let nonce: String = headway_auth::random_bytes(24)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let (client, first) =
            ScramClient::first(self.mechanism, &self.user, &self.password, &nonce);
        Ok(Box::new(ScramExchange(Some(ScramState::Start(
            client, first,
        )))))
    }
}

impl SaslExchange for ScramExchange {
    fn next(&mut self, server: Option<&[u8]>) -> Result<SaslStep, String> {
        let state = self.0.take().ok_or("the SCRAM exchange failed earlier")?;
        let (state, step) = match (state, server) {
            (ScramState::Start(client, first), _) => {
                (ScramState::Sent(client), SaslStep::Send(first))
            }
            (ScramState::Sent(client), Some(server_first)) => {
                let (last, check) = client.last(server_first).map_err(|e| e.to_string())?;
                (ScramState::Finished(check), SaslStep::Send(last))
            }
            (ScramState::Finished(check), Some(server_final)) => {
                check.verify(server_final).map_err(|e| e.to_string())?;
                (ScramState::Verified, SaslStep::Done)
            }
            (ScramState::Verified, _) => (ScramState::Verified, SaslStep::Done),
            (_, None) => return Err("the broker sent no SCRAM message".into()),
        };
        self.0 = Some(state);
        Ok(step)
    }
}
