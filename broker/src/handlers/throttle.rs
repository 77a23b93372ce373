//! The `throttle_time_ms` field of every response Floe sends, behind one
//! trait, so [`super::dispatch`] can set it whatever the API.

use kafka_protocol::messages::*;

/// A response that can tell the client how long it was throttled.
pub(super) trait ThrottleTime {
    /// Sets `throttle_time_ms` (a no-op for responses without it).
    fn set_throttle_time_ms(&mut self, ms: i32);
}

macro_rules! throttled {
    ($($response:ty),* $(,)?) => {
        $(impl ThrottleTime for $response {
            fn set_throttle_time_ms(&mut self, ms: i32) {
                self.throttle_time_ms = ms;
            }
        })*
    };
}

throttled!(
    ProduceResponse,
    ListOffsetsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    FindCoordinatorResponse,
    JoinGroupResponse,
    HeartbeatResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
    DescribeGroupsResponse,
    ListGroupsResponse,
    ApiVersionsResponse,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    DeleteRecordsResponse,
    InitProducerIdResponse,
    OffsetForLeaderEpochResponse,
    DescribeAclsResponse,
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeConfigsResponse,
    AlterConfigsResponse,
    DescribeLogDirsResponse,
    CreatePartitionsResponse,
    DeleteGroupsResponse,
    ElectLeadersResponse,
    IncrementalAlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
    OffsetDeleteResponse,
    DescribeClientQuotasResponse,
    AlterClientQuotasResponse,
    DescribeUserScramCredentialsResponse,
    AlterUserScramCredentialsResponse,
    DescribeClusterResponse,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupDescribeResponse,
    DescribeTopicPartitionsResponse,
    AddPartitionsToTxnResponse,
    AddOffsetsToTxnResponse,
    EndTxnResponse,
    TxnOffsetCommitResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
    DescribeProducersResponse,
);

macro_rules! unthrottled {
    ($($response:ty),* $(,)?) => {
        $(impl ThrottleTime for $response {
            fn set_throttle_time_ms(&mut self, _ms: i32) {}
        })*
    };
}

// WriteTxnMarkers has no throttle field: brokers are not throttled.
unthrottled!(SaslHandshakeResponse, SaslAuthenticateResponse, WriteTxnMarkersResponse);
