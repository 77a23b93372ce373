//! Where the admin commands connect and how: `--brokers`, `-X key=value`
//! and `--profile FILE`, with librdkafka's property names (as kcat takes
//! them), so that one profile serves kcat, confluent-kafka and `floe`.
//!
//! Like librdkafka, the CLI refuses a property it does not know (with the
//! nearest known name) and a value outside a property's choices, as a usage
//! error (exit code 2): a typo such as `-X security.protocl=SSL` must not
//! quietly connect in plain text. The properties it uses are [`USED`];
//! [`IGNORED`] are librdkafka's tuning properties, accepted so that a kcat or
//! confluent-kafka profile works unchanged, and not used here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;

use super::admin::CliFailure;

/// The default bootstrap address: a broker on this machine, on its default port.
pub const DEFAULT_BROKERS: &str = "127.0.0.1:9092";

/// Connection options every admin command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Bootstrap brokers, comma-separated [default: 127.0.0.1:9092, or
    /// `bootstrap.servers` from -X or the profile].
    #[arg(
        long,
        short = 'b',
        global = true,
        env = "FLOE_BROKERS",
        value_name = "HOST:PORT[,HOST:PORT]"
    )]
    pub brokers: Option<String>,
    /// A client property, librdkafka's names: `-X security.protocol=SASL_SSL
    /// -X sasl.mechanism=SCRAM-SHA-256 -X sasl.username=alice -X sasl.password=...
    /// -X ssl.ca.location=ca.pem`. Repeatable; wins over the profile. An unknown
    /// property or a value outside a property's choices is refused (exit 2).
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
    /// An unreadable profile ([`CliFailure::Usage`] for everything else, exit
    /// code 2): a line or -X that is not `key=value`, a property neither
    /// [`USED`] nor [`IGNORED`], or a value outside the property's choices.
    pub fn properties(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut props = BTreeMap::new();
        if let Some(path) = &self.profile {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the profile {}", path.display()))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let at = format!("{}:{}", path.display(), n + 1);
                let Some((k, v)) = line.split_once('=') else {
                    return Err(
                        CliFailure::Usage(format!("{at}: `{line}` is not key=value")).into()
                    );
                };
                let (k, v) = (k.trim(), v.trim());
                check_property(k, v).map_err(|e| CliFailure::Usage(format!("{at}: {e}")))?;
                props.insert(k.to_string(), v.to_string());
            }
        }
        for p in &self.properties {
            let Some((k, v)) = p.split_once('=') else {
                return Err(CliFailure::Usage(format!(
                    "-X {p}: not key=value (e.g. -X security.protocol=SSL)"
                ))
                .into());
            };
            let k = k.trim();
            check_property(k, v).map_err(|e| CliFailure::Usage(format!("-X {e}")))?;
            props.insert(k.to_string(), v.to_string());
        }
        Ok(props)
    }

    /// The bootstrap addresses: --brokers, else `bootstrap.servers` (or
    /// librdkafka's older `metadata.broker.list`), else the default.
    pub fn bootstrap(&self) -> Vec<String> {
        let from_props = self.properties().ok().and_then(|p| {
            p.get("bootstrap.servers").or_else(|| p.get("metadata.broker.list")).cloned()
        });
        let list =
            self.brokers.clone().or(from_props).unwrap_or_else(|| DEFAULT_BROKERS.to_string());
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
    }
}

/// The properties the CLI uses, with the values each takes (`None`: any).
/// Names and values are librdkafka's; choices are matched without regard to case.
pub const USED: &[(&str, Option<&[&str]>)] = &[
    ("bootstrap.servers", None),
    ("metadata.broker.list", None),
    ("security.protocol", Some(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])),
    ("sasl.mechanism", Some(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])),
    ("sasl.mechanisms", Some(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])),
    ("sasl.username", None),
    ("sasl.password", None),
    ("ssl.ca.location", None),
    ("ssl.certificate.location", None),
    ("ssl.key.location", None),
    ("ssl.endpoint.identification.algorithm", Some(&["https", "none"])),
    // Not librdkafka's, but where confluent-kafka and kcat -s take the registry.
    ("schema.registry.url", None),
];

/// librdkafka properties that tune a client (timeouts, batching, logging,
/// a consumer's or producer's defaults): accepted so that a kcat or
/// confluent-kafka profile works unchanged, and not used by the CLI, whose
/// own flags say these things.
pub const IGNORED: &[&str] = &[
    "client.id",
    "client.rack",
    "client.software.name",
    "client.software.version",
    "debug",
    "log_level",
    "log.connection.close",
    "log.queue",
    "log.thread.name",
    "statistics.interval.ms",
    "api.version.request",
    "api.version.request.timeout.ms",
    "api.version.fallback.ms",
    "broker.version.fallback",
    "broker.address.family",
    "broker.address.ttl",
    "socket.timeout.ms",
    "socket.keepalive.enable",
    "socket.nagle.disable",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.connection.setup.timeout.ms",
    "socket.max.fails",
    "connections.max.idle.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "request.timeout.ms",
    "metadata.max.age.ms",
    "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.sparse",
    "message.max.bytes",
    "receive.message.max.bytes",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "group.id",
    "group.instance.id",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "isolation.level",
    "fetch.wait.max.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "check.crcs",
    "acks",
    "request.required.acks",
    "enable.idempotence",
    "compression.type",
    "compression.codec",
    "compression.level",
    "linger.ms",
    "queue.buffering.max.ms",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "batch.num.messages",
    "batch.size",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "message.send.max.retries",
    "retries",
    "partitioner",
];

