//! `ProtobufFormat`: Protocol Buffers schemas (.proto text) for the registry, compiled
//! in memory by `protox`.
//!
//! - Parsing: the text is compiled as the file `schema.proto`. Its imports are the
//!   references, each named by its import path (`"name": "other.proto"`, the text
//!   that file's content), and the `google/protobuf/*.proto` well-known files, which
//!   need no reference. Syntax errors, unknown types and missing imports are refused
//!   with the compiler's message. Message nesting is bounded by the parser (as
//!   protoc's, 32 levels).
//! - Canonical form: the compiled `FileDescriptorSet` of `schema.proto` alone
//!   (without source info, so without comments and positions), encoded as protobuf
//!   and written in lowercase hex. Whitespace, comments and the spelling of type
//!   names (`Foo` or `.pkg.Foo`) do not change it; any name, number, type, label or
//!   option does (custom options included: protox keeps extension options in the
//!   encoding). It is not .proto text: [`ProtobufFormat::incompatibilities`] decodes
//!   it, and `xxd -r -p | protoc --decode=google.protobuf.FileDescriptorSet
//!   google/protobuf/descriptor.proto` shows it. Field types in it are fully
//!   qualified, so the comparison needs no referenced file; `dependencies` keep the
//!   referenced texts, as Avro's. One known hole: a custom option whose value is a
//!   message with a map field of several entries is encoded by prost-reflect in
//!   `HashMap` order, so such a schema may get another canonical form (and id) when
//!   registered again after a restart.
//! - Compatibility: Confluent's Protobuf rules, see [`ProtobufFormat::incompatibilities`].
//!   Messages are compared by full name, field types by name, never by following a
//!   type, so recursive messages need no special care.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

use crate::compatibility::{ParsedSchema, SchemaFormat, SchemaType};
use crate::records::SchemaReference;

/// The file name the schema is compiled as (subject-independent, as Confluent's
/// serializers do not depend on it).
pub const SCHEMA_FILE: &str = "schema.proto";

/// Protobuf's rules (see the module doc).
#[derive(Debug, Default, Clone, Copy)]
pub struct ProtobufFormat;

/// The schema and its references as files, by import path.
#[derive(Debug)]
struct InMemoryFiles(HashMap<String, String>);

impl FileResolver for InMemoryFiles {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.0.get(name) {
            Some(source) => File::from_source(name, source),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// Brackets (`{`, `[`, `<`) open at once that a file may have. protox bounds message
/// nesting but not option values (`option (o) = {a: {a: ...}}`), whose depth would
/// otherwise overflow the stack; protoc stops text-format values at 100 too.
pub const MAX_BRACKET_DEPTH: usize = 100;

/// Refuses a file nested deeper than [`MAX_BRACKET_DEPTH`], counting brackets outside
/// strings and comments.
fn check_nesting(name: &str, text: &str) -> Result<(), String> {
    let (mut depth, mut quote, mut chars) = (0usize, None, text.chars().peekable());
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(_), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '/') if chars.peek() == Some(&'/') => {
                chars.by_ref().find(|&c| c == '\n');
            }
            (None, '/') if chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = ' ';
                chars.by_ref().find(|&c| std::mem::replace(&mut previous, c) == '*' && c == '/');
            }
            (None, '{' | '[' | '<') => {
                depth += 1;
                if depth > MAX_BRACKET_DEPTH {
                    return Err(format!("{name}: nested deeper than {MAX_BRACKET_DEPTH} levels"));
                }
            }
            (None, '}' | ']' | '>') => depth = depth.saturating_sub(1),
            (None, _) => {}
        }
    }
    Ok(())
}

/// Compiler messages can quote a whole input: they are cut to this many characters.
const MAX_MESSAGE_CHARS: usize = 1000;

