//! What the console runs with: its [`Settings`] (taken from the broker's),
//! the broker it reaches as a client ([`BrokerTarget`]), and the state every
//! request and sampler shares ([`Console`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use floe_broker::config::BrokerConfig;
use floe_broker::listeners::SecurityProtocol;
use floe_broker::security::sasl::SaslMechanism;
use floe_broker::security::scram::ScramMechanism;
use floe_broker::security::tls::ClientAuth;

use super::{history, session};
use crate::cli::connect::ConnectArgs;

/// Where and how the console reaches its broker.
#[derive(Debug, Clone)]
pub struct BrokerTarget {
    /// `host:port` of the listener.
    pub bootstrap: String,
    /// Its security protocol.
    pub protocol: SecurityProtocol,
    /// The SASL mechanisms to log in with, in the order tried (SCRAM-SHA-256,
    /// SCRAM-SHA-512, PLAIN: those the listener enables); empty when it needs no SASL.
    pub mechanisms: Vec<&'static str>,
    /// TLS client properties (librdkafka's names), when the listener uses TLS.
    pub tls: Vec<(String, String)>,
}

impl BrokerTarget {
    /// Whether a person must log in (the listener needs SASL).
    pub fn login_required(&self) -> bool {
        !self.mechanisms.is_empty()
    }

    /// The admin CLI's connection options for this listener, logged in as
    /// `login` (user, password, mechanism).
    pub fn connect_args(&self, login: Option<(&str, &str, &str)>) -> ConnectArgs {
        let mut properties = vec![format!("security.protocol={}", self.protocol.name())];
        for (k, v) in &self.tls {
            properties.push(format!("{k}={v}"));
        }
        if let Some((user, password, mechanism)) = login.filter(|_| self.login_required()) {
            properties.push(format!("sasl.mechanism={mechanism}"));
            properties.push(format!("sasl.username={user}"));
            properties.push(format!("sasl.password={password}"));
        }
        ConnectArgs {
            brokers: Some(self.bootstrap.clone()),
            properties,
            profile: None,
            timeout_ms: 10_000,
        }
    }
}

/// What the console takes from the broker's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `floe.console.listen`.
    pub listen: SocketAddr,
    /// `floe.console.read-only`.
    pub read_only: bool,
    /// `floe.console.bench-reports-dir`.
    pub bench_dir: Option<PathBuf>,
    /// The broker's listener the console connects to.
    pub broker: BrokerTarget,
    /// `host:port` of the broker's Prometheus endpoint (`metrics.listen`), if on.
    pub metrics: Option<String>,
    /// `http://host:port` of the built-in Schema Registry, if on (plain HTTP only).
    pub schema_registry: Option<String>,
    /// The Iceberg catalog and namespace the broker tiers into.
    pub catalog: floe_tiering::CatalogConfig,
    /// `floe.iceberg.namespace`.
    pub namespace: String,
    /// `http://host:port` of the Iceberg REST catalog, if on.
    pub iceberg_rest: Option<String>,
}

/// `addr` as a client dials it: a wildcard bind is this machine.
fn dialable(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        ip => ip,
    };
    SocketAddr::new(ip, addr.port()).to_string()
}

