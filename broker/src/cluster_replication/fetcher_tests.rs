//! The follower against a real leader: a Floe broker alone (`run::serve` on
//! a real socket, local metadata) leads a topic written through the Kafka
//! protocol (plain, idempotent and transactional batches, an aborted and a
//! committed transaction, several segments); a [`ReplicaFetcherManager`]
//! follows it into a log in another directory. The follower must end with
//! the leader's segment files byte for byte and its high watermark.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use floe_client::{BrokerConnection, ClientSecurity, Endpoint};
use floe_cluster::{BrokerEndpoint, BrokerRegistration, TopicPartition};
use floe_storage::{LogConfig, PartitionLog};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tokio::sync::watch;

use crate::config::{ConfigBuilder, Layer};
use crate::listeners::SecurityProtocol;
use crate::metrics::Metrics;
use floe_cluster::replication::fetcher::{
    FetcherSettings, FollowedPartition, ReplicaFetcherManager,
};

const TOPIC: &str = "replicated";
const LEADER: i32 = 1;
const FOLLOWER: i32 = 2;
/// Small segments, so the topic spans several.
const SEGMENT_BYTES: &str = "2048";

/// A leader broker served on a real socket until dropped.
struct Leader {
    port: u16,
    dir: tempfile::TempDir,
    shutdown: watch::Sender<bool>,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl Leader {
    async fn start() -> Self {
        // Logs show with --nocapture (RUST_LOG picks the level).
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut b = ConfigBuilder::new();
        for (k, v) in [
            ("listeners", format!("PLAINTEXT://127.0.0.1:{port}")),
            ("log.dirs", dir.path().display().to_string()),
            ("node.id", LEADER.to_string()),
            ("metrics.listen", String::new()),
            ("floe.iceberg.rest-listen", String::new()),
            ("floe.schema.registry.listen", String::new()),
            ("group.initial.rebalance.delay.ms", "0".into()),
        ] {
            b.set(k, &v, Layer::CommandLine).expect("setting");
        }
        let config = b.build().expect("config");
        let (shutdown, rx) = watch::channel(false);
        let server =
            tokio::spawn(
                async move { crate::run::serve(config, rx).await.expect("leader serves") },
            );
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Self { port, dir, shutdown, server: Some(server) };
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the leader never listened on {port}");
    }

    async fn connect(&self) -> BrokerConnection {
        let endpoint = Endpoint {
            host: "127.0.0.1".into(),
            port: self.port,
            protocol: SecurityProtocol::Plaintext,
        };
        BrokerConnection::connect(
            &endpoint,
            "test-client",
            Duration::from_secs(10),
            &ClientSecurity::plaintext(),
        )
        .await
        .expect("connect")
    }

    fn registration(&self) -> BTreeMap<i32, BrokerRegistration> {
        let endpoint = BrokerEndpoint {
            listener: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: i32::from(self.port),
            security_protocol: "PLAINTEXT".into(),
        };
        BTreeMap::from([(
            LEADER,
            BrokerRegistration {
                node_id: LEADER,
                rack: None,
                endpoints: vec![endpoint],
                shutting_down: false,
                schema_registry: None,
            },
        )])
    }

    fn log_dir(&self) -> std::path::PathBuf {
        self.dir.path().join(format!("{TOPIC}-0"))
    }

    async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(server) = self.server.take() {
            server.await.expect("leader stops");
        }
    }
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// A batch of `n` records; `producer` is (id, epoch, base sequence) or none.
/// Timestamps are now's: old ones would make the leader's retention and
/// time-based rolling (`retention.ms`, `segment.ms`) act during the test.
fn batch(n: i64, producer: Option<(i64, i16, i32)>, transactional: bool) -> Bytes {
    let (id, epoch, seq) = producer.unwrap_or((-1, -1, -1));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<Record> = (0..n)
        .map(|i| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: if seq < 0 { -1 } else { seq + i as i32 },
            timestamp: now + i,
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(vec![b'v'; 100])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions { version: 2, compression: Compression::None },
    )
    .expect("encode");
    buf.freeze()
}

async fn create_topic(conn: &mut BrokerConnection) {
    let config = CreatableTopicConfig::default()
        .with_name(StrBytes::from_static_str("segment.bytes"))
        .with_value(Some(StrBytes::from_static_str(SEGMENT_BYTES)));
    let topic = CreatableTopic::default()
        .with_name(name(TOPIC))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(vec![config]);
    let r = conn
        .call(5, &CreateTopicsRequest::default().with_topics(vec![topic]).with_timeout_ms(10_000))
        .await
        .expect("CreateTopics");
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

async fn produce(conn: &mut BrokerConnection, records: Bytes, transactional_id: Option<&str>) {
    let data = TopicProduceData::default().with_name(name(TOPIC)).with_partition_data(vec![
        PartitionProduceData::default().with_index(0).with_records(Some(records)),
    ]);
    let request = ProduceRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))),
        )
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![data]);
    let r = conn.call(9, &request).await.expect("Produce");
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "{:?}", p.error_message);
}

