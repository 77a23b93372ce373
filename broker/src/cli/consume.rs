//! `floe topic consume`: reads a topic's partitions from their leaders with
//! Fetch (no consumer group: nothing is committed) and prints each record,
//! through a kcat-style template (`--format '%k %v'`) or as JSON Lines.
//!
//! It owns the `--format` of `topic consume`: the CLI's global `--format`
//! (table|json|yaml) is declared with [`parse_output_format`] and this
//! command's own with [`parse_consume_format`], both as [`PrintFormat`], so
//! that clap can hand the value between the two levels and only here a
//! template is accepted.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use anyhow::anyhow;
use base64::Engine as _;
use clap::ValueEnum as _;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Map, Value};

use super::admin::{check, Admin, CliFailure, Target};
use super::connect::ConnectArgs;
use super::offsets::{list_offsets, EARLIEST, LATEST};
use super::output::{to_yaml, Format, Output};
use super::produce::{leader_of, topic_metadata};
use super::records::{decode_fetched, AbortedTxn, FetchedRecord};

/// The `Examples:` block of `floe topic consume --help`.
const CONSUME_EXAMPLES: &str = "\
Examples:
  floe topic consume orders --offset beginning --num 10
  floe topic consume orders -e --format '%p %o %k %v %h'
  floe topic consume orders --offset -5 -e            # the last 5 of each partition
  floe topic consume orders --offset @1700000000000   # from a point in time
  floe topic consume orders --partition 0,2 --format json | jq .value
  floe topic consume orders --isolation read_committed -e
  floe topic consume payments --schema-registry http://localhost:8081 -e   # Avro as JSON";

/// The highest Fetch version sent: v13 names topics by id.
pub const FETCH_VERSION_CAP: i16 = 12;
/// How long a leader may hold a Fetch waiting for new records.
const FETCH_WAIT_MS: i32 = 500;
/// Bytes a Fetch may return per partition (at least one batch comes regardless).
const PARTITION_MAX_BYTES: i32 = 1024 * 1024;

/// What `--format` asked for: one of the CLI's output formats, or (for
/// `topic consume` only) a kcat-style template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrintFormat {
    /// `table`, `json` or `yaml`.
    Output(Format),
    /// A template with `%` tokens, as given.
    Template(String),
}

impl PrintFormat {
    /// The output format of every other command (a template counts as `table`).
    pub fn output(&self) -> Format {
        match self {
            PrintFormat::Output(f) => *f,
            PrintFormat::Template(_) => Format::Table,
        }
    }
}

/// The global `--format`: `table`, `json` or `yaml`.
///
/// # Errors
/// Any other text, for clap to report (exit code 2).
pub fn parse_output_format(text: &str) -> Result<PrintFormat, String> {
    Format::from_str(text, true)
        .map(PrintFormat::Output)
        .map_err(|_| format!("`{text}` is not an output format: use table, json or yaml (`floe topic consume` also takes a template such as '%k %v')"))
}

/// `topic consume --format`: an output format, or a template with `%` tokens.
///
/// # Errors
/// Neither, or a template with an unknown token.
pub fn parse_consume_format(text: &str) -> Result<PrintFormat, String> {
    if text.contains('%') {
        parse_template(text)?;
        return Ok(PrintFormat::Template(text.to_string()));
    }
    parse_output_format(text).map_err(|_| {
        format!("`{text}` is neither table, json, yaml nor a template with % tokens (e.g. '%k %v')")
    })
}

/// Where to start in each partition (`--offset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The log start offset.
    Beginning,
    /// The end: only records produced from now on.
    End,
    /// This offset.
    Offset(i64),
    /// This many records before the end.
    BeforeEnd(i64),
    /// The first record at or after this timestamp (ms).
    Timestamp(i64),
}

