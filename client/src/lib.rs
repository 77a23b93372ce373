//! Floe's outbound Kafka connection: what a broker speaks to another (replica
//! fetchers, transaction markers) and what the `floe` admin commands speak to
//! any Kafka-compatible cluster.
//!
//! A [`BrokerConnection`] sends one request at a time to an [`Endpoint`] in
//! its [`SecurityProtocol`]: TLS with the configuration of a
//! [`ClientSecurity`], then its SASL login, before any other request. It
//! knows nothing of how the endpoint was found (a broker's registration, a
//! bootstrap address) or where its settings come from.
//!
//! # Layout
//! - [`connection`]: the connection, its endpoint, its errors and what it presents (TLS, SASL).
//! - [`sasl`]: SASL mechanisms, the credentials a login presents, and the login.
//! - [`scram`]: SCRAM-SHA-256/512, the primitives both sides share and the client's side.
//! - [`tls`]: the client's TLS configuration (rustls), and reading PEM files.
//! - [`security_protocol`]: Kafka's `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod connection;
pub mod sasl;
pub mod scram;
pub mod security_protocol;
pub mod tls;

pub use connection::{BrokerConnection, ClientError, ClientSecurity, Endpoint};
pub use sasl::{SaslCredentials, SaslMechanism};
pub use security_protocol::SecurityProtocol;
