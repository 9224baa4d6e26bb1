//! `headway acl add|list|delete`: the ACLs of a broker with an authorizer, through
//! CreateAcls, DescribeAcls and DeleteAcls, with flags shaped like Kafka's
//! `kafka-acls.sh`. Names are Kafka's (`TOPIC`, `READ`, `ALLOW`, `LITERAL`); flags
//! accept them in any case, with or without underscores (`IdempotentWrite`).
//!
//! `add` makes one ACL per principal, operation, host and resource named. `list`
//! without a resource lists every ACL; `delete` needs a resource and removes the ACLs
//! of it that match the principals, operations and hosts given (all of them when none
//! is given).

use crate::output::row;
use crate::output::{self, table, AdminArgs, Format};
use anyhow::Context;
use clap::{Args, Subcommand};
use headway_auth::acl::{Operation, PatternType, Permission, ResourceType};
use headway_client::AclEntry;
use serde::Serialize;
use std::io::Write;

/// The name of the cluster resource in ACLs.
const CLUSTER: &str = "kafka-cluster";

#[derive(Args)]
pub struct AclArgs {
    #[command(subcommand)]
    command: AclCommand,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Subcommand)]
enum AclCommand {
    /// Add ACLs: each --allow-principal and --deny-principal, for each --operation and
    /// --host, on each resource.
    Add(AclFlags),
    /// List the ACLs of the resources named (every ACL when none is).
    List(AclFlags),
    /// Delete the ACLs of the resources named that match the other flags.
    Delete(AclFlags),
}

#[derive(Args)]
struct AclFlags {
    /// Principal allowed, Type:name, e.g. User:alice (repeatable).
    #[arg(long)]
    allow_principal: Vec<String>,
    /// Principal denied (repeatable).
    #[arg(long)]
    deny_principal: Vec<String>,
    /// list: only the ACLs of this principal.
    #[arg(long)]
    principal: Option<String>,
    /// READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS,
    /// ALTER_CONFIGS, IDEMPOTENT_WRITE or ALL (repeatable) [add: ALL; delete: any].
    #[arg(long, value_parser = operation)]
    operation: Vec<Operation>,
    /// Host the ACL applies to (repeatable) [add: *; delete: any].
    #[arg(long)]
    host: Vec<String>,
    /// Topic (repeatable); `*` is every topic.
    #[arg(long)]
    topic: Vec<String>,
    /// Consumer group (repeatable); `*` is every group.
    #[arg(long)]
    group: Vec<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
    /// Transactional id (repeatable); `*` is every one.
    #[arg(long)]
    transactional_id: Vec<String>,
    /// LITERAL or PREFIXED; list and delete also ANY and MATCH [default: LITERAL].
    #[arg(long, value_parser = pattern_type)]
    resource_pattern_type: Option<PatternType>,
}

/// `Operation::IdempotentWrite` as Kafka names it: `IDEMPOTENT_WRITE`.
fn kafka_name(debug: &str) -> String {
    headway_client::error::kafka_error_name(debug)
}

/// The variant of `all` whose Kafka name is `s`, in any case, underscores optional.
fn parse_name<T: std::fmt::Debug + Copy>(s: &str, all: &[T], what: &str) -> Result<T, String> {
    let wanted = s.replace(['_', '-'], "").to_ascii_lowercase();
    all.iter()
        .copied()
        .find(|v| format!("{v:?}").to_ascii_lowercase() == wanted)
        .ok_or_else(|| {
            let names: Vec<String> = all.iter().map(|v| kafka_name(&format!("{v:?}"))).collect();
            format!("{s:?} is not a {what} ({})", names.join(", "))
        })
}

fn operation(s: &str) -> Result<Operation, String> {
    use Operation::*;
    let all = [
        All,
        Read,
        Write,
        Create,
        Delete,
        Alter,
        Describe,
        ClusterAction,
        DescribeConfigs,
        AlterConfigs,
        IdempotentWrite,
    ];
    parse_name(s, &all, "operation")
}