fn parse_start(text: &str) -> Result<StartAt, String> {
    let bad = || {
        format!("`{text}` is not an offset: use beginning, end, a number N, -N (N before the end) or @MS (a timestamp in ms)")
    };
    match text {
        "beginning" | "earliest" | "start" | "oldest" => Ok(StartAt::Beginning),
        "end" | "latest" | "newest" => Ok(StartAt::End),
        _ => {
            if let Some(ms) = text.strip_prefix('@').or_else(|| text.strip_prefix("s@")) {
                return ms.parse().map(StartAt::Timestamp).map_err(|_| bad());
            }
            if let Some(n) = text.strip_prefix('-') {
                return n
                    .parse::<i64>()
                    .ok()
                    .filter(|&n| n >= 0)
                    .map(StartAt::BeforeEnd)
                    .ok_or_else(bad);
            }
            text.parse::<i64>().ok().filter(|&n| n >= 0).map(StartAt::Offset).ok_or_else(bad)
        }
    }
}

/// `--isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// Every record, those of open and aborted transactions included.
    #[value(name = "read_uncommitted")]
    ReadUncommitted,
    /// Committed records only, up to the last stable offset.
    #[value(name = "read_committed")]
    ReadCommitted,
}

/// Reads records from a topic and prints them, from each partition's leader
/// (no consumer group: nothing is committed).
///
/// Without --num or -e it follows new records until Ctrl-C, as kcat and rpk do.
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment, after_help = CONSUME_EXAMPLES)]
pub struct ConsumeArgs {
    /// The topic's name.
    pub topic: String,
    /// Where to start in each partition: beginning, end, N, -N (N before the
    /// end) or @MS (the first record at or after a timestamp).
    #[arg(long, short = 'o', default_value = "beginning", allow_hyphen_values = true, value_parser = parse_start)]
    pub offset: StartAt,
    /// Stop after N records in all.
    #[arg(long, short = 'c', visible_alias = "count", value_name = "N")]
    pub num: Option<u64>,
    /// Stop at the end of every partition (kcat -e) instead of waiting for more.
    #[arg(long = "exit", short = 'e')]
    pub exit_at_end: bool,
    /// The partitions to read [default: all]; repeatable or comma-separated.
    #[arg(long, short = 'p', value_delimiter = ',')]
    pub partition: Vec<i32>,
    /// read_committed hides the records of aborted and open transactions.
    #[arg(long, value_enum, default_value_t = Isolation::ReadUncommitted)]
    pub isolation: Isolation,
    /// How to print each record: a kcat template, `json` (JSON Lines: one object
    /// per record, bytes that are not UTF-8 as base64 with `key_encoding` or
    /// `value_encoding` saying so), `yaml`, or `table` (the default: each value
    /// on its own line). Template tokens: %t topic, %p partition, %o offset,
    /// %k key, %v value, %T timestamp (ms), %h headers (k=v,k=v), %K key
    /// length, %S value length (-1 for null), %% a percent sign; escapes \n \t
    /// \r \\. A template that does not end in \n gets one.
    #[arg(long, short = 'f', value_name = "TEMPLATE|json|yaml", default_value = "table", value_parser = parse_consume_format)]
    pub format: PrintFormat,
    /// A Confluent Schema Registry (http://HOST:PORT; or -X schema.registry.url=...):
    /// keys and values in its wire format (magic 0, schema id) print as JSON.
    /// Avro and JSON Schema are decoded; Protobuf prints as it is. Avro's
    /// logical types print as values: a decimal as "12.34", a timestamp as
    /// ISO-8601 UTC, a date as YYYY-MM-DD, a uuid as its text.
    #[arg(long, value_name = "URL")]
    pub schema_registry: Option<String>,
    /// Read on behalf of consumer group GROUP without joining it (Kafka's
    /// `assign()` + `commitSync()`): start at the group's committed offsets
    /// (partitions without one start at --offset) and commit what was printed
    /// as it goes, so `floe group describe GROUP` shows the lag left. The
    /// coordinator accepts the commits only while the group has no members.
    #[arg(long, short = 'G', value_name = "GROUP")]
    pub group: Option<String>,
}

/// Keys and values in the Confluent wire format turned into JSON text, with
/// the schemas fetched from a Schema Registry once per id.
pub struct SchemaDecoder {
    url: String,
    schemas: std::collections::HashMap<i32, Result<WireSchema, String>>,
    warned: BTreeSet<i32>,
}

