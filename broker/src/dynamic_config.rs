//! Dynamic broker configs: the settings AlterConfigs and
//! IncrementalAlterConfigs may change on a BROKER resource while the broker
//! runs, as Kafka's `DynamicBrokerConfig`.
//!
//! Two dynamic layers sit over the static configuration (file, environment,
//! command line) and the built-in defaults: this broker's (resource name =
//! its node id) and the cluster-wide default (resource name ""). A key's
//! value is the first layer that sets it: DYNAMIC_BROKER_CONFIG,
//! DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG
//! (Kafka's precedence and DescribeConfigs sources).
//!
//! What can change ([`DYNAMIC_SETTINGS`]): the topic defaults (`log.*`,
//! `message.max.bytes`, `min.insync.replicas`), applied at once to every topic without an
//! override of the key; `max.connections` and `max.connections.per.ip`,
//! applied to the next connection accepted. Every other setting is
//! read-only: altering it is refused for the resource with Kafka's
//! INVALID_REQUEST "Cannot update these configs dynamically".
//!
//! # Durability
//! A change is written to `DATA_DIR/dynamic-broker-config.json` atomically
//! (`floe_storage::write_atomically`: tmp, fsync, rename, directory fsync)
//! before it is applied and acknowledged, and read back at startup.
//! Layout (JSON): `{"version": 1, "broker": {"log.retention.ms": "3600000"},
//! "cluster_default": {"max.connections": "500"}}`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use floe_storage::{LogConfig, LogManager};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::config::{LOG_DEFAULT_KEYS, SETTINGS};
use crate::json_file::{self, ReadError};
use crate::server::limits::ConnectionLimits;

/// File name under the data directory.
pub const DYNAMIC_CONFIG_FILE: &str = "dynamic-broker-config.json";

/// The broker settings that can change without a restart.
pub const DYNAMIC_SETTINGS: &[&str] = &[
    "log.segment.bytes",
    "log.roll.ms",
    "log.index.interval.bytes",
    "log.retention.ms",
    "log.retention.bytes",
    "log.flush.interval.messages",
    "log.flush.interval.ms",
    "log.message.timestamp.type",
    "log.cleanup.policy",
    "message.max.bytes",
    "min.insync.replicas",
    "max.connections",
    "max.connections.per.ip",
];

/// Which dynamic layer a BROKER resource names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This broker (resource name = its node id).
    Broker,
    /// The cluster-wide default (resource name "").
    ClusterDefault,
}

/// Kafka's `DescribeConfigsResponse.ConfigSource` for broker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on this broker at run time.
    DynamicBroker = 2,
    /// Set as the cluster-wide default at run time.
    DynamicDefaultBroker = 3,
    /// Set in the file, environment or command line.
    StaticBroker = 4,
    /// The built-in default.
    Default = 5,
}

/// Why a dynamic config change was refused or failed.
#[derive(Debug, Error)]
pub enum DynamicConfigError {
    /// Reading or writing the file failed.
    #[error("dynamic broker config file {path}: {reason}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// The file is not what this version writes.
    #[error("dynamic broker config file {path} is not valid: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The change itself is not acceptable (Kafka's INVALID_REQUEST).
    #[error("{0}")]
    Invalid(String),
}

/// The two dynamic layers, as persisted.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DynamicLayers {
    version: u32,
    /// This broker's settings.
    pub broker: BTreeMap<String, String>,
    /// The cluster-wide defaults.
    pub cluster_default: BTreeMap<String, String>,
}

impl DynamicLayers {
    fn layer(&self, scope: Scope) -> &BTreeMap<String, String> {
        match scope {
            Scope::Broker => &self.broker,
            Scope::ClusterDefault => &self.cluster_default,
        }
    }
}

