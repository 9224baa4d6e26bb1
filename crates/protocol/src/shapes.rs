//! The layout of every request body this broker decodes, for the walk in
//! [`crate::shape`]: for each API, its structs' fields in wire order with the versions
//! at which each is present, and their known tagged fields.
//!
//! The layouts are those of the Kafka protocol's request schemas as `kafka-protocol`
//! 0.18 decodes them (versions beyond what the broker serves are included where the
//! crate decodes them). Each struct's in-memory size is taken from the crate's type,
//! so the walk charges exactly what the decoder allocates per array element. When the
//! crate is upgraded, `shape`'s tests generate bodies from these tables and check that
//! the crate decodes each to the last byte; a field added or moved upstream fails there.

use kafka_protocol::messages::*;
use std::mem::size_of;

/// How a request body is laid out, for the versions `kafka-protocol` decodes.
pub(crate) struct Message {
    pub api_key: ApiKey,
    /// The oldest version `kafka-protocol` decodes (older ones have other layouts).
    pub min_version: i16,
    /// First version with flexible encoding (compact strings and arrays, tagged fields).
    pub flexible_min: i16,
    pub root: &'static Struct,
}

/// A struct: its fields in wire order and its known tagged fields.
pub(crate) struct Struct {
    /// In-memory size of the decoded struct (an array element's cost).
    pub size: usize,
    pub fields: &'static [Field],
    pub tags: &'static [Tag],
}

/// A field present at versions `min..=max`.
pub(crate) struct Field {
    pub min: i16,
    pub max: i16,
    pub kind: Kind,
}

/// A known tagged field, valid at versions `min..=max`.
pub(crate) struct Tag {
    pub tag: u32,
    pub min: i16,
    pub max: i16,
    pub kind: Kind,
}

pub(crate) enum Kind {
    /// A fixed-width value (integers, booleans, UUIDs) of this many bytes.
    Fixed(usize),
    /// A string, nullable or not (the walk does not distinguish).
    Str,
    /// A byte string (records, protocol metadata, assignments).
    Bytes,
    Array(Elem),
    Struct(&'static Struct),
}

pub(crate) enum Elem {
    /// Fixed-width elements: wire bytes, in-memory bytes.
    Fixed(usize, usize),
    Str,
    Struct(&'static Struct),
}

pub(crate) const fn field(min: i16, max: i16, kind: Kind) -> Field {
    Field { min, max, kind }
}

pub(crate) const fn tag(tag: u32, min: i16, max: i16, kind: Kind) -> Tag {
    Tag {
        tag,
        min,
        max,
        kind,
    }
}

pub(crate) static MESSAGES: &[Message] = &[
    Message {
        api_key: ApiKey::Produce,
        min_version: 3,
        flexible_min: 9,
        root: &PRODUCE,
    },
    Message {
        api_key: ApiKey::Fetch,
        min_version: 4,
        flexible_min: 12,
        root: &FETCH,
    },
    Message {
        api_key: ApiKey::ListOffsets,
        min_version: 1,
        flexible_min: 6,
        root: &LIST_OFFSETS,
    },
    Message {
        api_key: ApiKey::OffsetForLeaderEpoch,
        min_version: 2,
        flexible_min: 4,
        root: &OFFSET_FOR_LEADER_EPOCH,
    },
    Message {
        api_key: ApiKey::Metadata,
        min_version: 0,
        flexible_min: 9,
        root: &METADATA,
    },
    Message {
        api_key: ApiKey::ApiVersions,
        min_version: 0,
        flexible_min: 3,
        root: &API_VERSIONS,
    },
    Message {
        api_key: ApiKey::CreateTopics,
        min_version: 2,
        flexible_min: 5,
        root: &CREATE_TOPICS,
    },
    Message {
        api_key: ApiKey::DeleteTopics,
        min_version: 1,
        flexible_min: 4,
        root: &DELETE_TOPICS,
    },
    Message {
        api_key: ApiKey::DescribeConfigs,
        min_version: 1,
        flexible_min: 4,
        root: &DESCRIBE_CONFIGS,
    },
    Message {
        api_key: ApiKey::FindCoordinator,
        min_version: 0,
        flexible_min: 3,
        root: &FIND_COORDINATOR,
    },
    Message {
        api_key: ApiKey::JoinGroup,
        min_version: 0,
        flexible_min: 6,
        root: &JOIN_GROUP,
    },
    Message {
        api_key: ApiKey::SyncGroup,
        min_version: 0,
        flexible_min: 4,
        root: &SYNC_GROUP,
    },
    Message {
        api_key: ApiKey::Heartbeat,
        min_version: 0,
        flexible_min: 4,
        root: &HEARTBEAT,
    },
    Message {
        api_key: ApiKey::LeaveGroup,
        min_version: 0,
        flexible_min: 4,
        root: &LEAVE_GROUP,
    },
    Message {
        api_key: ApiKey::OffsetCommit,
        min_version: 2,
        flexible_min: 8,
        root: &OFFSET_COMMIT,
    },
    Message {
        api_key: ApiKey::OffsetFetch,
        min_version: 1,
        flexible_min: 6,
        root: &OFFSET_FETCH,
    },
    Message {
        api_key: ApiKey::ListGroups,
        min_version: 0,
        flexible_min: 3,
        root: &LIST_GROUPS,
    },
    Message {
        api_key: ApiKey::DescribeGroups,
        min_version: 0,
        flexible_min: 5,
        root: &DESCRIBE_GROUPS,
    },
    Message {
        api_key: ApiKey::DeleteGroups,
        min_version: 0,
        flexible_min: 2,
        root: &DELETE_GROUPS,
    },
    Message {
        api_key: ApiKey::InitProducerId,
        min_version: 0,
        flexible_min: 2,
        root: &INIT_PRODUCER_ID,
    },
    Message {
        api_key: ApiKey::DescribeCluster,
        min_version: 0,
        flexible_min: 0,
        root: &DESCRIBE_CLUSTER,
    },
    Message {
        api_key: ApiKey::CreatePartitions,
        min_version: 0,
        flexible_min: 2,
        root: &CREATE_PARTITIONS,
    },
    Message {
        api_key: ApiKey::IncrementalAlterConfigs,
        min_version: 0,
        flexible_min: 1,
        root: &INCREMENTAL_ALTER_CONFIGS,
    },
    Message {
        api_key: ApiKey::AlterConfigs,
        min_version: 0,
        flexible_min: 2,
        root: &ALTER_CONFIGS,
    },
    Message {
        api_key: ApiKey::DeleteRecords,
        min_version: 0,
        flexible_min: 2,
        root: &DELETE_RECORDS,
    },
    Message {
        api_key: ApiKey::AddPartitionsToTxn,
        min_version: 0,
        flexible_min: 3,
        root: &ADD_PARTITIONS_TO_TXN,
    },
    Message {
        api_key: ApiKey::WriteTxnMarkers,
        min_version: 1,
        flexible_min: 1,
        root: &WRITE_TXN_MARKERS,
    },
    Message {
        api_key: ApiKey::AddOffsetsToTxn,
        min_version: 0,
        flexible_min: 3,
        root: &ADD_OFFSETS_TO_TXN,
    },
    Message {
        api_key: ApiKey::TxnOffsetCommit,
        min_version: 0,
        flexible_min: 3,
        root: &TXN_OFFSET_COMMIT,
    },
    Message {
        api_key: ApiKey::EndTxn,
        min_version: 0,
        flexible_min: 3,
        root: &END_TXN,
    },
    Message {
        api_key: ApiKey::DescribeTransactions,
        min_version: 0,
        flexible_min: 0,
        root: &DESCRIBE_TRANSACTIONS,
    },
    Message {
        api_key: ApiKey::ListTransactions,
        min_version: 0,
        flexible_min: 0,
        root: &LIST_TRANSACTIONS,
    },
    Message {
        api_key: ApiKey::ConsumerGroupHeartbeat,
        min_version: 0,
        flexible_min: 0,
        root: &CONSUMER_GROUP_HEARTBEAT,
    },
    Message {
        api_key: ApiKey::ConsumerGroupDescribe,
        min_version: 0,
        flexible_min: 0,
        root: &CONSUMER_GROUP_DESCRIBE,
    },
    Message {
        api_key: ApiKey::ReadShareGroupState,
        min_version: 0,
        flexible_min: 0,
        root: &READ_SHARE_GROUP_STATE,
    },
    Message {
        api_key: ApiKey::WriteShareGroupState,
        min_version: 0,
        flexible_min: 0,
        root: &WRITE_SHARE_GROUP_STATE,
    },
    Message {
        api_key: ApiKey::ShareGroupHeartbeat,
        min_version: 1,
        flexible_min: 0,
        root: &SHARE_GROUP_HEARTBEAT,
    },
    Message {
        api_key: ApiKey::ShareGroupDescribe,
        min_version: 1,
        flexible_min: 0,
        root: &SHARE_GROUP_DESCRIBE,
    },
    Message {
        api_key: ApiKey::ShareFetch,
        min_version: 1,
        flexible_min: 0,
        root: &SHARE_FETCH,
    },
    Message {
        api_key: ApiKey::ShareAcknowledge,
        min_version: 1,
        flexible_min: 0,
        root: &SHARE_ACKNOWLEDGE,
    },
    Message {
        api_key: ApiKey::DescribeShareGroupOffsets,
        min_version: 0,
        flexible_min: 0,
        root: &DESCRIBE_SHARE_GROUP_OFFSETS,
    },
    Message {
        api_key: ApiKey::AlterShareGroupOffsets,
        min_version: 0,
        flexible_min: 0,
        root: &ALTER_SHARE_GROUP_OFFSETS,
    },
    Message {
        api_key: ApiKey::DeleteShareGroupOffsets,
        min_version: 0,
        flexible_min: 0,
        root: &DELETE_SHARE_GROUP_OFFSETS,
    },
    Message {
        api_key: ApiKey::CreateAcls,
        min_version: 1,
        flexible_min: 2,
        root: &CREATE_ACLS,
    },
    Message {
        api_key: ApiKey::DescribeAcls,
        min_version: 1,
        flexible_min: 2,
        root: &DESCRIBE_ACLS,
    },
    Message {
        api_key: ApiKey::DeleteAcls,
        min_version: 1,
        flexible_min: 2,
        root: &DELETE_ACLS,
    },
    Message {
        api_key: ApiKey::DescribeUserScramCredentials,
        min_version: 0,
        flexible_min: 0,
        root: &DESCRIBE_USER_SCRAM_CREDENTIALS,
    },
    Message {
        api_key: ApiKey::AlterUserScramCredentials,
        min_version: 0,
        flexible_min: 0,
        root: &ALTER_USER_SCRAM_CREDENTIALS,
    },
    Message {
        api_key: ApiKey::SaslHandshake,
        min_version: 0,
        flexible_min: i16::MAX,
        root: &SASL_HANDSHAKE,
    },
    Message {
        api_key: ApiKey::SaslAuthenticate,
        min_version: 0,
        flexible_min: 2,
        root: &SASL_AUTHENTICATE,
    },
];

static SASL_HANDSHAKE: Struct = Struct {
    size: size_of::<sasl_handshake_request::SaslHandshakeRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // mechanism
    ],
    tags: &[],
};

static SASL_AUTHENTICATE: Struct = Struct {
    size: size_of::<sasl_authenticate_request::SaslAuthenticateRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Bytes), // auth_bytes
    ],
    tags: &[],
};

