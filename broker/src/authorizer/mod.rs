//! Authorization: Kafka's ACL model, decided per request the way Apache
//! Kafka's `StandardAuthorizer` decides.
//!
//! Off unless `authorizer.class.name` is set; then every request is checked
//! against the ACL bindings:
//! - a principal in `super.users` may do anything;
//! - a DENY binding that applies (principal or `User:*`, host or `*`, the
//!   operation or ALL) wins over any ALLOW;
//! - else an ALLOW binding that applies allows, counting Kafka's implied
//!   operations (READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS
//!   implies DESCRIBE_CONFIGS);
//! - a resource with no binding at all is allowed only with
//!   `allow.everyone.if.no.acl.found=true` (default false).
//!
//! # Layout
//! - [`acl`]: bindings, filters, the wire codes and the matching rules.
//! - [`store`]: the bindings on disk (`acls.json`), changed atomically.
//! - this module: [`AuthorizerSettings`], [`RequestContext`] and [`Authorizer`].

pub mod acl;
pub mod store;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use acl::{AclOperation, PatternType, PermissionType, ResourceType, CLUSTER_NAME, WILDCARD};
use store::AclStore;

use crate::raw_config::ConfigError;
use crate::server::limits::LogLimiter;

/// The `authorizer.class.name` values that turn authorization on: Kafka's
/// two built-in authorizers (Floe behaves as `StandardAuthorizer` for both)
/// and a short name.
pub const AUTHORIZER_NAMES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "floe",
];

/// The principal of a connection that has not authenticated (PLAINTEXT, SSL).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One info line per second about denials; every denial is logged at debug.
static DENIAL_LOG: LogLimiter = LogLimiter::new(Duration::from_secs(1));

/// `authorizer.class.name`, `super.users`, `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default)]
pub struct AuthorizerSettings {
    /// Whether requests are checked at all.
    pub enabled: bool,
    /// Principals (`User:NAME`) allowed everything.
    pub super_users: BTreeSet<String>,
    /// Whether a resource without any binding is open to everyone.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerSettings {
    /// Reads the three settings.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] for an unknown authorizer class, a
    /// super user not of the form `User:NAME`, or a non-boolean.
    pub fn from_raw(raw: &std::collections::BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let class = crate::raw_config::get(raw, "authorizer.class.name").trim();
        let enabled = match class {
            "" => false,
            c if AUTHORIZER_NAMES.contains(&c) => true,
            c => {
                return Err(ConfigError::InvalidValue {
                    key: "authorizer.class.name".into(),
                    value: c.into(),
                    reason: format!("Floe's authorizer answers to {}", AUTHORIZER_NAMES.join(", ")),
                })
            }
        };
        let mut super_users = BTreeSet::new();
        // Kafka separates super users with semicolons (a DN may contain commas).
        for user in crate::raw_config::get(raw, "super.users")
            .split(';')
            .map(str::trim)
            .filter(|u| !u.is_empty())
        {
            if !user
                .split_once(':')
                .is_some_and(|(kind, name)| !kind.is_empty() && !name.is_empty())
            {
                return Err(ConfigError::InvalidValue {
                    key: "super.users".into(),
                    value: user.into(),
                    reason: "each super user is a principal such as User:admin".into(),
                });
            }
            super_users.insert(user.to_string());
        }
        Ok(AuthorizerSettings {
            enabled,
            super_users,
            allow_everyone_if_no_acl_found: crate::raw_config::parse(
                raw,
                "allow.everyone.if.no.acl.found",
            )?,
        })
    }
}

/// Who is asking: the principal and the client's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    /// `User:NAME`, or [`ANONYMOUS`].
    pub principal: String,
    /// The client's IP address (IPv4-mapped IPv6 addresses as IPv4).
    pub host: IpAddr,
}

