use kafka_protocol::ResponseError;

/// Expected failures of client operations.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    #[error("connection to {addr}: {reason}")]
    Connection { addr: String, reason: String },
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The broker answered with a Kafka error code.
    #[error("broker error {code} ({name}){}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
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
    #[error("the client is closed")]
    Closed,
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    pub fn from_code(code: i16, message: Option<String>) -> ClientError {
        let name = match ResponseError::try_from_code(code) {
            Some(e) => format!("{e:?}"),
            None => "UNKNOWN".to_string(),
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

/// Converts a response's error code into a result.
pub fn check(code: i16, message: Option<&str>) -> Result<(), ClientError> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::from_code(code, message.map(str::to_string)))
    }
}
