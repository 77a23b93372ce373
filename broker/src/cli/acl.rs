//! `floe acl`: create, list and delete access control lists (Kafka's
//! `kafka-acls --add|--list|--remove`), with kafka-acls' flags and Kafka's
//! names, through CreateAcls, DescribeAcls and DeleteAcls to any broker.
//!
//! An ACL is a principal (`User:alice`) allowed or denied an operation
//! (`Read`) on a resource pattern (`--topic orders`, literal or prefixed)
//! from a host (`*`: any). Kafka sends one ACL per principal × operation ×
//! resource × host; so does `floe acl create`.

use anyhow::{anyhow, bail};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use super::admin::{check, Admin, Target};
use super::connect::ConnectArgs;
use super::output::{Output, Table};

/// Kafka's `ResourceType` codes.
const RESOURCE_ANY: i8 = 1;
const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_GROUP: i8 = 3;
const RESOURCE_CLUSTER: i8 = 4;
const RESOURCE_TRANSACTIONAL_ID: i8 = 5;
/// The one cluster resource's name, as Kafka spells it.
const CLUSTER_NAME: &str = "kafka-cluster";
/// Kafka's `AclOperation.ANY` and `AclPermissionType.ANY` (filters only).
const ANY: i8 = 1;
const PERMISSION_DENY: i8 = 2;
const PERMISSION_ALLOW: i8 = 3;

/// An operation an ACL allows or denies (Kafka's `AclOperation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Operation {
    /// Consume from a topic, commit to a group.
    #[value(name = "Read")]
    Read,
    /// Produce to a topic or a transactional id.
    #[value(name = "Write")]
    Write,
    /// Create topics.
    #[value(name = "Create")]
    Create,
    /// Delete topics, records, groups.
    #[value(name = "Delete")]
    Delete,
    /// Change partitions, ACLs.
    #[value(name = "Alter")]
    Alter,
    /// See a topic, group or transactional id.
    #[value(name = "Describe")]
    Describe,
    /// What brokers do to one another (replication).
    #[value(name = "ClusterAction", alias = "cluster-action", alias = "cluster_action")]
    ClusterAction,
    /// Read settings.
    #[value(name = "DescribeConfigs", alias = "describe-configs", alias = "describe_configs")]
    DescribeConfigs,
    /// Change settings.
    #[value(name = "AlterConfigs", alias = "alter-configs", alias = "alter_configs")]
    AlterConfigs,
    /// Idempotent produce (on the cluster).
    #[value(name = "IdempotentWrite", alias = "idempotent-write", alias = "idempotent_write")]
    IdempotentWrite,
    /// Every operation.
    #[value(name = "All")]
    All,
}

impl Operation {
    fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
        }
    }
}

/// `--resource-pattern-type`: how an ACL's name matches resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PatternType {
    /// The name exactly (or `*`: every resource of the type).
    Literal,
    /// Every resource whose name starts with it.
    Prefixed,
    /// Filters only: ACLs of either pattern type with this name.
    Any,
    /// Filters only: every ACL that applies to a resource of this name
    /// (literal, `*`, and prefixes of it).
    Match,
}

impl PatternType {
    fn code(self) -> i8 {
        match self {
            PatternType::Any => 1,
            PatternType::Match => 2,
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }
}

/// Which resources: kafka-acls' resource flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ResourceArgs {
    /// A topic (`*`: every topic); repeatable.
    #[arg(long = "topic", value_name = "TOPIC")]
    pub topics: Vec<String>,
    /// A consumer group (`*`: every group); repeatable.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// A transactional id (`*`: every one); repeatable.
    #[arg(long = "transactional-id", value_name = "ID")]
    pub transactional_ids: Vec<String>,
    /// The cluster itself (`kafka-cluster`): creating topics, idempotent writes, ACLs...
    #[arg(long)]
    pub cluster: bool,
}

