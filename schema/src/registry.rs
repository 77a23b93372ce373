//! `Registry`: the subjects, their versions and the schemas they name, as a fold
//! of `_schemas` records (see the crate doc for plan → append → apply).
//!
//! The rules are the Confluent Schema Registry's:
//! - a schema's id is global: the same schema (same type, same canonical form,
//!   same references) registered under several subjects has one id, and ids are
//!   never handed out twice by a registry;
//! - registering a schema a subject already has (as a live version) answers
//!   that version's id and writes nothing;
//! - a new version is checked against the subject's live versions (the latest,
//!   or all of them for a `_TRANSITIVE` level) under the subject's compatibility
//!   level, else the registry's (BACKWARD by default);
//! - deletion is soft first (the version stays readable with `deleted=true`),
//!   then permanent; a version other schemas reference cannot be deleted;
//! - a subject or registry in a read-only mode refuses registrations and deletions.
//!
//! Not thread-safe by itself: the broker keeps it behind one lock with the
//! topic's writer.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::compatibility::{CompatibilityLevel, Mode, ParsedSchema, SchemaFormat, SchemaType};
use crate::error::RegistryError;
use crate::records::{self, Entry, Record, RecordError, SchemaReference, SchemaValue};

/// The records a write needs appended before it is applied, and its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned<T> {
    /// To append to `_schemas`, then to [`Registry::apply`], in order (may be empty).
    pub records: Vec<Record>,
    /// What the client is answered once they are durable.
    pub answer: T,
}

/// A schema by id, as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredSchema {
    /// Global id.
    pub id: i32,
    /// Type.
    pub schema_type: SchemaType,
    /// The text as first registered.
    pub schema: String,
    /// References.
    pub references: Vec<SchemaReference>,
}

/// A version of a subject, with its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaVersion {
    /// The subject.
    pub subject: String,
    /// The version.
    pub version: i32,
    /// Soft-deleted.
    pub deleted: bool,
    /// The schema.
    pub schema: RegisteredSchema,
}

/// Which version a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSpec {
    /// `latest` or `-1`.
    Latest,
    /// A version number.
    Number(i32),
}