/// Decides requests against the ACLs. Thread-safe; checks take a read lock
/// only long enough to clone an `Arc` of the current bindings.
#[derive(Debug)]
pub struct Authorizer {
    settings: AuthorizerSettings,
    /// `None` when authorization is off: the ACL APIs then answer SECURITY_DISABLED.
    store: Option<AclStore>,
    /// Counts refusals by resource type, once the broker's metrics exist.
    denied: Option<prometheus::IntCounterVec>,
}

impl Authorizer {
    /// The authorizer for `settings`, with the bindings of `data_dir` when enabled.
    ///
    /// # Errors
    /// [`store::AclStoreError`] when the ACL file cannot be read.
    pub fn open(
        settings: AuthorizerSettings,
        data_dir: &std::path::Path,
    ) -> Result<Self, store::AclStoreError> {
        let store = if settings.enabled { Some(AclStore::open(data_dir)?) } else { None };
        Ok(Authorizer { settings, store, denied: None })
    }

    /// An authorizer that allows everything (authorization off).
    pub fn disabled() -> Self {
        Authorizer { settings: AuthorizerSettings::default(), store: None, denied: None }
    }

    /// Counts every refusal in `counter` (`floe_authorization_denied_total`).
    pub fn count_denials_in(&mut self, counter: prometheus::IntCounterVec) {
        self.denied = Some(counter);
    }

    /// The bindings' store, if authorization is on.
    pub fn store(&self) -> Option<&AclStore> {
        self.store.as_ref()
    }

    /// Whether authorization is on.
    pub fn enabled(&self) -> bool {
        self.store.is_some()
    }

    /// Whether `ctx` may perform `op` on the resource; a denial is logged.
    pub fn authorize(
        &self,
        ctx: &RequestContext,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let allowed = self.check(ctx, op, resource_type, name);
        if !allowed {
            self.denied(ctx, op, resource_type, name);
        }
        allowed
    }

    fn denied(
        &self,
        ctx: &RequestContext,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) {
        log_denial(ctx, op, resource_type, name);
        if let Some(c) = &self.denied {
            c.with_label_values(&[resource_type.name()]).inc();
        }
    }