/// What a schema id decodes with.
enum WireSchema {
    Avro(apache_avro::Schema),
    /// JSON Schema: the payload is JSON text already.
    Json,
    /// Protobuf: printed as it is.
    Other(String),
}

impl SchemaDecoder {
    /// A decoder asking the registry at `url` (`http://HOST:PORT`).
    pub fn new(url: String) -> Self {
        SchemaDecoder { url, schemas: Default::default(), warned: BTreeSet::new() }
    }

    /// `bytes` as JSON text when in the wire format and decodable; else unchanged.
    /// A schema that cannot be had or used is said once on stderr.
    pub async fn decode(&mut self, bytes: Option<Vec<u8>>) -> Option<Vec<u8>> {
        let b = bytes?;
        if b.len() < 5 || b[0] != 0 {
            return Some(b);
        }
        let id = i32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        if !self.schemas.contains_key(&id) {
            let schema = self.fetch(id).await;
            self.schemas.insert(id, schema);
        }
        let result = match self.schemas.get(&id) {
            Some(Ok(WireSchema::Avro(schema))) => {
                apache_avro::from_avro_datum(schema, &mut &b[5..], None)
                    .map_err(|e| format!("not Avro of schema {id}: {e}"))
                    .and_then(|v| {
                        super::avro_json::to_json(v, schema)
                            .map_err(|e| format!("schema {id}: {e}"))
                    })
                    .map(|v| v.to_string().into_bytes())
            }
            Some(Ok(WireSchema::Json)) => Ok(b[5..].to_vec()),
            Some(Ok(WireSchema::Other(kind))) => {
                Err(format!("{kind} schemas are not decoded here"))
            }
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("schema {id} missing")),
        };
        match result {
            Ok(text) => Some(text),
            Err(e) => {
                if self.warned.insert(id) {
                    eprintln!("warning: schema id {id}: {e}; printing those bytes as they are");
                }
                Some(b)
            }
        }
    }

    /// GET /schemas/ids/{id} of the registry, parsed.
    async fn fetch(&self, id: i32) -> Result<WireSchema, String> {
        let url = self.url.trim_end_matches('/');
        let authority = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("the registry {url}: only http:// URLs are supported"))?;
        let path = format!("/schemas/ids/{id}");
        let exchange = async {
            use http_body_util::BodyExt as _;
            let stream = tokio::net::TcpStream::connect(authority)
                .await
                .map_err(|e| format!("connecting to the registry {url}: {e}"))?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                    .await
                    .map_err(|e| format!("HTTP handshake with {url}: {e}"))?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            let request = hyper::Request::builder()
                .uri(path.as_str())
                .header(hyper::header::HOST, authority)
                .header(hyper::header::ACCEPT, "application/vnd.schemaregistry.v1+json")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .map_err(|e| format!("building the request: {e}"))?;
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| format!("asking {url}{path}: {e}"))?;
            let status = response.status().as_u16();
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("reading {url}{path}: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .map_err(|_| format!("{url} did not answer within 10 s"))??;
        let doc: Value = serde_json::from_slice(&body)
            .map_err(|e| format!("{url}{path} answered {status}, not JSON: {e}"))?;
        if status != 200 {
            return Err(format!(
                "{url}{path} answered {status}: {}",
                doc.get("message").and_then(Value::as_str).unwrap_or("")
            ));
        }
        let text = doc
            .get("schema")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{url}{path}: no `schema` in the answer"))?;
        match doc.get("schemaType").and_then(Value::as_str).unwrap_or("AVRO") {
            "AVRO" => {
                if doc.get("references").and_then(Value::as_array).is_some_and(|r| !r.is_empty()) {
                    return Err("Avro schemas with references are not decoded here".into());
                }
                apache_avro::Schema::parse_str(text)
                    .map(WireSchema::Avro)
                    .map_err(|e| format!("the registry's Avro schema does not parse: {e}"))
            }
            "JSON" => Ok(WireSchema::Json),
            other => Ok(WireSchema::Other(other.to_string())),
        }
    }
}

