//! Cluster membership: who the brokers are, which one is the controller, and where
//! that is decided.
//!
//! A broker runs either alone (`floe.metadata.store=local`, the default: the cluster
//! is this broker and it is its own controller) or as a member of a cluster whose
//! metadata lives in etcd (`etcd://HOST:PORT[,HOST:PORT...][/PREFIX]`). In etcd each
//! broker registers itself under a lease (it vanishes when the broker stops renewing
//! it) and campaigns in an etcd election for the controller role: consensus is
//! etcd's, never Floe's own.
//!
//! What the rest of the broker sees is a [`ClusterView`], kept current by a
//! [`Membership`]: the live brokers with their endpoints, the controller, and every
//! topic's replica placement and partition's leader and ISR. When etcd cannot be
//! reached the view keeps the last state seen.
//!
//! The settings every broker enforces alike (topic config changes, dynamic broker
//! configs, ACLs, SCRAM credentials) are shared state in etcd too: a [`SharedStore`]
//! mirrors them and writes their changes.
//!
//! The controller (the election's winner) moves partition leadership when brokers
//! come and go ([`controller`]); each of its writes is fenced by its controller
//! epoch and the partition's own epoch, so a deposed controller changes nothing.
//!
//! Replication between the brokers follows that state ([`replication`], Kafka's
//! `ReplicaManager`, `Partition` and replica fetchers): each broker leads or follows
//! the partitions the view gives it; as leader it keeps the high watermark and asks
//! for ISR changes (written conditional on the partition epoch), as follower it
//! truncates to its leader's log and fetches from it.
//!
//! # Layout
//! - `membership`, `view`, `registration`: the brokers, their endpoints, the [`ClusterView`].
//! - `etcd_session`, `store_url`, `topics`, `shared_state`: the metadata store (local or etcd) and what is kept in it.
//! - `partition`, [`controller`]: placement, leader election, reassignment; the controller's loop.
//! - [`replication`]: the replica manager, the ISR rules, the replica fetchers (connecting with floe-client) and their metrics.

mod controller;
mod error;
mod etcd_keys;
mod etcd_session;
mod membership;
mod partition;
mod registration;
pub mod replication;
mod shared_state;
mod store_url;
mod topics;
mod view;

pub use controller::LeaderRebalance;
pub use error::ClusterError;
pub use membership::{agree_cluster_id, Membership, MembershipSettings};
pub use partition::{
    assign_added_partitions, assign_replicas, cancel_reassignment, complete_reassignment,
    elect_leader, imbalanced_partitions, initial_partition_state, next_partition_state,
    start_reassignment, AssignmentError, ElectionError, ElectionType, PartitionState,
    ReassignedPartition, ReassignmentError, TopicAssignment, TopicPartition, NO_LEADER,
};
pub use registration::{BrokerEndpoint, BrokerRegistration};
pub use shared_state::{
    broker_config_key, topic_config_key, Change, SharedState, SharedStore, StoredTopicConfig,
    StoredValue, SHARED_DIRS,
};
pub use store_url::MetadataStoreUrl;
pub use view::ClusterView;