impl ResourceArgs {
    /// (resource type, name) for every resource flag given.
    fn resources(&self) -> Vec<(i8, String)> {
        let mut out = Vec::new();
        out.extend(self.topics.iter().map(|t| (RESOURCE_TOPIC, t.clone())));
        out.extend(self.groups.iter().map(|g| (RESOURCE_GROUP, g.clone())));
        out.extend(self.transactional_ids.iter().map(|t| (RESOURCE_TRANSACTIONAL_ID, t.clone())));
        if self.cluster {
            out.push((RESOURCE_CLUSTER, CLUSTER_NAME.to_string()));
        }
        out
    }
}

/// Whose ACLs: kafka-acls' principal flags.
#[derive(Debug, Clone, clap::Args)]
pub struct PrincipalArgs {
    /// A principal to allow, `User:NAME` (`User:*`: everyone); repeatable.
    #[arg(long = "allow-principal", value_name = "TYPE:NAME", value_parser = parse_principal)]
    pub allow: Vec<String>,
    /// A principal to deny, `User:NAME`; repeatable. A DENY wins over any ALLOW.
    #[arg(long = "deny-principal", value_name = "TYPE:NAME", value_parser = parse_principal)]
    pub deny: Vec<String>,
}

impl PrincipalArgs {
    /// (permission, principal) pairs.
    fn pairs(&self) -> Vec<(i8, String)> {
        let allow = self.allow.iter().map(|p| (PERMISSION_ALLOW, p.clone()));
        allow.chain(self.deny.iter().map(|p| (PERMISSION_DENY, p.clone()))).collect()
    }
}

/// `Type:name`, as Kafka's `KafkaPrincipal` is written.
fn parse_principal(text: &str) -> Result<String, String> {
    match text.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(text.to_string()),
        _ => Err(format!(
            "`{text}` is not a principal: write TYPE:NAME, e.g. User:alice (User:* for everyone)"
        )),
    }
}

