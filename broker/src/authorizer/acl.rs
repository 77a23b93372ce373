//! The ACL model and its matching rules, in Apache Kafka's vocabulary.
//!
//! An [`AclBinding`] is a [`ResourcePattern`] (resource type, name, LITERAL or
//! PREFIXED) plus an [`AccessControlEntry`] (principal, host, operation,
//! ALLOW or DENY). The numeric codes of every enum are Kafka's wire codes, so
//! the ACL APIs pass them through unchanged. Filters (DescribeAcls,
//! DeleteAcls) add ANY and MATCH, which never appear in a stored binding.

use serde::{Deserialize, Serialize};

/// What a binding protects. Codes as Kafka's `ResourceType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResourceType {
    /// Filter only: every type.
    Any,
    /// A topic.
    Topic,
    /// A consumer group.
    Group,
    /// The cluster (resource name `kafka-cluster`).
    Cluster,
    /// A transactional id.
    TransactionalId,
}

impl ResourceType {
    /// Kafka's wire code.
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Any => 1,
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    /// Kafka's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ResourceType::Any => "ANY",
            ResourceType::Topic => "TOPIC",
            ResourceType::Group => "GROUP",
            ResourceType::Cluster => "CLUSTER",
            ResourceType::TransactionalId => "TRANSACTIONAL_ID",
        }
    }

    /// The type of a wire code; `None` for UNKNOWN and types Floe has no use for
    /// (DELEGATION_TOKEN, USER).
    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            1 => ResourceType::Any,
            2 => ResourceType::Topic,
            3 => ResourceType::Group,
            4 => ResourceType::Cluster,
            5 => ResourceType::TransactionalId,
            _ => return None,
        })
    }
}

/// How a binding's resource name is compared. Codes as Kafka's `PatternType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PatternType {
    /// Filter only: bindings of any pattern type whose name equals the filter's.
    Any,
    /// Filter only: every binding that would apply to the named resource
    /// (literal equal, literal `*`, or a prefix of it).
    Match,
    /// The name is the resource name, or `*` for every resource of the type.
    Literal,
    /// The name is a prefix of the resource names it covers.
    Prefixed,
}

impl PatternType {
    /// Kafka's wire code.
    pub fn code(self) -> i8 {
        match self {
            PatternType::Any => 1,
            PatternType::Match => 2,
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    /// The pattern type of a wire code; `None` for UNKNOWN or out of range.
    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            1 => PatternType::Any,
            2 => PatternType::Match,
            3 => PatternType::Literal,
            4 => PatternType::Prefixed,
            _ => return None,
        })
    }
}

/// An operation on a resource. Codes as Kafka's `AclOperation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum AclOperation {
    /// Filter only: every operation.
    Any,
    /// Every operation (in a binding).
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
    CreateTokens,
    DescribeTokens,
}

impl AclOperation {
    /// Kafka's wire code.
    pub fn code(self) -> i8 {
        match self {
            AclOperation::Any => 1,
            AclOperation::All => 2,
            AclOperation::Read => 3,
            AclOperation::Write => 4,
            AclOperation::Create => 5,
            AclOperation::Delete => 6,
            AclOperation::Alter => 7,
            AclOperation::Describe => 8,
            AclOperation::ClusterAction => 9,
            AclOperation::DescribeConfigs => 10,
            AclOperation::AlterConfigs => 11,
            AclOperation::IdempotentWrite => 12,
            AclOperation::CreateTokens => 13,
            AclOperation::DescribeTokens => 14,
        }
    }