/// A piece of a `--format` template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Text(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    Headers,
    KeyLength,
    ValueLength,
}

/// Parses a kcat `-f` template; a newline ends it if it does not end in one.
fn parse_template(text: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut literal = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => {
                let next = chars
                    .next()
                    .ok_or("the template ends with a lone %: write %% for a percent sign")?;
                let token = match next {
                    '%' => {
                        literal.push(b'%');
                        continue;
                    }
                    't' => Token::Topic,
                    'p' => Token::Partition,
                    'o' => Token::Offset,
                    'k' => Token::Key,
                    'v' => Token::Value,
                    'T' => Token::Timestamp,
                    'h' => Token::Headers,
                    'K' => Token::KeyLength,
                    'S' => Token::ValueLength,
                    other => {
                        return Err(format!(
                        "%{other} is not a template token: use %t %p %o %k %v %T %h %K %S or %%"
                    ))
                    }
                };
                if !literal.is_empty() {
                    tokens.push(Token::Text(std::mem::take(&mut literal)));
                }
                tokens.push(token);
            }
            '\\' => match chars.next() {
                Some('n') => literal.push(b'\n'),
                Some('t') => literal.push(b'\t'),
                Some('r') => literal.push(b'\r'),
                Some('\\') => literal.push(b'\\'),
                Some(other) => {
                    literal.push(b'\\');
                    let mut buf = [0; 4];
                    literal.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
                }
                None => literal.push(b'\\'),
            },
            other => {
                let mut buf = [0; 4];
                literal.extend_from_slice(other.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    if !literal.is_empty() {
        tokens.push(Token::Text(literal));
    }
    if !matches!(tokens.last(), Some(Token::Text(t)) if t.last() == Some(&b'\n')) {
        tokens.push(Token::Text(b"\n".to_vec()));
    }
    Ok(tokens)
}

/// Appends `record` as `tokens` say.
fn render(
    tokens: &[Token],
    topic: &str,
    partition: i32,
    record: &FetchedRecord,
    out: &mut Vec<u8>,
) {
    let length = |b: &Option<Vec<u8>>| b.as_ref().map_or(-1, |b| b.len() as i64);
    for token in tokens {
        match token {
            Token::Text(t) => out.extend_from_slice(t),
            Token::Topic => out.extend_from_slice(topic.as_bytes()),
            Token::Partition => out.extend_from_slice(partition.to_string().as_bytes()),
            Token::Offset => out.extend_from_slice(record.offset.to_string().as_bytes()),
            Token::Key => out.extend_from_slice(record.key.as_deref().unwrap_or_default()),
            Token::Value => out.extend_from_slice(record.value.as_deref().unwrap_or_default()),
            Token::Timestamp => out.extend_from_slice(record.timestamp.to_string().as_bytes()),
            Token::KeyLength => out.extend_from_slice(length(&record.key).to_string().as_bytes()),
            Token::ValueLength => {
                out.extend_from_slice(length(&record.value).to_string().as_bytes())
            }
            Token::Headers => {
                for (i, (k, v)) in record.headers.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(k);
                    out.push(b'=');
                    out.extend_from_slice(v.as_deref().unwrap_or_default());
                }
            }
        }
    }
}

/// Bytes as a JSON string: the text when UTF-8, else base64 (and `true` for "base64").
fn json_bytes(bytes: Option<&[u8]>) -> (Value, bool) {
    match bytes {
        None => (Value::Null, false),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => (Value::String(s.to_string()), false),
            Err(_) => (Value::String(base64::engine::general_purpose::STANDARD.encode(b)), true),
        },
    }
}

