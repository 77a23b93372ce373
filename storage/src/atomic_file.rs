//! Atomic replacement of small files (topic metadata, checkpoints,
//! `meta.properties`): write `<name>.tmp`, fsync it, rename it over `<name>`,
//! fsync the directory.
//!
//! Durability promise: when [`write_atomically`] returns `Ok`, the new content
//! survives a crash and a reader never sees a half-written file — it sees
//! either the old content or the new one. A leftover `.tmp` is ignored by
//! readers and overwritten by the next write.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::error::{IoContext, Result};
use crate::failpoint;
use crate::file_names::tmp_file;

/// Replaces the content of `path` with `bytes`, durably and atomically.
///
/// # Errors
/// [`crate::StorageError::Io`] naming the step that failed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically_at(path, bytes, None)
}

/// The two failpoints of one atomic write: before the rename (the `.tmp` is
/// written and fsynced) and after it (before the directory fsync).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RenameFailpoints {
    pub(crate) before: &'static str,
    pub(crate) after: &'static str,
}

/// [`write_atomically`], with failpoints around the rename.
///
/// # Errors
/// As [`write_atomically`].
pub(crate) fn write_atomically_at(
    path: &Path,
    bytes: &[u8],
    failpoints: Option<RenameFailpoints>,
) -> Result<()> {
    let tmp = tmp_file(path);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .ctx("create", &tmp)?;
        f.write_all(bytes).ctx("write", &tmp)?;
        f.sync_all().ctx("fsync", &tmp)?;
    }
    if let Some(points) = failpoints {
        failpoint::check(points.before).ctx("rename into place", path)?;
    }
    fs::rename(&tmp, path).ctx("rename into place", path)?;
    if let Some(points) = failpoints {
        failpoint::check(points.after).ctx("fsync directory", path)?;
    }
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Fsyncs a directory, making file creations, renames and removals in it durable.
///
/// # Errors
/// [`crate::StorageError::Io`] if the directory cannot be opened or synced.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).ctx("fsync directory", dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        write_atomically(&p, b"one").unwrap();
        write_atomically(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert!(!tmp_file(&p).exists());
    }
}