static PRODUCE_PARTITION_PRODUCE_DATA: Struct = Struct {
    size: size_of::<produce_request::PartitionProduceData>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // index
        field(0, i16::MAX, Kind::Bytes),    // records
    ],
    tags: &[],
};

static PRODUCE: Struct = Struct {
    size: size_of::<produce_request::ProduceRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // transactional_id
        field(0, i16::MAX, Kind::Fixed(2)), // acks
        field(0, i16::MAX, Kind::Fixed(4)), // timeout_ms
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&PRODUCE_TOPIC_PRODUCE_DATA)),
        ), // topic_data
    ],
    tags: &[],
};

static PRODUCE_TOPIC_PRODUCE_DATA: Struct = Struct {
    size: size_of::<produce_request::TopicProduceData>(),
    fields: &[
        field(0, 12, Kind::Str),              // name
        field(13, i16::MAX, Kind::Fixed(16)), // topic_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&PRODUCE_PARTITION_PRODUCE_DATA)),
        ), // partition_data
    ],
    tags: &[],
};

static FETCH_FETCH_PARTITION: Struct = Struct {
    size: size_of::<fetch_request::FetchPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)),  // partition
        field(9, i16::MAX, Kind::Fixed(4)),  // current_leader_epoch
        field(0, i16::MAX, Kind::Fixed(8)),  // fetch_offset
        field(12, i16::MAX, Kind::Fixed(4)), // last_fetched_epoch
        field(5, i16::MAX, Kind::Fixed(8)),  // log_start_offset
        field(0, i16::MAX, Kind::Fixed(4)),  // partition_max_bytes
    ],
    tags: &[
        tag(0, 17, i16::MAX, Kind::Fixed(16)), // replica_directory_id
        tag(1, 18, i16::MAX, Kind::Fixed(8)),  // high_watermark
    ],
};

