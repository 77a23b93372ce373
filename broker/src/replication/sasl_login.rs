//! The client side of a SASL login on an inter-broker connection (Kafka's
//! `SaslClientAuthenticator`): SaslHandshake v1 names the mechanism, then
//! SaslAuthenticate v2 carries its tokens: one round for PLAIN (RFC 4616),
//! two for SCRAM-SHA-256/512 ([`ScramClient`]), whose last answer must prove
//! the peer knows the credential.
//!
//! A refusal becomes [`ClientError::Authentication`] with the peer's error
//! message; the password is never logged nor put in an error.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use super::client::{BrokerConnection, ClientError};
use crate::security::inter_broker::SaslCredentials;
use crate::security::sasl::SaslMechanism;
use crate::security::scram_client::ScramClient;

/// SaslHandshake v1: the version after which the tokens go in SaslAuthenticate.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v2: flexible, with `session_lifetime_ms` (v1+).
const SASL_AUTHENTICATE_VERSION: i16 = 2;

/// Logs `conn` in as `credentials` with `mechanism`.
///
/// # Errors
/// [`ClientError::Authentication`] when the peer refuses the mechanism or the
/// login, or its SCRAM answer is not valid; any error of the requests.
pub(super) async fn login(conn: &mut BrokerConnection, mechanism: SaslMechanism, credentials: &SaslCredentials) -> Result<(), ClientError> {
    let refused = |conn: &BrokerConnection, message: String| ClientError::Authentication { addr: conn.addr().to_string(), mechanism: mechanism.name(), message };
    let handshake = conn
        .call(SASL_HANDSHAKE_VERSION, &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name())))
        .await?;
    if handshake.error_code != 0 {
        let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(refused(conn, format!("{} (the listener offers {})", error_name(handshake.error_code), offered.join(", "))));
    }
    match mechanism {
        SaslMechanism::Plain => {
            // authzid (empty) NUL user NUL password.
            let mut token = Vec::with_capacity(credentials.username.len() + credentials.password.len() + 2);
            token.push(0);
            token.extend_from_slice(credentials.username.as_bytes());
            token.push(0);
            token.extend_from_slice(credentials.password.as_bytes());
            authenticate(conn, token).await.map_err(|m| m.into_error(conn, mechanism))?;
        }
        SaslMechanism::Scram(m) => {
            let (mut scram, first) = ScramClient::client_first(m, &credentials.username, &credentials.password);
            let server_first = authenticate(conn, first).await.map_err(|e| e.into_error(conn, mechanism))?;
            let last = scram.client_final(&server_first).map_err(|e| refused(conn, e.to_string()))?;
            let server_final = authenticate(conn, last).await.map_err(|e| e.into_error(conn, mechanism))?;
            scram.verify_server_final(&server_final).map_err(|e| refused(conn, e.to_string()))?;
        }
    }
    Ok(())
}

/// A failed SaslAuthenticate round: a transport error, or the peer's refusal.
enum RoundError {
    Client(ClientError),
    Refused(String),
}

impl RoundError {
    fn into_error(self, conn: &BrokerConnection, mechanism: SaslMechanism) -> ClientError {
        match self {
            RoundError::Client(e) => e,
            RoundError::Refused(message) => ClientError::Authentication { addr: conn.addr().to_string(), mechanism: mechanism.name(), message },
        }
    }
}

/// One SaslAuthenticate round: sends `token`, returns the peer's.
async fn authenticate(conn: &mut BrokerConnection, token: Vec<u8>) -> Result<Vec<u8>, RoundError> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
    let response = conn.call(SASL_AUTHENTICATE_VERSION, &request).await.map_err(RoundError::Client)?;
    if response.error_code != 0 {
        let said = response.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
        return Err(RoundError::Refused(format!("{}: {said}", error_name(response.error_code))));
    }
    Ok(response.auth_bytes.to_vec())
}

fn error_name(code: i16) -> String {
    ResponseError::try_from_code(code).map_or_else(|| format!("error {code}"), |e| format!("{e:?}"))
}
