//! Validation of one Produce partition's records (the byte-level half of
//! Kafka's `LogValidator`): [`validate_batches`] walks the batches once —
//! framing, sizes against `max.message.bytes`, CRC-32C, header sanity, the
//! records' length prefixes, and the rules for a client's batches (no
//! control batches, no transactional batch without a producer id) — and
//! answers a [`ValidatedBatches`], which only it can make. Storage appends a
//! `ValidatedBatches` without walking or checking the batches again
//! (`PartitionLog::append_validated`), and stamps them in one more walk
//! ([`super::stamp_batches`]): that is the whole produce path's two walks.

use super::{
    BatchError, BatchPosition, CompressionType, RecordBatchHeader, ATTRIBUTES_OFFSET, MAGIC_V2,
    MIN_BATCH_LENGTH, RECORD_BATCH_OVERHEAD,
};

/// A Produce payload [`validate_batches`] accepted, and what the append needs
/// of it. The type is the proof of validation: no other code can make one
/// (the batch list is private), so `PartitionLog::append_validated` trusts it
/// and walks nothing again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedBatches {
    /// Number of batches (0 for an empty payload, which Kafka treats as a no-op append).
    pub batch_count: usize,
    /// Sum of `recordsCount` over all batches: the number of offsets the payload takes.
    pub record_count: i64,
    /// Total bytes of all batches.
    pub total_bytes: usize,
    /// Largest `maxTimestamp` of all batches (-1 if none).
    pub max_timestamp: i64,
    /// Offset, relative to the first offset of the payload, of the last record of the
    /// batch holding `max_timestamp` (Kafka's shallow offset of max timestamp).
    pub offset_delta_of_max_timestamp: i64,
    /// Producer id of the first batch.
    pub producer_id: i64,
    /// Producer epoch of the first batch.
    pub producer_epoch: i16,
    /// Base sequence of the first batch.
    pub base_sequence: i32,
    /// Whether any batch is transactional.
    pub has_transactional: bool,
    /// Codec of the first batch (`None` for an empty payload).
    pub compression: Option<CompressionType>,
    /// Every batch: where it starts in the payload and its header, in order.
    batches: Vec<BatchPosition>,
}

impl ValidatedBatches {
    /// The batches, in payload order: each one's position and header as validated.
    pub fn batches(&self) -> &[BatchPosition] {
        &self.batches
    }

