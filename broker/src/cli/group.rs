//! `floe group`: consumer groups (Kafka's `kafka-consumer-groups`): list them,
//! describe one with its members and the lag of every partition, move its
//! committed offsets (`seek`, Kafka's `--reset-offsets`), delete them.
//!
//! Everything goes to the group's coordinator, as Kafka's own tool does:
//! DescribeGroups for the members, OffsetFetch for the committed offsets,
//! OffsetCommit (generation -1, no member id: an admin commit) to move them.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail};
use bytes::{Buf, Bytes};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_protocol_assignment::ConsumerProtocolAssignment;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, GroupId, ListGroupsRequest, OffsetCommitRequest,
    OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use serde_json::{json, Value};

use super::admin::{check, error_name, Admin, CliFailure, Target};
use super::connect::ConnectArgs;
use super::offsets::{list_offsets, EARLIEST, LATEST};
use super::output::{Format, Output, Table};

/// FindCoordinator's key type of a group.
const GROUP_KEY: i8 = 0;

/// `floe group ...`.
#[derive(Debug, clap::Subcommand)]
pub enum GroupCommand {
    /// Lists the cluster's groups with their state and protocol type (asks
    /// every broker: each answers for the groups it coordinates).
    ///
    /// Examples:
    ///   floe group list
    ///   floe group list --state Stable,Empty --format json
    #[command(verbatim_doc_comment)]
    List {
        /// Only groups in these states (Kafka's names: Stable, Empty,
        /// PreparingRebalance, CompletingRebalance, Dead); comma-separated.
        #[arg(long, short = 's', value_delimiter = ',')]
        state: Vec<String>,
    },
    /// Shows a group: its state, members and what each is assigned, and for
    /// every partition the committed offset, the log end offset and the lag
    /// between them (what `kafka-consumer-groups --describe` shows).
    ///
    /// Examples:
    ///   floe group describe billing
    ///   floe group describe billing --format json | jq .total_lag
    #[command(verbatim_doc_comment)]
    Describe {
        /// The group's id.
        group: String,
    },
    /// Moves a group's committed offsets (Kafka's --reset-offsets). Only
    /// while the group has no active members: stop its consumers first. Prints
    /// each partition's old and new offset. Without --topic: every partition
    /// the group has an offset for.
    ///
    /// --to takes:
    ///   earliest       the log start offset
    ///   latest         the log end offset (skip everything there is)
    ///   N              offset N (kept within the log's start and end)
    ///   @TIMESTAMP_MS  the first record at or after that time (milliseconds since the epoch)
    ///   shift:N        the committed offset plus N (negative goes back)
    ///
    /// Examples:
    ///   floe group seek billing --to earliest
    ///   floe group seek billing --to shift:-100 --topic orders:0,1 --dry-run
    ///   floe group seek billing --to @1700000000000 --topic orders
    #[command(verbatim_doc_comment)]
    Seek {
        /// The group's id.
        group: String,
        /// Where to: earliest, latest, N, @TIMESTAMP_MS or shift:N.
        #[arg(long, value_parser = parse_seek_to, allow_hyphen_values = true)]
        to: SeekTo,
        /// A topic, or TOPIC:P,P for some of its partitions; repeatable.
        #[arg(long = "topic", short = 't', value_name = "TOPIC[:P,P...]")]
        topics: Vec<String>,
        /// Show what would change; commit nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Deletes groups and their committed offsets (each must have no members).
    ///
    /// Example:
    ///   floe group delete billing old-billing
    #[command(verbatim_doc_comment)]
    Delete {
        /// The groups' ids.
        #[arg(required = true)]
        groups: Vec<String>,
    },
}

/// Where `group seek --to` moves the offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekTo {
    /// The log start offset.
    Earliest,
    /// The log end offset.
    Latest,
    /// This offset, kept within the log.
    Offset(i64),
    /// The first offset at or after this time (ms since the epoch).
    Timestamp(i64),
    /// The committed offset plus this.
    Shift(i64),
}