    /// The operation of a wire code; `None` for UNKNOWN or out of range.
    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            1 => AclOperation::Any,
            2 => AclOperation::All,
            3 => AclOperation::Read,
            4 => AclOperation::Write,
            5 => AclOperation::Create,
            6 => AclOperation::Delete,
            7 => AclOperation::Alter,
            8 => AclOperation::Describe,
            9 => AclOperation::ClusterAction,
            10 => AclOperation::DescribeConfigs,
            11 => AclOperation::AlterConfigs,
            12 => AclOperation::IdempotentWrite,
            13 => AclOperation::CreateTokens,
            14 => AclOperation::DescribeTokens,
            _ => return None,
        })
    }

    /// Whether an ALLOW binding for `self` allows `requested`: the same
    /// operation, ALL, or one Kafka implies (READ, WRITE, DELETE and ALTER
    /// imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS).
    pub fn allows(self, requested: AclOperation) -> bool {
        use AclOperation::*;
        self == All
            || self == requested
            || (requested == Describe && matches!(self, Read | Write | Delete | Alter))
            || (requested == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY binding for `self` denies `requested`: the same
    /// operation or ALL. Implication does not apply to denials, as in Kafka
    /// (denying READ does not deny DESCRIBE).
    pub fn denies(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }
}

/// ALLOW or DENY. Codes as Kafka's `AclPermissionType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PermissionType {
    /// Filter only: both.
    Any,
    /// The binding denies.
    Deny,
    /// The binding allows.
    Allow,
}

impl PermissionType {
    /// Kafka's wire code.
    pub fn code(self) -> i8 {
        match self {
            PermissionType::Any => 1,
            PermissionType::Deny => 2,
            PermissionType::Allow => 3,
        }
    }

    /// The permission of a wire code; `None` for UNKNOWN or out of range.
    pub fn from_code(code: i8) -> Option<Self> {
        Some(match code {
            1 => PermissionType::Any,
            2 => PermissionType::Deny,
            3 => PermissionType::Allow,
            _ => return None,
        })
    }
}

/// The literal name that covers every resource of a type.
pub const WILDCARD: &str = "*";
/// The principal that covers every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The only resource name of the CLUSTER resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The resources a binding applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourcePattern {
    /// The resource type (never ANY in a binding).
    pub resource_type: ResourceType,
    /// The name, the prefix, or `*`.
    pub name: String,
    /// LITERAL or PREFIXED (never ANY or MATCH in a binding).
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// Whether this pattern covers the resource `resource_type`/`name`.
    pub fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
                PatternType::Any | PatternType::Match => false,
            }
    }
}

/// Who may (or may not) do what, from where.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AccessControlEntry {
    /// `User:NAME` or `User:*`.
    pub principal: String,
    /// An IP address, or `*` for any host.
    pub host: String,
    /// The operation (never ANY in a binding).
    pub operation: AclOperation,
    /// ALLOW or DENY (never ANY in a binding).
    pub permission: PermissionType,
}

impl AccessControlEntry {
    /// Whether the entry names this principal and host (or their wildcards).
    pub fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == WILDCARD || self.host == host)
    }
}

/// One ACL: a resource pattern and an entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AclBinding {
    /// What it protects.
    pub pattern: ResourcePattern,
    /// Who, from where, which operation, allow or deny.
    pub entry: AccessControlEntry,
}

/// Why a binding in a CreateAcls request is refused (INVALID_REQUEST in Kafka).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAcl {
    /// A code that is unknown, or a filter-only value (ANY, MATCH).
    #[error("{0}")]
    BadCode(&'static str),
    /// The principal is not `TYPE:NAME`.
    #[error("principal `{0}` is not of the form User:NAME")]
    BadPrincipal(String),
    /// The host is neither `*` nor an IP address.
    #[error("host `{0}` is neither * nor an IP address")]
    BadHost(String),
    /// An empty resource name, or a CLUSTER resource not named `kafka-cluster`.
    #[error("{0}")]
    BadName(String),
}

