//! `floe topic`: create, list, describe, change and delete topics (Kafka's
//! `kafka-topics` and `kafka-configs --entity-type topics`), and produce or
//! consume from the shell.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest, DeleteTopicsRequest,
    DescribeConfigsRequest, DescribeLogDirsRequest, IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use floe_broker::text::{count, unlimited_or};

use super::admin::{check, error_name, Admin, CliFailure, Target};
use super::connect::{key_value, ConnectArgs};
use super::offsets::{list_offsets, EARLIEST, LATEST};
use super::output::{Output, Table};
use super::{consume, produce};

/// DescribeConfigs' resource type of a topic.
pub const TOPIC_RESOURCE: i8 = 2;

/// `floe topic ...`.
#[derive(Debug, clap::Subcommand)]
pub enum TopicCommand {
    /// Creates a topic.
    ///
    /// Examples:
    ///   floe topic create orders --partitions 6
    ///   floe topic create clicks --partitions 3 --replicas 3 -c retention.ms=86400000 -c cleanup.policy=compact
    #[command(verbatim_doc_comment)]
    Create {
        /// The topic's name.
        name: String,
        /// Number of partitions [default: the broker's `num.partitions`].
        #[arg(long, short = 'p')]
        partitions: Option<i32>,
        /// Replication factor [default: the broker's `default.replication.factor`].
        #[arg(long, short = 'r', visible_alias = "replication-factor")]
        replicas: Option<i16>,
        /// A topic setting, Kafka's names (`retention.ms=86400000`); repeatable.
        #[arg(long = "config", short = 'c', value_name = "KEY=VALUE")]
        configs: Vec<String>,
        /// Ask the broker to validate only: nothing is created.
        #[arg(long)]
        dry_run: bool,
    },
    /// Lists topics with their partition count and replication factor.
    ///
    /// Examples:
    ///   floe topic list
    ///   floe topic list --internal --format json
    #[command(verbatim_doc_comment)]
    List {
        /// Include internal topics (`__consumer_offsets`, `__transaction_state`...).
        #[arg(long, short = 'i')]
        internal: bool,
    },
    /// Shows a topic's partitions (leader, replicas, in-sync replicas, log
    /// start offset, high watermark) and its settings that differ from the defaults.
    ///
    /// Examples:
    ///   floe topic describe orders
    ///   floe topic describe orders --all-configs --format yaml
    #[command(verbatim_doc_comment)]
    Describe {
        /// The topics' names.
        #[arg(required = true)]
        names: Vec<String>,
        /// Show every setting, defaults included.
        #[arg(long)]
        all_configs: bool,
    },
    /// Changes a topic's settings (IncrementalAlterConfigs).
    ///
    /// Examples:
    ///   floe topic alter-config orders -s retention.ms=3600000 -s max.message.bytes=2097152
    ///   floe topic alter-config orders -d retention.ms
    #[command(verbatim_doc_comment)]
    AlterConfig {
        /// The topic's name.
        name: String,
        /// Set a setting; repeatable.
        #[arg(long = "set", short = 's', value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Remove a setting (back to the broker default); repeatable.
        #[arg(long = "delete", short = 'd', value_name = "KEY")]
        delete: Vec<String>,
        /// Ask the broker to validate only.
        #[arg(long)]
        dry_run: bool,
    },
    /// Raises a topic's partition count (it cannot shrink).
    ///
    /// Example:
    ///   floe topic add-partitions orders --total 12
    #[command(verbatim_doc_comment)]
    AddPartitions {
        /// The topic's name.
        name: String,
        /// The partition count after the change.
        #[arg(long, short = 't')]
        total: i32,
        /// Ask the broker to validate only.
        #[arg(long)]
        dry_run: bool,
    },
    /// Deletes topics.
    ///
    /// Example:
    ///   floe topic delete orders clicks
    #[command(verbatim_doc_comment)]
    Delete {
        /// The topics' names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Deletes the records before an offset (DeleteRecords): the log start
    /// offset moves there, in every partition given.
    ///
    /// Examples:
    ///   floe topic trim-prefix orders --offset 1000                # every partition
    ///   floe topic trim-prefix orders --partitions 0,2 --offset end  # empty them
    #[command(verbatim_doc_comment)]
    TrimPrefix {
        /// The topic's name.
        name: String,
        /// The partitions [default: all].
        #[arg(long, short = 'p', value_delimiter = ',')]
        partitions: Vec<i32>,
        /// The new log start offset: a number, or `end` (the high watermark).
        #[arg(long, short = 'o')]
        offset: String,
    },
    Produce(produce::ProduceArgs),
    Consume(consume::ConsumeArgs),
}

/// Runs a `floe topic` command.
///
/// # Errors
/// What went wrong, for people; [`super::admin::exit_code`] tells the exit code.
pub async fn run(command: TopicCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    match command {
        TopicCommand::Produce(args) => return produce::run(args, connect, out).await,
        TopicCommand::Consume(args) => return consume::run(args, connect, out).await,
        _ => {}
    }
    let mut admin = Admin::connect(connect).await?;
    execute(&mut admin, command, out).await
}

/// Runs a `floe topic` command other than produce and consume on a connected
/// client (the web console's way in, with the session's client).
///
/// # Errors
/// As [`run`]; produce and consume are refused (they read stdin or follow).
pub async fn execute(admin: &mut Admin, command: TopicCommand, out: Output) -> anyhow::Result<()> {
    match command {
        TopicCommand::Create { name, partitions, replicas, configs, dry_run } => {
            create(admin, out, name, partitions, replicas, configs, dry_run).await
        }
        TopicCommand::List { internal } => list(admin, out, internal).await,
        TopicCommand::Describe { names, all_configs } => {
            describe(admin, out, names, all_configs).await
        }
        TopicCommand::Delete { names } => delete(admin, out, names).await,
        TopicCommand::AlterConfig { name, set, delete, dry_run } => {
            alter_config(admin, out, name, set, delete, dry_run).await
        }
        TopicCommand::AddPartitions { name, total, dry_run } => {
            add_partitions(admin, out, name, total, dry_run).await
        }
        TopicCommand::TrimPrefix { name, partitions, offset } => {
            trim_prefix(admin, out, name, partitions, offset).await
        }
        TopicCommand::Produce(_) | TopicCommand::Consume(_) => {
            bail!("topic produce and consume run on their own, not through execute")
        }
    }
}

async fn create(
    admin: &mut Admin,
    out: Output,
    name: String,
    partitions: Option<i32>,
    replicas: Option<i16>,
    configs: Vec<String>,
    dry_run: bool,
) -> anyhow::Result<()> {
    let configs = configs
        .iter()
        .map(|c| {
            key_value(c, "-c").map(|(k, v)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(k))
                    .with_value(Some(StrBytes::from_string(v)))
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.clone())))
        .with_num_partitions(partitions.unwrap_or(-1))
        .with_replication_factor(replicas.unwrap_or(-1))
        .with_configs(configs);
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(30_000)
        .with_validate_only(dry_run);
    let response = admin.call(Target::Controller, &request).await?;
    let result = response
        .topics
        .first()
        .ok_or_else(|| anyhow!("CreateTopics answered nothing for {name}"))?;
    check(result.error_code, result.error_message.as_ref(), &format!("creating topic {name}"))?;
    let value = json!({
        "topic": name, "partitions": result.num_partitions, "replication_factor": result.replication_factor,
        "topic_id": result.topic_id.to_string(), "validate_only": dry_run,
    });
    let verb = if dry_run { "would be created (dry run)" } else { "created" };
    out.done(
        &value,
        &format!(
            "topic {name} {verb}: {}, replication factor {}",
            count(result.num_partitions, "partition"),
            result.replication_factor
        ),
    );
    Ok(())
}

