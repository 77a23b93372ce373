//! `floe cluster`: what the cluster is (`info`: its id, controller, brokers,
//! topic and partition counts) and whether it is well (`health`:
//! under-replicated and offline partitions, brokers that do not answer), all
//! from Metadata, as `kafka-topics --under-replicated-partitions` and
//! `--unavailable-partitions` read it.

use anyhow::bail;
use kafka_protocol::messages::metadata_response::MetadataResponsePartition;
use kafka_protocol::messages::{ApiVersionsRequest, MetadataResponse};
use serde_json::{json, Value};

use floe_broker::text::count;

use super::admin::{Admin, Target};
use super::connect::ConnectArgs;
use super::output::{Format, Output, Table};

/// `floe cluster ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Shows the cluster id, the controller, every broker (id, address, rack)
    /// and how many topics and partitions there are.
    ///
    /// Examples:
    ///   floe cluster info
    ///   floe cluster info --format json
    #[command(verbatim_doc_comment)]
    Info,
    /// Checks the cluster: partitions whose in-sync replicas are fewer than
    /// their replicas (under-replicated) or that have no leader (offline), and
    /// brokers in the metadata that do not answer a connection. Exits 0 when
    /// all is well, 1 when not (naming the partitions and brokers).
    ///
    /// Examples:
    ///   floe cluster health
    ///   floe cluster health --format json || alert "kafka unhealthy"
    #[command(verbatim_doc_comment)]
    Health,
}

/// Runs a `floe cluster` command.
///
/// # Errors
/// What went wrong, for people; for `health`, an unhealthy cluster (exit code 1).
pub async fn run(
    command: ClusterCommand,
    connect: &ConnectArgs,
    out: Output,
) -> anyhow::Result<()> {
    let mut admin = Admin::connect(connect).await?;
    execute(&mut admin, command, out).await
}

/// Runs a `floe cluster` command on a connected client (the web console's way in).
///
/// # Errors
/// As [`run`].
pub async fn execute(
    admin: &mut Admin,
    command: ClusterCommand,
    out: Output,
) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Info => info(admin, out).await,
        ClusterCommand::Health => health(admin, out).await,
    }
}

fn ids(v: &[kafka_protocol::messages::BrokerId]) -> Vec<i32> {
    v.iter().map(|b| b.0).collect()
}

fn brokers_json(metadata: &MetadataResponse) -> Vec<Value> {
    let mut brokers: Vec<Value> = metadata
        .brokers
        .iter()
        .map(|b| {
            json!({
                "id": b.node_id.0, "host": b.host.as_str(), "port": b.port,
                "address": format!("{}:{}", b.host.as_str(), b.port),
                "rack": b.rack.as_ref().map(|r| r.as_str()),
                "controller": b.node_id == metadata.controller_id,
            })
        })
        .collect();
    brokers.sort_by_key(|b| b["id"].as_i64());
    brokers
}

