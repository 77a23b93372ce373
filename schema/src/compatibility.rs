//! Compatibility levels, modes, schema types, and [`SchemaFormat`]: what a schema
//! type must provide for the registry to store and evolve its schemas.

use std::fmt;

use crate::records::SchemaReference;

/// The kind of a schema, by the names the REST API and `_schemas` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SchemaType {
    /// Apache Avro (the default when a request names none).
    #[default]
    Avro,
    /// JSON Schema.
    Json,
    /// Protocol Buffers.
    Protobuf,
}

impl SchemaType {
    /// `AVRO`, `JSON` or `PROTOBUF`.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "AVRO",
            SchemaType::Json => "JSON",
            SchemaType::Protobuf => "PROTOBUF",
        }
    }

    /// The type a request or record names; `None` (absent) is Avro.
    ///
    /// # Errors
    /// An unknown name, as the message of an invalid schema.
    pub fn parse(name: Option<&str>) -> Result<Self, String> {
        match name.map(str::to_ascii_uppercase).as_deref() {
            None | Some("AVRO") => Ok(SchemaType::Avro),
            Some("JSON") => Ok(SchemaType::Json),
            Some("PROTOBUF") => Ok(SchemaType::Protobuf),
            Some(other) => Err(format!("unknown schema type {other}")),
        }
    }
}

impl fmt::Display for SchemaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which earlier versions a new schema of a subject must be compatible with, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompatibilityLevel {
    /// No check.
    None,
    /// The new schema can read data written with the latest one (the default).
    #[default]
    Backward,
    /// ... with every earlier one.
    BackwardTransitive,
    /// The latest schema can read data written with the new one.
    Forward,
    /// Every earlier schema can.
    ForwardTransitive,
    /// Backward and forward, against the latest.
    Full,
    /// Backward and forward, against every earlier one.
    FullTransitive,
}

impl CompatibilityLevel {
    /// The level's name, as the API writes it.
    pub fn name(self) -> &'static str {
        match self {
            CompatibilityLevel::None => "NONE",
            CompatibilityLevel::Backward => "BACKWARD",
            CompatibilityLevel::BackwardTransitive => "BACKWARD_TRANSITIVE",
            CompatibilityLevel::Forward => "FORWARD",
            CompatibilityLevel::ForwardTransitive => "FORWARD_TRANSITIVE",
            CompatibilityLevel::Full => "FULL",
            CompatibilityLevel::FullTransitive => "FULL_TRANSITIVE",
        }
    }

    /// A level by name, in any case (the API accepts `backward` and `BACKWARD`).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "NONE" => CompatibilityLevel::None,
            "BACKWARD" => CompatibilityLevel::Backward,
            "BACKWARD_TRANSITIVE" => CompatibilityLevel::BackwardTransitive,
            "FORWARD" => CompatibilityLevel::Forward,
            "FORWARD_TRANSITIVE" => CompatibilityLevel::ForwardTransitive,
            "FULL" => CompatibilityLevel::Full,
            "FULL_TRANSITIVE" => CompatibilityLevel::FullTransitive,
            _ => return None,
        })
    }

    /// Checked against every earlier live version rather than the latest only.
    pub fn is_transitive(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::FullTransitive
        )
    }

    /// The new schema must read the old one's data.
    pub fn checks_backward(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::Backward
                | CompatibilityLevel::BackwardTransitive
                | CompatibilityLevel::Full
                | CompatibilityLevel::FullTransitive
        )
    }

    /// The old schema must read the new one's data.
    pub fn checks_forward(self) -> bool {
        matches!(
            self,
            CompatibilityLevel::Forward
                | CompatibilityLevel::ForwardTransitive
                | CompatibilityLevel::Full
                | CompatibilityLevel::FullTransitive
        )
    }
}

/// What the registry (or one subject) accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Reads and writes (the default).
    #[default]
    ReadWrite,
    /// Reads only: registrations and deletions are refused.
    ReadOnly,
    /// Read-only, and a subject's own mode cannot lift it.
    ReadOnlyOverride,
    /// Registrations may carry their id and version (migrating another registry in).
    Import,
}

impl Mode {
    /// The mode's name, as the API writes it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadWrite => "READWRITE",
            Mode::ReadOnly => "READONLY",
            Mode::ReadOnlyOverride => "READONLY_OVERRIDE",
            Mode::Import => "IMPORT",
        }
    }

    /// A mode by name, in any case.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "READWRITE" => Mode::ReadWrite,
            "READONLY" => Mode::ReadOnly,
            "READONLY_OVERRIDE" => Mode::ReadOnlyOverride,
            "IMPORT" => Mode::Import,
            _ => return None,
        })
    }

    /// Whether a schema may be registered or deleted.
    pub fn allows_writes(self) -> bool {
        matches!(self, Mode::ReadWrite | Mode::Import)
    }
}

/// A schema a [`SchemaFormat`] accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedSchema {
    /// The form two equal schemas share, however they were written (whitespace,
    /// key order): the registry gives them one id. It must keep everything that
    /// changes what the schema reads (defaults, for one).
    pub canonical: String,
    /// What the format needs besides `canonical` to read the schema again: the
    /// schemas it references, in order, in a form the format chooses (Avro and
    /// Protobuf keep their texts; JSON Schema keeps each one's name with it, since
    /// `$ref`s name them). The registry gets a stored version's `ParsedSchema` from
    /// the format's `parse`, so only the format reads this.
    pub dependencies: Vec<String>,
}

/// One schema type's rules: how to parse a schema and when one can read another.
///
/// Implementations must be deterministic: the registry compares canonical forms
/// across restarts.
pub trait SchemaFormat: Send + Sync + fmt::Debug {
    /// The type this format handles.
    fn schema_type(&self) -> SchemaType;

    /// Parses `text`, whose references are resolved to the schemas they name
    /// (`(reference, its schema text)`, in the order given).
    ///
    /// # Errors
    /// Why the schema is invalid (the registry answers 42201 with it).
    fn parse(
        &self,
        text: &str,
        references: &[(SchemaReference, String)],
    ) -> Result<ParsedSchema, String>;

    /// Why data written with `writer` cannot be read with `reader`: empty if it can.
    fn incompatibilities(&self, reader: &ParsedSchema, writer: &ParsedSchema) -> Vec<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_modes_round_trip_by_name() {
        for level in [
            CompatibilityLevel::None,
            CompatibilityLevel::Backward,
            CompatibilityLevel::BackwardTransitive,
            CompatibilityLevel::Forward,
            CompatibilityLevel::ForwardTransitive,
            CompatibilityLevel::Full,
            CompatibilityLevel::FullTransitive,
        ] {
            assert_eq!(CompatibilityLevel::parse(&level.name().to_ascii_lowercase()), Some(level));
        }
        assert_eq!(CompatibilityLevel::parse("sideways"), None);
        for mode in [Mode::ReadWrite, Mode::ReadOnly, Mode::ReadOnlyOverride, Mode::Import] {
            assert_eq!(Mode::parse(mode.name()), Some(mode));
        }
        assert_eq!(SchemaType::parse(None), Ok(SchemaType::Avro));
        assert_eq!(SchemaType::parse(Some("protobuf")), Ok(SchemaType::Protobuf));
        assert!(SchemaType::parse(Some("XML")).is_err());
    }
}
