//! Client quotas (KIP-13, KIP-55, KIP-124): `producer_byte_rate`,
//! `consumer_byte_rate` and `request_percentage` per user, client id, or
//! user and client id, enforced as Kafka's `ClientQuotaManager` does.
//!
//! Layout:
//! - [`charge`]: one request's charge: bytes, busy time, throttle.
//! - [`entity`]: quota entities and KIP-55's precedence.
//! - [`store`]: the configured quotas, persisted in `client-quotas.json`.
//! - [`rate`]: Kafka's sampled rate and throttle-time formula.
//!
//! Each request is counted in the rate of the entity whose quota applies
//! (produce: the request's bytes; fetch: the response's bytes; request:
//! the time the request kept a worker thread busy, as a percentage of one
//! thread-second). When the rate over `quota.window.num` (11) windows of
//! `quota.window.size.seconds` (1 s) exceeds the quota, the throttle time is
//! `(rate − quota) / quota × window`; the response carries it in
//! `throttle_time_ms`, and the connection reads no further request for that
//! long after the response is sent: Kafka mutes the channel the same way
//! (KIP-219). A throttled Fetch gets an empty response, as in Kafka.
//!
//! With no quota configured nothing is counted: [`ClientQuotas::active`] is
//! one atomic load, the only cost on the request path.

pub mod charge;
pub mod entity;
pub mod rate;
pub mod store;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use entity::{precedence, RateKey};
use rate::{throttle_time_ms, SampledRate};
use store::{QuotaSet, QuotaStore, QuotaStoreError};

/// Kafka's `quota.window.num`.
pub const WINDOW_NUM: usize = 11;
/// Kafka's `quota.window.size.seconds`, in milliseconds.
pub const WINDOW_MS: u64 = 1000;
/// Rates idle this long are dropped (Kafka's sensors expire after an hour).
const RATE_IDLE_EXPIRY_MS: u64 = 3_600_000;

/// What a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// Bytes produced per second.
    Produce,
    /// Bytes fetched per second.
    Fetch,
    /// Request handling time, percent of one thread.
    Request,
}

impl QuotaType {
    /// Kafka's quota key.
    pub fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => PRODUCER_BYTE_RATE,
            QuotaType::Fetch => CONSUMER_BYTE_RATE,
            QuotaType::Request => REQUEST_PERCENTAGE,
        }
    }
}

/// Kafka's quota keys.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
/// Kafka's quota keys.
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
/// Kafka's quota keys.
pub const REQUEST_PERCENTAGE: &str = "request_percentage";

/// The quota keys Floe enforces, and whether each takes whole numbers only.
pub const QUOTA_KEYS: &[(&str, bool)] =
    &[(PRODUCER_BYTE_RATE, true), (CONSUMER_BYTE_RATE, true), (REQUEST_PERCENTAGE, false)];

#[derive(Debug)]
struct TrackedRate {
    rate: SampledRate,
    last_ms: u64,
}

/// The configured quotas and the rates they are enforced on.
///
/// Thread-safe. The rates sit behind one mutex held for a map lookup and a
/// few additions, never across an `.await`.
#[derive(Debug)]
pub struct ClientQuotas {
    store: QuotaStore,
    active: AtomicBool,
    rates: Mutex<HashMap<(QuotaType, RateKey), TrackedRate>>,
    epoch: Instant,
}

impl ClientQuotas {
    /// Opens the quota store in `data_dir`.
    ///
    /// # Errors
    /// [`QuotaStoreError`] for an unreadable file.
    pub fn open(data_dir: &Path) -> Result<Self, QuotaStoreError> {
        let store = QuotaStore::open(data_dir)?;
        let active = AtomicBool::new(!store.snapshot().is_empty());
        Ok(Self { store, active, rates: Mutex::new(HashMap::new()), epoch: Instant::now() })
    }

    /// Whether any quota is configured: the one check on the request path.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The configured quotas.
    pub fn snapshot(&self) -> Arc<QuotaSet> {
        self.store.snapshot()
    }

    /// Changes the configured quotas durably (blocking: fsync).
    ///
    /// # Errors
    /// [`QuotaStoreError::Io`]; nothing changes then.
    pub fn change<T>(&self, change: impl FnOnce(&mut QuotaSet) -> T) -> Result<T, QuotaStoreError> {
        let (out, set) = self.store.change(change)?;
        self.active.store(!set.is_empty(), Ordering::Relaxed);
        Ok(out)
    }

