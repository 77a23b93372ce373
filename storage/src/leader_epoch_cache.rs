//! `LeaderEpochCache`: a partition's leader epochs and the offset each began at,
//! kept in its `leader-epoch-checkpoint` file (Kafka's `LeaderEpochFileCache`,
//! KIP-101/279).
//!
//! Replication needs it twice. A leader answers OffsetForLeaderEpoch from it: where
//! did epoch E end in my log? A replica that becomes a follower asks its new leader
//! that question for its own latest epoch, and truncates everything past the answer:
//! the divergent tail an ex-leader wrote but never committed.
//!
//! # File layout (Kafka's checkpoint format)
//! ```text
//! 0                  version
//! <count>            number of entries
//! <epoch> <offset>   one line per epoch, in increasing epoch and offset order
//! ```
//! Written atomically after every change. A missing file reads as empty; a
//! malformed one is logged and read as empty: the epochs are then re-learnt from
//! the batches' `partition_leader_epoch` as the log is recovered or appended to.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::atomic_file::write_atomically;
use crate::error::{IoContext, Result};

/// The file's name inside a partition directory.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";

/// Kafka's `UNDEFINED_EPOCH`.
pub const UNDEFINED_EPOCH: i32 = -1;
/// Kafka's `UNDEFINED_EPOCH_OFFSET`.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

const VERSION: &str = "0";

/// One leader epoch and the first offset written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// The leader epoch.
    pub epoch: i32,
    /// The first offset written in it.
    pub start_offset: i64,
}

/// The leader epochs of one partition, in memory and in its checkpoint file.
#[derive(Debug)]
pub struct LeaderEpochCache {
    path: PathBuf,
    /// Epoch → entry. Both epochs and start offsets increase along the map.
    epochs: BTreeMap<i32, EpochEntry>,
}

impl LeaderEpochCache {
    /// Loads the cache of the partition directory `dir`.
    ///
    /// # Errors
    /// [`crate::StorageError::Io`] if the file exists but cannot be read.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT);
        let entries = match std::fs::read_to_string(&path) {
            Ok(text) => parse(&text).unwrap_or_else(|reason| {
                warn!(file = %path.display(), %reason, "malformed leader epoch checkpoint; relearning epochs from the log");
                Vec::new()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                warn!(file = %path.display(), "leader epoch checkpoint is not UTF-8; relearning epochs from the log");
                Vec::new()
            }
            Err(e) => return Err(e).ctx("read leader epoch checkpoint", &path),
        };
        let mut cache = Self { path, epochs: BTreeMap::new() };
        for entry in entries {
            cache.insert(entry);
        }
        Ok(cache)
    }

