//! What a handler knows about the connection a request came on: the peer,
//! the listener it arrived through, and where SASL authentication stands.
//!
//! On SASL listeners a connection starts unauthenticated and may send only
//! ApiVersions, SaslHandshake and SaslAuthenticate ([`Session::admits`]).
//! A successful SaslAuthenticate sets the principal and, with
//! `connections.max.reauth.ms`, a deadline (KIP-368) by which the client must
//! re-authenticate on the same connection or be disconnected.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::ApiKey;

use crate::security::sasl::SaslMechanism;
use crate::security::scram::ScramExchange;
use crate::server::endpoint::Endpoint;

/// SASL progress of one connection.
#[derive(Debug, Default)]
pub struct AuthState {
    /// The mechanism the last SaslHandshake chose; cleared when an exchange ends.
    pub mechanism: Option<SaslMechanism>,
    /// A SCRAM exchange waiting for the client-final message.
    pub scram: Option<ScramExchange>,
    /// Set by a SaslHandshake v0 until its exchange ends: the client's next
    /// frames are bare SASL tokens, not requests (Kafka's
    /// `enableKafkaSaslAuthenticateHeaders` false).
    pub unframed_tokens: bool,
    /// The authenticated user.
    pub principal: Option<String>,
    /// When the authentication expires (KIP-368), if `connections.max.reauth.ms` is set.
    pub expires_at: Option<Instant>,
}

/// Per-connection state handlers read (and SASL handlers change).
#[derive(Debug)]
pub struct Session {
    /// The client's address.
    pub peer: SocketAddr,
    /// The listener the connection arrived on: Metadata answers with its advertised address.
    pub endpoint: Arc<Endpoint>,
    /// SASL state (unused on listeners without SASL).
    pub auth: AuthState,
    /// `User:` + the subject DN of a verified client certificate (SSL listeners
    /// with `ssl.client.auth`), the principal when there is no SASL user.
    pub ssl_principal: Option<String>,
    /// Set by a handler whose response must be the connection's last (failed
    /// authentication); the value is the reason for the metric.
    pub close_after_reply: Option<&'static str>,
    /// Set when the last request went over a client quota: the connection
    /// reads no further request for this long after the response is sent
    /// (Kafka mutes the channel).
    pub throttled_for: Option<std::time::Duration>,
    /// Set by the Fetch handler when the response goes to a follower replica, so the
    /// bytes it moves are also counted as replication traffic.
    pub reply_to_replica: bool,
}

/// Why a request is not admitted on this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotAdmitted {
    /// A SASL listener, and the client has not authenticated.
    Unauthenticated,
    /// The authentication expired and the client did not re-authenticate (KIP-368).
    Expired,
}

impl NotAdmitted {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            NotAdmitted::Unauthenticated => "unauthenticated_request",
            NotAdmitted::Expired => "authentication_expired",
        }
    }
}

impl Session {
    /// A fresh, unauthenticated session.
    pub fn new(peer: SocketAddr, endpoint: Arc<Endpoint>) -> Self {
        Session {
            peer,
            endpoint,
            auth: AuthState::default(),
            ssl_principal: None,
            close_after_reply: None,
            throttled_for: None,
            reply_to_replica: false,
        }
    }

    /// The principal and host authorization sees, as Kafka's default
    /// principal builder: `User:` and the SASL user; else `User:` and the
    /// client certificate's subject DN; else `User:ANONYMOUS`.
    pub fn request_context(&self) -> crate::authorizer::RequestContext {
        let principal = match (&self.auth.principal, &self.ssl_principal) {
            (Some(user), _) => format!("User:{user}"),
            (None, Some(dn)) => dn.clone(),
            (None, None) => crate::authorizer::ANONYMOUS.to_string(),
        };
        crate::authorizer::RequestContext { principal, host: self.peer.ip().to_canonical() }
    }

    /// Whether a request of `api` may be handled now.
    ///
    /// # Errors
    /// [`NotAdmitted`]: the connection is to be closed.
    pub fn admits(&self, api: ApiKey, now: Instant) -> Result<(), NotAdmitted> {
        if !self.endpoint.protocol.uses_sasl() {
            return Ok(());
        }
        if matches!(api, ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate) {
            return Ok(());
        }
        if self.auth.principal.is_none() {
            return Err(NotAdmitted::Unauthenticated);
        }
        match self.auth.expires_at {
            Some(deadline) if now >= deadline => Err(NotAdmitted::Expired),
            _ => Ok(()),
        }
    }
}
