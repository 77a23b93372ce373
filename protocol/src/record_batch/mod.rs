//! Record batch v2 (magic 2): the header layout and the walk over a buffer's
//! batches ([`BatchIter`]); validation of a Produce request's records
//! (`validate`), and the one in-place rewrite a leader makes before storing
//! them (`rewrite`: offsets, partition leader epoch, LogAppendTime).
//!
//! Batches are stored byte for byte as producers sent them; nothing here
//! decompresses or allocates per record.
//!
//! # Layout (all big-endian)
//! ```text
//! offset  size  field
//!      0     8  baseOffset            i64
//!      8     4  batchLength           i32   bytes after this field
//!     12     4  partitionLeaderEpoch  i32
//!     16     1  magic                 i8    = 2
//!     17     4  crc                   u32   CRC-32C of bytes 21..end of batch
//!     21     2  attributes            i16   bits 0-2 compression (0 none, 1 gzip,
//!                                           2 snappy, 3 lz4, 4 zstd), bit 3
//!                                           timestampType (1 = LogAppendTime),
//!                                           bit 4 transactional, bit 5 control,
//!                                           bit 6 delete horizon (KIP-534: the
//!                                           baseTimestamp is the time the cleaner
//!                                           may drop its tombstones)
//!     23     4  lastOffsetDelta       i32
//!     27     8  baseTimestamp         i64
//!     35     8  maxTimestamp          i64
//!     43     8  producerId            i64
//!     51     2  producerEpoch         i16
//!     53     4  baseSequence          i32
//!     57     4  recordsCount          i32
//!     61     …  records
//! ```
//! Each uncompressed record starts with its length as a zigzag varint (like
//! protobuf `sint32`), counting the bytes after the length.

use thiserror::Error;

mod rewrite;
mod validate;

pub use rewrite::{stamp_batches, BatchStamp};
pub use validate::{validate_batches, ValidatedBatches};

/// Size of the fixed batch header, up to the first record.
pub const RECORD_BATCH_OVERHEAD: usize = 61;
/// Bytes before and including `batchLength`: a batch occupies `batchLength + LOG_OVERHEAD` bytes.
pub const LOG_OVERHEAD: usize = 12;
/// The only batch format Floe accepts.
pub const MAGIC_V2: i8 = 2;

const BASE_OFFSET_OFFSET: usize = 0;
const BATCH_LENGTH_OFFSET: usize = 8;
const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const LAST_OFFSET_DELTA_OFFSET: usize = 23;
const BASE_TIMESTAMP_OFFSET: usize = 27;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const PRODUCER_ID_OFFSET: usize = 43;
const PRODUCER_EPOCH_OFFSET: usize = 51;
const BASE_SEQUENCE_OFFSET: usize = 53;
const RECORDS_COUNT_OFFSET: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;
/// Attributes bit 6 (KIP-534): `baseTimestamp` is the batch's delete horizon.
pub const DELETE_HORIZON_BIT: i16 = 0x40;

/// Smallest legal `batchLength`: a header with no records.
const MIN_BATCH_LENGTH: i32 = (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD) as i32;

/// The codec a batch's records are compressed with (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionType {
    /// Records stored as they are.
    None,
    /// gzip.
    Gzip,
    /// Snappy (xerial framing as Kafka writes it).
    Snappy,
    /// LZ4 frame.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl CompressionType {
    /// Its code in attribute bits 0-2.
    pub fn id(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The codec for attribute bits 0-2, or `None` for the unassigned codes 5-7.
    pub fn from_id(id: u8) -> Option<Self> {
        Some(match id {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            _ => return None,
        })
    }
}

/// What a batch's timestamps mean (attributes bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when appending; `maxTimestamp` holds it for every record.
    LogAppendTime,
}

