/// Expected failures of group operations. The server maps each to a Kafka error code
/// in `headway_server::errors`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("the group id is empty")]
    InvalidGroupId,
    #[error("the session timeout is outside the broker's allowed range")]
    InvalidSessionTimeout,
    #[error("the member id is unknown to the group")]
    UnknownMemberId,
    #[error("the generation is not the group's current one")]
    IllegalGeneration,
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    #[error("the member's protocols share none with the group")]
    InconsistentGroupProtocol,
    #[error("rejoin with the member id given in this answer")]
    MemberIdRequired,
    #[error("another member with the same group.instance.id replaced this one")]
    FencedInstanceId,
    #[error("the group still has members")]
    NonEmptyGroup,
    #[error("the group does not exist")]
    GroupIdNotFound,
    #[error("the group has reached its maximum number of members")]
    GroupMaxSizeReached,
    #[error("offset metadata is longer than the limit")]
    OffsetMetadataTooLarge,
    #[error("the group coordinator is loading or failed to store offsets")]
    CoordinatorNotAvailable,
    #[error("this broker does not coordinate the group: another leads its partition")]
    NotCoordinator,
    #[error("this broker is still loading the group's partition")]
    CoordinatorLoadInProgress,
    #[error("open transactions hold as many pending offsets as the broker keeps")]
    TooManyPendingOffsets,
    #[error("the request is malformed")]
    InvalidRequest,
    #[error("the subscription's regular expression is not valid")]
    InvalidRegularExpression,
    #[error("the server-side assignor is not served")]
    UnsupportedAssignor,
    #[error("the static member's instance id is still held by another member")]
    UnreleasedInstanceId,
    #[error("the member epoch is fenced: the member must give up its partitions and rejoin")]
    FencedMemberEpoch,
    #[error("the member epoch is stale")]
    StaleMemberEpoch,
    #[error("a member of a consumer group must commit with OffsetCommit v9 or later")]
    UnsupportedVersion,
}
