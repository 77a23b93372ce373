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
    #[error("unknown setting `{key}` (from {source_name}).{} Every setting is listed in docs/configuration.md.", did_you_mean(.suggestion))]
    UnknownKey {
        /// The key.
        key: String,
        /// Where it was typed: the flag, the file or the environment variable.
        source_name: String,
        /// The known setting closest to it.
        suggestion: Option<String>,
    },
    /// A `FLOE_*` environment variable that names no setting.
    #[error("environment variable {name} matches no setting.{} Unset it, or name a setting in upper snake case: FLOE_LOG_SEGMENT_BYTES is log.segment.bytes (docs/configuration.md lists every setting).", .suggestion.as_ref().map(|s| format!(" Did you mean {s}?")).unwrap_or_default())]
    UnknownVariable {
        /// The variable's name.
        name: String,
        /// The variable a known setting has, closest to it.
        suggestion: Option<String>,
    },
    /// A value that does not parse for its key, with where it was typed.
    #[error("invalid value `{value}` for `{key}` (from {origin}): {reason}")]
    Setting {
        /// The key.
        key: String,
        /// The value as typed.
        value: String,
        /// Where it was typed: the flag, the file or the environment variable.
        origin: String,
        /// Why it was refused, and what is allowed.
        reason: String,
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

/// ` Did you mean `X`?` when there is a suggestion.
fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion.as_ref().map(|s| format!(" Did you mean `{s}`?")).unwrap_or_default()
}

pub(crate) fn get<'a>(raw: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    raw.get(key).map(String::as_str).unwrap_or("")
}

pub(crate) fn parse<T: std::str::FromStr>(
    raw: &BTreeMap<String, String>,
    key: &str,
) -> Result<T, ConfigError>
where
    T::Err: std::fmt::Display,
{
    let value = get(raw, key).trim();
    value.parse().map_err(|e: T::Err| ConfigError::InvalidValue {
        key: key.into(),
        value: value.into(),
        reason: expected::<T>().map_or_else(|| e.to_string(), |what| format!("expected {what}")),
    })
}

/// What a value of type `T` looks like, in words, for the types settings use.
fn expected<T>() -> Option<&'static str> {
    let name = std::any::type_name::<T>();
    Some(match name {
        "bool" => "true or false",
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number, 0 or more",
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        _ => return None,
    })
}
