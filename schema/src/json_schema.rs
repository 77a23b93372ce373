//! `JsonSchemaFormat`: JSON Schema (draft-07 to 2020-12) for the registry.
//!
//! - Parsing: the text must be a JSON object or boolean whose keywords have the
//!   types the specification gives them (`type` a type name or a list of them,
//!   `properties` an object of schemas, `required` a list of strings, ...).
//!   Unknown keywords are annotations and are kept. Every `$ref` of the schema
//!   must resolve: `#/definitions/X`, `#/$defs/X` (any JSON pointer) and `#anchor`
//!   inside the document, anything else by the name of a reference (Confluent's
//!   references are named by the `$ref` target, e.g. `address.json`), optionally
//!   followed by a fragment (`address.json#/definitions/Street`). Patterns are
//!   not compiled (there is no regex engine in the build).
//! - Canonical form: the JSON written back with object keys sorted (serde_json's
//!   map is a `BTreeMap`: the build does not enable `preserve_order`) and no
//!   whitespace.
//! - Compatibility: the essential subset of Confluent's JSON Schema rules, see
//!   [`JsonSchemaFormat::incompatibilities`]. A `$ref` stands for its target
//!   (draft-07: siblings of `$ref` are not compared).
//!
//! Walks are bounded: serde_json refuses nesting beyond 128 levels, `$ref` chains
//! are followed at most [`MAX_REF_HOPS`] times, and the comparison stops at
//! [`MAX_COMPARE_DEPTH`] and never compares one (reader, writer) pair twice, so
//! recursive schemas (`"items": {"$ref": "#"}`) terminate.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde_json::{Map, Value};

use crate::compatibility::{ParsedSchema, SchemaFormat, SchemaType};
use crate::records::SchemaReference;

/// `$ref`s followed in a row before a chain is taken for a loop.
pub const MAX_REF_HOPS: usize = 32;
/// Nested schemas compared before the comparison gives up on a branch (refs can
/// nest a recursive schema arbitrarily deep).
pub const MAX_COMPARE_DEPTH: usize = 128;
/// Schemas compared in one check (trials of `anyOf` branches included) before it gives up.
pub const MAX_COMPARE_STEPS: usize = 200_000;
/// Nesting walked while validating (serde_json already stops at 128).
const MAX_WALK_DEPTH: usize = 256;

const TYPE_NAMES: [&str; 7] = ["null", "boolean", "object", "array", "number", "string", "integer"];

/// Keywords whose value is one schema.
const SCHEMA_KEYWORDS: [&str; 11] = [
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
];
/// Keywords whose value is an object of schemas.
const SCHEMA_MAP_KEYWORDS: [&str; 5] =
    ["properties", "patternProperties", "definitions", "$defs", "dependentSchemas"];
/// Keywords whose value is a non-empty array of schemas.
const SCHEMA_LIST_KEYWORDS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value is a non-negative integer.
const COUNT_KEYWORDS: [&str; 8] = [
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
    "maxContains",
    "minContains",
];
/// Keywords whose value is a number.
const NUMBER_KEYWORDS: [&str; 3] = ["maximum", "minimum", "multipleOf"];
/// Keywords whose value is a string.
const STRING_KEYWORDS: [&str; 7] =
    ["$ref", "$id", "$schema", "$anchor", "pattern", "format", "$comment"];

/// JSON Schema's rules (see the module doc).
#[derive(Debug, Default, Clone, Copy)]
pub struct JsonSchemaFormat;

/// Why a text is not a schema this format accepts.
#[derive(Debug, thiserror::Error)]
enum InvalidJsonSchema {
    #[error("not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("a JSON Schema is an object or a boolean, not {0}")]
    NotASchema(&'static str),
    #[error("{path}: {keyword} must be {expected}")]
    Keyword { path: String, keyword: String, expected: &'static str },
    #[error("{path}: unknown type {name:?} (expected one of {TYPE_NAMES:?})")]
    UnknownType { path: String, name: String },
    #[error("{path}: nested too deeply")]
    TooDeep { path: String },
    #[error("{path}: $ref {reference:?} {why}")]
    UnresolvedRef { path: String, reference: String, why: String },
    #[error("reference {name:?}: {source}")]
    Reference { name: String, source: Box<InvalidJsonSchema> },
}

/// A schema document and the documents its `$ref`s may name.
#[derive(Debug)]
struct Documents {
    root: Value,
    /// `(reference name, its schema)`, in the order of the references.
    named: Vec<(String, Value)>,
    /// Per document (`None`: the root), the JSON pointer of each anchor.
    anchors: HashMap<Option<usize>, HashMap<String, String>>,
}

/// A schema inside [`Documents`]: which document (`None`: the root) local refs resolve in.
#[derive(Debug, Clone, Copy)]
struct At<'a> {
    doc: Option<usize>,
    schema: &'a Value,
}

impl Documents {
    fn new(root: Value, named: Vec<(String, Value)>) -> Self {
        let mut anchors = HashMap::new();
        for (doc, value) in std::iter::once((None, &root))
            .chain(named.iter().enumerate().map(|(i, (_, v))| (Some(i), v)))
        {
            let mut by_name = HashMap::new();
            index_anchors(value, "", 0, &mut by_name);
            if !by_name.is_empty() {
                anchors.insert(doc, by_name);
            }
        }
        Self { root, named, anchors }
    }

    fn document(&self, doc: Option<usize>) -> &Value {
        doc.and_then(|i| self.named.get(i)).map_or(&self.root, |(_, v)| v)
    }

