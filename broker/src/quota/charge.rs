//! One request's charge against the client's quotas: who pays, how long the
//! request kept a worker busy, and the throttle time that results.
//!
//! Request time is the wall time spent inside the request's `poll` calls
//! ([`BusyTimed`]): the time it held a worker thread, as Kafka counts a
//! request handler thread's time. Waiting (a long-polling Fetch, a JoinGroup
//! in a rebalance) is not counted; work moved to the blocking pool is not
//! counted either.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::{ClientQuotas, QuotaType};

/// Kafka's `NanosToPercentagePerSecond`: one thread-second is 100 (percent).
const NANOS_TO_PERCENT: f64 = 100.0 / 1e9;

/// The quota account of one request, made only when quotas are configured.
///
/// Shared between the request's future and its [`BusyTimed`] wrapper:
/// atomics only, so the future stays `Send`.
#[derive(Debug)]
pub struct Charge {
    quotas: Arc<ClientQuotas>,
    /// The principal's name (Kafka's quota user).
    pub user: String,
    /// The request header's client id.
    pub client_id: String,
    base: Instant,
    busy_ns: AtomicU64,
    poll_started_ns: AtomicU64,
    throttle_ms: AtomicU64,
}

impl Charge {
    /// A charge for `user` and `client_id`.
    pub fn new(quotas: Arc<ClientQuotas>, user: String, client_id: String) -> Self {
        Self {
            quotas,
            user,
            client_id,
            base: Instant::now(),
            busy_ns: AtomicU64::new(0),
            poll_started_ns: AtomicU64::new(0),
            throttle_ms: AtomicU64::new(0),
        }
    }

    /// Counts `bytes` against the produce or fetch byte rate; remembers and
    /// returns the throttle time.
    pub fn bytes(&self, kind: QuotaType, bytes: usize) -> u64 {
        let throttle = self.quotas.record(kind, &self.user, &self.client_id, bytes as f64);
        self.throttle_ms.fetch_max(throttle, Ordering::Relaxed);
        throttle
    }

    /// Takes back bytes counted by [`Self::bytes`].
    pub fn unrecord(&self, kind: QuotaType, bytes: usize) {
        self.quotas.unrecord(kind, &self.user, &self.client_id, bytes as f64);
    }

    /// Counts the request's busy time so far against `request_percentage`
    /// and returns the request's throttle time: the larger of that and the
    /// byte-rate throttle. Called once, as the response is built.
    pub fn finish(&self) -> u64 {
        let busy = self.busy_ns.load(Ordering::Relaxed)
            + self.elapsed_ns().saturating_sub(self.poll_started_ns.load(Ordering::Relaxed));
        let throttle = self.quotas.record(
            QuotaType::Request,
            &self.user,
            &self.client_id,
            busy as f64 * NANOS_TO_PERCENT,
        );
        self.throttle_ms.fetch_max(throttle, Ordering::Relaxed);
        self.throttle_ms()
    }

    /// The throttle time decided for this request (0 before any count).
    pub fn throttle_ms(&self) -> u64 {
        self.throttle_ms.load(Ordering::Relaxed)
    }

    /// How long the connection is muted after the response is sent.
    pub fn mute(&self) -> Option<Duration> {
        Some(self.throttle_ms()).filter(|&ms| ms > 0).map(Duration::from_millis)
    }

    fn elapsed_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
}

/// Runs a request's future and adds the time spent in each `poll` to its [`Charge`].
pub struct BusyTimed<'a, F> {
    inner: Pin<Box<F>>,
    charge: &'a Charge,
}

impl<'a, F> BusyTimed<'a, F> {
    /// Wraps `inner`.
    pub fn new(inner: F, charge: &'a Charge) -> Self {
        Self { inner: Box::pin(inner), charge }
    }
}

impl<F> std::fmt::Debug for BusyTimed<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusyTimed").field("charge", &self.charge).finish_non_exhaustive()
    }
}

impl<F: Future> Future for BusyTimed<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let charge = self.charge;
        let started = charge.elapsed_ns();
        charge.poll_started_ns.store(started, Ordering::Relaxed);
        let out = self.inner.as_mut().poll(cx);
        let spent = charge.elapsed_ns().saturating_sub(started);
        charge.busy_ns.fetch_add(spent, Ordering::Relaxed);
        // After the poll, nothing is in progress: `finish` adds no partial poll.
        charge.poll_started_ns.store(u64::MAX, Ordering::Relaxed);
        out
    }
}