impl VersionSpec {
    /// Parses a version path segment: a number from 1 up, `-1` or `latest`.
    ///
    /// # Errors
    /// [`RegistryError::InvalidVersion`].
    pub fn parse(text: &str) -> Result<Self, RegistryError> {
        if text.eq_ignore_ascii_case("latest") {
            return Ok(VersionSpec::Latest);
        }
        match text.parse::<i32>() {
            Ok(-1) => Ok(VersionSpec::Latest),
            Ok(n) if n >= 1 => Ok(VersionSpec::Number(n)),
            _ => Err(RegistryError::InvalidVersion(text.to_string())),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct VersionEntry {
    id: i32,
    deleted: bool,
}

#[derive(Debug, Clone)]
struct StoredSchema {
    registered: RegisteredSchema,
    /// The format's canonical form (the text itself when no format knows the type).
    canonical: String,
}

/// What makes two registrations the same schema.
type ContentKey = (SchemaType, String, Vec<SchemaReference>);

/// The registry's state (see the module doc).
#[derive(Debug, Default)]
pub struct Registry {
    formats: HashMap<SchemaType, Arc<dyn SchemaFormat>>,
    schemas: BTreeMap<i32, StoredSchema>,
    ids_by_content: HashMap<ContentKey, i32>,
    subjects: BTreeMap<String, BTreeMap<i32, VersionEntry>>,
    compatibility: Option<CompatibilityLevel>,
    subject_compatibility: HashMap<String, CompatibilityLevel>,
    mode: Option<Mode>,
    subject_mode: HashMap<String, Mode>,
    /// The highest id ever applied: new ids start above it.
    max_id: i32,
}

impl Registry {
    /// An empty registry that understands the schema types of `formats`.
    pub fn new(formats: Vec<Arc<dyn SchemaFormat>>) -> Self {
        Self {
            formats: formats.into_iter().map(|f| (f.schema_type(), f)).collect(),
            ..Self::default()
        }
    }

    // ---- applying records ---------------------------------------------------

    /// Applies one `_schemas` record (a planned write after its append, or the
    /// replay at startup).
    ///
    /// # Errors
    /// A record that does not decode; the state is unchanged by it.
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), RecordError> {
        match records::decode(key, value)? {
            Entry::Schema { subject, version, value: Some(v) } => {
                self.apply_version(subject, version, v)
            }
            Entry::Schema { subject, version, value: None } => {
                if let Some(versions) = self.subjects.get_mut(&subject) {
                    if let Some(gone) = versions.remove(&version) {
                        if versions.is_empty() {
                            self.subjects.remove(&subject);
                        }
                        self.forget_if_unused(gone.id);
                    }
                }
            }
            Entry::Config { subject, level } => {
                let level = level.as_deref().and_then(CompatibilityLevel::parse);
                set_scoped(
                    &mut self.compatibility,
                    &mut self.subject_compatibility,
                    subject,
                    level,
                );
            }
            Entry::Mode { subject, mode } => {
                let mode = mode.as_deref().and_then(Mode::parse);
                set_scoped(&mut self.mode, &mut self.subject_mode, subject, mode);
            }
            Entry::DeleteSubject { subject, version } => {
                for (_, e) in self
                    .subjects
                    .get_mut(&subject)
                    .into_iter()
                    .flatten()
                    .filter(|(v, _)| **v <= version)
                {
                    e.deleted = true;
                }
            }
            Entry::Other(kind) => tracing::debug!(kind, "_schemas: record skipped"),
        }
        Ok(())
    }

    fn apply_version(&mut self, subject: String, version: i32, v: SchemaValue) {
        let schema_type = SchemaType::parse(v.schema_type.as_deref()).unwrap_or_default();
        if !self.schemas.contains_key(&v.id) {
            let canonical = self.canonical_or_text(schema_type, &v.schema, &v.references);
            let registered = RegisteredSchema {
                id: v.id,
                schema_type,
                schema: v.schema,
                references: v.references,
            };
            self.ids_by_content
                .insert((schema_type, canonical.clone(), registered.references.clone()), v.id);
            self.schemas.insert(v.id, StoredSchema { registered, canonical });
        }
        self.max_id = self.max_id.max(v.id);
        self.subjects
            .entry(subject)
            .or_default()
            .insert(version, VersionEntry { id: v.id, deleted: v.deleted });
    }

    /// The canonical form for the dedup map; the text itself if the schema cannot
    /// be parsed now (a type without a format here, or a reference gone).
    fn canonical_or_text(
        &self,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
    ) -> String {
        let Some(format) = self.formats.get(&schema_type) else { return text.to_string() };
        let Ok(resolved) = self.resolve_references(references) else { return text.to_string() };
        format.parse(text, &resolved).map(|p| p.canonical).unwrap_or_else(|_| text.to_string())
    }

    fn forget_if_unused(&mut self, id: i32) {
        let used = self.subjects.values().any(|vs| vs.values().any(|e| e.id == id));
        if !used {
            if let Some(s) = self.schemas.remove(&id) {
                let r = s.registered;
                self.ids_by_content.remove(&(r.schema_type, s.canonical, r.references));
            }
        }
    }

    // ---- reads -----------------------------------------------------------------

    /// Subjects with a live version (or any version, with `include_deleted`), sorted.
    pub fn subjects(&self, include_deleted: bool) -> Vec<String> {
        self.subjects
            .iter()
            .filter(|(_, vs)| include_deleted || vs.values().any(|e| !e.deleted))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// The versions of a subject, ascending.
    ///
    /// # Errors
    /// [`RegistryError::SubjectNotFound`] if it has none (live ones, without `include_deleted`).
    pub fn versions(
        &self,
        subject: &str,
        include_deleted: bool,
    ) -> Result<Vec<i32>, RegistryError> {
        let versions: Vec<i32> = self.live(subject, include_deleted).map(|(v, _)| v).collect();
        if versions.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        Ok(versions)
    }

    fn live<'a>(
        &'a self,
        subject: &str,
        include_deleted: bool,
    ) -> impl Iterator<Item = (i32, VersionEntry)> + 'a {
        self.subjects
            .get(subject)
            .into_iter()
            .flatten()
            .filter(move |(_, e)| include_deleted || !e.deleted)
            .map(|(v, e)| (*v, *e))
    }

    /// One version of a subject (`latest`: the highest live one).
    ///
    /// # Errors
    /// [`RegistryError::SubjectNotFound`], [`RegistryError::VersionNotFound`].
    pub fn version(
        &self,
        subject: &str,
        spec: VersionSpec,
        include_deleted: bool,
    ) -> Result<SchemaVersion, RegistryError> {
        let (version, entry) = self.find_version(subject, spec, include_deleted)?;
        Ok(self.schema_version(subject, version, entry))
    }

    fn find_version(
        &self,
        subject: &str,
        spec: VersionSpec,
        include_deleted: bool,
    ) -> Result<(i32, VersionEntry), RegistryError> {
        if self.live(subject, include_deleted).next().is_none() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        let (found, n) = match spec {
            VersionSpec::Latest => (self.live(subject, include_deleted).last(), -1),
            VersionSpec::Number(n) => {
                (self.live(subject, include_deleted).find(|(v, _)| *v == n), n)
            }
        };
        found.ok_or_else(|| RegistryError::VersionNotFound(subject.to_string(), n))
    }

    fn schema_version(&self, subject: &str, version: i32, entry: VersionEntry) -> SchemaVersion {
        let schema =
            self.schemas.get(&entry.id).map(|s| s.registered.clone()).unwrap_or(RegisteredSchema {
                id: entry.id,
                schema_type: SchemaType::Avro,
                schema: String::new(),
                references: Vec::new(),
            });
        SchemaVersion { subject: subject.to_string(), version, deleted: entry.deleted, schema }
    }

    /// A schema by its id.
    ///
    /// # Errors
    /// [`RegistryError::SchemaNotFound`].
    pub fn schema_by_id(&self, id: i32) -> Result<&RegisteredSchema, RegistryError> {
        self.schemas.get(&id).map(|s| &s.registered).ok_or(RegistryError::SchemaNotFound)
    }

    /// The (subject, version) pairs that name schema `id`.
    ///
    /// # Errors
    /// [`RegistryError::SchemaNotFound`] if none does.
    pub fn versions_of_id(
        &self,
        id: i32,
        include_deleted: bool,
    ) -> Result<Vec<(String, i32)>, RegistryError> {
        let found: Vec<(String, i32)> = self
            .subjects
            .iter()
            .flat_map(|(s, vs)| {
                vs.iter()
                    .filter(|(_, e)| e.id == id && (include_deleted || !e.deleted))
                    .map(move |(v, _)| (s.clone(), *v))
            })
            .collect();
        if found.is_empty() {
            return Err(RegistryError::SchemaNotFound);
        }
        Ok(found)
    }

    /// The live version of `subject` holding this schema (POST /subjects/{subject}).
    ///
    /// # Errors
    /// [`RegistryError::SubjectNotFound`], [`RegistryError::SchemaNotFound`],
    /// [`RegistryError::InvalidSchema`].
    pub fn lookup(
        &self,
        subject: &str,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
        include_deleted: bool,
    ) -> Result<SchemaVersion, RegistryError> {
        if self.live(subject, include_deleted).next().is_none() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        let parsed = self.parse(schema_type, text, references)?;
        let id = self
            .ids_by_content
            .get(&(schema_type, parsed.canonical, references.to_vec()))
            .ok_or(RegistryError::SchemaNotFound)?;
        let (version, entry) = self
            .live(subject, include_deleted)
            .filter(|(_, e)| e.id == *id)
            .last()
            .ok_or(RegistryError::SchemaNotFound)?;
        Ok(self.schema_version(subject, version, entry))
    }

    /// The compatibility level in force for `subject` (its own, else the registry's).
    pub fn compatibility(&self, subject: Option<&str>) -> CompatibilityLevel {
        subject
            .and_then(|s| self.subject_compatibility.get(s).copied())
            .or(self.compatibility)
            .unwrap_or_default()
    }

    /// The subject's own compatibility level.
    ///
    /// # Errors
    /// [`RegistryError::SubjectCompatibilityNotConfigured`].
    pub fn subject_compatibility(
        &self,
        subject: &str,
    ) -> Result<CompatibilityLevel, RegistryError> {
        self.subject_compatibility
            .get(subject)
            .copied()
            .ok_or_else(|| RegistryError::SubjectCompatibilityNotConfigured(subject.to_string()))
    }

    /// The mode in force for `subject` (a registry-wide READONLY_OVERRIDE wins over the subject's).
    pub fn mode(&self, subject: Option<&str>) -> Mode {
        let global = self.mode.unwrap_or_default();
        if global == Mode::ReadOnlyOverride {
            return global;
        }
        subject.and_then(|s| self.subject_mode.get(s).copied()).unwrap_or(global)
    }

    /// The subject's own mode.
    ///
    /// # Errors
    /// [`RegistryError::SubjectModeNotConfigured`].
    pub fn subject_mode(&self, subject: &str) -> Result<Mode, RegistryError> {
        self.subject_mode
            .get(subject)
            .copied()
            .ok_or_else(|| RegistryError::SubjectModeNotConfigured(subject.to_string()))
    }

    // ---- planning writes -----------------------------------------------------

    /// POST /subjects/{subject}/versions: the schema's id, registering a new
    /// version if the subject does not hold it yet.
    ///
    /// # Errors
    /// [`RegistryError::OperationNotPermitted`] (read-only),
    /// [`RegistryError::InvalidSchema`], [`RegistryError::Incompatible`].
    pub fn register(
        &self,
        subject: &str,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
    ) -> Result<Planned<i32>, RegistryError> {
        self.check_writable(subject)?;
        let parsed = self.parse(schema_type, text, references)?;
        let content: ContentKey = (schema_type, parsed.canonical.clone(), references.to_vec());
        let existing_id = self.ids_by_content.get(&content).copied();
        if let Some(id) = existing_id {
            if self.live(subject, false).any(|(_, e)| e.id == id) {
                return Ok(Planned { records: Vec::new(), answer: id });
            }
        }
        let reasons = self.incompatibilities(subject, schema_type, &parsed, None);
        if !reasons.is_empty() {
            return Err(RegistryError::Incompatible { subject: subject.to_string(), reasons });
        }
        let id = existing_id.unwrap_or(self.max_id + 1);
        let version =
            self.subjects.get(subject).and_then(|vs| vs.keys().next_back()).map_or(1, |v| v + 1);
        let value = SchemaValue {
            subject: subject.to_string(),
            version,
            id,
            schema_type: (schema_type != SchemaType::Avro).then(|| schema_type.name().to_string()),
            references: references.to_vec(),
            schema: text.to_string(),
            deleted: false,
        };
        Ok(Planned {
            records: vec![records::schema_record(subject, version, Some(&value))],
            answer: id,
        })
    }

    /// The schema text `normalize=true` registers: Avro and JSON Schema in their
    /// canonical form (the form identity is judged by: no whitespace, keys in one
    /// order), Protobuf as given (its canonical form is a compiled descriptor, not
    /// text; its identity is normalized all the same).
    ///
    /// # Errors
    /// [`RegistryError::InvalidSchema`] (42201) when the schema does not parse.
    pub fn normalized(
        &self,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
    ) -> Result<String, RegistryError> {
        let parsed = self.parse(schema_type, text, references)?;
        Ok(match schema_type {
            SchemaType::Protobuf => text.to_string(),
            _ => parsed.canonical,
        })
    }

    /// POST /compatibility/subjects/{subject}/versions[/{version}]: why the schema
    /// could not be registered (empty if it could), against one version or, with
    /// `None`, the versions the subject's level names.
    ///
    /// # Errors
    /// [`RegistryError::InvalidSchema`], and for a named version
    /// [`RegistryError::SubjectNotFound`] / [`RegistryError::VersionNotFound`].
    pub fn check_compatibility(
        &self,
        subject: &str,
        against: Option<VersionSpec>,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
    ) -> Result<Vec<String>, RegistryError> {
        let parsed = self.parse(schema_type, text, references)?;
        let only = match against {
            Some(spec) => Some(self.find_version(subject, spec, false)?.0),
            None => None,
        };
        Ok(self.incompatibilities(subject, schema_type, &parsed, only))
    }

    /// DELETE /subjects/{subject}/versions/{version}: the deleted version.
    ///
    /// # Errors
    /// See the module doc: not found, already soft-deleted, permanent before soft, referenced, read-only.
    pub fn delete_version(
        &self,
        subject: &str,
        spec: VersionSpec,
        permanent: bool,
    ) -> Result<Planned<i32>, RegistryError> {
        self.check_writable(subject)?;
        if self.live(subject, true).next().is_none() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        // A numbered version is found even when soft-deleted (a second soft delete
        // is then 40406, not 40402); `latest` of a soft delete is the latest live one.
        let include_deleted = permanent || matches!(spec, VersionSpec::Number(_));
        let (version, entry) = self.find_version(subject, spec, include_deleted)?;
        if self.is_referenced(subject, version) {
            return Err(RegistryError::ReferenceExists(subject.to_string(), version));
        }
        let record = match (permanent, entry.deleted) {
            (false, true) => {
                return Err(RegistryError::VersionSoftDeleted(subject.to_string(), version))
            }
            (true, false) => {
                return Err(RegistryError::VersionNotSoftDeleted(subject.to_string(), version))
            }
            (false, false) => self.soft_deleted_record(subject, version, entry),
            (true, true) => records::schema_record(subject, version, None),
        };
        Ok(Planned { records: vec![record], answer: version })
    }

    /// DELETE /subjects/{subject}: the versions deleted.
    ///
    /// # Errors
    /// Not found, already soft-deleted, permanent before soft, referenced, read-only.
    pub fn delete_subject(
        &self,
        subject: &str,
        permanent: bool,
    ) -> Result<Planned<Vec<i32>>, RegistryError> {
        self.check_writable(subject)?;
        let all: Vec<(i32, VersionEntry)> = self.live(subject, true).collect();
        if all.is_empty() {
            return Err(RegistryError::SubjectNotFound(subject.to_string()));
        }
        let any_live = all.iter().any(|(_, e)| !e.deleted);
        if let Some((v, _)) = all.iter().find(|(v, _)| self.is_referenced(subject, *v)) {
            return Err(RegistryError::ReferenceExists(subject.to_string(), *v));
        }
        if !permanent {
            if !any_live {
                return Err(RegistryError::SubjectSoftDeleted(subject.to_string()));
            }
            let live: Vec<(i32, VersionEntry)> =
                all.into_iter().filter(|(_, e)| !e.deleted).collect();
            let records =
                live.iter().map(|(v, e)| self.soft_deleted_record(subject, *v, *e)).collect();
            return Ok(Planned { records, answer: live.iter().map(|(v, _)| *v).collect() });
        }
        if any_live {
            return Err(RegistryError::SubjectNotSoftDeleted(subject.to_string()));
        }
        let mut records: Vec<Record> =
            all.iter().map(|(v, _)| records::schema_record(subject, *v, None)).collect();
        // Confluent drops the subject's own settings with it.
        if self.subject_compatibility.contains_key(subject) {
            records.push(records::config_record(Some(subject), None));
        }
        if self.subject_mode.contains_key(subject) {
            records.push(records::mode_record(Some(subject), None));
        }
        Ok(Planned { records, answer: all.iter().map(|(v, _)| *v).collect() })
    }

    /// PUT /config[/{subject}]: sets a compatibility level.
    pub fn set_compatibility(
        &self,
        subject: Option<&str>,
        level: CompatibilityLevel,
    ) -> Planned<CompatibilityLevel> {
        Planned {
            records: vec![records::config_record(subject, Some(level.name()))],
            answer: level,
        }
    }

    /// DELETE /config[/{subject}]: unsets one; answers the level it had.
    ///
    /// # Errors
    /// [`RegistryError::SubjectCompatibilityNotConfigured`] for a subject without one.
    pub fn delete_compatibility(
        &self,
        subject: Option<&str>,
    ) -> Result<Planned<CompatibilityLevel>, RegistryError> {
        let had = match subject {
            Some(s) => self.subject_compatibility(s)?,
            None => self.compatibility(None),
        };
        Ok(Planned { records: vec![records::config_record(subject, None)], answer: had })
    }

    /// PUT /mode[/{subject}]: sets a mode.
    pub fn set_mode(&self, subject: Option<&str>, mode: Mode) -> Planned<Mode> {
        Planned { records: vec![records::mode_record(subject, Some(mode.name()))], answer: mode }
    }

    /// DELETE /mode/{subject}: unsets a subject's mode; answers the mode it had.
    ///
    /// # Errors
    /// [`RegistryError::SubjectModeNotConfigured`].
    pub fn delete_mode(&self, subject: &str) -> Result<Planned<Mode>, RegistryError> {
        let had = self.subject_mode(subject)?;
        Ok(Planned { records: vec![records::mode_record(Some(subject), None)], answer: had })
    }

    // ---- helpers ------------------------------------------------------------------

    fn check_writable(&self, subject: &str) -> Result<(), RegistryError> {
        if self.mode(Some(subject)).allows_writes() {
            Ok(())
        } else {
            Err(RegistryError::OperationNotPermitted(subject.to_string()))
        }
    }

    fn format(&self, schema_type: SchemaType) -> Result<&Arc<dyn SchemaFormat>, RegistryError> {
        self.formats.get(&schema_type).ok_or_else(|| {
            RegistryError::InvalidSchema(format!("schema type {schema_type} is not supported"))
        })
    }

    /// The texts of the schemas `schema` references, in order, as
    /// [`SchemaFormat::parse`] and [`crate::typed::TypedDecoder::new`] take them.
    ///
    /// # Errors
    /// A reference to a version that no longer exists.
    pub fn referenced_texts(
        &self,
        schema: &RegisteredSchema,
    ) -> Result<Vec<(SchemaReference, String)>, RegistryError> {
        self.resolve_references(&schema.references)
    }

    /// The referenced schemas' texts, in order.
    fn resolve_references(
        &self,
        references: &[SchemaReference],
    ) -> Result<Vec<(SchemaReference, String)>, RegistryError> {
        references
            .iter()
            .map(|r| {
                let entry =
                    self.subjects.get(&r.subject).and_then(|vs| vs.get(&r.version)).ok_or_else(
                        || {
                            RegistryError::InvalidSchema(format!(
                                "reference {:?} names {} version {}, which does not exist",
                                r.name, r.subject, r.version
                            ))
                        },
                    )?;
                let text = self
                    .schemas
                    .get(&entry.id)
                    .map(|s| s.registered.schema.clone())
                    .unwrap_or_default();
                Ok((r.clone(), text))
            })
            .collect()
    }

    fn parse(
        &self,
        schema_type: SchemaType,
        text: &str,
        references: &[SchemaReference],
    ) -> Result<ParsedSchema, RegistryError> {
        let format = self.format(schema_type)?;
        let resolved = self.resolve_references(references)?;
        format.parse(text, &resolved).map_err(RegistryError::InvalidSchema)
    }

    /// Why `new` may not follow the subject's live versions (all of them, the
    /// latest, or `only`, as the level says).
    fn incompatibilities(
        &self,
        subject: &str,
        schema_type: SchemaType,
        new: &ParsedSchema,
        only: Option<i32>,
    ) -> Vec<String> {
        let level = self.compatibility(Some(subject));
        if level == CompatibilityLevel::None && only.is_none() {
            return Vec::new();
        }
        let live: Vec<(i32, VersionEntry)> = self.live(subject, false).collect();
        let targets: Vec<&(i32, VersionEntry)> = match only {
            Some(v) => live.iter().filter(|(n, _)| *n == v).collect(),
            None if level.is_transitive() => live.iter().collect(),
            None => live.last().into_iter().collect(),
        };
        // Checking one named version with level NONE still checks backward, as Confluent does.
        let (backward, forward) = if level == CompatibilityLevel::None {
            (true, false)
        } else {
            (level.checks_backward(), level.checks_forward())
        };
        let mut reasons = Vec::new();
        for (version, entry) in targets {
            let Some(old) = self.schemas.get(&entry.id) else { continue };
            if old.registered.schema_type != schema_type {
                reasons.push(format!(
                    "version {version} is a {} schema, the new one {schema_type}",
                    old.registered.schema_type
                ));
                continue;
            }
            let Ok(format) = self.format(schema_type) else { continue };
            let old_parsed = self.parsed_again(format.as_ref(), old);
            if backward {
                reasons.extend(
                    format
                        .incompatibilities(new, &old_parsed)
                        .into_iter()
                        .map(|r| format!("{r} (reading version {version}'s data)")),
                );
            }
            if forward {
                reasons.extend(
                    format
                        .incompatibilities(&old_parsed, new)
                        .into_iter()
                        .map(|r| format!("{r} (version {version} reading the new data)")),
                );
            }
        }
        reasons
    }

    /// GET /subjects/{subject}/versions/{version}/referencedby: the ids of the
    /// live schemas that reference this version, ascending.
    ///
    /// # Errors
    /// [`RegistryError::SubjectNotFound`], [`RegistryError::VersionNotFound`].
    pub fn referenced_by(
        &self,
        subject: &str,
        spec: VersionSpec,
    ) -> Result<Vec<i32>, RegistryError> {
        let (version, _) = self.find_version(subject, spec, false)?;
        let mut ids: Vec<i32> = self
            .subjects
            .values()
            .flat_map(|vs| vs.values())
            .filter(|e| !e.deleted)
            .filter(|e| {
                self.schemas.get(&e.id).is_some_and(|s| {
                    s.registered
                        .references
                        .iter()
                        .any(|r| r.subject == subject && r.version == version)
                })
            })
            .map(|e| e.id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// A stored schema as its format parsed it when it was registered: parsed again
    /// from its text with its references, so that the format gets back the
    /// `dependencies` it made (JSON Schema keeps the references' names there, which
    /// its `$ref`s use). If it no longer parses: its canonical form and the
    /// referenced texts, for the format to report.
    fn parsed_again(&self, format: &dyn SchemaFormat, old: &StoredSchema) -> ParsedSchema {
        let resolved = self.resolve_references(&old.registered.references).unwrap_or_default();
        format.parse(&old.registered.schema, &resolved).unwrap_or_else(|_| ParsedSchema {
            canonical: old.canonical.clone(),
            dependencies: resolved.into_iter().map(|(_, t)| t).collect(),
        })
    }

    fn is_referenced(&self, subject: &str, version: i32) -> bool {
        self.subjects.values().flat_map(|vs| vs.values()).filter(|e| !e.deleted).any(|e| {
            self.schemas.get(&e.id).is_some_and(|s| {
                s.registered.references.iter().any(|r| r.subject == subject && r.version == version)
            })
        })
    }

    fn soft_deleted_record(&self, subject: &str, version: i32, entry: VersionEntry) -> Record {
        let s = self.schema_version(subject, version, entry).schema;
        let value = SchemaValue {
            subject: subject.to_string(),
            version,
            id: s.id,
            schema_type: (s.schema_type != SchemaType::Avro)
                .then(|| s.schema_type.name().to_string()),
            references: s.references,
            schema: s.schema,
            deleted: true,
        };
        records::schema_record(subject, version, Some(&value))
    }
}

/// Sets (`Some`) or unsets (`None`) a setting of the registry (no subject) or of one subject.
fn set_scoped<T>(
    global: &mut Option<T>,
    by_subject: &mut HashMap<String, T>,
    subject: Option<String>,
    value: Option<T>,
) {
    match (subject, value) {
        (None, value) => *global = value,
        (Some(s), Some(value)) => drop(by_subject.insert(s, value)),
        (Some(s), None) => drop(by_subject.remove(&s)),
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
