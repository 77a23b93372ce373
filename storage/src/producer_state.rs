//! `ProducerStateManager`: what each idempotent producer last wrote to one
//! partition — its epoch and its last five batches — so that a retried batch
//! is recognised as a duplicate and a gap as out of order; each producer's
//! ongoing transaction in the partition (the offset of its first batch, which
//! holds the last stable offset back); and the `<offset>.snapshot` files that
//! save this state at segment rolls.
//!
//! The rules are Kafka's (`ProducerStateManager`, `ProducerAppendInfo`):
//! - a batch whose epoch and sequence range equal one of the producer's last
//!   five batches is a duplicate: it is not appended, and the append answers
//!   with the original offsets;
//! - an epoch below the known one is INVALID_PRODUCER_EPOCH;
//! - a newer epoch must start at sequence 0 (it forgets the older batches);
//! - within an epoch, the first sequence must be the last one + 1 (after
//!   `i32::MAX` comes 0), else OUT_OF_ORDER_SEQUENCE_NUMBER;
//! - a producer id the partition does not know is accepted at any sequence
//!   (its earlier batches may have been deleted by retention);
//! - a transactional batch starts the producer's transaction here if none is
//!   ongoing; a non-transactional batch while one is ongoing is INVALID_TXN_STATE;
//! - a marker (control batch) from an older epoch is INVALID_PRODUCER_EPOCH, from
//!   an older coordinator epoch TRANSACTION_COORDINATOR_FENCED; it completes the
//!   ongoing transaction (a marker without one is written all the same);
//! - a producer with no ongoing transaction whose last timestamp is
//!   `producer.id.expiration.ms` old is forgotten (Kafka's `lastTimestamp`: the max
//!   timestamp of its last batch as stored, or of its last marker — the broker's clock
//!   for LogAppendTime topics and markers, the producer's for CreateTime batches).
//!
//! Not synchronised: [`crate::PartitionLog`] keeps it under its lock, checks a
//! whole append before offsets are assigned and records the batches after the
//! write succeeded.
//!
//! # Snapshot file layout (`<20-digit offset>.snapshot`, big-endian)
//! ```text
//! offset  size  field
//!      0     2  version          i16 = 2 (version 1 is still read)
//!      2     4  crc              u32  CRC-32C of bytes 6..end
//!      6     8  offset           i64  the state covers exactly the batches below it (= the file name)
//!     14     4  producer count   i32
//!   then per producer, by producer id:
//!            8  producer id      i64
//!            2  producer epoch   i16
//!            4  coordinator epoch i32 of its last marker, -1 if none    (version 2 only)
//!            8  txn first offset i64  of its ongoing transaction, -1 if none (version 2 only)
//!            8  last timestamp   i64  of its last batch or marker, -1 if none (version 2 only)
//!            1  batch count      u8   1..=5 (version 2: 0..=5; 0 after markers only)
//!   then per batch, oldest first:
//!            4  first sequence   i32
//!            4  last sequence    i32
//!            8  first offset     i64
//!            8  last offset      i64
//!            8  timestamp        i64  the batch's max timestamp as stored
//! ```
//! A snapshot is written with a temporary file and a rename, without fsync:
//! it is a shortcut, not a source of truth. A torn or missing one fails its
//! checks at load and recovery falls back to an older snapshot or to the
//! batch headers of the log itself.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::Path;

use std::collections::BTreeMap;

use floe_protocol::record_batch::RecordBatchHeader;

use crate::error::{IoContext, Result, StorageError};
use crate::failpoint;
use crate::file_names::{snapshot_file, tmp_file};
use crate::transaction::{AppendOrigin, ControlRecordType, ProducerSummary};

/// Batches remembered per producer for duplicate detection (Kafka's `NUM_BATCHES_TO_RETAIN`;
/// also librdkafka's and the Java client's cap on in-flight requests for idempotence).
pub(crate) const BATCHES_TO_RETAIN: usize = 5;