fn parse_seek_to(text: &str) -> Result<SeekTo, String> {
    let bad = || format!("`{text}` is not earliest, latest, an offset, @TIMESTAMP_MS or shift:N");
    match text {
        "earliest" => Ok(SeekTo::Earliest),
        "latest" => Ok(SeekTo::Latest),
        _ => {
            if let Some(ts) = text.strip_prefix('@') {
                ts.parse().map(SeekTo::Timestamp).map_err(|_| bad())
            } else if let Some(n) = text.strip_prefix("shift:") {
                n.parse().map(SeekTo::Shift).map_err(|_| bad())
            } else {
                match text.parse::<i64>() {
                    Ok(n) if n >= 0 => Ok(SeekTo::Offset(n)),
                    _ => Err(bad()),
                }
            }
        }
    }
}

/// Runs a `floe group` command.
///
/// # Errors
/// What went wrong, for people; [`super::admin::exit_code`] tells the exit code.
pub async fn run(command: GroupCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let mut admin = Admin::connect(connect).await?;
    execute(&mut admin, command, out).await
}

/// Runs a `floe group` command on a connected client (the web console's way in).
///
/// # Errors
/// As [`run`].
pub async fn execute(admin: &mut Admin, command: GroupCommand, out: Output) -> anyhow::Result<()> {
    match command {
        GroupCommand::List { state } => list(admin, out, state).await,
        GroupCommand::Describe { group } => describe(admin, out, &group).await,
        GroupCommand::Seek { group, to, topics, dry_run } => {
            seek(admin, out, &group, to, &topics, dry_run).await
        }
        GroupCommand::Delete { groups } => delete(admin, out, groups).await,
    }
}

async fn list(admin: &mut Admin, out: Output, states: Vec<String>) -> anyhow::Result<()> {
    // ListGroups answers for the groups the broker coordinates: ask them all.
    let brokers: Vec<i32> = admin.brokers().keys().copied().collect();
    let mut groups: BTreeMap<String, Value> = BTreeMap::new();
    let mut notes = Vec::new();
    for node in brokers {
        let target = Target::Node(node);
        let version = match admin.negotiate::<ListGroupsRequest>(target).await {
            Ok(v) => v,
            Err(e) => {
                notes.push(format!("broker {node} did not answer ({e:#}): its groups are missing"));
                continue;
            }
        };
        let mut request = ListGroupsRequest::default();
        if !states.is_empty() {
            if version < 4 {
                bail!("broker {node} speaks ListGroups v{version}, which has no state filter (v4, Kafka 2.6): leave out --state");
            }
            request.states_filter =
                states.iter().map(|s| StrBytes::from_string(s.clone())).collect();
        }
        let response = match admin.call_versioned(target, &request, Some(version)).await {
            Ok((r, _)) => r,
            Err(e) => {
                notes.push(format!("broker {node} did not answer ({e:#}): its groups are missing"));
                continue;
            }
        };
        check(response.error_code, None, &format!("listing the groups of broker {node}"))?;
        for g in response.groups {
            let state = if version >= 4 { Some(g.group_state.to_string()) } else { None };
            groups.insert(
                g.group_id.to_string(),
                json!({"group": g.group_id.as_str(), "state": state, "protocol_type": g.protocol_type.as_str(), "coordinator": node}),
            );
        }
    }
    let rows: Vec<Value> = groups.into_values().collect();
    let mut table = Table::new(&["group", "state", "protocol-type", "coordinator"]);
    for r in &rows {
        table.row([
            r["group"].as_str().unwrap_or("").to_string(),
            r["state"].as_str().unwrap_or("-").to_string(),
            r["protocol_type"].as_str().filter(|p| !p.is_empty()).unwrap_or("-").to_string(),
            r["coordinator"].to_string(),
        ]);
    }
    if rows.is_empty() {
        notes.push(if states.is_empty() {
            "no groups".to_string()
        } else {
            format!("no groups in state {}", states.join(" or "))
        });
    }
    out.print(&Value::Array(rows), &table, &notes);
    Ok(())
}