/// Why a buffer of record batches was rejected.
///
/// `position` is always the byte offset of the offending batch in the buffer.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// The buffer ends inside a batch (or inside its header).
    #[error("batch at byte {position} needs {needed} bytes, only {available} remain")]
    Truncated {
        /// Byte offset of the batch.
        position: usize,
        /// Bytes the batch (or its header) needs.
        needed: usize,
        /// Bytes left in the buffer.
        available: usize,
    },
    /// Magic is not 2 (legacy message sets are not accepted).
    #[error("batch at byte {position} has magic {magic}, only magic 2 is supported")]
    InvalidMagic {
        /// Byte offset of the batch.
        position: usize,
        /// The magic byte found.
        magic: i8,
    },
    /// `batchLength` is smaller than a header.
    #[error("batch at byte {position} has an invalid batchLength {batch_length}")]
    InvalidLength {
        /// Byte offset of the batch.
        position: usize,
        /// The length found.
        batch_length: i32,
    },
    /// The batch is larger than `max.message.bytes` (Kafka's MESSAGE_TOO_LARGE).
    #[error("batch at byte {position} is {size} bytes, larger than the limit of {limit}")]
    MessageTooLarge {
        /// Byte offset of the batch.
        position: usize,
        /// Size of the whole batch.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The stored CRC does not match the bytes (Kafka's CORRUPT_MESSAGE).
    #[error(
        "batch at byte {position} fails its CRC: stored {stored:#010x}, computed {computed:#010x}"
    )]
    CrcMismatch {
        /// Byte offset of the batch.
        position: usize,
        /// The CRC in the header.
        stored: u32,
        /// The CRC of the bytes.
        computed: u32,
    },
    /// `recordsCount` disagrees with `lastOffsetDelta`, or is not positive.
    #[error("batch at byte {position} has recordsCount {records_count} but lastOffsetDelta {last_offset_delta}")]
    InvalidRecordCount {
        /// Byte offset of the batch.
        position: usize,
        /// The count in the header.
        records_count: i32,
        /// The delta in the header.
        last_offset_delta: i32,
    },
    /// Attribute bits 0-2 name no codec.
    #[error("batch at byte {position} names unknown compression codec {codec}")]
    UnknownCompression {
        /// Byte offset of the batch.
        position: usize,
        /// The codec id.
        codec: u8,
    },
    /// The records of an uncompressed batch do not tile it exactly.
    #[error("batch at byte {position} has malformed records: {reason}")]
    MalformedRecords {
        /// Byte offset of the batch.
        position: usize,
        /// What was wrong.
        reason: &'static str,
    },
    /// A control batch from a client (Kafka's INVALID_RECORD): transaction
    /// markers are written by the transaction coordinator only.
    #[error(
        "batch at byte {position} is a control batch: clients may not write control batches (transaction markers)"
    )]
    ControlBatch {
        /// Byte offset of the batch.
        position: usize,
    },
    /// A transactional batch without a producer id (Kafka's INVALID_RECORD).
    #[error("batch at byte {position} is transactional but has no producer id")]
    TransactionalWithoutProducerId {
        /// Byte offset of the batch.
        position: usize,
    },
}

impl BatchError {
    /// Whether Kafka would answer MESSAGE_TOO_LARGE (rather than CORRUPT_MESSAGE / INVALID_RECORD).
    pub fn is_message_too_large(&self) -> bool {
        matches!(self, Self::MessageTooLarge { .. })
    }

    /// Whether Kafka would answer INVALID_RECORD: well-formed bytes a client may
    /// not write (rather than CORRUPT_MESSAGE for bytes that are not batches).
    pub fn is_invalid_record(&self) -> bool {
        matches!(self, Self::ControlBatch { .. } | Self::TransactionalWithoutProducerId { .. })
    }

    /// Byte offset in the buffer of the batch that failed.
    pub fn position(&self) -> usize {
        match self {
            Self::Truncated { position, .. }
            | Self::InvalidMagic { position, .. }
            | Self::InvalidLength { position, .. }
            | Self::MessageTooLarge { position, .. }
            | Self::CrcMismatch { position, .. }
            | Self::InvalidRecordCount { position, .. }
            | Self::UnknownCompression { position, .. }
            | Self::MalformedRecords { position, .. }
            | Self::ControlBatch { position }
            | Self::TransactionalWithoutProducerId { position } => *position,
        }
    }
}

#[inline]
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

#[inline]
fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

#[inline]
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

