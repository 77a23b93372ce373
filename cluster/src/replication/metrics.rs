//! Replication's Prometheus metrics: the leader's (Kafka's `ReplicaManager` metrics)
//! and the follower's fetchers'. The broker registers them ([`ReplicationMetrics::collectors`])
//! in its registry, beside its own, and serves them on `/metrics`.

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

/// Replication as the leader and the followers see it. Cheap to clone handles, safe to share.
#[derive(Debug, Clone)]
pub struct ReplicationMetrics {
    /// Partitions this broker leads.
    pub leader_partitions: IntGauge,
    /// Partitions this broker leads whose ISR is smaller than their replica set.
    pub under_replicated_partitions: IntGauge,
    /// ISR shrinks this broker (as leader) wrote.
    pub isr_shrinks: IntCounter,
    /// ISR expansions this broker (as leader) wrote.
    pub isr_expands: IntCounter,
    /// The largest lag in records of an in-sync follower behind this broker's log end.
    pub max_follower_lag: IntGauge,
    // --- Follower replication (fetcher.rs) ---
    /// `floe_replica_fetch_bytes_total`: record batch bytes followers appended from their leaders.
    pub replica_fetch_bytes: IntCounter,
    /// `floe_replica_fetch_requests_total`: Fetch requests followers sent to their leaders.
    pub replica_fetch_requests: IntCounter,
    /// `floe_replica_fetch_errors_total{error}`: follower fetch failures, by Kafka
    /// error name (`OFFSET_OUT_OF_RANGE`, `FENCED_LEADER_EPOCH`...) or local cause
    /// (`connection`, `authentication`, `tls`, `storage`).
    pub replica_fetch_errors: IntCounterVec,
    /// `floe_replica_damaged_truncations_total`: damaged ranges (found by recovery) a
    /// follower cut off to fetch them again from its leader.
    pub replica_damaged_truncations: IntCounter,
}

impl ReplicationMetrics {
    /// The metrics, not yet registered anywhere.
    ///
    /// # Panics
    /// Never in practice: the names and help texts are constants.
    pub fn new() -> Self {
        Self {
            leader_partitions: IntGauge::new("floe_leader_partitions", "Partitions this broker leads (Kafka's LeaderCount)").expect("metric"),
            under_replicated_partitions: IntGauge::new(
                "floe_under_replicated_partitions",
                "Partitions this broker leads whose ISR is smaller than their replica set (Kafka's UnderReplicatedPartitions)",
            )
            .expect("metric"),
            isr_shrinks: IntCounter::new("floe_isr_shrinks_total", "ISR shrinks written by this broker as leader").expect("metric"),
            isr_expands: IntCounter::new("floe_isr_expands_total", "ISR expansions written by this broker as leader").expect("metric"),
            max_follower_lag: IntGauge::new("floe_replica_max_lag", "Largest lag, in records, of an in-sync follower behind this leader").expect("metric"),
            replica_fetch_bytes: IntCounter::new("floe_replica_fetch_bytes_total", "Record batch bytes followers appended from their leaders")
                .expect("metric"),
            replica_fetch_requests: IntCounter::new("floe_replica_fetch_requests_total", "Fetch requests followers sent to their leaders")
                .expect("metric"),
            replica_fetch_errors: IntCounterVec::new(
                Opts::new(
                    "floe_replica_fetch_errors_total",
                    "Follower fetch failures, by Kafka error name or local cause (connection, authentication, tls, storage)",
                ),
                &["error"],
            )
            .expect("metric"),
            replica_damaged_truncations: IntCounter::new(
                "floe_replica_damaged_truncations_total",
                "Damaged ranges (found by recovery) a follower cut off to fetch them again from its leader",
            )
            .expect("metric"),
        }
    }

    /// Every metric, for the broker's registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.leader_partitions.clone()),
            Box::new(self.under_replicated_partitions.clone()),
            Box::new(self.isr_shrinks.clone()),
            Box::new(self.isr_expands.clone()),
            Box::new(self.max_follower_lag.clone()),
            Box::new(self.replica_fetch_bytes.clone()),
            Box::new(self.replica_fetch_requests.clone()),
            Box::new(self.replica_fetch_errors.clone()),
            Box::new(self.replica_damaged_truncations.clone()),
        ]
    }
}

impl Default for ReplicationMetrics {
    fn default() -> Self {
        Self::new()
    }
}
