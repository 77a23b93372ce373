//! Committed offsets, the `OffsetMetadataManager` half of the group
//! coordinator: OffsetCommit and TxnOffsetCommit (durable before they are
//! answered), the offsets of transactions that have not ended (applied at
//! their COMMIT marker, dropped at ABORT), OffsetFetch, OffsetDelete, and
//! the expiry of an empty group's offsets after `offsets.retention.minutes`.
//!
//! A group's committed offsets live in its [`Group`] (`Group::offsets`),
//! behind the group's lock, beside the members a commit is validated against
//! and the state their expiry depends on; this module is the code that reads
//! and writes them. Locking is the parent's: short `std::sync::Mutex`
//! sections, no `.await` under a lock.
//!
//! [`Group`]: crate::group::group::Group

use std::collections::HashMap;
use std::sync::PoisonError;

use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;

use super::{lock, GroupCoordinator, GroupRef};
use crate::group::group::Group;
use crate::group::records::{self, LogEntry, OffsetAndMetadata};
use crate::group::state::GroupState;
use crate::group::store::{LogRecord, PendingTxnOffsets, StoreError};

/// Committed offsets of one topic: (partition, offset or `None`).
pub type TopicOffsets = (String, Vec<(i32, Option<OffsetAndMetadata>)>);

/// One offset committed in a transaction that has not ended.
#[derive(Debug, Clone)]
pub(super) struct PendingTxnOffset {
    group: String,
    topic: String,
    partition: i32,
    offset: OffsetAndMetadata,
}

impl PendingTxnOffset {
    /// The pending offset a replayed entry is (`None` for a tombstone or group record).
    fn of(entry: &LogEntry) -> Option<Self> {
        match entry {
            LogEntry::Offset { group, topic, partition, value: Some(offset) } => Some(Self {
                group: group.clone(),
                topic: topic.clone(),
                partition: *partition,
                offset: offset.clone(),
            }),
            _ => None,
        }
    }
}