    /// [`Self::authorize`] on the CLUSTER resource.
    pub fn authorize_cluster(&self, ctx: &RequestContext, op: AclOperation) -> bool {
        self.authorize(ctx, op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// [`Self::authorize`] without the log line: for filtering listings
    /// (Metadata of all topics, ListGroups), where an omitted resource is not
    /// a refused request.
    pub fn check(
        &self,
        ctx: &RequestContext,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let Some(store) = &self.store else { return true };
        if self.settings.super_users.contains(&ctx.principal) {
            return true;
        }
        let host = ctx.host.to_string();
        let acls = store.snapshot();
        let mut any_binding = false;
        let mut allowed = false;
        for b in acls.iter().filter(|b| b.pattern.covers(resource_type, name)) {
            any_binding = true;
            if !b.entry.applies_to(&ctx.principal, &host) {
                continue;
            }
            match b.entry.permission {
                PermissionType::Deny if b.entry.operation.denies(op) => return false,
                PermissionType::Allow if b.entry.operation.allows(op) => allowed = true,
                _ => {}
            }
        }
        if any_binding {
            allowed
        } else {
            self.settings.allow_everyone_if_no_acl_found
        }
    }

    /// Whether `ctx` may perform `op` on at least one resource of the type
    /// (Kafka's `authorizeByResourceType`, used for InitProducerId without a
    /// transactional id: IDEMPOTENT_WRITE on the cluster or WRITE on any topic).
    ///
    /// Simplified from Kafka: an ALLOW binding of the type that applies is
    /// enough unless a DENY on the literal `*` resource of the type applies.
    pub fn authorize_any(
        &self,
        ctx: &RequestContext,
        op: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let Some(store) = &self.store else { return true };
        if self.settings.super_users.contains(&ctx.principal) {
            return true;
        }
        let host = ctx.host.to_string();
        let acls = store.snapshot();
        let applying = || {
            acls.iter().filter(|b| {
                b.pattern.resource_type == resource_type
                    && b.entry.applies_to(&ctx.principal, &host)
            })
        };
        let denied_everywhere = applying().any(|b| {
            b.entry.permission == PermissionType::Deny
                && b.entry.operation.denies(op)
                && b.pattern.pattern_type == PatternType::Literal
                && b.pattern.name == WILDCARD
        });
        let allowed = !denied_everywhere
            && applying().any(|b| {
                b.entry.permission == PermissionType::Allow && b.entry.operation.allows(op)
            });
        if !allowed {
            self.denied(ctx, op, resource_type, "(any)");
        }
        allowed
    }

    /// Kafka's authorized-operations bitfield (bit `1 << code`) of `ops` on
    /// the resource, for Metadata and DescribeCluster.
    pub fn authorized_operations(
        &self,
        ctx: &RequestContext,
        resource_type: ResourceType,
        name: &str,
        ops: &[AclOperation],
    ) -> i32 {
        ops.iter()
            .filter(|op| self.check(ctx, **op, resource_type, name))
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

fn log_denial(ctx: &RequestContext, op: AclOperation, resource_type: ResourceType, name: &str) {
    tracing::debug!(principal = %ctx.principal, host = %ctx.host, operation = ?op, ?resource_type, resource = name, "authorization denied");
    if let Some(count) = DENIAL_LOG.admit() {
        tracing::info!(
            principal = %ctx.principal, host = %ctx.host, operation = ?op, ?resource_type, resource = name,
            denials_since_last_line = count, "authorization denied"
        );
    }
}

/// The operations Kafka reports for the CLUSTER resource.
pub const CLUSTER_OPERATIONS: &[AclOperation] = &[
    AclOperation::Create,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::ClusterAction,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
    AclOperation::IdempotentWrite,
];

/// The operations Kafka reports for a TOPIC.
pub const TOPIC_OPERATIONS: &[AclOperation] = &[
    AclOperation::Read,
    AclOperation::Write,
    AclOperation::Create,
    AclOperation::Delete,
    AclOperation::Alter,
    AclOperation::Describe,
    AclOperation::DescribeConfigs,
    AclOperation::AlterConfigs,
];

#[cfg(test)]
mod tests {
    use super::acl::AclBinding;
    use super::*;

    const TOPIC: i8 = 2;
    const GROUP: i8 = 3;
    const LITERAL: i8 = 3;
    const PREFIXED: i8 = 4;
    const ALL: i8 = 2;
    const READ: i8 = 3;
    const WRITE: i8 = 4;
    const DESCRIBE: i8 = 8;
    const ALTER_CONFIGS: i8 = 11;
    const DENY: i8 = 2;
    const ALLOW: i8 = 3;

    fn authorizer(dir: &std::path::Path, acls: &[AclBinding], allow_if_none: bool) -> Authorizer {
        let settings = AuthorizerSettings {
            enabled: true,
            super_users: ["User:admin".to_string()].into(),
            allow_everyone_if_no_acl_found: allow_if_none,
        };
        let a = Authorizer::open(settings, dir).expect("open");
        a.store().expect("store").add(acls).expect("add");
        a
    }

    fn acl(
        rt: i8,
        name: &str,
        pattern: i8,
        principal: &str,
        host: &str,
        op: i8,
        perm: i8,
    ) -> AclBinding {
        AclBinding::from_wire(rt, name, pattern, principal, host, op, perm).expect("valid binding")
    }

    fn user(name: &str) -> RequestContext {
        RequestContext { principal: format!("User:{name}"), host: "10.0.0.1".parse().expect("ip") }
    }

    fn can(a: &Authorizer, who: &str, op: AclOperation, rt: ResourceType, name: &str) -> bool {
        a.check(&user(who), op, rt, name)
    }

    #[test]
    fn literal_prefixed_and_wildcard_patterns() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = authorizer(
            dir.path(),
            &[
                acl(TOPIC, "orders-", PREFIXED, "User:alice", "*", WRITE, ALLOW),
                acl(TOPIC, "audit", LITERAL, "User:*", "*", READ, ALLOW),
                acl(TOPIC, "*", LITERAL, "User:bob", "*", DESCRIBE, ALLOW),
            ],
            false,
        );
        use AclOperation::*;
        use ResourceType::Topic;
        assert!(can(&a, "alice", Write, Topic, "orders-eu"));
        assert!(
            !can(&a, "alice", Write, Topic, "order"),
            "a prefix covers names that start with it only"
        );
        assert!(!can(&a, "alice", Write, Topic, "payments"), "no binding: denied by default");
        assert!(!can(&a, "alice", Read, Topic, "orders-eu"));
        assert!(can(&a, "carol", Read, Topic, "audit"), "User:* covers everyone");
        assert!(can(&a, "bob", Describe, Topic, "anything"), "literal * covers every topic");
        assert!(!can(&a, "bob", Describe, ResourceType::Group, "anything"), "the type must match");
    }

    #[test]
    fn deny_wins_and_all_matches_every_operation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = authorizer(
            dir.path(),
            &[
                acl(TOPIC, "t", LITERAL, "User:*", "*", ALL, ALLOW),
                acl(TOPIC, "t", LITERAL, "User:mallory", "*", WRITE, DENY),
                acl(TOPIC, "secret", PREFIXED, "User:*", "*", ALL, DENY),
                acl(TOPIC, "secret-x", LITERAL, "User:alice", "*", READ, ALLOW),
            ],
            false,
        );
        use AclOperation::*;
        use ResourceType::Topic;
        assert!(can(&a, "mallory", Read, Topic, "t"));
        assert!(!can(&a, "mallory", Write, Topic, "t"), "DENY beats ALLOW ALL");
        assert!(can(&a, "alice", Write, Topic, "t"));
        assert!(!can(&a, "alice", Read, Topic, "secret-x"), "DENY ALL beats a literal ALLOW");
        assert!(can(&a, "admin", Write, Topic, "secret-x"), "super users bypass ACLs");
    }

    #[test]
    fn implied_operations_apply_to_allows_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = authorizer(
            dir.path(),
            &[
                acl(TOPIC, "t", LITERAL, "User:alice", "*", READ, ALLOW),
                acl(TOPIC, "t", LITERAL, "User:alice", "*", ALTER_CONFIGS, ALLOW),
                acl(TOPIC, "u", LITERAL, "User:alice", "*", ALL, ALLOW),
                acl(TOPIC, "u", LITERAL, "User:alice", "*", READ, DENY),
                acl(GROUP, "g", LITERAL, "User:alice", "*", WRITE, ALLOW),
            ],
            false,
        );
        use AclOperation::*;
        use ResourceType::{Group, Topic};
        assert!(can(&a, "alice", Describe, Topic, "t"), "READ implies DESCRIBE");
        assert!(
            can(&a, "alice", DescribeConfigs, Topic, "t"),
            "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
        );
        assert!(!can(&a, "alice", Write, Topic, "t"));
        assert!(can(&a, "alice", Describe, Topic, "u"), "denying READ does not deny DESCRIBE");
        assert!(!can(&a, "alice", Read, Topic, "u"));
        assert!(can(&a, "alice", Describe, Group, "g"));
    }

    #[test]
    fn hosts_and_the_no_acl_default() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = authorizer(
            dir.path(),
            &[acl(TOPIC, "t", LITERAL, "User:alice", "10.0.0.2", READ, ALLOW)],
            true,
        );
        use AclOperation::*;
        use ResourceType::Topic;
        assert!(!can(&a, "alice", Read, Topic, "t"), "bound to another host");
        let from_there = RequestContext {
            principal: "User:alice".into(),
            host: "10.0.0.2".parse().expect("ip"),
        };
        assert!(a.check(&from_there, Read, Topic, "t"));
        assert!(
            can(&a, "bob", Write, Topic, "free"),
            "allow.everyone.if.no.acl.found=true opens unbound resources"
        );
        assert!(!can(&a, "bob", Read, Topic, "t"), "but not resources with bindings");
        assert!(
            Authorizer::disabled().check(&user("x"), Write, Topic, "t"),
            "off: everything is allowed"
        );
    }

