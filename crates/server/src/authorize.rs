//! Authorization of requests (Kafka's ACL authorizer, `docs/security.md`): off by
//! default, everything allowed; with `authorizer = "acl"` every handler asks
//! [`allowed`] (or [`Subject::visible`], for what a listing leaves out) before it acts
//! on a resource. The ACLs and their index are the [`crate::authorizer::Authorizer`]'s.

use crate::authorizer::{Subject, CLUSTER};
use crate::call::Call;
use headway_auth::acl::{
    AclBinding, AclFilter, Operation, PatternType, Permission, Request, ResourceType,
};
use headway_broker::BrokerError;
use headway_protocol::kafka_protocol::ResponseError;
use std::sync::Arc;

/// Who `call` acts as, for checks made after the handler's synchronous part (in a
/// reply's future).
pub fn subject(call: &Call<'_>) -> Subject {
    Subject::new(
        Arc::clone(&call.ctx.authorizer),
        call.conn.principal(),
        call.conn.peer,
    )
}

/// Whether the call's principal may do `operation` on the resource; a denial is
/// counted and logged.
pub fn allowed(call: &Call<'_>, operation: Operation, kind: ResourceType, name: &str) -> bool {
    !call.ctx.authorizer.enabled() || subject(call).allowed(operation, kind, name)
}

/// [`allowed`] on a topic.
pub fn topic(call: &Call<'_>, operation: Operation, name: &str) -> bool {
    allowed(call, operation, ResourceType::Topic, name)
}

/// [`allowed`] on a group.
pub fn group(call: &Call<'_>, operation: Operation, name: &str) -> bool {
    allowed(call, operation, ResourceType::Group, name)
}

/// [`allowed`] on the cluster.
pub fn cluster(call: &Call<'_>, operation: Operation) -> bool {
    allowed(call, operation, ResourceType::Cluster, CLUSTER)
}

/// [`allowed`] on a transactional id.
pub fn transactional_id(call: &Call<'_>, operation: Operation, name: &str) -> bool {
    allowed(call, operation, ResourceType::TransactionalId, name)
}

/// The error of a partition of a topic the principal may not act on.
pub fn topic_denied(topic: &str) -> BrokerError {
    BrokerError::AuthorizationFailed {
        code: ResponseError::TopicAuthorizationFailed.code(),
        resource: format!("topic {topic}"),
    }
}

/// The error of a request on a group the principal may not make.
pub fn group_denied(group_id: &str) -> BrokerError {
    BrokerError::AuthorizationFailed {
        code: ResponseError::GroupAuthorizationFailed.code(),
        resource: format!("group {group_id}"),
    }
}

/// The error of a request on the cluster the principal may not make.
pub fn cluster_denied() -> BrokerError {
    BrokerError::AuthorizationFailed {
        code: ResponseError::ClusterAuthorizationFailed.code(),
        resource: "the cluster".into(),
    }
}

/// TOPIC_AUTHORIZATION_FAILED when the call's principal may not do `operation` on
/// the topic.
pub fn topic_refusal(call: &Call<'_>, operation: Operation, name: &str) -> Option<i16> {
    (!topic(call, operation, name)).then_some(ResponseError::TopicAuthorizationFailed.code())
}

/// The topics of `names` the call's principal may not do `operation` on, each
/// checked (and a denial counted) once.
pub fn denied_topics<'a>(
    call: &Call<'_>,
    operation: Operation,
    names: impl IntoIterator<Item = &'a str>,
) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut denied = std::collections::BTreeSet::new();
    if !call.ctx.authorizer.enabled() {
        return denied;
    }
    for name in names {
        if seen.insert(name) && !topic(call, operation, name) {
            denied.insert(name.to_string());
        }
    }
    denied
}

/// The operations on the cluster the call's principal may do, as the bit set Kafka
/// answers when a client asks for its authorized operations (bit n for operation
/// code n); 0 without Describe on the cluster, as Kafka answers.
pub fn cluster_operations(call: &Call<'_>) -> i32 {
    use Operation::*;
    let subject = subject(call);
    let on_cluster = |op| subject.visible(op, ResourceType::Cluster, CLUSTER);
    if !on_cluster(Describe) {
        return 0;
    }
    [
        Alter,
        AlterConfigs,
        ClusterAction,
        Create,
        Describe,
        DescribeConfigs,
        IdempotentWrite,
    ]
    .into_iter()
    .filter(|op| on_cluster(*op))
    .fold(0, |bits, op| bits | (1 << op.code()))
}

