//! SASL on an outbound connection: the mechanisms a login may use (PLAIN,
//! SCRAM-SHA-256/512) and the user name and password it presents, which no
//! `Debug` output shows.

use std::fmt;

use crate::scram::ScramMechanism;

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
        f.debug_struct("SaslCredentials").field("username", &self.username).field("password", &"****").finish()
    }
}
