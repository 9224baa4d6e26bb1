//! Kafka's ACL model and its authorization rule, over plain values.
//!
//! An ACL binds a resource pattern (type, name, literal or prefixed) to an entry
//! (principal, host, operation, allow or deny). A request is authorized as Kafka's
//! authorizer does it:
//! 1. a super user is allowed everything;
//! 2. the ACLs that apply are those whose pattern matches the resource (the literal
//!    name, the literal wildcard `*`, or a prefix of the name) and whose entry names the
//!    principal (or `User:*`) and the client's host (or `*`);
//! 3. a deny for the operation (or `All`) wins over any allow;
//! 4. an allow for the operation, `All`, or an operation that implies it (Read, Write,
//!    Delete or Alter imply Describe; AlterConfigs implies DescribeConfigs) allows;
//! 5. a resource with no ACL at all, for anyone, is allowed only when
//!    `allow.everyone.if.no.acl.found` is set; otherwise it is denied.
//!
//! Wire codes are Kafka's (`ResourceType`, `PatternType`, `AclOperation`,
//! `AclPermissionType`), so the handlers convert with `from_code` and `code`.

use crate::AuthError;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:expr),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),+ }
            }

            /// `None` for a code Kafka does not define (the wire's UNKNOWN).
            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$variant),)+ _ => None }
            }
        }
    };
}

wire_enum!(
    /// Kind of resource an ACL protects. `Any` is for filters only.
    ResourceType { Any = 1, Topic = 2, Group = 3, Cluster = 4, TransactionalId = 5, DelegationToken = 6, User = 7 }
);

wire_enum!(
    /// How an ACL's resource name matches. `Any` and `Match` are for filters only.
    PatternType { Any = 1, Match = 2, Literal = 3, Prefixed = 4 }
);

wire_enum!(
    /// What a request does to a resource. `Any` is for filters only.
    Operation {
        Any = 1, All = 2, Read = 3, Write = 4, Create = 5, Delete = 6, Alter = 7,
        Describe = 8, ClusterAction = 9, DescribeConfigs = 10, AlterConfigs = 11,
        IdempotentWrite = 12, CreateTokens = 13, DescribeTokens = 14, TwoPhaseCommit = 15,
    }
);

wire_enum!(
    /// Allow or deny. `Any` is for filters only.
    Permission { Any = 1, Deny = 2, Allow = 3 }
);

