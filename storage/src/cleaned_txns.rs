//! `CleanedTxns`: what the cleaner knows of transactions while it walks part
//! of a log (Kafka's `CleanedTransactionMetadata`).
//!
//! The cleaner only walks offsets below the last stable offset, so every
//! transaction it meets is decided, and the aborted ones are exactly those in
//! the segments' `.txnindex` files. With them it decides, batch by batch:
//! - a data batch of an aborted transaction is dropped (its records never
//!   reach the offset map either, so they cannot hide an older committed value);
//! - an ABORT marker stays while this walk saw batches of its transaction
//!   (read_committed consumers of an older copy still need it), and then goes
//!   into the cleaned segment's `.txnindex`; once no batch of it is left it may go;
//! - a COMMIT marker may go once no batch of its transaction is left.
//!
//! "May go" is not "goes": a marker that may go is kept for `delete.retention.ms`
//! more, stamped with a delete horizon like a tombstone (KIP-534), so a
//! consumer that read the transaction's batches before they were removed still
//! finds the marker that ends it.

use std::collections::{HashMap, HashSet};

use floe_protocol::record_batch::RecordBatchHeader;

use crate::transaction::{AbortedTxn, ControlRecordType};

/// An aborted transaction the walk has reached (its first offset is behind it).
#[derive(Debug, Clone, Copy)]
struct OngoingAbort {
    txn: AbortedTxn,
    /// A batch of the transaction was seen (and dropped) by this walk.
    batch_seen: bool,
}

/// Transaction state carried along one walk of the cleaner over a range of offsets.
#[derive(Debug, Default)]
pub(crate) struct CleanedTxns {
    /// Aborted transactions not reached yet, by first offset, latest first (popped from the end).
    pending: Vec<AbortedTxn>,
    /// Reached and not ended by their ABORT marker yet, by producer id.
    ongoing_aborted: HashMap<i64, OngoingAbort>,
    /// Producers with a batch of a committed transaction seen since their last marker.
    ongoing_committed: HashSet<i64>,
    /// ABORT markers kept because this walk saw their transaction's batches:
    /// the entries of the cleaned segment's `.txnindex`, in marker order.
    kept_aborted: Vec<AbortedTxn>,
}

impl CleanedTxns {
    /// A walk over `[from, to)`, given every aborted transaction of the log
    /// (those that do not overlap the range are left out).
    pub(crate) fn new(aborted: &[AbortedTxn], from: i64, to: i64) -> Self {
        let mut pending: Vec<AbortedTxn> = aborted
            .iter()
            .filter(|t| t.last_offset >= from && t.first_offset < to)
            .copied()
            .collect();
        pending.sort_unstable_by_key(|t| std::cmp::Reverse(t.first_offset));
        Self { pending, ..Self::default() }
    }

    /// Starts tracking the aborted transactions that begin at or before `offset`.
    fn reach(&mut self, offset: i64) {
        while self.pending.last().is_some_and(|t| t.first_offset <= offset) {
            if let Some(txn) = self.pending.pop() {
                self.ongoing_aborted
                    .entry(txn.producer_id)
                    .or_insert(OngoingAbort { txn, batch_seen: false });
            }
        }
    }

    /// A data batch: `true` if it belongs to an aborted transaction and is dropped.
    pub(crate) fn on_data_batch(&mut self, header: &RecordBatchHeader) -> bool {
        self.reach(header.last_offset());
        if !header.is_transactional() {
            return false;
        }
        match self.ongoing_aborted.get_mut(&header.producer_id) {
            Some(abort) => {
                abort.batch_seen = true;
                true
            }
            None => {
                self.ongoing_committed.insert(header.producer_id);
                false
            }
        }
    }

    /// A control batch whose marker is `marker` (`None`: emptied by an earlier
    /// clean, or not a transaction marker): `true` if no batch of its
    /// transaction is left, so the marker may go once its delete horizon passed.
    pub(crate) fn on_control_batch(
        &mut self,
        header: &RecordBatchHeader,
        marker: Option<ControlRecordType>,
    ) -> bool {
        self.reach(header.last_offset());
        match marker {
            Some(ControlRecordType::Abort) => {
                match self.ongoing_aborted.remove(&header.producer_id) {
                    Some(abort) if abort.batch_seen => {
                        self.kept_aborted.push(abort.txn);
                        false
                    }
                    _ => true,
                }
            }
            Some(ControlRecordType::Commit) => !self.ongoing_committed.remove(&header.producer_id),
            // An empty control batch was cleaned before: nothing of it is needed.
            None => header.records_count == 0,
        }
    }

    /// The aborted transactions whose ABORT marker was kept with batches seen, taken.
    pub(crate) fn take_kept_aborted(&mut self) -> Vec<AbortedTxn> {
        std::mem::take(&mut self.kept_aborted)
    }
}
