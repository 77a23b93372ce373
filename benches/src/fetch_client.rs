//! A fetch-only Kafka client over plaintext or TLS, for the `tls` scenario: it
//! reads partitions from offset 0 to a known end and counts record bytes,
//! without decompressing or parsing records (only batch headers, for the
//! next offset).
//!
//! Why not librdkafka, as the other scenarios: the workspace builds the
//! `rdkafka` crate with its default features, which leave OpenSSL out, so it
//! cannot speak `security.protocol=ssl`; turning `ssl` on would rebuild
//! librdkafka with OpenSSL for every crate that uses it. This client uses
//! `kafka-protocol` and `rustls`, both already in the workspace, and serves
//! both arms of the scenario, so plaintext and TLS are compared with the same
//! consumer cost. What it leaves out: consumer groups, record decoding,
//! retries (any error ends the read).
//!
//! It also asks ListOffsets v8 for one partition's offset at a special timestamp
//! (`shared-vs-copy` waits on -4, KIP-405's local log start, which librdkafka
//! cannot ask).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Fetch v11: the last version before flexible encoding; every broker in question serves it.
const FETCH_VERSION: i16 = 11;

/// How the client reaches the broker.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Plain TCP.
    Plaintext,
    /// TLS, trusting the PEM certificates in `ca` (the broker's self-signed certificate).
    Tls {
        /// The CA (or self-signed certificate) file.
        ca: std::path::PathBuf,
    },
}

/// What one catch-up read did.
#[derive(Debug, Clone, Copy)]
pub struct FetchRead {
    /// Record-batch bytes received.
    pub bytes: u64,
    /// Wall-clock seconds from the first request to the last response.
    pub seconds: f64,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    fn connect(bootstrap: &str, transport: &Transport) -> anyhow::Result<Stream> {
        let tcp = TcpStream::connect(bootstrap).with_context(|| format!("connect {bootstrap}"))?;
        tcp.set_nodelay(true)?;
        match transport {
            Transport::Plaintext => Ok(Stream::Plain(tcp)),
            Transport::Tls { ca } => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(ca)
                    .with_context(|| format!("read {}", ca.display()))?
                {
                    roots.add(cert.with_context(|| format!("parse {}", ca.display()))?)?;
                }
                let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
                let host = bootstrap.rsplit_once(':').map_or(bootstrap, |(h, _)| h).to_string();
                let name = ServerName::try_from(host).context("server name")?;
                let conn = rustls::ClientConnection::new(Arc::new(config), name)?;
                Ok(Stream::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
            }
        }
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.as_mut(),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Reads every `(topic, partition, end_offset)` from offset 0 to its end
/// offset over one connection, fetching all partitions in each request
/// (1 MiB per partition, 50 MiB per response: librdkafka's defaults).
///
/// # Errors
/// Connection or TLS failures, a partition error, or a read that stalls.
pub fn catch_up(
    bootstrap: &str,
    transport: &Transport,
    partitions: &[(String, i32, i64)],
) -> anyhow::Result<FetchRead> {
    let mut stream = Stream::connect(bootstrap, transport)?;
    let mut next: Vec<i64> = vec![0; partitions.len()];
    let mut bytes = 0u64;
    let start = Instant::now();
    let mut correlation_id = 0;
    let mut idle_rounds = 0;
    while partitions.iter().zip(&next).any(|((_, _, end), n)| n < end) {
        correlation_id += 1;
        let topics = wanted(partitions, &next);
        let request = FetchRequest::default()
            .with_replica_id(kafka_protocol::messages::BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(50 << 20)
            .with_isolation_level(0)
            .with_topics(topics);
        send(stream.io(), correlation_id, &request)?;
        let response = receive(stream.io(), correlation_id)?;
        let mut progressed = false;
        for t in &response.responses {
            for p in &t.partitions {
                if p.error_code != 0 {
                    bail!(
                        "fetch {}-{}: error code {}",
                        t.topic.as_str(),
                        p.partition_index,
                        p.error_code
                    );
                }
                let Some(i) = partitions.iter().position(|(n, q, _)| {
                    n.as_str() == t.topic.as_str() && *q == p.partition_index
                }) else {
                    continue;
                };
                if let Some(records) = &p.records {
                    let (n, last) = whole_batches(records);
                    if let Some(last) = last {
                        next[i] = last + 1;
                        bytes += n;
                        progressed = true;
                    }
                }
            }
        }
        idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
        if idle_rounds > 20 {
            bail!("the read stalled at {bytes} bytes");
        }
    }
    Ok(FetchRead { bytes, seconds: start.elapsed().as_secs_f64() })
}

fn wanted(partitions: &[(String, i32, i64)], next: &[i64]) -> Vec<FetchTopic> {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for ((topic, partition, end), offset) in partitions.iter().zip(next) {
        if offset >= end {
            continue;
        }
        let p = FetchPartition::default()
            .with_partition(*partition)
            .with_fetch_offset(*offset)
            .with_partition_max_bytes(1 << 20);
        match topics.iter_mut().find(|t| t.topic.as_str() == topic.as_str()) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(vec![p]),
            ),
        }
    }
    topics
}

/// The bytes of the complete batches in `records` and the last offset of the
/// last one (a response may end with a partial batch, which is fetched again).
fn whole_batches(records: &Bytes) -> (u64, Option<i64>) {
    let (mut pos, mut last) = (0usize, None);
    // Batch header: base offset (8), length (4), leader epoch (4), magic (1),
    // CRC (4), attributes (2), last offset delta (4) at byte 23.
    while records.len() >= pos + 27 {
        let mut h = &records[pos..];
        let base = h.get_i64();
        let len = h.get_i32();
        let end = pos + 12 + len.max(0) as usize;
        if len < 15 || end > records.len() {
            break;
        }
        let delta = (&records[pos + 23..pos + 27]).get_i32();
        last = Some(base + i64::from(delta));
        pos = end;
    }
    (pos as u64, last)
}

fn send(io: &mut dyn ReadWrite, correlation_id: i32, request: &FetchRequest) -> anyhow::Result<()> {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Fetch as i16)
        .with_request_api_version(FETCH_VERSION)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("floe-bench-fetch")));
    let mut body = BytesMut::new();
    header.encode(&mut body, 1)?;
    request.encode(&mut body, FETCH_VERSION)?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    io.write_all(&frame)?;
    io.flush()?;
    Ok(())
}

