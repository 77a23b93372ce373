//! Replication between brokers (Kafka's `ReplicaManager`, `Partition` and
//! `ReplicaFetcherThread`, over the cluster state in etcd).
//!
//! - [`client`]: an outbound Kafka connection from this broker to another.
//! - [`fetcher`]: a follower's fetchers, one per leader broker: truncation by
//!   OffsetForLeaderEpoch, then Fetch with this broker's replica id, appending the
//!   leader's batches byte for byte.

pub mod client;
pub mod fetcher;