async fn list(admin: &mut Admin, out: Output, internal: bool) -> anyhow::Result<()> {
    let metadata = admin.metadata(None).await?;
    let mut rows: Vec<Value> = Vec::new();
    for t in &metadata.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else { continue };
        if (t.is_internal || name.starts_with("__")) && !internal {
            continue;
        }
        let replicas = t.partitions.first().map_or(0, |p| p.replica_nodes.len());
        rows.push(json!({
            "topic": name, "partitions": t.partitions.len(), "replication_factor": replicas,
            "internal": t.is_internal, "error": error_name(t.error_code),
        }));
    }
    rows.sort_by(|a, b| a["topic"].as_str().cmp(&b["topic"].as_str()));
    let mut table = Table::new(&["topic", "partitions", "replicas"]);
    for r in &rows {
        table.row([
            r["topic"].as_str().unwrap_or("").to_string(),
            r["partitions"].to_string(),
            r["replication_factor"].to_string(),
        ]);
    }
    let notes = if rows.is_empty() {
        vec!["no topics (create one: floe topic create NAME --partitions N)".to_string()]
    } else {
        vec![]
    };
    out.print(&Value::Array(rows), &table, &notes);
    Ok(())
}

/// Each topic's settings: (name, value, source, read-only, sensitive), from DescribeConfigs.
pub async fn topic_configs(
    admin: &mut Admin,
    names: &[String],
) -> anyhow::Result<BTreeMap<String, Vec<Value>>> {
    let mut out = BTreeMap::new();
    for (name, configs) in topic_configs_each(admin, names).await? {
        out.insert(name, configs?);
    }
    Ok(out)
}