/// One record as a JSON object, every field.
pub fn record_json(topic: &str, partition: i32, record: &FetchedRecord) -> Value {
    let mut doc = Map::new();
    doc.insert("topic".into(), json!(topic));
    doc.insert("partition".into(), json!(partition));
    doc.insert("offset".into(), json!(record.offset));
    doc.insert("timestamp".into(), json!(record.timestamp));
    doc.insert(
        "timestamp_type".into(),
        json!(if record.log_append_time { "LogAppendTime" } else { "CreateTime" }),
    );
    let (key, key_b64) = json_bytes(record.key.as_deref());
    let (value, value_b64) = json_bytes(record.value.as_deref());
    doc.insert("key".into(), key);
    if key_b64 {
        doc.insert("key_encoding".into(), json!("base64"));
    }
    doc.insert("value".into(), value);
    if value_b64 {
        doc.insert("value_encoding".into(), json!("base64"));
    }
    let mut headers_b64 = false;
    let headers: Vec<Value> = record
        .headers
        .iter()
        .map(|(k, v)| {
            let (v, b64) = json_bytes(v.as_deref());
            headers_b64 |= b64;
            json!([String::from_utf8_lossy(k), v])
        })
        .collect();
    doc.insert("headers".into(), Value::Array(headers));
    if headers_b64 {
        // Only the header values that were not UTF-8 are base64: a reader decodes those that fail as text.
        doc.insert("headers_encoding".into(), json!("base64 where not UTF-8"));
    }
    Value::Object(doc)
}

/// How each record is printed.
enum Printer {
    Template(Vec<Token>),
    Json,
    Yaml,
}

