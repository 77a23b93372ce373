//! `floe topic produce`: records from stdin (one per line, as `kcat -P`) or
//! from `--value`, sent with Produce to each partition's leader. Keyed
//! records go where Kafka's Java default partitioner puts them
//! ([`super::partitioner`]); unkeyed ones all go to one partition picked at
//! random for the run (Kafka's sticky partitioning, one batch per run).

use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use floe_protocol::record_batch::CompressionType;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{MetadataResponse, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use super::admin::{check, error_name, Admin, CliFailure, Target};
use super::connect::{key_value, ConnectArgs};
use super::output::{Format, Output, Table};
use super::partitioner::partition_for_key;
use super::records::{codec_name, encode_batch, NewRecord};

/// The `Examples:` block of `floe topic produce --help`.
const PRODUCE_EXAMPLES: &str = "\
Examples:
  echo hello | floe topic produce orders
  floe topic produce orders --value one --value two --partition 2
  floe topic produce orders --key customer-7 -H source=cli -H trace=abc < lines.txt
  printf 'k1:v1\\nk2:v2\\n' | floe topic produce orders -K : --compression zstd
  floe topic produce orders --value x --format json";

/// Uncompressed bytes per batch: well under Kafka's default `max.message.bytes` (1 MiB).
const BATCH_BYTES: usize = 512 * 1024;
/// The highest Produce version sent: v13 names topics by id.
const PRODUCE_VERSION_CAP: i16 = 12;

/// `--compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    /// Records as they are.
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Codec {
    fn compression(self) -> CompressionType {
        match self {
            Codec::None => CompressionType::None,
            Codec::Gzip => CompressionType::Gzip,
            Codec::Snappy => CompressionType::Snappy,
            Codec::Lz4 => CompressionType::Lz4,
            Codec::Zstd => CompressionType::Zstd,
        }
    }
}

/// Produces records read from stdin, one per line (as `kcat -P`), or given
/// with --value.
///
/// Keyed records go to the partition Kafka's Java clients pick (murmur2 of
/// the key), so they land beside the same keys from any Kafka producer;
/// unkeyed records all go to one partition picked at random. Prints where
/// the records went: the partition and the offsets the leader gave them.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment, after_help = PRODUCE_EXAMPLES)]
pub struct ProduceArgs {
    /// The topic's name.
    pub topic: String,
    /// A record's value; repeatable. Without it, each line of stdin is a record.
    #[arg(long, value_name = "TEXT")]
    pub value: Vec<String>,
    /// The key of every record [default: none; unkeyed records all go to one partition].
    #[arg(long, short = 'k', value_name = "TEXT", conflicts_with = "key_delimiter")]
    pub key: Option<String>,
    /// Split each stdin line at the first DELIM into key and value (kcat -K);
    /// a line without it is a value with no key.
    #[arg(long, short = 'K', value_name = "DELIM")]
    pub key_delimiter: Option<String>,
    /// A header `key=value` on every record; repeatable, duplicate keys kept in order.
    #[arg(long = "header", short = 'H', value_name = "KEY=VALUE")]
    pub headers: Vec<String>,
    /// Send every record to this partition [default: by key, Kafka's partitioner].
    #[arg(long, short = 'p')]
    pub partition: Option<i32>,
    /// Acknowledgement: `all` waits for every in-sync replica, `1` for the leader only.
    /// (acks=0 is not offered: nothing would confirm the records arrived.)
    #[arg(long, default_value = "all", value_parser = ["all", "-1", "1"])]
    pub acks: String,
    /// Compression codec of the batches.
    #[arg(long, value_enum, default_value_t = Codec::None)]
    pub compression: Codec,
}

/// One Produce answer, for the output.
struct Produced {
    partition: i32,
    base_offset: i64,
    records: usize,
}

/// Runs `floe topic produce`.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(args: ProduceArgs, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let records = read_records(&args)?;
    if records.is_empty() {
        bail!("nothing to produce: stdin was empty (give records one per line on stdin, or --value TEXT)");
    }
    let mut admin = Admin::connect(connect).await?;
    let acks: i16 = if args.acks == "1" { 1 } else { -1 };
    produce(
        &mut admin,
        &args.topic,
        records,
        args.partition,
        acks,
        args.compression.compression(),
        connect.timeout_ms,
        out,
    )
    .await
}