/// GROUP_AUTHORIZATION_FAILED when the call's principal may not do `operation` on
/// the group, for the handlers that answer it as their one error code.
pub fn group_refusal(call: &Call<'_>, operation: Operation, group_id: &str) -> Option<i16> {
    (!group(call, operation, group_id)).then_some(ResponseError::GroupAuthorizationFailed.code())
}

/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED when the call's principal may not do
/// `operation` on the transactional id.
pub fn transactional_id_refusal(call: &Call<'_>, operation: Operation, id: &str) -> Option<i16> {
    (!transactional_id(call, operation, id))
        .then_some(ResponseError::TransactionalIdAuthorizationFailed.code())
}

/// CLUSTER_AUTHORIZATION_FAILED when the call's principal may not do `operation` on
/// the cluster.
pub fn cluster_refusal(call: &Call<'_>, operation: Operation) -> Option<i16> {
    (!cluster(call, operation)).then_some(ResponseError::ClusterAuthorizationFailed.code())
}

/// Whether the call's principal may run an idempotent producer (KIP-679, as Kafka 4
/// checks InitProducerId without a transactional id): IdempotentWrite on the
/// cluster, or Write on any topic.
pub fn idempotent_producer(call: &Call<'_>) -> bool {
    let authorizer = &call.ctx.authorizer;
    if !authorizer.enabled() {
        return true;
    }
    let principal = call.conn.principal();
    let host = call.conn.peer.ip().to_string();
    let write = Request {
        principal: &principal,
        host: &host,
        operation: Operation::Write,
    };
    authorizer.permits_any(&write, ResourceType::Topic) || cluster(call, Operation::IdempotentWrite)
}

/// Whether the call's principal may do `operation` on the cluster, asked before a
/// check on each resource (Create on the cluster allows any topic): a refusal here is
/// neither counted nor logged, the resource's check is.
pub fn visible_on_cluster(call: &Call<'_>, operation: Operation) -> bool {
    !call.ctx.authorizer.enabled()
        || subject(call).visible(operation, ResourceType::Cluster, CLUSTER)
}

/// An ACL's fields as the wire carries them (CreateAcls, DescribeAcls and DeleteAcls
/// filters), before they are checked.
pub struct WireAcl<'a> {
    pub resource_type: i8,
    pub resource_name: Option<&'a str>,
    pub pattern_type: i8,
    pub principal: Option<&'a str>,
    pub host: Option<&'a str>,
    pub operation: i8,
    pub permission: i8,
}

impl WireAcl<'_> {
    /// The filter of DescribeAcls or DeleteAcls; an unknown code is an error.
    pub fn filter(&self) -> Result<AclFilter, String> {
        Ok(AclFilter {
            resource_type: code(ResourceType::from_code(self.resource_type), "resource type")?,
            resource_name: self.resource_name.map(str::to_string),
            pattern_type: code(PatternType::from_code(self.pattern_type), "pattern type")?,
            principal: self.principal.map(str::to_string),
            host: self.host.map(str::to_string),
            operation: code(Operation::from_code(self.operation), "operation")?,
            permission: code(Permission::from_code(self.permission), "permission type")?,
        })
    }

    /// The ACL of CreateAcls (validated when it is added).
    pub fn binding(&self) -> Result<AclBinding, String> {
        let filter = self.filter()?;
        Ok(AclBinding {
            resource_type: filter.resource_type,
            resource_name: filter.resource_name.unwrap_or_default(),
            pattern_type: filter.pattern_type,
            principal: filter.principal.unwrap_or_default(),
            host: filter.host.unwrap_or_default(),
            operation: filter.operation,
            permission: filter.permission,
        })
    }
}

fn code<T>(value: Option<T>, what: &str) -> Result<T, String> {
    value.ok_or_else(|| format!("unknown {what}"))
}

/// The error of an ACL API, if the call may not use it: SECURITY_DISABLED without an
/// authorizer, CLUSTER_AUTHORIZATION_FAILED without `operation` on the cluster (Alter
/// to change ACLs, Describe to list them).
pub fn acl_api_refusal(call: &Call<'_>, operation: Operation) -> Option<i16> {
    if !call.ctx.authorizer.enabled() {
        return Some(ResponseError::SecurityDisabled.code());
    }
    cluster_refusal(call, operation)
}