fn receive(io: &mut dyn ReadWrite, correlation_id: i32) -> anyhow::Result<FetchResponse> {
    let mut size = [0u8; 4];
    io.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size);
    if !(0..=(256 << 20)).contains(&size) {
        bail!("response size {size}");
    }
    let mut buf = vec![0u8; size as usize];
    io.read_exact(&mut buf)?;
    let mut buf = Bytes::from(buf);
    let header = ResponseHeader::decode(&mut buf, 0)?;
    if header.correlation_id != correlation_id {
        bail!("correlation id {} answered {correlation_id}", header.correlation_id);
    }
    FetchResponse::decode(&mut buf, FETCH_VERSION)
}

/// ListOffsets v8: the first flexible version that may ask -4 (the local log start, KIP-405).
const LIST_OFFSETS_VERSION: i16 = 8;

/// The offset ListOffsets v8 answers for `partition` of `topic` at `timestamp`
/// (-1 latest, -2 earliest, -4 the local log start of a tiered topic), over plaintext.
///
/// # Errors
/// Connection failures, or an error code in the answer.
pub fn list_offset(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> anyhow::Result<i64> {
    let mut stream =
        TcpStream::connect(bootstrap).with_context(|| format!("connect {bootstrap}"))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    let request = ListOffsetsRequest::default()
        .with_replica_id(kafka_protocol::messages::BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(timestamp)])]);
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ListOffsets as i16)
        .with_request_api_version(LIST_OFFSETS_VERSION)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("floe-bench")));
    let mut body = BytesMut::new();
    // Flexible versions: request header v2, response header v1.
    header.encode(&mut body, 2)?;
    request.encode(&mut body, LIST_OFFSETS_VERSION)?;
    let mut frame = BytesMut::with_capacity(body.len() + 4);
    frame.put_i32(body.len() as i32);
    frame.put_slice(&body);
    stream.write_all(&frame)?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size);
    if !(0..=(16 << 20)).contains(&size) {
        bail!("ListOffsets response size {size}");
    }
    let mut buf = vec![0u8; size as usize];
    stream.read_exact(&mut buf)?;
    let mut buf = Bytes::from(buf);
    ResponseHeader::decode(&mut buf, 1)?;
    let response = ListOffsetsResponse::decode(&mut buf, LIST_OFFSETS_VERSION)?;
    let p = response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == partition)
        .with_context(|| format!("ListOffsets: no answer for {topic}-{partition}"))?;
    if p.error_code != 0 {
        bail!("ListOffsets {topic}-{partition} at {timestamp}: error code {}", p.error_code);
    }
    Ok(p.offset)
}