fn shortened(mut message: String) -> String {
    if let Some((cut, _)) = message.char_indices().nth(MAX_MESSAGE_CHARS) {
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// Compiles `text` as [`SCHEMA_FILE`] with its references; the encoded descriptor set of that file alone.
fn compile(text: &str, references: &[(SchemaReference, String)]) -> Result<Vec<u8>, protox::Error> {
    let mut files: HashMap<String, String> =
        references.iter().map(|(r, text)| (r.name.clone(), text.clone())).collect();
    files.insert(SCHEMA_FILE.to_string(), text.to_string());
    let mut resolver = ChainFileResolver::new();
    resolver.add(InMemoryFiles(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(false).include_source_info(false).open_file(SCHEMA_FILE)?;
    // With extension (custom) options kept, unlike `file_descriptor_set()`.
    Ok(compiler.encode_file_descriptor_set())
}

/// Every message type of `text` (.proto text or a base64 `FileDescriptorProto`, as
/// [`ProtobufFormat::parse`] takes them) and of its imports, for reading values
/// ([`crate::typed`]). The schema's own file is named [`SCHEMA_FILE`] in it.
///
/// # Errors
/// The compiler's or the pool's message.
pub(crate) fn descriptor_pool(
    text: &str,
    references: &[(SchemaReference, String)],
) -> Result<prost_reflect::DescriptorPool, String> {
    let mut files: HashMap<String, String> =
        references.iter().map(|(r, text)| (r.name.clone(), text.clone())).collect();
    let serialized = serialized_descriptor(text);
    if serialized.is_none() {
        check_nesting(SCHEMA_FILE, text)?;
        files.insert(SCHEMA_FILE.to_string(), text.to_string());
    }
    let mut resolver = ChainFileResolver::new();
    resolver.add(InMemoryFiles(files));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true).include_source_info(false);
    let Some(descriptor_set) = serialized else {
        compiler.open_file(SCHEMA_FILE).map_err(|e| shortened(e.to_string()))?;
        return Ok(compiler.descriptor_pool());
    };
    // A compiled descriptor: compile what it imports, then add it.
    let set = FileDescriptorSet::decode(descriptor_set.as_slice()).map_err(|e| e.to_string())?;
    for file in &set.file {
        for dependency in &file.dependency {
            compiler.open_file(dependency).map_err(|e| shortened(e.to_string()))?;
        }
    }
    let mut pool = compiler.descriptor_pool();
    pool.add_file_descriptor_set(set).map_err(|e| shortened(e.to_string()))?;
    Ok(pool)
}

fn to_hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    let pair = |(i, pair): (usize, &[u8])| -> Result<u8, String> {
        let digits = std::str::from_utf8(pair).ok().filter(|d| d.len() == 2);
        digits
            .and_then(|d| u8::from_str_radix(d, 16).ok())
            .ok_or_else(|| format!("not hex at {}", i * 2))
    };
    hex.as_bytes().chunks(2).enumerate().map(pair).collect()
}

/// The schema file's descriptor from a canonical form.
fn descriptor_of(parsed: &ParsedSchema) -> Result<FileDescriptorProto, String> {
    let bytes = from_hex(&parsed.canonical)?;
    let set = FileDescriptorSet::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    set.file
        .into_iter()
        .find(|f| f.name() == SCHEMA_FILE)
        .ok_or_else(|| format!("no {SCHEMA_FILE} in the descriptor set"))
}

/// A schema sent as Confluent's serializers send it: a base64 `FileDescriptorProto`
/// (what `protoc` compiled), rather than .proto text. Its canonical form is that
/// descriptor named [`SCHEMA_FILE`], without source info, in a descriptor set: the
/// shape [`descriptor_of`] reads. `None` if the text is not one.
fn serialized_descriptor(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let trimmed = text.trim();
    // .proto text always has a space or a `;`; base64 never does.
    if trimmed.is_empty() || trimmed.contains([' ', ';', '\n']) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(trimmed).ok()?;
    let mut file = FileDescriptorProto::decode(bytes.as_slice()).ok()?;
    if file.message_type.is_empty() && file.enum_type.is_empty() {
        return None;
    }
    file.name = Some(SCHEMA_FILE.to_string());
    file.source_code_info = None;
    Some(FileDescriptorSet { file: vec![file] }.encode_to_vec())
}

impl SchemaFormat for ProtobufFormat {
    fn schema_type(&self) -> SchemaType {
        SchemaType::Protobuf
    }

    fn parse(
        &self,
        text: &str,
        references: &[(SchemaReference, String)],
    ) -> Result<ParsedSchema, String> {
        if let Some(descriptor) = serialized_descriptor(text) {
            return Ok(ParsedSchema {
                canonical: to_hex(&descriptor),
                dependencies: references.iter().map(|(_, t)| t.clone()).collect(),
            });
        }
        check_nesting(SCHEMA_FILE, text)?;
        for (reference, text) in references {
            check_nesting(&reference.name, text)?;
        }
        let encoded = compile(text, references).map_err(|e| shortened(e.to_string()))?;
        Ok(ParsedSchema {
            canonical: to_hex(&encoded),
            dependencies: references.iter().map(|(_, t)| t.clone()).collect(),
        })
    }

    /// Confluent's Protobuf rules (data written with `writer`, read with `reader`):
    /// - the package must not change;
    /// - every message of the writer (nested ones included, by full name) must still
    ///   be in the reader; messages may be added;
    /// - fields are matched by number; adding or removing one is fine (proto3), but
    ///   not a proto2 `required` one, nor removing a field from a `oneof`;
    /// - a field's type may change only within a wire-compatible group: int32,
    ///   uint32, int64, uint64 and bool; sint32 and sint64; fixed32 and sfixed32;
    ///   fixed64 and sfixed64; string and bytes. A message or enum field must keep
    ///   its type's full name; scalar, enum and message never turn into one another;
    /// - `repeated` may be added or dropped only on string, bytes and message
    ///   fields (numbers may be packed); a field may not become `required`;
    /// - a field may not move into a `oneof` the writer already had, nor several
    ///   fields into a new one.
    ///
    /// Field names are not compared (the wire has numbers; a renamed message is a
    /// removed one, as for Confluent); enum values are not compared (Confluent does
    /// not refuse their changes either).
    fn incompatibilities(&self, reader: &ParsedSchema, writer: &ParsedSchema) -> Vec<String> {
        let (reader, writer) = match (descriptor_of(reader), descriptor_of(writer)) {
            (Ok(r), Ok(w)) => (r, w),
            (Err(e), _) | (_, Err(e)) => {
                return vec![format!("a stored schema no longer decodes: {e}")]
            }
        };
        let mut problems = Vec::new();
        if reader.package() != writer.package() {
            problems.push(format!(
                "package changed from {:?} to {:?}",
                writer.package(),
                reader.package()
            ));
        }
        let (reader_messages, writer_messages) = (messages(&reader), messages(&writer));
        for (name, w) in &writer_messages {
            match reader_messages.get(name) {
                Some(r) => compare_message(name, r, w, &mut problems),
                None => problems.push(format!("message {name} removed")),
            }
        }
        problems
    }
}

// ---- compatibility -------------------------------------------------------------

/// Every message of a file, nested ones included, by full name (without the leading dot).
fn messages(file: &FileDescriptorProto) -> BTreeMap<String, &DescriptorProto> {
    let mut out = BTreeMap::new();
    let mut pending: Vec<(String, &DescriptorProto)> =
        file.message_type.iter().map(|m| (qualify(file.package(), m.name()), m)).collect();
    // A worklist rather than recursion: nesting depth never reaches the stack.
    while let Some((name, message)) = pending.pop() {
        pending.extend(message.nested_type.iter().map(|n| (qualify(&name, n.name()), n)));
        out.insert(name, message);
    }
    out
}

fn qualify(scope: &str, name: &str) -> String {
    if scope.is_empty() {
        name.to_string()
    } else {
        format!("{scope}.{name}")
    }
}

/// The oneof a field is in, unless it is proto3's synthetic one for `optional`.
fn real_oneof<'a>(message: &'a DescriptorProto, field: &FieldDescriptorProto) -> Option<&'a str> {
    if field.proto3_optional() {
        return None;
    }
    let index = usize::try_from(field.oneof_index?).ok()?;
    message.oneof_decl.get(index).map(|o| o.name())
}