/// The dynamic layers over the static configuration, and where they apply.
///
/// Thread-safe: readers clone an `Arc` snapshot; changes are serialized and
/// block on fsync, so call [`Self::alter`] off the request workers.
#[derive(Debug)]
pub struct DynamicBrokerConfig {
    path: PathBuf,
    /// Every setting's static value (defaults included), secrets masked.
    static_values: BTreeMap<String, String>,
    current: RwLock<Arc<DynamicLayers>>,
    writer: Mutex<()>,
    logs: Arc<LogManager>,
    limits: Arc<ConnectionLimits>,
}

impl DynamicBrokerConfig {
    /// Reads the dynamic layers from `data_dir` and applies them over
    /// `static_values` (the broker's effective static settings).
    ///
    /// # Errors
    /// An unreadable or invalid file, or stored values that no longer
    /// validate: the broker refuses to start rather than run with other
    /// settings than were acknowledged.
    pub fn open(
        data_dir: &Path,
        static_values: BTreeMap<String, String>,
        logs: Arc<LogManager>,
        limits: Arc<ConnectionLimits>,
    ) -> Result<Self, DynamicConfigError> {
        let path = data_dir.join(DYNAMIC_CONFIG_FILE);
        let layers = match json_file::read::<DynamicLayers>(&path, |l| l.version) {
            Ok(Some(layers)) => layers,
            Ok(None) => DynamicLayers { version: json_file::VERSION, ..Default::default() },
            Err(ReadError::Corrupt(reason)) => {
                return Err(DynamicConfigError::Corrupt { path, reason })
            }
            Err(ReadError::Io(e)) => {
                return Err(DynamicConfigError::Io { path, reason: e.to_string() })
            }
        };
        let config = Self {
            path,
            static_values,
            current: RwLock::new(Arc::new(layers.clone())),
            writer: Mutex::new(()),
            logs,
            limits,
        };
        if !layers.broker.is_empty() || !layers.cluster_default.is_empty() {
            let applied = config.applicable(&layers)?;
            config.apply(applied)?;
            tracing::info!(broker = ?layers.broker, cluster_default = ?layers.cluster_default, "dynamic broker configs applied");
        }
        Ok(config)
    }

    /// The dynamic layers now.
    pub fn layers(&self) -> Arc<DynamicLayers> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every setting's name, effective value and source.
    pub fn effective(&self) -> Vec<(String, String, ConfigSource)> {
        let layers = self.layers();
        self.static_values
            .keys()
            .map(|k| {
                let (value, source) = resolve(&layers, &self.static_values, k);
                (k.clone(), value, source)
            })
            .collect()
    }

    /// The values of `key` in every layer that has one, highest precedence
    /// first (DescribeConfigs synonyms).
    pub fn synonyms(&self, key: &str) -> Vec<(String, ConfigSource)> {
        let layers = self.layers();
        let mut out = Vec::new();
        if let Some(v) = layers.broker.get(key) {
            out.push((v.clone(), ConfigSource::DynamicBroker));
        }
        if let Some(v) = layers.cluster_default.get(key) {
            out.push((v.clone(), ConfigSource::DynamicDefaultBroker));
        }
        if let Some(v) = self.static_values.get(key) {
            let default = SETTINGS.iter().find(|s| s.key == key).map(|s| s.default);
            if default != Some(v.as_str()) {
                out.push((v.clone(), ConfigSource::StaticBroker));
            }
        }
        if let Some(default) = SETTINGS.iter().find(|s| s.key == key).map(|s| s.default) {
            out.push((default.to_string(), ConfigSource::Default));
        }
        out
    }

