//! SASL settings and mechanism names: which mechanisms each listener offers,
//! KIP-368 re-authentication, and the delay before a failed authentication
//! is answered.

use std::collections::BTreeMap;
use std::path::PathBuf;

// The mechanisms are floe-client's: outbound connections log in with them too.
pub use floe_client::SaslMechanism;

use crate::listeners::ListenerSpec;
use crate::raw_config::{get, parse, ConfigError};

/// The SASL settings.
#[derive(Debug, Clone)]
pub struct SaslSettings {
    /// `sasl.enabled.mechanisms`, overridden per listener by
    /// `listener.name.<name>.sasl.enabled.mechanisms`: listener name → mechanisms.
    pub enabled: BTreeMap<String, Vec<SaslMechanism>>,
    /// `connections.max.reauth.ms`; 0 never expires an authentication.
    pub max_reauth_ms: u64,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_delay_ms: u64,
    /// `floe.sasl.plain.users.file`.
    pub plain_users_file: Option<PathBuf>,
}

impl SaslSettings {
    /// Reads the SASL settings for `listeners` from the raw configuration.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] for an unknown mechanism.
    pub(crate) fn from_raw(
        raw: &BTreeMap<String, String>,
        listeners: &[ListenerSpec],
    ) -> Result<Self, ConfigError> {
        let default =
            parse_mechanisms("sasl.enabled.mechanisms", get(raw, "sasl.enabled.mechanisms"))?;
        let mut enabled = BTreeMap::new();
        for l in listeners {
            let key =
                format!("listener.name.{}.sasl.enabled.mechanisms", l.name.to_ascii_lowercase());
            let mechanisms = match raw.get(&key) {
                Some(text) => parse_mechanisms(&key, text)?,
                None => default.clone(),
            };
            enabled.insert(l.name.clone(), mechanisms);
        }
        Ok(SaslSettings {
            enabled,
            max_reauth_ms: parse(raw, "connections.max.reauth.ms")?,
            failed_delay_ms: parse(raw, "connection.failed.authentication.delay.ms")?,
            plain_users_file: match get(raw, "floe.sasl.plain.users.file").trim() {
                "" => None,
                p => Some(PathBuf::from(p)),
            },
        })
    }

    /// The mechanisms offered on listener `name`.
    pub fn mechanisms_of(&self, listener: &str) -> &[SaslMechanism] {
        self.enabled.get(listener).map(Vec::as_slice).unwrap_or(&[])
    }
}

fn parse_mechanisms(key: &str, text: &str) -> Result<Vec<SaslMechanism>, ConfigError> {
    text.split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|m| {
            SaslMechanism::from_name(&m.to_ascii_uppercase()).ok_or_else(|| {
                ConfigError::InvalidValue {
                    key: key.into(),
                    value: text.into(),
                    reason: format!(
                        "unknown SASL mechanism `{m}` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"
                    ),
                }
            })
        })
        .collect()
}