fn describe(field: &FieldDescriptorProto) -> String {
    format!("field {} ({})", field.number(), field.name())
}

fn compare_message(
    name: &str,
    r: &DescriptorProto,
    w: &DescriptorProto,
    problems: &mut Vec<String>,
) {
    let reader_fields: BTreeMap<i32, &FieldDescriptorProto> =
        r.field.iter().map(|f| (f.number(), f)).collect();
    let writer_fields: BTreeMap<i32, &FieldDescriptorProto> =
        w.field.iter().map(|f| (f.number(), f)).collect();
    let mut moved_into_new_oneofs: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (number, wf) in &writer_fields {
        let Some(rf) = reader_fields.get(number) else {
            if wf.label() == Label::Required {
                problems.push(format!("message {name}: required {} removed", describe(wf)));
            }
            if let Some(oneof) = real_oneof(w, wf) {
                problems
                    .push(format!("message {name}: {} removed from oneof {oneof}", describe(wf)));
            }
            continue;
        };
        compare_field(name, rf, wf, problems);
        if let (Some(oneof), None) = (real_oneof(r, rf), real_oneof(w, wf)) {
            if w.oneof_decl.iter().any(|o| o.name() == oneof) {
                problems.push(format!(
                    "message {name}: {} moved into the existing oneof {oneof}",
                    describe(rf)
                ));
            } else {
                moved_into_new_oneofs.entry(oneof).or_default().push(*number);
            }
        }
    }
    for (oneof, numbers) in moved_into_new_oneofs.into_iter().filter(|(_, n)| n.len() > 1) {
        problems.push(format!(
            "message {name}: fields {numbers:?} moved together into the new oneof {oneof}"
        ));
    }
    for rf in reader_fields.iter().filter(|(n, _)| !writer_fields.contains_key(n)).map(|(_, f)| f) {
        if rf.label() == Label::Required {
            problems.push(format!("message {name}: required {} added", describe(rf)));
        }
    }
}