/// A member as DescribeGroups tells it, with its assignment decoded.
struct Member {
    member_id: String,
    instance_id: Option<String>,
    client_id: String,
    host: String,
    /// `(topic, partition)`s assigned; empty when the protocol is not `consumer`.
    assigned: Vec<(String, i32)>,
}

/// What DescribeGroups said of one group, at its coordinator.
struct GroupView {
    coordinator: i32,
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<Member>,
}

/// DescribeGroups at the group's coordinator. An unknown group comes back
/// as state `Dead` (GROUP_ID_NOT_FOUND from v6 on is read the same way).
async fn describe_group(admin: &mut Admin, group: &str) -> anyhow::Result<GroupView> {
    let coordinator = admin.coordinator(group, GROUP_KEY).await?;
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
    let response = admin.call(Target::Node(coordinator), &request).await?;
    let described: DescribedGroup = response
        .groups
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("DescribeGroups answered nothing for group {group}"))?;
    if described.error_code == ResponseError::GroupIdNotFound.code() {
        return Ok(GroupView {
            coordinator,
            state: "Dead".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: vec![],
        });
    }
    check(
        described.error_code,
        described.error_message.as_ref(),
        &format!("describing group {group}"),
    )?;
    let consumer = described.protocol_type.as_str() == "consumer";
    let members = described
        .members
        .iter()
        .map(|m| Member {
            member_id: m.member_id.to_string(),
            instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
            client_id: m.client_id.to_string(),
            host: m.client_host.to_string(),
            assigned: if consumer { decode_assignment(&m.member_assignment) } else { Vec::new() },
        })
        .collect();
    Ok(GroupView {
        coordinator,
        state: described.group_state.to_string(),
        protocol_type: described.protocol_type.to_string(),
        protocol: described.protocol_data.to_string(),
        members,
    })
}

/// The partitions in a consumer protocol assignment: a version (i16), then
/// the ConsumerProtocolAssignment of that version. A newer version than this
/// client knows is read as the newest it knows (Kafka's rule: later versions
/// only add fields at the end). Unreadable bytes give no partitions.
fn decode_assignment(bytes: &Bytes) -> Vec<(String, i32)> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16().clamp(0, 3);
    match ConsumerProtocolAssignment::decode(&mut buf, version) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |&p| (t.topic.to_string(), p)))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The group's committed offsets at its coordinator: `(topic, partition)` →
/// offset (partitions without one, offset -1, are left out).
/// The group's committed offsets, `(topic, partition)` → offset, from its coordinator.
///
/// # Errors
/// The call's error or the group's error code.
pub async fn committed_offsets(
    admin: &mut Admin,
    coordinator: i32,
    group: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let target = Target::Node(coordinator);
    let version = admin.negotiate::<OffsetFetchRequest>(target).await?;
    let group_id = GroupId(StrBytes::from_string(group.to_string()));
    let mut request = OffsetFetchRequest::default();
    if version >= 8 {
        request.groups =
            vec![OffsetFetchRequestGroup::default().with_group_id(group_id).with_topics(None)];
    } else {
        request.group_id = group_id;
        // Null topics (every partition) needs v2.
        request.topics = None;
    }
    let (response, version) = admin.call_versioned(target, &request, Some(version)).await?;
    let mut offsets = BTreeMap::new();
    let what = format!("committed offsets of group {group}");
    if version >= 8 {
        for g in response.groups {
            check(g.error_code, None, &what)?;
            for t in g.topics {
                for p in t.partitions {
                    check(
                        p.error_code,
                        None,
                        &format!("{what}, {}-{}", t.name.as_str(), p.partition_index),
                    )?;
                    if p.committed_offset >= 0 {
                        offsets.insert((t.name.to_string(), p.partition_index), p.committed_offset);
                    }
                }
            }
        }
    } else {
        check(response.error_code, None, &what)?;
        for t in response.topics {
            for p in t.partitions {
                check(
                    p.error_code,
                    None,
                    &format!("{what}, {}-{}", t.name.as_str(), p.partition_index),
                )?;
                if p.committed_offset >= 0 {
                    offsets.insert((t.name.to_string(), p.partition_index), p.committed_offset);
                }
            }
        }
    }
    Ok(offsets)
}

