//! The broker's listeners as Kafka configures them: `listeners`
//! (`NAME://HOST:PORT,...`), `advertised_listeners` (the address each listener's
//! clients are told) and `listener_security_protocol_map` (`NAME:PROTOCOL`, for names
//! that are not a protocol). Without `listeners`, the broker has one PLAINTEXT listener
//! on `listen`, advertised as `advertised_listener`.
//!
//! Plain parsing over the settings' strings ([`ListenerSettings`]), checked at start-up
//! by `BrokerConfig::validate` and reached through `BrokerConfig::listener_specs`: a
//! bad listener stops the start with a message naming it.

/// The settings that name the listeners, borrowed from the broker's configuration.
#[derive(Debug, Clone, Copy)]
pub struct ListenerSettings<'a> {
    pub listeners: &'a [String],
    pub advertised_listeners: &'a [String],
    pub listener_security_protocol_map: &'a [String],
    pub listen: &'a str,
    pub advertised_listener: Option<&'a str>,
}

/// How a listener's connections are secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    /// SASL authentication over plaintext.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The connection runs TLS (SSL and SASL_SSL).
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Clients authenticate with SASL before anything else (SASL_PLAINTEXT, SASL_SSL).
    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    fn parse(name: &str) -> Result<SecurityProtocol, String> {
        match name {
            "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
            "SSL" => Ok(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
            other => Err(format!(
                "unknown security protocol {other:?} (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
            )),
        }
    }
}

/// One listener to bind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// The listener's name (`PLAINTEXT`, `SSL`, or a mapped name such as `INTERNAL`).
    pub name: String,
    pub protocol: SecurityProtocol,
    /// `HOST:PORT` to bind; port 0 binds an ephemeral port.
    pub bind: String,
    /// `HOST:PORT` given to this listener's clients; `None`: the bound address.
    pub advertised: Option<String>,
}

/// `NAME://HOST:PORT` split into its name and address.
fn split(entry: &str) -> Result<(String, String), String> {
    let (name, address) = entry
        .trim()
        .split_once("://")
        .ok_or_else(|| format!("listener {entry:?} is not NAME://HOST:PORT"))?;
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    if !valid_name {
        return Err(format!(
            "listener name {name:?} must be upper-case letters, digits and '_'"
        ));
    }
    match address.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => {}
        _ => return Err(format!("listener {entry:?} is not NAME://HOST:PORT")),
    }
    Ok((name.to_string(), address.to_string()))
}

