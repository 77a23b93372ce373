//! SCRAM-SHA-256/512 (RFC 5802), client side: what a broker speaks when it
//! authenticates to another broker (replica fetchers, transaction markers).
//!
//! The hashing primitives are the server's ([`ScramMechanism`]); this file
//! only owns the client's half of the two round trips:
//! [`ScramClient::client_first`] → server-first → [`ScramClient::client_final`]
//! → server-final, which [`ScramClient::verify_server_final`] checks, so a
//! peer that does not know the credential cannot pose as the leader.

use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use thiserror::Error;

use super::scram::{constant_time_eq, encode_sasl_name, random_nonce, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};

/// Why the client's side of a SCRAM exchange failed. Never holds the password.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScramClientError {
    /// The server's message does not follow RFC 5802.
    #[error("malformed SCRAM server message: {0}")]
    Malformed(&'static str),
    /// The server's nonce does not extend ours: a replayed or forged exchange.
    #[error("the server's nonce does not start with the client's")]
    Nonce,
    /// The server asks for an iteration count outside Kafka's bounds.
    #[error("the server asks for {0} iterations (Kafka allows {MIN_ITERATIONS}..={MAX_ITERATIONS})")]
    Iterations(i64),
    /// The server answered with `e=...`.
    #[error("the server refused the proof: {0}")]
    ServerError(String),
    /// The server's signature is wrong: it does not hold this user's credential.
    #[error("the server's signature does not match (it does not know this credential)")]
    ServerSignature,
}

/// One client exchange, from client-first to the check of server-final.
pub struct ScramClient {
    mechanism: ScramMechanism,
    password: String,
    client_first_bare: String,
    client_nonce: String,
    /// Set once client-final is made: what server-final must carry.
    expected_server_signature: Option<Vec<u8>>,
}

impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out of every log line.
        f.debug_struct("ScramClient").field("mechanism", &self.mechanism).field("client_first_bare", &self.client_first_bare).finish_non_exhaustive()
    }
}

impl ScramClient {
    /// Starts an exchange as `user`; returns it and the client-first message.
    pub fn client_first(mechanism: ScramMechanism, user: &str, password: &str) -> (Self, Vec<u8>) {
        Self::with_nonce(mechanism, user, password, random_nonce())
    }

    fn with_nonce(mechanism: ScramMechanism, user: &str, password: &str, client_nonce: String) -> (Self, Vec<u8>) {
        let client_first_bare = format!("n={},r={client_nonce}", encode_sasl_name(user));
        let message = format!("n,,{client_first_bare}").into_bytes();
        let client = ScramClient { mechanism, password: password.to_string(), client_first_bare, client_nonce, expected_server_signature: None };
        (client, message)
    }

