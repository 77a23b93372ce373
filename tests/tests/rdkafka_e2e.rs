//! rdkafka (librdkafka 2.12, bundled) against a real `floe` process: topic creation via
//! AdminClient, 10k records through a FutureProducer, read back with an assign()ed
//! BaseConsumer (no consumer group protocol), checking offsets and content.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::Floe;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

const TIMEOUT: Duration = Duration::from_secs(30);

fn config(floe: &Floe) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", floe.bootstrap());
    c
}

async fn create_topic(floe: &Floe, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = config(floe).create().expect("admin client");
    let res = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .expect("CreateTopics request");
    assert_eq!(res.len(), 1);
    assert_eq!(res[0], Ok(name.to_string()), "create topic {name}");
}

fn record_key(i: usize) -> String {
    format!("key-{i:05}")
}

fn record_value(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(64 + i % 200, b'a' + (i % 26) as u8);
    v
}

async fn produce_consume(compression: &str, n: usize) {
    let floe = Floe::start();
    let topic = format!("rd-{compression}-{}", std::process::id());
    create_topic(&floe, &topic, 1).await;

    let producer: FutureProducer = config(&floe)
        .set("acks", "all")
        .set("compression.type", compression)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("producer");
    let mut futures = Vec::with_capacity(n);
    for i in 0..n {
        let key = record_key(i);
        let value = record_value(i);
        let headers = OwnedHeaders::new()
            .insert(Header { key: "i", value: Some(&i.to_string()) })
            .insert(Header { key: "null", value: None::<&[u8]> });
        let rec = FutureRecord::to(&topic).partition(0).key(&key).payload(&value).headers(headers);
        futures.push(producer.send_result(rec).map_err(|(e, _)| e).expect("enqueue"));
    }
    // offset -> record index
    let mut at: HashMap<i64, usize> = HashMap::with_capacity(n);
    for (i, f) in futures.into_iter().enumerate() {
        let d = f.await.expect("delivery future").map_err(|(e, _)| e).expect("delivery");
        assert_eq!(d.partition, 0);
        assert!(at.insert(d.offset, i).is_none(), "offset {} acknowledged twice", d.offset);
    }
    let mut offsets: Vec<i64> = at.keys().copied().collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..n as i64).collect::<Vec<_>>(), "acknowledged offsets are not 0..{n}");

    let consumer: BaseConsumer = config(&floe)
        .set("group.id", "floe-e2e-assign-only")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "error")
        .create()
        .expect("consumer");
    let (lo, hi) = consumer.fetch_watermarks(&topic, 0, TIMEOUT).expect("watermarks");
    assert_eq!((lo, hi), (0, n as i64));
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(0)).unwrap();
    consumer.assign(&tpl).expect("assign");

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next = 0i64;
    while next < n as i64 {
        assert!(Instant::now() < deadline, "consumed only {next}/{n} records within 60 s");
        let Some(msg) = consumer.poll(Duration::from_millis(500)) else { continue };
        let msg = match msg {
            Ok(m) => m,
            Err(KafkaError::PartitionEOF(_)) => continue,
            Err(e) => panic!("consumer error at offset {next}: {e}"),
        };
        assert_eq!(msg.offset(), next, "offsets not contiguous");
        let i = at[&msg.offset()];
        assert_eq!(msg.key(), Some(record_key(i).as_bytes()), "key at offset {next}");
        assert_eq!(msg.payload(), Some(record_value(i).as_slice()), "value at offset {next}");
        let h = msg.headers().expect("headers");
        assert_eq!(h.count(), 2);
        let h0 = h.get(0);
        assert_eq!((h0.key, h0.value), ("i", Some(i.to_string().as_bytes())));
        let h1 = h.get(1);
        assert_eq!((h1.key, h1.value), ("null", None));
        next += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_10k_uncompressed() {
    produce_consume("none", 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_10k_zstd() {
    produce_consume("zstd", 10_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_topics_and_rejects_duplicates() {
    let floe = Floe::start();
    let topic = format!("rd-admin-{}", std::process::id());
    create_topic(&floe, &topic, 3).await;

    let consumer: BaseConsumer = config(&floe).create().expect("client");
    let md = consumer.fetch_metadata(Some(&topic), TIMEOUT).expect("metadata");
    let t = md.topics().iter().find(|t| t.name() == topic).expect("topic in metadata");
    assert!(t.error().is_none(), "topic error {:?}", t.error());
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2]);
    assert_eq!(md.brokers().len(), 1);
    assert_eq!(md.brokers()[0].port() as u16, floe.port);

    let admin: AdminClient<DefaultClientContext> = config(&floe).create().unwrap();
    let res = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .expect("CreateTopics request");
    assert_eq!(res, vec![Err((topic.clone(), RDKafkaErrorCode::TopicAlreadyExists))]);
}