/// Sends `records` to `topic` (to `partition`, else by key as Kafka's
/// partitioner does) and prints where they went: `topic produce` after it
/// has read its records, and the web console's produce form.
///
/// # Errors
/// An unknown topic or partition, or the leader's refusal.
#[allow(clippy::too_many_arguments)]
pub async fn produce(
    admin: &mut Admin,
    topic: &str,
    records: Vec<NewRecord>,
    partition: Option<i32>,
    acks: i16,
    codec: CompressionType,
    timeout_ms: u64,
    out: Output,
) -> anyhow::Result<()> {
    let metadata = topic_metadata(admin, topic).await?;
    let partitions = partition_count(&metadata, topic)?;
    if let Some(p) = partition {
        if p < 0 || p >= partitions {
            return Err(CliFailure::NotFound(format!(
                "topic {topic} has partitions 0..{}; there is no partition {p}",
                partitions - 1
            ))
            .into());
        }
    }
    // Unkeyed records stick to one partition for the run, picked at random.
    let sticky = (SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
        % partitions as u32) as i32;
    let mut by_partition: BTreeMap<i32, Vec<NewRecord>> = BTreeMap::new();
    for r in records {
        let p = match (partition, &r.key) {
            (Some(p), _) => p,
            (None, Some(key)) => partition_for_key(key, partitions),
            (None, None) => sticky,
        };
        by_partition.entry(p).or_default().push(r);
    }
    let mut results = Vec::new();
    for (partition, records) in by_partition {
        for chunk in chunks(&records) {
            let batch = Bytes::from(encode_batch(chunk, codec)?);
            let base_offset = send(admin, topic, partition, batch, acks, timeout_ms).await?;
            results.push(Produced { partition, base_offset, records: chunk.len() });
        }
    }
    report(topic, &results, codec, out);
    Ok(())
}

/// The records to send: --value's, else stdin's lines.
fn read_records(args: &ProduceArgs) -> anyhow::Result<Vec<NewRecord>> {
    let headers = args
        .headers
        .iter()
        .map(|h| key_value(h, "-H").map(|(k, v)| (k.into_bytes(), Some(v.into_bytes()))))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let timestamp =
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let key = args.key.as_ref().map(|k| k.as_bytes().to_vec());
    let record = |key: Option<Vec<u8>>, value: Vec<u8>| NewRecord {
        key,
        value: Some(value),
        headers: headers.clone(),
        timestamp,
    };
    if !args.value.is_empty() {
        if args.key_delimiter.is_some() {
            bail!("-K/--key-delimiter splits stdin lines; with --value give the key with --key");
        }
        return Ok(args.value.iter().map(|v| record(key.clone(), v.as_bytes().to_vec())).collect());
    }
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).context("reading records from stdin")?;
    let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop(); // the newline that ends the last line starts no record
    }
    let delimiter = args.key_delimiter.as_ref().map(|d| d.as_bytes());
    if delimiter.is_some_and(<[u8]>::is_empty) {
        bail!("-K/--key-delimiter must not be empty");
    }
    Ok(lines
        .into_iter()
        .map(|line| match delimiter.and_then(|d| find(line, d).map(|at| (at, d.len()))) {
            Some((at, len)) => record(Some(line[..at].to_vec()), line[at + len..].to_vec()),
            None => record(key.clone(), line.to_vec()),
        })
        .collect())
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `records` cut into batches of at most [`BATCH_BYTES`] (a record larger than that goes alone).
fn chunks(records: &[NewRecord]) -> Vec<&[NewRecord]> {
    let mut out = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, r) in records.iter().enumerate() {
        if i > start && size + r.size() > BATCH_BYTES {
            out.push(&records[start..i]);
            start = i;
            size = 0;
        }
        size += r.size();
    }
    if start < records.len() {
        out.push(&records[start..]);
    }
    out
}

/// Metadata of `topic`, failing when it does not exist.
pub async fn topic_metadata(admin: &mut Admin, topic: &str) -> anyhow::Result<MetadataResponse> {
    let metadata = admin.metadata(Some(&[topic.to_string()])).await?;
    for t in &metadata.topics {
        check(t.error_code, None, &format!("topic {topic}"))?;
    }
    Ok(metadata)
}

