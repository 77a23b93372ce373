//! Typed tiering end to end inside the crate: Avro values of two schema versions
//! (and records that cannot be typed) in a real partition log, tiered into a typed
//! table and its dead-letter table in a real SQLite catalog, read back by scan.
//! Typed Avro keys (record and primitive, evolving) and schemaless JSON keys and
//! values the same way.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use apache_avro::types::Value;
use apache_avro::{to_avro_datum, Schema as AvroSchema};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use floe_schema::{RegisteredSchema, SchemaType, TypedDecoder};
use futures::TryStreamExt;

use super::{SchemaLookupError, SchemaSource};
use crate::catalog::IcebergCatalog;
use crate::table::{TierLimits, TopicTable};
use crate::test_util::*;

const V1: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},
  {"name":"offset","type":"string"},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"city","type":"string"}]}}]}"#;
const V2: &str = r#"{"type":"record","name":"Order","fields":[
  {"name":"id","type":"long"},
  {"name":"offset","type":"string"},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"address","type":{"type":"record","name":"Address","fields":[
     {"name":"city","type":"string"},{"name":"zip","type":["null","string"],"default":null}]}},
  {"name":"score","type":["null","double"],"default":null}]}"#;
/// Not writable into the table V1 made: `id` as a string.
const BROKEN: &str = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}"#;

#[derive(Debug)]
struct Schemas(HashMap<i32, Arc<TypedDecoder>>);

impl SchemaSource for Schemas {
    fn is_protobuf(&self, id: i32) -> Result<bool, SchemaLookupError> {
        self.decoder(id, &[0]).map(|_| false)
    }

    fn decoder(
        &self,
        id: i32,
        _message_indexes: &[i32],
    ) -> Result<Arc<TypedDecoder>, SchemaLookupError> {
        self.0
            .get(&id)
            .cloned()
            .ok_or_else(|| SchemaLookupError::Missing(format!("no schema with id {id}")))
    }
}

fn avro_schemas(schemas: &[(i32, &str)]) -> Arc<dyn SchemaSource> {
    let mut m = HashMap::new();
    for (id, text) in schemas {
        let s = RegisteredSchema {
            id: *id,
            schema_type: SchemaType::Avro,
            schema: text.to_string(),
            references: vec![],
        };
        m.insert(*id, Arc::new(TypedDecoder::new(&s, &[]).unwrap()));
    }
    Arc::new(Schemas(m))
}

fn schemas() -> Arc<dyn SchemaSource> {
    avro_schemas(&[(1, V1), (2, V2), (3, BROKEN)])
}

fn framed(id: i32, payload: Vec<u8>) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend(payload);
    v
}

fn order(text: &str, id: i32, i: i64) -> Vec<u8> {
    let schema = AvroSchema::parse_str(text).unwrap();
    let mut fields = vec![
        ("id".to_string(), Value::Long(i)),
        ("offset".to_string(), Value::String(format!("o{i}"))),
        (
            "tags".to_string(),
            Value::Array((0..i % 3).map(|t| Value::String(format!("t{t}"))).collect()),
        ),
    ];
    let mut address = vec![("city".to_string(), Value::String(format!("city{i}")))];
    if id == 2 {
        address
            .push(("zip".to_string(), Value::Union(1, Box::new(Value::String(format!("z{i}"))))));
        fields.push(("address".to_string(), Value::Record(address)));
        fields
            .push(("score".to_string(), Value::Union(1, Box::new(Value::Double(i as f64 / 2.0)))));
    } else {
        fields.push(("address".to_string(), Value::Record(address)));
    }
    framed(id, to_avro_datum(&schema, Value::Record(fields)).unwrap())
}

fn value_record(value: Option<Vec<u8>>, i: i64) -> TestRecord {
    TestRecord {
        key: Some(format!("k{i}").into_bytes()),
        value,
        headers: vec![],
        timestamp: 1_700_000_000_000 + i,
    }
}

/// Offsets 0-4 v1, 5 tombstone, 6 not framed, 7 unknown id, 8 bad bytes for v1,
/// 9-13 v2, 14 a schema the table cannot take, 15-16 v1 again.
fn produce(log: &floe_storage::PartitionLog) {
    let mut recs: Vec<TestRecord> =
        (0..5).map(|i| value_record(Some(order(V1, 1, i)), i)).collect();
    recs.push(value_record(None, 5));
    recs.push(value_record(Some(b"plain text".to_vec()), 6));
    recs.push(value_record(Some(framed(99, vec![2, 4])), 7));
    recs.push(value_record(Some(framed(1, vec![0xff, 0xff, 0xff])), 8));
    recs.extend((9..14).map(|i| value_record(Some(order(V2, 2, i)), i)));
    recs.push(value_record(
        Some(framed(
            3,
            to_avro_datum(
                &AvroSchema::parse_str(BROKEN).unwrap(),
                Value::Record(vec![("id".into(), Value::String("x".into()))]),
            )
            .unwrap(),
        )),
        14,
    ));
    recs.extend((15..17).map(|i| value_record(Some(order(V1, 1, i)), i)));
    for chunk in recs.chunks(4) {
        log.append(
            &mut encode(chunk, floe_protocol::kafka_protocol::records::Compression::None),
            0,
        )
        .unwrap();
    }
    log.roll_now().unwrap();
}

