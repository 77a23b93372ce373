//! The Fetch response writer: encodes a whole Fetch response (size prefix,
//! response header, body) except the record bytes, which stay in their
//! segment files as [`FileRegion`]s so the broker can send them with
//! `sendfile(2)`.
//!
//! It owns Floe's Fetch response types ([`FetchResponseData`] and what it
//! holds) and their encoding for Fetch versions 4 through 18. The
//! `kafka-protocol` crate's `FetchResponse` cannot be used for this: it holds
//! records as `Option<Bytes>`, in memory. Every byte this writer produces is
//! checked in the tests against that crate's encoder, for every version.
//!
//! # Output
//! [`encode_fetch_response`] returns an [`EncodedResponse`]: the ordered
//! [`ResponsePart`]s `[bytes, file, bytes, file, …, bytes]` and their total
//! length, known before anything is written. The bytes parts are slices of one
//! buffer (one allocation per response, not per partition). Records given as
//! [`FetchRecords::Bytes`] become their own part without being copied.
//! [`EncodedResponse::to_contiguous`] is the copying path (TLS, tests): it
//! reads the file parts with `pread(2)` and yields exactly the bytes that
//! writing the parts in order would send.
//!
//! # Wire layout
//! All integers are big-endian. "uvarint" is Kafka's unsigned varint (7 bits a
//! byte, low bits first, high bit set on all but the last byte). Flexible
//! versions (v12+) write arrays, strings and bytes with compact lengths
//! (uvarint of length + 1, 0 meaning null) and end every structure with a
//! tagged-fields section (uvarint count, then per field uvarint tag, uvarint
//! size, value); non-flexible versions use i32 array lengths, i16 string
//! lengths and i32 bytes lengths, -1 meaning null.
//!
//! ```text
//! size                         i32    bytes that follow (header + body)
//! response header
//!   correlation_id             i32
//!   tagged fields              uvarint 0                       v12+ (header v1)
//! body
//!   throttle_time_ms           i32
//!   error_code                 i16                             v7+
//!   session_id                 i32                             v7+
//!   responses                  array                           i32 count | v12+ uvarint count+1
//!     topic                    string                          v4-11 i16 len + UTF-8 | v12 uvarint len+1 + UTF-8 | v13+ absent
//!     topic_id                 16 bytes (UUID)                 v13+
//!     partitions               array
//!       partition_index        i32
//!       error_code             i16
//!       high_watermark         i64
//!       last_stable_offset     i64
//!       log_start_offset       i64                             v5+
//!       aborted_transactions   nullable array                  i32 count or -1 | v12+ uvarint count+1 or 0
//!         producer_id          i64
//!         first_offset         i64
//!         tagged fields        uvarint 0                       v12+
//!       preferred_read_replica i32                             v11+
//!       records                nullable bytes                  i32 len or -1 | v12+ uvarint len+1 or 0
//!         <len bytes>                                          the file region (or in-memory bytes)
//!       tagged fields          uvarint 0                       v12+ (diverging_epoch tag 0, current_leader
//!                                                              tag 1, snapshot_id tag 2: never written)
//!     tagged fields            uvarint 0                       v12+
//!   tagged fields              uvarint count                   v12+; count 1 when v16+ and node_endpoints
//!                                                              is non-empty, else 0
//!     tag 0: node_endpoints    uvarint 0, uvarint size,        v16+, only when non-empty
//!                              compact array of
//!       node_id                i32
//!       host                   compact string
//!       port                   i32
//!       rack                   compact nullable string
//!       tagged fields          uvarint 0
//! ```

use std::io;
use std::ops::RangeInclusive;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::error::ProtocolError;
use crate::file_region::FileRegion;

/// The Fetch versions this writer encodes (those `kafka-protocol` 0.18 knows).
pub const FETCH_VERSIONS: RangeInclusive<i16> = 4..=18;

/// The first Fetch version with flexible encoding (compact lengths, tagged
/// fields) and response header v1.
const FIRST_FLEXIBLE_VERSION: i16 = 12;

/// Kafka's limit on a string's length in bytes (Java's `Short.MAX_VALUE`),
/// applied to compact strings as well.
const MAX_STRING_LEN: usize = i16::MAX as usize;

/// A Fetch response, as Floe's fetch handler fills it in.
///
/// Fields that a version does not carry are left out when encoding it (see
/// the module docs); [`encode_fetch_response`] refuses the few whose value
/// would be lost in a way Kafka treats as a bug.
#[derive(Debug, Clone, Default)]
pub struct FetchResponseData {
    /// How long the request was throttled for a quota, in milliseconds.
    pub throttle_time_ms: i32,
    /// Top-level error code (v7+; dropped below v7).
    pub error_code: i16,
    /// Fetch session id (v7+; must be 0 below v7), 0 when there is no session.
    pub session_id: i32,
    /// One entry per topic, in the order they are to appear on the wire.
    pub topics: Vec<FetchTopicResponse>,
    /// Endpoints of the leaders named in partition errors (v16+ tagged field 0,
    /// written only when non-empty; dropped below v16).
    pub node_endpoints: Vec<NodeEndpoint>,
}

