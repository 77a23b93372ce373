//! The raw settings map and the errors of reading it: what every module that
//! turns settings into its own (listeners, TLS, SASL, the authorizer) needs,
//! without depending on [`crate::config`], which depends on them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use thiserror::Error;

/// A setting that could not be understood.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The key is not a broker setting.
    #[error("unknown setting `{key}` (from {source_name})")]
    UnknownKey {
        /// The key.
        key: String,
        /// Which layer it came from.
        source_name: String,
    },
    /// The value does not parse for its key.
    #[error("invalid value `{value}` for `{key}`: {reason}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// The TOML file could not be read or parsed.
    #[error("cannot read config file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

pub(crate) fn get<'a>(raw: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    raw.get(key).map(String::as_str).unwrap_or("")
}

pub(crate) fn parse<T: std::str::FromStr>(raw: &BTreeMap<String, String>, key: &str) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    let value = get(raw, key).trim();
    value.parse().map_err(|e: T::Err| ConfigError::InvalidValue {
        key: key.into(),
        value: value.into(),
        reason: e.to_string(),
    })
}