async fn catalog(dir: &std::path::Path) -> IcebergCatalog {
    IcebergCatalog::open_sqlite(
        "floe",
        &dir.join("iceberg/catalog.db"),
        &dir.join("iceberg/warehouse"),
        "kafka",
    )
    .await
    .unwrap()
}

/// The table's rows by offset. iceberg-rust's reader cannot yet fill a nested field
/// missing from an older data file (a struct column that gained a field), so the
/// `address` struct is left out here: pyiceberg and DuckDB read it in
/// `tests/python/test_typed_tables.py`.
async fn scan(t: &TopicTable) -> RecordBatch {
    scan_except(t, &["address"]).await
}

/// The table's rows by offset, without the columns `skip`.
async fn scan_except(t: &TopicTable, skip: &[&str]) -> RecordBatch {
    let table = t.load().await.unwrap();
    let columns: Vec<String> = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.clone())
        .filter(|n| !skip.contains(&n.as_str()))
        .collect();
    let batches: Vec<RecordBatch> = table
        .scan()
        .select(columns)
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let schema = batches.first().map(|b| b.schema()).expect("rows");
    let all = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
    let offsets = all.column_by_name("offset").unwrap().as_primitive::<Int64Type>();
    let mut order: Vec<u32> = (0..all.num_rows() as u32).collect();
    order.sort_by_key(|&i| offsets.value(i as usize));
    let indices = arrow_array::UInt32Array::from(order);
    let columns = all
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c, &indices, None).unwrap())
        .collect();
    RecordBatch::try_new(schema, columns).unwrap()
}

fn offsets(b: &RecordBatch) -> Vec<i64> {
    b.column_by_name("offset").unwrap().as_primitive::<Int64Type>().values().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_values_become_typed_columns_that_evolve_and_bad_records_become_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("orders-0"), 0, &[]));
    produce(&log);
    let cat = catalog(dir.path()).await;
    let t =
        cat.typed_topic_table("orders", "id-1", "day(timestamp)", false, schemas()).await.unwrap();
    let limits = TierLimits { arrow_batch_rows: 6, ..TierLimits::default() };
    let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
    assert_eq!(out.committed[&0], (0, 16));
    assert_eq!(out.dead_letters, 4, "{out:?}");

    let typed = scan(&t).await;
    assert_eq!(offsets(&typed), [0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 15, 16]);
    assert!(typed.column_by_name("value").is_none(), "no raw value column without keep-raw");
    let id = typed.column_by_name("id").unwrap().as_primitive::<Int64Type>();
    assert_eq!(
        (id.value(0), id.value(7), id.is_null(5)),
        (0, 10, true),
        "the tombstone's columns are null"
    );
    let renamed = typed.column_by_name("value_offset").unwrap().as_string::<i32>();
    assert_eq!(renamed.value(3), "o3");
    let tags = typed.column_by_name("tags").unwrap().as_list::<i32>();
    assert_eq!(tags.value(2).as_string::<i32>().iter().flatten().collect::<Vec<_>>(), ["t0", "t1"]);
    let score = typed.column_by_name("score").unwrap().as_primitive::<Float64Type>();
    assert!(score.is_null(0) && score.is_null(12), "v1 rows have no score");
    assert_eq!(score.value(7), 5.0);

    let dead = scan(t.dead_letter_table().unwrap()).await;
    assert_eq!(offsets(&dead), [6, 7, 8, 14]);
    let errors: Vec<&str> =
        dead.column_by_name("error").unwrap().as_string::<i32>().iter().flatten().collect();
    assert!(errors[0].contains("magic byte"), "{errors:?}");
    assert!(errors[1].contains("no schema with id 99"), "{errors:?}");
    assert!(errors[2].starts_with("schema id 1:"), "{errors:?}");
    assert!(errors[3].contains("cannot be written to the table"), "{errors:?}");
    let raw = dead.column_by_name("value").unwrap().as_binary::<i64>();
    assert_eq!(raw.value(0), b"plain text", "dead letters keep the bytes");

    // The table's schema: the Kafka columns kept their ids; v2's fields were added after v1's.
    let table = t.load().await.unwrap();
    let schema = table.metadata().current_schema();
    let field = |n: &str| schema.field_by_name(n).unwrap().id;
    assert!(field("offset") < field("id") && field("id") < field("score"));
    assert!(field("address.city") < field("address.zip"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_dead_letter_and_the_typed_commit_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("orders-0"), 0, &[]));
    produce(&log);
    let cat = catalog(dir.path()).await;
    let t = cat.typed_topic_table("orders", "id-1", "", true, schemas()).await.unwrap();
    let prepared = t
        .prepare(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(false))
        .await
        .unwrap();
    t.commit_dead_letters_only(prepared).await.unwrap();
    assert_eq!(offsets(&scan(t.dead_letter_table().unwrap()).await), [6, 7, 8, 14]);
    assert!(
        t.committed_next_offsets().await.unwrap().is_empty(),
        "the typed commit never happened"
    );
    // The next pass converts the same records again: the dead letters are not written twice.
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.committed[&0], out.dead_letters), ((0, 16), 0));
    let typed = offsets(&scan(&t).await);
    let dead = offsets(&scan(t.dead_letter_table().unwrap()).await);
    let mut all: Vec<i64> = typed.iter().chain(&dead).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..17).collect::<Vec<_>>(), "every offset once, in one table or the other");
    let next: BTreeMap<i32, i64> =
        t.dead_letter_table().unwrap().committed_next_offsets().await.unwrap();
    assert_eq!(next[&0], 17);
    // keep-raw: the typed table has the value bytes too.
    let typed = scan(&t).await;
    assert!(typed
        .column_by_name("value")
        .unwrap()
        .as_binary::<i64>()
        .value(0)
        .starts_with(&[0, 0, 0, 0, 1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widened_field_is_an_iceberg_type_promotion() {
    const NARROW: &str = r#"{"type":"record","name":"M","fields":[{"name":"n","type":"int"},{"name":"x","type":"float"}]}"#;
    const WIDE: &str = r#"{"type":"record","name":"M","fields":[{"name":"n","type":"long"},{"name":"x","type":"double"}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("m-0"), 0, &[]));
    let value = |text: &str, id: i32, fields: Vec<(String, Value)>| {
        framed(
            id,
            to_avro_datum(&AvroSchema::parse_str(text).unwrap(), Value::Record(fields)).unwrap(),
        )
    };
    let mut recs: Vec<TestRecord> = (0..3)
        .map(|i| {
            value_record(
                Some(value(
                    NARROW,
                    10,
                    vec![("n".into(), Value::Int(i)), ("x".into(), Value::Float(0.5))],
                )),
                i.into(),
            )
        })
        .collect();
    recs.extend((3..6).map(|i| {
        let n = (1i64 << 40) + i;
        value_record(
            Some(value(
                WIDE,
                11,
                vec![("n".into(), Value::Long(n)), ("x".into(), Value::Double(1e300))],
            )),
            i,
        )
    }));
    log.append(
        &mut encode(&recs[..3], floe_protocol::kafka_protocol::records::Compression::None),
        0,
    )
    .unwrap();
    log.roll_now().unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat
        .typed_topic_table("m", "id-1", "", false, avro_schemas(&[(10, NARROW), (11, WIDE)]))
        .await
        .unwrap();
    t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    let int_schema = t.load().await.unwrap().metadata().current_schema().clone();
    assert_eq!(
        *int_schema.field_by_name("n").unwrap().field_type,
        iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Int)
    );
    log.append(
        &mut encode(&recs[3..], floe_protocol::kafka_protocol::records::Compression::None),
        0,
    )
    .unwrap();
    log.roll_now().unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (3, 0));
    let table = t.load().await.unwrap();
    let schema = table.metadata().current_schema();
    let n = schema.field_by_name("n").unwrap();
    assert_eq!(*n.field_type, iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Long));
    assert_eq!(
        n.id,
        int_schema.field_by_name("n").unwrap().id,
        "promoted in place: the same field id"
    );
    assert_eq!(
        *schema.field_by_name("x").unwrap().field_type,
        iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Double)
    );
    // Old files read widened.
    let rows = scan(&t).await;
    let n = rows.column_by_name("n").unwrap().as_primitive::<Int64Type>();
    assert_eq!(n.values().to_vec(), [0, 1, 2, (1 << 40) + 3, (1 << 40) + 4, (1 << 40) + 5]);
    let x = rows.column_by_name("x").unwrap().as_primitive::<Float64Type>();
    assert_eq!((x.value(0), x.value(5)), (0.5, 1e300));
    // A later narrow value is written widened, without another promotion.
    log.append(
        &mut encode(&recs[..1], floe_protocol::kafka_protocol::records::Compression::None),
        0,
    )
    .unwrap();
    log.roll_now().unwrap();
    t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(t.load().await.unwrap().metadata().current_schema_id(), schema.schema_id());
}

