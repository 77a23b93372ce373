//! `ProducerIdManager`: hands out producer ids for InitProducerId, unique
//! across restarts, and bumps epochs (KIP-360).
//!
//! Ids are reserved in blocks of [`PRODUCER_ID_BLOCK_SIZE`], as Kafka's
//! `ProducerIdManager` does: before the first id of a block is handed out,
//! `DATA_DIR/producer-id-block` is replaced atomically (and durably) with the
//! block's end. After a restart (or a crash) allocation resumes at that end,
//! so an id is never handed out twice; at most one block is skipped.
//!
//! # File layout (`producer-id-block`, text)
//! ```text
//! # Written by Floe
//! version=1
//! block.end=2000
//! ```
//! `block.end`: every id below it may have been handed out.
//!
//! In a cluster, ids must be unique across brokers: [`ProducerIdManager::set_block_source`]
//! makes blocks come from the cluster's metadata store instead of the file (Kafka's
//! controller-allocated blocks, KIP-730). An id this broker did not hand out is then
//! answered with a new id, as Kafka answers every idempotent InitProducerId.
//!
//! # Thread-safety
//! `Send + Sync`: a `std::sync::Mutex` guards the counter. The block write
//! (an fsynced file replacement, once per 1000 ids) happens under it, so call
//! [`ProducerIdManager::init_producer_id`] off the request runtime's workers.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::atomic_file::write_atomically;
use crate::error::{IoContext, Result, StorageError};
use crate::file_names::PRODUCER_ID_BLOCK;

/// Producer ids reserved per write of the block file.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

#[derive(Debug)]
struct IdState {
    /// The next id to hand out.
    next: i64,
    /// Ids below it are reserved in the block file.
    block_end: i64,
    /// Epochs handed out since start by epoch bumps: producer id → (current, previous).
    epochs: HashMap<i64, (i16, i16)>,
    /// In a cluster: the blocks this broker took from the source since start.
    own_blocks: Vec<(i64, i64)>,
}

/// Reserves `size` producer ids cluster-wide and returns the first (blocking: called
/// off the async workers), or says why it could not.
pub type ProducerIdBlockSource = Box<dyn Fn(i64) -> std::result::Result<i64, String> + Send + Sync>;

/// The producer id allocator of one data directory.
pub struct ProducerIdManager {
    path: PathBuf,
    state: Mutex<IdState>,
    source: std::sync::OnceLock<ProducerIdBlockSource>,
}

impl std::fmt::Debug for ProducerIdManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerIdManager")
            .field("path", &self.path)
            .field("clustered", &self.source.get().is_some())
            .finish()
    }
}

