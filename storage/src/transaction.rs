//! The log side of Kafka's transactions (KIP-98): isolation levels, aborted
//! transactions as fetches report them, and the control batches ("markers")
//! that end a producer's transaction in a partition.
//!
//! A transactional producer's batches carry attributes bit 4; the
//! coordinator ends the transaction in every partition it touched by
//! appending one control batch (bit 5 as well) through
//! [`crate::PartitionLog::append_txn_marker`]. Records are never filtered:
//! READ_COMMITTED consumers get the bytes below the last stable offset plus
//! the list of aborted transactions, and drop aborted batches themselves.
//!
//! # Control batch layout (what Kafka's `MemoryRecords.withEndTransactionMarker` writes)
//! A record batch v2 (see [`floe_protocol::record_batch`]) of 78 bytes:
//! ```text
//! offset  size  field
//!      0     8  baseOffset            i64  assigned at append
//!      8     4  batchLength           i32  = 66
//!     12     4  partitionLeaderEpoch  i32  the log's leader epoch, stamped at append
//!     16     1  magic                 i8   = 2
//!     17     4  crc                   u32  CRC-32C of bytes 21..78
//!     21     2  attributes            i16  = 0x30 (transactional | control), uncompressed, CreateTime
//!     23     4  lastOffsetDelta       i32  = 0
//!     27     8  baseTimestamp         i64  the broker's clock
//!     35     8  maxTimestamp          i64  the same
//!     43     8  producerId            i64
//!     51     2  producerEpoch         i16
//!     53     4  baseSequence          i32  = -1
//!     57     4  recordsCount          i32  = 1
//!   the one control record:
//!     61     1  length                varint  = 16 (zigzag 0x20)
//!     62     1  attributes            i8      = 0
//!     63     1  timestampDelta        varint  = 0
//!     64     1  offsetDelta           varint  = 0
//!     65     1  keyLength             varint  = 4
//!     66     2  key: version          i16     = 0
//!     68     2  key: type             i16     0 = ABORT, 1 = COMMIT
//!     70     1  valueLength           varint  = 6
//!     71     2  value: version        i16     = 0
//!     73     4  value: coordinatorEpoch i32
//!     77     1  headers count         varint  = 0
//! ```

use floe_protocol::record_batch::RECORD_BATCH_OVERHEAD;

/// Which records a fetch may see (Fetch's and ListOffsets' `isolation_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Everything below the high watermark (0 on the wire).
    #[default]
    ReadUncommitted,
    /// Everything below the last stable offset, with the aborted transactions listed (1 on the wire).
    ReadCommitted,
}

impl IsolationLevel {
    /// From the wire value: 1 is READ_COMMITTED, anything else READ_UNCOMMITTED (as Kafka).
    pub fn from_wire(value: i8) -> Self {
        if value == 1 {
            Self::ReadCommitted
        } else {
            Self::ReadUncommitted
        }
    }
}

/// An aborted transaction of one producer in one partition (Kafka's `AbortedTxn`),
/// as the `.txnindex` stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer.
    pub producer_id: i64,
    /// Offset of the transaction's first batch in this partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The partition's last stable offset once this transaction completed
    /// (lets a search over later segments stop early).
    pub last_stable_offset: i64,
}

/// The type of a control record (Kafka's `ControlRecordType`): key type 0 is ABORT, 1 is COMMIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRecordType {
    /// The transaction is aborted: consumers at READ_COMMITTED drop its records.
    Abort,
    /// The transaction is committed.
    Commit,
}

impl ControlRecordType {
    /// The key's type field.
    pub fn id(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
        }
    }

    /// `None` for types that are not transaction markers (KRaft's leader change, snapshots, …).
    pub fn from_id(id: i16) -> Option<Self> {
        match id {
            0 => Some(Self::Abort),
            1 => Some(Self::Commit),
            _ => None,
        }
    }
}

/// Who writes a batch (Kafka's `AppendOrigin`): a client's batches get every
/// producer check; a coordinator's own transactional batches (TxnOffsetCommit
/// in `__consumer_offsets`) carry no sequence and are checked by epoch only;
/// a follower's copies of its leader's batches are not checked at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOrigin {
    /// A producer, through Produce.
    Client,
    /// A coordinator writing its own internal topic.
    Coordinator,
    /// A follower copying its leader's log: the leader checked the batches,
    /// so producer state is recorded, never refused. Only
    /// [`crate::PartitionLog::append_as_follower`] appends with it.
    Replication,
}

/// What the partition knows of one producer (DescribeProducers' `ProducerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSummary {
    /// The producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub producer_epoch: i16,
    /// Last sequence number appended, -1 if none (only markers).
    pub last_sequence: i32,
    /// Timestamp of its last batch or marker as stored, -1 if unknown.
    pub last_timestamp: i64,
    /// Coordinator epoch of its last marker, -1 if none.
    pub coordinator_epoch: i32,
    /// First offset of its ongoing transaction in this partition, -1 if none.
    pub current_txn_start_offset: i64,
}