    /// Whether the payload holds no batch (an append of nothing).
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

/// Reads a zigzag varint (`sint32`) at `*pos`, advancing `*pos`.
#[inline]
pub(super) fn read_zigzag_varint(buf: &[u8], pos: &mut usize) -> Option<i32> {
    let mut raw: u32 = 0;
    let mut shift = 0u32;
    loop {
        let b = *buf.get(*pos)?;
        *pos += 1;
        raw |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
    Some(unzigzag(raw))
}

/// Decodes a zigzag-encoded `sint32`.
#[inline]
fn unzigzag(raw: u32) -> i32 {
    ((raw >> 1) as i32) ^ -((raw & 1) as i32)
}

/// Walks the length prefixes of an uncompressed batch's records (the bytes after
/// the 61-byte header) and checks they tile them into exactly `recordsCount`
/// records. Resumable: [`RecordWalk::advance`] walks records only while they
/// start before a limit, so validation can step it along with the CRC
/// ([`crc_and_walk`]). Stops at the first problem, which
/// [`RecordWalk::finish`] reports; the steps taken, and so the verdict, are the
/// same however the walk is split.
pub(super) struct RecordWalk {
    /// Start of the next record's length varint.
    pos: usize,
    /// Records walked so far.
    seen: i32,
    /// `recordsCount`.
    count: i32,
    /// The first problem met, if any; the walk stops there.
    error: Option<&'static str>,
}

impl RecordWalk {
    pub(super) fn new(count: i32) -> Self {
        Self { pos: 0, seen: 0, count, error: None }
    }

    /// Walks the records of `records` that start before `limit` (≤ `records.len()`).
    ///
    /// The walk is one serial chain of loads (each length says where the next
    /// one is), so the common one- and two-byte lengths (records under 8 KiB)
    /// are decoded without a loop, with one bounds check each.
    #[inline]
    pub(super) fn advance(&mut self, records: &[u8], limit: usize) {
        if self.error.is_some() {
            return;
        }
        let limit = limit.min(records.len());
        let mut pos = self.pos;
        let mut seen = self.seen;
        while pos < limit {
            // The record's zigzag-encoded length, and the bytes its varint occupies.
            let b0 = records[pos];
            let (raw, width) = if b0 < 0x80 {
                (u32::from(b0), 1)
            } else if let Some(&b1 @ 0..=0x7f) = records.get(pos + 1) {
                (u32::from(b0 & 0x7f) | (u32::from(b1) << 7), 2)
            } else {
                let mut p = pos;
                let Some(len) = read_zigzag_varint(records, &mut p) else {
                    self.error = Some("bad record length varint");
                    break;
                };
                // Back to zigzag (a bijection on 32 bits) so all paths meet below.
                (((len << 1) ^ (len >> 31)) as u32, p - pos)
            };
            // A length under 6 (attributes, timestampDelta, offsetDelta, keyLength,
            // valueLength, headers count), negative ones included: odd, or even under 12.
            if raw & 1 != 0 || raw < 12 {
                self.error = Some("record length too small");
                break;
            }
            let len = raw >> 1;
            pos += width;
            if len as usize > records.len() - pos {
                self.error = Some("record overruns its batch");
                break;
            }
            pos += len as usize;
            seen += 1;
            if seen > self.count {
                self.error = Some("more records than recordsCount");
                break;
            }
        }
        self.pos = pos;
        self.seen = seen;
    }

    /// The verdict once the walk has been advanced to the end of the records.
    pub(super) fn finish(&self, position: usize) -> Result<(), BatchError> {
        if let Some(reason) = self.error {
            return Err(BatchError::MalformedRecords { position, reason });
        }
        if self.seen != self.count {
            return Err(BatchError::MalformedRecords {
                position,
                reason: "fewer records than recordsCount",
            });
        }
        Ok(())
    }
}

/// Bytes checksummed between steps of the record walk in [`crc_and_walk`]: a
/// multiple of the 768-byte blocks the `crc32c` crate runs as three parallel
/// streams (a shorter tail falls back to one serial stream, 3× slower).
const CRC_STEP: usize = 2 * 768;

/// CRC-32C of `batch[21..]`, the range the header's CRC covers, walking the
/// records of an uncompressed batch with `walk` on the way.
///
/// The CRC is bound by the throughput of the `crc32` instruction, the walk by
/// the latency of its chain of loads; they use different execution units. Run
/// one after the other they add up; run in alternating steps of [`CRC_STEP`]
/// bytes the CPU overlaps them. Chunk boundaries are kept 8-byte aligned, as
/// the crate processes unaligned leading bytes one at a time.
fn crc_and_walk(batch: &[u8], walk: Option<&mut RecordWalk>) -> u32 {
    let body = &batch[ATTRIBUTES_OFFSET..];
    let Some(walk) = walk else {
        return crc32c::crc32c(body);
    };
    let records = &batch[RECORD_BATCH_OVERHEAD..];
    // Where records start in `body`.
    const SKIP: usize = RECORD_BATCH_OVERHEAD - ATTRIBUTES_OFFSET;
    let mut crc = 0;
    let mut start = 0;
    let mut end = (body.as_ptr() as usize).wrapping_neg() % 8 + CRC_STEP;
    while end < body.len() {
        crc = crc32c::crc32c_append(crc, &body[start..end]);
        walk.advance(records, end - SKIP);
        start = end;
        end += CRC_STEP;
    }
    crc = crc32c::crc32c_append(crc, &body[start..]);
    walk.advance(records, records.len());
    crc
}

/// Validates the records of one Produce partition: every batch whole, magic 2,
/// sane lengths, at most `max_batch_bytes` each, CRC-32C correct, `recordsCount ==
/// lastOffsetDelta + 1 > 0`, and for uncompressed batches the records' length
/// prefixes tiling the batch exactly. Compressed batches are not decompressed.
///
/// Refuses, as Kafka's `LogValidator` does for a client's append, control
/// batches (transaction markers are the coordinator's alone:
/// [`BatchError::ControlBatch`]) and transactional batches without a producer
/// id ([`BatchError::TransactionalWithoutProducerId`]).
///
/// One pass over the bytes (the CRC dominates); one allocation, the batch list.
///
/// # Errors
/// The first problem found, with the byte position of its batch. A partial
/// trailing batch is [`BatchError::Truncated`]: producers never send one.
pub fn validate_batches(
    buf: &[u8],
    max_batch_bytes: usize,
) -> Result<ValidatedBatches, BatchError> {
    let mut out = ValidatedBatches {
        batch_count: 0,
        record_count: 0,
        total_bytes: 0,
        max_timestamp: -1,
        offset_delta_of_max_timestamp: -1,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        has_transactional: false,
        compression: None,
        batches: Vec::with_capacity(1),
    };
    let mut pos = 0usize;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let header = RecordBatchHeader::parse(rest).map_err(|_| BatchError::Truncated {
            position: pos,
            needed: RECORD_BATCH_OVERHEAD,
            available: rest.len(),
        })?;
        if header.magic != MAGIC_V2 {
            return Err(BatchError::InvalidMagic { position: pos, magic: header.magic });
        }
        if header.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::InvalidLength {
                position: pos,
                batch_length: header.batch_length,
            });
        }
        let size = header.total_size();
        if size > max_batch_bytes {
            return Err(BatchError::MessageTooLarge {
                position: pos,
                size,
                limit: max_batch_bytes,
            });
        }
        if size > rest.len() {
            return Err(BatchError::Truncated {
                position: pos,
                needed: size,
                available: rest.len(),
            });
        }
        let batch = &rest[..size];
        // The CRC is checked first, then the header, then the records walked
        // alongside the CRC: the same order of verdicts as `verify_crc`,
        // `check_sanity`, `check_record_tiling`, in one pass over the bytes.
        let mut walk = (header.compression() == Some(CompressionType::None))
            .then(|| RecordWalk::new(header.records_count));
        let computed = crc_and_walk(batch, walk.as_mut());
        if header.crc != computed {
            return Err(BatchError::CrcMismatch { position: pos, stored: header.crc, computed });
        }
        header.check_sanity(pos)?;
        if let Some(walk) = walk {
            walk.finish(pos)?;
        }
        if header.is_control() {
            return Err(BatchError::ControlBatch { position: pos });
        }
        if header.is_transactional() && header.producer_id < 0 {
            return Err(BatchError::TransactionalWithoutProducerId { position: pos });
        }

        if out.batch_count == 0 {
            out.producer_id = header.producer_id;
            out.producer_epoch = header.producer_epoch;
            out.base_sequence = header.base_sequence;
            out.compression = header.compression();
        }
        let last_delta = out.record_count + i64::from(header.last_offset_delta);
        if header.max_timestamp > out.max_timestamp || out.batch_count == 0 {
            out.max_timestamp = header.max_timestamp;
            out.offset_delta_of_max_timestamp = last_delta;
        }
        out.record_count += i64::from(header.records_count);
        out.has_transactional |= header.is_transactional();
        out.batches.push(BatchPosition { position: pos, header });
        out.batch_count += 1;
        out.total_bytes += size;
        pos += size;
    }
    Ok(out)
}