fn pattern_type(s: &str) -> Result<PatternType, String> {
    use PatternType::*;
    parse_name(s, &[Literal, Prefixed, Any, Match], "resource pattern type")
}

/// Every wire code of `T` named as Kafka names it.
fn name_of<T: std::fmt::Debug>(code: i8, from_code: fn(i8) -> Option<T>) -> String {
    from_code(code).map_or_else(
        || format!("UNKNOWN({code})"),
        |v| kafka_name(&format!("{v:?}")),
    )
}

impl AclFlags {
    fn resources(&self) -> Vec<(ResourceType, String)> {
        let mut resources: Vec<(ResourceType, String)> = Vec::new();
        resources.extend(self.topic.iter().map(|t| (ResourceType::Topic, t.clone())));
        resources.extend(self.group.iter().map(|g| (ResourceType::Group, g.clone())));
        if self.cluster {
            resources.push((ResourceType::Cluster, CLUSTER.to_string()));
        }
        resources.extend(
            self.transactional_id
                .iter()
                .map(|t| (ResourceType::TransactionalId, t.clone())),
        );
        resources
    }

    fn principals(&self) -> Vec<(Permission, String)> {
        let allow = self
            .allow_principal
            .iter()
            .map(|p| (Permission::Allow, p.clone()));
        let deny = self
            .deny_principal
            .iter()
            .map(|p| (Permission::Deny, p.clone()));
        allow.chain(deny).collect()
    }

    /// The ACLs `add` creates.
    fn bindings(&self) -> anyhow::Result<Vec<AclEntry>> {
        let pattern = self.resource_pattern_type.unwrap_or(PatternType::Literal);
        anyhow::ensure!(
            matches!(pattern, PatternType::Literal | PatternType::Prefixed),
            "add takes --resource-pattern-type LITERAL or PREFIXED"
        );
        let resources = self.resources();
        let principals = self.principals();
        anyhow::ensure!(
            !resources.is_empty(),
            "name a resource: --topic, --group, --cluster or --transactional-id"
        );
        anyhow::ensure!(
            !principals.is_empty(),
            "name a principal: --allow-principal or --deny-principal"
        );
        let operations = if self.operation.is_empty() {
            vec![Operation::All]
        } else {
            self.operation.clone()
        };
        let hosts = if self.host.is_empty() {
            vec!["*".to_string()]
        } else {
            self.host.clone()
        };
        let mut acls = Vec::new();
        for (kind, name) in &resources {
            for (permission, principal) in &principals {
                for operation in &operations {
                    for host in &hosts {
                        acls.push(AclEntry {
                            resource_type: kind.code(),
                            resource_name: Some(name.clone()),
                            pattern_type: pattern.code(),
                            principal: Some(principal.clone()),
                            host: Some(host.clone()),
                            operation: operation.code(),
                            permission: permission.code(),
                        });
                    }
                }
            }
        }
        Ok(acls)
    }

    /// The filters of `list` and `delete`: one per resource (one for every resource
    /// when none is named), principal, operation and host given.
    fn filters(&self) -> Vec<AclEntry> {
        let resources: Vec<(ResourceType, Option<String>)> = match self.resources() {
            r if r.is_empty() => vec![(ResourceType::Any, None)],
            r => r.into_iter().map(|(k, n)| (k, Some(n))).collect(),
        };
        let pattern = match (self.resource_pattern_type, resources[0].1.is_some()) {
            (Some(pattern), _) => pattern,
            (None, true) => PatternType::Literal,
            (None, false) => PatternType::Any,
        };
        let mut principals: Vec<(Permission, Option<String>)> = self
            .principals()
            .into_iter()
            .map(|(p, name)| (p, Some(name)))
            .collect();
        if let Some(principal) = &self.principal {
            principals.push((Permission::Any, Some(principal.clone())));
        }
        if principals.is_empty() {
            principals.push((Permission::Any, None));
        }
        let operations = match self.operation.as_slice() {
            [] => vec![Operation::Any],
            some => some.to_vec(),
        };
        let hosts: Vec<Option<String>> = match self.host.as_slice() {
            [] => vec![None],
            some => some.iter().cloned().map(Some).collect(),
        };
        let mut filters = Vec::new();
        for (kind, name) in &resources {
            for (permission, principal) in &principals {
                for operation in &operations {
                    for host in &hosts {
                        filters.push(AclEntry {
                            resource_type: kind.code(),
                            resource_name: name.clone(),
                            pattern_type: pattern.code(),
                            principal: principal.clone(),
                            host: host.clone(),
                            operation: operation.code(),
                            permission: permission.code(),
                        });
                    }
                }
            }
        }
        filters
    }
}

