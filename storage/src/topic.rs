//! `Topic`: a topic's identity (name, id), its partition logs, its config
//! overrides, and the metadata file (`topics/<name>.json`) that persists them.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::config::{ConfigEntry, LogConfig};
use crate::error::{Result, StorageError};
use crate::log::PartitionLog;

/// Longest legal topic name (Kafka's limit).
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Checks a topic name as Kafka does: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
///
/// # Errors
/// [`StorageError::InvalidTopic`] saying why.
pub fn validate_topic_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "the name is empty".to_string()
    } else if name == "." || name == ".." {
        "\".\" and \"..\" are not allowed".to_string()
    } else if name.len() > MAX_TOPIC_NAME_LEN {
        format!("the name is longer than {MAX_TOPIC_NAME_LEN} characters")
    } else if let Some(c) =
        name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        format!("character {c:?} is not one of [a-zA-Z0-9._-]")
    } else {
        return Ok(());
    };
    Err(StorageError::InvalidTopic { name: name.to_string(), reason })
}

/// The JSON persisted at `topics/<name>.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct TopicMetadata {
    pub(crate) version: u32,
    pub(crate) name: String,
    pub(crate) id: Uuid,
    pub(crate) partitions: i32,
    #[serde(default)]
    pub(crate) config: BTreeMap<String, String>,
}

#[derive(Debug)]
struct TopicState {
    partitions: Vec<Arc<PartitionLog>>,
    overrides: BTreeMap<String, String>,
    config: Arc<LogConfig>,
}

/// A topic: name, id, partition logs, config.
///
/// Partitions can be added and the config altered while requests use the
/// topic, so the changing parts sit behind an `RwLock`; readers take a
/// snapshot (`partitions()` clones the `Arc`s). Changes are made only by the
/// `LogManager`, after the metadata file is durable.
#[derive(Debug)]
pub struct Topic {
    name: String,
    id: Uuid,
    state: RwLock<TopicState>,
}

impl Topic {
    pub(crate) fn new(
        name: String,
        id: Uuid,
        partitions: Vec<Arc<PartitionLog>>,
        overrides: BTreeMap<String, String>,
        config: Arc<LogConfig>,
    ) -> Self {
        Self { name, id, state: RwLock::new(TopicState { partitions, overrides, config }) }
    }

    fn read(&self) -> RwLockReadGuard<'_, TopicState> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The topic id (Kafka's topic UUID).
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The partition logs, by index.
    pub fn partitions(&self) -> Vec<Arc<PartitionLog>> {
        self.read().partitions.clone()
    }

    /// One partition's log.
    pub fn partition(&self, index: i32) -> Option<Arc<PartitionLog>> {
        usize::try_from(index).ok().and_then(|i| self.read().partitions.get(i).cloned())
    }

    /// Number of partitions.
    pub fn partition_count(&self) -> i32 {
        self.read().partitions.len() as i32
    }

    /// The topic's config overrides, as set.
    pub fn overrides(&self) -> BTreeMap<String, String> {
        self.read().overrides.clone()
    }

    /// The effective config.
    pub fn config(&self) -> Arc<LogConfig> {
        self.read().config.clone()
    }

    /// Every config key with its effective value and whether it is a default (DescribeConfigs).
    pub fn describe_config(&self) -> Vec<ConfigEntry> {
        let st = self.read();
        st.config.describe(&st.overrides)
    }

    pub(crate) fn metadata(&self) -> TopicMetadata {
        let st = self.read();
        TopicMetadata {
            version: 1,
            name: self.name.clone(),
            id: self.id,
            partitions: st.partitions.len() as i32,
            config: st.overrides.clone(),
        }
    }

    pub(crate) fn add_partitions(&self, new: Vec<Arc<PartitionLog>>) {
        self.state.write().unwrap_or_else(PoisonError::into_inner).partitions.extend(new);
    }

    pub(crate) fn set_config(&self, overrides: BTreeMap<String, String>, config: Arc<LogConfig>) {
        let mut st = self.state.write().unwrap_or_else(PoisonError::into_inner);
        for p in &st.partitions {
            p.set_config(config.clone());
        }
        st.overrides = overrides;
        st.config = config;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names() {
        for ok in ["a", "A-b_c.1", &"x".repeat(249)] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a b", "a/b", "ü", &"x".repeat(250)] {
            assert!(
                matches!(validate_topic_name(bad), Err(StorageError::InvalidTopic { .. })),
                "{bad:?}"
            );
        }
    }
}
