//! The API keys and versions Floe serves: the one table ApiVersions advertises
//! and the dispatcher consults.
//!
//! A version range here is a promise: every version in it is decoded, handled
//! and answered. Ranges are capped by what the `kafka-protocol` crate can
//! decode (it follows Kafka 4.x, which dropped some old versions).

use kafka_protocol::messages::ApiKey;

/// One served API and its inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    /// The API.
    pub key: ApiKey,
    /// Lowest version served.
    pub min: i16,
    /// Highest version served.
    pub max: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> ApiRange {
    ApiRange { key, min, max }
}

/// Every API Floe serves, in API-key order.
pub const SUPPORTED_APIS: &[ApiRange] = &[
    api(ApiKey::Produce, 3, 11),
    api(ApiKey::Fetch, 4, 16),
    api(ApiKey::ListOffsets, 1, 8),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::OffsetCommit, 2, 9),
    api(ApiKey::OffsetFetch, 1, 9),
    api(ApiKey::FindCoordinator, 0, 5),
    api(ApiKey::JoinGroup, 0, 9),
    api(ApiKey::Heartbeat, 0, 4),
    api(ApiKey::LeaveGroup, 0, 5),
    api(ApiKey::SyncGroup, 0, 5),
    api(ApiKey::DescribeGroups, 0, 6),
    api(ApiKey::ListGroups, 0, 5),
    // v0 is followed by bare SASL tokens (no SaslAuthenticate), which Floe reads as Kafka 4.x
    // does: Kafka keeps "validVersions": "0-1" (v0 deprecated by KIP-896, not removed). Old
    // librdkafka needs v0 listed: 2.0.x enables SASL only if the range overlaps 0..0 (its
    // rdkafka_feature.c), then sends v1 + SaslAuthenticate when the range also has 1.
    api(ApiKey::SaslHandshake, 0, 1),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 2, 7),
    api(ApiKey::DeleteTopics, 1, 6),
    api(ApiKey::DeleteRecords, 0, 2),
    api(ApiKey::InitProducerId, 0, 5),
    api(ApiKey::OffsetForLeaderEpoch, 2, 4),
    // Transactions (KIP-98). The v5 forms of AddPartitionsToTxn, EndTxn and TxnOffsetCommit
    // belong to KIP-890 part 2 (an epoch bump per transaction), which Floe does not do.
    api(ApiKey::AddPartitionsToTxn, 0, 4),
    api(ApiKey::AddOffsetsToTxn, 0, 4),
    api(ApiKey::EndTxn, 0, 4),
    // Broker to broker: a transaction coordinator's markers to a partition's leader.
    // v1 (flexible) only: Kafka 4 dropped v0, and every 3.x broker speaks v1.
    api(ApiKey::WriteTxnMarkers, 1, 1),
    api(ApiKey::TxnOffsetCommit, 0, 4),
    api(ApiKey::DescribeAcls, 1, 3),
    api(ApiKey::CreateAcls, 1, 3),
    api(ApiKey::DeleteAcls, 1, 3),
    api(ApiKey::DeleteGroups, 0, 2),
    api(ApiKey::DescribeConfigs, 1, 4),
    api(ApiKey::AlterConfigs, 0, 2),
    api(ApiKey::DescribeLogDirs, 1, 4),
    api(ApiKey::SaslAuthenticate, 0, 2),
    api(ApiKey::CreatePartitions, 0, 3),
    api(ApiKey::ElectLeaders, 0, 2),
    api(ApiKey::IncrementalAlterConfigs, 0, 1),
    api(ApiKey::AlterPartitionReassignments, 0, 0),
    api(ApiKey::ListPartitionReassignments, 0, 0),
    api(ApiKey::OffsetDelete, 0, 0),
    api(ApiKey::DescribeClientQuotas, 0, 1),
    api(ApiKey::AlterClientQuotas, 0, 1),
    api(ApiKey::DescribeUserScramCredentials, 0, 0),
    api(ApiKey::AlterUserScramCredentials, 0, 0),
    api(ApiKey::DescribeCluster, 0, 1),
    api(ApiKey::DescribeProducers, 0, 0),
    api(ApiKey::DescribeTransactions, 0, 0),
    // v2 adds a regular-expression filter on transactional ids.
    api(ApiKey::ListTransactions, 0, 1),
    api(ApiKey::ConsumerGroupHeartbeat, 0, 1),
    api(ApiKey::ConsumerGroupDescribe, 0, 1),
    api(ApiKey::DescribeTopicPartitions, 0, 0),
];

/// The served range of `key`, if Floe serves it at all.
pub fn supported_range(key: ApiKey) -> Option<ApiRange> {
    SUPPORTED_APIS.iter().copied().find(|r| r.key == key)
}

/// Whether `version` of `key` is served.
pub fn is_supported(key: ApiKey, version: i16) -> bool {
    supported_range(key).is_some_and(|r| (r.min..=r.max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_range_is_decodable_by_the_message_crate() {
        for r in SUPPORTED_APIS {
            let crate_range = r.key.valid_versions();
            assert!(r.min <= r.max, "{:?}", r.key);
            assert!(
                crate_range.min <= r.min && r.max <= crate_range.max,
                "{:?}: served {}..={} but the crate decodes {}..={}",
                r.key,
                r.min,
                r.max,
                crate_range.min,
                crate_range.max
            );
        }
    }

    #[test]
    fn unknown_versions_are_not_supported() {
        assert!(is_supported(ApiKey::Fetch, 16));
        assert!(!is_supported(ApiKey::Fetch, 17));
        assert!(!is_supported(ApiKey::Fetch, 3));
        assert!(!is_supported(ApiKey::OffsetCommit, 1));
        assert!(!is_supported(ApiKey::ConsumerGroupHeartbeat, 2));
    }
}