    /// Checks a new set of settings for `scope` (the whole layer, as
    /// AlterConfigs replaces it) without applying it.
    ///
    /// # Errors
    /// [`DynamicConfigError::Invalid`] naming the settings refused.
    pub fn validate(
        &self,
        scope: Scope,
        next: &BTreeMap<String, String>,
    ) -> Result<(), DynamicConfigError> {
        let unknown: Vec<&str> = next
            .keys()
            .map(String::as_str)
            .filter(|k| !SETTINGS.iter().any(|s| s.key == *k))
            .collect();
        if !unknown.is_empty() {
            return Err(DynamicConfigError::Invalid(format!(
                "Unknown broker configs: {}",
                unknown.join(", ")
            )));
        }
        let fixed: Vec<&str> =
            next.keys().map(String::as_str).filter(|k| !DYNAMIC_SETTINGS.contains(k)).collect();
        if !fixed.is_empty() {
            return Err(DynamicConfigError::Invalid(format!(
                "Cannot update these configs dynamically: Set({})",
                fixed.join(", ")
            )));
        }
        let mut layers = (*self.layers()).clone();
        *layer_mut(&mut layers, scope) = next.clone();
        self.applicable(&layers).map(|_| ())
    }

    /// Replaces the settings of `scope` with `next`: persisted, then applied.
    ///
    /// # Errors
    /// [`DynamicConfigError::Invalid`] as [`Self::validate`];
    /// [`DynamicConfigError::Io`] if the file cannot be written (nothing changes then).
    pub fn alter(
        &self,
        scope: Scope,
        next: BTreeMap<String, String>,
    ) -> Result<(), DynamicConfigError> {
        let _writing = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.validate(scope, &next)?;
        let mut layers = (*self.layers()).clone();
        *layer_mut(&mut layers, scope) = next;
        let applied = self.applicable(&layers)?;
        json_file::write(&self.path, &layers).map_err(|e| DynamicConfigError::Io {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(layers);
        self.apply(applied)
    }

    /// The current settings of `scope`.
    pub fn layer(&self, scope: Scope) -> BTreeMap<String, String> {
        self.layers().layer(scope).clone()
    }

    /// What `layers` would put in force: the topic defaults and the connection limits.
    fn applicable(&self, layers: &DynamicLayers) -> Result<Applied, DynamicConfigError> {
        let value = |key: &str| resolve(layers, &self.static_values, key).0;
        let mut topic_keys = BTreeMap::new();
        for (broker_key, topic_key) in LOG_DEFAULT_KEYS {
            topic_keys.insert(topic_key.to_string(), value(broker_key));
        }
        let log_defaults = LogConfig::default()
            .with_overrides(&topic_keys)
            .map_err(|e| DynamicConfigError::Invalid(e.to_string()))?;
        let positive = |key: &str| {
            let v = value(key);
            v.trim().parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                DynamicConfigError::Invalid(format!(
                    "Invalid value {v} for configuration {key}: must be a positive integer"
                ))
            })
        };
        Ok(Applied {
            log_defaults,
            max_connections: positive("max.connections")?,
            max_connections_per_ip: positive("max.connections.per.ip")?,
        })
    }

    fn apply(&self, applied: Applied) -> Result<(), DynamicConfigError> {
        self.limits.set(applied.max_connections, applied.max_connections_per_ip);
        self.logs
            .set_default_config(applied.log_defaults)
            .map_err(|e| DynamicConfigError::Invalid(e.to_string()))
    }
}

struct Applied {
    log_defaults: LogConfig,
    max_connections: usize,
    max_connections_per_ip: usize,
}

fn layer_mut(layers: &mut DynamicLayers, scope: Scope) -> &mut BTreeMap<String, String> {
    match scope {
        Scope::Broker => &mut layers.broker,
        Scope::ClusterDefault => &mut layers.cluster_default,
    }
}