/// Typed against raw tiering of the same sealed segments (1 KiB Avro values, lz4
/// batches of 5), one run, so the ratio is what to quote:
/// `cargo test -p floe-tiering -- --ignored --nocapture typed_tier_throughput`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn typed_tier_throughput() {
    const EVENT: &str = r#"{"type":"record","name":"Event","fields":[
      {"name":"id","type":"long"},
      {"name":"user","type":"string"},
      {"name":"kind","type":{"type":"enum","name":"Kind","symbols":["VIEW","CLICK","BUY"]}},
      {"name":"amount","type":"double"},
      {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
      {"name":"tags","type":{"type":"array","items":"string"}},
      {"name":"attributes","type":{"type":"map","values":"string"}},
      {"name":"note","type":["null","string"],"default":null},
      {"name":"body","type":"string"}]}"#;
    let schema = AvroSchema::parse_str(EVENT).unwrap();
    let registered = RegisteredSchema {
        id: 1,
        schema_type: SchemaType::Avro,
        schema: EVENT.into(),
        references: vec![],
    };
    let source: Arc<dyn SchemaSource> = Arc::new(Schemas(HashMap::from([(
        1,
        Arc::new(TypedDecoder::new(&registered, &[]).unwrap()),
    )])));
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("events-0"), 0, &[("segment.bytes", "16777216")]));
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let alphabet: Vec<char> = ('a'..='z').chain('0'..='9').collect();
    let records = 40_000usize;
    let mut value_bytes = 0usize;
    for b in 0..records / 5 {
        let recs: Vec<TestRecord> = (0..5)
            .map(|i| {
                let n = (b * 5 + i) as i64;
                let body: String =
                    (0..820).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
                let event = Value::Record(vec![
                    ("id".into(), Value::Long(n)),
                    ("user".into(), Value::String(format!("user-{}", next() % 5000))),
                    (
                        "kind".into(),
                        Value::Enum(
                            (n % 3) as u32,
                            ["VIEW", "CLICK", "BUY"][(n % 3) as usize].into(),
                        ),
                    ),
                    ("amount".into(), Value::Double((next() % 100_000) as f64 / 100.0)),
                    ("at".into(), Value::TimestampMillis(1_764_000_000_000 + n)),
                    (
                        "tags".into(),
                        Value::Array(
                            (0..3).map(|t| Value::String(format!("tag{}", (n + t) % 40))).collect(),
                        ),
                    ),
                    (
                        "attributes".into(),
                        Value::Map(
                            (0..4)
                                .map(|a| {
                                    (format!("k{a}"), Value::String(format!("v{}", next() % 100)))
                                })
                                .collect(),
                        ),
                    ),
                    ("note".into(), Value::Union(0, Box::new(Value::Null))),
                    ("body".into(), Value::String(body)),
                ]);
                let value = framed(1, to_avro_datum(&schema, event).unwrap());
                value_bytes += value.len();
                value_record(Some(value), n)
            })
            .collect();
        log.append(&mut encode(&recs, floe_protocol::kafka_protocol::records::Compression::Lz4), 0)
            .unwrap();
    }
    log.roll_now().unwrap();
    let segment_bytes: u64 = log.sealed_segments().iter().map(|s| s.size_bytes).sum();
    let cat = catalog(dir.path()).await;
    let limits = TierLimits { max_bytes_per_partition: u64::MAX, ..TierLimits::default() };
    let mut seconds = Vec::new();
    for typed in [false, true, false, true] {
        let name = format!("events_{}_{}", if typed { "typed" } else { "raw" }, seconds.len());
        let t = if typed {
            cat.typed_topic_table(&name, "id-1", "day(timestamp)", false, source.clone())
                .await
                .unwrap()
        } else {
            cat.topic_table(&name, "id-1", "day(timestamp)").await.unwrap()
        };
        let start = std::time::Instant::now();
        let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
        let took = start.elapsed().as_secs_f64();
        assert_eq!((out.rows, out.dead_letters), (records as u64, 0));
        println!(
            "{name}: {took:.3} s, {:.1} MiB/s of segment, {:.1} MiB/s of values, {} Parquet bytes",
            segment_bytes as f64 / took / 1048576.0,
            value_bytes as f64 / took / 1048576.0,
            out.bytes
        );
        seconds.push(took);
    }
    let (raw, typed) = (seconds[0].min(seconds[2]), seconds[1].min(seconds[3]));
    println!("{records} records, {:.0} value bytes each, {segment_bytes} segment bytes: typed takes {:.2}× the time of raw",
        value_bytes as f64 / records as f64, typed / raw);
}