impl ProducerIdManager {
    /// Opens the allocator of `data_dir` (no file yet: ids start at 0).
    ///
    /// # Errors
    /// [`StorageError::Io`] if the file cannot be read; [`StorageError::Corrupt`] if it does not parse.
    pub fn open(data_dir: &Path) -> Result<Self> {
        let path = data_dir.join(PRODUCER_ID_BLOCK);
        let block_end = match fs::read_to_string(&path) {
            Ok(text) => text
                .lines()
                .find_map(|l| l.strip_prefix("block.end="))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|&v| v >= 0)
                .ok_or_else(|| StorageError::Corrupt {
                    path: path.clone(),
                    reason: "no valid block.end".into(),
                })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e).ctx("read", &path),
        };
        Ok(Self {
            path,
            state: Mutex::new(IdState {
                next: block_end,
                block_end,
                epochs: HashMap::new(),
                own_blocks: Vec::new(),
            }),
            source: std::sync::OnceLock::new(),
        })
    }

    /// Takes blocks from `source` (the cluster's metadata store) from now on, instead
    /// of the data directory's file. Set once, at startup; later calls are ignored.
    pub fn set_block_source(&self, source: ProducerIdBlockSource) {
        let _ = self.source.set(source);
        // Whatever was reserved locally is not the cluster's: start a new block.
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.block_end = st.next;
    }

    fn generate(&self, st: &mut IdState) -> Result<i64> {
        if st.next >= st.block_end {
            if let Some(source) = self.source.get() {
                let start = source(PRODUCER_ID_BLOCK_SIZE)
                    .map_err(|reason| StorageError::ProducerIdBlock { reason })?;
                st.next = start;
                st.block_end = start + PRODUCER_ID_BLOCK_SIZE;
                st.own_blocks.push((start, st.block_end));
                return self.generate(st);
            }
            let end = st.next + PRODUCER_ID_BLOCK_SIZE;
            let text = format!("# Written by Floe\nversion=1\nblock.end={end}\n");
            write_atomically(&self.path, text.as_bytes())?;
            st.block_end = end;
        }
        let id = st.next;
        st.next += 1;
        Ok(id)
    }

    /// InitProducerId for an idempotent (non-transactional) producer: with
    /// `producer_id` -1, a new id at epoch 0; with the id and epoch a producer
    /// holds (KIP-360), the same id at the next epoch — or a new id at epoch 0
    /// when the epoch is exhausted. A retry of a bump that was already granted
    /// (the previous epoch) gets the current epoch again.
    ///
    /// # Errors
    /// [`StorageError::InvalidProducerIdMapping`] for an id never handed out;
    /// [`StorageError::InvalidProducerEpoch`] for an epoch older than one already
    /// granted since start; [`StorageError::Io`] if the block file cannot be written.
    pub fn init_producer_id(&self, producer_id: i64, epoch: i16) -> Result<(i64, i16)> {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if producer_id < 0 {
            return Ok((self.generate(&mut st)?, 0));
        }
        let own = st.own_blocks.iter().any(|&(start, end)| (start..end).contains(&producer_id));
        if self.source.get().is_some() && !own {
            // An id another broker may have handed out: a new one, as Kafka does.
            return Ok((self.generate(&mut st)?, 0));
        }
        if producer_id >= st.next || epoch < 0 {
            return Err(StorageError::InvalidProducerIdMapping { producer_id });
        }
        if let Some(&(current, previous)) = st.epochs.get(&producer_id) {
            if epoch == previous && epoch != current {
                return Ok((producer_id, current));
            }
            if epoch != current {
                return Err(StorageError::InvalidProducerEpoch {
                    producer_id,
                    epoch,
                    current_epoch: current,
                });
            }
        }
        if epoch >= i16::MAX - 1 {
            st.epochs.remove(&producer_id);
            return Ok((self.generate(&mut st)?, 0));
        }
        st.epochs.insert(producer_id, (epoch + 1, epoch));
        Ok((producer_id, epoch + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_blocks_come_from_the_source_and_foreign_ids_get_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let m = ProducerIdManager::open(dir.path()).unwrap();
        assert_eq!(m.init_producer_id(-1, -1).unwrap(), (0, 0));
        let next = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(5_000));
        let counter = next.clone();
        m.set_block_source(Box::new(move |n| {
            Ok(counter.fetch_add(n, std::sync::atomic::Ordering::SeqCst))
        }));
        assert_eq!(m.init_producer_id(-1, -1).unwrap(), (5_000, 0));
        assert_eq!(m.init_producer_id(5_000, 0).unwrap(), (5_000, 1), "its own ids bump");
        assert_eq!(m.init_producer_id(7_777, 3).unwrap(), (5_001, 0), "a foreign id: a new one");
        for _ in 0..1_000 {
            m.init_producer_id(-1, -1).unwrap();
        }
        assert_eq!(m.init_producer_id(-1, -1).unwrap().0, 6_002, "the next block from the source");
        assert!(
            !fs::read_to_string(dir.path().join(PRODUCER_ID_BLOCK))
                .unwrap()
                .contains("block.end=6"),
            "no local file block"
        );
        let failing = ProducerIdManager::open(tempfile::tempdir().unwrap().path()).unwrap();
        failing.set_block_source(Box::new(|_| Err("etcd unreachable".into())));
        assert!(matches!(
            failing.init_producer_id(-1, -1),
            Err(StorageError::ProducerIdBlock { .. })
        ));
    }

    #[test]
    fn ids_are_unique_across_reopen_and_epochs_bump() {
        let dir = tempfile::tempdir().unwrap();
        let m = ProducerIdManager::open(dir.path()).unwrap();
        assert_eq!(m.init_producer_id(-1, -1).unwrap(), (0, 0));
        assert_eq!(m.init_producer_id(-1, -1).unwrap(), (1, 0));
        assert_eq!(m.init_producer_id(1, 0).unwrap(), (1, 1));
        assert_eq!(m.init_producer_id(1, 0).unwrap(), (1, 1), "a retried bump");
        assert_eq!(m.init_producer_id(1, 1).unwrap(), (1, 2));
        assert!(matches!(
            m.init_producer_id(1, 0),
            Err(StorageError::InvalidProducerEpoch { current_epoch: 2, .. })
        ));
        assert!(matches!(
            m.init_producer_id(5, 0),
            Err(StorageError::InvalidProducerIdMapping { producer_id: 5 })
        ));
        assert_eq!(m.init_producer_id(0, i16::MAX - 1).unwrap(), (2, 0), "epoch exhausted");
        drop(m);
        let text = fs::read_to_string(dir.path().join(PRODUCER_ID_BLOCK)).unwrap();
        assert!(text.contains("block.end=1000"), "{text}");
        let m = ProducerIdManager::open(dir.path()).unwrap();
        assert_eq!(m.init_producer_id(-1, -1).unwrap(), (1000, 0));
        assert_eq!(m.init_producer_id(1, 2).unwrap(), (1, 3), "ids of an earlier run can bump");
        for i in 1001..2001 {
            assert_eq!(m.init_producer_id(-1, -1).unwrap().0, i);
        }
        let text = fs::read_to_string(dir.path().join(PRODUCER_ID_BLOCK)).unwrap();
        assert!(text.contains("block.end=3000"), "{text}");
        fs::write(dir.path().join(PRODUCER_ID_BLOCK), "junk").unwrap();
        assert!(matches!(ProducerIdManager::open(dir.path()), Err(StorageError::Corrupt { .. })));
    }
}