/// As [`topic_configs`], with each topic's own outcome: a principal may
/// describe a topic without DESCRIBE_CONFIGS on it, and `describe` still
/// shows its partitions then.
async fn topic_configs_each(
    admin: &mut Admin,
    names: &[String],
) -> anyhow::Result<BTreeMap<String, anyhow::Result<Vec<Value>>>> {
    let request = DescribeConfigsRequest::default().with_resources(
        names
            .iter()
            .map(|n| {
                DescribeConfigsResource::default()
                    .with_resource_type(TOPIC_RESOURCE)
                    .with_resource_name(StrBytes::from_string(n.clone()))
                    .with_configuration_keys(None)
            })
            .collect(),
    );
    let response = admin.call(Target::Any, &request).await?;
    let mut out = BTreeMap::new();
    for r in response.results {
        if let Err(e) = check(
            r.error_code,
            r.error_message.as_ref(),
            &format!("settings of topic {}", r.resource_name.as_str()),
        ) {
            out.insert(r.resource_name.to_string(), Err(e));
            continue;
        }
        let configs = r
            .configs
            .iter()
            .map(|c| {
                json!({
                    "name": c.name.as_str(),
                    "value": if c.is_sensitive { None } else { c.value.as_ref().map(|v| v.as_str().to_string()) },
                    "source": config_source(c.config_source),
                    "read_only": c.read_only, "sensitive": c.is_sensitive,
                })
            })
            .collect();
        out.insert(r.resource_name.to_string(), Ok(configs));
    }
    Ok(out)
}

/// Each partition's size on disk at its leader (DescribeLogDirs, asked of
/// each leader for the partitions it leads). Best effort: Kafka guards
/// DescribeLogDirs with DESCRIBE on the cluster, and a principal without it
/// still gets the rest of `describe`, with no sizes.
async fn leader_sizes(
    admin: &mut Admin,
    metadata: &kafka_protocol::messages::MetadataResponse,
) -> BTreeMap<(String, i32), i64> {
    let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
    for t in &metadata.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else { continue };
        for p in &t.partitions {
            if p.leader_id.0 >= 0 {
                by_leader
                    .entry(p.leader_id.0)
                    .or_default()
                    .entry(name.clone())
                    .or_default()
                    .push(p.partition_index);
            }
        }
    }
    let mut sizes = BTreeMap::new();
    for (leader, topics) in by_leader {
        let request = DescribeLogDirsRequest::default().with_topics(Some(
            topics
                .iter()
                .map(|(t, ps)| {
                    DescribableLogDirTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(t.clone())))
                        .with_partitions(ps.clone())
                })
                .collect(),
        ));
        let Ok(response) = admin.call(Target::Node(leader), &request).await else { continue };
        if response.error_code != 0 {
            continue;
        }
        for dir in response.results.iter().filter(|d| d.error_code == 0) {
            for t in &dir.topics {
                let asked = topics.get(t.name.0.as_str());
                for p in t.partitions.iter().filter(|p| {
                    !p.is_future_key && asked.is_some_and(|a| a.contains(&p.partition_index))
                }) {
                    *sizes.entry((t.name.0.to_string(), p.partition_index)).or_insert(0) +=
                        p.partition_size;
                }
            }
        }
    }
    sizes
}

