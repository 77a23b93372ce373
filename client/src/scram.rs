//! SCRAM-SHA-256/512 (RFC 5802, RFC 7677): what both sides of an exchange
//! share, and the client's side, which a broker speaks when it authenticates
//! to another broker (replica fetchers, transaction markers) and the admin
//! commands to any broker. The server's side (stored credentials, the
//! exchange a listener answers) is the broker's `security::scram`.
//!
//! Shared: [`ScramMechanism`] (names, wire numbers, HMAC, hash, PBKDF2),
//! Kafka's iteration bounds, nonces and [`constant_time_eq`]. The client's
//! half of the two round trips is [`ScramClient`]:
//! [`ScramClient::client_first`] → server-first → [`ScramClient::client_final`]
//! → server-final, which [`ScramClient::verify_server_final`] checks, so a
//! peer that does not know the credential cannot pose as the leader.
//! Primitives (HMAC, SHA-2, PBKDF2, random nonces) come from `ring`, which
//! rustls already builds.

use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ScramMechanism {
    /// SCRAM-SHA-256.
    Sha256,
    /// SCRAM-SHA-512.
    Sha512,
}

/// Kafka's bounds on iterations (as its broker enforces them).
pub const MIN_ITERATIONS: i32 = 4096;
/// Upper bound on iterations.
pub const MAX_ITERATIONS: i32 = 16384;

impl ScramMechanism {
    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// From the SASL mechanism name.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "SCRAM-SHA-256" => Some(ScramMechanism::Sha256),
            "SCRAM-SHA-512" => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    /// Kafka's wire number for it (DescribeUserScramCredentials, AlterUserScramCredentials).
    pub fn wire_type(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// From Kafka's wire number.
    pub fn from_wire_type(t: i8) -> Option<Self> {
        match t {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    fn hmac_algorithm(self) -> hmac::Algorithm {
        match self {
            ScramMechanism::Sha256 => hmac::HMAC_SHA256,
            ScramMechanism::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn digest_algorithm(self) -> &'static digest::Algorithm {
        match self {
            ScramMechanism::Sha256 => &digest::SHA256,
            ScramMechanism::Sha512 => &digest::SHA512,
        }
    }

    fn pbkdf2_algorithm(self) -> pbkdf2::Algorithm {
        match self {
            ScramMechanism::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramMechanism::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    /// `HMAC(key, data)` with the mechanism's hash.
    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&hmac::Key::new(self.hmac_algorithm(), key), data).as_ref().to_vec()
    }

    /// `H(data)`: SHA-256 or SHA-512.
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        digest::digest(self.digest_algorithm(), data).as_ref().to_vec()
    }

    /// `Hi(password, salt, iterations)`: PBKDF2 with the mechanism's HMAC.
    pub fn salted_password(self, password: &[u8], salt: &[u8], iterations: NonZeroU32) -> Vec<u8> {
        let mut out = vec![0u8; self.digest_algorithm().output_len()];
        pbkdf2::derive(self.pbkdf2_algorithm(), iterations, salt, password, &mut out);
        out
    }
}

/// `,` is `=2C` and `=` is `=3D` in a SCRAM user name.
pub(crate) fn encode_sasl_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

/// A fresh random nonce (24 bytes, base64): the server's half, or a client's.
pub fn random_nonce() -> String {
    let mut bytes = [0u8; 24];
    // The system RNG failing is not something to limp along with; an all-zero
    // nonce would still be unique per client nonce, and the failure is logged.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        tracing::error!("system random number generator failed while making a SCRAM nonce");
    }
    BASE64.encode(bytes)
}

/// Compares without an early exit, so timing does not tell how much matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

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
    #[error(
        "the server asks for {0} iterations (Kafka allows {MIN_ITERATIONS}..={MAX_ITERATIONS})"
    )]
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
        f.debug_struct("ScramClient")
            .field("mechanism", &self.mechanism)
            .field("client_first_bare", &self.client_first_bare)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// Starts an exchange as `user`; returns it and the client-first message.
    pub fn client_first(mechanism: ScramMechanism, user: &str, password: &str) -> (Self, Vec<u8>) {
        Self::with_nonce(mechanism, user, password, random_nonce())
    }

    fn with_nonce(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        client_nonce: String,
    ) -> (Self, Vec<u8>) {
        let client_first_bare = format!("n={},r={client_nonce}", encode_sasl_name(user));
        let message = format!("n,,{client_first_bare}").into_bytes();
        let client = ScramClient {
            mechanism,
            password: password.to_string(),
            client_first_bare,
            client_nonce,
            expected_server_signature: None,
        };
        (client, message)
    }

    /// Handles server-first (`r=NONCE,s=SALT,i=ITERATIONS`): returns client-final with the proof.
    ///
    /// # Errors
    /// [`ScramClientError`] for a malformed message, a foreign nonce or an iteration count out of bounds.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramClientError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| ScramClientError::Malformed("not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            } else if let Some(v) = attr.strip_prefix("s=") {
                salt = Some(
                    BASE64
                        .decode(v)
                        .map_err(|_| ScramClientError::Malformed("salt is not base64"))?,
                );
            } else if let Some(v) = attr.strip_prefix("i=") {
                iterations =
                    Some(v.parse::<i64>().map_err(|_| {
                        ScramClientError::Malformed("iteration count is not a number")
                    })?);
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
        let text = std::str::from_utf8(server_final)
            .map_err(|_| ScramClientError::Malformed("not UTF-8"))?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramClientError::ServerError(e.to_string()));
        }
        let v = text
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .ok_or(ScramClientError::Malformed("no server signature"))?;
        let got = BASE64
            .decode(v)
            .map_err(|_| ScramClientError::Malformed("server signature is not base64"))?;
        let expected = self
            .expected_server_signature
            .as_deref()
            .ok_or(ScramClientError::Malformed("server-final before server-first"))?;
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

    #[test]
    fn rfc_7677_example() {
        // RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256.
        let (mut c, first) = ScramClient::with_nonce(
            ScramMechanism::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let last = c.client_final(server_first).expect("client-final");
        assert_eq!(
            String::from_utf8(last).expect("utf8"),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        c.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .expect("server proves itself");
        assert_eq!(c.verify_server_final(b"v=AAAA"), Err(ScramClientError::ServerSignature));
        assert_eq!(
            c.verify_server_final(b"e=invalid-proof"),
            Err(ScramClientError::ServerError("invalid-proof".into()))
        );
    }

    #[test]
    fn hostile_server_messages_are_refused() {
        let (mut c, _) = ScramClient::with_nonce(ScramMechanism::Sha512, "u", "p", "abc".into());
        assert_eq!(c.client_final(b"r=xyz123,s=AAAA,i=4096"), Err(ScramClientError::Nonce));
        assert_eq!(c.client_final(b"r=abc,s=AAAA,i=4096"), Err(ScramClientError::Nonce));
        assert_eq!(
            c.client_final(b"r=abcd,s=AAAA,i=100000000"),
            Err(ScramClientError::Iterations(100_000_000))
        );
        assert_eq!(c.client_final(b"r=abcd,s=AAAA,i=1"), Err(ScramClientError::Iterations(1)));
        assert!(matches!(c.client_final(b"r=abcd,i=4096"), Err(ScramClientError::Malformed(_))));
        assert!(matches!(c.client_final(b"\xff"), Err(ScramClientError::Malformed(_))));
        assert!(
            matches!(c.verify_server_final(b"v=AAAA"), Err(ScramClientError::Malformed(_))),
            "no client-final yet"
        );
        assert!(!format!("{c:?}").contains("\"p\""));
    }
}