/// One topic of a Fetch response.
#[derive(Debug, Clone, Default)]
pub struct FetchTopicResponse {
    /// The topic name (written up to v12).
    pub topic: StrBytes,
    /// The topic id (written from v13 on, instead of the name).
    pub topic_id: Uuid,
    /// The partitions of this topic.
    pub partitions: Vec<FetchPartitionResponse>,
}

/// One partition of a Fetch response.
#[derive(Debug, Clone)]
pub struct FetchPartitionResponse {
    /// The partition index.
    pub partition_index: i32,
    /// The error code, 0 (NONE) when the fetch succeeded.
    pub error_code: i16,
    /// The partition's high watermark.
    pub high_watermark: i64,
    /// The partition's last stable offset, -1 when unknown.
    pub last_stable_offset: i64,
    /// The partition's log start offset (v5+), -1 when unknown.
    pub log_start_offset: i64,
    /// Aborted transactions overlapping the records (READ_COMMITTED); `None`
    /// is written as a null array, which is what Kafka sends to
    /// READ_UNCOMMITTED consumers.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    /// The replica the consumer should fetch from next (v11+; must be -1
    /// below v11), -1 for none.
    pub preferred_read_replica: i32,
    /// The records.
    pub records: FetchRecords,
}

impl FetchPartitionResponse {
    /// A partition response with Kafka's defaults: no error, offsets -1
    /// except the high watermark (0), no aborted transactions (null), no
    /// preferred read replica, and empty (not null) records, as Kafka sends.
    pub fn new(partition_index: i32) -> Self {
        FetchPartitionResponse {
            partition_index,
            error_code: 0,
            high_watermark: 0,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted_transactions: None,
            preferred_read_replica: -1,
            records: FetchRecords::Bytes(Bytes::new()),
        }
    }
}

impl Default for FetchPartitionResponse {
    fn default() -> Self {
        Self::new(0)
    }
}

/// An aborted transaction, for READ_COMMITTED consumers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// The producer id of the aborted transaction.
    pub producer_id: i64,
    /// The offset of the transaction's first batch.
    pub first_offset: i64,
}

/// A broker endpoint, for the v16+ `node_endpoints` tagged field.
#[derive(Debug, Clone, Default)]
pub struct NodeEndpoint {
    /// The node id.
    pub node_id: i32,
    /// The host name.
    pub host: StrBytes,
    /// The port.
    pub port: i32,
    /// The rack, if any.
    pub rack: Option<StrBytes>,
}

/// A partition's `records` field.
#[derive(Debug, Clone)]
pub enum FetchRecords {
    /// A null records field.
    Null,
    /// Records in memory (sent as their own part, not copied).
    Bytes(Bytes),
    /// Records sitting in a segment file: the zero-copy case.
    File(FileRegion),
}

impl FetchRecords {
    /// The number of record bytes (0 for [`FetchRecords::Null`]).
    pub fn len(&self) -> usize {
        match self {
            FetchRecords::Null => 0,
            FetchRecords::Bytes(bytes) => bytes.len(),
            FetchRecords::File(region) => region.len as usize,
        }
    }

    /// Whether there are no record bytes (null or empty).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One piece of an encoded response: write them in order.
#[derive(Debug, Clone)]
pub enum ResponsePart {
    /// Bytes to write as they are.
    Bytes(Bytes),
    /// A file range to send with `sendfile(2)` (or read with `pread(2)`).
    File(FileRegion),
}

impl ResponsePart {
    /// The number of bytes this part puts on the wire.
    pub fn len(&self) -> usize {
        match self {
            ResponsePart::Bytes(bytes) => bytes.len(),
            ResponsePart::File(region) => region.len as usize,
        }
    }