const SNAPSHOT_VERSION: i16 = 2;
const SNAPSHOT_HEADER: usize = 18;
const PRODUCER_HEADER: usize = 31;
const BATCH_SIZE: usize = 32;

/// One stored batch of a producer (Kafka's `BatchMetadata`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    /// First sequence number of the batch.
    pub first_seq: i32,
    /// Last sequence number of the batch.
    pub last_seq: i32,
    /// Offset of its first record.
    pub first_offset: i64,
    /// Offset of its last record.
    pub last_offset: i64,
    /// Its max timestamp as stored (the append time for LogAppendTime topics).
    pub timestamp: i64,
}

/// One producer's state in a partition (Kafka's `ProducerStateEntry`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerStateEntry {
    epoch: i16,
    /// At most [`BATCHES_TO_RETAIN`], oldest first, all of `epoch`.
    batches: VecDeque<BatchMetadata>,
    /// Coordinator epoch of the last marker, -1 if none.
    coordinator_epoch: i32,
    /// First offset of the ongoing transaction in this partition (Kafka's `currentTxnFirstOffset`).
    current_txn_first_offset: Option<i64>,
    /// Max timestamp of the last batch or marker, as stored; -1 if none.
    last_timestamp: i64,
}

impl ProducerStateEntry {
    fn new(epoch: i16) -> Self {
        Self {
            epoch,
            batches: VecDeque::with_capacity(BATCHES_TO_RETAIN),
            coordinator_epoch: -1,
            current_txn_first_offset: None,
            last_timestamp: -1,
        }
    }

    fn last_seq(&self) -> Option<i32> {
        self.batches.back().map(|b| b.last_seq)
    }

    fn find_duplicate(&self, b: &ProducerBatch) -> Option<BatchMetadata> {
        if b.epoch != self.epoch || b.first_seq == NO_SEQUENCE {
            return None;
        }
        self.batches
            .iter()
            .find(|m| m.first_seq == b.first_seq && m.last_seq == b.last_seq)
            .copied()
    }

    fn push(&mut self, epoch: i16, batch: BatchMetadata) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
        self.batches.push_back(batch);
        while self.batches.len() > BATCHES_TO_RETAIN {
            self.batches.pop_front();
        }
    }
}

/// The producer fields of one batch header with a producer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerBatch {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
    pub(crate) first_seq: i32,
    pub(crate) last_seq: i32,
    /// Attributes bit 4: part of the producer's transaction.
    pub(crate) transactional: bool,
}

impl ProducerBatch {
    /// `None` for a batch without a producer id (a non-idempotent producer)
    /// and for control batches (markers go through [`ProducerStateManager::check_marker`]).
    pub(crate) fn of(h: &RecordBatchHeader) -> Option<Self> {
        (h.producer_id >= 0 && !h.is_control()).then(|| Self {
            producer_id: h.producer_id,
            epoch: h.producer_epoch,
            first_seq: h.base_sequence,
            last_seq: increment_sequence(h.base_sequence, h.last_offset_delta),
            transactional: h.is_transactional(),
        })
    }
}

/// A transaction a marker completed (Kafka's `CompletedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompletedTxn {
    pub(crate) producer_id: i64,
    /// The transaction's first offset (the marker's own offset if none was ongoing).
    pub(crate) first_offset: i64,
    /// The marker's offset.
    pub(crate) last_offset: i64,
    pub(crate) aborted: bool,
}

/// The base sequence of a batch that has none (Kafka's `RecordBatch.NO_SEQUENCE`).
pub(crate) const NO_SEQUENCE: i32 = -1;

/// `sequence + n`, wrapping from `i32::MAX` to 0 as producers do.
pub(crate) fn increment_sequence(sequence: i32, n: i32) -> i32 {
    if sequence > i32::MAX - n {
        n - (i32::MAX - sequence) - 1
    } else {
        sequence + n
    }
}

fn in_sequence(last_seq: i32, next_seq: i32) -> bool {
    i64::from(next_seq) == i64::from(last_seq) + 1 || (next_seq == 0 && last_seq == i32::MAX)
}

