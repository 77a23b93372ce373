//! Every advertised version of every served API, through [`super::dispatch`].
//!
//! ApiVersions promises each version in its ranges. This test holds the
//! promise: for every API and version it encodes a realistic request with
//! the `kafka-protocol` crate, dispatches it against a real `LogManager` in
//! a temporary directory, and decodes the response at the same version,
//! checking the error codes. An encoder refusal (a field the version lacks)
//! or a decoding mismatch fails here rather than in a client.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use floe_protocol::apis::SUPPORTED_APIS;
use floe_protocol::frame::parse_request_header;
use floe_storage::{LogConfig, LogManager};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::{dispatch, Reply};
use crate::broker::Broker;
use crate::config::{ConfigBuilder, Layer};
use crate::metrics::Metrics;
use floe_coordinator::group::group::JoinRequest;
use floe_coordinator::group::records::OffsetAndMetadata;

pub(super) async fn broker(dir: &std::path::Path) -> Broker {
    // The authorizer is on, so the ACL APIs answer; the test session's
    // ANONYMOUS principal is a super user and unbound resources are open, so
    // every other API is allowed.
    broker_with(
        dir,
        &[
            ("authorizer.class.name", "floe"),
            ("super.users", "User:ANONYMOUS"),
            ("allow.everyone.if.no.acl.found", "true"),
        ],
    )
    .await
}

/// A test broker with extra settings.
pub(super) async fn broker_with(dir: &std::path::Path, settings: &[(&str, &str)]) -> Broker {
    let mut builder = ConfigBuilder::new();
    for (k, v) in settings {
        builder.set(k, *v, Layer::CommandLine).expect("setting");
    }
    builder.set("group.initial.rebalance.delay.ms", "0", Layer::CommandLine).expect("setting");
    builder
        .set(
            "listeners",
            "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
            Layer::CommandLine,
        )
        .expect("setting");
    builder
        .set("connection.failed.authentication.delay.ms", "0", Layer::CommandLine)
        .expect("setting");
    let mut config = builder.build().expect("default config");
    config.data_dir = dir.to_path_buf();
    let credentials = Arc::new(
        crate::security::credentials::CredentialStore::open(dir, None).expect("credentials"),
    );
    let logs = Arc::new(
        LogManager::open_with_node_id(dir, Some(config.node_id), LogConfig::default())
            .expect("open logs"),
    );
    let groups = Arc::new(
        floe_coordinator::group::GroupCoordinators::single(
            config.coordinator_config(),
            logs.clone(),
            config.offsets_topic_num_partitions,
        )
        .expect("coordinator"),
    );
    groups.load_all().await.expect("load offsets");
    let authorizer = Arc::new(
        crate::authorizer::Authorizer::open(config.authorizer.clone(), dir).expect("authorizer"),
    );
    let markers =
        Arc::new(crate::txn_markers::LocalMarkerWriter::new(logs.clone(), groups.clone()));
    let txns = Arc::new(
        floe_coordinator::transaction::TransactionCoordinators::open(
            config.transactions.clone(),
            logs.clone(),
            markers,
            config.transaction_state_log_num_partitions,
        )
        .expect("transaction coordinator"),
    );
    let quotas = Arc::new(crate::quota::ClientQuotas::open(dir).expect("quotas"));
    let limits = crate::server::limits::ConnectionLimits::new(
        config.max_connections,
        config.max_connections_per_ip,
    );
    let dynamic_config = Arc::new(
        crate::dynamic_config::DynamicBrokerConfig::open(
            dir,
            config.effective.clone(),
            logs.clone(),
            limits,
        )
        .expect("dynamic config"),
    );
    let cluster = floe_cluster::Membership::join(floe_cluster::MembershipSettings {
        store: floe_cluster::MetadataStoreUrl::Local,
        registration: floe_cluster::BrokerRegistration {
            node_id: config.node_id,
            rack: None,
            endpoints: Vec::new(),
            shutting_down: false,
            schema_registry: None,
        },
        session_timeout: std::time::Duration::from_secs(9),
        unclean_leader_election: false,
        leader_rebalance: None,
    })
    .await
    .expect("local membership");
    let metrics = Arc::new(Metrics::new());
    let fetchers = floe_cluster::replication::fetcher::ReplicaFetcherManager::new(
        config.node_id,
        "PLAINTEXT".into(),
        crate::cluster_replication::fetcher_settings(&config, Default::default()),
        metrics.replication.clone(),
        metrics.log_corrupt_ranges.clone(),
    );
    let replicas = Arc::new(
        floe_cluster::replication::ReplicaManager::new(
            config.node_id,
            std::time::Duration::from_secs(30),
            fetchers,
            metrics.replication.clone(),
        )
        .0,
    );
    Broker {
        config,
        logs,
        metrics,
        replicas,
        groups,
        txns,
        credentials,
        authorizer,
        quotas,
        dynamic_config,
        ktls: false,
        cluster,
        schemas: None,
        table_reads: None,
        shutdown: tokio::sync::watch::channel(false).1,
    }
}

/// A member of `group` (generation 1), joined through the coordinator directly.
async fn member(broker: &Broker, group: &str) -> (String, i32) {
    let req = JoinRequest {
        member_id: String::new(),
        instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"meta"))],
        require_known_member_id: false,
    };
    let r = broker.groups.of(group).join(group, req).await;
    assert_eq!(r.error, None);
    (r.member_id, r.generation)
}

