use kafka_protocol::ResponseError;

/// Expected failures of client operations.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("connection to {addr}: {reason}")]
    Connection { addr: String, reason: String },
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker answered with a Kafka error code; `name` is Kafka's name of it
    /// (`TOPIC_ALREADY_EXISTS`), the one operators search for.
    #[error("{name}{}", message.as_deref().filter(|m| !m.is_empty()).map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        code: i16,
        name: String,
        message: Option<String>,
    },
    #[error("the broker does not serve {api} (versions {min}..={max} wanted)")]
    UnsupportedApi {
        api: &'static str,
        min: i16,
        max: i16,
    },
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("unknown topic or partition {0}")]
    UnknownTopic(String),
    /// TLS or SASL refused, or a SASL exchange that could not go on.
    #[error("authentication failed: {0}")]
    Authentication(String),
    #[error("the client is closed")]
    Closed,
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    pub fn from_code(code: i16, message: Option<String>) -> ClientError {
        let name = match ResponseError::try_from_code(code) {
            Some(ResponseError::Unknown(_)) | None => format!("UNKNOWN_ERROR_CODE_{code}"),
            Some(e) => kafka_error_name(&e.to_string()),
        };
        ClientError::Broker {
            code,
            name,
            message,
        }
    }

    /// Worth retrying after a metadata refresh and a backoff.
    pub fn is_retriable(&self) -> bool {
        match self {
            ClientError::Connection { .. } | ClientError::Timeout(_) => true,
            ClientError::Broker { code, .. } => {
                ResponseError::try_from_code(*code).is_some_and(|e| e.is_retriable())
            }
            _ => false,
        }
    }
}

/// Kafka's spelling of an error name: `TopicAlreadyExists` becomes `TOPIC_ALREADY_EXISTS`
/// (and of any enum name Kafka writes so: `IdempotentWrite`, `IDEMPOTENT_WRITE`).
pub fn kafka_error_name(camel: &str) -> String {
    let mut name = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.char_indices() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// Converts a response's error code into a result.
pub fn check(code: i16, message: Option<&str>) -> Result<(), ClientError> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::from_code(code, message.map(str::to_string)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_carry_kafka_names() {
        let e = ClientError::from_code(36, Some("Topic 'x' already exists.".into()));
        assert_eq!(
            e.to_string(),
            "TOPIC_ALREADY_EXISTS: Topic 'x' already exists."
        );
        assert_eq!(
            ClientError::from_code(3, None).to_string(),
            "UNKNOWN_TOPIC_OR_PARTITION"
        );
        assert_eq!(
            ClientError::from_code(9999, None).to_string(),
            "UNKNOWN_ERROR_CODE_9999"
        );
    }
}