/// What [`ProducerStateManager::check`] decided for an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppendCheck {
    /// Every batch is new and in sequence: append.
    Append,
    /// A batch was already appended: append nothing, answer with its offsets.
    Duplicate(BatchMetadata),
}

/// Per producer id, its epoch, last batches and ongoing transaction, for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerStateEntry>,
    /// The ongoing transactions: first offset → producer id (derived from `producers`).
    ongoing: BTreeMap<i64, i64>,
}

impl ProducerStateManager {
    /// Checks the idempotent batches of one append, in order, against the
    /// state and against the batches before them in the same append.
    ///
    /// # Errors
    /// [`StorageError::InvalidProducerEpoch`], [`StorageError::OutOfOrderSequence`].
    pub(crate) fn check(
        &self,
        batches: &[ProducerBatch],
        origin: AppendOrigin,
    ) -> Result<AppendCheck> {
        if origin == AppendOrigin::Replication {
            // The leader judged these batches; a follower only records them.
            return Ok(AppendCheck::Append);
        }
        // (producer id, epoch, last sequence) after the earlier batches of this append.
        let mut pending: Vec<(i64, i16, i32)> = Vec::new();
        for b in batches {
            let known = match pending.iter().rev().find(|p| p.0 == b.producer_id) {
                Some(&(_, epoch, last_seq)) => Some((epoch, Some(last_seq))),
                None => match self.producers.get(&b.producer_id) {
                    Some(entry) => {
                        if let Some(original) = entry.find_duplicate(b) {
                            return Ok(AppendCheck::Duplicate(original));
                        }
                        if !b.transactional && b.epoch >= entry.epoch {
                            if let Some(first_offset) = entry.current_txn_first_offset {
                                return Err(StorageError::InvalidTxnState {
                                    producer_id: b.producer_id,
                                    reason: format!("a non-transactional batch while its transaction from offset {first_offset} is ongoing"),
                                });
                            }
                        }
                        Some((entry.epoch, entry.last_seq()))
                    }
                    // Unknown producer: any sequence starts it.
                    None => None,
                },
            };
            if let Some((epoch, last_seq)) = known {
                if b.epoch < epoch {
                    return Err(StorageError::InvalidProducerEpoch {
                        producer_id: b.producer_id,
                        epoch: b.epoch,
                        current_epoch: epoch,
                    });
                }
                let expected = match last_seq {
                    // A coordinator's own transactional batch (TxnOffsetCommit in
                    // `__consumer_offsets`) has no sequence: Kafka's coordinator-origin
                    // append checks its epoch only. A client's batch without one is out of order.
                    _ if b.first_seq == NO_SEQUENCE && origin == AppendOrigin::Coordinator => None,
                    _ if b.epoch != epoch => Some(0),
                    Some(last) if !in_sequence(last, b.first_seq) => {
                        Some(increment_sequence(last, 1))
                    }
                    _ => None,
                };
                if let Some(expected) = expected.filter(|&e| e != b.first_seq) {
                    return Err(StorageError::OutOfOrderSequence {
                        producer_id: b.producer_id,
                        epoch: b.epoch,
                        sequence: b.first_seq,
                        expected,
                    });
                }
            }
            pending.push((b.producer_id, b.epoch, b.last_seq));
        }
        Ok(AppendCheck::Append)
    }