    /// The schema a `$ref` written in document `from` names.
    fn resolve(&self, from: Option<usize>, reference: &str) -> Result<At<'_>, String> {
        let (base, fragment) = reference.split_once('#').unwrap_or((reference, ""));
        let doc = if base.is_empty() { from } else { Some(self.named_document(base)?) };
        let document = self.document(doc);
        let schema = if fragment.is_empty() {
            Some(document)
        } else if fragment.starts_with('/') {
            document.pointer(&percent_decode(fragment))
        } else {
            self.anchors
                .get(&doc)
                .and_then(|a| a.get(fragment))
                .and_then(|pointer| document.pointer(pointer))
        };
        schema
            .map(|schema| At { doc, schema })
            .ok_or_else(|| format!("points at nothing (no {fragment:?} in {})", base_name(base)))
    }

    fn named_document(&self, base: &str) -> Result<usize, String> {
        let by_name = self.named.iter().position(|(name, _)| name == base);
        let by_id = || {
            self.named.iter().position(|(_, v)| v.get("$id").and_then(Value::as_str) == Some(base))
        };
        by_name.or_else(by_id).ok_or_else(|| format!("names {base:?}, which no reference provides"))
    }

    /// `at` with `$ref`s followed until a schema that is not a reference.
    fn follow<'a>(&'a self, mut at: At<'a>) -> Result<At<'a>, String> {
        for _ in 0..MAX_REF_HOPS {
            match at.schema.get("$ref").and_then(Value::as_str) {
                Some(reference) => at = self.resolve(at.doc, reference)?,
                None => return Ok(at),
            }
        }
        Err(format!("$ref chain longer than {MAX_REF_HOPS} (a loop?)"))
    }
}

fn base_name(base: &str) -> String {
    if base.is_empty() {
        "this schema".to_string()
    } else {
        format!("{base:?}")
    }
}

/// `%25` and friends in a URI fragment (`#/definitions/a%20b`); anything malformed stays as written.
fn percent_decode(fragment: &str) -> String {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| fragment.to_string())
}

/// JSON pointers of the subschemas of `value` with an `$anchor` (or, in draft-07, an
/// `$id` of `#name`), by name, into `out`. Indexed once so that following an
/// anchor `$ref` does not walk the document at every comparison step.
fn index_anchors(value: &Value, pointer: &str, depth: usize, out: &mut HashMap<String, String>) {
    if depth > MAX_WALK_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            let id = map.get("$id").and_then(Value::as_str).and_then(|id| id.strip_prefix('#'));
            for name in map.get("$anchor").and_then(Value::as_str).into_iter().chain(id) {
                out.entry(name.to_string()).or_insert_with(|| pointer.to_string());
            }
            for (k, v) in map
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "enum" | "const" | "default" | "examples"))
            {
                index_anchors(v, &format!("{pointer}/{}", token(k)), depth + 1, out);
            }
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| index_anchors(v, &format!("{pointer}/{i}"), depth + 1, out)),
        _ => {}
    }
}

// ---- parsing -------------------------------------------------------------------

/// How a JSON value is named in error messages ("a string", "an array").
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A schema document, checked, with its `(path, $ref)`s.
fn parse_document(text: &str) -> Result<(Value, Vec<(String, String)>), InvalidJsonSchema> {
    let value: Value = serde_json::from_str(text)?;
    match value {
        Value::Object(_) | Value::Bool(_) => {
            let mut refs = Vec::new();
            validate(&value, "#", 0, &mut refs)?;
            Ok((value, refs))
        }
        other => Err(InvalidJsonSchema::NotASchema(kind_of(&other))),
    }
}

/// A JSON pointer token for `name` (`~` and `/` escaped).
fn token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

fn keyword_error(path: &str, keyword: &str, expected: &'static str) -> InvalidJsonSchema {
    InvalidJsonSchema::Keyword { path: path.to_string(), keyword: keyword.to_string(), expected }
}

/// Checks the keywords of the schema `value` at `path` and of its subschemas,
/// collecting `(path, $ref)` for the caller to resolve.
fn validate(
    value: &Value,
    path: &str,
    depth: usize,
    refs: &mut Vec<(String, String)>,
) -> Result<(), InvalidJsonSchema> {
    if depth > MAX_WALK_DEPTH {
        return Err(InvalidJsonSchema::TooDeep { path: path.to_string() });
    }
    let map = match value {
        Value::Bool(_) => return Ok(()),
        Value::Object(map) => map,
        _ => return Err(keyword_error(path, "a subschema", "an object or a boolean")),
    };
    for (keyword, v) in map {
        validate_keyword(keyword, v, path, depth, refs)?;
    }
    Ok(())
}

fn validate_keyword(
    keyword: &str,
    v: &Value,
    path: &str,
    depth: usize,
    refs: &mut Vec<(String, String)>,
) -> Result<(), InvalidJsonSchema> {
    let sub = |name: &str| format!("{path}/{}", token(name));
    let k = keyword;
    match k {
        "type" => validate_type(v, path)?,
        "required" if !v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) => {
            return Err(keyword_error(path, k, "an array of strings"))
        }
        "enum" if !v.is_array() => return Err(keyword_error(path, k, "an array")),
        "items" => match v {
            Value::Array(items) => validate_list(items, &sub(k), depth, refs)?,
            _ => validate(v, &sub(k), depth + 1, refs)?,
        },
        "dependencies" => {
            let deps = v.as_object().ok_or_else(|| keyword_error(path, k, "an object"))?;
            for (name, d) in deps.iter().filter(|(_, d)| !d.is_array()) {
                validate(d, &format!("{}/{}", sub(k), token(name)), depth + 1, refs)?;
            }
        }
        "exclusiveMaximum" | "exclusiveMinimum" if !(v.is_number() || v.is_boolean()) => {
            return Err(keyword_error(path, k, "a number"))
        }
        "uniqueItems" if !v.is_boolean() => return Err(keyword_error(path, k, "a boolean")),
        _ if SCHEMA_KEYWORDS.contains(&k) => validate(v, &sub(k), depth + 1, refs)?,
        _ if SCHEMA_MAP_KEYWORDS.contains(&k) => {
            let schemas =
                v.as_object().ok_or_else(|| keyword_error(path, k, "an object of schemas"))?;
            for (name, s) in schemas {
                validate(s, &format!("{}/{}", sub(k), token(name)), depth + 1, refs)?;
            }
        }
        _ if SCHEMA_LIST_KEYWORDS.contains(&k) => match v {
            Value::Array(items) if !items.is_empty() => validate_list(items, &sub(k), depth, refs)?,
            _ => return Err(keyword_error(path, k, "a non-empty array of schemas")),
        },
        _ if COUNT_KEYWORDS.contains(&k) && v.as_u64().is_none() => {
            return Err(keyword_error(path, k, "a non-negative integer"))
        }
        "multipleOf" if !v.as_f64().is_some_and(|m| m > 0.0) => {
            return Err(keyword_error(path, k, "a number above 0"))
        }
        _ if NUMBER_KEYWORDS.contains(&k) && !v.is_number() => {
            return Err(keyword_error(path, k, "a number"))
        }
        _ if STRING_KEYWORDS.contains(&k) && !v.is_string() => {
            return Err(keyword_error(path, k, "a string"))
        }
        "$ref" => refs.push((path.to_string(), v.as_str().unwrap_or_default().to_string())),
        _ => {}
    }
    Ok(())
}