static FETCH: Struct = Struct {
    size: size_of::<fetch_request::FetchRequest>(),
    fields: &[
        field(0, 14, Kind::Fixed(4)),       // replica_id
        field(0, i16::MAX, Kind::Fixed(4)), // max_wait_ms
        field(0, i16::MAX, Kind::Fixed(4)), // min_bytes
        field(0, i16::MAX, Kind::Fixed(4)), // max_bytes
        field(0, i16::MAX, Kind::Fixed(1)), // isolation_level
        field(7, i16::MAX, Kind::Fixed(4)), // session_id
        field(7, i16::MAX, Kind::Fixed(4)), // session_epoch
        field(0, i16::MAX, Kind::Array(Elem::Struct(&FETCH_FETCH_TOPIC))), // topics
        field(
            7,
            i16::MAX,
            Kind::Array(Elem::Struct(&FETCH_FORGOTTEN_TOPIC)),
        ), // forgotten_topics_data
        field(11, i16::MAX, Kind::Str),     // rack_id
    ],
    tags: &[
        tag(0, 0, i16::MAX, Kind::Str),                           // cluster_id
        tag(1, 15, i16::MAX, Kind::Struct(&FETCH_REPLICA_STATE)), // replica_state
    ],
};

static FETCH_FETCH_TOPIC: Struct = Struct {
    size: size_of::<fetch_request::FetchTopic>(),
    fields: &[
        field(0, 12, Kind::Str),              // topic
        field(13, i16::MAX, Kind::Fixed(16)), // topic_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&FETCH_FETCH_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static FETCH_FORGOTTEN_TOPIC: Struct = Struct {
    size: size_of::<fetch_request::ForgottenTopic>(),
    fields: &[
        field(7, 12, Kind::Str),                                           // topic
        field(13, i16::MAX, Kind::Fixed(16)),                              // topic_id
        field(7, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partitions
    ],
    tags: &[],
};

static FETCH_REPLICA_STATE: Struct = Struct {
    size: size_of::<fetch_request::ReplicaState>(),
    fields: &[
        field(15, i16::MAX, Kind::Fixed(4)), // replica_id
        field(15, i16::MAX, Kind::Fixed(8)), // replica_epoch
    ],
    tags: &[],
};

static OFFSET_FOR_LEADER_EPOCH: Struct = Struct {
    size: size_of::<offset_for_leader_epoch_request::OffsetForLeaderEpochRequest>(),
    fields: &[
        field(3, i16::MAX, Kind::Fixed(4)), // replica_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&OFFSET_FOR_LEADER_EPOCH_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static OFFSET_FOR_LEADER_EPOCH_TOPIC: Struct = Struct {
    size: size_of::<offset_for_leader_epoch_request::OffsetForLeaderTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // topic
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&OFFSET_FOR_LEADER_EPOCH_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static OFFSET_FOR_LEADER_EPOCH_PARTITION: Struct = Struct {
    size: size_of::<offset_for_leader_epoch_request::OffsetForLeaderPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition
        field(2, i16::MAX, Kind::Fixed(4)), // current_leader_epoch
        field(0, i16::MAX, Kind::Fixed(4)), // leader_epoch
    ],
    tags: &[],
};

static LIST_OFFSETS_LIST_OFFSETS_PARTITION: Struct = Struct {
    size: size_of::<list_offsets_request::ListOffsetsPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(4, i16::MAX, Kind::Fixed(4)), // current_leader_epoch
        field(0, i16::MAX, Kind::Fixed(8)), // timestamp
    ],
    tags: &[],
};

static LIST_OFFSETS: Struct = Struct {
    size: size_of::<list_offsets_request::ListOffsetsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // replica_id
        field(2, i16::MAX, Kind::Fixed(1)), // isolation_level
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&LIST_OFFSETS_LIST_OFFSETS_TOPIC)),
        ), // topics
        field(10, i16::MAX, Kind::Fixed(4)), // timeout_ms
    ],
    tags: &[],
};

static LIST_OFFSETS_LIST_OFFSETS_TOPIC: Struct = Struct {
    size: size_of::<list_offsets_request::ListOffsetsTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&LIST_OFFSETS_LIST_OFFSETS_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static METADATA: Struct = Struct {
    size: size_of::<metadata_request::MetadataRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&METADATA_METADATA_REQUEST_TOPIC)),
        ), // topics
        field(4, i16::MAX, Kind::Fixed(1)), // allow_auto_topic_creation
        field(8, 10, Kind::Fixed(1)),       // include_cluster_authorized_operations
        field(8, i16::MAX, Kind::Fixed(1)), // include_topic_authorized_operations
    ],
    tags: &[],
};

static METADATA_METADATA_REQUEST_TOPIC: Struct = Struct {
    size: size_of::<metadata_request::MetadataRequestTopic>(),
    fields: &[
        field(10, i16::MAX, Kind::Fixed(16)), // topic_id
        field(0, i16::MAX, Kind::Str),        // name
    ],
    tags: &[],
};

static API_VERSIONS: Struct = Struct {
    size: size_of::<api_versions_request::ApiVersionsRequest>(),
    fields: &[
        field(3, i16::MAX, Kind::Str), // client_software_name
        field(3, i16::MAX, Kind::Str), // client_software_version
    ],
    tags: &[],
};

static CREATE_TOPICS_CREATABLE_REPLICA_ASSIGNMENT: Struct = Struct {
    size: size_of::<create_topics_request::CreatableReplicaAssignment>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Fixed(4, size_of::<BrokerId>())),
        ), // broker_ids
    ],
    tags: &[],
};

static CREATE_TOPICS_CREATABLE_TOPIC: Struct = Struct {
    size: size_of::<create_topics_request::CreatableTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // name
        field(0, i16::MAX, Kind::Fixed(4)), // num_partitions
        field(0, i16::MAX, Kind::Fixed(2)), // replication_factor
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&CREATE_TOPICS_CREATABLE_REPLICA_ASSIGNMENT)),
        ), // assignments
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&CREATE_TOPICS_CREATABLE_TOPIC_CONFIG)),
        ), // configs
    ],
    tags: &[],
};

static CREATE_TOPICS_CREATABLE_TOPIC_CONFIG: Struct = Struct {
    size: size_of::<create_topics_request::CreatableTopicConfig>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(0, i16::MAX, Kind::Str), // value
    ],
    tags: &[],
};

static CREATE_TOPICS: Struct = Struct {
    size: size_of::<create_topics_request::CreateTopicsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&CREATE_TOPICS_CREATABLE_TOPIC)),
        ), // topics
        field(0, i16::MAX, Kind::Fixed(4)), // timeout_ms
        field(0, i16::MAX, Kind::Fixed(1)), // validate_only
    ],
    tags: &[],
};

