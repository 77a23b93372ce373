//! The coordinator against a real `__consumer_offsets` log: offsets and
//! groups surviving a reopen, transactional offsets, expiry, compaction.

use floe_storage::LogConfig;

use super::*;
use crate::group::records::OffsetAndMetadata;

fn open(dir: &std::path::Path) -> (Arc<LogManager>, Arc<GroupCoordinator>) {
    let logs = Arc::new(
        LogManager::open_with_node_id(dir, Some(1), LogConfig::default()).expect("open logs"),
    );
    if logs.topic("t").is_none() {
        logs.create_topic("t", 3, Default::default()).expect("create t");
    }
    let c = Arc::new(
        GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("coordinator"),
    );
    (logs, c)
}

fn offset(o: i64, ts: i64) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset: o,
        leader_epoch: 0,
        metadata: format!("m{o}"),
        commit_timestamp: ts,
    }
}

fn all(c: &GroupCoordinator, group: &str) -> Vec<TopicOffsets> {
    c.fetch_offsets(group, None).expect("fetch")
}

/// TxnOffsetCommit: pending until the marker, applied at COMMIT, dropped at ABORT,
/// and an open transaction's offsets are still pending after a reopen (replay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_apply_at_their_commit_marker_and_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = wall_ms();
    let committed = |c: &GroupCoordinator, p: i32| {
        c.fetch_offsets("g", Some(vec![("t".into(), vec![p])])).expect("fetch")[0].1[0]
            .1
            .as_ref()
            .map(|o| o.offset)
    };
    {
        let (_logs, c) = open(dir.path());
        c.load().await.expect("load");
        c.commit_offsets("g", "", None, -1, vec![("t".into(), 0, offset(1, now))])
            .await
            .expect("plain commit");
        c.txn_commit_offsets("g", (10, 0), "", None, -1, vec![("t".into(), 0, offset(5, now))])
            .await
            .expect("txn commit");
        c.txn_commit_offsets("g", (10, 0), "", None, -1, vec![("t".into(), 1, offset(6, now))])
            .await
            .expect("txn commit 2");
        c.txn_commit_offsets("g", (11, 0), "", None, -1, vec![("t".into(), 2, offset(9, now))])
            .await
            .expect("other txn");
        assert_eq!(committed(&c, 0), Some(1), "pending offsets are not visible");
        assert!(c.has_pending_txn_offset("g", "t", 0));
        let c2 = c.clone();
        tokio::task::spawn_blocking(move || c2.complete_txn(10, 0, true))
            .await
            .expect("join")
            .expect("commit marker");
        assert_eq!((committed(&c, 0), committed(&c, 1)), (Some(5), Some(6)));
        assert!(!c.has_pending_txn_offset("g", "t", 0));
        assert!(c.has_pending_txn_offset("g", "t", 2), "producer 11's transaction is still open");
    }
    let (_logs, c) = open(dir.path());
    c.load().await.expect("reload");
    assert_eq!((committed(&c, 0), committed(&c, 1), committed(&c, 2)), (Some(5), Some(6), None));
    assert!(
        c.has_pending_txn_offset("g", "t", 2),
        "the open transaction's offsets are pending again"
    );
    let c2 = c.clone();
    tokio::task::spawn_blocking(move || c2.complete_txn(11, 0, false))
        .await
        .expect("join")
        .expect("abort marker");
    assert_eq!(committed(&c, 2), None, "aborted offsets vanish");
    assert!(!c.has_pending_txn_offset("g", "t", 2));
}