const KEY_V1: &str = r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"int"},{"name":"user","type":"string"}]}"#;
const KEY_V2: &str = r#"{"type":"record","name":"Key","fields":[{"name":"id","type":"long"},{"name":"user","type":"string"},
  {"name":"region","type":["null","string"],"default":null}]}"#;
const KEY_STRING: &str = r#""string""#;

fn avro(text: &str, id: i32, value: Value) -> Vec<u8> {
    framed(id, to_avro_datum(&AvroSchema::parse_str(text).unwrap(), value).unwrap())
}

fn key_v1(i: i32) -> Vec<u8> {
    avro(
        KEY_V1,
        21,
        Value::Record(vec![
            ("id".into(), Value::Int(i)),
            ("user".into(), Value::String(format!("u{i}"))),
        ]),
    )
}

fn keyed(key: Option<Vec<u8>>, value: Option<Vec<u8>>, i: i64) -> TestRecord {
    TestRecord { key, value, headers: vec![], timestamp: 1_700_000_000_000 + i }
}

fn append(log: &floe_storage::PartitionLog, recs: &[TestRecord]) {
    log.append(&mut encode(recs, floe_protocol::kafka_protocol::records::Compression::None), 0)
        .unwrap();
    log.roll_now().unwrap();
}

fn layout(key: super::DataFormat, value: super::DataFormat, keep_raw: bool) -> super::TypedLayout {
    super::TypedLayout { key, value, keep_raw }
}

fn strings(b: &RecordBatch, column: &str) -> Vec<Option<String>> {
    b.column_by_name(column)
        .unwrap()
        .as_string::<i32>()
        .iter()
        .map(|s| s.map(str::to_string))
        .collect()
}