impl GroupCoordinator {
    /// Takes the offsets of the transactions the replayed log left open as
    /// pending, until their markers.
    pub(super) fn restore_pending_txn(&self, pending: &PendingTxnOffsets) {
        let open: HashMap<i64, Vec<PendingTxnOffset>> = pending
            .iter()
            .map(|(pid, entries)| (*pid, entries.iter().filter_map(PendingTxnOffset::of).collect()))
            .collect();
        if !open.is_empty() {
            tracing::info!(
                producers = open.len(),
                "transactional offset commits awaiting their markers"
            );
        }
        *self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner) = open;
    }

    /// The group an (transactional) offset commit goes to, once the member
    /// may commit: created for a commit that names no member.
    fn group_for_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        transactional: bool,
    ) -> Result<GroupRef, ResponseError> {
        self.check_active()?;
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let g = if member_id.is_empty() && generation < 0 {
            self.group_or_create(group_id)
        } else {
            self.group(group_id).ok_or(ResponseError::IllegalGeneration)?
        };
        lock(&g).validate_commit(member_id, instance_id, generation, transactional)?;
        Ok(g)
    }

    /// OffsetCommit of already-validated partitions; waits until they are durable.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, OffsetAndMetadata)>,
    ) -> Result<(), ResponseError> {
        let g = self.group_for_commit(group_id, member_id, instance_id, generation, false)?;
        if offsets.is_empty() {
            return Ok(());
        }
        let records = offset_records(group_id, &offsets);
        self.write_then_apply(&g, records, move |g| {
            for (t, p, o) in offsets {
                g.offsets.insert((t, p), o);
            }
        })
        .await
    }

    /// TxnOffsetCommit of already-validated partitions: written to the log
    /// as a transactional batch of `producer` (id, epoch), durable when this
    /// returns, and visible to OffsetFetch only once the transaction commits
    /// ([`GroupCoordinator::complete_txn`]). Member and generation are checked
    /// when given (KIP-447), as for OffsetCommit.
    pub async fn txn_commit_offsets(
        &self,
        group_id: &str,
        producer: (i64, i16),
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        offsets: Vec<(String, i32, OffsetAndMetadata)>,
    ) -> Result<(), ResponseError> {
        self.group_for_commit(group_id, member_id, instance_id, generation, true)?;
        if offsets.is_empty() {
            return Ok(());
        }
        let records = offset_records(group_id, &offsets);
        let (tx, rx) = oneshot::channel();
        self.store.append_transactional(
            records,
            producer,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        match rx.await {
            Ok(Ok(())) => {
                let mut pending = self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner);
                let entries = pending.entry(producer.0).or_default();
                entries.extend(offsets.into_iter().map(|(topic, partition, offset)| {
                    PendingTxnOffset { group: group_id.to_string(), topic, partition, offset }
                }));
                Ok(())
            }
            Ok(Err(e)) => Err(e.response_error()),
            Err(_) => Err(ResponseError::UnknownServerError),
        }
    }

    /// Writes the transaction marker of `producer_id` to `__consumer_offsets`
    /// and, on COMMIT, makes its pending offsets the group's committed ones
    /// (on ABORT they are dropped). Blocking: the transaction coordinator's
    /// marker writer calls it off the request workers.
    ///
    /// # Errors
    /// What the log write reported.
    pub fn complete_txn(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
    ) -> Result<(), StoreError> {
        self.complete_txn_at(
            producer_id,
            producer_epoch,
            commit,
            crate::transaction::COORDINATOR_EPOCH,
        )
    }

    /// [`GroupCoordinator::complete_txn`] for a marker of the transaction
    /// coordinator at `coordinator_epoch` (in a cluster, the leader epoch of its
    /// `__transaction_state` partition; an older coordinator's markers are fenced).
    ///
    /// # Errors
    /// NOT_COORDINATOR-like [`StoreError::NotCoordinator`] when this broker does not
    /// coordinate groups; what the log write reported.
    pub fn complete_txn_at(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<(), StoreError> {
        if let Err(e) = self.check_active() {
            return Err(match e {
                ResponseError::NotCoordinator => {
                    StoreError::NotCoordinator("this broker does not coordinate groups now".into())
                }
                e => {
                    StoreError::NotReplicated(format!("the group coordinator is not ready: {e:?}"))
                }
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        self.store.marker(
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        rx.recv()
            .unwrap_or_else(|_| Err(StoreError::Storage("the writer thread is gone".into())))?;
        let entries = self
            .pending_txn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&producer_id)
            .unwrap_or_default();
        if commit {
            for e in entries {
                let g = self.group_or_create(&e.group);
                lock(&g).offsets.insert((e.topic, e.partition), e.offset);
            }
        }
        Ok(())
    }

    /// Whether `group_id` has an offset for `topic`-`partition` committed in
    /// a transaction that has not ended (OffsetFetch with `require_stable`
    /// answers UNSTABLE_OFFSET_COMMIT for it, KIP-447).
    pub fn has_pending_txn_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let pending = self.pending_txn.lock().unwrap_or_else(PoisonError::into_inner);
        pending
            .values()
            .flatten()
            .any(|e| e.group == group_id && e.topic == topic && e.partition == partition)
    }

    /// OffsetFetch: `topics` `None` means every committed partition.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<TopicOffsets>, ResponseError> {
        self.check_active()?;
        let g = self.group(group_id);
        let g = g.as_ref().map(|g| lock(g));
        let lookup =
            |t: &str, p: i32| g.as_ref().and_then(|g| g.offsets.get(&(t.to_string(), p)).cloned());
        Ok(match topics {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let found = parts.iter().map(|&p| (p, lookup(&t, p))).collect();
                    (t, found)
                })
                .collect(),
            None => {
                let mut by_topic: std::collections::BTreeMap<
                    String,
                    Vec<(i32, Option<OffsetAndMetadata>)>,
                > = Default::default();
                if let Some(g) = &g {
                    for ((t, p), o) in &g.offsets {
                        by_topic.entry(t.clone()).or_default().push((*p, Some(o.clone())));
                    }
                }
                by_topic
                    .into_iter()
                    .map(|(t, mut parts)| {
                        parts.sort_by_key(|(p, _)| *p);
                        (t, parts)
                    })
                    .collect()
            }
        })
    }

    /// OffsetDelete: per-partition results, or a group-level error.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<Option<ResponseError>>, ResponseError> {
        self.check_active()?;
        let g = self.group(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let (results, tombstones) = {
            let guard = lock(&g);
            let subscribed = guard.subscribed_topics();
            let mut results = Vec::with_capacity(partitions.len());
            let mut tombstones = Vec::new();
            for (t, p) in &partitions {
                if subscribed.as_ref().is_none_or(|s| s.contains(t)) && guard.member_count() > 0 {
                    results.push(Some(ResponseError::GroupSubscribedToTopic));
                } else {
                    results.push(None);
                    if guard.offsets.contains_key(&(t.clone(), *p)) {
                        tombstones.push((t.clone(), *p));
                    }
                }
            }
            (results, tombstones)
        };
        if !tombstones.is_empty() {
            self.write_tombstones(&g, group_id, tombstones, false).await?;
        }
        Ok(results)
    }

    /// Writes offset tombstones (and the group's, if `group_too`), then forgets them.
    pub(super) async fn write_tombstones(
        &self,
        g: &GroupRef,
        group_id: &str,
        offsets: Vec<(String, i32)>,
        group_too: bool,
    ) -> Result<(), ResponseError> {
        let mut records: Vec<LogRecord> =
            offsets.iter().map(|(t, p)| (records::offset_key(group_id, t, *p), None)).collect();
        if group_too {
            records.push((records::group_key(group_id), None));
        }
        self.write_then_apply(g, records, move |g| {
            for k in offsets {
                g.offsets.remove(&k);
            }
        })
        .await
    }

    /// Appends `records` to `__consumer_offsets` and, once they are durable,
    /// applies `apply` to group `g` on the writer thread (in log order, so
    /// memory always matches what a replay rebuilds); waits for both.
    async fn write_then_apply(
        &self,
        g: &GroupRef,
        records: Vec<LogRecord>,
        apply: impl FnOnce(&mut Group) + Send + 'static,
    ) -> Result<(), ResponseError> {
        let (tx, rx) = oneshot::channel();
        let target = g.clone();
        self.store.append(
            records,
            Box::new(move |result| {
                if result.is_ok() {
                    apply(&mut lock(&target));
                }
                let _ = tx.send(result);
            }),
        );
        match rx.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.response_error()),
            Err(_) => Err(ResponseError::UnknownServerError),
        }
    }

    /// OffsetFetch v9+ from a consumer group member: Kafka checks its member id and epoch.
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: &str,
        epoch: i32,
    ) -> Result<(), ResponseError> {
        let Some(g) = self.group(group_id) else { return Ok(()) };
        let g = lock(&g);
        match &g.consumer {
            Some(c) => c.validate_offset_request(member_id, epoch),
            None => Ok(()),
        }
    }

    /// Expires offsets of Empty groups older than `offsets.retention.minutes`
    /// (counted from the later of the commit and the group becoming empty),
    /// writing tombstones; removes empty groups left without offsets.
    pub fn expire_offsets(&self, now_ms: i64) {
        let retention_ms = self.config.offsets_retention.as_millis() as i64;
        let groups: Vec<GroupRef> = self.groups_read().values().cloned().collect();
        for g in groups {
            let mut guard = lock(&g);
            if guard.state() != GroupState::Empty
                || guard.has_pending_members()
                || guard.member_count() > 0
            {
                continue;
            }
            let since = guard.state_since_ms;
            let expired: Vec<(String, i32)> = guard
                .offsets
                .iter()
                .filter(|(_, o)| now_ms - o.commit_timestamp.max(since) >= retention_ms)
                .map(|(k, _)| k.clone())
                .collect();
            let mut records: Vec<LogRecord> = expired
                .iter()
                .map(|(t, p)| (records::offset_key(guard.id(), t, *p), None))
                .collect();
            for k in &expired {
                guard.offsets.remove(k);
            }
            let remove_group = guard.offsets.is_empty();
            if remove_group {
                if guard.persisted {
                    records.push((records::group_key(guard.id()), None));
                }
                guard.mark_dead();
                self.groups_write().remove(guard.id());
            }
            if !expired.is_empty() {
                tracing::info!(
                    group = guard.id(),
                    partitions = expired.len(),
                    "expired committed offsets"
                );
            }
            if !records.is_empty() {
                self.store.append(records, Box::new(|_| {}));
            }
        }
    }
}

/// The `__consumer_offsets` records committing `offsets` for `group_id`.
fn offset_records(group_id: &str, offsets: &[(String, i32, OffsetAndMetadata)]) -> Vec<LogRecord> {
    offsets
        .iter()
        .map(|(t, p, o)| (records::offset_key(group_id, t, *p), Some(records::offset_value(o))))
        .collect()
}