static DELETE_TOPICS_DELETE_TOPIC_STATE: Struct = Struct {
    size: size_of::<delete_topics_request::DeleteTopicState>(),
    fields: &[
        field(6, i16::MAX, Kind::Str),       // name
        field(6, i16::MAX, Kind::Fixed(16)), // topic_id
    ],
    tags: &[],
};

static DELETE_TOPICS: Struct = Struct {
    size: size_of::<delete_topics_request::DeleteTopicsRequest>(),
    fields: &[
        field(
            6,
            i16::MAX,
            Kind::Array(Elem::Struct(&DELETE_TOPICS_DELETE_TOPIC_STATE)),
        ), // topics
        field(0, 5, Kind::Array(Elem::Str)), // topic_names
        field(0, i16::MAX, Kind::Fixed(4)),  // timeout_ms
    ],
    tags: &[],
};

static DESCRIBE_CONFIGS: Struct = Struct {
    size: size_of::<describe_configs_request::DescribeConfigsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&DESCRIBE_CONFIGS_DESCRIBE_CONFIGS_RESOURCE)),
        ), // resources
        field(0, i16::MAX, Kind::Fixed(1)), // include_synonyms
        field(3, i16::MAX, Kind::Fixed(1)), // include_documentation
    ],
    tags: &[],
};

static DESCRIBE_CONFIGS_DESCRIBE_CONFIGS_RESOURCE: Struct = Struct {
    size: size_of::<describe_configs_request::DescribeConfigsResource>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(1)),         // resource_type
        field(0, i16::MAX, Kind::Str),              // resource_name
        field(0, i16::MAX, Kind::Array(Elem::Str)), // configuration_keys
    ],
    tags: &[],
};

static FIND_COORDINATOR: Struct = Struct {
    size: size_of::<find_coordinator_request::FindCoordinatorRequest>(),
    fields: &[
        field(0, 3, Kind::Str),                     // key
        field(1, i16::MAX, Kind::Fixed(1)),         // key_type
        field(4, i16::MAX, Kind::Array(Elem::Str)), // coordinator_keys
    ],
    tags: &[],
};

static JOIN_GROUP: Struct = Struct {
    size: size_of::<join_group_request::JoinGroupRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Fixed(4)), // session_timeout_ms
        field(1, i16::MAX, Kind::Fixed(4)), // rebalance_timeout_ms
        field(0, i16::MAX, Kind::Str),      // member_id
        field(5, i16::MAX, Kind::Str),      // group_instance_id
        field(0, i16::MAX, Kind::Str),      // protocol_type
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&JOIN_GROUP_JOIN_GROUP_REQUEST_PROTOCOL)),
        ), // protocols
        field(8, i16::MAX, Kind::Str),      // reason
    ],
    tags: &[],
};

static JOIN_GROUP_JOIN_GROUP_REQUEST_PROTOCOL: Struct = Struct {
    size: size_of::<join_group_request::JoinGroupRequestProtocol>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),   // name
        field(0, i16::MAX, Kind::Bytes), // metadata
    ],
    tags: &[],
};

static SYNC_GROUP: Struct = Struct {
    size: size_of::<sync_group_request::SyncGroupRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Fixed(4)), // generation_id
        field(0, i16::MAX, Kind::Str),      // member_id
        field(3, i16::MAX, Kind::Str),      // group_instance_id
        field(5, i16::MAX, Kind::Str),      // protocol_type
        field(5, i16::MAX, Kind::Str),      // protocol_name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SYNC_GROUP_SYNC_GROUP_REQUEST_ASSIGNMENT)),
        ), // assignments
    ],
    tags: &[],
};

static SYNC_GROUP_SYNC_GROUP_REQUEST_ASSIGNMENT: Struct = Struct {
    size: size_of::<sync_group_request::SyncGroupRequestAssignment>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),   // member_id
        field(0, i16::MAX, Kind::Bytes), // assignment
    ],
    tags: &[],
};

static HEARTBEAT: Struct = Struct {
    size: size_of::<heartbeat_request::HeartbeatRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Fixed(4)), // generation_id
        field(0, i16::MAX, Kind::Str),      // member_id
        field(3, i16::MAX, Kind::Str),      // group_instance_id
    ],
    tags: &[],
};

static LEAVE_GROUP: Struct = Struct {
    size: size_of::<leave_group_request::LeaveGroupRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // group_id
        field(0, 2, Kind::Str),        // member_id
        field(
            3,
            i16::MAX,
            Kind::Array(Elem::Struct(&LEAVE_GROUP_MEMBER_IDENTITY)),
        ), // members
    ],
    tags: &[],
};

static LEAVE_GROUP_MEMBER_IDENTITY: Struct = Struct {
    size: size_of::<leave_group_request::MemberIdentity>(),
    fields: &[
        field(3, i16::MAX, Kind::Str), // member_id
        field(3, i16::MAX, Kind::Str), // group_instance_id
        field(5, i16::MAX, Kind::Str), // reason
    ],
    tags: &[],
};

static OFFSET_COMMIT: Struct = Struct {
    size: size_of::<offset_commit_request::OffsetCommitRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Fixed(4)), // generation_id_or_member_epoch
        field(0, i16::MAX, Kind::Str),      // member_id
        field(7, i16::MAX, Kind::Str),      // group_instance_id
        field(0, 4, Kind::Fixed(8)),        // retention_time_ms
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&OFFSET_COMMIT_OFFSET_COMMIT_REQUEST_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static OFFSET_COMMIT_OFFSET_COMMIT_REQUEST_PARTITION: Struct = Struct {
    size: size_of::<offset_commit_request::OffsetCommitRequestPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(0, i16::MAX, Kind::Fixed(8)), // committed_offset
        field(6, i16::MAX, Kind::Fixed(4)), // committed_leader_epoch
        field(0, i16::MAX, Kind::Str),      // committed_metadata
    ],
    tags: &[],
};

