//! The coordinators' terms in a cluster: this broker is the group coordinator while it
//! leads `__consumer_offsets` and the transaction coordinator while it leads
//! `__transaction_state` (Kafka's rule), and their writes are acknowledged only once
//! the partition's in-sync replicas have them.
//!
//! [`CoordinatorTerms::follow`] runs after every change of roles: a lost leadership
//! fences the coordinator at once (it answers NOT_COORDINATOR from then on), and one
//! task per coordinator makes the slower moves in order — `elect` (replay the log) or
//! `resign` (forget the state). [`ReplicaGate`] is the coordinators' view of the
//! replica manager: whether this broker still leads the partition at the term's epoch,
//! and the wait for the high watermark, as `acks=all` produce does.

use std::sync::Arc;
use std::time::Duration;

use floe_cluster::TopicPartition;
use floe_coordinator::group::OFFSETS_TOPIC;
use floe_coordinator::replicated::{ReplicatedWrites, ReplicationError};
use floe_coordinator::transaction::TRANSACTION_STATE_TOPIC;
use floe_storage::PartitionLog;
use kafka_protocol::error::ResponseError;
use tokio::sync::watch;

use crate::broker::Broker;
use crate::replication::ReplicaManager;

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
    pub fn new(replicas: Arc<ReplicaManager>, runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
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
            Some(epoch) => Err(ReplicationError::NotLeader(format!("{tp}: led at epoch {epoch}, not {leader_epoch}"))),
            None => Err(ReplicationError::NotLeader(format!("{tp}: this broker is not its leader"))),
        }
    }

    fn wait_committed(&self, log: &PartitionLog, end_offset: i64) -> Result<(), ReplicationError> {
        let tp = partition_of(log);
        // Alone in the ISR, the append is committed at once; otherwise followers move it.
        self.replicas.on_leader_append(&tp);
        let min_isr = log.config().min_insync_replicas;
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.runtime.block_on(self.replicas.wait_for_replication(&tp, log, end_offset, min_isr, deadline)).map_err(|(code, why)| {
            if code == ResponseError::NotLeaderOrFollower {
                ReplicationError::NotLeader(why)
            } else {
                ReplicationError::NotReplicated(why)
            }
        })
    }
}

/// The terms this broker's coordinators should hold, as the replica manager says.
#[derive(Debug)]
pub struct CoordinatorTerms {
    broker: Arc<Broker>,
    groups: watch::Sender<Option<i32>>,
    txns: watch::Sender<Option<i32>>,
}

impl CoordinatorTerms {
    /// Starts the two tasks that move the coordinators between terms.
    pub fn start(broker: Arc<Broker>) -> Self {
        let (groups, groups_rx) = watch::channel(None);
        let (txns, txns_rx) = watch::channel(None);
        let (g, r) = (broker.groups.clone(), broker.groups.clone());
        tokio::spawn(drive(
            groups_rx,
            move |epoch| {
                let g = g.clone();
                async move { g.elect(epoch).await.is_ok() }
            },
            move || {
                let r = r.clone();
                async move { r.resign().await }
            },
        ));
        let (t, r) = (broker.txns.clone(), broker.txns.clone());
        tokio::spawn(drive(
            txns_rx,
            move |epoch| {
                let t = t.clone();
                async move { t.elect(epoch).await.is_ok() }
            },
            move || {
                let r = r.clone();
                async move { r.resign().await }
            },
        ));
        Self { broker, groups, txns }
    }

    /// Takes the terms the current roles give: call after every `ReplicaManager::apply`.
    pub fn follow(&self) {
        let replicas = &self.broker.replicas;
        let groups = replicas.leader_epoch_of(&TopicPartition::new(OFFSETS_TOPIC.to_string(), 0));
        if *self.groups.borrow() != groups {
            // Stop answering before the driver gets to it: another broker may lead already.
            self.broker.groups.fence();
            self.groups.send_replace(groups);
        }
        let txns = replicas.leader_epoch_of(&TopicPartition::new(TRANSACTION_STATE_TOPIC.to_string(), 0));
        if *self.txns.borrow() != txns {
            self.broker.txns.fence();
            self.txns.send_replace(txns);
        }
    }
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
