//! SaslHandshake and SaslAuthenticate: PLAIN and SCRAM-SHA-256/512 on SASL
//! listeners, with KIP-368 re-authentication.
//!
//! SaslHandshake picks the mechanism; SaslAuthenticate carries its tokens
//! (one round for PLAIN, two for SCRAM). A failed authentication is logged
//! with the reason, answered with SASL_AUTHENTICATION_FAILED after
//! `connection.failed.authentication.delay.ms` (so guessing is slow), and the
//! connection is closed after that answer. Re-authentication is the same
//! exchange on an authenticated connection; it must name the same user.
//!
//! SaslHandshake v0 (Kafka 0.10; Kafka 4.x still serves it, deprecated by
//! KIP-896 but kept, see `SaslHandshakeRequest.json`) is followed by the same
//! tokens without SaslAuthenticate around them: each is a 4-byte big-endian
//! length and the bytes, no request header, and each answer is framed the same
//! way, an empty one included (PLAIN's). That is Kafka's
//! `SaslServerAuthenticator` with `enableKafkaSaslAuthenticateHeaders` false;
//! the connection loop hands such frames to [`handle_unframed_token`]. A v0
//! exchange that fails gets no answer: the connection is closed after the
//! delay, as Kafka does. Re-authentication (KIP-368) needs v1, so a v0
//! handshake on an authenticated connection is refused.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::Reply;
use crate::broker::Broker;
use crate::security::sasl::SaslMechanism;
use crate::security::scram::{self, ScramMechanism};
use crate::session::Session;
use floe_protocol::response::message;

pub(super) fn handle_handshake(
    broker: &Broker,
    session: &mut Session,
    request: SaslHandshakeRequest,
    version: i16,
) -> SaslHandshakeResponse {
    let endpoint = &session.endpoint;
    let offered = broker.config.sasl.mechanisms_of(&endpoint.name);
    let names: Vec<StrBytes> =
        offered.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
    if !endpoint.protocol.uses_sasl() {
        // Kafka answers ILLEGAL_SASL_STATE with no mechanisms here too; the log says where SASL is.
        let sasl_listeners: Vec<String> = broker
            .config
            .listeners
            .iter()
            .filter(|l| l.protocol.uses_sasl())
            .map(|l| format!("{}://{}", l.name, l.bind))
            .collect();
        tracing::warn!(
            peer = %session.peer,
            listener = %endpoint.name,
            protocol = endpoint.protocol.name(),
            sasl_listeners = if sasl_listeners.is_empty() { "none".to_string() } else { sasl_listeners.join(",") },
            "SaslHandshake on a listener without SASL: the client must connect to a SASL_PLAINTEXT or SASL_SSL listener, or not use SASL"
        );
        session.close_after_reply = Some("illegal_sasl_state");
        return SaslHandshakeResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code());
    }
    if version == 0 && session.auth.principal.is_some() {
        tracing::warn!(peer = %session.peer, listener = %endpoint.name, "SaslHandshake v0 on an authenticated connection: re-authentication needs v1");
        session.close_after_reply = Some("illegal_sasl_state");
        return SaslHandshakeResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_mechanisms(names);
    }
    let asked = request.mechanism.to_string();
    match SaslMechanism::from_name(&asked).filter(|m| offered.contains(m)) {
        Some(mechanism) => {
            session.auth.mechanism = Some(mechanism);
            session.auth.scram = None;
            session.auth.unframed_tokens = version == 0;
            SaslHandshakeResponse::default().with_mechanisms(names)
        }
        None => {
            tracing::warn!(peer = %session.peer, listener = %endpoint.name, mechanism = %asked, "SASL mechanism not enabled on this listener");
            session.close_after_reply = Some("unsupported_sasl_mechanism");
            SaslHandshakeResponse::default()
                .with_error_code(ResponseError::UnsupportedSaslMechanism.code())
                .with_mechanisms(names)
        }
    }
}