async fn info(admin: &mut Admin, out: Output) -> anyhow::Result<()> {
    let metadata = admin.metadata(None).await?;
    let brokers = brokers_json(&metadata);
    let topics = metadata.topics.iter().filter(|t| t.error_code == 0).count();
    let internal = metadata.topics.iter().filter(|t| t.error_code == 0 && t.is_internal).count();
    let partitions: usize = metadata.topics.iter().map(|t| t.partitions.len()).sum();
    let cluster_id = metadata.cluster_id.as_ref().map(|c| c.to_string());
    let controller = (metadata.controller_id.0 >= 0).then_some(metadata.controller_id.0);
    let doc = json!({
        "cluster_id": cluster_id, "controller": controller, "brokers": brokers,
        "topics": topics, "internal_topics": internal, "partitions": partitions,
    });
    if out.format != Format::Table {
        out.print(&doc, &Table::default(), &[]);
        return Ok(());
    }
    println!("Cluster id: {}", cluster_id.as_deref().unwrap_or("-"));
    println!("Controller: {}", controller.map_or("none".to_string(), |c| c.to_string()));
    println!("Topics: {topics} ({internal} internal)  Partitions: {partitions}");
    println!();
    let mut table = Table::new(&["id", "address", "rack", "controller"]);
    for b in &brokers {
        table.row([
            b["id"].to_string(),
            b["address"].as_str().unwrap_or("").to_string(),
            b["rack"].as_str().unwrap_or("-").to_string(),
            if b["controller"] == true { "yes" } else { "" }.to_string(),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

fn partition_json(topic: &str, p: &MetadataResponsePartition) -> Value {
    json!({
        "topic": topic, "partition": p.partition_index, "leader": p.leader_id.0,
        "replicas": ids(&p.replica_nodes), "isr": ids(&p.isr_nodes), "offline_replicas": ids(&p.offline_replicas),
    })
}

async fn health(admin: &mut Admin, out: Output) -> anyhow::Result<()> {
    let metadata = admin.metadata(None).await?;
    let mut under_replicated = Vec::new();
    let mut offline = Vec::new();
    for t in &metadata.topics {
        let Some(name) = t.name.as_ref().map(|n| n.to_string()) else { continue };
        let mut parts: Vec<_> = t.partitions.iter().collect();
        parts.sort_by_key(|p| p.partition_index);
        for p in parts {
            // No leader: nobody can produce or consume (Kafka's "unavailable").
            if p.leader_id.0 < 0 {
                offline.push(partition_json(&name, p));
            }
            // Fewer in sync than assigned, or a replica on a broker that is down.
            if p.isr_nodes.len() < p.replica_nodes.len() || !p.offline_replicas.is_empty() {
                under_replicated.push(partition_json(&name, p));
            }
        }
    }
    let mut brokers = brokers_json(&metadata);
    let mut unreachable = Vec::new();
    for b in &mut brokers {
        let Some(id) = b["id"].as_i64().and_then(|i| i32::try_from(i).ok()) else { continue };
        let answer = admin.call(Target::Node(id), &ApiVersionsRequest::default()).await;
        let error = answer.err().map(|e| e.root_cause().to_string());
        if error.is_some() {
            unreachable.push(id);
        }
        b["reachable"] = json!(error.is_none());
        b["error"] = json!(error);
    }
    let no_controller = metadata.controller_id.0 < 0;
    let healthy = under_replicated.is_empty()
        && offline.is_empty()
        && unreachable.is_empty()
        && !no_controller;
    let doc = json!({
        "healthy": healthy, "controller": (!no_controller).then_some(metadata.controller_id.0), "brokers": brokers,
        "unreachable_brokers": unreachable, "under_replicated_partitions": under_replicated, "offline_partitions": offline,
    });
    let name = |p: &Value| format!("{}-{}", p["topic"].as_str().unwrap_or(""), p["partition"]);
    if out.format != Format::Table {
        out.print(&doc, &Table::default(), &[]);
    } else {
        let partitions: usize = metadata.topics.iter().map(|t| t.partitions.len()).sum();
        println!(
            "{}: {}, {}; {} under-replicated, {} offline, {} not answering",
            if healthy { "healthy" } else { "UNHEALTHY" },
            count(brokers.len(), "broker"),
            count(partitions, "partition"),
            under_replicated.len(),
            offline.len(),
            count(unreachable.len(), "broker")
        );
        if no_controller {
            println!("no controller: the brokers have not elected one");
        }
        let join = |v: &Value| {
            v.as_array()
                .map(|a| a.iter().map(Value::to_string).collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        };
        for (title, list) in [
            ("Offline partitions (no leader)", &offline),
            ("Under-replicated partitions", &under_replicated),
        ] {
            if list.is_empty() {
                continue;
            }
            let mut table =
                Table::new(&["topic", "partition", "leader", "replicas", "isr", "offline"]);
            for p in list {
                table.row([
                    p["topic"].as_str().unwrap_or("").to_string(),
                    p["partition"].to_string(),
                    p["leader"].to_string(),
                    join(&p["replicas"]),
                    join(&p["isr"]),
                    join(&p["offline_replicas"]),
                ]);
            }
            println!("\n{title}:");
            print!("{}", table.render());
        }
        for b in brokers.iter().filter(|b| b["reachable"] == false) {
            println!(
                "\nbroker {} at {} does not answer: {}",
                b["id"],
                b["address"].as_str().unwrap_or(""),
                b["error"].as_str().unwrap_or("")
            );
        }
    }
    if !healthy {
        let mut what = Vec::new();
        if !offline.is_empty() {
            what.push(format!(
                "offline: {}",
                offline.iter().map(name).collect::<Vec<_>>().join(", ")
            ));
        }
        if !under_replicated.is_empty() {
            what.push(format!(
                "under-replicated: {}",
                under_replicated.iter().map(name).collect::<Vec<_>>().join(", ")
            ));
        }
        if !unreachable.is_empty() {
            what.push(format!(
                "brokers not answering: {}",
                unreachable.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        if no_controller {
            what.push("no controller".to_string());
        }
        bail!("the cluster is unhealthy ({})", what.join("; "));
    }
    Ok(())
}
