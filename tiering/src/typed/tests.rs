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

fn schemas() -> Arc<dyn SchemaSource> {
    let mut m = HashMap::new();
    for (id, text) in [(1, V1), (2, V2), (3, BROKEN)] {
        let s = RegisteredSchema { id, schema_type: SchemaType::Avro, schema: text.into(), references: vec![] };
        m.insert(id, Arc::new(TypedDecoder::new(&s, &[]).unwrap()));
    }
    Arc::new(Schemas(m))
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