/// The result of one SaslAuthenticate token.
enum Step {
    /// More tokens are needed; send these bytes.
    Continue(Bytes),
    /// Authenticated as `user`; send these (final) bytes.
    Done { user: String, reply: Bytes },
    /// Refused; the reason is for the log only.
    Failed(String),
}

pub(super) async fn handle_authenticate(
    broker: &Broker,
    session: &mut Session,
    request: SaslAuthenticateRequest,
    version: i16,
) -> SaslAuthenticateResponse {
    let Some(mechanism) = session.auth.mechanism else {
        tracing::warn!(peer = %session.peer, "SaslAuthenticate without a SaslHandshake first");
        session.close_after_reply = Some("illegal_sasl_state");
        return SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::IllegalSaslState.code())
            .with_error_message(message("SaslAuthenticate must follow SaslHandshake"));
    };
    match step(broker, session, mechanism, request.auth_bytes).await {
        Step::Continue(reply) => SaslAuthenticateResponse::default().with_auth_bytes(reply),
        Step::Done { reply, .. } => {
            let mut response = SaslAuthenticateResponse::default().with_auth_bytes(reply);
            if version >= 1 {
                response.session_lifetime_ms =
                    i64::try_from(broker.config.sasl.max_reauth_ms).unwrap_or(i64::MAX);
            }
            response
        }
        Step::Failed(_) => SaslAuthenticateResponse::default()
            .with_error_code(ResponseError::SaslAuthenticationFailed.code())
            .with_error_message(message(format!(
                "Authentication failed: invalid credentials with SASL mechanism {}",
                mechanism.name()
            ))),
    }
}

/// One SASL token sent bare after a SaslHandshake v0 (see the module doc):
/// the answer is the mechanism's reply with a 4-byte length in front, and
/// nothing when the authentication fails (the connection is then closed).
pub(super) async fn handle_unframed_token(
    broker: &Broker,
    session: &mut Session,
    token: Bytes,
) -> Reply {
    let Some(mechanism) = session.auth.mechanism else {
        // Only a v0 handshake that chose a mechanism turns framing off; never reached.
        tracing::error!(peer = %session.peer, "bare SASL token without a mechanism");
        session.auth.unframed_tokens = false;
        session.close_after_reply = Some("illegal_sasl_state");
        return Reply::None;
    };
    let reply = match step(broker, session, mechanism, token).await {
        Step::Continue(reply) => reply,
        Step::Done { reply, .. } => {
            session.auth.unframed_tokens = false;
            reply
        }
        Step::Failed(_) => {
            session.auth.unframed_tokens = false;
            return Reply::None;
        }
    };
    let Ok(len) = u32::try_from(reply.len()) else {
        tracing::error!(peer = %session.peer, bytes = reply.len(), "SASL reply too large to frame");
        session.close_after_reply = Some("internal_error");
        return Reply::None;
    };
    let mut frame = Vec::with_capacity(4 + reply.len());
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&reply);
    Reply::Frame(Bytes::from(frame))
}