/// Commits `offsets` (topic, partition, next offset to read) for `group` as a
/// consumer outside the group's membership does (Kafka's `assign()` +
/// `commitSync()`: generation -1, no member id). The coordinator accepts it
/// only while the group has no members.
///
/// # Errors
/// The call's error, or a partition's error code (UNKNOWN_MEMBER_ID or
/// ILLEGAL_GENERATION when the group has members).
pub async fn commit_offsets(
    admin: &mut Admin,
    coordinator: i32,
    group: &str,
    offsets: &[(String, i32, i64)],
) -> anyhow::Result<()> {
    let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (t, p, offset) in offsets {
        by_topic.entry(t).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*offset),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(t, ps)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partitions(ps)
                })
                .collect(),
        );
    let response = admin.call(Target::Node(coordinator), &request).await?;
    for t in &response.topics {
        for p in &t.partitions {
            check(
                p.error_code,
                None,
                &format!("committing {}-{} for group {group}", t.name.as_str(), p.partition_index),
            )?;
        }
    }
    Ok(())
}

fn not_found(group: &str) -> anyhow::Error {
    CliFailure::NotFound(format!("group {group} not found: it has no members and no committed offsets (see `floe group list`)")).into()
}

async fn describe(admin: &mut Admin, out: Output, group: &str) -> anyhow::Result<()> {
    let view = describe_group(admin, group).await?;
    let committed = committed_offsets(admin, view.coordinator, group).await?;
    if view.state == "Dead" && committed.is_empty() && view.members.is_empty() {
        return Err(not_found(group));
    }
    // Who owns each partition.
    let mut owner: BTreeMap<(String, i32), &Member> = BTreeMap::new();
    for m in &view.members {
        for tp in &m.assigned {
            owner.insert(tp.clone(), m);
        }
    }
    let partitions: BTreeSet<(String, i32)> =
        committed.keys().cloned().chain(owner.keys().cloned()).collect();
    let topics: Vec<String> =
        partitions.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    // The log end offset as kafka-consumer-groups reads it: ListOffsets latest
    // at the default isolation (read_uncommitted), i.e. the high watermark.
    let mut ends = BTreeMap::new();
    let mut notes = Vec::new();
    if !topics.is_empty() {
        let metadata = admin.metadata(Some(&topics)).await?;
        for t in &metadata.topics {
            if t.error_code != 0 {
                let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                notes.push(format!(
                    "topic {name}: {} (no log end offset)",
                    error_name(t.error_code).unwrap_or_default()
                ));
            }
        }
        let present: Vec<String> = metadata
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .filter_map(|t| t.name.as_ref().map(|n| n.to_string()))
            .collect();
        ends = list_offsets(admin, &metadata, &present, LATEST, false).await?;
    }
    let coordinator_addr = admin.brokers().get(&view.coordinator).cloned().unwrap_or_default();
    let mut rows = Vec::new();
    let mut total_lag: i64 = 0;
    let mut table = Table::new(&[
        "topic",
        "partition",
        "current-offset",
        "log-end-offset",
        "lag",
        "consumer-id",
        "host",
        "client-id",
    ]);
    let dash = |v: Option<i64>| v.map_or("-".to_string(), |o| o.to_string());
    for tp in &partitions {
        let current = committed.get(tp).copied();
        let end = ends.get(tp).copied();
        // As kafka-consumer-groups computes it: negative when the committed
        // offset is past the end (the topic was recreated or truncated).
        let lag = match (current, end) {
            (Some(c), Some(e)) => Some(e - c),
            _ => None,
        };
        total_lag += lag.unwrap_or(0);
        let m = owner.get(tp);
        table.row([
            tp.0.clone(),
            tp.1.to_string(),
            dash(current),
            dash(end),
            dash(lag),
            m.map_or("-".into(), |m| m.member_id.clone()),
            m.map_or("-".into(), |m| m.host.clone()),
            m.map_or("-".into(), |m| m.client_id.clone()),
        ]);
        rows.push(json!({
            "topic": tp.0, "partition": tp.1, "committed_offset": current, "log_end_offset": end, "lag": lag,
            "member_id": m.map(|m| &m.member_id), "client_id": m.map(|m| &m.client_id), "host": m.map(|m| &m.host),
        }));
    }
    let members: Vec<Value> = view
        .members
        .iter()
        .map(|m| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for (t, p) in &m.assigned {
                by_topic.entry(t).or_default().push(*p);
            }
            json!({
                "member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id, "host": m.host,
                "assignment": by_topic.iter().map(|(t, ps)| json!({"topic": t, "partitions": ps})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let doc = json!({
        "group": group, "state": view.state, "protocol_type": view.protocol_type, "protocol": view.protocol,
        "coordinator": {"id": view.coordinator, "address": coordinator_addr},
        "members": members, "partitions": rows, "total_lag": total_lag,
    });
    if out.format != Format::Table {
        out.print(&doc, &Table::default(), &[]);
        return Ok(());
    }
    let protocol = match (view.protocol_type.as_str(), view.protocol.as_str()) {
        ("", _) => "-".to_string(),
        (t, "") => t.to_string(),
        (t, p) => format!("{t}/{p}"),
    };
    println!(
        "Group: {group}  State: {}  Protocol: {protocol}  Coordinator: {} ({coordinator_addr})  Members: {}  Total lag: {total_lag}",
        view.state,
        view.coordinator,
        view.members.len()
    );
    if !view.members.is_empty() {
        let mut mt = Table::new(&["member-id", "client-id", "host", "partitions"]);
        for m in &view.members {
            mt.row([
                m.member_id.clone(),
                m.client_id.clone(),
                m.host.clone(),
                m.assigned.len().to_string(),
            ]);
        }
        println!();
        print!("{}", mt.render());
    }
    println!();
    if table.is_empty() {
        println!("no partitions: the group has no committed offsets and no assignment");
    } else {
        print!("{}", table.render());
    }
    for n in notes {
        println!("{n}");
    }
    Ok(())
}

/// Parses `--topic T` or `--topic T:0,1`: the topic and its partitions (empty: all).
fn parse_topic_arg(text: &str) -> anyhow::Result<(String, Vec<i32>)> {
    match text.split_once(':') {
        None => Ok((text.to_string(), Vec::new())),
        Some((topic, parts)) => {
            let partitions = parts
                .split(',')
                .map(|p| {
                    p.trim().parse::<i32>().map_err(|_| {
                        anyhow!("--topic `{text}`: `{p}` is not a partition number (TOPIC:0,1,2)")
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            Ok((topic.to_string(), partitions))
        }
    }
}

async fn seek(
    admin: &mut Admin,
    out: Output,
    group: &str,
    to: SeekTo,
    topic_args: &[String],
    dry_run: bool,
) -> anyhow::Result<()> {
    let wanted =
        topic_args.iter().map(|t| parse_topic_arg(t)).collect::<anyhow::Result<Vec<_>>>()?;
    let view = describe_group(admin, group).await?;
    // Kafka refuses an admin commit for a group with members (UNKNOWN_MEMBER_ID);
    // say so, and who they are, before trying.
    if !view.members.is_empty() || !matches!(view.state.as_str(), "Empty" | "Dead") {
        let who = view
            .members
            .iter()
            .map(|m| format!("{} ({} at {})", m.member_id, m.client_id, m.host))
            .collect::<Vec<_>>()
            .join(", ");
        bail!(
            "group {group} is {} with {}: {who}. Offsets can be moved only while the group is inactive: stop its consumers, then seek again",
            view.state,
            floe_broker::text::count(view.members.len(), "active member")
        );
    }
    let committed = committed_offsets(admin, view.coordinator, group).await?;
    // The partitions to move.
    let mut partitions: BTreeSet<(String, i32)> = BTreeSet::new();
    if wanted.is_empty() {
        if committed.is_empty() {
            if view.state == "Dead" {
                return Err(not_found(group));
            }
            bail!("group {group} has no committed offsets: name the partitions with --topic TOPIC[:P,P]");
        }
        partitions.extend(committed.keys().cloned());
    }
    let named: Vec<String> =
        wanted.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let topics: Vec<String> = partitions
        .iter()
        .map(|(t, _)| t.clone())
        .chain(named.iter().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let metadata = admin.metadata(Some(&topics)).await?;
    let mut existing: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for t in &metadata.topics {
        let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
        if named.contains(&name) {
            check(t.error_code, None, &format!("topic {name}"))?;
        }
        existing.insert(name, t.partitions.iter().map(|p| p.partition_index).collect());
    }
    for (topic, parts) in &wanted {
        let all = existing.get(topic).cloned().unwrap_or_default();
        if parts.is_empty() {
            partitions.extend(all.iter().map(|&p| (topic.clone(), p)));
        }
        for &p in parts {
            if !all.contains(&p) {
                return Err(CliFailure::NotFound(format!(
                    "topic {topic} has no partition {p} (it has {})",
                    all.len()
                ))
                .into());
            }
            partitions.insert((topic.clone(), p));
        }
    }
    // Partitions of deleted topics (old offsets) cannot be moved.
    partitions.retain(|(t, p)| existing.get(t).is_some_and(|ps| ps.contains(p)));
    if partitions.is_empty() {
        bail!("none of the group's partitions exist any more; name some with --topic");
    }
    let live: Vec<String> =
        partitions.iter().map(|(t, _)| t.clone()).collect::<BTreeSet<_>>().into_iter().collect();
    let earliest = list_offsets(admin, &metadata, &live, EARLIEST, false).await?;
    let latest = list_offsets(admin, &metadata, &live, LATEST, false).await?;
    let at_time = match to {
        SeekTo::Timestamp(ts) => Some(list_offsets(admin, &metadata, &live, ts, false).await?),
        _ => None,
    };
    let mut moves = Vec::new();
    let mut notes = Vec::new();
    for tp in &partitions {
        let (Some(&start), Some(&end)) = (earliest.get(tp), latest.get(tp)) else {
            bail!("no offsets for {}-{} from its leader", tp.0, tp.1);
        };
        let old = committed.get(tp).copied();
        let target = match to {
            SeekTo::Earliest => start,
            SeekTo::Latest => end,
            SeekTo::Offset(n) => n,
            // No record that late: the end, as Kafka's tool does.
            SeekTo::Timestamp(_) => at_time.as_ref().and_then(|m| m.get(tp)).copied().filter(|&o| o >= 0).unwrap_or(end),
            SeekTo::Shift(n) => match old {
                Some(o) => o.saturating_add(n),
                None => bail!("cannot shift {}-{}: group {group} has no committed offset there (use --to earliest, latest or an offset)", tp.0, tp.1),
            },
        };
        // Kafka's tool keeps the offset within the log, saying so.
        let new = target.clamp(start, end.max(start));
        if new != target {
            notes.push(format!(
                "{}-{}: {target} is outside the log ({start}..{end}); {new} instead",
                tp.0, tp.1
            ));
        }
        moves.push((tp.clone(), old, new));
    }
    if !dry_run {
        let offsets: Vec<(String, i32, i64)> =
            moves.iter().map(|((t, p), _, new)| (t.clone(), *p, *new)).collect();
        commit_offsets(admin, view.coordinator, group, &offsets).await.map_err(|e| {
            anyhow::anyhow!(
                "{e:#} (a consumer joined the group meanwhile? stop it, then seek again)"
            )
        })?;
    }
    let mut table = Table::new(&["topic", "partition", "old-offset", "new-offset"]);
    let mut rows = Vec::new();
    for ((t, p), old, new) in &moves {
        table.row([
            t.clone(),
            p.to_string(),
            old.map_or("-".into(), |o| o.to_string()),
            new.to_string(),
        ]);
        rows.push(json!({"topic": t, "partition": p, "old_offset": old, "new_offset": new}));
    }
    if dry_run {
        notes.push("dry run: nothing committed".to_string());
    }
    let doc = json!({"group": group, "dry_run": dry_run, "partitions": rows});
    out.print(&doc, &table, &notes);
    Ok(())
}

async fn delete(admin: &mut Admin, out: Output, groups: Vec<String>) -> anyhow::Result<()> {
    let mut failures = Vec::new();
    let mut results = Vec::new();
    for group in &groups {
        let outcome = delete_one(admin, group).await;
        results.push(
            json!({"group": group, "error": outcome.as_ref().err().map(|e| format!("{e:#}"))}),
        );
        match outcome {
            Ok(()) if out.format == Format::Table => println!("group {group} deleted"),
            Ok(()) => {}
            Err(e) => failures.push(e),
        }
    }
    if out.format != Format::Table {
        out.print(&Value::Array(results), &Table::default(), &[]);
    }
    super::admin::combine_failures(failures)
}

async fn delete_one(admin: &mut Admin, group: &str) -> anyhow::Result<()> {
    let coordinator = admin.coordinator(group, GROUP_KEY).await?;
    let request = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(StrBytes::from_string(group.to_string()))]);
    let response = admin.call(Target::Node(coordinator), &request).await?;
    let result = response
        .results
        .first()
        .ok_or_else(|| anyhow!("DeleteGroups answered nothing for group {group}"))?;
    if result.error_code == ResponseError::NonEmptyGroup.code() {
        bail!("deleting group {group}: NON_EMPTY_GROUP: it has active members (consumers still in the group); stop them (or wait for their session to time out), then delete it");
    }
    check(result.error_code, None, &format!("deleting group {group}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
    use kafka_protocol::protocol::Encodable;

    #[test]
    fn seek_targets_parse_as_kafka_names_them() {
        assert_eq!(parse_seek_to("earliest"), Ok(SeekTo::Earliest));
        assert_eq!(parse_seek_to("latest"), Ok(SeekTo::Latest));
        assert_eq!(parse_seek_to("42"), Ok(SeekTo::Offset(42)));
        assert_eq!(parse_seek_to("@1700000000000"), Ok(SeekTo::Timestamp(1_700_000_000_000)));
        assert_eq!(parse_seek_to("shift:-2"), Ok(SeekTo::Shift(-2)));
        assert!(
            parse_seek_to("-3").is_err()
                && parse_seek_to("soon").is_err()
                && parse_seek_to("shift:x").is_err()
        );
    }

    #[test]
    fn topic_args_name_partitions_after_a_colon() {
        assert_eq!(parse_topic_arg("orders").ok(), Some(("orders".to_string(), vec![])));
        assert_eq!(parse_topic_arg("orders:0,2").ok(), Some(("orders".to_string(), vec![0, 2])));
        assert!(parse_topic_arg("orders:x").is_err());
    }

    #[test]
    fn an_assignment_decodes_from_its_versioned_bytes() {
        let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            TopicPartition::default()
                .with_topic(TopicName(StrBytes::from_static_str("orders")))
                .with_partitions(vec![0, 2]),
        ]);
        let mut buf = bytes::BytesMut::new();
        bytes::BufMut::put_i16(&mut buf, 1);
        assignment.encode(&mut buf, 1).map_err(|e| e.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let decoded = decode_assignment(&buf.freeze());
        assert_eq!(decoded, vec![("orders".to_string(), 0), ("orders".to_string(), 2)]);
        assert!(decode_assignment(&Bytes::new()).is_empty());
    }
}