    /// Whether this part is empty (the writer never produces empty parts).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A complete response, size prefix included, as an ordered list of parts.
///
/// The first part is always [`ResponsePart::Bytes`] and starts with the
/// 4-byte size prefix; no part is empty; `total_len` is the sum of the parts'
/// lengths, i.e. the number of bytes the response occupies on the wire.
#[derive(Debug, Clone)]
pub struct EncodedResponse {
    /// The parts, in wire order.
    pub parts: Vec<ResponsePart>,
    /// Total length on the wire, including the 4-byte size prefix.
    pub total_len: usize,
}

impl EncodedResponse {
    /// The response as one buffer: the copying path (TLS listeners, tests).
    ///
    /// Byte-identical to writing the parts in order, with file parts read by
    /// `pread(2)` into one buffer allocated up front.
    ///
    /// # Errors
    /// Any error of `pread(2)`; `UnexpectedEof` if a file is shorter than a
    /// region (truncated under us).
    pub fn to_contiguous(&self) -> io::Result<Bytes> {
        use std::os::unix::fs::FileExt;

        let mut out = Vec::with_capacity(self.total_len);
        for part in &self.parts {
            match part {
                ResponsePart::Bytes(bytes) => out.extend_from_slice(bytes),
                ResponsePart::File(region) => {
                    let start = out.len();
                    out.resize(start + region.len as usize, 0);
                    region.file.read_exact_at(&mut out[start..], region.position)?;
                }
            }
        }
        debug_assert_eq!(out.len(), self.total_len);
        Ok(Bytes::from(out))
    }
}

/// Encodes a Fetch response of `version` answering the request with
/// `correlation_id`: size prefix, response header (v0 below Fetch v12, v1
/// from v12), body.
///
/// Records given as [`FetchRecords::File`] are not read: they become
/// [`ResponsePart::File`] parts between the encoded bytes.
///
/// # Errors
/// [`ProtocolError::Encode`] if `version` is outside [`FETCH_VERSIONS`], if a
/// field that Kafka does not allow to be dropped is set on a version without
/// it (`session_id` ≠ 0 below v7, `preferred_read_replica` ≠ -1 below v11),
/// if a string is longer than 32767 bytes, a records field longer than
/// `i32::MAX` bytes, or the whole response larger than `i32::MAX` bytes.
pub fn encode_fetch_response(
    correlation_id: i32,
    version: i16,
    data: &FetchResponseData,
) -> Result<EncodedResponse, ProtocolError> {
    let err = |reason: String| ProtocolError::Encode { api: "Fetch", version, reason };
    if !FETCH_VERSIONS.contains(&version) {
        return Err(err(format!(
            "version not supported (Fetch {}-{})",
            FETCH_VERSIONS.start(),
            FETCH_VERSIONS.end()
        )));
    }
    if version < 7 && data.session_id != 0 {
        return Err(err(format!(
            "session_id {} set, but Fetch v{version} has no session id",
            data.session_id
        )));
    }

    let (capacity, external_parts) = estimate(data);
    let mut w = Writer {
        buf: BytesMut::with_capacity(capacity),
        head: None,
        parts: Vec::with_capacity(1 + 2 * external_parts),
        len: 0,
        flexible: version >= FIRST_FLEXIBLE_VERSION,
    };
    w.parts.push(ResponsePart::Bytes(Bytes::new())); // replaced by the head at the end

    // Size prefix (patched at the end), then the response header.
    w.buf.put_i32(0);
    w.buf.put_i32(correlation_id);
    w.tagged_fields_none();

    // Body.
    w.buf.put_i32(data.throttle_time_ms);
    if version >= 7 {
        w.buf.put_i16(data.error_code);
        w.buf.put_i32(data.session_id);
    }
    w.array_len(Some(data.topics.len())).map_err(err)?;
    for topic in &data.topics {
        if version <= 12 {
            w.string(&topic.topic).map_err(err)?;
        } else {
            w.buf.put_slice(topic.topic_id.as_bytes());
        }
        w.array_len(Some(topic.partitions.len())).map_err(err)?;
        for partition in &topic.partitions {
            w.buf.put_i32(partition.partition_index);
            w.buf.put_i16(partition.error_code);
            w.buf.put_i64(partition.high_watermark);
            w.buf.put_i64(partition.last_stable_offset);
            if version >= 5 {
                w.buf.put_i64(partition.log_start_offset);
            }
            let aborted = partition.aborted_transactions.as_deref();
            w.array_len(aborted.map(<[_]>::len)).map_err(err)?;
            for txn in aborted.unwrap_or_default() {
                w.buf.put_i64(txn.producer_id);
                w.buf.put_i64(txn.first_offset);
                w.tagged_fields_none();
            }
            if version >= 11 {
                w.buf.put_i32(partition.preferred_read_replica);
            } else if partition.preferred_read_replica != -1 {
                return Err(err(format!(
                    "preferred_read_replica {} set on partition {}, but Fetch v{version} has none",
                    partition.preferred_read_replica, partition.partition_index
                )));
            }
            w.records(&partition.records).map_err(err)?;
            w.tagged_fields_none(); // diverging_epoch, current_leader, snapshot_id: never set
        }
        w.tagged_fields_none();
    }
    if w.flexible {
        if version >= 16 && !data.node_endpoints.is_empty() {
            w.uvarint(1);
            w.uvarint(0); // tag
            let size = node_endpoints_size(&data.node_endpoints).map_err(err)?;
            w.uvarint_len(size).map_err(err)?;
            w.array_len(Some(data.node_endpoints.len())).map_err(err)?;
            for node in &data.node_endpoints {
                w.buf.put_i32(node.node_id);
                w.string(&node.host).map_err(err)?;
                w.buf.put_i32(node.port);
                w.nullable_string(node.rack.as_deref()).map_err(err)?;
                w.tagged_fields_none();
            }
        } else {
            w.uvarint(0);
        }
    }

    w.finish().map_err(err)
}

/// An upper bound of the encoded bytes (everything but the records) and the
/// number of records fields that become parts of their own.
fn estimate(data: &FetchResponseData) -> (usize, usize) {
    const VARINT: usize = 5;
    // size, correlation id, header tags, throttle, error, session, topics length, body tags.
    let mut bytes = 4 + 4 + 1 + 4 + 2 + 4 + VARINT + 1;
    let mut external = 0;
    for topic in &data.topics {
        // name (or id), partitions length, tags
        bytes += VARINT + topic.topic.len().max(16) + VARINT + 1;
        for partition in &topic.partitions {
            // index, error, 3 offsets, aborted length, replica, records length, tags
            bytes += 4 + 2 + 3 * 8 + VARINT + 4 + VARINT + 1;
            bytes += partition.aborted_transactions.as_ref().map_or(0, Vec::len) * (8 + 8 + 1);
            external += usize::from(!partition.records.is_empty());
        }
    }
    // tag count, tag, size, array length, then each endpoint.
    bytes += 4 * VARINT;
    for node in &data.node_endpoints {
        bytes += 4
            + VARINT
            + node.host.len()
            + 4
            + VARINT
            + node.rack.as_ref().map_or(0, |r| r.len())
            + 1;
    }
    (bytes, external)
}

/// The encoded size of the `node_endpoints` compact array (v16+).
fn node_endpoints_size(nodes: &[NodeEndpoint]) -> Result<usize, String> {
    let mut size = uvarint_size(compact_len(nodes.len())?);
    for node in nodes {
        size += 4 + uvarint_size(compact_len(node.host.len())?) + node.host.len() + 4;
        size += match &node.rack {
            Some(rack) => uvarint_size(compact_len(rack.len())?) + rack.len(),
            None => 1,
        };
        size += 1; // tagged fields
    }
    Ok(size)
}

/// `len + 1` as a compact length.
fn compact_len(len: usize) -> Result<u32, String> {
    u32::try_from(len)
        .ok()
        .and_then(|l| l.checked_add(1))
        .ok_or_else(|| format!("length {len} too large for a compact field"))
}

/// The number of bytes of `value` as an unsigned varint.
fn uvarint_size(value: u32) -> usize {
    match value {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

/// Encodes into one buffer, cutting it into parts at each records field that
/// is sent from elsewhere.
struct Writer {
    /// Bytes encoded since the last cut.
    buf: BytesMut,
    /// The bytes before the first cut (they start with the size prefix, which
    /// is patched in [`Writer::finish`]); `None` until the first cut.
    head: Option<BytesMut>,
    /// Parts so far; `parts[0]` is a placeholder for the head.
    parts: Vec<ResponsePart>,
    /// Bytes in `head` and `parts`.
    len: usize,
    /// Whether the version is flexible (v12+).
    flexible: bool,
}

impl Writer {
    fn uvarint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.buf.put_u8((value as u8) | 0x80);
            value >>= 7;
        }
        self.buf.put_u8(value as u8);
    }

    /// A plain length as an unsigned varint (tagged field sizes).
    fn uvarint_len(&mut self, len: usize) -> Result<(), String> {
        let len = u32::try_from(len).map_err(|_| format!("length {len} too large"))?;
        self.uvarint(len);
        Ok(())
    }

    /// An empty tagged-fields section (flexible versions only).
    fn tagged_fields_none(&mut self) {
        if self.flexible {
            self.buf.put_u8(0);
        }
    }

    /// The length of a (nullable) array.
    fn array_len(&mut self, len: Option<usize>) -> Result<(), String> {
        match (len, self.flexible) {
            (None, false) => self.buf.put_i32(-1),
            (None, true) => self.uvarint(0),
            (Some(len), false) => {
                let len = i32::try_from(len).map_err(|_| format!("array of {len} elements"))?;
                self.buf.put_i32(len);
            }
            (Some(len), true) => self.uvarint(compact_len(len)?),
        }
        Ok(())
    }

    fn string(&mut self, s: &str) -> Result<(), String> {
        self.nullable_string(Some(s))
    }

    fn nullable_string(&mut self, s: Option<&str>) -> Result<(), String> {
        match s {
            None if self.flexible => self.uvarint(0),
            None => self.buf.put_i16(-1),
            Some(s) => {
                if s.len() > MAX_STRING_LEN {
                    return Err(format!("string of {} bytes (limit {MAX_STRING_LEN})", s.len()));
                }
                if self.flexible {
                    self.uvarint(s.len() as u32 + 1);
                } else {
                    self.buf.put_i16(s.len() as i16);
                }
                self.buf.put_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    /// A records field: its length, then the bytes as a part of their own.
    fn records(&mut self, records: &FetchRecords) -> Result<(), String> {
        let part = match records {
            FetchRecords::Null => {
                if self.flexible {
                    self.uvarint(0);
                } else {
                    self.buf.put_i32(-1);
                }
                return Ok(());
            }
            FetchRecords::Bytes(bytes) => ResponsePart::Bytes(bytes.clone()),
            FetchRecords::File(region) => ResponsePart::File(region.clone()),
        };
        let len = part.len();
        let len = i32::try_from(len).map_err(|_| format!("records field of {len} bytes"))?;
        if self.flexible {
            self.uvarint(len as u32 + 1);
        } else {
            self.buf.put_i32(len);
        }
        if len > 0 {
            self.cut();
            self.len += part.len();
            self.parts.push(part);
        }
        Ok(())
    }

    /// Ends the current bytes part (never empty: a length precedes every cut).
    fn cut(&mut self) {
        let chunk = self.buf.split();
        self.len += chunk.len();
        if self.head.is_none() {
            self.head = Some(chunk);
        } else {
            self.parts.push(ResponsePart::Bytes(chunk.freeze()));
        }
    }

    /// Patches the size prefix and returns the parts.
    fn finish(mut self) -> Result<EncodedResponse, String> {
        let mut head = match self.head.take() {
            Some(head) => head,
            None => {
                // No records parts: the head is the whole response.
                let head = self.buf.split();
                self.len += head.len();
                head
            }
        };
        let tail = self.buf;
        let total_len = self.len + tail.len();
        let size = i32::try_from(total_len - 4)
            .map_err(|_| format!("response of {total_len} bytes exceeds i32::MAX"))?;
        head[..4].copy_from_slice(&size.to_be_bytes());
        self.parts[0] = ResponsePart::Bytes(head.freeze());
        if !tail.is_empty() {
            self.parts.push(ResponsePart::Bytes(tail.freeze()));
        }
        Ok(EncodedResponse { parts: self.parts, total_len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use bytes::Buf;
    use kafka_protocol::messages::fetch_response as kp;
    use kafka_protocol::messages::{
        BrokerId, FetchResponse, ProducerId, ResponseHeader, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    /// xorshift64*: deterministic, dependency-free test data.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn one_in(&mut self, n: u64) -> bool {
            self.below(n) == 0
        }
        fn bytes(&mut self, len: usize) -> Bytes {
            (0..len).map(|_| self.next() as u8).collect::<Vec<u8>>().into()
        }
        fn name(&mut self, max: u64) -> StrBytes {
            let len = self.below(max + 1);
            let s: String = (0..len).map(|_| (b'a' + self.below(26) as u8) as char).collect();
            StrBytes::from_string(s)
        }
    }

    /// A response using every field `version` carries (and only those that
    /// must be left unset below their version left unset), with records as
    /// `FetchRecords::Bytes`/`Null`.
    fn random_response(rng: &mut Rng, version: i16) -> FetchResponseData {
        let mut data = FetchResponseData {
            throttle_time_ms: rng.next() as i32,
            error_code: rng.next() as i16,
            session_id: if version >= 7 { rng.next() as i32 } else { 0 },
            ..Default::default()
        };
        for _ in 0..rng.below(4) {
            let partitions = if rng.one_in(15) { 130 } else { rng.below(5) };
            let name_max = if rng.one_in(10) { 200 } else { 12 };
            let mut topic = FetchTopicResponse {
                topic: rng.name(name_max),
                topic_id: Uuid::from_u128(u128::from(rng.next()) << 64 | u128::from(rng.next())),
                partitions: Vec::new(),
            };
            for _ in 0..partitions {
                let mut p = FetchPartitionResponse::new(rng.next() as i32);
                p.error_code = if rng.one_in(3) { rng.below(120) as i16 } else { 0 };
                p.high_watermark = rng.next() as i64;
                p.last_stable_offset = rng.next() as i64;
                p.log_start_offset = rng.next() as i64;
                p.aborted_transactions = match rng.below(3) {
                    0 => None,
                    1 => Some(Vec::new()),
                    _ => Some(
                        (0..rng.below(4) + 1)
                            .map(|_| AbortedTransaction {
                                producer_id: rng.next() as i64,
                                first_offset: rng.next() as i64,
                            })
                            .collect(),
                    ),
                };
                if version >= 11 {
                    p.preferred_read_replica = rng.below(4) as i32 - 1;
                }
                p.records = match rng.below(6) {
                    0 => FetchRecords::Null,
                    1 => FetchRecords::Bytes(Bytes::new()),
                    2 if rng.one_in(4) => FetchRecords::Bytes(rng.bytes(20_000)),
                    _ => {
                        let len = rng.below(300) as usize + 1;
                        FetchRecords::Bytes(rng.bytes(len))
                    }
                };
                topic.partitions.push(p);
            }
            data.topics.push(topic);
        }
        for _ in 0..rng.below(3) {
            data.node_endpoints.push(NodeEndpoint {
                node_id: rng.next() as i32,
                host: rng.name(20),
                port: rng.next() as i32,
                rack: if rng.one_in(2) { None } else { Some(rng.name(5)) },
            });
        }
        data
    }

    /// The response the brief describes: several topics and partitions, some
    /// records present, some null or empty, errors, aborted transactions
    /// null and not.
    fn fixture(version: i16) -> FetchResponseData {
        let partition =
            |index: i32, error_code: i16, records: FetchRecords| FetchPartitionResponse {
                error_code,
                high_watermark: 1000 + i64::from(index),
                last_stable_offset: 990 + i64::from(index),
                log_start_offset: i64::from(index),
                records,
                ..FetchPartitionResponse::new(index)
            };
        let batch = |fill: u8, len: usize| FetchRecords::Bytes(Bytes::from(vec![fill; len]));
        let mut p1 = partition(1, 0, batch(0xb1, 700));
        p1.aborted_transactions = Some(vec![
            AbortedTransaction { producer_id: 42, first_offset: 100 },
            AbortedTransaction { producer_id: 43, first_offset: 150 },
        ]);
        if version >= 11 {
            p1.preferred_read_replica = 2;
        }
        FetchResponseData {
            throttle_time_ms: 25,
            error_code: 0,
            session_id: if version >= 7 { 0x0102_0304 } else { 0 },
            topics: vec![
                FetchTopicResponse {
                    topic: StrBytes::from_static_str("orders"),
                    topic_id: Uuid::from_u128(0x0011_2233_4455_6677_8899_aabb_ccdd_eeff),
                    partitions: vec![
                        partition(0, 0, batch(0xa0, 150)),
                        p1,
                        partition(2, 6, FetchRecords::Null), // NOT_LEADER_OR_FOLLOWER
                        partition(3, 0, FetchRecords::Bytes(Bytes::new())),
                    ],
                },
                FetchTopicResponse {
                    topic: StrBytes::from_static_str("payments"),
                    topic_id: Uuid::from_u128(7),
                    partitions: vec![
                        partition(0, 1, FetchRecords::Null),
                        partition(5, 0, batch(0xc5, 3)),
                    ],
                },
                FetchTopicResponse {
                    topic: StrBytes::from_static_str("empty"),
                    topic_id: Uuid::from_u128(8),
                    partitions: vec![],
                },
            ],
            node_endpoints: vec![NodeEndpoint {
                node_id: 2,
                host: StrBytes::from_static_str("broker-2.local"),
                port: 9092,
                rack: Some(StrBytes::from_static_str("rack-b")),
            }],
        }
    }

    /// The record bytes a `FetchRecords` stands for.
    fn record_bytes(records: &FetchRecords) -> Option<Bytes> {
        match records {
            FetchRecords::Null => None,
            FetchRecords::Bytes(bytes) => Some(bytes.clone()),
            FetchRecords::File(region) => Some(region.read_to_vec().unwrap().into()),
        }
    }

    /// The same response as `kafka-protocol`'s type.
    fn to_crate(data: &FetchResponseData) -> FetchResponse {
        FetchResponse::default()
            .with_throttle_time_ms(data.throttle_time_ms)
            .with_error_code(data.error_code)
            .with_session_id(data.session_id)
            .with_responses(
                data.topics
                    .iter()
                    .map(|t| {
                        kp::FetchableTopicResponse::default()
                            .with_topic(TopicName(t.topic.clone()))
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        kp::PartitionData::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(p.error_code)
                                            .with_high_watermark(p.high_watermark)
                                            .with_last_stable_offset(p.last_stable_offset)
                                            .with_log_start_offset(p.log_start_offset)
                                            .with_aborted_transactions(
                                                p.aborted_transactions.as_ref().map(|txns| {
                                                    txns.iter()
                                                        .map(|a| {
                                                            kp::AbortedTransaction::default()
                                                                .with_producer_id(ProducerId(
                                                                    a.producer_id,
                                                                ))
                                                                .with_first_offset(a.first_offset)
                                                        })
                                                        .collect()
                                                }),
                                            )
                                            .with_preferred_read_replica(BrokerId(
                                                p.preferred_read_replica,
                                            ))
                                            .with_records(record_bytes(&p.records))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
            .with_node_endpoints(
                data.node_endpoints
                    .iter()
                    .map(|n| {
                        kp::NodeEndpoint::default()
                            .with_node_id(BrokerId(n.node_id))
                            .with_host(n.host.clone())
                            .with_port(n.port)
                            .with_rack(n.rack.clone())
                    })
                    .collect(),
            )
    }

    fn header_version(version: i16) -> i16 {
        if version >= 12 {
            1
        } else {
            0
        }
    }

    /// Size prefix + header + body, as `kafka-protocol` encodes them.
    fn crate_encoding(correlation_id: i32, version: i16, data: &FetchResponseData) -> Vec<u8> {
        let mut inner = Vec::new();
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut inner, header_version(version))
            .unwrap();
        to_crate(data).encode(&mut inner, version).unwrap();
        let mut out = (inner.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&inner);
        out
    }

    /// What decoding leaves of `data` at `version`: the fields the version
    /// lacks at their decoded defaults.
    fn as_decoded(data: &FetchResponseData, version: i16) -> FetchResponse {
        let mut data = data.clone();
        if version < 7 {
            data.error_code = 0;
        }
        if version < 16 {
            data.node_endpoints.clear();
        }
        for topic in &mut data.topics {
            if version >= 13 {
                topic.topic = StrBytes::default();
            } else {
                topic.topic_id = Uuid::nil();
            }
            for p in &mut topic.partitions {
                if version < 5 {
                    p.log_start_offset = -1;
                }
            }
        }
        to_crate(&data)
    }

    /// The invariants `EncodedResponse` promises, and the file parts matching
    /// the file records in order.
    fn check_parts(encoded: &EncodedResponse, data: &FetchResponseData) {
        assert!(matches!(encoded.parts.first(), Some(ResponsePart::Bytes(b)) if b.len() >= 8));
        assert!(encoded.parts.iter().all(|p| !p.is_empty()), "an empty part");
        assert_eq!(encoded.parts.iter().map(ResponsePart::len).sum::<usize>(), encoded.total_len);
        let ResponsePart::Bytes(first) = &encoded.parts[0] else { unreachable!() };
        assert_eq!(first[..4], ((encoded.total_len - 4) as i32).to_be_bytes());
        let got: Vec<(u64, u32)> = encoded
            .parts
            .iter()
            .filter_map(|p| match p {
                ResponsePart::File(r) => Some((r.position, r.len)),
                ResponsePart::Bytes(_) => None,
            })
            .collect();
        let want: Vec<(u64, u32)> = data
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter_map(|p| match &p.records {
                FetchRecords::File(r) if r.len > 0 => Some((r.position, r.len)),
                _ => None,
            })
            .collect();
        assert_eq!(got, want);
    }

    /// Encodes `data` with our writer and checks it three ways: against the
    /// crate's encoding, through the crate's decoder, and the part invariants.
    fn check(correlation_id: i32, version: i16, data: &FetchResponseData) {
        let encoded = encode_fetch_response(correlation_id, version, data).unwrap();
        check_parts(&encoded, data);
        let ours = encoded.to_contiguous().unwrap();
        let theirs = crate_encoding(correlation_id, version, data);
        assert_eq!(ours.len(), theirs.len(), "length, v{version}");
        if let Some(at) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
            panic!("v{version}: first difference at byte {at} of {}", ours.len());
        }

        let mut rest = ours.slice(4..);
        let header = ResponseHeader::decode(&mut rest, header_version(version)).unwrap();
        assert_eq!(header.correlation_id, correlation_id);
        let decoded = FetchResponse::decode(&mut rest, version).unwrap();
        assert!(!rest.has_remaining(), "v{version}: trailing bytes");
        assert_eq!(decoded, as_decoded(data, version), "v{version}: decoded");
    }

    static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

    /// An anonymous temporary file holding `contents` (unlinked at once: the
    /// descriptor keeps it readable, as a deleted segment stays readable).
    fn temp_file(contents: &[u8]) -> Arc<File> {
        let path = std::env::temp_dir().join(format!(
            "floe-fetch-test-{}-{}",
            std::process::id(),
            FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut file =
            OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        file.write_all(contents).unwrap();
        Arc::new(file)
    }

    /// `data` with every `Bytes` records field moved into one file, between
    /// filler bytes so a wrong position or length shows.
    fn into_file_regions(mut data: FetchResponseData) -> FetchResponseData {
        let mut contents = b"segment header filler".to_vec();
        let mut spans = Vec::new();
        for p in data.topics.iter().flat_map(|t| &t.partitions) {
            if let FetchRecords::Bytes(bytes) = &p.records {
                spans.push((contents.len() as u64, bytes.len() as u32));
                contents.extend_from_slice(bytes);
                contents.extend_from_slice(&[0xee; 13]);
            }
        }
        let file = temp_file(&contents);
        let mut spans = spans.into_iter();
        for p in data.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            if let FetchRecords::Bytes(_) = p.records {
                let (position, len) = spans.next().unwrap();
                p.records = FetchRecords::File(FileRegion { file: file.clone(), position, len });
            }
        }
        data
    }

    #[test]
    fn fixture_matches_kafka_protocol_for_every_version() {
        for version in FETCH_VERSIONS {
            check(0x5eed, version, &fixture(version));
        }
    }

    #[test]
    fn fixture_from_file_regions_matches_kafka_protocol_for_every_version() {
        for version in FETCH_VERSIONS {
            let data = into_file_regions(fixture(version));
            check(-1, version, &data);
            let encoded = encode_fetch_response(-1, version, &data).unwrap();
            // [head, file, bytes, file, bytes, file, tail]: three non-empty records.
            let kinds: String = encoded
                .parts
                .iter()
                .map(|p| match p {
                    ResponsePart::Bytes(_) => 'b',
                    ResponsePart::File(_) => 'f',
                })
                .collect();
            assert_eq!(kinds, "bfbfbfb", "v{version}");
        }
    }

    #[test]
    fn random_responses_match_kafka_protocol_for_every_version() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for version in FETCH_VERSIONS {
            for _ in 0..60 {
                let data = random_response(&mut rng, version);
                let correlation_id = rng.next() as i32;
                check(correlation_id, version, &data);
                check(correlation_id, version, &into_file_regions(data));
            }
        }
    }

    #[test]
    fn empty_response_bytes_spelled_out() {
        let data = FetchResponseData { throttle_time_ms: 1, ..Default::default() };
        let v4 = encode_fetch_response(9, 4, &data).unwrap().to_contiguous().unwrap();
        #[rustfmt::skip]
        assert_eq!(&v4[..], &[
            0, 0, 0, 12,   // size
            0, 0, 0, 9,    // correlation id
            0, 0, 0, 1,    // throttle_time_ms
            0, 0, 0, 0,    // responses: 0 topics
        ]);
        let v12 = encode_fetch_response(9, 12, &data).unwrap().to_contiguous().unwrap();
        #[rustfmt::skip]
        assert_eq!(&v12[..], &[
            0, 0, 0, 17,   // size
            0, 0, 0, 9,    // correlation id
            0,             // header tagged fields
            0, 0, 0, 1,    // throttle_time_ms
            0, 0,          // error_code
            0, 0, 0, 0,    // session_id
            1,             // responses: compact length 0 + 1
            0,             // tagged fields
        ]);
    }

    #[test]
    fn one_partition_v4_bytes_spelled_out() {
        let file = temp_file(b"xxABCyy");
        let mut p = FetchPartitionResponse::new(3);
        p.high_watermark = 5;
        p.last_stable_offset = 4;
        p.records = FetchRecords::File(FileRegion { file, position: 2, len: 3 });
        let data = FetchResponseData {
            topics: vec![FetchTopicResponse {
                topic: StrBytes::from_static_str("t"),
                partitions: vec![p],
                ..Default::default()
            }],
            ..Default::default()
        };
        let encoded = encode_fetch_response(1, 4, &data).unwrap();
        // v4 ends with the records: no tail part.
        assert_eq!(encoded.parts.len(), 2);
        #[rustfmt::skip]
        assert_eq!(&encoded.to_contiguous().unwrap()[..], &[
            0, 0, 0, 52,              // size
            0, 0, 0, 1,               // correlation id
            0, 0, 0, 0,               // throttle_time_ms
            0, 0, 0, 1,               // 1 topic
            0, 1, b't',               // topic
            0, 0, 0, 1,               // 1 partition
            0, 0, 0, 3,               // partition_index
            0, 0,                     // error_code
            0, 0, 0, 0, 0, 0, 0, 5,   // high_watermark
            0, 0, 0, 0, 0, 0, 0, 4,   // last_stable_offset
            0xff, 0xff, 0xff, 0xff,   // aborted_transactions: null
            0, 0, 0, 3,               // records length
            b'A', b'B', b'C',         // records, from the file
        ][..]);
    }

    #[test]
    fn null_and_empty_records_differ() {
        for (records, v4, v12) in
            [(FetchRecords::Null, [0xff; 4], 0u8), (FetchRecords::Bytes(Bytes::new()), [0; 4], 1)]
        {
            let mut p = FetchPartitionResponse::new(0);
            p.records = records;
            let data = FetchResponseData {
                topics: vec![FetchTopicResponse { partitions: vec![p], ..Default::default() }],
                ..Default::default()
            };
            let out = encode_fetch_response(0, 4, &data).unwrap();
            assert_eq!(out.parts.len(), 1);
            assert_eq!(out.to_contiguous().unwrap()[out.total_len - 4..], v4);
            let out = encode_fetch_response(0, 12, &data).unwrap();
            // records, partition tags, topic tags, top-level tags.
            assert_eq!(out.to_contiguous().unwrap()[out.total_len - 4..], [v12, 0, 0, 0]);
        }
    }

    #[test]
    fn refuses_what_kafka_refuses() {
        let ok = FetchResponseData::default();
        for version in [i16::MIN, 0, 3, 19] {
            assert!(matches!(
                encode_fetch_response(0, version, &ok),
                Err(ProtocolError::Encode { api: "Fetch", .. })
            ));
        }
        let session = FetchResponseData { session_id: 1, ..Default::default() };
        assert!(encode_fetch_response(0, 6, &session).is_err());
        assert!(encode_fetch_response(0, 7, &session).is_ok());

        let mut p = FetchPartitionResponse::new(0);
        p.preferred_read_replica = 1;
        let replica = FetchResponseData {
            topics: vec![FetchTopicResponse { partitions: vec![p], ..Default::default() }],
            ..Default::default()
        };
        assert!(encode_fetch_response(0, 10, &replica).is_err());
        assert!(encode_fetch_response(0, 11, &replica).is_ok());

        let long = FetchResponseData {
            topics: vec![FetchTopicResponse {
                topic: StrBytes::from_string("x".repeat(40_000)),
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(encode_fetch_response(0, 12, &long).is_err());
        assert!(encode_fetch_response(0, 13, &long).is_ok(), "v13+ carries topic ids, not names");
    }

    #[test]
    fn truncated_file_is_an_error_on_the_copying_path() {
        let mut p = FetchPartitionResponse::new(0);
        p.records =
            FetchRecords::File(FileRegion { file: temp_file(b"short"), position: 2, len: 10 });
        let data = FetchResponseData {
            topics: vec![FetchTopicResponse { partitions: vec![p], ..Default::default() }],
            ..Default::default()
        };
        let encoded = encode_fetch_response(0, 16, &data).unwrap();
        assert_eq!(encoded.to_contiguous().unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn estimate_is_an_upper_bound() {
        let mut rng = Rng(42);
        for version in FETCH_VERSIONS {
            for _ in 0..20 {
                let data = random_response(&mut rng, version);
                let encoded = encode_fetch_response(0, version, &data).unwrap();
                let records: usize =
                    data.topics.iter().flat_map(|t| &t.partitions).map(|p| p.records.len()).sum();
                assert!(encoded.total_len - records <= estimate(&data).0, "v{version}");
            }
        }
    }
}
