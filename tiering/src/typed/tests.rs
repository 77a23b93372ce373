//! Typed tiering end to end inside the crate: Avro values of two schema versions
//! (and records that cannot be typed) in a real partition log, tiered into a typed
//! table and its dead-letter table in a real SQLite catalog, read back by scan.

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

    fn decoder(&self, id: i32, _message_indexes: &[i32]) -> Result<Arc<TypedDecoder>, SchemaLookupError> {
        self.0.get(&id).cloned().ok_or_else(|| SchemaLookupError::Missing(format!("no schema with id {id}")))
    }
}

fn avro_schemas(schemas: &[(i32, &str)]) -> Arc<dyn SchemaSource> {
    let mut m = HashMap::new();
    for (id, text) in schemas {
        let s = RegisteredSchema { id: *id, schema_type: SchemaType::Avro, schema: text.to_string(), references: vec![] };
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
        ("tags".to_string(), Value::Array((0..i % 3).map(|t| Value::String(format!("t{t}"))).collect())),
    ];
    let mut address = vec![("city".to_string(), Value::String(format!("city{i}")))];
    if id == 2 {
        address.push(("zip".to_string(), Value::Union(1, Box::new(Value::String(format!("z{i}"))))));
        fields.push(("address".to_string(), Value::Record(address)));
        fields.push(("score".to_string(), Value::Union(1, Box::new(Value::Double(i as f64 / 2.0)))));
    } else {
        fields.push(("address".to_string(), Value::Record(address)));
    }
    framed(id, to_avro_datum(&schema, Value::Record(fields)).unwrap())
}

fn value_record(value: Option<Vec<u8>>, i: i64) -> TestRecord {
    TestRecord { key: Some(format!("k{i}").into_bytes()), value, headers: vec![], timestamp: 1_700_000_000_000 + i }
}

/// Offsets 0-4 v1, 5 tombstone, 6 not framed, 7 unknown id, 8 bad bytes for v1,
/// 9-13 v2, 14 a schema the table cannot take, 15-16 v1 again.
fn produce(log: &floe_storage::PartitionLog) {
    let mut recs: Vec<TestRecord> = (0..5).map(|i| value_record(Some(order(V1, 1, i)), i)).collect();
    recs.push(value_record(None, 5));
    recs.push(value_record(Some(b"plain text".to_vec()), 6));
    recs.push(value_record(Some(framed(99, vec![2, 4])), 7));
    recs.push(value_record(Some(framed(1, vec![0xff, 0xff, 0xff])), 8));
    recs.extend((9..14).map(|i| value_record(Some(order(V2, 2, i)), i)));
    recs.push(value_record(Some(framed(3, to_avro_datum(&AvroSchema::parse_str(BROKEN).unwrap(),
        Value::Record(vec![("id".into(), Value::String("x".into()))])).unwrap())), 14));
    recs.extend((15..17).map(|i| value_record(Some(order(V1, 1, i)), i)));
    for chunk in recs.chunks(4) {
        log.append(&mut encode(chunk, floe_protocol::kafka_protocol::records::Compression::None), 0).unwrap();
    }
    log.roll_now().unwrap();
}

async fn catalog(dir: &std::path::Path) -> IcebergCatalog {
    IcebergCatalog::open_sqlite("floe", &dir.join("iceberg/catalog.db"), &dir.join("iceberg/warehouse"), "kafka").await.unwrap()
}