fn partition_count(metadata: &MetadataResponse, topic: &str) -> anyhow::Result<i32> {
    let t = metadata
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .ok_or_else(|| {
            CliFailure::NotFound(format!(
                "topic {topic}: not in the cluster's metadata (see `floe topic list`)"
            ))
        })?;
    let n = i32::try_from(t.partitions.len())
        .map_err(|_| anyhow!("topic {topic} has too many partitions"))?;
    if n == 0 {
        bail!("topic {topic} has no partitions yet (is it still being created?)");
    }
    Ok(n)
}

/// The leader of `topic`'s `partition` in `metadata`.
pub fn leader_of(metadata: &MetadataResponse, topic: &str, partition: i32) -> Option<i32> {
    metadata
        .topics
        .iter()
        .filter(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .map(|p| p.leader_id.0)
        .filter(|&l| l >= 0)
}

/// Sends one batch to the partition's leader; returns its base offset. Retries
/// while leadership moves (the batch was not written then).
async fn send(
    admin: &mut Admin,
    topic: &str,
    partition: i32,
    batch: Bytes,
    acks: i16,
    timeout_ms: u64,
) -> anyhow::Result<i64> {
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(i32::try_from(timeout_ms).unwrap_or(i32::MAX))
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(batch))])]);
    let retriable = [
        ResponseError::NotLeaderOrFollower.code(),
        ResponseError::LeaderNotAvailable.code(),
        ResponseError::NotEnoughReplicas.code(),
    ];
    let mut attempt = 0;
    loop {
        let metadata = topic_metadata(admin, topic).await?;
        let leader = leader_of(&metadata, topic, partition);
        let target = match leader {
            Some(l) => Target::Node(l),
            None if attempt < 10 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            None => bail!("producing to {topic}[{partition}]: the partition has no leader (see `floe topic describe {topic}`)"),
        };
        let (response, _) =
            admin.call_versioned(target, &request, Some(PRODUCE_VERSION_CAP)).await?;
        let p = response
            .responses
            .iter()
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.index == partition)
            .ok_or_else(|| anyhow!("Produce answered nothing for {topic}[{partition}]"))?;
        if retriable.contains(&p.error_code) && attempt < 10 {
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        if let Some(e) = p.record_errors.first() {
            let why =
                e.batch_index_error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
            bail!(
                "producing to {topic}[{partition}]: {} (record {} of the batch: {why})",
                error_name(p.error_code).unwrap_or_default(),
                e.batch_index
            );
        }
        check(
            p.error_code,
            p.error_message.as_ref(),
            &format!("producing to {topic}[{partition}]"),
        )?;
        return Ok(p.base_offset);
    }
}

fn report(topic: &str, results: &[Produced], codec: CompressionType, out: Output) {
    let docs: Vec<Value> = results
        .iter()
        .map(|r| json!({"topic": topic, "partition": r.partition, "base_offset": r.base_offset, "records": r.records, "compression": codec_name(codec)}))
        .collect();
    match out.format {
        Format::Table => {
            for r in results {
                let last = r.base_offset + r.records as i64 - 1;
                let plural = if r.records == 1 { "" } else { "s" };
                let offsets = if r.records == 1 {
                    format!("offset {}", r.base_offset)
                } else {
                    format!("offsets {}..{last}", r.base_offset)
                };
                println!(
                    "produced {} record{plural} to {topic} [{}] at {offsets}",
                    r.records, r.partition
                );
            }
        }
        _ => out.print(&Value::Array(docs), &Table::default(), &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stay_under_the_size_cap_and_keep_order() {
        let big = |n: u8| NewRecord {
            key: None,
            value: Some(vec![n; 200 * 1024]),
            headers: vec![],
            timestamp: 0,
        };
        let records: Vec<_> = (0..5).map(big).collect();
        let parts = chunks(&records);
        assert_eq!(parts.iter().map(|c| c.len()).collect::<Vec<_>>(), vec![2, 2, 1]);
        assert_eq!(parts.concat(), records);
    }

    #[test]
    fn the_key_delimiter_splits_at_its_first_occurrence() {
        assert_eq!(find(b"k1::v:1", b":"), Some(2));
        assert_eq!(find(b"novalue", b"::"), None);
    }
}