/// The fixed 61-byte header of a v2 record batch, decoded.
///
/// Parsing checks only that enough bytes are present; use
/// [`RecordBatchHeader::check_sanity`] and [`verify_crc`] to judge the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordBatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Leader epoch when the batch was appended.
    pub partition_leader_epoch: i32,
    /// Format version.
    pub magic: i8,
    /// CRC-32C of bytes 21..end.
    pub crc: u32,
    /// Raw attributes.
    pub attributes: i16,
    /// Offset of the last record minus `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch (the append time for LogAppendTime).
    pub max_timestamp: i64,
    /// Idempotent/transactional producer id, -1 if none.
    pub producer_id: i64,
    /// Producer epoch, -1 if none.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 if none.
    pub base_sequence: i32,
    /// Number of records.
    pub records_count: i32,
}

impl RecordBatchHeader {
    /// Decodes the header from the first [`RECORD_BATCH_OVERHEAD`] bytes of `buf`.
    ///
    /// # Errors
    /// [`BatchError::Truncated`] (position 0) if `buf` is shorter than a header.
    pub fn parse(buf: &[u8]) -> Result<Self, BatchError> {
        if buf.len() < RECORD_BATCH_OVERHEAD {
            return Err(BatchError::Truncated {
                position: 0,
                needed: RECORD_BATCH_OVERHEAD,
                available: buf.len(),
            });
        }
        Ok(Self {
            base_offset: be_i64(buf, BASE_OFFSET_OFFSET),
            batch_length: be_i32(buf, BATCH_LENGTH_OFFSET),
            partition_leader_epoch: be_i32(buf, PARTITION_LEADER_EPOCH_OFFSET),
            magic: buf[MAGIC_OFFSET] as i8,
            crc: be_i32(buf, CRC_OFFSET) as u32,
            attributes: be_i16(buf, ATTRIBUTES_OFFSET),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: be_i64(buf, BASE_TIMESTAMP_OFFSET),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_OFFSET),
            producer_id: be_i64(buf, PRODUCER_ID_OFFSET),
            producer_epoch: be_i16(buf, PRODUCER_EPOCH_OFFSET),
            base_sequence: be_i32(buf, BASE_SEQUENCE_OFFSET),
            records_count: be_i32(buf, RECORDS_COUNT_OFFSET),
        })
    }

    /// The codec, or `None` for the unassigned codes 5-7.
    pub fn compression(&self) -> Option<CompressionType> {
        CompressionType::from_id((self.attributes & COMPRESSION_MASK) as u8)
    }

    /// What the timestamps mean.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Whether the batch belongs to a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    /// Whether the batch holds a control record (transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Offset of the last record: `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.wrapping_add(i64::from(self.last_offset_delta))
    }

    /// Offset after the last record.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    /// Bytes the whole batch occupies: `batch_length + 12` (0 if `batch_length` is negative).
    pub fn total_size(&self) -> usize {
        usize::try_from(self.batch_length).map_or(0, |l| l + LOG_OVERHEAD)
    }

    /// Checks what can be judged from the header alone: magic 2, a `batchLength`
    /// of at least a header, a known codec, `recordsCount == lastOffsetDelta + 1 > 0`.
    /// `position` is reported in errors.
    ///
    /// # Errors
    /// The first violated rule.
    pub fn check_sanity(&self, position: usize) -> Result<(), BatchError> {
        if self.magic != MAGIC_V2 {
            return Err(BatchError::InvalidMagic { position, magic: self.magic });
        }
        if self.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::InvalidLength { position, batch_length: self.batch_length });
        }
        if self.compression().is_none() {
            return Err(BatchError::UnknownCompression {
                position,
                codec: (self.attributes & COMPRESSION_MASK) as u8,
            });
        }
        if self.records_count <= 0
            || self.last_offset_delta < 0
            || i64::from(self.records_count) != i64::from(self.last_offset_delta) + 1
        {
            return Err(BatchError::InvalidRecordCount {
                position,
                records_count: self.records_count,
                last_offset_delta: self.last_offset_delta,
            });
        }
        Ok(())
    }

    /// [`RecordBatchHeader::check_sanity`] for a batch already in a log: log
    /// compaction removes records but keeps a batch's offset range (Kafka's
    /// `MemoryRecords.filterTo` preserves `lastOffsetDelta`, and may keep a
    /// batch with no records at all), so `0 <= recordsCount <= lastOffsetDelta + 1`.
    ///
    /// # Errors
    /// The first violated rule.
    pub fn check_sanity_in_log(&self, position: usize) -> Result<(), BatchError> {
        if self.magic != MAGIC_V2 {
            return Err(BatchError::InvalidMagic { position, magic: self.magic });
        }
        if self.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::InvalidLength { position, batch_length: self.batch_length });
        }
        if self.compression().is_none() {
            return Err(BatchError::UnknownCompression {
                position,
                codec: (self.attributes & COMPRESSION_MASK) as u8,
            });
        }
        if self.records_count < 0
            || self.last_offset_delta < 0
            || i64::from(self.records_count) > i64::from(self.last_offset_delta) + 1
        {
            return Err(BatchError::InvalidRecordCount {
                position,
                records_count: self.records_count,
                last_offset_delta: self.last_offset_delta,
            });
        }
        Ok(())
    }

    /// Whether the batch carries a KIP-534 delete horizon (attributes bit 6):
    /// then `base_timestamp` is the time after which the cleaner may remove its
    /// tombstones (or, for a control batch, the marker).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_BIT != 0
    }
}