/// Commits `offset` for t-0 as a group without members would.
async fn commit(broker: &Broker, group: &str, offset: i64) {
    let o =
        OffsetAndMetadata { offset, leader_epoch: -1, metadata: "m".into(), commit_timestamp: 1 };
    broker
        .groups
        .of(group)
        .commit_offsets(group, "", None, -1, vec![("t".into(), 0, o)])
        .await
        .expect("commit");
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

fn batch() -> Bytes {
    let records: Vec<Record> = (0..3)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: -1,
            timestamp: 1_700_000_000_000 + i,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .expect("encode batch");
    buf.freeze()
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A transactional id `id` initialised through the coordinator: (producer id, epoch).
async fn txn_init(broker: &Broker, id: &str) -> (i64, i16) {
    broker.txns.of(id).init_producer_id(id, 60_000, None).await.expect("init transactional id")
}

/// `id`'s transaction with t-0 added, as AddPartitionsToTxn would.
async fn txn_open(broker: &Broker, id: &str) -> (i64, i16) {
    let (pid, epoch) = txn_init(broker, id).await;
    broker
        .txns
        .of(id)
        .add_partitions(id, pid, epoch, &[("t".to_string(), 0)], false)
        .await
        .expect("add t-0");
    (pid, epoch)
}

fn txn_id(text: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(text.to_string()))
}

/// A session on a plaintext listener advertised as 127.0.0.1:9092.
pub(super) fn test_session() -> crate::session::Session {
    let endpoint = crate::server::endpoint::Endpoint::plaintext_for_tests("127.0.0.1", 9092);
    crate::session::Session::new("127.0.0.1:1".parse().expect("addr"), Arc::new(endpoint))
}

/// Encodes header + body as a client would, and dispatches it.
pub(super) async fn roundtrip<Req, Resp>(
    broker: &Broker,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> Resp
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable,
{
    roundtrip_in(broker, &mut test_session(), api, version, request).await
}

/// A session on a SASL_PLAINTEXT listener.
fn sasl_session() -> crate::session::Session {
    let mut endpoint = crate::server::endpoint::Endpoint::plaintext_for_tests("127.0.0.1", 9092);
    endpoint.name = "SASL_PLAINTEXT".into();
    endpoint.protocol = crate::listeners::SecurityProtocol::SaslPlaintext;
    crate::session::Session::new("127.0.0.1:1".parse().expect("addr"), Arc::new(endpoint))
}

/// [`roundtrip`] on a given session.
async fn roundtrip_in<Req, Resp>(
    broker: &Broker,
    session: &mut crate::session::Session,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> Resp
where
    Req: Encodable + HeaderVersion,
    Resp: Decodable,
{
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(i32::from(version) + 1000)
        .with_client_id(Some(StrBytes::from_static_str("version-test")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, Req::header_version(version)).expect("encode header");
    request
        .encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("encode {api:?} v{version} request: {e}"));
    let frame = parse_request_header(buf.freeze()).expect("parse header");
    let reply = dispatch(broker, frame, session)
        .await
        .unwrap_or_else(|e| panic!("{api:?} v{version} rejected: {e}"));
    let mut bytes = match reply {
        Reply::Frame(b) => b,
        Reply::Parts(p) => p.to_contiguous().expect("contiguous"),
        Reply::None => panic!("{api:?} v{version}: no response"),
        Reply::AwaitingReplication(p) => match p.finish(broker).await.expect("encode") {
            Reply::Frame(b) => b,
            other => panic!("{api:?} v{version}: {other:?}"),
        },
    };
    let size = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    assert_eq!(size + 4, bytes.len(), "{api:?} v{version}: size prefix");
    let _ = bytes.split_to(4);
    let header = ResponseHeader::decode(&mut bytes, api.response_header_version(version))
        .expect("response header");
    assert_eq!(header.correlation_id, i32::from(version) + 1000);
    let resp = Resp::decode(&mut bytes, version)
        .unwrap_or_else(|e| panic!("decode {api:?} v{version} response: {e}"));
    assert!(bytes.is_empty(), "{api:?} v{version}: {} trailing bytes", bytes.len());
    resp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_version_of_every_api_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker(dir.path()).await;
    let topic = broker.logs.create_topic("t", 1, BTreeMap::new()).expect("create t");
    let topic_id = topic.id();
    let mut checked = 0;
    for range in SUPPORTED_APIS {
        for v in range.min..=range.max {
            checked += 1;
            match range.key {
                ApiKey::ApiVersions => {
                    let mut req = ApiVersionsRequest::default();
                    if v >= 3 {
                        req = req
                            .with_client_software_name(StrBytes::from_static_str("test"))
                            .with_client_software_version(StrBytes::from_static_str("1"));
                    }
                    let r: ApiVersionsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0);
                    assert_eq!(r.api_keys.len(), SUPPORTED_APIS.len());
                }
                ApiKey::Metadata => {
                    let t = metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(name("t")));
                    let mut req = MetadataRequest::default().with_topics(Some(vec![t]));
                    if v >= 4 {
                        req = req.with_allow_auto_topic_creation(false);
                    }
                    let r: MetadataResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.topics.len(), 1, "v{v}");
                    assert_eq!(r.topics[0].error_code, 0, "v{v}");
                    assert_eq!(r.topics[0].partitions.len(), 1);
                    assert_eq!(r.brokers[0].port, 9092);
                }
                ApiKey::Produce => {
                    let p = produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch()));
                    let t = produce_request::TopicProduceData::default()
                        .with_name(name("t"))
                        .with_partition_data(vec![p]);
                    let req = ProduceRequest::default()
                        .with_acks(-1)
                        .with_timeout_ms(1000)
                        .with_topic_data(vec![t]);
                    let r: ProduceResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.responses[0].partition_responses[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert!(p.base_offset >= 0);
                }
                ApiKey::Fetch => {
                    let p = fetch_request::FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20);
                    let mut t = fetch_request::FetchTopic::default().with_partitions(vec![p]);
                    if v >= 13 {
                        t = t.with_topic_id(topic_id);
                    } else {
                        t = t.with_topic(name("t"));
                    }
                    let req = FetchRequest::default()
                        .with_max_wait_ms(0)
                        .with_min_bytes(1)
                        .with_topics(vec![t]);
                    let r: FetchResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.responses[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert!(p.records.as_ref().is_some_and(|b| !b.is_empty()), "v{v}: no records");
                }
                ApiKey::ListOffsets => {
                    let p = list_offsets_request::ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-1);
                    let t = list_offsets_request::ListOffsetsTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![p]);
                    let req = ListOffsetsRequest::default().with_topics(vec![t]);
                    let r: ListOffsetsResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert_eq!(
                        p.offset,
                        broker.logs.partition("t", 0).expect("t-0").high_watermark()
                    );
                }
                ApiKey::CreateTopics => {
                    let t = create_topics_request::CreatableTopic::default()
                        .with_name(name(&format!("c{v}")))
                        .with_num_partitions(2)
                        .with_replication_factor(1)
                        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                            .with_name(StrBytes::from_static_str("retention.ms"))
                            .with_value(Some(StrBytes::from_static_str("3600000")))]);
                    let req =
                        CreateTopicsRequest::default().with_topics(vec![t]).with_timeout_ms(1000);
                    let r: CreateTopicsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.topics[0].error_code, 0, "v{v}: {:?}", r.topics[0].error_message);
                    assert_eq!(
                        broker.logs.topic(&format!("c{v}")).expect("created").partition_count(),
                        2
                    );
                }
                ApiKey::DeleteTopics => {
                    let victim = format!("d{v}");
                    broker.logs.create_topic(&victim, 1, BTreeMap::new()).expect("create victim");
                    let req = if v >= 6 {
                        DeleteTopicsRequest::default()
                            .with_topics(vec![delete_topics_request::DeleteTopicState::default()
                                .with_name(Some(name(&victim)))])
                    } else {
                        DeleteTopicsRequest::default().with_topic_names(vec![name(&victim)])
                    };
                    let r: DeleteTopicsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "v{v}");
                    assert!(broker.logs.topic(&victim).is_none());
                }
                ApiKey::DeleteRecords => {
                    let p = delete_records_request::DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(1);
                    let t = delete_records_request::DeleteRecordsTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![p]);
                    let req =
                        DeleteRecordsRequest::default().with_topics(vec![t]).with_timeout_ms(1000);
                    let r: DeleteRecordsResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert_eq!(p.low_watermark, 1);
                }
                ApiKey::InitProducerId => {
                    let req = InitProducerIdRequest::default()
                        .with_transactional_id(None)
                        .with_transaction_timeout_ms(60_000);
                    let r: InitProducerIdResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!((r.error_code, r.producer_epoch), (0, 0), "v{v}");
                    if v >= 3 {
                        let bump =
                            req.clone().with_producer_id(r.producer_id).with_producer_epoch(0);
                        let b: InitProducerIdResponse =
                            roundtrip(&broker, range.key, v, &bump).await;
                        assert_eq!(
                            (b.error_code, b.producer_id, b.producer_epoch),
                            (0, r.producer_id, 1),
                            "v{v}"
                        );
                    }
                    let txn = req.with_transactional_id(Some(TransactionalId(
                        StrBytes::from_static_str("tx"),
                    )));
                    let t: InitProducerIdResponse = roundtrip(&broker, range.key, v, &txn).await;
                    assert_eq!(t.error_code, 0, "v{v}");
                    assert!(t.producer_id.0 >= 0 && t.producer_epoch >= 0, "v{v}");
                }
                ApiKey::DescribeConfigs => {
                    let res = describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t"));
                    let broker_res = describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(StrBytes::from_static_str("1"));
                    let req = DescribeConfigsRequest::default()
                        .with_resources(vec![res, broker_res])
                        .with_include_synonyms(true);
                    let r: DescribeConfigsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "v{v}");
                    assert!(r.results[0].configs.iter().any(|c| c.name.as_str() == "retention.ms"));
                    assert_eq!(r.results[1].error_code, 0, "v{v}");
                    assert!(r.results[1]
                        .configs
                        .iter()
                        .any(|c| c.name.as_str() == "log.segment.bytes"));
                    let dirs = r.results[1]
                        .configs
                        .iter()
                        .find(|c| c.name.as_str() == "log.dirs")
                        .expect("log.dirs");
                    let retention = r.results[1]
                        .configs
                        .iter()
                        .find(|c| c.name.as_str() == "log.retention.ms")
                        .expect("log.retention.ms");
                    assert!(dirs.read_only && !retention.read_only, "v{v}");
                }
                ApiKey::AlterConfigs => {
                    let c = alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_string(format!(
                            "{}",
                            1_000_000 + i64::from(v)
                        ))));
                    let res = alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t"))
                        .with_configs(vec![c]);
                    let req = AlterConfigsRequest::default().with_resources(vec![res]);
                    let r: AlterConfigsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(
                        r.responses[0].error_code, 0,
                        "v{v}: {:?}",
                        r.responses[0].error_message
                    );
                    assert_eq!(
                        broker.logs.topic("t").expect("t").config().retention_ms,
                        1_000_000 + i64::from(v)
                    );
                }
                ApiKey::IncrementalAlterConfigs => {
                    let c = incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("segment.bytes"))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_static_str("1048576")));
                    let res = incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t"))
                        .with_configs(vec![c]);
                    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![res]);
                    let r: IncrementalAlterConfigsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(
                        r.responses[0].error_code, 0,
                        "v{v}: {:?}",
                        r.responses[0].error_message
                    );
                    let cfg = broker.logs.topic("t").expect("t").config();
                    assert_eq!(cfg.segment_bytes, 1_048_576);
                    // BROKER resources: a dynamic setting on this broker; a read-only one refused on the default.
                    let set = |name: &str, value: &str| {
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(s(name))
                            .with_config_operation(0)
                            .with_value(Some(s(value)))
                    };
                    let this = incremental_alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(s("1"))
                        .with_configs(vec![set(
                            "log.roll.ms",
                            &format!("{}", 3_600_000 + i64::from(v)),
                        )]);
                    let default =
                        incremental_alter_configs_request::AlterConfigsResource::default()
                            .with_resource_type(4)
                            .with_resource_name(s(""))
                            .with_configs(vec![set("log.dirs", "/elsewhere")]);
                    let req = IncrementalAlterConfigsRequest::default()
                        .with_resources(vec![this, default]);
                    let r: IncrementalAlterConfigsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(
                        r.responses[0].error_code, 0,
                        "v{v}: {:?}",
                        r.responses[0].error_message
                    );
                    assert_eq!(r.responses[1].error_code, ResponseError::InvalidRequest.code());
                    assert_eq!(broker.logs.default_config().segment_ms, 3_600_000 + i64::from(v));
                    assert_eq!(
                        broker.logs.partition("t", 0).expect("t-0").config().segment_ms,
                        3_600_000 + i64::from(v)
                    );
                }
                ApiKey::CreatePartitions => {
                    let name_v = format!("p{v}");
                    broker.logs.create_topic(&name_v, 1, BTreeMap::new()).expect("create");
                    let t = create_partitions_request::CreatePartitionsTopic::default()
                        .with_name(name(&name_v))
                        .with_count(3);
                    let req = CreatePartitionsRequest::default()
                        .with_topics(vec![t])
                        .with_timeout_ms(1000);
                    let r: CreatePartitionsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "v{v}");
                    assert_eq!(broker.logs.topic(&name_v).expect("topic").partition_count(), 3);
                }
                ApiKey::DescribeCluster => {
                    let req = DescribeClusterRequest::default();
                    let r: DescribeClusterResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0);
                    assert_eq!(r.brokers.len(), 1);
                    assert_eq!(r.cluster_id.as_str(), broker.logs.cluster_id());
                }
                ApiKey::FindCoordinator => {
                    let mut req = FindCoordinatorRequest::default();
                    if v >= 4 {
                        req = req.with_coordinator_keys(vec![s("g1"), s("g2")]);
                    } else {
                        req = req.with_key(s("g1"));
                    }
                    let r: FindCoordinatorResponse = roundtrip(&broker, range.key, v, &req).await;
                    if v >= 4 {
                        assert_eq!(r.coordinators.len(), 2);
                        assert!(r
                            .coordinators
                            .iter()
                            .all(|c| c.error_code == 0 && c.port == 9092 && c.node_id.0 == 1));
                    } else {
                        assert_eq!((r.error_code, r.port, r.node_id.0), (0, 9092, 1), "v{v}");
                    }
                }
                ApiKey::JoinGroup => {
                    let group = GroupId(s(&format!("j{v}")));
                    let protocol = join_group_request::JoinGroupRequestProtocol::default()
                        .with_name(s("range"))
                        .with_metadata(Bytes::from_static(b"meta"));
                    let mut req = JoinGroupRequest::default()
                        .with_group_id(group)
                        .with_session_timeout_ms(10_000)
                        .with_protocol_type(s("consumer"))
                        .with_protocols(vec![protocol]);
                    if v >= 1 {
                        req = req.with_rebalance_timeout_ms(10_000);
                    }
                    let mut r: JoinGroupResponse = roundtrip(&broker, range.key, v, &req).await;
                    if v >= 4 {
                        assert_eq!(r.error_code, ResponseError::MemberIdRequired.code(), "v{v}");
                        assert!(!r.member_id.is_empty());
                        req = req.with_member_id(r.member_id.clone());
                        r = roundtrip(&broker, range.key, v, &req).await;
                    }
                    assert_eq!(r.error_code, 0, "v{v}");
                    assert_eq!(r.generation_id, 1);
                    assert_eq!(r.leader, r.member_id);
                    assert_eq!(r.protocol_name.as_deref(), Some("range"));
                    assert_eq!(r.members.len(), 1);
                    assert_eq!(&r.members[0].metadata[..], b"meta");
                }
                ApiKey::SyncGroup => {
                    let group = format!("s{v}");
                    let (id, generation) = member(&broker, &group).await;
                    let a = sync_group_request::SyncGroupRequestAssignment::default()
                        .with_member_id(s(&id))
                        .with_assignment(Bytes::from_static(b"assigned"));
                    let mut req = SyncGroupRequest::default()
                        .with_group_id(GroupId(s(&group)))
                        .with_generation_id(generation)
                        .with_member_id(s(&id))
                        .with_assignments(vec![a]);
                    if v >= 5 {
                        req = req
                            .with_protocol_type(Some(s("consumer")))
                            .with_protocol_name(Some(s("range")));
                    }
                    let r: SyncGroupResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    assert_eq!(&r.assignment[..], b"assigned");
                }
                ApiKey::Heartbeat => {
                    let group = format!("h{v}");
                    let (id, generation) = member(&broker, &group).await;
                    let req = HeartbeatRequest::default()
                        .with_group_id(GroupId(s(&group)))
                        .with_generation_id(generation)
                        .with_member_id(s(&id));
                    let r: HeartbeatResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    let r: HeartbeatResponse =
                        roundtrip(&broker, range.key, v, &req.with_generation_id(generation + 1))
                            .await;
                    assert_eq!(r.error_code, ResponseError::IllegalGeneration.code(), "v{v}");
                }
                ApiKey::LeaveGroup => {
                    let group = format!("l{v}");
                    let (id, _) = member(&broker, &group).await;
                    let mut req = LeaveGroupRequest::default().with_group_id(GroupId(s(&group)));
                    if v >= 3 {
                        let m =
                            leave_group_request::MemberIdentity::default().with_member_id(s(&id));
                        req = req.with_members(vec![
                            m,
                            leave_group_request::MemberIdentity::default()
                                .with_member_id(s("nobody")),
                        ]);
                    } else {
                        req = req.with_member_id(s(&id));
                    }
                    let r: LeaveGroupResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    if v >= 3 {
                        assert_eq!(r.members[0].error_code, 0);
                        assert_eq!(r.members[1].error_code, ResponseError::UnknownMemberId.code());
                    }
                }
                ApiKey::OffsetCommit => {
                    let group = format!("o{v}");
                    let p = offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(2)
                        .with_committed_metadata(Some(s("m")));
                    let missing = offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(7);
                    let t = offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![p, missing]);
                    let req = OffsetCommitRequest::default()
                        .with_group_id(GroupId(s(&group)))
                        .with_generation_id_or_member_epoch(-1)
                        .with_topics(vec![t]);
                    let r: OffsetCommitResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.topics[0].partitions[0].error_code, 0, "v{v}");
                    assert_eq!(
                        r.topics[0].partitions[1].error_code,
                        ResponseError::UnknownTopicOrPartition.code()
                    );
                    let found =
                        broker.groups.of(&group).fetch_offsets(&group, None).expect("fetch");
                    assert_eq!(found[0].1[0].1.as_ref().map(|o| o.offset), Some(2));
                }
                ApiKey::OffsetFetch => {
                    let group = format!("f{v}");
                    commit(&broker, &group, 5).await;
                    let offsets: Vec<(i32, i64)> = if v >= 8 {
                        let t = offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(name("t"))
                            .with_partition_indexes(vec![0, 1]);
                        let g = offset_fetch_request::OffsetFetchRequestGroup::default()
                            .with_group_id(GroupId(s(&group)))
                            .with_topics(Some(vec![t]));
                        let all = offset_fetch_request::OffsetFetchRequestGroup::default()
                            .with_group_id(GroupId(s(&group)))
                            .with_topics(None);
                        let req = OffsetFetchRequest::default().with_groups(vec![g, all]);
                        let r: OffsetFetchResponse = roundtrip(&broker, range.key, v, &req).await;
                        assert_eq!(r.groups[0].error_code, 0);
                        assert_eq!(r.groups[1].topics[0].partitions.len(), 1, "v{v}: all topics");
                        r.groups[0].topics[0]
                            .partitions
                            .iter()
                            .map(|p| (p.partition_index, p.committed_offset))
                            .collect()
                    } else {
                        let t = offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(name("t"))
                            .with_partition_indexes(vec![0, 1]);
                        let req = OffsetFetchRequest::default()
                            .with_group_id(GroupId(s(&group)))
                            .with_topics(Some(vec![t]));
                        let r: OffsetFetchResponse = roundtrip(&broker, range.key, v, &req).await;
                        assert_eq!(r.error_code, 0);
                        r.topics[0]
                            .partitions
                            .iter()
                            .map(|p| (p.partition_index, p.committed_offset))
                            .collect()
                    };
                    assert_eq!(offsets, vec![(0, 5), (1, -1)], "v{v}");
                }
                ApiKey::DescribeGroups => {
                    let group = format!("dg{v}");
                    commit(&broker, &group, 1).await;
                    let (id, _) = member(&broker, &format!("dm{v}")).await;
                    let req = DescribeGroupsRequest::default()
                        .with_groups(vec![
                            GroupId(s(&group)),
                            GroupId(s(&format!("dm{v}"))),
                            GroupId(s("nope")),
                        ])
                        .with_include_authorized_operations(v >= 3);
                    let r: DescribeGroupsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(
                        (r.groups[0].error_code, r.groups[0].group_state.as_str()),
                        (0, "Empty"),
                        "v{v}"
                    );
                    assert_eq!(r.groups[1].group_state.as_str(), "CompletingRebalance");
                    assert_eq!(r.groups[1].members[0].member_id.as_str(), id);
                    let missing = if v >= 6 { ResponseError::GroupIdNotFound.code() } else { 0 };
                    assert_eq!(
                        (r.groups[2].error_code, r.groups[2].group_state.as_str()),
                        (missing, "Dead")
                    );
                }
                ApiKey::ListGroups => {
                    let mut req = ListGroupsRequest::default();
                    if v >= 4 {
                        req = req.with_states_filter(vec![s("Empty")]);
                    }
                    let r: ListGroupsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0);
                    assert!(r.groups.iter().any(|g| g.group_id.as_str() == "o2"), "v{v}");
                    if v >= 4 {
                        assert!(r.groups.iter().all(|g| g.group_state.as_str() == "Empty"));
                    }
                }
                ApiKey::DeleteGroups => {
                    let group = format!("del{v}");
                    commit(&broker, &group, 1).await;
                    let (_, _) = member(&broker, &format!("busy{v}")).await;
                    let req = DeleteGroupsRequest::default().with_groups_names(vec![
                        GroupId(s(&group)),
                        GroupId(s(&group)),
                        GroupId(s(&format!("busy{v}"))),
                    ]);
                    let r: DeleteGroupsResponse = roundtrip(&broker, range.key, v, &req).await;
                    let codes: Vec<i16> = r.results.iter().map(|g| g.error_code).collect();
                    assert_eq!(
                        codes,
                        vec![
                            0,
                            ResponseError::GroupIdNotFound.code(),
                            ResponseError::NonEmptyGroup.code()
                        ],
                        "v{v}"
                    );
                }
                ApiKey::OffsetDelete => {
                    let group = format!("od{v}");
                    commit(&broker, &group, 1).await;
                    let p = offset_delete_request::OffsetDeleteRequestPartition::default()
                        .with_partition_index(0);
                    let t = offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![p]);
                    let req = OffsetDeleteRequest::default()
                        .with_group_id(GroupId(s(&group)))
                        .with_topics(vec![t]);
                    let r: OffsetDeleteResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!((r.error_code, r.topics[0].partitions[0].error_code), (0, 0));
                    assert!(broker
                        .groups
                        .of(&group)
                        .fetch_offsets(&group, None)
                        .expect("fetch")
                        .is_empty());
                    let r: OffsetDeleteResponse = roundtrip(
                        &broker,
                        range.key,
                        v,
                        &req.clone().with_group_id(GroupId(s("none"))),
                    )
                    .await;
                    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
                }
                ApiKey::ConsumerGroupHeartbeat => {
                    let group = GroupId(s(&format!("cg{v}")));
                    let member_id = if v >= 1 { s(&format!("m{v}")) } else { StrBytes::default() };
                    let join = ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(group.clone())
                        .with_member_id(member_id)
                        .with_member_epoch(0)
                        .with_rebalance_timeout_ms(30_000)
                        .with_subscribed_topic_names(Some(vec![name("t")]))
                        .with_server_assignor(Some(s("range")))
                        .with_topic_partitions(Some(vec![]));
                    let r: ConsumerGroupHeartbeatResponse =
                        roundtrip(&broker, range.key, v, &join).await;
                    assert_eq!(r.error_code, 0, "v{v}: {:?}", r.error_message);
                    assert_eq!((r.member_epoch, r.heartbeat_interval_ms), (1, 5000));
                    let id = r.member_id.clone().expect("member id");
                    assert!(!id.is_empty());
                    let a = r.assignment.expect("assignment");
                    assert_eq!(
                        (a.topic_partitions[0].topic_id, a.topic_partitions[0].partitions.clone()),
                        (topic_id, vec![0])
                    );
                    let beat = ConsumerGroupHeartbeatRequest::default()
                        .with_group_id(group.clone())
                        .with_member_id(id.clone())
                        .with_member_epoch(1)
                        .with_rebalance_timeout_ms(-1);
                    let r: ConsumerGroupHeartbeatResponse =
                        roundtrip(&broker, range.key, v, &beat).await;
                    assert_eq!(
                        (r.error_code, r.member_epoch, r.assignment.is_none()),
                        (0, 1, true),
                        "v{v}"
                    );
                    let r: ConsumerGroupHeartbeatResponse =
                        roundtrip(&broker, range.key, v, &beat.clone().with_member_epoch(7)).await;
                    assert_eq!(r.error_code, ResponseError::FencedMemberEpoch.code());
                    let bad = join
                        .clone()
                        .with_member_id(s("other"))
                        .with_server_assignor(Some(s("nope")));
                    let r: ConsumerGroupHeartbeatResponse =
                        roundtrip(&broker, range.key, v, &bad).await;
                    assert_eq!(r.error_code, ResponseError::UnsupportedAssignor.code());
                    // A classic group's id is not a consumer group's.
                    let (_, _) = member(&broker, &format!("classic{v}")).await;
                    let r: ConsumerGroupHeartbeatResponse = roundtrip(
                        &broker,
                        range.key,
                        v,
                        &join.clone().with_group_id(GroupId(s(&format!("classic{v}")))),
                    )
                    .await;
                    assert_eq!(r.error_code, ResponseError::GroupIdNotFound.code());
                    // Offsets: the member epoch must be current.
                    let p = offset_commit_request::OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(1);
                    let t = offset_commit_request::OffsetCommitRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![p]);
                    let commit = OffsetCommitRequest::default()
                        .with_group_id(group.clone())
                        .with_member_id(id.clone())
                        .with_topics(vec![t]);
                    let r: OffsetCommitResponse = roundtrip(
                        &broker,
                        ApiKey::OffsetCommit,
                        9,
                        &commit.clone().with_generation_id_or_member_epoch(1),
                    )
                    .await;
                    assert_eq!(r.topics[0].partitions[0].error_code, 0);
                    let r: OffsetCommitResponse = roundtrip(
                        &broker,
                        ApiKey::OffsetCommit,
                        9,
                        &commit.with_generation_id_or_member_epoch(0),
                    )
                    .await;
                    assert_eq!(
                        r.topics[0].partitions[0].error_code,
                        ResponseError::StaleMemberEpoch.code()
                    );
                    let r: ConsumerGroupHeartbeatResponse =
                        roundtrip(&broker, range.key, v, &beat.with_member_epoch(-1)).await;
                    assert_eq!((r.error_code, r.member_epoch), (0, -1));
                }
                ApiKey::ConsumerGroupDescribe => {
                    let group = format!("cd{v}");
                    let hb = floe_coordinator::group::consumer_group::Heartbeat {
                        member_id: "m".into(),
                        rebalance_timeout_ms: 30_000,
                        subscribed_topic_names: Some(vec!["t".into()]),
                        client_id: "c".into(),
                        ..Default::default()
                    };
                    broker.groups.of(&group).consumer_heartbeat(&group, hb).expect("join");
                    let req = ConsumerGroupDescribeRequest::default()
                        .with_group_ids(vec![GroupId(s(&group)), GroupId(s("nope"))])
                        .with_include_authorized_operations(true);
                    let r: ConsumerGroupDescribeResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    let g = &r.groups[0];
                    assert_eq!(
                        (
                            g.error_code,
                            g.group_state.as_str(),
                            g.group_epoch,
                            g.assignor_name.as_str()
                        ),
                        (0, "Stable", 1, "uniform")
                    );
                    assert_eq!(
                        g.members[0].assignment.topic_partitions[0].topic_name.0.as_str(),
                        "t"
                    );
                    assert_eq!(
                        g.members[0].target_assignment.topic_partitions[0].partitions,
                        vec![0]
                    );
                    assert_eq!(r.groups[1].error_code, ResponseError::GroupIdNotFound.code());
                    // Listed with its type, and described by DescribeGroups too.
                    let r: ListGroupsResponse =
                        roundtrip(&broker, ApiKey::ListGroups, 5, &ListGroupsRequest::default())
                            .await;
                    let listed =
                        r.groups.iter().find(|l| l.group_id.as_str() == group).expect("listed");
                    assert_eq!(
                        (listed.group_type.as_str(), listed.protocol_type.as_str()),
                        ("consumer", "consumer")
                    );
                    let req =
                        DescribeGroupsRequest::default().with_groups(vec![GroupId(s(&group))]);
                    let r: DescribeGroupsResponse =
                        roundtrip(&broker, ApiKey::DescribeGroups, 5, &req).await;
                    assert_eq!(
                        (r.groups[0].protocol_type.as_str(), r.groups[0].members.len()),
                        ("consumer", 1)
                    );
                }
                ApiKey::SaslHandshake => {
                    let mut session = sasl_session();
                    let req = SaslHandshakeRequest::default().with_mechanism(s("SCRAM-SHA-256"));
                    let r: SaslHandshakeResponse =
                        roundtrip_in(&broker, &mut session, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    assert!(r.mechanisms.iter().any(|m| m.as_str() == "PLAIN"));
                    assert_eq!(
                        session.auth.unframed_tokens,
                        v == 0,
                        "v0 is followed by bare tokens"
                    );
                    let req = SaslHandshakeRequest::default().with_mechanism(s("GSSAPI"));
                    let r: SaslHandshakeResponse =
                        roundtrip_in(&broker, &mut sasl_session(), range.key, v, &req).await;
                    assert_eq!(r.error_code, ResponseError::UnsupportedSaslMechanism.code());
                }
                ApiKey::SaslAuthenticate => {
                    // A PLAIN user made through AlterUserScramCredentials, then PLAIN with right and wrong passwords.
                    let user = format!("u{v}");
                    let salt = b"0123456789abcdef";
                    let salted = crate::security::scram::ScramMechanism::Sha256.salted_password(
                        b"pw",
                        salt,
                        std::num::NonZeroU32::new(4096).expect("nonzero"),
                    );
                    let up =
                        alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                            .with_name(s(&user))
                            .with_mechanism(1)
                            .with_iterations(4096)
                            .with_salt(Bytes::copy_from_slice(salt))
                            .with_salted_password(Bytes::from(salted));
                    let r: AlterUserScramCredentialsResponse = roundtrip(
                        &broker,
                        ApiKey::AlterUserScramCredentials,
                        0,
                        &AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]),
                    )
                    .await;
                    assert_eq!(r.results[0].error_code, 0);
                    for (password, expect) in
                        [("pw", 0), ("nope", ResponseError::SaslAuthenticationFailed.code())]
                    {
                        let mut session = sasl_session();
                        let hs = SaslHandshakeRequest::default().with_mechanism(s("PLAIN"));
                        let _: SaslHandshakeResponse =
                            roundtrip_in(&broker, &mut session, ApiKey::SaslHandshake, 1, &hs)
                                .await;
                        let token = format!("\0{user}\0{password}");
                        let req =
                            SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token));
                        let r: SaslAuthenticateResponse =
                            roundtrip_in(&broker, &mut session, range.key, v, &req).await;
                        assert_eq!(r.error_code, expect, "v{v} password {password}");
                        assert_eq!(session.auth.principal.is_some(), expect == 0);
                    }
                }
                ApiKey::DescribeUserScramCredentials => {
                    let req =
                        DescribeUserScramCredentialsRequest::default().with_users(Some(vec![
                            describe_user_scram_credentials_request::UserName::default()
                                .with_name(s("nobody")),
                        ]));
                    let r: DescribeUserScramCredentialsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, ResponseError::ResourceNotFound.code());
                }
                ApiKey::AlterUserScramCredentials => {
                    let up =
                        alter_user_scram_credentials_request::ScramCredentialUpsertion::default()
                            .with_name(s("weak"))
                            .with_mechanism(2)
                            .with_iterations(10)
                            .with_salt(Bytes::from_static(b"salt"))
                            .with_salted_password(Bytes::from_static(b"x"));
                    let del =
                        alter_user_scram_credentials_request::ScramCredentialDeletion::default()
                            .with_name(s("ghost"))
                            .with_mechanism(1);
                    let req = AlterUserScramCredentialsRequest::default()
                        .with_upsertions(vec![up])
                        .with_deletions(vec![del]);
                    let r: AlterUserScramCredentialsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    let code = |u: &str| {
                        r.results.iter().find(|x| x.user.as_str() == u).map(|x| x.error_code)
                    };
                    assert_eq!(code("weak"), Some(ResponseError::UnacceptableCredential.code()));
                    assert_eq!(code("ghost"), Some(ResponseError::ResourceNotFound.code()));
                }
                ApiKey::DescribeAcls => {
                    let store = broker.authorizer.store().expect("authorizer on");
                    let b = crate::authorizer::acl::AclBinding::from_wire(
                        2,
                        &format!("dv{v}"),
                        3,
                        "User:alice",
                        "*",
                        3,
                        3,
                    )
                    .expect("binding");
                    store.add(&[b]).expect("add");
                    let req = DescribeAclsRequest::default()
                        .with_resource_type_filter(2)
                        .with_resource_name_filter(Some(s(&format!("dv{v}"))))
                        .with_pattern_type_filter(3)
                        .with_principal_filter(None)
                        .with_host_filter(None)
                        .with_operation(1)
                        .with_permission_type(1);
                    let r: DescribeAclsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    assert_eq!(r.resources.len(), 1, "v{v}");
                    assert_eq!(
                        (
                            r.resources[0].acls[0].principal.as_str(),
                            r.resources[0].acls[0].operation
                        ),
                        ("User:alice", 3)
                    );
                }
                ApiKey::CreateAcls => {
                    let ok = create_acls_request::AclCreation::default()
                        .with_resource_type(2)
                        .with_resource_name(s(&format!("cv{v}-")))
                        .with_resource_pattern_type(4)
                        .with_principal(s("User:alice"))
                        .with_host(s("*"))
                        .with_operation(4)
                        .with_permission_type(3);
                    let bad = ok.clone().with_host(s("not-an-ip"));
                    let req = CreateAclsRequest::default().with_creations(vec![ok, bad]);
                    let r: CreateAclsResponse = roundtrip(&broker, range.key, v, &req).await;
                    let codes: Vec<i16> = r.results.iter().map(|x| x.error_code).collect();
                    assert_eq!(codes, vec![0, ResponseError::InvalidRequest.code()], "v{v}");
                    let store = broker.authorizer.store().expect("authorizer on");
                    assert!(store.snapshot().iter().any(|b| b.pattern.name == format!("cv{v}-")));
                }
                ApiKey::DeleteAcls => {
                    let store = broker.authorizer.store().expect("authorizer on");
                    let b = crate::authorizer::acl::AclBinding::from_wire(
                        3,
                        &format!("xv{v}"),
                        3,
                        "User:bob",
                        "*",
                        3,
                        2,
                    )
                    .expect("binding");
                    store.add(&[b]).expect("add");
                    let f = delete_acls_request::DeleteAclsFilter::default()
                        .with_resource_type_filter(1)
                        .with_resource_name_filter(Some(s(&format!("xv{v}"))))
                        .with_pattern_type_filter(1)
                        .with_principal_filter(None)
                        .with_host_filter(None)
                        .with_operation(1)
                        .with_permission_type(1);
                    let req = DeleteAclsRequest::default().with_filters(vec![f]);
                    let r: DeleteAclsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.filter_results[0].error_code, 0, "v{v}");
                    assert_eq!(r.filter_results[0].matching_acls.len(), 1, "v{v}");
                    assert!(!store.snapshot().iter().any(|b| b.pattern.name == format!("xv{v}")));
                }
                ApiKey::AddPartitionsToTxn => {
                    let id = format!("apt-v{v}");
                    let (pid, epoch) = txn_init(&broker, &id).await;
                    let topic = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![0]);
                    let r: AddPartitionsToTxnResponse = if v <= 3 {
                        let req = AddPartitionsToTxnRequest::default()
                            .with_v3_and_below_transactional_id(txn_id(&id))
                            .with_v3_and_below_producer_id(ProducerId(pid))
                            .with_v3_and_below_producer_epoch(epoch)
                            .with_v3_and_below_topics(vec![topic]);
                        let r: AddPartitionsToTxnResponse =
                            roundtrip(&broker, range.key, v, &req).await;
                        assert_eq!(
                            r.results_by_topic_v3_and_below[0].results_by_partition[0]
                                .partition_error_code,
                            0,
                            "v{v}"
                        );
                        r
                    } else {
                        let txn =
                            add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                                .with_transactional_id(txn_id(&id))
                                .with_producer_id(ProducerId(pid))
                                .with_producer_epoch(epoch)
                                .with_topics(vec![topic]);
                        let req = AddPartitionsToTxnRequest::default().with_transactions(vec![txn]);
                        let r: AddPartitionsToTxnResponse =
                            roundtrip(&broker, range.key, v, &req).await;
                        assert_eq!(r.error_code, 0, "v{v}");
                        assert_eq!(
                            r.results_by_transaction[0].topic_results[0].results_by_partition[0]
                                .partition_error_code,
                            0,
                            "v{v}"
                        );
                        r
                    };
                    let _ = r;
                    assert_eq!(
                        broker.txns.of(&id).describe(&id).map(|m| m.state.name()),
                        Some("Ongoing"),
                        "v{v}"
                    );
                }
                ApiKey::AddOffsetsToTxn => {
                    let id = format!("aot-v{v}");
                    let (pid, epoch) = txn_init(&broker, &id).await;
                    let req = AddOffsetsToTxnRequest::default()
                        .with_transactional_id(txn_id(&id))
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_group_id(GroupId(s("txn-group")));
                    let r: AddOffsetsToTxnResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    let stale = req.with_producer_epoch(epoch - 1);
                    let r: AddOffsetsToTxnResponse = roundtrip(&broker, range.key, v, &stale).await;
                    let fenced = if v >= 2 {
                        ResponseError::ProducerFenced
                    } else {
                        ResponseError::InvalidProducerEpoch
                    };
                    assert_eq!(r.error_code, fenced.code(), "v{v}");
                }
                ApiKey::EndTxn => {
                    let id = format!("end-v{v}");
                    let (pid, epoch) = txn_open(&broker, &id).await;
                    let log = broker.logs.partition("t", 0).expect("t-0");
                    let end_before = log.log_end_offset();
                    let req = EndTxnRequest::default()
                        .with_transactional_id(txn_id(&id))
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_committed(true);
                    let r: EndTxnResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    assert_eq!(log.log_end_offset(), end_before + 1, "v{v}: one COMMIT marker");
                    let r: EndTxnResponse =
                        roundtrip(&broker, range.key, v, &req.clone().with_committed(false)).await;
                    assert_eq!(
                        r.error_code,
                        ResponseError::InvalidTxnState.code(),
                        "v{v}: abort after commit"
                    );
                }
                ApiKey::WriteTxnMarkers => {
                    // A coordinator elsewhere ends a transaction in t-0; an unknown
                    // partition is answered on its own.
                    let id = format!("wtm-v{v}");
                    let (pid, epoch) = txn_open(&broker, &id).await;
                    let log = broker.logs.partition("t", 0).expect("t-0");
                    let end_before = log.log_end_offset();
                    let topic = |t: &str, ps: Vec<i32>| {
                        write_txn_markers_request::WritableTxnMarkerTopic::default()
                            .with_name(name(t))
                            .with_partition_indexes(ps)
                    };
                    let marker = write_txn_markers_request::WritableTxnMarker::default()
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_transaction_result(false)
                        .with_coordinator_epoch(0)
                        .with_topics(vec![topic("t", vec![0, 7]), topic("nope", vec![0])]);
                    let req = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
                    let r: WriteTxnMarkersResponse = roundtrip(&broker, range.key, v, &req).await;
                    let codes: Vec<(String, i32, i16)> = r.markers[0]
                        .topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions.iter().map(move |p| {
                                (t.name.0.to_string(), p.partition_index, p.error_code)
                            })
                        })
                        .collect();
                    let unknown = ResponseError::UnknownTopicOrPartition.code();
                    assert_eq!(
                        codes,
                        vec![
                            ("t".to_string(), 0, 0),
                            ("t".to_string(), 7, unknown),
                            ("nope".to_string(), 0, unknown)
                        ],
                        "v{v}"
                    );
                    assert_eq!(r.markers[0].producer_id.0, pid);
                    assert_eq!(log.log_end_offset(), end_before + 1, "v{v}: one ABORT marker");
                }
                ApiKey::TxnOffsetCommit => {
                    let id = format!("toc-v{v}");
                    let group = format!("toc-group-v{v}");
                    let (pid, epoch) = txn_init(&broker, &id).await;
                    broker
                        .txns
                        .of(&id)
                        .add_partitions(
                            &id,
                            pid,
                            epoch,
                            &[(
                                floe_coordinator::group::OFFSETS_TOPIC.to_string(),
                                broker.groups.partition_of(&group),
                            )],
                            false,
                        )
                        .await
                        .expect("add offsets");
                    let p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(2);
                    let t = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![p]);
                    let req = TxnOffsetCommitRequest::default()
                        .with_transactional_id(txn_id(&id))
                        .with_group_id(GroupId(s(&group)))
                        .with_producer_id(ProducerId(pid))
                        .with_producer_epoch(epoch)
                        .with_generation_id(-1)
                        .with_topics(vec![t]);
                    let r: TxnOffsetCommitResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.topics[0].partitions[0].error_code, 0, "v{v}");
                    assert!(
                        broker.groups.of(&group).has_pending_txn_offset(&group, "t", 0),
                        "v{v}: pending until the commit"
                    );
                    broker.txns.of(&id).end_txn(&id, pid, epoch, true).await.expect("commit");
                    assert!(
                        !broker.groups.of(&group).has_pending_txn_offset(&group, "t", 0),
                        "v{v}"
                    );
                    let found = broker
                        .groups
                        .of(&group)
                        .fetch_offsets(&group, Some(vec![("t".into(), vec![0])]))
                        .expect("fetch");
                    assert_eq!(
                        found[0].1[0].1.as_ref().map(|o| o.offset),
                        Some(2),
                        "v{v}: committed with the transaction"
                    );
                }
                ApiKey::DescribeTransactions => {
                    let (pid, _) = txn_open(&broker, "described").await;
                    let req = DescribeTransactionsRequest::default()
                        .with_transactional_ids(vec![txn_id("described"), txn_id("nobody")]);
                    let r: DescribeTransactionsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    let d = &r.transaction_states[0];
                    assert_eq!(
                        (d.error_code, d.producer_id.0, d.transaction_state.as_str()),
                        (0, pid, "Ongoing"),
                        "v{v}"
                    );
                    assert_eq!(d.topics[0].partitions, vec![0]);
                    assert_eq!(
                        r.transaction_states[1].error_code,
                        ResponseError::TransactionalIdNotFound.code()
                    );
                }
                ApiKey::ListTransactions => {
                    txn_open(&broker, &format!("listed-v{v}")).await;
                    let req = ListTransactionsRequest::default()
                        .with_state_filters(vec![s("Ongoing"), s("Nonsense")])
                        .with_duration_filter(-1);
                    let r: ListTransactionsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    assert_eq!(r.unknown_state_filters, vec![s("Nonsense")], "v{v}");
                    assert!(
                        r.transaction_states
                            .iter()
                            .any(|t| t.transactional_id.0.as_str() == format!("listed-v{v}")),
                        "v{v}"
                    );
                    assert!(
                        r.transaction_states
                            .iter()
                            .all(|t| t.transaction_state.as_str() == "Ongoing"),
                        "v{v}"
                    );
                }
                ApiKey::DescribeProducers => {
                    let t = describe_producers_request::TopicRequest::default()
                        .with_name(name("t"))
                        .with_partition_indexes(vec![0, 7]);
                    let r: DescribeProducersResponse = roundtrip(
                        &broker,
                        range.key,
                        v,
                        &DescribeProducersRequest::default().with_topics(vec![t]),
                    )
                    .await;
                    assert_eq!(r.topics[0].partitions[0].error_code, 0, "v{v}");
                    assert_eq!(
                        r.topics[0].partitions[1].error_code,
                        ResponseError::UnknownTopicOrPartition.code(),
                        "v{v}"
                    );
                }
                ApiKey::OffsetForLeaderEpoch => {
                    let leo = broker.logs.partition("t", 0).expect("t-0").log_end_offset();
                    let part = |epoch: i32, current: i32| {
                        offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_leader_epoch(epoch)
                            .with_current_leader_epoch(current)
                    };
                    let t = offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                        .with_topic(name("t"))
                        .with_partitions(vec![
                            part(0, -1),
                            part(0, 0),
                            part(1, -1),
                            part(0, 1),
                            part(0, -2),
                        ]);
                    let ghost = offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                        .with_topic(name("ghost"))
                        .with_partitions(vec![part(0, -1)]);
                    let req = OffsetForLeaderEpochRequest::default()
                        .with_replica_id(BrokerId(-1))
                        .with_topics(vec![t, ghost]);
                    let r: OffsetForLeaderEpochResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    let got: Vec<(i16, i32, i64)> = r.topics[0]
                        .partitions
                        .iter()
                        .map(|p| (p.error_code, p.leader_epoch, p.end_offset))
                        .collect();
                    assert_eq!(
                        got,
                        vec![
                            (0, 0, leo),
                            (0, 0, leo),
                            (0, -1, -1),
                            (ResponseError::UnknownLeaderEpoch.code(), -1, -1),
                            (ResponseError::FencedLeaderEpoch.code(), -1, -1),
                        ],
                        "v{v}"
                    );
                    assert_eq!(
                        r.topics[1].partitions[0].error_code,
                        ResponseError::UnknownTopicOrPartition.code()
                    );
                }
                ApiKey::DescribeLogDirs => {
                    let size = broker.logs.partition("t", 0).expect("t-0").size_bytes() as i64;
                    assert!(size > 0, "t-0 has data");
                    let want = describe_log_dirs_request::DescribableLogDirTopic::default()
                        .with_topic(name("t"))
                        .with_partitions(vec![0, 7]);
                    for req in [
                        DescribeLogDirsRequest::default().with_topics(None),
                        DescribeLogDirsRequest::default().with_topics(Some(vec![want])),
                    ] {
                        let r: DescribeLogDirsResponse =
                            roundtrip(&broker, range.key, v, &req).await;
                        assert_eq!(r.error_code, 0, "v{v}");
                        assert_eq!(r.results.len(), 1);
                        let dir = &r.results[0];
                        assert_eq!(dir.error_code, 0);
                        assert!(
                            dir.log_dir.as_str().starts_with('/'),
                            "absolute: {}",
                            dir.log_dir.as_str()
                        );
                        let t =
                            dir.topics.iter().find(|t| t.name.as_str() == "t").expect("t listed");
                        assert_eq!(t.partitions.len(), 1, "the unknown partition 7 is left out");
                        assert_eq!(
                            (t.partitions[0].partition_index, t.partitions[0].partition_size),
                            (0, size)
                        );
                        if v >= 4 {
                            assert!(
                                dir.total_bytes > 0
                                    && dir.usable_bytes >= 0
                                    && dir.usable_bytes <= dir.total_bytes
                            );
                        }
                    }
                }
                ApiKey::DescribeTopicPartitions => {
                    broker.logs.create_topic("dtp", 3, BTreeMap::new()).expect("create dtp");
                    let topic = |n: &str| {
                        describe_topic_partitions_request::TopicRequest::default()
                            .with_name(name(n))
                    };
                    // Two partitions a page: dtp-0..1, then dtp-2 and t-0, across topics.
                    let req = DescribeTopicPartitionsRequest::default()
                        .with_topics(vec![topic("t"), topic("dtp"), topic("no-such")])
                        .with_response_partition_limit(2);
                    let r: DescribeTopicPartitionsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    let page: Vec<(String, usize)> = r
                        .topics
                        .iter()
                        .map(|t| {
                            (
                                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                                t.partitions.len(),
                            )
                        })
                        .collect();
                    assert_eq!(page, vec![("dtp".to_string(), 2)]);
                    let cursor = r.next_cursor.expect("more to come");
                    assert_eq!((cursor.topic_name.as_str(), cursor.partition_index), ("dtp", 2));
                    let next = req.clone().with_cursor(Some(
                        describe_topic_partitions_request::Cursor::default()
                            .with_topic_name(name("dtp"))
                            .with_partition_index(2),
                    ));
                    let r: DescribeTopicPartitionsResponse =
                        roundtrip(&broker, range.key, v, &next).await;
                    let page: Vec<(String, i16, Vec<i32>)> = r
                        .topics
                        .iter()
                        .map(|t| {
                            let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                            (
                                name,
                                t.error_code,
                                t.partitions.iter().map(|p| p.partition_index).collect(),
                            )
                        })
                        .collect();
                    assert_eq!(
                        page,
                        vec![
                            ("dtp".to_string(), 0, vec![2]),
                            (
                                "no-such".to_string(),
                                ResponseError::UnknownTopicOrPartition.code(),
                                vec![]
                            ),
                            ("t".to_string(), 0, vec![0]),
                        ]
                    );
                    assert!(r.next_cursor.is_none());
                    assert_eq!(r.topics[2].topic_id, topic_id);
                    assert_eq!(r.topics[2].partitions[0].leader_id, BrokerId(1));
                    let bad = req.with_cursor(Some(
                        describe_topic_partitions_request::Cursor::default()
                            .with_topic_name(name("zzz"))
                            .with_partition_index(0),
                    ));
                    let r: DescribeTopicPartitionsResponse =
                        roundtrip(&broker, range.key, v, &bad).await;
                    assert!(r
                        .topics
                        .iter()
                        .all(|t| t.error_code == ResponseError::InvalidRequest.code()));
                    let all = DescribeTopicPartitionsRequest::default()
                        .with_response_partition_limit(2000);
                    let r: DescribeTopicPartitionsResponse =
                        roundtrip(&broker, range.key, v, &all).await;
                    assert!(r.topics.iter().any(|t| t
                        .name
                        .as_ref()
                        .is_some_and(|n| n.as_str() == "dtp")
                        && t.partitions.len() == 3));
                }
                ApiKey::ElectLeaders => {
                    let tp = |t: &str, ps: Vec<i32>| {
                        elect_leaders_request::TopicPartitions::default()
                            .with_topic(name(t))
                            .with_partitions(ps)
                    };
                    let mut req = ElectLeadersRequest::default()
                        .with_topic_partitions(Some(vec![
                            tp("t", vec![0, 9]),
                            tp("ghost", vec![0]),
                        ]))
                        .with_timeout_ms(1000);
                    if v >= 1 {
                        req = req.with_election_type(1);
                    }
                    let r: ElectLeadersResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0);
                    let codes: Vec<Vec<i16>> = r
                        .replica_election_results
                        .iter()
                        .map(|t| t.partition_result.iter().map(|p| p.error_code).collect())
                        .collect();
                    let (not_needed, unknown) = (
                        ResponseError::ElectionNotNeeded.code(),
                        ResponseError::UnknownTopicOrPartition.code(),
                    );
                    assert_eq!(codes, vec![vec![not_needed, unknown], vec![unknown]], "v{v}");
                    let all: ElectLeadersResponse = roundtrip(
                        &broker,
                        range.key,
                        v,
                        &ElectLeadersRequest::default().with_topic_partitions(None),
                    )
                    .await;
                    assert!(all
                        .replica_election_results
                        .iter()
                        .all(|t| t.partition_result.is_empty()));
                    assert!(all.replica_election_results.iter().any(|t| t.topic.as_str() == "t"));
                }
                ApiKey::AlterPartitionReassignments => {
                    // A broker alone: a target of its own id is no move, another broker
                    // is not registered, a cancellation finds no move, no such partition.
                    use alter_partition_reassignments_request::{
                        ReassignablePartition, ReassignableTopic,
                    };
                    let part = |p: i32, r: Option<Vec<i32>>| {
                        ReassignablePartition::default()
                            .with_partition_index(p)
                            .with_replicas(r.map(|r| r.into_iter().map(BrokerId).collect()))
                    };
                    let own = broker.config.node_id;
                    let t =
                        ReassignableTopic::default().with_name(name("t")).with_partitions(vec![
                            part(0, Some(vec![own])),
                            part(0, Some(vec![own + 1])),
                            part(0, Some(vec![own, own])),
                            part(0, None),
                            part(9, Some(vec![own])),
                        ]);
                    let ghost = ReassignableTopic::default()
                        .with_name(name("ghost"))
                        .with_partitions(vec![part(0, Some(vec![own]))]);
                    let req =
                        AlterPartitionReassignmentsRequest::default().with_topics(vec![t, ghost]);
                    let r: AlterPartitionReassignmentsResponse =
                        roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.error_code, 0);
                    let codes: Vec<Vec<i16>> = r
                        .responses
                        .iter()
                        .map(|t| t.partitions.iter().map(|p| p.error_code).collect())
                        .collect();
                    let (invalid, none, unknown) = (
                        ResponseError::InvalidReplicaAssignment.code(),
                        ResponseError::NoReassignmentInProgress.code(),
                        ResponseError::UnknownTopicOrPartition.code(),
                    );
                    assert_eq!(
                        codes,
                        vec![vec![0, invalid, invalid, none, unknown], vec![unknown]],
                        "v{v}"
                    );
                }
                ApiKey::ListPartitionReassignments => {
                    let named = list_partition_reassignments_request::ListPartitionReassignmentsTopics::default().with_name(name("t")).with_partition_indexes(vec![0]);
                    for topics in [None, Some(vec![named])] {
                        let r: ListPartitionReassignmentsResponse = roundtrip(
                            &broker,
                            range.key,
                            v,
                            &ListPartitionReassignmentsRequest::default().with_topics(topics),
                        )
                        .await;
                        assert_eq!((r.error_code, r.topics.len()), (0, 0), "v{v}");
                    }
                }
                ApiKey::DescribeClientQuotas => {
                    use crate::quota::entity::{EntityName, QuotaEntity};
                    let alice = QuotaEntity {
                        user: Some(EntityName::Named(format!("alice{v}"))),
                        client_id: Some(EntityName::Default),
                    };
                    broker
                        .quotas
                        .change(|set| {
                            set.entry(alice)
                                .or_default()
                                .insert("producer_byte_rate".into(), 1024.0)
                        })
                        .expect("set");
                    let c = describe_client_quotas_request::ComponentData::default()
                        .with_entity_type(s("user"))
                        .with_match_type(0)
                        .with_match(Some(s(&format!("alice{v}"))));
                    let r: DescribeClientQuotasResponse = roundtrip(
                        &broker,
                        range.key,
                        v,
                        &DescribeClientQuotasRequest::default().with_components(vec![c.clone()]),
                    )
                    .await;
                    assert_eq!(r.error_code, 0, "v{v}");
                    let entries = r.entries.expect("entries");
                    assert_eq!(entries.len(), 1);
                    assert_eq!(entries[0].entity.len(), 2);
                    assert_eq!(
                        (entries[0].values[0].key.as_str(), entries[0].values[0].value),
                        ("producer_byte_rate", 1024.0)
                    );
                    let strict = DescribeClientQuotasRequest::default()
                        .with_components(vec![c])
                        .with_strict(true);
                    let r: DescribeClientQuotasResponse =
                        roundtrip(&broker, range.key, v, &strict).await;
                    assert_eq!(
                        r.entries.map(|e| e.len()),
                        Some(0),
                        "strict: the entity also has a client-id"
                    );
                    let twice = describe_client_quotas_request::ComponentData::default()
                        .with_entity_type(s("user"))
                        .with_match_type(1);
                    let r: DescribeClientQuotasResponse = roundtrip(
                        &broker,
                        range.key,
                        v,
                        &DescribeClientQuotasRequest::default()
                            .with_components(vec![twice.clone(), twice]),
                    )
                    .await;
                    assert_eq!(r.error_code, ResponseError::InvalidRequest.code());
                }
                ApiKey::AlterClientQuotas => {
                    use alter_client_quotas_request::{EntityData, EntryData, OpData};
                    let entity = |kind: &str, name: Option<&str>| {
                        EntityData::default()
                            .with_entity_type(s(kind))
                            .with_entity_name(name.map(s))
                    };
                    let op = |key: &str, value: f64| {
                        OpData::default().with_key(s(key)).with_value(value)
                    };
                    let good = EntryData::default()
                        .with_entity(vec![entity("client-id", Some(&format!("app{v}")))])
                        .with_ops(vec![op("request_percentage", 50.0)]);
                    let fractional = EntryData::default()
                        .with_entity(vec![entity("user", None)])
                        .with_ops(vec![op("producer_byte_rate", 0.5)]);
                    let ip = EntryData::default()
                        .with_entity(vec![entity("ip", Some("10.0.0.1"))])
                        .with_ops(vec![op("connection_creation_rate", 5.0)]);
                    let req = AlterClientQuotasRequest::default()
                        .with_entries(vec![good, fractional, ip]);
                    let r: AlterClientQuotasResponse = roundtrip(&broker, range.key, v, &req).await;
                    let codes: Vec<i16> = r.entries.iter().map(|e| e.error_code).collect();
                    let invalid = ResponseError::InvalidRequest.code();
                    assert_eq!(codes, vec![0, invalid, invalid], "v{v}");
                    assert_eq!(
                        r.entries[0].entity[0].entity_name.as_ref().map(|n| n.as_str()),
                        Some(format!("app{v}").as_str())
                    );
                    let stored = broker.quotas.snapshot();
                    assert_eq!(
                        stored
                            .iter()
                            .filter(|(e, _)| e.client_id.is_some() && e.user.is_none())
                            .count(),
                        usize::try_from(v + 1).expect("v")
                    );
                }
                other => {
                    panic!("{other:?} is advertised but this test has no request for it: add one")
                }
            }
        }
    }
    assert!(checked > 60, "only {checked} API versions checked");
}

