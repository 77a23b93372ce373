//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side (what
//! both sides share, and the client side, which a broker speaks to another,
//! are [`floe_client::scram`]).
//!
//! What is stored per user and mechanism is a [`ScramCredential`]: salt,
//! iteration count, `StoredKey = H(HMAC(SaltedPassword, "Client Key"))` and
//! `ServerKey = HMAC(SaltedPassword, "Server Key")`. Neither the password nor
//! the salted password is kept: a stolen credential file does not let anyone
//! log in (it would take the client key, which only the proof reveals).
//!
//! The exchange is two round trips:
//! client-first `n,,n=USER,r=CNONCE` → server-first `r=CNONCE SNONCE,s=SALT,i=ITER`;
//! client-final `c=GS2,r=NONCE,p=PROOF` → server-final `v=SERVER_SIGNATURE`.
//! The primitives (HMAC, SHA-2, PBKDF2, random nonces, on `ring`) are
//! floe-client's, re-exported here for the broker's other users.

use std::num::NonZeroU32;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use floe_client::scram::random_nonce;
pub use floe_client::scram::{constant_time_eq, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};

/// What the broker keeps for one user and mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramCredential {
    /// The salt, as given by the client that set the credential.
    #[serde(with = "base64_bytes")]
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: i32,
    /// `H(ClientKey)`.
    #[serde(with = "base64_bytes")]
    pub stored_key: Vec<u8>,
    /// `HMAC(SaltedPassword, "Server Key")`.
    #[serde(with = "base64_bytes")]
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// Derives the stored keys from a salted password (what AlterUserScramCredentials sends).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        iterations: i32,
        salted_password: &[u8],
    ) -> Self {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        ScramCredential {
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        }
    }

    /// Whether `password` is this credential's password (for SASL/PLAIN against SCRAM credentials).
    pub fn matches_password(&self, mechanism: ScramMechanism, password: &[u8]) -> bool {
        let Some(iterations) = u32::try_from(self.iterations).ok().and_then(NonZeroU32::new) else {
            return false;
        };
        let salted = mechanism.salted_password(password, &self.salt, iterations);
        let candidate =
            ScramCredential::from_salted_password(mechanism, &self.salt, self.iterations, &salted);
        constant_time_eq(&candidate.stored_key, &self.stored_key)
    }
}

/// Why a SCRAM exchange failed. The message goes to the log, never the detail to the client.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ScramError {
    /// A client message does not follow RFC 5802.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// Channel binding was asked for; Kafka does not use it.
    #[error("channel binding is not supported")]
    ChannelBinding,
    /// The user has no credential for this mechanism.
    #[error("unknown user `{0}`")]
    UnknownUser(String),
    /// The final message's nonce is not the one of this exchange.
    #[error("nonce mismatch")]
    Nonce,
    /// The proof is wrong: wrong password.
    #[error("invalid proof (wrong password) for user `{0}`")]
    Proof(String),
}

/// A SCRAM exchange after the server-first message, awaiting the client-final one.
#[derive(Debug, Clone)]
pub struct ScramExchange {
    mechanism: ScramMechanism,
    user: String,
    credential: ScramCredential,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

/// Handles client-first: looks the user up and answers server-first.
///
/// # Errors
/// [`ScramError`] for a malformed message, channel binding, or an unknown user.
pub fn client_first(
    mechanism: ScramMechanism,
    message: &[u8],
    lookup: impl FnOnce(&str) -> Option<ScramCredential>,
) -> Result<(ScramExchange, Vec<u8>), ScramError> {
    let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
    // gs2-header: cbind-flag "," [authzid] ","
    let mut parts = text.splitn(3, ',');
    let cbind = parts.next().ok_or(ScramError::Malformed("empty"))?;
    let _authzid = parts.next().ok_or(ScramError::Malformed("no gs2 header"))?;
    let bare = parts.next().ok_or(ScramError::Malformed("no client-first-bare"))?;
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => return Err(ScramError::ChannelBinding),
        _ => return Err(ScramError::Malformed("bad channel binding flag")),
    }
    let mut user = None;
    let mut client_nonce = None;
    for attr in bare.split(',') {
        if let Some(v) = attr.strip_prefix("n=") {
            user = Some(decode_sasl_name(v)?);
        } else if let Some(v) = attr.strip_prefix("r=") {
            client_nonce = Some(v);
        } else if attr.starts_with("m=") {
            return Err(ScramError::Malformed("mandatory extension not supported"));
        }
        // Other attributes are extensions (Kafka's `tokenauth=...`): ignored.
    }
    let user = user.ok_or(ScramError::Malformed("no user name"))?;
    let client_nonce =
        client_nonce.filter(|n| !n.is_empty()).ok_or(ScramError::Malformed("no nonce"))?;
    let credential = lookup(&user).ok_or_else(|| ScramError::UnknownUser(user.clone()))?;
    let nonce = format!("{client_nonce}{}", random_nonce());
    let server_first =
        format!("r={nonce},s={},i={}", BASE64.encode(&credential.salt), credential.iterations);
    let exchange = ScramExchange {
        mechanism,
        user,
        credential,
        client_first_bare: bare.to_string(),
        server_first: server_first.clone(),
        nonce,
    };
    Ok((exchange, server_first.into_bytes()))
}