/// `n` plain records, one batch (and one Produce) each. A Produce of several
/// batches is appended as a unit, which rolls a segment earlier than a
/// follower appending the same batches one by one (Kafka's leaders and
/// followers differ the same way); single-batch produces keep segment
/// boundaries identical. (The encoder puts records without a producer in
/// batches of one.)
async fn produce_plain(conn: &mut BrokerConnection, n: usize) {
    for _ in 0..n {
        produce(conn, batch(1, None, false), None).await;
    }
}

async fn init_producer(conn: &mut BrokerConnection, transactional_id: Option<&str>) -> (i64, i16) {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.into()))),
        )
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let r = conn.call(4, &request).await.expect("InitProducerId");
    assert_eq!(r.error_code, 0);
    (r.producer_id.0, r.producer_epoch)
}

/// One transaction of `batches` batches of 2 records, committed or aborted; returns the next sequence.
async fn transaction(
    conn: &mut BrokerConnection,
    id: &str,
    (pid, epoch): (i64, i16),
    mut seq: i32,
    batches: usize,
    commit: bool,
) -> i32 {
    let txn_id = TransactionalId(StrBytes::from_string(id.into()));
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id.clone())
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(name(TOPIC))
            .with_partitions(vec![0])]);
    let r = conn.call(3, &add).await.expect("AddPartitionsToTxn");
    assert_eq!(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, 0);
    for _ in 0..batches {
        produce(conn, batch(2, Some((pid, epoch, seq)), true), Some(id)).await;
        seq += 2;
    }
    let end = EndTxnRequest::default()
        .with_transactional_id(txn_id)
        .with_producer_id(ProducerId(pid))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let r = conn.call(3, &end).await.expect("EndTxn");
    assert_eq!(r.error_code, 0);
    seq
}

/// The leader's high watermark (ListOffsets latest, as a consumer sees it).
async fn leader_high_watermark(conn: &mut BrokerConnection) -> i64 {
    let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(vec![
        ListOffsetsTopic::default().with_name(name(TOPIC)).with_partitions(vec![
            ListOffsetsPartition::default().with_partition_index(0).with_timestamp(-1),
        ]),
    ]);
    let r = conn.call(7, &request).await.expect("ListOffsets");
    let p = &r.topics[0].partitions[0];
    assert_eq!(p.error_code, 0);
    p.offset
}

fn follower_log(dir: &Path) -> Arc<PartitionLog> {
    let overrides = BTreeMap::from([("segment.bytes".to_string(), SEGMENT_BYTES.to_string())]);
    let config = Arc::new(LogConfig::default().with_overrides(&overrides).expect("config"));
    Arc::new(PartitionLog::open(dir, TOPIC, 0, config, None, None).expect("open follower log"))
}

/// The `.log` and `.txnindex` files of a partition directory, by name.
fn segment_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "log" || x == "txnindex"))
        .map(|p| {
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                std::fs::read(&p).expect("read"),
            )
        })
        .collect();
    files.sort();
    files
}

fn settings() -> FetcherSettings {
    FetcherSettings {
        max_bytes: 700,
        max_wait_ms: 2000,
        backoff: Duration::from_millis(100),
        ..FetcherSettings::default()
    }
}

fn manager() -> (ReplicaFetcherManager, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    (
        ReplicaFetcherManager::new(
            FOLLOWER,
            "PLAINTEXT".into(),
            settings(),
            metrics.replication.clone(),
            metrics.log_corrupt_ranges.clone(),
        ),
        metrics,
    )
}

fn followed(log: &Arc<PartitionLog>) -> Vec<FollowedPartition> {
    vec![FollowedPartition {
        tp: TopicPartition::new(TOPIC, 0),
        leader: LEADER,
        leader_epoch: 0,
        log: log.clone(),
    }]
}

/// Every `.log` file of a partition directory, concatenated in offset order:
/// the log's bytes wherever its segments begin. A truncation keeps the
/// segment based at its point (as Kafka's `truncateTo` does), so segment
/// boundaries can differ from the leader's after one.
fn log_bytes(dir: &Path) -> Vec<u8> {
    segment_files(dir)
        .into_iter()
        .filter(|(n, _)| n.ends_with(".log"))
        .flat_map(|(_, bytes)| bytes)
        .collect()
}

/// How a follower must match its leader.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Same {
    /// The same segment files, byte for byte.
    Files,
    /// The same log bytes.
    Bytes,
}