/// `key`'s value and source: this broker's dynamic value, the cluster
/// default, the static setting, or the built-in default.
fn resolve(
    layers: &DynamicLayers,
    static_values: &BTreeMap<String, String>,
    key: &str,
) -> (String, ConfigSource) {
    if let Some(v) = layers.broker.get(key) {
        return (v.clone(), ConfigSource::DynamicBroker);
    }
    if let Some(v) = layers.cluster_default.get(key) {
        return (v.clone(), ConfigSource::DynamicDefaultBroker);
    }
    let default = SETTINGS.iter().find(|s| s.key == key).map(|s| s.default);
    match static_values.get(key) {
        Some(v) if default == Some(v.as_str()) => (v.clone(), ConfigSource::Default),
        Some(v) => (v.clone(), ConfigSource::StaticBroker),
        None => (default.unwrap_or_default().to_string(), ConfigSource::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(
        dir: &Path,
        logs: Arc<LogManager>,
        limits: Arc<ConnectionLimits>,
    ) -> DynamicBrokerConfig {
        let mut statics: BTreeMap<String, String> =
            SETTINGS.iter().map(|s| (s.key.to_string(), s.default.to_string())).collect();
        statics.insert("log.retention.ms".into(), "1000".into());
        DynamicBrokerConfig::open(dir, statics, logs, limits).expect("open")
    }

    #[test]
    fn layers_resolve_in_kafkas_order_persist_and_apply() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = Arc::new(LogManager::open(dir.path(), LogConfig::default()).expect("logs"));
        logs.create_topic("t", 1, BTreeMap::new()).expect("topic");
        let limits = ConnectionLimits::new(10, 10);
        let dynamic = open(dir.path(), logs.clone(), limits.clone());
        let source = |d: &DynamicBrokerConfig, key: &str| {
            d.effective().into_iter().find(|(k, _, _)| k == key).map(|(_, v, s)| (v, s))
        };
        assert_eq!(
            source(&dynamic, "log.retention.ms"),
            Some(("1000".into(), ConfigSource::StaticBroker))
        );
        assert_eq!(source(&dynamic, "log.roll.ms").map(|s| s.1), Some(ConfigSource::Default));

        dynamic
            .alter(
                Scope::ClusterDefault,
                [("log.retention.ms".to_string(), "2000".to_string())].into(),
            )
            .expect("default");
        assert_eq!(
            source(&dynamic, "log.retention.ms"),
            Some(("2000".into(), ConfigSource::DynamicDefaultBroker))
        );
        dynamic
            .alter(
                Scope::Broker,
                [
                    ("log.retention.ms".to_string(), "3000".to_string()),
                    ("max.connections".to_string(), "1".to_string()),
                ]
                .into(),
            )
            .expect("broker");
        assert_eq!(
            source(&dynamic, "log.retention.ms"),
            Some(("3000".into(), ConfigSource::DynamicBroker))
        );
        assert_eq!(
            logs.topic("t").expect("t").config().retention_ms,
            3000,
            "applied to a topic without an override"
        );
        let _held = limits.admit("127.0.0.1".parse().expect("ip")).expect("first");
        assert!(
            limits.admit("127.0.0.2".parse().expect("ip")).is_err(),
            "max.connections=1 in force"
        );
        let synonyms: Vec<ConfigSource> =
            dynamic.synonyms("log.retention.ms").into_iter().map(|s| s.1).collect();
        assert_eq!(
            synonyms,
            vec![
                ConfigSource::DynamicBroker,
                ConfigSource::DynamicDefaultBroker,
                ConfigSource::StaticBroker,
                ConfigSource::Default
            ]
        );

        let refused = dynamic
            .alter(Scope::Broker, [("log.dirs".to_string(), "/elsewhere".to_string())].into());
        assert!(
            matches!(refused, Err(DynamicConfigError::Invalid(m)) if m.contains("Cannot update these configs dynamically"))
        );
        assert!(dynamic
            .validate(Scope::Broker, &[("log.retention.ms".to_string(), "soon".to_string())].into())
            .is_err());
        assert!(dynamic
            .validate(Scope::Broker, &[("max.connections".to_string(), "0".to_string())].into())
            .is_err());

        drop(dynamic);
        let limits = ConnectionLimits::new(10, 10);
        let reopened = open(dir.path(), logs.clone(), limits.clone());
        assert_eq!(
            source(&reopened, "log.retention.ms"),
            Some(("3000".into(), ConfigSource::DynamicBroker))
        );
        assert_eq!(
            limits.limit(crate::server::limits::Refusal::MaxConnections),
            1,
            "reapplied at startup"
        );
    }
}
