//! The `_schemas` records: Confluent Schema Registry's key and value layouts,
//! JSON in both, so the topic reads the same to Floe and to Confluent's tools.
//!
//! ```text
//! key                                                           value
//! {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}        {"subject":S,"version":V,"id":I,
//!                                                                "schemaType":T,   (absent for AVRO)
//!                                                                "references":[…], (absent if none)
//!                                                                "schema":TEXT,"deleted":B}
//!                                                               null: version V permanently deleted
//! {"keytype":"CONFIG","subject":S|null,"magic":0}               {"compatibilityLevel":L}, null: unset
//! {"keytype":"MODE","subject":S|null,"magic":0}                 {"mode":M}, null: unset
//! {"keytype":"DELETE_SUBJECT","subject":S,"magic":0}            {"subject":S,"version":V} (read only)
//! {"keytype":"NOOP","magic":0} / CLEAR_SUBJECT / others         skipped
//! ```
//! The topic is compacted by key, so a key's bytes must be the same every time
//! it is written: keys are encoded from structs whose field order is fixed.

use serde::{Deserialize, Serialize};

/// One record of `_schemas`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The key's JSON bytes.
    pub key: Vec<u8>,
    /// The value's JSON bytes; `None` is a tombstone.
    pub value: Option<Vec<u8>>,
}

/// A schema's reference to another registered schema (Protobuf imports, JSON
/// Schema `$ref`s, Avro named types): a name the schema uses, and the subject
/// version that defines it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SchemaReference {
    /// The name the referring schema uses (an import path, a `$ref`, a type name).
    pub name: String,
    /// The subject of the referenced schema.
    pub subject: String,
    /// Its version.
    pub version: i32,
}

#[derive(Serialize)]
struct SchemaKeyOut<'a> {
    keytype: &'static str,
    subject: &'a str,
    version: i32,
    magic: i32,
}

#[derive(Serialize)]
struct SubjectKeyOut<'a> {
    keytype: &'static str,
    subject: Option<&'a str>,
    magic: i32,
}

/// The value of a SCHEMA record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaValue {
    /// The subject.
    pub subject: String,
    /// The version under the subject.
    pub version: i32,
    /// The schema's global id.
    pub id: i32,
    /// `AVRO` when absent.
    #[serde(rename = "schemaType", default, skip_serializing_if = "Option::is_none")]
    pub schema_type: Option<String>,
    /// References, absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<SchemaReference>,
    /// The schema text as registered.
    pub schema: String,
    /// Soft-deleted.
    #[serde(default)]
    pub deleted: bool,
}

#[derive(Debug, Serialize, Deserialize)]
struct ConfigValue {
    #[serde(rename = "compatibilityLevel")]
    compatibility_level: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct ModeValue {
    mode: String,
}

#[derive(Debug, Deserialize)]
struct DeleteSubjectValue {
    version: i32,
}

#[derive(Debug, Deserialize)]
struct AnyKey {
    keytype: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    version: Option<i32>,
}

/// A record of `_schemas`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A version of a subject: registered or soft-deleted (`Some`), permanently deleted (`None`).
    Schema {
        /// The subject.
        subject: String,
        /// The version.
        version: i32,
        /// The value, or `None` for a tombstone.
        value: Option<SchemaValue>,
    },
    /// A compatibility level of a subject (`Some`) or of the registry (`None`); `None` level: unset.
    Config {
        /// The subject, or the registry.
        subject: Option<String>,
        /// The level's name, or unset.
        level: Option<String>,
    },
    /// A mode of a subject or of the registry; `None` mode: unset.
    Mode {
        /// The subject, or the registry.
        subject: Option<String>,
        /// The mode's name, or unset.
        mode: Option<String>,
    },
    /// Confluent's marker that a subject's versions up to `version` were soft-deleted.
    DeleteSubject {
        /// The subject.
        subject: String,
        /// The highest version deleted.
        version: i32,
    },
    /// A record this registry has no use for (NOOP, CLEAR_SUBJECT, newer kinds).
    Other(String),
}

/// Why a record of `_schemas` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("_schemas record: {0}")]
pub struct RecordError(pub String);

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    // Plain structs of strings and integers: serialization cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

/// The record of a version of a subject (`None`: its tombstone).
pub fn schema_record(subject: &str, version: i32, value: Option<&SchemaValue>) -> Record {
    let key = SchemaKeyOut { keytype: "SCHEMA", subject, version, magic: 1 };
    Record { key: json(&key), value: value.map(json) }
}

/// The record setting (or, with `None`, unsetting) a compatibility level.
pub fn config_record(subject: Option<&str>, level: Option<&str>) -> Record {
    let key = SubjectKeyOut { keytype: "CONFIG", subject, magic: 0 };
    Record {
        key: json(&key),
        value: level.map(|l| json(&ConfigValue { compatibility_level: l.to_string() })),
    }
}

