//! The broker's small durable JSON files, read and written one way: the ACLs
//! (`acls.json`), SCRAM credentials, client quotas and dynamic broker configs.
//! Each is one document with a `version` this broker must know (1), written
//! whole with `floe_storage::write_atomically` (tmp, fsync, rename, directory
//! fsync), so a crash leaves the old file or the new one. Each store keeps its
//! own error type and messages; this module only says what went wrong.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The one layout version this broker reads and writes.
pub const VERSION: u32 = 1;

/// Why a file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Reading failed (not "it does not exist": that is `Ok(None)`).
    Io(std::io::Error),
    /// The file is not this layout: the parser's message, or `unknown version N`.
    Corrupt(String),
}

/// Reads `path` as a `T` whose version (`version_of`) must be [`VERSION`];
/// `Ok(None)` when the file does not exist.
///
/// # Errors
/// [`ReadError`].
pub fn read<T: DeserializeOwned>(
    path: &Path,
    version_of: impl Fn(&T) -> u32,
) -> Result<Option<T>, ReadError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let value: T = serde_json::from_slice(&bytes).map_err(|e| ReadError::Corrupt(e.to_string()))?;
    match version_of(&value) {
        VERSION => Ok(Some(value)),
        other => Err(ReadError::Corrupt(format!("unknown version {other}"))),
    }
}

/// Writes `value` to `path` as pretty JSON, durably and atomically.
///
/// # Errors
/// The serialization or I/O error.
pub fn write<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    floe_storage::write_atomically(path, &bytes).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, serde::Deserialize)]
    struct Doc {
        version: u32,
        names: Vec<String>,
    }

    #[test]
    fn a_written_file_reads_back_and_a_foreign_version_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("doc.json");
        assert!(matches!(read::<Doc>(&path, |d| d.version), Ok(None)));
        let doc = Doc { version: VERSION, names: vec!["a".into()] };
        write(&path, &doc).expect("write");
        assert_eq!(read::<Doc>(&path, |d| d.version).expect("read"), Some(doc));
        write(&path, &Doc { version: 2, names: vec![] }).expect("write");
        match read::<Doc>(&path, |d| d.version) {
            Err(ReadError::Corrupt(reason)) => assert_eq!(reason, "unknown version 2"),
            other => panic!("{other:?}"),
        }
        std::fs::write(&path, b"{not json").expect("write");
        assert!(matches!(read::<Doc>(&path, |d| d.version), Err(ReadError::Corrupt(_))));
    }
}