#[tokio::test]
async fn offsets_and_groups_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before;
    let member;
    {
        let (logs, c) = open(dir.path());
        assert_eq!(c.check_active(), Err(ResponseError::CoordinatorLoadInProgress));
        assert!(c
            .commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(1, 5))])
            .await
            .is_err());
        c.load().await.expect("load");
        let now = wall_ms();
        c.commit_offsets(
            "a",
            "",
            None,
            -1,
            vec![("t".into(), 0, offset(1, now)), ("t".into(), 1, offset(2, now))],
        )
        .await
        .expect("commit");
        c.commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(7, now))])
            .await
            .expect("recommit");
        c.commit_offsets("b", "", None, -1, vec![("t".into(), 2, offset(3, now))])
            .await
            .expect("commit b");
        c.commit_offsets("gone", "", None, -1, vec![("t".into(), 2, offset(3, now))])
            .await
            .expect("commit gone");
        assert_eq!(c.delete_offsets("b", vec![("t".into(), 2)]).await, Ok(vec![None]));
        c.delete_group("gone").await.expect("delete group");
        // A consumer group that reached Stable: its metadata is persisted too.
        let req = JoinRequest {
            member_id: String::new(),
            instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
            require_known_member_id: false,
        };
        let mut cfg = c.config.clone();
        cfg.group.initial_rebalance_delay = Duration::ZERO;
        let c0 = Arc::new(GroupCoordinator {
            config: cfg,
            ..GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("c")
        });
        c0.status.store(ACTIVE, Ordering::Release);
        let j = c0.join("s", req).await;
        let assignment = vec![(j.member_id.clone(), Bytes::from_static(b"t-1"))];
        let s = c0.sync("s", &j.member_id, None, j.generation, None, None, assignment).await;
        assert_eq!((j.error, s.error), (None, None));
        c0.commit_offsets(
            "s",
            &j.member_id,
            None,
            j.generation,
            vec![("t".into(), 1, offset(9, now))],
        )
        .await
        .expect("member commit");
        member = (j.member_id.clone(), j.generation);
        drop(c0);
        before = (all(&c, "a"), all(&c, "b"));
        assert_eq!(before.0.len(), 1);
        assert_eq!(
            before.0[0]
                .1
                .iter()
                .map(|(p, o)| (*p, o.as_ref().map(|o| o.offset)))
                .collect::<Vec<_>>(),
            vec![(0, Some(7)), (1, Some(2))]
        );
        assert!(before.1.is_empty());
        logs.shutdown().expect("shutdown");
    }
    let (_logs, c) = open(dir.path());
    c.load().await.expect("reload");
    assert_eq!((all(&c, "a"), all(&c, "b")), before);
    assert!(all(&c, "gone").is_empty());
    let listed: Vec<String> =
        c.list_groups().expect("list").into_iter().map(|g| g.group_id).collect();
    assert_eq!(listed, vec!["a", "b", "s"]);
    // The Stable group comes back Stable, with its member and the member's assignment.
    let s = c.describe_group("s").expect("describe").expect("s exists");
    assert_eq!(
        (s.state, s.protocol_type.as_str(), s.protocol.as_str()),
        (GroupState::Stable, "consumer", "range")
    );
    assert_eq!(
        s.members
            .iter()
            .map(|m| (m.member_id.as_str(), m.client_id.as_str(), m.assignment.clone()))
            .collect::<Vec<_>>(),
        vec![(member.0.as_str(), "c", Bytes::from_static(b"t-1"))]
    );
    assert_eq!(all(&c, "s")[0].1[0].1.as_ref().map(|o| o.offset), Some(9));
    // The member goes on in its generation: heartbeats, SyncGroup and commits, no rebalance.
    assert_eq!(c.heartbeat("s", &member.0, None, member.1), None);
    let synced = c.sync("s", &member.0, None, member.1, None, None, vec![]).await;
    assert_eq!((synced.error, synced.assignment), (None, Bytes::from_static(b"t-1")));
    c.commit_offsets("s", &member.0, None, member.1, vec![("t".into(), 1, offset(10, wall_ms()))])
        .await
        .expect("commit after load");
    // Anyone else is unknown, and the member's old generation is illegal.
    assert_eq!(
        c.heartbeat("s", "old-member", None, member.1),
        Some(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        c.heartbeat("s", &member.0, None, member.1 - 1),
        Some(ResponseError::IllegalGeneration)
    );
}

