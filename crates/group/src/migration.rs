//! Kafka's `group.consumer.migration.policy`: which online conversions between classic
//! groups and consumer groups the coordinator serves. A setting of [`crate::GroupConfig`];
//! the conversions themselves are in `state::convert`.

/// Kafka's `group.consumer.migration.policy`: which online conversions are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationPolicy {
    /// Both ways (Kafka's default).
    #[default]
    Bidirectional,
    /// Classic to consumer only.
    Upgrade,
    /// Consumer to classic only.
    Downgrade,
    /// Neither: a group changes type only when empty.
    Disabled,
}

impl MigrationPolicy {
    pub const NAMES: [&'static str; 4] = ["bidirectional", "upgrade", "downgrade", "disabled"];

    pub fn parse(name: &str) -> Option<MigrationPolicy> {
        match name.to_ascii_lowercase().as_str() {
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "disabled" => Some(MigrationPolicy::Disabled),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MigrationPolicy::Bidirectional => "bidirectional",
            MigrationPolicy::Upgrade => "upgrade",
            MigrationPolicy::Downgrade => "downgrade",
            MigrationPolicy::Disabled => "disabled",
        }
    }

    pub(crate) fn upgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade
        )
    }

    pub(crate) fn downgrades(self) -> bool {
        matches!(
            self,
            MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade
        )
    }
}
