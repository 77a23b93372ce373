//! [`GroupCoordinators`](crate::group::GroupCoordinators): the group coordinators of every `__consumer_offsets`
//! partition behind one router — building them (a single broker's, a cluster
//! broker's), loading them, their sweep, and ListGroups over the partitions this
//! broker coordinates.

use std::sync::Arc;

use floe_storage::LogManager;
use kafka_protocol::error::ResponseError;
use tokio::sync::watch;

use super::coordinator::{CoordinatorConfig, GroupCoordinator, ListedGroup, TICK};
use super::store::{self, StoreError, OFFSETS_TOPIC};
use crate::partitioned::{effective_count, Partitioned};
use crate::replicated::ReplicatedWrites;

impl Partitioned<GroupCoordinator> {
    /// A single broker's: creates `__consumer_offsets` with `configured`
    /// (`offsets.topic.num.partitions`) partitions if it does not exist, else keeps
    /// its own count. Blocking. Call [`Self::load_all`] next.
    ///
    /// # Errors
    /// [`StoreError`] if the topic cannot be created or a writer thread started.
    pub fn single(
        config: CoordinatorConfig,
        logs: Arc<LogManager>,
        configured: i32,
    ) -> Result<Self, StoreError> {
        let existing = logs.topic(OFFSETS_TOPIC).map(|t| t.partition_count());
        let count = store::create_log(&logs, effective_count(OFFSETS_TOPIC, configured, existing))?;
        Partitioned::new(
            OFFSETS_TOPIC,
            count,
            Box::new(move |p| {
                Ok(Arc::new(GroupCoordinator::for_partition(config.clone(), logs.clone(), p)?))
            }),
        )
        .map_err(|e| StoreError::Storage(e.to_string()))
    }

    /// A cluster broker's: every partition NOT_COORDINATOR until elected. Keys map with
    /// `configured` partitions until the broker sets the topic's actual count.
    ///
    /// # Errors
    /// If a writer thread cannot be started.
    pub fn replicated(
        config: CoordinatorConfig,
        logs: Arc<LogManager>,
        configured: i32,
        writes: Arc<dyn ReplicatedWrites>,
    ) -> std::io::Result<Self> {
        Partitioned::new(
            OFFSETS_TOPIC,
            configured,
            Box::new(move |p| {
                Ok(Arc::new(GroupCoordinator::replicated(
                    config.clone(),
                    logs.clone(),
                    p,
                    writes.clone(),
                )?))
            }),
        )
    }

    /// Loads every partition (a single broker's startup).
    ///
    /// # Errors
    /// The first partition's [`StoreError`]; the others are loaded all the same.
    pub async fn load_all(&self) -> Result<(), StoreError> {
        let mut result = Ok(());
        for c in self.all() {
            if let Err(e) = c.load().await {
                result = result.and(Err(e));
            }
        }
        result
    }

    /// Starts the sweep of every partition (see [`GroupCoordinator::start`]); on
    /// shutdown every waiting JoinGroup/SyncGroup is answered.
    pub fn start(
        self: &Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => break,
                }
                if *shutdown.borrow() {
                    break;
                }
                this.all().iter().for_each(|c| c.sweep());
            }
            this.all().iter().for_each(|c| c.shutdown());
        })
    }

    /// ListGroups: the groups of every partition this broker coordinates (Kafka's
    /// answer: a client asks every broker). COORDINATOR_LOAD_IN_PROGRESS while any
    /// partition loads, COORDINATOR_NOT_AVAILABLE if one failed to.
    ///
    /// # Errors
    /// As above.
    pub fn list_groups(&self) -> Result<Vec<ListedGroup>, ResponseError> {
        let mut out = Vec::new();
        for c in self.all() {
            match c.list_groups() {
                Ok(groups) => out.extend(groups),
                Err(ResponseError::NotCoordinator) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::records::OffsetAndMetadata;
    use crate::group::GroupCoordinators;
    use crate::partitioned::partition_for;
    use floe_storage::LogConfig;

    fn open(dir: &std::path::Path, configured: i32) -> (Arc<LogManager>, Arc<GroupCoordinators>) {
        let logs = Arc::new(
            LogManager::open_with_node_id(dir, Some(1), LogConfig::default()).expect("open logs"),
        );
        let groups = Arc::new(
            GroupCoordinators::single(CoordinatorConfig::default(), logs.clone(), configured)
                .expect("coordinators"),
        );
        (logs, groups)
    }

    /// Each group's offsets are written to its own partition, and a reopened broker finds
    /// them there, with the topic's count whatever the setting says then.
    #[tokio::test]
    async fn groups_live_in_their_hash_partition() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids: Vec<String> = (0..12).map(|i| format!("group-{i}")).collect();
        {
            let (logs, groups) = open(dir.path(), 4);
            groups.load_all().await.expect("load");
            assert_eq!(logs.topic(OFFSETS_TOPIC).expect("created").partition_count(), 4);
            for (i, id) in ids.iter().enumerate() {
                let o = OffsetAndMetadata {
                    offset: i as i64,
                    leader_epoch: -1,
                    metadata: String::new(),
                    commit_timestamp: 1,
                };
                groups
                    .of(id)
                    .commit_offsets(id, "", None, -1, vec![("t".into(), 0, o)])
                    .await
                    .expect("commit");
                assert_eq!(groups.of(id).partition(), partition_for(id, 4));
            }
            for p in 0..4 {
                let log = logs.partition(OFFSETS_TOPIC, p).expect("partition");
                let expected = ids.iter().filter(|id| partition_for(id, 4) == p).count() as i64;
                assert_eq!(log.log_end_offset(), expected, "partition {p}");
            }
            drop(groups);
            logs.shutdown().expect("shutdown");
        }
        let (_logs, groups) = open(dir.path(), 1);
        groups.load_all().await.expect("reload");
        assert_eq!(groups.partition_count(), 4);
        for (i, id) in ids.iter().enumerate() {
            let found = groups.of(id).fetch_offsets(id, None).expect("fetch");
            assert_eq!(found.len(), 1, "{id}");
            assert_eq!(found[0].1[0].1.as_ref().map(|o| o.offset), Some(i as i64), "{id}");
        }
        assert_eq!(groups.list_groups().expect("list").len(), ids.len());
    }
}
