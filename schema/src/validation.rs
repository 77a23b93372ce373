//! Broker-side schema validation, by Confluent Server's topic settings: with
//! `confluent.value.schema.validation=true` (or `.key.`) every produced record's
//! value (key) must be in the Confluent wire format (magic byte 0, then a schema
//! id) with an id the registry knows, registered under the subject the topic's
//! subject name strategy names. A batch with one bad record is refused whole
//! with INVALID_RECORD and a message naming the record, as Confluent Server does;
//! null keys and values (tombstones) pass.
//!
//! Only topics with validation on pay for it: their batches are decoded (and
//! decompressed) once more here, before the append.

use floe_protocol::record_batch::ValidatedBatches;
use floe_storage::LogConfig;
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::RecordBatchDecoder;

use crate::registry::Registry;
use crate::store::SchemaStore;

/// Which part of a record is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Key,
    Value,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Key => "key",
            Part::Value => "value",
        }
    }
}

/// One part's check: the subject it must be registered under, if the strategy names one
/// from the topic alone (TopicNameStrategy); otherwise any registered id passes.
#[derive(Debug)]
struct Check {
    part: Part,
    subject: Option<String>,
}

fn checks(config: &LogConfig, topic: &str) -> Vec<Check> {
    [Part::Key, Part::Value]
        .into_iter()
        .filter(|p| {
            config
                .floe
                .get(&format!("confluent.{}.schema.validation", p.name()))
                .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        })
        .map(|part| {
            let strategy =
                config.floe.get(&format!("confluent.{}.subject.name.strategy", part.name()));
            let topic_name =
                strategy.is_none_or(|s| s.rsplit('.').next() == Some("TopicNameStrategy"));
            Check { part, subject: topic_name.then(|| format!("{topic}-{}", part.name())) }
        })
        .collect()
}

/// Whether schema validation is on for the topic (key or value).
pub fn is_on(config: &LogConfig) -> bool {
    ["confluent.key.schema.validation", "confluent.value.schema.validation"]
        .iter()
        .any(|k| config.floe.get(*k).is_some_and(|v| v.eq_ignore_ascii_case("true")))
}

/// Checks every record of `records` (the batches `validated` found in them)
/// against the topic's settings. `store` is `None` when this broker's registry is off.
///
/// # Errors
/// INVALID_RECORD with the first bad record; CORRUPT_MESSAGE if a batch does not decode.
pub fn check(
    store: Option<&SchemaStore>,
    config: &LogConfig,
    topic: &str,
    records: &[u8],
    validated: &ValidatedBatches,
) -> Result<(), (ResponseError, String)> {
    let checks = checks(config, topic);
    if checks.is_empty() {
        return Ok(());
    }
    let Some(store) = store else {
        return Err((
            ResponseError::InvalidRecord,
            format!("{topic} has schema validation on, but this broker's Schema Registry is off (floe.schema.registry.listen)"),
        ));
    };
    let mut decoded = Vec::new();
    for (index, b) in validated.batches().iter().enumerate() {
        // The batches validation found (no header walked again), decoded
        // from the request's own bytes: no copy of the batch.
        let mut bytes = records.get(b.position..b.end()).ok_or_else(|| {
            (ResponseError::CorruptMessage, "records shorter than the validated batches".into())
        })?;
        let set = RecordBatchDecoder::decode(&mut bytes)
            .map_err(|e| (ResponseError::CorruptMessage, e.to_string()))?;
        decoded.push((index, set.records));
    }
    let outcome = store.read(|registry| {
        for (batch, records) in &decoded {
            for (i, r) in records.iter().enumerate() {
                for c in &checks {
                    let bytes = match c.part {
                        Part::Key => r.key.as_ref(),
                        Part::Value => r.value.as_ref(),
                    };
                    if let Some(bytes) = bytes {
                        if let Err(why) = check_one(registry, c, bytes) {
                            return Ok(Err(format!(
                                "record {i} of batch {batch} (offset delta {}): {}: {why}",
                                r.offset,
                                c.part.name()
                            )));
                        }
                    }
                }
            }
        }
        Ok(Ok(()))
    });
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => Err((
            ResponseError::InvalidRecord,
            format!("schema validation of {topic} refused the batch: {why}"),
        )),
        Err(e) => Err((
            ResponseError::UnknownServerError,
            format!("schema validation of {topic}: the registry failed: {e}"),
        )),
    }
}

fn check_one(registry: &Registry, check: &Check, bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 5 || bytes[0] != 0 {
        return Err(
            "not in the Confluent wire format (magic byte 0, then a 4-byte schema id)".into()
        );
    }
    let id = i32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    let under = registry
        .versions_of_id(id, false)
        .map_err(|_| format!("schema id {id} is not registered"))?;
    match &check.subject {
        Some(subject) if !under.iter().any(|(s, _)| s == subject) => {
            Err(format!("schema id {id} is not registered under subject {subject}"))
        }
        _ => Ok(()),
    }
}
