//! Floe's outbound Kafka connection: what a broker speaks to another (replica
//! fetchers, transaction markers) and what the `floe` admin commands speak to
//! any Kafka-compatible cluster.
//!
//! # Layout
//! - [`tls`]: the client's TLS configuration (rustls), and reading PEM files.
//! - [`security_protocol`]: Kafka's `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
//! - [`sasl`]: SASL mechanisms and the credentials a login presents.
//! - [`scram`]: SCRAM-SHA-256/512, the primitives both sides share and the client's side.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod sasl;
pub mod scram;
pub mod security_protocol;
pub mod tls;

pub use sasl::{SaslCredentials, SaslMechanism};
pub use security_protocol::SecurityProtocol;
