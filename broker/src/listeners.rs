//! Listener settings, Kafka style: named listeners, their security protocols
//! and the addresses advertised for them.
//!
//! `listeners = PLAINTEXT://:9092,SSL://:9093` binds two sockets; each
//! listener's name maps to a security protocol through
//! `listener.security.protocol.map` (identity for the four standard names);
//! `advertised.listeners` says, per name, which `HOST:PORT` clients are told
//! in Metadata when they connected through that listener. A bare `HOST:PORT`
//! (no `NAME://`) is the PLAINTEXT listener, which keeps `--listen` and
//! `--advertised-listener` working as a one-listener shorthand.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};

// The outbound connections (floe-client) speak the same four protocols.
pub use floe_client::SecurityProtocol;

use crate::raw_config::ConfigError;

/// One configured listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSpec {
    /// The listener's name (upper case), e.g. `PLAINTEXT`, `SSL`, `INTERNAL`.
    pub name: String,
    /// Where it binds; port 0 picks a free port.
    pub bind: SocketAddr,
    /// Its security protocol.
    pub protocol: SecurityProtocol,
    /// What clients connected through it are told, if not the bound address.
    pub advertised: Option<(String, u16)>,
}

/// Kafka's default map: each standard name is its own protocol.
pub const DEFAULT_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// Parses the three listener settings into the listeners to bind.
///
/// # Errors
/// [`ConfigError::InvalidValue`] naming the setting at fault: an address that
/// does not parse, a listener name twice, a name missing from the protocol
/// map, an advertised name that no listener has.
pub fn parse_listeners(
    listeners: &str,
    advertised: &str,
    protocol_map: &str,
) -> Result<Vec<ListenerSpec>, ConfigError> {
    let map = parse_protocol_map(protocol_map)?;
    let mut specs: Vec<ListenerSpec> = Vec::new();
    for entry in split_list(listeners) {
        let (name, host_port) = split_name(entry);
        let bad = |reason: String| invalid("listeners", listeners, reason);
        if specs.iter().any(|s| s.name == name) {
            return Err(bad(format!("listener `{name}` is named twice")));
        }
        let protocol = *map.get(&name).ok_or_else(|| {
            bad(format!("listener `{name}` is not in listener.security.protocol.map"))
        })?;
        let bind = resolve("listeners", host_port)?;
        specs.push(ListenerSpec { name, bind, protocol, advertised: None });
    }
    if specs.is_empty() {
        return Err(invalid("listeners", listeners, "no listener given".into()));
    }
    for entry in split_list(advertised) {
        let (name, host_port) = split_name(entry);
        let (host, port) = host_port_of("advertised.listeners", host_port)?;
        let spec = specs.iter_mut().find(|s| s.name == name).ok_or_else(|| {
            invalid("advertised.listeners", advertised, format!("no listener is named `{name}`"))
        })?;
        spec.advertised = Some((host, port));
    }
    Ok(specs)
}

fn parse_protocol_map(text: &str) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    let mut map = BTreeMap::new();
    for entry in split_list(text) {
        let bad = || {
            invalid(
                "listener.security.protocol.map",
                text,
                format!("`{entry}` is not NAME:PROTOCOL"),
            )
        };
        let (name, proto) = entry.split_once(':').ok_or_else(bad)?;
        let proto = SecurityProtocol::parse(proto).ok_or_else(bad)?;
        map.insert(name.trim().to_ascii_uppercase(), proto);
    }
    Ok(map)
}

fn split_list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// `NAME://HOST:PORT` → (NAME, HOST:PORT); a bare `HOST:PORT` is PLAINTEXT.
fn split_name(entry: &str) -> (String, &str) {
    match entry.split_once("://") {
        Some((name, rest)) => (name.trim().to_ascii_uppercase(), rest),
        None => ("PLAINTEXT".to_string(), entry),
    }
}

fn invalid(key: &str, value: &str, reason: String) -> ConfigError {
    ConfigError::InvalidValue { key: key.into(), value: value.into(), reason }
}

/// `HOST:PORT` (IPv6 hosts in brackets) → (host, port); the host may be empty.
pub(crate) fn host_port_of(key: &str, text: &str) -> Result<(String, u16), ConfigError> {
    let text = text.trim();
    let (host, port) =
        text.rsplit_once(':').ok_or_else(|| invalid(key, text, "expected HOST:PORT".into()))?;
    let port: u16 = port.parse().map_err(|_| invalid(key, text, "port is not a number".into()))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), port))
}

/// Resolves `HOST:PORT` to a bind address; an empty host binds every interface.
pub(crate) fn resolve(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    let (host, port) = host_port_of(key, text)?;
    let host = if host.is_empty() { "0.0.0.0".to_string() } else { host };
    let joined =
        if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") };
    joined
        .to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| invalid(key, text, "cannot resolve".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_address_is_the_plaintext_listener() {
        let l = parse_listeners("127.0.0.1:9092", "", DEFAULT_PROTOCOL_MAP).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].name, "PLAINTEXT");
        assert_eq!(l[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(l[0].bind, "127.0.0.1:9092".parse().unwrap());
    }

    #[test]
    fn several_listeners_with_advertised_addresses_and_a_custom_map() {
        let l = parse_listeners(
            "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,internal://:9094",
            "SSL://broker.example:19093,127.0.0.1:19092",
            &format!("{DEFAULT_PROTOCOL_MAP},INTERNAL:SASL_SSL"),
        )
        .unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[0].advertised, Some(("127.0.0.1".into(), 19092)));
        assert_eq!(l[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[1].advertised, Some(("broker.example".into(), 19093)));
        assert_eq!(l[2].name, "INTERNAL");
        assert_eq!(l[2].protocol, SecurityProtocol::SaslSsl);
        assert!(l[2].bind.ip().is_unspecified());
        assert_eq!(l[2].advertised, None);
    }

    #[test]
    fn mistakes_are_refused_with_the_setting_named() {
        let key_of = |r: Result<Vec<ListenerSpec>, ConfigError>| match r {
            Err(ConfigError::InvalidValue { key, .. }) => key,
            other => panic!("expected an error, got {other:?}"),
        };
        assert_eq!(key_of(parse_listeners("CUSTOM://:1", "", DEFAULT_PROTOCOL_MAP)), "listeners");
        assert_eq!(
            key_of(parse_listeners("SSL://:1,SSL://:2", "", DEFAULT_PROTOCOL_MAP)),
            "listeners"
        );
        assert_eq!(
            key_of(parse_listeners("SSL://:1", "SASL_SSL://h:1", DEFAULT_PROTOCOL_MAP)),
            "advertised.listeners"
        );
        assert_eq!(
            key_of(parse_listeners("X://:1", "", "X:TLS")),
            "listener.security.protocol.map"
        );
        assert_eq!(key_of(parse_listeners("", "", DEFAULT_PROTOCOL_MAP)), "listeners");
    }
}