static OFFSET_COMMIT_OFFSET_COMMIT_REQUEST_TOPIC: Struct = Struct {
    size: size_of::<offset_commit_request::OffsetCommitRequestTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&OFFSET_COMMIT_OFFSET_COMMIT_REQUEST_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static OFFSET_FETCH: Struct = Struct {
    size: size_of::<offset_fetch_request::OffsetFetchRequest>(),
    fields: &[
        field(0, 7, Kind::Str), // group_id
        field(
            0,
            7,
            Kind::Array(Elem::Struct(&OFFSET_FETCH_OFFSET_FETCH_REQUEST_TOPIC)),
        ), // topics
        field(
            8,
            i16::MAX,
            Kind::Array(Elem::Struct(&OFFSET_FETCH_OFFSET_FETCH_REQUEST_GROUP)),
        ), // groups
        field(7, i16::MAX, Kind::Fixed(1)), // require_stable
    ],
    tags: &[],
};

static OFFSET_FETCH_OFFSET_FETCH_REQUEST_GROUP: Struct = Struct {
    size: size_of::<offset_fetch_request::OffsetFetchRequestGroup>(),
    fields: &[
        field(8, i16::MAX, Kind::Str),      // group_id
        field(9, i16::MAX, Kind::Str),      // member_id
        field(9, i16::MAX, Kind::Fixed(4)), // member_epoch
        field(
            8,
            i16::MAX,
            Kind::Array(Elem::Struct(&OFFSET_FETCH_OFFSET_FETCH_REQUEST_TOPICS)),
        ), // topics
    ],
    tags: &[],
};

static OFFSET_FETCH_OFFSET_FETCH_REQUEST_TOPIC: Struct = Struct {
    size: size_of::<offset_fetch_request::OffsetFetchRequestTopic>(),
    fields: &[
        field(0, 7, Kind::Str),                                     // name
        field(0, 7, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partition_indexes
    ],
    tags: &[],
};

static OFFSET_FETCH_OFFSET_FETCH_REQUEST_TOPICS: Struct = Struct {
    size: size_of::<offset_fetch_request::OffsetFetchRequestTopics>(),
    fields: &[
        field(8, i16::MAX, Kind::Str), // name
        field(8, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partition_indexes
    ],
    tags: &[],
};

static LIST_GROUPS: Struct = Struct {
    size: size_of::<list_groups_request::ListGroupsRequest>(),
    fields: &[
        field(4, i16::MAX, Kind::Array(Elem::Str)), // states_filter
        field(5, i16::MAX, Kind::Array(Elem::Str)), // types_filter
    ],
    tags: &[],
};

static DESCRIBE_GROUPS: Struct = Struct {
    size: size_of::<describe_groups_request::DescribeGroupsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Array(Elem::Str)), // groups
        field(3, i16::MAX, Kind::Fixed(1)),         // include_authorized_operations
    ],
    tags: &[],
};

static DELETE_GROUPS: Struct = Struct {
    size: size_of::<delete_groups_request::DeleteGroupsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Array(Elem::Str)), // groups_names
    ],
    tags: &[],
};

static INIT_PRODUCER_ID: Struct = Struct {
    size: size_of::<init_producer_id_request::InitProducerIdRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // transactional_id
        field(0, i16::MAX, Kind::Fixed(4)), // transaction_timeout_ms
        field(3, i16::MAX, Kind::Fixed(8)), // producer_id
        field(3, i16::MAX, Kind::Fixed(2)), // producer_epoch
    ],
    tags: &[],
};

static DESCRIBE_CLUSTER: Struct = Struct {
    size: size_of::<describe_cluster_request::DescribeClusterRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(1)), // include_cluster_authorized_operations
        field(1, i16::MAX, Kind::Fixed(1)), // endpoint_type
        field(2, i16::MAX, Kind::Fixed(1)), // include_fenced_brokers
    ],
    tags: &[],
};

static CREATE_PARTITIONS_CREATE_PARTITIONS_ASSIGNMENT: Struct = Struct {
    size: size_of::<create_partitions_request::CreatePartitionsAssignment>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Fixed(4, size_of::<BrokerId>())),
        ), // broker_ids
    ],
    tags: &[],
};

static CREATE_PARTITIONS: Struct = Struct {
    size: size_of::<create_partitions_request::CreatePartitionsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&CREATE_PARTITIONS_CREATE_PARTITIONS_TOPIC)),
        ), // topics
        field(0, i16::MAX, Kind::Fixed(4)), // timeout_ms
        field(0, i16::MAX, Kind::Fixed(1)), // validate_only
    ],
    tags: &[],
};

static CREATE_PARTITIONS_CREATE_PARTITIONS_TOPIC: Struct = Struct {
    size: size_of::<create_partitions_request::CreatePartitionsTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // name
        field(0, i16::MAX, Kind::Fixed(4)), // count
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(
                &CREATE_PARTITIONS_CREATE_PARTITIONS_ASSIGNMENT,
            )),
        ), // assignments
    ],
    tags: &[],
};

static INCREMENTAL_ALTER_CONFIGS_ALTER_CONFIGS_RESOURCE: Struct = Struct {
    size: size_of::<incremental_alter_configs_request::AlterConfigsResource>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(1)), // resource_type
        field(0, i16::MAX, Kind::Str),      // resource_name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&INCREMENTAL_ALTER_CONFIGS_ALTERABLE_CONFIG)),
        ), // configs
    ],
    tags: &[],
};

static INCREMENTAL_ALTER_CONFIGS_ALTERABLE_CONFIG: Struct = Struct {
    size: size_of::<incremental_alter_configs_request::AlterableConfig>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // name
        field(0, i16::MAX, Kind::Fixed(1)), // config_operation
        field(0, i16::MAX, Kind::Str),      // value
    ],
    tags: &[],
};

static INCREMENTAL_ALTER_CONFIGS: Struct = Struct {
    size: size_of::<incremental_alter_configs_request::IncrementalAlterConfigsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(
                &INCREMENTAL_ALTER_CONFIGS_ALTER_CONFIGS_RESOURCE,
            )),
        ), // resources
        field(0, i16::MAX, Kind::Fixed(1)), // validate_only
    ],
    tags: &[],
};

static ALTER_CONFIGS: Struct = Struct {
    size: size_of::<alter_configs_request::AlterConfigsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&ALTER_CONFIGS_ALTER_CONFIGS_RESOURCE)),
        ), // resources
        field(0, i16::MAX, Kind::Fixed(1)), // validate_only
    ],
    tags: &[],
};

static ALTER_CONFIGS_ALTER_CONFIGS_RESOURCE: Struct = Struct {
    size: size_of::<alter_configs_request::AlterConfigsResource>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(1)), // resource_type
        field(0, i16::MAX, Kind::Str),      // resource_name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&ALTER_CONFIGS_ALTERABLE_CONFIG)),
        ), // configs
    ],
    tags: &[],
};

static ALTER_CONFIGS_ALTERABLE_CONFIG: Struct = Struct {
    size: size_of::<alter_configs_request::AlterableConfig>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(0, i16::MAX, Kind::Str), // value
    ],
    tags: &[],
};

static DELETE_RECORDS_DELETE_RECORDS_PARTITION: Struct = Struct {
    size: size_of::<delete_records_request::DeleteRecordsPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(0, i16::MAX, Kind::Fixed(8)), // offset
    ],
    tags: &[],
};

static DELETE_RECORDS: Struct = Struct {
    size: size_of::<delete_records_request::DeleteRecordsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&DELETE_RECORDS_DELETE_RECORDS_TOPIC)),
        ), // topics
        field(0, i16::MAX, Kind::Fixed(4)), // timeout_ms
    ],
    tags: &[],
};