    #[test]
    fn idempotent_write_by_resource_type() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = authorizer(
            dir.path(),
            &[
                acl(TOPIC, "orders-", PREFIXED, "User:alice", "*", WRITE, ALLOW),
                acl(TOPIC, "t", LITERAL, "User:bob", "*", READ, ALLOW),
            ],
            false,
        );
        assert!(a.authorize_any(&user("alice"), AclOperation::Write, ResourceType::Topic));
        assert!(!a.authorize_any(&user("bob"), AclOperation::Write, ResourceType::Topic));
    }

    #[test]
    fn bad_bindings_and_settings_are_refused() {
        assert!(
            AclBinding::from_wire(1, "t", LITERAL, "User:a", "*", READ, ALLOW).is_err(),
            "ANY type"
        );
        assert!(
            AclBinding::from_wire(TOPIC, "t", 2, "User:a", "*", READ, ALLOW).is_err(),
            "MATCH pattern"
        );
        assert!(
            AclBinding::from_wire(TOPIC, "t", LITERAL, "alice", "*", READ, ALLOW).is_err(),
            "principal"
        );
        assert!(
            AclBinding::from_wire(TOPIC, "t", LITERAL, "User:a", "example.com", READ, ALLOW)
                .is_err(),
            "host"
        );
        assert!(
            AclBinding::from_wire(4, "c", LITERAL, "User:a", "*", READ, ALLOW).is_err(),
            "cluster name"
        );
        let mut raw = std::collections::BTreeMap::new();
        raw.insert(
            "authorizer.class.name".to_string(),
            "kafka.security.authorizer.AclAuthorizer".to_string(),
        );
        raw.insert("super.users".to_string(), "User:admin; User:ops".to_string());
        raw.insert("allow.everyone.if.no.acl.found".to_string(), "false".to_string());
        let s = AuthorizerSettings::from_raw(&raw).expect("settings");
        assert!(s.enabled && s.super_users.contains("User:ops"));
        raw.insert("authorizer.class.name".to_string(), "com.example.Custom".to_string());
        assert!(AuthorizerSettings::from_raw(&raw).is_err());
    }

    #[test]
    fn match_and_any_filters() {
        use super::acl::AclBindingFilter;
        let lit = acl(TOPIC, "orders-eu", LITERAL, "User:a", "*", READ, ALLOW);
        let star = acl(TOPIC, "*", LITERAL, "User:a", "*", READ, ALLOW);
        let pre = acl(TOPIC, "orders-", PREFIXED, "User:a", "*", READ, ALLOW);
        let other = acl(TOPIC, "payments", LITERAL, "User:a", "*", READ, ALLOW);
        let m = AclBindingFilter::from_wire(TOPIC, Some("orders-eu"), 2, None, None, 1, 1)
            .expect("filter");
        assert!(m.matches(&lit) && m.matches(&star) && m.matches(&pre) && !m.matches(&other));
        let any =
            AclBindingFilter::from_wire(1, Some("orders-"), 1, None, None, 1, 1).expect("filter");
        assert!(any.matches(&pre) && !any.matches(&lit));
        let lit_only =
            AclBindingFilter::from_wire(TOPIC, None, LITERAL, None, None, READ, 1).expect("filter");
        assert!(lit_only.matches(&lit) && !lit_only.matches(&pre));
    }
}