fn validate_list(
    items: &[Value],
    path: &str,
    depth: usize,
    refs: &mut Vec<(String, String)>,
) -> Result<(), InvalidJsonSchema> {
    items
        .iter()
        .enumerate()
        .try_for_each(|(i, s)| validate(s, &format!("{path}/{i}"), depth + 1, refs))
}

fn validate_type(v: &Value, path: &str) -> Result<(), InvalidJsonSchema> {
    let names: Vec<&Value> = match v {
        Value::Array(names) if !names.is_empty() => names.iter().collect(),
        Value::String(_) => vec![v],
        _ => return Err(keyword_error(path, "type", "a type name or a non-empty array of them")),
    };
    for name in names {
        let name = name.as_str().ok_or_else(|| {
            keyword_error(path, "type", "a type name or a non-empty array of them")
        })?;
        if !TYPE_NAMES.contains(&name) {
            return Err(InvalidJsonSchema::UnknownType {
                path: path.to_string(),
                name: name.to_string(),
            });
        }
    }
    Ok(())
}

/// Every `$ref` of the root document resolves, and no chain of them loops. (A
/// reference's own `$ref`s may name schemas the registry does not pass along: they
/// are checked when it is registered, and reported if a comparison cannot follow them.)
fn check_refs(documents: &Documents, refs: Vec<(String, String)>) -> Result<(), InvalidJsonSchema> {
    for (path, reference) in refs {
        let unresolved = |why: String| InvalidJsonSchema::UnresolvedRef {
            path: path.clone(),
            reference: reference.clone(),
            why,
        };
        let target = documents.resolve(None, &reference).map_err(unresolved)?;
        documents.follow(target).map_err(unresolved)?;
    }
    Ok(())
}

/// The parsed schema and references; `dependencies` hold each reference as
/// `{"name": …, "schema": …}`, since `$ref`s name them.
fn parse_all(
    text: &str,
    references: &[(SchemaReference, String)],
) -> Result<(Documents, Vec<String>), InvalidJsonSchema> {
    let (root, refs) = parse_document(text)?;
    let mut named = Vec::with_capacity(references.len());
    let mut dependencies = Vec::with_capacity(references.len());
    for (reference, text) in references {
        let (schema, _) = parse_document(text).map_err(|e| InvalidJsonSchema::Reference {
            name: reference.name.clone(),
            source: Box::new(e),
        })?;
        dependencies
            .push(serde_json::json!({ "name": reference.name, "schema": schema }).to_string());
        named.push((reference.name.clone(), schema));
    }
    let documents = Documents::new(root, named);
    check_refs(&documents, refs)?;
    Ok((documents, dependencies))
}

/// The documents of a schema this format parsed (its canonical form and dependencies).
fn documents_of(parsed: &ParsedSchema) -> Result<Documents, String> {
    let root: Value = serde_json::from_str(&parsed.canonical).map_err(|e| e.to_string())?;
    let named = parsed
        .dependencies
        .iter()
        .map(|d| {
            let mut entry: Value = serde_json::from_str(d).map_err(|e| e.to_string())?;
            let name = entry
                .get("name")
                .and_then(Value::as_str)
                .ok_or("a dependency without a name")?
                .to_string();
            Ok((name, entry.get_mut("schema").map(Value::take).unwrap_or(Value::Bool(true))))
        })
        .collect::<Result<_, String>>()?;
    Ok(Documents::new(root, named))
}

impl SchemaFormat for JsonSchemaFormat {
    fn schema_type(&self) -> SchemaType {
        SchemaType::Json
    }

    fn parse(
        &self,
        text: &str,
        references: &[(SchemaReference, String)],
    ) -> Result<ParsedSchema, String> {
        let (documents, dependencies) = parse_all(text, references).map_err(|e| e.to_string())?;
        Ok(ParsedSchema { canonical: documents.root.to_string(), dependencies })
    }