/// What a field's value is on the wire, for type changes.
#[derive(Debug, PartialEq, Eq)]
enum WireKind<'a> {
    /// A scalar, by the group of types that read each other's encoding.
    Scalar(&'static str),
    Enum(&'a str),
    Message(&'a str),
}

fn wire_kind(field: &FieldDescriptorProto) -> WireKind<'_> {
    match field.r#type() {
        Type::Int32 | Type::Uint32 | Type::Int64 | Type::Uint64 | Type::Bool => {
            WireKind::Scalar("varint")
        }
        Type::Sint32 | Type::Sint64 => WireKind::Scalar("zigzag varint"),
        Type::Fixed32 | Type::Sfixed32 => WireKind::Scalar("fixed32"),
        Type::Fixed64 | Type::Sfixed64 => WireKind::Scalar("fixed64"),
        Type::String | Type::Bytes => WireKind::Scalar("length-delimited"),
        Type::Float => WireKind::Scalar("float"),
        Type::Double => WireKind::Scalar("double"),
        Type::Enum => WireKind::Enum(field.type_name()),
        Type::Message | Type::Group => WireKind::Message(field.type_name()),
    }
}

fn type_name(field: &FieldDescriptorProto) -> String {
    match field.r#type() {
        Type::Enum | Type::Message | Type::Group => {
            field.type_name().trim_start_matches('.').to_string()
        }
        other => other.as_str_name().trim_start_matches("TYPE_").to_ascii_lowercase(),
    }
}

