//! What this broker presents when it connects to another (replica fetchers,
//! transaction markers): the inter-broker listener and its protocol, the TLS
//! client configuration, and the SASL mechanism and credentials, by Kafka's
//! setting names.
//!
//! [`InterBrokerSettings`] is read with the rest of the configuration and
//! refuses, at startup, a clustered broker whose inter-broker listener needs
//! TLS without `ssl.truststore.location` (Kafka falls back to the JVM's
//! default truststore; Floe has none) or SASL without credentials.
//! [`load`] turns them into what connections use, a
//! [`floe_client::ClientSecurity`]: the loaded `rustls` client configuration
//! and the credentials ([`for_client`] does the same for the command-line
//! client's properties). The password is never in a `Debug` output or a log
//! line.

use std::collections::BTreeMap;
use std::sync::Arc;

use floe_client::tls::TlsClientSettings;
use floe_client::{ClientSecurity, SaslCredentials};

use super::sasl::SaslMechanism;
use super::tls::{TlsError, TlsSettings};
use crate::listeners::{ListenerSpec, SecurityProtocol};
use crate::raw_config::{get, ConfigError};

/// The inter-broker client settings.
#[derive(Debug, Clone)]
pub struct InterBrokerSettings {
    /// `inter.broker.listener.name`, resolved: the listener whose endpoint in
    /// each broker's registration this broker connects to (the first listener
    /// when the setting is empty).
    pub listener: String,
    /// That listener's security protocol on this broker.
    pub protocol: SecurityProtocol,
    /// `ssl.endpoint.identification.algorithm`: `https` checks the peer's
    /// certificate against the host connected to; empty does not.
    pub verify_hostname: bool,
    /// `sasl.mechanism.inter.broker.protocol`.
    pub mechanism: SaslMechanism,
    /// The credentials of `mechanism`, when the listener uses SASL and the
    /// broker is in a cluster.
    pub credentials: Option<SaslCredentials>,
}

impl InterBrokerSettings {
    /// Reads the inter-broker settings. `clustered`: whether this broker has
    /// peers at all; a broker alone needs neither a truststore nor credentials.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`]: an unknown listener, mechanism or
    /// identification algorithm; in a cluster, a TLS inter-broker listener
    /// without `ssl.truststore.location`, a SASL one without usable JAAS credentials.
    pub(crate) fn from_raw(
        raw: &BTreeMap<String, String>,
        listeners: &[ListenerSpec],
        clustered: bool,
    ) -> Result<Self, ConfigError> {
        let invalid = |key: &str, value: &str, reason: String| ConfigError::InvalidValue {
            key: key.into(),
            value: value.into(),
            reason,
        };
        let named = get(raw, "inter.broker.listener.name").trim();
        let spec = if named.is_empty() {
            listeners.first()
        } else {
            listeners.iter().find(|l| l.name.eq_ignore_ascii_case(named))
        };
        let (listener, protocol) = match spec {
            Some(l) => (l.name.clone(), l.protocol),
            None if clustered => {
                return Err(invalid(
                    "inter.broker.listener.name",
                    named,
                    "no listener of this broker has that name".into(),
                ))
            }
            // Alone, the setting names nothing this broker connects to.
            None => (named.to_string(), SecurityProtocol::Plaintext),
        };
        let algorithm = get(raw, "ssl.endpoint.identification.algorithm").trim();
        let verify_hostname = match algorithm.to_ascii_lowercase().as_str() {
            "https" => true,
            "" => false,
            _ => {
                return Err(invalid(
                    "ssl.endpoint.identification.algorithm",
                    algorithm,
                    "expected `https` or empty".into(),
                ))
            }
        };
        let mechanism_name = get(raw, "sasl.mechanism.inter.broker.protocol").trim();
        let mechanism = SaslMechanism::from_name(&mechanism_name.to_ascii_uppercase()).ok_or_else(|| {
            invalid("sasl.mechanism.inter.broker.protocol", mechanism_name, "Floe speaks PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 between brokers (no GSSAPI)".into())
        })?;
        if clustered && protocol.uses_tls() && get(raw, "ssl.truststore.location").trim().is_empty()
        {
            return Err(invalid(
                "ssl.truststore.location",
                "",
                format!("the inter-broker listener {listener} is {protocol}: brokers check each other's certificates against this PEM file of CAs (Floe has no default truststore)"),
            ));
        }
        let credentials = if clustered && protocol.uses_sasl() {
            let scoped = format!(
                "listener.name.{}.{}.sasl.jaas.config",
                listener.to_ascii_lowercase(),
                mechanism.name().to_ascii_lowercase()
            );
            let (key, text) = match raw.get(&scoped).filter(|t| !t.trim().is_empty()) {
                Some(text) => (scoped.as_str(), text.as_str()),
                None => ("sasl.jaas.config", get(raw, "sasl.jaas.config")),
            };
            if text.trim().is_empty() {
                return Err(invalid(
                    &scoped,
                    "",
                    format!("the inter-broker listener {listener} is {protocol}: set this (or sasl.jaas.config) to the {} login of this broker", mechanism.name()),
                ));
            }
            // The value is a secret: the error never repeats it.
            Some(parse_jaas(text).map_err(|reason| invalid(key, "****", reason.into()))?)
        } else {
            None
        };
        Ok(InterBrokerSettings { listener, protocol, verify_hostname, mechanism, credentials })
    }
}