impl AclBinding {
    /// A binding from wire codes, checked as Kafka checks CreateAcls input.
    ///
    /// # Errors
    /// [`InvalidAcl`] naming the first bad field.
    pub fn from_wire(
        resource_type: i8,
        name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<Self, InvalidAcl> {
        let resource_type = match ResourceType::from_code(resource_type) {
            Some(ResourceType::Any) | None => {
                return Err(InvalidAcl::BadCode(
                    "resource type must be TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID",
                ))
            }
            Some(t) => t,
        };
        let pattern_type = match PatternType::from_code(pattern_type) {
            Some(p @ (PatternType::Literal | PatternType::Prefixed)) => p,
            _ => return Err(InvalidAcl::BadCode("pattern type must be LITERAL or PREFIXED")),
        };
        let operation = match AclOperation::from_code(operation) {
            Some(AclOperation::Any) | None => {
                return Err(InvalidAcl::BadCode("operation must be a concrete operation or ALL"))
            }
            Some(o) => o,
        };
        let permission = match PermissionType::from_code(permission) {
            Some(p @ (PermissionType::Allow | PermissionType::Deny)) => p,
            _ => return Err(InvalidAcl::BadCode("permission type must be ALLOW or DENY")),
        };
        match principal.split_once(':') {
            Some((kind, user)) if !kind.is_empty() && !user.is_empty() => {}
            _ => return Err(InvalidAcl::BadPrincipal(principal.to_string())),
        }
        if host != WILDCARD && host.parse::<std::net::IpAddr>().is_err() {
            return Err(InvalidAcl::BadHost(host.to_string()));
        }
        if name.is_empty() {
            return Err(InvalidAcl::BadName("resource name must not be empty".into()));
        }
        if resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
            return Err(InvalidAcl::BadName(format!(
                "the CLUSTER resource is named {CLUSTER_NAME}, not `{name}`"
            )));
        }
        Ok(AclBinding {
            pattern: ResourcePattern { resource_type, name: name.to_string(), pattern_type },
            entry: AccessControlEntry {
                principal: principal.to_string(),
                host: host.to_string(),
                operation,
                permission,
            },
        })
    }
}

/// A DescribeAcls or DeleteAcls filter: `None` fields match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    /// ANY or one type.
    pub resource_type: ResourceType,
    /// `None`: any name.
    pub name: Option<String>,
    /// ANY, MATCH, LITERAL or PREFIXED.
    pub pattern_type: PatternType,
    /// `None`: any principal (compared literally, as Kafka does).
    pub principal: Option<String>,
    /// `None`: any host (compared literally).
    pub host: Option<String>,
    /// ANY or one operation (compared literally: a READ filter does not match ALL).
    pub operation: AclOperation,
    /// ANY, ALLOW or DENY.
    pub permission: PermissionType,
}

impl AclBindingFilter {
    /// A filter from wire codes.
    ///
    /// # Errors
    /// [`InvalidAcl::BadCode`] for UNKNOWN or out-of-range codes.
    pub fn from_wire(
        resource_type: i8,
        name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<Self, InvalidAcl> {
        Ok(AclBindingFilter {
            resource_type: ResourceType::from_code(resource_type)
                .ok_or(InvalidAcl::BadCode("unknown resource type"))?,
            name: name.map(str::to_string),
            pattern_type: PatternType::from_code(pattern_type)
                .ok_or(InvalidAcl::BadCode("unknown pattern type"))?,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: AclOperation::from_code(operation)
                .ok_or(InvalidAcl::BadCode("unknown operation"))?,
            permission: PermissionType::from_code(permission)
                .ok_or(InvalidAcl::BadCode("unknown permission type"))?,
        })
    }

    /// Whether `binding` is selected by this filter.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        let p = &binding.pattern;
        let e = &binding.entry;
        let type_ok =
            self.resource_type == ResourceType::Any || self.resource_type == p.resource_type;
        let pattern_ok = match (self.pattern_type, &self.name) {
            (PatternType::Any, None) => true,
            (PatternType::Any, Some(name)) => &p.name == name,
            (PatternType::Match, None) => true,
            // Every binding that applies to the resource named `name`.
            (PatternType::Match, Some(name)) => match p.pattern_type {
                PatternType::Literal => &p.name == name || p.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(p.name.as_str()),
                PatternType::Any | PatternType::Match => false,
            },
            (wanted, name) => {
                wanted == p.pattern_type && name.as_ref().is_none_or(|n| n == &p.name)
            }
        };
        type_ok
            && pattern_ok
            && self.principal.as_ref().is_none_or(|x| x == &e.principal)
            && self.host.as_ref().is_none_or(|x| x == &e.host)
            && (self.operation == AclOperation::Any || self.operation == e.operation)
            && (self.permission == PermissionType::Any || self.permission == e.permission)
    }
}
