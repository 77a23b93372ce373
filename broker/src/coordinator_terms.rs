//! The coordinators' terms in a cluster: this broker coordinates the groups of a
//! `__consumer_offsets` partition while it leads that partition, and the transactional
//! ids of a `__transaction_state` partition while it leads that one (Kafka's rule), and
//! their writes are acknowledged only once the partition's in-sync replicas have them.
//!
//! [`CoordinatorTerms::follow`] runs after every change of roles: a lost leadership
//! fences that partition's coordinator at once (it answers NOT_COORDINATOR from then
//! on; the other partitions' are untouched), and one task per partition's coordinator
//! makes the slower moves in order — `elect` (replay the log) or
//! `resign` (forget the state). [`ReplicaGate`] is the coordinators' view of the
//! replica manager: whether this broker still leads the partition at the term's epoch,
//! and the wait for the high watermark, as `acks=all` produce does.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use floe_cluster::replication::ReplicaManager;
use floe_cluster::TopicPartition;
use floe_coordinator::group::{GroupCoordinator, OFFSETS_TOPIC};
use floe_coordinator::replicated::{ReplicatedWrites, ReplicationError};
use floe_coordinator::transaction::{TransactionCoordinator, TRANSACTION_STATE_TOPIC};
use floe_storage::PartitionLog;
use kafka_protocol::error::ResponseError;
use tokio::sync::watch;

use crate::broker::Broker;

/// How long to wait before electing again after a failed load.
const RETRY: Duration = Duration::from_secs(1);

/// The coordinators' gate over the replica manager.
#[derive(Debug)]
pub struct ReplicaGate {
    replicas: Arc<ReplicaManager>,
    runtime: tokio::runtime::Handle,
    /// `offsets.commit.timeout.ms`.
    timeout: Duration,
}

impl ReplicaGate {
    /// A gate over `replicas`; waits run on `runtime` (callers are blocking threads).
    pub fn new(
        replicas: Arc<ReplicaManager>,
        runtime: tokio::runtime::Handle,
        timeout: Duration,
    ) -> Self {
        Self { replicas, runtime, timeout }
    }
}

fn partition_of(log: &PartitionLog) -> TopicPartition {
    TopicPartition::new(log.topic().to_string(), log.partition())
}

impl ReplicatedWrites for ReplicaGate {
    fn check_leader(&self, log: &PartitionLog, leader_epoch: i32) -> Result<(), ReplicationError> {
        let tp = partition_of(log);
        match self.replicas.leader_epoch_of(&tp) {
            Some(epoch) if epoch == leader_epoch && log.leader_epoch() == leader_epoch => Ok(()),
            Some(epoch) => Err(ReplicationError::NotLeader(format!(
                "{tp}: led at epoch {epoch}, not {leader_epoch}"
            ))),
            None => {
                Err(ReplicationError::NotLeader(format!("{tp}: this broker is not its leader")))
            }
        }
    }

    fn wait_committed(&self, log: &PartitionLog, end_offset: i64) -> Result<(), ReplicationError> {
        let tp = partition_of(log);
        // Alone in the ISR, the append is committed at once; otherwise followers move it.
        self.replicas.on_leader_append(&tp);
        let min_isr = log.config().min_insync_replicas;
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.runtime
            .block_on(self.replicas.wait_for_replication(&tp, log, end_offset, min_isr, deadline))
            .map_err(|(code, why)| {
                if code == ResponseError::NotLeaderOrFollower {
                    ReplicationError::NotLeader(why)
                } else {
                    ReplicationError::NotReplicated(why)
                }
            })
    }
}

/// The terms this broker's coordinators should hold, as the replica manager says: one
/// per partition of each internal topic, each followed on its own.
#[derive(Debug)]
pub struct CoordinatorTerms {
    broker: Arc<Broker>,
    /// Per `__consumer_offsets` partition, the term its driver should hold.
    groups: Mutex<Vec<watch::Sender<Option<i32>>>>,
    /// Per `__transaction_state` partition.
    txns: Mutex<Vec<watch::Sender<Option<i32>>>>,
}

impl CoordinatorTerms {
    /// Ready to follow the roles; a partition's driver starts once its topic exists.
    pub fn start(broker: Arc<Broker>) -> Self {
        Self { broker, groups: Mutex::new(Vec::new()), txns: Mutex::new(Vec::new()) }
    }