/// `Ok` if `key` is a property the CLI takes and `value` one of its choices;
/// else what is wrong, naming the key and value typed and what would do.
fn check_property(key: &str, value: &str) -> Result<(), String> {
    if let Some((_, choices)) = USED.iter().find(|(k, _)| *k == key) {
        return match choices {
            Some(choices) if !choices.iter().any(|c| c.eq_ignore_ascii_case(value.trim())) => {
                Err(format!(
                    "{key}={value}: `{value}` is not a value of {key}; use {}",
                    choices.join(", ")
                ))
            }
            _ => Ok(()),
        };
    }
    if IGNORED.contains(&key) {
        return Ok(());
    }
    let known = USED.iter().map(|(k, _)| *k).chain(IGNORED.iter().copied());
    let nearest = closest(key, known);
    let hint = match nearest {
        Some(k) => format!(" (did you mean {k}?)"),
        None => format!(
            " (the CLI takes {})",
            USED.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
        ),
    };
    // A mistyped secret's name must not put the secret in a terminal's scrollback.
    let looks_secret = |k: &str| {
        ["pass", "secret", "token", "credential"].iter().any(|w| k.to_ascii_lowercase().contains(w))
    };
    let secret = looks_secret(key) || nearest.is_some_and(looks_secret);
    let shown = if secret { format!("{key}=(value hidden)") } else { format!("{key}={value}") };
    Err(format!("{shown}: unknown property `{key}`{hint}"))
}

/// The known name nearest to `typed`, if near enough to be a typo: the
/// shortest one it begins (`sasl.user` → `sasl.username`), else the one a few
/// edits away (the settings' did-you-mean).
fn closest<'a>(typed: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let typed_lower = typed.to_ascii_lowercase();
    let known: Vec<&str> = known.collect();
    if typed_lower.len() >= 4 {
        if let Some(k) =
            known.iter().filter(|k| k.starts_with(&typed_lower)).min_by_key(|k| k.len())
        {
            return Some(k);
        }
    }
    floe_storage::config::did_you_mean(typed, known)
}

/// Splits `key=value` (`-c`, `-s`, `-H`); `what` names the flag in the error.
pub fn key_value(text: &str, what: &str) -> anyhow::Result<(String, String)> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| {
            anyhow::anyhow!("{what} `{text}` is not KEY=VALUE (e.g. retention.ms=86400000)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(properties: &[&str]) -> ConnectArgs {
        ConnectArgs {
            brokers: None,
            properties: properties.iter().map(|p| (*p).to_string()).collect(),
            profile: None,
            timeout_ms: 1,
        }
    }

    fn usage(properties: &[&str]) -> String {
        let e = args(properties).properties().expect_err("refused");
        assert_eq!(super::super::admin::exit_code(&e), 2, "{e:#}");
        format!("{e:#}")
    }

    #[test]
    fn known_properties_pass_and_choices_ignore_case() {
        let props = args(&[
            "security.protocol=sasl_ssl",
            "sasl.mechanism=SCRAM-SHA-512",
            "client.id=x",
            "ssl.endpoint.identification.algorithm=none",
        ])
        .properties()
        .expect("accepted");
        assert_eq!(props["security.protocol"], "sasl_ssl");
        assert_eq!(args(&["metadata.broker.list=h:1"]).bootstrap(), vec!["h:1".to_string()]);
    }

    #[test]
    fn a_bad_value_names_the_key_the_value_and_the_choices() {
        let e = usage(&["security.protocol=FOO"]);
        assert!(
            e.contains("security.protocol=FOO")
                && e.contains("PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
            "{e}"
        );
        let e = usage(&["sasl.mechanism=bogus"]);
        assert!(e.contains("`bogus`") && e.contains("SCRAM-SHA-256"), "{e}");
        assert!(usage(&["security.protocol"]).contains("not key=value"));
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_nearest_known_one() {
        let e = usage(&["security.protocl=SSL"]);
        assert!(
            e.contains("unknown property `security.protocl`")
                && e.contains("did you mean security.protocol?"),
            "{e}"
        );
        assert!(usage(&["sasl.user=alice"]).contains("did you mean sasl.username?"));
        let e = usage(&["sasl.pasword=hunter2"]);
        assert!(e.contains("did you mean sasl.password?") && !e.contains("hunter2"), "{e}");
        let e = usage(&["completely.unrelated.thing=1"]);
        assert!(e.contains("the CLI takes bootstrap.servers"), "{e}");
    }
}