/// `username` and `password` from a JAAS line such as
/// `org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="secret";`.
/// Values may be quoted (`\"` and `\\` escape inside quotes) or bare; other options are ignored.
fn parse_jaas(text: &str) -> Result<SaslCredentials, &'static str> {
    let text = text.trim();
    let body = text.strip_suffix(';').unwrap_or(text);
    let mut words = body.splitn(3, char::is_whitespace);
    let _module = words.next().filter(|m| !m.is_empty()).ok_or("no login module")?;
    let flag = words.next().unwrap_or("");
    if !matches!(flag, "required" | "requisite" | "sufficient" | "optional") {
        return Err("expected `LoginModule required key=\"value\" ...;`");
    }
    let mut options: BTreeMap<String, String> = BTreeMap::new();
    let mut rest = words.next().unwrap_or("").trim_start();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').ok_or("an option without `=`")?;
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err("an option name is empty or holds spaces");
        }
        let after = after.trim_start();
        let (value, remaining) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next().ok_or("a quoted value ends in `\\`")?.1),
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end.ok_or("an unterminated quoted value")?..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        options.insert(key.to_string(), value);
        rest = remaining.trim_start();
    }
    let username =
        options.remove("username").filter(|u| !u.is_empty()).ok_or("no username option")?;
    let password = options.remove("password").ok_or("no password option")?;
    Ok(SaslCredentials { username, password })
}

/// What this broker presents to the others, as `settings` say: loads the
/// truststore, this broker's certificate and key (presented to leaders that
/// ask for client certificates) when the inter-broker listener uses TLS.
/// Blocking file reads: call at startup.
///
/// # Errors
/// [`TlsError`] naming the file or setting at fault.
pub fn load(settings: &InterBrokerSettings, tls: &TlsSettings) -> Result<ClientSecurity, TlsError> {
    let tls_config = if settings.protocol.uses_tls() {
        Some(Arc::new(client_tls(tls, settings.verify_hostname).client_config()?))
    } else {
        None
    };
    let sasl = settings.credentials.clone().map(|c| (settings.mechanism, c));
    Ok(ClientSecurity::new(tls_config, sasl))
}

