//! The registry's rules, driven through plan → apply with a small test format.
//!
//! The test format's schema is a comma-separated list of field names, `?` marking
//! one optional. A reader reads a writer's data when every required field of the
//! reader is in the writer: enough to model adding, dropping and requiring fields.

use super::*;

#[derive(Debug)]
struct Fields(SchemaType);

fn fields_of(canonical: &str) -> Vec<(String, bool)> {
    canonical
        .split(',')
        .filter(|f| !f.is_empty())
        .map(|f| (f.trim_end_matches('?').to_string(), f.ends_with('?')))
        .collect()
}

impl SchemaFormat for Fields {
    fn schema_type(&self) -> SchemaType {
        self.0
    }

    fn parse(
        &self,
        text: &str,
        _references: &[(SchemaReference, String)],
    ) -> Result<ParsedSchema, String> {
        let mut fields: Vec<&str> = text.split(',').map(str::trim).collect();
        if fields.iter().any(|f| {
            f.is_empty() || !f.trim_end_matches('?').chars().all(|c| c.is_ascii_alphanumeric())
        }) {
            return Err(format!("bad field list {text:?}"));
        }
        fields.sort_unstable();
        Ok(ParsedSchema { canonical: fields.join(","), dependencies: Vec::new() })
    }

    fn incompatibilities(&self, reader: &ParsedSchema, writer: &ParsedSchema) -> Vec<String> {
        let written: Vec<String> =
            fields_of(&writer.canonical).into_iter().map(|(f, _)| f).collect();
        fields_of(&reader.canonical)
            .into_iter()
            .filter(|(f, optional)| !optional && !written.contains(f))
            .map(|(f, _)| format!("reader field {f} has no default and is not written"))
            .collect()
    }
}

fn registry() -> Registry {
    Registry::new(vec![Arc::new(Fields(SchemaType::Avro)), Arc::new(Fields(SchemaType::Json))])
}

/// Applies a plan's records (as the broker does after appending them) and returns its answer.
fn commit<T>(
    r: &mut Registry,
    plan: impl FnOnce(&Registry) -> Result<Planned<T>, RegistryError>,
    log: &mut Vec<Record>,
) -> T {
    let planned = plan(r).expect("planned");
    for record in &planned.records {
        r.apply(&record.key, record.value.as_deref()).expect("applies");
        log.push(record.clone());
    }
    planned.answer
}

fn register(r: &mut Registry, subject: &str, text: &str, log: &mut Vec<Record>) -> i32 {
    commit(r, |r| r.register(subject, SchemaType::Avro, text, &[]), log)
}

#[test]
fn equal_schemas_share_one_id_and_one_version() {
    let (mut r, mut log) = (registry(), Vec::new());
    assert_eq!(register(&mut r, "orders-value", "id,amount", &mut log), 1);
    let again = r.register("orders-value", SchemaType::Avro, "amount, id", &[]).expect("planned");
    assert_eq!(
        (again.answer, again.records.len()),
        (1, 0),
        "the same schema, written differently: its id, nothing written"
    );
    assert_eq!(register(&mut r, "payments-value", "amount,id", &mut log), 1, "ids are global");
    assert_eq!(r.versions("payments-value", false), Ok(vec![1]));
    assert_eq!(r.versions_of_id(1, false).expect("used").len(), 2);
    let found =
        r.lookup("orders-value", SchemaType::Avro, "id , amount", &[], false).expect("found");
    assert_eq!((found.version, found.schema.id, found.schema.schema.as_str()), (1, 1, "id,amount"));
    assert_eq!(
        r.lookup("nobody", SchemaType::Avro, "id", &[], false),
        Err(RegistryError::SubjectNotFound("nobody".into()))
    );
    assert_eq!(
        r.lookup("orders-value", SchemaType::Avro, "other", &[], false),
        Err(RegistryError::SchemaNotFound)
    );
    assert_eq!(
        r.lookup("orders-value", SchemaType::Avro, "bad field!", &[], false)
            .map_err(|e| e.error_code()),
        Err(42201)
    );
}