    /// Handles server-first (`r=NONCE,s=SALT,i=ITERATIONS`): returns client-final with the proof.
    ///
    /// # Errors
    /// [`ScramClientError`] for a malformed message, a foreign nonce or an iteration count out of bounds.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramClientError> {
        let text = std::str::from_utf8(server_first).map_err(|_| ScramClientError::Malformed("not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            } else if let Some(v) = attr.strip_prefix("s=") {
                salt = Some(BASE64.decode(v).map_err(|_| ScramClientError::Malformed("salt is not base64"))?);
            } else if let Some(v) = attr.strip_prefix("i=") {
                iterations = Some(v.parse::<i64>().map_err(|_| ScramClientError::Malformed("iteration count is not a number"))?);
            } else if attr.starts_with("m=") {
                return Err(ScramClientError::Malformed("mandatory extension not supported"));
            }
        }
        let nonce = nonce.ok_or(ScramClientError::Malformed("no nonce"))?;
        let salt = salt.ok_or(ScramClientError::Malformed("no salt"))?;
        let iterations = iterations.ok_or(ScramClientError::Malformed("no iteration count"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(ScramClientError::Nonce);
        }
        // Kafka's client refuses counts below its minimum; the upper bound keeps a
        // hostile peer from making us spin PBKDF2 for minutes.
        let rounds = u32::try_from(iterations)
            .ok()
            .filter(|&n| (MIN_ITERATIONS as u32..=MAX_ITERATIONS as u32).contains(&n))
            .and_then(NonZeroU32::new)
            .ok_or(ScramClientError::Iterations(iterations))?;
        let m = self.mechanism;
        let salted = m.salted_password(self.password.as_bytes(), &salt, rounds);
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        // "biws" is base64("n,,"): no channel binding, no authzid, as in client-first.
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let signature = m.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_key = m.hmac(&salted, b"Server Key");
        self.expected_server_signature = Some(m.hmac(&server_key, auth_message.as_bytes()));
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks server-final (`v=SIGNATURE`, or `e=ERROR`).
    ///
    /// # Errors
    /// [`ScramClientError::ServerError`], [`ScramClientError::ServerSignature`], or malformed.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ScramClientError> {
        let text = std::str::from_utf8(server_final).map_err(|_| ScramClientError::Malformed("not UTF-8"))?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramClientError::ServerError(e.to_string()));
        }
        let v = text.split(',').find_map(|a| a.strip_prefix("v=")).ok_or(ScramClientError::Malformed("no server signature"))?;
        let got = BASE64.decode(v).map_err(|_| ScramClientError::Malformed("server signature is not base64"))?;
        let expected = self.expected_server_signature.as_deref().ok_or(ScramClientError::Malformed("server-final before server-first"))?;
        if constant_time_eq(&got, expected) {
            Ok(())
        } else {
            Err(ScramClientError::ServerSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::{client_first, ScramCredential};

    fn credential(m: ScramMechanism, password: &str) -> ScramCredential {
        let salt = b"client-test-salt";
        let salted = m.salted_password(password.as_bytes(), salt, NonZeroU32::new(4096).expect("nonzero"));
        ScramCredential::from_salted_password(m, salt, 4096, &salted)
    }

    /// Runs our client against the broker's own server side.
    fn exchange(m: ScramMechanism, stored: &str, used: &str, user: &str) -> Result<(), String> {
        let cred = credential(m, stored);
        let (mut client, first) = ScramClient::client_first(m, user, used);
        let (server, server_first) = client_first(m, &first, |u| (u == user).then(|| cred.clone())).map_err(|e| e.to_string())?;
        let last = client.client_final(&server_first).map_err(|e| e.to_string())?;
        let server_final = server.client_final(&last).map_err(|e| e.to_string())?;
        client.verify_server_final(&server_final).map_err(|e| e.to_string())
    }

    #[test]
    fn authenticates_against_the_broker_side() {
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            exchange(m, "s3cret", "s3cret", "broker").expect("right password");
            exchange(m, "s3cret", "s3cret", "odd,na=me").expect("escaped user name");
            let e = exchange(m, "s3cret", "guess-xyz", "broker").expect_err("wrong password");
            assert!(e.contains("invalid proof") && !e.contains("guess-xyz"), "{e}");
        }
    }

    #[test]
    fn rfc_7677_example() {
        // RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256.
        let (mut c, first) = ScramClient::with_nonce(ScramMechanism::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = c.client_final(server_first).expect("client-final");
        assert_eq!(
            String::from_utf8(last).expect("utf8"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").expect("server proves itself");
        assert_eq!(c.verify_server_final(b"v=AAAA"), Err(ScramClientError::ServerSignature));
        assert_eq!(c.verify_server_final(b"e=invalid-proof"), Err(ScramClientError::ServerError("invalid-proof".into())));
    }

    #[test]
    fn hostile_server_messages_are_refused() {
        let (mut c, _) = ScramClient::with_nonce(ScramMechanism::Sha512, "u", "p", "abc".into());
        assert_eq!(c.client_final(b"r=xyz123,s=AAAA,i=4096"), Err(ScramClientError::Nonce));
        assert_eq!(c.client_final(b"r=abc,s=AAAA,i=4096"), Err(ScramClientError::Nonce));
        assert_eq!(c.client_final(b"r=abcd,s=AAAA,i=100000000"), Err(ScramClientError::Iterations(100_000_000)));
        assert_eq!(c.client_final(b"r=abcd,s=AAAA,i=1"), Err(ScramClientError::Iterations(1)));
        assert!(matches!(c.client_final(b"r=abcd,i=4096"), Err(ScramClientError::Malformed(_))));
        assert!(matches!(c.client_final(b"\xff"), Err(ScramClientError::Malformed(_))));
        assert!(matches!(c.verify_server_final(b"v=AAAA"), Err(ScramClientError::Malformed(_))), "no client-final yet");
        assert!(!format!("{c:?}").contains("\"p\""));
    }
}
