//! The SCRAM credential store: per user, per mechanism, salted and hashed,
//! in `DATA_DIR/scram-credentials.json`, plus optional PLAIN users from a file.
//!
//! In a cluster the SCRAM users are etcd's (`PREFIX/scram/<user>`, applied by
//! [`crate::cluster_configs`]) and the file is this broker's copy of them.
//!
//! AlterUserScramCredentials changes it; every change is written to a
//! temporary file, fsynced, renamed over the old one and the directory
//! fsynced before the request is answered, so an acknowledged change
//! survives a crash and a crash never leaves a half-written file.
//!
//! File layout (JSON): `{"version": 1, "users": {"alice": {"Sha256": {"salt":
//! B64, "iterations": 4096, "stored_key": B64, "server_key": B64}}}}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::scram::{ScramCredential, ScramMechanism};

use crate::json_file::{self, ReadError};

/// File name under the data directory.
pub const CREDENTIALS_FILE: &str = "scram-credentials.json";

/// Why the store could not be read or written.
#[derive(Debug, Error)]
pub enum CredentialError {
    /// Reading or writing the file failed.
    #[error("credential file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not what this version writes.
    #[error("credential file {path} is not valid: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct OnDisk {
    version: u32,
    users: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
}

/// SCRAM users: user → mechanism → credential.
pub type ScramUsers = BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>;

/// Users and their credentials. Thread-safe; writes are durable before they return.
#[derive(Debug)]
pub struct CredentialStore {
    path: PathBuf,
    /// Held across the file write so two changes cannot interleave on disk;
    /// never across an `.await` (callers run it on the blocking pool).
    users: Mutex<BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>>,
    /// PLAIN users from `floe.sasl.plain.users.file`: user → password.
    plain: BTreeMap<String, String>,
}

impl CredentialStore {
    /// Opens (or starts empty) the store in `data_dir`, and reads PLAIN users
    /// from `plain_users` (`user:password` lines; `#` comments) if given.
    ///
    /// # Errors
    /// [`CredentialError`] for an unreadable or invalid file.
    pub fn open(data_dir: &Path, plain_users: Option<&Path>) -> Result<Self, CredentialError> {
        let path = data_dir.join(CREDENTIALS_FILE);
        let users = match json_file::read::<OnDisk>(&path, |d| d.version) {
            Ok(disk) => disk.map(|d| d.users).unwrap_or_default(),
            Err(ReadError::Corrupt(reason)) => {
                return Err(CredentialError::Corrupt { path, reason })
            }
            Err(ReadError::Io(source)) => return Err(CredentialError::Io { path, source }),
        };
        let plain = match plain_users {
            Some(file) => parse_plain_users(file)?,
            None => BTreeMap::new(),
        };
        Ok(CredentialStore { path, users: Mutex::new(users), plain })
    }

    /// The credential of `user` for `mechanism`.
    pub fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential> {
        self.lock().get(user).and_then(|m| m.get(&mechanism)).cloned()
    }

    /// Whether `password` is `user`'s password: from the PLAIN users file if
    /// the user is there, else against any SCRAM credential of the user.
    /// Blocking (PBKDF2): call off the request workers.
    pub fn check_plain(&self, user: &str, password: &str) -> bool {
        if let Some(expected) = self.plain.get(user) {
            return super::scram::constant_time_eq(expected.as_bytes(), password.as_bytes());
        }
        let credentials: Vec<(ScramMechanism, ScramCredential)> = self
            .lock()
            .get(user)
            .map(|m| m.iter().map(|(k, v)| (*k, v.clone())).collect())
            .unwrap_or_default();
        credentials.iter().any(|(m, c)| c.matches_password(*m, password.as_bytes()))
    }

    /// Every user with SCRAM credentials, and (mechanism, iterations) of each.
    pub fn describe(&self) -> BTreeMap<String, Vec<(ScramMechanism, i32)>> {
        self.lock()
            .iter()
            .map(|(user, m)| (user.clone(), m.iter().map(|(k, c)| (*k, c.iterations)).collect()))
            .collect()
    }