#[test]
fn backward_checks_the_latest_version_and_transitive_checks_them_all() {
    let (mut r, mut log) = (registry(), Vec::new());
    register(&mut r, "s", "a", &mut log);
    // A new optional field: readable against old data.
    assert_eq!(register(&mut r, "s", "b?", &mut log), 2);
    // A new required field: old data lacks it.
    match r.register("s", SchemaType::Avro, "c", &[]) {
        Err(RegistryError::Incompatible { reasons, .. }) => {
            assert!(reasons[0].contains("reader field c"), "{reasons:?}")
        }
        other => panic!("expected 409, got {other:?}"),
    }
    // "b" reads version 2's data (it has b) but not version 1's.
    let t = commit(
        &mut r,
        |r| Ok(r.set_compatibility(Some("s"), CompatibilityLevel::BackwardTransitive)),
        &mut log,
    );
    assert_eq!(t, CompatibilityLevel::BackwardTransitive);
    assert_eq!(r.register("s", SchemaType::Avro, "b", &[]).map_err(|e| e.error_code()), Err(409));
    commit(&mut r, |r| Ok(r.set_compatibility(Some("s"), CompatibilityLevel::Backward)), &mut log);
    assert_eq!(register(&mut r, "s", "b", &mut log), 3);
    assert_eq!(r.version("s", VersionSpec::Latest, false).expect("latest").version, 3);
}

#[test]
fn forward_and_full_check_the_old_schema_reading_new_data() {
    let (mut r, mut log) = (registry(), Vec::new());
    commit(&mut r, |r| Ok(r.set_compatibility(None, CompatibilityLevel::Forward)), &mut log);
    register(&mut r, "s", "a", &mut log);
    assert_eq!(
        r.register("s", SchemaType::Avro, "b", &[]).map_err(|e| e.error_code()),
        Err(409),
        "version 1 needs a"
    );
    assert_eq!(register(&mut r, "s", "a,c", &mut log), 2);
    commit(&mut r, |r| Ok(r.set_compatibility(None, CompatibilityLevel::Full)), &mut log);
    assert_eq!(
        r.register("s", SchemaType::Avro, "a,c,d", &[]).map_err(|e| e.error_code()),
        Err(409),
        "backward: d is not written"
    );
    assert_eq!(register(&mut r, "s", "a,c,d?", &mut log), 3);
    // NONE checks nothing; a schema of another type never follows in one subject.
    commit(&mut r, |r| Ok(r.set_compatibility(None, CompatibilityLevel::None)), &mut log);
    assert_eq!(register(&mut r, "s", "z", &mut log), 4);
    commit(&mut r, |r| Ok(r.set_compatibility(None, CompatibilityLevel::Backward)), &mut log);
    assert_eq!(r.register("s", SchemaType::Json, "z", &[]).map_err(|e| e.error_code()), Err(409));
    let reasons = r
        .check_compatibility("s", Some(VersionSpec::Number(1)), SchemaType::Avro, "q", &[])
        .expect("checked");
    assert!(!reasons.is_empty(), "q does not read version 1's data");
    assert_eq!(
        r.check_compatibility("s", Some(VersionSpec::Number(9)), SchemaType::Avro, "q", &[]),
        Err(RegistryError::VersionNotFound("s".into(), 9))
    );
}

#[test]
fn deletion_is_soft_then_permanent() {
    let (mut r, mut log) = (registry(), Vec::new());
    register(&mut r, "s", "a", &mut log);
    register(&mut r, "s", "a,b?", &mut log);
    let n = VersionSpec::Number(1);
    assert_eq!(
        r.delete_version("s", n, true).map_err(|e| e.error_code()),
        Err(40407),
        "permanent before soft"
    );
    assert_eq!(commit(&mut r, |r| r.delete_version("s", n, false), &mut log), 1);
    assert_eq!(r.delete_version("s", n, false).map_err(|e| e.error_code()), Err(40406));
    assert_eq!(r.versions("s", false), Ok(vec![2]));
    assert_eq!(r.versions("s", true), Ok(vec![1, 2]));
    assert!(r.version("s", n, true).expect("still readable").deleted);
    assert_eq!(r.version("s", n, false).map_err(|e| e.error_code()), Err(40402));
    assert_eq!(commit(&mut r, |r| r.delete_version("s", n, true), &mut log), 1);
    assert_eq!(r.versions("s", true), Ok(vec![2]));

    // The subject: soft, then permanent; its own settings go with it.
    commit(&mut r, |r| Ok(r.set_compatibility(Some("s"), CompatibilityLevel::Full)), &mut log);
    assert_eq!(r.delete_subject("s", true).map_err(|e| e.error_code()), Err(40405));
    assert_eq!(commit(&mut r, |r| r.delete_subject("s", false), &mut log), vec![2]);
    assert_eq!(r.delete_subject("s", false).map_err(|e| e.error_code()), Err(40404));
    assert_eq!(r.subjects(false), Vec::<String>::new());
    assert_eq!(r.subjects(true), vec!["s".to_string()]);
    assert_eq!(r.versions("s", false).map_err(|e| e.error_code()), Err(40401));
    assert_eq!(commit(&mut r, |r| r.delete_subject("s", true), &mut log), vec![2]);
    assert!(r.subjects(true).is_empty());
    assert_eq!(r.subject_compatibility("s").map_err(|e| e.error_code()), Err(40408));
    assert_eq!(r.schema_by_id(2), Err(RegistryError::SchemaNotFound));
    // Ids are not handed out again.
    assert_eq!(register(&mut r, "s", "x", &mut log), 3);
    assert_eq!(
        r.versions("s", false),
        Ok(vec![1]),
        "a permanently deleted subject starts again at version 1"
    );
}