/// The literal resource name that matches every resource of its type.
pub const WILDCARD: &str = "*";
/// The principal that matches every user.
pub const ANY_USER: &str = "User:*";

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`, or `User:*`.
    pub principal: String,
    /// A client address, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclBinding {
    /// Refuses what Kafka refuses in CreateAcls: filter-only values, an empty name, a
    /// principal without its type, an empty host.
    pub fn validate(&self) -> Result<(), AuthError> {
        let invalid = |what: &str| Err(AuthError::InvalidAcl(what.to_string()));
        if self.resource_type == ResourceType::Any {
            return invalid("the resource type must not be ANY");
        }
        if !matches!(
            self.pattern_type,
            PatternType::Literal | PatternType::Prefixed
        ) {
            return invalid("the pattern type must be LITERAL or PREFIXED");
        }
        if matches!(self.operation, Operation::Any) {
            return invalid("the operation must not be ANY");
        }
        if self.permission == Permission::Any {
            return invalid("the permission must be ALLOW or DENY");
        }
        if self.resource_name.is_empty() {
            return invalid("the resource name must not be empty");
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != "kafka-cluster" {
            return invalid("the cluster resource is named kafka-cluster");
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return invalid("the principal must be Type:name, e.g. User:alice"),
        }
        if self.host.is_empty() {
            return invalid("the host must be an address or *");
        }
        Ok(())
    }

    /// Whether this ACL's pattern covers the resource `(kind, name)`.
    fn covers(&self, kind: ResourceType, name: &str) -> bool {
        self.resource_type == kind
            && match self.pattern_type {
                PatternType::Literal => {
                    self.resource_name == name || self.resource_name == WILDCARD
                }
                PatternType::Prefixed => name.starts_with(&self.resource_name),
                PatternType::Any | PatternType::Match => false,
            }
    }

    /// Whether this ACL's entry applies to `principal` connected from `host`.
    fn names(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == ANY_USER)
            && (self.host == host || self.host == WILDCARD)
    }
}

/// A filter of DescribeAcls and DeleteAcls: `None` and the `Any` values match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    /// Matches every ACL.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: ResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: Operation::Any,
            permission: Permission::Any,
        }
    }

    pub fn matches(&self, acl: &AclBinding) -> bool {
        let kind =
            self.resource_type == ResourceType::Any || self.resource_type == acl.resource_type;
        let pattern = match (self.pattern_type, &self.resource_name) {
            (PatternType::Any, name) => name.as_ref().is_none_or(|n| *n == acl.resource_name),
            // MATCH: the ACLs that would apply to a resource of that name.
            (PatternType::Match, None) => true,
            (PatternType::Match, Some(name)) => acl.covers(acl.resource_type, name),
            (exact, name) => {
                exact == acl.pattern_type && name.as_ref().is_none_or(|n| *n == acl.resource_name)
            }
        };
        let principal = self.principal.as_ref().is_none_or(|p| *p == acl.principal);
        let host = self.host.as_ref().is_none_or(|h| *h == acl.host);
        let operation = self.operation == Operation::Any || self.operation == acl.operation;
        let permission = self.permission == Permission::Any || self.permission == acl.permission;
        kind && pattern && principal && host && operation && permission
    }
}

/// The authorizer's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals allowed everything (`super.users`), e.g. `User:admin`.
    pub super_users: Vec<String>,
    /// Kafka's `allow.everyone.if.no.acl.found` (default false).
    pub allow_everyone_if_no_acl_found: bool,
}

/// Whether `granted` (an allow ACL's operation) covers `wanted`.
fn implies(granted: Operation, wanted: Operation) -> bool {
    granted == wanted
        || granted == Operation::All
        || (wanted == Operation::Describe
            && matches!(
                granted,
                Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
            ))
        || (wanted == Operation::DescribeConfigs && granted == Operation::AlterConfigs)
}

/// A set of ACLs with Kafka's authorization rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acls {
    /// Kept sorted and without duplicates.
    bindings: Vec<AclBinding>,
}

impl Acls {
    pub fn new(mut bindings: Vec<AclBinding>) -> Acls {
        bindings.sort();
        bindings.dedup();
        Acls { bindings }
    }

    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    /// Adds `acl` (validated; a duplicate is a success that changes nothing), refused
    /// past `max` bindings.
    pub fn add(&mut self, acl: AclBinding, max: usize) -> Result<bool, AuthError> {
        acl.validate()?;
        match self.bindings.binary_search(&acl) {
            Ok(_) => Ok(false),
            Err(_) if self.bindings.len() >= max => Err(AuthError::InvalidAcl(format!(
                "the broker holds at most {max} ACLs"
            ))),
            Err(at) => {
                self.bindings.insert(at, acl);
                Ok(true)
            }
        }
    }

    /// Removes and returns the ACLs `filter` matches.
    pub fn remove(&mut self, filter: &AclFilter) -> Vec<AclBinding> {
        let (gone, kept) = std::mem::take(&mut self.bindings)
            .into_iter()
            .partition(|acl| filter.matches(acl));
        self.bindings = kept;
        gone
    }

    pub fn describe(&self, filter: &AclFilter) -> Vec<&AclBinding> {
        self.bindings
            .iter()
            .filter(|acl| filter.matches(acl))
            .collect()
    }

    /// Whether `principal` from `host` may do `operation` on the resource (a walk of
    /// every ACL; the broker's checks use [`AclIndex`]).
    pub fn authorize(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        let request = Request {
            principal,
            host,
            operation,
        };
        let covering = self
            .bindings
            .iter()
            .filter(|a| a.covers(resource_type, resource_name));
        decide(config, &request, covering)
    }
}

/// Who asks to do what, for [`AclIndex::authorize`].
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// `Type:name`, e.g. `User:alice`.
    pub principal: &'a str,
    /// The client's address.
    pub host: &'a str,
    pub operation: Operation,
}

/// Kafka's rule over the ACLs `covering` the resource.
fn decide<'a>(
    config: &AuthorizerConfig,
    request: &Request<'_>,
    covering: impl Iterator<Item = &'a AclBinding>,
) -> bool {
    if config.super_users.iter().any(|s| s == request.principal) {
        return true;
    }
    let mut any_acl = false;
    let mut allowed = false;
    for acl in covering {
        any_acl = true;
        if !acl.names(request.principal, request.host) {
            continue;
        }
        match acl.permission {
            Permission::Deny
                if acl.operation == request.operation || acl.operation == Operation::All =>
            {
                return false
            }
            Permission::Allow if implies(acl.operation, request.operation) => allowed = true,
            _ => {}
        }
    }
    allowed || (!any_acl && config.allow_everyone_if_no_acl_found)
}

/// The ACLs grouped for the check of every request: literal ones by resource type and
/// name (one hash lookup for the name, one for `*`), prefixed ones by resource type.
/// Built once per change of the ACLs, read without locks by the checks.
#[derive(Debug, Default)]
pub struct AclIndex {
    literal: HashMap<ResourceType, HashMap<String, Vec<AclBinding>>>,
    prefixed: HashMap<ResourceType, Vec<AclBinding>>,
}

impl AclIndex {
    pub fn new(acls: &Acls) -> AclIndex {
        let mut index = AclIndex::default();
        for acl in acls.iter() {
            let kind = acl.resource_type;
            match acl.pattern_type {
                PatternType::Prefixed => index.prefixed.entry(kind).or_default().push(acl.clone()),
                _ => index
                    .literal
                    .entry(kind)
                    .or_default()
                    .entry(acl.resource_name.clone())
                    .or_default()
                    .push(acl.clone()),
            }
        }
        index
    }

    /// Whether `request` is allowed on the resource, by Kafka's rule
    /// ([`Acls::authorize`] gives the same answer).
    pub fn authorize(
        &self,
        config: &AuthorizerConfig,
        request: &Request<'_>,
        resource_type: ResourceType,
        resource_name: &str,
    ) -> bool {
        let none: &[AclBinding] = &[];
        let literal = self.literal.get(&resource_type);
        let named = literal.and_then(|by_name| by_name.get(resource_name));
        let wildcard = match resource_name {
            WILDCARD => None,
            _ => literal.and_then(|by_name| by_name.get(WILDCARD)),
        };
        let prefixed = self
            .prefixed
            .get(&resource_type)
            .map_or(none, Vec::as_slice)
            .iter()
            .filter(|a| resource_name.starts_with(&a.resource_name));
        let covering = named
            .map_or(none, Vec::as_slice)
            .iter()
            .chain(wildcard.map_or(none, Vec::as_slice))
            .chain(prefixed);
        decide(config, request, covering)
    }

    /// Whether `request` is allowed on some resource of the type, as Kafka's
    /// `authorizeByResourceType` answers it (an idempotent producer needs Write on
    /// any topic): a super user, or an allow naming the principal and the host on any
    /// pattern, unless a literal wildcard denies it.
    pub fn allows_any(
        &self,
        config: &AuthorizerConfig,
        request: &Request<'_>,
        resource_type: ResourceType,
    ) -> bool {
        if config.super_users.iter().any(|s| s == request.principal) {
            return true;
        }
        let none = HashMap::new();
        let literal = self.literal.get(&resource_type).unwrap_or(&none);
        let named = |a: &&AclBinding| a.names(request.principal, request.host);
        let denied = literal
            .get(WILDCARD)
            .into_iter()
            .flatten()
            .filter(named)
            .any(|a| {
                a.permission == Permission::Deny
                    && (a.operation == request.operation || a.operation == Operation::All)
            });
        let prefixed = self.prefixed.get(&resource_type).into_iter().flatten();
        let allowed = literal
            .values()
            .flatten()
            .chain(prefixed)
            .filter(named)
            .any(|a| a.permission == Permission::Allow && implies(a.operation, request.operation));
        !denied && allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        kind: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        operation: Operation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: kind,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission,
        }
    }

    fn topic_acl(
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        p: Permission,
    ) -> AclBinding {
        acl(ResourceType::Topic, name, pattern, principal, op, p)
    }

    fn alice_reads_a() -> AclBinding {
        let (read, allow) = (Operation::Read, Permission::Allow);
        topic_acl("a", PatternType::Literal, "User:alice", read, allow)
    }

    const CONFIG: AuthorizerConfig = AuthorizerConfig {
        super_users: Vec::new(),
        allow_everyone_if_no_acl_found: false,
    };

    fn may(acls: &Acls, principal: &str, op: Operation, topic: &str) -> bool {
        acls.authorize(
            &CONFIG,
            principal,
            "10.0.0.1",
            op,
            ResourceType::Topic,
            topic,
        )
    }

    #[test]
    fn a_reader_of_one_topic_reads_and_describes_it_and_nothing_else() {
        use Operation::*;
        let acls = Acls::new(vec![alice_reads_a()]);
        assert!(may(&acls, "User:alice", Read, "a"));
        assert!(
            may(&acls, "User:alice", Describe, "a"),
            "read implies describe"
        );
        assert!(!may(&acls, "User:alice", Write, "a"));
        assert!(
            !may(&acls, "User:alice", Read, "b"),
            "no ACL and no allow-everyone"
        );
        assert!(!may(&acls, "User:bob", Read, "a"));
        assert!(
            !may(&acls, "User:alice", Read, "ab"),
            "literal is not a prefix"
        );
    }

    #[test]
    fn prefixes_wildcards_and_denies_follow_kafka() {
        use Operation::*;
        let acls = Acls::new(vec![
            topic_acl(
                "orders-",
                PatternType::Prefixed,
                "User:*",
                Write,
                Permission::Allow,
            ),
            topic_acl(
                "*",
                PatternType::Literal,
                "User:alice",
                Describe,
                Permission::Allow,
            ),
            topic_acl(
                "orders-secret",
                PatternType::Literal,
                "User:bob",
                All,
                Permission::Deny,
            ),
        ]);
        assert!(may(&acls, "User:bob", Write, "orders-eu"));
        assert!(!may(&acls, "User:bob", Write, "orders-secret"), "deny wins");
        assert!(may(&acls, "User:carol", Write, "orders-secret"));
        assert!(may(&acls, "User:alice", Describe, "anything"));
        assert!(!may(&acls, "User:alice", Read, "anything"));
        let admin = AuthorizerConfig {
            super_users: vec!["User:admin".into()],
            allow_everyone_if_no_acl_found: false,
        };
        assert!(acls.authorize(
            &admin,
            "User:admin",
            "h",
            Delete,
            ResourceType::Topic,
            "orders-secret"
        ));
    }

    #[test]
    fn allow_everyone_applies_only_to_resources_without_any_acl() {
        use Operation::*;
        let acls = Acls::new(vec![alice_reads_a()]);
        let open = AuthorizerConfig {
            super_users: vec![],
            allow_everyone_if_no_acl_found: true,
        };
        let t = ResourceType::Topic;
        assert!(acls.authorize(&open, "User:bob", "h", Write, t, "b"));
        assert!(!acls.authorize(&open, "User:bob", "h", Read, t, "a"));
    }

    #[test]
    fn hosts_and_implied_config_reads_are_checked() {
        use Operation::*;
        let mut only_here = topic_acl(
            "a",
            PatternType::Literal,
            "User:alice",
            AlterConfigs,
            Permission::Allow,
        );
        only_here.host = "10.0.0.1".into();
        let acls = Acls::new(vec![only_here]);
        let t = ResourceType::Topic;
        assert!(acls.authorize(&CONFIG, "User:alice", "10.0.0.1", DescribeConfigs, t, "a"));
        assert!(!acls.authorize(&CONFIG, "User:alice", "10.0.0.2", DescribeConfigs, t, "a"));
    }

    #[test]
    fn filters_find_and_remove_what_they_match_and_bad_acls_are_refused() {
        use Operation::*;
        let mut acls = Acls::default();
        let read = topic_acl(
            "orders",
            PatternType::Literal,
            "User:alice",
            Read,
            Permission::Allow,
        );
        let prefix = topic_acl(
            "ord",
            PatternType::Prefixed,
            "User:bob",
            Write,
            Permission::Allow,
        );
        let group = acl(
            ResourceType::Group,
            "g",
            PatternType::Literal,
            "User:alice",
            Read,
            Permission::Allow,
        );
        assert!(acls.add(read.clone(), 10).unwrap());
        assert!(
            !acls.add(read.clone(), 10).unwrap(),
            "a duplicate changes nothing"
        );
        acls.add(prefix.clone(), 10).unwrap();
        acls.add(group.clone(), 3).unwrap();
        assert!(acls
            .add(
                topic_acl("x", PatternType::Literal, "User:a", Read, Permission::Allow),
                3
            )
            .is_err());

        let mut matching = AclFilter::any();
        matching.resource_type = ResourceType::Topic;
        matching.pattern_type = PatternType::Match;
        matching.resource_name = Some("orders".into());
        assert_eq!(acls.describe(&matching), vec![&prefix, &read]);
        let mut alice = AclFilter::any();
        alice.principal = Some("User:alice".into());
        assert_eq!(
            acls.remove(&alice),
            vec![read, group],
            "sorted by resource type first"
        );
        assert_eq!(acls.iter().collect::<Vec<_>>(), vec![&prefix]);

        for bad in [
            topic_acl("t", PatternType::Match, "User:a", Read, Permission::Allow),
            topic_acl("t", PatternType::Literal, "alice", Read, Permission::Allow),
            topic_acl("t", PatternType::Literal, "User:a", Any, Permission::Allow),
            topic_acl("", PatternType::Literal, "User:a", Read, Permission::Allow),
            acl(
                ResourceType::Cluster,
                "c",
                PatternType::Literal,
                "User:a",
                Alter,
                Permission::Allow,
            ),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert_eq!(Operation::from_code(3), Some(Read));
        assert_eq!(Operation::from_code(0), None);
        assert_eq!(ResourceType::Topic.code(), 2);
    }

    #[test]
    fn the_index_answers_as_the_walk_of_every_acl() {
        use Operation::*;
        let acls = Acls::new(vec![
            alice_reads_a(),
            topic_acl(
                "ord",
                PatternType::Prefixed,
                "User:*",
                Write,
                Permission::Allow,
            ),
            topic_acl(
                "*",
                PatternType::Literal,
                "User:bob",
                Describe,
                Permission::Allow,
            ),
            topic_acl(
                "orders",
                PatternType::Literal,
                "User:bob",
                All,
                Permission::Deny,
            ),
            acl(
                ResourceType::Group,
                "a",
                PatternType::Literal,
                "User:alice",
                Read,
                Permission::Allow,
            ),
        ]);
        let index = AclIndex::new(&acls);
        for config in [
            CONFIG,
            AuthorizerConfig {
                super_users: vec!["User:root".into()],
                allow_everyone_if_no_acl_found: true,
            },
        ] {
            for principal in ["User:alice", "User:bob", "User:carol", "User:root"] {
                for op in [Read, Write, Describe, Delete, Alter] {
                    for kind in [ResourceType::Topic, ResourceType::Group] {
                        for name in ["a", "b", "orders", "ord", "or", "*"] {
                            let request = Request {
                                principal,
                                host: "h",
                                operation: op,
                            };
                            if config.super_users.is_empty()
                                && index.authorize(&config, &request, kind, name)
                                && name != "*"
                            {
                                assert!(
                                    index.allows_any(&config, &request, kind)
                                        || config.allow_everyone_if_no_acl_found
                                );
                            }
                            assert_eq!(
                                index.authorize(&config, &request, kind, name),
                                acls.authorize(&config, principal, "h", op, kind, name),
                                "{principal} {op:?} {kind:?} {name}"
                            );
                        }
                    }
                }
            }
        }
    }
}