    /// Records an appended batch; a transactional one starts the producer's
    /// transaction here if none is ongoing.
    pub(crate) fn update(
        &mut self,
        b: &ProducerBatch,
        first_offset: i64,
        last_offset: i64,
        timestamp: i64,
    ) {
        let meta = BatchMetadata {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            first_offset,
            last_offset,
            timestamp,
        };
        let entry =
            self.producers.entry(b.producer_id).or_insert_with(|| ProducerStateEntry::new(b.epoch));
        entry.push(b.epoch, meta);
        entry.last_timestamp = timestamp;
        if b.transactional && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(first_offset);
            self.ongoing.insert(first_offset, b.producer_id);
        }
    }

    /// Checks a marker before it is written: an epoch older than the
    /// producer's is fenced, as is an older coordinator epoch.
    ///
    /// # Errors
    /// [`StorageError::InvalidProducerEpoch`], [`StorageError::TransactionCoordinatorFenced`].
    pub(crate) fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<()> {
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if epoch < entry.epoch {
            return Err(StorageError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current_epoch: entry.epoch,
            });
        }
        if coordinator_epoch < entry.coordinator_epoch {
            return Err(StorageError::TransactionCoordinatorFenced {
                producer_id,
                coordinator_epoch,
                current_coordinator_epoch: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records a marker written at `offset` (live or read back by recovery):
    /// completes the producer's ongoing transaction; a newer epoch forgets the
    /// older epoch's batches (Kafka's `appendEndTxnMarker`).
    pub(crate) fn complete_txn(
        &mut self,
        producer_id: i64,
        epoch: i16,
        marker: ControlRecordType,
        coordinator_epoch: i32,
        offset: i64,
        timestamp: i64,
    ) -> CompletedTxn {
        let entry =
            self.producers.entry(producer_id).or_insert_with(|| ProducerStateEntry::new(epoch));
        if epoch != entry.epoch {
            entry.epoch = epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = coordinator_epoch;
        entry.last_timestamp = timestamp;
        let first_offset = match entry.current_txn_first_offset.take() {
            Some(first) => {
                self.ongoing.remove(&first);
                first
            }
            None => offset,
        };
        CompletedTxn {
            producer_id,
            first_offset,
            last_offset: offset,
            aborted: marker == ControlRecordType::Abort,
        }
    }

    /// Records a batch read back from the log (recovery): no checks. A control
    /// batch completes a transaction if `marker` (its parsed record) says which.
    pub(crate) fn update_from_header(
        &mut self,
        h: &RecordBatchHeader,
        marker: Option<(ControlRecordType, i32)>,
    ) -> Option<CompletedTxn> {
        if h.is_control() {
            if h.producer_id < 0 {
                return None;
            }
            let (marker, coordinator_epoch) = marker?;
            return Some(self.complete_txn(
                h.producer_id,
                h.producer_epoch,
                marker,
                coordinator_epoch,
                h.base_offset,
                h.max_timestamp,
            ));
        }
        if let Some(b) = ProducerBatch::of(h) {
            self.update(&b, h.base_offset, h.last_offset(), h.max_timestamp);
        }
        None
    }

    /// First offset of the oldest ongoing transaction (Kafka's first unstable offset), if any.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.keys().next().copied()
    }

    /// The last stable offset right after `completed` (Kafka's
    /// `lastStableOffset(CompletedTxn)`), for its `.txnindex` entry: the
    /// first offset of the oldest transaction still ongoing, else the offset after the marker.
    pub(crate) fn last_stable_offset_after(&self, completed: &CompletedTxn) -> i64 {
        self.first_unstable_offset().unwrap_or(completed.last_offset + 1)
    }

    /// Whether the producer has a transaction ongoing in this partition.
    pub fn has_ongoing_txn(&self, producer_id: i64) -> bool {
        self.producers.get(&producer_id).is_some_and(|e| e.current_txn_first_offset.is_some())
    }

    /// Forgets the producers without an ongoing transaction whose last
    /// timestamp is at least `expiration_ms` before `now_ms`
    /// (`producer.id.expiration.ms`); returns how many.
    pub fn remove_expired(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some()
                || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        before - self.producers.len()
    }

    /// Every producer known, by producer id (DescribeProducers).
    pub fn summaries(&self) -> Vec<ProducerSummary> {
        let mut out: Vec<ProducerSummary> = self
            .producers
            .iter()
            .map(|(&id, e)| ProducerSummary {
                producer_id: id,
                producer_epoch: e.epoch,
                last_sequence: e.last_seq().unwrap_or(-1),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_start_offset: e.current_txn_first_offset.unwrap_or(-1),
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    /// Number of producers known.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// A producer's current epoch, if known.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|e| e.epoch)
    }

    /// A producer's epoch and its last batch, if known.
    pub fn last_batch(&self, producer_id: i64) -> Option<(i16, BatchMetadata)> {
        let e = self.producers.get(&producer_id)?;
        e.batches.back().map(|b| (e.epoch, *b))
    }

    /// The snapshot bytes of this state, covering the batches below `offset`.
    pub(crate) fn to_snapshot(&self, offset: i64) -> Vec<u8> {
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        let mut out = Vec::with_capacity(
            SNAPSHOT_HEADER + ids.len() * (PRODUCER_HEADER + BATCHES_TO_RETAIN * BATCH_SIZE),
        );
        out.extend(SNAPSHOT_VERSION.to_be_bytes());
        out.extend([0u8; 4]);
        out.extend(offset.to_be_bytes());
        out.extend((ids.len() as i32).to_be_bytes());
        for id in ids {
            let e = &self.producers[id];
            out.extend(id.to_be_bytes());
            out.extend(e.epoch.to_be_bytes());
            out.extend(e.coordinator_epoch.to_be_bytes());
            out.extend(e.current_txn_first_offset.unwrap_or(-1).to_be_bytes());
            out.extend(e.last_timestamp.to_be_bytes());
            out.push(e.batches.len() as u8);
            for b in &e.batches {
                out.extend(b.first_seq.to_be_bytes());
                out.extend(b.last_seq.to_be_bytes());
                out.extend(b.first_offset.to_be_bytes());
                out.extend(b.last_offset.to_be_bytes());
                out.extend(b.timestamp.to_be_bytes());
            }
        }
        let crc = crc32c::crc32c(&out[6..]);
        out[2..6].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Parses snapshot bytes that must cover the batches below `offset`;
    /// `Err(reason)` for anything that is not such a snapshot.
    pub(crate) fn from_snapshot(bytes: &[u8], offset: i64) -> Result<Self, String> {
        let mut r = Reader { bytes, pos: 0 };
        let version = r.i16()?;
        if version != 1 && version != SNAPSHOT_VERSION {
            return Err(format!("unknown snapshot version {version}"));
        }
        let crc = r.i32()? as u32;
        let computed = crc32c::crc32c(&bytes[6..]);
        if crc != computed {
            return Err(format!("CRC {crc:#010x}, computed {computed:#010x}"));
        }
        let stored_offset = r.i64()?;
        if stored_offset != offset {
            return Err(format!("covers offset {stored_offset}, named {offset}"));
        }
        let count = r.i32()?;
        let mut producers = HashMap::with_capacity(count.clamp(0, 1 << 16) as usize);
        let mut ongoing = BTreeMap::new();
        for _ in 0..count {
            let id = r.i64()?;
            let epoch = r.i16()?;
            let (coordinator_epoch, txn_first, mut last_timestamp) =
                if version >= 2 { (r.i32()?, r.i64()?, r.i64()?) } else { (-1, -1, -1) };
            let n = usize::from(r.u8()?);
            if (n == 0 && version < 2) || n > BATCHES_TO_RETAIN {
                return Err(format!("producer {id} has {n} batches"));
            }
            let mut batches = VecDeque::with_capacity(BATCHES_TO_RETAIN);
            for _ in 0..n {
                batches.push_back(BatchMetadata {
                    first_seq: r.i32()?,
                    last_seq: r.i32()?,
                    first_offset: r.i64()?,
                    last_offset: r.i64()?,
                    timestamp: r.i64()?,
                });
            }
            if version < 2 {
                last_timestamp = batches.back().map_or(-1, |b| b.timestamp);
            }
            let current_txn_first_offset = (txn_first >= 0).then_some(txn_first);
            if let Some(first) = current_txn_first_offset {
                if ongoing.insert(first, id).is_some() {
                    return Err(format!("two transactions start at offset {first}"));
                }
            }
            let entry = ProducerStateEntry {
                epoch,
                batches,
                coordinator_epoch,
                current_txn_first_offset,
                last_timestamp,
            };
            if producers.insert(id, entry).is_some() {
                return Err(format!("producer {id} appears twice"));
            }
        }
        if r.pos != bytes.len() {
            return Err(format!("{} trailing bytes", bytes.len() - r.pos));
        }
        Ok(Self { producers, ongoing })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let end = self.pos + N;
        let slice = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| format!("truncated at byte {}", self.pos))?;
        self.pos = end;
        Ok(slice.try_into().expect("N bytes"))
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take::<1>()?[0])
    }
    fn i16(&mut self) -> Result<i16, String> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, String> {
        self.take().map(i32::from_be_bytes)
    }
    fn i64(&mut self) -> Result<i64, String> {
        self.take().map(i64::from_be_bytes)
    }
}

/// Writes `<dir>/<offset>.snapshot` (temporary file + rename, no fsync: see the module docs).
///
/// # Errors
/// [`StorageError::Io`].
pub(crate) fn write_snapshot(dir: &Path, offset: i64, state: &ProducerStateManager) -> Result<()> {
    let path = snapshot_file(dir, offset);
    let tmp = tmp_file(&path);
    fs::write(&tmp, state.to_snapshot(offset)).ctx("write producer snapshot", &tmp)?;
    failpoint::check("producer.snapshot.write")
        .ctx("rename producer snapshot into place", &path)?;
    fs::rename(&tmp, &path).ctx("rename producer snapshot into place", &path)
}

/// Reads `<dir>/<offset>.snapshot`: `Ok(Err(reason))` if it is not a valid snapshot.
///
/// # Errors
/// [`StorageError::Io`] if it cannot be read.
pub(crate) fn read_snapshot(
    dir: &Path,
    offset: i64,
) -> Result<Result<ProducerStateManager, String>> {
    let path = snapshot_file(dir, offset);
    let bytes = fs::read(&path).ctx("read producer snapshot", &path)?;
    Ok(ProducerStateManager::from_snapshot(&bytes, offset))
}

/// Removes a snapshot file; a missing one is fine.
///
/// # Errors
/// [`StorageError::Io`].
pub(crate) fn delete_snapshot(dir: &Path, offset: i64) -> Result<()> {
    let path = snapshot_file(dir, offset);
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("delete producer snapshot", &path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pb(producer_id: i64, epoch: i16, first_seq: i32, n: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id,
            epoch,
            first_seq,
            last_seq: increment_sequence(first_seq, n - 1),
            transactional: false,
        }
    }

    #[test]
    fn only_a_coordinator_may_append_without_a_sequence() {
        let mut s = ProducerStateManager::default();
        append(&mut s, pb(1, 0, 0, 2), 0).unwrap();
        let unsequenced = pb(1, 0, NO_SEQUENCE, 1);
        assert!(matches!(
            s.check(&[unsequenced], AppendOrigin::Client),
            Err(StorageError::OutOfOrderSequence { expected: 2, .. })
        ));
        assert_eq!(
            s.check(&[unsequenced], AppendOrigin::Coordinator).unwrap(),
            AppendCheck::Append
        );
        assert!(matches!(
            s.check(&[pb(1, -1, NO_SEQUENCE, 1)], AppendOrigin::Coordinator),
            Err(StorageError::InvalidProducerEpoch { .. })
        ));
    }

    /// Checks and records `b` at `offset`, as an append would.
    fn append(s: &mut ProducerStateManager, b: ProducerBatch, offset: i64) -> Result<AppendCheck> {
        let c = s.check(&[b], AppendOrigin::Client)?;
        if c == AppendCheck::Append {
            let n = i64::from(b.last_seq.wrapping_sub(b.first_seq)) + 1;
            s.update(&b, offset, offset + n - 1, 1000 + offset);
        }
        Ok(c)
    }

    #[test]
    fn sequences_epochs_and_duplicates() {
        let mut s = ProducerStateManager::default();
        assert_eq!(append(&mut s, pb(7, 0, 0, 3), 0).unwrap(), AppendCheck::Append);
        assert_eq!(append(&mut s, pb(7, 0, 3, 2), 3).unwrap(), AppendCheck::Append);
        // A retry of either batch is a duplicate answered with its offsets.
        let dup = append(&mut s, pb(7, 0, 0, 3), 99).unwrap();
        assert!(
            matches!(dup, AppendCheck::Duplicate(m) if (m.first_offset, m.last_offset) == (0, 2))
        );
        let dup = append(&mut s, pb(7, 0, 3, 2), 99).unwrap();
        assert!(
            matches!(dup, AppendCheck::Duplicate(m) if (m.first_offset, m.last_offset) == (3, 4))
        );
        // A gap, or an overlapping range that is no exact match, is out of order.
        assert!(matches!(
            append(&mut s, pb(7, 0, 6, 1), 5),
            Err(StorageError::OutOfOrderSequence { sequence: 6, expected: 5, .. })
        ));
        assert!(matches!(
            append(&mut s, pb(7, 0, 1, 2), 5),
            Err(StorageError::OutOfOrderSequence { .. })
        ));
        // A newer epoch starts at 0 and forgets the older batches.
        assert!(matches!(
            append(&mut s, pb(7, 1, 5, 1), 5),
            Err(StorageError::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(append(&mut s, pb(7, 1, 0, 1), 5).unwrap(), AppendCheck::Append);
        assert!(matches!(
            append(&mut s, pb(7, 0, 5, 1), 6),
            Err(StorageError::InvalidProducerEpoch { epoch: 0, current_epoch: 1, .. })
        ));
        assert!(
            matches!(
                append(&mut s, pb(7, 0, 0, 3), 6),
                Err(StorageError::InvalidProducerEpoch { .. })
            ),
            "an old epoch's batch is no duplicate"
        );
        // An unknown producer starts at any sequence.
        assert_eq!(append(&mut s, pb(8, 3, 1234, 1), 6).unwrap(), AppendCheck::Append);
        assert_eq!(s.producer_count(), 2);
    }

    #[test]
    fn only_the_last_five_batches_are_duplicates() {
        let mut s = ProducerStateManager::default();
        for i in 0..7 {
            append(&mut s, pb(1, 0, i, 1), i64::from(i)).unwrap();
        }
        assert!(
            matches!(append(&mut s, pb(1, 0, 2, 1), 7).unwrap(), AppendCheck::Duplicate(m) if m.first_offset == 2)
        );
        assert!(matches!(
            append(&mut s, pb(1, 0, 1, 1), 7),
            Err(StorageError::OutOfOrderSequence { .. })
        ));
    }

    #[test]
    fn sequence_wraps_at_i32_max() {
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        let mut s = ProducerStateManager::default();
        let b = pb(1, 0, i32::MAX - 1, 2);
        assert_eq!(b.last_seq, i32::MAX);
        append(&mut s, b, 0).unwrap();
        assert_eq!(append(&mut s, pb(1, 0, 0, 5), 2).unwrap(), AppendCheck::Append);
        // A batch spanning the wrap.
        let mut s = ProducerStateManager::default();
        append(&mut s, pb(1, 0, i32::MAX - 1, 4), 0).unwrap();
        assert_eq!(s.last_batch(1).unwrap().1.last_seq, 1);
        assert_eq!(append(&mut s, pb(1, 0, 2, 1), 4).unwrap(), AppendCheck::Append);
    }

    #[test]
    fn several_batches_of_one_append_are_checked_in_order() {
        let mut s = ProducerStateManager::default();
        append(&mut s, pb(1, 0, 0, 2), 0).unwrap();
        assert_eq!(
            s.check(&[pb(1, 0, 2, 2), pb(1, 0, 4, 1)], AppendOrigin::Client).unwrap(),
            AppendCheck::Append
        );
        assert!(s.check(&[pb(1, 0, 2, 2), pb(1, 0, 5, 1)], AppendOrigin::Client).is_err());
        assert!(s.check(&[pb(2, 0, 9, 2), pb(2, 0, 10, 1)], AppendOrigin::Client).is_err());
    }

    #[test]
    fn snapshot_round_trip_and_damage() {
        let mut s = ProducerStateManager::default();
        for i in 0..8 {
            let offset = i64::from(i) * 2;
            s.update(&pb(i64::from(i % 3), (i % 3) as i16, i * 2, 2), offset, offset + 1, -1);
        }
        let bytes = s.to_snapshot(16);
        assert_eq!(ProducerStateManager::from_snapshot(&bytes, 16).unwrap(), s);
        assert!(ProducerStateManager::from_snapshot(&bytes, 17).is_err());
        for cut in [0, 5, 17, bytes.len() - 1] {
            assert!(
                ProducerStateManager::from_snapshot(&bytes[..cut], 16).is_err(),
                "cut at {cut}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[30] ^= 1;
        assert!(ProducerStateManager::from_snapshot(&flipped, 16).unwrap_err().contains("CRC"));
        let empty = ProducerStateManager::default().to_snapshot(0);
        assert_eq!(empty.len(), SNAPSHOT_HEADER);
        assert_eq!(ProducerStateManager::from_snapshot(&empty, 0).unwrap().producer_count(), 0);
    }

    #[test]
    fn transactions_round_trip_through_snapshots_and_version_1_is_still_read() {
        let mut s = ProducerStateManager::default();
        let mut t = pb(1, 0, 0, 2);
        t.transactional = true;
        s.update(&t, 10, 11, 500);
        s.update(&pb(2, 0, 0, 1), 12, 12, 501);
        s.complete_txn(3, 2, ControlRecordType::Commit, 4, 13, 502);
        assert_eq!(s.first_unstable_offset(), Some(10));
        let bytes = s.to_snapshot(14);
        assert_eq!(i16::from_be_bytes([bytes[0], bytes[1]]), 2);
        let back = ProducerStateManager::from_snapshot(&bytes, 14).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.first_unstable_offset(), Some(10));
        assert_eq!(back.summaries()[2].coordinator_epoch, 4);
        assert_eq!(back.summaries()[2].last_sequence, -1);
        let mut back = back;
        let done = back.complete_txn(1, 0, ControlRecordType::Abort, 0, 14, 503);
        assert_eq!((done.first_offset, done.last_offset, done.aborted), (10, 14, true));
        assert_eq!(back.first_unstable_offset(), None);

        // Version 1: producer id, epoch, batch count, batches (no transaction fields).
        let mut v1 = Vec::new();
        v1.extend(1i16.to_be_bytes());
        v1.extend([0u8; 4]);
        v1.extend(20i64.to_be_bytes());
        v1.extend(1i32.to_be_bytes());
        v1.extend(7i64.to_be_bytes());
        v1.extend(3i16.to_be_bytes());
        v1.push(1);
        for v in [0i32, 4] {
            v1.extend(v.to_be_bytes());
        }
        for v in [15i64, 19, 999] {
            v1.extend(v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&v1[6..]);
        v1[2..6].copy_from_slice(&crc.to_be_bytes());
        let old = ProducerStateManager::from_snapshot(&v1, 20).unwrap();
        let summary = old.summaries()[0];
        assert_eq!(
            (
                summary.producer_id,
                summary.producer_epoch,
                summary.last_sequence,
                summary.last_timestamp
            ),
            (7, 3, 4, 999)
        );
        assert_eq!((summary.coordinator_epoch, summary.current_txn_start_offset), (-1, -1));
    }

    #[test]
    fn expiry_spares_producers_in_a_transaction() {
        let mut s = ProducerStateManager::default();
        let mut t = pb(1, 0, 0, 1);
        t.transactional = true;
        s.update(&t, 0, 0, 100);
        s.update(&pb(2, 0, 0, 1), 1, 1, 100);
        s.update(&pb(3, 0, 0, 1), 2, 2, 900);
        assert_eq!(s.remove_expired(1_099, 1_000), 0);
        assert_eq!(s.remove_expired(1_100, 1_000), 1, "producer 2, idle 1000 ms");
        assert!(s.has_ongoing_txn(1));
        assert_eq!(s.producer_count(), 2);
    }
}