#[test]
fn references_must_exist_and_hold_what_they_name() {
    let (mut r, mut log) = (registry(), Vec::new());
    register(&mut r, "common", "a", &mut log);
    let missing = SchemaReference { name: "Common".into(), subject: "common".into(), version: 2 };
    assert_eq!(
        r.register("s", SchemaType::Avro, "b", std::slice::from_ref(&missing))
            .map_err(|e| e.error_code()),
        Err(42201)
    );
    let present = SchemaReference { version: 1, ..missing };
    let id = commit(
        &mut r,
        |r| r.register("s", SchemaType::Avro, "b", std::slice::from_ref(&present)),
        &mut log,
    );
    assert_eq!(r.schema_by_id(id).expect("stored").references, vec![present.clone()]);
    // Without the reference it is another schema.
    assert_eq!(
        r.lookup("s", SchemaType::Avro, "b", &[], false),
        Err(RegistryError::SchemaNotFound)
    );
    assert_eq!(
        r.delete_version("common", VersionSpec::Number(1), false).map_err(|e| e.error_code()),
        Err(42206)
    );
    assert_eq!(r.delete_subject("common", false).map_err(|e| e.error_code()), Err(42206));
}

#[test]
fn read_only_modes_refuse_writes() {
    let (mut r, mut log) = (registry(), Vec::new());
    register(&mut r, "s", "a", &mut log);
    commit(&mut r, |r| Ok(r.set_mode(Some("s"), Mode::ReadOnly)), &mut log);
    assert_eq!(
        r.register("s", SchemaType::Avro, "a,b?", &[]).map_err(|e| e.error_code()),
        Err(42205)
    );
    assert_eq!(r.delete_subject("s", false).map_err(|e| e.error_code()), Err(42205));
    assert_eq!(register(&mut r, "t", "a", &mut log), 1, "other subjects are writable");
    assert_eq!(commit(&mut r, |r| r.delete_mode("s"), &mut log), Mode::ReadOnly);
    assert_eq!(r.delete_mode("s").map_err(|e| e.error_code()), Err(40409));
    commit(&mut r, |r| Ok(r.set_mode(None, Mode::ReadOnlyOverride)), &mut log);
    commit(&mut r, |r| Ok(r.set_mode(Some("t"), Mode::ReadWrite)), &mut log);
    assert_eq!(
        r.mode(Some("t")),
        Mode::ReadOnlyOverride,
        "a subject cannot lift READONLY_OVERRIDE"
    );
    assert_eq!(
        r.register("t", SchemaType::Avro, "a,c?", &[]).map_err(|e| e.error_code()),
        Err(42205)
    );
}

#[test]
fn compatibility_settings_fall_back_to_the_registrys() {
    let (mut r, mut log) = (registry(), Vec::new());
    assert_eq!(r.compatibility(Some("s")), CompatibilityLevel::Backward, "the default");
    commit(&mut r, |r| Ok(r.set_compatibility(None, CompatibilityLevel::Full)), &mut log);
    assert_eq!(r.compatibility(Some("s")), CompatibilityLevel::Full);
    commit(&mut r, |r| Ok(r.set_compatibility(Some("s"), CompatibilityLevel::None)), &mut log);
    assert_eq!(
        (r.compatibility(Some("s")), r.subject_compatibility("s")),
        (CompatibilityLevel::None, Ok(CompatibilityLevel::None))
    );
    assert_eq!(
        commit(&mut r, |r| r.delete_compatibility(Some("s")), &mut log),
        CompatibilityLevel::None
    );
    assert_eq!(r.compatibility(Some("s")), CompatibilityLevel::Full);
    assert_eq!(
        commit(&mut r, |r| r.delete_compatibility(None), &mut log),
        CompatibilityLevel::Full
    );
    assert_eq!(r.compatibility(None), CompatibilityLevel::Backward);
}