const CONTROL_ATTRIBUTES: i16 = 0x30;
/// Bytes of the control batch [`control_batch`] builds.
pub(crate) const CONTROL_BATCH_SIZE: usize = RECORD_BATCH_OVERHEAD + 17;

/// The bytes of one control batch (layout in the module docs), base offset 0, CRC computed.
pub(crate) fn control_batch(
    producer_id: i64,
    producer_epoch: i16,
    marker: ControlRecordType,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(CONTROL_BATCH_SIZE);
    b.extend(0i64.to_be_bytes());
    b.extend(((CONTROL_BATCH_SIZE - 12) as i32).to_be_bytes());
    b.extend(0i32.to_be_bytes());
    b.push(2);
    b.extend([0u8; 4]);
    b.extend(CONTROL_ATTRIBUTES.to_be_bytes());
    b.extend(0i32.to_be_bytes());
    b.extend(timestamp.to_be_bytes());
    b.extend(timestamp.to_be_bytes());
    b.extend(producer_id.to_be_bytes());
    b.extend(producer_epoch.to_be_bytes());
    b.extend((-1i32).to_be_bytes());
    b.extend(1i32.to_be_bytes());
    // The record: zigzag varints, all of them one byte here.
    b.extend([32, 0, 0, 0, 8]);
    b.extend(0i16.to_be_bytes());
    b.extend(marker.id().to_be_bytes());
    b.push(12);
    b.extend(0i16.to_be_bytes());
    b.extend(coordinator_epoch.to_be_bytes());
    b.push(0);
    debug_assert_eq!(b.len(), CONTROL_BATCH_SIZE);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

/// Reads a zigzag varint at `*pos`.
fn varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let mut raw: u32 = 0;
    for shift in (0..35).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        raw |= u32::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(((raw >> 1) as i32) ^ -((raw & 1) as i32));
        }
    }
    None
}

/// The marker type and coordinator epoch of a control batch (whole batch bytes,
/// header included); `None` if its first record is not a transaction marker
/// (another control type, a compressed batch, or bytes that do not parse).
pub(crate) fn parse_control_batch(batch: &[u8]) -> Option<(ControlRecordType, i32)> {
    let attributes = i16::from_be_bytes(batch.get(21..23)?.try_into().ok()?);
    if attributes & 0x07 != 0 {
        return None;
    }
    let mut pos = RECORD_BATCH_OVERHEAD;
    let _length = varint(batch, &mut pos)?;
    pos += 1; // attributes
    varint(batch, &mut pos)?; // timestamp delta
    varint(batch, &mut pos)?; // offset delta
    let key_len = usize::try_from(varint(batch, &mut pos)?).ok()?;
    let key = batch.get(pos..pos + key_len)?;
    pos += key_len;
    let key_type = i16::from_be_bytes(key.get(2..4)?.try_into().ok()?);
    let marker = ControlRecordType::from_id(key_type)?;
    let value_len = usize::try_from(varint(batch, &mut pos)?).ok()?;
    let value = batch.get(pos..pos + value_len)?;
    let coordinator_epoch =
        value.get(2..6).and_then(|v| v.try_into().ok()).map_or(-1, i32::from_be_bytes);
    Some((marker, coordinator_epoch))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use floe_protocol::kafka_protocol::records::RecordBatchDecoder;
    use floe_protocol::record_batch::{verify_crc, RecordBatchHeader};

    #[test]
    fn control_batch_is_what_kafka_writes_and_parses_back() {
        let bytes = control_batch(42, 3, ControlRecordType::Abort, 7, 1_000);
        assert_eq!(bytes.len(), CONTROL_BATCH_SIZE);
        verify_crc(&bytes, 0).unwrap();
        let h = RecordBatchHeader::parse(&bytes).unwrap();
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(
            (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count),
            (42, 3, -1, 1)
        );
        assert_eq!(parse_control_batch(&bytes), Some((ControlRecordType::Abort, 7)));
        // An independent decoder agrees: one control record, key (0, 0), value (0, 7).
        let set = RecordBatchDecoder::decode(&mut Bytes::from(bytes)).unwrap();
        let r = &set.records[0];
        assert!(r.control && r.transactional);
        assert_eq!(r.key.as_deref(), Some(&[0u8, 0, 0, 0][..]));
        assert_eq!(r.value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 7][..]));
        let commit = control_batch(1, 0, ControlRecordType::Commit, -1, 0);
        assert_eq!(parse_control_batch(&commit), Some((ControlRecordType::Commit, -1)));
        assert_eq!(parse_control_batch(&commit[..70]), None);
    }
}
