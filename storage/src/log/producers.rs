//! Idempotent and transactional producers' state of a log (Kafka's
//! `ProducerStateManager` as `UnifiedLog` keeps it): what DescribeProducers
//! reads, the expiry of idle producer ids, and the `<offset>.snapshot` files
//! written at every roll and at close (the last two kept, those below the
//! local log start deleted). The checks and updates themselves run on the
//! append paths, under the log's lock.

use tracing::{debug, warn};

use super::{LogState, PartitionLog};
use crate::file_names::snapshot_file;
use crate::producer_state::{delete_snapshot, write_snapshot, ProducerStateManager};
use crate::transaction::ProducerSummary;

impl PartitionLog {
    /// Every producer the partition knows (DescribeProducers), by producer id.
    pub fn active_producers(&self) -> Vec<ProducerSummary> {
        self.state().producers.summaries()
    }

    /// Forgets producers idle for `producer.id.expiration.ms` with no ongoing
    /// transaction (see [`crate::producer_state`]); they are gone from the next
    /// snapshot. Returns how many were removed.
    pub fn expire_producers(&self, now_ms: i64) -> usize {
        let mut st = self.state();
        let expiration_ms = st.config.producer_id_expiration_ms;
        let removed = st.producers.remove_expired(now_ms, expiration_ms);
        if removed > 0 {
            debug!(topic = %self.topic, partition = self.partition, removed,
                remaining = st.producers.producer_count(), "expired producer ids");
        }
        removed
    }

    /// Writes the producer state as `<log end offset>.snapshot` and deletes all
    /// but the last two snapshots. Failures are logged, not returned: a
    /// snapshot only shortens recovery, which can rebuild the state from the log.
    pub(super) fn take_snapshot(&self, st: &mut LogState) {
        let offset = st.log_end_offset;
        if let Err(e) = write_snapshot(&self.dir, offset, &st.producers) {
            warn!(topic = %self.topic, partition = self.partition, offset, error = %e, "writing producer snapshot failed");
            return;
        }
        st.snapshots.insert(offset);
        while st.snapshots.len() > 2 {
            if let Some(old) = st.snapshots.pop_first() {
                self.remove_snapshot(old);
            }
        }
    }

    /// Deletes the snapshot at `offset`; a failure is logged (a stray snapshot is ignored at open and deleted).
    pub(super) fn remove_snapshot(&self, offset: i64) {
        if let Err(e) = delete_snapshot(&self.dir, offset) {
            warn!(topic = %self.topic, partition = self.partition, snapshot = %snapshot_file(&self.dir, offset).display(),
                error = %e, "deleting producer snapshot failed");
        }
    }

    /// Removes from the set the snapshots below the local log start offset
    /// (the log start offset in copy mode), for deletion once the lock is
    /// released: recovery replays from a snapshot at or above the first local
    /// segment, so one below it is of no use.
    pub(super) fn take_snapshots_below_local_start(st: &mut LogState) -> Vec<i64> {
        let keep = st.snapshots.split_off(&st.local_log_start_offset());
        std::mem::replace(&mut st.snapshots, keep).into_iter().collect()
    }

    /// A copy of the idempotent producers' state (epochs and last batches).
    pub fn producer_state(&self) -> ProducerStateManager {
        self.state().producers.clone()
    }
}

#[cfg(test)]
mod tests {
    use crate::error::StorageError;
    use crate::log::test_helpers::{idempotent_log, reopen, snapshot_offsets};
    use crate::test_util::idempotent_batch;

    #[test]
    fn producer_state_survives_reopen_from_snapshot_and_tail_or_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = idempotent_log(dir.path());
        let reference = log.producer_state();
        assert_eq!(reference.producer_count(), 3);
        let active_base = log.sealed_segments().last().unwrap().next_offset;
        let snaps = snapshot_offsets(dir.path());
        assert_eq!(snaps.len(), 2, "the last two are kept: {snaps:?}");
        assert_eq!(*snaps.last().unwrap(), active_base);
        assert!(log.log_end_offset() > active_base, "a tail after the last snapshot");
        log.flush().unwrap();
        std::mem::forget(log); // a crash: no snapshot at close

        // Snapshot + the headers of the tail.
        let log = reopen(dir.path());
        assert_eq!(log.producer_state(), reference);
        // A retry is still recognised, a gap still refused.
        let dup = log.append(&mut idempotent_batch((200, 1, 14), 2, 10), 0).unwrap();
        assert!(dup.duplicate);
        assert!(matches!(
            log.append(&mut idempotent_batch((300, 1, 99), 1, 10), 0),
            Err(StorageError::OutOfOrderSequence { .. })
        ));
        log.close().unwrap();
        let end = log.log_end_offset();
        drop(log);
        assert!(snapshot_offsets(dir.path()).contains(&end), "snapshot at close");

        // From the log alone.
        for o in snapshot_offsets(dir.path()) {
            std::fs::remove_file(crate::file_names::snapshot_file(dir.path(), o)).unwrap();
        }
        let log = reopen(dir.path());
        assert_eq!(log.producer_state(), reference);
    }

    #[test]
    fn snapshot_keeps_producers_whose_batches_were_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let log = idempotent_log(dir.path());
        let second = log.sealed_segments()[1].base_offset;
        assert_eq!(log.delete_records_before(second).unwrap(), second);
        let reference = log.producer_state();
        assert!(reference.last_batch(100).is_some());
        drop(log);
        let log = reopen(dir.path());
        assert_eq!(log.producer_state(), reference, "from the snapshot");
        drop(log);
        for o in snapshot_offsets(dir.path()) {
            std::fs::remove_file(crate::file_names::snapshot_file(dir.path(), o)).unwrap();
        }
        let log = reopen(dir.path());
        assert_eq!(log.producer_state().last_batch(100), None, "only the log is left");
        assert_eq!(log.producer_state().last_batch(200), reference.last_batch(200));
    }

    #[test]
    fn damaged_and_stray_snapshots_are_ignored_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let log = idempotent_log(dir.path());
        let reference = log.producer_state();
        let end = log.log_end_offset();
        log.close().unwrap();
        drop(log);
        let snaps = snapshot_offsets(dir.path());
        // The newest is torn; one above the log end is left from an earlier life.
        let newest = crate::file_names::snapshot_file(dir.path(), *snaps.last().unwrap());
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..bytes.len() - 3]).unwrap();
        std::fs::write(crate::file_names::snapshot_file(dir.path(), end + 50), &bytes).unwrap();
        let log = reopen(dir.path());
        assert_eq!(log.producer_state(), reference);
        assert_eq!(snapshot_offsets(dir.path()), snaps[..snaps.len() - 1].to_vec());
    }
}
