//! `Membership`: this broker's place in its cluster, and the [`ClusterView`] it keeps.

use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::etcd_session::{self, EtcdTarget};
use crate::{BrokerRegistration, ClusterError, ClusterView, MetadataStoreUrl};

/// How this broker joins its cluster.
#[derive(Clone, Debug)]
pub struct MembershipSettings {
    pub store: MetadataStoreUrl,
    pub registration: BrokerRegistration,
    /// `broker.session.timeout.ms`: how long etcd keeps a broker registered (and its
    /// controller role held) after it last heard from it.
    pub session_timeout: Duration,
}

/// A broker's membership: alone, or registered in etcd until [`Membership::leave`]
/// or the process ends (then its lease expires after the session timeout).
pub struct Membership {
    view: watch::Receiver<ClusterView>,
    node_id: i32,
    etcd: std::sync::Mutex<Option<EtcdMember>>,
}

struct EtcdMember {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// The id of the cluster `store` names: `proposed` (this broker's own) for a broker
/// alone; with etcd, the id stored there, which `proposed` becomes if this broker is
/// the first. Every broker of a cluster reports the same id, and refuses a data
/// directory of another cluster.
///
/// # Errors
/// etcd unreachable or answering nonsense.
pub async fn agree_cluster_id(store: &MetadataStoreUrl, proposed: &str, timeout: Duration) -> Result<String, ClusterError> {
    match store {
        MetadataStoreUrl::Local => Ok(proposed.to_string()),
        MetadataStoreUrl::Etcd { endpoints, prefix } => etcd_session::agree_cluster_id(endpoints, prefix, proposed, timeout).await,
    }
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership").field("node_id", &self.node_id).field("view", &*self.view.borrow()).finish()
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
                };
                let (_tx, rx) = watch::channel(view);
                Ok(Self { view: rx, node_id, etcd: std::sync::Mutex::new(None) })
            }
            MetadataStoreUrl::Etcd { endpoints, prefix } => {
                let target = EtcdTarget { endpoints, prefix, registration: settings.registration, session_timeout: settings.session_timeout };
                let (view, stop, task) = etcd_session::start(target).await?;
                Ok(Self { view, node_id, etcd: std::sync::Mutex::new(Some(EtcdMember { stop, task })) })
            }
        }
    }

    /// The cluster as last seen.
    pub fn view(&self) -> ClusterView {
        self.view.borrow().clone()
    }

    /// A receiver that sees every change of the view.
    pub fn subscribe(&self) -> watch::Receiver<ClusterView> {
        self.view.clone()
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