/// Runs one token of `mechanism`'s exchange and records its outcome in the
/// session: the principal and KIP-368 deadline on success; on failure a log
/// line, the close after the answer, and the delay that slows guessing.
async fn step(
    broker: &Broker,
    session: &mut Session,
    mechanism: SaslMechanism,
    token: Bytes,
) -> Step {
    let step = match mechanism {
        SaslMechanism::Plain => plain(broker, token).await,
        SaslMechanism::Scram(m) => scram_step(broker, session, m, &token),
    };
    let step = match step {
        // KIP-368: a re-authentication may not switch users.
        Step::Done { user, .. } if session.auth.principal.as_ref().is_some_and(|p| *p != user) => {
            Step::Failed(format!(
                "re-authentication as `{user}` on a connection authenticated as another user"
            ))
        }
        other => other,
    };
    match &step {
        Step::Continue(_) => {}
        Step::Done { user, .. } => {
            let reauth_ms = broker.config.sasl.max_reauth_ms;
            let reauthenticating = session.auth.principal.is_some();
            let framing = if session.auth.unframed_tokens {
                "SaslHandshake v0, unframed tokens"
            } else {
                "SaslAuthenticate"
            };
            tracing::info!(peer = %session.peer, listener = %session.endpoint.name, %user, mechanism = mechanism.name(), reauthenticating, framing, "SASL authentication succeeded");
            session.auth.principal = Some(user.clone());
            session.auth.mechanism = None;
            session.auth.scram = None;
            session.auth.expires_at =
                (reauth_ms > 0).then(|| Instant::now() + Duration::from_millis(reauth_ms));
        }
        Step::Failed(reason) => {
            tracing::warn!(peer = %session.peer, listener = %session.endpoint.name, mechanism = mechanism.name(), %reason, "SASL authentication failed");
            session.auth.scram = None;
            session.close_after_reply = Some("authentication_failed");
            // Slows down password guessing; the connection is closed after the answer anyway.
            tokio::time::sleep(Duration::from_millis(broker.config.sasl.failed_delay_ms)).await;
        }
    }
    step
}

/// PLAIN: `authzid NUL user NUL password`; an authzid other than the user is refused.
async fn plain(broker: &Broker, token: Bytes) -> Step {
    let mut fields = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Step::Failed("malformed PLAIN token".into());
    };
    let (Ok(authzid), Ok(user), Ok(password)) =
        (std::str::from_utf8(authzid), std::str::from_utf8(user), std::str::from_utf8(password))
    else {
        return Step::Failed("PLAIN token is not UTF-8".into());
    };
    if user.is_empty() {
        return Step::Failed("empty user name".into());
    }
    if !authzid.is_empty() && authzid != user {
        return Step::Failed(format!("user `{user}` asked to act as `{authzid}`"));
    }
    let store = broker.credentials.clone();
    let (user, password) = (user.to_string(), password.to_string());
    let checked_user = user.clone();
    // PBKDF2 against SCRAM credentials takes milliseconds: off the request workers.
    match tokio::task::spawn_blocking(move || store.check_plain(&checked_user, &password)).await {
        Ok(true) => Step::Done { user, reply: Bytes::new() },
        Ok(false) => Step::Failed(format!("wrong password or unknown user `{user}`")),
        Err(e) => Step::Failed(format!("password check failed: {e}")),
    }
}