/// `1.2 MiB`, for tables.
fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// DescribeConfigs' `config_source` as Kafka's `ConfigSource` names it.
pub fn config_source(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

async fn describe(
    admin: &mut Admin,
    out: Output,
    names: Vec<String>,
    all_configs: bool,
) -> anyhow::Result<()> {
    let metadata = admin.metadata(Some(&names)).await?;
    for t in &metadata.topics {
        let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
        check(t.error_code, None, &format!("topic {name}"))?;
    }
    let earliest = list_offsets(admin, &metadata, &names, EARLIEST, false).await?;
    let latest = list_offsets(admin, &metadata, &names, LATEST, false).await?;
    let sizes = leader_sizes(admin, &metadata).await;
    let mut configs = BTreeMap::new();
    let mut configs_errors = BTreeMap::new();
    for (name, result) in topic_configs_each(admin, &names).await? {
        match result {
            Ok(c) => {
                configs.insert(name, c);
            }
            // Authorization is per operation: the partitions are still worth showing.
            Err(e) if format!("{e}").contains("AUTHORIZATION_FAILED") => {
                configs_errors.insert(name, format!("{e}"));
            }
            Err(e) => return Err(e),
        }
    }
    let mut docs = Vec::new();
    let mut text = String::new();
    for t in &metadata.topics {
        let Some(name) = t.name.as_ref().map(|n| n.0.to_string()) else { continue };
        let mut parts: Vec<_> = t.partitions.iter().collect();
        parts.sort_by_key(|p| p.partition_index);
        let mut table = Table::new(&[
            "partition",
            "leader",
            "epoch",
            "replicas",
            "isr",
            "offline",
            "log-start",
            "high-watermark",
            "records",
            "size",
        ]);
        let mut partitions = Vec::new();
        for p in parts {
            let ids = |v: &[kafka_protocol::messages::BrokerId]| {
                v.iter().map(|b| b.0).collect::<Vec<_>>()
            };
            let start = earliest.get(&(name.clone(), p.partition_index)).copied();
            let end = latest.get(&(name.clone(), p.partition_index)).copied();
            let records = match (start, end) {
                (Some(s), Some(e)) if e >= s => Some(e - s),
                _ => None,
            };
            let join = |v: Vec<i32>| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
            let size = sizes.get(&(name.clone(), p.partition_index)).copied();
            table.row([
                p.partition_index.to_string(),
                p.leader_id.0.to_string(),
                p.leader_epoch.to_string(),
                join(ids(&p.replica_nodes)),
                join(ids(&p.isr_nodes)),
                join(ids(&p.offline_replicas)),
                start.map_or("-".into(), |o| o.to_string()),
                end.map_or("-".into(), |o| o.to_string()),
                records.map_or("-".into(), |o| o.to_string()),
                size.map_or("-".into(), human_bytes),
            ]);
            partitions.push(json!({
                "partition": p.partition_index, "leader": p.leader_id.0, "leader_epoch": p.leader_epoch,
                "replicas": ids(&p.replica_nodes), "isr": ids(&p.isr_nodes), "offline_replicas": ids(&p.offline_replicas),
                "log_start_offset": start, "high_watermark": end, "records": records, "size_bytes": size, "error": error_name(p.error_code),
            }));
        }
        let topic_configs = configs.get(&name).cloned().unwrap_or_default();
        let shown: Vec<&Value> = topic_configs
            .iter()
            .filter(|c| all_configs || c["source"] == "DYNAMIC_TOPIC_CONFIG")
            .collect();
        let replicas = t.partitions.first().map_or(0, |p| p.replica_nodes.len());
        text.push_str(&format!(
            "Topic: {name}  Id: {}  Partitions: {}  Replication: {replicas}{}\n",
            t.topic_id,
            t.partitions.len(),
            if t.is_internal { "  (internal)" } else { "" }
        ));
        if let Some(e) = configs_errors.get(&name) {
            text.push_str(&format!("Configs: not shown: {e}\n"));
        } else if shown.is_empty() {
            text.push_str(if all_configs {
                "Configs: none\n"
            } else {
                "Configs: all defaults (--all-configs shows them)\n"
            });
        } else {
            let mut ct = Table::new(&["config", "value", "source"]);
            for c in &shown {
                ct.row([
                    c["name"].as_str().unwrap_or("").to_string(),
                    config_cell(c),
                    c["source"].as_str().unwrap_or("").to_string(),
                ]);
            }
            text.push_str(&ct.render());
        }
        text.push('\n');
        text.push_str(&table.render());
        text.push('\n');
        docs.push(json!({
            "topic": name, "topic_id": t.topic_id.to_string(), "internal": t.is_internal,
            "partitions": partitions, "configs": shown, "configs_error": configs_errors.get(&name),
        }));
    }
    match out.format {
        super::output::Format::Table => {
            print!("{}", text.trim_end_matches('\n').to_string() + "\n")
        }
        _ => out.print(&Value::Array(docs), &Table::default(), &[]),
    }
    Ok(())
}

async fn delete(admin: &mut Admin, out: Output, names: Vec<String>) -> anyhow::Result<()> {
    let mut request = DeleteTopicsRequest::default().with_timeout_ms(30_000);
    if admin.negotiate::<DeleteTopicsRequest>(Target::Controller).await? >= 6 {
        request.topics = names
            .iter()
            .map(|n| {
                DeleteTopicState::default()
                    .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
            })
            .collect();
    } else {
        request.topic_names =
            names.iter().map(|n| TopicName(StrBytes::from_string(n.clone()))).collect();
    }
    let response = admin.call(Target::Controller, &request).await?;
    let mut failures = Vec::new();
    let mut results = Vec::new();
    for r in &response.responses {
        let name = r.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
        let err = error_name(r.error_code);
        if let Err(e) =
            check(r.error_code, r.error_message.as_ref(), &format!("deleting topic {name}"))
        {
            failures.push(e);
        } else if out.format == super::output::Format::Table {
            println!("topic {name} deleted");
        }
        results.push(json!({"topic": name, "error": err}));
    }
    if out.format != super::output::Format::Table {
        out.print(&Value::Array(results), &Table::default(), &[]);
    }
    super::admin::combine_failures(failures)
}

/// IncrementalAlterConfigs' operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

async fn alter_config(
    admin: &mut Admin,
    out: Output,
    name: String,
    set: Vec<String>,
    delete: Vec<String>,
    dry_run: bool,
) -> anyhow::Result<()> {
    if set.is_empty() && delete.is_empty() {
        bail!("nothing to change: give -s KEY=VALUE to set a setting or -d KEY to remove one");
    }
    let mut ops = Vec::new();
    let mut changes = Vec::new();
    for s in &set {
        let (k, v) = key_value(s, "-s")?;
        changes.push(json!({"name": k, "operation": "SET", "value": v}));
        ops.push(
            AlterableConfig::default()
                .with_name(StrBytes::from_string(k))
                .with_config_operation(OP_SET)
                .with_value(Some(StrBytes::from_string(v))),
        );
    }
    for k in &delete {
        changes.push(json!({"name": k, "operation": "DELETE", "value": null}));
        ops.push(
            AlterableConfig::default()
                .with_name(StrBytes::from_string(k.clone()))
                .with_config_operation(OP_DELETE)
                .with_value(None),
        );
    }
    let request = IncrementalAlterConfigsRequest::default()
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(TOPIC_RESOURCE)
            .with_resource_name(StrBytes::from_string(name.clone()))
            .with_configs(ops)])
        .with_validate_only(dry_run);
    let response = admin.call(Target::Any, &request).await?;
    let result = response
        .responses
        .first()
        .ok_or_else(|| anyhow!("IncrementalAlterConfigs answered nothing for {name}"))?;
    check(
        result.error_code,
        result.error_message.as_ref(),
        &format!("changing the settings of topic {name}"),
    )?;
    // What the topic's settings are now (before, for a dry run: nothing changed).
    let configs = topic_configs(admin, std::slice::from_ref(&name)).await?;
    let set_now: Vec<Value> = configs
        .get(&name)
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["source"] == "DYNAMIC_TOPIC_CONFIG")
        .collect();
    let doc =
        json!({"topic": name, "validate_only": dry_run, "changes": changes, "configs": set_now});
    if out.format != super::output::Format::Table {
        out.print(&doc, &Table::default(), &[]);
        return Ok(());
    }
    if dry_run {
        println!("topic {name}: the change is valid (dry run: nothing changed)");
        let mut t = Table::new(&["config", "operation", "value"]);
        for c in &changes {
            t.row([
                c["name"].as_str().unwrap_or("").to_string(),
                c["operation"].as_str().unwrap_or("").to_string(),
                unlimited_or(c["value"].as_str().unwrap_or("")),
            ]);
        }
        print!("{}", t.render());
        return Ok(());
    }
    println!("topic {name}: settings changed");
    if set_now.is_empty() {
        println!("Configs: all defaults");
    } else {
        let mut t = Table::new(&["config", "value", "source"]);
        for c in &set_now {
            t.row([
                c["name"].as_str().unwrap_or("").to_string(),
                config_cell(c),
                c["source"].as_str().unwrap_or("").to_string(),
            ]);
        }
        print!("{}", t.render());
    }
    Ok(())
}

