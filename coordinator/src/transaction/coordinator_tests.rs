//! The coordinator over a real `__transaction_state` log in a temporary
//! data directory; markers go to a recorder standing in for the partitions.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use floe_storage::{LogConfig, LogManager};

use super::*;
use crate::clock::wall_ms;

#[derive(Debug, Default)]
struct RecordedMarkers {
    written: Mutex<Vec<TxnMarker>>,
    fail: AtomicBool,
}

impl TxnMarkerWriter for RecordedMarkers {
    fn write_marker(&self, marker: &TxnMarker) -> Result<(), String> {
        if self.fail.load(Ordering::SeqCst) {
            return Err("partition unavailable".into());
        }
        self.written.lock().unwrap().push(marker.clone());
        Ok(())
    }
}

impl RecordedMarkers {
    fn take(&self) -> Vec<(String, i32, i16, bool)> {
        std::mem::take(&mut *self.written.lock().unwrap())
            .into_iter()
            .map(|m| (m.partition.0, m.partition.1, m.producer_epoch, m.commit))
            .collect()
    }
}

fn open(dir: &std::path::Path, markers: Arc<RecordedMarkers>) -> TransactionCoordinator {
    let logs = Arc::new(LogManager::open(dir, LogConfig::default()).unwrap());
    TransactionCoordinator::open(TransactionConfig::default(), logs, markers).unwrap()
}

fn tp(t: &str, p: i32) -> TopicPartition {
    (t.to_string(), p)
}

#[tokio::test]
async fn commit_writes_a_marker_to_every_partition_and_a_retry_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let markers = Arc::new(RecordedMarkers::default());
    let c = open(dir.path(), markers.clone());
    let (pid, epoch) = c.init_producer_id("app", 60_000, None).await.unwrap();
    assert_eq!(epoch, 0);
    c.add_partitions("app", pid, epoch, &[tp("a", 0), tp("b", 1)], false).await.unwrap();
    c.add_partitions("app", pid, epoch, &[tp("a", 0)], false).await.unwrap();
    assert_eq!(c.describe("app").unwrap().state, TransactionState::Ongoing);
    c.end_txn("app", pid, epoch, true).await.unwrap();
    assert_eq!(markers.take(), vec![("a".into(), 0, 0, true), ("b".into(), 1, 0, true)]);
    assert_eq!(c.describe("app").unwrap().state, TransactionState::CompleteCommit);
    c.end_txn("app", pid, epoch, true).await.expect("a retried commit succeeds");
    assert!(markers.take().is_empty(), "and writes nothing");
    assert!(matches!(
        c.end_txn("app", pid, epoch, false).await,
        Err(TxnError::InvalidTxnState { .. })
    ));
    assert!(matches!(
        c.end_txn("app", pid + 1, epoch, true).await,
        Err(TxnError::InvalidProducerIdMapping { .. })
    ));
    assert!(matches!(
        c.end_txn("nobody", pid, epoch, true).await,
        Err(TxnError::InvalidProducerIdMapping { .. })
    ));
}

#[tokio::test]
async fn a_new_instance_fences_the_old_one_and_aborts_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let markers = Arc::new(RecordedMarkers::default());
    let c = open(dir.path(), markers.clone());
    let (pid, e0) = c.init_producer_id("app", 60_000, None).await.unwrap();
    c.add_partitions("app", pid, e0, &[tp("a", 0)], false).await.unwrap();
    let (pid2, e2) = c.init_producer_id("app", 60_000, None).await.unwrap();
    assert_eq!(pid2, pid);
    assert_eq!(
        markers.take(),
        vec![("a".into(), 0, e0 + 1, false)],
        "aborted under the bumped epoch"
    );
    assert_eq!(e2, e0 + 2);
    assert!(matches!(
        c.add_partitions("app", pid, e0, &[tp("a", 0)], false).await,
        Err(TxnError::ProducerFenced { .. })
    ));
    assert!(matches!(c.end_txn("app", pid, e0, true).await, Err(TxnError::ProducerFenced { .. })));
    // KIP-360: the fenced instance may not take the id back by naming its old epoch.
    assert!(matches!(
        c.init_producer_id("app", 60_000, Some((pid, e0))).await,
        Err(TxnError::ProducerFenced { .. })
    ));
    assert_eq!(c.init_producer_id("app", 60_000, Some((pid, e2))).await.unwrap(), (pid, e2 + 1));
}

#[tokio::test]
async fn a_timed_out_transaction_is_aborted_and_its_producer_fenced() {
    let dir = tempfile::tempdir().unwrap();
    let markers = Arc::new(RecordedMarkers::default());
    let c = open(dir.path(), markers.clone());
    let (pid, epoch) = c.init_producer_id("slow", 100, None).await.unwrap();
    c.add_partitions("slow", pid, epoch, &[tp("a", 0)], false).await.unwrap();
    assert_eq!(c.abort_timed_out(wall_ms()).await, 0, "not yet");
    assert_eq!(c.abort_timed_out(wall_ms() + 1000).await, 1);
    assert_eq!(markers.take(), vec![("a".into(), 0, epoch + 1, false)]);
    assert_eq!(c.describe("slow").unwrap().state, TransactionState::CompleteAbort);
    assert!(matches!(
        c.end_txn("slow", pid, epoch, true).await,
        Err(TxnError::ProducerFenced { .. })
    ));
}