/// An ACL as printed, with Kafka's names.
#[derive(Serialize)]
struct AclRow {
    resource_type: String,
    resource_name: String,
    pattern_type: String,
    principal: String,
    host: String,
    operation: String,
    permission: String,
}

impl AclRow {
    fn of(acl: &AclEntry) -> AclRow {
        AclRow {
            resource_type: name_of(acl.resource_type, ResourceType::from_code),
            resource_name: acl.resource_name.clone().unwrap_or_default(),
            pattern_type: name_of(acl.pattern_type, PatternType::from_code),
            principal: acl.principal.clone().unwrap_or_default(),
            host: acl.host.clone().unwrap_or_default(),
            operation: name_of(acl.operation, Operation::from_code),
            permission: name_of(acl.permission, Permission::from_code),
        }
    }
}

fn print_acls(format: Format, acls: &[AclEntry]) -> anyhow::Result<()> {
    let rows: Vec<AclRow> = acls.iter().map(AclRow::of).collect();
    output::print(format, &rows, |out: &mut dyn Write| {
        let mut cells = vec![row![
            "RESOURCE_TYPE",
            "NAME",
            "PATTERN",
            "PRINCIPAL",
            "HOST",
            "OPERATION",
            "PERMISSION"
        ]];
        for r in &rows {
            cells.push(row![
                r.resource_type,
                r.resource_name,
                r.pattern_type,
                r.principal,
                r.host,
                r.operation,
                r.permission
            ]);
        }
        table(out, &cells)
    })
}

pub async fn run(args: AclArgs) -> anyhow::Result<()> {
    let cluster = args.admin.connect().await?;
    let format = args.admin.format;
    match args.command {
        AclCommand::Add(flags) => {
            let acls = flags.bindings()?;
            let results = cluster.create_acls(&acls).await?;
            for (acl, result) in acls.iter().zip(results) {
                result.with_context(|| {
                    let r = AclRow::of(acl);
                    format!(
                        "adding {} {} {} on {} {}",
                        r.permission, r.principal, r.operation, r.resource_type, r.resource_name
                    )
                })?;
            }
            print_acls(format, &acls)
        }
        AclCommand::List(flags) => {
            let mut acls = Vec::new();
            for filter in flags.filters() {
                for acl in cluster.describe_acls(&filter).await? {
                    if !acls.contains(&acl) {
                        acls.push(acl);
                    }
                }
            }
            print_acls(format, &acls)
        }
        AclCommand::Delete(flags) => {
            anyhow::ensure!(
                !flags.resources().is_empty(),
                "name a resource: --topic, --group, --cluster or --transactional-id"
            );
            let mut deleted = Vec::new();
            for result in cluster.delete_acls(&flags.filters()).await? {
                deleted.extend(result.context("deleting ACLs")?);
            }
            print_acls(format, &deleted)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_as_kafka_acls_writes_them() {
        assert_eq!(operation("IdempotentWrite"), Ok(Operation::IdempotentWrite));
        assert_eq!(
            operation("DESCRIBE_CONFIGS"),
            Ok(Operation::DescribeConfigs)
        );
        assert_eq!(operation("read"), Ok(Operation::Read));
        assert!(operation("Any").is_err(), "filters only");
        assert_eq!(pattern_type("prefixed"), Ok(PatternType::Prefixed));
        assert_eq!(kafka_name("TransactionalId"), "TRANSACTIONAL_ID");
    }
}
