//! The web console's sessions: a random id in the `floe_console` cookie, a
//! CSRF token every write must echo, the logged-in user (when the broker's
//! listener needs SASL) and that user's own Kafka client ([`Admin`]), so the
//! broker's ACLs decide what each person sees and changes.
//!
//! Sessions live in memory only: a restart logs everyone out. They expire
//! after [`IDLE_EXPIRY`] without a request; at most [`MAX_SESSIONS`] are kept
//! (the least recently used goes first), so a client that opens sessions in a
//! loop cannot exhaust memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ring::rand::{SecureRandom, SystemRandom};

use crate::cli::admin::Admin;

/// The session cookie's name.
pub const COOKIE: &str = "floe_console";
/// A session ends after this long without a request.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most.
const MAX_SESSIONS: usize = 10_000;

/// One browser's session.
pub struct Session {
    /// The cookie's value.
    pub id: String,
    /// What `X-CSRF-Token` must carry on every write.
    pub csrf: String,
    /// The logged-in user (`None`: anonymous, or not logged in yet).
    pub user: Option<String>,
    /// The user's password, kept to connect again after the broker closed the connection.
    pub password: Option<String>,
    /// The SASL mechanism the login succeeded with.
    pub mechanism: Option<&'static str>,
    /// This session's Kafka client, connected on first use.
    pub admin: tokio::sync::Mutex<Option<Admin>>,
    last_seen: Mutex<Instant>,
}

impl Session {
    /// Whether `token` is this session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, token: &str) -> bool {
        // Every byte is compared, whatever differs first: the time says nothing of where.
        token.len() == self.csrf.len()
            && token.bytes().zip(self.csrf.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// Every live session, by id.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
}

/// 32 random bytes as hex, from the operating system's generator.
pub fn token() -> String {
    let mut bytes = [0u8; 32];
    // SystemRandom reads getrandom(2); it fails only on a broken system, where a
    // zero token would be worse than no console: the caller gets a unique-looking
    // fallback from the clock and the address of the buffer is not used.
    if SystemRandom::new().fill(&mut bytes).is_err() {
        tracing::error!("the system random generator failed; console sessions are not safe");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes[..16].copy_from_slice(&nanos.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// The live session `id` names, marked as used now.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let session = map.get(id)?.clone();
        let mut seen = session.last_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.elapsed() > IDLE_EXPIRY {
            drop(seen);
            map.remove(id);
            return None;
        }
        *seen = Instant::now();
        drop(seen);
        Some(session)
    }

    /// A new session for `login` (user, password, mechanism; `None`: anonymous), with `admin` if already connected.
    pub fn create(
        &self,
        login: Option<(String, String, &'static str)>,
        admin: Option<Admin>,
    ) -> Arc<Session> {
        let (user, password, mechanism) = match login {
            Some((u, p, m)) => (Some(u), Some(p), Some(m)),
            None => (None, None, None),
        };
        let session = Arc::new(Session {
            id: token(),
            csrf: token(),
            user,
            password,
            mechanism,
            admin: tokio::sync::Mutex::new(admin),
            last_seen: Mutex::new(Instant::now()),
        });
        let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.len() >= MAX_SESSIONS {
            map.retain(|_, s| {
                s.last_seen.lock().map(|t| t.elapsed() <= IDLE_EXPIRY).unwrap_or(false)
            });
        }
        if map.len() >= MAX_SESSIONS {
            let oldest = map
                .iter()
                .min_by_key(|(_, s)| {
                    *s.last_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
                })
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(session.id.clone(), session.clone());
        session
    }

    /// Ends session `id`.
    pub fn remove(&self, id: &str) {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }

    /// Drops the sessions idle past [`IDLE_EXPIRY`].
    pub fn sweep(&self) {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, s| s.last_seen.lock().map(|t| t.elapsed() <= IDLE_EXPIRY).unwrap_or(false));
    }
}

/// The `floe_console` cookie's value in a `Cookie` header, if any.
pub fn cookie_value(header: &str) -> Option<&str> {
    header
        .split(';')
        .map(str::trim)
        .find_map(|pair| pair.strip_prefix(COOKIE).and_then(|rest| rest.strip_prefix('=')))
}

/// The `Set-Cookie` value that hands out session `id`.
pub fn set_cookie(id: &str) -> String {
    format!("{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/")
}

/// The `Set-Cookie` value that ends the session in the browser.
pub fn clear_cookie() -> String {
    format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_hex_digits_and_differ() {
        let (a, b) = (token(), token());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(cookie_value("a=1; floe_console=abc; b=2"), Some("abc"));
        assert_eq!(cookie_value("floe_console_x=1"), None);
        assert_eq!(cookie_value(""), None);
    }

    #[test]
    fn csrf_must_match_exactly() {
        let sessions = Sessions::default();
        let s = sessions.create(None, None);
        assert!(s.csrf_matches(&s.csrf.clone()));
        assert!(!s.csrf_matches(""));
        assert!(!s.csrf_matches(&token()));
        assert!(sessions.get(&s.id).is_some());
        sessions.remove(&s.id);
        assert!(sessions.get(&s.id).is_none());
    }
}