fn compare_field(
    message: &str,
    r: &FieldDescriptorProto,
    w: &FieldDescriptorProto,
    problems: &mut Vec<String>,
) {
    let (rk, wk) = (wire_kind(r), wire_kind(w));
    if rk != wk {
        problems.push(format!(
            "message {message}: {} type changed from {} to {}",
            describe(r),
            type_name(w),
            type_name(r)
        ));
    }
    let (r_repeated, w_repeated) = (r.label() == Label::Repeated, w.label() == Label::Repeated);
    let length_delimited =
        |k: &WireKind<'_>| matches!(k, WireKind::Message(_) | WireKind::Scalar("length-delimited"));
    if r_repeated != w_repeated && !(length_delimited(&rk) && length_delimited(&wk)) {
        let label = |repeated: bool| if repeated { "repeated" } else { "singular" };
        problems.push(format!(
            "message {message}: {} changed from {} to {}",
            describe(r),
            label(w_repeated),
            label(r_repeated)
        ));
    }
    if r.label() == Label::Required && w.label() != Label::Required {
        problems.push(format!("message {message}: {} became required", describe(r)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ParsedSchema {
        ProtobufFormat.parse(text, &[]).unwrap_or_else(|e| panic!("{text} compiles: {e}"))
    }

    /// The problems of `reader` reading `writer`'s data.
    fn problems(reader: &str, writer: &str) -> Vec<String> {
        ProtobufFormat.incompatibilities(&parsed(reader), &parsed(writer))
    }

    const ORDER: &str = r#"syntax = "proto3";
package shop;
message Order {
  int64 id = 1;
  string note = 2;
  repeated Line lines = 3;
  message Line { string sku = 1; int32 qty = 2; }
}
"#;

    #[test]
    fn whitespace_and_comments_do_not_change_the_canonical_form_and_semantics_do() {
        let reformatted = "// an order\nsyntax=\"proto3\";package shop;\n/* the order */ message Order{int64 id=1;string note=2;repeated .shop.Order.Line lines=3;message Line{string sku=1;int32 qty=2;}}";
        assert_eq!(parsed(ORDER).canonical, parsed(reformatted).canonical);
        let decoded = descriptor_of(&parsed(ORDER)).expect("decodes");
        assert_eq!(decoded.message_type[0].field[2].type_name(), ".shop.Order.Line");
        for changed in [
            ORDER.replace("id = 1", "id = 4"),
            ORDER.replace("int64 id", "int32 id"),
            ORDER.replace("string note", "string remark"),
            ORDER.replace("string note = 2", "string note = 2 [deprecated = true]"),
            ORDER.replace("package shop;", "package shop; option java_package = \"x\";"),
            ORDER.replace("package shop", "package store"),
        ] {
            assert_ne!(parsed(ORDER).canonical, parsed(&changed).canonical, "{changed}");
        }
        // Custom options are kept (protox encodes extension options).
        let custom = |value: &str| {
            let text = format!("syntax = \"proto3\"; import \"google/protobuf/descriptor.proto\"; extend google.protobuf.FieldOptions {{ string tag = 50000; }} message M {{ int32 a = 1 [(tag) = \"{value}\"]; }}");
            parsed(&text)
        };
        assert_ne!(custom("x").canonical, custom("y").canonical);
        let renamed =
            ORDER.replace("message Line", "message Item").replace("Line lines", "Item lines");
        assert_ne!(parsed(ORDER).canonical, parsed(&renamed).canonical);
    }

    #[test]
    fn compatible_evolutions_have_no_problems() {
        let cases = [
            // A field added, a field removed (proto3), a field renamed.
            ORDER.replace("string note = 2;", "string note = 2; bool gift = 4;"),
            ORDER.replace("string note = 2;", ""),
            ORDER.replace("string note", "string remark"),
            // Wire-compatible type changes.
            ORDER.replace("int64 id", "uint64 id"),
            ORDER.replace("string note", "bytes note"),
            ORDER.replace("int32 qty", "bool qty"),
            // repeated on a length-delimited field; a message added; a field into a new oneof alone.
            ORDER.replace("string note", "repeated string note"),
            ORDER.replace("package shop;", "package shop; message Refund { int64 order = 1; }"),
            ORDER.replace("string note = 2;", "oneof extra { string note = 2; }"),
        ];
        for reader in &cases {
            assert_eq!(problems(reader, ORDER), Vec::<String>::new(), "{reader}");
        }
        assert!(problems(ORDER, ORDER).is_empty());
    }

    #[test]
    fn incompatible_evolutions_are_reported_by_message_and_field() {
        let oneof = ORDER.replace("string note = 2;", "oneof extra { string note = 2; }");
        let cases = [
            (
                ORDER.replace("int64 id", "string id"),
                ORDER.to_string(),
                "message shop.Order: field 1 (id) type changed from int64 to string",
            ),
            (
                ORDER.replace("int64 id", "sint64 id"),
                ORDER.to_string(),
                "field 1 (id) type changed from int64 to sint64",
            ),
            (
                ORDER.replace("int64 id", "double id"),
                ORDER.to_string(),
                "type changed from int64 to double",
            ),
            (
                ORDER.replace("repeated Line lines", "repeated Order lines"),
                ORDER.to_string(),
                "field 3 (lines) type changed from shop.Order.Line to shop.Order",
            ),
            (
                ORDER.replace("int32 qty", "repeated int32 qty"),
                ORDER.to_string(),
                "message shop.Order.Line: field 2 (qty) changed from singular to repeated",
            ),
            (
                ORDER.replace("package shop", "package store"),
                ORDER.to_string(),
                "package changed from \"shop\" to \"store\"",
            ),
            (
                ORDER
                    .replace("message Line { string sku = 1; int32 qty = 2; }", "")
                    .replace("repeated Line lines = 3;", ""),
                ORDER.to_string(),
                "message shop.Order.Line removed",
            ),
            (
                oneof
                    .replace(
                        "oneof extra { string note = 2; }",
                        "oneof extra { string note = 2; int64 id = 1; }",
                    )
                    .replace("int64 id = 1;\n", ""),
                oneof.clone(),
                "field 1 (id) moved into the existing oneof extra",
            ),
            (
                ORDER.replace(
                    "int64 id = 1;\n  string note = 2;",
                    "oneof pick { int64 id = 1; string note = 2; }",
                ),
                ORDER.to_string(),
                "fields [1, 2] moved together into the new oneof pick",
            ),
            (
                ORDER.replace("string note = 2;", ""),
                oneof,
                "message shop.Order: field 2 (note) removed from oneof extra",
            ),
        ];
        for (reader, writer, expected) in &cases {
            let found = problems(reader, writer);
            assert!(
                found.iter().any(|p| p.contains(expected)),
                "{reader} reading {writer}: expected {expected:?}, got {found:?}"
            );
        }
        // proto2 required fields can be neither added nor removed.
        let v1 = "syntax = \"proto2\"; message M { required int32 a = 1; }";
        let v2 = "syntax = \"proto2\"; message M { required int32 a = 1; required int32 b = 2; }";
        assert!(problems(v2, v1).iter().any(|p| p.contains("required field 2 (b) added")));
        assert!(problems(v1, v2).iter().any(|p| p.contains("required field 2 (b) removed")));
    }

    #[test]
    fn bad_schemas_are_refused_with_the_compilers_reason() {
        for (bad, why) in [
            ("syntax = \"proto3\"; message M { int32 a = 1 }", "expected ';'"),
            ("syntax = \"proto3\"; message M { Unknown a = 1; }", "Unknown"),
            (
                "syntax = \"proto3\"; import \"other.proto\"; message M { other.O a = 1; }",
                "other.proto",
            ),
            ("syntax = \"proto3\"; message M { int32 a = 1; int32 b = 1; }", "1"),
            ("not a proto", ""),
        ] {
            match ProtobufFormat.parse(bad, &[]) {
                Err(e) => assert!(e.contains(why), "{bad}: {e:?} should mention {why:?}"),
                Ok(_) => panic!("{bad} accepted"),
            }
        }
        let deep =
            format!("syntax = \"proto3\"; {} {}", "message M {".repeat(100), "}".repeat(100));
        assert!(
            ProtobufFormat.parse(&deep, &[]).is_err(),
            "nesting beyond the parser's bound is refused, not a stack overflow"
        );
        let deep_option = format!(
            "syntax = \"proto3\"; import \"google/protobuf/descriptor.proto\"; message R {{ R a = 1; int32 b = 2; }} extend google.protobuf.MessageOptions {{ R o = 50000; }} message M {{ option (o) = {}b:1{}; }}",
            "{a:".repeat(DEPTH),
            "}".repeat(DEPTH)
        );
        const DEPTH: usize = 20_000;
        let refused = ProtobufFormat.parse(&deep_option, &[]);
        assert!(
            refused.is_err_and(|e| e.contains("nested deeper than 100")),
            "a deeply nested option value is refused, not a stack overflow"
        );
        // Brackets in strings and comments do not count, nor does a value 50 deep.
        let commented = format!("syntax = \"proto3\"; // {}\n/* {} */ message M {{ string s = 1 [json_name = \"{}\"]; }}", "{".repeat(200), "<".repeat(200), "[".repeat(200));
        parsed(&commented);
        let shallow = deep_option
            .replace(&"{a:".repeat(DEPTH), &"{a:".repeat(50))
            .replace(&"}".repeat(DEPTH), &"}".repeat(50));
        assert!(!ProtobufFormat.parse(&shallow, &[]).is_err_and(|e| e.contains("nested deeper")));
        assert!(ProtobufFormat.incompatibilities(
            &ParsedSchema { canonical: "zz".into(), dependencies: vec![] },
            &parsed(ORDER)
        )[0]
        .contains("no longer decodes"));
    }

    #[test]
    fn imports_come_from_references_and_well_known_types_need_none() {
        let timestamped = "syntax = \"proto3\"; import \"google/protobuf/timestamp.proto\"; message E { google.protobuf.Timestamp at = 1; }";
        parsed(timestamped);
        let money = "syntax = \"proto3\"; package common; message Money { int64 cents = 1; }";
        let order = "syntax = \"proto3\"; package shop; import \"common/money.proto\"; message Order { common.Money total = 1; }";
        assert!(ProtobufFormat.parse(order, &[]).is_err_and(|e| e.contains("common/money.proto")));
        let reference = SchemaReference {
            name: "common/money.proto".into(),
            subject: "money".into(),
            version: 1,
        };
        let p = ProtobufFormat
            .parse(order, &[(reference.clone(), money.to_string())])
            .expect("compiles with its reference");
        assert_eq!(p.dependencies, vec![money.to_string()]);
        assert!(ProtobufFormat.incompatibilities(&p, &p).is_empty());
        let renamed = money.replace("message Money", "message Cash");
        let moved = order.replace("common.Money", "common.Cash");
        let q = ProtobufFormat.parse(&moved, &[(reference, renamed)]).expect("compiles");
        assert!(ProtobufFormat
            .incompatibilities(&q, &p)
            .iter()
            .any(|p| p.contains("type changed from common.Money to common.Cash")));
    }

    #[test]
    fn a_base64_file_descriptor_is_a_schema_as_confluents_serializers_send_it() {
        use base64::Engine as _;
        let v1 =
            "syntax = \"proto3\"; package shop; message Order { int64 id = 1; string note = 2; }";
        let v2 = "syntax = \"proto3\"; package shop; message Order { int64 id = 1; string note = 2; int32 qty = 3; }";
        let as_base64 = |text: &str| {
            let set = FileDescriptorSet::decode(
                from_hex(&parsed(text).canonical).expect("hex").as_slice(),
            )
            .expect("set");
            let mut file = set.file[0].clone();
            file.name = Some("orders.proto".into());
            base64::engine::general_purpose::STANDARD.encode(file.encode_to_vec())
        };
        let b1 = ProtobufFormat.parse(&as_base64(v1), &[]).expect("a serialized descriptor parses");
        assert_eq!(
            b1.canonical,
            parsed(v1).canonical,
            "the same schema, whatever the form and file name"
        );
        let b2 = ProtobufFormat.parse(&as_base64(v2), &[]).expect("parses");
        assert!(ProtobufFormat.incompatibilities(&b2, &b1).is_empty());
        assert!(
            ProtobufFormat.parse("bm90IGEgZGVzY3JpcHRvcg==", &[]).is_err(),
            "base64 of something else is not a schema"
        );
    }

    #[test]
    fn recursive_messages_compare() {
        let tree = "syntax = \"proto3\"; message Node { int32 value = 1; repeated Node children = 2; Node parent = 3; }";
        assert!(problems(tree, tree).is_empty());
        let changed = tree.replace("int32 value", "string value");
        assert_eq!(
            problems(&changed, tree),
            vec!["message Node: field 1 (value) type changed from int32 to string".to_string()]
        );
    }

    #[test]
    fn a_one_megabyte_schema_compiles_in_reasonable_time() {
        // Numbers 19000 to 19999 are reserved by protobuf itself.
        let fields: String = (1..=25_000)
            .map(|i| {
                format!(
                    "  string field_with_a_long_name_{i} = {};\n",
                    if i < 19_000 { i } else { i + 1000 }
                )
            })
            .collect();
        let big = format!("syntax = \"proto3\";\nmessage Big {{\n{fields}}}\n");
        assert!(big.len() > 1_000_000, "{}", big.len());
        let start = std::time::Instant::now();
        let p = parsed(&big);
        assert!(ProtobufFormat.incompatibilities(&p, &p).is_empty());
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "{:?}", start.elapsed());
    }
}