#[tokio::test]
async fn api_versions_at_an_unknown_version_gets_the_kip_511_reply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker(dir.path()).await;
    // A future client: ApiVersions v9 with a flexible (v2) header and a body we cannot know.
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::ApiVersions as i16)
        .with_request_api_version(9)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("future")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, 2).expect("header");
    buf.extend_from_slice(&[0xde, 0xad]);
    let frame = parse_request_header(buf.freeze()).expect("parse");
    let Ok(Reply::Frame(mut bytes)) = dispatch(&broker, frame, &mut test_session()).await else {
        panic!("expected a response frame")
    };
    let _ = bytes.split_to(4);
    let header = ResponseHeader::decode(&mut bytes, 0).expect("v0 header");
    assert_eq!(header.correlation_id, 7);
    let r = ApiVersionsResponse::decode(&mut bytes, 0).expect("v0 body");
    assert_eq!(r.error_code, kafka_protocol::error::ResponseError::UnsupportedVersion.code());
    assert!(r.api_keys.iter().any(|k| k.api_key == ApiKey::Fetch as i16 && k.max_version == 16));
}

#[tokio::test]
async fn a_non_advertised_api_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker(dir.path()).await;
    // AlterPartition is KRaft's broker-to-controller call; Floe's controller is etcd.
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::AlterPartition as i16)
        .with_request_api_version(2);
    let mut buf = BytesMut::new();
    header.encode(&mut buf, 2).expect("header");
    let frame = parse_request_header(buf.freeze()).expect("parse");
    assert!(dispatch(&broker, frame, &mut test_session()).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_client_without_acls_is_refused_per_resource() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker_with(
        dir.path(),
        &[("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")],
    )
    .await;
    broker.logs.create_topic("t", 1, BTreeMap::new()).expect("create t");
    let p =
        produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch()));
    let t = produce_request::TopicProduceData::default()
        .with_name(name("t"))
        .with_partition_data(vec![p]);
    let req =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![t]);
    let r: ProduceResponse = roundtrip(&broker, ApiKey::Produce, 9, &req).await;
    assert_eq!(
        r.responses[0].partition_responses[0].error_code,
        ResponseError::TopicAuthorizationFailed.code()
    );
    assert_eq!(broker.logs.partition("t", 0).expect("t-0").log_end_offset(), 0, "nothing appended");
    let all: MetadataResponse =
        roundtrip(&broker, ApiKey::Metadata, 12, &MetadataRequest::default().with_topics(None))
            .await;
    assert!(all.topics.is_empty(), "an unauthorized topic is left out of the listing");
    let named = MetadataRequest::default().with_topics(Some(vec![
        metadata_request::MetadataRequestTopic::default().with_name(Some(name("t"))),
    ]));
    let named: MetadataResponse = roundtrip(&broker, ApiKey::Metadata, 12, &named).await;
    assert_eq!(named.topics[0].error_code, ResponseError::TopicAuthorizationFailed.code());
    let create = CreateAclsRequest::default().with_creations(vec![
        create_acls_request::AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("t"))
            .with_resource_pattern_type(3)
            .with_principal(s("User:ANONYMOUS"))
            .with_host(s("*"))
            .with_operation(2)
            .with_permission_type(3),
    ]);
    let r: CreateAclsResponse = roundtrip(&broker, ApiKey::CreateAcls, 3, &create).await;
    assert_eq!(r.results[0].error_code, ResponseError::ClusterAuthorizationFailed.code());
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(""))
        .with_protocol_type(s("consumer"));
    let r: JoinGroupResponse = roundtrip(&broker, ApiKey::JoinGroup, 9, &join).await;
    assert_eq!(r.error_code, ResponseError::GroupAuthorizationFailed.code());
    // Markers are for brokers (CLUSTER_ACTION): refused for every partition, nothing written.
    let topic = write_txn_markers_request::WritableTxnMarkerTopic::default()
        .with_name(name("t"))
        .with_partition_indexes(vec![0]);
    let marker = write_txn_markers_request::WritableTxnMarker::default()
        .with_producer_id(ProducerId(1))
        .with_producer_epoch(0)
        .with_topics(vec![topic]);
    let r: WriteTxnMarkersResponse = roundtrip(
        &broker,
        ApiKey::WriteTxnMarkers,
        1,
        &WriteTxnMarkersRequest::default().with_markers(vec![marker]),
    )
    .await;
    assert_eq!(
        r.markers[0].topics[0].partitions[0].error_code,
        ResponseError::ClusterAuthorizationFailed.code()
    );
    assert_eq!(
        broker.logs.partition("t", 0).expect("t-0").log_end_offset(),
        0,
        "no marker appended"
    );
    // Reassignments need ALTER (alter) and DESCRIBE (list) on the cluster.
    let part = alter_partition_reassignments_request::ReassignablePartition::default()
        .with_partition_index(0)
        .with_replicas(Some(vec![BrokerId(1)]));
    let topic = alter_partition_reassignments_request::ReassignableTopic::default()
        .with_name(name("t"))
        .with_partitions(vec![part]);
    let r: AlterPartitionReassignmentsResponse = roundtrip(
        &broker,
        ApiKey::AlterPartitionReassignments,
        0,
        &AlterPartitionReassignmentsRequest::default().with_topics(vec![topic]),
    )
    .await;
    assert_eq!(r.error_code, ResponseError::ClusterAuthorizationFailed.code());
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::ClusterAuthorizationFailed.code()
    );
    let r: ListPartitionReassignmentsResponse = roundtrip(
        &broker,
        ApiKey::ListPartitionReassignments,
        0,
        &ListPartitionReassignmentsRequest::default(),
    )
    .await;
    assert_eq!(r.error_code, ResponseError::ClusterAuthorizationFailed.code());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_quotas_is_told_and_muted() {
    use crate::quota::entity::{EntityName, QuotaEntity};
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker(dir.path()).await;
    broker.logs.create_topic("t", 1, BTreeMap::new()).expect("create t");
    // The test client's id is `version-test`: 10 bytes/s each way, the least any request exceeds.
    let entity =
        QuotaEntity { user: None, client_id: Some(EntityName::Named("version-test".into())) };
    broker
        .quotas
        .change(|set| {
            let values = set.entry(entity).or_default();
            values.insert("producer_byte_rate".into(), 10.0);
            values.insert("consumer_byte_rate".into(), 10.0);
        })
        .expect("set quotas");
    let mut session = test_session();
    let p =
        produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch()));
    let t = produce_request::TopicProduceData::default()
        .with_name(name("t"))
        .with_partition_data(vec![p]);
    let req =
        ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![t]);
    let mut throttles = Vec::new();
    for _ in 0..3 {
        let r: ProduceResponse =
            roundtrip_in(&broker, &mut session, ApiKey::Produce, 9, &req).await;
        assert_eq!(
            r.responses[0].partition_responses[0].error_code, 0,
            "the append is not refused, only throttled"
        );
        throttles.push(r.throttle_time_ms);
        assert_eq!(
            session.throttled_for.take().map(|d| d.as_millis() as i32),
            Some(r.throttle_time_ms),
            "muted for as long"
        );
    }
    assert!(
        throttles.windows(2).all(|w| w[0] > 0 && w[1] > w[0]),
        "throttle grows with the rate: {throttles:?}"
    );
    assert_eq!(broker.logs.partition("t", 0).expect("t-0").log_end_offset(), 9);

    let p = fetch_request::FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1 << 20);
    let fetch = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_topics(vec![
        fetch_request::FetchTopic::default().with_topic(name("t")).with_partitions(vec![p]),
    ]);
    let r: FetchResponse = roundtrip_in(&broker, &mut session, ApiKey::Fetch, 12, &fetch).await;
    assert!(r.throttle_time_ms > 0);
    assert!(r.responses.is_empty(), "a throttled fetch carries no records, as in Kafka");
    assert!(session.throttled_for.take().is_some());

    // Another user and client id have no quota: nothing is counted or delayed.
    let mut other = test_session();
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(9)
        .with_correlation_id(1)
        .with_client_id(Some(StrBytes::from_static_str("free")));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, ProduceRequest::header_version(9)).expect("header");
    req.encode(&mut buf, 9).expect("body");
    let frame = parse_request_header(buf.freeze()).expect("parse");
    assert!(matches!(dispatch(&broker, frame, &mut other).await, Ok(Reply::Frame(_))));
    assert!(other.throttled_for.is_none());

    // request_percentage: the time a request keeps a worker busy counts, whatever the API.
    let user = QuotaEntity { user: Some(EntityName::Named("ANONYMOUS".into())), client_id: None };
    broker
        .quotas
        .change(|set| set.entry(user).or_default().insert("request_percentage".into(), 1e-9))
        .expect("set quota");
    let r: MetadataResponse = roundtrip_in(
        &broker,
        &mut session,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
    .await;
    assert!(
        r.throttle_time_ms > 0,
        "/users/ANONYMOUS request_percentage applies to the anonymous client"
    );
    assert!(session.throttled_for.take().is_some());
}