/// Runs `floe topic consume`.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(args: ConsumeArgs, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = out; // consume prints by its own --format
    let printer = match &args.format {
        PrintFormat::Template(t) => {
            Printer::Template(parse_template(t).map_err(|e| anyhow!("--format: {e}"))?)
        }
        PrintFormat::Output(Format::Json) => Printer::Json,
        PrintFormat::Output(Format::Yaml) => Printer::Yaml,
        PrintFormat::Output(Format::Table) => {
            Printer::Template(vec![Token::Value, Token::Text(b"\n".to_vec())])
        }
    };
    let topic = args.topic.clone();
    let read_committed = args.isolation == Isolation::ReadCommitted;
    let registry = match &args.schema_registry {
        Some(url) => Some(url.clone()),
        None => connect.properties()?.get("schema.registry.url").cloned(),
    };
    let mut schemas = registry.map(|url| SchemaDecoder {
        url,
        schemas: Default::default(),
        warned: BTreeSet::new(),
    });
    let mut admin = Admin::connect(connect).await?;
    let mut metadata = topic_metadata(&mut admin, &topic).await?;
    let all: Vec<i32> = metadata
        .topics
        .iter()
        .filter(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let partitions: Vec<i32> = if args.partition.is_empty() {
        all.clone()
    } else {
        args.partition.iter().copied().collect::<BTreeSet<_>>().into_iter().collect()
    };
    if let Some(p) = partitions.iter().find(|p| !all.contains(p)) {
        return Err(CliFailure::NotFound(format!(
            "topic {topic} has no partition {p} (it has {})",
            range_text(&all)
        ))
        .into());
    }
    let mut positions =
        start_offsets(&mut admin, &metadata, &topic, &partitions, args.offset, read_committed)
            .await?;
    // With a group: its committed offsets win, and what is printed is committed.
    let group = match &args.group {
        Some(g) => {
            let coordinator = admin.coordinator(g, 0).await?;
            let committed = super::group::committed_offsets(&mut admin, coordinator, g).await?;
            for &p in &partitions {
                if let Some(&o) = committed.get(&(topic.clone(), p)) {
                    positions.insert(p, o);
                }
            }
            Some(GroupCommits { group: g.clone(), coordinator, committed: positions.clone() })
        }
        None => None,
    };
    let mut group = group;
    let mut at_end: BTreeSet<i32> = BTreeSet::new();
    let mut printed: u64 = 0;
    if args.num == Some(0) {
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut retries = 0;
    loop {
        // One Fetch per leader for the partitions still being read.
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        let mut leaderless = false;
        for &p in &partitions {
            if args.exit_at_end && at_end.contains(&p) {
                continue;
            }
            match leader_of(&metadata, &topic, p) {
                Some(l) => by_leader.entry(l).or_default().push(p),
                None => leaderless = true,
            }
        }
        let mut refresh = leaderless;
        for (leader, parts) in by_leader {
            let request = FetchRequest::default()
                .with_max_wait_ms(if args.exit_at_end { 100 } else { FETCH_WAIT_MS })
                .with_min_bytes(1)
                .with_max_bytes(50 * 1024 * 1024)
                .with_isolation_level(i8::from(read_committed))
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(
                        parts
                            .iter()
                            .map(|&p| {
                                FetchPartition::default()
                                    .with_partition(p)
                                    .with_fetch_offset(positions[&p])
                                    .with_partition_max_bytes(PARTITION_MAX_BYTES)
                            })
                            .collect(),
                    )]);
            let response = match admin
                .call_versioned(Target::Node(leader), &request, Some(FETCH_VERSION_CAP))
                .await
            {
                Ok((r, _)) => r,
                // A leader that went away: ask again where the partitions are.
                Err(e) if retries < 10 && super::admin::exit_code(&e) == 3 => {
                    retries += 1;
                    refresh = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            check(response.error_code, None, &format!("fetching from broker {leader}"))?;
            for t in &response.responses {
                for p in &t.partitions {
                    let partition = p.partition_index;
                    let code = p.error_code;
                    if code == ResponseError::OffsetOutOfRange.code() {
                        let at = positions.get(&partition).copied().unwrap_or_default();
                        return Err(
                            out_of_range(&mut admin, &metadata, &topic, partition, at).await
                        );
                    }
                    if [
                        ResponseError::NotLeaderOrFollower.code(),
                        ResponseError::LeaderNotAvailable.code(),
                        ResponseError::UnknownLeaderEpoch.code(),
                        ResponseError::FencedLeaderEpoch.code(),
                    ]
                    .contains(&code)
                        && retries < 20
                    {
                        retries += 1;
                        refresh = true;
                        continue;
                    }
                    check(code, None, &format!("fetching {topic} [{partition}]"))?;
                    let at = positions.get(&partition).copied().unwrap_or_default();
                    let aborted: Option<Vec<AbortedTxn>> = read_committed.then(|| {
                        p.aborted_transactions
                            .iter()
                            .flatten()
                            .map(|a| AbortedTxn {
                                first_offset: a.first_offset,
                                producer_id: a.producer_id.0,
                            })
                            .collect()
                    });
                    let records = p.records.as_deref().unwrap_or_default();
                    let mut decoded =
                        decode_fetched(records, at, aborted.as_deref()).map_err(|e| {
                            anyhow!("reading {topic} [{partition}] at offset {at}: {e}")
                        })?;
                    if let Some(schemas) = schemas.as_mut() {
                        for r in &mut decoded.records {
                            r.key = schemas.decode(r.key.take()).await;
                            r.value = schemas.decode(r.value.take()).await;
                        }
                    }
                    let mut text = Vec::new();
                    let mut stop = false;
                    for record in &decoded.records {
                        match &printer {
                            Printer::Template(tokens) => {
                                render(tokens, &topic, partition, record, &mut text)
                            }
                            Printer::Json => {
                                text.extend_from_slice(
                                    record_json(&topic, partition, record).to_string().as_bytes(),
                                );
                                text.push(b'\n');
                            }
                            Printer::Yaml => text.extend_from_slice(
                                to_yaml(&Value::Array(vec![record_json(
                                    &topic, partition, record,
                                )]))
                                .as_bytes(),
                            ),
                        }
                        printed += 1;
                        if args.num.is_some_and(|n| printed >= n) {
                            stop = true;
                            positions.insert(partition, record.offset + 1);
                            break;
                        }
                    }
                    let mut lock = stdout.lock();
                    if lock.write_all(&text).and_then(|()| lock.flush()).is_err() {
                        // The reader went away (`| head`): nothing more to do.
                        return Ok(());
                    }
                    drop(lock);
                    if stop {
                        if let Some(g) = group.as_mut() {
                            g.commit(&mut admin, &topic, &positions).await?;
                        }
                        return Ok(());
                    }
                    positions.insert(partition, decoded.next_offset);
                    let end = if read_committed && p.last_stable_offset >= 0 {
                        p.last_stable_offset
                    } else {
                        p.high_watermark
                    };
                    if decoded.next_offset >= end {
                        at_end.insert(partition);
                    } else {
                        at_end.remove(&partition);
                    }
                }
            }
        }
        if let Some(g) = group.as_mut() {
            g.commit(&mut admin, &topic, &positions).await?;
        }
        if args.exit_at_end && partitions.iter().all(|p| at_end.contains(p)) {
            return Ok(());
        }
        if refresh {
            tokio::time::sleep(Duration::from_millis(200)).await;
            metadata = topic_metadata(&mut admin, &topic).await?;
        }
    }
}

/// The offsets `--group` has committed, to commit only what moved.
struct GroupCommits {
    group: String,
    coordinator: i32,
    committed: BTreeMap<i32, i64>,
}

impl GroupCommits {
    /// Commits the positions that moved since the last commit.
    async fn commit(
        &mut self,
        admin: &mut Admin,
        topic: &str,
        positions: &BTreeMap<i32, i64>,
    ) -> anyhow::Result<()> {
        let moved: Vec<(String, i32, i64)> = positions
            .iter()
            .filter(|(p, o)| self.committed.get(p) != Some(o))
            .map(|(&p, &o)| (topic.to_string(), p, o))
            .collect();
        if moved.is_empty() {
            return Ok(());
        }
        super::group::commit_offsets(admin, self.coordinator, &self.group, &moved).await.map_err(|e| {
            let text = format!("{e:#}");
            if ["UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"].iter().any(|n| text.contains(n)) {
                anyhow!("{text} (group {} has active members: --group reads outside the membership, so stop them or use another group)", self.group)
            } else {
                e
            }
        })?;
        for (_, p, o) in moved {
            self.committed.insert(p, o);
        }
        Ok(())
    }
}

/// `0..5` or `0, 2, 7` for messages.
fn range_text(partitions: &[i32]) -> String {
    match (partitions.first(), partitions.last()) {
        (Some(&a), Some(&b)) if (b - a) as usize + 1 == partitions.len() => {
            format!("partitions {a}..{b}")
        }
        _ => format!(
            "partitions {}",
            partitions.iter().map(i32::to_string).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// Each partition's first offset to read.
async fn start_offsets(
    admin: &mut Admin,
    metadata: &MetadataResponse,
    topic: &str,
    partitions: &[i32],
    start: StartAt,
    read_committed: bool,
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let topics = [topic.to_string()];
    let of = |map: &BTreeMap<(String, i32), i64>, p: i32| map.get(&(topic.to_string(), p)).copied();
    let mut out = BTreeMap::new();
    match start {
        StartAt::Offset(n) => {
            for &p in partitions {
                out.insert(p, n);
            }
        }
        StartAt::Beginning | StartAt::End | StartAt::BeforeEnd(_) => {
            let earliest = list_offsets(admin, metadata, &topics, EARLIEST, read_committed).await?;
            let latest = list_offsets(admin, metadata, &topics, LATEST, read_committed).await?;
            for &p in partitions {
                let (lo, hi) = (of(&earliest, p).unwrap_or(0), of(&latest, p).unwrap_or(0));
                let at = match start {
                    StartAt::Beginning => lo,
                    StartAt::End => hi,
                    StartAt::BeforeEnd(n) => (hi - n).max(lo),
                    _ => unreachable!("matched above"),
                };
                out.insert(p, at);
            }
        }
        StartAt::Timestamp(ms) => {
            let at = list_offsets(admin, metadata, &topics, ms, read_committed).await?;
            let latest = list_offsets(admin, metadata, &topics, LATEST, read_committed).await?;
            for &p in partitions {
                // -1: no record that late; start at the end.
                let offset = of(&at, p).filter(|&o| o >= 0).or_else(|| of(&latest, p)).unwrap_or(0);
                out.insert(p, offset);
            }
        }
    }
    Ok(out)
}

/// The error for a start offset outside the partition, naming its range.
async fn out_of_range(
    admin: &mut Admin,
    metadata: &MetadataResponse,
    topic: &str,
    partition: i32,
    at: i64,
) -> anyhow::Error {
    let topics = [topic.to_string()];
    let range = async {
        let lo = list_offsets(admin, metadata, &topics, EARLIEST, false).await?;
        let hi = list_offsets(admin, metadata, &topics, LATEST, false).await?;
        let key = (topic.to_string(), partition);
        anyhow::Ok((lo.get(&key).copied(), hi.get(&key).copied()))
    }
    .await;
    match range {
        Ok((Some(lo), Some(hi))) => anyhow!(
            "{topic} [{partition}]: offset {at} is out of range (OFFSET_OUT_OF_RANGE): the partition holds offsets {lo}..{hi} \
             (log start {lo}, high watermark {hi}); start with --offset beginning, end, -N or a number in that range"
        ),
        _ => anyhow!("{topic} [{partition}]: offset {at} is out of range (OFFSET_OUT_OF_RANGE); see `floe topic describe {topic}` for its offsets"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> FetchedRecord {
        FetchedRecord {
            offset: 42,
            timestamp: 1_700_000_000_123,
            log_append_time: false,
            key: Some(b"k1".to_vec()),
            value: Some(b"hello".to_vec()),
            headers: vec![
                (b"h".to_vec(), Some(b"1".to_vec())),
                (b"h".to_vec(), Some(b"2".to_vec())),
                (b"n".to_vec(), None),
            ],
        }
    }

    fn rendered(template: &str, r: &FetchedRecord) -> String {
        let tokens = parse_template(template).expect("parses");
        let mut out = Vec::new();
        render(&tokens, "orders", 3, r, &mut out);
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn templates_take_kcats_tokens_and_end_in_a_newline() {
        let r = record();
        assert_eq!(rendered("%k %v", &r), "k1 hello\n");
        assert_eq!(
            rendered("%t/%p@%o %T %h|%K %S 100%%\\n", &r),
            "orders/3@42 1700000000123 h=1,h=2,n=|2 5 100%\n"
        );
        assert_eq!(rendered("%v\\t%k\\\\", &r), "hello\tk1\\\n");
        let null = FetchedRecord { key: None, value: None, headers: vec![], ..record() };
        assert_eq!(rendered("[%k][%v] %K %S %h", &null), "[][] -1 -1 \n");
        assert!(parse_template("%x").is_err());
        assert!(parse_template("50%").is_err());
    }

    #[test]
    fn format_accepts_output_names_or_templates() {
        assert_eq!(parse_consume_format("json"), Ok(PrintFormat::Output(Format::Json)));
        assert_eq!(parse_consume_format("%k %v"), Ok(PrintFormat::Template("%k %v".into())));
        assert!(parse_consume_format("csv").is_err());
        assert!(parse_output_format("%k").is_err());
        assert_eq!(parse_output_format("YAML"), Ok(PrintFormat::Output(Format::Yaml)));
    }

    #[test]
    fn offsets_parse_as_kcat_takes_them() {
        assert_eq!(parse_start("beginning"), Ok(StartAt::Beginning));
        assert_eq!(parse_start("end"), Ok(StartAt::End));
        assert_eq!(parse_start("17"), Ok(StartAt::Offset(17)));
        assert_eq!(parse_start("-5"), Ok(StartAt::BeforeEnd(5)));
        assert_eq!(parse_start("@1700000000000"), Ok(StartAt::Timestamp(1_700_000_000_000)));
        assert!(parse_start("soon").is_err());
        assert!(parse_start("--5").is_err());
    }

    #[test]
    fn json_carries_every_field_and_base64_for_binary() {
        let mut r = record();
        r.value = Some(vec![0xff, 0x00]);
        let doc = record_json("orders", 3, &r);
        assert_eq!(doc["key"], "k1");
        assert_eq!(doc["value"], "/wA=");
        assert_eq!(doc["value_encoding"], "base64");
        assert!(doc.get("key_encoding").is_none());
        assert_eq!(doc["headers"], json!([["h", "1"], ["h", "2"], ["n", null]]));
        assert_eq!(doc["timestamp_type"], "CreateTime");
    }
}