/// Checks the CRC-32C of one whole batch (`batch.len()` must be its total size).
///
/// # Errors
/// [`BatchError::Truncated`] if `batch` is shorter than a header,
/// [`BatchError::CrcMismatch`] if the checksum is wrong; `position` is reported in both.
pub fn verify_crc(batch: &[u8], position: usize) -> Result<(), BatchError> {
    if batch.len() < RECORD_BATCH_OVERHEAD {
        return Err(BatchError::Truncated {
            position,
            needed: RECORD_BATCH_OVERHEAD,
            available: batch.len(),
        });
    }
    let stored = be_i32(batch, CRC_OFFSET) as u32;
    let computed = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
    if stored != computed {
        return Err(BatchError::CrcMismatch { position, stored, computed });
    }
    Ok(())
}

/// A batch found by [`BatchIter`]: where it starts and its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchPosition {
    /// Byte offset of the batch in the buffer.
    pub position: usize,
    /// Its header.
    pub header: RecordBatchHeader,
}

impl BatchPosition {
    /// Byte offset after the batch.
    pub fn end(&self) -> usize {
        self.position + self.header.total_size()
    }
}

/// Iterates over the batches of a buffer, yielding their positions and headers.
///
/// Each yielded batch passed [`RecordBatchHeader::check_sanity`] and lies wholly
/// in the buffer; CRCs are not checked (call [`verify_crc`] on
/// `&buf[p.position..p.end()]`). After the first error the iterator ends; a
/// buffer ending mid-batch yields [`BatchError::Truncated`], which storage
/// recovery reads as a torn write.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// Starts at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0, failed: false }
    }

    /// Byte offset of the next batch (the end of the last good one).
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl Iterator for BatchIter<'_> {
    type Item = Result<BatchPosition, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let result = RecordBatchHeader::parse(rest)
            .map_err(|_| BatchError::Truncated {
                position: self.pos,
                needed: RECORD_BATCH_OVERHEAD,
                available: rest.len(),
            })
            .and_then(|header| {
                header.check_sanity(self.pos)?;
                let size = header.total_size();
                if size > rest.len() {
                    return Err(BatchError::Truncated {
                        position: self.pos,
                        needed: size,
                        available: rest.len(),
                    });
                }
                Ok(BatchPosition { position: self.pos, header })
            });
        match &result {
            Ok(b) => self.pos = b.end(),
            Err(_) => self.failed = true,
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::validate::{read_zigzag_varint, RecordWalk};
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType as KTimestampType,
    };

    fn records(n: i64, ts0: i64) -> Vec<Record> {
        (0..n)
            .map(|i| Record {
                transactional: false,
                control: false,
                partition_leader_epoch: 0,
                producer_id: 7,
                producer_epoch: 1,
                timestamp_type: KTimestampType::Creation,
                offset: i,
                sequence: i as i32,
                timestamp: ts0 + i * 10,
                key: Some(Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(vec![b'v'; (i as usize * 7) % 300])),
                headers: IndexMap::new(),
                delete_horizon: false,
            })
            .collect()
    }

    fn encode(recs: &[Record], compression: Compression) -> Vec<u8> {
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            recs.iter(),
            &RecordEncodeOptions { version: 2, compression },
        )
        .expect("encode");
        buf.to_vec()
    }

    fn batch(n: i64, compression: Compression) -> Vec<u8> {
        encode(&records(n, 1_000), compression)
    }

    #[test]
    fn header_parses_and_accessors() {
        let b = batch(5, Compression::None);
        let h = RecordBatchHeader::parse(&b).unwrap();
        assert_eq!(h.magic, 2);
        assert_eq!(h.records_count, 5);
        assert_eq!(h.last_offset_delta, 4);
        assert_eq!(h.total_size(), b.len());
        assert_eq!(h.compression(), Some(CompressionType::None));
        assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        assert!(!h.is_transactional() && !h.is_control());
        assert_eq!(h.last_offset(), 4);
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_040);
        assert_eq!(h.producer_id, 7);
        assert!(RecordBatchHeader::parse(&b[..60]).is_err());
    }

    #[test]
    fn validates_every_codec() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut buf = batch(20, c);
            buf.extend(encode(&records(3, 5_000), c));
            let v = validate_batches(&buf, 1 << 20).unwrap_or_else(|e| panic!("{c:?}: {e}"));
            assert_eq!(v.batch_count, 2, "{c:?}");
            assert_eq!(v.record_count, 23);
            assert_eq!(v.total_bytes, buf.len());
            assert_eq!(v.max_timestamp, 5_020);
            assert_eq!(v.offset_delta_of_max_timestamp, 22);
            assert_eq!(v.producer_id, 7);
            assert_eq!(v.producer_epoch, 1);
            assert_eq!(v.base_sequence, 0);
            let expected = CompressionType::from_id(c as u8);
            assert_eq!(v.compression, expected);
        }
    }

    #[test]
    fn validated_batches_are_the_ones_batch_iter_finds() {
        let mut buf = batch(3, Compression::None);
        buf.extend(batch(4, Compression::Lz4));
        buf.extend(batch(1, Compression::Zstd));
        let v = validate_batches(&buf, 1 << 20).unwrap();
        let walked: Vec<BatchPosition> = BatchIter::new(&buf).map(Result::unwrap).collect();
        assert_eq!(v.batches(), &walked[..]);
        assert!(!v.is_empty());
    }

    #[test]
    fn a_clients_control_or_anonymous_transactional_batch_is_refused() {
        // attributes: transactional | control, then the CRC again.
        let mut marker = batch(1, Compression::None);
        marker[21..23].copy_from_slice(&0x30i16.to_be_bytes());
        rewrite_crc(&mut marker);
        let mut buf = batch(2, Compression::None);
        let second = buf.len();
        buf.extend_from_slice(&marker);
        let err = validate_batches(&buf, 1 << 20).unwrap_err();
        assert_eq!(err, BatchError::ControlBatch { position: second });
        assert!(err.is_invalid_record(), "{err}");

        let mut anonymous = batch(1, Compression::None);
        anonymous[21..23].copy_from_slice(&0x10i16.to_be_bytes());
        anonymous[43..51].copy_from_slice(&(-1i64).to_be_bytes());
        rewrite_crc(&mut anonymous);
        let err = validate_batches(&anonymous, 1 << 20).unwrap_err();
        assert_eq!(err, BatchError::TransactionalWithoutProducerId { position: 0 });
        assert!(err.is_invalid_record(), "{err}");
    }

    #[test]
    fn empty_payload_is_zero_batches() {
        let v = validate_batches(&[], 100).unwrap();
        assert_eq!(v.batch_count, 0);
        assert_eq!(v.record_count, 0);
    }

    #[test]
    fn flipped_byte_fails_crc() {
        let b = batch(10, Compression::None);
        for at in [21, 30, 61, b.len() - 1] {
            let mut bad = b.clone();
            bad[at] ^= 0x40;
            let err = validate_batches(&bad, 1 << 20).unwrap_err();
            assert!(matches!(err, BatchError::CrcMismatch { position: 0, .. }), "byte {at}: {err}");
        }
        // base offset and leader epoch are outside the CRC.
        let mut ok = b.clone();
        ok[3] ^= 1;
        ok[13] ^= 1;
        validate_batches(&ok, 1 << 20).unwrap();
    }

    #[test]
    fn truncated_batches_rejected() {
        let mut buf = batch(4, Compression::None);
        let first = buf.len();
        buf.extend(batch(4, Compression::Gzip));
        for cut in [first + 10, first + 61, buf.len() - 1] {
            let err = validate_batches(&buf[..cut], 1 << 20).unwrap_err();
            assert!(
                matches!(err, BatchError::Truncated { position, .. } if position == first),
                "{err}"
            );
        }
    }

    #[test]
    fn wrong_magic_rejected() {
        let mut b = batch(2, Compression::None);
        b[16] = 1;
        assert!(matches!(
            validate_batches(&b, 1 << 20),
            Err(BatchError::InvalidMagic { magic: 1, .. })
        ));
    }

    #[test]
    fn too_large_is_distinguished() {
        let b = batch(50, Compression::None);
        let err = validate_batches(&b, b.len() - 1).unwrap_err();
        assert!(err.is_message_too_large(), "{err}");
        validate_batches(&b, b.len()).unwrap();
    }

    fn rewrite_crc(b: &mut [u8]) {
        let crc = crc32c::crc32c(&b[21..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    #[test]
    fn count_mismatch_rejected() {
        // recordsCount disagrees with lastOffsetDelta.
        let mut b = batch(5, Compression::None);
        b[57..61].copy_from_slice(&4i32.to_be_bytes());
        rewrite_crc(&mut b);
        assert!(matches!(
            validate_batches(&b, 1 << 20),
            Err(BatchError::InvalidRecordCount { .. })
        ));
        // Both agree but the records say otherwise (uncompressed walk).
        let mut b = batch(5, Compression::None);
        b[57..61].copy_from_slice(&4i32.to_be_bytes());
        b[23..27].copy_from_slice(&3i32.to_be_bytes());
        rewrite_crc(&mut b);
        assert!(matches!(validate_batches(&b, 1 << 20), Err(BatchError::MalformedRecords { .. })));
        // A compressed batch is not walked.
        let mut b = batch(5, Compression::Gzip);
        b[57..61].copy_from_slice(&4i32.to_be_bytes());
        b[23..27].copy_from_slice(&3i32.to_be_bytes());
        rewrite_crc(&mut b);
        validate_batches(&b, 1 << 20).unwrap();
        // Zero records.
        let mut b = batch(1, Compression::None);
        b[57..61].copy_from_slice(&0i32.to_be_bytes());
        b[23..27].copy_from_slice(&(-1i32).to_be_bytes());
        rewrite_crc(&mut b);
        assert!(matches!(
            validate_batches(&b, 1 << 20),
            Err(BatchError::InvalidRecordCount { .. })
        ));
    }

    #[test]
    fn record_lengths_must_tile() {
        // Corrupt the first record's length varint (after the header) and fix the CRC.
        let mut b = batch(3, Compression::None);
        b[61] = b[61].wrapping_add(2);
        rewrite_crc(&mut b);
        assert!(matches!(validate_batches(&b, 1 << 20), Err(BatchError::MalformedRecords { .. })));
    }

    #[test]
    fn stamp_offsets_then_decode() {
        let mut buf = batch(3, Compression::None);
        buf.extend(batch(4, Compression::Lz4));
        buf.extend(batch(1, Compression::Zstd));
        let stamp =
            BatchStamp { first_offset: 100, partition_leader_epoch: 3, log_append_time: None };
        let crcs: Vec<u32> = BatchIter::new(&buf).map(|b| b.unwrap().header.crc).collect();
        let next = stamp_batches(&mut buf, stamp);
        assert_eq!(next, 108);
        let v = validate_batches(&buf, 1 << 20).unwrap();
        assert!(v.batches().iter().all(|b| b.header.partition_leader_epoch == 3));
        let kept: Vec<u32> = v.batches().iter().map(|b| b.header.crc).collect();
        assert_eq!(kept, crcs, "CreateTime stamps leave the CRC-covered bytes alone");
        let sets = RecordBatchDecoder::decode_all(&mut Bytes::from(buf.clone())).unwrap();
        let offsets: Vec<i64> =
            sets.iter().flat_map(|s| s.records.iter().map(|r| r.offset)).collect();
        assert_eq!(offsets, (100..108).collect::<Vec<_>>());
        let bases: Vec<i64> = BatchIter::new(&buf).map(|b| b.unwrap().header.base_offset).collect();
        assert_eq!(bases, vec![100, 103, 107]);
    }

    #[test]
    fn log_append_time_keeps_crc_valid() {
        let mut buf = batch(3, Compression::None);
        buf.extend(batch(2, Compression::Snappy));
        let stamp = BatchStamp {
            first_offset: 0,
            partition_leader_epoch: 12,
            log_append_time: Some(99_999),
        };
        assert_eq!(stamp_batches(&mut buf, stamp), 5);
        validate_batches(&buf, 1 << 20).unwrap();
        for b in BatchIter::new(&buf) {
            let h = b.unwrap().header;
            assert_eq!(h.timestamp_type(), TimestampType::LogAppendTime);
            assert_eq!(h.max_timestamp, 99_999);
            assert_eq!(h.partition_leader_epoch, 12);
        }
        let sets = RecordBatchDecoder::decode_all(&mut Bytes::from(buf)).unwrap();
        assert!(sets
            .iter()
            .all(|s| s.records.iter().all(|r| r.timestamp_type == KTimestampType::LogAppend)));
    }

    #[test]
    fn batch_iter_reports_torn_tail() {
        let mut buf = batch(3, Compression::None);
        let first = buf.len();
        buf.extend(batch(3, Compression::None));
        let mut it = BatchIter::new(&buf[..buf.len() - 5]);
        assert_eq!(it.next().unwrap().unwrap().position, 0);
        assert!(
            matches!(it.next(), Some(Err(BatchError::Truncated { position, .. })) if position == first)
        );
        assert!(it.next().is_none());
        assert_eq!(it.position(), first);
    }

    /// The record walk as it was before it was split into steps, kept as the reference.
    fn reference_tiling(records: &[u8], count: i32, position: usize) -> Result<(), BatchError> {
        let mut pos = 0usize;
        let mut seen: i32 = 0;
        while pos < records.len() {
            let Some(len) = read_zigzag_varint(records, &mut pos) else {
                return Err(BatchError::MalformedRecords {
                    position,
                    reason: "bad record length varint",
                });
            };
            // attributes, timestampDelta, offsetDelta, keyLength, valueLength, headers count
            if len < 6 {
                return Err(BatchError::MalformedRecords {
                    position,
                    reason: "record length too small",
                });
            }
            pos += len as usize;
            if pos > records.len() {
                return Err(BatchError::MalformedRecords {
                    position,
                    reason: "record overruns its batch",
                });
            }
            seen += 1;
            if seen > count {
                return Err(BatchError::MalformedRecords {
                    position,
                    reason: "more records than recordsCount",
                });
            }
        }
        if seen != count {
            return Err(BatchError::MalformedRecords {
                position,
                reason: "fewer records than recordsCount",
            });
        }
        Ok(())
    }

    #[test]
    fn record_walk_verdict_does_not_depend_on_steps() {
        // Three-byte lengths (records over 8 KiB) take the slow path.
        let mut big = records(3, 1_000);
        big[1].value = Some(Bytes::from(vec![b'x'; 20_000]));
        let big = encode(&big, Compression::None);
        validate_batches(&big, 1 << 20).unwrap();
        for b in [batch(7, Compression::None), big] {
            let count = be_i32(&b, RECORDS_COUNT_OFFSET);
            let recs = &b[RECORD_BATCH_OVERHEAD..];
            for at in 0..recs.len().min(400) {
                for delta in [1u8, 0x40, 0x80] {
                    let mut bad = recs.to_vec();
                    bad[at] ^= delta;
                    let mut whole = RecordWalk::new(count);
                    whole.advance(&bad, bad.len());
                    let mut stepped = RecordWalk::new(count);
                    for limit in 0..=bad.len() {
                        stepped.advance(&bad, limit);
                    }
                    assert_eq!(whole.finish(0), stepped.finish(0), "byte {at} ^ {delta:#x}");
                    assert_eq!(
                        whole.finish(0),
                        reference_tiling(&bad, count, 0),
                        "byte {at} ^ {delta:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn zigzag_varints() {
        let mut p = 0;
        assert_eq!(read_zigzag_varint(&[0x01], &mut p), Some(-1));
        p = 0;
        assert_eq!(read_zigzag_varint(&[0xac, 0x02], &mut p), Some(150));
        p = 0;
        assert_eq!(read_zigzag_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], &mut p), None);
        p = 0;
        assert_eq!(read_zigzag_varint(&[0x80], &mut p), None);
    }
}
