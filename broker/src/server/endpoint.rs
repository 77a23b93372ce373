//! A bound listener as its connections see it: name, security protocol,
//! advertised address and, for TLS listeners, the TLS context.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::listeners::SecurityProtocol;
use crate::security::tls::TlsContext;

/// One bound listener. Shared (`Arc`) by every connection accepted on it.
#[derive(Debug)]
pub struct Endpoint {
    /// The listener's name, e.g. `PLAINTEXT`, `SASL_SSL`.
    pub name: String,
    /// Its security protocol.
    pub protocol: SecurityProtocol,
    /// The address it is bound to.
    pub bound: SocketAddr,
    /// Host handed to clients in Metadata, DescribeCluster and FindCoordinator.
    pub advertised_host: String,
    /// Port handed to clients.
    pub advertised_port: i32,
    /// The TLS acceptor, for SSL and SASL_SSL listeners.
    pub tls: Option<Arc<TlsContext>>,
}

impl Endpoint {
    /// The advertised address: the configured one, else the bound one
    /// (`127.0.0.1` in place of an unspecified address, which clients cannot dial).
    pub fn advertised_of(configured: Option<&(String, u16)>, bound: SocketAddr) -> (String, i32) {
        match configured {
            Some((host, port)) => (host.clone(), i32::from(*port)),
            None if bound.ip().is_unspecified() => {
                ("127.0.0.1".to_string(), i32::from(bound.port()))
            }
            None => (bound.ip().to_string(), i32::from(bound.port())),
        }
    }

    /// A plaintext endpoint for unit tests that call handlers directly.
    pub fn plaintext_for_tests(host: &str, port: i32) -> Self {
        Endpoint {
            name: "PLAINTEXT".into(),
            protocol: SecurityProtocol::Plaintext,
            bound: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertised_host: host.into(),
            advertised_port: port,
            tls: None,
        }
    }
}
