//! Typed payloads for the harness's typed arms (`tiering-cost`, `freshness`): records of about
//! a given size in the Confluent wire format, Avro or Protobuf, of one fixed event
//! schema, encoded here by hand (the schemas are fixed, so an encoder is a few
//! lines and the producer spends its CPU on sending, not on a generic library),
//! and the schema registered with the broker's Schema Registry over plain HTTP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;

/// Which serialization the values use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Avro (`AVRO_SCHEMA`).
    Avro,
    /// Protobuf (`PROTO_SCHEMA`, its first message).
    Protobuf,
}

impl ValueKind {
    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ValueKind::Avro => "avro",
            ValueKind::Protobuf => "protobuf",
        }
    }
}

/// The Avro event: nine fields of the usual kinds (numbers, strings, an enum, a
/// timestamp, an array, a map, a nullable field) and a `body` that pads it to size.
pub const AVRO_SCHEMA: &str = r#"{"type":"record","name":"Event","namespace":"bench","fields":[
{"name":"id","type":"long"},{"name":"user","type":"string"},
{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["VIEW","CLICK","BUY"]}},
{"name":"amount","type":"double"},{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
{"name":"tags","type":{"type":"array","items":"string"}},{"name":"attributes","type":{"type":"map","values":"string"}},
{"name":"note","type":["null","string"],"default":null},{"name":"body","type":"string"}]}"#;

/// The same event in Protobuf.
pub const PROTO_SCHEMA: &str = r#"syntax = "proto3";
package bench;
message Event {
  enum Kind { VIEW = 0; CLICK = 1; BUY = 2; }
  int64 id = 1;
  string user = 2;
  Kind kind = 3;
  double amount = 4;
  int64 at_ms = 5;
  repeated string tags = 6;
  map<string, string> attributes = 7;
  optional string note = 8;
  string body = 9;
}
"#;

/// Registers `kind`'s schema under `subject` at the registry `host:port`; its id.
///
/// # Errors
/// The registry cannot be reached or refuses the schema.
pub fn register(registry: &str, subject: &str, kind: ValueKind) -> anyhow::Result<i32> {
    let mut body = serde_json::json!({ "schema": match kind { ValueKind::Avro => AVRO_SCHEMA, ValueKind::Protobuf => PROTO_SCHEMA } });
    if kind == ValueKind::Protobuf {
        body["schemaType"] = "PROTOBUF".into();
    }
    let body = body.to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let answer = loop {
        match post(registry, &format!("/subjects/{subject}/versions"), &body) {
            Ok(a) => break a,
            // The registry starts with the broker: retry while it comes up.
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(e),
        }
    };
    let json: serde_json::Value =
        serde_json::from_str(&answer).with_context(|| format!("registry answered {answer}"))?;
    json["id"].as_i64().map(|id| id as i32).with_context(|| format!("registry answered {answer}"))
}

/// One HTTP/1.1 POST of JSON; the body of a 200 answer.
fn post(addr: &str, path: &str, body: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").context("no HTTP header")?;
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "registry: {head} {body}");
    Ok(body.to_string())
}