#[tokio::test]
async fn a_decision_survives_a_restart_and_is_completed_then() {
    let dir = tempfile::tempdir().unwrap();
    let markers = Arc::new(RecordedMarkers::default());
    let (pid, epoch) = {
        let c = open(dir.path(), markers.clone());
        let (pid, epoch) = c.init_producer_id("app", 60_000, None).await.unwrap();
        c.add_partitions("app", pid, epoch, &[tp("a", 0), tp("a", 1)], false).await.unwrap();
        markers.fail.store(true, Ordering::SeqCst);
        c.end_txn("app", pid, epoch, true)
            .await
            .expect("the decision is durable; markers are retried");
        assert_eq!(c.describe("app").unwrap().state, TransactionState::PrepareCommit);
        assert!(matches!(
            c.add_partitions("app", pid, epoch, &[tp("a", 0)], false).await,
            Err(TxnError::ConcurrentTransactions(_))
        ));
        (pid, epoch)
    };
    markers.fail.store(false, Ordering::SeqCst);
    let c = open(dir.path(), markers.clone());
    let loaded = c.describe("app").unwrap();
    assert_eq!(
        (loaded.producer_id, loaded.producer_epoch, loaded.state),
        (pid, epoch, TransactionState::PrepareCommit)
    );
    assert_eq!(loaded.partitions, [tp("a", 0), tp("a", 1)].into_iter().collect::<BTreeSet<_>>());
    c.complete_prepared().await;
    assert_eq!(markers.take(), vec![("a".into(), 0, epoch, true), ("a".into(), 1, epoch, true)]);
    assert_eq!(c.describe("app").unwrap().state, TransactionState::CompleteCommit);
    let c = open(dir.path(), markers.clone());
    assert_eq!(
        c.describe("app").unwrap().state,
        TransactionState::CompleteCommit,
        "the completion is durable too"
    );
}

#[tokio::test]
async fn produce_is_verified_against_the_open_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), Arc::new(RecordedMarkers::default()));
    let (pid, epoch) = c.init_producer_id("app", 60_000, None).await.unwrap();
    let run = |p: &TopicPartition, e: i16| c.verify_and_append("app", pid, e, p, || 7);
    assert!(
        matches!(run(&tp("a", 0), epoch), Err(TxnError::InvalidTxnState { .. })),
        "nothing added yet"
    );
    c.add_partitions("app", pid, epoch, &[tp("a", 0)], false).await.unwrap();
    assert_eq!(run(&tp("a", 0), epoch), Ok(7));
    assert!(matches!(run(&tp("a", 1), epoch), Err(TxnError::InvalidTxnState { .. })));
    assert!(matches!(run(&tp("a", 0), epoch - 1), Err(TxnError::ProducerFenced { .. })));
    c.end_txn("app", pid, epoch, false).await.unwrap();
    assert!(
        matches!(run(&tp("a", 0), epoch), Err(TxnError::InvalidTxnState { .. })),
        "not after the end"
    );
}

#[tokio::test]
async fn timeouts_are_bounded_and_idle_ids_expire() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), Arc::new(RecordedMarkers::default()));
    assert!(matches!(
        c.init_producer_id("app", 900_001, None).await,
        Err(TxnError::InvalidTransactionTimeout { .. })
    ));
    assert!(matches!(
        c.init_producer_id("app", 0, None).await,
        Err(TxnError::InvalidTransactionTimeout { .. })
    ));
    c.init_producer_id("idle", 1000, None).await.unwrap();
    let (pid, epoch) = c.init_producer_id("busy", 60_000, None).await.unwrap();
    c.add_partitions("busy", pid, epoch, &[tp("a", 0)], false).await.unwrap();
    let later = wall_ms() + c.config().id_expiration_ms + 1;
    assert_eq!(c.remove_expired(later).await, 1, "only the idle one");
    assert!(c.describe("idle").is_none());
    let listed = c.list(&BTreeSet::new(), &BTreeSet::new());
    assert_eq!(listed.iter().map(|t| t.transactional_id.as_str()).collect::<Vec<_>>(), ["busy"]);
    let ongoing: BTreeSet<_> = [TransactionState::Ongoing].into_iter().collect();
    assert_eq!(c.list(&ongoing, &BTreeSet::new()).len(), 1);
    let c = open(dir.path(), Arc::new(RecordedMarkers::default()));
    assert!(c.describe("idle").is_none(), "the tombstone is durable");
}