#[tokio::test]
async fn offsets_of_empty_groups_expire_with_tombstones() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (logs, c) = open(dir.path());
        c.load().await.expect("load");
        let now = wall_ms();
        c.commit_offsets("old", "", None, -1, vec![("t".into(), 0, offset(1, now - 1000))])
            .await
            .expect("commit");
        c.commit_offsets("new", "", None, -1, vec![("t".into(), 0, offset(1, now + 10_000_000))])
            .await
            .expect("commit");
        c.expire_offsets(now + c.config.offsets_retention.as_millis() as i64 + 60_000);
        assert!(all(&c, "old").is_empty());
        assert_eq!(all(&c, "new").len(), 1);
        let listed: Vec<String> =
            c.list_groups().expect("list").into_iter().map(|g| g.group_id).collect();
        assert_eq!(listed, vec!["new"]);
        // Let the writer thread persist the tombstones.
        c.commit_offsets("sync", "", None, -1, vec![("t".into(), 0, offset(1, now))])
            .await
            .expect("barrier");
        logs.shutdown().expect("shutdown");
    }
    let (_logs, c) = open(dir.path());
    c.load().await.expect("reload");
    assert!(all(&c, "old").is_empty());
    assert_eq!(all(&c, "new").len(), 1);
}

/// Queues `n` commits of t-0 for `group` straight to the store (grouped
/// writes, not one fsync each), then one commit through the coordinator as a barrier.
async fn commit_many(c: &GroupCoordinator, group: &str, n: i64) {
    let now = wall_ms();
    for i in 0..n {
        let rec =
            (records::offset_key(group, "t", 0), Some(records::offset_value(&offset(i, now))));
        c.store.append(vec![rec], Box::new(|_| {}));
    }
    c.commit_offsets(group, "", None, -1, vec![("t".into(), 0, offset(n, now))])
        .await
        .expect("barrier");
}

fn offsets_log(logs: &LogManager) -> Arc<floe_storage::PartitionLog> {
    logs.partition(store::OFFSETS_TOPIC, 0).expect("offsets log")
}

/// A state with offsets, a tombstoned offset, a deleted group and group metadata.
async fn varied_state(c: &GroupCoordinator) {
    let now = wall_ms();
    commit_many(c, "a", 10_000).await;
    c.commit_offsets("a", "", None, -1, vec![("t".into(), 1, offset(2, now))]).await.expect("a-1");
    c.commit_offsets(
        "b",
        "",
        None,
        -1,
        vec![("t".into(), 2, offset(3, now)), ("t".into(), 1, offset(4, now))],
    )
    .await
    .expect("b");
    assert_eq!(c.delete_offsets("b", vec![("t".into(), 2)]).await, Ok(vec![None]));
    c.commit_offsets("gone", "", None, -1, vec![("t".into(), 2, offset(3, now))])
        .await
        .expect("gone");
    c.delete_group("gone").await.expect("delete gone");
    let meta = records::GroupMetadata {
        protocol_type: "consumer".into(),
        generation: 4,
        ..Default::default()
    };
    let (tx, rx) = oneshot::channel();
    c.store.append(
        vec![(records::group_key("m"), Some(records::group_value(&meta)))],
        Box::new(move |r| {
            let _ = tx.send(r);
        }),
    );
    rx.await.expect("written").expect("group m");
}

/// Writes [`varied_state`] and returns what a reload of it holds.
async fn written_and_reloaded(dir: &std::path::Path) -> Vec<(String, Vec<TopicOffsets>)> {
    {
        let (logs, c) = open(dir);
        c.load().await.expect("load");
        varied_state(&c).await;
        logs.shutdown().expect("shutdown");
    }
    let (logs, c) = open(dir);
    c.load().await.expect("reload");
    let state = snapshot(&c);
    logs.shutdown().expect("shutdown");
    assert_eq!(
        state.iter().map(|(g, _)| g.as_str()).collect::<Vec<_>>(),
        vec!["a", "b", "m"],
        "gone was deleted"
    );
    state
}

fn snapshot(c: &GroupCoordinator) -> Vec<(String, Vec<TopicOffsets>)> {
    let mut groups: Vec<String> =
        c.list_groups().expect("list").into_iter().map(|g| g.group_id).collect();
    groups.sort();
    groups.into_iter().map(|g| (g.clone(), all(c, &g))).collect()
}

