//! The remote tier's section of the broker's settings: the `remote_storage_*` keys of
//! the config file (flag `--<name>`, environment variable `HEADWAY_<NAME>`, as every
//! section's). An empty `remote_storage_endpoint` means no remote tier: topics cannot
//! be tiered.

use serde::{Deserialize, Serialize};

#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TierSettings {
    /// The S3-compatible endpoint, `http://` or `https://` (empty: no remote tier).
    pub remote_storage_endpoint: String,
    /// The bucket; it must exist.
    pub remote_storage_bucket: String,
    pub remote_storage_region: String,
    pub remote_storage_access_key_id: String,
    pub remote_storage_secret_access_key: String,
    /// Every object's name starts with it (several brokers' clusters can share a bucket).
    pub remote_storage_prefix: String,
    /// How often the uploader looks for sealed segments to copy and remote segments
    /// past retention.
    pub remote_storage_upload_interval_ms: u64,
}

impl Default for TierSettings {
    fn default() -> Self {
        TierSettings {
            remote_storage_endpoint: String::new(),
            remote_storage_bucket: String::new(),
            remote_storage_region: "us-east-1".into(),
            remote_storage_access_key_id: String::new(),
            remote_storage_secret_access_key: String::new(),
            remote_storage_prefix: "headway".into(),
            remote_storage_upload_interval_ms: 1_000,
        }
    }
}

/// The secret stays out of logs and panics.
impl std::fmt::Debug for TierSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TierSettings")
            .field("remote_storage_endpoint", &self.remote_storage_endpoint)
            .field("remote_storage_bucket", &self.remote_storage_bucket)
            .field("remote_storage_region", &self.remote_storage_region)
            .field("remote_storage_prefix", &self.remote_storage_prefix)
            .field(
                "remote_storage_upload_interval_ms",
                &self.remote_storage_upload_interval_ms,
            )
            .finish_non_exhaustive()
    }
}

impl TierSettings {
    /// Whether a remote tier is configured.
    pub fn enabled(&self) -> bool {
        !self.remote_storage_endpoint.is_empty()
    }

    /// Checks what serde cannot: with an endpoint, a bucket and an interval.
    pub fn validate(&self) -> Result<(), String> {
        if !self.enabled() {
            return Ok(());
        }
        let scheme_ok = self.remote_storage_endpoint.starts_with("http://")
            || self.remote_storage_endpoint.starts_with("https://");
        if !scheme_ok {
            return Err(format!(
                "remote_storage_endpoint {:?}: must start with http:// or https://",
                self.remote_storage_endpoint
            ));
        }
        if self.remote_storage_bucket.is_empty() {
            return Err("remote_storage_endpoint needs remote_storage_bucket".into());
        }
        if self.remote_storage_upload_interval_ms == 0 {
            return Err("remote_storage_upload_interval_ms must be above 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_needs_a_scheme_and_a_bucket_and_the_secret_is_never_printed() {
        assert_eq!(TierSettings::default().validate(), Ok(()));
        let mut s = TierSettings {
            remote_storage_endpoint: "127.0.0.1:9000".into(),
            remote_storage_secret_access_key: "hunter2".into(),
            ..TierSettings::default()
        };
        assert!(s.validate().unwrap_err().contains("http://"));
        s.remote_storage_endpoint = "http://127.0.0.1:9000".into();
        assert!(s.validate().unwrap_err().contains("bucket"));
        s.remote_storage_bucket = "tier".into();
        assert_eq!(s.validate(), Ok(()));
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