async fn add_partitions(
    admin: &mut Admin,
    out: Output,
    name: String,
    total: i32,
    dry_run: bool,
) -> anyhow::Result<()> {
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.clone())))
            .with_count(total)
            .with_assignments(None)])
        .with_timeout_ms(30_000)
        .with_validate_only(dry_run);
    let response = admin.call(Target::Controller, &request).await?;
    let result = response
        .results
        .first()
        .ok_or_else(|| anyhow!("CreatePartitions answered nothing for {name}"))?;
    check(
        result.error_code,
        result.error_message.as_ref(),
        &format!("adding partitions to topic {name}"),
    )?;
    let verb = if dry_run { "would have" } else { "now has" };
    let suffix = if dry_run { " (dry run: nothing changed)" } else { "" };
    out.done(
        &json!({"topic": name, "partitions": total, "validate_only": dry_run}),
        &format!("topic {name} {verb} {}{suffix}", count(total, "partition")),
    );
    Ok(())
}

/// A config's value for the table: `(sensitive)` when hidden, Kafka's
/// `Long.MAX_VALUE` as `unlimited` (JSON keeps the value as the broker gave it).
fn config_cell(c: &Value) -> String {
    match c["value"].as_str() {
        Some(v) => unlimited_or(v),
        None if c["sensitive"] == true => "(sensitive)".to_string(),
        None => String::new(),
    }
}