#[tokio::test]
async fn compaction_shrinks_the_log_and_keeps_the_live_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = written_and_reloaded(dir.path()).await;
    {
        let (logs, c) = open(dir.path());
        c.load().await.expect("load");
        let log = offsets_log(&logs);
        let (size, end) = (log.size_bytes(), log.log_end_offset());
        assert!(end > 10_000);
        let done = c.compact_offsets_log().await.expect("compact").expect("loaded");
        // a-0, a-1, b-1, m's metadata.
        assert_eq!(done.live_records, 4);
        assert_eq!(log.log_start_offset(), end);
        assert_eq!(log.log_end_offset(), end + 4);
        assert!(log.size_bytes() < size / 50, "{} bytes left of {size}", log.size_bytes());
        assert_eq!(log.segment_count(), 1);
        assert_eq!(snapshot(&c), before);
        logs.shutdown().expect("shutdown");
    }
    let (logs, c) = open(dir.path());
    c.load().await.expect("reload");
    assert_eq!(snapshot(&c), before);
    assert_eq!(all(&c, "a")[0].1[0].1.as_ref().map(|o| o.offset), Some(10_000));
    // Compacting a compacted log changes nothing; writes continue after it.
    c.compact_offsets_log().await.expect("again");
    c.commit_offsets("a", "", None, -1, vec![("t".into(), 0, offset(77, wall_ms()))])
        .await
        .expect("after");
    drop(c);
    let c = Arc::new(
        GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("coordinator"),
    );
    c.load().await.expect("reload");
    assert_eq!(all(&c, "a")[0].1[0].1.as_ref().map(|o| o.offset), Some(77));
}

/// A crash between the re-append and the delete, and one after the delete
/// but before the log start offset checkpoint: replay gives the same state.
#[tokio::test]
async fn a_crash_during_compaction_replays_to_the_same_state() {
    for delete in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let before = written_and_reloaded(dir.path()).await;
        {
            let (logs, c) = open(dir.path());
            c.load().await.expect("load");
            // Build the live state as a replay would, then stop where the crash happens.
            let mut live = LiveRecords::default();
            store::replay(&offsets_log(&logs), |e| live.apply(&e)).expect("replay");
            store::compact(
                &store::Target { logs: logs.clone(), partition: 0 },
                &crate::replicated::CoordinatorTerm::single(),
                &live,
                delete,
            )
            .expect("compact");
            // No shutdown: no checkpoints are written, as in a crash.
            drop(c);
            drop(logs);
        }
        let (logs, c) = open(dir.path());
        c.load().await.expect("reload");
        assert_eq!(snapshot(&c), before, "delete: {delete}");
        if delete {
            assert_eq!(offsets_log(&logs).segment_count(), 1);
        }
    }
}

/// The writer compacts the log itself only when the topic is not compacted by
/// the log cleaner (an operator set `cleanup.policy=delete`).
#[tokio::test]
async fn the_writer_compacts_on_its_own_when_the_log_outgrows_the_live_state() {
    for policy in ["compact", "delete"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (logs, _) = open(dir.path());
        let config = CoordinatorConfig {
            compaction: CompactionConfig { min_bytes: 64 << 10, dirty_ratio: 2 },
            ..Default::default()
        };
        let c = Arc::new(GroupCoordinator::new(config, logs.clone()).expect("coordinator"));
        c.load().await.expect("load");
        let mut overrides = logs.topic(store::OFFSETS_TOPIC).expect("topic").overrides();
        assert_eq!(
            overrides.get("cleanup.policy").map(String::as_str),
            Some("compact"),
            "created compacted, as Kafka's"
        );
        overrides.insert("cleanup.policy".into(), policy.into());
        logs.alter_topic_config(store::OFFSETS_TOPIC, overrides).expect("alter");
        commit_many(&c, "a", 10_000).await;
        let log = offsets_log(&logs);
        if policy == "delete" {
            assert!(log.log_start_offset() > 0, "never compacted");
            assert!(log.size_bytes() < 200 << 10, "{} bytes", log.size_bytes());
        } else {
            assert_eq!(log.log_start_offset(), 0, "the log cleaner's job, not the writer's");
        }
        assert_eq!(all(&c, "a")[0].1[0].1.as_ref().map(|o| o.offset), Some(10_000));
    }
}

