//! `ClusterView`: what a broker knows of its cluster at one moment.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{BrokerRegistration, PartitionState, TopicAssignment, TopicPartition};

/// The live brokers, the controller, and the topics and partitions, as last seen in
/// the metadata store. Cheap to clone: the topic and partition maps are shared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// Registered (live) brokers by node id.
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// The controller's node id, once one is known.
    pub controller_id: Option<i32>,
    /// The controller epoch: grows with every election (etcd's revision of the
    /// winning campaign), so that a decision can be tied to the controller that made it.
    pub controller_epoch: i64,
    /// Topics by name (empty for a broker alone: its topics are its data directory's).
    pub topics: Arc<BTreeMap<String, TopicAssignment>>,
    /// Every partition's leader, leader epoch and ISR.
    pub partitions: Arc<BTreeMap<TopicPartition, PartitionState>>,
    /// Whether the brokers, topics and partitions have been read from the metadata
    /// store at least once (until then the maps are empty for want of reading, not
    /// because the cluster has none). Always true for a broker alone.
    pub synced: bool,
}

impl ClusterView {
    /// The state of one partition, if the topic and partition exist.
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionState> {
        self.partitions.get(&TopicPartition::new(topic, partition))
    }

    /// Whether `node_id` is registered (alive).
    pub fn is_alive(&self, node_id: i32) -> bool {
        self.brokers.contains_key(&node_id)
    }
}