fn scram_step(broker: &Broker, session: &mut Session, m: ScramMechanism, token: &[u8]) -> Step {
    match session.auth.scram.take() {
        None => match scram::client_first(m, token, |user| broker.credentials.scram(user, m)) {
            Ok((exchange, server_first)) => {
                session.auth.scram = Some(exchange);
                Step::Continue(Bytes::from(server_first))
            }
            Err(e) => Step::Failed(e.to_string()),
        },
        Some(exchange) => {
            let user = exchange.user().to_string();
            match exchange.client_final(token) {
                Ok(server_final) => Step::Done { user, reply: Bytes::from(server_final) },
                Err(e) => Step::Failed(e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! SaslHandshake v0 and the bare tokens after it, as Kafka 0.10-era clients send them.

    use std::num::NonZeroU32;
    use std::sync::Arc;

    use floe_client::scram::ScramClient;

    use super::*;
    use crate::security::scram::ScramCredential;

    fn sasl_session() -> Session {
        let mut endpoint =
            crate::server::endpoint::Endpoint::plaintext_for_tests("127.0.0.1", 9093);
        endpoint.name = "SASL_PLAINTEXT".into();
        endpoint.protocol = crate::listeners::SecurityProtocol::SaslPlaintext;
        Session::new("127.0.0.1:1".parse().expect("addr"), Arc::new(endpoint))
    }

    fn handshake(broker: &Broker, session: &mut Session, mechanism: &str, version: i16) -> i16 {
        let request =
            SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into()));
        handle_handshake(broker, session, request, version).error_code
    }

    /// The answer token of a framed reply; `None` for no reply.
    fn unframe(reply: Reply) -> Option<Vec<u8>> {
        match reply {
            Reply::Frame(bytes) => {
                let len = u32::from_be_bytes(bytes[..4].try_into().expect("prefix")) as usize;
                assert_eq!(len + 4, bytes.len(), "length prefix");
                Some(bytes[4..].to_vec())
            }
            Reply::None => None,
            other => panic!("unexpected reply {other:?}"),
        }
    }

    fn add_scram_user(broker: &Broker, user: &str, password: &str, m: ScramMechanism) {
        let salt = b"0123456789abcdef";
        let salted =
            m.salted_password(password.as_bytes(), salt, NonZeroU32::new(4096).expect("nonzero"));
        let credential = ScramCredential::from_salted_password(m, salt, 4096, &salted);
        broker.credentials.alter(&[], vec![(user.into(), m, credential)]).expect("alter");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn plain_after_a_v0_handshake_is_unframed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = super::super::version_tests::broker_with(dir.path(), &[]).await;
        add_scram_user(&broker, "alice", "pw", ScramMechanism::Sha256);

        let mut session = sasl_session();
        assert_eq!(handshake(&broker, &mut session, "PLAIN", 0), 0);
        assert!(session.auth.unframed_tokens);
        // Kafka answers PLAIN's empty challenge with a zero length.
        let reply =
            handle_unframed_token(&broker, &mut session, Bytes::from_static(b"\0alice\0pw")).await;
        assert_eq!(unframe(reply), Some(vec![]));
        assert_eq!(session.auth.principal.as_deref(), Some("alice"));
        assert!(!session.auth.unframed_tokens && session.close_after_reply.is_none());
        // Re-authentication needs v1 (KIP-368).
        assert_eq!(
            handshake(&broker, &mut session, "PLAIN", 0),
            ResponseError::IllegalSaslState.code()
        );
        assert!(session.close_after_reply.is_some());

        // A wrong password: no answer, and the connection is closed.
        let mut session = sasl_session();
        assert_eq!(handshake(&broker, &mut session, "PLAIN", 0), 0);
        let reply =
            handle_unframed_token(&broker, &mut session, Bytes::from_static(b"\0alice\0nope"))
                .await;
        assert_eq!(unframe(reply), None);
        assert_eq!(session.close_after_reply, Some("authentication_failed"));
        assert!(session.auth.principal.is_none() && !session.auth.unframed_tokens);

        // v1 keeps the SaslAuthenticate framing.
        let mut session = sasl_session();
        assert_eq!(handshake(&broker, &mut session, "PLAIN", 1), 0);
        assert!(!session.auth.unframed_tokens);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn scram_after_a_v0_handshake_is_unframed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = super::super::version_tests::broker_with(dir.path(), &[]).await;
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            add_scram_user(&broker, "bob", "bob-pw", m);
            let mut session = sasl_session();
            assert_eq!(handshake(&broker, &mut session, m.name(), 0), 0);
            let (mut client, first) = ScramClient::client_first(m, "bob", "bob-pw");
            let server_first =
                unframe(handle_unframed_token(&broker, &mut session, Bytes::from(first)).await)
                    .expect("server-first");
            assert!(session.auth.unframed_tokens, "{m:?}: still mid-exchange");
            let last = client.client_final(&server_first).expect("client-final");
            let server_final =
                unframe(handle_unframed_token(&broker, &mut session, Bytes::from(last)).await)
                    .expect("server-final");
            client
                .verify_server_final(&server_final)
                .expect("the broker proves it knows the credential");
            assert_eq!(session.auth.principal.as_deref(), Some("bob"), "{m:?}");
            assert!(!session.auth.unframed_tokens);
        }
    }
}
