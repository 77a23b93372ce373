//! Client quota persistence: every configured quota in
//! `DATA_DIR/client-quotas.json`, read at startup.
//!
//! A change is written to `client-quotas.json.tmp`, fsynced, renamed over
//! the file and the directory fsynced before AlterClientQuotas is answered
//! (`floe_storage::write_atomically`), so an acknowledged change survives a
//! crash and a crash never leaves half a file.
//!
//! File layout (JSON): `{"version": 1, "quotas": [{"entity": [["user",
//! "alice"], ["client-id", null]], "values": {"producer_byte_rate":
//! 102400.0}}]}`: each entity as Kafka's (type, name) pairs, a null name
//! being the default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::entity::{EntityName, QuotaEntity, CLIENT_ID, USER};

use crate::json_file::{self, ReadError};

/// File name under the data directory.
pub const QUOTAS_FILE: &str = "client-quotas.json";

/// Every configured quota: entity → key → value.
pub type QuotaSet = BTreeMap<QuotaEntity, BTreeMap<String, f64>>;

/// Why the quota file could not be read or written.
#[derive(Debug, Error)]
pub enum QuotaStoreError {
    /// Reading or writing the file failed.
    #[error("client quota file {path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The file is not what this version writes.
    #[error("client quota file {path} is not valid: {reason}")]
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
    quotas: Vec<StoredQuota>,
}

#[derive(Debug, Serialize, Deserialize)]
struct StoredQuota {
    entity: Vec<(String, Option<String>)>,
    values: BTreeMap<String, f64>,
}

/// The configured quotas, shared by every request. Thread-safe; changes are
/// durable before they return and block on fsync: call them off the request workers.
#[derive(Debug)]
pub struct QuotaStore {
    path: PathBuf,
    /// An immutable snapshot swapped whole on a change: readers clone an `Arc`.
    current: RwLock<Arc<QuotaSet>>,
    /// Serializes changes across their file write. Never held across an `.await`.
    writer: Mutex<()>,
}

impl QuotaStore {
    /// Opens the store in `data_dir`, empty if the file does not exist.
    ///
    /// # Errors
    /// [`QuotaStoreError`] for an unreadable or invalid file: the broker
    /// refuses to start rather than run without the quotas it acknowledged.
    pub fn open(data_dir: &Path) -> Result<Self, QuotaStoreError> {
        let path = data_dir.join(QUOTAS_FILE);
        let corrupt = |reason: String| QuotaStoreError::Corrupt { path: path.clone(), reason };
        let set = match json_file::read::<OnDisk>(&path, |d| d.version) {
            Ok(Some(disk)) => {
                let mut set = QuotaSet::new();
                for q in disk.quotas {
                    let mut entity = QuotaEntity { user: None, client_id: None };
                    for (kind, name) in q.entity {
                        let name = EntityName::from_wire(name.as_deref());
                        match kind.as_str() {
                            USER => entity.user = Some(name),
                            CLIENT_ID => entity.client_id = Some(name),
                            other => return Err(corrupt(format!("unknown entity type {other}"))),
                        }
                    }
                    set.insert(entity, q.values);
                }
                set
            }
            Ok(None) => QuotaSet::new(),
            Err(ReadError::Corrupt(reason)) => return Err(corrupt(reason)),
            Err(ReadError::Io(e)) => {
                return Err(QuotaStoreError::Io { path, reason: e.to_string() })
            }
        };
        Ok(Self { path, current: RwLock::new(Arc::new(set)), writer: Mutex::new(()) })
    }

    /// The quotas now.
    pub fn snapshot(&self) -> Arc<QuotaSet> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Applies `change` to a copy of the set and makes the result durable,
    /// then current. Returns what `change` returned and the new set.
    ///
    /// # Errors
    /// [`QuotaStoreError::Io`]; nothing changes then.
    pub fn change<T>(
        &self,
        change: impl FnOnce(&mut QuotaSet) -> T,
    ) -> Result<(T, Arc<QuotaSet>), QuotaStoreError> {
        let _writing = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = (*self.snapshot()).clone();
        let out = change(&mut next);
        next.retain(|_, values| !values.is_empty());
        self.write(&next)?;
        let next = Arc::new(next);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = next.clone();
        Ok((out, next))
    }

    fn write(&self, set: &QuotaSet) -> Result<(), QuotaStoreError> {
        let quotas = set
            .iter()
            .map(|(entity, values)| {
                let mut parts = Vec::new();
                if let Some(user) = &entity.user {
                    parts.push((USER.to_string(), user.to_wire().map(str::to_string)));
                }
                if let Some(client) = &entity.client_id {
                    parts.push((CLIENT_ID.to_string(), client.to_wire().map(str::to_string)));
                }
                StoredQuota { entity: parts, values: values.clone() }
            })
            .collect();
        json_file::write(&self.path, &OnDisk { version: json_file::VERSION, quotas })
            .map_err(|e| QuotaStoreError::Io { path: self.path.clone(), reason: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_survive_reopening_and_empty_entities_vanish() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = QuotaStore::open(dir.path()).expect("open");
        let alice = QuotaEntity {
            user: Some(EntityName::Named("alice".into())),
            client_id: Some(EntityName::Default),
        };
        let clients = QuotaEntity { user: None, client_id: Some(EntityName::Default) };
        store
            .change(|set| {
                set.entry(alice.clone()).or_default().insert("producer_byte_rate".into(), 1024.0);
                set.entry(clients.clone()).or_default().insert("request_percentage".into(), 50.0);
            })
            .expect("change");
        let reopened = QuotaStore::open(dir.path()).expect("reopen");
        assert_eq!(
            reopened.snapshot().get(&alice).and_then(|v| v.get("producer_byte_rate")),
            Some(&1024.0)
        );
        reopened.change(|set| set.get_mut(&clients).map(|v| v.clear())).expect("remove");
        assert!(!QuotaStore::open(dir.path()).expect("reopen").snapshot().contains_key(&clients));
    }
}
