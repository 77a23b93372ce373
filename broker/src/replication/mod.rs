//! Replication between brokers (Kafka's `ReplicaManager`, `Partition` and
//! `ReplicaFetcherThread`, over the cluster state in etcd).
//!
//! - [`replica_manager`]: this broker's role per partition; as leader, its followers'
//!   fetch state, the high watermark, ISR changes and `acks=all` waits.
//! - [`isr`]: the rules of the high watermark and the ISR, as pure functions.
//! - [`client`]: an outbound Kafka connection from this broker to another, in
//!   the inter-broker listener's security protocol (TLS, SASL, both or neither).
//! - [`sasl_login`]: the client side of SaslHandshake + SaslAuthenticate on it.
//! - [`fetcher`]: a follower's fetchers, one per leader broker: truncation by
//!   OffsetForLeaderEpoch, then Fetch with this broker's replica id, appending the
//!   leader's batches byte for byte.

pub mod client;
pub mod fetcher;
pub mod isr;
pub mod replica_manager;
pub mod sasl_login;

pub use replica_manager::ReplicaManager;