    /// Confluent's rules, as far as they go here (`#/…` paths in the messages):
    /// - `type`: every type the writer allows must be one the reader allows
    ///   (`integer` data is a `number`);
    /// - `enum`/`const`: the reader's values must contain the writer's;
    /// - narrowed constraints: `maxLength`, `maxItems`, `maxProperties`, `maximum`,
    ///   `exclusiveMaximum` added or lowered, their `min` counterparts added or
    ///   raised, `pattern` added or changed, `multipleOf` not dividing the writer's,
    ///   `uniqueItems` added;
    /// - objects: common `properties` compared; a property the writer has and the
    ///   reader lacks is an error if the reader's model is closed
    ///   (`additionalProperties: false`) and compared against it if partially open;
    ///   a property the reader adds is an error if the writer's model is open (its
    ///   data may hold that name with any value) unless the property accepts
    ///   anything, compared against the writer's `additionalProperties` if that is
    ///   a schema, and fine if closed; a property the reader requires and the
    ///   writer did not is an error unless it has a `default`;
    ///   `additionalProperties` closed or narrowed by the reader is an error;
    /// - arrays: `items` (single or tuple, and `prefixItems`) compared;
    /// - `anyOf`/`oneOf`: each writer branch must be read by some reader branch;
    ///   `allOf`: each reader branch must read the writer.
    ///
    /// Not compared: `not`, `if`/`then`/`else`, `dependencies`, `patternProperties`
    /// (a reader with them is taken as partially open), `format`.
    fn incompatibilities(&self, reader: &ParsedSchema, writer: &ParsedSchema) -> Vec<String> {
        let (reader, writer) = match (documents_of(reader), documents_of(writer)) {
            (Ok(r), Ok(w)) => (r, w),
            (Err(e), _) | (_, Err(e)) => {
                return vec![format!("a stored schema no longer parses: {e}")]
            }
        };
        let mut compare = Compare {
            reader: &reader,
            writer: &writer,
            seen: HashSet::new(),
            added: None,
            steps: 0,
            problems: Vec::new(),
        };
        compare.schema(
            "#",
            At { doc: None, schema: &reader.root },
            At { doc: None, schema: &writer.root },
            0,
        );
        if compare.steps > MAX_COMPARE_STEPS {
            compare.problems.push(format!("#: more than {MAX_COMPARE_STEPS} comparisons needed, so not compatible as far as known"));
        }
        compare.problems
    }
}

// ---- compatibility -------------------------------------------------------------

/// One reader/writer comparison: what was compared already, and what is wrong.
struct Compare<'a> {
    reader: &'a Documents,
    writer: &'a Documents,
    /// (reader schema, writer schema) addresses already compared: recursion stops there.
    seen: HashSet<(usize, usize)>,
    /// In a trial ([`Compare::reads`]): the pairs it added to `seen`, taken out
    /// again after it, since a failed trial's assumptions do not hold.
    added: Option<Vec<(usize, usize)>>,
    /// Schemas compared so far, trials included, against [`MAX_COMPARE_STEPS`]
    /// (nested `anyOf`s try every branch, which multiplies).
    steps: usize,
    problems: Vec<String>,
}

fn address(v: &Value) -> usize {
    v as *const Value as usize
}

fn accepts_anything(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(map) => map.keys().all(|k| {
            matches!(
                k.as_str(),
                "description" | "title" | "$comment" | "default" | "examples" | "$id" | "$schema"
            )
        }),
        _ => false,
    }
}

fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The types a schema allows; `None`: any.
fn types(schema: &Value) -> Option<BTreeSet<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(BTreeSet::from([t.as_str()])),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn describe_types(types: &BTreeSet<&str>) -> String {
    match types.iter().collect::<Vec<_>>().as_slice() {
        [one] => one.to_string(),
        many => format!("{many:?}"),
    }
}

impl<'a> Compare<'a> {
    fn problem(&mut self, path: &str, what: String) {
        self.problems.push(format!("{path}: {what}"));
    }

    /// Whether `reader` reads everything `writer` allows, without recording problems.
    fn reads(&mut self, path: &str, reader: At<'a>, writer: At<'a>, depth: usize) -> bool {
        let seen = std::mem::take(&mut self.seen);
        let mut trial = Compare {
            reader: self.reader,
            writer: self.writer,
            seen,
            added: Some(Vec::new()),
            steps: self.steps,
            problems: Vec::new(),
        };
        trial.schema(path, reader, writer, depth);
        for pair in trial.added.iter().flatten() {
            trial.seen.remove(pair);
        }
        (self.seen, self.steps) = (trial.seen, trial.steps);
        trial.problems.is_empty() && self.steps <= MAX_COMPARE_STEPS
    }

    /// Marks a pair compared; false if it was already.
    fn first_visit(&mut self, pair: (usize, usize)) -> bool {
        let new = self.seen.insert(pair);
        if let (true, Some(added)) = (new, self.added.as_mut()) {
            added.push(pair);
        }
        new
    }

    fn schema(&mut self, path: &str, reader: At<'a>, writer: At<'a>, depth: usize) {
        if depth > MAX_COMPARE_DEPTH {
            return self.problem(
                path,
                format!("nested deeper than {MAX_COMPARE_DEPTH} levels, not compared"),
            );
        }
        self.steps += 1;
        if self.steps > MAX_COMPARE_STEPS {
            return; // reported once, by `incompatibilities`
        }
        let (r, w) = match (self.reader.follow(reader), self.writer.follow(writer)) {
            (Ok(r), Ok(w)) => (r, w),
            (Err(e), _) | (_, Err(e)) => {
                return self.problem(path, format!("cannot follow a $ref: {e}"))
            }
        };
        if !self.first_visit((address(r.schema), address(w.schema)))
            || accepts_anything(r.schema)
            || w.schema == &Value::Bool(false)
        {
            return;
        }
        let (Some(rm), Some(wm)) = (r.schema.as_object(), w.schema.as_object()) else {
            // The reader is `false` (reads nothing) or the writer is `true` (writes anything).
            return self
                .problem(path, "the reader accepts less than the writer writes".to_string());
        };
        self.types(path, r.schema, w.schema);
        self.values(path, rm, wm);
        self.bounds(path, rm, wm);
        self.objects(path, r, w, depth);
        self.arrays(path, r, w, depth);
        self.combinators(path, r, w, depth);
    }