    /// Records that `epoch` began at `start_offset`, if that is news: a new epoch, or
    /// the latest epoch starting earlier than known. Entries it contradicts (an epoch
    /// at least as high, or starting at or after `start_offset`) are dropped first, so
    /// epochs and offsets keep increasing together. Returns whether anything changed;
    /// a change is written to the file before returning.
    ///
    /// # Errors
    /// [`crate::StorageError::InvalidConfig`] for a negative epoch or offset (a caller
    /// bug: batches carry -1 only when no leader stamped them); I/O errors of the write.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> Result<bool> {
        if epoch < 0 || start_offset < 0 {
            return Err(crate::StorageError::InvalidConfig {
                key: "leader epoch".into(),
                reason: format!("epoch {epoch} at offset {start_offset} cannot be recorded"),
            });
        }
        let entry = EpochEntry { epoch, start_offset };
        if !self.is_update_needed(entry) {
            return Ok(false);
        }
        let removed = self.insert(entry);
        if removed.len() > 1 || removed.first().is_some_and(|r| r.start_offset != start_offset) {
            warn!(file = %self.path.display(), ?entry, ?removed, "new leader epoch replaced conflicting entries");
        }
        self.write()?;
        Ok(true)
    }

    fn is_update_needed(&self, entry: EpochEntry) -> bool {
        self.latest_entry().is_none_or(|latest| {
            entry.epoch != latest.epoch || entry.start_offset < latest.start_offset
        })
    }

    /// Drops the entries `entry` contradicts, then adds it; returns what was dropped.
    fn insert(&mut self, entry: EpochEntry) -> Vec<EpochEntry> {
        let mut removed = Vec::new();
        while let Some((&epoch, &last)) = self.epochs.last_key_value() {
            if last.epoch >= entry.epoch || last.start_offset >= entry.start_offset {
                removed.push(last);
                self.epochs.remove(&epoch);
            } else {
                break;
            }
        }
        self.epochs.insert(entry.epoch, entry);
        removed
    }

    /// Every entry, in increasing epoch order.
    pub fn entries(&self) -> Vec<EpochEntry> {
        self.epochs.values().copied().collect()
    }

    /// The latest epoch and where it began.
    pub fn latest_entry(&self) -> Option<EpochEntry> {
        self.epochs.values().next_back().copied()
    }

    /// The latest epoch, if any was recorded.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.latest_entry().map(|e| e.epoch)
    }

    /// The epoch `offset` was written in: the latest entry starting at or before it.
    pub fn epoch_for_offset(&self, offset: i64) -> Option<i32> {
        self.epochs.values().take_while(|e| e.start_offset <= offset).last().map(|e| e.epoch)
    }

    /// OffsetForLeaderEpoch's answer for `requested`: the largest known epoch at or
    /// below it, and where that epoch ended, that is, where the next known epoch
    /// began, or `log_end_offset` for the latest epoch. Kafka's edge cases:
    /// - an undefined epoch, or one above every known epoch, gives
    ///   (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
    /// - an epoch below every known one gives (requested, the first entry's start
    ///   offset): the log holds nothing older, and a follower truncates to there.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        if requested == UNDEFINED_EPOCH {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        let Some((_, higher)) = self.epochs.range(requested.saturating_add(1)..).next() else {
            return UNDEFINED;
        };
        match self.epochs.range(..=requested).next_back() {
            Some((_, floor)) => (floor.epoch, higher.start_offset),
            None => (requested, higher.start_offset),
        }
    }

    /// After the log was truncated to `end_offset` (exclusive): drops the entries
    /// that start at or after it, and writes the file if anything went.
    ///
    /// # Errors
    /// I/O errors of the write.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> Result<()> {
        let before = self.epochs.len();
        self.epochs.retain(|_, e| e.start_offset < end_offset);
        if self.epochs.len() != before {
            self.write()?;
        }
        Ok(())
    }

    /// After the log start offset moved to `start_offset` (retention, DeleteRecords):
    /// drops the entries that began at or before it, keeping the latest of them with
    /// its start moved up to `start_offset`, so that offset still has an epoch.
    ///
    /// # Errors
    /// I/O errors of the write.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> Result<()> {
        let covered: Vec<i32> = self
            .epochs
            .values()
            .take_while(|e| e.start_offset <= start_offset)
            .map(|e| e.epoch)
            .collect();
        let Some(&last) = covered.last() else { return Ok(()) };
        if covered.len() == 1 && self.epochs[&last].start_offset == start_offset {
            return Ok(());
        }
        for epoch in covered {
            self.epochs.remove(&epoch);
        }
        self.epochs.insert(last, EpochEntry { epoch: last, start_offset });
        self.write()
    }

    fn write(&self) -> Result<()> {
        let mut s = String::with_capacity(8 + self.epochs.len() * 24);
        let _ = writeln!(s, "{VERSION}");
        let _ = writeln!(s, "{}", self.epochs.len());
        for e in self.epochs.values() {
            let _ = writeln!(s, "{} {}", e.epoch, e.start_offset);
        }
        write_atomically(&self.path, s.as_bytes())
    }
}