/// What a command-line client (`floe topic ...`) presents, from librdkafka's
/// property names, as `-X key=value` gives them: `security.protocol`,
/// `sasl.mechanism` (or `sasl.mechanisms`), `sasl.username`, `sasl.password`,
/// `ssl.ca.location`, `ssl.certificate.location`, `ssl.key.location`,
/// `ssl.endpoint.identification.algorithm` (`https`, the default, or `none`).
/// Returns what it presents and the protocol its bootstrap endpoints speak.
///
/// # Errors
/// A message naming the property at fault and what it should be.
pub fn for_client(
    props: &BTreeMap<String, String>,
) -> Result<(ClientSecurity, SecurityProtocol), String> {
    let prop = |key: &str| props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty());
    let protocol_name = prop("security.protocol").unwrap_or("PLAINTEXT");
    let protocol =
        SecurityProtocol::parse(&protocol_name.to_ascii_uppercase()).ok_or_else(|| {
            format!(
                "security.protocol={protocol_name}: use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            )
        })?;
    let tls = if protocol.uses_tls() {
        let ca = prop("ssl.ca.location")
            .ok_or_else(|| format!("security.protocol={protocol} needs ssl.ca.location=FILE (the PEM CA certificates the brokers' certificates chain to)"))?;
        let verify_hostname = match prop("ssl.endpoint.identification.algorithm").unwrap_or("https")
        {
            "https" => true,
            "none" => false,
            other => {
                return Err(format!(
                    "ssl.endpoint.identification.algorithm={other}: use https or none"
                ))
            }
        };
        let settings = TlsClientSettings {
            certificate: prop("ssl.certificate.location").map(Into::into),
            key: prop("ssl.key.location").map(Into::into),
            truststore: Some(ca.into()),
            tls12: true,
            tls13: true,
            verify_hostname,
        };
        Some(Arc::new(settings.client_config().map_err(|e| e.to_string())?))
    } else {
        None
    };
    let sasl = if protocol.uses_sasl() {
        let name = prop("sasl.mechanism").or(prop("sasl.mechanisms")).unwrap_or("PLAIN");
        let mechanism = SaslMechanism::from_name(&name.to_ascii_uppercase()).ok_or_else(|| {
            format!("sasl.mechanism={name}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        })?;
        let (Some(username), Some(password)) = (prop("sasl.username"), props.get("sasl.password"))
        else {
            return Err(format!(
                "security.protocol={protocol} needs sasl.username and sasl.password"
            ));
        };
        Some((
            mechanism,
            SaslCredentials { username: username.to_string(), password: password.clone() },
        ))
    } else {
        None
    };
    Ok((ClientSecurity::new(tls, sasl), protocol))
}

/// The client side of this broker's `ssl.*` settings: its truststore, its
/// certificate and key (presented to leaders that ask for client
/// certificates), its TLS versions.
fn client_tls(tls: &TlsSettings, verify_hostname: bool) -> TlsClientSettings {
    TlsClientSettings {
        truststore: tls.truststore.clone(),
        certificate: tls.certificate.clone(),
        key: tls.key.clone(),
        tls12: tls.tls12,
        tls13: tls.tls13,
        verify_hostname,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut r: BTreeMap<String, String> = [
            ("ssl.endpoint.identification.algorithm", "https"),
            ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        r.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        r
    }

    fn listeners(text: &str) -> Vec<ListenerSpec> {
        crate::listeners::parse_listeners(
            text,
            "",
            &format!("{},INTERNAL:SASL_SSL", crate::listeners::DEFAULT_PROTOCOL_MAP),
        )
        .expect("listeners")
    }

    #[test]
    fn jaas_lines_in_kafkas_forms() {
        let c = parse_jaas(r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="se cr\"et";"#).expect("parsed");
        assert_eq!(c, SaslCredentials { username: "admin".into(), password: "se cr\"et".into() });
        let c = parse_jaas("org.apache.kafka.common.security.plain.PlainLoginModule required\n  username=broker\n  password=pw\n  user_alice=\"x\";").expect("parsed");
        assert_eq!((c.username.as_str(), c.password.as_str()), ("broker", "pw"));
        for bad in [
            "",
            "Module",
            "Module maybe username=a password=b;",
            "M required username=\"a;",
            "M required password=b;",
            "M required username=a;",
        ] {
            assert!(parse_jaas(bad).is_err(), "{bad:?}");
        }
        assert!(!format!("{c:?}").contains("pw"));
    }

    #[test]
    fn credentials_come_from_the_listener_and_mechanism_scoped_key_first() {
        let ls = listeners("INTERNAL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0");
        let r = raw(&[
            ("ssl.truststore.location", "/ca.pem"),
            ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
            (
                "listener.name.internal.scram-sha-512.sasl.jaas.config",
                r#"S required username="broker" password="b";"#,
            ),
            ("sasl.jaas.config", r#"S required username="other" password="o";"#),
        ]);
        let s = InterBrokerSettings::from_raw(&r, &ls, true).expect("settings");
        assert_eq!((s.listener.as_str(), s.protocol), ("INTERNAL", SecurityProtocol::SaslSsl));
        assert_eq!(s.credentials.as_ref().map(|c| c.username.as_str()), Some("broker"));
        let mut r2 = r.clone();
        r2.remove("listener.name.internal.scram-sha-512.sasl.jaas.config");
        let s = InterBrokerSettings::from_raw(&r2, &ls, true).expect("settings");
        assert_eq!(
            s.credentials.map(|c| c.username),
            Some("other".into()),
            "falls back to sasl.jaas.config"
        );
    }

    #[test]
    fn a_cluster_refuses_tls_without_truststore_and_sasl_without_credentials() {
        let ls = listeners("INTERNAL://127.0.0.1:0");
        let err = |r: &BTreeMap<String, String>| match InterBrokerSettings::from_raw(r, &ls, true) {
            Err(ConfigError::InvalidValue { key, value, .. }) => (key, value),
            other => panic!("{other:?}"),
        };
        assert_eq!(err(&raw(&[])).0, "ssl.truststore.location");
        let ssl = listeners("SSL://127.0.0.1:0");
        let s = InterBrokerSettings::from_raw(
            &raw(&[("ssl.truststore.location", "/ca.pem")]),
            &ssl,
            true,
        )
        .expect("SSL needs no login");
        assert_eq!(
            (s.listener.as_str(), s.protocol, s.verify_hostname),
            ("SSL", SecurityProtocol::Ssl, true)
        );
        assert!(s.credentials.is_none());
        assert_eq!(
            err(&raw(&[("ssl.truststore.location", "/ca.pem")])).0,
            "listener.name.internal.plain.sasl.jaas.config"
        );
        let (key, value) = err(&raw(&[
            ("ssl.truststore.location", "/ca.pem"),
            ("sasl.jaas.config", "M maybe username=a password=secret"),
        ]));
        assert_eq!(
            (key.as_str(), value.as_str()),
            ("sasl.jaas.config", "****"),
            "a secret is not echoed"
        );
        assert_eq!(
            err(&raw(&[("sasl.mechanism.inter.broker.protocol", "GSSAPI")])).0,
            "sasl.mechanism.inter.broker.protocol"
        );
        assert_eq!(
            err(&raw(&[("ssl.endpoint.identification.algorithm", "http")])).0,
            "ssl.endpoint.identification.algorithm"
        );
        // Alone, a broker connects to no one: nothing more is needed.
        let alone = InterBrokerSettings::from_raw(&raw(&[]), &ls, false).expect("alone");
        assert!(alone.credentials.is_none());
    }
}