    fn types(&mut self, path: &str, r: &Value, w: &Value) {
        let Some(reader) = types(r) else { return };
        let Some(writer) = types(w) else {
            return self
                .problem(path, format!("type narrowed from any to {}", describe_types(&reader)));
        };
        let readable =
            |t: &&str| reader.contains(t) || (*t == "integer" && reader.contains("number"));
        if !writer.iter().all(readable) {
            let verb = if writer.len() == 1 && reader.len() == 1 { "changed" } else { "narrowed" };
            self.problem(
                path,
                format!(
                    "type {verb} from {} to {}",
                    describe_types(&writer),
                    describe_types(&reader)
                ),
            );
        }
    }

    /// `enum` and `const`: the values the writer may write must all be readable.
    fn values(&mut self, path: &str, r: &Map<String, Value>, w: &Map<String, Value>) {
        let allowed = |m: &Map<String, Value>| -> Option<Vec<Value>> {
            m.get("const")
                .map(|c| vec![c.clone()])
                .or_else(|| m.get("enum").and_then(Value::as_array).cloned())
        };
        let Some(reader) = allowed(r) else { return };
        match allowed(w) {
            None => self.problem(path, format!("enum {} added", Value::Array(reader))),
            Some(writer) => {
                let missing: Vec<Value> =
                    writer.into_iter().filter(|v| !reader.contains(v)).collect();
                if !missing.is_empty() {
                    self.problem(
                        path,
                        format!("enum narrowed: {} no longer allowed", Value::Array(missing)),
                    );
                }
            }
        }
    }

    /// Length, count and range constraints, `pattern`, `multipleOf`, `uniqueItems`.
    fn bounds(&mut self, path: &str, r: &Map<String, Value>, w: &Map<String, Value>) {
        for k in ["maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum"] {
            self.bound(path, k, r, w, |reader, writer| reader < writer, "decreased");
        }
        for k in ["minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum"] {
            self.bound(path, k, r, w, |reader, writer| reader > writer, "increased");
        }
        match (r.get("pattern"), w.get("pattern")) {
            (Some(rp), None) => self.problem(path, format!("pattern {rp} added")),
            (Some(rp), Some(wp)) if rp != wp => {
                self.problem(path, format!("pattern changed from {wp} to {rp}"))
            }
            _ => {}
        }
        if let Some(rm) = r.get("multipleOf").and_then(Value::as_f64) {
            let divides = w
                .get("multipleOf")
                .and_then(Value::as_f64)
                .is_some_and(|wm| (wm / rm).fract() == 0.0);
            if !divides {
                self.problem(path, format!("multipleOf {rm} added or changed"));
            }
        }
        if r.get("uniqueItems") == Some(&Value::Bool(true))
            && w.get("uniqueItems") != Some(&Value::Bool(true))
        {
            self.problem(path, "uniqueItems added".to_string());
        }
    }

    /// One numeric constraint: a problem if the reader has it and the writer has
    /// none, or a `narrower` one. (Draft-04 boolean `exclusiveMaximum`s are skipped.)
    fn bound(
        &mut self,
        path: &str,
        keyword: &str,
        r: &Map<String, Value>,
        w: &Map<String, Value>,
        narrower: fn(f64, f64) -> bool,
        changed: &str,
    ) {
        let Some(reader) = r.get(keyword).and_then(Value::as_f64) else { return };
        match w.get(keyword).and_then(Value::as_f64) {
            None => self.problem(path, format!("{keyword} {reader} added")),
            Some(writer) if narrower(reader, writer) => {
                self.problem(path, format!("{keyword} {changed} from {writer} to {reader}"))
            }
            Some(_) => {}
        }
    }

    fn objects(&mut self, path: &str, r: At<'a>, w: At<'a>, depth: usize) {
        let (rp, wp) = (properties(r.schema), properties(w.schema));
        let (ra, wa) = (r.schema.get("additionalProperties"), w.schema.get("additionalProperties"));
        let reader_has_patterns = r.schema.get("patternProperties").is_some();
        for (name, writer_prop) in wp.into_iter().flatten() {
            let at = format!("{path}/properties/{}", token(name));
            let writer_prop = At { doc: w.doc, schema: writer_prop };
            match (rp.and_then(|rp| rp.get(name)), ra) {
                (Some(reader_prop), _) => {
                    self.schema(&at, At { doc: r.doc, schema: reader_prop }, writer_prop, depth + 1)
                }
                (None, _) if reader_has_patterns => {}
                (None, Some(Value::Bool(false))) => self
                    .problem(&at, format!("property {name:?} removed from a closed content model")),
                (None, Some(extra @ Value::Object(_))) => {
                    self.schema(&at, At { doc: r.doc, schema: extra }, writer_prop, depth + 1)
                }
                (None, _) => {}
            }
        }
        for (name, reader_prop) in rp
            .into_iter()
            .flatten()
            .filter(|(name, _)| !wp.is_some_and(|wp| wp.contains_key(*name)))
        {
            let at = format!("{path}/properties/{}", token(name));
            let reader_prop = At { doc: r.doc, schema: reader_prop };
            match wa {
                Some(Value::Bool(false)) => {}
                Some(extra @ Value::Object(_)) => self.schema(&at, reader_prop, At { doc: w.doc, schema: extra }, depth + 1),
                _ if accepts_anything(reader_prop.schema) => {}
                _ => self.problem(&at, format!("property {name:?} added to an open content model (the writer's data may hold it with any value)")),
            }
        }
        self.required(path, r.schema, w.schema, rp);
        self.additional_properties(path, r, w, depth);
    }

    fn required(
        &mut self,
        path: &str,
        r: &Value,
        w: &Value,
        reader_props: Option<&Map<String, Value>>,
    ) {
        let writer_required = required(w);
        for name in required(r).into_iter().filter(|n| !writer_required.contains(n)) {
            let has_default =
                reader_props.and_then(|p| p.get(name)).is_some_and(|p| p.get("default").is_some());
            if !has_default {
                self.problem(
                    path,
                    format!("property {name:?} is required and was not (and has no default)"),
                );
            }
        }
    }