impl Settings {
    /// The console's settings, or `None` when `floe.console.listen` is empty.
    ///
    /// # Errors
    /// No listener the console can reach (port 0, or TLS without a truststore).
    pub fn from_config(config: &BrokerConfig) -> anyhow::Result<Option<Settings>> {
        let Some(listen) = config.console_listen else { return Ok(None) };
        let plain = config.listeners.iter().find(|l| {
            matches!(l.protocol, SecurityProtocol::Plaintext | SecurityProtocol::SaslPlaintext)
        });
        let listener = plain
            .or_else(|| config.listeners.first())
            .context("the broker has no listener for the console to connect to")?;
        if listener.bind.port() == 0 {
            anyhow::bail!(
                "floe.console.listen: the console connects to listener {} but it binds port 0 (any free port), which the console cannot know; give the listener a port, or set floe.console.listen to empty",
                listener.name
            );
        }
        let mut tls = Vec::new();
        if matches!(listener.protocol, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl) {
            let ca = config.tls.truststore.as_ref().with_context(|| {
                format!("floe.console.listen: the console connects to TLS listener {} and needs ssl.truststore.location (the CA the broker's certificate chains to)", listener.name)
            })?;
            tls.push(("ssl.ca.location".to_string(), ca.display().to_string()));
            tls.push(("ssl.endpoint.identification.algorithm".to_string(), "none".to_string()));
            if config.tls.client_auth != ClientAuth::None {
                // On SSL without SASL the principal is the certificate's: with the
                // broker's own, every visitor would act as the broker (a super user).
                if listener.protocol == SecurityProtocol::Ssl {
                    anyhow::bail!(
                        "floe.console.listen: the console would reach listener {} (SSL with ssl.client.auth) with the broker's own certificate, so every visitor would act as the broker's principal; \
                         add a PLAINTEXT, SASL_PLAINTEXT or SASL_SSL listener (with SASL the console logs each user in), or set floe.console.listen to empty",
                        listener.name
                    );
                }
                if let (Some(cert), Some(key)) = (&config.tls.certificate, &config.tls.key) {
                    tls.push(("ssl.certificate.location".to_string(), cert.display().to_string()));
                    tls.push(("ssl.key.location".to_string(), key.display().to_string()));
                }
            }
        }
        let mechanisms = if matches!(
            listener.protocol,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        ) {
            let enabled = config.sasl.enabled.get(&listener.name).cloned().unwrap_or_default();
            let preferred = [
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
                SaslMechanism::Plain,
            ];
            let chosen: Vec<&'static str> = preferred
                .into_iter()
                .filter(|m| enabled.contains(m))
                .map(SaslMechanism::name)
                .collect();
            if chosen.is_empty() {
                anyhow::bail!("floe.console.listen: listener {} enables no SASL mechanism the console speaks (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN)", listener.name);
            }
            chosen
        } else {
            Vec::new()
        };
        let tiering = &config.tiering;
        Ok(Some(Settings {
            listen,
            read_only: config.console_read_only,
            bench_dir: config.console_bench_reports_dir.clone(),
            broker: BrokerTarget {
                bootstrap: dialable(listener.bind),
                protocol: listener.protocol,
                mechanisms,
                tls,
            },
            metrics: config.metrics_listen.map(dialable),
            schema_registry: config
                .schema_registry_listen
                .filter(|_| !config.schema_registry_tls)
                .map(|a| format!("http://{}", dialable(a))),
            catalog: tiering.catalog.catalog_config(&config.data_dir, &tiering.catalog_name),
            namespace: tiering.namespace.clone(),
            iceberg_rest: config.iceberg_rest_listen.map(|a| format!("http://{}", dialable(a))),
        }))
    }
}

/// The console's shared state.
pub struct Console {
    /// Its settings.
    pub settings: Settings,
    /// Live sessions.
    pub sessions: session::Sessions,
    /// Samples of the broker's metrics.
    pub metrics: history::MetricsHistory,
    /// Samples of every group's lag.
    pub lag: history::LagHistory,
}

#[cfg(test)]
mod tests {
    use super::*;
    use floe_broker::config::{ConfigBuilder, Layer};

    fn settings(pairs: &[(&str, &str)]) -> anyhow::Result<Option<Settings>> {
        let mut b = ConfigBuilder::new();
        for (k, v) in pairs {
            b.set(k, *v, Layer::CommandLine)?;
        }
        Settings::from_config(&b.build()?)
    }

    #[test]
    fn the_console_prefers_a_plaintext_listener_and_never_acts_as_the_brokers_certificate() {
        let both = settings(&[
            ("listeners", "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"),
            ("ssl.client.auth", "required"),
            ("ssl.truststore.location", "/ca.pem"),
        ]);
        let s = both.expect("a plaintext listener is usable").expect("console on by default");
        assert_eq!(s.broker.bootstrap, "127.0.0.1:9092");
        let only_mtls = settings(&[
            ("listeners", "SSL://127.0.0.1:9093"),
            ("ssl.client.auth", "required"),
            ("ssl.truststore.location", "/ca.pem"),
        ]);
        let err = only_mtls.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("every visitor would act as the broker"), "{err}");
        assert!(settings(&[("floe.console.listen", "")]).expect("off").is_none());
    }
}