/// The record setting (or, with `None`, unsetting) a mode.
pub fn mode_record(subject: Option<&str>, mode: Option<&str>) -> Record {
    let key = SubjectKeyOut { keytype: "MODE", subject, magic: 0 };
    Record { key: json(&key), value: mode.map(|m| json(&ModeValue { mode: m.to_string() })) }
}

fn parse<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, RecordError> {
    serde_json::from_slice(bytes).map_err(|e| RecordError(format!("{what}: {e}")))
}

/// Decodes a record.
///
/// # Errors
/// A key or value that is not the JSON its key type calls for.
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Entry, RecordError> {
    let k: AnyKey = parse("key", key)?;
    let subject_of = |k: &AnyKey| {
        k.subject.clone().ok_or_else(|| RecordError(format!("{} key without a subject", k.keytype)))
    };
    Ok(match k.keytype.as_str() {
        "SCHEMA" => {
            let subject = subject_of(&k)?;
            let version =
                k.version.ok_or_else(|| RecordError("SCHEMA key without a version".into()))?;
            let value: Option<SchemaValue> = value.map(|v| parse("SCHEMA value", v)).transpose()?;
            if let Some(v) = &value {
                if v.subject != subject || v.version != version {
                    return Err(RecordError(format!(
                        "SCHEMA value of {}/{} under the key of {subject}/{version}",
                        v.subject, v.version
                    )));
                }
            }
            Entry::Schema { subject, version, value }
        }
        "CONFIG" => {
            let level = value
                .map(|v| parse::<ConfigValue>("CONFIG value", v))
                .transpose()?
                .map(|c| c.compatibility_level);
            Entry::Config { subject: k.subject, level }
        }
        "MODE" => {
            let mode =
                value.map(|v| parse::<ModeValue>("MODE value", v)).transpose()?.map(|m| m.mode);
            Entry::Mode { subject: k.subject, mode }
        }
        "DELETE_SUBJECT" => match value {
            Some(v) => Entry::DeleteSubject {
                subject: subject_of(&k)?,
                version: parse::<DeleteSubjectValue>("DELETE_SUBJECT value", v)?.version,
            },
            None => Entry::Other(k.keytype),
        },
        _ => Entry::Other(k.keytype),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_confluents_bytes_every_time() {
        let r = schema_record("orders-value", 3, None);
        assert_eq!(
            r.key,
            br#"{"keytype":"SCHEMA","subject":"orders-value","version":3,"magic":1}"#
        );
        assert_eq!(
            config_record(None, None).key,
            br#"{"keytype":"CONFIG","subject":null,"magic":0}"#
        );
        assert_eq!(
            mode_record(Some("s"), Some("READONLY")).value.as_deref(),
            Some(&br#"{"mode":"READONLY"}"#[..])
        );
    }

    #[test]
    fn records_decode_to_what_was_encoded() {
        let value = SchemaValue {
            subject: "s".into(),
            version: 2,
            id: 7,
            schema_type: Some("PROTOBUF".into()),
            references: vec![SchemaReference {
                name: "a.proto".into(),
                subject: "a".into(),
                version: 1,
            }],
            schema: "syntax = \"proto3\";".into(),
            deleted: true,
        };
        let r = schema_record("s", 2, Some(&value));
        assert_eq!(
            decode(&r.key, r.value.as_deref()),
            Ok(Entry::Schema { subject: "s".into(), version: 2, value: Some(value) })
        );
        let r = config_record(Some("s"), Some("FULL"));
        assert_eq!(
            decode(&r.key, r.value.as_deref()),
            Ok(Entry::Config { subject: Some("s".into()), level: Some("FULL".into()) })
        );
        assert_eq!(
            decode(br#"{"keytype":"NOOP","magic":0}"#, None),
            Ok(Entry::Other("NOOP".into()))
        );
        // Confluent's Avro values carry no schemaType and may carry no references.
        let confluent =
            br#"{"subject":"s","version":1,"id":1,"schema":"\"string\"","deleted":false}"#;
        let e =
            decode(br#"{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}"#, Some(confluent))
                .expect("decodes");
        assert!(matches!(
            e,
            Entry::Schema { value: Some(SchemaValue { schema_type: None, .. }), .. }
        ));
    }

    #[test]
    fn malformed_records_are_errors() {
        assert!(decode(b"not json", None).is_err());
        assert!(decode(br#"{"keytype":"SCHEMA","subject":"s","magic":1}"#, None).is_err());
        let other = br#"{"subject":"t","version":1,"id":1,"schema":"x"}"#;
        assert!(decode(
            br#"{"keytype":"SCHEMA","subject":"s","version":1,"magic":1}"#,
            Some(other)
        )
        .is_err());
    }
}