    /// Replaces every configured quota (in a cluster: with etcd's, see
    /// [`crate::cluster_configs`]; the file is then this broker's copy). Blocking (fsync).
    ///
    /// # Errors
    /// [`QuotaStoreError::Io`]; nothing changes then.
    pub fn replace(&self, set: QuotaSet) -> Result<(), QuotaStoreError> {
        self.change(|current| *current = set)
    }

    /// The quota on `kind` that applies to `user` (the principal's name)
    /// and `client_id`, and the rate it is counted in.
    fn resolve(&self, kind: QuotaType, user: &str, client_id: &str) -> Option<(f64, RateKey)> {
        let set = self.store.snapshot();
        precedence(user, client_id).into_iter().find_map(|(entity, key)| {
            set.get(&entity).and_then(|v| v.get(kind.key())).map(|bound| (*bound, key))
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Counts `value` for the client and returns the throttle time in
    /// milliseconds (0 when within its quota, or when it has none).
    pub fn record(&self, kind: QuotaType, user: &str, client_id: &str, value: f64) -> u64 {
        let Some((bound, key)) = self.resolve(kind, user, client_id) else { return 0 };
        let now = self.now_ms();
        let mut rates = self.rates.lock().unwrap_or_else(PoisonError::into_inner);
        if rates.len() > 10_000 {
            rates.retain(|_, r| now.saturating_sub(r.last_ms) < RATE_IDLE_EXPIRY_MS);
        }
        let tracked = rates.entry((kind, key)).or_insert_with(|| TrackedRate {
            rate: SampledRate::new(WINDOW_NUM, WINDOW_MS),
            last_ms: now,
        });
        tracked.last_ms = now;
        tracked.rate.record(value, now);
        let observed = tracked.rate.measure(now);
        throttle_time_ms(observed, bound, tracked.rate.window_size_ms(now))
    }

    /// Takes back a value [`Self::record`] counted (a throttled Fetch sends no records).
    pub fn unrecord(&self, kind: QuotaType, user: &str, client_id: &str, value: f64) {
        let Some((_, key)) = self.resolve(kind, user, client_id) else { return };
        let now = self.now_ms();
        if let Some(tracked) =
            self.rates.lock().unwrap_or_else(PoisonError::into_inner).get_mut(&(kind, key))
        {
            tracked.rate.record(-value, now);
        }
    }

    /// Whether a quota of `kind` applies to the client at all.
    pub fn applies(&self, kind: QuotaType, user: &str, client_id: &str) -> bool {
        self.resolve(kind, user, client_id).is_some()
    }
}

/// The quota user of a principal: its name without the `User:` type, as Kafka's `sanitizedUser`.
pub fn quota_user(principal: &str) -> &str {
    principal.strip_prefix("User:").unwrap_or(principal)
}

#[cfg(test)]
mod tests {
    use super::entity::{EntityName, QuotaEntity};
    use super::*;

    fn set(
        quotas: &ClientQuotas,
        user: Option<EntityName>,
        client_id: Option<EntityName>,
        key: &str,
        value: f64,
    ) {
        quotas
            .change(|s| {
                s.entry(QuotaEntity { user, client_id }).or_default().insert(key.to_string(), value)
            })
            .expect("change");
    }

    #[test]
    fn the_most_specific_quota_applies_and_defaults_share_per_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let q = ClientQuotas::open(dir.path()).expect("open");
        assert!(!q.active());
        assert_eq!(q.record(QuotaType::Produce, "alice", "app", 1e9), 0, "no quota, no throttle");
        set(&q, None, Some(EntityName::Default), PRODUCER_BYTE_RATE, 1000.0);
        set(&q, Some(EntityName::Named("alice".into())), None, PRODUCER_BYTE_RATE, 5000.0);
        assert!(q.active());
        assert_eq!(q.resolve(QuotaType::Produce, "alice", "app").map(|r| r.0), Some(5000.0));
        let (bound, key) = q.resolve(QuotaType::Produce, "bob", "app").expect("client default");
        assert_eq!((bound, key.user.as_str(), key.client_id.as_str()), (1000.0, "", "app"));
        assert!(q.resolve(QuotaType::Fetch, "bob", "app").is_none());
        // 20 KB at once against 1000 B/s over a 10 s window: 2000 B/s observed, 10 s to wait.
        assert_eq!(q.record(QuotaType::Produce, "bob", "app", 20_000.0), 10_000);
        assert_eq!(q.record(QuotaType::Produce, "bob", "other-app", 5_000.0), 0, "its own rate");
    }
}
