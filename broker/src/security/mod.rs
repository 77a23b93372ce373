//! Securing connections: TLS for SSL listeners, kernel TLS detection, and
//! SASL authentication.
//!
//! - [`tls`]: TLS settings, loading the certificate, key and truststore into
//!   a `rustls` acceptor, and reloading them without dropping connections
//!   (the PEM reading is [`floe_client::tls`]'s, shared with the client side).
//! - [`ktls`]: whether the kernel can take over TLS records (kTLS), decided
//!   once at startup.
//! - [`sasl`]: SASL settings, and the mechanism names (floe-client's).
//! - [`scram`]: the SCRAM-SHA-256/512 exchange and the stored keys (the server's
//!   side; the client's, for broker-to-broker logins, is [`floe_client::scram`]).
//! - [`inter_broker`]: what this broker presents to the others (TLS client
//!   configuration, SASL mechanism and credentials), read from its settings
//!   into a [`floe_client::ClientSecurity`]; the same for the CLI's properties.
//! - [`credentials`]: the SCRAM credential store on disk, and PLAIN users.
//! - [`x500`]: a client certificate's subject as an RFC 2253 name (the SSL principal).

pub mod credentials;
pub mod inter_broker;
pub mod ktls;
pub mod sasl;
pub mod scram;
pub mod tls;
pub mod x500;
