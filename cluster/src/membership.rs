//! `Membership`: this broker's place in its cluster, and the [`ClusterView`] it keeps.

use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use etcd_client::Client;

use crate::controller::LeaderRebalance;
use crate::etcd_session::{self, EtcdTarget};
use crate::{
    topics, BrokerRegistration, ClusterError, ClusterView, MetadataStoreUrl, TopicAssignment,
};

/// How this broker joins its cluster.
#[derive(Clone, Debug)]
pub struct MembershipSettings {
    pub store: MetadataStoreUrl,
    pub registration: BrokerRegistration,
    /// `broker.session.timeout.ms`: how long etcd keeps a broker registered (and its
    /// controller role held) after it last heard from it.
    pub session_timeout: Duration,
    /// `unclean.leader.election.enable`: whether the controller (when this broker is
    /// it) may elect an out-of-sync replica rather than leave a partition offline.
    pub unclean_leader_election: bool,
    /// `auto.leader.rebalance.enable` and its settings (`None`: disabled): how the
    /// controller moves leadership back to preferred replicas by itself.
    pub leader_rebalance: Option<LeaderRebalance>,
}

/// A broker's membership: alone, or registered in etcd until [`Membership::leave`]
/// or the process ends (then its lease expires after the session timeout).
pub struct Membership {
    view: watch::Receiver<ClusterView>,
    node_id: i32,
    etcd: std::sync::Mutex<Option<EtcdMember>>,
    writer: Option<EtcdWriter>,
    /// The cluster's shared settings (configs, ACLs, SCRAM); none for a broker alone.
    shared: Option<crate::SharedStore>,
}

struct EtcdMember {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// What the metadata writes of admin requests need.
#[derive(Clone)]
struct EtcdWriter {
    client: Client,
    prefix: String,
    timeout: Duration,
}

/// The id of the cluster `store` names: `proposed` (this broker's own) for a broker
/// alone; with etcd, the id stored there, which `proposed` becomes if this broker is
/// the first. Every broker of a cluster reports the same id, and refuses a data
/// directory of another cluster.
///
/// # Errors
/// etcd unreachable or answering nonsense.
pub async fn agree_cluster_id(
    store: &MetadataStoreUrl,
    proposed: &str,
    timeout: Duration,
) -> Result<String, ClusterError> {
    match store {
        MetadataStoreUrl::Local => Ok(proposed.to_string()),
        MetadataStoreUrl::Etcd { endpoints, prefix } => {
            etcd_session::agree_cluster_id(endpoints, prefix, proposed, timeout).await
        }
    }
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("node_id", &self.node_id)
            .field("view", &*self.view.borrow())
            .finish()
    }
}

impl Membership {
    /// Joins the cluster `settings.store` names. `local`: at once, the view is this
    /// broker alone, its own controller. etcd: once this broker is registered (the
    /// controller election goes on in the background).
    ///
    /// # Errors
    /// etcd unreachable, or `node.id` held by another live broker.
    pub async fn join(settings: MembershipSettings) -> Result<Self, ClusterError> {
        let node_id = settings.registration.node_id;
        match settings.store.clone() {
            MetadataStoreUrl::Local => {
                let view = ClusterView {
                    brokers: [(node_id, settings.registration)].into_iter().collect(),
                    controller_id: Some(node_id),
                    controller_epoch: 1,
                    synced: true,
                    ..ClusterView::default()
                };
                let (_tx, rx) = watch::channel(view);
                Ok(Self {
                    view: rx,
                    node_id,
                    etcd: std::sync::Mutex::new(None),
                    writer: None,
                    shared: None,
                })
            }
            MetadataStoreUrl::Etcd { endpoints, prefix } => {
                let timeout = settings.session_timeout.max(Duration::from_secs(3));
                let target = EtcdTarget {
                    endpoints,
                    prefix: prefix.clone(),
                    registration: settings.registration,
                    session_timeout: settings.session_timeout,
                    unclean_leader_election: settings.unclean_leader_election,
                    leader_rebalance: settings.leader_rebalance,
                };
                let (client, mut view, stop, task) = etcd_session::start(target).await?;
                // The broker acts on its topics only once it has read them all.
                let synced = tokio::time::timeout(timeout, async {
                    view.wait_for(|v| v.synced).await.is_ok()
                })
                .await;
                if synced != Ok(true) {
                    let _ = stop.send(());
                    return Err(ClusterError::Timeout {
                        what: "the first listing of the cluster's metadata",
                        timeout_ms: timeout.as_millis() as u64,
                    });
                }
                let shared = crate::SharedStore::start(client.clone(), prefix.clone(), timeout);
                if !shared.wait_synced(timeout).await {
                    let _ = stop.send(());
                    return Err(ClusterError::Timeout {
                        what: "the first listing of the cluster's shared state",
                        timeout_ms: timeout.as_millis() as u64,
                    });
                }
                let writer = EtcdWriter { client, prefix, timeout };
                let etcd = std::sync::Mutex::new(Some(EtcdMember { stop, task }));
                Ok(Self { view, node_id, etcd, writer: Some(writer), shared: Some(shared) })
            }
        }
    }