    /// Applies deletions and upsertions and makes them durable. Returns, per
    /// deletion, whether the credential existed. Blocking (fsync).
    ///
    /// # Errors
    /// [`CredentialError::Io`]; nothing changes in memory then.
    pub fn alter(
        &self,
        deletions: &[(String, ScramMechanism)],
        upsertions: Vec<(String, ScramMechanism, ScramCredential)>,
    ) -> Result<Vec<bool>, CredentialError> {
        let mut users = self.lock();
        let mut next = users.clone();
        let existed = deletions
            .iter()
            .map(|(user, m)| {
                let Some(map) = next.get_mut(user) else { return false };
                let removed = map.remove(m).is_some();
                if map.is_empty() {
                    next.remove(user);
                }
                removed
            })
            .collect();
        for (user, m, credential) in upsertions {
            next.entry(user).or_default().insert(m, credential);
        }
        self.write(&next)?;
        *users = next;
        Ok(existed)
    }

    /// Every SCRAM user with its credentials.
    pub fn users(&self) -> ScramUsers {
        self.lock().clone()
    }

    /// Replaces every SCRAM user (in a cluster: with etcd's, see
    /// [`crate::cluster_configs`]; the file is then this broker's copy). Blocking (fsync).
    ///
    /// # Errors
    /// [`CredentialError::Io`]; nothing changes in memory then.
    pub fn replace(&self, next: ScramUsers) -> Result<(), CredentialError> {
        let mut users = self.lock();
        self.write(&next)?;
        *users = next;
        Ok(())
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>>
    {
        self.users.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(
        &self,
        users: &BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
    ) -> Result<(), CredentialError> {
        let io = |source| CredentialError::Io { path: self.path.clone(), source };
        let disk = OnDisk { version: 1, users: users.clone() };
        let bytes = serde_json::to_vec_pretty(&disk).map_err(|e| io(std::io::Error::other(e)))?;
        // tmp + fsync + rename + directory fsync, as for every small file the broker keeps.
        floe_storage::write_atomically(&self.path, &bytes).map_err(|e| io(std::io::Error::other(e)))
    }
}

fn parse_plain_users(file: &Path) -> Result<BTreeMap<String, String>, CredentialError> {
    let text = std::fs::read_to_string(file)
        .map_err(|source| CredentialError::Io { path: file.to_path_buf(), source })?;
    let mut users = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (user, password) = line.split_once(':').ok_or_else(|| CredentialError::Corrupt {
            path: file.to_path_buf(),
            reason: format!("line {} is not user:password", n + 1),
        })?;
        users.insert(user.trim().to_string(), password.to_string());
    }
    Ok(users)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    fn cred(m: ScramMechanism, password: &str) -> ScramCredential {
        let salted =
            m.salted_password(password.as_bytes(), b"salt", NonZeroU32::new(4096).unwrap());
        ScramCredential::from_salted_password(m, b"salt", 4096, &salted)
    }

    #[test]
    fn changes_survive_reopening_and_no_password_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = CredentialStore::open(dir.path(), None).unwrap();
        store
            .alter(
                &[],
                vec![(
                    "alice".into(),
                    ScramMechanism::Sha256,
                    cred(ScramMechanism::Sha256, "correct horse"),
                )],
            )
            .unwrap();
        let existed = store.alter(&[("bob".into(), ScramMechanism::Sha256)], vec![]).unwrap();
        assert_eq!(existed, vec![false]);
        let reopened = CredentialStore::open(dir.path(), None).unwrap();
        assert_eq!(
            reopened.scram("alice", ScramMechanism::Sha256),
            Some(cred(ScramMechanism::Sha256, "correct horse"))
        );
        assert!(reopened.check_plain("alice", "correct horse"));
        assert!(!reopened.check_plain("alice", "battery"));
        let text = std::fs::read_to_string(dir.path().join(CREDENTIALS_FILE)).unwrap();
        assert!(!text.contains("correct horse"));
        assert_eq!(
            reopened.alter(&[("alice".into(), ScramMechanism::Sha256)], vec![]).unwrap(),
            vec![true]
        );
        assert!(CredentialStore::open(dir.path(), None).unwrap().describe().is_empty());
    }

    #[test]
    fn plain_users_file_and_a_corrupt_store_file() {
        let dir = tempfile::tempdir().unwrap();
        let users = dir.path().join("users");
        std::fs::write(&users, "# comment\nadmin:s3cr:et\n").unwrap();
        let store = CredentialStore::open(dir.path(), Some(&users)).unwrap();
        assert!(store.check_plain("admin", "s3cr:et"));
        assert!(!store.check_plain("admin", "s3cr"));
        std::fs::write(dir.path().join(CREDENTIALS_FILE), "{not json").unwrap();
        assert!(matches!(
            CredentialStore::open(dir.path(), None),
            Err(CredentialError::Corrupt { .. })
        ));
    }
}