    fn additional_properties(&mut self, path: &str, r: At<'a>, w: At<'a>, depth: usize) {
        let at = format!("{path}/additionalProperties");
        match (r.schema.get("additionalProperties"), w.schema.get("additionalProperties")) {
            (None | Some(Value::Bool(true)), _) | (_, Some(Value::Bool(false))) => {}
            (Some(Value::Bool(false)), _) => self.problem(
                &at,
                "additionalProperties removed (the content model was closed)".to_string(),
            ),
            (Some(reader), Some(writer @ Value::Object(_))) => self.schema(
                &at,
                At { doc: r.doc, schema: reader },
                At { doc: w.doc, schema: writer },
                depth + 1,
            ),
            (Some(_), _) => self.problem(&at, "additionalProperties narrowed".to_string()),
        }
    }

    fn arrays(&mut self, path: &str, r: At<'a>, w: At<'a>, depth: usize) {
        let items = |s: &'a Value| -> Option<Vec<&'a Value>> {
            match s.get("prefixItems").or_else(|| s.get("items"))? {
                Value::Array(tuple) => Some(tuple.iter().collect()),
                single => Some(vec![single]),
            }
        };
        let tuple = |s: &Value| {
            s.get("prefixItems").is_some() || s.get("items").is_some_and(Value::is_array)
        };
        let (Some(ri), Some(wi)) = (items(r.schema), items(w.schema)) else {
            if let (Some(_), None) = (items(r.schema), items(w.schema)) {
                self.problem(path, "items constrained where the writer's were not".to_string());
            }
            return;
        };
        let (rt, wt) = (tuple(r.schema), tuple(w.schema));
        // Pairs: index-wise for two tuples, else every element against the single schema.
        let pairs: Vec<(usize, &Value, &Value)> = match (rt, wt) {
            (true, true) => ri.iter().zip(&wi).enumerate().map(|(i, (a, b))| (i, *a, *b)).collect(),
            _ => ri
                .iter()
                .flat_map(|a| wi.iter().map(move |b| (*a, *b)))
                .enumerate()
                .map(|(i, (a, b))| (i, a, b))
                .collect(),
        };
        let keyword = if r.schema.get("prefixItems").is_some() { "prefixItems" } else { "items" };
        for (i, reader_item, writer_item) in pairs {
            let at = if rt { format!("{path}/{keyword}/{i}") } else { format!("{path}/{keyword}") };
            self.schema(
                &at,
                At { doc: r.doc, schema: reader_item },
                At { doc: w.doc, schema: writer_item },
                depth + 1,
            );
        }
    }