fn parse(text: &str) -> std::result::Result<Vec<EpochEntry>, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some(VERSION) => {}
        other => return Err(format!("unsupported version line {other:?}")),
    }
    let count: usize =
        lines.next().and_then(|l| l.trim().parse().ok()).ok_or("missing entry count")?;
    let mut entries = Vec::with_capacity(count.min(1024));
    for line in lines.by_ref().take(count) {
        let mut parts = line.split_whitespace();
        let (Some(epoch), Some(offset), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("malformed line {line:?}"));
        };
        let epoch: i32 = epoch.parse().map_err(|_| format!("bad epoch in {line:?}"))?;
        let start_offset: i64 = offset.parse().map_err(|_| format!("bad offset in {line:?}"))?;
        if epoch < 0 || start_offset < 0 {
            return Err(format!("negative value in {line:?}"));
        }
        entries.push(EpochEntry { epoch, start_offset });
    }
    if entries.len() != count {
        return Err(format!("expected {count} entries, found {}", entries.len()));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &Path, entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::open(dir).unwrap();
        for &(epoch, offset) in entries {
            c.assign(epoch, offset).unwrap();
        }
        c
    }

    fn pairs(c: &LeaderEpochCache) -> Vec<(i32, i64)> {
        c.entries().into_iter().map(|e| (e.epoch, e.start_offset)).collect()
    }

    #[test]
    fn assignments_persist_in_kafkas_format() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[(0, 0), (2, 10), (5, 25)]);
        let text = std::fs::read_to_string(dir.path().join(LEADER_EPOCH_CHECKPOINT)).unwrap();
        assert_eq!(text, "0\n3\n0 0\n2 10\n5 25\n");
        drop(c);
        assert_eq!(
            pairs(&LeaderEpochCache::open(dir.path()).unwrap()),
            vec![(0, 0), (2, 10), (5, 25)]
        );
    }

    #[test]
    fn repeats_are_no_ops_and_contradicted_entries_go() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cache(dir.path(), &[(1, 0), (2, 10), (3, 20)]);
        assert!(!c.assign(3, 30).unwrap(), "the latest epoch at a later offset is not news");
        assert!(c.assign(3, 15).unwrap(), "the latest epoch starting earlier is");
        assert_eq!(pairs(&c), vec![(1, 0), (2, 10), (3, 15)]);
        // An older epoch arriving later (a new leader's log) drops everything at or above it.
        assert!(c.assign(2, 12).unwrap());
        assert_eq!(pairs(&c), vec![(1, 0), (2, 12)]);
        // An entry starting at or before a later epoch's start drops that epoch too.
        assert!(c.assign(4, 5).unwrap());
        assert_eq!(pairs(&c), vec![(1, 0), (4, 5)]);
        assert!(c.assign(-1, 3).is_err() && c.assign(5, -2).is_err());
    }

    #[test]
    fn end_offsets_follow_kafkas_answers() {
        let dir = tempfile::tempdir().unwrap();
        let c = cache(dir.path(), &[(2, 10), (4, 30), (7, 50)]);
        assert_eq!(c.end_offset_for(7, 80), (7, 80), "the latest epoch ends at the log end");
        assert_eq!(c.end_offset_for(4, 80), (4, 50));
        assert_eq!(
            c.end_offset_for(5, 80),
            (4, 50),
            "an unknown epoch between two: the one below, ending where the next began"
        );
        assert_eq!(
            c.end_offset_for(1, 80),
            (1, 10),
            "below every known epoch: the first start offset"
        );
        assert_eq!(c.end_offset_for(8, 80), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET));
        assert_eq!(
            c.end_offset_for(UNDEFINED_EPOCH, 80),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        let empty = LeaderEpochCache::open(tempfile::tempdir().unwrap().path()).unwrap();
        assert_eq!(empty.end_offset_for(0, 5), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET));
        assert_eq!(c.epoch_for_offset(9), None);
        assert_eq!(c.epoch_for_offset(10), Some(2));
        assert_eq!(c.epoch_for_offset(49), Some(4));
        assert_eq!(c.epoch_for_offset(1_000), Some(7));
    }

    #[test]
    fn truncation_from_either_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = cache(dir.path(), &[(1, 0), (2, 10), (3, 20), (4, 30)]);
        c.truncate_from_end(20).unwrap();
        assert_eq!(pairs(&c), vec![(1, 0), (2, 10)], "epochs starting at or after the new end go");
        c.truncate_from_end(100).unwrap();
        assert_eq!(pairs(&c), vec![(1, 0), (2, 10)]);
        c.assign(3, 40).unwrap();
        c.truncate_from_start(15).unwrap();
        assert_eq!(pairs(&c), vec![(2, 15), (3, 40)], "the epoch covering the new start keeps it");
        c.truncate_from_start(40).unwrap();
        assert_eq!(pairs(&c), vec![(3, 40)]);
        assert_eq!(
            pairs(&LeaderEpochCache::open(dir.path()).unwrap()),
            vec![(3, 40)],
            "every truncation is written"
        );
    }

    #[test]
    fn a_damaged_file_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["1\n0\n", "0\n2\n1 0\n", "0\n1\n1 x\n", "0\n1\n-3 4\n", "\u{0}\u{ff}"] {
            std::fs::write(dir.path().join(LEADER_EPOCH_CHECKPOINT), text).unwrap();
            let c = LeaderEpochCache::open(dir.path()).unwrap();
            assert!(c.entries().is_empty(), "{text:?}");
        }
    }
}