    /// The cluster as last seen.
    pub fn view(&self) -> ClusterView {
        self.view.borrow().clone()
    }

    /// Runs `f` on the current view without copying it (keep `f` short: the view
    /// cannot change while it runs).
    pub fn with_view<R>(&self, f: impl FnOnce(&ClusterView) -> R) -> R {
        f(&self.view.borrow())
    }

    /// A receiver that sees every change of the view.
    pub fn subscribe(&self) -> watch::Receiver<ClusterView> {
        self.view.clone()
    }

    /// The cluster's shared settings (topic config changes, dynamic broker configs,
    /// ACLs, SCRAM credentials), or `None` for a broker alone (its files hold them).
    pub fn shared(&self) -> Option<&crate::SharedStore> {
        self.shared.as_ref()
    }

    /// Whether this broker's metadata is the cluster's (etcd) rather than its own.
    pub fn is_clustered(&self) -> bool {
        self.writer.is_some()
    }

    /// Creates topic `name` with `assignment` in the cluster's metadata. Every broker
    /// (this one included) learns of it through its view.
    ///
    /// # Errors
    /// [`ClusterError::TopicExists`]; [`ClusterError::NotInCluster`] for a broker alone;
    /// etcd errors.
    pub async fn create_topic(
        &self,
        name: &str,
        assignment: &TopicAssignment,
    ) -> Result<(), ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::create_topic(&mut w.client, &w.prefix, w.timeout, name, assignment).await
    }

    /// Deletes topic `name` from the cluster's metadata.
    ///
    /// # Errors
    /// [`ClusterError::UnknownTopic`]; [`ClusterError::NotInCluster`]; etcd errors.
    pub async fn delete_topic(&self, name: &str) -> Result<(), ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::delete_topic(&mut w.client, &w.prefix, w.timeout, name).await
    }

    /// Adds partitions to topic `name`: `plan` gets the topic as stored and returns the
    /// added partitions' replicas; they are written with their first states, unless
    /// `validate_only`, conditional on the topic not having changed since it was read
    /// (else `plan` runs again on the newer topic). Returns the grown assignment.
    ///
    /// # Errors
    /// [`ClusterError::UnknownTopic`]; what `plan` returns; [`ClusterError::NotInCluster`];
    /// etcd errors.
    pub async fn create_partitions(
        &self,
        name: &str,
        validate_only: bool,
        plan: impl FnMut(
            &TopicAssignment,
        ) -> Result<std::collections::BTreeMap<i32, Vec<i32>>, ClusterError>,
    ) -> Result<TopicAssignment, ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::create_partitions(&mut w.client, &w.prefix, w.timeout, name, validate_only, plan)
            .await
    }

    /// Elects a leader of `tp` on request: `decide` gets its replicas and its state as
    /// stored and returns the new state, written conditional on the partition epoch it
    /// was decided from (else decided again from the newer state). Returns the state
    /// written, its partition epoch filled in.
    ///
    /// # Errors
    /// [`ClusterError::UnknownTopic`], [`ClusterError::UnknownPartition`]; what `decide`
    /// returns; [`ClusterError::NotInCluster`]; etcd errors.
    pub async fn change_leader(
        &self,
        tp: &crate::TopicPartition,
        decide: impl FnMut(
            &[i32],
            &crate::PartitionState,
        ) -> Result<crate::PartitionState, ClusterError>,
    ) -> Result<crate::PartitionState, ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::change_leader(&mut w.client, &w.prefix, w.timeout, tp, decide).await
    }

    /// Starts, changes or cancels the reassignment of `tp`: `decide` gets its replicas
    /// and its state as stored and returns the new replicas and state (`None`: no
    /// change), written together conditional on the topic and the partition not having
    /// changed since they were read (else decided again). Returns the state written.
    ///
    /// # Errors
    /// [`ClusterError::UnknownTopic`], [`ClusterError::UnknownPartition`]; what `decide`
    /// returns; [`ClusterError::NotInCluster`]; etcd errors.
    pub async fn reassign_partition(
        &self,
        tp: &crate::TopicPartition,
        decide: impl FnMut(
            &[i32],
            &crate::PartitionState,
        ) -> Result<Option<crate::ReassignedPartition>, ClusterError>,
    ) -> Result<Option<crate::PartitionState>, ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::reassign_partition(&mut w.client, &w.prefix, w.timeout, tp, decide).await
    }

    /// Changes the ISR of a partition this broker leads, if its state is still
    /// `expected` (see Kafka's AlterPartition): `Ok(false)` when it moved meanwhile.
    ///
    /// # Errors
    /// [`ClusterError::NotInCluster`]; etcd errors.
    pub async fn alter_isr(
        &self,
        tp: &crate::TopicPartition,
        expected: &crate::PartitionState,
        isr: Vec<i32>,
    ) -> Result<bool, ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::alter_isr(&mut w.client, &w.prefix, w.timeout, tp, expected, isr).await
    }

    /// Reserves `size` producer ids unique in the cluster (see
    /// `floe_storage::producer_id_manager`); returns the first.
    ///
    /// # Errors
    /// [`ClusterError::NotInCluster`]; etcd errors.
    pub async fn reserve_producer_ids(&self, size: i64) -> Result<i64, ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        topics::reserve_producer_ids(&mut w.client, &w.prefix, w.timeout, size).await
    }

    /// Starts a controlled shutdown: marks this broker's registration so the
    /// controller moves its leaderships to other in-sync replicas and takes it out of
    /// the ISRs, while it goes on serving (see [`Membership::wait_for_view`] to wait).
    ///
    /// # Errors
    /// [`ClusterError::NotInCluster`]; etcd errors.
    pub async fn announce_shutdown(&self) -> Result<(), ClusterError> {
        let mut w = self.writer.clone().ok_or(ClusterError::NotInCluster)?;
        let me = self
            .with_view(|v| v.brokers.get(&self.node_id).cloned())
            .ok_or(ClusterError::NotInCluster)?;
        topics::announce_shutdown(&mut w.client, &w.prefix, w.timeout, &me).await
    }

    /// Waits until the view satisfies `ready` (e.g. shows a topic just created), for
    /// at most `timeout`; returns whether it does.
    pub async fn wait_for_view(
        &self,
        timeout: Duration,
        ready: impl Fn(&ClusterView) -> bool,
    ) -> bool {
        let mut rx = self.view.clone();
        let waited =
            tokio::time::timeout(timeout, async { rx.wait_for(|v| ready(v)).await.is_ok() }).await;
        waited.unwrap_or(false)
    }

    /// Leaves the cluster at once: revokes this broker's lease, so the others see it
    /// gone (and elect another controller) without waiting for the session timeout.
    /// Later calls do nothing.
    pub async fn leave(&self) {
        let member = self.etcd.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(member) = member {
            let _ = member.stop.send(());
            let _ = tokio::time::timeout(Duration::from_secs(5), member.task).await;
        }
    }
}
