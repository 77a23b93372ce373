//! `DecodeError`: why a registered schema cannot be given a typed decoder.
//!
//! Records that do not decode are not errors of this kind: they come back one by
//! one, with a message, in [`super::Decoded::rejected`].

use arrow_schema::ArrowError;

use crate::error::RegistryError;

/// How deep a schema may nest (records in records, lists of lists...): deeper
/// schemas are refused, so reading a value never recurses further.
pub const MAX_DEPTH: usize = 64;

/// Why a schema has no typed decoder (or, rarely, why a batch could not be built).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The schema text (or a reference's) does not parse.
    #[error("schema {id} does not parse: {reason}")]
    InvalidSchema {
        /// The schema's id.
        id: i32,
        /// The parser's message.
        reason: String,
    },
    /// A part of the schema has no Iceberg-compatible Arrow type.
    #[error("{path}: {reason}")]
    Unsupported {
        /// Where in the schema (field names from the top, dot-separated).
        path: String,
        /// What cannot be typed, and why.
        reason: String,
    },
    /// The schema nests deeper than [`MAX_DEPTH`] levels.
    #[error("{path}: nested deeper than {} levels", MAX_DEPTH)]
    TooDeep {
        /// Where the limit was reached.
        path: String,
    },
    /// A batch's variable-length column outgrew Arrow's 32-bit offsets.
    #[error("a batch column outgrew its offsets; decode fewer records at once")]
    TooLarge,
    /// The registry has no such schema, or not its references.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A bug: a mapping made a type no column handles.
    #[error("internal: {0}")]
    Internal(String),
    /// Arrow refused the arrays (a bug in a decoder).
    #[error("arrow: {0}")]
    Arrow(#[from] ArrowError),
}

impl DecodeError {
    pub(crate) fn unsupported(path: &str, reason: impl Into<String>) -> Self {
        DecodeError::Unsupported {
            path: if path.is_empty() { "(top level)".into() } else { path.to_string() },
            reason: reason.into(),
        }
    }
}

/// `parent.name`, or `name` at the top.
pub(crate) fn child_path(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}.{name}")
    }
}
