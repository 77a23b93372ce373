//! `AvroFormat`: Avro schemas for the registry, on the `apache-avro` crate.
//!
//! - Canonical form: the schema parsed and written back as JSON. Whitespace and
//!   key order go; defaults, docs and aliases stay, because two schemas that differ
//!   in a default read data differently and must not share an id (Avro's "Parsing
//!   Canonical Form" drops defaults, so it is not used here).
//! - Compatibility: Avro's schema resolution (`SchemaCompatibility::can_read`):
//!   fields matched by name, a reader field missing from the writer needs a
//!   default, numeric promotions, enum symbols, union branches, named types.
//!   Logical types are compared by their underlying types, as Java's Avro (and
//!   so Confluent's registry) resolves them: a `decimal` in bytes reads a
//!   `decimal` in bytes whatever its scale, as it reads the bytes.
//! - References name other subjects' schemas that define named types the schema
//!   uses; they are parsed together with it.

use apache_avro::schema_compatibility::SchemaCompatibility;
use apache_avro::Schema;

use crate::compatibility::{ParsedSchema, SchemaFormat, SchemaType};
use crate::records::SchemaReference;

/// Avro's rules (see the module doc).
#[derive(Debug, Default, Clone, Copy)]
pub struct AvroFormat;

fn parse_with(text: &str, dependencies: &[String]) -> Result<Schema, String> {
    let parsed = if dependencies.is_empty() {
        Schema::parse_str(text)
    } else {
        Schema::parse_str_with_list(text, dependencies).map(|(schema, _)| schema)
    };
    parsed.map_err(|e| e.to_string())
}

impl SchemaFormat for AvroFormat {
    fn schema_type(&self) -> SchemaType {
        SchemaType::Avro
    }

    fn parse(
        &self,
        text: &str,
        references: &[(SchemaReference, String)],
    ) -> Result<ParsedSchema, String> {
        let dependencies: Vec<String> = references.iter().map(|(_, text)| text.clone()).collect();
        let schema = parse_with(text, &dependencies)?;
        let canonical = serde_json::to_string(&schema)
            .map_err(|e| format!("cannot write the schema back as JSON: {e}"))?;
        Ok(ParsedSchema { canonical, dependencies })
    }

    fn incompatibilities(&self, reader: &ParsedSchema, writer: &ParsedSchema) -> Vec<String> {
        let underlying = |p: &ParsedSchema| -> Result<Schema, String> {
            let dependencies: Vec<String> = p
                .dependencies
                .iter()
                .map(|d| without_logical_types(d))
                .collect::<Result<_, _>>()?;
            parse_with(&without_logical_types(&p.canonical)?, &dependencies)
        };
        let (reader, writer) = match (underlying(reader), underlying(writer)) {
            (Ok(r), Ok(w)) => (r, w),
            (Err(e), _) | (_, Err(e)) => {
                return vec![format!("a stored schema no longer parses: {e}")]
            }
        };
        match SchemaCompatibility::can_read(&writer, &reader) {
            Ok(()) => Vec::new(),
            Err(e) => vec![e.to_string()],
        }
    }
}

/// The schema's JSON with every `logicalType` annotation removed: its underlying types.
fn without_logical_types(text: &str) -> Result<String, String> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.remove("logicalType");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("a stored schema is not JSON: {e}"))?;
    strip(&mut value);
    Ok(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ParsedSchema {
        AvroFormat.parse(text, &[]).expect("parses")
    }

    const V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"}]}"#;

    #[test]
    fn equal_schemas_have_one_canonical_form_and_defaults_count() {
        let spaced = r#"{ "namespace": "shop", "name": "Order", "type": "record",
                          "fields": [ { "type": "long", "name": "id" } ] }"#;
        assert_eq!(parsed(V1).canonical, parsed(spaced).canonical);
        let a = r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int","default":1}]}"#;
        let b = r#"{"type":"record","name":"R","fields":[{"name":"n","type":"int","default":2}]}"#;
        assert_ne!(parsed(a).canonical, parsed(b).canonical, "a default changes what is read");
    }

    #[test]
    fn avro_resolution_decides_compatibility() {
        let with_default = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}"#;
        let without_default = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}"#;
        let promoted = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"double"}]}"#;
        assert!(
            AvroFormat.incompatibilities(&parsed(with_default), &parsed(V1)).is_empty(),
            "a new field with a default reads old data"
        );
        assert!(
            !AvroFormat.incompatibilities(&parsed(without_default), &parsed(V1)).is_empty(),
            "qty has no default"
        );
        assert!(
            AvroFormat.incompatibilities(&parsed(promoted), &parsed(V1)).is_empty(),
            "long promotes to double"
        );
        assert!(
            !AvroFormat.incompatibilities(&parsed(V1), &parsed(promoted)).is_empty(),
            "double does not narrow to long"
        );
    }

    #[test]
    fn logical_types_resolve_by_their_underlying_types() {
        let order = |extra: &str| {
            format!(
                r#"{{"type":"record","name":"O","fields":[{{"name":"total","type":{{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}}}},
                {{"name":"at","type":{{"type":"long","logicalType":"timestamp-millis"}}}},{{"name":"u","type":{{"type":"string","logicalType":"uuid"}}}}{extra}]}}"#
            )
        };
        let v1 = parsed(&order(""));
        let v2 = parsed(&order(r#",{"name":"n","type":"int","default":0}"#));
        assert!(
            AvroFormat.incompatibilities(&v2, &v1).is_empty(),
            "{:?}",
            AvroFormat.incompatibilities(&v2, &v1)
        );
        assert!(AvroFormat.incompatibilities(&v1, &v2).is_empty());
        let as_int =
            parsed(r#"{"type":"record","name":"O","fields":[{"name":"at","type":"int"}]}"#);
        let as_ts = parsed(
            r#"{"type":"record","name":"O","fields":[{"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#,
        );
        assert!(AvroFormat.incompatibilities(&as_ts, &as_int).is_empty(), "int promotes to long");
        assert!(
            !AvroFormat.incompatibilities(&as_int, &as_ts).is_empty(),
            "long does not narrow to int"
        );
    }

    #[test]
    fn bad_schemas_are_refused_with_a_reason() {
        for bad in
            ["", "{", r#"{"type":"record","name":"R"}"#, r#"{"type":"nope"}"#, r#""Undefined""#]
        {
            assert!(AvroFormat.parse(bad, &[]).is_err(), "{bad:?}");
        }
        let deep =
            format!("{}\"int\"{}", "{\"type\":\"array\",\"items\":".repeat(200), "}".repeat(200));
        assert!(
            AvroFormat.parse(&deep, &[]).is_err(),
            "nesting beyond serde_json's limit is refused, not a stack overflow"
        );
    }

    #[test]
    fn references_bring_named_types_from_other_subjects() {
        let money = r#"{"type":"record","name":"Money","namespace":"shop","fields":[{"name":"cents","type":"long"}]}"#;
        let order = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"total","type":"shop.Money"}]}"#;
        assert!(AvroFormat.parse(order, &[]).is_err(), "shop.Money is unknown alone");
        let reference =
            SchemaReference { name: "shop.Money".into(), subject: "money".into(), version: 1 };
        let p = AvroFormat
            .parse(order, &[(reference, money.to_string())])
            .expect("parses with its reference");
        assert!(AvroFormat.incompatibilities(&p, &p).is_empty());
    }
}
