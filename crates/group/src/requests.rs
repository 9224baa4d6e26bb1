//! JoinGroup and SyncGroup, the classic group protocol's requests and answers, as plain
//! values converted from and to the wire by the handlers. The classic state machine
//! ([`crate::state`]) serves them, and so does a consumer group for its classic members
//! (`consumer::state`'s `classic_members`), so they sit below both.

use crate::{GenerationId, GroupError};
use bytes::Bytes;

#[derive(Debug)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// (name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a new member must first learn its id (MEMBER_ID_REQUIRED).
    pub require_known_member_id: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A JoinGroup answer. On error only `member_id` may be set (MEMBER_ID_REQUIRED).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinResult {
    pub error: Option<GroupError>,
    /// `None` on error (the wire's -1).
    pub generation_id: Option<GenerationId>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Filled for the leader only.
    pub members: Vec<JoinedMember>,
}

impl JoinResult {
    pub(crate) fn error(error: GroupError, member_id: &str) -> JoinResult {
        JoinResult {
            error: Some(error),
            generation_id: None,
            member_id: member_id.to_string(),
            ..JoinResult::default()
        }
    }
}

#[derive(Debug)]
pub struct SyncRequest {
    pub group_id: String,
    /// `None` skips the generation check (the wire's -1).
    pub generation_id: Option<GenerationId>,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncResult {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    pub(crate) fn error(error: GroupError) -> SyncResult {
        SyncResult {
            error: Some(error),
            ..SyncResult::default()
        }
    }
}
