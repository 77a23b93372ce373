//! ACL persistence: every binding in `DATA_DIR/acls.json`, read at startup.
//! In a cluster the bindings are etcd's ([`crate::cluster_configs`]), and the
//! file is this broker's copy of the last set it saw.
//!
//! A change is written to `acls.json.tmp`, fsynced, renamed over
//! `acls.json` and the directory fsynced before CreateAcls or DeleteAcls is
//! answered: an acknowledged change survives a crash, and a crash never
//! leaves a half-written file (the old or the new set is read back whole).
//!
//! File layout (JSON): `{"version": 1, "acls": [{"pattern": {"resource_type":
//! "Topic", "name": "orders-", "pattern_type": "Prefixed"}, "entry":
//! {"principal": "User:alice", "host": "*", "operation": "Write",
//! "permission": "Allow"}}]}`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::acl::{AclBinding, AclBindingFilter};

use crate::json_file::{self, ReadError};

/// File name under the data directory.
pub const ACLS_FILE: &str = "acls.json";

/// Why the ACL file could not be read or written.
#[derive(Debug, Error)]
pub enum AclStoreError {
    /// Reading or writing the file failed.
    #[error("ACL file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not what this version writes.
    #[error("ACL file {path} is not valid: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    acls: Vec<AclBinding>,
}

/// The bindings, shared by every request. Thread-safe; changes are durable
/// before they return and blocking (fsync): call them off the request workers.
#[derive(Debug)]
pub struct AclStore {
    path: PathBuf,
    /// What authorization reads: an immutable snapshot, swapped whole on a
    /// change, so a reader holds the lock only to clone an `Arc`.
    current: RwLock<Arc<BTreeSet<AclBinding>>>,
    /// Serializes changes across their file write, so two cannot interleave
    /// on disk. Never held across an `.await`.
    writer: Mutex<()>,
}

impl AclStore {
    /// Opens the store in `data_dir`, empty if the file does not exist.
    ///
    /// # Errors
    /// [`AclStoreError`] for an unreadable or invalid file: the broker then
    /// refuses to start rather than run with fewer ACLs than were granted.
    pub fn open(data_dir: &Path) -> Result<Self, AclStoreError> {
        let path = data_dir.join(ACLS_FILE);
        let acls = match json_file::read::<OnDisk>(&path, |d| d.version) {
            Ok(disk) => disk.map(|d| d.acls.into_iter().collect()).unwrap_or_default(),
            Err(ReadError::Corrupt(reason)) => return Err(AclStoreError::Corrupt { path, reason }),
            Err(ReadError::Io(source)) => return Err(AclStoreError::Io { path, source }),
        };
        Ok(AclStore { path, current: RwLock::new(Arc::new(acls)), writer: Mutex::new(()) })
    }

    /// The bindings now.
    pub fn snapshot(&self) -> Arc<BTreeSet<AclBinding>> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Adds `bindings` (an existing one is left as it is, as in Kafka) and
    /// makes the set durable.
    ///
    /// # Errors
    /// [`AclStoreError::Io`]; nothing changes then.
    pub fn add(&self, bindings: &[AclBinding]) -> Result<(), AclStoreError> {
        self.change(|set| {
            for b in bindings {
                set.insert(b.clone());
            }
        })
        .map(|_| ())
    }

    /// Removes the bindings each filter matches, durably; returns them per filter.
    ///
    /// # Errors
    /// [`AclStoreError::Io`]; nothing changes then.
    pub fn remove(
        &self,
        filters: &[AclBindingFilter],
    ) -> Result<Vec<Vec<AclBinding>>, AclStoreError> {
        self.change(|set| {
            // Each filter reports what it matched in the set before any removal,
            // so two overlapping filters both list a binding, as Kafka answers.
            let matched: Vec<Vec<AclBinding>> = filters
                .iter()
                .map(|f| set.iter().filter(|b| f.matches(b)).cloned().collect())
                .collect();
            for b in matched.iter().flatten() {
                set.remove(b);
            }
            matched
        })
    }

    /// Replaces every binding with `acls` (in a cluster: the set etcd holds), durably
    /// in the file, which is then this broker's cache of the cluster's set.
    ///
    /// # Errors
    /// [`AclStoreError::Io`]; nothing changes then.
    pub fn replace(&self, acls: BTreeSet<AclBinding>) -> Result<(), AclStoreError> {
        self.change(|set| *set = acls)
    }

    fn change<T>(
        &self,
        apply: impl FnOnce(&mut BTreeSet<AclBinding>) -> T,
    ) -> Result<T, AclStoreError> {
        let _writing = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = (*self.snapshot()).clone();
        let out = apply(&mut next);
        self.write(&next)?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(next);
        Ok(out)
    }

    fn write(&self, acls: &BTreeSet<AclBinding>) -> Result<(), AclStoreError> {
        let disk = OnDisk { version: json_file::VERSION, acls: acls.iter().cloned().collect() };
        json_file::write(&self.path, &disk)
            .map_err(|source| AclStoreError::Io { path: self.path.clone(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::super::acl::*;
    use super::*;

    fn binding(name: &str, pattern: i8, principal: &str, op: i8, perm: i8) -> AclBinding {
        AclBinding::from_wire(2, name, pattern, principal, "*", op, perm).expect("valid")
    }

    #[test]
    fn changes_survive_reopening_and_filters_remove_only_their_matches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = AclStore::open(dir.path()).expect("open");
        let a = binding("orders-", 4, "User:alice", 4, 3);
        let b = binding("payments", 3, "User:alice", 3, 3);
        let c = binding("payments", 3, "User:bob", 3, 2);
        store.add(&[a.clone(), b.clone(), c.clone(), a.clone()]).expect("add");
        let reopened = AclStore::open(dir.path()).expect("reopen");
        assert_eq!(reopened.snapshot().len(), 3);
        let alice_payments =
            AclBindingFilter::from_wire(2, Some("payments"), 3, Some("User:alice"), None, 1, 1)
                .expect("filter");
        assert_eq!(reopened.remove(&[alice_payments]).expect("remove"), vec![vec![b]]);
        let left: Vec<_> =
            AclStore::open(dir.path()).expect("reopen").snapshot().iter().cloned().collect();
        assert_eq!(left, vec![a, c]);
        assert!(!dir.path().join("acls.json.tmp").exists());
    }

    #[test]
    fn a_corrupt_file_refuses_to_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(ACLS_FILE), "{\"version\": 1, \"acls\": [").expect("write");
        assert!(matches!(AclStore::open(dir.path()), Err(AclStoreError::Corrupt { .. })));
    }
}