fn errors(b: &RecordBatch) -> Vec<String> {
    strings(b, "error").into_iter().flatten().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_keys_become_one_struct_column_and_bad_keys_dead_letters() {
    use super::DataFormat::SchemaRegistry;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("orders-0"), 0, &[]));
    // 0-3 typed keys, 4 a null key, 5 a key not framed, 6 an unknown key schema,
    // 7 a string key (the table's key is a struct), 8 key bytes that do not match their schema.
    let mut recs: Vec<TestRecord> =
        (0..4).map(|i| keyed(Some(key_v1(i)), Some(order(V1, 1, i.into())), i.into())).collect();
    recs.push(keyed(None, Some(order(V1, 1, 4)), 4));
    recs.push(keyed(Some(b"k5".to_vec()), Some(order(V1, 1, 5)), 5));
    recs.push(keyed(Some(framed(98, vec![2])), Some(order(V1, 1, 6)), 6));
    recs.push(keyed(
        Some(avro(KEY_STRING, 23, Value::String("s".into()))),
        Some(order(V1, 1, 7)),
        7,
    ));
    recs.push(keyed(Some(framed(21, vec![0xff])), Some(order(V1, 1, 8)), 8));
    append(&log, &recs);
    let cat = catalog(dir.path()).await;
    let source = avro_schemas(&[(1, V1), (21, KEY_V1), (23, KEY_STRING)]);
    let t = cat
        .typed_table(
            "orders",
            "id-1",
            "",
            layout(SchemaRegistry, SchemaRegistry, false),
            Some(source),
        )
        .await
        .unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (5, 4), "{out:?}");

    let typed = scan(&t).await;
    assert_eq!(offsets(&typed), [0, 1, 2, 3, 4]);
    assert!(typed.column_by_name("key_raw").is_none(), "no raw key without keep-raw");
    let key = typed.column_by_name("key").unwrap().as_struct();
    let ids = key.column_by_name("id").unwrap().as_primitive::<arrow_array::types::Int32Type>();
    assert_eq!(ids.values()[..4], [0, 1, 2, 3]);
    let users = key.column_by_name("user").unwrap().as_string::<i32>();
    assert_eq!((users.value(2), key.is_null(4)), ("u2", true), "a null key is a null `key`");
    assert_eq!(
        typed.column_by_name("id").unwrap().as_primitive::<Int64Type>().value(3),
        3,
        "values typed beside"
    );

    let dead = scan(t.dead_letter_table().unwrap()).await;
    assert_eq!(offsets(&dead), [5, 6, 7, 8]);
    let errors = errors(&dead);
    assert!(
        errors.iter().all(|e| e.starts_with("key: ")),
        "the error says it was the key: {errors:?}"
    );
    assert!(
        errors[0].contains("magic byte") && errors[1].contains("no schema with id 98"),
        "{errors:?}"
    );
    assert!(errors[2].contains("cannot be written to the table's key column"), "{errors:?}");
    assert!(errors[3].contains("schema id 21"), "{errors:?}");
    assert_eq!(
        dead.column_by_name("key").unwrap().as_binary::<i64>().value(0),
        b"k5",
        "dead letters keep the key bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primitive_key_is_a_column_of_its_type_and_keep_raw_keeps_its_bytes() {
    use super::DataFormat::{Raw, SchemaRegistry};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("users-0"), 0, &[]));
    let recs: Vec<TestRecord> = (0..3)
        .map(|i| {
            keyed(
                Some(avro(KEY_STRING, 23, Value::String(format!("user-{i}")))),
                Some(vec![i as u8]),
                i,
            )
        })
        .collect();
    append(&log, &recs);
    let cat = catalog(dir.path()).await;
    // A partition spec on `key` applies to the raw bytes, `key_raw` (field id 5), with keep-raw.
    let t = cat
        .typed_table(
            "users",
            "id-1",
            "bucket[4](key)",
            layout(SchemaRegistry, Raw, true),
            Some(avro_schemas(&[(23, KEY_STRING)])),
        )
        .await
        .unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (3, 0));
    let typed = scan(&t).await;
    assert_eq!(
        strings(&typed, "key"),
        [Some("user-0".into()), Some("user-1".into()), Some("user-2".into())]
    );
    assert!(typed
        .column_by_name("key_raw")
        .unwrap()
        .as_binary::<i64>()
        .value(1)
        .starts_with(&[0, 0, 0, 0, 23]));
    assert_eq!(
        typed.column_by_name("value").unwrap().as_binary::<i64>().value(2),
        [2],
        "a raw value stays binary"
    );
    let table = t.load().await.unwrap();
    assert_eq!(
        table.metadata().default_partition_spec().fields()[0].source_id,
        crate::schema::field_id::KEY
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_schema_evolves_the_key_struct_like_a_value_schema() {
    use super::DataFormat::{Raw, SchemaRegistry};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("ev-0"), 0, &[]));
    append(&log, &(0..2).map(|i| keyed(Some(key_v1(i)), None, i.into())).collect::<Vec<_>>());
    let cat = catalog(dir.path()).await;
    let source = avro_schemas(&[(21, KEY_V1), (22, KEY_V2)]);
    let t = cat
        .typed_table("ev", "id-1", "", layout(SchemaRegistry, Raw, false), Some(source))
        .await
        .unwrap();
    t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    let before = t.load().await.unwrap().metadata().current_schema().clone();
    let v2 = |i: i64| {
        avro(
            KEY_V2,
            22,
            Value::Record(vec![
                ("id".into(), Value::Long((1 << 40) + i)),
                ("user".into(), Value::String(format!("u{i}"))),
                ("region".into(), Value::Union(1, Box::new(Value::String("eu".into())))),
            ]),
        )
    };
    append(&log, &(2..4).map(|i| keyed(Some(v2(i)), None, i)).collect::<Vec<_>>());
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (2, 0));
    let schema = t.load().await.unwrap().metadata().current_schema().clone();
    let id = schema.field_by_name("key.id").unwrap();
    assert_eq!(
        *id.field_type,
        iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Long),
        "int → long promoted"
    );
    assert_eq!(id.id, before.field_by_name("key.id").unwrap().id, "in place");
    assert!(
        schema.field_by_name("key.region").is_some(),
        "a new optional field inside the key struct"
    );
    assert!(before.field_by_name("key.region").is_none());
    assert_eq!(offsets(&scan_except(&t, &["key"]).await), [0, 1, 2, 3]);
}