static DELETE_RECORDS_DELETE_RECORDS_TOPIC: Struct = Struct {
    size: size_of::<delete_records_request::DeleteRecordsTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&DELETE_RECORDS_DELETE_RECORDS_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static WRITE_TXN_MARKERS_TOPIC: Struct = Struct {
    size: size_of::<write_txn_markers_request::WritableTxnMarkerTopic>(),
    fields: &[
        field(1, i16::MAX, Kind::Str), // name
        field(1, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partition_indexes
    ],
    tags: &[],
};

static WRITE_TXN_MARKERS_MARKER: Struct = Struct {
    size: size_of::<write_txn_markers_request::WritableTxnMarker>(),
    fields: &[
        field(1, i16::MAX, Kind::Fixed(8)), // producer_id
        field(1, i16::MAX, Kind::Fixed(2)), // producer_epoch
        field(1, i16::MAX, Kind::Fixed(1)), // transaction_result
        field(
            1,
            i16::MAX,
            Kind::Array(Elem::Struct(&WRITE_TXN_MARKERS_TOPIC)),
        ), // topics
        field(1, i16::MAX, Kind::Fixed(4)), // coordinator_epoch
    ],
    tags: &[],
};

static WRITE_TXN_MARKERS: Struct = Struct {
    size: size_of::<write_txn_markers_request::WriteTxnMarkersRequest>(),
    fields: &[field(
        1,
        i16::MAX,
        Kind::Array(Elem::Struct(&WRITE_TXN_MARKERS_MARKER)),
    )], // markers
    tags: &[],
};

static ADD_PARTITIONS_TO_TXN_TOPIC: Struct = Struct {
    size: size_of::<add_partitions_to_txn_request::AddPartitionsToTxnTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(0, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partitions
    ],
    tags: &[],
};

static ADD_PARTITIONS_TO_TXN_TRANSACTION: Struct = Struct {
    size: size_of::<add_partitions_to_txn_request::AddPartitionsToTxnTransaction>(),
    fields: &[
        field(4, i16::MAX, Kind::Str),      // transactional_id
        field(4, i16::MAX, Kind::Fixed(8)), // producer_id
        field(4, i16::MAX, Kind::Fixed(2)), // producer_epoch
        field(4, i16::MAX, Kind::Fixed(1)), // verify_only
        field(
            4,
            i16::MAX,
            Kind::Array(Elem::Struct(&ADD_PARTITIONS_TO_TXN_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static ADD_PARTITIONS_TO_TXN: Struct = Struct {
    size: size_of::<add_partitions_to_txn_request::AddPartitionsToTxnRequest>(),
    fields: &[
        field(
            4,
            i16::MAX,
            Kind::Array(Elem::Struct(&ADD_PARTITIONS_TO_TXN_TRANSACTION)),
        ), // transactions
        field(0, 3, Kind::Str),      // v3_and_below_transactional_id
        field(0, 3, Kind::Fixed(8)), // v3_and_below_producer_id
        field(0, 3, Kind::Fixed(2)), // v3_and_below_producer_epoch
        field(
            0,
            3,
            Kind::Array(Elem::Struct(&ADD_PARTITIONS_TO_TXN_TOPIC)),
        ), // v3_and_below_topics
    ],
    tags: &[],
};

static ADD_OFFSETS_TO_TXN: Struct = Struct {
    size: size_of::<add_offsets_to_txn_request::AddOffsetsToTxnRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // transactional_id
        field(0, i16::MAX, Kind::Fixed(8)), // producer_id
        field(0, i16::MAX, Kind::Fixed(2)), // producer_epoch
        field(0, i16::MAX, Kind::Str),      // group_id
    ],
    tags: &[],
};

static TXN_OFFSET_COMMIT: Struct = Struct {
    size: size_of::<txn_offset_commit_request::TxnOffsetCommitRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // transactional_id
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Fixed(8)), // producer_id
        field(0, i16::MAX, Kind::Fixed(2)), // producer_epoch
        field(3, i16::MAX, Kind::Fixed(4)), // generation_id
        field(3, i16::MAX, Kind::Str),      // member_id
        field(3, i16::MAX, Kind::Str),      // group_instance_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&TXN_OFFSET_COMMIT_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static TXN_OFFSET_COMMIT_TOPIC: Struct = Struct {
    size: size_of::<txn_offset_commit_request::TxnOffsetCommitRequestTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&TXN_OFFSET_COMMIT_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static TXN_OFFSET_COMMIT_PARTITION: Struct = Struct {
    size: size_of::<txn_offset_commit_request::TxnOffsetCommitRequestPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(0, i16::MAX, Kind::Fixed(8)), // committed_offset
        field(2, i16::MAX, Kind::Fixed(4)), // committed_leader_epoch
        field(0, i16::MAX, Kind::Str),      // committed_metadata
    ],
    tags: &[],
};

static END_TXN: Struct = Struct {
    size: size_of::<end_txn_request::EndTxnRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // transactional_id
        field(0, i16::MAX, Kind::Fixed(8)), // producer_id
        field(0, i16::MAX, Kind::Fixed(2)), // producer_epoch
        field(0, i16::MAX, Kind::Fixed(1)), // committed
    ],
    tags: &[],
};

static DESCRIBE_TRANSACTIONS: Struct = Struct {
    size: size_of::<describe_transactions_request::DescribeTransactionsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Array(Elem::Str)), // transactional_ids
    ],
    tags: &[],
};

static LIST_TRANSACTIONS: Struct = Struct {
    size: size_of::<list_transactions_request::ListTransactionsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Array(Elem::Str)), // state_filters
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Fixed(8, size_of::<ProducerId>())),
        ), // producer_id_filters
        field(1, i16::MAX, Kind::Fixed(8)),         // duration_filter
        field(2, i16::MAX, Kind::Str),              // transactional_id_pattern
    ],
    tags: &[],
};

static CONSUMER_GROUP_HEARTBEAT: Struct = Struct {
    size: size_of::<consumer_group_heartbeat_request::ConsumerGroupHeartbeatRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),              // group_id
        field(0, i16::MAX, Kind::Str),              // member_id
        field(0, i16::MAX, Kind::Fixed(4)),         // member_epoch
        field(0, i16::MAX, Kind::Str),              // instance_id
        field(0, i16::MAX, Kind::Str),              // rack_id
        field(0, i16::MAX, Kind::Fixed(4)),         // rebalance_timeout_ms
        field(0, i16::MAX, Kind::Array(Elem::Str)), // subscribed_topic_names
        field(1, i16::MAX, Kind::Str),              // subscribed_topic_regex
        field(0, i16::MAX, Kind::Str),              // server_assignor
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&CONSUMER_GROUP_HEARTBEAT_TOPIC_PARTITIONS)),
        ), // topic_partitions
    ],
    tags: &[],
};