impl ScramExchange {
    /// The user being authenticated.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Handles client-final: checks the proof and answers server-final.
    ///
    /// # Errors
    /// [`ScramError::Proof`] for a wrong password; others for malformed messages.
    pub fn client_final(self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let text = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) =
            text.rsplit_once(",p=").ok_or(ScramError::Malformed("no proof"))?;
        let mut nonce = None;
        let mut has_binding = false;
        for attr in without_proof.split(',') {
            if let Some(v) = attr.strip_prefix("r=") {
                nonce = Some(v);
            } else if attr.starts_with("c=") {
                has_binding = true;
            }
        }
        if !has_binding {
            return Err(ScramError::Malformed("no channel binding attribute"));
        }
        // Kafka checks `endsWith`, not equality (ScramSaslServer, since 3.8.1): librdkafka
        // before 2.6.1 sends its own nonce again in front of the server's (librdkafka #4895),
        // and Debian's kcat 1.7.1 is built on 2.0.2. The proof below covers the message as sent.
        if !nonce.is_some_and(|n| n.ends_with(self.nonce.as_str())) {
            return Err(ScramError::Nonce);
        }
        let proof =
            BASE64.decode(proof).map_err(|_| ScramError::Malformed("proof is not base64"))?;
        let auth_message =
            format!("{},{},{}", self.client_first_bare, self.server_first, without_proof);
        let m = self.mechanism;
        let client_signature = m.hmac(&self.credential.stored_key, auth_message.as_bytes());
        if proof.len() != client_signature.len() {
            return Err(ScramError::Proof(self.user));
        }
        let client_key: Vec<u8> = proof.iter().zip(&client_signature).map(|(a, b)| a ^ b).collect();
        if !constant_time_eq(&m.hash(&client_key), &self.credential.stored_key) {
            return Err(ScramError::Proof(self.user));
        }
        let server_signature = m.hmac(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
    }
}