#[test]
fn a_replay_of_the_records_rebuilds_the_same_registry() {
    let (mut r, mut log) = (registry(), Vec::new());
    register(&mut r, "a", "x", &mut log);
    register(&mut r, "a", "x,y?", &mut log);
    register(&mut r, "b", "x", &mut log);
    commit(&mut r, |r| r.delete_version("a", VersionSpec::Number(1), false), &mut log);
    commit(&mut r, |r| Ok(r.set_compatibility(Some("b"), CompatibilityLevel::Forward)), &mut log);
    commit(&mut r, |r| Ok(r.set_mode(None, Mode::ReadOnly)), &mut log);

    let mut replayed = registry();
    for record in &log {
        replayed.apply(&record.key, record.value.as_deref()).expect("replays");
    }
    for subject in ["a", "b"] {
        assert_eq!(replayed.versions(subject, true), r.versions(subject, true));
        for v in r.versions(subject, true).expect("versions") {
            assert_eq!(
                replayed.version(subject, VersionSpec::Number(v), true),
                r.version(subject, VersionSpec::Number(v), true)
            );
        }
    }
    assert_eq!(replayed.compatibility(Some("b")), CompatibilityLevel::Forward);
    assert_eq!(replayed.mode(None), Mode::ReadOnly);
    // A malformed record is refused and changes nothing.
    assert!(replayed.apply(b"{", None).is_err());
    assert_eq!(replayed.subjects(true), vec!["a".to_string(), "b".to_string()]);
}

#[test]
fn versions_parse_as_the_api_accepts_them() {
    assert_eq!(VersionSpec::parse("latest"), Ok(VersionSpec::Latest));
    assert_eq!(VersionSpec::parse("-1"), Ok(VersionSpec::Latest));
    assert_eq!(VersionSpec::parse("7"), Ok(VersionSpec::Number(7)));
    for bad in ["0", "-2", "x", "", "99999999999"] {
        assert_eq!(VersionSpec::parse(bad).map_err(|e| e.error_code()), Err(42202), "{bad:?}");
    }
}

#[test]
fn an_unsupported_schema_type_is_an_invalid_schema() {
    let r = Registry::new(vec![Arc::new(Fields(SchemaType::Avro))]);
    assert_eq!(
        r.register("s", SchemaType::Protobuf, "a", &[]).map_err(|e| e.error_code()),
        Err(42201)
    );
}

#[test]
fn avro_schemas_evolve_under_backward_compatibility() {
    let (mut r, mut log) = (Registry::new(vec![Arc::new(crate::AvroFormat)]), Vec::new());
    let v1 = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}"#;
    let v2 = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"note","type":["null","string"],"default":null}]}"#;
    let v3 = r#"{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"qty","type":"int"}]}"#;
    assert_eq!(register(&mut r, "orders-value", v1, &mut log), 1);
    assert_eq!(register(&mut r, "orders-value", v2, &mut log), 2);
    match r.register("orders-value", SchemaType::Avro, v3, &[]) {
        Err(e @ RegistryError::Incompatible { .. }) => assert_eq!(e.error_code(), 409, "{e}"),
        other => panic!("expected 409, got {other:?}"),
    }
    // The stored text is what was registered; the id is found from any spelling.
    assert_eq!(r.schema_by_id(1).expect("stored").schema, v1);
    let spaced = v1.replace(',', ", ");
    assert_eq!(
        r.lookup("orders-value", SchemaType::Avro, &spaced, &[], false).expect("found").version,
        1
    );
    assert_eq!(
        r.register("orders-value", SchemaType::Avro, "{not json", &[]).map_err(|e| e.error_code()),
        Err(42201)
    );
}

