//! Where the admin commands connect and how: `--brokers`, `-X key=value`
//! and `--profile FILE`, with librdkafka's property names (as kcat takes
//! them), so that one profile serves kcat, confluent-kafka and `floe`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context};

/// The default bootstrap address: a broker on this machine, on its default port.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";

/// Connection options every admin command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Bootstrap brokers, comma-separated [default: 127.0.0.1:9092, or
    /// `bootstrap.servers` from -X or the profile].
    #[arg(long, short = 'b', global = true, env = "FLOE_BROKERS", value_name = "HOST:PORT[,HOST:PORT]")]
    pub brokers: Option<String>,
    /// A client property, librdkafka's names: `-X security.protocol=SASL_SSL
    /// -X sasl.mechanism=SCRAM-SHA-256 -X sasl.username=alice -X sasl.password=...
    /// -X ssl.ca.location=ca.pem`. Repeatable; wins over the profile.
    #[arg(short = 'X', global = true, value_name = "KEY=VALUE")]
    pub properties: Vec<String>,
    /// A file of `key=value` lines (`#` comments), the same properties as -X:
    /// connection and security settings kept out of the shell history.
    #[arg(long, global = true, env = "FLOE_PROFILE", value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// How long to wait for a connection or a response, in milliseconds.
    #[arg(long, global = true, default_value_t = 10_000, value_name = "MS")]
    pub timeout_ms: u64,
}

impl ConnectArgs {
    /// The client properties: the profile's, then -X's over them.
    ///
    /// # Errors
    /// An unreadable profile, or a line or -X that is not `key=value`.
    pub fn properties(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut props = BTreeMap::new();
        if let Some(path) = &self.profile {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the profile {}", path.display()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let Some((k, v)) = line.split_once('=') else {
                    bail!("{}:{}: `{line}` is not key=value", path.display(), n + 1);
                };
                props.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        for p in &self.properties {
            let Some((k, v)) = p.split_once('=') else {
                bail!("-X {p}: not key=value (e.g. -X security.protocol=SSL)");
            };
            props.insert(k.trim().to_string(), v.to_string());
        }
        Ok(props)
    }

    /// The bootstrap addresses: --brokers, else `bootstrap.servers`, else the default.
    pub fn bootstrap(&self) -> Vec<String> {
        let from_props = self.properties().ok().and_then(|p| p.get("bootstrap.servers").cloned());
        let list = self.brokers.clone().or(from_props).unwrap_or_else(|| DEFAULT_BROKERS.to_string());
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    }
}