    fn combinators(&mut self, path: &str, r: At<'a>, w: At<'a>, depth: usize) {
        let branches = |s: &'a Value, keys: &[&str]| -> Option<(String, Vec<&'a Value>)> {
            keys.iter().find_map(|k| {
                s.get(*k).and_then(Value::as_array).map(|b| (k.to_string(), b.iter().collect()))
            })
        };
        if let Some((keyword, reader_branches)) = branches(r.schema, &["anyOf", "oneOf"]) {
            let writer_branches =
                branches(w.schema, &["anyOf", "oneOf"]).map_or_else(|| vec![w.schema], |(_, b)| b);
            for (i, writer_branch) in writer_branches.into_iter().enumerate() {
                let writer_branch = At { doc: w.doc, schema: writer_branch };
                let read = reader_branches.iter().any(|rb| {
                    self.reads(path, At { doc: r.doc, schema: rb }, writer_branch, depth + 1)
                });
                if !read {
                    self.problem(
                        &format!("{path}/{keyword}"),
                        format!("no branch reads the writer's branch {i}"),
                    );
                }
            }
        }
        if let Some((_, reader_branches)) = branches(r.schema, &["allOf"]) {
            let writer_branches =
                branches(w.schema, &["allOf"]).map_or_else(|| vec![w.schema], |(_, b)| b);
            for (i, reader_branch) in reader_branches.into_iter().enumerate() {
                let reader_branch = At { doc: r.doc, schema: reader_branch };
                let read = writer_branches.iter().any(|wb| {
                    self.reads(path, reader_branch, At { doc: w.doc, schema: wb }, depth + 1)
                });
                if !read {
                    self.problem(
                        &format!("{path}/allOf/{i}"),
                        "does not read the writer's data".to_string(),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ParsedSchema {
        JsonSchemaFormat.parse(text, &[]).unwrap_or_else(|e| panic!("{text} parses: {e}"))
    }

    /// The problems of `reader` reading `writer`'s data.
    fn problems(reader: &str, writer: &str) -> Vec<String> {
        JsonSchemaFormat.incompatibilities(&parsed(reader), &parsed(writer))
    }

    const ORDER: &str = r#"{"type":"object","properties":{"id":{"type":"integer"},"qty":{"type":"integer"}},"required":["id"]}"#;

    #[test]
    fn reformatted_schemas_share_a_canonical_form_and_changes_do_not() {
        let spaced = r#"{ "required": [ "id" ],
            "properties": { "qty": { "type": "integer" }, "id": { "type": "integer" } },
            "type": "object" }"#;
        assert_eq!(parsed(ORDER).canonical, parsed(spaced).canonical);
        assert!(!parsed(spaced).canonical.contains(' '), "no whitespace");
        assert!(
            parsed(spaced).canonical.starts_with(r#"{"properties":"#),
            "keys sorted: {}",
            parsed(spaced).canonical
        );
        for changed in [
            ORDER.replace(r#""required":["id"]"#, r#""required":["qty"]"#),
            ORDER.replace("integer\"},\"qty", "number\"},\"qty"),
        ] {
            assert_ne!(parsed(ORDER).canonical, parsed(&changed).canonical, "{changed}");
        }
        assert_eq!(parsed("true").canonical, "true");
    }

    #[test]
    fn compatible_evolutions_have_no_problems() {
        let closed = r#"{"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":false}"#;
        let closed_plus = r#"{"type":"object","properties":{"id":{"type":"integer"},"note":{"type":"string"}},"additionalProperties":false}"#;
        let cases = [
            // integer data is a number.
            (r#"{"type":"number"}"#, r#"{"type":"integer"}"#),
            // An open reader ignores a property it no longer declares.
            (
                r#"{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}"#,
                ORDER,
            ),
            // A closed writer never wrote "note": the reader may add it (not required).
            (closed_plus, closed),
            // A wider enum, looser string and numeric constraints.
            (r#"{"enum":["a","b","c"]}"#, r#"{"enum":["a","b"]}"#),
            (
                r#"{"type":"string","maxLength":20}"#,
                r#"{"type":"string","maxLength":10,"minLength":1,"pattern":"^x"}"#,
            ),
            (r#"{"type":"number","minimum":0}"#, r#"{"type":"number","minimum":5,"maximum":9}"#),
            // A newly required property with a default.
            (
                r#"{"type":"object","properties":{"id":{"type":"integer"},"qty":{"type":"integer","default":1}},"required":["id","qty"]}"#,
                ORDER,
            ),
            // Array items widened; a union gains a branch.
            (
                r#"{"type":"array","items":{"type":["string","null"]}}"#,
                r#"{"type":"array","items":{"type":"string"}}"#,
            ),
            (
                r#"{"oneOf":[{"type":"string"},{"type":"integer"}]}"#,
                r#"{"oneOf":[{"type":"string"}]}"#,
            ),
            (r#"{"type":"integer","multipleOf":2}"#, r#"{"type":"integer","multipleOf":4}"#),
        ];
        for (reader, writer) in cases {
            assert_eq!(problems(reader, writer), Vec::<String>::new(), "{reader} reading {writer}");
        }
        assert!(problems(ORDER, ORDER).is_empty());
    }

    #[test]
    fn incompatible_evolutions_are_reported_with_their_path() {
        let closed = r#"{"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":false}"#;
        let cases = [
            (
                ORDER.replace(r#""qty":{"type":"integer"}"#, r#""qty":{"type":"string"}"#),
                ORDER.to_string(),
                "#/properties/qty: type changed from integer to string",
            ),
            (
                r#"{"type":"integer"}"#.into(),
                r#"{"type":"number"}"#.into(),
                "#: type changed from number to integer",
            ),
            (
                ORDER.replace(r#"["id"]"#, r#"["id","qty"]"#),
                ORDER.into(),
                "#: property \"qty\" is required",
            ),
            (
                r#"{"enum":["a"]}"#.into(),
                r#"{"enum":["a","b"]}"#.into(),
                "#: enum narrowed: [\"b\"]",
            ),
            (
                r#"{"type":"string","maxLength":5}"#.into(),
                r#"{"type":"string","maxLength":10}"#.into(),
                "#: maxLength decreased from 10 to 5",
            ),
            (
                r#"{"type":"string","minLength":2}"#.into(),
                r#"{"type":"string"}"#.into(),
                "#: minLength 2 added",
            ),
            (
                r#"{"type":"string","pattern":"^a"}"#.into(),
                r#"{"type":"string"}"#.into(),
                "#: pattern \"^a\" added",
            ),
            (
                r#"{"type":"number","maximum":5}"#.into(),
                r#"{"type":"number","maximum":10}"#.into(),
                "#: maximum decreased from 10 to 5",
            ),
            (
                r#"{"type":"array","items":{"type":"integer"}}"#.into(),
                r#"{"type":"array","items":{"type":"number"}}"#.into(),
                "#/items: type changed",
            ),
            // A property added to an open writer: its data may already hold "note" as anything.
            (
                ORDER
                    .replace(r#""required""#, r#""note":1,"required""#)
                    .replace(r#"}},"note":1"#, r#"},"note":{"type":"string"}}"#),
                ORDER.into(),
                "#/properties/note: property \"note\" added to an open content model",
            ),
            // A closed reader drops a property the writer writes.
            (
                closed.into(),
                ORDER.into(),
                "#/properties/qty: property \"qty\" removed from a closed content model",
            ),
            (
                r#"{"oneOf":[{"type":"string"}]}"#.into(),
                r#"{"oneOf":[{"type":"string"},{"type":"integer"}]}"#.into(),
                "#/oneOf: no branch reads the writer's branch 1",
            ),
        ];
        for (reader, writer, expected) in cases {
            let found = problems(&reader, &writer);
            assert!(
                found.iter().any(|p| p.starts_with(expected)),
                "{reader} reading {writer}: expected {expected:?}, got {found:?}"
            );
        }
    }

    #[test]
    fn bad_schemas_are_refused_with_a_reason() {
        for (bad, why) in [
            ("", "not JSON"),
            ("{", "not JSON"),
            ("[]", "not an array"),
            ("5", "not a number"),
            (r#"{"type":5}"#, "#: type must be"),
            (r#"{"type":"integr"}"#, "unknown type \"integr\""),
            (r#"{"properties":[]}"#, "#: properties must be an object of schemas"),
            (r#"{"required":"x"}"#, "#: required must be an array of strings"),
            (
                r#"{"properties":{"a":{"maxLength":-1}}}"#,
                "#/properties/a: maxLength must be a non-negative integer",
            ),
            (r#"{"items":[1]}"#, "#/items/0: a subschema must be"),
            (r#"{"anyOf":[]}"#, "anyOf must be a non-empty array"),
            (r##"{"$ref":"#/definitions/missing"}"##, "points at nothing"),
            (
                r##"{"$ref":"#nowhere","definitions":{"s":{"$anchor":"somewhere"}}}"##,
                "points at nothing",
            ),
            (r#"{"$ref":"address.json"}"#, "which no reference provides"),
            (
                r##"{"$ref":"#/definitions/a","definitions":{"a":{"$ref":"#/definitions/b"},"b":{"$ref":"#/definitions/a"}}}"##,
                "a loop",
            ),
        ] {
            match JsonSchemaFormat.parse(bad, &[]) {
                Err(e) => assert!(e.contains(why), "{bad}: {e:?} should say {why:?}"),
                Ok(p) => panic!("{bad} accepted as {}", p.canonical),
            }
        }
        let deep = format!("{}{{}}{}", r#"{"items":"#.repeat(200), "}".repeat(200));
        assert!(
            JsonSchemaFormat.parse(&deep, &[]).is_err(),
            "nesting beyond serde_json's limit is refused, not a stack overflow"
        );
    }

    #[test]
    fn local_refs_resolve_and_recursive_schemas_terminate() {
        let tree = r##"{"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}"##;
        assert!(problems(tree, tree).is_empty());
        let wider = tree.replace(r#""value":{"type":"integer"}"#, r#""value":{"type":"number"}"#);
        assert!(problems(&wider, tree).is_empty(), "integer widens to number at every level");
        let found = problems(tree, &wider);
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("#/properties/value: type changed from number to integer")),
            "{found:?}"
        );
        let self_ref = r##"{"type":"object","properties":{"next":{"$ref":"#"}},"definitions":{"x y":{"type":"string"}},"$anchor":"top"}"##;
        assert!(problems(self_ref, self_ref).is_empty());
        parsed(r##"{"$ref":"#/definitions/x%20y","definitions":{"x y":{"type":"string"}}}"##);
        parsed(
            r##"{"definitions":{"s":{"$anchor":"street","type":"string"}},"properties":{"a":{"$ref":"#street"}}}"##,
        );
        // Cycles of coprime lengths make ever new (reader, writer) pairs: the depth cap ends them.
        let cycle = |n: usize| {
            let defs: Vec<String> = (0..n).map(|i| format!(r##""d{i}":{{"type":"object","properties":{{"next":{{"$ref":"#/$defs/d{}"}}}}}}"##, (i + 1) % n)).collect();
            format!(r##"{{"$ref":"#/$defs/d0","$defs":{{{}}}}}"##, defs.join(","))
        };
        let found = problems(&cycle(97), &cycle(89));
        assert!(found.iter().any(|p| p.contains("nested deeper than 128 levels")), "{found:?}");
        // Nested unions try every branch at every level: a budget bounds the work.
        let levels: Vec<String> = (1..40)
            .map(|i| {
                let inner = format!(r##"{{"$ref":"#/$defs/l{}"}}"##, i - 1);
                format!(r#""l{i}":{{"anyOf":[{{"type":"integer","minimum":{i}}},{{"type":"object","properties":{{"a":{inner}}}}},{{"type":"object","properties":{{"b":{inner}}}}}]}}"#)
            })
            .collect();
        let union = format!(
            r##"{{"$ref":"#/$defs/l39","$defs":{{"l0":{{"type":"string"}},{}}}}}"##,
            levels.join(",")
        );
        let start = std::time::Instant::now();
        let found = problems(&union.replace("string", "number"), &union);
        assert!(
            !found.is_empty() && start.elapsed() < std::time::Duration::from_secs(20),
            "{:?} {found:?}",
            start.elapsed()
        );
        // A deeply nested schema within serde_json's limit compares without overflowing.
        let deep = format!(
            "{}{{\"type\":\"string\"}}{}",
            r#"{"type":"array","items":"#.repeat(60),
            "}".repeat(60)
        );
        assert!(problems(&deep, &deep).is_empty());
    }

    #[test]
    fn references_resolve_external_refs_by_name() {
        let address = r#"{"type":"object","properties":{"street":{"type":"string"}},"definitions":{"zip":{"type":"string"}}}"#;
        let order = r#"{"type":"object","properties":{"ship_to":{"$ref":"address.json"},"zip":{"$ref":"address.json#/definitions/zip"}}}"#;
        assert!(JsonSchemaFormat.parse(order, &[]).is_err(), "address.json is unknown alone");
        let reference =
            SchemaReference { name: "address.json".into(), subject: "address".into(), version: 1 };
        let with = |text: &str| {
            JsonSchemaFormat
                .parse(order, &[(reference.clone(), text.to_string())])
                .expect("parses with its reference")
        };
        let v1 = with(address);
        assert!(JsonSchemaFormat.incompatibilities(&v1, &v1).is_empty());
        let v2 = with(
            &address.replace(r#""street":{"type":"string"}"#, r#""street":{"type":"integer"}"#),
        );
        let found = JsonSchemaFormat.incompatibilities(&v2, &v1);
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("#/properties/ship_to/properties/street: type changed")),
            "{found:?}"
        );
        let missing = JsonSchemaFormat.parse(
            r#"{"$ref":"address.json#/definitions/nope"}"#,
            &[(reference, address.to_string())],
        );
        assert!(missing.is_err_and(|e| e.contains("points at nothing")));
    }

    #[test]
    fn a_one_megabyte_schema_parses_and_compares_quickly() {
        let properties: Vec<String> = (0..20_000)
            .map(|i| format!(r#""field_{i}":{{"type":"string","maxLength":{i}}}"#))
            .collect();
        let big = format!(r#"{{"type":"object","properties":{{{}}}}}"#, properties.join(","));
        assert!(big.len() > 800_000, "{}", big.len());
        let start = std::time::Instant::now();
        let p = parsed(&big);
        assert!(JsonSchemaFormat.incompatibilities(&p, &p).is_empty());
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "{:?}", start.elapsed());
    }
}
