//! SASL on an outbound connection: the mechanisms a login may use, the user
//! name and password it presents, and the client side of the login (Kafka's
//! `SaslClientAuthenticator`): SaslHandshake v1 names the mechanism, then
//! SaslAuthenticate v2 carries its tokens: one round for PLAIN (RFC 4616),
//! two for SCRAM-SHA-256/512 ([`ScramClient`]), whose last answer must prove
//! the peer knows the credential.
//!
//! A refusal becomes [`ClientError::Authentication`] with the peer's error
//! message; the password is never logged nor put in an error, nor shown by
//! `Debug`. The same exchange renews a session on an authenticated
//! connection (KIP-368).

use std::fmt;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
use kafka_protocol::protocol::StrBytes;

use crate::connection::{BrokerConnection, ClientError};
use crate::scram::{ScramClient, ScramMechanism};

/// A SASL mechanism Floe serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616): user and password in the clear; use it inside TLS.
    Plain,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    Scram(ScramMechanism),
}

impl SaslMechanism {
    /// The name clients ask for.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
        }
    }

    /// From the name clients ask for.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "PLAIN" => Some(SaslMechanism::Plain),
            other => ScramMechanism::from_name(other).map(SaslMechanism::Scram),
        }
    }
}

/// A SASL user name and password (from a JAAS line). `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    /// The user name.
    pub username: String,
    /// The password.
    pub password: String,
}

impl fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslCredentials")
            .field("username", &self.username)
            .field("password", &"****")
            .finish()
    }
}

/// SaslHandshake v1: the version after which the tokens go in SaslAuthenticate.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v2: flexible, with `session_lifetime_ms` (v1+).
const SASL_AUTHENTICATE_VERSION: i16 = 2;

/// Logs `conn` in as `credentials` with `mechanism`; returns the session's
/// lifetime if the peer limits it (`session_lifetime_ms`).
///
/// # Errors
/// [`ClientError::Authentication`] when the peer refuses the mechanism or the
/// login, or its SCRAM answer is not valid; any error of the requests.
pub(crate) async fn login(
    conn: &mut BrokerConnection,
    mechanism: SaslMechanism,
    credentials: &SaslCredentials,
) -> Result<Option<Duration>, ClientError> {
    let refused = |conn: &BrokerConnection, message: String| ClientError::Authentication {
        addr: conn.addr().to_string(),
        mechanism: mechanism.name(),
        message,
    };
    let handshake = conn
        .exchange(
            SASL_HANDSHAKE_VERSION,
            &SaslHandshakeRequest::default()
                .with_mechanism(StrBytes::from_static_str(mechanism.name())),
        )
        .await?;
    if handshake.error_code != 0 {
        let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(refused(
            conn,
            handshake_refusal(handshake.error_code, &offered, conn.is_tls()),
        ));
    }
    let last = match mechanism {
        SaslMechanism::Plain => {
            // authzid (empty) NUL user NUL password.
            let mut token =
                Vec::with_capacity(credentials.username.len() + credentials.password.len() + 2);
            token.push(0);
            token.extend_from_slice(credentials.username.as_bytes());
            token.push(0);
            token.extend_from_slice(credentials.password.as_bytes());
            authenticate(conn, token).await.map_err(|m| m.into_error(conn, mechanism))?
        }
        SaslMechanism::Scram(m) => {
            let (scram, first) =
                ScramClient::client_first(m, &credentials.username, &credentials.password);
            let server_first =
                authenticate(conn, first).await.map_err(|e| e.into_error(conn, mechanism))?;
            // PBKDF2 of up to 16384 rounds: milliseconds, kept off the runtime's workers.
            let (scram, last) = tokio::task::spawn_blocking(move || {
                let mut scram = scram;
                let last = scram.client_final(&server_first.token);
                (scram, last)
            })
            .await
            .map_err(|e| refused(conn, format!("the SCRAM proof could not be computed: {e}")))?;
            let last = last.map_err(|e| refused(conn, e.to_string()))?;
            let server_final =
                authenticate(conn, last).await.map_err(|e| e.into_error(conn, mechanism))?;
            scram
                .verify_server_final(&server_final.token)
                .map_err(|e| refused(conn, e.to_string()))?;
            server_final
        }
    };
    Ok(u64::try_from(last.session_lifetime_ms).ok().filter(|&ms| ms > 0).map(Duration::from_millis))
}

/// The peer's answer to one SaslAuthenticate round.
struct Answer {
    token: Vec<u8>,
    /// 0 when the session does not expire (set on the last round only).
    session_lifetime_ms: i64,
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
            RoundError::Refused(message) => ClientError::Authentication {
                addr: conn.addr().to_string(),
                mechanism: mechanism.name(),
                message,
            },
        }
    }
}

/// One SaslAuthenticate round: sends `token`, returns the peer's answer.
async fn authenticate(conn: &mut BrokerConnection, token: Vec<u8>) -> Result<Answer, RoundError> {
    let request = SaslAuthenticateRequest::default().with_auth_bytes(token.into());
    let response =
        conn.exchange(SASL_AUTHENTICATE_VERSION, &request).await.map_err(RoundError::Client)?;
    if response.error_code != 0 {
        let said = response.error_message.as_ref().map(|m| m.to_string()).unwrap_or_default();
        return Err(RoundError::Refused(format!("{}: {said}", error_name(response.error_code))));
    }
    Ok(Answer {
        token: response.auth_bytes.to_vec(),
        session_lifetime_ms: response.session_lifetime_ms,
    })
}

/// Why the peer refused the SaslHandshake, and what to do about it.
fn handshake_refusal(code: i16, offered: &[&str], tls: bool) -> String {
    if code == ResponseError::IllegalSaslState.code() && offered.is_empty() {
        // Kafka's answer on a listener without SASL; whether TLS came first says which kind it is.
        let (protocol, sasl) =
            if tls { ("SSL", "SASL_SSL") } else { ("PLAINTEXT", "SASL_PLAINTEXT") };
        return format!(
            "this is a {protocol} listener, which offers no SASL mechanisms: use the address of the broker's \
             {sasl} listener (its `listeners` setting), or security.protocol={protocol} without SASL on this one"
        );
    }
    let offered = if offered.is_empty() { "none".to_string() } else { offered.join(", ") };
    format!("{} (the listener offers {offered})", error_name(code))
}

fn error_name(code: i16) -> String {
    ResponseError::try_from_code(code).map_or_else(|| format!("error {code}"), |e| format!("{e:?}"))
}