#[test]
fn json_schemas_evolve_under_backward_compatibility() {
    let (mut r, mut log) = (Registry::new(vec![Arc::new(crate::JsonSchemaFormat)]), Vec::new());
    let mut register_json = |r: &mut Registry, text: &str| {
        commit(r, |r| r.register("orders-value", SchemaType::Json, text, &[]), &mut log)
    };
    let v1 = r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":false}"#;
    // A closed model: the old data never held "note", so an optional one can be added.
    let v2 = r#"{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"required":["id"],"additionalProperties":false}"#;
    let v3 = r#"{"type":"object","properties":{"id":{"type":"string"},"note":{"type":"string"}},"required":["id"],"additionalProperties":false}"#;
    assert_eq!(register_json(&mut r, v1), 1);
    assert_eq!(register_json(&mut r, v2), 2);
    match r.register("orders-value", SchemaType::Json, v3, &[]) {
        Err(RegistryError::Incompatible { reasons, .. }) => {
            assert!(
                reasons
                    .iter()
                    .any(|p| p.starts_with("#/properties/id: type changed from integer to string")),
                "{reasons:?}"
            )
        }
        other => panic!("expected 409, got {other:?}"),
    }
    let reordered = r#"{ "additionalProperties": false, "required": ["id"], "properties": { "id": { "type": "integer" } }, "type": "object" }"#;
    assert_eq!(
        r.lookup("orders-value", SchemaType::Json, reordered, &[], false).expect("found").version,
        1
    );
}

#[test]
fn json_schema_references_are_resolved_by_name_for_stored_versions_too() {
    let (mut r, mut log) = (Registry::new(vec![Arc::new(crate::JsonSchemaFormat)]), Vec::new());
    let address = r#"{"type":"object","properties":{"street":{"type":"string"}}}"#;
    commit(&mut r, |r| r.register("address", SchemaType::Json, address, &[]), &mut log);
    let reference =
        SchemaReference { name: "address.json".into(), subject: "address".into(), version: 1 };
    let order = r#"{"type":"object","properties":{"ship_to":{"$ref":"address.json"}}}"#;
    let refs = std::slice::from_ref(&reference);
    assert_eq!(
        commit(&mut r, |r| r.register("orders-value", SchemaType::Json, order, refs), &mut log),
        2
    );
    // The stored version's $ref is followed (by the reference's name) when a new one is checked against it.
    let street_number = r#"{"type":"object","properties":{"ship_to":{"type":"object","properties":{"street":{"type":"integer"}}}}}"#;
    match r.register("orders-value", SchemaType::Json, street_number, &[]) {
        Err(RegistryError::Incompatible { reasons, .. }) => {
            assert!(
                reasons.iter().any(|p| p.starts_with(
                    "#/properties/ship_to/properties/street: type changed from string to integer"
                )),
                "{reasons:?}"
            )
        }
        other => panic!("expected 409, got {other:?}"),
    }
}

#[test]
fn protobuf_schemas_evolve_under_backward_compatibility() {
    let (mut r, mut log) = (Registry::new(vec![Arc::new(crate::ProtobufFormat)]), Vec::new());
    let v1 = "syntax = \"proto3\";\npackage shop;\nmessage Order {\n  int64 id = 1;\n}\n";
    let v2 = "syntax = \"proto3\";\npackage shop;\nmessage Order {\n  int64 id = 1;\n  string note = 2;\n}\n";
    let v3 = "syntax = \"proto3\";\npackage shop;\nmessage Order {\n  string id = 1;\n  string note = 2;\n}\n";
    assert_eq!(
        commit(&mut r, |r| r.register("orders-value", SchemaType::Protobuf, v1, &[]), &mut log),
        1
    );
    assert_eq!(
        commit(&mut r, |r| r.register("orders-value", SchemaType::Protobuf, v2, &[]), &mut log),
        2
    );
    match r.register("orders-value", SchemaType::Protobuf, v3, &[]) {
        Err(RegistryError::Incompatible { reasons, .. }) => {
            assert!(
                reasons.iter().any(|p| p.starts_with(
                    "message shop.Order: field 1 (id) type changed from int64 to string"
                )),
                "{reasons:?}"
            )
        }
        other => panic!("expected 409, got {other:?}"),
    }
    // Comments and layout do not make another schema.
    let commented =
        "// orders\nsyntax=\"proto3\"; package shop; message Order { int64 id = 1; /* the key */ }";
    assert_eq!(
        r.lookup("orders-value", SchemaType::Protobuf, commented, &[], false)
            .expect("found")
            .version,
        1
    );
    assert_eq!(
        r.register("orders-value", SchemaType::Protobuf, "message {", &[])
            .map_err(|e| e.error_code()),
        Err(42201)
    );
}