/// The listeners `config` asks for, in order; the first is the one the broker's
/// start-up line names.
pub fn specs(config: ListenerSettings<'_>) -> Result<Vec<ListenerSpec>, String> {
    if config.listeners.is_empty() {
        if !config.advertised_listeners.is_empty() {
            return Err("advertised_listeners needs listeners".to_string());
        }
        return Ok(vec![ListenerSpec {
            name: "PLAINTEXT".to_string(),
            protocol: SecurityProtocol::Plaintext,
            bind: config.listen.to_string(),
            advertised: config.advertised_listener.map(str::to_string),
        }]);
    }
    let mut map = Vec::new();
    for entry in config.listener_security_protocol_map {
        let (name, protocol) = entry
            .split_once(':')
            .ok_or_else(|| format!("protocol map entry {entry:?} is not NAME:PROTOCOL"))?;
        map.push((
            name.trim().to_string(),
            SecurityProtocol::parse(protocol.trim())?,
        ));
    }
    let mut specs: Vec<ListenerSpec> = Vec::new();
    for entry in config.listeners {
        let (name, bind) = split(entry)?;
        if specs.iter().any(|s| s.name == name) {
            return Err(format!("listener {name} is named twice"));
        }
        let protocol = match map.iter().find(|(n, _)| *n == name) {
            Some((_, protocol)) => *protocol,
            None => SecurityProtocol::parse(&name).map_err(|e| {
                format!("listener {name}: {e}; map other names with listener_security_protocol_map")
            })?,
        };
        specs.push(ListenerSpec {
            name,
            protocol,
            bind,
            advertised: None,
        });
    }
    for entry in config.advertised_listeners {
        let (name, address) = split(entry)?;
        let spec = specs
            .iter_mut()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("advertised listener {name} is not in listeners"))?;
        spec.advertised = Some(address);
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BrokerConfig;

    fn config(listeners: &[&str], advertised: &[&str], map: &[&str]) -> BrokerConfig {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        BrokerConfig {
            listeners: strings(listeners),
            advertised_listeners: strings(advertised),
            listener_security_protocol_map: strings(map),
            ..BrokerConfig::default()
        }
    }

    #[test]
    fn without_listeners_the_broker_has_one_plaintext_listener_on_listen() {
        let mut c = BrokerConfig {
            advertised_listener: Some("broker:9092".into()),
            ..BrokerConfig::default()
        };
        let only = c.listener_specs().unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(only[0].bind, c.listen);
        assert_eq!(only[0].advertised.as_deref(), Some("broker:9092"));
        c.advertised_listeners = vec!["PLAINTEXT://x:1".into()];
        assert!(c.listener_specs().is_err());
    }

    #[test]
    fn sasl_listeners_are_served_and_marked() {
        let c = config(
            &["SASL_SSL://h:1", "SASL_PLAINTEXT://h:2", "EXT://h:3"],
            &[],
            &["EXT:SASL_SSL"],
        );
        let got = c.listener_specs().unwrap();
        assert_eq!(got[0].protocol, SecurityProtocol::SaslSsl);
        assert_eq!(got[1].protocol, SecurityProtocol::SaslPlaintext);
        assert_eq!(got[2].protocol, SecurityProtocol::SaslSsl);
        assert!(got[0].protocol.tls() && got[0].protocol.sasl());
        assert!(!got[1].protocol.tls() && got[1].protocol.sasl());
        assert!(SecurityProtocol::Ssl.tls() && !SecurityProtocol::Ssl.sasl());
    }

    #[test]
    fn listeners_are_named_mapped_and_advertised_as_kafka_does() {
        let c = config(
            &["PLAINTEXT://127.0.0.1:9092", "EXTERNAL://0.0.0.0:9093"],
            &["EXTERNAL://broker.example:9093"],
            &["EXTERNAL:SSL"],
        );
        let got = c.listener_specs().unwrap();
        assert_eq!(got[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(got[0].advertised, None);
        assert_eq!(got[1].name, "EXTERNAL");
        assert_eq!(got[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(got[1].bind, "0.0.0.0:9093");
        assert_eq!(got[1].advertised.as_deref(), Some("broker.example:9093"));
    }

    #[test]
    fn bad_listeners_are_refused_with_a_reason() {
        for (listeners, advertised, map, says) in [
            (
                &["127.0.0.1:9092"][..],
                &[][..],
                &[][..],
                "NAME://HOST:PORT",
            ),
            (&["PLAINTEXT://h:x"], &[], &[], "NAME://HOST:PORT"),
            (&["internal://h:1"], &[], &[], "upper-case"),
            (
                &["INTERNAL://h:1"],
                &[],
                &[],
                "listener_security_protocol_map",
            ),
            (&["SSL://h:1", "SSL://h:2"], &[], &[], "twice"),
            (
                &["SSL://h:1"],
                &["PLAINTEXT://h:1"],
                &[],
                "not in listeners",
            ),
            (&["A://h:1"], &[], &["A:TLS"], "unknown security protocol"),
        ] {
            let error = config(listeners, advertised, map)
                .listener_specs()
                .unwrap_err();
            assert!(error.contains(says), "{listeners:?}: {error}");
        }
        let ssl_without_key = config(&["SSL://127.0.0.1:0"], &[], &[]);
        assert!(ssl_without_key
            .validate()
            .unwrap_err()
            .contains("ssl_key_file"));
    }
}