/// Waits until the follower has the leader's records (as `same` says) and high watermark.
async fn wait_in_sync(
    leader: &Leader,
    conn: &mut BrokerConnection,
    follower: &PartitionLog,
    fdir: &Path,
    same: Same,
) {
    let hw = leader_high_watermark(conn).await;
    let matches = || match same {
        Same::Files => segment_files(fdir) == segment_files(&leader.log_dir()),
        Same::Bytes => log_bytes(fdir) == log_bytes(&leader.log_dir()),
    };
    for _ in 0..400 {
        if follower.log_end_offset() == hw && follower.high_watermark() == hw && matches() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!((follower.log_end_offset(), follower.high_watermark()), (hw, hw), "caught up");
    match same {
        Same::Files => assert_eq!(
            describe(&segment_files(fdir)),
            describe(&segment_files(&leader.log_dir())),
            "same segments, same bytes"
        ),
        Same::Bytes => assert!(log_bytes(fdir) == log_bytes(&leader.log_dir()), "same log bytes"),
    }
}

/// Name, size and checksum of each file: what an assertion shows.
fn describe(files: &[(String, Vec<u8>)]) -> Vec<(String, usize, u32)> {
    files.iter().map(|(n, b)| (n.clone(), b.len(), crc32c::crc32c(b))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_copies_its_leader_byte_for_byte() {
    let leader = Leader::start().await;
    let mut conn = leader.connect().await;
    create_topic(&mut conn).await;
    let idempotent = init_producer(&mut conn, None).await;
    for i in 0..10 {
        produce_plain(&mut conn, 3).await;
        produce(&mut conn, batch(2, Some((idempotent.0, idempotent.1, 2 * i)), false), None).await;
    }
    let txn = init_producer(&mut conn, Some("txn")).await;
    let seq = transaction(&mut conn, "txn", txn, 0, 2, false).await;
    transaction(&mut conn, "txn", txn, seq, 1, true).await;
    produce_plain(&mut conn, 20).await;
    assert!(
        segment_files(&leader.log_dir()).iter().filter(|(n, _)| n.ends_with(".log")).count() >= 3,
        "several segments"
    );

    let fdir = tempfile::tempdir().expect("tempdir");
    let follower = follower_log(fdir.path());
    let (fetchers, metrics) = manager();
    fetchers.follow(followed(&follower), &leader.registration());
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Files).await;
    assert!(follower.is_replicated(), "a followed log takes its high watermark from the leader");
    assert_eq!(
        follower.epoch_entries().iter().map(|e| (e.epoch, e.start_offset)).collect::<Vec<_>>(),
        vec![(0, 0)]
    );
    let before = follower.log_end_offset();

    // The fetcher waits in a long poll (max_wait_ms 2000): an append wakes it
    // at once rather than at the end of the wait.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    produce_plain(&mut conn, 1).await;
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Files).await;
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "woken by the append: {:?}",
        started.elapsed()
    );
    produce_plain(&mut conn, 4).await;
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Files).await;
    assert_eq!(follower.log_end_offset(), before + 5);

    assert!(metrics.replication.replica_fetch_bytes.get() > 0);
    assert!(metrics.replication.replica_fetch_requests.get() > 0);
    let rendered = metrics.render();
    assert!(rendered.contains("floe_replica_fetch_bytes_total"), "{rendered}");

    fetchers.shutdown().await;
    drop(conn);
    leader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergent_tail_is_truncated_to_the_leaders_log() {
    let leader = Leader::start().await;
    let mut conn = leader.connect().await;
    create_topic(&mut conn).await;
    for _ in 0..12 {
        produce(&mut conn, batch(3, None, false), None).await;
    }
    let fdir = tempfile::tempdir().expect("tempdir");
    let follower = follower_log(fdir.path());
    let (fetchers, metrics) = manager();
    let brokers = leader.registration();
    fetchers.follow(followed(&follower), &brokers);
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Bytes).await;
    let shared = follower.log_end_offset();

    // 1. The follower wrote more in the leader's epoch (0), which the leader never
    // had: OffsetForLeaderEpoch(0) answers (0, leader end), and the tail goes.
    fetchers.follow(Vec::new(), &brokers);
    for _ in 0..3 {
        follower.append(&mut BytesMut::from(&batch(4, None, false)[..]), 0).expect("local append");
    }
    assert_eq!(follower.log_end_offset(), shared + 12);
    fetchers.follow(followed(&follower), &brokers);
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Bytes).await;
    assert_eq!(follower.log_end_offset(), shared);

    // 2. The follower led epoch 5 meanwhile (an ex-leader's unreplicated tail):
    // the leader does not know epoch 5 (UNDEFINED), so the follower truncates to
    // its high watermark, which it had from the leader.
    fetchers.follow(Vec::new(), &brokers);
    follower.become_leader(5).expect("epoch 5");
    for _ in 0..4 {
        follower.append(&mut BytesMut::from(&batch(2, None, false)[..]), 0).expect("local append");
    }
    assert_eq!(follower.latest_epoch(), Some(5));
    assert_eq!(follower.high_watermark(), shared, "the local tail is not committed");
    fetchers.follow(followed(&follower), &brokers);
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Bytes).await;
    assert_eq!(follower.log_end_offset(), shared);
    assert_eq!(follower.latest_epoch(), Some(0), "epoch 5 went with its records");

    // And replication goes on from there.
    produce(&mut conn, batch(3, None, false), None).await;
    wait_in_sync(&leader, &mut conn, &follower, fdir.path(), Same::Bytes).await;
    assert_eq!(follower.log_end_offset(), shared + 3);
    assert_eq!(
        metrics.replication.replica_fetch_errors.with_label_values(&["connection"]).get(),
        0
    );

    fetchers.shutdown().await;
    drop(conn);
    leader.stop().await;
}