/// `floe acl ...`.
#[derive(Debug, clap::Subcommand)]
pub enum AclCommand {
    /// Adds ACLs (CreateAcls): every principal given is allowed (or denied)
    /// every operation given on every resource given, from --host. Needs the
    /// ALTER operation on the cluster (a super user, say).
    ///
    /// Examples:
    ///   floe acl create --allow-principal User:alice --operation Read --operation Describe --topic orders
    ///   floe acl create --allow-principal User:alice --operation Read --group billing
    ///   floe acl create --allow-principal User:etl --operation Write --topic logs- --resource-pattern-type prefixed
    ///   floe acl create --deny-principal User:bob --operation All --topic payments --host 10.0.0.7
    ///   floe acl create --allow-principal User:admin --operation Create --cluster
    #[command(verbatim_doc_comment)]
    Create {
        #[command(flatten)]
        principals: PrincipalArgs,
        /// The operation, Kafka's names: Read, Write, Create, Delete, Alter,
        /// Describe, ClusterAction, DescribeConfigs, AlterConfigs,
        /// IdempotentWrite, All; repeatable.
        #[arg(long = "operation", required = true, ignore_case = true, value_name = "OPERATION")]
        operations: Vec<Operation>,
        #[command(flatten)]
        resources: ResourceArgs,
        /// How the resource names match: `literal` (exactly) or `prefixed`.
        #[arg(long, value_enum, default_value = "literal", value_name = "TYPE")]
        resource_pattern_type: PatternType,
        /// The client host the ACL applies to (`*`: any host).
        #[arg(long, default_value = "*")]
        host: String,
    },
    /// Lists ACLs (DescribeAcls), all of them or those the filters match.
    /// Needs the DESCRIBE operation on the cluster.
    ///
    /// Examples:
    ///   floe acl list
    ///   floe acl list --topic orders                                # literal ACLs on orders
    ///   floe acl list --topic orders --resource-pattern-type match  # every ACL that applies to orders
    ///   floe acl list --allow-principal User:alice --format json
    #[command(verbatim_doc_comment)]
    List {
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Deletes the ACLs the filters match (DeleteAcls) and prints what was
    /// removed. A resource is required, so that a slip cannot remove every ACL.
    ///
    /// Examples:
    ///   floe acl delete --allow-principal User:alice --operation Read --topic orders
    ///   floe acl delete --topic orders                  # every literal ACL on orders
    ///   floe acl delete --topic '*' --resource-pattern-type any
    #[command(verbatim_doc_comment)]
    Delete {
        #[command(flatten)]
        filter: FilterArgs,
    },
}

/// The filters of `acl list` and `acl delete`: what is not given matches anything.
#[derive(Debug, Clone, clap::Args)]
pub struct FilterArgs {
    #[command(flatten)]
    principals: PrincipalArgs,
    /// Only this operation (Kafka's names, as for `acl create`); repeatable.
    #[arg(long = "operation", ignore_case = true, value_name = "OPERATION")]
    operations: Vec<Operation>,
    #[command(flatten)]
    resources: ResourceArgs,
    /// `literal`, `prefixed`, `any` (either, with this name) or `match` (every
    /// ACL that applies to this name) [default: `literal`, as kafka-acls; every
    /// pattern type when no resource is named].
    #[arg(long, value_enum, value_name = "TYPE")]
    resource_pattern_type: Option<PatternType>,
    /// Only ACLs for this host [default: any host].
    #[arg(long)]
    host: Option<String>,
}

/// One ACL filter, in the wire's codes (`None`: any).
#[derive(Debug, Clone)]
struct Filter {
    resource_type: i8,
    resource_name: Option<String>,
    pattern_type: i8,
    principal: Option<String>,
    host: Option<String>,
    operation: i8,
    permission: i8,
}

impl FilterArgs {
    /// Every combination of the filters given (the wire takes one value per
    /// field). As kafka-acls: the pattern type is `literal` unless given, and
    /// any pattern type when no resource is named.
    fn filters(&self) -> Vec<Filter> {
        let named = self.resources.resources();
        let default_pattern =
            if named.is_empty() { PatternType::Any } else { PatternType::Literal };
        let resources: Vec<(i8, Option<String>)> = match named {
            r if r.is_empty() => vec![(RESOURCE_ANY, None)],
            r => r.into_iter().map(|(t, n)| (t, Some(n))).collect(),
        };
        let principals: Vec<(i8, Option<String>)> = match self.principals.pairs() {
            p if p.is_empty() => vec![(ANY, None)],
            p => p.into_iter().map(|(perm, p)| (perm, Some(p))).collect(),
        };
        let operations: Vec<i8> = if self.operations.is_empty() {
            vec![ANY]
        } else {
            self.operations.iter().map(|o| o.code()).collect()
        };
        let pattern = self.resource_pattern_type.unwrap_or(default_pattern).code();
        let mut out = Vec::new();
        for (resource_type, resource_name) in &resources {
            for (permission, principal) in &principals {
                for operation in &operations {
                    out.push(Filter {
                        resource_type: *resource_type,
                        resource_name: resource_name.clone(),
                        pattern_type: pattern,
                        principal: principal.clone(),
                        host: self.host.clone(),
                        operation: *operation,
                        permission: *permission,
                    });
                }
            }
        }
        out
    }
}

/// Runs a `floe acl` command.
///
/// # Errors
/// What went wrong, for people; [`super::admin::exit_code`] tells the exit code.
pub async fn run(command: AclCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    // Checked before connecting: a usage slip should not wait for a broker.
    if let Err(message) = validate(&command) {
        usage_error(&message);
    }
    let mut admin = Admin::connect(connect).await?;
    execute(&mut admin, command, out).await
}

/// The flag combinations clap's derive cannot express, as a usage message.
///
/// # Errors
/// What is missing or wrong, for people.
pub fn validate(command: &AclCommand) -> Result<(), String> {
    match command {
        AclCommand::Create { principals, resources, resource_pattern_type, .. } => {
            if principals.pairs().is_empty() {
                return Err("give the principal with --allow-principal User:NAME or --deny-principal User:NAME".into());
            }
            if resources.resources().is_empty() {
                return Err(
                    "give the resource: --topic T, --group G, --transactional-id ID or --cluster"
                        .into(),
                );
            }
            if matches!(resource_pattern_type, PatternType::Any | PatternType::Match) {
                return Err(format!(
                    "--resource-pattern-type {} is for filters (acl list, acl delete); an ACL is `literal` or `prefixed`",
                    pattern_name(resource_pattern_type.code()).to_ascii_lowercase()
                ));
            }
        }
        AclCommand::Delete { filter } if filter.resources.resources().is_empty() => {
            return Err("give the resource whose ACLs go: --topic T, --group G, --transactional-id ID or --cluster (`--topic '*' --resource-pattern-type any` for every topic ACL)".into());
        }
        _ => {}
    }
    Ok(())
}

/// Runs a `floe acl` command on a connected client (the web console's way
/// in); [`validate`] it first.
///
/// # Errors
/// As [`run`].
pub async fn execute(admin: &mut Admin, command: AclCommand, out: Output) -> anyhow::Result<()> {
    match command {
        AclCommand::Create { principals, operations, resources, resource_pattern_type, host } => {
            create(admin, out, &principals, &operations, &resources, resource_pattern_type, &host)
                .await
        }
        AclCommand::List { filter } => list(admin, out, &filter).await,
        AclCommand::Delete { filter } => delete(admin, out, &filter).await,
    }
}

/// Prints `message` as clap prints a usage error and exits 2, as clap does:
/// these are the flag combinations clap's derive cannot express.
pub fn usage_error(message: &str) -> ! {
    clap::Error::raw(clap::error::ErrorKind::MissingRequiredArgument, format!("{message}\n")).exit()
}

/// An ACL as JSON, in Kafka's names.
fn acl_json(
    resource_type: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> Value {
    json!({
        "principal": principal, "host": host, "operation": operation_name(operation), "permission": permission_name(permission),
        "resource_type": resource_type_name(resource_type), "resource_name": name, "pattern_type": pattern_name(pattern),
    })
}

/// The table of ACLs `acl list` and `acl delete` print.
fn acl_table(acls: &[Value]) -> Table {
    let mut table = Table::new(&[
        "principal",
        "host",
        "operation",
        "permission",
        "resource-type",
        "name",
        "pattern",
    ]);
    for a in acls {
        let cell = |k: &str| a[k].as_str().unwrap_or("").to_string();
        table.row([
            cell("principal"),
            cell("host"),
            cell("operation"),
            cell("permission"),
            cell("resource_type"),
            cell("resource_name"),
            cell("pattern_type"),
        ]);
    }
    table
}

/// SECURITY_DISABLED explained, or `check`'s error.
fn check_acl(code: i16, message: Option<&StrBytes>, what: &str) -> anyhow::Result<()> {
    if code == ResponseError::SecurityDisabled.code() {
        bail!(
            "{what}: SECURITY_DISABLED: this broker has no authorizer, so it keeps no ACLs and lets every client do everything. \
             To use ACLs, start it with authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer, \
             super.users=User:ADMIN and a SASL or TLS listener that names the clients"
        );
    }
    check(code, message, what)
}

async fn create(
    admin: &mut Admin,
    out: Output,
    principals: &PrincipalArgs,
    operations: &[Operation],
    resources: &ResourceArgs,
    pattern: PatternType,
    host: &str,
) -> anyhow::Result<()> {
    let mut creations = Vec::new();
    for (resource_type, name) in resources.resources() {
        for (permission, principal) in principals.pairs() {
            for op in operations {
                creations.push(
                    AclCreation::default()
                        .with_resource_type(resource_type)
                        .with_resource_name(StrBytes::from_string(name.clone()))
                        .with_resource_pattern_type(pattern.code())
                        .with_principal(StrBytes::from_string(principal.clone()))
                        .with_host(StrBytes::from_string(host.to_string()))
                        .with_operation(op.code())
                        .with_permission_type(permission),
                );
            }
        }
    }
    let request = CreateAclsRequest::default().with_creations(creations.clone());
    let response = admin.call(Target::Any, &request).await?;
    if response.results.len() != creations.len() {
        bail!(
            "CreateAcls answered {} results for {} ACLs",
            response.results.len(),
            creations.len()
        );
    }
    let mut created = Vec::new();
    let mut failures = Vec::new();
    for (c, result) in creations.iter().zip(&response.results) {
        let acl = acl_json(
            c.resource_type,
            c.resource_name.as_str(),
            c.resource_pattern_type,
            c.principal.as_str(),
            c.host.as_str(),
            c.operation,
            c.permission_type,
        );
        let what = format!(
            "creating the ACL {} {} {} on {} {}",
            c.principal.as_str(),
            permission_name(c.permission_type),
            operation_name(c.operation),
            resource_type_name(c.resource_type),
            c.resource_name.as_str()
        );
        match check_acl(result.error_code, result.error_message.as_ref(), &what) {
            Ok(()) => created.push(acl),
            Err(e) => failures.push(e),
        }
    }
    if !created.is_empty() {
        let mut text = format!("created {}:\n", floe_broker::text::count(created.len(), "ACL"));
        text.push_str(acl_table(&created).render().trim_end());
        out.done(&Value::Array(created), &text);
    }
    match failures.len() {
        0 => Ok(()),
        1 => Err(failures.remove(0)),
        _ => Err(anyhow!(
            "{}",
            failures.iter().map(|e| format!("{e:#}")).collect::<Vec<_>>().join("\n")
        )),
    }
}

async fn list(admin: &mut Admin, out: Output, filter: &FilterArgs) -> anyhow::Result<()> {
    let mut acls: Vec<Value> = Vec::new();
    for f in filter.filters() {
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(f.resource_type)
            .with_resource_name_filter(f.resource_name.map(StrBytes::from_string))
            .with_pattern_type_filter(f.pattern_type)
            .with_principal_filter(f.principal.map(StrBytes::from_string))
            .with_host_filter(f.host.map(StrBytes::from_string))
            .with_operation(f.operation)
            .with_permission_type(f.permission);
        let response = admin.call(Target::Any, &request).await?;
        check_acl(response.error_code, response.error_message.as_ref(), "listing ACLs")?;
        for r in &response.resources {
            for a in &r.acls {
                let acl = acl_json(
                    r.resource_type,
                    r.resource_name.as_str(),
                    r.pattern_type,
                    a.principal.as_str(),
                    a.host.as_str(),
                    a.operation,
                    a.permission_type,
                );
                // Several filters may match one ACL.
                if !acls.contains(&acl) {
                    acls.push(acl);
                }
            }
        }
    }
    acls.sort_by_key(|a| {
        [
            "resource_type",
            "resource_name",
            "pattern_type",
            "principal",
            "permission",
            "operation",
            "host",
        ]
        .map(|k| a[k].as_str().unwrap_or("").to_string())
    });
    let notes = if acls.is_empty() {
        vec!["no ACLs match (add one: floe acl create --allow-principal User:NAME --operation Read --topic T)".to_string()]
    } else {
        vec![]
    };
    out.print(&Value::Array(acls.clone()), &acl_table(&acls), &notes);
    Ok(())
}

async fn delete(admin: &mut Admin, out: Output, filter: &FilterArgs) -> anyhow::Result<()> {
    let filters: Vec<DeleteAclsFilter> = filter
        .filters()
        .into_iter()
        .map(|f| {
            DeleteAclsFilter::default()
                .with_resource_type_filter(f.resource_type)
                .with_resource_name_filter(f.resource_name.map(StrBytes::from_string))
                .with_pattern_type_filter(f.pattern_type)
                .with_principal_filter(f.principal.map(StrBytes::from_string))
                .with_host_filter(f.host.map(StrBytes::from_string))
                .with_operation(f.operation)
                .with_permission_type(f.permission)
        })
        .collect();
    let response =
        admin.call(Target::Any, &DeleteAclsRequest::default().with_filters(filters)).await?;
    let mut removed: Vec<Value> = Vec::new();
    let mut failures = Vec::new();
    for result in &response.filter_results {
        if let Err(e) = check_acl(result.error_code, result.error_message.as_ref(), "deleting ACLs")
        {
            failures.push(format!("{e:#}"));
            continue;
        }
        for m in &result.matching_acls {
            let acl = acl_json(
                m.resource_type,
                m.resource_name.as_str(),
                m.pattern_type,
                m.principal.as_str(),
                m.host.as_str(),
                m.operation,
                m.permission_type,
            );
            match check_acl(
                m.error_code,
                m.error_message.as_ref(),
                &format!("deleting the ACL {acl}"),
            ) {
                Ok(()) if !removed.contains(&acl) => removed.push(acl),
                Ok(()) => {}
                Err(e) => failures.push(format!("{e:#}")),
            }
        }
    }
    if out.format == super::output::Format::Table {
        if removed.is_empty() {
            println!("no ACL matched: nothing deleted (see `floe acl list`)");
        } else {
            println!("deleted {}:", floe_broker::text::count(removed.len(), "ACL"));
            print!("{}", acl_table(&removed).render());
        }
    } else {
        out.print(&Value::Array(removed), &Table::default(), &[]);
    }
    if failures.is_empty() {
        Ok(())
    } else {
        bail!("{}", failures.join("\n"))
    }
}

/// Kafka's `ResourceType` names.
fn resource_type_name(code: i8) -> String {
    match code {
        1 => "ANY".into(),
        2 => "TOPIC".into(),
        3 => "GROUP".into(),
        4 => "CLUSTER".into(),
        5 => "TRANSACTIONAL_ID".into(),
        6 => "DELEGATION_TOKEN".into(),
        7 => "USER".into(),
        other => format!("UNKNOWN({other})"),
    }
}

/// Kafka's `PatternType` names.
fn pattern_name(code: i8) -> String {
    match code {
        1 => "ANY".into(),
        2 => "MATCH".into(),
        3 => "LITERAL".into(),
        4 => "PREFIXED".into(),
        other => format!("UNKNOWN({other})"),
    }
}

/// Kafka's `AclOperation` names.
fn operation_name(code: i8) -> String {
    match code {
        1 => "ANY".into(),
        2 => "ALL".into(),
        3 => "READ".into(),
        4 => "WRITE".into(),
        5 => "CREATE".into(),
        6 => "DELETE".into(),
        7 => "ALTER".into(),
        8 => "DESCRIBE".into(),
        9 => "CLUSTER_ACTION".into(),
        10 => "DESCRIBE_CONFIGS".into(),
        11 => "ALTER_CONFIGS".into(),
        12 => "IDEMPOTENT_WRITE".into(),
        13 => "CREATE_TOKENS".into(),
        14 => "DESCRIBE_TOKENS".into(),
        other => format!("UNKNOWN({other})"),
    }
}

/// Kafka's `AclPermissionType` names.
fn permission_name(code: i8) -> String {
    match code {
        1 => "ANY".into(),
        2 => "DENY".into(),
        3 => "ALLOW".into(),
        other => format!("UNKNOWN({other})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_every_combination_and_what_is_not_given_matches_anything() {
        let args = FilterArgs {
            principals: PrincipalArgs {
                allow: vec!["User:alice".into()],
                deny: vec!["User:bob".into()],
            },
            operations: vec![Operation::Read, Operation::Write],
            resources: ResourceArgs {
                topics: vec!["t".into()],
                groups: vec![],
                transactional_ids: vec![],
                cluster: true,
            },
            resource_pattern_type: None,
            host: None,
        };
        let filters = args.filters();
        assert_eq!(filters.len(), 2 * 2 * 2);
        assert!(filters.iter().any(|f| f.resource_type == RESOURCE_CLUSTER
            && f.resource_name.as_deref() == Some(CLUSTER_NAME)
            && f.permission == PERMISSION_DENY
            && f.principal.as_deref() == Some("User:bob")
            && f.operation == 4));
        assert!(filters.iter().all(|f| f.pattern_type == 3 && f.host.is_none()));

        let everything = FilterArgs {
            principals: PrincipalArgs { allow: vec![], deny: vec![] },
            operations: vec![],
            resources: ResourceArgs {
                topics: vec![],
                groups: vec![],
                transactional_ids: vec![],
                cluster: false,
            },
            resource_pattern_type: None,
            host: None,
        };
        let [f] = everything.filters().try_into().unwrap_or_else(|_| panic!("one filter"));
        assert_eq!(
            (f.resource_type, f.pattern_type, f.operation, f.permission),
            (RESOURCE_ANY, 1, ANY, ANY)
        );
        assert!(f.principal.is_none() && f.resource_name.is_none());
    }

    #[test]
    fn principals_need_a_type() {
        assert!(parse_principal("User:alice").is_ok());
        assert!(parse_principal("alice").unwrap_err().contains("User:alice"));
        assert!(parse_principal("User:").is_err());
    }
}
