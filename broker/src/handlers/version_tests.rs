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
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

use super::{dispatch, Reply};
use crate::broker::Broker;
use crate::config::ConfigBuilder;
use crate::metrics::Metrics;

pub(super) fn broker(dir: &std::path::Path) -> Broker {
    let mut config = ConfigBuilder::new().build().expect("default config");
    config.data_dir = dir.to_path_buf();
    let logs = LogManager::open_with_node_id(dir, Some(config.node_id), LogConfig::default()).expect("open logs");
    Broker {
        config,
        logs: Arc::new(logs),
        metrics: Arc::new(Metrics::new()),
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
    }
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
    RecordBatchEncoder::encode(&mut buf, records.iter(), &RecordEncodeOptions { version: 2, compression: Compression::None })
        .expect("encode batch");
    buf.freeze()
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// Encodes header + body as a client would, and dispatches it.
pub(super) async fn roundtrip<Req, Resp>(broker: &Broker, api: ApiKey, version: i16, request: &Req) -> Resp
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
    request.encode(&mut buf, version).unwrap_or_else(|e| panic!("encode {api:?} v{version} request: {e}"));
    let frame = parse_request_header(buf.freeze()).expect("parse header");
    let reply = dispatch(broker, frame, "127.0.0.1:1".parse().expect("addr"))
        .await
        .unwrap_or_else(|e| panic!("{api:?} v{version} rejected: {e}"));
    let mut bytes = match reply {
        Reply::Frame(b) => b,
        Reply::Parts(p) => p.to_contiguous().expect("contiguous"),
        Reply::None => panic!("{api:?} v{version}: no response"),
    };
    let size = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    assert_eq!(size + 4, bytes.len(), "{api:?} v{version}: size prefix");
    let _ = bytes.split_to(4);
    let header = ResponseHeader::decode(&mut bytes, api.response_header_version(version)).expect("response header");
    assert_eq!(header.correlation_id, i32::from(version) + 1000);
    let resp = Resp::decode(&mut bytes, version).unwrap_or_else(|e| panic!("decode {api:?} v{version} response: {e}"));
    assert!(bytes.is_empty(), "{api:?} v{version}: {} trailing bytes", bytes.len());
    resp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_served_version_of_every_api_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker(dir.path());
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
                    let t = metadata_request::MetadataRequestTopic::default().with_name(Some(name("t")));
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
                    let p = produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch()));
                    let t = produce_request::TopicProduceData::default().with_name(name("t")).with_partition_data(vec![p]);
                    let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(vec![t]);
                    let r: ProduceResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.responses[0].partition_responses[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert!(p.base_offset >= 0);
                }
                ApiKey::Fetch => {
                    let p = fetch_request::FetchPartition::default().with_partition(0).with_fetch_offset(0).with_partition_max_bytes(1 << 20);
                    let mut t = fetch_request::FetchTopic::default().with_partitions(vec![p]);
                    if v >= 13 {
                        t = t.with_topic_id(topic_id);
                    } else {
                        t = t.with_topic(name("t"));
                    }
                    let req = FetchRequest::default().with_max_wait_ms(0).with_min_bytes(1).with_topics(vec![t]);
                    let r: FetchResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.responses[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert!(p.records.as_ref().is_some_and(|b| !b.is_empty()), "v{v}: no records");
                }
                ApiKey::ListOffsets => {
                    let p = list_offsets_request::ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1);
                    let t = list_offsets_request::ListOffsetsTopic::default().with_name(name("t")).with_partitions(vec![p]);
                    let req = ListOffsetsRequest::default().with_topics(vec![t]);
                    let r: ListOffsetsResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert_eq!(p.offset, broker.logs.partition("t", 0).expect("t-0").high_watermark());
                }
                ApiKey::CreateTopics => {
                    let t = create_topics_request::CreatableTopic::default()
                        .with_name(name(&format!("c{v}")))
                        .with_num_partitions(2)
                        .with_replication_factor(1)
                        .with_configs(vec![create_topics_request::CreatableTopicConfig::default()
                            .with_name(StrBytes::from_static_str("retention.ms"))
                            .with_value(Some(StrBytes::from_static_str("3600000")))]);
                    let req = CreateTopicsRequest::default().with_topics(vec![t]).with_timeout_ms(1000);
                    let r: CreateTopicsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.topics[0].error_code, 0, "v{v}: {:?}", r.topics[0].error_message);
                    assert_eq!(broker.logs.topic(&format!("c{v}")).expect("created").partition_count(), 2);
                }
                ApiKey::DeleteTopics => {
                    let victim = format!("d{v}");
                    broker.logs.create_topic(&victim, 1, BTreeMap::new()).expect("create victim");
                    let req = if v >= 6 {
                        DeleteTopicsRequest::default()
                            .with_topics(vec![delete_topics_request::DeleteTopicState::default().with_name(Some(name(&victim)))])
                    } else {
                        DeleteTopicsRequest::default().with_topic_names(vec![name(&victim)])
                    };
                    let r: DeleteTopicsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "v{v}");
                    assert!(broker.logs.topic(&victim).is_none());
                }
                ApiKey::DeleteRecords => {
                    let p = delete_records_request::DeleteRecordsPartition::default().with_partition_index(0).with_offset(1);
                    let t = delete_records_request::DeleteRecordsTopic::default().with_name(name("t")).with_partitions(vec![p]);
                    let req = DeleteRecordsRequest::default().with_topics(vec![t]).with_timeout_ms(1000);
                    let r: DeleteRecordsResponse = roundtrip(&broker, range.key, v, &req).await;
                    let p = &r.topics[0].partitions[0];
                    assert_eq!(p.error_code, 0, "v{v}");
                    assert_eq!(p.low_watermark, 1);
                }
                ApiKey::InitProducerId => {
                    let req = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000);
                    let r: InitProducerIdResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!((r.error_code, r.producer_epoch), (0, 0), "v{v}");
                    if v >= 3 {
                        let bump = req.clone().with_producer_id(r.producer_id).with_producer_epoch(0);
                        let b: InitProducerIdResponse = roundtrip(&broker, range.key, v, &bump).await;
                        assert_eq!((b.error_code, b.producer_id, b.producer_epoch), (0, r.producer_id, 1), "v{v}");
                    }
                    let txn = req.with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))));
                    let t: InitProducerIdResponse = roundtrip(&broker, range.key, v, &txn).await;
                    assert_eq!(t.error_code, kafka_protocol::error::ResponseError::TransactionalIdAuthorizationFailed.code());
                }
                ApiKey::DescribeConfigs => {
                    let res = describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t"));
                    let broker_res = describe_configs_request::DescribeConfigsResource::default()
                        .with_resource_type(4)
                        .with_resource_name(StrBytes::from_static_str("1"));
                    let req = DescribeConfigsRequest::default().with_resources(vec![res, broker_res]).with_include_synonyms(true);
                    let r: DescribeConfigsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.results[0].error_code, 0, "v{v}");
                    assert!(r.results[0].configs.iter().any(|c| c.name.as_str() == "retention.ms"));
                    assert_eq!(r.results[1].error_code, 0, "v{v}");
                    assert!(r.results[1].configs.iter().any(|c| c.name.as_str() == "log.segment.bytes"));
                }
                ApiKey::AlterConfigs => {
                    let c = alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_string(format!("{}", 1_000_000 + i64::from(v)))));
                    let res = alter_configs_request::AlterConfigsResource::default()
                        .with_resource_type(2)
                        .with_resource_name(StrBytes::from_static_str("t"))
                        .with_configs(vec![c]);
                    let req = AlterConfigsRequest::default().with_resources(vec![res]);
                    let r: AlterConfigsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "v{v}: {:?}", r.responses[0].error_message);
                    assert_eq!(broker.logs.topic("t").expect("t").config().retention_ms, 1_000_000 + i64::from(v));
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
                    let r: IncrementalAlterConfigsResponse = roundtrip(&broker, range.key, v, &req).await;
                    assert_eq!(r.responses[0].error_code, 0, "v{v}: {:?}", r.responses[0].error_message);
                    let cfg = broker.logs.topic("t").expect("t").config();
                    assert_eq!(cfg.segment_bytes, 1_048_576);
                }
                ApiKey::CreatePartitions => {
                    let name_v = format!("p{v}");
                    broker.logs.create_topic(&name_v, 1, BTreeMap::new()).expect("create");
                    let t = create_partitions_request::CreatePartitionsTopic::default().with_name(name(&name_v)).with_count(3);
                    let req = CreatePartitionsRequest::default().with_topics(vec![t]).with_timeout_ms(1000);
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
                other => panic!("{other:?} is advertised but this test has no request for it: add one"),
            }
        }
    }
    assert!(checked > 60, "only {checked} API versions checked");
}

#[tokio::test]
async fn api_versions_at_an_unknown_version_gets_the_kip_511_reply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = broker(dir.path());
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
    let Ok(Reply::Frame(mut bytes)) = dispatch(&broker, frame, "127.0.0.1:1".parse().expect("addr")).await else {
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
    let broker = broker(dir.path());
    let header = RequestHeader::default().with_request_api_key(ApiKey::JoinGroup as i16).with_request_api_version(5);
    let mut buf = BytesMut::new();
    header.encode(&mut buf, 1).expect("header");
    let frame = parse_request_header(buf.freeze()).expect("parse");
    assert!(dispatch(&broker, frame, "127.0.0.1:1".parse().expect("addr")).await.is_err());
}
