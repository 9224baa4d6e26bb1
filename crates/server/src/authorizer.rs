//! The broker's ACL authorizer (Kafka's, `docs/security.md`): its settings, the ACLs
//! and the index the checks read, and the [`Subject`] a request acts as.
//!
//! The ACLs live in the durable [`SecurityStore`]; the checks read an [`AclIndex`] of
//! them, rebuilt on every change and swapped in whole, so a check is a few hash lookups
//! and takes no lock a change could hold long. A denial is counted on `/metrics`
//! (`headway_authorization_denials_total{resource_type}`) and logged with the principal
//! and the client's address, within the failure log's bound. The checks handlers make
//! of a request are in `crate::authorize`.

use crate::log_limit::LineLimiter;
use headway_auth::acl::{
    AclBinding, AclFilter, AclIndex, AuthorizerConfig, Operation, Request, ResourceType,
};
use headway_auth::store::SecurityStore;
use headway_auth::{AuthError, AuthSettings};
use headway_base::limits;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

/// The name of the cluster resource in ACLs.
pub const CLUSTER: &str = "kafka-cluster";

/// Where the security state lives under the data directory.
pub const SECURITY_DIR: &str = "security";

/// The broker's authorizer: its settings, the ACLs and their index.
pub struct Authorizer {
    /// `None` when no authorizer is configured: everything is allowed.
    config: Option<AuthorizerConfig>,
    store: Arc<SecurityStore>,
    index: RwLock<Arc<AclIndex>>,
    denials: Family<Vec<(&'static str, String)>, Counter>,
    denial_lines: LineLimiter,
}

impl Authorizer {
    /// The authorizer `settings` ask for over the ACLs of `store` (the broker's one
    /// security store, which SASL reads its credentials from too).
    pub fn new(settings: &AuthSettings, store: Arc<SecurityStore>) -> Authorizer {
        let index = store.with_acls(AclIndex::new);
        let config = settings.authorizer.as_ref().map(|_| AuthorizerConfig {
            super_users: settings.super_users.clone(),
            allow_everyone_if_no_acl_found: settings.allow_everyone_if_no_acl_found,
        });
        Authorizer {
            config,
            store,
            index: RwLock::new(Arc::new(index)),
            denials: Family::default(),
            denial_lines: LineLimiter::new(limits::FAILURE_LOG_LINES_PER_SECOND),
        }
    }

    /// Whether an authorizer is configured (the ACL APIs answer SECURITY_DISABLED
    /// without one).
    pub fn enabled(&self) -> bool {
        self.config.is_some()
    }

    fn permits(&self, request: &Request<'_>, kind: ResourceType, name: &str) -> bool {
        let Some(config) = &self.config else {
            return true;
        };
        let index = Arc::clone(&self.index.read().unwrap_or_else(|e| e.into_inner()));
        index.authorize(config, request, kind, name)
    }

    /// Whether `request` is allowed on some resource of type `kind`.
    pub fn permits_any(&self, request: &Request<'_>, kind: ResourceType) -> bool {
        let Some(config) = &self.config else {
            return true;
        };
        let index = Arc::clone(&self.index.read().unwrap_or_else(|e| e.into_inner()));
        index.allows_any(config, request, kind)
    }

    /// Adds ACLs, durably; one result per binding, in order. Blocking.
    pub fn create(&self, bindings: Vec<AclBinding>) -> Vec<Result<(), AuthError>> {
        let results = self.store.create_acls(bindings);
        self.reindex();
        results
    }

    /// Removes the ACLs each filter matches, durably; the removed ones per filter.
    /// Blocking.
    pub fn delete(&self, filters: &[AclFilter]) -> Result<Vec<Vec<AclBinding>>, AuthError> {
        let removed = self.store.delete_acls(filters);
        self.reindex();
        removed
    }

    /// The ACLs `filter` matches.
    pub fn describe(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.store
            .with_acls(|acls| acls.describe(filter).into_iter().cloned().collect())
    }

    fn reindex(&self) {
        let index = Arc::new(self.store.with_acls(AclIndex::new));
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = index;
    }

    /// Registers the denial counters on `/metrics`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "authorization_denials",
            "Requests (or parts of them) refused by the authorizer, by resource type",
            self.denials.clone(),
        );
    }
}

/// Who a request acts as, for checks made after the handler's synchronous part (in a
/// reply's future): the authorizer, the connection's principal and address.
#[derive(Clone)]
pub struct Subject {
    authorizer: Arc<Authorizer>,
    principal: Arc<str>,
    peer: SocketAddr,
}

impl Subject {
    /// `principal`, connected from `peer`, as `authorizer` sees it.
    pub fn new(authorizer: Arc<Authorizer>, principal: Arc<str>, peer: SocketAddr) -> Subject {
        Subject {
            authorizer,
            principal,
            peer,
        }
    }

    /// Whether the principal may do `operation` on the resource; a denial is counted
    /// and logged.
    pub fn allowed(&self, operation: Operation, kind: ResourceType, name: &str) -> bool {
        if self.visible(operation, kind, name) {
            return true;
        }
        let authorizer = &self.authorizer;
        authorizer
            .denials
            .get_or_create(&vec![("resource_type", format!("{kind:?}"))])
            .inc();
        if let Some(lines_left_out) = authorizer.denial_lines.admit_now() {
            tracing::warn!(
                peer = %self.peer,
                principal = %self.principal,
                ?operation,
                resource_type = ?kind,
                resource = name,
                lines_left_out,
                "request denied by the authorizer"
            );
        }
        false
    }

    /// Whether the resource may be shown to the principal in a listing (Metadata of
    /// all topics, ListGroups): like [`Subject::allowed`], but what is left out is
    /// neither counted nor logged, as Kafka does.
    pub fn visible(&self, operation: Operation, kind: ResourceType, name: &str) -> bool {
        if !self.authorizer.enabled() {
            return true;
        }
        let host = self.peer.ip().to_string();
        let request = Request {
            principal: &self.principal,
            host: &host,
            operation,
        };
        self.authorizer.permits(&request, kind, name)
    }
}