/// The table's rows by offset. iceberg-rust's reader cannot yet fill a nested field
/// missing from an older data file (a struct column that gained a field), so the
/// `address` struct is left out here: pyiceberg and DuckDB read it in
/// `tests/python/test_typed_tables.py`.
async fn scan(t: &TopicTable) -> RecordBatch {
    let table = t.load().await.unwrap();
    let columns: Vec<String> = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| f.name.clone())
        .filter(|n| n != "address")
        .collect();
    let batches: Vec<RecordBatch> =
        table.scan().select(columns).build().unwrap().to_arrow().await.unwrap().try_collect().await.unwrap();
    let schema = batches.first().map(|b| b.schema()).expect("rows");
    let all = arrow_select::concat::concat_batches(&schema, &batches).unwrap();
    let offsets = all.column_by_name("offset").unwrap().as_primitive::<Int64Type>();
    let mut order: Vec<u32> = (0..all.num_rows() as u32).collect();
    order.sort_by_key(|&i| offsets.value(i as usize));
    let indices = arrow_array::UInt32Array::from(order);
    let columns = all.columns().iter().map(|c| arrow_select::take::take(c, &indices, None).unwrap()).collect();
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
    let t = cat.typed_topic_table("orders", "id-1", "day(timestamp)", false, schemas()).await.unwrap();
    let limits = TierLimits { arrow_batch_rows: 6, ..TierLimits::default() };
    let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
    assert_eq!(out.committed[&0], (0, 16));
    assert_eq!(out.dead_letters, 4, "{out:?}");

    let typed = scan(&t).await;
    assert_eq!(offsets(&typed), [0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 15, 16]);
    assert!(typed.column_by_name("value").is_none(), "no raw value column without keep-raw");
    let id = typed.column_by_name("id").unwrap().as_primitive::<Int64Type>();
    assert_eq!((id.value(0), id.value(7), id.is_null(5)), (0, 10, true), "the tombstone's columns are null");
    let renamed = typed.column_by_name("value_offset").unwrap().as_string::<i32>();
    assert_eq!(renamed.value(3), "o3");
    let tags = typed.column_by_name("tags").unwrap().as_list::<i32>();
    assert_eq!(tags.value(2).as_string::<i32>().iter().flatten().collect::<Vec<_>>(), ["t0", "t1"]);
    let score = typed.column_by_name("score").unwrap().as_primitive::<Float64Type>();
    assert!(score.is_null(0) && score.is_null(12), "v1 rows have no score");
    assert_eq!(score.value(7), 5.0);

    let dead = scan(t.dead_letter_table().unwrap()).await;
    assert_eq!(offsets(&dead), [6, 7, 8, 14]);
    let errors: Vec<&str> = dead.column_by_name("error").unwrap().as_string::<i32>().iter().flatten().collect();
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
    let prepared = t.prepare(std::slice::from_ref(&log), &TierLimits::default(), &AtomicBool::new(false)).await.unwrap();
    t.commit_dead_letters_only(prepared).await.unwrap();
    assert_eq!(offsets(&scan(t.dead_letter_table().unwrap()).await), [6, 7, 8, 14]);
    assert!(t.committed_next_offsets().await.unwrap().is_empty(), "the typed commit never happened");
    // The next pass converts the same records again: the dead letters are not written twice.
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.committed[&0], out.dead_letters), ((0, 16), 0));
    let typed = offsets(&scan(&t).await);
    let dead = offsets(&scan(t.dead_letter_table().unwrap()).await);
    let mut all: Vec<i64> = typed.iter().chain(&dead).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..17).collect::<Vec<_>>(), "every offset once, in one table or the other");
    let next: BTreeMap<i32, i64> = t.dead_letter_table().unwrap().committed_next_offsets().await.unwrap();
    assert_eq!(next[&0], 17);
    // keep-raw: the typed table has the value bytes too.
    let typed = scan(&t).await;
    assert!(typed.column_by_name("value").unwrap().as_binary::<i64>().value(0).starts_with(&[0, 0, 0, 0, 1]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_widened_field_is_an_iceberg_type_promotion() {
    const NARROW: &str = r#"{"type":"record","name":"M","fields":[{"name":"n","type":"int"},{"name":"x","type":"float"}]}"#;
    const WIDE: &str = r#"{"type":"record","name":"M","fields":[{"name":"n","type":"long"},{"name":"x","type":"double"}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(open_log(&dir.path().join("m-0"), 0, &[]));
    let value = |text: &str, id: i32, fields: Vec<(String, Value)>| {
        framed(id, to_avro_datum(&AvroSchema::parse_str(text).unwrap(), Value::Record(fields)).unwrap())
    };
    let mut recs: Vec<TestRecord> = (0..3)
        .map(|i| value_record(Some(value(NARROW, 10, vec![("n".into(), Value::Int(i)), ("x".into(), Value::Float(0.5))])), i.into()))
        .collect();
    recs.extend((3..6).map(|i| {
        let n = (1i64 << 40) + i;
        value_record(Some(value(WIDE, 11, vec![("n".into(), Value::Long(n)), ("x".into(), Value::Double(1e300))])), i)
    }));
    log.append(&mut encode(&recs[..3], floe_protocol::kafka_protocol::records::Compression::None), 0).unwrap();
    log.roll_now().unwrap();
    let cat = catalog(dir.path()).await;
    let t = cat.typed_topic_table("m", "id-1", "", false, avro_schemas(&[(10, NARROW), (11, WIDE)])).await.unwrap();
    t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    let int_schema = t.load().await.unwrap().metadata().current_schema().clone();
    assert_eq!(*int_schema.field_by_name("n").unwrap().field_type, iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Int));
    log.append(&mut encode(&recs[3..], floe_protocol::kafka_protocol::records::Compression::None), 0).unwrap();
    log.roll_now().unwrap();
    let out = t.tier(std::slice::from_ref(&log), &TierLimits::default()).await.unwrap();
    assert_eq!((out.rows, out.dead_letters), (3, 0));
    let table = t.load().await.unwrap();
    let schema = table.metadata().current_schema();
    let n = schema.field_by_name("n").unwrap();
    assert_eq!(*n.field_type, iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Long));
    assert_eq!(n.id, int_schema.field_by_name("n").unwrap().id, "promoted in place: the same field id");
    assert_eq!(*schema.field_by_name("x").unwrap().field_type, iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Double));
    // Old files read widened.
    let rows = scan(&t).await;
    let n = rows.column_by_name("n").unwrap().as_primitive::<Int64Type>();
    assert_eq!(n.values().to_vec(), [0, 1, 2, (1 << 40) + 3, (1 << 40) + 4, (1 << 40) + 5]);
    let x = rows.column_by_name("x").unwrap().as_primitive::<Float64Type>();
    assert_eq!((x.value(0), x.value(5)), (0.5, 1e300));
    // A later narrow value is written widened, without another promotion.
    log.append(&mut encode(&recs[..1], floe_protocol::kafka_protocol::records::Compression::None), 0).unwrap();
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
    let registered = RegisteredSchema { id: 1, schema_type: SchemaType::Avro, schema: EVENT.into(), references: vec![] };
    let source: Arc<dyn SchemaSource> = Arc::new(Schemas(HashMap::from([(1, Arc::new(TypedDecoder::new(&registered, &[]).unwrap()))])));
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
                let body: String = (0..820).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
                let event = Value::Record(vec![
                    ("id".into(), Value::Long(n)),
                    ("user".into(), Value::String(format!("user-{}", next() % 5000))),
                    ("kind".into(), Value::Enum((n % 3) as u32, ["VIEW", "CLICK", "BUY"][(n % 3) as usize].into())),
                    ("amount".into(), Value::Double((next() % 100_000) as f64 / 100.0)),
                    ("at".into(), Value::TimestampMillis(1_764_000_000_000 + n)),
                    ("tags".into(), Value::Array((0..3).map(|t| Value::String(format!("tag{}", (n + t) % 40))).collect())),
                    ("attributes".into(), Value::Map((0..4).map(|a| (format!("k{a}"), Value::String(format!("v{}", next() % 100)))).collect())),
                    ("note".into(), Value::Union(0, Box::new(Value::Null))),
                    ("body".into(), Value::String(body)),
                ]);
                let value = framed(1, to_avro_datum(&schema, event).unwrap());
                value_bytes += value.len();
                value_record(Some(value), n)
            })
            .collect();
        log.append(&mut encode(&recs, floe_protocol::kafka_protocol::records::Compression::Lz4), 0).unwrap();
    }
    log.roll_now().unwrap();
    let segment_bytes: u64 = log.sealed_segments().iter().map(|s| s.size_bytes).sum();
    let cat = catalog(dir.path()).await;
    let limits = TierLimits { max_bytes_per_partition: u64::MAX, ..TierLimits::default() };
    let mut seconds = Vec::new();
    for typed in [false, true, false, true] {
        let name = format!("events_{}_{}", if typed { "typed" } else { "raw" }, seconds.len());
        let t = if typed {
            cat.typed_topic_table(&name, "id-1", "day(timestamp)", false, source.clone()).await.unwrap()
        } else {
            cat.topic_table(&name, "id-1", "day(timestamp)").await.unwrap()
        };
        let start = std::time::Instant::now();
        let out = t.tier(std::slice::from_ref(&log), &limits).await.unwrap();
        let took = start.elapsed().as_secs_f64();
        assert_eq!((out.rows, out.dead_letters), (records as u64, 0));
        println!("{name}: {took:.3} s, {:.1} MiB/s of segment, {:.1} MiB/s of values, {} Parquet bytes",
            segment_bytes as f64 / took / 1048576.0, value_bytes as f64 / took / 1048576.0, out.bytes);
        seconds.push(took);
    }
    let (raw, typed) = (seconds[0].min(seconds[2]), seconds[1].min(seconds[3]));
    println!("{records} records, {:.0} value bytes each, {segment_bytes} segment bytes: typed takes {:.2}× the time of raw",
        value_bytes as f64 / records as f64, typed / raw);
}