static CONSUMER_GROUP_HEARTBEAT_TOPIC_PARTITIONS: Struct = Struct {
    size: size_of::<consumer_group_heartbeat_request::TopicPartitions>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(16)), // topic_id
        field(0, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partitions
    ],
    tags: &[],
};

static CONSUMER_GROUP_DESCRIBE: Struct = Struct {
    size: size_of::<consumer_group_describe_request::ConsumerGroupDescribeRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Array(Elem::Str)), // group_ids
        field(0, i16::MAX, Kind::Fixed(1)),         // include_authorized_operations
    ],
    tags: &[],
};

static READ_SHARE_GROUP_STATE_PARTITION: Struct = Struct {
    size: size_of::<read_share_group_state_request::PartitionData>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition
        field(0, i16::MAX, Kind::Fixed(4)), // leader_epoch
    ],
    tags: &[],
};

static READ_SHARE_GROUP_STATE_TOPIC: Struct = Struct {
    size: size_of::<read_share_group_state_request::ReadStateData>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(16)), // topic_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&READ_SHARE_GROUP_STATE_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static READ_SHARE_GROUP_STATE: Struct = Struct {
    size: size_of::<read_share_group_state_request::ReadShareGroupStateRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // group_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&READ_SHARE_GROUP_STATE_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static WRITE_SHARE_GROUP_STATE_BATCH: Struct = Struct {
    size: size_of::<write_share_group_state_request::StateBatch>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(8)), // first_offset
        field(0, i16::MAX, Kind::Fixed(8)), // last_offset
        field(0, i16::MAX, Kind::Fixed(1)), // delivery_state
        field(0, i16::MAX, Kind::Fixed(2)), // delivery_count
    ],
    tags: &[],
};

static WRITE_SHARE_GROUP_STATE_PARTITION: Struct = Struct {
    size: size_of::<write_share_group_state_request::PartitionData>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition
        field(0, i16::MAX, Kind::Fixed(4)), // state_epoch
        field(0, i16::MAX, Kind::Fixed(4)), // leader_epoch
        field(0, i16::MAX, Kind::Fixed(8)), // start_offset
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&WRITE_SHARE_GROUP_STATE_BATCH)),
        ), // state_batches
    ],
    tags: &[],
};

static WRITE_SHARE_GROUP_STATE_TOPIC: Struct = Struct {
    size: size_of::<write_share_group_state_request::WriteStateData>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(16)), // topic_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&WRITE_SHARE_GROUP_STATE_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static WRITE_SHARE_GROUP_STATE: Struct = Struct {
    size: size_of::<write_share_group_state_request::WriteShareGroupStateRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // group_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&WRITE_SHARE_GROUP_STATE_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static SHARE_GROUP_HEARTBEAT: Struct = Struct {
    size: size_of::<share_group_heartbeat_request::ShareGroupHeartbeatRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),              // group_id
        field(0, i16::MAX, Kind::Str),              // member_id
        field(0, i16::MAX, Kind::Fixed(4)),         // member_epoch
        field(0, i16::MAX, Kind::Str),              // rack_id
        field(0, i16::MAX, Kind::Array(Elem::Str)), // subscribed_topic_names
    ],
    tags: &[],
};

static SHARE_GROUP_DESCRIBE: Struct = Struct {
    size: size_of::<share_group_describe_request::ShareGroupDescribeRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Array(Elem::Str)), // group_ids
        field(0, i16::MAX, Kind::Fixed(1)),         // include_authorized_operations
    ],
    tags: &[],
};

static SHARE_FETCH: Struct = Struct {
    size: size_of::<share_fetch_request::ShareFetchRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Str),      // member_id
        field(0, i16::MAX, Kind::Fixed(4)), // share_session_epoch
        field(0, i16::MAX, Kind::Fixed(4)), // max_wait_ms
        field(0, i16::MAX, Kind::Fixed(4)), // min_bytes
        field(0, i16::MAX, Kind::Fixed(4)), // max_bytes
        field(1, i16::MAX, Kind::Fixed(4)), // max_records
        field(1, i16::MAX, Kind::Fixed(4)), // batch_size
        field(2, i16::MAX, Kind::Fixed(1)), // share_acquire_mode (`share_v2`)
        field(2, i16::MAX, Kind::Fixed(1)), // is_renew_ack (`share_v2`)
        field(0, i16::MAX, Kind::Array(Elem::Struct(&SHARE_FETCH_TOPIC))), // topics
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SHARE_FETCH_FORGOTTEN_TOPIC)),
        ), // forgotten_topics_data
    ],
    tags: &[],
};

static SHARE_FETCH_TOPIC: Struct = Struct {
    size: size_of::<share_fetch_request::FetchTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(16)), // topic_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SHARE_FETCH_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static SHARE_FETCH_PARTITION: Struct = Struct {
    size: size_of::<share_fetch_request::FetchPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(0, 0, Kind::Fixed(4)),        // partition_max_bytes
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SHARE_FETCH_ACKNOWLEDGEMENT_BATCH)),
        ), // acknowledgement_batches
    ],
    tags: &[],
};

static SHARE_FETCH_ACKNOWLEDGEMENT_BATCH: Struct = Struct {
    size: size_of::<share_fetch_request::AcknowledgementBatch>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(8)), // first_offset
        field(0, i16::MAX, Kind::Fixed(8)), // last_offset
        field(0, i16::MAX, Kind::Array(Elem::Fixed(1, size_of::<i8>()))), // acknowledge_types
    ],
    tags: &[],
};

static SHARE_FETCH_FORGOTTEN_TOPIC: Struct = Struct {
    size: size_of::<share_fetch_request::ForgottenTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(16)), // topic_id
        field(0, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partitions
    ],
    tags: &[],
};

static SHARE_ACKNOWLEDGE: Struct = Struct {
    size: size_of::<share_acknowledge_request::ShareAcknowledgeRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // group_id
        field(0, i16::MAX, Kind::Str),      // member_id
        field(0, i16::MAX, Kind::Fixed(4)), // share_session_epoch
        field(2, i16::MAX, Kind::Fixed(1)), // is_renew_ack (`share_v2`)
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SHARE_ACKNOWLEDGE_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static SHARE_ACKNOWLEDGE_TOPIC: Struct = Struct {
    size: size_of::<share_acknowledge_request::AcknowledgeTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(16)), // topic_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SHARE_ACKNOWLEDGE_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static SHARE_ACKNOWLEDGE_PARTITION: Struct = Struct {
    size: size_of::<share_acknowledge_request::AcknowledgePartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&SHARE_ACKNOWLEDGE_BATCH)),
        ), // acknowledgement_batches
    ],
    tags: &[],
};