/// DeleteRecords' offset for "up to the high watermark".
const TRIM_TO_END: i64 = -1;

async fn trim_prefix(
    admin: &mut Admin,
    out: Output,
    name: String,
    partitions: Vec<i32>,
    offset: String,
) -> anyhow::Result<()> {
    let offset = match offset.as_str() {
        "end" => TRIM_TO_END,
        n => match n.parse::<i64>() {
            Ok(o) if o >= 0 => o,
            _ => bail!("--offset `{n}` is not an offset (a number from 0) or `end`"),
        },
    };
    let metadata = admin.metadata(Some(std::slice::from_ref(&name))).await?;
    let topic = metadata
        .topics
        .first()
        .ok_or_else(|| anyhow!("Metadata answered nothing for topic {name}"))?;
    check(topic.error_code, None, &format!("topic {name}"))?;
    let leaders: BTreeMap<i32, i32> =
        topic.partitions.iter().map(|p| (p.partition_index, p.leader_id.0)).collect();
    let chosen: Vec<i32> =
        if partitions.is_empty() { leaders.keys().copied().collect() } else { partitions };
    // One request per leader, each for its partitions.
    let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for p in &chosen {
        let Some(&leader) = leaders.get(p) else {
            return Err(CliFailure::NotFound(format!(
                "topic {name} has no partition {p} (it has {})",
                leaders.len()
            ))
            .into());
        };
        if leader < 0 {
            bail!("partition {name}-{p} has no leader (see `floe cluster health`); nothing trimmed there");
        }
        by_leader.entry(leader).or_default().push(*p);
    }
    let mut results = BTreeMap::new();
    let mut failures = Vec::new();
    for (leader, parts) in by_leader {
        let request = DeleteRecordsRequest::default().with_timeout_ms(30_000).with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(TopicName(StrBytes::from_string(name.clone())))
                .with_partitions(
                    parts
                        .iter()
                        .map(|&p| {
                            DeleteRecordsPartition::default()
                                .with_partition_index(p)
                                .with_offset(offset)
                        })
                        .collect(),
                ),
        ]);
        let response = admin.call(Target::Node(leader), &request).await?;
        for t in response.topics {
            for p in t.partitions {
                let hint = if p.error_code
                    == kafka_protocol::error::ResponseError::OffsetOutOfRange.code()
                {
                    " (past the high watermark: see `floe topic describe`)"
                } else {
                    ""
                };
                if let Err(e) =
                    check(p.error_code, None, &format!("trimming {name}-{}", p.partition_index))
                {
                    failures.push(format!("{e}{hint}"));
                }
                results.insert(p.partition_index, (p.low_watermark, error_name(p.error_code)));
            }
        }
    }
    // The error column only when a partition failed.
    let mut table = if failures.is_empty() {
        Table::new(&["partition", "low-watermark"])
    } else {
        Table::new(&["partition", "low-watermark", "error"])
    };
    let mut rows = Vec::new();
    for (p, (low, err)) in &results {
        let mut cells =
            vec![p.to_string(), if err.is_some() { "-".to_string() } else { low.to_string() }];
        if !failures.is_empty() {
            cells.push(err.clone().unwrap_or_default());
        }
        table.row(cells);
        rows.push(json!({"partition": p, "low_watermark": if err.is_some() { None } else { Some(low) }, "error": err}));
    }
    out.print(&json!({"topic": name, "partitions": rows}), &table, &[]);
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}