fn zigzag(out: &mut Vec<u8>, v: i64) {
    varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn avro_string(out: &mut Vec<u8>, s: &str) {
    zigzag(out, s.len() as i64);
    out.extend_from_slice(s.as_bytes());
}

fn proto_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    varint(out, u64::from(field << 3 | 2));
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Event `n` framed for schema `id`, padded with a `body` of text to about `size` bytes.
pub fn encode(kind: ValueKind, id: i32, n: u64, size: usize) -> Vec<u8> {
    let user = format!("user-{}", fastrand::u32(..50_000));
    let amount = f64::from(fastrand::u32(..1_000_000)) / 100.0;
    let at = 1_764_000_000_000i64 + n as i64;
    let tags: Vec<String> = (0..3).map(|t| format!("tag{}", (n + t) % 40)).collect();
    let attributes: Vec<(String, String)> =
        (0..4).map(|a| (format!("k{a}"), format!("v{}", fastrand::u8(..100)))).collect();
    let body: String = (0..size.saturating_sub(160)).map(|_| fastrand::alphanumeric()).collect();
    let mut out = vec![0u8];
    out.extend_from_slice(&id.to_be_bytes());
    match kind {
        ValueKind::Avro => {
            zigzag(&mut out, n as i64);
            avro_string(&mut out, &user);
            zigzag(&mut out, (n % 3) as i64);
            out.extend_from_slice(&amount.to_le_bytes());
            zigzag(&mut out, at);
            zigzag(&mut out, tags.len() as i64);
            tags.iter().for_each(|t| avro_string(&mut out, t));
            zigzag(&mut out, 0);
            zigzag(&mut out, attributes.len() as i64);
            for (k, v) in &attributes {
                avro_string(&mut out, k);
                avro_string(&mut out, v);
            }
            zigzag(&mut out, 0);
            zigzag(&mut out, 0); // note: null (union branch 0)
            avro_string(&mut out, &body);
        }
        ValueKind::Protobuf => {
            out.push(0); // message indexes: the first message
            varint(&mut out, 1 << 3);
            varint(&mut out, n);
            proto_bytes(&mut out, 2, user.as_bytes());
            if !n.is_multiple_of(3) {
                varint(&mut out, 3 << 3);
                varint(&mut out, n % 3);
            }
            varint(&mut out, 4 << 3 | 1);
            out.extend_from_slice(&amount.to_le_bytes());
            varint(&mut out, 5 << 3);
            varint(&mut out, at as u64);
            tags.iter().for_each(|t| proto_bytes(&mut out, 6, t.as_bytes()));
            for (k, v) in &attributes {
                let mut entry = Vec::new();
                proto_bytes(&mut entry, 1, k.as_bytes());
                proto_bytes(&mut entry, 2, v.as_bytes());
                proto_bytes(&mut out, 7, &entry);
            }
            proto_bytes(&mut out, 9, body.as_bytes());
        }
    }
    out
}

/// What [`produce`] wrote.
#[derive(Debug, Clone, Copy)]
pub struct Produced {
    /// Records.
    pub records: u64,
    /// Value bytes.
    pub bytes: u64,
    /// Seconds to write and flush them.
    pub seconds: f64,
}

/// Writes typed events of about `size` bytes to `topic` (`partitions`, round robin)
/// until `target_bytes` of values are written, with `compression`; waits for every ack.
///
/// # Errors
/// The producer cannot be made, or a record is not acknowledged.
#[allow(clippy::too_many_arguments)] // one call site (`tiering-cost`), each argument a figure of its arm
pub fn produce(
    bootstrap: &str,
    topic: &str,
    partitions: u32,
    kind: ValueKind,
    id: i32,
    size: usize,
    target_bytes: u64,
    compression: &str,
) -> anyhow::Result<Produced> {
    let p: BaseProducer = crate::load::client_config(bootstrap)
        .set("acks", "1")
        .set("compression.type", compression)
        .set("linger.ms", "5")
        .set("batch.size", "131072")
        .set("queue.buffering.max.kbytes", "262144")
        .create()
        .context("producer")?;
    let start = Instant::now();
    let (mut records, mut bytes) = (0u64, 0u64);
    while bytes < target_bytes {
        // Every value fresh (its body random text), so Parquet's dictionaries and zstd
        // see what a real topic would give them: the size ratio is honest.
        let value = &encode(kind, id, records, size);
        let partition = (records % u64::from(partitions.max(1))) as i32;
        let mut record = BaseRecord::<(), [u8]>::to(topic).partition(partition).payload(&value[..]);
        loop {
            match p.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    p.poll(Duration::from_millis(5));
                }
                Err((e, _)) => anyhow::bail!("produce: {e}"),
            }
        }
        records += 1;
        bytes += value.len() as u64;
        if records % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(120)).context("flush")?;
    Ok(Produced { records, bytes, seconds: start.elapsed().as_secs_f64() })
}