    /// Takes the terms the current roles give: call after every `ReplicaManager::apply`.
    /// Each partition's term follows that partition's leadership alone, so a lost one
    /// fences only the groups (or transactional ids) that map to it.
    pub fn follow(&self) {
        let (groups, txns) = (&self.broker.groups, &self.broker.txns);
        let counts = self.broker.cluster.with_view(|v| {
            let count = |topic: &str| v.topics.get(topic).map(|t| t.partitions.len() as i32);
            (count(OFFSETS_TOPIC), count(TRANSACTION_STATE_TOPIC))
        });
        if let Some(count) = counts.0 {
            // The topic's own count, whatever this broker's setting says (Kafka's rule).
            groups.set_partition_count(count);
            self.follow_topic(
                OFFSETS_TOPIC,
                count,
                &self.groups,
                |p| groups.partition(p).map(group_driver),
                |p| groups.partition(p).iter().for_each(|c| c.fence()),
            );
        }
        if let Some(count) = counts.1 {
            txns.set_partition_count(count);
            self.follow_topic(
                TRANSACTION_STATE_TOPIC,
                count,
                &self.txns,
                |p| txns.partition(p).map(txn_driver),
                |p| txns.partition(p).iter().for_each(|c| c.fence()),
            );
        }
    }

    /// For each of `topic`'s `count` partitions: when this broker's leadership of it
    /// changed, fences its coordinator and hands the new term to its driver. `start(p)`
    /// starts partition `p`'s driver (`None`: no coordinator for it).
    fn follow_topic(
        &self,
        topic: &str,
        count: i32,
        drivers: &Mutex<Vec<watch::Sender<Option<i32>>>>,
        start: impl Fn(i32) -> Option<watch::Sender<Option<i32>>>,
        fence: impl Fn(i32),
    ) {
        let mut drivers = drivers.lock().unwrap_or_else(PoisonError::into_inner);
        while (drivers.len() as i32) < count {
            let Some(driver) = start(drivers.len() as i32) else { break };
            drivers.push(driver);
        }
        for (p, driver) in drivers.iter().enumerate().take(count.max(0) as usize) {
            let p = p as i32;
            let wanted =
                self.broker.replicas.leader_epoch_of(&TopicPartition::new(topic.to_string(), p));
            if *driver.borrow() != wanted {
                // Stop answering before the driver gets to it: another broker may lead already.
                fence(p);
                driver.send_replace(wanted);
            }
        }
    }
}

/// Starts the driver of one `__consumer_offsets` partition's coordinator.
fn group_driver(c: Arc<GroupCoordinator>) -> watch::Sender<Option<i32>> {
    start_driver(
        c,
        |c, epoch| async move { c.elect(epoch).await.is_ok() },
        |c| async move { c.resign().await },
    )
}

/// Starts the driver of one `__transaction_state` partition's coordinator.
fn txn_driver(c: Arc<TransactionCoordinator>) -> watch::Sender<Option<i32>> {
    start_driver(
        c,
        |c, epoch| async move { c.elect(epoch).await.is_ok() },
        |c| async move { c.resign().await },
    )
}

/// Spawns [`drive`] over coordinator `c`; the sender says which term it should hold.
fn start_driver<C, E, EF, R, RF>(c: Arc<C>, elect: E, resign: R) -> watch::Sender<Option<i32>>
where
    C: Send + Sync + 'static,
    E: Fn(Arc<C>, i32) -> EF + Send + 'static,
    EF: std::future::Future<Output = bool> + Send + 'static,
    R: Fn(Arc<C>) -> RF + Send + 'static,
    RF: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = watch::channel(None);
    let r = c.clone();
    tokio::spawn(drive(rx, move |epoch| elect(c.clone(), epoch), move || resign(r.clone())));
    tx
}

/// Elects or resigns one coordinator as `want` changes, in order; retries a failed
/// load. `elect` says whether the load succeeded.
async fn drive<E, EF, R, RF>(mut want: watch::Receiver<Option<i32>>, elect: E, resign: R)
where
    E: Fn(i32) -> EF,
    EF: std::future::Future<Output = bool>,
    R: Fn() -> RF,
    RF: std::future::Future<Output = ()>,
{
    let mut held: Option<i32> = None;
    loop {
        let wanted = *want.borrow_and_update();
        if wanted != held {
            let loaded = match wanted {
                Some(epoch) => elect(epoch).await,
                None => {
                    resign().await;
                    true
                }
            };
            if !loaded {
                held = None;
                tokio::time::sleep(RETRY).await;
                continue;
            }
            held = wanted;
        }
        if want.changed().await.is_err() {
            return;
        }
    }
}
