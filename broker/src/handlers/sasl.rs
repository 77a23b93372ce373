//! SaslHandshake and SaslAuthenticate: PLAIN and SCRAM-SHA-256/512 on SASL
//! listeners, with KIP-368 re-authentication.
//!
//! SaslHandshake picks the mechanism; SaslAuthenticate carries its tokens
//! (one round for PLAIN, two for SCRAM). A failed authentication is logged
//! with the reason, answered with SASL_AUTHENTICATION_FAILED after
//! `connection.failed.authentication.delay.ms` (so guessing is slow), and the
//! connection is closed after that answer. Re-authentication is the same
//! exchange on an authenticated connection; it must name the same user.

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;

use super::message;
use crate::broker::Broker;
use crate::security::sasl::SaslMechanism;
use crate::security::scram::{self, ScramMechanism};
use crate::session::Session;

pub(super) fn handle_handshake(broker: &Broker, session: &mut Session, request: SaslHandshakeRequest) -> SaslHandshakeResponse {
    let endpoint = &session.endpoint;
    let offered = broker.config.sasl.mechanisms_of(&endpoint.name);
    let names: Vec<StrBytes> = offered.iter().map(|m| StrBytes::from_static_str(m.name())).collect();
    if !endpoint.protocol.uses_sasl() {
        tracing::warn!(peer = %session.peer, listener = %endpoint.name, "SaslHandshake on a listener without SASL");
        session.close_after_reply = Some("illegal_sasl_state");
        return SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code());
    }
    let asked = request.mechanism.to_string();
    match SaslMechanism::from_name(&asked).filter(|m| offered.contains(m)) {
        Some(mechanism) => {
            session.auth.mechanism = Some(mechanism);
            session.auth.scram = None;
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
    let step = match mechanism {
        SaslMechanism::Plain => plain(broker, request.auth_bytes).await,
        SaslMechanism::Scram(m) => scram_step(broker, session, m, &request.auth_bytes),
    };
    let step = match step {
        // KIP-368: a re-authentication may not switch users.
        Step::Done { user, .. } if session.auth.principal.as_ref().is_some_and(|p| *p != user) => {
            Step::Failed(format!("re-authentication as `{user}` on a connection authenticated as another user"))
        }
        other => other,
    };
    match step {
        Step::Continue(reply) => SaslAuthenticateResponse::default().with_auth_bytes(reply),
        Step::Done { user, reply } => {
            let reauth_ms = broker.config.sasl.max_reauth_ms;
            let reauthenticating = session.auth.principal.is_some();
            tracing::info!(peer = %session.peer, listener = %session.endpoint.name, %user, mechanism = mechanism.name(), reauthenticating, "SASL authentication succeeded");
            session.auth.principal = Some(user);
            session.auth.mechanism = None;
            session.auth.scram = None;
            session.auth.expires_at = (reauth_ms > 0).then(|| Instant::now() + Duration::from_millis(reauth_ms));
            let mut response = SaslAuthenticateResponse::default().with_auth_bytes(reply);
            if version >= 1 {
                response.session_lifetime_ms = i64::try_from(reauth_ms).unwrap_or(i64::MAX);
            }
            response
        }
        Step::Failed(reason) => {
            tracing::warn!(peer = %session.peer, listener = %session.endpoint.name, mechanism = mechanism.name(), %reason, "SASL authentication failed");
            session.auth.scram = None;
            session.close_after_reply = Some("authentication_failed");
            // Slows down password guessing; the connection is closed after the answer anyway.
            tokio::time::sleep(Duration::from_millis(broker.config.sasl.failed_delay_ms)).await;
            SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::SaslAuthenticationFailed.code())
                .with_error_message(message(format!(
                    "Authentication failed: invalid credentials with SASL mechanism {}",
                    mechanism.name()
                )))
        }
    }
}

/// PLAIN: `authzid NUL user NUL password`; an authzid other than the user is refused.
async fn plain(broker: &Broker, token: Bytes) -> Step {
    let mut fields = token.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) = (fields.next(), fields.next(), fields.next(), fields.next()) else {
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
