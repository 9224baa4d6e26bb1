//! Security administration, for `headway user` and `headway acl` and any tool that
//! manages a Kafka-compatible cluster: SCRAM credentials (DescribeUserScramCredentials,
//! AlterUserScramCredentials) and ACLs (CreateAcls, DescribeAcls, DeleteAcls).
//!
//! Codes (mechanisms, resource and pattern types, operations, permissions) are Kafka's
//! wire codes; naming them is the caller's business. A SCRAM upsertion carries the
//! salted password the caller computed: the password itself is never sent.

use crate::cluster::Cluster;
use crate::error::{check, ClientError};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest,
    DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use serde::Serialize;

use crate::admin::ItemResult;

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A user's SCRAM credential as DescribeUserScramCredentials tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScramCredentialInfo {
    /// 1: SCRAM-SHA-256, 2: SCRAM-SHA-512.
    pub mechanism: i8,
    pub iterations: i32,
}

/// One change of AlterUserScramCredentials.
#[derive(Debug, Clone)]
pub enum ScramAlteration {
    Upsert {
        user: String,
        mechanism: i8,
        iterations: i32,
        salt: Vec<u8>,
        salted_password: Vec<u8>,
    },
    Delete {
        user: String,
        mechanism: i8,
    },
}

/// An ACL, or (with `None` names and the `ANY` codes) a filter of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AclEntry {
    pub resource_type: i8,
    pub resource_name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl Cluster {
    /// Sends `request` to any broker, with the cluster's retries.
    async fn to_any_broker<R: Request>(&self, request: &R) -> Result<R::Response, ClientError> {
        self.retry(|| async { self.any_broker().await?.request(request).await })
            .await
    }

    /// The credentials of `users` (of every user when empty), per user.
    pub async fn describe_user_scram_credentials(
        &self,
        users: &[String],
    ) -> Result<Vec<ItemResult<Vec<ScramCredentialInfo>>>, ClientError> {
        let names = users
            .iter()
            .map(|u| UserName::default().with_name(str_bytes(u)))
            .collect();
        let request = DescribeUserScramCredentialsRequest::default()
            .with_users((!users.is_empty()).then_some(names));
        let response = self.to_any_broker(&request).await?;
        check(response.error_code, response.error_message.as_deref())?;
        Ok(response
            .results
            .into_iter()
            .map(|r| {
                let result = check(r.error_code, r.error_message.as_deref()).map(|()| {
                    r.credential_infos
                        .iter()
                        .map(|c| ScramCredentialInfo {
                            mechanism: c.mechanism,
                            iterations: c.iterations,
                        })
                        .collect()
                });
                (r.user.to_string(), result)
            })
            .collect())
    }

    /// Applies the alterations in one request; one result per user.
    pub async fn alter_user_scram_credentials(
        &self,
        alterations: &[ScramAlteration],
    ) -> Result<Vec<ItemResult<()>>, ClientError> {
        let mut request = AlterUserScramCredentialsRequest::default();
        for alteration in alterations {
            match alteration {
                ScramAlteration::Upsert {
                    user,
                    mechanism,
                    iterations,
                    salt,
                    salted_password,
                } => request.upsertions.push(
                    ScramCredentialUpsertion::default()
                        .with_name(str_bytes(user))
                        .with_mechanism(*mechanism)
                        .with_iterations(*iterations)
                        .with_salt(salt.clone().into())
                        .with_salted_password(salted_password.clone().into()),
                ),
                ScramAlteration::Delete { user, mechanism } => request.deletions.push(
                    ScramCredentialDeletion::default()
                        .with_name(str_bytes(user))
                        .with_mechanism(*mechanism),
                ),
            }
        }
        let response = self.to_any_broker(&request).await?;
        Ok(response
            .results
            .into_iter()
            .map(|r| {
                let result = check(r.error_code, r.error_message.as_deref());
                (r.user.to_string(), result)
            })
            .collect())
    }

    /// Creates ACLs in one request; one result per ACL, in order.
    pub async fn create_acls(
        &self,
        acls: &[AclEntry],
    ) -> Result<Vec<Result<(), ClientError>>, ClientError> {
        let creations = acls
            .iter()
            .map(|a| {
                AclCreation::default()
                    .with_resource_type(a.resource_type)
                    .with_resource_name(str_bytes(a.resource_name.as_deref().unwrap_or("")))
                    .with_resource_pattern_type(a.pattern_type)
                    .with_principal(str_bytes(a.principal.as_deref().unwrap_or("")))
                    .with_host(str_bytes(a.host.as_deref().unwrap_or("*")))
                    .with_operation(a.operation)
                    .with_permission_type(a.permission)
            })
            .collect();
        let request = CreateAclsRequest::default().with_creations(creations);
        let response = self.to_any_broker(&request).await?;
        Ok(response
            .results
            .into_iter()
            .map(|r| check(r.error_code, r.error_message.as_deref()))
            .collect())
    }

    /// The ACLs `filter` matches.
    pub async fn describe_acls(&self, filter: &AclEntry) -> Result<Vec<AclEntry>, ClientError> {
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type)
            .with_resource_name_filter(filter.resource_name.as_deref().map(str_bytes))
            .with_pattern_type_filter(filter.pattern_type)
            .with_principal_filter(filter.principal.as_deref().map(str_bytes))
            .with_host_filter(filter.host.as_deref().map(str_bytes))
            .with_operation(filter.operation)
            .with_permission_type(filter.permission);
        let response = self.to_any_broker(&request).await?;
        check(response.error_code, response.error_message.as_deref())?;
        let mut acls = Vec::new();
        for resource in response.resources {
            for acl in resource.acls {
                acls.push(AclEntry {
                    resource_type: resource.resource_type,
                    resource_name: Some(resource.resource_name.to_string()),
                    pattern_type: resource.pattern_type,
                    principal: Some(acl.principal.to_string()),
                    host: Some(acl.host.to_string()),
                    operation: acl.operation,
                    permission: acl.permission_type,
                });
            }
        }
        Ok(acls)
    }

    /// Deletes the ACLs each filter matches, in one request; per filter, the ACLs it
    /// deleted.
    pub async fn delete_acls(
        &self,
        filters: &[AclEntry],
    ) -> Result<Vec<Result<Vec<AclEntry>, ClientError>>, ClientError> {
        let filters = filters
            .iter()
            .map(|f| {
                DeleteAclsFilter::default()
                    .with_resource_type_filter(f.resource_type)
                    .with_resource_name_filter(f.resource_name.as_deref().map(str_bytes))
                    .with_pattern_type_filter(f.pattern_type)
                    .with_principal_filter(f.principal.as_deref().map(str_bytes))
                    .with_host_filter(f.host.as_deref().map(str_bytes))
                    .with_operation(f.operation)
                    .with_permission_type(f.permission)
            })
            .collect();
        let request = DeleteAclsRequest::default().with_filters(filters);
        let response = self.to_any_broker(&request).await?;
        Ok(response
            .filter_results
            .into_iter()
            .map(|r| {
                check(r.error_code, r.error_message.as_deref()).map(|()| {
                    r.matching_acls
                        .into_iter()
                        .map(|m| AclEntry {
                            resource_type: m.resource_type,
                            resource_name: Some(m.resource_name.to_string()),
                            pattern_type: m.pattern_type,
                            principal: Some(m.principal.to_string()),
                            host: Some(m.host.to_string()),
                            operation: m.operation,
                            permission: m.permission_type,
                        })
                        .collect()
                })
            })
            .collect())
    }
}