static SHARE_ACKNOWLEDGE_BATCH: Struct = Struct {
    size: size_of::<share_acknowledge_request::AcknowledgementBatch>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(8)), // first_offset
        field(0, i16::MAX, Kind::Fixed(8)), // last_offset
        field(0, i16::MAX, Kind::Array(Elem::Fixed(1, size_of::<i8>()))), // acknowledge_types
    ],
    tags: &[],
};

static DESCRIBE_SHARE_GROUP_OFFSETS: Struct = Struct {
    size: size_of::<describe_share_group_offsets_request::DescribeShareGroupOffsetsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&DESCRIBE_SHARE_GROUP_OFFSETS_GROUP)),
        ), // groups
    ],
    tags: &[],
};

static DESCRIBE_SHARE_GROUP_OFFSETS_GROUP: Struct = Struct {
    size: size_of::<describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // group_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&DESCRIBE_SHARE_GROUP_OFFSETS_TOPIC)),
        ), // topics (nullable)
    ],
    tags: &[],
};

static DESCRIBE_SHARE_GROUP_OFFSETS_TOPIC: Struct = Struct {
    size: size_of::<describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // topic_name
        field(0, i16::MAX, Kind::Array(Elem::Fixed(4, size_of::<i32>()))), // partitions
    ],
    tags: &[],
};

static ALTER_SHARE_GROUP_OFFSETS: Struct = Struct {
    size: size_of::<alter_share_group_offsets_request::AlterShareGroupOffsetsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // group_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&ALTER_SHARE_GROUP_OFFSETS_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static ALTER_SHARE_GROUP_OFFSETS_TOPIC: Struct = Struct {
    size: size_of::<alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // topic_name
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&ALTER_SHARE_GROUP_OFFSETS_PARTITION)),
        ), // partitions
    ],
    tags: &[],
};

static ALTER_SHARE_GROUP_OFFSETS_PARTITION: Struct = Struct {
    size: size_of::<alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(4)), // partition_index
        field(0, i16::MAX, Kind::Fixed(8)), // start_offset
    ],
    tags: &[],
};

static DELETE_SHARE_GROUP_OFFSETS: Struct = Struct {
    size: size_of::<delete_share_group_offsets_request::DeleteShareGroupOffsetsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // group_id
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&DELETE_SHARE_GROUP_OFFSETS_TOPIC)),
        ), // topics
    ],
    tags: &[],
};

static DELETE_SHARE_GROUP_OFFSETS_TOPIC: Struct = Struct {
    size: size_of::<delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic>(),
    fields: &[
        field(0, i16::MAX, Kind::Str), // topic_name
    ],
    tags: &[],
};

static CREATE_ACLS_CREATION: Struct = Struct {
    size: size_of::<create_acls_request::AclCreation>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(1)), // resource_type
        field(0, i16::MAX, Kind::Str),      // resource_name
        field(1, i16::MAX, Kind::Fixed(1)), // resource_pattern_type
        field(0, i16::MAX, Kind::Str),      // principal
        field(0, i16::MAX, Kind::Str),      // host
        field(0, i16::MAX, Kind::Fixed(1)), // operation
        field(0, i16::MAX, Kind::Fixed(1)), // permission_type
    ],
    tags: &[],
};

static CREATE_ACLS: Struct = Struct {
    size: size_of::<create_acls_request::CreateAclsRequest>(),
    fields: &[field(
        0,
        i16::MAX,
        Kind::Array(Elem::Struct(&CREATE_ACLS_CREATION)),
    )], // creations
    tags: &[],
};

/// DescribeAcls' body, and each filter of DeleteAcls: the same fields.
static DESCRIBE_ACLS: Struct = Struct {
    size: size_of::<describe_acls_request::DescribeAclsRequest>(),
    fields: &[
        field(0, i16::MAX, Kind::Fixed(1)), // resource_type_filter
        field(0, i16::MAX, Kind::Str),      // resource_name_filter
        field(1, i16::MAX, Kind::Fixed(1)), // pattern_type_filter
        field(0, i16::MAX, Kind::Str),      // principal_filter
        field(0, i16::MAX, Kind::Str),      // host_filter
        field(0, i16::MAX, Kind::Fixed(1)), // operation
        field(0, i16::MAX, Kind::Fixed(1)), // permission_type
    ],
    tags: &[],
};

static DELETE_ACLS_FILTER: Struct = Struct {
    size: size_of::<delete_acls_request::DeleteAclsFilter>(),
    fields: DESCRIBE_ACLS.fields,
    tags: &[],
};

static DESCRIBE_USER_SCRAM_CREDENTIALS_USER: Struct = Struct {
    size: size_of::<describe_user_scram_credentials_request::UserName>(),
    fields: &[field(0, i16::MAX, Kind::Str)], // name
    tags: &[],
};

static DESCRIBE_USER_SCRAM_CREDENTIALS: Struct = Struct {
    size: size_of::<describe_user_scram_credentials_request::DescribeUserScramCredentialsRequest>(),
    fields: &[field(
        0,
        i16::MAX,
        Kind::Array(Elem::Struct(&DESCRIBE_USER_SCRAM_CREDENTIALS_USER)),
    )], // users (nullable)
    tags: &[],
};

static ALTER_USER_SCRAM_CREDENTIALS_DELETION: Struct = Struct {
    size: size_of::<alter_user_scram_credentials_request::ScramCredentialDeletion>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // name
        field(0, i16::MAX, Kind::Fixed(1)), // mechanism
    ],
    tags: &[],
};

static ALTER_USER_SCRAM_CREDENTIALS_UPSERTION: Struct = Struct {
    size: size_of::<alter_user_scram_credentials_request::ScramCredentialUpsertion>(),
    fields: &[
        field(0, i16::MAX, Kind::Str),      // name
        field(0, i16::MAX, Kind::Fixed(1)), // mechanism
        field(0, i16::MAX, Kind::Fixed(4)), // iterations
        field(0, i16::MAX, Kind::Bytes),    // salt
        field(0, i16::MAX, Kind::Bytes),    // salted_password
    ],
    tags: &[],
};

static ALTER_USER_SCRAM_CREDENTIALS: Struct = Struct {
    size: size_of::<alter_user_scram_credentials_request::AlterUserScramCredentialsRequest>(),
    fields: &[
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&ALTER_USER_SCRAM_CREDENTIALS_DELETION)),
        ), // deletions
        field(
            0,
            i16::MAX,
            Kind::Array(Elem::Struct(&ALTER_USER_SCRAM_CREDENTIALS_UPSERTION)),
        ), // upsertions
    ],
    tags: &[],
};

static DELETE_ACLS: Struct = Struct {
    size: size_of::<delete_acls_request::DeleteAclsRequest>(),
    fields: &[field(
        0,
        i16::MAX,
        Kind::Array(Elem::Struct(&DELETE_ACLS_FILTER)),
    )], // filters
    tags: &[],
};