/// `=2C` is `,` and `=3D` is `=` in a SCRAM user name.
fn decode_sasl_name(name: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        match rest.get(i..i + 3) {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(ScramError::Malformed("bad escape in user name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

mod base64_bytes {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side of the exchange, written from the RFC, to drive the server.
    fn client_proof(
        m: ScramMechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        final_without_proof: &str,
    ) -> (String, Vec<u8>) {
        let fields: Vec<&str> = server_first.split(',').collect();
        let salt = BASE64.decode(&fields[1][2..]).unwrap();
        let iterations: u32 = fields[2][2..].parse().unwrap();
        let salted =
            m.salted_password(password.as_bytes(), &salt, NonZeroU32::new(iterations).unwrap());
        let client_key = m.hmac(&salted, b"Client Key");
        let stored_key = m.hash(&client_key);
        let auth = format!("{client_first_bare},{server_first},{final_without_proof}");
        let signature = m.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&signature).map(|(a, b)| a ^ b).collect();
        let server_key = m.hmac(&salted, b"Server Key");
        (BASE64.encode(proof), m.hmac(&server_key, auth.as_bytes()))
    }

    fn credential(m: ScramMechanism, password: &str) -> ScramCredential {
        let salt = b"NaCl-salt-16byte";
        let salted = m.salted_password(password.as_bytes(), salt, NonZeroU32::new(4096).unwrap());
        ScramCredential::from_salted_password(m, salt, 4096, &salted)
    }

    fn run(
        m: ScramMechanism,
        stored_password: &str,
        client_password: &str,
    ) -> Result<(Vec<u8>, Vec<u8>), ScramError> {
        run_with_nonce(m, stored_password, client_password, |server_nonce| server_nonce.to_string())
    }

    /// [`run`] with the client-final nonce made from the server's by `final_nonce`.
    fn run_with_nonce(
        m: ScramMechanism,
        stored_password: &str,
        client_password: &str,
        final_nonce: impl Fn(&str) -> String,
    ) -> Result<(Vec<u8>, Vec<u8>), ScramError> {
        let cred = credential(m, stored_password);
        let (exchange, server_first) =
            client_first(m, b"n,,n=al=3Dice,r=fyko+d2lbbFgONRv9qkxdawL", |u| {
                assert_eq!(u, "al=ice");
                Some(cred.clone())
            })?;
        let server_first = String::from_utf8(server_first).unwrap();
        assert!(server_first.starts_with("r=fyko+d2lbbFgONRv9qkxdawL"));
        let nonce = &server_first.split(',').next().unwrap()[2..];
        let without_proof = format!("c=biws,r={}", final_nonce(nonce));
        let (proof, expected_signature) = client_proof(
            m,
            client_password,
            "n=al=3Dice,r=fyko+d2lbbFgONRv9qkxdawL",
            &server_first,
            &without_proof,
        );
        let server_final =
            exchange.client_final(format!("{without_proof},p={proof}").as_bytes())?;
        Ok((server_final, format!("v={}", BASE64.encode(expected_signature)).into_bytes()))
    }

    #[test]
    fn right_password_authenticates_and_the_server_proves_itself() {
        for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
            let (got, expected) = run(m, "pencil", "pencil").unwrap();
            assert_eq!(got, expected, "{m:?}");
        }
    }

    #[test]
    fn wrong_password_unknown_user_and_garbage_are_refused() {
        assert!(matches!(run(ScramMechanism::Sha256, "pencil", "pen"), Err(ScramError::Proof(_))));
        assert!(matches!(
            client_first(ScramMechanism::Sha256, b"n,,n=bob,r=abc", |_| None),
            Err(ScramError::UnknownUser(u)) if u == "bob"
        ));
        for bad in
            [&b""[..], b"n", b"x,,n=a,r=b", b"n,,r=abc", b"n,,n=a", b"\xff\xfe", b"n,,n=a=,r=x"]
        {
            assert!(
                client_first(ScramMechanism::Sha512, bad, |_| Some(credential(
                    ScramMechanism::Sha512,
                    "p"
                )))
                .is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            client_first(ScramMechanism::Sha256, b"p=tls-unique,,n=a,r=b", |_| None).unwrap_err(),
            ScramError::ChannelBinding
        );
    }

    #[test]
    fn the_nonce_must_end_with_the_servers_as_kafka_checks() {
        // librdkafka < 2.6.1 puts its own nonce in front once more; Kafka (and Floe) accept it.
        let doubled = run_with_nonce(ScramMechanism::Sha256, "pencil", "pencil", |n| {
            format!("fyko+d2lbbFgONRv9qkxdawL{n}")
        })
        .unwrap();
        assert_eq!(doubled.0, doubled.1);
        for wrong in [
            |n: &str| n[..n.len() - 1].to_string(),
            |n: &str| format!("{n}x"),
            |_: &str| "fyko+d2lbbFgONRv9qkxdawL".to_string(),
        ] {
            assert_eq!(
                run_with_nonce(ScramMechanism::Sha256, "pencil", "pencil", wrong).unwrap_err(),
                ScramError::Nonce
            );
        }
    }

    #[test]
    fn plain_passwords_check_against_stored_keys() {
        let c = credential(ScramMechanism::Sha512, "hunter2");
        assert!(c.matches_password(ScramMechanism::Sha512, b"hunter2"));
        assert!(!c.matches_password(ScramMechanism::Sha512, b"hunter3"));
    }
}

#[cfg(test)]
mod client_tests {
    //! floe-client's SCRAM client against this server side.

    use floe_client::scram::ScramClient;

    use super::*;

    fn credential(m: ScramMechanism, password: &str) -> ScramCredential {
        let salt = b"client-test-salt";
        let salted =
            m.salted_password(password.as_bytes(), salt, NonZeroU32::new(4096).expect("nonzero"));
        ScramCredential::from_salted_password(m, salt, 4096, &salted)
    }

    /// Runs our client against the broker's own server side.
    fn exchange(m: ScramMechanism, stored: &str, used: &str, user: &str) -> Result<(), String> {
        let cred = credential(m, stored);
        let (mut client, first) = ScramClient::client_first(m, user, used);
        let (server, server_first) = client_first(m, &first, |u| (u == user).then(|| cred.clone()))
            .map_err(|e| e.to_string())?;
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
}