/// `__consumer_offsets` on the log cleaner: the latest commit of every offset
/// and group stays, the log shrinks, and once the tombstones are cleaned away
/// (`delete.retention.ms` passed) a deleted group's offsets and a deleted
/// offset do not come back on reload: every removal tombstoned its own key.
#[tokio::test]
async fn the_log_cleaner_compacts_the_offsets_log_and_deleted_offsets_stay_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = written_and_reloaded(dir.path()).await;
    {
        let (logs, c) = open(dir.path());
        c.load().await.expect("load");
        let mut overrides = logs.topic(store::OFFSETS_TOPIC).expect("topic").overrides();
        overrides.insert("delete.retention.ms".into(), "0".into());
        logs.alter_topic_config(store::OFFSETS_TOPIC, overrides).expect("alter");
        let log = offsets_log(&logs);
        // Seal the segment: the cleaner never touches the active one.
        log.roll_now().expect("roll");
        let size = log.size_bytes();
        let cleaner = floe_storage::LogCleaner::start(
            logs.clone(),
            floe_storage::CleanerConfig { enable: false, ..Default::default() },
        )
        .expect("cleaner");
        // The first pass keeps tombstones and gives them their delete horizon; a later pass drops them.
        assert!(cleaner.clean_once().expect("clean"), "the offsets log was due");
        std::thread::sleep(std::time::Duration::from_millis(20));
        log.roll_now().expect("roll");
        while cleaner.clean_once().expect("clean again") {}
        cleaner.stop();
        assert!(log.size_bytes() < size / 50, "{} bytes left of {size}", log.size_bytes());
        assert_eq!(snapshot(&c), before);
        logs.shutdown().expect("shutdown");
    }
    let (logs, c) = open(dir.path());
    c.load().await.expect("reload");
    assert_eq!(snapshot(&c), before, "the cleaned log replays to the same state");
    // The tombstones themselves are gone: only live records and markers remain.
    let log = offsets_log(&logs);
    let mut tombstones = 0;
    store::replay(&log, |e| {
        if matches!(
            e,
            records::LogEntry::Offset { value: None, .. }
                | records::LogEntry::Group { value: None, .. }
        ) {
            tombstones += 1;
        }
    })
    .expect("replay");
    assert_eq!(tombstones, 0, "tombstones past delete.retention.ms were cleaned away");
}

/// A data directory from before the log cleaner: `__consumer_offsets` exists
/// without `cleanup.policy`; opening it hands it to the cleaner, and an
/// operator's explicit `cleanup.policy=delete` is left alone.
#[tokio::test]
async fn an_offsets_topic_from_before_the_cleaner_becomes_compacted() {
    for (old, now) in [(None, "compact"), (Some("delete"), "delete")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = Arc::new(
            LogManager::open_with_node_id(dir.path(), Some(1), LogConfig::default())
                .expect("open logs"),
        );
        let mut config =
            std::collections::BTreeMap::from([("retention.ms".to_string(), "-1".to_string())]);
        if let Some(policy) = old {
            config.insert("cleanup.policy".into(), policy.into());
        }
        logs.create_topic(store::OFFSETS_TOPIC, 1, config).expect("old topic");
        let c = Arc::new(
            GroupCoordinator::new(CoordinatorConfig::default(), logs.clone()).expect("coordinator"),
        );
        c.load().await.expect("load");
        let overrides = logs.topic(store::OFFSETS_TOPIC).expect("topic").overrides();
        assert_eq!(overrides.get("cleanup.policy").map(String::as_str), Some(now), "was {old:?}");
        assert_eq!(
            overrides.get("retention.ms").map(String::as_str),
            Some("-1"),
            "other settings kept"
        );
    }
}
