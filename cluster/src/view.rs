//! `ClusterView`: what a broker knows of its cluster at one moment.

use std::collections::BTreeMap;

use crate::BrokerRegistration;

/// The live brokers and the controller, as last seen in the metadata store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Registered (live) brokers by node id.
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// The controller's node id, once one is known.
    pub controller_id: Option<i32>,
    /// The controller epoch: grows with every election (etcd's revision of the
    /// winning campaign), so that a decision can be tied to the controller that made it.
    pub controller_epoch: i64,
}