fn json_record(key: Option<&str>, value: Option<&str>, i: i64) -> TestRecord {
    keyed(key.map(|k| k.as_bytes().to_vec()), value.map(|v| v.as_bytes().to_vec()), i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_values_and_keys_get_inferred_columns_that_widen() {
    use super::DataFormat::Json;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("j-0"), 0, &[]));
    append(
        &log,
        &[
            json_record(
                Some(r#"{"user":"u0"}"#),
                Some(r#"{"id":1,"name":"a","price":10,"tags":["x"],"address":{"city":"c1"}}"#),
                0,
            ),
            json_record(
                Some(r#"{"user":"u1"}"#),
                Some(r#"{"id":2,"name":"b","price":10.5,"offset":"o2"}"#),
                1,
            ),
            json_record(Some(r#"{"user":"u2"}"#), Some("plain text"), 2),
            json_record(Some(r#"{"user":"u3"}"#), Some("[1,2]"), 3),
            json_record(Some(r#"{"user":"u4"}"#), Some(r#"{"id":"three"}"#), 4),
            json_record(None, None, 5),
            json_record(Some("k6"), Some(r#"{"id":6}"#), 6),
        ],
    );
    let cat = catalog(dir.path()).await;
    let t = cat.typed_table("j", "id-1", "", layout(Json, Json, false), None).await.unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (3, 4), "{out:?}");
    append(
        &log,
        &[
            json_record(Some(r#"{"user":"u7"}"#), Some(r#"{"id":4,"price":3,"score":1.5}"#), 7),
            json_record(Some(r#"{"user":"u8"}"#), Some(r#"{"id":5.5}"#), 8),
            json_record(Some(r#"{"user":"u9"}"#), Some(r#"{"address":"flat"}"#), 9),
        ],
    );
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (1, 2), "{out:?}");

    let schema = t.load().await.unwrap().metadata().current_schema().clone();
    let ty = |n: &str| schema.field_by_name(n).unwrap().field_type.to_string();
    assert_eq!(
        (ty("id"), ty("price"), ty("name"), ty("score")),
        ("long".into(), "double".into(), "string".into(), "double".into())
    );
    assert_eq!(ty("address.city"), "string");
    assert!(
        schema.field_by_name("value_offset").is_some(),
        "a field named like a Kafka column is prefixed"
    );
    assert!(schema.field_by_name("value").is_none(), "no raw value without keep-raw");

    let typed = scan_except(&t, &[]).await;
    assert_eq!(offsets(&typed), [0, 1, 5, 7]);
    let price = typed.column_by_name("price").unwrap().as_primitive::<Float64Type>();
    assert_eq!(
        (price.value(0), price.value(1), price.is_null(2), price.value(3)),
        (10.0, 10.5, true, 3.0)
    );
    let score = typed.column_by_name("score").unwrap().as_primitive::<Float64Type>();
    assert!(score.is_null(0) && score.is_null(1));
    assert_eq!(score.value(3), 1.5, "the field that appeared later");
    let tags = typed.column_by_name("tags").unwrap().as_list::<i32>();
    assert_eq!(tags.value(0).as_string::<i32>().value(0), "x");
    let city = typed
        .column_by_name("address")
        .unwrap()
        .as_struct()
        .column_by_name("city")
        .unwrap()
        .as_string::<i32>();
    assert_eq!(city.value(0), "c1");
    assert_eq!(strings(&typed, "value_offset")[1].as_deref(), Some("o2"));
    let key = typed.column_by_name("key").unwrap().as_struct();
    assert_eq!(key.column_by_name("user").unwrap().as_string::<i32>().value(3), "u7");
    assert!(key.is_null(2), "a null key");

    let dead = scan(t.dead_letter_table().unwrap()).await;
    assert_eq!(offsets(&dead), [2, 3, 4, 6, 8, 9]);
    let errors = errors(&dead);
    assert!(errors[0].contains("the value is not JSON"), "{errors:?}");
    assert!(errors[1].contains("an array, not an object"), "{errors:?}");
    assert!(
        errors[2].contains("`id` is an integer (long) in one record and a string in another"),
        "{errors:?}"
    );
    assert!(errors[3].starts_with("key: the key is not JSON"), "{errors:?}");
    assert!(errors[4].contains("cannot promote long to double"), "{errors:?}");
    assert!(
        errors[5]
            .contains("`address` is an object (struct) in the table and a string in this record"),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_scalar_key_is_a_column_of_its_type_beside_a_raw_value() {
    use super::DataFormat::{Json, Raw};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("s-0"), 0, &[]));
    append(
        &log,
        &[
            json_record(Some(r#""a""#), Some("v0"), 0),
            json_record(Some("null"), Some("v1"), 1),
            json_record(Some("7"), Some("v2"), 2),
            json_record(Some(r#""b""#), None, 3),
        ],
    );
    let cat = catalog(dir.path()).await;
    let t = cat.typed_table("s", "id-1", "", layout(Json, Raw, true), None).await.unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (3, 1));
    let typed = scan(&t).await;
    assert_eq!(offsets(&typed), [0, 1, 3]);
    assert_eq!(
        strings(&typed, "key"),
        [Some("a".into()), None, Some("b".into())],
        "JSON null: a null key"
    );
    assert_eq!(typed.column_by_name("key_raw").unwrap().as_binary::<i64>().value(1), b"null");
    assert_eq!(typed.column_by_name("value").unwrap().as_binary::<i64>().value(0), b"v0");
    let dead = scan(t.dead_letter_table().unwrap()).await;
    assert_eq!(offsets(&dead), [2]);
    let e = &errors(&dead)[0];
    assert!(
        e.contains("key: `key` is a string in one record and an integer (long) in another"),
        "{e}"
    );
}

/// Every batch of the log's sealed segments, as stored.
fn stored_batches(log: &floe_storage::PartitionLog) -> Vec<Vec<u8>> {
    use floe_storage::{ScannedBatch, SegmentBatchReader};
    let mut out = Vec::new();
    for seg in log.sealed_segments() {
        let mut reader = SegmentBatchReader::open(&seg.path, 0, seg.size_bytes).unwrap();
        while let ScannedBatch::Batch { .. } = reader.next_batch(true).unwrap() {
            out.push(reader.batch_bytes().unwrap().to_vec());
        }
    }
    out
}

/// Concatenated batches cut apart.
fn batches_of(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let n = floe_protocol::record_batch::RecordBatchHeader::parse(&bytes[pos..])
            .unwrap()
            .total_size();
        out.push(bytes[pos..pos + n].to_vec());
        pos += n;
    }
    out
}

/// Shared mode with typed keys and values (issue #16): keep-raw keeps the
/// bytes, the lossless columns the batches, dead letters and `__log` the rest.
/// A log with typed records, a batch split between the typed table and the
/// dead letters, a tombstone, headers, an aborted and a committed transaction
/// is rebuilt from the three tables byte for byte, while the table still has
/// its typed columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_typed_table_rebuilds_the_logs_batches_from_typed_rows_dead_letters_and_markers() {
    use super::DataFormat::SchemaRegistry;
    use floe_storage::ControlRecordType::{Abort, Commit};
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("orders-0"), 0, &[]));
    // 0-5 one batch: 0-3 typed, 4 a key not framed, 5 a value not framed (dead letters).
    let mut recs: Vec<TestRecord> =
        (0..4).map(|i| keyed(Some(key_v1(i)), Some(order(V1, 1, i.into())), i.into())).collect();
    recs.push(keyed(Some(b"k4".to_vec()), Some(order(V1, 1, 4)), 4));
    recs.push(keyed(Some(key_v1(5)), Some(b"plain text".to_vec()), 5));
    recs[1].headers = vec![("trace".into(), Some(b"abc".to_vec())), ("empty".into(), None)];
    append(&log, &recs);
    // 6 a tombstone with a typed key; 7-8 v2 values.
    let mut recs = vec![keyed(Some(key_v1(6)), None, 6)];
    recs.extend((7..9).map(|i| keyed(Some(key_v1(i)), Some(order(V2, 2, i.into())), i.into())));
    append(&log, &recs);
    // 9-11 aborted, 12 its marker; 13-15 committed (null keys, values not framed: dead letters), 16 the marker.
    log.append(&mut transactional(1, 0, 3), 0).unwrap();
    log.append_txn_marker(1, 0, Abort, 0, 1).unwrap();
    log.append(&mut transactional(2, 0, 3), 0).unwrap();
    log.append_txn_marker(2, 0, Commit, 0, 1).unwrap();
    append(&log, &[keyed(Some(key_v1(17)), Some(order(V1, 1, 17)), 17)]);
    let end = log.log_end_offset();
    assert_eq!(end, 18);

    let cat = catalog(dir.path()).await;
    let source = avro_schemas(&[(1, V1), (2, V2), (21, KEY_V1)]);
    let shared = layout(SchemaRegistry, SchemaRegistry, true);
    assert!(
        cat.shared_typed_table(
            "orders",
            "id-1",
            "identity(partition)",
            layout(SchemaRegistry, SchemaRegistry, false),
            Some(source.clone())
        )
        .await
        .is_err(),
        "shared typed tables need keep-raw"
    );
    let t = cat
        .shared_typed_table("orders", "id-1", "identity(partition)", shared, Some(source))
        .await
        .unwrap();
    let out = t
        .tier(
            std::slice::from_ref(&log),
            &TierLimits { arrow_batch_rows: 4, ..TierLimits::default() },
        )
        .await
        .unwrap();
    assert_eq!(out.committed[&0], (0, end - 1));
    assert_eq!((out.rows, out.dead_letters), (8, 5), "{out:?}");

    // SQL readers still get typed columns; every table has the lossless ones filled.
    let typed = scan(&t).await;
    assert_eq!(offsets(&typed), [0, 1, 2, 3, 6, 7, 8, 17]);
    assert_eq!(typed.column_by_name("id").unwrap().as_primitive::<Int64Type>().value(5), 7);
    assert!(typed
        .column_by_name("key_raw")
        .unwrap()
        .as_binary::<i64>()
        .value(0)
        .starts_with(&[0, 0, 0, 0, 21]));
    let dead = scan(t.dead_letter_table().unwrap()).await;
    assert_eq!(offsets(&dead), [4, 5, 13, 14, 15]);
    for b in [&typed, &dead] {
        assert_eq!(b.column_by_name("batch_crc").unwrap().null_count(), 0);
        assert_eq!(b.column_by_name("batch_records_count").unwrap().null_count(), 0);
    }

    let (main, log_table, dlq) = (
        t.load().await.unwrap(),
        t.log_table().unwrap().load().await.unwrap(),
        t.dead_letter_table().unwrap().load().await.unwrap(),
    );
    let index = crate::shared::FileIndex::load_with_dead_letters(&main, &log_table, Some(&dlq))
        .await
        .unwrap();
    let read = |from: i64, max_bytes: usize| {
        let (main, log_table, index) = (&main, &log_table, &index);
        async move {
            crate::shared::read_batches_with_index(
                main,
                log_table,
                index,
                0,
                from,
                end,
                max_bytes,
                crate::shared::FetchCompression::Original,
            )
            .await
            .unwrap()
        }
    };
    let got = read(0, usize::MAX).await;
    let originals = stored_batches(&log);
    assert_eq!(batches_of(&got.bytes), originals, "every batch rebuilt byte for byte");
    assert_eq!((got.next_offset, got.mismatches), (end, 0));
    assert_eq!(got.aborted, [(1, 9)]);
    // From inside the split batch: the batch whole, as the log serves it.
    let mid = read(4, 1).await;
    assert_eq!(batches_of(&mid.bytes), originals[..1]);

    // A second pass over more records crashes after `__log` and `__dlq` committed, before the
    // table: the next pass leaves those rows out, and reads ignore them until the table commits.
    append(
        &log,
        &[
            keyed(Some(key_v1(18)), Some(b"dead again".to_vec()), 18),
            keyed(Some(key_v1(19)), Some(order(V1, 1, 19)), 19),
        ],
    );
    log.append(&mut transactional(3, 0, 2), 0).unwrap();
    log.append_txn_marker(3, 0, Abort, 0, 1).unwrap();
    append(&log, &[keyed(Some(key_v1(23)), Some(order(V1, 1, 23)), 23)]);
    let end2 = log.log_end_offset();
    let prepared = t
        .prepare(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(false))
        .await
        .unwrap();
    t.commit_companions_only(prepared).await.unwrap();
    let reload = || async {
        let (main, log_table, dlq) = (
            t.load().await.unwrap(),
            t.log_table().unwrap().load().await.unwrap(),
            t.dead_letter_table().unwrap().load().await.unwrap(),
        );
        let index = crate::shared::FileIndex::load_with_dead_letters(&main, &log_table, Some(&dlq))
            .await
            .unwrap();
        crate::shared::read_batches_with_index(
            &main,
            &log_table,
            &index,
            0,
            0,
            end2,
            usize::MAX,
            crate::shared::FetchCompression::Original,
        )
        .await
        .unwrap()
    };
    let crashed = reload().await;
    assert_eq!(
        (batches_of(&crashed.bytes), crashed.next_offset),
        (originals.clone(), end),
        "leftovers above the table's end ignored"
    );
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!(
        (out.committed[&0], out.dead_letters),
        ((end, end2 - 1), 0),
        "the dead letter is committed already: {out:?}"
    );
    assert_eq!(
        offsets(&scan(t.dead_letter_table().unwrap()).await),
        [4, 5, 13, 14, 15, 18],
        "each dead letter once"
    );
    let after = reload().await;
    assert_eq!(batches_of(&after.bytes), stored_batches(&log), "every batch once, byte for byte");
    assert_eq!((after.next_offset, after.aborted), (end2, vec![(1, 9), (3, 20)]));

    // Without the dead letters the split batch cannot be rebuilt equal: they are needed.
    let partial = crate::shared::FileIndex::load(&main, &log_table).await.unwrap();
    let without = crate::shared::read_batches_with_index(
        &main,
        &log_table,
        &partial,
        0,
        0,
        end,
        usize::MAX,
        crate::shared::FetchCompression::Original,
    )
    .await
    .unwrap();
    assert_ne!(batches_of(&without.bytes)[0], originals[0]);

    // Table retention cuts the dead letters with `__log`: everything expired, nothing left below the new start.
    let input = crate::retention::PartitionRetention {
        retention_ms: 0,
        retention_bytes: -1,
        local_bytes: 0,
        log_start_offset: 0,
    };
    let report = t.apply_retention(&[(0, input)].into(), 1_800_000_000_000).await.unwrap();
    assert_eq!(report.log_starts[&0], end2);
    assert!(report.log_removed_files >= 4, "both passes' __log and __dlq files: {report:?}");
    let dlq = t.dead_letter_table().unwrap().load().await.unwrap();
    let index = crate::shared::FileIndex::load_with_dead_letters(
        &t.load().await.unwrap(),
        &t.log_table().unwrap().load().await.unwrap(),
        Some(&dlq),
    )
    .await
    .unwrap();
    assert!(
        index.dlq.values().all(Vec::is_empty) && index.log.values().all(Vec::is_empty),
        "{index:?}"
    );
}
